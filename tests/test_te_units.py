"""Pipelined TE arithmetic units (``stages`` > 0) against :mod:`tricut.models.te`, bit for bit.

Every unit at every tested ``stages`` takes one operand set per cycle, back to back, through the
Amaranth simulator; output ``i`` is read ``stages`` cycles after input ``i`` and compared with
the model (seeded random operands plus named edge cases: ±0, flushed denormals, ±inf, NaN,
overflow, rounding ties). ``y_valid`` is checked against a random ``valid`` pattern, and a
wrong latency is shown to be caught. ``stages`` = 0 is the combinational unit (also covered
by tests/test_te.py)."""

from __future__ import annotations

import gc
import warnings

import numpy as np
import pytest
from amaranth.sim import Simulator

from tricut.models import te as M
from tricut.rtl.te.exp2 import Exp2
from tricut.rtl.te.fadd import FP32Add
from tricut.rtl.te.fmul import FP32Mul
from tricut.rtl.te.recip import FP32Recip

F32 = np.float32
#: named edge operands: ±0, denormals (flushed), min normal, max finite, ±inf, NaNs, 1 and
#: its neighbours, 2**-126 +- ulp, log2(e), 2
EDGE = [0, 0x80000000, 0x00000001, 0x807FFFFF, 0x00800000, 0x80800000, 0x7F7FFFFF,
        0xFF7FFFFF, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00001, 0x3F800000, 0xBF800000,
        0x3F7FFFFF, 0x3F800001, 0x00FFFFFF, 0x01000000, 0x7F000000, 0x3FB8AA3B, 0x40000000]
#: (a, b) pairs whose exact result is a rounding tie or overflows / underflows
NAMED_PAIRS = {
    "tie_add_even": (0x3F800000, 0x33800000),    # 1 + 2**-24: tie, rounds to 1.0
    "tie_add_odd": (0x3F800001, 0x33800000),     # tie, rounds up to even
    "tie_mul": (0x3FC00001, 0x3FC00000),         # (1.5 + ulp) * 1.5
    "overflow": (0x7F7FFFFF, 0x7F7FFFFF),
    "underflow": (0x00800000, 0x3F000000),       # 2**-127 flushes to +0
    "cancel": (0x3F800000, 0xBF800000),
    "inf_minus_inf": (0x7F800000, 0xFF800000),
    "inf_times_zero": (0x7F800000, 0x00000000),
    "neg_zeros": (0x80000000, 0x80000000),
}


def _rand_bits(rng, n, emin=100, emax=160, wild=0.1):
    s = rng.integers(0, 2, n)
    e = np.where(rng.random(n) < wild, rng.integers(0, 256, n), rng.integers(emin, emax, n))
    f = np.where(rng.random(n) < 0.05, 0, rng.integers(0, 1 << 23, n))
    return ((s << 31) | (e << 23) | f).astype(np.int64)


def binary_operands(rng, n):
    a, b = _rand_bits(rng, n), _rand_bits(rng, n)
    k = n // 3                      # near-cancellation for the adder
    b[:k] = ((a[:k] ^ (1 << 31)) + rng.integers(-40, 40, k)) & 0xFFFFFFFF
    ea, eb = np.meshgrid(np.array(EDGE), np.array(EDGE))
    na, nb = zip(*NAMED_PAIRS.values())
    return (np.concatenate([a, ea.ravel(), na, nb]).astype(np.int64),
            np.concatenate([b, eb.ravel(), nb, na]).astype(np.int64))


def unary_operands(unit, rng, n):
    if unit == "exp2":
        return np.concatenate([M.f2b(-rng.uniform(0, 130, n).astype(F32)),
                               M.f2b(-(F32(2.0) ** rng.uniform(-40, 0, n // 4).astype(F32))),
                               _rand_bits(rng, n // 4), np.array(EDGE)]).astype(np.int64)
    return np.concatenate([_rand_bits(rng, n), np.array(EDGE),
                           (rng.integers(250, 256, 40) << 23) | rng.integers(0, 1 << 23, 40)])


UNITS = {"fmul": (FP32Mul, M.fmul, 2), "fadd": (FP32Add, M.fadd, 2),
         "exp2": (Exp2, M.exp2, 1), "recip": (FP32Recip, M.frecip, 1)}
#: stages tested per unit: combinational, one intermediate, the full pipeline
STAGES = {"fmul": (0, 1, 3), "fadd": (0, 2, 3), "exp2": (0, 2, 3), "recip": (0, 2, 5)}


def stream(dut, operands, valid=None):
    """Drive one operand set per cycle (back to back) and return, per cycle, (y, y_valid):
    ``len(operands[0]) + dut.stages`` cycles, so output ``i`` is at cycle ``i + stages``."""
    ins = [dut.a, dut.b] if len(operands) == 2 else [dut.x]
    n = len(operands[0])
    got = []

    async def tb(ctx):
        for t in range(n + dut.stages):
            if t < n:
                for port, v in zip(ins, operands):
                    ctx.set(port, int(v[t]))
            if dut.stages:
                ctx.set(dut.valid, int(valid[t]) if valid is not None and t < n else int(t < n))
            got.append((ctx.get(dut.y), ctx.get(dut.y_valid) if dut.stages else 1))
            await (ctx.tick() if dut.stages else ctx.delay(1e-9))

    sim = Simulator(dut)
    if dut.stages:
        sim.add_clock(1e-9)
    sim.add_testbench(tb)
    sim.run()
    return got


def mismatches(got, operands, fn, latency):
    """Indices ``i`` where the output read ``latency`` cycles after input ``i`` is not the model's."""
    exp = fn(*operands)
    ys = np.array([g[0] for g in got[latency:latency + len(exp)]])
    if ys.size < len(exp):
        ys = np.concatenate([ys, np.full(len(exp) - ys.size, -1)])
    return np.nonzero(ys != exp)[0]


def _operands(unit, seed, n):
    rng = np.random.default_rng(seed)
    return binary_operands(rng, n) if UNITS[unit][2] == 2 else (unary_operands(unit, rng, n),)


@pytest.mark.parametrize("unit,stages", [(u, k) for u in UNITS for k in STAGES[u]])
def test_unit_streams_back_to_back_bit_exact(unit, stages):
    cls, fn, _ = UNITS[unit]
    ops = _operands(unit, 100 + stages, 600)
    dut = cls(stages)
    got = stream(dut, ops)
    bad = mismatches(got, ops, fn, stages)
    assert bad.size == 0, [tuple(hex(int(o[i])) for o in ops) for i in bad[:5]]
    if stages:     # a result every cycle, exactly ``stages`` cycles after its input
        assert [v for _, v in got] == [0] * stages + [1] * len(ops[0])


@pytest.mark.parametrize("unit", list(UNITS))
def test_y_valid_follows_valid_with_gaps(unit):
    """A random ``valid`` pattern comes out on ``y_valid`` exactly ``stages`` cycles later, and
    every result marked valid is the model's (operands change every cycle regardless)."""
    cls, fn, _ = UNITS[unit]
    k = STAGES[unit][-1]
    ops = _operands(unit, 7, 150)
    n = len(ops[0])
    valid = np.random.default_rng(8).random(n) < 0.6
    got = stream(cls(k), ops, valid)
    assert [v for _, v in got] == [0] * k + [int(v) for v in valid]
    ys = np.array([y for y, _ in got[k:]])
    assert np.array_equal(ys[valid], fn(*ops)[valid])


@pytest.mark.parametrize("unit", list(UNITS))
def test_wrong_latency_is_caught(unit):
    """The check is not vacuous: read one cycle early or late, most results mismatch; the
    combinational unit is not a 1-stage one."""
    cls, fn, _ = UNITS[unit]
    k = STAGES[unit][-1]
    ops = _operands(unit, 9, 200)
    got = stream(cls(k), ops)
    assert mismatches(got, ops, fn, k).size == 0
    for wrong in (k - 1, k + 1):
        assert mismatches(got, ops, fn, wrong).size > len(ops[0]) // 2
    assert mismatches(stream(cls(0), ops), ops, fn, 1).size > len(ops[0]) // 2


@pytest.mark.parametrize("bad", [-1, 99, 1.5, True, "3"])
@pytest.mark.parametrize("unit", list(UNITS))
def test_bad_stages_rejected_with_the_value(unit, bad):
    cls = UNITS[unit][0]
    with pytest.raises(ValueError, match=f"{cls.__name__}: stages must be an int in "
                                         f"0..{len(cls.CUTS)}, got {bad!r}"):
        cls(bad)
    with warnings.catch_warnings():     # the half-built component is never elaborated
        warnings.simplefilter("ignore")
        gc.collect()


@pytest.mark.parametrize("unit", list(UNITS))
def test_stages_zero_is_the_combinational_unit(unit):
    """stages = 0: no clock, no valid ports, the ports of today's unit; stages > 0 adds them."""
    from amaranth.back import verilog
    cls = UNITS[unit][0]
    dut = cls()
    assert dut.stages == 0
    comb = verilog.convert(dut, name="u", emit_src=False)
    assert "clk" not in comb and "valid" not in comb
    piped = verilog.convert(cls(STAGES[unit][-1]), name="u", emit_src=False)
    assert "input clk" in piped and "output y_valid" in piped


def test_pipelined_verilog_lint_clean(tmp_path):
    from tricut.sim.harness.verilog_out import lint, write_verilog
    for cls, k in ((FP32Add, 3), (FP32Recip, 5), (Exp2, 3)):
        src = write_verilog(cls(k), f"te_{cls.__name__.lower()}", tmp_path)
        clean, messages = lint(src, f"te_{cls.__name__.lower()}")
        assert clean, messages[:3000]
