"""One Amaranth simulator per design, reset between runs (``sim/harness/shared_simulator.py``).

A run on a reused simulator gives what a run on a new one gives, cycle for cycle, whatever
ran on it before (a different stimulus, a run that stopped half-way); runs of different
designs never share one; a run that raises drops its simulator.
"""

from __future__ import annotations

import numpy as np
import pytest
from amaranth.hdl import Elaboratable, Module, Signal

from tricut.models.cdu import SlotDesc, StepDesc
from tricut.sim.harness import cdu_stimulus as B
from tricut.sim.harness import shared_simulator as S
from tricut.sim.harness.cdu import RtlMismatch, compare_ops, run_frontend_rtl
from tricut.sim.harness.te import make_vector, simulate_amaranth


@pytest.fixture
def nothing_kept():
    S.forget_all()
    yield
    S.forget_all()


def _front(length, distance=4):
    descs = [StepDesc(0, (SlotDesc(0, 0, length),), (0, 1))]
    return B.fe_vectors(descs, "full", "static", distance=distance)


def _run(front, **kw):
    return run_frontend_rtl(front["beats"], front["lists"], front["config"], front["params"],
                            **kw)


def test_a_reused_simulator_runs_like_a_new_one(nothing_kept):
    """The CDU front end: run A on a new simulator; then B (another stimulus under random
    idle and backpressure) and A again on the same one: A's ops, transfer cycles and flags
    are the new simulator's, and B's are its own new simulator's."""
    ops_a, front_a = _front(200)
    ops_b, front_b = _front(90, distance=2)
    fresh_a = _run(front_a, idle="random", backpressure="random", seed=3)
    kept = list(S._kept.values())
    assert len(kept) == 1
    S.forget_all()
    fresh_b = _run(front_b, seed=7)
    S.forget_all()
    _run(front_a, idle="random", backpressure="random", seed=3)
    shared = list(S._kept.values())
    again_b = _run(front_b, seed=7)
    again_a = _run(front_a, idle="random", backpressure="random", seed=3)
    assert list(S._kept.values()) == shared            # the three runs shared one simulator
    compare_ops(ops_a, again_a)
    compare_ops(ops_b, again_b)
    assert again_a == fresh_a and again_b == fresh_b
    assert again_a["cycles"] != again_b["cycles"]


def _vector(kv_dtype, seed):
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal(shape).astype(np.float32) for shape in
               ((1, 64), (3, 64), (3, 64)))
    return make_vector(q, k, v, kv_dtype, lanes=16)


def test_designs_that_differ_do_not_share(nothing_kept):
    """Two TE engine configurations (bf16 and fp8 K/V) each get their own simulator, and
    each step is bit-exact with its own golden step, before and after the other ran."""
    vb, vf = _vector("bf16", 1), _vector("fp8", 2)
    for v in (vb, vf, vb, vf):
        [r] = simulate_amaranth([v])
        assert r.out_beats == v.expected_out_beats()
    assert len(S._kept) == 2


def test_a_run_that_raises_drops_its_simulator(nothing_kept):
    """A run stopped by its own check (the hang guard, at 5 cycles) leaves no simulator
    behind; the next run of the design builds a new one and passes."""
    ops, front = _front(100)
    _run(front)
    [first] = S._kept.values()
    with pytest.raises(RtlMismatch, match="front end hung after 5 cycles"):
        _run(front, timeout=5)
    assert not S._kept
    compare_ops(ops, _run(front))
    assert len(S._kept) == 1 and first not in S._kept.values()


def test_only_the_most_recent_designs_are_kept(nothing_kept):
    first = [S.design(_Counter, width=w) for w in range(1, S.KEEP + 3)]
    assert len(S._kept) == S.KEEP
    assert S.design(_Counter, width=S.KEEP + 2) is first[-1]   # the most recent one was kept
    assert S.design(_Counter, width=1) is not first[0]         # the oldest was not


def test_equal_parameters_share_and_own_designs_do_not(nothing_kept):
    a = S.design(_Counter, width=4)
    assert S.design(_Counter, width=4) is a and S.design(_Counter, width=5) is not a
    assert S.design(_Counter, width=4, share=False) is not a
    own = S.own(_Counter(width=4))
    assert own.key is None and own not in S._kept.values()


class _Counter(Elaboratable):
    """A one-register design for the keep rule."""

    def __init__(self, width):
        self.width = width

    def elaborate(self, platform):
        m = Module()
        c = Signal(self.width)
        m.d.sync += c.eq(c + 1)
        return m
