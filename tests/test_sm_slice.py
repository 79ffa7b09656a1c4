"""A GPU as a grid of decode tiles (models/sm_slice.py, docs/system-model.md "The TE term: a
grid of tiles"): the SM slice of a GPU config, the expected-value tile model against the
cycle-stepped one (``models/tile_timing.py``) on the slices the fast model uses, the placement
rule, and one short RTL calibration case: the tile on Verilator behind a rate-limited HBM,
every layer as the cycle-stepped model predicts and as the expected-value model sums it."""

from __future__ import annotations

import dataclasses
import random

import numpy as np
import pytest

from tricut.models.config import load_gpu, load_model
from tricut.models.sm_slice import (CduSliceTiming, SliceCdu, SliceTiming, cdu_slice_timing,
                                    grid_layer_cycles, grid_loads, kv_word_bytes,
                                    layer_cycles_stepped, place_parts, slice_cdu, slice_config,
                                    slice_outstanding, slice_rate, slice_timing, split_length)

SLICES = [("h100-sxm5", "llama-3-70b", "bf16"), ("h100-sxm5", "llama-3-70b", "fp8"),
          ("h200", "llama-3-8b", "fp8")]


def test_slice_of_h100_is_its_sm_share():
    gpu, model = load_gpu("h100-sxm5"), load_model("llama-3-70b")
    cfg = slice_config(gpu, model, "bf16", 0.9)
    share = 3.35e12 * 0.9 / 132 / 1.98e9 / 64          # words per TE cycle
    num, den = cfg.hbm_rate
    assert den <= 4096 and num / den <= share and num / den == pytest.approx(share, rel=1e-3)
    assert cfg.latency == 990 and cfg.engines == 4 and cfg.G == 8 and cfg.num_kv_heads == 1
    # Little's law: the burst slots cover the latency at the rate (8-word reads)
    assert cfg.max_outstanding * 8 >= cfg.latency * num / den
    assert slice_outstanding(990, (1, 1), 8) == 64 and slice_outstanding(10, (1, 10), 8) == 4
    assert kv_word_bytes(32, "fp8") == 32 and kv_word_bytes(32, "nvfp4") == 18
    assert slice_rate(dataclasses.replace(gpu, hbm_bandwidth=1e15), 32, "bf16", 1.0) == (1, 1)
    with pytest.raises(ValueError, match="kv_dtype must be one of"):
        kv_word_bytes(32, "int4")


@pytest.mark.parametrize("gpu,model,kv", SLICES, ids=lambda x: x)
def test_expected_value_model_against_the_cycle_stepped_one(gpu, model, kv):
    """Within 5e-4 of the cycle-stepped model without split parts, 5e-3 with them (one unit
    alone within 5e-4 too: the rest is how units on one tile overlap); the probed lengths
    exactly."""
    cfg = slice_config(load_gpu(gpu), load_model(model), kv, 0.9)
    st = SliceTiming(cfg)
    rng = random.Random(7)
    top = 2600 if cfg.split_tokens else 900
    for _ in range(4):
        lengths = [rng.randint(1, top) for _ in range(rng.randint(1, 3))]
        ref = layer_cycles_stepped(cfg, lengths)
        tol = 5e-3 if cfg.split_tokens and len(lengths) > 1 else 5e-4
        assert st.sm_cycles(lengths) == pytest.approx(ref, rel=tol), lengths
    for n in st.points[:20]:                                  # probed: exact
        assert st.unit(n) == layer_cycles_stepped(cfg, [int(n)])


def test_the_slice_splits_when_one_engine_cannot_keep_up():
    """bf16 Llama-3-70B: one pipelined engine takes 8 words per 36 cycles, more than the SM's
    share (0.18 words per cycle): no split. fp8 doubles the words per cycle the share
    carries: split into 256-token parts, fed side by side, which the cycle-stepped model shows
    faster than one engine at a time."""
    h100, l70 = load_gpu("h100-sxm5"), load_model("llama-3-70b")
    assert slice_config(h100, l70, "bf16", 0.9).split_tokens == 0
    cfg = slice_config(h100, l70, "fp8", 0.9)
    assert cfg.split_tokens == 256
    unsplit = dataclasses.replace(cfg, split_tokens=0)
    assert layer_cycles_stepped(cfg, [1500]) < 0.85 * layer_cycles_stepped(unsplit, [1500])


def test_expected_value_model_is_exact_at_a_unit_rate_and_can_fail():
    cfg = dataclasses.replace(slice_config(load_gpu("h100-sxm5"), load_model("llama-3-70b")),
                              hbm_rate=(1, 5), max_outstanding=32, hbm_outstanding=32)
    st = SliceTiming(cfg)
    for lengths in ([700], [33, 300, 5], [16, 16, 16, 600]):
        assert st.sm_cycles(lengths) == layer_cycles_stepped(cfg, lengths)
    # another configuration's timing does not fit
    other = SliceTiming(dataclasses.replace(cfg, latency=cfg.latency // 2))
    assert other.sm_cycles([700]) != layer_cycles_stepped(cfg, [700])
    with pytest.raises(ValueError, match="needs its SliceCdu"):
        SliceTiming(dataclasses.replace(cfg, l2=True))
    with pytest.raises(ValueError, match="with the CDU"):
        CduSliceTiming(cfg, SliceCdu("static", 2, 16, 2))


def _cdu_slice(gpu, model, kv, policy="static"):
    g = load_gpu(gpu)
    cfg = dataclasses.replace(slice_config(g, load_model(model), kv, 0.9), l2=True)
    return cfg, slice_cdu(g, cfg, policy, 0.8)


def test_the_slice_cdu_is_the_sms_share_of_l2():
    """H100, one KV head of Llama-3-70B: 50 MiB × 0.8 / 132 SMs in 8 KiB (bf16) or 4 KiB
    (fp8) blocks: 38 or 77 frames, 16 ways, 2 or 4 sets; the prefetch distance the HBM
    latency in blocks + 4, cut to fewer prefetches per set than the ways each set reserves
    (2 of 16), which the CDU reduction requires too."""
    from tricut.sim.fast.cdu_reduction import CduReduction
    cfg, cdu = _cdu_slice("h100-sxm5", "llama-3-70b", "bf16")
    assert cdu == SliceCdu("static", 2, 16, 2)
    cfg8, cdu8 = _cdu_slice("h100-sxm5", "llama-3-70b", "fp8", "adaptive")
    assert cdu8 == SliceCdu("adaptive", 4, 16, 4)
    for c in (cdu, cdu8):
        CduReduction(c.policy, c.sets, c.ways, c.distance, 80)       # accepted
    with pytest.raises(ValueError, match="unknown CDU policy 'lru'"):
        slice_cdu(load_gpu("h100-sxm5"), cfg, "lru", 0.8)
    with pytest.raises(ValueError, match="holds no KV block"):
        slice_cdu(load_gpu("h100-sxm5"), cfg, "static", 1e-6)


@pytest.mark.parametrize("gpu,model,kv", SLICES, ids=lambda x: x)
def test_cdu_expected_value_model_against_the_cycle_stepped_one(gpu, model, kv):
    """The tile with the CDU: per residency hint, one unit within 2e-4 of the cycle-stepped
    model, several within 5e-4 without split parts and 6e-3 with them; both hints mixed
    within 4e-2 (the overlap of each pair of hints is probed: a cached unit after a
    streamed one has blocks prefetched under it; not that, after a cached unit, it starts
    earlier still: 1.3-1.6 % on three units of 200-900 tokens, 3.4 % with a 51-token
    streamed unit between)."""
    cfg, cdu = _cdu_slice(gpu, model, kv)
    ct = cdu_slice_timing(cfg, cdu)
    rng = random.Random(7)
    top = 2600 if cfg.split_tokens else 900
    for hint, curve in (("auto", ct.auto), ("stream", ct.stream)):
        for _ in range(3):
            lengths = [rng.randint(1, top) for _ in range(rng.randint(1, 3))]
            ref = layer_cycles_stepped(cfg, lengths, cdu, hint)
            tol = 2e-4 if len(lengths) == 1 else 6e-3 if cfg.split_tokens else 5e-4
            assert curve.sm_cycles(lengths) == pytest.approx(ref, rel=tol), (hint, lengths)
            assert ct.sm_cycles(lengths, [hint == "auto"] * len(lengths)) == \
                curve.sm_cycles(lengths)
    for _ in range(3):
        lengths = [rng.randint(1, top) for _ in range(3)]
        cached = [rng.random() < 0.5 for _ in lengths]
        ref = layer_cycles_stepped(cfg, lengths, cdu, ["auto" if c else "stream" for c in cached])
        assert ct.sm_cycles(lengths, cached) == pytest.approx(ref, rel=4e-2), (lengths, cached)


def test_the_cdu_tile_on_a_slice_streams_short_requests_block_by_block():
    """What the fast model's te + cdu term follows (docs/system-model.md): a cached unit
    (hint auto, prefetched ``distance`` blocks ahead) is within 1 % of the tile without the CDU
    (bf16, no split) and a streamed one (hint stream: no prefetch) pays the HBM latency every
    block, more than twice as slow; with split parts (fp8 70B) the CDU's L2 path feeds one
    engine per block, slower than the CDU-less walk that feeds the parts side by side."""
    for kv, split in (("bf16", False), ("fp8", True)):
        cfg, cdu = _cdu_slice("h100-sxm5", "llama-3-70b", kv)
        assert bool(cfg.split_tokens) == split
        ct, plain = cdu_slice_timing(cfg, cdu), slice_timing(dataclasses.replace(cfg, l2=False))
        n = 2000
        if not split:
            assert ct.auto.unit(n) == pytest.approx(plain.unit(n), rel=1e-2)
        else:
            assert ct.auto.unit(n) > 1.3 * plain.unit(n)
        assert ct.stream.unit(n) > 2 * ct.auto.unit(n)
        # a block resident from the last step saves its words at the rate, less one engine's
        # cycles for them ((G + 1) Dk per token, the pipelined engine): nothing where the
        # engine is slower than the rate (fp8, G 8)
        saved = max(0, 2 * cfg.dk * cfg.hbm_rate[1] / cfg.hbm_rate[0] - (cfg.G + 1) * cfg.dk)
        assert (saved > 0) == (not split)
        assert ct.sm_cycles([n], [True], 0.5) == pytest.approx(ct.auto.unit(n) - 0.5 * n * saved)


def _explicit_loads(timing, lengths, cached, reuse, sms, S):
    """The placement rule unit by unit: cached jobs' full parts, then streamed ones', then
    the tails longest first, in snake order; each SM's units in order, timed by
    ``sm_cycles``."""
    units = [(S, c) for flag in (True, False) for n, c in zip(lengths, cached) if c == flag
             for _ in range(n // S)]
    units += sorted(((n % S, c) for n, c in zip(lengths, cached) if n % S),
                    key=lambda u: -u[0])
    per = [[] for _ in range(sms)]
    for i, u in enumerate(units):
        r, p = divmod(i, sms)
        per[p if r % 2 == 0 else sms - 1 - p].append(u)
    out = []
    for us in per:
        if isinstance(timing, CduSliceTiming):
            out.append(timing.sm_cycles([n for n, _ in us], [c for _, c in us], reuse)
                       if us else 0.0)
        else:
            out.append(timing.sm_cycles([n for n, _ in us]))
    return np.array(out, dtype=float)


def test_grid_loads_are_the_placement_rule_unit_by_unit():
    """The vectorised grid (every candidate part length at once) against the rule applied
    unit by unit, with and without the CDU, random jobs and residency bits."""
    cfg = slice_config(load_gpu("h100-sxm5"), load_model("llama-3-70b"), "bf16", 0.9)
    plain = slice_timing(cfg)
    cdu_cfg, cdu = _cdu_slice("h100-sxm5", "llama-3-70b", "bf16")
    ct = cdu_slice_timing(cdu_cfg, cdu)
    rng = np.random.default_rng(3)
    sms = 12
    for _ in range(4):
        n = int(rng.integers(1, 40))
        lengths = rng.integers(1, 5000, n)
        cached = rng.random(n) < 0.5
        for timing, flags, reuse in ((plain, np.zeros(n, bool), 0.0), (ct, cached, 0.1)):
            loads = grid_loads(timing, lengths, sms, flags, reuse)
            for m, row in enumerate(loads):
                S = split_length(int(lengths.sum()), sms, m + 1)
                ref = _explicit_loads(timing, lengths, flags, reuse, sms, S)
                assert row == pytest.approx(ref, rel=1e-12, abs=1e-6)
    # the streamed curve is not the cached one: the bits reach the loads
    assert not np.allclose(grid_loads(ct, lengths, sms, cached), grid_loads(ct, lengths, sms))


def test_the_compiled_grid_is_the_numpy_grid():
    """``sim/fast/grid_twin.py`` (what ``StepModel`` calls every step) against
    ``grid_layer_cycles`` (numpy, the oracle): random steps with and without the CDU, a
    single job, jobs shorter than a block, and jobs that are whole parts."""
    from tricut.sim.fast.grid_twin import grid_layer_cycles_fast
    cfg = slice_config(load_gpu("h100-sxm5"), load_model("llama-3-70b"), "fp8", 0.9)
    plain = slice_timing(cfg)
    cdu_cfg, cdu = _cdu_slice("h100-sxm5", "llama-3-70b", "bf16")
    ct = cdu_slice_timing(cdu_cfg, cdu)
    rng = np.random.default_rng(11)
    cases = [(np.array([70000]), None), (np.array([3, 15, 1]), None),
             (np.full(132 * 3, 256), None)]
    for _ in range(40):
        n = int(rng.integers(1, 300))
        cases.append((rng.integers(1, 80000, n), rng.random(n) < 0.5))
    for lengths, cached in cases:
        for timing, reuse in ((plain, 0.0), (ct, float(rng.random() * 0.1))):
            want = grid_layer_cycles(timing, lengths, 132, cached, reuse)
            got = grid_layer_cycles_fast(timing, lengths, 132, cached, reuse)
            assert got == pytest.approx(want, rel=1e-12), (len(lengths), timing)
    assert grid_layer_cycles_fast(plain, [], 132) == (0.0, 0.0)


def test_placement_rule():
    lengths = np.array([8001, 8001, 300, 17])
    S, parts, sm = place_parts(lengths, 132)
    assert S == split_length(int(lengths.sum()), 132) and S % 16 == 0
    assert S * 132 >= lengths.sum() and (S - 16) * 132 < lengths.sum()
    assert parts.sum() == lengths.sum() and parts.max() <= S
    assert list(parts) == sorted(parts, reverse=True)
    assert len(parts) <= 132 + len(lengths)                # about one part per SM
    # snake order: the first 132 parts on SMs 0..131, the next back from 131
    _, parts, sm = place_parts(np.full(300, 16), 132)
    assert len(parts) == 300
    assert list(sm[:132]) == list(range(132)) and list(sm[132:134]) == [131, 130]
    assert split_length(10, 132) == 16
    st = SliceTiming(slice_config(load_gpu("h100-sxm5"), load_model("llama-3-70b")))
    slowest, mean = grid_layer_cycles(st, [8001] * 8, 132)
    assert slowest >= mean > 0
    # one request on a grid: split over the SMs, not one SM's tile for all of it
    one, _ = grid_layer_cycles(st, [8001], 132)
    assert one < st.unit(8001) / 50
    # 160 jobs on 132 SMs: one part per SM would leave 28 SMs two whole jobs; the rule
    # takes the part length whose slowest SM ends first
    slowest, mean = grid_layer_cycles(st, [65537] * 160, 132)
    _, parts, sm = place_parts(np.full(160, 65537), 132)
    naive = np.bincount(sm, weights=st.unit(parts), minlength=132).max()
    assert slowest < 0.7 * naive and slowest / mean < 1.1


def test_rtl_calibration_case_on_verilator():
    """The tile (tiny-te, no CDU) on Verilator behind an HBM of a third of a beat per cycle
    and 30 cycles of latency: every layer's cycles as the cycle-stepped model predicts, and
    within 1e-3 of the expected-value model's sum of its units; the same with two engines and
    split parts."""
    from tricut.models.tile_timing import TileConfig  # noqa: F401  (the configuration type)
    from tricut.sim.harness.tile.cosim import simulate
    from tricut.sim.harness.tile.setup import Setup, predict_layers, schedule, tile_config
    s = Setup(lanes=16, model="tiny-te", requests=2, prompt_lens=(40, 21), steps=2, engines=1,
              max_ctx=64, latency=30, max_outstanding=8, hbm_rate=(1, 3))
    # and two engines fed side by side with split parts (the walk over the pass's offsets)
    split = dataclasses.replace(s, engines=2, split_tokens=16, prompt_lens=(40, 3))
    reps = [simulate(x, sim="verilator") for x in (s, split)]
    for x, rep in zip((s, split), reps):
        assert rep.ok, rep.differences[:3]
        assert predict_layers(x) == rep.tile.layer_cycles
    measured = reps[0].tile.layer_cycles
    st = SliceTiming(tile_config(s))
    for ri, descs in enumerate(schedule(s)):
        lengths = [d.seq_len for d in descs]
        for (r, layer), cycles in measured.items():
            if r == ri:
                assert st.sm_cycles(lengths) == pytest.approx(cycles, rel=1e-3), (ri, layer)
    # the same run at the full rate is faster: the rate reaches the RTL
    assert predict_layers(dataclasses.replace(s, hbm_rate=(1, 1))) != measured


def test_tile_run_gpu_flag_sets_the_slice():
    """``tricut tile run --gpu``: the tile's engines, HBM rate, latency and burst slots are
    the SM slice's (the same function ``tricut simulate``'s grid uses)."""
    import argparse
    from tricut.sim.cli.tile_cmd import tile_setup as _setup
    from tricut.sim.fast.timing import Assumptions
    args = argparse.Namespace(
        model="llama-3-70b-kv1", gpu="h100-sxm5", prompt_lens=(40, 20), synthetic=None,
        max_prompt=3, steps=1, kv_dtype="fp8", engines=None, engine=None, lanes=32,
        split_tokens=None, max_ctx=64, max_batch=None, profile="throughput-opt", seed=0,
        policy="none", cdu_sets=None, cdu_ways=None, distance=None, long_context=1, dsu=False,
        dsu_cores=1, max_retries=2, faults=(), hang=(), watchdog=None, sim="verilator")
    s = _setup(args)
    cfg = slice_config(load_gpu("h100-sxm5"), load_model("llama-3-70b-kv1"), "fp8",
                       Assumptions().te_bw_efficiency)
    assert (s.engines, s.latency, s.hbm_rate, s.max_outstanding) == \
        (cfg.engines, cfg.latency, cfg.hbm_rate, cfg.max_outstanding)
    assert cfg.split_tokens == 256 and s.split_tokens == 0        # nothing to split at 41
    args.prompt_lens, args.max_ctx = (300, 20), 320
    assert _setup(args).split_tokens == 256
    args.split_tokens = 0                                          # the flag overrides
    assert _setup(args).split_tokens == 0
    args.split_tokens = None
    # --engines: another design on the same share; one engine has nothing to split for
    for engines, split in ((1, 0), (2, 256)):
        args.engines = engines
        s = _setup(args)
        assert (s.engines, s.split_tokens, s.hbm_rate) == (engines, split, cfg.hbm_rate)
    args.gpu, args.engines = None, None
    s = _setup(args)
    assert (s.engines, s.latency, s.hbm_rate, s.split_tokens) == (1, 8, (1, 1), 0)
    # with a CDU policy the CDU is the SM's share of the L2 (slice_cdu); a flag overrides
    args.gpu, args.policy = "h100-sxm5", "static"
    s = _setup(args)
    cdu = slice_cdu(load_gpu("h100-sxm5"), dataclasses.replace(cfg, l2=True), "static", 0.8)
    assert (s.policy, s.cdu_sets, s.cdu_ways, s.distance) == \
        ("static", cdu.sets, cdu.ways, cdu.distance) == ("static", 4, 16, 4)
    args.distance = 3
    assert _setup(args).distance == 3
    # without --gpu the geometry flags default to the tile's 4 x 2, distance 4
    args.gpu, args.distance = None, None
    assert (_setup(args).cdu_sets, _setup(args).cdu_ways, _setup(args).distance) == (4, 2, 4)


def test_cdu_geometry_flags_need_a_policy(capsys):
    from tricut.sim.cli.testing import run_cli
    for flag, value in (("--cdu-sets", "3"), ("--cdu-ways", "4"), ("--distance", "999")):
        code, cap = run_cli(["tile", "run", flag, value], capsys)
        assert code == 2 and cap.err.strip().endswith(
            f"{flag} needs --policy (the tile has no CDU without one)"), cap.err


def test_the_te_and_cdu_cuts_time_the_cdu_tile():
    """With both cuts each SM's tile has the CDU (CduSliceTiming at the slice's CDU); short
    requests, streamed by the DSU's residency hint, pay the HBM latency every block: their
    TE term is longer than the CDU-less tile's, a long cached request's is not."""
    from tricut.sim.fast.timing import StepModel
    g, m = load_gpu("h100-sxm5"), load_model("llama-3-70b")
    te = StepModel(m, g, tp=8, cuts=frozenset({"te"}))
    both = StepModel(m, g, tp=8, cuts=frozenset({"te", "cdu"}), policy="static")
    assert isinstance(both.grid, CduSliceTiming) and isinstance(te.grid, SliceTiming)
    assert both.slice_cdu == slice_cdu(g, both.slice, "static", 0.8)
    rng = np.random.default_rng(0)
    short = [2000] * 64
    assert both.step_time(short, [0] * 64, rng).te_busy_s > 1.5 * te.step_time(short, [0] * 64, rng).te_busy_s
    long = [131072] * 8
    assert both.step_time(long, [1] * 8, rng).te_busy_s == pytest.approx(
        te.step_time(long, [1] * 8, rng).te_busy_s, rel=1e-2)


#: an H100 whose SMs have one TE engine and 10 ns of HBM latency: a slice the Amaranth
#: simulator runs in seconds
SHORT_SLICE_GPU = """name = "slice-test"
sm_count = 132
sm_clock_ghz = 1.98
l1_kib_per_sm = 192
l2_mib = 50
hbm_gib = 80
hbm_bandwidth_tb_s = 3.35
l1_latency_ns = 1.0
l2_latency_ns = 20.0
hbm_latency_ns = 10.0
bf16_tflops = 989.4
fp8_tflops = 1978.9
nvlink_gb_s = 450.0
has_cdu = true
te_engines_per_sm = 1
te_clock_ghz = 1.98
cdu_clock_ghz = 1.98
dsu_cores = 4
dsu_clock_ghz = 1.2
"""


def test_tile_run_gpu_on_the_rtl_prints_the_fast_models_cycles(tmp_path, capsys):
    """``tricut tile run --gpu FILE`` end to end (on Verilator: Amaranth's simulator runs the
    same cycles, ``test_amaranth_and_verilator_runs_are_identical``, at a fiftieth of the
    speed): the slice's rate and latency, the RTL's cycles per layer equal to the timing
    model's, the fast model's beside them, in text and in ``--json``."""
    import json
    from tricut.sim.cli.testing import run_cli
    gpu = tmp_path / "slice.toml"
    gpu.write_text(SHORT_SLICE_GPU)
    args = ["tile", "run", "--gpu", str(gpu), "--model", "tiny-te", "--prompt-lens", "3,5",
            "--steps", "1", "--max-ctx", "16", "--sim", "verilator"]
    code, cap = run_cli(args + ["--json"], capsys)
    assert code == 0, cap.err
    out = json.loads(cap.out)
    sl = out["sm_slice"]
    assert out["ok"] and tuple(sl["hbm_rate"]) == (73, 405) and sl["latency"] == 20
    rtl = {(x["round"], x["layer"]): x["cycles"] for x in out["layer_cycles"]}
    stepped = {(x["round"], x["layer"]): x["cycles"] for x in sl["timing_model_layer_cycles"]}
    fast = {(x["round"], x["layer"]): x["cycles"] for x in sl["fast_model_layer_cycles"]}
    assert stepped == rtl and len(rtl) == 2
    for k in rtl:
        assert fast[k] == pytest.approx(rtl[k], rel=5e-3)
    code, cap = run_cli(args, capsys)
    assert code == 0 and "SM slice of" in cap.out and "fast model" in cap.out


def test_rtl_calibration_case_with_the_cdu_on_verilator(tmp_path, capsys):
    """``tricut tile run --gpu FILE --policy static`` on Verilator: one KV head of
    Llama-3-8B on a short-latency slice with the CDU at the SM's share of the L2, one request
    cached and one streamed (``--long-context 128``). Every layer as the cycle-stepped model
    predicts; the first step (an empty L2) within 1e-3 of the expected-value model, a streamed
    unit paying the HBM latency every block; the second step, whose cached blocks are partly
    still resident, the fast model's too (its saving per resident block at this toy scale
    is the loose part: docs/system-model.md)."""
    import json
    from tricut.sim.cli.testing import run_cli
    gpu = tmp_path / "slice.toml"
    gpu.write_text(SHORT_SLICE_GPU)
    args = ["tile", "run", "--gpu", str(gpu), "--model", "llama-3-8b-kv1", "--policy",
            "static", "--long-context", "128", "--prompt-lens", "600,200", "--steps", "2",
            "--max-ctx", "640", "--sim", "verilator", "--json"]
    code, cap = run_cli(args, capsys)
    assert code == 0, cap.err
    out = json.loads(cap.out)
    sl, setup = out["sm_slice"], out["setup"]
    assert out["ok"] and (setup["policy"], setup["cdu_sets"], setup["cdu_ways"]) == \
        ("static", 2, 16)
    rtl = {(x["round"], x["layer"]): x["cycles"] for x in out["layer_cycles"]}
    stepped = {(x["round"], x["layer"]): x["cycles"] for x in sl["timing_model_layer_cycles"]}
    fast = {(x["round"], x["layer"]): x["cycles"] for x in sl["fast_model_layer_cycles"]}
    assert stepped == rtl and sorted(rtl) == [(0, 0), (1, 0)]
    assert fast[(0, 0)] == pytest.approx(rtl[(0, 0)], rel=1e-3)
    assert fast[(1, 0)] == pytest.approx(rtl[(1, 0)], rel=0.1)
    assert rtl[(1, 0)] < 0.9 * rtl[(0, 0)]           # resident blocks: the second step is faster


def test_contexts_up_to_the_sequence_field_and_a_hang_guard_that_scales():
    """``max_ctx`` up to 16,368 (the largest multiple of 16 the 14-bit sequence field
    holds), and a layer's hang guard that grows with its K/V words at the HBM rate, so that
    an 8K slice run is not cut off at 500,000 cycles."""
    from tricut.sim.harness.tile.setup import (MAX_CTX, Setup, SetupError, check_setup,
                                               layer_cycle_limit)
    assert MAX_CTX == 16368
    s = Setup(model="llama-3-8b-kv1", requests=2, prompt_lens=(8100, 100), steps=2,
              max_ctx=8192, hbm_rate=(73, 405), latency=990, max_outstanding=32)
    check_setup(s)
    with pytest.raises(SetupError, match=r"max_ctx must be a multiple of 16 .* 16\.\.16368"):
        check_setup(dataclasses.replace(s, max_ctx=16384))
    # 8,202 tokens of 8 words at 73/405 words per cycle: ~364K cycles of streaming
    assert layer_cycle_limit(s) > 500_000 + 4 * 8202 * 8 * 405 // 73
    assert layer_cycle_limit(Setup()) < 600_000


@pytest.mark.parametrize("field,value,needle", [
    ("hbm_rate", (3, 2), "hbm_rate (beats, cycles), ints with 1 <= beats <= cycles <= 4096"),
    ("hbm_rate", 0.2, "got 0.2"),
    ("latency", 0, "latency must be in 1..4096 cycles, got 0"),
    ("max_outstanding", 65, "max_outstanding must be in 1..64, got 65"),
])
def test_setup_refuses_a_bad_slice_parameter(field, value, needle):
    from tricut.sim.harness.tile.setup import Setup, SetupError, check_setup
    s = dataclasses.replace(Setup(lanes=16, model="tiny-te", requests=2, prompt_lens=(3, 5),
                                  steps=1, max_ctx=16), **{field: value})
    with pytest.raises(SetupError) as e:
        check_setup(s)
    assert needle in str(e.value) and e.value.param == field
