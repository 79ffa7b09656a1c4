"""Lockstep verification of the RV32IM core against Unicorn, and the bus memory model.

Pure Python parts (used by both the Amaranth-simulator and the cocotb testbenches):

* :class:`MemoryMap` -- byte-addressed regions (RAM, ROM) answering bus requests, with
  ``err`` outside every region and on writes to read-only regions;
* :class:`BusPort` -- one bus target port with random wait states that also checks the
  initiator's side of the protocol (request stable and ``valid`` held until ``ready``);
* :class:`Lockstep` -- steps Unicorn one instruction per retired instruction and compares
  pc, the rd write (against the full register file) and every store.

And :func:`run_amaranth`, which runs a :class:`~tricut.rtl.dsu.core.Core` in the Amaranth
simulator with the above.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field

from .asm import mnemonic
from tricut.rtl.dsu.layouts import Opcode

__all__ = ["LockstepMismatch", "BusProtocolError", "SimTimeout", "Region", "MemoryMap",
           "BusPort", "Lockstep", "RunResult", "run_amaranth", "WAITS_NONE", "WAITS_RANDOM",
           "insn_class", "INSN_CLASSES"]

#: wait-state distributions: each request waits ``random.choice(waits)`` cycles
WAITS_NONE = (0,)
WAITS_RANDOM = (0, 0, 0, 1, 1, 2, 3, 5)

_WRITES_RD = {Opcode.LUI, Opcode.AUIPC, Opcode.JAL, Opcode.JALR, Opcode.LOAD, Opcode.OP_IMM,
              Opcode.OP}


#: instruction classes of the coverage table (:func:`insn_class`), in table order
INSN_CLASSES = ("load", "store", "branch taken", "branch not taken", "jal", "jalr", "alu reg",
                "alu imm", "shift imm", "lui/auipc", "mul", "div/rem", "csr", "mret", "wfi",
                "fence/fence.i", "other")


def insn_class(insn, taken=False):
    """The coverage class of a retired instruction (``taken``: a branch went to its target)."""
    op, f3, f7 = insn & 0x7F, (insn >> 12) & 7, insn >> 25
    if op == Opcode.LOAD:
        return "load"
    if op == Opcode.STORE:
        return "store"
    if op == Opcode.BRANCH:
        return "branch taken" if taken else "branch not taken"
    if op == Opcode.JAL:
        return "jal"
    if op == Opcode.JALR:
        return "jalr"
    if op == Opcode.OP:
        return ("div/rem" if f3 >= 4 else "mul") if f7 == 1 else "alu reg"
    if op == Opcode.OP_IMM:
        return "shift imm" if f3 in (1, 5) else "alu imm"
    if op in (Opcode.LUI, Opcode.AUIPC):
        return "lui/auipc"
    if op == Opcode.MISC_MEM:
        return "fence/fence.i"
    if op == Opcode.SYSTEM:
        return "csr" if f3 else {0x30200073: "mret", 0x10500073: "wfi"}.get(insn, "other")
    return "other"


class LockstepMismatch(AssertionError):
    """The core and Unicorn disagree."""


class BusProtocolError(AssertionError):
    """The core broke the bus rules (request changed or dropped before ``ready``)."""


class SimTimeout(AssertionError):
    """The run did not reach its end within the cycle limit."""


@dataclass
class Region:
    base: int
    data: bytearray
    writable: bool = True
    name: str = "ram"

    def __post_init__(self):
        if self.base % 4096 or len(self.data) % 4096 or not self.data:
            raise ValueError(f"region {self.name!r} must be 4 KiB aligned and sized "
                             f"(base {self.base:#x}, size {len(self.data):#x})")


class MemoryMap:
    """Byte-addressed memory made of :class:`Region` s."""

    def __init__(self, regions):
        self.regions = list(regions)
        spans = sorted((r.base, r.base + len(r.data)) for r in self.regions)
        for (a0, a1), (b0, b1) in zip(spans, spans[1:]):
            if b0 < a1:
                raise ValueError(f"regions overlap at {b0:#x}")

    def find(self, addr):
        for r in self.regions:
            if r.base <= addr < r.base + len(r.data):
                return r
        return None

    def read_word(self, addr):
        """Return the word at word address ``addr``, or ``None`` (bus error)."""
        r = self.find(addr)
        if r is None:
            return None
        o = addr - r.base
        return int.from_bytes(r.data[o:o + 4], "little")

    def write_word(self, addr, data, mask):
        """Write the lanes of ``mask``; return False (bus error) if not allowed."""
        r = self.find(addr)
        if r is None or not r.writable:
            return False
        o = addr - r.base
        for i in range(4):
            if mask >> i & 1:
                r.data[o + i] = (data >> (8 * i)) & 0xFF
        return True


class BusPort:
    """A target port of the core's bus with random wait states.

    Call :meth:`cycle` once per clock cycle with what the initiator drives; it returns
    ``(ready, rdata, err)`` for that cycle.
    """

    def __init__(self, mem, rng, waits=WAITS_NONE, name="bus", read_only=False):
        self.mem, self.rng, self.waits, self.name = mem, rng, tuple(waits), name
        self.read_only = read_only
        self.pending = None   # (addr, we, wdata, mask) of the request being served
        self.wait = 0
        self.transfers = 0
        self.wait_cycles = 0

    def cycle(self, valid, addr, we, wdata, mask):
        if not valid:
            if self.pending is not None:
                raise BusProtocolError(f"{self.name}: valid dropped before ready "
                                       f"(request {self.pending})")
            return 0, 0, 0
        req = (addr, we, wdata, mask)
        if self.pending is None:
            if addr & 3:
                raise BusProtocolError(f"{self.name}: unaligned bus address {addr:#x}")
            self.pending = req
            self.wait = self.rng.choice(self.waits) if len(self.waits) > 1 else self.waits[0]
        elif req != self.pending:
            raise BusProtocolError(f"{self.name}: request changed while waiting: "
                                   f"{self.pending} -> {req}")
        if self.wait:
            self.wait -= 1
            self.wait_cycles += 1
            return 0, 0, 0
        self.pending = None
        self.transfers += 1
        if we:
            if self.read_only:
                raise BusProtocolError(f"{self.name}: write on a read-only port")
            ok = self.mem.write_word(addr, wdata, mask)
            return 1, 0, int(not ok)
        word = self.mem.read_word(addr)
        if word is None:
            return 1, 0, 1
        return 1, word, 0


class Lockstep:
    """Unicorn as the reference: one ``emu_start(pc, ..., count=1)`` per retired instruction.

    Checks, for every retired instruction: its pc equals Unicorn's pc; its instruction word
    equals memory; the trace's ``rd`` is the instruction's destination (0 if none or x0);
    after the step the whole register file equals the shadow register file built from the
    trace; a store instruction reports exactly the lanes and data Unicorn's memory now
    holds, and nothing else reports a store.

    Unicorn does not take traps the way the core does (it reports ECALL/illegal
    instructions to the host, runs misaligned accesses, has no bus errors), so traps are
    handled explicitly: ``expected_traps`` maps the pc of each instruction that must trap
    to its ``(cause, tval)``. When the core traps (:meth:`trap`), the trap must be the one
    expected at Unicorn's pc; the trapping instruction is *not* run in Unicorn, and the
    trap entry is applied to Unicorn by hand (mepc, mcause, mtval, mstatus, pc = mtvec),
    so the handler then runs in lockstep and its CSR reads are compared too. An expected
    trap instruction that retires is a mismatch, and so is any trap when
    ``expected_traps`` is ``None``.
    """

    def __init__(self, regions, pc, *, expected_traps=None, trap_vector=None):
        from unicorn import Uc, UC_ARCH_RISCV, UC_MODE_RISCV32
        from unicorn import riscv_const as rc
        self.uc = Uc(UC_ARCH_RISCV, UC_MODE_RISCV32)
        for r in regions:
            self.uc.mem_map(r.base, len(r.data))
            self.uc.mem_write(r.base, bytes(r.data))
        self._pc_reg = rc.UC_RISCV_REG_PC
        self._x = [rc.UC_RISCV_REG_X0 + i for i in range(32)]
        self.pc = pc
        self.regs = [0] * 32
        self.count = 0
        self.backward = 0          # retired control transfers to a lower address (loops)
        self.coverage = Counter()
        self.classes = Counter()   # insn_class -> retired instructions
        self.expected_traps = expected_traps
        self.trap_vector = trap_vector
        self.traps = Counter()     # cause -> number of traps checked
        self._rc = rc

    def fail(self, msg):
        raise LockstepMismatch(f"after {self.count} instructions: {msg}")

    def retire(self, pc, insn, rd, rd_data, store_addr, store_data, store_mask):
        uc = self.uc
        if pc != self.pc:
            self.fail(f"core retired pc {pc:#010x}, Unicorn is at {self.pc:#010x}")
        mem_insn = int.from_bytes(uc.mem_read(pc, 4), "little")
        if insn != mem_insn:
            self.fail(f"pc {pc:#010x}: core ran {insn:#010x}, memory holds {mem_insn:#010x}")
        if self.expected_traps and pc in self.expected_traps:
            self.fail(f"pc {pc:#010x} ({insn:#010x}) retired, expected trap "
                      f"{self.expected_traps[pc]}")
        uc.emu_start(pc, 0xFFFFFFFF, count=1)
        self.count += 1
        name = mnemonic(insn)
        self.coverage[name] += 1
        self.pc = uc.reg_read(self._pc_reg)
        self.backward += self.pc < pc
        opcode = insn & 0x7F
        self.classes[insn_class(insn, self.pc != (pc + 4) & 0xFFFFFFFF)] += 1
        writes = opcode in _WRITES_RD or (opcode == Opcode.SYSTEM and (insn >> 12) & 7)
        want_rd = (insn >> 7) & 31 if writes else 0
        where = f"pc {pc:#010x} {name} ({insn:#010x})"
        if rd != want_rd:
            self.fail(f"{where}: core wrote x{rd}, instruction's destination is x{want_rd}")
        if rd:
            self.regs[rd] = rd_data
        for i in range(1, 32):
            v = uc.reg_read(self._x[i])
            if v != self.regs[i]:
                self.fail(f"{where}: x{i} is {self.regs[i]:#010x} in the core, "
                          f"{v:#010x} in Unicorn")
        if opcode == Opcode.STORE:
            if not store_mask:
                self.fail(f"{where}: no store reported")
            word = int.from_bytes(uc.mem_read(store_addr, 4), "little")
            for i in range(4):
                if store_mask >> i & 1 and (word ^ store_data) >> (8 * i) & 0xFF:
                    self.fail(f"{where}: stored {store_data:#010x} mask {store_mask:#x} at "
                              f"{store_addr:#010x}, Unicorn has {word:#010x}")
            # the lanes must be exactly the ones the store covers (regs[] still holds the
            # pre-store values: stores write no register)
            ea = (self.regs[(insn >> 15) & 31] + _simm_s(insn)) & 0xFFFFFFFF
            want_mask = ((1 << (1 << ((insn >> 12) & 3))) - 1) << (ea & 3)
            if (store_addr, store_mask) != (ea & ~3, want_mask):
                self.fail(f"{where}: store to {store_addr:#010x} mask {store_mask:#x}, "
                          f"expected {ea & ~3:#010x} mask {want_mask:#x}")
        elif store_mask:
            self.fail(f"{where}: spurious store of {store_data:#010x} mask {store_mask:#x}")

    def trap(self, cause, pc, tval):
        """The core took a trap: check it was expected, apply the trap entry to Unicorn."""
        if self.expected_traps is None:
            self.fail(f"trap cause {cause} at pc {pc:#010x} (tval {tval:#010x}) in a run "
                      f"without expected traps")
        if pc != self.pc:
            self.fail(f"core trapped at pc {pc:#010x}, Unicorn is at {self.pc:#010x}")
        want = self.expected_traps.get(pc)
        if want != (cause, tval):
            self.fail(f"pc {pc:#010x}: trap (cause {cause}, tval {tval:#010x}), expected "
                      f"{'none' if want is None else f'(cause {want[0]}, tval {want[1]:#010x})'}")
        rc, uc = self._rc, self.uc
        mstatus = uc.reg_read(rc.UC_RISCV_REG_MSTATUS)
        mie = (mstatus >> 3) & 1
        mstatus = (mstatus & ~0x88) | (mie << 7) | (3 << 11)     # MPIE = MIE, MIE = 0, MPP = M
        uc.reg_write(rc.UC_RISCV_REG_MSTATUS, mstatus)
        uc.reg_write(rc.UC_RISCV_REG_MEPC, pc)
        uc.reg_write(rc.UC_RISCV_REG_MCAUSE, cause)
        uc.reg_write(rc.UC_RISCV_REG_MTVAL, tval)
        uc.reg_write(self._pc_reg, self.trap_vector)
        self.pc = self.trap_vector
        self.traps[cause] += 1

    def compare_memory(self, regions):
        """Compare every writable region byte for byte with Unicorn's memory."""
        for r in regions:
            theirs = bytes(self.uc.mem_read(r.base, len(r.data)))
            if theirs != bytes(r.data):
                first = next(i for i in range(len(r.data)) if theirs[i] != r.data[i])
                self.fail(f"memory differs first at {r.base + first:#010x}: core "
                          f"{r.data[first]:#04x}, Unicorn {theirs[first]:#04x}")


def _simm_s(insn):
    v = ((insn >> 25) << 5) | ((insn >> 7) & 31)
    return v - 4096 if v & 0x800 else v


@dataclass
class RunResult:
    cycles: int = 0
    retired: int = 0
    traps: list = field(default_factory=list)       # (cause, pc, tval)
    trace: list = field(default_factory=list)       # (pc, insn, rd, rd_data, saddr, sdata, smask)
    regs: list = field(default_factory=list)        # core register file at the end
    halted: bool = False
    ibus_wait_cycles: int = 0
    dbus_wait_cycles: int = 0


def run_amaranth(core, mem, *, rng=None, waits=WAITS_NONE, lockstep=None, halt_pc=None,
                 max_cycles=100_000, max_traps=None, keep_trace=False, on_retire=None):
    """Run ``core`` in the Amaranth simulator against ``mem`` (a :class:`MemoryMap`).

    Stops when an instruction at ``halt_pc`` retires, after ``max_traps`` traps, or raises
    :class:`SimTimeout` after ``max_cycles``. With ``lockstep`` (a :class:`Lockstep`), every
    retired instruction is checked and any trap is a mismatch.
    """
    from amaranth.sim import Simulator

    rng = rng or random.Random(0)
    iport = BusPort(mem, rng, waits, "ibus", read_only=True)
    dport = BusPort(mem, rng, waits, "dbus")
    res = RunResult()
    ib, db, tr, tp = core.ibus, core.dbus, core.trace, core.trap

    async def bench(ctx):
        last = [None, None]
        for cycle in range(max_cycles):
            # sample both requests first (registered outputs: no settling needed), then
            # drive both responses, so the simulator settles once before the trace is read
            iv, dv = ctx.get(ib.valid), ctx.get(db.valid)
            iresp = iport.cycle(1, ctx.get(ib.addr), 0, 0, 0xF) if iv else iport.cycle(0, 0, 0, 0, 0)
            if dv:
                dresp = dport.cycle(1, ctx.get(db.addr), ctx.get(db.we), ctx.get(db.wdata),
                                    ctx.get(db.mask))
            else:
                dresp = dport.cycle(0, 0, 0, 0, 0)
            if iresp != last[0]:
                ctx.set(ib.ready, iresp[0]); ctx.set(ib.rdata, iresp[1]); ctx.set(ib.err, iresp[2])
                last[0] = iresp
            if dresp != last[1]:
                ctx.set(db.ready, dresp[0]); ctx.set(db.rdata, dresp[1]); ctx.set(db.err, dresp[2])
                last[1] = dresp
            if ctx.get(tr.valid):
                ev = (ctx.get(tr.pc), ctx.get(tr.insn), ctx.get(tr.rd), ctx.get(tr.rd_data),
                      ctx.get(tr.store_addr), ctx.get(tr.store_data), ctx.get(tr.store_mask))
                res.retired += 1
                if keep_trace:
                    res.trace.append(ev)
                if lockstep is not None:
                    lockstep.retire(*ev)
                if on_retire is not None:
                    on_retire(ev)
                if ev[0] == halt_pc:
                    res.halted = True
                    res.cycles = cycle + 1
                    break
            if ctx.get(tp.valid):
                t = (ctx.get(tp.cause), ctx.get(tp.pc), ctx.get(tp.tval))
                res.traps.append(t)
                if lockstep is not None:
                    lockstep.trap(*t)
                if max_traps is not None and len(res.traps) >= max_traps:
                    res.cycles = cycle + 1
                    break
            await ctx.tick()
        else:
            raise SimTimeout(f"no halt within {max_cycles} cycles "
                             f"({res.retired} instructions retired)")
        res.regs = [ctx.get(core.regfile.data[i]) for i in range(32)]

    sim = Simulator(core)
    sim.add_clock(1e-9)
    sim.add_testbench(bench)
    sim.run()
    res.ibus_wait_cycles = iport.wait_cycles
    res.dbus_wait_cycles = dport.wait_cycles
    return res


async def run_cocotb(dut, ref, region, rng, waits, halt_pc, max_cycles, label="run"):
    """Under cocotb (Verilator): reset the core ``dut``, serve its buses from ``region`` with
    random ``waits``, and check every retired instruction and trap against ``ref`` (a
    :class:`Lockstep`) until ``halt_pc`` retires; then compare the memory. Returns the cycles.
    Raises :class:`SimTimeout` after ``max_cycles``."""
    from cocotb.triggers import FallingEdge, ReadOnly, RisingEdge

    mem = MemoryMap([region])
    iport = BusPort(mem, rng, waits, "ibus", read_only=True)
    dport = BusPort(mem, rng, waits, "dbus")
    await RisingEdge(dut.clk)          # leave a previous run's read-only phase
    dut.rst.value = 1
    for sig in (dut.ibus__ready, dut.ibus__err, dut.dbus__ready, dut.dbus__err):
        sig.value = 0
    for _ in range(2):
        await RisingEdge(dut.clk)
    dut.rst.value = 0
    cycles = 0
    while True:
        await FallingEdge(dut.clk)
        cycles += 1
        if cycles > max_cycles:
            raise SimTimeout(f"{label}: no halt within {max_cycles} cycles")
        if int(dut.ibus__valid.value):
            r = iport.cycle(1, int(dut.ibus__addr.value), 0, 0, 0xF)
        else:
            r = iport.cycle(0, 0, 0, 0, 0)
        dut.ibus__ready.value, dut.ibus__rdata.value, dut.ibus__err.value = r
        if int(dut.dbus__valid.value):
            r = dport.cycle(1, int(dut.dbus__addr.value), int(dut.dbus__we.value),
                            int(dut.dbus__wdata.value), int(dut.dbus__mask.value))
        else:
            r = dport.cycle(0, 0, 0, 0, 0)
        dut.dbus__ready.value, dut.dbus__rdata.value, dut.dbus__err.value = r
        await ReadOnly()
        if int(dut.trap__valid.value):
            ref.trap(int(dut.trap__cause.value), int(dut.trap__pc.value),
                     int(dut.trap__tval.value))
        if int(dut.trace__valid.value):
            pc = int(dut.trace__pc.value)
            ref.retire(pc, int(dut.trace__insn.value), int(dut.trace__rd.value),
                       int(dut.trace__rd_data.value), int(dut.trace__store_addr.value),
                       int(dut.trace__store_data.value), int(dut.trace__store_mask.value))
            if pc == halt_pc:
                break
    ref.compare_memory([region])
    return cycles
