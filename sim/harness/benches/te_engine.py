"""cocotb bench for the TE decode engine on Verilator.

Replays a stimulus plan written by ``tricut.sim.harness.te.plan_json`` through the same
``Driver`` as the Amaranth bench (same beats, same random idle/backpressure sequence) and
writes the observed output beats, status words and cycle counts to ``$TE_RESULTS``; the
pytest side (``tests/test_te_cocotb.py``) compares them bit for bit with the golden model.
"""

import json
import os

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ReadOnly, RisingEdge

from tricut.sim.harness.te import Driver

STREAMS = ("desc", "q", "kv")


@cocotb.test()
async def te_plan_replay(dut):
    plan = json.loads(open(os.environ["TE_PLAN"]).read())
    drv = Driver(plan)
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    dut.rst.value = 1
    for k in STREAMS:
        getattr(dut, f"{k}__valid").value = 0
        getattr(dut, f"{k}__payload").value = 0
    dut.out__ready.value = 0
    for _ in range(2):
        await RisingEdge(dut.clk)
    dut.rst.value = 0
    n_steps = len(plan["n_out"])
    status_pending = False
    while True:
        assert drv.cycle <= plan["max_cycles"], (
            f"TE engine hung: {drv.cycle} cycles, {len(drv.steps)}/{n_steps} steps done")
        d, ready = drv.drive()
        for k in STREAMS:
            getattr(dut, f"{k}__valid").value = d[k][0]
            getattr(dut, f"{k}__payload").value = d[k][1]
        dut.out__ready.value = ready
        await ReadOnly()            # settled values of this cycle = what the edge samples
        if status_pending:          # registered at the previous edge
            drv.finish_step(int(dut.status.value))
            status_pending = False
            if len(drv.steps) == n_steps:
                break
        xfer = {k: bool(d[k][0]) and bool(int(getattr(dut, f"{k}__ready").value))
                for k in STREAMS}
        out_x = bool(int(dut.out__valid.value)) and bool(ready)
        payload = int(dut.out__payload.value) if out_x else 0
        mb = int(dut.mac_busy.value)
        await RisingEdge(dut.clk)
        if drv.sampled(xfer, out_x, payload, mb):
            status_pending = True
    with open(os.environ["TE_RESULTS"], "w") as f:
        json.dump(drv.steps, f)
