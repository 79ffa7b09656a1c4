"""The DSU's RV32IM core: machine mode only, multi-cycle, one instruction at a time.

Microarchitecture (see ``docs/dsu.md``)::

    FETCH --ibus ready--> EXEC --load/store--> MEM --dbus ready--> (retire) FETCH
      ^                     |--div/rem-------> DIV --33 cycles---> (retire) FETCH
      |                     |--other---------------------------->  (retire) FETCH
      +---- trap (any state: pc <- mtvec) ------------------------------------+

CPI with a zero-wait-state bus: 2 for ALU/branch/jump/CSR/MUL, 3 for loads and stores,
35 for DIV/DIVU/REM/REMU; every bus wait state adds one cycle.
"""

from types import SimpleNamespace

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import enum, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import Out

from .alu import ALU, BranchUnit
from .decoder import Decoder
from .layouts import (CSR, MISA_RV32IM, MSTATUS_MPP, BusSignature, Cause,
                      TraceSignature, TrapSignature)
from .muldiv import Divider, Multiplier

__all__ = ["Core"]


class State(enum.Enum, shape=2):
    FETCH = 0
    EXEC = 1
    MEM = 2
    DIV = 3


def _check_u32(name, value, *, aligned=False):
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an integer, not {value!r}")
    if not 0 <= value < 2**32:
        raise ValueError(f"{name} must be in 0 .. 0xffffffff, not {value:#x}" if value >= 0
                         else f"{name} must be in 0 .. 0xffffffff, not {value}")
    if aligned and value % 4:
        raise ValueError(f"{name} must be a multiple of 4 (the core has no compressed "
                         f"instructions), not {value:#x}")


class Core(wiring.Component):
    """RV32IM core in machine mode.

    Parameters
    ----------
    hart_id : int
        Value of the read-only ``mhartid`` CSR, 0 .. 2**32-1.
    reset_vector : int
        Address of the first instruction fetched after reset (word aligned).
    trap_vector : int or None
        Reset value of ``mtvec`` (word aligned, direct mode); ``None`` means
        ``reset_vector``.

    Members
    -------
    ibus : Out(BusSignature)
        Instruction fetch (reads only, full words).
    dbus : Out(BusSignature)
        Loads and stores.
    trace : Out(TraceSignature)
        One cycle of ``valid`` per retired instruction, on the cycle its register write and
        pc update happen.
    trap : Out(TrapSignature)
        One cycle of ``valid`` per trap taken: illegal instruction, ecall, ebreak,
        misaligned jump target / load / store address, or a bus ``err`` on fetch, load or
        store. A trapping instruction does not retire, writes no register and stores
        nothing.

    Attributes
    ----------
    regfile : amaranth.lib.memory.Memory
        The 32 x 32 register file, created by :meth:`elaborate` (testbenches read it with
        ``ctx.get(core.regfile.data[i])``).
    """

    def __init__(self, *, hart_id=0, reset_vector=0, trap_vector=None):
        _check_u32("hart_id", hart_id)
        _check_u32("reset_vector", reset_vector, aligned=True)
        if trap_vector is None:
            trap_vector = reset_vector
        _check_u32("trap_vector", trap_vector, aligned=True)
        self.hart_id = hart_id
        self.reset_vector = reset_vector
        self.trap_vector = trap_vector
        super().__init__({
            "ibus": Out(BusSignature()),
            "dbus": Out(BusSignature()),
            "trace": Out(TraceSignature()),
            "trap": Out(TrapSignature()),
        })

    def elaborate(self, platform):
        m = Module()
        c = SimpleNamespace()
        m.submodules.decoder = c.dec = Decoder()
        m.submodules.alu = c.alu = ALU()
        m.submodules.branch = c.bru = BranchUnit()
        m.submodules.multiplier = c.mul = Multiplier()
        m.submodules.divider = c.divider = Divider()
        m.submodules.regfile = self.regfile = regfile = Memory(shape=32, depth=32, init=[])
        c.rp1 = regfile.read_port(domain="comb")
        c.rp2 = regfile.read_port(domain="comb")
        c.wp = regfile.write_port()

        c.state = Signal(State, init=State.FETCH)
        c.pc = Signal(32, init=self.reset_vector)
        c.insn = Signal(32)

        # -- architectural CSRs -----------------------------------------------------------
        c.mstatus_mie = Signal()
        c.mstatus_mpie = Signal()
        c.mtvec = Signal(30, init=self.trap_vector >> 2)   # direct mode, bits 31:2
        c.mscratch = Signal(32)
        c.mepc = Signal(30)                                # bits 31:2 (IALIGN = 32)
        c.mcause = Signal(32)
        c.mtval = Signal(32)
        c.mcycle = Signal(64)
        c.minstret = Signal(64)

        self._elaborate_operands(m, c)
        self._elaborate_lsu(m, c)
        self._elaborate_csr_read(m, c)
        self._elaborate_control(m, c)
        self._elaborate_retire(m, c)
        self._elaborate_trace(m, c)
        return m

    # -- decode and operands ----------------------------------------------------------------
    def _elaborate_operands(self, m, c):
        """Combinational in EXEC: decoder on ``insn``, register operands ``rs1``/``rs2``, the
        ALU, branch, multiplier and divider inputs, ``pc_plus4``, ``pc_imm``, ``rs1_imm``,
        ``jump_target`` and ``jumps`` (taken control transfer)."""
        dec, alu, bru, mul, divider = c.dec, c.alu, c.bru, c.mul, c.divider
        pc = c.pc
        m.d.comb += [
            dec.insn.eq(c.insn),
            c.rp1.addr.eq(dec.rs1),
            c.rp2.addr.eq(dec.rs2),
        ]
        c.rs1 = rs1 = c.rp1.data
        c.rs2 = rs2 = c.rp2.data
        c.imm = imm = dec.imm
        c.funct3 = funct3 = dec.funct3

        m.d.comb += [
            alu.a.eq(rs1), alu.b.eq(Mux(dec.alu_reg, rs2, imm)),
            alu.funct3.eq(funct3), alu.alt.eq(dec.alu_alt),
            bru.a.eq(rs1), bru.b.eq(rs2), bru.funct3.eq(funct3),
            mul.a.eq(rs1), mul.b.eq(rs2), mul.funct3.eq(funct3),
            divider.a.eq(rs1), divider.b.eq(rs2), divider.funct3.eq(funct3),
        ]

        pc_plus4 = Signal(32)
        pc_imm = Signal(32)
        rs1_imm = Signal(32)
        m.d.comb += [pc_plus4.eq(pc + 4), pc_imm.eq(pc + imm), rs1_imm.eq(rs1 + imm)]
        jump_target = Signal(32)
        m.d.comb += jump_target.eq(Mux(dec.jalr, Cat(Const(0, 1), rs1_imm[1:]), pc_imm))
        c.jumps = dec.jal | dec.jalr | (dec.branch & bru.taken)
        c.pc_plus4, c.pc_imm, c.rs1_imm, c.jump_target = pc_plus4, pc_imm, rs1_imm, jump_target

    # -- loads and stores -------------------------------------------------------------------
    def _elaborate_lsu(self, m, c):
        """Address and store lanes (combinational in EXEC: ``ea``, ``misaligned``,
        ``lane_mask``, ``lane_data``), the MEM-state registers ``mem_addr``, ``mem_we``,
        ``mem_wdata``, ``mem_mask``, and ``load_value`` (combinational on the ``dbus``
        transfer cycle: aligned to bit 0 and extended per funct3)."""
        funct3, rs2 = c.funct3, c.rs2
        # memory access: size from funct3[1:0] (0 byte, 1 half, 2 word)
        ea = c.rs1_imm
        size = funct3[0:2]
        misaligned = Mux(size == 0, 0, Mux(size == 1, ea[0], ea[0:2] != 0))
        mem_addr = Signal(32)       # effective (byte) address of the access in MEM
        mem_we = Signal()
        mem_wdata = Signal(32)
        mem_mask = Signal(4)
        lane_mask = Signal(4)
        lane_data = Signal(32)
        with m.Switch(size):
            with m.Case(0):
                m.d.comb += [lane_mask.eq(Const(1, 4) << ea[0:2]), lane_data.eq(rs2[0:8].replicate(4))]
            with m.Case(1):
                m.d.comb += [lane_mask.eq(Const(0b11, 4) << ea[0:2]), lane_data.eq(rs2[0:16].replicate(2))]
            with m.Default():
                m.d.comb += [lane_mask.eq(0b1111), lane_data.eq(rs2)]

        # load data: align to bit 0 and extend per funct3
        load_shifted = Signal(32)
        load_value = Signal(32)
        m.d.comb += load_shifted.eq(self.dbus.rdata >> Cat(Const(0, 3), mem_addr[0:2]))
        with m.Switch(funct3):
            with m.Case(0b000):
                m.d.comb += load_value.eq(load_shifted[0:8].as_signed())
            with m.Case(0b001):
                m.d.comb += load_value.eq(load_shifted[0:16].as_signed())
            with m.Case(0b100):
                m.d.comb += load_value.eq(load_shifted[0:8])
            with m.Case(0b101):
                m.d.comb += load_value.eq(load_shifted[0:16])
            with m.Default():
                m.d.comb += load_value.eq(load_shifted)
        c.ea, c.misaligned, c.lane_mask, c.lane_data = ea, misaligned, lane_mask, lane_data
        c.mem_addr, c.mem_we, c.mem_wdata, c.mem_mask = mem_addr, mem_we, mem_wdata, mem_mask
        c.load_value = load_value

    # -- CSR access -------------------------------------------------------------------------
    def _elaborate_csr_read(self, m, c):
        """Combinational in EXEC: ``csr_rdata`` (the CSR ``dec.csr_addr`` reads; address
        legality is the decoder's job) and ``csr_wdata`` (what csrrw/csrrs/csrrc write)."""
        dec, funct3 = c.dec, c.funct3
        mcycle, minstret = c.mcycle, c.minstret
        csr_rdata = Signal(32)      # address legality is the decoder's job
        csr_values = {
            CSR.MSTATUS: Cat(Const(0, 3), c.mstatus_mie, Const(0, 3), c.mstatus_mpie,
                             Const(0, 3), Const(MSTATUS_MPP >> 11, 2)),
            CSR.MISA: Const(MISA_RV32IM, 32),
            CSR.MTVEC: Cat(Const(0, 2), c.mtvec),
            CSR.MSCRATCH: c.mscratch,
            CSR.MEPC: Cat(Const(0, 2), c.mepc),
            CSR.MCAUSE: c.mcause,
            CSR.MTVAL: c.mtval,
            CSR.MCYCLE: mcycle[0:32], CSR.CYCLE: mcycle[0:32],
            CSR.MCYCLEH: mcycle[32:64], CSR.CYCLEH: mcycle[32:64],
            CSR.MINSTRET: minstret[0:32], CSR.INSTRET: minstret[0:32],
            CSR.MINSTRETH: minstret[32:64], CSR.INSTRETH: minstret[32:64],
            CSR.MVENDORID: Const(0, 32), CSR.MARCHID: Const(0, 32), CSR.MIMPID: Const(0, 32),
            CSR.MHARTID: Const(self.hart_id, 32),
        }
        assert set(csr_values) == set(CSR)
        with m.Switch(dec.csr_addr):
            for addr, value in csr_values.items():
                with m.Case(addr):
                    m.d.comb += csr_rdata.eq(value)
        csr_src = Mux(funct3[2], dec.rs1, c.rs1)   # csrr*i: 5-bit zero-extended uimm
        csr_wdata = Signal(32)
        with m.Switch(funct3[0:2]):
            with m.Case(0b01):
                m.d.comb += csr_wdata.eq(csr_src)
            with m.Case(0b10):
                m.d.comb += csr_wdata.eq(csr_rdata | csr_src)
            with m.Default():
                m.d.comb += csr_wdata.eq(csr_rdata & ~csr_src)
        c.csr_rdata, c.csr_wdata = csr_rdata, csr_wdata

    # -- control ----------------------------------------------------------------------------
    def _elaborate_control(self, m, c):
        """The FETCH/EXEC/MEM/DIV state machine. Adds, combinational in the cycle they
        happen: ``retire`` with ``rd_data``, ``next_pc`` and ``retire_store``; ``trap`` with
        ``trap_cause`` and ``trap_tval``."""
        dec, divider, state, pc, insn = c.dec, c.divider, c.state, c.pc, c.insn
        ea, misaligned, jumps, jump_target = c.ea, c.misaligned, c.jumps, c.jump_target
        pc_plus4, imm = c.pc_plus4, c.imm
        mem_addr, mem_we, mem_wdata, mem_mask = c.mem_addr, c.mem_we, c.mem_wdata, c.mem_mask
        retire = Signal()
        rd_data = Signal(32)
        next_pc = Signal(32)
        trap = Signal()
        trap_cause = Signal(5)
        trap_tval = Signal(32)
        retire_store = Signal()

        m.d.sync += c.mcycle.eq(c.mcycle + 1)

        def take_trap(cause, tval):
            m.d.comb += [trap.eq(1), trap_cause.eq(cause), trap_tval.eq(tval)]

        with m.Switch(state):
            with m.Case(State.FETCH):
                m.d.comb += [
                    self.ibus.valid.eq(1), self.ibus.addr.eq(pc), self.ibus.mask.eq(0b1111),
                ]
                with m.If(self.ibus.ready):
                    with m.If(self.ibus.err):
                        take_trap(Cause.INSN_ACCESS_FAULT, pc)
                    with m.Else():
                        m.d.sync += [insn.eq(self.ibus.rdata), state.eq(State.EXEC)]

            with m.Case(State.EXEC):
                with m.If(dec.illegal):
                    take_trap(Cause.ILLEGAL_INSN, insn)
                with m.Elif(dec.ecall):
                    take_trap(Cause.ECALL_M, 0)
                with m.Elif(dec.ebreak):
                    take_trap(Cause.BREAKPOINT, pc)
                with m.Elif(jumps & jump_target[1]):
                    take_trap(Cause.INSN_MISALIGNED, jump_target)
                with m.Elif(dec.load & misaligned):
                    take_trap(Cause.LOAD_MISALIGNED, ea)
                with m.Elif(dec.store & misaligned):
                    take_trap(Cause.STORE_MISALIGNED, ea)
                with m.Elif(dec.load | dec.store):
                    m.d.sync += [
                        mem_addr.eq(ea), mem_we.eq(dec.store), mem_wdata.eq(c.lane_data),
                        mem_mask.eq(c.lane_mask), state.eq(State.MEM),
                    ]
                with m.Elif(dec.div):
                    m.d.comb += divider.start.eq(1)
                    m.d.sync += state.eq(State.DIV)
                with m.Else():
                    m.d.comb += [retire.eq(1), next_pc.eq(pc_plus4)]
                    with m.If(dec.lui):
                        m.d.comb += rd_data.eq(imm)
                    with m.Elif(dec.auipc):
                        m.d.comb += rd_data.eq(c.pc_imm)
                    with m.Elif(dec.jal | dec.jalr):
                        m.d.comb += rd_data.eq(pc_plus4)
                    with m.Elif(dec.mul):
                        m.d.comb += rd_data.eq(c.mul.result)
                    with m.Elif(dec.csr):
                        m.d.comb += rd_data.eq(c.csr_rdata)
                    with m.Else():
                        m.d.comb += rd_data.eq(c.alu.result)
                    with m.If(jumps):
                        m.d.comb += next_pc.eq(jump_target)
                    with m.If(dec.mret):
                        m.d.comb += next_pc.eq(Cat(Const(0, 2), c.mepc))
                        m.d.sync += [c.mstatus_mie.eq(c.mstatus_mpie), c.mstatus_mpie.eq(1)]

            with m.Case(State.MEM):
                m.d.comb += [
                    self.dbus.valid.eq(1), self.dbus.addr.eq(Cat(Const(0, 2), mem_addr[2:])),
                    self.dbus.we.eq(mem_we), self.dbus.wdata.eq(mem_wdata),
                    self.dbus.mask.eq(mem_mask),
                ]
                with m.If(self.dbus.ready):
                    with m.If(self.dbus.err):
                        take_trap(Mux(mem_we, Cause.STORE_ACCESS_FAULT, Cause.LOAD_ACCESS_FAULT),
                                  mem_addr)
                    with m.Else():
                        m.d.comb += [retire.eq(1), next_pc.eq(pc_plus4), rd_data.eq(c.load_value),
                                     retire_store.eq(mem_we)]

            with m.Case(State.DIV):
                with m.If(divider.done):
                    m.d.comb += [retire.eq(1), next_pc.eq(pc_plus4), rd_data.eq(divider.result)]
        c.retire, c.rd_data, c.next_pc, c.retire_store = retire, rd_data, next_pc, retire_store
        c.trap, c.trap_cause, c.trap_tval = trap, trap_cause, trap_tval

    # -- retire: register write, pc, counters; trap entry -------------------------------------
    def _elaborate_retire(self, m, c):
        """On ``retire``: the register write (this cycle), and at the next clock edge the pc,
        ``minstret`` and the CSR write; on ``trap``: pc <- mtvec, mepc/mcause/mtval, MIE."""
        dec, csr_wdata = c.dec, c.csr_wdata
        mcycle, minstret = c.mcycle, c.minstret
        c.writes_rd = writes_rd = Signal()
        m.d.comb += writes_rd.eq(dec.writes_rd & (dec.rd != 0))
        with m.If(c.retire):
            m.d.sync += [c.pc.eq(c.next_pc), c.state.eq(State.FETCH), minstret.eq(minstret + 1)]
            m.d.comb += [c.wp.en.eq(writes_rd), c.wp.addr.eq(dec.rd), c.wp.data.eq(c.rd_data)]
            # CSR writes come after the counter increments so that they win.
            with m.If(dec.csr & dec.csr_writes):
                with m.Switch(dec.csr_addr):
                    with m.Case(CSR.MSTATUS):
                        m.d.sync += [c.mstatus_mie.eq(csr_wdata[3]),
                                     c.mstatus_mpie.eq(csr_wdata[7])]
                    with m.Case(CSR.MTVEC):
                        m.d.sync += c.mtvec.eq(csr_wdata[2:])
                    with m.Case(CSR.MSCRATCH):
                        m.d.sync += c.mscratch.eq(csr_wdata)
                    with m.Case(CSR.MEPC):
                        m.d.sync += c.mepc.eq(csr_wdata[2:])
                    with m.Case(CSR.MCAUSE):
                        m.d.sync += c.mcause.eq(csr_wdata)
                    with m.Case(CSR.MTVAL):
                        m.d.sync += c.mtval.eq(csr_wdata)
                    with m.Case(CSR.MCYCLE):
                        m.d.sync += mcycle[0:32].eq(csr_wdata)
                    with m.Case(CSR.MCYCLEH):
                        m.d.sync += mcycle[32:64].eq(csr_wdata)
                    with m.Case(CSR.MINSTRET):
                        m.d.sync += minstret[0:32].eq(csr_wdata)
                    with m.Case(CSR.MINSTRETH):
                        m.d.sync += minstret[32:64].eq(csr_wdata)
                    # misa: WARL, writes ignored

        with m.If(c.trap):
            m.d.sync += [
                c.pc.eq(Cat(Const(0, 2), c.mtvec)), c.state.eq(State.FETCH),
                c.mepc.eq(c.pc[2:]), c.mcause.eq(c.trap_cause), c.mtval.eq(c.trap_tval),
                c.mstatus_mpie.eq(c.mstatus_mie), c.mstatus_mie.eq(0),
            ]

    def _elaborate_trace(self, m, c):
        """``trace`` and ``trap`` ports: combinational, valid in the retire / trap cycle."""
        retire, writes_rd, retire_store = c.retire, c.writes_rd, c.retire_store
        mem_addr = c.mem_addr
        m.d.comb += [
            self.trace.valid.eq(retire),
            self.trace.pc.eq(c.pc),
            self.trace.insn.eq(c.insn),
            self.trace.rd.eq(Mux(retire & writes_rd, c.dec.rd, 0)),
            self.trace.rd_data.eq(Mux(retire & writes_rd, c.rd_data, 0)),
            self.trace.store_addr.eq(Mux(retire_store, Cat(Const(0, 2), mem_addr[2:]), 0)),
            self.trace.store_data.eq(Mux(retire_store, c.mem_wdata, 0)),
            self.trace.store_mask.eq(Mux(retire_store, c.mem_mask, 0)),
            self.trap.valid.eq(c.trap),
            self.trap.cause.eq(c.trap_cause),
            self.trap.pc.eq(c.pc),
            self.trap.tval.eq(c.trap_tval),
        ]
