"""cocotb bench of ``tricut tile run --sim verilator``: the whole co-simulation loop (golden
decode step, DSU rounds, host traffic, CDU decision tap) runs here, in the simulator's
Python; its body is :class:`tricut.sim.harness.tile.bench.CosimBench` (plan in
``$TRICUT_PLANS``, pickled :class:`~tricut.sim.harness.tile.golden.RunResult` to
``$TRICUT_RESULTS``). Python acts only between layers and during the host traffic; from
``go`` to ``done`` the clock runs in C."""

import cocotb

from tricut.sim.harness.tile.bench import CosimBench


@cocotb.test()
async def tile_cosim(dut):
    await CosimBench(dut).main()
