"""cocotb bench for the step sequencer (``rtl/tile/sequencer.py``) on Verilator.

Replays the plans written by :func:`tricut.sim.harness.sequencer.simulate_verilator_matrix`
(a JSON list, one plan per (idle, backpressure) pair) through the same ``Driver`` as the
Amaranth bench, resetting the unit before each, and writes per plan the output beats, the
per-round cycles and ``bad_desc`` and the drained check's findings to ``$TRICUT_RESULTS``; the
pytest side compares them with the golden sequence.
"""

import cocotb
from cocotb.triggers import ReadOnly, RisingEdge

from tricut.sim.harness.benches.common import drive_sources, readies, replay_plans, reset
from tricut.sim.harness.sequencer import STREAMS, Driver

SINKS = ("step", "job")


async def run_plan(dut, plan):
    drv = Driver(plan)
    await reset(dut, STREAMS, SINKS)
    while not drv.finished:
        assert drv.cycle <= plan["max_cycles"], (
            f"step sequencer hung: {drv.cycle} cycles, {len(drv.rounds)} rounds done")
        d, ready = drv.drive()
        drive_sources(dut, d)
        for k in SINKS:
            getattr(dut, f"{k}__ready").value = ready[k]
        await ReadOnly()            # settled values of this cycle = what the edge samples
        rd = readies(dut, STREAMS)
        outs = {}
        for k in SINKS:
            v = int(getattr(dut, f"{k}__valid").value)
            outs[k] = (v, int(getattr(dut, f"{k}__payload").value) if v and ready[k] else 0)
        bd = int(dut.bad_desc.value)
        await RisingEdge(dut.clk)
        drv.sampled(rd, outs, bd)
    return drv.result()


@cocotb.test()
async def sequencer_plan_replay(dut):
    await replay_plans(dut, run_plan)
