"""TE array of the decode tile (``rtl/tile/te_array.py``, docs/tile/te-array.md).

Each job's ``out`` beats == ``models.te.te_decode`` on that job's inputs bit for bit (tag on
top) and its status word == the model's, whatever engine ran it; jobs leave in job order
(the array's rule); random job mixes (n = 0, partial and not, early end, too long) on 1, 2
and 4 engines, bf16/fp8/nvfp4 (one array per K/V format, as the TE engine is built); every
job's start and end cycle equal to ``te_array_schedule`` when unstalled; the closed formula
for J equal jobs; the whole idle x backpressure matrix on a short job list; every run ends
with the drained check. The checks can fail: a wrong result, a swapped order, a corrupted
input and an extra beat are caught.

Routed K/V (``routed_kv=True``): the same golden comparison with the ``kv`` beats interleaved
token by token across the engines (round-robin, reverse, random, serial orders; n = 0,
partial, early end, too long) under random idle and backpressure; unstalled schedules equal
to ``te_array_routed_schedule``; 4 equal jobs on 4 engines in about a quarter of the serial
array's cycles; a beat routed to the wrong engine is caught; a producer breaking rule R1
deadlocks.
"""

from __future__ import annotations

import gc
import warnings

import numpy as np
import pytest
from amaranth.hdl import UnusedElaboratable

from tricut.models import te as M
from tricut.models.te_array_timing import (te_array_cycles, te_array_routed_cycles,
                                       te_array_routed_schedule, te_array_schedule)
from tricut.rtl.te.layouts import desc_layout, out_layout, status_layout
from tricut.rtl.te.layouts import kv_layout
from tricut.rtl.tile.array_layouts import (array_job_layout, engine_bits, pack_job,
                                           pack_routed_kv, routed_kv_layout, split_tag,
                                           tagged_out_layout, tagged_status_layout, tag_word)
from tricut.rtl.tile.te_array import TEArray
from tricut.sim.harness.streams import IDLE_BACKPRESSURE, NotDrained, matrix_id
from tricut.sim.harness.te_array import (JobOut, check_results, plan_json, random_job,
                                         routed_kv_beats, simulate_amaranth,
                                         unstalled_routed_schedule, unstalled_schedule)


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
    (dict(lanes=3), "lanes must be one of (2, 4, 8, 16, 32), got 3"),
    (dict(engine="fast"), "engine must be one of ('serial', 'split', 'pipelined'), got 'fast'"),
    (dict(engine=None), "engine must be one of ('serial', 'split', 'pipelined'), got None"),
    (dict(kv_dtype="fp16"), "kv_dtype must be one of ('bf16', 'fp8', 'nvfp4'), got 'fp16'"),
    (dict(tag_bits=0), "tag_bits must be an int in 1..32, got 0"),
    (dict(tag_bits=33), "tag_bits must be an int in 1..32, got 33"),
    (dict(routed_kv=1), "routed_kv must be True or False, got 1"),
    (dict(routed_kv=True, kv_fifo_depth=0),
     "kv_fifo_depth must be None or an int in 1..4096, got 0"),
    (dict(routed_kv=True, kv_fifo_depth=8.0),
     "kv_fifo_depth must be None or an int in 1..4096, got 8.0"),
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


#: the pairs this job list runs under in Amaranth's simulator; the same list under all nine
#: pairs, the same design: test_verilator_idle_backpressure_matrix
AMARANTH_PAIRS = [("none", "none"), ("random", "periodic"), ("periodic", "random")]


@pytest.mark.parametrize("pair", AMARANTH_PAIRS, ids=matrix_id)
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


# ----------------------------------------------------------------------------------------------
# routed K/V (routed_kv=True)
# ----------------------------------------------------------------------------------------------
def test_routed_kv_payload_is_the_te_kv_payload_with_the_engine_on_top():
    for lanes, dt in ((16, "bf16"), (8, "fp8"), (2, "nvfp4")):
        for E, eb in ((1, 1), (2, 1), (3, 2), (4, 2), (5, 3), (16, 4)):
            lay = routed_kv_layout(lanes, dt, E)
            assert engine_bits(E) == eb
            assert lay.size == kv_layout(lanes, dt).size + eb
            assert lay.members["kv"] == kv_layout(lanes, dt)
    low = kv_layout(16, "fp8").size
    assert split_tag(pack_routed_kv(0x1234, 2, 16, "fp8", 4), low) == (0x1234, 2)
    with pytest.raises(ValueError, match="engine must be in 0..3, got 4"):
        pack_routed_kv(0, 4, 16, "fp8", 4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnusedElaboratable)         # built to read its ports
        arr = TEArray(engines=3, head_dim=64, G=1, lanes=16, kv_dtype="fp8", routed_kv=True)
        assert arr.kv.payload.shape() == routed_kv_layout(16, "fp8", 3)
        assert arr.kv_fifo_depth == 2 * 2 * 4                      # two tokens of 2*Dk beats
        ser = TEArray(engines=2, head_dim=64, G=1, lanes=16)
        assert ser.kv.payload.shape() == kv_layout(16, "bf16")     # serial mode unchanged
        del arr, ser
        gc.collect()


def test_routed_kv_orders_keep_rule_r1():
    """The test producer's orders: every beat once, token by token, each job's beats in
    order with its engine, and no beat of job j before the last beat of every job <= j - E."""
    rng = np.random.default_rng(3)
    E, dk = 3, 4
    jobs = jobs_of(rng, [(2, False), (0, False), (3, True), (1, False), (2, False, 1),
                         (1, True, 3), (4, False)], 1, 64, 16, "fp8")
    low = kv_layout(16, "fp8").size
    for order in ("round_robin", "reverse", "random", "serial"):
        words = routed_kv_beats(jobs, E, order, seed=4)
        per_job = {k: [] for k in range(len(jobs))}
        owner = []
        # rebuild each job's stream: among the jobs in flight (at most E consecutive ones)
        # the engine field names the job
        i, ptr = 0, [0] * len(jobs)
        while i < len(words):
            left = [k for k in range(len(jobs)) if ptr[k] < len(jobs[k].vec.kv_beats())]
            fly = [k for k in left if k < left[0] + E]
            w, eng = split_tag(words[i], low)
            k = next(k for k in fly if k % E == eng and
                     jobs[k].vec.kv_beats()[ptr[k]] == w)
            m = min(2 * dk, len(jobs[k].vec.kv_beats()) - ptr[k])
            for x in words[i:i + m]:
                assert split_tag(x, low)[1] == k % E
            per_job[k] += [split_tag(x, low)[0] for x in words[i:i + m]]
            owner += [k] * m
            ptr[k] += m
            i += m
        assert all(per_job[k] == j.vec.kv_beats() for k, j in enumerate(jobs)), order
        for a, ka in enumerate(owner):                  # R1
            assert all(kb > ka - E for kb in owner[a:]), order
        # jobs 0..2 in flight (1 has n = 0); job 3 only once job 0 has sent its last beat
        if order == "round_robin":
            assert owner[:5 * 2 * dk:2 * dk] == [0, 2, 0, 2, 3]
        if order == "reverse":
            assert owner[:5 * 2 * dk:2 * dk] == [2, 0, 2, 0, 4]


@pytest.mark.parametrize("engines,kv_dtype,G,order", [
    (1, "fp8", 2, "round_robin"), (2, "bf16", 2, "round_robin"), (4, "nvfp4", 4, "reverse")])
def test_routed_random_jobs_bit_exact_in_order_and_exact_cycles(engines, kv_dtype, G, order):
    """The job mix (n = 0..3, partial and not) on a routed array, ``kv`` interleaved token by
    token over the jobs in flight, unstalled, ``engines <= 1.5*G`` (the kv stream keeps
    up): bit-exact, in order, and every job's start and end cycle exactly
    ``te_array_routed_schedule`` (one engine: the serial schedule)."""
    rng = np.random.default_rng([engines, G, 7])
    order_ = rng.permutation(len(MIX))
    jobs = jobs_of(rng, [MIX[i] for i in order_], G, 64, 16, kv_dtype)
    res = simulate_amaranth(jobs, engines, routed_kv=True, kv_order=order)
    check_results(jobs, res)
    assert [(r.start, r.end) for r in res] == unstalled_routed_schedule(jobs, engines)
    if engines == 1:
        assert unstalled_routed_schedule(jobs, 1) == unstalled_schedule(jobs, 1)
    else:
        assert res[-1].end < unstalled_schedule(jobs, engines)[-1][1]


@pytest.mark.parametrize("engines,kv_dtype,G,order,idle,bp,depth", [
    (1, "bf16", 2, "reverse", "random", "random", None),
    (2, "fp8", 1, "random", "random", "random", None),
    (2, "nvfp4", 2, "round_robin", "periodic", "random", 1),
    (4, "bf16", 1, "random", "random", "periodic", None),
    (4, "fp8", 2, "serial", "random", "random", 3),
])
def test_routed_under_idle_and_backpressure(engines, kv_dtype, G, order, idle, bp, depth):
    """Random idle on ``job``/``q``/``kv`` and backpressure on ``out``/``status``, K/V
    interleaved in several orders, FIFOs from one beat to two tokens: bit-exact, in order,
    drained; stalled runs are later than the unstalled schedule."""
    rng = np.random.default_rng([engines, G, 17])
    spec = [(2, False), (0, True), (3, False), (1, True), (0, False), (2, True), (1, False)]
    jobs = jobs_of(rng, spec, G, 64, 16, kv_dtype)
    res = simulate_amaranth(jobs, engines, idle=idle, backpressure=bp, seed=engines + G,
                            routed_kv=True, kv_order=order, kv_fifo_depth=depth)
    check_results(jobs, res)
    assert res[-1].end - res[0].start > unstalled_routed_schedule(jobs, engines)[-1][1]


def test_routed_early_end_and_too_long_under_stalls():
    """Streams framed by ``last`` that differ from the announced ``n`` on a routed array: the
    engine takes its FIFO through ``last`` exactly as a serial stream (early end, too long
    drained), the next job's beats behind them untouched."""
    rng = np.random.default_rng(5)
    spec = [(2, False), (1, False, 3), (3, True, 1), (0, False), (3, False, 2), (1, True)]
    jobs = jobs_of(rng, spec, 1, 64, 16, "bf16")
    res = simulate_amaranth(jobs, 2, idle="random", backpressure="random", seed=9,
                            routed_kv=True, kv_order="random")
    check_results(jobs, res)
    st = [j.golden().status for j in jobs]
    assert st[1]["early_end"] and st[2]["too_long"] and st[4]["too_long"]


def test_routed_engines_overlap():
    """4 equal jobs (n = 8, head_dim 64, G 4, lanes 16) on 4 engines, ``kv`` round-robin
    token by token, unstalled: total cycles == ``te_array_routed_cycles`` ==
    ``3*(1 + G*Dk) + I + O`` (the dispatch stagger plus one job), 0.29 of the serial array's
    ``J*I + O`` (``te_array_cycles``, exact by ``test_equal_jobs_cycle_formula``) and close
    to a quarter of one engine's ``J*(I + O)``."""
    rng = np.random.default_rng(23)
    J, n, G, d, lanes, E = 4, 8, 4, 64, 16, 4
    jobs = jobs_of(rng, [(n, False)] * J, G, d, lanes, "bf16")
    res = simulate_amaranth(jobs, E, routed_kv=True)
    check_results(jobs, res)
    total = res[-1].end + 1
    q = G * (d // lanes)
    I, O = 1 + q + 3 * n * q, q
    assert total == te_array_routed_cycles(J, n, d, G, lanes, E) == 3 * (1 + q) + I + O == 468
    serial = te_array_cycles(J, n, d, G, lanes, E)
    assert serial == J * I + O == 1620
    assert total / serial < 0.3
    assert total / (J * (I + O)) < 0.29               # 1/4 + the dispatch stagger
    # every engine busy at once: the jobs' compute intervals all overlap
    assert max(r.start for r in res) < min(r.end for r in res) - O * J


def test_routed_kv_stream_bound():
    """More engines than the ``kv`` stream can feed (4 engines, G = 1: they would take
    ``4*2*Dk`` beats per ``3*Dk`` cycles): the routed schedule is a lower bound, and the
    run takes at least one cycle per ``kv`` beat."""
    rng = np.random.default_rng(29)
    jobs = jobs_of(rng, [(4, False)] * 4, 1, 64, 16, "bf16")
    res = simulate_amaranth(jobs, 4, routed_kv=True)
    check_results(jobs, res)
    total = res[-1].end + 1
    assert total > te_array_routed_cycles(4, 4, 64, 1, 16, 4)
    assert total > 4 * 4 * 2 * 4                       # kv beats


def test_routed_schedule_by_hand_and_closed_form():
    """The routed recurrence on a small case worked by hand, and the closed form for equal
    jobs against it (head_dim 64, lanes 16: Dk = 4)."""
    # G 1: P = 1 + 4 = 5, n = 1: I = 17, O = 4; n = 0: I = 5
    # job 0: s = 0, f = 20; job 1 (n = 0): s = 5, out from max(10, 21) = 21, f = 24;
    # job 2: s = max(10, f_0 + 1 = 21) = 21, f = 21 + 17 + 3 = 41
    assert te_array_routed_schedule([(1, False), (0, False), (1, False)], 64, 1, 16, 2) == \
        [(0, 20), (5, 24), (21, 41)]
    for E in (1, 2, 3, 4, 8):
        for G in (1, 2, 4):
            for n in (0, 1, 3, 20):
                for partial in (False, True):
                    for J in (1, 2, 5, 9):
                        rec = te_array_routed_schedule([(n, partial)] * J, 64, G, 16, E)
                        assert te_array_routed_cycles(J, n, 64, G, 16, E, partial) == \
                            rec[-1][1] + 1, (E, G, n, partial, J)
    with pytest.raises(ValueError, match="J >= 1 and n >= 0"):
        te_array_routed_cycles(0, 1, 64, 1, 16, 2)


def test_routed_wrong_engine_is_caught():
    """One K beat of job 0 routed to engine 1 instead of 0: job 0 misses it (early end at
    the displaced ``last``: zeros) and job 1 gets a foreign beat; the golden comparison
    fails."""
    rng = np.random.default_rng(31)
    jobs = jobs_of(rng, [(2, False), (2, False)], 1, 64, 16, "bf16")
    plan = plan_json(jobs, routed_engines=2)
    check_results(jobs, simulate_amaranth(jobs, 2, routed_kv=True, plan=plan))
    low = kv_layout(16, "bf16").size
    assert split_tag(plan["kv"][1], low)[1] == 0
    plan["kv"][1] ^= 1 << low                  # engine 0 -> 1
    with pytest.raises(AssertionError, match="job 0 .* differs from the golden TE"):
        check_results(jobs, simulate_amaranth(jobs, 2, routed_kv=True, plan=plan))


def test_routed_rule_r1_broken_deadlocks():
    """Rule R1 is needed: with one-token FIFOs, a producer that sends job 3's two tokens
    (engine 1's next job) before job 0's beats fills FIFO 1 with a job that cannot start
    (engine 1 waits for job 1's output, which waits for job 0's, which waits for job 0's
    K/V behind job 3's): the array hangs. The same beats in an R1 order run through."""
    rng = np.random.default_rng(37)
    jobs = jobs_of(rng, [(1, False), (1, False), (1, False), (2, False)], 1, 64, 16, "fp8")
    tok = 2 * 4

    def toks(k):
        w = [pack_routed_kv(x, k % 2, 16, "fp8", 2) for x in jobs[k].vec.kv_beats()]
        return [w[i:i + tok] for i in range(0, len(w), tok)]

    t = {k: toks(k) for k in range(4)}
    plan = plan_json(jobs, routed_engines=2)
    plan["kv"] = t[1][0] + t[3][0] + t[3][1] + t[0][0] + t[2][0]
    with pytest.raises(TimeoutError, match="TE array hung"):
        simulate_amaranth(jobs, 2, routed_kv=True, kv_fifo_depth=tok, plan=plan)
    plan["kv"] = t[1][0] + t[0][0] + t[3][0] + t[2][0] + t[3][1]        # R1 holds
    check_results(jobs, simulate_amaranth(jobs, 2, routed_kv=True, kv_fifo_depth=tok,
                                          plan=plan))


def test_routed_verilog_lint_clean(tmp_path):
    """Verilog of a 3-engine routed array (an engine field with an out-of-range value) lints
    clean with the documented waivers."""
    from tricut.sim.harness.verilog_out import lint, write_verilog

    dut = TEArray(engines=3, head_dim=64, G=1, lanes=2, kv_dtype="fp8", tag_bits=8,
                  routed_kv=True)
    path = write_verilog(dut, "tile_te_array_routed", tmp_path)
    clean, messages = lint(path, "tile_te_array_routed")
    assert clean, messages


def test_routed_out_of_range_engine_is_dropped():
    """3 engines (a 2-bit ``engine`` field): a beat for engine 3 is taken and dropped, the
    jobs around it bit-exact and drained."""
    rng = np.random.default_rng(41)
    jobs = jobs_of(rng, [(2, False), (1, True), (0, False), (2, False)], 2, 64, 16, "fp8")
    plan = plan_json(jobs, routed_engines=3, idle="random", seed=3)
    low = kv_layout(16, "fp8").size
    stray = tag_word(split_tag(plan["kv"][3], low)[0], 3, low, 2)
    plan["kv"][5:5] = [stray, stray]
    res = simulate_amaranth(jobs, 3, routed_kv=True, plan=plan)
    check_results(jobs, res)
