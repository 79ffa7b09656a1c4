"""What every plan-replaying cocotb bench shares: reset with all streams idle, driving source
streams from a ``Driver``'s decisions, and the one cocotb test body that replays the plans of
:func:`tricut.sim.harness.cocotb_run.run_plans` and writes the results back."""

import json
import os

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import RisingEdge


async def reset(dut, sources, sinks):
    """Two reset cycles with every source stream idle and every sink not ready."""
    dut.rst.value = 1
    for k in sources:
        getattr(dut, f"{k}__valid").value = 0
        getattr(dut, f"{k}__payload").value = 0
    for k in sinks:
        getattr(dut, f"{k}__ready").value = 0
    for _ in range(2):
        await RisingEdge(dut.clk)
    dut.rst.value = 0


def drive_sources(dut, driven):
    """``driven``: ``{stream: (valid, payload or None)}``; a None payload is left as it is."""
    for k, (valid, payload) in driven.items():
        getattr(dut, f"{k}__valid").value = valid
        if payload is not None:
            getattr(dut, f"{k}__payload").value = payload


def readies(dut, sources):
    return {k: int(getattr(dut, f"{k}__ready").value) for k in sources}


async def replay_plans(dut, run_plan):
    """Start the clock, run every plan of ``$TRICUT_PLANS`` with ``run_plan(dut, plan)`` (which
    resets the unit first) and write the list of results to ``$TRICUT_RESULTS``."""
    with open(os.environ["TRICUT_PLANS"]) as f:
        plans = json.load(f)
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    runs = [await run_plan(dut, plan) for plan in plans]
    with open(os.environ["TRICUT_RESULTS"], "w") as f:
        json.dump(runs, f)
