"""The units' long equivalence matrices (TE, CDU, DSU): each a list of cases and one check
per case that raises ``AssertionError`` on any mismatch with the golden model (or with the
fast model's cycles). The test suite runs each matrix's ``in_tests`` cases -- the small ones, one of each
kind the matrix varies; ``benchmarks/unit_matrices.py`` runs every case and writes the table
in ``docs/unit-matrices.md``. A case moved out of the suite is still run, by that script.

The random stimulus of the DSU matrices (requests, faults, sessions) lives here too, so
that the tests' other cases draw it the same way."""

from __future__ import annotations

import dataclasses
import random
from typing import Callable

import numpy as np

from ...models import te as M
from ...models.config import KV_DTYPES
from ...models.dsu import RequestSpec, Session, SessionTurn
from .streams import IDLE_BACKPRESSURE, matrix_id

__all__ = ["Matrix", "MATRICES", "random_requests", "random_faults", "random_sessions",
           "check_sessions_result"]


@dataclasses.dataclass(frozen=True)
class Matrix:
    """``cases``: tuples of the check's arguments; ``in_tests``: the cases ``test`` runs."""
    name: str
    test: str
    what: str
    cases: tuple
    in_tests: tuple
    check: Callable
    case_id: Callable

    def __post_init__(self):
        if not self.in_tests or not set(self.in_tests) <= set(self.cases):
            raise ValueError(f"matrix {self.name}: in_tests must be a non-empty subset of cases")

    def ids(self, cases=None):
        return [self.case_id(c) for c in (self.in_tests if cases is None else cases)]


# -- TE: the two-array engines (split, pipelined) ----------------------------------------------
#: the two-array engines (the same arithmetic; pipelined adds registered stages)
TWO_ARRAY_ENGINES = ("split", "pipelined")
SPLIT_SHAPES = (("bf16", 1, 64, 4), ("fp8", 4, 64, 8), ("nvfp4", 4, 64, 16),
                ("bf16", 7, 128, 32), ("fp8", 8, 128, 32), ("nvfp4", 2, 128, 32),
                ("bf16", 3, 256, 32), ("fp8", 1, 64, 32))


def _shape_id(shape):
    kv_dtype, G, d, lanes = shape
    return f"{kv_dtype}-g{G}-d{d}-l{lanes}"


def split_engine_random_and_rising(engine, shape):
    """Unstalled: cycles equal ``te_cycles(engine=...)`` on random and rising-maximum inputs;
    then the same steps under random idle and backpressure: still bit-exact."""
    from .te import make_vector, rising_max_inputs, simulate_amaranth
    from .te_stimulus import check_split, on_engine, random_vector
    kv_dtype, G, d, lanes = shape
    seed = SPLIT_SHAPES.index(shape)
    rng = np.random.default_rng(100 + seed)
    n = 3 if G * d // lanes > 64 else 5
    vecs = on_engine([random_vector(rng, kv_dtype, G, d, lanes, n),
                      make_vector(*rising_max_inputs(rng, G, d, n), kv_dtype, lanes=lanes)],
                     engine)
    res = simulate_amaranth(vecs)
    check_split(vecs, res, check_cycles=True)
    assert res[0].cycles == res[1].cycles
    assert res[1].v_rescale == G * (n - 1) * (d // lanes)
    res = simulate_amaranth(vecs, idle=0.3, backpressure=0.3, seed=seed)
    check_split(vecs, res)


def split_engine_edge_cases(kv_dtype, engine):
    """Every edge case back to back under idle and backpressure (bf16; fp8/nvfp4 the ones
    whose arithmetic depends on the dtype): bit-exact, each with its status; unstalled, the
    cycle formula on the early ends and the empty steps too."""
    from .te import simulate_amaranth
    from .te_stimulus import EDGE_NAMES, EDGE_SUBSET, check_split, edge_steps, on_engine
    rng = np.random.default_rng(2000 + M.KV_CODE_BITS[kv_dtype])
    G, d, L = 2, 64, 16
    names = EDGE_NAMES if kv_dtype == "bf16" else EDGE_SUBSET
    vecs = on_engine(edge_steps(rng, kv_dtype, G, d, L, only=names), engine)
    res = simulate_amaranth(vecs, idle=0.2, backpressure=0.2, seed=7)
    check_split(vecs, res)
    st = {nm: r.status for nm, r in zip(names, res)}
    clean = {k: False for k in M.STATUS_BITS}
    assert st["bad_kv"]["nonfinite_in"]
    assert st["toolong"] == dict(clean, too_long=True)
    assert st["early_p"] == dict(clean, early_end=True)
    for nm in ("mask", "allmask", "normal"):
        assert st[nm] == clean, nm
    if kv_dtype == "bf16":
        assert st["empty"] == dict(clean, empty=True)
        assert st["early_k"] == dict(clean, early_end=True)
        assert st["nan_q"]["nonfinite_in"] and st["nan_q"]["nonfinite_out"]
        res = simulate_amaranth(vecs)
        check_split(vecs, res, check_cycles=True)


def split_engine_idle_backpressure(engine, idle, backpressure):
    """The same steps under one (idle, backpressure) pair: bit-exact; the cycle formula
    unstalled, more cycles stalled."""
    from .te import simulate_amaranth
    from .te_stimulus import check_split, matrix_steps, on_engine
    rng = np.random.default_rng(7000)
    vecs = on_engine(matrix_steps(rng, G=2, lanes=16), engine)
    res = simulate_amaranth(vecs, idle=idle, backpressure=backpressure, seed=11)
    check_split(vecs, res)
    formula = sum(v.golden().cycles for v in vecs[:2])
    if (idle, backpressure) == ("none", "none"):
        check_split(vecs, res, check_cycles=True)
    else:
        assert sum(r.cycles for r in res[:2]) > formula


def split_engine_lane_utilisation(engine, G, d, lanes):
    """Steady state: the K array is busy ``G`` of every ``G+1`` cycles per token (the stream's
    V beats take the other one), the V array the same; the per-token cost is ``(G+1)*Dk``
    whatever the data."""
    from .te import simulate_amaranth
    from .te_stimulus import check_split, on_engine, random_vector
    rng = np.random.default_rng(5000 + G)
    n = 4
    vecs = on_engine([random_vector(rng, "bf16", G, d, lanes, n),
                      random_vector(rng, "bf16", G, d, lanes, n + 1)], engine)
    r1, r2 = simulate_amaranth(vecs)
    check_split(vecs, [r1, r2], check_cycles=True)
    dk = d // lanes
    assert r2.cycles - r1.cycles == M.te_token_cycles(d, G, lanes, engine) == (G + 1) * dk
    assert r2.k_busy - r1.k_busy == r2.v_busy - r1.v_busy == G * dk


# -- TE: the serial engine ---------------------------------------------------------------------
SERIAL_SHAPES = tuple([(dt, G, d) for dt in KV_DTYPES for G in (1, 4, 7) for d in (64, 128)]
                      + [("bf16", 1, 256), ("nvfp4", 2, 256)])


def serial_engine_random(kv_dtype, G, d):
    """Random steps under idle and backpressure, lanes 2..16 by case: bit-exact."""
    from .te import simulate_amaranth
    from .te_stimulus import check_steps, random_vector
    seed = SERIAL_SHAPES.index((kv_dtype, G, d))
    rng = np.random.default_rng(1000 + seed)
    lanes = (2, 4, 8, 16)[seed % 4]
    if d // lanes * G * 3 > 400:
        lanes = 16
    n = {1: 4, 2: 2, 4: 2, 7: 2}[G]
    vecs = [random_vector(rng, kv_dtype, G, d, lanes, n)]
    res = simulate_amaranth(vecs, idle=0.2, backpressure=0.2, seed=seed)
    check_steps(vecs, res)


# -- TE: the engines' generated Verilog on Verilator (cocotb) ----------------------------------
def _split_verilator_matrix(engine, kv_dtype, G, d, L, n_random, n_rising, seed, plan_seed):
    """Random, rising-maximum, partial and edge-case steps through one Verilator build under
    every (idle, backpressure) pair: RTL == model; unstalled, the cycle formula and the
    worst-case rescale count."""
    from .te import make_vector, rising_max_inputs, simulate_verilator_matrix
    from .te_stimulus import check_split, edge_steps, on_engine, random_vector
    rng = np.random.default_rng(seed)
    vecs = on_engine([random_vector(rng, kv_dtype, G, d, L, n_random),
                      make_vector(*rising_max_inputs(rng, G, d, n_rising), kv_dtype, lanes=L),
                      random_vector(rng, kv_dtype, G, d, L, 3, partial=True)]
                     + edge_steps(rng, kv_dtype, G, d, L,
                                  only=["mask", "bad_kv", "empty", "early", "toolong", "normal"]),
                     engine)
    runs = simulate_verilator_matrix(vecs, seed=plan_seed)
    assert list(runs) == IDLE_BACKPRESSURE
    for pair, res in runs.items():
        check_split(vecs, res, check_cycles=pair == ("none", "none"))
    res = runs[("none", "none")]
    assert res[1].v_rescale == G * (n_rising - 1) * (d // L)
    assert res[0].cycles == vecs[0].golden().cycles


def _serial_verilator_bf16(long_n=300):
    """bf16, G 4, head_dim 64, 8 lanes: random steps, every edge case and a long context that
    crosses 16-token blocks, under idle and backpressure."""
    from .te import simulate_verilator
    from .te_stimulus import EDGE_NAMES, check_steps, edge_steps, random_vector
    rng = np.random.default_rng(101)
    G, d, L = 4, 64, 8
    vecs = [random_vector(rng, "bf16", G, d, L, 5)]
    vecs += edge_steps(rng, "bf16", G, d, L)
    vecs.append(random_vector(rng, "bf16", G, d, L, long_n))
    res = simulate_verilator(vecs, idle=0.3, backpressure=0.3, seed=5)
    check_steps(vecs, res)
    assert res[1 + EDGE_NAMES.index("nan_q")].status["nonfinite_in"]
    assert res[1 + EDGE_NAMES.index("empty")].status["empty"]


def _serial_verilator_nvfp4():
    """NVFP4, G 7, head_dim 128, 16 lanes: the cycle formula unstalled, edge cases."""
    from .te import simulate_verilator
    from .te_stimulus import check_steps, edge_steps, random_vector
    rng = np.random.default_rng(102)
    vecs = [random_vector(rng, "nvfp4", 7, 128, 16, 20),
            random_vector(rng, "nvfp4", 7, 128, 16, 3, partial=True)]
    vecs += edge_steps(rng, "nvfp4", 7, 128, 16, only=["mask", "bad_kv", "early", "normal"])
    res = simulate_verilator(vecs, seed=6)
    check_steps(vecs[:2], res[:2], check_cycles=True)
    check_steps(vecs, res)


def te_engine_on_verilator(engine, kv_dtype):
    """One TE design's generated Verilog on Verilator (one build each) against the model."""
    if engine == "split":
        _split_verilator_matrix("split", "nvfp4", G=4, d=128, L=32, n_random=6, n_rising=5,
                                seed=202, plan_seed=9)
    elif engine == "pipelined":
        # fp8 (24 x 8 V lanes, the output in three passes), G 2, head_dim 64, 32 lanes (Dk 2:
        # 8 token slots, the deepest V buffer of the shipped lanes)
        _split_verilator_matrix("pipelined", "fp8", G=2, d=64, L=32, n_random=7, n_rising=6,
                                seed=303, plan_seed=10)
    elif kv_dtype == "bf16":
        _serial_verilator_bf16()
    else:
        _serial_verilator_nvfp4()


# -- CDU: the front end and the whole CDU against the policy model --------------------------------
#: (frames, distance) regimes of the front end's random runs: keep budget 0; budget > keep
#: candidates; hash-thinned keep
CDU_REGIMES = ((8, 4), (64, 2), (24, 3))


def _cdu_cases():
    from . import cdu_stimulus as B
    return tuple((pat, pol) for pat in B.PATTERNS for pol in B.POLICIES)


def cdu_frontend_random(pattern, policy):
    """The front end (Amaranth) on seeded random descriptor streams in three (frames,
    distance) regimes under random idle/backpressure: == model operation by operation."""
    from . import cdu_stimulus as B
    from .cdu import compare_ops
    n = _cdu_cases().index((pattern, policy))
    for k, (frames, dist) in enumerate(CDU_REGIMES):
        seed = 10 * n + k
        descs = B.random_steps(seed, steps=5)
        ops, front = B.fe_vectors(descs, pattern, policy, frames=frames, distance=dist, seed=seed)
        assert front["lookahead"] < B.FE_PARAMS["units"]     # else overflow, tested apart
        got = B.run_fe(front, seed=seed, p_valid=0.6, p_ready=0.6)
        compare_ops(ops, got)
        assert any(o.kind == "P" for o in ops) == (policy != "disabled")


def cdu_whole_random(pattern, policy):
    """The whole CDU (Amaranth): step descriptors in, transactions, HBM reads, readies and
    counters out == model, with retried HBM errors, under random idle/backpressure."""
    from ...rtl.cdu.core import COUNTERS
    from . import cdu_stimulus as B
    from .cdu import compare_rtl, run_rtl
    seed = _cdu_cases().index((pattern, policy))
    ops, front = B.fe_vectors(B.random_steps(100 + seed, steps=4), pattern, policy, seed=seed)
    assert front["lookahead"] < B.FE_PARAMS["units"]
    rng = random.Random(seed)
    err = lambda tag, a: a < B.PARAMS["max_retries"] and rng.random() < 0.2  # noqa: E731
    got = run_rtl(None, params=B.PARAMS, seed=seed, err=err, front=front, p_valid=0.6,
                  p_ready=0.6)
    compare_rtl(ops, got, **B.PARAMS)
    assert got["regs"] == [got["counters"][k] for k in COUNTERS]


def cdu_frontend_restores(pattern, policy):
    """Restore beats in the steps (two per step, a step of restores only, zero- and one-token
    restores, a trailing step) with and without the prefetch walk, and seeded random steps
    with restores, their beats interleaved at random with the slot and layer beats: == model
    op by op, the S ops where the model puts them (at each step descriptor's load)."""
    import re

    from . import cdu_stimulus as B
    from .cdu import compare_ops, run_frontend_rtl
    n = _cdu_cases().index((pattern, policy))
    for k, dist in enumerate((0, 4)):
        ops, front = B.fe_vectors(B.restore_steps(), pattern, policy, distance=dist, seed=n)
        assert front["lookahead"] < B.FE_PARAMS["units"]
        compare_ops(ops, B.run_fe(front, seed=n + k, p_valid=0.6, p_ready=0.6))
        got = run_frontend_rtl(B.shuffled_beats(B.restore_steps(), n + k), front["lists"],
                               front["config"], dict(front["params"], frames=front["frames"]),
                               seed=n, p_valid=0.6, p_ready=0.6)
        compare_ops(ops, got)
        kinds = "".join(o.kind for o in ops)
        assert kinds.count("S") == 3 + 1 + 0 + 3 + 1 + 2
        assert kinds.startswith("SSSW")
        runs = re.findall(r"S+(.|$)", kinds)      # what follows each run of restores
        if dist and policy != "disabled":
            # the walk loads later steps (and the trailing one) in the middle of a unit's
            # reads, before the prefetches of their blocks
            assert set(runs) - {"W", ""}, runs
        else:
            # without the walk a step is loaded at its first unit's start, the trailing
            # one after the last read
            assert set(runs) <= {"W", ""} and kinds.endswith("RSS"), runs
    descs = B.random_steps(500 + n, steps=5, restores=0.7)
    assert any(st.restores for st in descs)
    ops, front = B.fe_vectors(descs, pattern, policy, seed=n)
    got = run_frontend_rtl(B.shuffled_beats(descs, n), front["lists"], front["config"],
                           dict(front["params"], frames=front["frames"]), seed=n, p_valid=0.5,
                           p_ready=0.5)
    compare_ops(ops, got)


# -- DSU: random requests, faults and sessions ------------------------------------------------
def random_requests(rng: random.Random, n, arrival_span=4):
    """``n`` requests of mixed sizes (3 .. 133 prompt tokens, 1 .. 4 new), priorities 0..3."""
    sizes = [3, 7, 12, 30, 70, 130]
    return [RequestSpec(i, rng.choice(sizes) + rng.randint(0, 3), rng.randint(1, 4),
                        arrival_step=rng.randint(0, arrival_span), priority=rng.randint(0, 3))
            for i in range(n)]


def random_faults(rng: random.Random, n_rounds, n_slots, n):
    """``n`` distinct step faults (error or timeout) in the ``--faults`` syntax."""
    parts = {}
    while len(parts) < n:
        parts[(rng.randrange(n_slots), rng.randrange(n_rounds))] = rng.choice(["error", "timeout"])
    return ",".join(f"{k}:slot={s}:step={t}" for (s, t), k in sorted(parts.items()))


def random_sessions(rng: random.Random, n_plain, n_sessions, first_id=0, arrival_span=4):
    """``n_plain`` one-turn requests and ``n_sessions`` sessions of 1..3 later turns."""
    reqs = [RequestSpec(first_id + i, rng.choice([3, 7, 12, 30, 60]) + rng.randint(0, 3),
                        rng.randint(1, 4), arrival_step=rng.randint(0, arrival_span),
                        priority=rng.randint(0, 3)) for i in range(n_plain)]
    sess = []
    for k in range(n_sessions):
        first = RequestSpec(first_id + 100 + k, rng.choice([5, 10, 20, 40]), rng.randint(1, 3),
                            arrival_step=rng.randint(0, arrival_span), priority=rng.randint(0, 3))
        turns = tuple(SessionTurn(rng.randint(1, 4), rng.randint(0, 12), rng.randint(1, 3))
                      for _ in range(rng.randint(1, 3)))
        sess.append(Session(first, turns))
    return reqs, sess


def check_sessions_result(res, policy):
    """A sessions run equals the golden (rounds, ended requests, KV moves), its moves are the
    ones ``policy`` makes, and the firmware never degraded."""
    assert res.differences == [], res.differences[:6]
    assert res.ended and len(res.ended) == len(res.golden_ended)
    assert res.moves == res.golden_moves
    kinds = {m.kind for m in res.moves}
    allowed = {"keep": {"drop"}, "park": {"park", "restore", "drop"},
               "park-early": {"park", "restore", "drop"}, "drop": {"drop"}}[policy]
    assert kinds <= allowed                 # "drop" under keep/park: a continue too large
    assert policy == "keep" or kinds
    assert res.degraded_cycle is None


def dsu_firmware_vs_golden(profile, cores, seed):
    """The scheduler firmware on the RTL cluster (Verilator, 8 slots) against the golden DSU
    model: 14 random requests and one too large, 6 random step faults, one retry."""
    from .dsu import run_dsu
    rng = random.Random(seed)
    reqs = random_requests(rng, 14, arrival_span=8)
    reqs.append(RequestSpec(50, 700, 3, arrival_step=2))                 # too large
    faults = random_faults(rng, 16, 8, 6)
    res = run_dsu(reqs, profile, cores=cores, sim="verilator", n_slots=8, max_batch=5,
                  latency_batch=3, kv_capacity_tokens=400, long_context_tokens=72,
                  max_retries=1, faults=faults, seed=seed)
    assert res.differences == [], res.differences[:5]
    assert set(res.outcomes) == {r.id for r in reqs}
    for r in reqs:
        o = res.outcomes[r.id]
        assert (o.status == "completed" and o.tokens == r.max_new_tokens) or \
            (o.status == "failed" and o.reason)
    assert res.counters["descriptors"] == sum(len(b) for b in res.batches)
    assert res.counters["rollbacks"] > 0
    assert res.degraded_cycle is None


def dsu_sessions_vs_golden(policy, profile, cores, seed):
    """Seeded sessions (8 plain requests, 5 sessions) with 3 random step faults under a park
    policy, on the RTL cluster (Verilator) against the golden model's rounds and KV moves."""
    from .dsu import run_dsu
    rng = random.Random(seed)
    reqs, sess = random_sessions(rng, 8, 5, arrival_span=6)
    picks = {(rng.randrange(8), rng.randrange(12)): rng.choice(["error", "timeout"])
             for _ in range(3)}
    faults = ",".join(f"{k}:slot={s}:step={t}" for (s, t), k in sorted(picks.items()))
    res = run_dsu(reqs, profile, cores=cores, sim="verilator", n_slots=8, max_batch=5,
                  latency_batch=3, kv_capacity_tokens=300, long_context_tokens=40,
                  max_retries=1, faults=faults, sessions=sess, park_policy=policy, lead=2,
                  seed=seed)
    check_sessions_result(res, policy)
    assert res.counters["descriptors"] == sum(len(b) for b in res.batches)


def dsu_round_cycles_calibration(profile, n_slots, cap):
    """The fast model's DSU cost per round against the scheduler firmware on the RTL cluster,
    summed over a whole held-out random schedule of 3·n_slots requests (benchmarks/dsu_fit.py
    fits on other seeds): within 2 %. 8 slots (seed 7, arrival rounds 0..30): cap 8 = all
    slots fit the batch, cap 4 = most rounds must select. 32 slots (seed 21, arrival rounds
    0..20, cap 32): admissions into a well-filled DSU, where the firmware's free-slot search
    and active-list insertion walk the occupied slots. Each round is charged with its own
    counts (active slots, admissions, retirements, blocked intake head), as the system model
    does; charging every round as a steady one is far below the measured cycles."""
    from ..fast.timing import UnitTiming
    from ...models.config import load_gpu
    from .dsu import run_dsu
    rng = random.Random(7 if n_slots == 8 else 21)
    last = 30 if n_slots == 8 else 20
    reqs = [RequestSpec(i, rng.randint(1, 8000), rng.randint(2, 12), rng.randint(0, last),
                        rng.randint(0, 3)) for i in range(3 * n_slots)]
    result = run_dsu(reqs, profile, n_slots=n_slots, max_batch=cap, latency_batch=cap,
                     backpressure=False)
    assert result.differences == []
    rounds = [x for x in result.latencies if x["active"] > 0]
    if cap < n_slots:    # the schedule exercises the select regime
        assert sum(x["active"] > cap for x in rounds) >= len(rounds) // 2
    measured = sum(x["cycles"] for x in rounds)
    units = UnitTiming.from_gpu(load_gpu("h100-sxm5"))   # cycles: the clocks do not enter
    predicted = sum(units.dsu_round_cycles(x["active"], cap, profile, admitted=x["admitted"],
                                           retired=x["retired"], blocked=x["blocked"],
                                           n_slots=n_slots)
                    for x in rounds)
    assert abs(predicted - measured) / measured <= 0.02, (predicted, measured)
    steady = sum(units.dsu_round_cycles(x["active"], cap, profile, n_slots=n_slots)
                 for x in rounds)
    assert steady < 0.95 * measured, (steady, measured)


def _dash(case):
    return "-".join(str(x) for x in case)


_ALL_SPLIT = tuple((e, s) for e in TWO_ARRAY_ENGINES for s in SPLIT_SHAPES)
_SPLIT_PAIRS = tuple((e, i, b) for e in TWO_ARRAY_ENGINES for i, b in IDLE_BACKPRESSURE)
_DSU_PROFILES = ("throughput-opt", "fairness-opt", "latency-opt")
#: each access pattern once, each policy at least once
_CDU_IN_TESTS = (("full", "disabled"), ("window", "static"), ("topk", "adaptive"),
                 ("reread", "adaptive"))

MATRICES = {m.name: m for m in (
    Matrix("te_split_random", "tests/test_te_split.py",
           "two-array TE engines: random and rising-maximum inputs, unstalled (cycle-exact) "
           "and under idle/backpressure (bit-exact), every shape x engine",
           _ALL_SPLIT,
           (("pipelined", ("bf16", 1, 64, 4)), ("pipelined", ("nvfp4", 4, 64, 16)),
            ("pipelined", ("fp8", 1, 64, 32)), ("split", ("fp8", 4, 64, 8))),
           split_engine_random_and_rising, lambda c: f"{_shape_id(c[1])}-{c[0]}"),
    Matrix("te_split_edges", "tests/test_te_split.py",
           "two-array TE engines: every edge case back to back, each K/V dtype x engine",
           tuple((dt, e) for e in TWO_ARRAY_ENGINES for dt in KV_DTYPES),
           (("bf16", "pipelined"), ("fp8", "pipelined"), ("nvfp4", "split")),
           split_engine_edge_cases, _dash),
    Matrix("te_split_idle_backpressure", "tests/test_te_split.py",
           "two-array TE engines: every (idle, backpressure) pair of schedules x engine",
           _SPLIT_PAIRS,
           tuple(c for c in _SPLIT_PAIRS if c[0] == "pipelined")
           + (("split", "none", "none"), ("split", "random", "random")),
           split_engine_idle_backpressure,
           lambda c: f"{c[0]}-{matrix_id((c[1], c[2]))}"),
    Matrix("te_split_lane_utilisation", "tests/test_te_split.py",
           "two-array TE engines: steady-state lane utilisation and cost per token",
           (("pipelined", 4, 128, 32), ("pipelined", 8, 128, 32), ("pipelined", 1, 64, 16),
            ("split", 4, 128, 32), ("split", 1, 64, 16)),
           (("pipelined", 4, 128, 32), ("split", 1, 64, 16)),
           split_engine_lane_utilisation, _dash),
    Matrix("te_serial_random", "tests/test_te.py",
           "serial TE engine: random steps under idle/backpressure, every K/V dtype x G x "
           "head_dim, lanes 2..16",
           SERIAL_SHAPES,
           (("bf16", 1, 64), ("fp8", 4, 128), ("nvfp4", 7, 64), ("nvfp4", 2, 256)),
           serial_engine_random, _dash),
    Matrix("te_verilator", "tests/test_te_cocotb.py",
           "TE engines' generated Verilog on Verilator (cocotb), one build each: split NVFP4 "
           "and pipelined fp8 at 32 lanes under every (idle, backpressure) pair, serial bf16 "
           "(edge cases, long context) and NVFP4 (G 7, head_dim 128)",
           (("pipelined", "fp8"), ("split", "nvfp4"), ("serial", "bf16"), ("serial", "nvfp4")),
           (("pipelined", "fp8"), ("serial", "bf16")),
           te_engine_on_verilator, _dash),
    Matrix("cdu_frontend_random", "tests/test_cdu_frontend.py",
           "CDU front end: seeded random descriptor streams in three (frames, distance) "
           "regimes, every access pattern x policy",
           _cdu_cases(), _CDU_IN_TESTS, cdu_frontend_random, _dash),
    Matrix("cdu_whole_random", "tests/test_cdu_frontend.py",
           "whole CDU: random descriptor streams with retried HBM errors, transaction by "
           "transaction and counters, every access pattern x policy",
           _cdu_cases(), _CDU_IN_TESTS, cdu_whole_random, _dash),
    Matrix("cdu_frontend_restores", "tests/test_cdu_frontend.py",
           "CDU front end: restore beats, with and without the prefetch walk, every access "
           "pattern x policy",
           _cdu_cases(), _CDU_IN_TESTS, cdu_frontend_restores, _dash),
    Matrix("dsu_round_cycles", "tests/test_calibration.py",
           "DSU: the fast model's cycles per scheduling round against the firmware on the RTL "
           "cluster (held-out schedules), every profile x (slots, batch cap)",
           tuple((p, n, c) for n, c in ((8, 8), (8, 4), (32, 32)) for p in _DSU_PROFILES),
           (("throughput-opt", 8, 4), ("fairness-opt", 8, 8), ("latency-opt", 8, 4)),
           dsu_round_cycles_calibration, _dash),
    Matrix("dsu_firmware", "tests/test_dsu_sched.py",
           "DSU: scheduler firmware on the RTL cluster (Verilator) against the golden model "
           "with random step faults, every profile x 1 and 4 cores",
           (("latency-opt", 1, 11), ("throughput-opt", 4, 12), ("fairness-opt", 1, 13),
            ("latency-opt", 4, 14), ("throughput-opt", 1, 15), ("fairness-opt", 4, 16)),
           (("throughput-opt", 4, 12), ("fairness-opt", 1, 13)),
           dsu_firmware_vs_golden, _dash),
    Matrix("dsu_sessions", "tests/test_dsu_sessions.py",
           "DSU: seeded sessions with faults on the RTL cluster (Verilator) against the golden "
           "model, park policies x profiles x cores",
           (("keep", "fairness-opt", 1, 41), ("park", "throughput-opt", 4, 42),
            ("park-early", "latency-opt", 1, 43), ("drop", "fairness-opt", 4, 44),
            ("park", "latency-opt", 1, 45), ("keep", "throughput-opt", 1, 46)),
           (("park", "throughput-opt", 4, 42), ("park-early", "latency-opt", 1, 43)),
           dsu_sessions_vs_golden, _dash),
)}
