"""fp32 scaling by a power of two: an exponent subtraction in place of a multiplier."""

from amaranth.hdl import Cat, Const, Module, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .fputil import POS_INF, QNAN, fields

__all__ = ["Pow2Scale"]


class Pow2Scale(wiring.Component):
    """``y = fmul(a, p)`` (:func:`tricut.models.te.fmul`, bit for bit) when ``p`` has a zero
    fraction field: ``p`` a power of two, ±0, ±inf, or any NaN. The split engine's
    ``alpha = exp2_diff(m, m')`` of two integer maxima is always one of these (``2**-k`` for
    ``k`` in 0..125, +0, 1 or NaN), so its rescale needs no multiplier. Combinational.

    A product of a normal ``a`` and a power of two is exact, so nothing rounds: the exponents
    add, a result below ``2**-126`` is flushed to a signed zero, one at ``2**128`` or above
    is ±inf. NaN in, ``inf * 0`` -> the canonical NaN.
    """

    def __init__(self):
        super().__init__({"a": In(32), "p": In(32), "y": Out(32)})

    def elaborate(self, platform):
        m = Module()
        sa, ea, fa = fields(self.a)
        sp, ep, fp = fields(self.p)
        s = sa ^ sp
        nan = ((ea == 0xFF) & (fa != 0)) | ((ep == 0xFF) & (fp != 0))
        inf_a, inf_p = (ea == 0xFF) & (fa == 0), ep == 0xFF
        zero_a, zero_p = ea == 0, ep == 0
        E = Signal(signed(10))
        m.d.comb += E.eq(ea + ep - 127)
        with m.If(nan | (inf_a & zero_p) | (inf_p & zero_a)):
            m.d.comb += self.y.eq(QNAN)
        with m.Elif(inf_a | inf_p | (E >= 255)):
            m.d.comb += self.y.eq(Cat(Const(POS_INF, 31), s))
        with m.Elif(zero_a | zero_p | (E < 1)):
            m.d.comb += self.y.eq(Cat(Const(0, 31), s))
        with m.Else():
            m.d.comb += self.y.eq(Cat(fa, E[0:8], s))
        return m
