"""Lockstep benchmark of the DSU core: the generated Verilog on Verilator (cocotb) against
Unicorn, for at least a million retired instructions, with an instruction-class coverage table.

Every retired instruction is checked by :class:`tricut.sim.harness.lockstep.Lockstep` (pc,
instruction word, destination register, all 31 registers, every store's lanes and data;
expected traps applied by hand, any other trap a mismatch), every bus access gets random
wait states (0,0,0,1,1,2,3,5) except in the zero-wait streams, and each stream ends with a
byte-for-byte memory comparison. The first mismatch stops the run (exit 1). Streams, in
rotation until the target is reached:

* ``random``: seeded random RV32IM streams (``asm.random_program``: all ops with
  edge-biased operands, loads/stores, forward branches/JAL/JALR, counted loops), random waits;
* ``random, no waits``: the same generator with zero wait states;
* ``traps``: ``asm.random_trap_program`` (≈5 % trapping instructions of all 8 causes, the
  handler's CSR reads and MRET in lockstep);
* ``csr/system``: CSR instructions (all six forms) on mscratch, mtval and mcause and reads of
  mhartid, mixed with ALU ops, FENCE, FENCE.I, WFI (generated here);
* ``C``: the compiled test programs (sort, crc32, muldiv), their exit codes checked.

Not part of ``make test``. Usage::

    .venv/bin/python benchmarks/lockstep.py [--instructions 1000000] [--seed 1] [--items 4000]

Prints the coverage table (instructions per class, traps per cause, per stream kind) and the
rates; ≈ 8-15 min for 10^6 instructions on one core of the development machine.

This file is also the cocotb test module (``run_cocotb(..., "lockstep", benchmarks/)``).
"""

from __future__ import annotations

import json
import os
import random
import struct
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import cocotb

DATA_BASE = 0x8000
RAM_SIZE = 0x10000
HANDLER = 0x7000
CAUSES = {0: "insn misaligned", 1: "insn access fault", 2: "illegal insn", 3: "breakpoint",
          4: "load misaligned", 5: "load access fault", 6: "store misaligned",
          7: "store access fault", 11: "ecall"}


def csr_program(rng, n_items):
    """CSR/system stream: registers preset, then CSRRW/S/C(I) on mscratch, mtval, mcause (full
    32-bit read/write in both the core and Unicorn), reads of mhartid (CSRRS/C with x0: no
    write), ALU ops that change the values, FENCE, FENCE.I, WFI; ends with ``jal x0, 0``."""
    from tricut.sim.harness.asm import FENCE, FENCE_I, WFI, encode, li
    words = []
    for r in range(1, 32):
        words += li(r, rng.getrandbits(32))
    csrs = [0x340, 0x343, 0x342]
    for _ in range(n_items):
        k = rng.random()
        rd, rs = rng.randrange(0, 32), rng.randrange(0, 32)
        if k < 0.55:
            op = rng.choice(["csrrw", "csrrs", "csrrc", "csrrwi", "csrrsi", "csrrci"])
            src = rng.randrange(32)          # a register, or the 5-bit immediate
            words.append(encode(op, rd, rng.choice(csrs), src))
        elif k < 0.62:
            words.append(encode(rng.choice(["csrrs", "csrrc"]), rd, 0xF14, 0))   # mhartid
        elif k < 0.9:
            words.append(encode(rng.choice(["add", "xor", "sub", "or"]), rng.randrange(1, 32),
                                rs, rng.randrange(32)))
        else:
            words.append(rng.choice([FENCE, FENCE_I, WFI]))
    return words + [encode("jal", 0, 0)]


# -- the cocotb side -----------------------------------------------------------------------------
async def _run_image(dut, img, halt_pc, rng, waits, expected_traps=None):
    from tricut.sim.harness.lockstep import Lockstep, Region, run_cocotb
    region = Region(0, img)
    ref = Lockstep([region], 0, expected_traps=expected_traps, trap_vector=HANDLER)
    cycles = await run_cocotb(dut, ref, region, rng, waits, halt_pc, 2_000_000, "stream")
    return ref, cycles


def _image(words, rng, handler=False):
    from tricut.sim.harness.asm import trap_handler
    img = bytearray(RAM_SIZE)
    for i, w in enumerate(words):
        img[4 * i:4 * i + 4] = struct.pack("<I", w)
    if handler:
        for i, w in enumerate(trap_handler()):
            img[HANDLER + 4 * i:HANDLER + 4 * i + 4] = struct.pack("<I", w)
    img[DATA_BASE:DATA_BASE + 4096] = bytes(rng.getrandbits(8) for _ in range(4096))
    return img


@cocotb.test()
async def lockstep_benchmark(dut):
    from cocotb.clock import Clock

    from tricut.sim.harness.asm import encode, random_program, random_trap_program
    from tricut.sim.harness.firmware import FIRMWARE_DIR, build_firmware
    from tricut.sim.harness.lockstep import WAITS_NONE, WAITS_RANDOM
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    target = int(os.environ["LOCKSTEP_TARGET"])
    seed = int(os.environ.get("LOCKSTEP_SEED", "1"))
    items = int(os.environ.get("LOCKSTEP_ITEMS", "4000"))
    expect_c = json.loads(os.environ["LOCKSTEP_C"])
    out = Path(os.environ["LOCKSTEP_RESULT"])
    classes, mnemonics, traps = Counter(), Counter(), Counter()
    per_kind = Counter()
    kinds = os.environ.get("LOCKSTEP_KINDS", "random|random, no waits|traps|csr/system|C").split("|")
    total = cycles = streams = 0
    t0 = time.time()
    c_fw = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in expect_c:
            c_fw[name] = build_firmware([FIRMWARE_DIR / "tests" / f"{name}.c"],
                                        Path(tmp) / name, name=name)
        k = 0
        while total < target:
            kind = kinds[k % len(kinds)]
            rng = random.Random(seed * 100_003 + k)
            k += 1
            if kind == "C":
                for name, fw in c_fw.items():
                    # the core's register file is not reset, and compiled code spills
                    # callee-saved registers it never wrote: zero them first (in lockstep too)
                    zero = [encode("addi", r, 0, 0) for r in range(1, 32)] + [encode("jal", 0, 0)]
                    ref, n = await _run_image(dut, _image(zero, rng), 4 * 31, rng, WAITS_NONE)
                    total, cycles = total + ref.count, cycles + n
                    classes.update(ref.classes)
                    mnemonics.update(ref.coverage)
                    per_kind[kind] += ref.count
                    img = bytearray(fw.length)
                    img[:len(fw.image)] = fw.image
                    ref, n = await _run_image(dut, img, fw.symbols["_halt"], rng, WAITS_RANDOM)
                    got = struct.unpack_from("<I", img, fw.symbols["_exit_code"])[0]
                    assert got == expect_c[name], f"{name}: exit code {got:#x}"
                    total, cycles, streams = total + ref.count, cycles + n, streams + 1
                    classes.update(ref.classes)
                    mnemonics.update(ref.coverage)
                    per_kind[kind] += ref.count
                continue
            expected = None
            if kind == "traps":
                words, expected = random_trap_program(rng, items, DATA_BASE, HANDLER)
            elif kind == "csr/system":
                words = csr_program(rng, items)
            else:
                words = random_program(rng, items, DATA_BASE)
            img = _image(words, rng, handler=kind == "traps")
            waits = WAITS_NONE if kind == "random, no waits" else WAITS_RANDOM
            ref, n = await _run_image(dut, img, 4 * (len(words) - 1), rng, waits, expected)
            total, cycles, streams = total + ref.count, cycles + n, streams + 1
            classes.update(ref.classes)
            mnemonics.update(ref.coverage)
            traps.update(ref.traps)
            per_kind[kind] += ref.count
            if streams % 10 == 0:
                dut._log.info(f"{total:,} instructions, {time.time() - t0:.0f} s")
                out.write_text(json.dumps(_summary(total, cycles, streams, classes, mnemonics,
                                                   traps, per_kind, time.time() - t0, False)))
    out.write_text(json.dumps(_summary(total, cycles, streams, classes, mnemonics, traps,
                                       per_kind, time.time() - t0, True)))


def _summary(total, cycles, streams, classes, mnemonics, traps, per_kind, wall, done):
    return {"instructions": total, "cycles": cycles, "streams": streams,
            "classes": dict(classes), "mnemonics": dict(mnemonics),
            "traps": {str(c): n for c, n in traps.items()}, "per_kind": dict(per_kind),
            "wall_s": wall, "done": done, "mismatches": 0}


# -- the driver ----------------------------------------------------------------------------------
def table(res) -> str:
    from tricut.sim.harness.lockstep import INSN_CLASSES
    n = res["instructions"]
    rows = ["| class | retired | share |", "|---|---:|---:|"]
    for c in INSN_CLASSES:
        v = res["classes"].get(c, 0)
        if v or c != "other":
            rows.append(f"| {c} | {v:,} | {100 * v / n:.2f} % |")
    rows.append(f"| **total** | **{n:,}** | |")
    trap_rows = ["", "| trap cause (taken, checked) | count |", "|---|---:|"]
    for code, name in CAUSES.items():
        trap_rows.append(f"| {code} {name} | {res['traps'].get(str(code), 0):,} |")
    kind_rows = ["", "| stream kind | instructions |", "|---|---:|"]
    kind_rows += [f"| {k} | {v:,} |" for k, v in res["per_kind"].items()]
    names = res["mnemonics"]
    mn = ["", f"Distinct instructions retired: {len(names)} "
          f"({', '.join(f'{k} {v:,}' for k, v in sorted(names.items()))})"]
    return "\n".join(rows + trap_rows + kind_rows + mn)


def main(argv=None) -> int:
    import argparse

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--instructions", type=int, default=1_000_000,
                   help="retired instructions to reach (default: 1,000,000)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--items", type=int, default=4000, help="items per random stream")
    a = p.parse_args(argv)
    if a.instructions < 1 or a.items < 10:
        p.error("--instructions must be >= 1 and --items >= 10")
    from tricut.rtl.dsu.core import Core
    from tricut.sim.harness.cocotb_run import CocotbFailure, run_cocotb
    from tricut.sim.harness.firmware_programs import C_PROGRAMS
    expect_c = {name: fn() for name, fn in sorted(C_PROGRAMS.items())}
    with tempfile.TemporaryDirectory() as tmp:
        result = Path(tmp) / "result.json"
        t0 = time.time()
        try:
            run_cocotb(Core(), "dsu_core", "lockstep", Path(__file__).resolve().parent,
                       extra_env={"LOCKSTEP_TARGET": str(a.instructions),
                                  "LOCKSTEP_SEED": str(a.seed), "LOCKSTEP_ITEMS": str(a.items),
                                  "LOCKSTEP_C": json.dumps(expect_c),
                                  "LOCKSTEP_RESULT": str(result)},
                       testcase="lockstep_benchmark", cxx_opt=None)
            failed = None
        except CocotbFailure as e:
            failed = str(e)
        wall = time.time() - t0
        res = json.loads(result.read_text()) if result.exists() else None
    if failed or res is None or not res["done"]:
        print(f"lockstep FAILED: {failed or 'no result'}"
              + (f" after {res['instructions']:,} instructions" if res else ""), file=sys.stderr)
        return 1
    print(f"command: .venv/bin/python benchmarks/lockstep.py --instructions {a.instructions} "
          f"--seed {a.seed} --items {a.items}")
    print(f"{res['instructions']:,} instructions in lockstep with Unicorn, 0 mismatches, "
          f"{res['streams']} streams, {res['cycles']:,} cycles; {res['wall_s']:.0f} s in the "
          f"simulation ({res['instructions'] / res['wall_s']:,.0f} instructions/s, "
          f"{res['cycles'] / res['wall_s']:,.0f} cycles/s), {wall:.0f} s with the build")
    print()
    print(table(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
