"""fp32 adder (combinational, or pipelined in up to 3 stages)."""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .fputil import QNAN, Pipe, check_stages, fields, round_pack, valid_ports

__all__ = ["FP32Add", "fadd_logic"]


def fadd_logic(m, a, b, name, pipe=None, y=None):
    """Add fp32 ``a + b`` logic to ``m``, registered at ``pipe``'s cuts (see :class:`FP32Add`);
    writes the result to ``y`` (default: a new signal) and returns it."""
    pipe = pipe or Pipe(m, 0, ())
    sa, ea, fa = fields(a)
    sb, eb, fb = fields(b)
    zero_a = Signal(name=f"{name}_za")
    zero_b = Signal(name=f"{name}_zb")
    m.d.comb += [zero_a.eq(ea == 0), zero_b.eq(eb == 0)]
    mag_a = Mux(zero_a, 0, a[0:31])
    mag_b = Mux(zero_b, 0, b[0:31])
    swap = Signal(name=f"{name}_swap")
    m.d.comb += swap.eq(mag_b > mag_a)
    sL, eL, fL = (Signal(1, name=f"{name}_sL"), Signal(8, name=f"{name}_eL"),
                  Signal(23, name=f"{name}_fL"))
    sS, eS, fS = (Signal(1, name=f"{name}_sS"), Signal(8, name=f"{name}_eS"),
                  Signal(23, name=f"{name}_fS"))
    m.d.comb += [
        sL.eq(Mux(swap, sb, sa)), eL.eq(Mux(swap, eb, ea)), fL.eq(Mux(swap, fb, fa)),
        sS.eq(Mux(swap, sa, sb)), eS.eq(Mux(swap, ea, eb)), fS.eq(Mux(swap, fa, fb)),
    ]
    ML = Cat(Const(0, 3), fL, Const(1, 1))        # 27 bits, leading one at bit 26
    MS = Cat(Const(0, 3), fS, Const(1, 1))
    dd = Signal(8, name=f"{name}_dd")
    d = Signal(5, name=f"{name}_d")
    m.d.comb += [dd.eq(eL - eS), d.eq(Mux(dd > 27, 27, dd))]
    shifted = Signal(27, name=f"{name}_shifted")
    m.d.comb += shifted.eq(MS >> d)
    sticky = Signal(name=f"{name}_sticky")
    m.d.comb += sticky.eq((shifted << d)[0:27] != MS)
    MSs = Signal(27, name=f"{name}_mss")
    m.d.comb += MSs.eq(shifted | sticky)
    sL, sS, eL, ML, MSs, a, b, zero_a, zero_b = pipe(
        "align", sL=sL, sS=sS, eL=eL, ML=ML, MSs=MSs, a=a, b=b, za=zero_a, zb=zero_b)
    R = Signal(28, name=f"{name}_R")
    with m.If(sL != sS):
        m.d.comb += R.eq(ML - MSs)
    with m.Else():
        m.d.comb += R.eq(ML + MSs)
    carry = R[27]
    R1 = Signal(27, name=f"{name}_R1")
    m.d.comb += R1.eq(Mux(carry, Cat(R[0] | R[1], R[2:28]), R[0:27]))
    pos = Signal(5, name=f"{name}_pos")
    for i in range(27):
        with m.If(R1[i]):
            m.d.comb += pos.eq(i)
    lsh = Signal(5, name=f"{name}_lsh")
    m.d.comb += lsh.eq(26 - pos)
    R2 = Signal(27, name=f"{name}_R2")
    m.d.comb += R2.eq((R1 << lsh)[0:27])
    eL_s = Signal(signed(12), name=f"{name}_eLs")
    E = Signal(signed(12), name=f"{name}_E")
    m.d.comb += [eL_s.eq(eL), E.eq(eL_s + carry - lsh)]
    sL, E, R2, Rz, a, b, zero_a, zero_b = pipe(
        "add", sL=sL, E=E, R2=R2, Rz=R == 0, a=a, b=b, za=zero_a, zb=zero_b)
    sa, ea, fa = fields(a)
    sb, eb, fb = fields(b)
    nan_a = (ea == 0xFF) & (fa != 0)
    nan_b = (eb == 0xFF) & (fb != 0)
    inf_a = (ea == 0xFF) & (fa == 0)
    inf_b = (eb == 0xFF) & (fb == 0)
    r = round_pack(m, sL, E, R2, 3, name)
    y = Signal(32, name=f"{name}_y") if y is None else y
    with m.If(nan_a | nan_b | (inf_a & inf_b & (sa != sb))):
        m.d.comb += y.eq(QNAN)
    with m.Elif(inf_a):
        m.d.comb += y.eq(a)
    with m.Elif(inf_b):
        m.d.comb += y.eq(b)
    with m.Elif(zero_a & zero_b):
        m.d.comb += y.eq(Cat(Const(0, 31), sa & sb))
    with m.Elif(zero_a):
        m.d.comb += y.eq(b)
    with m.Elif(zero_b):
        m.d.comb += y.eq(a)
    with m.Elif(Rz):
        m.d.comb += y.eq(0)
    with m.Else():
        m.d.comb += y.eq(r)
    return y


class FP32Add(wiring.Component):
    """``y = a + b`` in fp32, RNE, flush-to-zero; bit-exact with :func:`tricut.models.te.fadd`.
    Alignment keeps guard, round and sticky bits.

    Parameters
    ----------
    stages : int, 0..3
        Latency in cycles: ``y`` is valid ``stages`` cycles after ``a`` and ``b``, one new
        operation per cycle. 0 (default): combinational, ``y`` valid in the same cycle. The
        registers are taken in :attr:`CUTS` order: ``out`` (the result), ``align`` (after
        compare, swap, align and sticky), ``add`` (after the add and the leading-zero count;
        normalise + round in the last stage). ``a`` and ``b`` ride along for the special cases.
        With ``stages`` > 0, ``y_valid`` is ``valid`` delayed by ``stages``.
    """

    CUTS = ("out", "align", "add")

    def __init__(self, stages=0):
        self.stages = check_stages("FP32Add", stages, self.CUTS)
        super().__init__({"a": In(32), "b": In(32), "y": Out(32)} | valid_ports(stages))

    def elaborate(self, platform):
        m = Module()
        pipe = Pipe(m, self.stages, self.CUTS)
        pipe.valid(self)
        if self.stages:
            fadd_logic(m, self.a, self.b, "add", pipe, pipe.out(self.y))
        else:
            m.d.comb += self.y.eq(fadd_logic(m, self.a, self.b, "add"))
        return m
