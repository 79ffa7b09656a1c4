"""cocotb side of the toolchain smoke test: an Amaranth counter on Verilator."""

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import RisingEdge, ReadOnly


@cocotb.test()
async def counter_counts_and_wraps(dut):
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    dut.rst.value = 1
    dut.en.value = 0
    for _ in range(2):
        await RisingEdge(dut.clk)
    dut.rst.value = 0
    await RisingEdge(dut.clk)
    await ReadOnly()
    assert int(dut.count.value) == 0
    await RisingEdge(dut.clk)
    dut.en.value = 1
    seen = []
    for _ in range(20):
        await RisingEdge(dut.clk)
        await ReadOnly()
        seen.append(int(dut.count.value))
    # 4-bit counter: 1, 2, ... 15, 0, 1, ... (first increment lands one edge after en=1)
    expected = [(i + 1) % 16 for i in range(20)]
    assert seen == expected, f"counter sequence {seen} != {expected}"


@cocotb.test()
async def only_the_bench_module_is_assertion_rewritten(dut):
    """``run_cocotb`` has pytest's hook rewrite the asserts of this module and of no module
    imported after it (``COCOTB_REWRITE_ASSERTION_FILES``)."""
    import importlib
    later = importlib.import_module("tricut.sim.harness.verilog_modules")
    assert type(__loader__).__name__ == "AssertionRewritingHook"
    assert type(later.__loader__).__name__ != "AssertionRewritingHook", later.__loader__
