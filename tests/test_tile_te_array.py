"""TE array of the decode tile (``rtl/tile/te_array.py``, docs/tile.md).

Each job's ``out`` beats == ``models.te.te_decode`` on that job's inputs bit for bit (tag on
top) and its status word == the model's, whatever engine ran it; jobs leave in job order
(the array's rule); random job mixes (n = 0, partial and not, early end, too long) on 1, 2
and 4 engines, bf16/fp8/nvfp4 (one array per K/V format, as the TE engine is built); every
job's start and end cycle equal to ``te_array_schedule`` when unstalled; the closed formula
for J equal jobs; the whole idle x backpressure matrix on a short job list; every run ends
with the drained check. The checks can fail: a wrong result, a swapped order, a corrupted
input and an extra beat are caught.
"""

from __future__ import annotations

import gc
import warnings

import numpy as np
import pytest

from tricut.models import te as M
from tricut.rtl.te.layouts import desc_layout, out_layout, status_layout
from tricut.rtl.tile.array_layouts import (array_job_layout, pack_job, split_tag,
                                           tagged_out_layout, tagged_status_layout, tag_word)
from tricut.rtl.tile.te_array import TEArray, te_array_cycles, te_array_schedule
from tricut.sim.harness.streams import IDLE_BACKPRESSURE, NotDrained, matrix_id
from tricut.sim.harness.te_array import (JobOut, check_results, plan_json, random_job,
                                         simulate_amaranth, unstalled_schedule)


def jobs_of(rng, spec, G, d, lanes, kv_dtype, tag0=0x5A00):
    """``spec``: ``(n, partial)`` or ``(n, partial, n_announced)`` per job."""
    return [random_job(rng, tag0 + i, G, d, lanes, kv_dtype, s[0], s[1],
                       s[2] if len(s) > 2 else None) for i, s in enumerate(spec)]


def check_unstalled(jobs, res, engines):
    """Every job's start (job beat) and end (last out beat) cycle == the exact schedule."""
    sched = unstalled_schedule(jobs, engines)
    assert [(r.start, r.end) for r in res] == sched


# ----------------------------------------------------------------------------------------------
# parameters and layouts
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kw,needle", [
    (dict(engines=0), "engines must be an int in 1..16, got 0"),
    (dict(engines=17), "engines must be an int in 1..16, got 17"),
    (dict(engines=2.0), "engines must be an int in 1..16, got 2.0"),
    (dict(engines=True), "engines must be an int in 1..16, got True"),
    (dict(head_dim=96), "head_dim must be one of (64, 128, 256), got 96"),
    (dict(G=0), "G must be an int in 1..16, got 0"),
    (dict(lanes=3), "lanes must be one of (2, 4, 8, 16), got 3"),
    (dict(kv_dtype="fp16"), "kv_dtype must be one of ('bf16', 'fp8', 'nvfp4'), got 'fp16'"),
    (dict(tag_bits=0), "tag_bits must be an int in 1..32, got 0"),
    (dict(tag_bits=33), "tag_bits must be an int in 1..32, got 33"),
])
def test_bad_parameters_rejected_before_construction(kw, needle):
    with warnings.catch_warnings():
        warnings.simplefilter("error")          # no UnusedElaboratable from a half-built unit
        with pytest.raises(ValueError) as e:
            TEArray(**kw)
        gc.collect()
    assert needle in str(e.value)


def test_tagged_payloads_keep_the_te_payload_in_the_low_bits():
    for tb in (1, 16, 32):
        assert array_job_layout(tb).size == desc_layout().size + tb
        assert tagged_out_layout(8, tb).size == out_layout(8).size + tb
        assert tagged_status_layout(tb).size == status_layout().size + tb
    assert array_job_layout(16).members["desc"] == desc_layout()
    w = tag_word(0x123, 0xBEEF, out_layout(4).size, 16)
    assert split_tag(w, out_layout(4).size) == (0x123, 0xBEEF)
    with pytest.raises(ValueError, match="tag must fit in 4 bits, got 16"):
        pack_job(0, 16, 4)
    with pytest.raises(ValueError, match="payload word must fit"):
        tag_word(1 << 20, 0, 20, 4)
    with pytest.raises(ValueError, match="J >= 1 and n >= 1"):
        te_array_cycles(2, 0, 64, 1, 16, 2)


# ----------------------------------------------------------------------------------------------
# RTL == golden, order, cycles
# ----------------------------------------------------------------------------------------------
MIX = [(2, False), (0, False), (1, True), (0, True), (3, False), (1, True), (2, True)]


@pytest.mark.parametrize("engines,kv_dtype,G,d,lanes", [
    (1, "fp8", 2, 64, 16), (2, "bf16", 1, 128, 16), (4, "nvfp4", 2, 64, 16)])
def test_random_jobs_bit_exact_in_order_and_exact_cycles(engines, kv_dtype, G, d, lanes):
    """A seeded mix of lengths (n = 0..3), partial and non-partial, unstalled: every job
    bit-exact with its status, in job order, and every job's start and end cycle exactly
    ``te_array_schedule``."""
    rng = np.random.default_rng([engines, G, d, lanes])
    order = rng.permutation(len(MIX))
    jobs = jobs_of(rng, [MIX[i] for i in order], G, d, lanes, kv_dtype)
    res = simulate_amaranth(jobs, engines)
    check_results(jobs, res)
    check_unstalled(jobs, res, engines)
    st = [j.golden().status for j in jobs]
    assert any(s["empty"] for s in st) and any(j.vec.partial for j in jobs)


def test_early_end_and_too_long_under_stalls():
    """Streams framed by ``last`` that differ from the announced ``n`` (early end, too long,
    whose drain follows the output) between normal jobs, random idle and backpressure."""
    rng = np.random.default_rng(5)
    spec = [(2, False), (1, False, 3), (3, True, 1), (0, False), (3, False, 2), (1, True)]
    jobs = jobs_of(rng, spec, 1, 64, 16, "bf16")
    res = simulate_amaranth(jobs, 2, idle="random", backpressure="random", seed=9)
    check_results(jobs, res)
    st = [j.golden().status for j in jobs]
    assert st[1]["early_end"] and st[2]["too_long"] and st[4]["too_long"]


@pytest.mark.parametrize("engines", [1, 2, 4])
def test_equal_jobs_cycle_formula(engines):
    """J = 4 equal jobs of n = 3 tokens, unstalled: total cycles (first job beat to last out
    beat, inclusive) == ``te_array_cycles``: ``J*(I+O)`` on one engine (= J single TE steps,
    ``te_cycles``), ``J*I + O`` on two or more, ``I = 1 + G*Dk + 3nG*Dk``, ``O = G*Dk``.
    The serial input stream is the bottleneck: only the output phase overlaps, so 2 and 4
    engines take exactly the same time."""
    rng = np.random.default_rng(21)
    J, n, G, d, lanes = 4, 3, 1, 64, 16
    jobs = jobs_of(rng, [(n, False)] * J, G, d, lanes, "bf16")
    res = simulate_amaranth(jobs, engines)
    check_results(jobs, res)
    check_unstalled(jobs, res, engines)
    total = res[-1].end + 1
    assert total == te_array_cycles(J, n, d, G, lanes, engines)
    dk = d // lanes
    I, O = 1 + G * dk + 3 * n * G * dk, G * dk
    if engines == 1:
        assert total == J * M.te_cycles(n, d, G, lanes) == J * (I + O)
    else:
        assert total == J * I + O
        # the speed-up over one engine is (I + O) / I at most, far from `engines`
        assert J * (I + O) / total < (I + O) / I < 1.1


@pytest.mark.parametrize("pair", IDLE_BACKPRESSURE, ids=matrix_id)
def test_idle_backpressure_matrix(pair):
    """A short job list (n = 2, n = 0 partial, n = 1 partial, n = 1) on 2 engines under one
    (idle, backpressure) pair: bit-exact, in order, drained; unstalled = the exact
    schedule, stalled = later than that."""
    rng = np.random.default_rng(11)
    jobs = jobs_of(rng, [(2, False), (0, True), (1, True), (1, False)], 1, 64, 16, "bf16")
    res = simulate_amaranth(jobs, 2, idle=pair[0], backpressure=pair[1], seed=5)
    check_results(jobs, res)
    sched = unstalled_schedule(jobs, 2)
    if pair == ("none", "none"):
        assert [(r.start, r.end) for r in res] == sched
    else:
        assert res[-1].end - res[0].start > sched[-1][1]


# ----------------------------------------------------------------------------------------------
# the checks can fail
# ----------------------------------------------------------------------------------------------
def test_wrong_result_and_wrong_order_are_caught():
    rng = np.random.default_rng(13)
    jobs = jobs_of(rng, [(1, False), (1, True), (0, False)], 1, 64, 16, "fp8")
    res = simulate_amaranth(jobs, 2)
    check_results(jobs, res)
    # one bit of one out word of the RTL's result
    bad = [JobOut(r.tag, list(r.beats), r.status, r.start, r.end) for r in res]
    bad[1].beats[2] ^= 1 << 7
    with pytest.raises(AssertionError, match="job 1 .* out beat 2 differs from the golden TE"):
        check_results(jobs, bad)
    # the same results in another order
    with pytest.raises(AssertionError, match="jobs must leave in job order"):
        check_results(jobs, [res[1], res[0], res[2]])
    # a status flag
    bad = [JobOut(r.tag, r.beats, r.status ^ 1, r.start, r.end) for r in res]
    with pytest.raises(AssertionError, match="status"):
        check_results(jobs, bad)
    # one bit of one V code on the kv stream: the RTL computes something else
    plan = plan_json(jobs)
    plan["kv"][5] ^= 1 << 2                 # job 0 has n = 1: p = 1, out = V
    with pytest.raises(AssertionError, match="differs from the golden TE"):
        check_results(jobs, simulate_amaranth(jobs, 2, plan=plan))
    # an extra kv beat nobody takes: the drained check fails
    plan = plan_json(jobs)
    plan["kv"].append(plan["kv"][-1])
    with pytest.raises(NotDrained, match="kv: beat"):
        simulate_amaranth(jobs, 2, plan=plan)


def test_schedule_recurrence_by_hand():
    """The recurrence on a small case worked by hand (head_dim 64, lanes 16, G 1: Q = 4)."""
    # job 0: n = 1 -> I = 1 + 4 + 12 = 17, O = 4: s = 0, f = 20
    # job 1: n = 0 -> I = 5, O = 4: s = 17, out from max(22, 21) = 22, f = 25
    # job 2: n = 1, 2 engines: s = max(17 + 5, f_0 + 1 = 21) = 22, f = 22 + 17 + 3 = 42
    assert te_array_schedule([(1, False), (0, False), (1, False)], 64, 1, 16, 2) == \
        [(0, 20), (17, 25), (22, 42)]
    # one engine: each job starts the cycle after the previous one's last out beat
    assert te_array_schedule([(1, False), (0, False)], 64, 1, 16, 1) == [(0, 20), (21, 29)]


# ----------------------------------------------------------------------------------------------
# Verilator
# ----------------------------------------------------------------------------------------------
def test_verilator_idle_backpressure_matrix():
    """The matrix job list on Verilator: one build, one cocotb test for the nine pairs."""
    from tricut.sim.harness.te_array import simulate_verilator_matrix

    rng = np.random.default_rng(11)
    jobs = jobs_of(rng, [(2, False), (0, True), (1, True), (1, False)], 1, 64, 16, "bf16")
    runs = simulate_verilator_matrix(jobs, 2, seed=5)
    assert list(runs) == IDLE_BACKPRESSURE
    sched = unstalled_schedule(jobs, 2)
    for pair, res in runs.items():
        check_results(jobs, res)
        if pair == ("none", "none"):
            assert [(r.start, r.end) for r in res] == sched
        else:
            assert res[-1].end - res[0].start > sched[-1][1], pair


def test_verilog_lint_clean(tmp_path):
    """Verilog of a 2-engine array lints clean with the documented waivers (and warns without)."""
    from tricut.sim.harness.verilog_out import lint, write_verilog

    dut = TEArray(engines=2, head_dim=64, G=1, lanes=2, kv_dtype="fp8", tag_bits=8)
    path = write_verilog(dut, "tile_te_array", tmp_path)
    clean, messages = lint(path, "tile_te_array")
    assert clean, messages
    clean, messages = lint(path, "tile_te_array", waivers=())
    assert not clean and "%Warning-" in messages
