"""cocotb bench for the step sequencer (``rtl/tile/sequencer.py``) on Verilator.

Replays the plans written by :func:`tricut.sim.harness.sequencer.simulate_verilator_matrix`
(a JSON list, one plan per (idle, backpressure) pair) through the same ``Driver`` as the
Amaranth bench, resetting the unit before each, and writes per plan the output beats, the
per-round cycles and ``bad_desc`` and the drained check's findings to ``$SEQ_RESULTS``; the
pytest side compares them with the golden sequence.
"""

import json
import os

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ReadOnly, RisingEdge

from tricut.sim.harness.sequencer import STREAMS, Driver

SINKS = ("step", "job")


async def reset(dut):
    dut.rst.value = 1
    for k in STREAMS:
        getattr(dut, f"{k}__valid").value = 0
        getattr(dut, f"{k}__payload").value = 0
    for k in SINKS:
        getattr(dut, f"{k}__ready").value = 0
    for _ in range(2):
        await RisingEdge(dut.clk)
    dut.rst.value = 0


async def run_plan(dut, plan):
    drv = Driver(plan)
    await reset(dut)
    while not drv.finished:
        assert drv.cycle <= plan["max_cycles"], (
            f"step sequencer hung: {drv.cycle} cycles, {len(drv.rounds)} rounds done")
        d, ready = drv.drive()
        for k in STREAMS:
            valid, payload = d[k]
            getattr(dut, f"{k}__valid").value = valid
            if payload is not None:
                getattr(dut, f"{k}__payload").value = payload
        for k in SINKS:
            getattr(dut, f"{k}__ready").value = ready[k]
        await ReadOnly()            # settled values of this cycle = what the edge samples
        readies = {k: int(getattr(dut, f"{k}__ready").value) for k in STREAMS}
        outs = {}
        for k in SINKS:
            v = int(getattr(dut, f"{k}__valid").value)
            outs[k] = (v, int(getattr(dut, f"{k}__payload").value) if v and ready[k] else 0)
        bd = int(dut.bad_desc.value)
        await RisingEdge(dut.clk)
        drv.sampled(readies, outs, bd)
    return drv.result()


@cocotb.test()
async def sequencer_plan_replay(dut):
    plans = json.loads(open(os.environ["SEQ_PLAN"]).read())
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    runs = []
    for plan in plans:
        runs.append(await run_plan(dut, plan))
    with open(os.environ["SEQ_RESULTS"], "w") as f:
        json.dump(runs, f)
