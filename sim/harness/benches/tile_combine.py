"""cocotb bench for the split-K combine unit (``rtl/tile/combine.py``) on Verilator.

Replays the plans written by :func:`tricut.sim.harness.combine.simulate_verilator_matrix` (a
JSON list, one plan per (idle, backpressure) pair) through the same ``Driver`` as the
Amaranth bench, resetting the unit before each, and writes per plan the output beats, cycle
counts, ``misframed`` flags and the drained check's findings to ``$TRICUT_RESULTS``; the
pytest side compares them bit for bit with the golden combine.
"""

import cocotb
from cocotb.triggers import ReadOnly, RisingEdge

from tricut.sim.harness.benches.common import drive_sources, readies, replay_plans, reset
from tricut.sim.harness.combine import STREAMS, Driver


async def run_plan(dut, plan):
    drv = Driver(plan)
    await reset(dut, STREAMS, ("combined",))
    while not drv.finished:
        assert drv.cycle <= plan["max_cycles"], (
            f"combine unit hung: {drv.cycle} cycles, {len(drv.jobs)}/{drv.n_jobs} jobs done")
        d, ready = drv.drive()
        drive_sources(dut, d)
        dut.combined__ready.value = ready
        await ReadOnly()            # settled values of this cycle = what the edge samples
        rd = readies(dut, STREAMS)
        ov = int(dut.combined__valid.value)
        payload = int(dut.combined__payload.value) if ov and ready else 0
        mf = int(dut.misframed.value)
        await RisingEdge(dut.clk)
        drv.sampled(rd, ov, payload, mf)
    return {"jobs": drv.jobs, "problems": drv.problems()}


@cocotb.test()
async def combine_plan_replay(dut):
    await replay_plans(dut, run_plan)
