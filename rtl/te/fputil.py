"""Combinational fp32 building blocks shared by the TE arithmetic units (not components).

Each function adds logic to module ``m`` and returns a Value; the arithmetic is the one of
:mod:`tricut.models.te` (RNE, flush-to-zero after unbounded-exponent rounding)."""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Mux, Signal, signed

__all__ = ["QNAN", "POS_INF", "ONE", "fields", "round_pack", "is_nan", "is_inf", "nonfinite"]

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
