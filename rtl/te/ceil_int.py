"""fp32 ceiling to an integer value (the split engine's running-maximum candidate)."""

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .fputil import ONE, fields

__all__ = ["CeilInt"]


class CeilInt(wiring.Component):
    """``y = ceil_int(x)`` bit for bit with :func:`tricut.models.te.ceil_int`: the smallest
    integer ``>= x`` as fp32; ``(-1, 0]`` and subnormals give +0, a positive ``x < 1`` gives
    1; ``|x| >= 2**23``, ±inf and NaN pass unchanged. Combinational.

    For ``1 <= |x| < 2**23`` the low ``150 - E`` fraction bits are the fraction of the value:
    clearing them truncates toward zero (the ceiling of a negative ``x``); a positive ``x``
    with any of them set gets one unit added at the integer LSB, and a carry out of the
    fraction field correctly bumps the exponent.
    """

    def __init__(self):
        super().__init__({"x": In(32), "y": Out(32)})

    def elaborate(self, platform):
        m = Module()
        s, e, _ = fields(self.x)
        frac_bits = Signal(5)
        m.d.comb += frac_bits.eq(Mux(e >= 150, 0, 150 - e))
        unit = Signal(24)
        m.d.comb += unit.eq(1 << frac_bits)
        mask = Signal(32)
        m.d.comb += mask.eq(unit - 1)
        trunc = Signal(32)
        m.d.comb += trunc.eq(self.x & ~mask)
        up = ~s & ((self.x & mask) != 0)
        with m.If(e < 127):
            m.d.comb += self.y.eq(Mux(~s & (e != 0), ONE, 0))
        with m.Elif(e < 150):
            m.d.comb += self.y.eq(Mux(up, trunc + unit, trunc))
        with m.Else():
            m.d.comb += self.y.eq(self.x)
        return m
