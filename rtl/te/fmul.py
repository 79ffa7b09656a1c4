"""fp32 multiplier (combinational, or pipelined in up to 3 stages)."""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .fputil import POS_INF, QNAN, Pipe, check_stages, fields, round_pack, valid_ports

__all__ = ["FP32Mul"]


class FP32Mul(wiring.Component):
    """``y = a * b`` in fp32, RNE, flush-to-zero; bit-exact with :func:`tricut.models.te.fmul`.

    Parameters
    ----------
    stages : int, 0..3
        Latency in cycles: ``y`` is valid ``stages`` cycles after ``a`` and ``b``, one new
        operation per cycle. 0 (default): combinational, ``y`` valid in the same cycle. The
        registers are taken in :attr:`CUTS` order: ``out`` (the result), ``sum`` (after the
        24x24 product: normalise + round in the last stage), ``pp`` (after two 24x12 partial
        products). With ``stages`` > 0, ``y_valid`` is ``valid`` delayed by ``stages``.
    """

    CUTS = ("out", "sum", "pp")

    def __init__(self, stages=0):
        self.stages = check_stages("FP32Mul", stages, self.CUTS)
        super().__init__({"a": In(32), "b": In(32), "y": Out(32)} | valid_ports(stages))

    def elaborate(self, platform):
        m = Module()
        pipe = Pipe(m, self.stages, self.CUTS)
        pipe.valid(self)
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
        c_nan = nan_a | nan_b | (inf_a & zero_b) | (inf_b & zero_a)
        c_inf = inf_a | inf_b
        c_zero = zero_a | zero_b
        P = Signal(48)
        ma, mb = Cat(fa, Const(1, 1)), Cat(fb, Const(1, 1))
        if "pp" in pipe.cuts:
            lo, hi, E0, s, c_nan, c_inf, c_zero = pipe(
                "pp", lo=ma * mb[0:12], hi=ma * mb[12:24], E0=ea + eb - 127, s=s,
                c_nan=c_nan, c_inf=c_inf, c_zero=c_zero)
            m.d.comb += P.eq(lo + (hi << 12))
        else:
            m.d.comb += P.eq(ma * mb)
        top = P[47]
        Pn = Signal(48)
        m.d.comb += Pn.eq(Mux(top, P, P << 1))
        E = Signal(signed(12))
        if "pp" in pipe.cuts:
            m.d.comb += E.eq(E0 + top)
        else:
            ea_s = Signal(signed(12))
            eb_s = Signal(signed(12))
            m.d.comb += [ea_s.eq(ea), eb_s.eq(eb), E.eq(ea_s + eb_s - 127 + top)]
        Pn, E, s, c_nan, c_inf, c_zero = pipe("sum", Pn=Pn, E=E, s=s, c_nan=c_nan, c_inf=c_inf,
                                              c_zero=c_zero)
        r = round_pack(m, s, E, Pn, 24, "mul")
        y = pipe.out(self.y)
        with m.If(c_nan):
            m.d.comb += y.eq(QNAN)
        with m.Elif(c_inf):
            m.d.comb += y.eq(Cat(Const(POS_INF, 31), s))
        with m.Elif(c_zero):
            m.d.comb += y.eq(Cat(Const(0, 31), s))
        with m.Else():
            m.d.comb += y.eq(r)
        return m
