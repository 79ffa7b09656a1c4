"""Split-K combine unit of the decode tile (``rtl/tile/combine.py``, docs/tile/combine.md).

RTL == ``models.te.combine_partials`` bit for bit on partial results made by the golden TE
model itself (``te_decode(..., partial=True)`` on K slices of a random context), K = 0..4,
head_dim 64/128, G 1..8, lanes 4/8/16; the cycle formula exactly (unstalled); named edge
cases (empty parts, all empty, a dominating part, raw bit patterns with NaN/inf/subnormals);
the whole idle x backpressure matrix on a short job sequence in the Amaranth simulator and on
Verilator (one build, one cocotb test); every run ends with the drained check. Golden combine
vs the unsplit golden TE output and float64; failures are detectable (wrong result, an
undrained stream, a misframed part).
"""

from __future__ import annotations

import gc
import itertools
import subprocess
import sys
import warnings

import numpy as np
import pytest

from tricut.models import te as M
from tricut.rtl.tile.combine import CombineUnit, combine_cycles
from tricut.rtl.tile.layouts import job_layout
from tricut.sim.harness.combine import (CombineJob, plan_json, simulate_amaranth,
                                        simulate_verilator_matrix, split_k_parts)
from tricut.sim.harness.streams import IDLE_BACKPRESSURE, NotDrained, matrix_id

F32 = np.float32


def _bf16(rng, shape, mult=1.0):
    return M.f2b((rng.standard_normal(shape) * mult).astype(F32)) >> 16


def context(rng, G, d, n, q_mult=1.0):
    """bf16 codes of a random q [G, d], K and V [n, d], and the scale's fp32 bits."""
    return (_bf16(rng, (G, d), q_mult), _bf16(rng, (n, d)), _bf16(rng, (n, d)),
            int(M.f2b(F32(1 / np.sqrt(d)))))


def split_job(rng, G, d, lanes, bounds, q_mult=1.0):
    q, k, v, sb = context(rng, G, d, bounds[-1], q_mult)
    return CombineJob(G, d, split_k_parts(q, k, v, sb, lanes, bounds))


def random_bounds(rng, K, n):
    return [0] + sorted(int(x) for x in rng.integers(0, n + 1, K - 1)) + [n]


def check(jobs, res, lanes):
    assert len(res) == len(jobs)
    for i, (j, r) in enumerate(zip(jobs, res)):
        gold = j.golden()
        bad = np.argwhere(r.out != gold)
        assert bad.size == 0, (f"job {i} (K={j.K}): {len(bad)} words differ, first at "
                               f"{tuple(bad[0])}: RTL {int(r.out[tuple(bad[0])]):#010x} "
                               f"golden {int(gold[tuple(bad[0])]):#010x}")
        assert r.beats == j.expected_beats(lanes)


# ----------------------------------------------------------------------------------------------
# parameters
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kw,needle", [
    (dict(head_dim=96), "head_dim must be one of (64, 128, 256), got 96"),
    (dict(G=0), "G must be an int in 1..16, got 0"),
    (dict(G=17), "G must be an int in 1..16, got 17"),
    (dict(G=2.0), "G must be an int in 1..16, got 2.0"),
    (dict(lanes=3), "lanes must be one of (2, 4, 8, 16, 32), got 3"),
    (dict(max_parts=0), "max_parts must be an int in 1..4096, got 0"),
    (dict(max_parts=5000), "max_parts must be an int in 1..4096, got 5000"),
    (dict(max_parts=True), "max_parts must be an int in 1..4096, got True"),
])
def test_bad_parameters_rejected_before_construction(kw, needle):
    with warnings.catch_warnings():
        warnings.simplefilter("error")          # no UnusedElaboratable from a half-built unit
        with pytest.raises(ValueError) as e:
            CombineUnit(**kw)
        gc.collect()
    assert needle in str(e.value)


def test_parts_field_width():
    for mp, w in ((1, 1), (4, 3), (8, 4), (4096, 13)):
        assert job_layout(mp).size == w


# ----------------------------------------------------------------------------------------------
# golden combine
# ----------------------------------------------------------------------------------------------
def test_golden_combine_matches_unsplit_and_float64():
    """Every (head_dim, G, lanes, K) of the brief: the golden combine of K partials is within
    1e-6 relative L2 of float64 attention and of the unsplit golden TE output (measured worst
    2.3e-7; the unsplit output's own error is 2.5e-7)."""
    worst = 0.0
    for d, G, lanes, K in itertools.product((64, 128), (1, 3, 8), (4, 8, 16), (1, 2, 3, 4)):
        rng = np.random.default_rng([d, G, lanes, K])
        n = 20
        q, k, v, sb = context(rng, G, d, n)
        parts = split_k_parts(q, k, v, sb, lanes, random_bounds(rng, K, n))
        comb = M.b2f(M.combine_partials(parts)).astype(np.float64)
        whole = M.b2f(M.te_decode(q, k, v, "bf16", sb, lanes=lanes).out).astype(np.float64)
        deq = [M.b2f(M.dequant_bf16(x)) for x in (q, k, v)]
        ref = M.reference_f64(*deq, F32(1 / np.sqrt(d)))
        for other in (ref, whole):
            err = np.linalg.norm(comb - other) / np.linalg.norm(other)
            assert err < 1e-6, (d, G, lanes, K, err)
            worst = max(worst, err)
    assert worst > 0                            # the splits really change the rounding


# ----------------------------------------------------------------------------------------------
# RTL == golden, cycles
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("d,G,lanes", [(64, 1, 16), (64, 8, 16), (128, 2, 8), (64, 5, 4),
                                       (128, 3, 4)])
def test_rtl_bit_exact_and_cycle_formula(d, G, lanes):
    """Jobs of K = 1..4 parts back to back, unstalled: bit-exact, and every job takes exactly
    ``combine_cycles`` (= 1 + K*G*(Dk+1) + [K>1]*Dk + G*Dk)."""
    rng = np.random.default_rng([d, G, lanes])
    n = 8
    jobs = [split_job(rng, G, d, lanes, random_bounds(rng, K, n)) for K in (1, 2, 3, 4)]
    res = simulate_amaranth(jobs, lanes, max_parts=4)
    check(jobs, res, lanes)
    for j, r in zip(jobs, res):
        assert r.cycles == combine_cycles(j.K, d, G, lanes), (j.K, r.cycles)
        assert r.misframed == 0
    dk = d // lanes
    assert combine_cycles(3, d, G, lanes) == 1 + 3 * G * (dk + 1) + dk + G * dk


def edge_jobs(rng, G, d, lanes):
    """Named edge cases (see ``EDGE``), to run back to back on one unit."""
    q, k, v, sb = context(rng, G, d, 6)
    parts = split_k_parts(q, k, v, sb, lanes, [0, 2, 4, 6])
    empty = split_k_parts(q, k, v, sb, lanes, [0, 0])[0]     # n = 0: o = 0, m = -inf, l = 0
    assert int(empty[1][0]) == M.NEG_INF and int(empty[2][0]) == 0
    jobs = {
        "empty_middle": [parts[0], empty, parts[1]],
        "empty_first": [empty, parts[0], parts[2]],
        "empty_last": [parts[1], parts[2], empty],
        "all_empty": [empty, empty, empty],
        "one_empty": [empty],
        "no_parts": [],
        "single": [parts[2]],
    }
    # a part whose max dominates: q, K > 0 give scores ~300 log2 units above the others',
    # whose weights exp2(m_i - M) underflow to 0 (|m_i - M| > 126)
    qh = M.f2b((np.abs(rng.standard_normal((G, d))) * 40 + 1).astype(F32)) >> 16
    kh = M.f2b((np.abs(rng.standard_normal((2, d))) + 0.5).astype(F32)) >> 16
    big = split_k_parts(qh, kh, _bf16(rng, (2, d)), sb, lanes, [0, 2])[0]
    assert (M.b2f(big[1]) > M.b2f(np.stack([p[1] for p in parts])).max() + 126).all()
    jobs["dominant"] = [parts[0], big, parts[1]]
    jobs["dominant_first"] = [big, parts[2]]
    # raw bit patterns: NaN, +-inf, subnormals, -0 in o, m and l (the golden fold defines them)
    special = np.array([0x7FC00001, 0xFF800000, 0x7F800000, 0x00000001, 0x80000000, 0,
                        0x3F800000, 0xC0000000, 0x00800000, 0x807FFFFF], dtype=np.int64)

    def raw():
        o = rng.integers(0, 1 << 32, (G, d), dtype=np.int64)
        o[rng.random((G, d)) < 0.2] = rng.choice(special, 1)[0]
        m = np.where(rng.random(G) < 0.5, rng.choice(special, G),
                     M.f2b(rng.uniform(-30, 30, G).astype(F32)))
        l = np.where(rng.random(G) < 0.5, rng.choice(special, G),
                     M.f2b(rng.uniform(0, 9, G).astype(F32)))
        return o, m, l
    jobs["raw_bits"] = [raw() for _ in range(3)]
    jobs["raw_then_real"] = [raw(), parts[0]]
    return {name: CombineJob(G, d, p) for name, p in jobs.items()}


def test_edge_cases_bit_exact():
    rng = np.random.default_rng(7)
    G, d, lanes = 3, 64, 16
    named = edge_jobs(rng, G, d, lanes)
    jobs = list(named.values())
    res = simulate_amaranth(jobs, lanes, max_parts=3, idle="random", backpressure="random",
                            seed=3)
    check(jobs, res, lanes)
    out = dict(zip(named, res))
    for name in ("all_empty", "one_empty", "no_parts"):
        assert not out[name].out.any(), name                 # zeros, no NaN
    assert out["no_parts"].cycles >= combine_cycles(0, d, G, lanes)
    nan = ((out["raw_bits"].out >> 23) & 0xFF) == 0xFF
    assert nan.any()                                         # the specials reached the output
    # a dominating part: the result is that part's own normalised output
    dom = named["dominant"]
    only = M.combine_partials([dom.parts[1]])
    assert np.array_equal(out["dominant"].out, M.combine_partials(dom.parts))
    assert np.array_equal(out["dominant"].out, only)
    assert np.array_equal(out["dominant_first"].out, only)


@pytest.mark.parametrize("pair", IDLE_BACKPRESSURE, ids=matrix_id)
def test_idle_backpressure_matrix(pair):
    """A short job sequence (K = 2 with an empty part, K = 0, K = 3, K = 1) under one
    (idle, backpressure) pair; bit-exact, drained; unstalled = the formula, stalled = slower."""
    rng = np.random.default_rng(11)
    jobs = matrix_jobs(rng)
    res = simulate_amaranth(jobs, 8, max_parts=3, idle=pair[0], backpressure=pair[1], seed=5)
    check(jobs, res, 8)
    total = sum(r.cycles for r in res)
    formula = sum(combine_cycles(j.K, 64, 2, 8) for j in jobs)
    assert total == formula if pair == ("none", "none") else total > formula


def matrix_jobs(rng, G=2, d=64, lanes=8):
    return [split_job(rng, G, d, lanes, [0, 0, 3]), CombineJob(G, d, []),
            split_job(rng, G, d, lanes, [0, 1, 3, 5]), split_job(rng, G, d, lanes, [0, 2])]


# ----------------------------------------------------------------------------------------------
# the checks can fail
# ----------------------------------------------------------------------------------------------
def test_wrong_result_fails_the_comparison():
    rng = np.random.default_rng(13)
    job = split_job(rng, 1, 64, 16, [0, 2, 4])
    res = simulate_amaranth([job], 16, max_parts=2)
    check([job], res, 16)
    o, m, l = job.parts[1]
    o = o.copy()
    o[0, 5] ^= 1 << 20                                           # one bit of one o value
    wrong = CombineJob(1, 64, [job.parts[0], (o, m, l)])
    with pytest.raises(AssertionError, match="words differ"):
        check([wrong], res, 16)


def test_undrained_and_misframed_are_reported():
    rng = np.random.default_rng(17)
    jobs = [split_job(rng, 1, 64, 16, [0, 2, 3]), split_job(rng, 1, 64, 16, [0, 3])]
    plan = plan_json(jobs, 16, max_parts=2)
    # a part whose last beat lacks `last` (and a stray `last` mid-part): flagged, data kept
    n0 = len(jobs[0].partial_beats(16)) // 2
    plan["partial"][n0 - 1] &= ~(1 << (32 * 16))
    plan["partial"][1] |= 1 << (32 * 16)
    res = simulate_amaranth(jobs, 16, max_parts=2, plan=plan)
    check(jobs, res, 16)
    assert [r.misframed for r in res] == [1, 0]
    # an extra partial beat nobody takes: the drained check fails
    plan = plan_json(jobs, 16, max_parts=2)
    plan["partial"].append(plan["partial"][-1])
    with pytest.raises(NotDrained, match="partial: beat"):
        simulate_amaranth(jobs, 16, max_parts=2, plan=plan)


# ----------------------------------------------------------------------------------------------
# Verilog
# ----------------------------------------------------------------------------------------------
def _cli(*args):
    return subprocess.run([sys.executable, "-m", "tricut.sim", *args], capture_output=True,
                          text=True)


def test_verilog_lint_clean(tmp_path):
    r = _cli("verilog", "tile-combine", "-o", str(tmp_path), "-p", "G=2", "-p", "lanes=4")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "clean" in r.stdout and (tmp_path / "tile_combine.v").exists()
    from tricut.sim.harness.verilog_out import lint
    clean, messages = lint(tmp_path / "tile_combine.v", "tile_combine", waivers=())
    assert not clean and "%Warning-" in messages        # the waivers are what makes it clean
    r = _cli("verilog", "tile-combine", "-o", str(tmp_path), "-p", "max_parts=0")
    assert r.returncode == 2 and "max_parts must be an int in 1..4096, got 0" in r.stderr


def test_verilator_idle_backpressure_matrix():
    """The matrix jobs on Verilator: one build, one cocotb test for the nine pairs."""
    rng = np.random.default_rng(11)
    jobs = matrix_jobs(rng)
    runs = simulate_verilator_matrix(jobs, 8, max_parts=3, seed=5)
    assert list(runs) == IDLE_BACKPRESSURE
    formula = sum(combine_cycles(j.K, 64, 2, 8) for j in jobs)
    for pair, res in runs.items():
        check(jobs, res, 8)
        total = sum(r.cycles for r in res)
        assert total == formula if pair == ("none", "none") else total > formula, pair
