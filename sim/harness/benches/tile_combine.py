"""cocotb bench for the split-K combine unit (``rtl/tile/combine.py``) on Verilator.

Replays the plans written by :func:`tricut.sim.harness.combine.simulate_verilator_matrix` (a
JSON list, one plan per (idle, backpressure) pair) through the same ``Driver`` as the
Amaranth bench, resetting the unit before each, and writes per plan the output beats, cycle
counts, ``misframed`` flags and the drained check's findings to ``$COMBINE_RESULTS``; the
pytest side compares them bit for bit with the golden combine.
"""

import json
import os

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ReadOnly, RisingEdge

from tricut.sim.harness.combine import STREAMS, Driver


async def reset(dut):
    dut.rst.value = 1
    for k in STREAMS:
        getattr(dut, f"{k}__valid").value = 0
        getattr(dut, f"{k}__payload").value = 0
    dut.combined__ready.value = 0
    for _ in range(2):
        await RisingEdge(dut.clk)
    dut.rst.value = 0


async def run_plan(dut, plan):
    drv = Driver(plan)
    await reset(dut)
    while not drv.finished:
        assert drv.cycle <= plan["max_cycles"], (
            f"combine unit hung: {drv.cycle} cycles, {len(drv.jobs)}/{drv.n_jobs} jobs done")
        d, ready = drv.drive()
        for k in STREAMS:
            valid, payload = d[k]
            getattr(dut, f"{k}__valid").value = valid
            if payload is not None:
                getattr(dut, f"{k}__payload").value = payload
        dut.combined__ready.value = ready
        await ReadOnly()            # settled values of this cycle = what the edge samples
        readies = {k: int(getattr(dut, f"{k}__ready").value) for k in STREAMS}
        ov = int(dut.combined__valid.value)
        payload = int(dut.combined__payload.value) if ov and ready else 0
        mf = int(dut.misframed.value)
        await RisingEdge(dut.clk)
        drv.sampled(readies, ov, payload, mf)
    return {"jobs": drv.jobs, "problems": drv.problems()}


@cocotb.test()
async def combine_plan_replay(dut):
    plans = json.loads(open(os.environ["COMBINE_PLAN"]).read())
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    runs = []
    for plan in plans:
        runs.append(await run_plan(dut, plan))
    with open(os.environ["COMBINE_RESULTS"], "w") as f:
        json.dump(runs, f)
