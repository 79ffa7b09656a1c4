# amaranth: UnusedElaboratable=no
"""CDU front end in RTL (block address generation / prediction) against the policy model:
``FrontEndRTL`` == ``models/cdu.FrontEnd`` operation by operation, and the whole ``CDU``
(front end -> intake -> core) == the model transaction by transaction, for the access patterns x
policies (each pattern and policy in the suite; every pair in benchmarks/unit_matrices.py),
seeded random DSU descriptor streams, named edge cases and random idle/backpressure
on every stream (``random`` x ``random`` for the long runs; short vectors under every (idle,
backpressure) pair of ``streams.IDLE_BACKPRESSURE``), in Amaranth's simulator and on
Verilator (tests/cocotb/cdu_fe_equiv.py); every run ends with the drained check."""

import random
from pathlib import Path

import pytest

from tricut.models.cdu import SlotDesc, StepDesc, predictor_budget_bits
from tricut.rtl.cdu.core import COUNTERS
from tricut.rtl.cdu.frontend import FrontEndRTL, predictor_bits
from tricut.rtl.cdu.top import CDU
from tricut.sim.harness.cdu import (RtlMismatch, compare_ops, compare_rtl, op_tuple,
                                    run_frontend_rtl, run_rtl)
from tricut.sim.harness.streams import IDLE_BACKPRESSURE, matrix_id
from tricut.sim.harness import cdu_stimulus as B
from tricut.sim.harness.unit_matrices import MATRICES


#: the pattern x policy matrices (sim/harness/unit_matrices.py): the suite runs each pattern
#: once and each policy at least once, benchmarks/unit_matrices.py every pair
FE_RANDOM, WHOLE_RANDOM = MATRICES["cdu_frontend_random"], MATRICES["cdu_whole_random"]
FE_RESTORES = MATRICES["cdu_frontend_restores"]


@pytest.mark.parametrize("pattern,policy", FE_RANDOM.in_tests, ids=FE_RANDOM.ids())
def test_frontend_equals_model_random_descriptors(pattern, policy):
    FE_RANDOM.check(pattern, policy)


@pytest.mark.parametrize("pattern,kw,frames", [
    ("topk", dict(k=10, overlap=0.9), 24), ("topk", dict(k=6, overlap=0.7), 16),
    ("window", dict(window=100), 40), ("reread", dict(reread_tokens=300), 24),
])
def test_adaptive_predictor_tables_long_contexts(pattern, kw, frames):
    """Long contexts (200-2000 tokens): the 4-entry scatter table fills, saturates and
    replaces entries (topk), and the keep candidates exceed the budget (hash-thinned)."""
    seed = len(pattern) + frames
    descs = B.random_steps(seed, steps=7, max_batch=2, layers=2, p_empty=0, hint_change=0.05,
                           seq=(200, 2000))
    ops, front = B.fe_vectors(descs, pattern, "adaptive", pat=B.make_pattern(pattern, seed, **kw),
                              frames=frames, distance=2)
    compare_ops(ops, B.run_fe(front, seed=seed))


@pytest.mark.parametrize("pattern", B.PATTERNS)
def test_frontend_named_edge_cases(pattern):
    """seq_len crossing a 16-token block, a window smaller than a block (8 tokens) and a
    larger one, hint changes, an empty batch, a reused slot; no backpressure and heavy."""
    for policy in B.POLICIES:
        for win, pv in ((8, 1.0), (48, 0.3)):
            ops, front = B.fe_vectors(B.edge_steps(), pattern, policy,
                                      pat=B.make_pattern(pattern, 3, window=win))
            compare_ops(ops, B.run_fe(front, seed=win, p_valid=pv, p_ready=pv))
            fresh = [o for o in ops if o.kind == "W" and o.fresh]
            assert {(o.req, o.block) for o in fresh} >= {(0, 1), (1, 2)}


@pytest.mark.parametrize("pattern,policy", WHOLE_RANDOM.in_tests, ids=WHOLE_RANDOM.ids())
def test_whole_cdu_equals_model(pattern, policy):
    """Step descriptors in, txn/HBM/ready/counters out == model, with retried HBM errors."""
    WHOLE_RANDOM.check(pattern, policy)


MATRIX = dict(argnames="idle,backpressure", argvalues=IDLE_BACKPRESSURE,
              ids=[matrix_id(p) for p in IDLE_BACKPRESSURE])


@pytest.mark.parametrize(**MATRIX)
def test_frontend_idle_backpressure_matrix(idle, backpressure):
    """The named edge-case steps, topk (demand lists on their own stream) and adaptive,
    under every (idle, backpressure) pair of schedules: ops == model one by one."""
    ops, front = B.fe_vectors(B.edge_steps(), "topk", "adaptive",
                              pat=B.make_pattern("topk", 3, window=8))
    got = B.run_fe(front, seed=2, idle=idle, backpressure=backpressure)
    compare_ops(ops, got)


@pytest.mark.parametrize(**MATRIX)
def test_whole_cdu_idle_backpressure_matrix(idle, backpressure):
    """The whole CDU on a short random descriptor stream (topk, adaptive) with retried HBM
    errors under every (idle, backpressure) pair of schedules: == model txn by txn."""
    ops, front = B.fe_vectors(B.random_steps(400, steps=3, restores=0.5), "topk", "adaptive",
                              seed=4)
    assert front["lookahead"] < B.FE_PARAMS["units"]
    rng = random.Random(41)
    err = lambda tag, a: a < B.PARAMS["max_retries"] and rng.random() < 0.2  # noqa: E731
    got = run_rtl(None, params=B.PARAMS, seed=3, err=err, front=front, idle=idle,
                  backpressure=backpressure)
    compare_rtl(ops, got, **B.PARAMS)
    assert got["regs"] == [got["counters"][k] for k in COUNTERS]


@pytest.mark.parametrize("pattern,policy", FE_RESTORES.in_tests, ids=FE_RESTORES.ids())
def test_frontend_restores_equal_model(pattern, policy):
    FE_RESTORES.check(pattern, policy)


@pytest.mark.parametrize(**MATRIX)
def test_whole_cdu_restores_idle_backpressure_matrix(idle, backpressure):
    """The whole CDU on the restore steps (static, distance 4: S ops issued by the walk in
    the middle of a unit) and on random steps with restores, with retried HBM errors, under
    every (idle, backpressure) pair: == model transaction by transaction, ``restores``
    counted."""
    for descs, pattern in ((B.restore_steps(), "full"), (B.random_steps(600, steps=3,
                                                                        restores=0.8), "topk")):
        ops, front = B.fe_vectors(descs, pattern, "static" if pattern == "full" else "adaptive",
                                  seed=5)
        rng = random.Random(43)
        err = lambda tag, a: a < B.PARAMS["max_retries"] and rng.random() < 0.2  # noqa: E731
        got = run_rtl(None, params=B.PARAMS, seed=4, err=err, front=front, idle=idle,
                      backpressure=backpressure)
        core = compare_rtl(ops, got, **B.PARAMS)
        assert got["counters"]["restores"] == core.counters()["restores"] > 0
        assert got["regs"] == [got["counters"][k] for k in COUNTERS]


def test_restore_beat_outside_a_step_is_bad():
    """A restore beat before any header is a bad step beat: flagged, no S op."""
    descs = [StepDesc(0, (SlotDesc(0, 0, 20),), (0,))]
    ops, front = B.fe_vectors(descs, "full", "static")
    stray = dict(front["beats"][0], kind=B.KIND_RESTORE, req=1, layer=0, seq_len=40)
    got = run_frontend_rtl([stray] + front["beats"], [], front["config"], front["params"])
    assert got["bad_step"] and not any(o[0] == 3 for o in got["ops"])
    assert got["ops"] == [op_tuple(o) for o in ops]


def test_frontend_cycles_per_op():
    """No idle, no backpressure: one op per cycle inside a unit; per unit a fixed overhead
    (docs/cdu.md): static, 3 units of a 40-block context, distance 4."""
    descs = [StepDesc(0, (SlotDesc(0, 0, 640),), (0, 1, 2))]
    ops, front = B.fe_vectors(descs, "full", "static", distance=4)
    got = B.run_fe(front, p_valid=1, p_ready=1)
    compare_ops(ops, got)
    at = got["at"]
    # inside a unit's demand stream every cycle carries an op
    gaps = [b - a for a, b in zip(at, at[1:])]
    assert gaps.count(1) >= len(ops) - 3 * 4, gaps
    # + predictor-row clear after reset (4 slots x 8 layers) + 5 descriptor beats
    assert got["cycles"] <= len(ops) + 32 + 5 + 3 * 6 + 4, (got["cycles"], len(ops))


def test_overflow_and_bad_inputs_flagged_never_hang():
    # a 1-deep unit FIFO cannot hold the walker's lookahead: sticky overflow, still ends
    descs = B.random_steps(3, steps=3)
    ops, front = B.fe_vectors(descs, "full", "static", distance=6)
    assert front["lookahead"] >= 1
    front["params"] = dict(front["params"], units=1)
    got = B.run_fe(front)
    assert got["overflow"] and got["ops"]
    with pytest.raises(RtlMismatch):
        compare_ops(ops, got)
    # a slot beat before any header; a demand list that is not increasing
    descs = [StepDesc(0, (SlotDesc(0, 0, 100),), (0,))]
    ops, front = B.fe_vectors(descs, "topk", "static")
    beats = [dict(front["beats"][1])] + front["beats"]
    got = run_frontend_rtl(beats, [[3, 1, 6]], front["config"], front["params"])
    assert got["bad_step"] and got["bad_demand"] and not got["overflow"]


def test_drained_check_catches_a_demand_list_left_behind():
    """A demand list the front end never asks for stays on the ``demand`` stream: the run
    never drains and fails naming the stream and the beats left (the check can fail)."""
    descs = [StepDesc(0, (SlotDesc(0, 0, 100),), (0,))]
    ops, front = B.fe_vectors(descs, "topk", "static")
    compare_ops(ops, B.run_fe(front, idle="random", backpressure="random"))
    extra = dict(front, lists=front["lists"] + [[1, 2]])
    with pytest.raises(RtlMismatch, match=r"demand: (beat \d+ valid and never taken|"
                                          r"2 of \d+ beats not sent)"):
        B.run_fe(extra, idle="random", backpressure="random", timeout=3000)


def test_equivalence_check_can_fail():
    """A front end configured differently from the model (distance 3 vs 4) is caught."""
    ops, front = B.fe_vectors(B.random_steps(5), "window", "adaptive", distance=4)
    front["config"] = dict(front["config"], distance=3)
    with pytest.raises(RtlMismatch, match=r"^op \d+: RTL"):
        compare_ops(ops, B.run_fe(front))


@pytest.mark.parametrize("kw,msg", [
    (dict(entries=0), "entries must be an integer in 1..64, got 0"),
    (dict(units=300), "units must be an integer in 1..256, got 300"),
    (dict(slot_bits=True), "slot_bits must be an integer in 1..8, got True"),
])
def test_frontend_parameter_errors(kw, msg):
    with pytest.raises(ValueError, match=msg):
        FrontEndRTL(**kw)


def test_predictor_budget_bits():
    # per (slot, layer): seen + a + w (block_bits + 1 each) + entries x (block + 2 bits)
    assert predictor_bits(4, 8, 4, 10) == 4 * 8 * (1 + 22 + 4 * 12) + 48
    fe = FrontEndRTL(slot_bits=2, entries=4)
    assert fe.budget_bits() == predictor_bits(4, 8, 4, 10)
    # at the model's documented size the RTL row is 1 + 2 bits more than the model formula
    assert predictor_bits(64, 32, 64, 14) - predictor_budget_bits(64, 32, 64, 14) == 64 * 32 * 3


def test_cocotb_verilator_front_end():
    """The same kind of vectors through the generated Verilog of the whole CDU on Verilator,
    one cocotb test running the whole idle x backpressure matrix."""
    from tricut.sim.harness.cocotb_run import run_cocotb
    assert run_cocotb(CDU(**B.PARAMS, **B.FE_PARAMS), "cdu_fe", "cdu_fe_equiv",
                      Path(__file__).parent / "cocotb") == 3


def test_whole_cdu_verilog_lint_clean(tmp_path):
    from tricut.sim.harness.verilog_out import lint, write_verilog
    src = write_verilog(CDU(**B.PARAMS, **B.FE_PARAMS), "cdu_fe", tmp_path)
    clean, messages = lint(src, "cdu_fe")
    assert clean, messages[:3000]
