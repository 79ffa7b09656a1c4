"""RV32IM instruction decoder (combinational)."""

from amaranth import Cat, Const, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .layouts import CSR, Opcode

__all__ = ["Decoder"]


class Decoder(wiring.Component):
    """Decode one 32-bit instruction word into fields, an immediate and a class.

    Purely combinational: every output is valid in the same cycle as ``insn``.

    Exactly one of the class outputs (``lui`` ... ``wfi``) is 1 for a legal instruction;
    ``illegal`` is 1 (and all classes 0) for any encoding outside RV32IM + Zicsr + the
    machine-mode ``ecall``/``ebreak``/``mret``/``wfi``, including all 16-bit (compressed)
    encodings, reserved ``funct3``/``funct7`` values, ``0x00000000`` and ``0xffffffff``.
    ``fence`` covers both FENCE and FENCE.I (no caches, so both are no-ops), ``wfi`` is a
    no-op as well (no interrupts).

    ``imm`` is the sign-extended immediate of the I/S/B/U/J format of the instruction
    (0 for R-type). ``alu_alt`` selects SUB over ADD and SRA/SRAI over SRL/SRLI.
    ``writes_rd`` is 1 when the instruction class writes ``rd`` (x0 included; the core
    discards writes to x0). A CSR instruction is legal only for an address in
    :class:`~.layouts.CSR` and, when it writes (``csr_writes``), only for a writable one
    (address bits 11:10 != 0b11).
    """

    insn: In(32)

    rd: Out(5)
    rs1: Out(5)
    rs2: Out(5)
    funct3: Out(3)
    imm: Out(32)
    alu_alt: Out(1)
    writes_rd: Out(1)
    csr_addr: Out(12)
    csr_writes: Out(1)  # the CSR instruction writes its CSR (csrrw*, or csrrs/c* with rs1/uimm != 0)

    lui: Out(1)
    auipc: Out(1)
    jal: Out(1)
    jalr: Out(1)
    branch: Out(1)
    load: Out(1)
    store: Out(1)
    alu_imm: Out(1)
    alu_reg: Out(1)
    mul: Out(1)
    div: Out(1)
    fence: Out(1)
    csr: Out(1)
    ecall: Out(1)
    ebreak: Out(1)
    mret: Out(1)
    wfi: Out(1)
    illegal: Out(1)

    def elaborate(self, platform):
        m = Module()
        insn = self.insn
        opcode = insn[0:7]
        funct3 = insn[12:15]
        funct7 = insn[25:32]

        m.d.comb += [
            self.rd.eq(insn[7:12]),
            self.rs1.eq(insn[15:20]),
            self.rs2.eq(insn[20:25]),
            self.funct3.eq(funct3),
            self.csr_addr.eq(insn[20:32]),
        ]

        imm_i = Cat(insn[20:32], insn[31].replicate(20))
        imm_s = Cat(insn[7:12], insn[25:32], insn[31].replicate(20))
        imm_b = Cat(Const(0, 1), insn[8:12], insn[25:31], insn[7], insn[31].replicate(20))
        imm_u = Cat(Const(0, 12), insn[12:32])
        imm_j = Cat(Const(0, 1), insn[21:31], insn[20], insn[12:20], insn[31].replicate(12))

        with m.Switch(opcode):
            with m.Case(Opcode.LUI):
                m.d.comb += [self.lui.eq(1), self.imm.eq(imm_u)]
            with m.Case(Opcode.AUIPC):
                m.d.comb += [self.auipc.eq(1), self.imm.eq(imm_u)]
            with m.Case(Opcode.JAL):
                m.d.comb += [self.jal.eq(1), self.imm.eq(imm_j)]
            with m.Case(Opcode.JALR):
                m.d.comb += [self.jalr.eq(funct3 == 0), self.imm.eq(imm_i)]
            with m.Case(Opcode.BRANCH):
                m.d.comb += [self.branch.eq((funct3 != 2) & (funct3 != 3)), self.imm.eq(imm_b)]
            with m.Case(Opcode.LOAD):
                m.d.comb += [self.load.eq((funct3 != 3) & (funct3 != 6) & (funct3 != 7)),
                             self.imm.eq(imm_i)]
            with m.Case(Opcode.STORE):
                m.d.comb += [self.store.eq(funct3 < 3), self.imm.eq(imm_s)]
            with m.Case(Opcode.OP_IMM):
                m.d.comb += self.imm.eq(imm_i)
                with m.Switch(funct3):
                    with m.Case(0b001):  # slli
                        m.d.comb += self.alu_imm.eq(funct7 == 0)
                    with m.Case(0b101):  # srli / srai
                        m.d.comb += [self.alu_imm.eq((funct7 == 0) | (funct7 == 0b0100000)),
                                     self.alu_alt.eq(insn[30])]
                    with m.Default():
                        m.d.comb += self.alu_imm.eq(1)
            with m.Case(Opcode.OP):
                with m.Switch(funct7):
                    with m.Case(0b0000000):
                        m.d.comb += self.alu_reg.eq(1)
                    with m.Case(0b0100000):  # sub, sra
                        m.d.comb += [self.alu_reg.eq((funct3 == 0) | (funct3 == 5)),
                                     self.alu_alt.eq(1)]
                    with m.Case(0b0000001):  # M extension
                        m.d.comb += [self.mul.eq(~funct3[2]), self.div.eq(funct3[2])]
            with m.Case(Opcode.MISC_MEM):
                m.d.comb += self.fence.eq((funct3 == 0) | (funct3 == 1))
            with m.Case(Opcode.SYSTEM):
                m.d.comb += self.imm.eq(imm_i)
                with m.If(funct3 == 0):
                    with m.Switch(insn):
                        with m.Case(0x00000073):
                            m.d.comb += self.ecall.eq(1)
                        with m.Case(0x00100073):
                            m.d.comb += self.ebreak.eq(1)
                        with m.Case(0x30200073):
                            m.d.comb += self.mret.eq(1)
                        with m.Case(0x10500073):
                            m.d.comb += self.wfi.eq(1)
                with m.Elif(funct3 != 4):
                    csr_known = Signal()
                    with m.Switch(insn[20:32]):
                        for addr in CSR:
                            with m.Case(addr):
                                m.d.comb += csr_known.eq(1)
                    m.d.comb += [
                        # csrrw/csrrwi always write; csrrs/c(i) only with a non-zero source
                        self.csr_writes.eq((funct3[0:2] == 1) | (insn[15:20] != 0)),
                        self.csr.eq(csr_known & ~(self.csr_writes & (insn[30:32] == 0b11))),
                    ]

        m.d.comb += [
            self.writes_rd.eq(self.lui | self.auipc | self.jal | self.jalr | self.load |
                              self.alu_imm | self.alu_reg | self.mul | self.div | self.csr),
            self.illegal.eq(~(self.lui | self.auipc | self.jal | self.jalr | self.branch |
                              self.load | self.store | self.alu_imm | self.alu_reg |
                              self.mul | self.div | self.fence | self.csr | self.ecall |
                              self.ebreak | self.mret | self.wfi)),
        ]
        return m
