"""cocotb bench for the TE decode engine on Verilator.

Replays the stimulus plans written by ``tricut.sim.harness.te`` (a JSON list: one plan, or one
per (idle, backpressure) pair of a matrix) through the same ``Driver`` as the Amaranth bench
(same beats, same idle/backpressure sequences), resetting the engine before each, and writes
per plan the observed output beats, status words and cycle counts and the drained check's
findings to ``$TE_RESULTS``; the pytest side compares them bit for bit with the golden model.
"""

import json
import os

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ReadOnly, RisingEdge

from tricut.sim.harness.te import STREAMS, Driver


async def reset(dut):
    dut.rst.value = 1
    for k in STREAMS:
        getattr(dut, f"{k}__valid").value = 0
        getattr(dut, f"{k}__payload").value = 0
    dut.out__ready.value = 0
    for _ in range(2):
        await RisingEdge(dut.clk)
    dut.rst.value = 0


async def run_plan(dut, plan):
    drv = Driver(plan)
    await reset(dut)
    status_pending = False
    while not drv.finished:
        assert drv.cycle <= plan["max_cycles"], (
            f"TE engine hung: {drv.cycle} cycles, {len(drv.steps)}/{drv.n_steps} steps done")
        d, ready = drv.drive()
        for k in STREAMS:
            valid, payload = d[k]
            getattr(dut, f"{k}__valid").value = valid
            if payload is not None:
                getattr(dut, f"{k}__payload").value = payload
        dut.out__ready.value = ready
        await ReadOnly()            # settled values of this cycle = what the edge samples
        if status_pending:          # registered at the previous edge
            drv.finish_step(int(dut.status.value))
            status_pending = False
        readies = {k: int(getattr(dut, f"{k}__ready").value) for k in STREAMS}
        ov = int(dut.out__valid.value)
        payload = int(dut.out__payload.value) if ov and ready else 0
        mb = int(dut.mac_busy.value)
        await RisingEdge(dut.clk)
        if drv.sampled(readies, ov, payload, mb):
            status_pending = True
    return {"steps": drv.steps, "problems": drv.problems()}


@cocotb.test()
async def te_plan_replay(dut):
    plans = json.loads(open(os.environ["TE_PLAN"]).read())
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    runs = []
    for plan in plans:
        runs.append(await run_plan(dut, plan))
    with open(os.environ["TE_RESULTS"], "w") as f:
        json.dump(runs, f)
