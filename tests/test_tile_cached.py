"""Whole decode steps through the decode tile's attention path with the CDU in the K/V path
(``rtl/tile/attention_path.py``, ``rtl/tile/unit_streamer.py``; docs/tile/cdu-path.md, "Attention
path with the CDU in the K/V path"), co-simulated with the golden decode step
(``sim/harness/tile/cosim.py`` with a ``policy``, ``tricut tile run --policy``): the
equivalence run on Verilator (the build ``tests/test_tile_cosim_verilator.py`` shares; the two
simulators are cycle-identical, ``test_amaranth_and_verilator_runs_are_identical``), the short
runs in Amaranth's simulator.

* equivalence on the shipped pipelined engine: every attention output bit-exact with the TE
  golden of that engine, the tokens the golden decode step's, and every CDU decision equal to
  the CDU golden model's on the same step descriptors (transaction by transaction) with its
  counters: ``static`` (bf16, 1 engine: the second KV head's pass re-reads from HBM) here;
  the ``adaptive`` (fp8, 4 engines, split-K on the longer contexts, evictions and eviction
  holds) and ``disabled`` (NVFP4, 2 engines at 32 lanes, two block scales a K/V word: every
  block a bypass, read from HBM by the streamer) setups of ``sim/harness/tile/cases.py`` run
  on Verilator too (``tests/test_tile_cosim_verilator.py``);
* the L2 is used: with ``static`` every demand read hits and its blocks come from L2 frames
  the fill engine wrote;
* the checks can fail: a flipped HBM bit of a block that reaches the TE only through an L2
  fill is reported; a CDU reference with another prefetch distance differs from the tile's
  decisions;
* bad parameters and flags: one error line, exit 2.

The Amaranth simulator runs the cached tile at ~80 cycles/s: an equivalence run (~10,000
cycles) would take 70-120 s of it, a few seconds on Verilator once built.
"""

from __future__ import annotations

import dataclasses
import gc
import warnings

import numpy as np
import pytest

from tricut.rtl.tile.attention_layouts import kv_addr
from tricut.rtl.tile.attention_path import AttentionPath
from tricut.rtl.tile.unit_streamer import UnitStreamer
from tricut.sim.cli.testing import assert_one_line_error, run_cli
from tricut.sim.harness.cdu import txn_tuple
from tricut.sim.harness.tile import cosim
from tricut.sim.harness.tile.compare import compare_cdu
from tricut.sim.harness.tile.cosim import simulate
from tricut.sim.harness.tile.cases import STATIC
from tricut.sim.harness.tile.golden import RunInputs, golden_run


@pytest.fixture(scope="module")
def static_report():
    return simulate(STATIC, sim="verilator")


def _assert_equivalent(rep):
    s, t = rep.setup, rep.tile
    assert rep.differences == [] and not t.stopped and not t.problems, rep.differences[:3]
    golden = golden_run(s)                         # independent of the run's own golden
    assert set(golden.attn) == set(t.attn) and golden.attn
    for k in golden.attn:
        assert np.array_equal(golden.attn[k], t.attn[k]), k
    assert t.tokens == golden.tokens
    core = RunInputs(s).cdu_reference()
    assert t.txns == [txn_tuple(x) for x in core.txns] and t.txns
    c = core.counters()
    for k in ("accesses", "hits", "misses_alloc", "misses_bypass", "prefetch_issued",
              "writes", "write_hits", "write_allocs", "evictions", "fills"):
        assert t.cdu_counters[k] == c[k], k
    return c


def test_static_policy_bit_exact_and_cdu_equal(static_report):
    c = _assert_equivalent(static_report)
    # every demand read hits a frame the fill engine wrote (prefetched or reused)
    assert c["accesses"] == c["hits"] > 0 and c["fills"] > 0
    assert static_report.tile.cdu_counters["hbm_reads"] == c["prefetch_issued"]


def test_a_flipped_hbm_bit_behind_an_l2_fill_is_reported():
    """Request 0's K of token 1 (layer 0, KV head 0) reaches the TE only from an L2 frame
    under ``static`` (every read hits): one flipped bit in HBM is caught."""
    s = dataclasses.replace(STATIC, requests=1, prompt_lens=(2,), steps=1)
    addr = kv_addr(0, 0, 0, 1, num_layers=2, num_kv_heads=2, max_ctx=32, head_dim=64,
                   lanes=16) + 1
    rep = simulate(s, corrupt=(addr, 14))
    assert rep.differences and "attention[" in rep.differences[0]
    assert rep.tile.cdu_counters["hits"] == rep.tile.cdu_counters["accesses"] > 0


def test_a_different_cdu_reference_is_caught(static_report):
    other = dataclasses.replace(STATIC, distance=1)
    diffs = compare_cdu(other, static_report.tile)
    assert diffs and diffs[0].startswith("CDU "), diffs
    assert compare_cdu(STATIC, static_report.tile) == []


@pytest.mark.parametrize("kw,needle", [
    (dict(max_ctx=40), "max_ctx must be a multiple of 16"),
    (dict(sets=3), "sets must be a power of 2"),
    (dict(ways=0), "ways must be an integer in 1..16"),
    (dict(engines=0), "engines must be an integer in 1..16"),
])
def test_unit_streamer_bad_parameters(kw, needle):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError, match=needle):
            UnitStreamer(**kw)
        gc.collect()


@pytest.mark.parametrize("kw,needle", [
    (dict(cdu=dict(sets=4, bogus=1)), "cdu must be None or a dict"),
    (dict(cdu=dict(mshrs=0)), "mshrs"),
    (dict(max_slots=9), "max_slots must be an integer in 1..4"),
    (dict(max_ctx=24), "max_ctx must be a multiple of 16"),
    (dict(engine="split"), r"engine must be one of \('pipelined', 'serial'\), got 'split'"),
])
def test_cached_tile_bad_parameters(kw, needle):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError, match=needle):
            AttentionPath(**kw)
        gc.collect()


BAD = [
    (["--policy", "lru"], "invalid choice"),
    (["--policy", "static", "--max-ctx", "40"], "multiple of 16"),
    (["--policy", "static", "--cdu-sets", "3"], "--cdu-sets"),
    (["--policy", "static", "--cdu-ways", "0"], "--cdu-ways"),
    (["--policy", "static", "--cdu-ways", "17"], "--cdu-ways"),
    (["--policy", "static", "--distance", "300"], "--distance"),
    (["--policy", "static", "--distance", "-1"], "--distance"),
    (["--policy", "static", "--long-context", "0"], "--long-context"),
    (["--policy", "static", "--engine", "split"], "invalid choice"),
    (["--max-ctx", "40"], "--max-ctx: must be a multiple of 16"),
    (["--policy", "static", "--lanes", "64"], "--lanes"),
]


@pytest.mark.parametrize("extra,needle", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_cli_tile_run_cdu_bad_input(capsys, extra, needle):
    code, cap = run_cli(["tile", "run", *extra], capsys)
    assert_one_line_error(code, cap, needle)


def test_cli_prints_the_cdu_counters(capsys, monkeypatch, static_report):
    """``tricut tile run --policy static`` on the report of the equivalence run above: the
    CDU line, the equality line, and the JSON keys."""
    import json
    monkeypatch.setattr(cosim, "simulate", lambda s, **kw: static_report)
    argv = ["tile", "run", "--prompt-lens", "3,17", "--steps", "2", "--max-ctx", "32",
            "--policy", "static"]
    code, cap = run_cli(argv, capsys)
    assert code == 0, cap.err
    c = static_report.tile.cdu_counters
    assert "CDU static (4 sets x 2 ways, distance 4)" in cap.out
    assert (f"CDU: {len(static_report.tile.txns)} decisions; reads {c['accesses']} (hits "
            f"{c['hits']}") in cap.out
    assert "CDU decisions equal to the CDU golden model" in cap.out
    code, cap = run_cli(argv + ["--json"], capsys)
    out = json.loads(cap.out)
    assert out["setup"]["policy"] == "static" and out["cdu_counters"]["hits"] == c["hits"]
    assert out["cdu_decisions"] == len(static_report.tile.txns)
