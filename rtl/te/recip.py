"""fp32 reciprocal (combinational, or pipelined in up to 5 stages; correctly rounded)."""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .fputil import POS_INF, QNAN, Pipe, check_stages, fields, round_pack, valid_ports

__all__ = ["FP32Recip"]

_QBITS = 26         # quotient bits of 2**48 // mant, mant in [2**23, 2**24)


class FP32Recip(wiring.Component):
    """``y = 1 / x`` rounded RNE with flush-to-zero; bit-exact with
    :func:`tricut.models.te.frecip`. A 49-by-24-bit integer divider gives the quotient and a
    sticky remainder. ±0 -> ±inf, ±inf -> ±0, NaN -> NaN.

    Parameters
    ----------
    stages : int, 0..5
        Latency in cycles: ``y`` is valid ``stages`` cycles after ``x``, one new operation per
        cycle. 0 (default): combinational. 1: the result is registered (``out``). k >= 2: the
        divider is a restoring array of 26 quotient steps cut into k - 1 registered stages
        (``div1`` ...; 7, 7, 6, 6 steps at k = 5), then round + ``out``. With ``stages`` > 0,
        ``y_valid`` is ``valid`` delayed by ``stages``.
    """

    CUTS = ("out", "div1", "div2", "div3", "div4")

    def __init__(self, stages=0):
        self.stages = check_stages("FP32Recip", stages, self.CUTS)
        super().__init__({"x": In(32), "y": Out(32)} | valid_ports(stages))

    def _divide(self, m, pipe, mant, flags):
        """Restoring division of 2**48 by ``mant``, registered after each chunk of steps."""
        n_div = self.stages - 1
        r, q = Const(1 << 22, 24), []          # 2**48 >> 26: no quotient bit above bit 25
        for c in range(n_div):
            for j in range(_QBITS * c // n_div, _QBITS * (c + 1) // n_div):
                t = Signal(25, name=f"div_t{j}")
                m.d.comb += t.eq(r << 1)
                ge = t >= mant
                r = Signal(24, name=f"div_r{j}")
                m.d.comb += r.eq(Mux(ge, t - mant, t))
                q.append(ge)
            r, qv, mant, *flags = pipe(f"div{c + 1}", r=r, q=Cat(*reversed(q)), mant=mant,
                                       **flags)
            q = [qv[i] for i in reversed(range(len(q)))]
            flags = dict(zip(("s", "e", "c_nan", "c_inf", "c_zero", "c_pow2"), flags))
        return Cat(*reversed(q)), r, flags

    def elaborate(self, platform):
        m = Module()
        pipe = Pipe(m, self.stages, self.CUTS)
        pipe.valid(self)
        s, e, f = fields(self.x)
        mant = Cat(f, Const(1, 1))
        flags = dict(s=s, e=e, c_nan=(e == 0xFF) & (f != 0), c_inf=e == 0xFF, c_zero=e == 0,
                     c_pow2=f == 0)
        Q = Signal(26)
        R = Signal(24)
        if self.stages >= 2:
            q, r, flags = self._divide(m, pipe, mant, flags)
            m.d.comb += [Q.eq(q), R.eq(r)]
        else:
            m.d.comb += [Q.eq(Const(1 << 48, 49) // mant), R.eq(Const(1 << 48, 49) % mant)]
        s, e = flags["s"], flags["e"]
        M = Signal(26)
        m.d.comb += M.eq(Cat(R != 0, Q[0:25]))
        e_s = Signal(signed(12))
        E = Signal(signed(12))
        Ex = Signal(signed(12))
        m.d.comb += [e_s.eq(e), E.eq(253 - e_s), Ex.eq(254 - e_s)]
        r = round_pack(m, s, E, M, 2, "recip")
        y = pipe.out(self.y)
        with m.If(flags["c_nan"]):
            m.d.comb += y.eq(QNAN)
        with m.Elif(flags["c_inf"]):
            m.d.comb += y.eq(Cat(Const(0, 31), s))
        with m.Elif(flags["c_zero"]):
            m.d.comb += y.eq(Cat(Const(POS_INF, 31), s))
        with m.Elif(flags["c_pow2"]):
            with m.If(Ex < 1):
                m.d.comb += y.eq(Cat(Const(0, 31), s))
            with m.Else():
                m.d.comb += y.eq(Cat(Const(0, 23), Ex[0:8], s))
        with m.Else():
            m.d.comb += y.eq(r)
        return m
