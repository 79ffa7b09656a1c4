"""cocotb bench for the TE decode engine on Verilator.

Replays the stimulus plans written by ``tricut.sim.harness.te`` (a JSON list: one plan, or one
per (idle, backpressure) pair of a matrix) through the same ``Driver`` as the Amaranth bench
(same beats, same idle/backpressure sequences), resetting the engine before each, and writes
per plan the observed output beats, status words and cycle counts and the drained check's
findings to ``$TRICUT_RESULTS``; the pytest side compares them bit for bit with the golden model.
"""

import cocotb
from cocotb.triggers import ReadOnly, RisingEdge

from tricut.sim.harness.benches.common import drive_sources, readies, replay_plans, reset
from tricut.sim.harness.te import STREAMS, Driver


async def run_plan(dut, plan):
    drv = Driver(plan)
    await reset(dut, STREAMS, ("out",))
    status_pending = False
    while not drv.finished:
        assert drv.cycle <= plan["max_cycles"], (
            f"TE engine hung: {drv.cycle} cycles, {len(drv.steps)}/{drv.n_steps} steps done")
        d, ready = drv.drive()
        drive_sources(dut, d)
        dut.out__ready.value = ready
        await ReadOnly()            # settled values of this cycle = what the edge samples
        if status_pending:          # registered at the previous edge
            drv.finish_step(int(dut.status.value))
            status_pending = False
        rd = readies(dut, STREAMS)
        ov = int(dut.out__valid.value)
        payload = int(dut.out__payload.value) if ov and ready else 0
        mb = int(dut.mac_busy.value)
        await RisingEdge(dut.clk)
        if drv.sampled(rd, ov, payload, mb):
            status_pending = True
    return {"steps": drv.steps, "problems": drv.problems()}


@cocotb.test()
async def te_plan_replay(dut):
    await replay_plans(dut, run_plan)
