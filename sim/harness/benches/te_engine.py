"""cocotb bench for the TE decode engine on Verilator.

Replays the stimulus plans written by ``tricut.sim.harness.te`` (a JSON list: one plan, or one
per (idle, backpressure) pair of a matrix) through the same ``Driver`` as the Amaranth bench
(same beats, same idle/backpressure sequences), resetting the engine before each, and writes
per plan the observed output beats, status words and cycle counts and the drained check's
findings to ``$TRICUT_RESULTS``; the pytest side compares them bit for bit with the golden model.

Also per plan: ``t0_fs`` (the simulation time at which the plan's cycle 0 starts: the reset's
last rising edge) and ``period_fs`` (the clock period), which place a ``--wave-window`` in the
trace; ``stopped_at``/``budget`` when the plan's cycle ``budget`` stopped it. With
``$TRICUT_PROGRESS`` set, the cycle count is written to that file about twice a second.
"""

import os
import time

import cocotb
from cocotb.simtime import get_sim_time
from cocotb.triggers import ReadOnly, RisingEdge

from tricut.sim.harness.benches.common import drive_sources, readies, replay_plans, reset
from tricut.sim.harness.te import STREAMS, Driver, activity


def _progress_writer():
    path = os.environ.get("TRICUT_PROGRESS")
    if not path:
        return None
    last = [0.0]

    def write(cycle):
        now = time.monotonic()
        if now - last[0] >= 0.5:
            last[0] = now
            with open(path, "w") as f:
                f.write(str(cycle))
    return write


async def run_plan(dut, plan):
    drv = Driver(plan)
    await reset(dut, STREAMS, ("out",))
    t0 = get_sim_time("fs")
    period = None
    budget = plan.get("budget")
    progress = _progress_writer()
    stopped = None
    status_pending = False
    while not drv.finished:
        assert drv.cycle <= plan["max_cycles"], (
            f"TE engine hung: {drv.cycle} cycles, {len(drv.steps)}/{drv.n_steps} steps done")
        if budget is not None and drv.cycle >= budget and len(drv.steps) < drv.n_steps:
            stopped = drv.cycle
            break
        if progress is not None and not drv.cycle & 255:
            progress(drv.cycle)
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
        mb = activity(lambda name: getattr(dut, name).value if hasattr(dut, name) else None)
        await RisingEdge(dut.clk)
        if period is None:
            period = get_sim_time("fs") - t0
        if drv.sampled(rd, ov, payload, mb):
            status_pending = True
    run = {"steps": drv.steps, "problems": drv.problems(), "t0_fs": t0, "period_fs": period}
    if stopped is not None:
        run["stopped_at"], run["budget"] = stopped, budget
    return run


@cocotb.test()
async def te_plan_replay(dut):
    await replay_plans(dut, run_plan)
