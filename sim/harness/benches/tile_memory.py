"""cocotb bench for the behavioural memory models (``rtl/tile/behavioural/``) on Verilator.

Replays the plans written by :func:`tricut.sim.harness.memory.simulate_verilator_matrix` (a
JSON list, one plan per (idle, backpressure) pair) through the same ``Driver`` as the
Amaranth bench — which checks every cycle against the Python reference — resetting the unit
before each, and writes per plan the accepted requests, the response beats with their cycles,
the reference mismatches and the drained check's findings to ``$TRICUT_RESULTS``.
"""

import cocotb
from cocotb.triggers import ReadOnly, RisingEdge

from tricut.sim.harness.benches.common import replay_plans, reset
from tricut.sim.harness.memory import Driver


async def run_plan(dut, plan):
    drv = Driver(plan)
    req, resp = drv.req_name, drv.resp_name
    await reset(dut, (req, "write"), (resp,))
    while not drv.finished:
        assert drv.cycle <= plan["max_cycles"], (
            f"memory model hung: {drv.cycle} cycles, {len(drv.beats)}/{plan['n_beats']} beats")
        (rv, rp), (wv, wp), ready = drv.drive()
        getattr(dut, f"{req}__valid").value = rv
        if rp is not None:
            getattr(dut, f"{req}__payload").value = rp
        dut.write__valid.value = wv
        if wp is not None:
            dut.write__payload.value = wp
        getattr(dut, f"{resp}__ready").value = ready
        await ReadOnly()            # settled values of this cycle = what the edge samples
        rr = int(getattr(dut, f"{req}__ready").value)
        ov = int(getattr(dut, f"{resp}__valid").value)
        op = int(getattr(dut, f"{resp}__payload").value) if ov else 0
        await RisingEdge(dut.clk)
        drv.sampled(rr, ov, op)
    return {"accepts": drv.accepts, "beats": drv.beats, "cycles": drv.cycle,
            "mismatches": drv.mismatches, "problems": drv.problems()}


@cocotb.test()
async def memory_plan_replay(dut):
    await replay_plans(dut, run_plan)
