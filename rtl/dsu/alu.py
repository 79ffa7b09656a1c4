"""Integer ALU and branch comparator of the RV32IM core (combinational)."""

from amaranth import Module, Mux
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

__all__ = ["ALU", "BranchUnit"]


class ALU(wiring.Component):
    """RV32I register/immediate arithmetic, selected by ``funct3`` and ``alt``.

    ``funct3`` is the instruction's own field (000 add/sub, 001 sll, 010 slt, 011 sltu,
    100 xor, 101 srl/sra, 110 or, 111 and); ``alt`` picks sub over add and sra over srl.
    Shifts use ``b[4:0]`` only. ``result`` is valid in the same cycle as the inputs.
    """

    a: In(32)
    b: In(32)
    funct3: In(3)
    alt: In(1)
    result: Out(32)

    def elaborate(self, platform):
        m = Module()
        a, b = self.a, self.b
        shamt = b[0:5]
        with m.Switch(self.funct3):
            with m.Case(0b000):
                m.d.comb += self.result.eq(Mux(self.alt, a - b, a + b))
            with m.Case(0b001):
                m.d.comb += self.result.eq(a << shamt)
            with m.Case(0b010):
                m.d.comb += self.result.eq(a.as_signed() < b.as_signed())
            with m.Case(0b011):
                m.d.comb += self.result.eq(a < b)
            with m.Case(0b100):
                m.d.comb += self.result.eq(a ^ b)
            with m.Case(0b101):
                m.d.comb += self.result.eq(Mux(self.alt, a.as_signed() >> shamt, a >> shamt))
            with m.Case(0b110):
                m.d.comb += self.result.eq(a | b)
            with m.Case(0b111):
                m.d.comb += self.result.eq(a & b)
        return m


class BranchUnit(wiring.Component):
    """Branch condition for ``funct3`` of a BRANCH instruction (000 beq, 001 bne, 100 blt,
    101 bge, 110 bltu, 111 bgeu). ``taken`` is valid in the same cycle as the inputs; the
    reserved ``funct3`` values 010/011 are rejected by the decoder."""

    a: In(32)
    b: In(32)
    funct3: In(3)
    taken: Out(1)

    def elaborate(self, platform):
        m = Module()
        cond = Mux(self.funct3[2],
                   Mux(self.funct3[1], self.a < self.b, self.a.as_signed() < self.b.as_signed()),
                   self.a == self.b)
        m.d.comb += self.taken.eq(cond ^ self.funct3[0])
        return m
