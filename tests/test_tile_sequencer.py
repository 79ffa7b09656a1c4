"""Step sequencer of the decode tile (``rtl/tile/sequencer.py``, docs/tile/sequencer.md).

Golden ``models.tile.sequence`` checked by hand on a split context and against the CDU's own
vocabulary (``sim/harness/cdu.step_beats`` of the same StepDesc, the (request, layer) unit
order of ``models.cdu.FrontEnd``, ``dsu_hints``); RTL == golden beat for beat on seeded random
rounds in several configurations with the exact cycle formula (unstalled); named edge cases;
bad descriptors dropped and flagged; the whole idle x backpressure matrix in Amaranth's
simulator and on Verilator (one build, one cocotb test); every run ends with the drained
check. Failures are detectable (a wrong expected beat, a missing descriptor).
"""

from __future__ import annotations

import random
import warnings

import numpy as np
import pytest

from tricut.models.cdu import FrontEnd, SlotDesc, StepDesc, dsu_hints
from tricut.models.dsu import Descriptor, residency_bit
from tricut.models.tile import Job, sequence, split_parts
from tricut.rtl.cdu.layouts import HINT, STEP_KIND, Widths
from tricut.rtl.tile.sequencer import StepSequencer, ceil_div_const, sequencer_cycles
from tricut.rtl.tile.sequencer_layouts import attn_job_layout, pack, step_layout
from tricut.sim.harness.cdu import step_beats
from tricut.sim.harness.sequencer import (SeqRound, expected, plan_json, random_rounds,
                                          simulate_amaranth, simulate_verilator_matrix)
from tricut.sim.harness.streams import IDLE_BACKPRESSURE, NotDrained, matrix_id


def D(step, slot, req, n, res=0, prio=0):
    return Descriptor(step, slot, req, n, prio, res)


def check(rounds, params, res, stalled=False):
    """Beats equal to the golden (the drained check already compared the ints; compare the
    unpacked fields too), bad_desc low, the cycle formula exact when unstalled."""
    steps, jobs, per = expected(rounds, params)
    p = dict(params)
    w = Widths()
    sl = step_layout(w, p.get("slot_bits", 2))
    jl = attn_job_layout(w, p.get("slot_bits", 2), p.get("num_kv_heads", 2),
                         p.get("split_tokens", 0))
    assert [pack(sl, b) for b in res.step] == steps
    assert [pack(jl, j) for j in res.job] == jobs
    assert len(res.cycles) == len(rounds)
    if stalled:
        assert all(c >= f for c, f in zip(res.cycles, res.formula))
    else:
        assert res.cycles == res.formula


# ---------------------------------------------------------------------------- parameters
@pytest.mark.parametrize("kw, needle", [
    (dict(num_layers=0), "num_layers must be an integer in 1..8, got 0"),
    (dict(num_layers=9), "num_layers must be an integer in 1..8, got 9"),
    (dict(num_layers=True), "num_layers must be an integer in 1..8, got True"),
    (dict(num_kv_heads=0), "num_kv_heads must be an integer in 1..256, got 0"),
    (dict(max_slots=5), "max_slots must be an integer in 1..4, got 5"),
    (dict(max_slots=0), "max_slots must be an integer in 1..4, got 0"),
    (dict(split_tokens=-1), "split_tokens must be an integer in 0..16383, got -1"),
    (dict(split_tokens=16384), "split_tokens must be an integer in 0..16383, got 16384"),
    (dict(split_tokens=2.0), "split_tokens must be an integer in 0..16383, got 2.0"),
    (dict(slot_bits=9), "slot_bits must be an integer in 1..8, got 9"),
    (dict(widths="wide"), "widths must be a tricut.rtl.cdu.layouts.Widths, got 'wide'"),
])
def test_bad_parameters_rejected_before_construction(kw, needle):
    with warnings.catch_warnings():
        warnings.simplefilter("error")          # no UnusedElaboratable from a half-built unit
        with pytest.raises(ValueError) as e:
            StepSequencer(**kw)
    assert needle in str(e.value)


def test_golden_rejects_bad_rounds():
    with pytest.raises(ValueError, match="empty round needs its step"):
        sequence([], 2, 2, 0)
    with pytest.raises(ValueError, match="has step 4, the round is step 3"):
        sequence([D(3, 0, 1, 5), D(4, 1, 1, 5)], 2, 2, 0)
    with pytest.raises(ValueError, match="seq_len must be an integer >= 1, got 0"):
        sequence([D(3, 0, 1, 0)], 2, 2, 0)
    with pytest.raises(ValueError, match="split_tokens must be an integer >= 0, got -2"):
        sequence([D(3, 0, 1, 5)], 2, 2, -2)
    with pytest.raises(ValueError, match="a slot appears twice"):
        sequence([D(3, 1, 1, 5), D(3, 1, 2, 5)], 2, 2, 0)


# ---------------------------------------------------------------------------- golden model
def test_golden_by_hand_split_context():
    """One slot of 33 tokens, split 16: three parts [0,16) [16,32) [32,33) per head and layer;
    a second slot of 16 tokens (exactly split) is one part."""
    beats, jobs = sequence([D(7, 2, 9, 33, res=1), D(7, 3, 5, 16, res=0)], 2, 2, 16, end=True)
    assert [b["kind"] for b in beats] == ["header", "slot", "slot", "layer", "layer"]
    assert beats[0]["step"] == 7 and [b["hint"] for b in beats[1:3]] == ["auto", "stream"]
    assert [b["last"] for b in beats] == [0, 0, 0, 0, 1] and beats[-1]["end"] == 1
    want = []
    for layer in range(2):
        for h in range(2):
            want += [Job(2, 9, layer, h, p, 3, s, e) for p, (s, e) in
                     enumerate([(0, 16), (16, 32), (32, 33)])]
        want += [Job(3, 5, layer, h, 0, 1, 0, 16) for h in range(2)]
    want[-1] = Job(3, 5, 1, 1, 0, 1, 0, 16, last=1)
    assert jobs == want
    assert split_parts(16, 16) == 1 and split_parts(17, 16) == 2 and split_parts(10**6, 0) == 1


def test_golden_speaks_the_cdu_vocabulary():
    """The step beats are the CDU harness's ``step_beats`` of the same StepDesc; the jobs walk
    (layer, slot) units in the CDU front end's order; the hints are ``dsu_hints``."""
    rng = random.Random(3)
    long_ctx = 40
    for step in range(6):
        slots = sorted(rng.sample(range(4), rng.randint(0, 4)))
        lens = [rng.randint(1, 80) for _ in slots]
        ds = [D(step, s, rng.randrange(16), n, residency_bit(n, long_ctx))
              for s, n in zip(slots, lens)]
        beats, jobs = sequence(ds, 3, 2, 16, step=step, end=step == 5)
        sd = StepDesc(step, tuple(SlotDesc(d.slot, d.request, d.seq_len, h)
                                  for d, h in zip(ds, dsu_hints(lens, long_ctx))), (0, 1, 2))
        packed = [dict(b, kind=STEP_KIND[b["kind"]], **({"hint": HINT[b["hint"]]}
                                                         if "hint" in b else {}))
                  for b in beats]
        cdu = step_beats([sd])
        cdu[-1]["end"] = int(step == 5)
        full = dict(kind=0, step=0, slot=0, req=0, seq_len=0, hint=0, layer=0, last=0, end=0)
        assert [dict(full, **b) for b in packed] == cdu
        units = [(op.req, op.layer) for op in
                 FrontEnd("disabled", 8).ops([sd], lambda st, s, ly: []) if op.kind == "W"]
        seen = []                         # consecutive (slot, layer) groups of jobs
        for j in jobs:
            if not seen or seen[-1][:2] != (j.slot, j.layer):
                seen.append((j.slot, j.layer, j.request))
        assert [(req, layer) for _, layer, req in seen] == units
        assert all(j.end - j.start >= 1 for j in jobs)
        for d in ds:                      # the parts of a (slot, layer, head) tile [0, seq_len)
            mine = [(j.start, j.end) for j in jobs if j.slot == d.slot and j.layer == 0
                    and j.kv_head == 1]
            assert mine[0][0] == 0 and mine[-1][1] == d.seq_len
            assert all(a[1] == b[0] for a, b in zip(mine, mine[1:]))


@pytest.mark.parametrize("divisor", [1, 2, 3, 5, 7, 16, 100, 1000, 4097, 16383])
def test_ceil_div_const_exhaustive(divisor):
    """The RTL's parts = ceil(seq_len / split) by a constant multiply, every 14-bit seq_len."""
    mul, shift = ceil_div_const(divisor, 14)
    n = np.arange(1, 1 << 14, dtype=object)
    got = ((n + divisor - 1) * mul) >> shift
    assert all(int(g) == -(-int(x) // divisor) for g, x in zip(got, n))


# ---------------------------------------------------------------------------- RTL == golden
CONFIGS = [
    dict(split_tokens=0),
    dict(split_tokens=16),
    dict(split_tokens=7, num_layers=3, num_kv_heads=1),
    dict(split_tokens=5, num_layers=1, num_kv_heads=3, max_slots=8, slot_bits=3),
    dict(split_tokens=0, num_layers=8, num_kv_heads=1, max_slots=1, slot_bits=1),
]


@pytest.mark.parametrize("params", CONFIGS, ids=lambda p: "-".join(f"{k}{v}" for k, v in p.items()))
def test_rtl_equals_golden_random_rounds(params):
    rng = random.Random(repr(params))
    rounds = random_rounds(rng, 6, params, step0=rng.randrange(1000), empty=True)
    check(rounds, params, simulate_amaranth(rounds, params))
    res = simulate_amaranth(rounds, params, idle="random", backpressure="random", seed=2)
    check(rounds, params, res, stalled=True)


def test_edge_cases():
    """One slot; every slot; seq_len split - 1, split, split + 1, 1 and the widest; a round
    of no descriptor (first, between, last); the step number past 16 bits (header carries
    the low 16); back to back rounds under random idle and backpressure."""
    p = dict(split_tokens=16, max_slots=4)
    top = (1 << 14) - 1
    rounds = [
        SeqRound(0, []),
        SeqRound(1, [D(1, 3, 15, 16, res=1)]),
        SeqRound(2, [D(2, 0, 1, 17), D(2, 1, 2, 15, res=1), D(2, 2, 3, 1), D(2, 3, 4, 32)]),
        SeqRound(3, []),
        SeqRound(70000, [D(70000, 0, 0, 33, res=1), D(70000, 2, 7, 48)]),
        SeqRound(70001, [D(70001, 1, 1, 1)]),
        SeqRound(70002, [], end=True),
    ]
    check(rounds, p, simulate_amaranth(rounds, p))
    check(rounds, p, simulate_amaranth(rounds, p, idle="random", backpressure="random",
                                       seed=9), stalled=True)
    q = dict(split_tokens=4096, num_layers=1, num_kv_heads=1)
    wide = [SeqRound(5, [D(5, 0, 3, top), D(5, 1, 3, 4096), D(5, 2, 3, 4097)], end=True)]
    res = simulate_amaranth(wide, q)
    check(wide, q, res)
    assert [(j["start"], j["end"]) for j in res.job] == [
        (0, 4096), (4096, 8192), (8192, 12288), (12288, top), (0, 4096), (0, 4096),
        (4096, 4097)]
    one = [SeqRound(9, [D(9, 1, 2, 3)], end=True)]
    r1 = simulate_amaranth(one, dict(split_tokens=0, num_layers=1, num_kv_heads=1))
    assert r1.cycles == [1 + 1 + 1 + 1] == [sequencer_cycles([3], 1, 1, 0)]


def test_bad_descriptors_are_dropped_and_flagged():
    """Wrong step, slot or request or seq_len too wide, seq_len 0, more than max_slots: taken
    in one cycle each, not passed on, ``bad_desc`` for that round only; the good ones are the
    golden round."""
    p = dict(split_tokens=8)
    rounds = [
        SeqRound(4, [D(4, 0, 1, 9), D(5, 1, 1, 9), D(4, 4, 1, 9), D(4, 2, 16, 9)]),
        SeqRound(5, [D(5, 0, 1, 0), D(5, 1, 2, 1 << 14), D(5, 3, 3, 20, res=1)]),
        SeqRound(6, [D(6, 1, 1, 3)]),
        SeqRound(7, [D(8, 1, 1, 3)], end=True),          # every descriptor bad: no job
    ]
    res = simulate_amaranth(rounds, p)
    check(rounds, p, res)
    assert res.bad_desc == [1, 1, 0, 1]
    assert [s["slot"] for s in res.step if s["kind"] == STEP_KIND["slot"]] == [0, 3, 1]
    q = dict(split_tokens=0, max_slots=2, slot_bits=3)  # count 3 > max_slots: the 3rd dropped
    over = [SeqRound(1, [D(1, 0, 1, 4), D(1, 5, 2, 5), D(1, 6, 3, 6)]),
            SeqRound(2, [D(2, 7, 1, 2)])]
    res = simulate_amaranth(over, q)
    check(over, q, res)
    assert res.bad_desc == [1, 0]
    assert [s["slot"] for s in res.step if s["kind"] == STEP_KIND["slot"]] == [0, 5, 7]


@pytest.mark.parametrize("pair", IDLE_BACKPRESSURE, ids=matrix_id)
def test_idle_backpressure_matrix(pair):
    p = dict(split_tokens=16)
    rounds = MATRIX_ROUNDS
    res = simulate_amaranth(rounds, p, *pair, seed=4)
    check(rounds, p, res, stalled=pair != ("none", "none"))
    if pair != ("none", "none"):
        assert sum(res.cycles) > sum(res.formula), pair


MATRIX_ROUNDS = [
    SeqRound(10, [D(10, 1, 3, 17, res=1), D(10, 2, 4, 16)]),
    SeqRound(11, []),
    SeqRound(12, [D(12, 0, 5, 1), D(12, 1, 3, 18, res=1), D(12, 2, 4, 33), D(12, 3, 6, 15)],
             end=True),
]


# ---------------------------------------------------------------------------- can fail
def test_wrong_result_is_caught():
    p = dict(split_tokens=16)
    plan = plan_json(MATRIX_ROUNDS, p)
    bad = dict(plan, job=list(plan["job"]))
    bad["job"][5] ^= 1 << 3                     # one bit of one expected job
    with pytest.raises(NotDrained, match="job: .* first difference at beat 5"):
        simulate_amaranth(MATRIX_ROUNDS, p, plan=bad)
    bad = dict(plan, step=list(plan["step"]))
    bad["step"][2] ^= 1                         # the second slot beat's kind
    with pytest.raises(NotDrained, match="step: .* first difference at beat 2"):
        simulate_amaranth(MATRIX_ROUNDS, p, plan=bad)
    short = dict(plan, descriptor=plan["descriptor"][:-1], max_cycles=300)
    with pytest.raises(TimeoutError, match="step sequencer hung"):
        simulate_amaranth(MATRIX_ROUNDS, p, plan=short)


# ---------------------------------------------------------------------------- Verilog
def test_verilog_lint_clean(tmp_path):
    from tricut.sim.harness.verilog_out import lint, write_verilog
    path = write_verilog(StepSequencer(split_tokens=16), "tile_sequencer", tmp_path)
    clean, messages = lint(path, "tile_sequencer")
    assert clean, messages


def test_verilator_idle_backpressure_matrix():
    """The matrix rounds on Verilator: one build, one cocotb test for the nine pairs."""
    p = dict(split_tokens=16)
    runs = simulate_verilator_matrix(MATRIX_ROUNDS, p, seed=4)
    assert list(runs) == IDLE_BACKPRESSURE
    for pair, res in runs.items():
        check(MATRIX_ROUNDS, p, res, stalled=pair != ("none", "none"))
        if pair != ("none", "none"):
            assert sum(res.cycles) > sum(res.formula), pair
