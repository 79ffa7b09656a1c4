"""fp32 building blocks shared by the TE arithmetic units (not components), and :class:`Pipe`,
the pipeline registers at a unit's named cut points.

Each function adds logic to module ``m`` and returns a Value; the arithmetic is the one of
:mod:`tricut.models.te` (RNE, flush-to-zero after unbounded-exponent rounding)."""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Mux, Signal, signed
from amaranth.lib.wiring import In, Out

__all__ = ["QNAN", "POS_INF", "ONE", "fields", "round_pack", "is_nan", "is_inf", "nonfinite",
           "Pipe", "check_stages", "valid_ports"]

QNAN = 0x7FC00000
POS_INF = 0x7F800000
ONE = 0x3F800000


def fields(a):
    return a[31], a[23:31], a[0:23]


def is_nan(a):
    return (a[23:31] == 0xFF) & (a[0:23] != 0)


def is_inf(a):
    return (a[23:31] == 0xFF) & (a[0:23] == 0)


def nonfinite(a):
    return a[23:31] == 0xFF


def round_pack(m, sign, E, M, X, name):
    """fp32 bits of ``M * 2**(E - 150 - X)`` (leading one of ``M`` at bit ``23 + X``), RNE.

    ``E`` is a signed biased exponent; ``E >= 255`` gives inf, ``E < 1`` a signed zero."""
    q0 = M[X:X + 24]
    rem = M[0:X]
    half = 1 << (X - 1)
    up = Signal(name=f"{name}_up")
    m.d.comb += up.eq((rem > half) | ((rem == half) & q0[0]))
    q = Signal(25, name=f"{name}_q")
    m.d.comb += q.eq(q0 + up)
    e2 = Signal(signed(12), name=f"{name}_e")
    m.d.comb += e2.eq(E + q[24])
    mant = Mux(q[24], q[1:24], q[0:23])
    r = Signal(32, name=f"{name}_r")
    with m.If(e2 >= 255):
        m.d.comb += r.eq(Cat(Const(POS_INF, 31), sign))
    with m.Elif(e2 < 1):
        m.d.comb += r.eq(Cat(Const(0, 31), sign))
    with m.Else():
        m.d.comb += r.eq(Cat(mant, e2[0:8], sign))
    return r


def check_stages(unit, stages, order):
    """``stages`` if it is an int in 0..len(order), else ValueError naming the bad value."""
    if not isinstance(stages, int) or isinstance(stages, bool) or not 0 <= stages <= len(order):
        raise ValueError(f"{unit}: stages must be an int in 0..{len(order)}, got {stages!r}")
    return stages


def valid_ports(stages):
    """The optional ``valid`` -> ``y_valid`` ports of a unit with ``stages`` > 0 (none at 0)."""
    return {"valid": In(1), "y_valid": Out(1)} if stages else {}


class Pipe:
    """Pipeline registers at the named cut points of a unit's datapath.

    ``order`` lists the unit's cut points, most useful first; ``stages`` = k registers the first
    k of them, so a result is valid k cycles after its inputs, one new input per cycle. k = 0
    adds no logic at all (the combinational unit, the same Verilog)."""

    def __init__(self, m, stages, order):
        self.m, self.stages, self.cuts = m, stages, set(order[:stages])

    def __call__(self, point, **values):
        """``values`` (in order), each through a reset-less register ``<point>_<key>`` if
        ``point`` is a cut, else unchanged."""
        if point not in self.cuts:
            return list(values.values())
        regs = []
        for key, v in values.items():
            r = Signal(v.shape(), name=f"{point}_{key}", reset_less=True)
            self.m.d.sync += r.eq(v)
            regs.append(r)
        return regs

    def out(self, port, point="out"):
        """Where the last stage writes: ``port`` itself, or a wire registered into ``port``."""
        if point not in self.cuts:
            return port
        w = Signal.like(port, name=f"{point}_d")
        self.m.d.sync += port.eq(w)
        return w

    def valid(self, unit):
        """``unit.y_valid`` = ``unit.valid`` delayed by ``stages`` cycles (if stages > 0)."""
        if not self.stages:
            return
        v = unit.valid
        for i in range(self.stages):
            r = Signal(name=f"valid_{i + 1}")
            self.m.d.sync += r.eq(v)
            v = r
        self.m.d.comb += unit.y_valid.eq(v)
