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
    a_bits, b_bits : int, 1..24
        Significand bits (the hidden one included) the multiplier reads from ``a`` / ``b``:
        the top ``a_bits`` of ``a``'s, the lower bits taken as zero. Default 24, a full fp32
        multiplier. Narrower, ``y == fmul(a, b)`` bit for bit whenever the operands' dropped
        bits are zero -- a bf16 value has 8 significant bits, an E4M3 value 4 -- and the
        multiplier array is ``a_bits x b_bits``: the TE's K lanes multiply bf16 q by bf16 or
        E4M3 keys, whose products are exact in 16 bits.
    """

    CUTS = ("out", "sum", "pp")

    def __init__(self, stages=0, a_bits=24, b_bits=24):
        self.stages = check_stages("FP32Mul", stages, self.CUTS)
        for name, bits in (("a_bits", a_bits), ("b_bits", b_bits)):
            if not isinstance(bits, int) or isinstance(bits, bool) or not 1 <= bits <= 24:
                raise ValueError(f"FP32Mul: {name} must be an int in 1..24, got {bits!r}")
        self.a_bits, self.b_bits = a_bits, b_bits
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
        # the significands' top a_bits / b_bits (the product of the rest is taken as zero)
        ma = Cat(fa, Const(1, 1))[24 - self.a_bits:]
        mb = Cat(fb, Const(1, 1))[24 - self.b_bits:]
        shift = 48 - self.a_bits - self.b_bits
        if "pp" in pipe.cuts:
            half = (self.b_bits + 1) // 2
            lo, hi, E0, s, c_nan, c_inf, c_zero = pipe(
                "pp", lo=ma * mb[0:half], hi=ma * mb[half:], E0=ea + eb - 127, s=s,
                c_nan=c_nan, c_inf=c_inf, c_zero=c_zero)
            m.d.comb += P.eq((lo + (hi << half)) << shift)
        else:
            m.d.comb += P.eq((ma * mb) << shift)
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
