"""Pipelined TE arithmetic units (``stages`` > 0) against :mod:`tricut.models.te`, bit for bit.

Every unit at every tested ``stages`` takes one operand set per cycle, back to back, through the
Amaranth simulator; output ``i`` is read ``stages`` cycles after input ``i`` and compared with
the model (seeded random operands plus named edge cases: ±0, flushed denormals, ±inf, NaN,
overflow, rounding ties). ``y_valid`` is checked against a random ``valid`` pattern, and a
wrong latency is shown to be caught. ``stages`` = 0 is the combinational unit (also covered
by tests/test_te.py). Operands and the driver: ``sim/harness/te_stimulus.py``."""

from __future__ import annotations

import gc
import warnings

import numpy as np
import pytest

from tricut.models import te as M
from tricut.rtl.te.exp2 import Exp2
from tricut.rtl.te.fadd import FP32Add
from tricut.rtl.te.fmul import FP32Mul
from tricut.rtl.te.recip import FP32Recip
from tricut.sim.harness.te_stimulus import binary_operands, mismatches, stream, unary_operands

UNITS = {"fmul": (FP32Mul, M.fmul, 2), "fadd": (FP32Add, M.fadd, 2),
         "exp2": (Exp2, M.exp2, 1), "recip": (FP32Recip, M.frecip, 1)}
#: stages tested per unit: combinational, one intermediate, the full pipeline
STAGES = {"fmul": (0, 1, 3), "fadd": (0, 2, 3), "exp2": (0, 2, 3), "recip": (0, 2, 5)}


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
