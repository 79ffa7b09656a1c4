"""M-extension units: a single-cycle multiplier and a bit-serial divider."""

from amaranth import Cat, Module, Mux, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

__all__ = ["Multiplier", "Divider"]


class Multiplier(wiring.Component):
    """MUL / MULH / MULHSU / MULHU by ``funct3`` (000 / 001 / 010 / 011), combinational.

    Both operands are extended to 33 bits (sign or zero, per operand and ``funct3``) and
    multiplied as signed 33 x 33 -> 66 bits; MUL returns bits 31:0, the others bits 63:32.
    ``result`` is valid in the same cycle as the inputs.
    """

    a: In(32)
    b: In(32)
    funct3: In(3)
    result: Out(32)

    def elaborate(self, platform):
        m = Module()
        f = self.funct3[0:2]
        a_signed = (f == 0b01) | (f == 0b10)   # mulh, mulhsu
        b_signed = f == 0b01                   # mulh
        a = Signal(signed(33))
        b = Signal(signed(33))
        product = Signal(signed(66))
        m.d.comb += [
            a.eq(Cat(self.a, self.a[31] & a_signed)),
            b.eq(Cat(self.b, self.b[31] & b_signed)),
            product.eq(a * b),
            self.result.eq(Mux(f == 0, product[0:32], product[32:64])),
        ]
        return m


class Divider(wiring.Component):
    """DIV / DIVU / REM / REMU by ``funct3`` (100 / 101 / 110 / 111), one quotient bit per
    cycle (restoring division on magnitudes, signs fixed up at the end).

    Protocol: pulse ``start`` for one cycle with ``a``, ``b``, ``funct3`` valid; they are
    captured. ``done`` is 1 for one cycle, 33 cycles after ``start``, with ``result``
    valid on that cycle. ``busy`` is 1 from the cycle after ``start`` up to and including
    the ``done`` cycle. ``start`` while busy is ignored.

    RISC-V's defined results fall out of the algorithm: division by zero gives a quotient
    of all ones and the dividend as remainder (the quotient's sign fix-up is suppressed
    for b = 0); INT_MIN / -1 gives INT_MIN remainder 0.
    """

    start: In(1)
    a: In(32)
    b: In(32)
    funct3: In(3)
    busy: Out(1)
    done: Out(1)
    result: Out(32)

    def elaborate(self, platform):
        m = Module()
        is_signed = ~self.funct3[0]
        neg_a = is_signed & self.a[31]
        neg_b = is_signed & self.b[31]
        abs_a = Mux(neg_a, -self.a, self.a)[0:32]
        abs_b = Mux(neg_b, -self.b, self.b)[0:32]

        rem = Signal(32)      # partial remainder
        quo = Signal(32)      # dividend shifting out / quotient shifting in
        div = Signal(32)
        count = Signal(range(33))
        want_rem = Signal()
        neg_q = Signal()
        neg_r = Signal()

        with m.If(self.start & ~self.busy):
            m.d.sync += [
                rem.eq(0), quo.eq(abs_a), div.eq(abs_b), count.eq(32), self.busy.eq(1),
                want_rem.eq(self.funct3[1]),
                neg_q.eq((neg_a ^ neg_b) & (self.b != 0)),
                neg_r.eq(neg_a),
            ]
        with m.Elif(self.busy):
            with m.If(count != 0):
                trial = Cat(quo[31], rem)            # 33 bits: (rem << 1) | next dividend bit
                diff = trial - div
                ge = trial >= div
                m.d.sync += [
                    rem.eq(Mux(ge, diff, trial)[0:32]),
                    quo.eq(Cat(ge, quo[0:31])),
                    count.eq(count - 1),
                ]
            with m.Else():
                m.d.comb += self.done.eq(1)
                m.d.sync += self.busy.eq(0)

        q = Mux(neg_q, -quo, quo)[0:32]
        r = Mux(neg_r, -rem, rem)[0:32]
        m.d.comb += self.result.eq(Mux(want_rem, r, q))
        return m
