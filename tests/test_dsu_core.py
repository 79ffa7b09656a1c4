# amaranth: UnusedElaboratable=no
"""DSU RV32IM core: lockstep against Unicorn in the Amaranth simulator, traps, CSRs.

Every lockstep run checks each retired instruction's pc, its rd write (against Unicorn's
whole register file) and every store (against Unicorn's memory after the step), with
random bus wait states, and at the end compares all of memory.
"""

import gc
import random
import struct

import pytest

from tricut.sim.harness import asm
from tricut.sim.harness.asm import encode as e, li, random_program
from tricut.rtl.dsu.core import Core
from tricut.rtl.dsu.layouts import CSR, MISA_RV32IM, Cause
from tricut.sim.harness.lockstep import (WAITS_NONE, WAITS_RANDOM, BusPort, BusProtocolError,
                                     Lockstep, LockstepMismatch, MemoryMap, Region, SimTimeout,
                                     run_amaranth)
from tricut.sim.harness.firmware import FIRMWARE_DIR, FirmwareBuildError, build_firmware
from tricut.sim.harness.firmware_programs import C_PROGRAMS

RAM_SIZE = 0x10000
DATA_BASE = 0x8000         # 4 KiB data area used by the directed and random programs
M32 = 0xFFFFFFFF
INT_MIN, INT_MAX = 0x80000000, 0x7FFFFFFF

RV32I = (set(asm.R_OPS) | set(asm.I_OPS) | set(asm.SHIFT_IMM_OPS) | set(asm.LOAD_OPS) |
         set(asm.STORE_OPS) | set(asm.BRANCH_OPS) | {"lui", "auipc", "jal", "jalr", "fence"})
RV32M = set(asm.M_OPS)


# -- harness ------------------------------------------------------------------------------

def ram_with(words, data=b"", size=RAM_SIZE, base=0):
    img = bytearray(size)
    for i, w in enumerate(words):
        img[4 * i:4 * i + 4] = struct.pack("<I", w)
    if 4 * len(words) > DATA_BASE:
        raise ValueError("program overlaps the data area")
    img[DATA_BASE:DATA_BASE + len(data)] = data
    return Region(base, img)


def lockstep(words, *, data=b"", seed=0, waits=WAITS_RANDOM, max_cycles=100_000, core=None,
             corrupt=None):
    """Run ``words`` (ending in ``jal x0, 0``) in lockstep; return (result, Lockstep)."""
    region = ram_with(words, data)
    ref = Lockstep([region], 0)
    if corrupt:
        corrupt(ref)
    res = run_amaranth(core or Core(), MemoryMap([region]), rng=random.Random(seed),
                       waits=waits, lockstep=ref, halt_pc=4 * (len(words) - 1),
                       max_cycles=max_cycles)
    assert res.halted
    ref.compare_memory([region])
    # the core's final register file, read out of the simulator, equals Unicorn's
    assert res.regs == [0] + [ref.uc.reg_read(ref._x[i]) for i in range(1, 32)]
    return res, ref


HALT = e("jal", 0, 0)
VALUES = [0, 1, M32, INT_MIN, INT_MAX, 31, 32, 0x80000001]


# -- constructor and assembler ------------------------------------------------------------

@pytest.mark.parametrize("kwargs, exc, text", [
    (dict(hart_id=-1), ValueError, "hart_id must be in 0 .. 0xffffffff, not -1"),
    (dict(hart_id=2**32), ValueError, "hart_id must be in 0 .. 0xffffffff, not 0x100000000"),
    (dict(hart_id="0"), TypeError, "hart_id must be an integer, not '0'"),
    (dict(hart_id=True), TypeError, "hart_id must be an integer, not True"),
    (dict(reset_vector=2), ValueError, "reset_vector must be a multiple of 4"),
    (dict(reset_vector=0x1_0000_0000), ValueError, "reset_vector must be in"),
    (dict(trap_vector=0x102), ValueError, "trap_vector must be a multiple of 4 (the core has no "
                                          "compressed instructions), not 0x102"),
])
def test_constructor_rejects_bad_parameters(kwargs, exc, text):
    with pytest.raises(exc) as info:
        Core(**kwargs)
    assert text in str(info.value)


def test_assembler_rejects_out_of_range_fields():
    with pytest.raises(ValueError, match="does not fit 12 signed bits"):
        e("addi", 1, 1, 2048)
    with pytest.raises(ValueError, match="register must be 0..31"):
        e("add", 32, 0, 0)
    with pytest.raises(ValueError, match="multiple of 2"):
        e("beq", 0, 0, 3)
    assert asm.mnemonic(e("sra", 1, 2, 3)) == "sra" and asm.mnemonic(e("mulhsu", 1, 2, 3)) == "mulhsu"


# -- directed lockstep tests, one per instruction group -----------------------------------

def test_lockstep_register_ops_and_muldiv_edge_cases():
    """Every R-type RV32I and M instruction on all pairs of edge values (0, 1, -1, INT_MIN,
    INT_MAX, 31, 32, INT_MIN+1): shifts by 0/31/32, slt vs sltu signedness, MULH/MULHSU/
    MULHU with negative operands, DIV/REM by zero and INT_MIN / -1; x0 as destination and
    rs1 == rs2."""
    ops = list(asm.R_OPS) + list(asm.M_OPS)
    words = []
    for i, a in enumerate(VALUES):
        for j, b in enumerate(VALUES):
            words += li(1, a) + li(2, b)
            words += [e(op, 3 + k, 1, 2) for k, op in enumerate(ops)]
            words.append(e(ops[(i * 8 + j) % len(ops)], 0, 1, 2))      # rd = x0
            words.append(e(ops[(i * 8 + j + 5) % len(ops)], 21, 2, 2))  # rs1 == rs2
    res, ref = lockstep(words + [HALT])
    assert set(ops) <= set(ref.coverage)
    assert ref.count == len(words) + 1


def test_lockstep_immediate_ops():
    words = []
    imms = [0, 1, -1, 2047, -2048, 0x555, -0x556]
    for a in VALUES:
        words += li(1, a)
        for k, op in enumerate(asm.I_OPS):
            for n, imm in enumerate(imms):
                words.append(e(op, 2 + (k * 7 + n) % 28, 1, imm))
        for op in asm.SHIFT_IMM_OPS:
            for sh in (0, 1, 15, 31):
                words.append(e(op, 9 + sh % 20, 1, sh))
        words.append(e("addi", 0, 1, 5))  # x0 destination
        words.append(e("srai", 0, 1, 3))
    res, ref = lockstep(words + [HALT])
    assert (set(asm.I_OPS) | set(asm.SHIFT_IMM_OPS)) <= set(ref.coverage)


def test_lockstep_loads_stores_sign_extension_and_lanes():
    data = bytes([0x80, 0x7F, 0xFF, 0x01, 0x00, 0x80, 0xFF, 0x7F, 0xEF, 0xCD, 0xAB, 0x89]) * 4
    words = li(5, DATA_BASE) + li(6, DATA_BASE + 0x100) + li(7, 0x89ABCDEF) + li(8, 0x80FF7F01)
    for off in range(12):
        words += [e("lb", 10, 5, off), e("lbu", 11, 5, off)]
        words += [e("lb", 12, 6, off - 0x100), e("lbu", 13, 6, off - 0x100)]   # negative offsets
        if off % 2 == 0:
            words += [e("lh", 14, 5, off), e("lhu", 15, 5, off), e("lh", 16, 6, off - 0x100)]
        if off % 4 == 0:
            words += [e("lw", 17, 5, off), e("lw", 18, 6, off - 0x100)]
    words += [e("lw", 0, 5, 0), e("lb", 0, 5, 0), e("lhu", 0, 5, 2)]           # rd = x0
    for off in range(4):                                                     # byte lanes
        words += [e("sb", 7, 5, 0x40 + off), e("sb", 8, 6, -0x80 + 4 * off + off)]
    for off in (0, 2):
        words += [e("sh", 7, 5, 0x50 + off), e("sh", 8, 6, -0x70 + off)]
    words += [e("sw", 7, 5, 0x60), e("sw", 0, 5, 0x64), e("sw", 8, 6, 2044 - 0x100),
              e("sb", 0, 5, 0x41), e("sh", 0, 5, 0x52)]                       # store x0
    words += [e("lw", 19, 5, 0x40), e("lw", 20, 5, 0x50), e("lw", 21, 5, 0x60), e("lw", 22, 5, 0x64)]
    words += [e("sw", 7, 5, 0x70), e("lb", 23, 5, 0x73), e("lh", 24, 5, 0x72)]  # store -> load
    words += [e("lw", 6, 6, -0x100 + 4), e("lbu", 5, 5, 1)]                   # rd == rs1
    res, ref = lockstep(words + [HALT], data=data)
    assert (set(asm.LOAD_OPS) | set(asm.STORE_OPS)) <= set(ref.coverage)


def test_lockstep_branches_both_directions():
    """Each branch on pairs of edge values, forward (skip one) and backward (taken ->
    back, then a jump out), so taken / not taken and signed / unsigned all occur."""
    vals = [0, 1, M32, INT_MIN, INT_MAX, 0x80]
    words = []
    for a in vals:
        for b in vals:
            words += li(1, a) + li(2, b)
            for op in asm.BRANCH_OPS:
                words += [e(op, 1, 2, 8), e("addi", 12, 12, 1)]                 # forward
                words += [e("jal", 0, 12), e("addi", 13, 13, 1), e("jal", 0, 8),
                          e(op, 1, 2, -8)]                                       # backward
    words += [e("beq", 0, 0, 8), e("addi", 14, 14, 1), e("bne", 1, 1, 8)]      # x0 operands
    res, ref = lockstep(words + [HALT])
    assert set(asm.BRANCH_OPS) <= set(ref.coverage)


def test_lockstep_jumps_upper_immediates_fences():
    words = []
    words += [e("jal", 1, 8), asm.NOP]                        # forward with link
    words += [e("jal", 0, 12), e("addi", 3, 3, 1), e("jal", 0, 8), e("jal", 2, -8)]  # backward
    words += [e("auipc", 5, 0), e("jalr", 6, 5, 13), asm.NOP, asm.NOP]   # odd target: bit 0 cleared
    words += [e("auipc", 5, 0), e("jalr", 5, 5, 12), asm.NOP]            # rd == rs1
    words += [e("auipc", 7, 0), e("addi", 7, 7, 20), e("jalr", 0, 7, -4), asm.NOP, asm.NOP]  # negative imm
    words += [e("jal", 0, 4 * 257)] + [asm.EBREAK] * 256                  # long jump over traps
    for imm in (0, 1, 0x7FFFF, 0x80000, 0xFFFFF, 0x12345):
        words += [e("lui", 8, imm), e("auipc", 9, imm), e("lui", 0, imm), e("auipc", 0, imm)]
    words += [asm.FENCE, asm.FENCE_I, asm.WFI, e("jal", 0, 4), e("jalr", 0, 0, 4 * (len(words) + 6)),
              asm.NOP]
    res, ref = lockstep(words + [HALT])
    assert {"jal", "jalr", "lui", "auipc", "fence", "fence.i", "wfi"} <= set(ref.coverage)


def test_lockstep_self_modifying_code():
    """A store into the instruction stream is seen by the next fetch (no caches; FENCE.I
    is a no-op): the patched word runs, on the core and in Unicorn."""
    patched = e("addi", 7, 0, 123)
    words = li(5, patched) + [e("sw", 5, 0, 4 * 6), asm.FENCE_I, e("jal", 0, 8), HALT,
                              asm.NOP, e("jal", 0, -8)]
    # word 6 (the NOP) becomes addi x7, x0, 123, then the jal goes back to the halt
    res, ref = lockstep(words, seed=9)
    assert res.regs[7] == 123 and ref.coverage["addi"] == 2


def test_directed_suite_covers_rv32im():
    # the subsets asserted by the directed tests above add up to all of RV32I + M
    covered = (set(asm.R_OPS) | set(asm.M_OPS) | set(asm.I_OPS) | set(asm.SHIFT_IMM_OPS) |
               set(asm.LOAD_OPS) | set(asm.STORE_OPS) | set(asm.BRANCH_OPS) |
               {"jal", "jalr", "lui", "auipc", "fence"})
    assert covered == RV32I | RV32M
    assert len(RV32I) == 38 and len(RV32M) == 8   # RV32I without ecall/ebreak (trap tests)


def test_decoder_never_accepts_what_unicorn_rejects():
    """Fuzz the decoder: 6,000 words (half with one of our opcodes and random other bits,
    half fully random 32-bit encodings). Unicorn implements a superset of RV32IM (A, F, C,
    more CSRs...), so a word Unicorn rejects as an illegal instruction must be illegal for
    the core too; EBREAK is the one legal word Unicorn reports as invalid."""
    from amaranth.sim import Simulator
    from unicorn import UC_ARCH_RISCV, UC_ERR_INSN_INVALID, UC_HOOK_INTR, UC_MODE_RISCV32, Uc, UcError
    from unicorn.riscv_const import UC_RISCV_REG_X0

    from tricut.rtl.dsu.decoder import Decoder
    from tricut.rtl.dsu.layouts import Opcode

    rng = random.Random(2024)
    opcodes = [int(o) for o in Opcode]
    words = [(rng.getrandbits(32) & ~0x7F) | rng.choice(opcodes) if i % 2 else
             rng.getrandbits(32) | 3 for i in range(6000)]
    words += [0x00000000, 0xFFFFFFFF, asm.ECALL, asm.MRET, asm.WFI, asm.FENCE_I]
    dec, core_illegal = Decoder(), []

    async def bench(ctx):
        for w in words:
            ctx.set(dec.insn, w)
            core_illegal.append(ctx.get(dec.illegal))
    sim = Simulator(dec)
    sim.add_testbench(bench)
    sim.run()

    disagree, legal = [], 0
    for i, (w, ours) in enumerate(zip(words, core_illegal)):
        # a fresh Unicorn per word: an earlier word (mret, a CSR write) may change its state.
        # An engine (a few MB outside Python's heap) is freed by the cyclic collector, which
        # tricut runs rarely (sim/collector.py): collect every 100 engines
        if i % 100 == 0:
            gc.collect()
        uc = Uc(UC_ARCH_RISCV, UC_MODE_RISCV32)
        uc.mem_map(0, 0x10000)
        exceptions = []
        uc.hook_add(UC_HOOK_INTR, lambda uc, intno, _: (exceptions.append(intno), uc.emu_stop()))
        for r in range(1, 32):
            uc.reg_write(UC_RISCV_REG_X0 + r, DATA_BASE)
        uc.mem_write(0, struct.pack("<I", w))
        try:
            uc.emu_start(0, M32, count=1)
            theirs = 2 in exceptions           # illegal-instruction exception
        except UcError as err:
            theirs = err.errno == UC_ERR_INSN_INVALID
        legal += not ours
        if theirs and not ours and w != asm.EBREAK:
            disagree.append(f"{w:#010x}")
    assert not disagree, f"decoder accepts words Unicorn rejects: {disagree[:10]}"
    assert legal > 2000 and core_illegal[-6:-4] == [1, 1] and core_illegal[-4:] == [0] * 4


# -- random instruction streams -----------------------------------------------------------

@pytest.mark.parametrize("seed", [1, 2, 3])
def test_lockstep_random_stream(seed):
    rng = random.Random(seed)
    words = random_program(rng, 2000, DATA_BASE)
    data = bytes(rng.getrandbits(8) for _ in range(4096))
    res, ref = lockstep(words, data=data, seed=seed)
    assert ref.count > 1200
    # the stream exercises loads, stores, branches and M on top of the ALU
    assert {"lw", "sb", "mulh", "jalr", "bltu", "sra"} <= set(ref.coverage)
    assert set(ref.coverage) & {"div", "divu", "rem", "remu"}
    assert ref.backward > 10          # counted loops ran (backward taken branches)


RANDOM_HANDLER = 0x7000


@pytest.mark.parametrize("seed", [4, 5])
def test_lockstep_random_stream_with_traps(seed):
    """Random streams with trapping instructions (ECALL, EBREAK, illegal words, misaligned
    loads/stores/jumps, access faults). Each trap must be the expected one (cause, mtval)
    at Unicorn's pc; the trap entry is applied to Unicorn, and the handler (reading mcause
    and mtval into registers, mepc += 4, mret) runs in lockstep."""
    rng = random.Random(seed)
    words, expected = asm.random_trap_program(rng, 1500, DATA_BASE, RANDOM_HANDLER, trap_weight=4)
    region = ram_with(words, bytes(rng.getrandbits(8) for _ in range(4096)))
    for i, w in enumerate(asm.trap_handler()):
        struct.pack_into("<I", region.data, RANDOM_HANDLER + 4 * i, w)
    ref = Lockstep([region], 0, expected_traps=expected, trap_vector=RANDOM_HANDLER)
    res = run_amaranth(Core(), MemoryMap([region]),     # the program sets mtvec
                       rng=random.Random(seed), waits=WAITS_RANDOM, lockstep=ref,
                       halt_pc=4 * (len(words) - 1), max_cycles=100_000)
    assert res.halted
    ref.compare_memory([region])
    assert sum(ref.traps.values()) == len(res.traps) >= 30
    assert set(ref.traps) == {0, 2, 3, 4, 5, 6, 7, 11}, ref.traps
    assert ref.coverage["mret"] == len(res.traps)


def test_lockstep_rejects_an_unexpected_trap_cause():
    words = li(9, DATA_BASE) + [e("lw", 5, 9, 2), HALT]
    region = ram_with(words)
    ref = Lockstep([region], 0, expected_traps={8: (Cause.LOAD_ACCESS_FAULT, DATA_BASE + 2)},
                   trap_vector=0)
    with pytest.raises(LockstepMismatch, match="trap .cause 4, tval 0x00008002., expected .cause 5"):
        run_amaranth(Core(), MemoryMap([region]), lockstep=ref, halt_pc=12)
    ref = Lockstep([ram_with(words)], 0, expected_traps={12: (0, 0)}, trap_vector=0)
    with pytest.raises(LockstepMismatch, match="expected none"):
        run_amaranth(Core(), MemoryMap([ram_with(words)]), lockstep=ref, halt_pc=12)


def test_random_program_generator_is_deterministic_and_valid():
    a = random_program(random.Random(7), 200, DATA_BASE)
    assert a == random_program(random.Random(7), 200, DATA_BASE)
    assert all(asm.mnemonic(w) != "?" for w in a)


# -- compiled C programs ------------------------------------------------------------------

def run_c_program(name, tmp_path, *, expected, waits=WAITS_RANDOM, seed=0):
    fw = build_firmware([FIRMWARE_DIR / "tests" / f"{name}.c"], tmp_path, name=name)
    img = bytearray(fw.length)
    img[:len(fw.image)] = fw.image
    region = Region(fw.origin, img)
    ref = Lockstep([region], fw.origin)
    res = run_amaranth(Core(reset_vector=fw.origin), MemoryMap([region]),
                       rng=random.Random(seed), waits=waits, lockstep=ref,
                       halt_pc=fw.symbols["_halt"], max_cycles=100_000)
    ref.compare_memory([region])
    exit_code = struct.unpack_from("<I", img, fw.symbols["_exit_code"] - fw.origin)[0]
    assert exit_code == expected, f"{name}: exit code {exit_code:#x}, expected {expected:#x}"
    return res, ref


@pytest.mark.parametrize("name", sorted(C_PROGRAMS))
def test_lockstep_c_program(name, tmp_path):
    res, ref = run_c_program(name, tmp_path, expected=C_PROGRAMS[name]())
    assert ref.count > 3000


def test_c_program_wrong_expected_value_is_caught(tmp_path):
    # the exit-code check can fail: a deliberately wrong checksum is reported
    with pytest.raises(AssertionError, match="exit code"):
        run_c_program("muldiv", tmp_path, expected=C_PROGRAMS["muldiv"]() ^ 1, waits=WAITS_NONE)


def test_firmware_build_errors_are_clear(tmp_path):
    bad = tmp_path / "bad.c"
    bad.write_text("int main(void) { return undefined_name; }\n")
    with pytest.raises(FirmwareBuildError, match="undefined_name"):
        build_firmware([bad], tmp_path)
    big = tmp_path / "big.c"
    big.write_text("static volatile char buf[70000]; int main(void) { buf[1] = 1; return buf[0]; }\n")
    with pytest.raises(FirmwareBuildError, match="will not fit in region 'RAM'"):
        build_firmware([big], tmp_path, name="big")          # the linker's own check
    big.write_text("static volatile char buf[62000]; int main(void) { buf[1] = 1; return buf[0]; }\n")
    with pytest.raises(FirmwareBuildError, match="with a 0x1000-byte stack it does not fit RAM"):
        build_firmware([big], tmp_path, name="big")          # ours: room for the stack
    with pytest.raises(ValueError, match="origin must be a multiple of 4096"):
        build_firmware([bad], tmp_path, origin=0x100)
    with pytest.raises(FirmwareBuildError, match="does not exist"):
        build_firmware([tmp_path / "missing.c"], tmp_path)


def test_firmware_at_nonzero_reset_vector(tmp_path):
    src = tmp_path / "hart.c"
    src.write_text("int main(void) { unsigned h; __asm__ volatile(\"csrr %0, mhartid\" : \"=r\"(h));"
                   " return (int)(h * 3 + 1); }\n")
    fw = build_firmware([src], tmp_path, origin=0x4000, length=0x2000, name="hart")
    assert fw.symbols["_start"] == 0x4000
    img = bytearray(fw.length)
    img[:len(fw.image)] = fw.image
    res = run_amaranth(Core(hart_id=5, reset_vector=0x4000), MemoryMap([Region(0x4000, img)]),
                       rng=random.Random(3), waits=WAITS_RANDOM, halt_pc=fw.symbols["_halt"],
                       max_cycles=5000)
    assert res.traps == []
    assert struct.unpack_from("<I", img, fw.symbols["_exit_code"] - 0x4000)[0] == 16


# -- the checker itself can fail ----------------------------------------------------------

def _small_program():
    return li(1, 1234) + li(2, -99) + li(4, DATA_BASE) + [e("add", 3, 1, 2), e("sw", 3, 4, 0), HALT]


def test_lockstep_catches_a_wrong_instruction():
    # Unicorn's copy of the program has sub where the core runs add
    def corrupt(ref):
        ref.uc.mem_write(24, struct.pack("<I", e("sub", 3, 1, 2)))
    with pytest.raises(LockstepMismatch, match="memory holds"):
        lockstep(_small_program(), corrupt=corrupt)


def test_lockstep_catches_a_wrong_register_or_store():
    from unicorn.riscv_const import UC_RISCV_REG_X0

    class Skewed(Lockstep):
        def retire(self, *ev):
            super().retire(*ev) if self.count != 2 else self._skew(ev)

        def _skew(self, ev):
            self.uc.reg_write(UC_RISCV_REG_X0 + 1, 0)   # Unicorn loses x1 before the addi
            return Lockstep.retire(self, *ev)

    region = ram_with(_small_program())
    with pytest.raises(LockstepMismatch, match="x1 is"):
        run_amaranth(Core(), MemoryMap([region]), lockstep=Skewed([region], 0), halt_pc=32)

    class WrongStore(Lockstep):
        def retire(self, pc, insn, rd, rd_data, sa, sd, sm):
            return super().retire(pc, insn, rd, rd_data, sa, sd ^ (1 << 9) if sm else sd, sm)

    region = ram_with(_small_program())
    with pytest.raises(LockstepMismatch, match="stored"):
        run_amaranth(Core(), MemoryMap([region]), lockstep=WrongStore([region], 0), halt_pc=32)


def test_lockstep_rejects_traps_and_timeouts():
    region = ram_with([asm.ECALL, HALT])
    with pytest.raises(LockstepMismatch, match="trap cause 11"):
        run_amaranth(Core(), MemoryMap([region]), lockstep=Lockstep([region], 0), halt_pc=4)
    region = ram_with([e("jal", 0, 0)])
    with pytest.raises(SimTimeout, match="no halt within 200 cycles"):
        run_amaranth(Core(), MemoryMap([region]), halt_pc=4, max_cycles=200)


def test_bus_model_checks_the_protocol():
    mem = MemoryMap([Region(0, bytearray(4096))])
    port = BusPort(mem, random.Random(0), (2,))
    assert port.cycle(1, 8, 0, 0, 0xF) == (0, 0, 0)
    with pytest.raises(BusProtocolError, match="changed while waiting"):
        port.cycle(1, 12, 0, 0, 0xF)
    port = BusPort(mem, random.Random(0), (2,))
    port.cycle(1, 8, 0, 0, 0xF)
    with pytest.raises(BusProtocolError, match="valid dropped"):
        port.cycle(0, 0, 0, 0, 0)
    port = BusPort(mem, random.Random(0), (0,))
    assert port.cycle(1, 0x2000, 0, 0, 0xF) == (1, 0, 1)     # outside memory -> err
    with pytest.raises(BusProtocolError, match="unaligned"):
        port.cycle(1, 2, 0, 0, 0xF)


# -- traps (not in lockstep: Unicorn does not enter trap handlers) -------------------------

HANDLER = 0x1000
ROM_BASE = 0x10000


def _trap_handler():
    """At HANDLER: x20..x23 <- mcause, mepc, mtval, mstatus; x24 += 1; mepc += 4; mret."""
    return [e("csrrs", 20, CSR.MCAUSE, 0), e("csrrs", 21, CSR.MEPC, 0),
            e("csrrs", 22, CSR.MTVAL, 0), e("csrrs", 23, CSR.MSTATUS, 0),
            e("addi", 24, 24, 1), e("addi", 25, 21, 4), e("csrrw", 0, CSR.MEPC, 25), asm.MRET]


def run_trap_program(body, *, waits=WAITS_RANDOM, seed=0, max_traps=None):
    """``body`` then ``jal x0, 0`` at 0 with HANDLER installed; a read-only ROM at ROM_BASE."""
    words = li(9, DATA_BASE) + body + [HALT]
    img = bytearray(RAM_SIZE)
    for i, w in enumerate(words):
        img[4 * i:4 * i + 4] = struct.pack("<I", w)
    for i, w in enumerate(_trap_handler()):
        img[HANDLER + 4 * i:HANDLER + 4 * i + 4] = struct.pack("<I", w)
    mem = MemoryMap([Region(0, img), Region(ROM_BASE, bytearray(b"\x5a" * 4096), writable=False)])
    res = run_amaranth(Core(trap_vector=HANDLER), mem, rng=random.Random(seed), waits=waits,
                       halt_pc=4 * (len(words) - 1), max_cycles=20_000, keep_trace=True,
                       max_traps=max_traps)
    return res, img


TRAP_CASES = {
    # name: (body whose last word faults, cause, mtval as a function of the faulting pc;
    #        None = the instruction word)
    "illegal_zero": ([0x00000000], Cause.ILLEGAL_INSN, lambda pc: 0),
    "illegal_ones": ([0xFFFFFFFF], Cause.ILLEGAL_INSN, lambda pc: M32),
    "illegal_compressed": ([0x00000001], Cause.ILLEGAL_INSN, lambda pc: 1),
    "illegal_funct7": ([e("add", 5, 1, 2) | (0x10 << 25)], Cause.ILLEGAL_INSN, None),
    "illegal_system_funct3_4": ([0x00004073], Cause.ILLEGAL_INSN, lambda pc: 0x00004073),
    "illegal_unknown_csr": ([e("csrrs", 5, 0x7C0, 0)], Cause.ILLEGAL_INSN, None),
    "illegal_write_mhartid": ([e("csrrw", 5, CSR.MHARTID, 1)], Cause.ILLEGAL_INSN, None),
    "illegal_write_cycle": ([e("csrrsi", 5, CSR.CYCLE, 1)], Cause.ILLEGAL_INSN, None),
    "ecall": ([asm.ECALL], Cause.ECALL_M, lambda pc: 0),
    "ebreak": ([asm.EBREAK], Cause.BREAKPOINT, lambda pc: pc),
    "load_misaligned_lw": ([e("lw", 5, 9, 2)], Cause.LOAD_MISALIGNED, lambda pc: DATA_BASE + 2),
    "load_misaligned_lh": ([e("lhu", 5, 9, 3)], Cause.LOAD_MISALIGNED, lambda pc: DATA_BASE + 3),
    "store_misaligned_sw": ([e("sw", 5, 9, 1)], Cause.STORE_MISALIGNED, lambda pc: DATA_BASE + 1),
    "store_misaligned_sh": ([e("sh", 5, 9, -1)], Cause.STORE_MISALIGNED, lambda pc: DATA_BASE - 1),
    "jal_misaligned": ([e("jal", 5, 6)], Cause.INSN_MISALIGNED, lambda pc: pc + 6),
    "branch_misaligned": ([e("beq", 0, 0, 10)], Cause.INSN_MISALIGNED, lambda pc: pc + 10),
    "jalr_misaligned": ([e("jalr", 5, 9, 2)], Cause.INSN_MISALIGNED, lambda pc: DATA_BASE + 2),
    "load_fault": (li(6, 0x20000) + [e("lw", 5, 6, 4)], Cause.LOAD_ACCESS_FAULT, lambda pc: 0x20004),
    "store_fault": (li(6, 0x20000) + [e("sb", 5, 6, 3)], Cause.STORE_ACCESS_FAULT, lambda pc: 0x20003),
    "store_to_rom": (li(6, ROM_BASE) + [e("sw", 9, 6, 8)], Cause.STORE_ACCESS_FAULT,
                     lambda pc: ROM_BASE + 8),
}


@pytest.mark.parametrize("name", sorted(TRAP_CASES))
def test_trap_is_reported_and_handled(name):
    body, cause, tval = TRAP_CASES[name]
    body = [e("addi", 5, 0, 77)] + body + [e("addi", 26, 0, 1)]
    fault_pc = 4 * (2 + len(body) - 2)   # li(9) is 2 words; the fault is the last body word
    res, img = run_trap_program(body)
    assert res.halted
    assert len(res.traps) == 1, res.traps
    got_cause, got_pc, got_tval = res.traps[0]
    word = struct.unpack_from("<I", img, fault_pc)[0]
    want_tval = tval(fault_pc) if tval else word
    assert (got_cause, got_pc, got_tval) == (cause, fault_pc, want_tval)
    regs = res.regs
    assert regs[20:25] == [cause, fault_pc, want_tval, regs[23], 1]
    assert regs[23] & 0x1888 == 0x1800     # in the handler: MPP = M, MPIE = 0, MIE = 0
    assert regs[5] == 77                   # the faulting instruction wrote nothing
    assert regs[26] == 1                   # execution resumed after it (mret to mepc + 4)
    assert fault_pc not in [t[0] for t in res.trace]   # and it did not retire
    assert not any(t[6] for t in res.trace)            # no store happened
    assert img[DATA_BASE:DATA_BASE + 16] == bytes(16)


def test_fetch_access_fault():
    res, img = run_trap_program(li(6, 0x30000) + [e("jalr", 1, 6, 0)], max_traps=1)
    # the jump retires, then fetching 0x30000 fails; the handler returns to 0x30004, which
    # faults again: stop after a few reports
    assert res.traps[0] == (Cause.INSN_ACCESS_FAULT, 0x30000, 0x30000)


def test_fetch_fault_repeats_are_reported():
    words = li(6, 0x30000) + [e("jalr", 1, 6, 0)]
    img = bytearray(RAM_SIZE)
    for i, w in enumerate(words):
        img[4 * i:4 * i + 4] = struct.pack("<I", w)
    res = run_amaranth(Core(trap_vector=0x30000), MemoryMap([Region(0, img)]), max_traps=3,
                       max_cycles=1000)
    assert [t[0] for t in res.traps] == [Cause.INSN_ACCESS_FAULT] * 3


# -- CSRs ---------------------------------------------------------------------------------

def test_csrs_identity_scratch_and_counters():
    body = [
        e("csrrs", 1, CSR.MHARTID, 0), e("csrrs", 2, CSR.MISA, 0),
        e("csrrw", 3, CSR.MSCRATCH, 9),            # x3 <- 0, mscratch <- DATA_BASE
        e("csrrsi", 4, CSR.MSCRATCH, 5),           # x4 <- DATA_BASE; |= 5
        e("csrrci", 5, CSR.MSCRATCH, 1),           # x5 <- DATA_BASE|5; &= ~1
        e("csrrc", 6, CSR.MSCRATCH, 0),            # read only (rs1 = x0): x6 <- DATA_BASE|4
        e("csrrs", 7, CSR.MCYCLE, 0), e("csrrs", 8, CSR.CYCLE, 0),          # 2 cycles apart
        e("csrrs", 10, CSR.MINSTRET, 0), e("csrrs", 11, CSR.INSTRET, 0),    # 1 instruction apart
        e("csrrs", 12, CSR.MCYCLEH, 0), e("csrrs", 13, CSR.MINSTRETH, 0),
        e("csrrwi", 0, CSR.MINSTRET, 0), e("csrrs", 14, CSR.MINSTRET, 0),   # written 0, then 1 retired
        e("csrrw", 0, CSR.MCYCLE, 0), e("csrrs", 15, CSR.MCYCLE, 0),        # written 0, read 2 later
        e("csrrs", 16, CSR.MVENDORID, 0), e("csrrs", 17, CSR.MTVEC, 0),
        e("csrrwi", 0, CSR.MTVEC, 0x13), e("csrrs", 18, CSR.MTVEC, 0),      # direct mode only
        e("csrrwi", 0, CSR.MISA, 0), e("csrrs", 19, CSR.MISA, 0),           # WARL: ignored
        e("csrrwi", 0, CSR.MSTATUS, 0x8), e("csrrs", 21, CSR.MSTATUS, 0),   # MIE
    ]
    words = li(9, DATA_BASE) + body + [HALT]
    region = ram_with(words)
    res = run_amaranth(Core(hart_id=0xC0FFEE, trap_vector=0x800), MemoryMap([region]),
                       waits=WAITS_NONE, halt_pc=4 * (len(words) - 1), max_cycles=2000)
    r = res.regs
    assert res.traps == []
    assert r[1] == 0xC0FFEE and r[2] == MISA_RV32IM == r[19]
    assert (r[3], r[4], r[5], r[6]) == (0, DATA_BASE, DATA_BASE | 5, DATA_BASE | 4)
    assert r[8] - r[7] == 2            # two cycles per CSR instruction (zero wait states)
    assert r[11] - r[10] == 1
    assert (r[12], r[13]) == (0, 0)
    assert r[14] == 0                  # the write wins over the writing instruction's own retire
    assert r[15] == 1                  # written 0 on cycle t, read on cycle t + 2
    assert r[16] == 0 and r[17] == 0x800 and r[18] == 0x10
    assert r[21] == 0x1808             # MPP = M, MIE set
    assert res.retired == len(words)


def test_mret_restores_mie():
    words = li(9, DATA_BASE) + [e("csrrsi", 0, CSR.MSTATUS, 8), asm.ECALL,
                                e("csrrs", 27, CSR.MSTATUS, 0)]
    res, img = run_trap_program(words[2:])
    assert res.traps[0][0] == Cause.ECALL_M
    assert res.regs[23] & 0x88 == 0x80     # in the handler: MPIE = 1 (old MIE), MIE = 0
    assert res.regs[27] & 0x88 == 0x88     # after mret: MIE = 1 (from MPIE), MPIE = 1


# -- performance figures (reported in docs/dsu.md) -----------------------------------------

def test_cpi_with_zero_wait_states():
    """CPI: 2 for ALU/MUL/branch/jump, 3 for loads/stores, 35 for division."""
    for body, cpi in (([e("add", 1, 1, 2)] * 20, 2), ([e("lw", 1, 9, 0)] * 20, 3),
                      ([e("sw", 1, 9, 0)] * 20, 3), ([e("mulh", 1, 1, 2)] * 20, 2),
                      ([e("divu", 1, 1, 2)] * 20, 35), ([e("jal", 0, 4)] * 20, 2)):
        words = li(9, DATA_BASE) + body + [HALT]
        res = run_amaranth(Core(), MemoryMap([ram_with(words)]), waits=WAITS_NONE,
                           halt_pc=4 * (len(words) - 1), max_cycles=5000)
        # 2 li + body + halt retired; the first fetch starts at cycle 0
        assert res.cycles == 2 * 2 + cpi * len(body) + 2, (body[0], res.cycles)
