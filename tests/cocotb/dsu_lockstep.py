"""cocotb side of the DSU core lockstep: the generated Verilog on Verilator vs Unicorn.

The same pure-Python parts as the Amaranth-simulator tests (``BusPort`` with random wait
states, ``Lockstep``), driven once per clock: on the falling edge the bench samples the
bus requests and drives ``ready``/``rdata``/``err``; in the read-only phase of the same
half cycle (combinational paths from ``ready`` settled) it samples the trace and trap
ports. Environment: ``DSU_SEEDS`` (comma list), ``DSU_ITEMS`` (random items per stream),
``DSU_TRAP_SEEDS`` (seeds whose streams include trapping instructions, handled in
lockstep), ``DSU_CORRUPT=1`` makes Unicorn's copy of one instruction differ (the run must fail),
``DSU_C_EXPECT`` for the compiled C programs.
"""

import os
import random
import struct
import tempfile
from pathlib import Path

import cocotb
from cocotb.clock import Clock

from tricut.sim.harness.asm import encode, random_program, random_trap_program, trap_handler
from tricut.sim.harness.lockstep import WAITS_RANDOM, Lockstep, Region, run_cocotb
from tricut.sim.harness.firmware import FIRMWARE_DIR, build_firmware

DATA_BASE = 0x8000
RAM_SIZE = 0x10000
HANDLER = 0x7000


async def run_image(dut, img, halt_pc, rng, label, corrupt=False, expected_traps=None):
    """Reset the core, run ``img`` (one RAM at 0) in lockstep until ``halt_pc`` retires."""
    region = Region(0, img)
    ref = Lockstep([region], 0, expected_traps=expected_traps, trap_vector=HANDLER)
    if corrupt:
        # Unicorn's copy of one early instruction differs from the core's
        ref.uc.mem_write(4 * 5, struct.pack("<I", encode("addi", 3, 3, 1)))
    cycles = await run_cocotb(dut, ref, region, rng, WAITS_RANDOM, halt_pc, 200_000, label)
    dut._log.info(f"{label}: {ref.count} instructions in lockstep, {cycles} cycles, "
                  f"{sum(ref.traps.values())} traps")
    return ref.count


async def run_stream(dut, seed, n_items, corrupt, traps):
    rng = random.Random(seed)
    expected = None
    if traps:
        words, expected = random_trap_program(rng, n_items, DATA_BASE, HANDLER)
    else:
        words = random_program(rng, n_items, DATA_BASE)
    img = bytearray(RAM_SIZE)
    for i, w in enumerate(words):
        img[4 * i:4 * i + 4] = struct.pack("<I", w)
    for i, w in enumerate(trap_handler()):
        img[HANDLER + 4 * i:HANDLER + 4 * i + 4] = struct.pack("<I", w)
    img[DATA_BASE:DATA_BASE + 4096] = bytes(rng.getrandbits(8) for _ in range(4096))
    return await run_image(dut, img, 4 * (len(words) - 1), rng, f"seed {seed}", corrupt,
                           expected)


@cocotb.test()
async def random_streams_in_lockstep(dut):
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    seeds = [int(s) for s in os.environ.get("DSU_SEEDS", "11").split(",")]
    n_items = int(os.environ.get("DSU_ITEMS", "2000"))
    corrupt = os.environ.get("DSU_CORRUPT") == "1"
    trap_seeds = {int(s) for s in os.environ.get("DSU_TRAP_SEEDS", "").split(",") if s}
    total = 0
    for seed in seeds:
        total += await run_stream(dut, seed, n_items, corrupt, seed in trap_seeds)
    dut._log.info(f"DSU_LOCKSTEP_TOTAL {total}")
    assert total > 0


@cocotb.test()
async def c_programs_in_lockstep(dut):
    """Build each program of ``DSU_C_EXPECT`` (``name=hex,...``) from
    ``rtl/dsu/firmware/tests/<name>.c``, run it in lockstep, check its exit code."""
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    expect = dict(item.split("=") for item in os.environ["DSU_C_EXPECT"].split(","))
    with tempfile.TemporaryDirectory() as tmp:
        for name, want in expect.items():
            fw = build_firmware([FIRMWARE_DIR / "tests" / f"{name}.c"], Path(tmp) / name,
                                name=name)
            img = bytearray(fw.length)
            img[:len(fw.image)] = fw.image
            await run_image(dut, img, fw.symbols["_halt"], random.Random(5), name)
            got = struct.unpack_from("<I", img, fw.symbols["_exit_code"])[0]
            assert got == int(want, 16), f"{name}: exit code {got:#x}, expected {want}"
