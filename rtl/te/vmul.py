"""The split engine's V-lane multiplier: 24 x 8 bits, with a three-pass mode for a full product."""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .fputil import POS_INF, QNAN, Pipe, check_stages, fields, round_pack

__all__ = ["VLaneMul"]

#: significand bits of ``b`` one pass multiplies
SLICE = 8


class VLaneMul(wiring.Component):
    """``y = fmul(a, b)`` (:func:`tricut.models.te.fmul`, bit for bit) on a 24 x 8-bit array.

    ``three = 0``: one pass, combinational: the top 8 bits of ``b``'s significand (the rest
    taken as zero), exact for ``b`` a bf16 or E4M3 value -- the V operation ``p * v``.
    ``three = 1``: a full 24 x 24 product in three passes over the significand's 8-bit slices,
    high first, ``a`` and ``b`` held: ``pass_`` 0 and 1 accumulate into a 40-bit register at
    the clock edge (when ``en``), ``y`` is valid during ``pass_ == 2`` -- the output's
    ``o * (1/l)``. The sum of the slices' products is the exact 48-bit product, rounded once,
    so three passes give the same bits as :class:`.fmul.FP32Mul`.

    ``stages`` 0 (default): ``y`` as above, combinational. 1 (:attr:`CUTS` ``out``): ``y`` is
    registered, valid one cycle later (the pipelined engine's V lanes; the three-pass result
    is held while ``a``, ``b`` and ``pass_ == 2`` are).
    """

    CUTS = ("out",)

    def __init__(self, stages=0):
        self.stages = check_stages("VLaneMul", stages, self.CUTS)
        super().__init__({"a": In(32), "b": In(32), "three": In(1), "pass_": In(2),
                          "en": In(1), "y": Out(32)})

    def elaborate(self, platform):
        m = Module()
        y = Pipe(m, self.stages, self.CUTS).out(self.y)
        sa, ea, fa = fields(self.a)
        sb, eb, fb = fields(self.b)
        s = sa ^ sb
        ma, mb = Cat(fa, Const(1, 1)), Cat(fb, Const(1, 1))
        zero_a, zero_b = ea == 0, eb == 0
        inf_a, inf_b = (ea == 0xFF) & (fa == 0), (eb == 0xFF) & (fb == 0)
        nan = ((ea == 0xFF) & (fa != 0)) | ((eb == 0xFF) & (fb != 0))
        top_slice = mb[2 * SLICE:3 * SLICE]
        b_slice = Signal(SLICE)
        with m.Switch(Mux(self.three, self.pass_, 0)):
            with m.Case(1):
                m.d.comb += b_slice.eq(mb[SLICE:2 * SLICE])
            with m.Case(2):
                m.d.comb += b_slice.eq(mb[0:SLICE])
            with m.Default():
                m.d.comb += b_slice.eq(top_slice)
        pp = Signal(24 + SLICE)
        m.d.comb += pp.eq(ma * b_slice)
        acc = Signal(24 + 2 * SLICE, reset_less=True)
        with m.If(self.en & self.three):
            m.d.sync += acc.eq(Mux(self.pass_ == 0, pp, (acc << SLICE) + pp))
        P = Signal(48)
        m.d.comb += P.eq(Mux(self.three, (acc << SLICE) + pp, pp << 2 * SLICE))
        top = P[47]
        Pn = Signal(48)
        m.d.comb += Pn.eq(Mux(top, P, P << 1))
        E = Signal(signed(12))
        ea_s, eb_s = Signal(signed(12)), Signal(signed(12))
        m.d.comb += [ea_s.eq(ea), eb_s.eq(eb), E.eq(ea_s + eb_s - 127 + top)]
        r = round_pack(m, s, E, Pn, 24, "vmul")
        with m.If(nan | (inf_a & zero_b) | (inf_b & zero_a)):
            m.d.comb += y.eq(QNAN)
        with m.Elif(inf_a | inf_b):
            m.d.comb += y.eq(Cat(Const(POS_INF, 31), s))
        with m.Elif(zero_a | zero_b):
            m.d.comb += y.eq(Cat(Const(0, 31), s))
        with m.Else():
            m.d.comb += y.eq(r)
        return m
