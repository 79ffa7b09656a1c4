"""Base-2 exponential unit (combinational): table + linear interpolation."""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from tricut.models.te import EXP2_FRAC_BITS, EXP2_INTERP_BITS, EXP2_SEG_BITS, EXP2_TABLE

from .fputil import ONE, QNAN, fields, round_pack

__all__ = ["Exp2"]

_SEGS = 1 << EXP2_SEG_BITS
_DBITS = 21


class Exp2(wiring.Component):
    """``y = 2**x`` for ``x <= 0``; bit-exact with :func:`tricut.models.te.exp2`.

    ``u = -x`` is truncated to fixed point (24 fraction bits), ``u = I + f``; a 1024-word ROM
    holds ``T[j] = round(2**(30 - j/1024))`` and ``T[j] - T[j+1]``; ``2**-f`` is the linear
    interpolation (floor) on the low 14 bits of ``f``; the result is rounded RNE to fp32 with
    exponent ``-I``. ``x <= -126`` and ``-inf`` give +0, ±0 and positive ``x`` give 1.0, NaN
    gives the canonical NaN. Combinational (asynchronous ROM read)."""

    x: In(32)
    y: Out(32)

    def elaborate(self, platform):
        m = Module()
        init = [EXP2_TABLE[j] | (EXP2_TABLE[j] - EXP2_TABLE[j + 1]) << 31 for j in range(_SEGS)]
        assert all(EXP2_TABLE[j] - EXP2_TABLE[j + 1] < (1 << _DBITS) for j in range(_SEGS))
        m.submodules.rom = rom = Memory(shape=unsigned(31 + _DBITS), depth=_SEGS, init=init)
        rd = rom.read_port(domain="comb")
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
        T = rd.data[0:31]
        D = rd.data[31:31 + _DBITS]
        p = Signal(31)
        m.d.comb += p.eq(T - ((D * phi[0:EXP2_INTERP_BITS]) >> EXP2_INTERP_BITS))
        exact = p[30]
        I_s = Signal(signed(10))
        E = Signal(signed(12))
        M = Signal(30)
        m.d.comb += [I_s.eq(I), E.eq(Mux(exact, 127 - I_s, 126 - I_s)),
                     M.eq(Mux(exact, p >> 1, p))]
        r = round_pack(m, Const(0, 1), E, M, 6, "exp2")
        nan = (e == 0xFF) & (f != 0)
        with m.If(nan):
            m.d.comb += self.y.eq(QNAN)
        with m.Elif((s == 0) | (e == 0)):
            m.d.comb += self.y.eq(ONE)
        with m.Elif((e >= 127 + 7) | (I >= 126)):
            m.d.comb += self.y.eq(0)
        with m.Else():
            m.d.comb += self.y.eq(r)
        return m
