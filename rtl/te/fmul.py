"""fp32 multiplier (combinational)."""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .fputil import POS_INF, QNAN, fields, round_pack

__all__ = ["FP32Mul"]


class FP32Mul(wiring.Component):
    """``y = a * b`` in fp32, RNE, flush-to-zero; bit-exact with :func:`tricut.models.te.fmul`.

    Combinational: ``y`` is valid in the same cycle as ``a`` and ``b``."""

    a: In(32)
    b: In(32)
    y: Out(32)

    def elaborate(self, platform):
        m = Module()
        sa, ea, fa = fields(self.a)
        sb, eb, fb = fields(self.b)
        s = Signal()
        m.d.comb += s.eq(sa ^ sb)
        nan_a = (ea == 0xFF) & (fa != 0)
        nan_b = (eb == 0xFF) & (fb != 0)
        inf_a = (ea == 0xFF) & (fa == 0)
        inf_b = (eb == 0xFF) & (fb == 0)
        zero_a = ea == 0
        zero_b = eb == 0
        P = Signal(48)
        m.d.comb += P.eq(Cat(fa, Const(1, 1)) * Cat(fb, Const(1, 1)))
        top = P[47]
        Pn = Signal(48)
        m.d.comb += Pn.eq(Mux(top, P, P << 1))
        ea_s = Signal(signed(12))
        eb_s = Signal(signed(12))
        E = Signal(signed(12))
        m.d.comb += [ea_s.eq(ea), eb_s.eq(eb), E.eq(ea_s + eb_s - 127 + top)]
        r = round_pack(m, s, E, Pn, 24, "mul")
        with m.If(nan_a | nan_b | (inf_a & zero_b) | (inf_b & zero_a)):
            m.d.comb += self.y.eq(QNAN)
        with m.Elif(inf_a | inf_b):
            m.d.comb += self.y.eq(Cat(Const(POS_INF, 31), s))
        with m.Elif(zero_a | zero_b):
            m.d.comb += self.y.eq(Cat(Const(0, 31), s))
        with m.Else():
            m.d.comb += self.y.eq(r)
        return m

