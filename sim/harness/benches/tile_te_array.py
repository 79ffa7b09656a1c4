"""cocotb bench for the TE array (``rtl/tile/te_array.py``) on Verilator.

Replays the plans written by :func:`tricut.sim.harness.te_array.simulate_verilator_matrix`
(a JSON list, one plan per (idle, backpressure) pair) through the same ``Driver`` as the
Amaranth bench, resetting the array before each, and writes per plan the jobs that came out
and the drained check's findings to ``$TRICUT_RESULTS``.
"""

from dataclasses import asdict

import cocotb
from cocotb.triggers import ReadOnly, RisingEdge

from tricut.sim.harness.benches.common import drive_sources, readies, replay_plans, reset
from tricut.sim.harness.te_array import STREAMS, Driver

async def _run_plan(dut, plan):
    drv = Driver(plan)
    await reset(dut, STREAMS, ("out", "status"))
    while not drv.finished:
        assert drv.cycle <= plan["max_cycles"], (
            f"TE array hung: {drv.cycle} cycles, {len(drv.jobs)}/{drv.n_jobs} jobs out")
        d, oready, sready = drv.drive()
        drive_sources(dut, d)
        dut.out__ready.value = oready
        dut.status__ready.value = sready
        await ReadOnly()        # settled values of this cycle = what the edge samples
        rd = readies(dut, STREAMS)
        ov, sv = int(dut.out__valid.value), int(dut.status__valid.value)
        op = int(dut.out__payload.value) if ov and oready else 0
        sp = int(dut.status__payload.value) if sv and sready else 0
        await RisingEdge(dut.clk)
        drv.sampled(rd, ov, op, sv, sp)
    return {"jobs": [asdict(j) for j in drv.jobs], "problems": drv.problems()}


@cocotb.test()
async def te_array_plan_replay(dut):
    await replay_plans(dut, _run_plan)
