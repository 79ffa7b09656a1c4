"""fp32 reciprocal (combinational, correctly rounded)."""

from amaranth.hdl import Cat, Const, Module, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .fputil import POS_INF, QNAN, fields, round_pack

__all__ = ["FP32Recip"]


class FP32Recip(wiring.Component):
    """``y = 1 / x`` rounded RNE with flush-to-zero; bit-exact with
    :func:`tricut.models.te.frecip`. A 49-by-24-bit integer divider gives the quotient and a
    sticky remainder. ±0 -> ±inf, ±inf -> ±0, NaN -> NaN. Combinational."""

    x: In(32)
    y: Out(32)

    def elaborate(self, platform):
        m = Module()
        s, e, f = fields(self.x)
        mant = Cat(f, Const(1, 1))
        Q = Signal(26)
        R = Signal(24)
        m.d.comb += [Q.eq(Const(1 << 48, 49) // mant), R.eq(Const(1 << 48, 49) % mant)]
        M = Signal(26)
        m.d.comb += M.eq(Cat(R != 0, Q[0:25]))
        e_s = Signal(signed(12))
        E = Signal(signed(12))
        Ex = Signal(signed(12))
        m.d.comb += [e_s.eq(e), E.eq(253 - e_s), Ex.eq(254 - e_s)]
        r = round_pack(m, s, E, M, 2, "recip")
        with m.If((e == 0xFF) & (f != 0)):
            m.d.comb += self.y.eq(QNAN)
        with m.Elif(e == 0xFF):
            m.d.comb += self.y.eq(Cat(Const(0, 31), s))
        with m.Elif(e == 0):
            m.d.comb += self.y.eq(Cat(Const(POS_INF, 31), s))
        with m.Elif(f == 0):
            with m.If(Ex < 1):
                m.d.comb += self.y.eq(Cat(Const(0, 31), s))
            with m.Else():
                m.d.comb += self.y.eq(Cat(Const(0, 23), Ex[0:8], s))
        with m.Else():
            m.d.comb += self.y.eq(r)
        return m
