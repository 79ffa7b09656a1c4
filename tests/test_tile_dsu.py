"""The DSU cluster in front of the decode tile (``rtl/tile/dsu_link.py``; docs/tile/dsu.md, "The DSU
cluster in the loop").

* :class:`DsuLink` alone (Amaranth simulator) against a Python reference on seeded random
  rounds under random idle and backpressure: the round beat of every non-empty ``ISSUE``, one
  completion per descriptor after the round's layers, ``ERROR`` exactly for the slots that
  failed in some layer; named edges: an empty batch, ``done`` high while idle (no layer without
  a ``go``), a failure in the last layer only, a round of ``max_slots`` descriptors;
* :meth:`PagedKVCache.truncate` (the harness's rollback);
* on Verilator, the whole loop (one build, shared by the runs): DSU firmware → arbiter →
  sequencer → tile → completions, fault-free (rounds and outcomes equal to the DSU model,
  outputs bit-exact, tokens equal); HBM read faults (the failed steps where the faults put them,
  rolled back and run again, tokens equal); a fault past the retries (the request fails and is
  reported, not lost); a corrupted HBM word is caught; the command's output and exit status;
  bad flags.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from amaranth.sim import Simulator

from tricut.models.dsu import Outcome
from tricut.models.paged_kv import PagedKVCache
from tricut.rtl.dsu.regmap import Result
from tricut.rtl.tile.dsu_link import DsuLink
from tricut.sim.cli.testing import run_cli
from tricut.sim.harness.tile.cases import DSU_BASE
from tricut.sim.harness.tile.cosim import simulate
from tricut.sim.harness.tile.setup import Setup, SetupError, check_setup


# ------------------------------------------------------------------------------- DsuLink
def link_reference(rounds):
    """Per round ``(step, slots, fails)``: the round beat (None for an empty one) and the
    completions ``[(slot, result)]``."""
    beats, comps = [], []
    for step, slots, fails in rounds:
        if slots:
            beats.append((step, len(slots), 1))
        acc = 0
        for f in fails:
            acc |= f
        comps += [(s, int(Result.ERROR) if acc >> s & 1 else int(Result.OK)) for s in slots]
    return beats, comps


def run_link(rounds, num_layers, max_slots, slot_bits, seed, idle=0.3, backpressure=0.3):
    dut = DsuLink(num_layers, max_slots, slot_bits)
    rng = random.Random(seed)
    got_beats, got_comps = [], []

    async def drive(ctx):
        ctx.set(dut.layer_done, 1)                  # idle tile: done high, no go
        for _ in range(5):
            await ctx.tick()
        done = 0
        for step, slots, fails in rounds:
            ctx.set(dut.issued, 1)
            ctx.set(dut.issued_count, len(slots))
            ctx.set(dut.dsu_round, step)
            await ctx.tick()
            ctx.set(dut.issued, 0)
            if not slots:
                for _ in range(3):
                    await ctx.tick()
                continue
            for s in slots:
                while rng.random() < idle:
                    await ctx.tick()
                ctx.set(dut.desc_seen, 1)
                ctx.set(dut.desc_slot, s)
                await ctx.tick()
                ctx.set(dut.desc_seen, 0)
            for f in fails:                         # one layer: go, work, done
                ctx.set(dut.layer_go, 1)
                await ctx.tick()
                ctx.set(dut.layer_go, 0)
                ctx.set(dut.layer_done, 0)
                for _ in range(rng.randint(1, 6)):
                    await ctx.tick()
                ctx.set(dut.fail_slots, f)
                ctx.set(dut.layer_done, 1)
                await ctx.tick()
                ctx.set(dut.fail_slots, 0)
            done += 1
            while ctx.get(dut.rounds) < done:       # the completions drain
                await ctx.tick()

    async def sink_round(ctx):
        while True:
            ctx.set(dut.round.ready, int(rng.random() >= backpressure))
            _, _, v, r, p = await ctx.tick().sample(dut.round.valid, dut.round.ready,
                                                    dut.round.payload)
            if v and r:
                got_beats.append((p.step, p.count, p.end))

    async def sink_comp(ctx):
        while True:
            ctx.set(dut.completions.ready, int(rng.random() >= backpressure))
            _, _, v, r, p = await ctx.tick().sample(dut.completions.valid,
                                                    dut.completions.ready,
                                                    dut.completions.payload)
            if v and r:
                got_comps.append((p.slot, p.result))

    sim = Simulator(dut)
    sim.add_clock(1e-9)
    sim.add_testbench(drive)
    sim.add_testbench(sink_round, background=True)
    sim.add_testbench(sink_comp, background=True)
    sim.run()
    return [(int(a), int(b), int(c)) for a, b, c in got_beats], \
        [(int(a), int(b)) for a, b in got_comps]


def random_link_rounds(rng, n, num_layers, max_slots, slot_bits):
    out = []
    for step in range(n):
        k = 0 if step == 2 else rng.randint(1, max_slots)
        slots = sorted(rng.sample(range(1 << slot_bits), k))
        fails = [rng.choice([0, 0, 0, 1 << rng.choice(slots)]) if slots else 0
                 for _ in range(num_layers)]
        out.append((step + 7, slots, fails))
    return out


@pytest.mark.parametrize("seed, num_layers, max_slots, slot_bits", [
    (1, 2, 4, 2), (2, 1, 4, 2), (3, 3, 8, 3), (4, 2, 2, 1)])
def test_link_matches_reference_on_random_rounds(seed, num_layers, max_slots, slot_bits):
    rng = random.Random(seed)
    rounds = random_link_rounds(rng, 8, num_layers, max_slots, slot_bits)
    got = run_link(rounds, num_layers, max_slots, slot_bits, seed)
    want = link_reference(rounds)
    assert {r for _, r in want[1]} == {int(Result.OK), int(Result.ERROR)}   # both results
    assert any(not r[1] for r in rounds)                                 # an empty batch
    assert got == want


def test_link_named_edges():
    rounds = [(0, [], [0, 0]),                       # empty batch: no beat, no completion
              (1, [0, 1, 2, 3], [0, 0b1000]),        # full round; failure in the last layer
              (2, [2], [0b0100, 0b0100]),            # failed in both layers: one ERROR
              (3, [1, 3], [0b0001, 0])]              # a failure of a slot not in the round
    beats, comps = run_link(rounds, 2, 4, 2, seed=5)
    assert beats == [(1, 4, 1), (2, 1, 1), (3, 2, 1)]
    E, O = int(Result.ERROR), int(Result.OK)
    assert comps == [(0, O), (1, O), (2, O), (3, E), (2, E), (1, O), (3, O)]
    assert (beats, comps) == link_reference(rounds)


def test_link_reference_can_fail():
    rounds = [(1, [0, 1], [0b10, 0])]
    beats, comps = run_link(rounds, 2, 4, 2, seed=3)
    wrong = [(0, int(Result.OK)), (1, int(Result.OK))]
    assert comps != wrong and beats == [(1, 2, 1)]


@pytest.mark.parametrize("kw, needle", [
    (dict(num_layers=0), "num_layers must be an integer in 1..65536, not 0"),
    (dict(max_slots=300), "max_slots must be an integer in 1..256, not 300"),
    (dict(slot_bits=True), "slot_bits must be an integer in 1..8, not True"),
])
def test_link_bad_parameters(kw, needle):
    args = dict(num_layers=2, max_slots=4, slot_bits=2)
    args.update(kw)
    with pytest.raises(ValueError, match=needle):
        DsuLink(**args)


# --------------------------------------------------------------------------- rollback
def test_cache_truncate_rolls_back_a_token():
    c = PagedKVCache(num_layers=1, num_kv_heads=1, head_dim=4, num_blocks=4, block_size=4)
    c.add_request(0)
    c.extend(0, 5)                                   # two blocks
    free = c.num_free_blocks
    c.truncate(0, 4)                                 # back to one block
    assert c.seq_len(0) == 4 and c.num_free_blocks == free + 1
    c.truncate(0, 4)
    assert c.seq_len(0) == 4
    with pytest.raises(ValueError, match="cannot truncate 4 tokens to 5"):
        c.truncate(0, 5)


# ------------------------------------------------------------------ the loop on Verilator
def predicted_rounds(s, t):
    """The timing model's cycles of every DSU round of run ``t`` from its first descriptor
    (``predict_dsu_rounds``; without the CDU a round leaves no state behind, so each is
    predicted alone)."""
    from tricut.sim.harness.tile.setup import predict_dsu_rounds
    return {ri: predict_dsu_rounds(s, [r], [t.round_spans[ri][0]])[0][0]
            for ri, r in enumerate(t.rounds)}


def test_dsu_loop_fault_free_equals_the_golden():
    rep = simulate(Setup(**DSU_BASE), sim="verilator")
    assert rep.ok, rep.differences[:3]
    t = rep.tile
    assert t.failed == [] and len(t.rounds) >= 4
    assert len({tuple(r) for r in rep.rounds}) > 1            # batches change (cap 3 of 4)
    assert all(o.status == "completed" and o.tokens == 3 for o in t.outcomes.values())
    assert sorted(t.outcomes) == [0, 1, 2, 3]
    assert len(t.attn) == len(rep.golden.attn) == 4 * 3 * 2
    # the HBM model served every step's context once per layer and KV head (2*Dk words per
    # token), and took each step's new token
    words, L, H = 2 * 64 // 16, 2, 2
    steps = [d for r in t.rounds for d in r]
    assert t.hbm_beats == (sum(L * H * d["seq_len"] * words for d in steps),
                           len(steps) * L * H * words)
    # the fast model: every round's cycles, first descriptor to last completion, exactly
    assert t.step_cycles == predicted_rounds(Setup(**DSU_BASE), t)
    wrong = predicted_rounds(Setup(**dict(DSU_BASE, engines=4)), t)
    assert wrong != t.step_cycles


def test_dsu_loop_faults_roll_back_and_rerun():
    s = Setup(**DSU_BASE, faults=((0, 1, 1, 0, 1), (2, 0, 1, 0, 2)))
    rep = simulate(s, sim="verilator")
    assert rep.ok, rep.differences[:3]
    t = rep.tile
    # request 0 fails its first step; request 2 (two failing reads) its first two
    first2 = [ri for ri, b in enumerate(t.rounds) if any(d["request"] == 2 for d in b)][:2]
    assert sorted(t.failed) == sorted([(0, 0)] + [(ri, 2) for ri in first2])
    assert all(o.status == "completed" and o.tokens == 3 for o in t.outcomes.values())
    assert t.step_cycles == predicted_rounds(s, t)       # failed rounds too
    # the re-run has the same context as the failed step
    ctx = {(ri, d["request"]): d["seq_len"] for ri, b in enumerate(t.rounds) for d in b}
    assert ctx[(first2[0], 2)] == ctx[(first2[1], 2)]


def test_dsu_loop_fault_past_the_retries_fails_the_request():
    s = Setup(**DSU_BASE, faults=((1, 0, 0, 0, 3),), max_retries=2)
    rep = simulate(s, sim="verilator")
    t = rep.tile
    assert t.outcomes[1] == Outcome(1, "failed", 0, "error: retries exhausted",
                                    t.outcomes[1].step)
    assert all(t.outcomes[r].status == "completed" for r in (0, 2, 3))
    assert not rep.ok
    assert any("request 1: tokens" in d for d in rep.differences)
    assert not any(d.startswith("DSU") or d.startswith("failed steps") for d in rep.differences)


def test_dsu_loop_catches_a_corrupted_word():
    rep = simulate(Setup(**DSU_BASE), sim="verilator", corrupt=(3, 5))
    assert not rep.ok
    assert rep.differences[0].startswith("round 0 layer 0 request 0: attention")


def test_dsu_tile_run_command(capsys):
    code, cap = run_cli(["tile", "run", "--dsu", "--sim", "verilator", "--prompt-lens",
                         "3,1,13,2", "--steps", "3", "--max-batch", "3", "--max-ctx", "32",
                         "--faults", "0:1:1:0:1", "--lanes", "16"], capsys)
    out = cap.out
    assert code == 0, cap.err
    assert "failed (rolled back): request 0" in out
    assert "DSU cluster (1 core, scheduler firmware)" in out
    assert "0 completed (3 tokens)" in out


@pytest.mark.parametrize("kw, param", [
    (dict(faults=((0, 0, 0, 0, 1),), dsu=False), "faults"),
    (dict(faults=((0, 0, 0, 5, 1),)), "faults"),
    (dict(faults=((0, 0, 0, 0, 0),)), "faults"),
    (dict(faults=((0, 0, 0, 0, 1), (0, 0, 0, 0, 2))), "faults"),
    (dict(faults=((0, 0, 0, 0, 1), (0, 0, 1, 0, 1), (0, 1, 0, 0, 1), (0, 1, 1, 0, 1),
                  (1, 0, 0, 0, 1))), "faults"),
    (dict(faults=((0, 0, 0, 0, 3),), policy="static"), "faults"),     # past the CDU retries
    (dict(hang=(0, 0, 0, 0, 1), dsu=False), "hang"),
    (dict(hang=(0, 0, 0, 0, 1), policy="static"), "hang"),
    (dict(hang=(0, 0, 0, 0, 1), faults=((1, 0, 0, 0, 1),)), "hang"),
    (dict(hang=(0, 0, 0, 5, 1)), "hang"),
    (dict(hang=(0, 0, 0, 0, 0)), "hang"),
    (dict(hang=(0, 0, 0)), "hang"),
    (dict(hang=(0, 0, 0, 0, 1), split_tokens=12), "split_tokens"),
    (dict(faults=((0, 0, 0, 0, 1),), split_tokens=8), "split_tokens"),
    (dict(watchdog=0), "watchdog"),
    (dict(watchdog=1 << 24), "watchdog"),
    (dict(dsu_cores=0), "dsu_cores"),
    (dict(max_retries=16), "max_retries"),
    (dict(dsu="yes"), "dsu"),
])
def test_dsu_bad_setup(kw, param):
    args = dict(DSU_BASE)
    args.update(kw)
    with pytest.raises(SetupError) as e:
        check_setup(Setup(**args))
    assert e.value.param == param


def test_dsu_needs_verilator():
    with pytest.raises(SetupError, match="Verilator only"):
        simulate(Setup(**DSU_BASE), sim="amaranth")


def test_golden_attention_is_not_all_zero():
    """The comparison is not vacuous: the golden outputs differ between requests."""
    from tricut.sim.harness.tile.golden import golden_run
    g = golden_run(Setup(**DSU_BASE))
    a = [v for k, v in g.attn.items() if k[1] == 0]
    assert not np.array_equal(a[0], a[1])


def test_link_verilog_lint_clean(tmp_path):
    from tricut.sim.harness.verilog_out import build_unit, lint, write_verilog

    path = write_verilog(build_unit("tile-dsu-link", [])[0], "tile_dsu_link", tmp_path)
    clean, messages = lint(path, "tile_dsu_link")
    assert clean, messages


@pytest.mark.parametrize("extra, needle", [
    (["--dsu"], "--dsu: the DSU cluster runs on Verilator only"),
    (["--dsu", "--sim", "verilator", "--dsu-cores", "5"], "--dsu-cores: must be in 1..4"),
    (["--dsu", "--sim", "verilator", "--dsu-cores", "x"], "--dsu-cores"),
    (["--dsu", "--sim", "verilator", "--max-retries", "16"], "--max-retries: must be in 0..15"),
    (["--dsu", "--sim", "verilator", "--faults", "1:2"], "REQUEST:LAYER:KV_HEAD:BLOCK:FAILS"),
    (["--dsu", "--sim", "verilator", "--faults", "a:b:c:d:e"], "five integers"),
    (["--sim", "verilator", "--faults", "0:0:0:0:1"], "--faults: need the DSU cluster"),
    (["--dsu", "--sim", "verilator", "--faults", "0:0:0:9:1"], "--faults: entry must be"),
    (["--dsu", "--sim", "verilator", "--policy", "static", "--faults", "0:0:0:0:3"],
     "--faults: entry must be (request, layer, kv_head, block, fails) with a block the "
     "request reads, fails in 1..2 (the CDU retries a fill 2 times)"),
    (["--dsu", "--sim", "verilator", "--hang", "1:2"], "REQUEST:LAYER:KV_HEAD:BLOCK:COUNT"),
    (["--dsu", "--sim", "verilator", "--hang", "0:0:0:0:1,1:0:0:0:1"], "five integers"),
    (["--sim", "verilator", "--hang", "0:0:0:0:1"], "--hang: needs the DSU cluster"),
    (["--dsu", "--sim", "verilator", "--policy", "static", "--hang", "0:0:0:0:1"],
     "--hang: is injected on the HBM-only tile"),
    (["--dsu", "--sim", "verilator", "--hang", "0:0:0:0:1", "--faults", "1:0:0:0:1"],
     "--hang: and faults cannot be combined"),
    (["--dsu", "--sim", "verilator", "--prompt-lens", "20,3", "--max-ctx", "32",
      "--split-tokens", "12", "--hang", "0:0:0:0:1"],
     "--split-tokens: must be a multiple of 16 with faults or a lost read"),
    (["--dsu", "--sim", "verilator", "--watchdog", "0"], "--watchdog: 0 is below 1"),
    (["--dsu", "--sim", "verilator", "--watchdog", "99999999"], "--watchdog: must be in"),
])
def test_dsu_flags_bad_input(capsys, extra, needle):
    from tricut.sim.cli.testing import assert_one_line_error
    code, cap = run_cli(["tile", "run"] + extra, capsys)
    assert_one_line_error(code, cap, needle)


# ------------------------------------------------------------ link abort, lost reads, CDU retries
def test_link_aborts_a_round_the_dsu_timed_out():
    """The arbiter's ROUND moves past a round the link still holds (a layer never done): one
    ``abort`` cycle, no completion for it; the next round runs as usual."""
    dut = DsuLink(2, 4, 2)
    seen = {"abort": [], "comps": []}

    async def drive(ctx):
        ctx.set(dut.layer_done, 1)
        ctx.set(dut.round.ready, 1)
        ctx.set(dut.completions.ready, 1)
        await ctx.tick()
        for step, slots, hang in ((5, [0, 2], True), (6, [1], False)):
            ctx.set(dut.issued, 1)
            ctx.set(dut.issued_count, len(slots))
            ctx.set(dut.dsu_round, step)
            await ctx.tick()
            ctx.set(dut.issued, 0)
            for sl in slots:
                ctx.set(dut.desc_seen, 1)
                ctx.set(dut.desc_slot, sl)
                await ctx.tick()
            ctx.set(dut.desc_seen, 0)
            for layer in range(1 if hang else 2):
                ctx.set(dut.layer_go, 1)
                await ctx.tick()
                ctx.set(dut.layer_go, 0)
                ctx.set(dut.layer_done, 0)
                await ctx.tick().repeat(3)
                if not hang:
                    ctx.set(dut.layer_done, 1)
                    await ctx.tick()
            if hang:                                    # the watchdogs: ROUND + 1
                await ctx.tick().repeat(5)
                ctx.set(dut.dsu_round, step + 1)
                await ctx.tick().repeat(3)
                ctx.set(dut.layer_done, 1)              # the reset tile is idle
            await ctx.tick().repeat(6)

    async def watch(ctx):
        async for clk, _, a, v, r, p in ctx.tick().sample(
                dut.round_abort, dut.completions.valid, dut.completions.ready, dut.completions.payload):
            seen["abort"].append(a)
            if v and r:
                seen["comps"].append((p.slot, p.result))

    sim = Simulator(dut)
    sim.add_clock(1e-9)
    sim.add_testbench(drive)
    sim.add_testbench(watch, background=True)
    sim.run()
    assert sum(seen["abort"]) == 1
    assert seen["comps"] == [(1, int(Result.OK))]


def test_dsu_loop_lost_read_times_out_and_reruns():
    """A read that is never answered: the DSU's slot watchdogs time the round out, the tile
    aborts it, the DSU runs it again; tokens as without the fault, cycles as the fast model
    says (timed-out rounds too)."""
    from tricut.models.tile_timing import predict_dsu_timeout
    from tricut.sim.harness.tile.setup import watchdog_limit
    s = Setup(**DSU_BASE, hang=(0, 0, 1, 0, 2))
    rep = simulate(s, sim="verilator")
    assert rep.ok, rep.differences[:3]
    t = rep.tile
    assert t.aborted == [0, 1]                      # request 0's first two rounds
    assert sorted(t.failed) == [(ri, r) for ri in (0, 1) for r in (0, 1, 3)]
    assert all(o.status == "completed" and o.tokens == 3 for o in t.outcomes.values())
    want = predicted_rounds(s, t)
    limit = watchdog_limit(s)
    for ri in t.aborted:
        want[ri] = predict_dsu_timeout([d["slot"] for d in t.rounds[ri]], limit)
    assert t.step_cycles == want


def test_dsu_loop_lost_read_past_the_retries_fails_the_requests():
    s = Setup(**DSU_BASE, hang=(0, 0, 1, 0, 3))
    rep = simulate(s, sim="verilator")
    t = rep.tile
    assert t.aborted == [0, 1, 2]
    for r in (0, 1, 3):                             # the round's requests: reported, not lost
        assert t.outcomes[r].status == "failed"
        assert t.outcomes[r].reason == "timeout: retries exhausted"
    assert t.outcomes[2].status == "completed" and t.outcomes[2].tokens == 3
    assert not rep.ok
    assert all(d.startswith(("request 0: tokens", "request 1: tokens", "request 3: tokens"))
               for d in rep.differences)


def test_dsu_loop_cdu_retries_transient_errors():
    """With a CDU policy the CDU re-sends a failed fill: no step fails, every decision as
    without the faults, ``hbm_retries`` = the worst fault of each block."""
    s = Setup(**DSU_BASE, policy="static",
              faults=((2, 0, 1, 0, 2), (0, 1, 0, 0, 1), (2, 0, 0, 0, 1)))
    rep = simulate(s, sim="verilator")
    assert rep.ok, rep.differences[:3]
    assert rep.tile.failed == [] and rep.golden.cdu_retries == 3
    assert rep.tile.cdu_counters["hbm_retries"] == 3
    assert rep.tile.cdu_counters["hbm_failures"] == 0


@pytest.mark.parametrize("kw, first", [
    (dict(policy="disabled", faults=((2, 0, 0, 0, 1),)), "miss_bypass"),     # streamed
    (dict(policy="static", prompt_lens=(16, 1, 13, 2), faults=((0, 0, 1, 1, 1),)),
     "pf_redundant"),                           # the new-token writer allocated the block
])
def test_cdu_fault_on_a_block_not_first_filled_is_refused(kw, first):
    """Only a CDU fill retries: a fault on a block first read otherwise is refused (the
    golden run says so before the tile runs)."""
    from tricut.sim.harness.tile.golden import golden_run
    with pytest.raises(SetupError, match=f"block is first {first} \\(not a CDU fill"):
        golden_run(Setup(**dict(DSU_BASE, **kw)))
