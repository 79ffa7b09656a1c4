"""Base-2 exponential unit (combinational, or pipelined in up to 3 stages): table + linear
interpolation."""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from tricut.models.te import EXP2_FRAC_BITS, EXP2_INTERP_BITS, EXP2_SEG_BITS, EXP2_TABLE

from .fputil import ONE, QNAN, Pipe, check_stages, fields, round_pack, valid_ports

__all__ = ["Exp2"]

_SEGS = 1 << EXP2_SEG_BITS
_DBITS = 21


class Exp2(wiring.Component):
    """``y = 2**x`` for ``x <= 0``; bit-exact with :func:`tricut.models.te.exp2`.

    ``u = -x`` is truncated to fixed point (24 fraction bits), ``u = I + f``; a 1024-word ROM
    holds ``T[j] = round(2**(30 - j/1024))`` and ``T[j] - T[j+1]``; ``2**-f`` is the linear
    interpolation (floor) on the low 14 bits of ``f``; the result is rounded RNE to fp32 with
    exponent ``-I``. ``x <= -126`` and ``-inf`` give +0, ±0 and positive ``x`` give 1.0, NaN
    gives the canonical NaN.

    Parameters
    ----------
    stages : int, 0..3
        Latency in cycles: ``y`` is valid ``stages`` cycles after ``x``, one new operation per
        cycle. 0 (default): combinational, asynchronous ROM read. The registers are taken in
        :attr:`CUTS` order: ``out`` (the result), ``lut`` (a synchronous ROM read, after the
        shift to ``U``), ``interp`` (after the interpolation; round in the last stage). With
        ``stages`` > 0, ``y_valid`` is ``valid`` delayed by ``stages``.
    """

    CUTS = ("out", "lut", "interp")

    def __init__(self, stages=0):
        self.stages = check_stages("Exp2", stages, self.CUTS)
        super().__init__({"x": In(32), "y": Out(32)} | valid_ports(stages))

    def elaborate(self, platform):
        m = Module()
        pipe = Pipe(m, self.stages, self.CUTS)
        pipe.valid(self)
        init = [EXP2_TABLE[j] | (EXP2_TABLE[j] - EXP2_TABLE[j + 1]) << 31 for j in range(_SEGS)]
        assert all(EXP2_TABLE[j] - EXP2_TABLE[j + 1] < (1 << _DBITS) for j in range(_SEGS))
        m.submodules.rom = rom = Memory(shape=unsigned(31 + _DBITS), depth=_SEGS, init=init)
        rd = rom.read_port(domain="sync" if "lut" in pipe.cuts else "comb")
        s, e, f = fields(self.x)
        mant = Cat(f, Const(1, 1))
        sh = Signal(signed(10))
        e_s = Signal(signed(10))
        m.d.comb += [e_s.eq(e), sh.eq(e_s - 126)]
        shl = Signal(3)
        shr = Signal(7)
        U = Signal(31)
        with m.If(sh >= 0):
            m.d.comb += [shl.eq(Mux(sh > 7, 7, sh[0:3])), U.eq((mant << shl)[0:31])]
        with m.Else():
            m.d.comb += [shr.eq(Mux(-sh > 63, 63, (-sh)[0:7])), U.eq(mant >> shr)]
        I = U[EXP2_FRAC_BITS:31]
        phi = U[0:EXP2_FRAC_BITS]
        m.d.comb += rd.addr.eq(phi[EXP2_INTERP_BITS:EXP2_FRAC_BITS])
        c_nan, c_one, c_big = (e == 0xFF) & (f != 0), (s == 0) | (e == 0), e >= 127 + 7
        phi_lo, I, c_nan, c_one, c_big = pipe("lut", phi_lo=phi[0:EXP2_INTERP_BITS], I=I,
                                              c_nan=c_nan, c_one=c_one, c_big=c_big)
        T = rd.data[0:31]
        D = rd.data[31:31 + _DBITS]
        p = Signal(31)
        m.d.comb += p.eq(T - ((D * phi_lo) >> EXP2_INTERP_BITS))
        p, I, c_nan, c_one, c_big = pipe("interp", p=p, I=I, c_nan=c_nan, c_one=c_one,
                                         c_big=c_big)
        exact = p[30]
        I_s = Signal(signed(10))
        E = Signal(signed(12))
        M = Signal(30)
        m.d.comb += [I_s.eq(I), E.eq(Mux(exact, 127 - I_s, 126 - I_s)),
                     M.eq(Mux(exact, p >> 1, p))]
        r = round_pack(m, Const(0, 1), E, M, 6, "exp2")
        y = pipe.out(self.y)
        with m.If(c_nan):
            m.d.comb += y.eq(QNAN)
        with m.Elif(c_one):
            m.d.comb += y.eq(ONE)
        with m.Elif(c_big | (I >= 126)):
            m.d.comb += y.eq(0)
        with m.Else():
            m.d.comb += y.eq(r)
        return m
