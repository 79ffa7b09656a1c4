"""cocotb side of the DSU scheduler runs: the cluster's generated Verilog on Verilator, driven
by the same cycle-level environment as the Amaranth runs (``tricut.sim.harness.dsu.DsuEnv``).
The run's spec (requests, firmware image, faults) comes from the JSON file named by
``DSU_SPEC``; the observed batches, outcomes and latencies go to ``DSU_RESULT``; the
comparison with the golden model is made by ``run_dsu`` in the calling process."""

import os

import cocotb

from tricut.sim.harness.dsu import cocotb_bench_main


@cocotb.test()
async def dsu_schedule(dut):
    await cocotb_bench_main(os.environ["DSU_SPEC"], os.environ["DSU_RESULT"])(dut)
