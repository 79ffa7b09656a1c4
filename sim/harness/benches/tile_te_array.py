"""cocotb bench for the TE array (``rtl/tile/te_array.py``) on Verilator.

Replays the plans written by :func:`tricut.sim.harness.te_array.simulate_verilator_matrix`
(a JSON list, one plan per (idle, backpressure) pair) through the same ``Driver`` as the
Amaranth bench, resetting the array before each, and writes per plan the jobs that came out
and the drained check's findings to ``$TE_ARRAY_RESULTS``.
"""

import json
import os
from dataclasses import asdict
from pathlib import Path

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ReadOnly, RisingEdge

from tricut.sim.harness.te_array import STREAMS, Driver

async def _reset(dut):
    dut.rst.value = 1
    for k in STREAMS:
        getattr(dut, f"{k}__valid").value = 0
        getattr(dut, f"{k}__payload").value = 0
    dut.out__ready.value = 0
    dut.status__ready.value = 0
    for _ in range(2):
        await RisingEdge(dut.clk)
    dut.rst.value = 0


async def _run_plan(dut, plan):
    drv = Driver(plan)
    await _reset(dut)
    while not drv.finished:
        assert drv.cycle <= plan["max_cycles"], (
            f"TE array hung: {drv.cycle} cycles, {len(drv.jobs)}/{drv.n_jobs} jobs out")
        d, oready, sready = drv.drive()
        for k in STREAMS:
            valid, payload = d[k]
            getattr(dut, f"{k}__valid").value = valid
            if payload is not None:
                getattr(dut, f"{k}__payload").value = payload
        dut.out__ready.value = oready
        dut.status__ready.value = sready
        await ReadOnly()        # settled values of this cycle = what the edge samples
        readies = {k: int(getattr(dut, f"{k}__ready").value) for k in STREAMS}
        ov, sv = int(dut.out__valid.value), int(dut.status__valid.value)
        op = int(dut.out__payload.value) if ov and oready else 0
        sp = int(dut.status__payload.value) if sv and sready else 0
        await RisingEdge(dut.clk)
        drv.sampled(readies, ov, op, sv, sp)
    return {"jobs": [asdict(j) for j in drv.jobs], "problems": drv.problems()}


@cocotb.test()
async def te_array_plan_replay(dut):
    plans = json.loads(Path(os.environ["TE_ARRAY_PLAN"]).read_text())
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    runs = [await _run_plan(dut, plan) for plan in plans]
    Path(os.environ["TE_ARRAY_RESULTS"]).write_text(json.dumps(runs))
