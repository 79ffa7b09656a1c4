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
from tricut.models.sm_slice import (SliceTiming, grid_layer_cycles, kv_word_bytes,
                                    layer_cycles_stepped, place_parts, slice_config,
                                    slice_outstanding, slice_rate, split_length)

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
    with pytest.raises(ValueError, match="without the CDU"):
        SliceTiming(dataclasses.replace(cfg, l2=True))


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
    from tricut.sim.harness.tile import verilator as V
    from tricut.sim.harness.tile.cosim import simulate
    from tricut.sim.harness.tile.setup import Setup, predict_layers, schedule, tile_config
    s = Setup(lanes=16, model="tiny-te", requests=2, prompt_lens=(40, 21), steps=2, engines=1,
              max_ctx=64, latency=30, max_outstanding=8, hbm_rate=(1, 3))
    # and two engines fed side by side with split parts (the walk over the pass's offsets)
    split = dataclasses.replace(s, engines=2, split_tokens=16, prompt_lens=(40, 3))
    old = V.DEFAULT_OPT
    V.DEFAULT_OPT = "-O0"
    try:
        reps = [simulate(x, sim="verilator") for x in (s, split)]
    finally:
        V.DEFAULT_OPT = old
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
    from tricut.sim.cli.tile_cmd import _setup
    from tricut.sim.fast.timing import Assumptions
    args = argparse.Namespace(
        model="llama-3-70b-kv1", gpu="h100-sxm5", prompt_lens=(40, 20), synthetic=None,
        max_prompt=3, steps=1, kv_dtype="fp8", engines=None, engine=None, lanes=32,
        split_tokens=None, max_ctx=64, max_batch=None, profile="throughput-opt", seed=0,
        policy="none", cdu_sets=4, cdu_ways=2, distance=4, long_context=1, dsu=False,
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
    args.gpu, args.split_tokens = None, None
    s = _setup(args)
    assert (s.engines, s.latency, s.hbm_rate, s.split_tokens) == (1, 8, (1, 1), 0)


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
    """``tricut tile run --gpu FILE`` end to end (Amaranth): the slice's rate and latency, the
    RTL's cycles per layer equal to the timing model's, the fast model's beside them, in text
    and in ``--json``."""
    import json
    from conftest import run_cli
    gpu = tmp_path / "slice.toml"
    gpu.write_text(SHORT_SLICE_GPU)
    args = ["tile", "run", "--gpu", str(gpu), "--model", "tiny-te", "--prompt-lens", "3,5",
            "--steps", "1", "--max-ctx", "16"]
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
