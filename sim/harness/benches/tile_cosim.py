"""cocotb bench of ``tricut tile run --sim verilator``: the whole co-simulation loop (golden
decode step, DSU rounds, host traffic, CDU decision tap) runs here, in the simulator's
Python; its body is :func:`tricut.sim.harness.tile_cosim_verilator.bench_main` (plan in
``$TRICUT_PLANS``, pickled :class:`~tricut.sim.harness.tile_cosim.RunResult` to
``$TRICUT_RESULTS``). Python acts only between layers and during the host traffic; from
``go`` to ``done`` the clock runs in C."""

import cocotb

from tricut.sim.harness.tile_cosim_verilator import bench_main


@cocotb.test()
async def tile_cosim(dut):
    await bench_main(dut)
