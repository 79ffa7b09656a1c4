"""cocotb bench for the decode tile's attention path on Verilator
(:class:`tricut.sim.harness.tile.attention_verilator.VerilatorTop`), Python acting only at
layer boundaries.

The clock runs in C (cocotb's GPI clock). Reads the plan of
:func:`tricut.sim.harness.tile.attention_verilator.plan_json` from ``$TRICUT_PLANS``; per round
sends the ``round`` and ``descriptor`` beats, then per layer writes the q beats (one per
cycle: ``q_write`` is always ready), pulses ``go``, waits for ``RisingEdge(done)`` (nothing
runs in Python meanwhile), reads the output buffer (one word per cycle) and the HBM
counters. Inputs change on the falling edge, outputs are read there. Writes per layer the
cycles (``go`` cycle to the first cycle with ``done``, inclusive), ``err``, ``te_status``,
the HBM bursts and beats, the words read and the wall time of each phase to
``$TRICUT_RESULTS``. The time-out (``max_layer_cycles``) fails the test.
"""

import json
import os
import time

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge, First, ReadOnly, RisingEdge, Timer
from cocotb.utils import get_sim_time


async def _send(dut, name, word):
    """One beat on stream ``name``, offered from a falling edge until a rising edge takes
    it; returns at the falling edge after the transfer, ``valid`` low."""
    valid, payload, ready = (getattr(dut, f"{name}__{x}") for x in ("valid", "payload", "ready"))
    valid.value = 1
    payload.value = word
    while True:
        await ReadOnly()
        taken = int(ready.value)
        await FallingEdge(dut.clk)
        if taken:
            break
    valid.value = 0


@cocotb.test()
async def tile_attention_layers(dut):
    t_start = time.perf_counter()
    with open(os.environ["TRICUT_PLANS"]) as f:
        plan = json.load(f)
    period = plan["clock_ns"]
    dut.rst.value = 0
    for k in ("round", "descriptor", "q_write"):
        getattr(dut, f"{k}__valid").value = 0
    dut.go.value = 0
    dut.out_addr.value = 0
    dut.tensor_scale.value = plan["tensor_scale"]
    cocotb.start_soon(Clock(dut.clk, period, unit="ns").start())
    await FallingEdge(dut.clk)
    qbeats = plan["qbeats"]
    layers = []
    for ri, rnd in enumerate(plan["rounds"]):
        t0 = time.perf_counter()
        await _send(dut, "round", rnd["round"])
        for w in rnd["descriptors"]:
            await _send(dut, "descriptor", w)
        t_desc = time.perf_counter() - t0
        for lay in rnd["layers"]:
            t0 = time.perf_counter()
            qv, qp = dut.q_write__valid, dut.q_write__payload
            qv.value = 1
            for w in lay["q"]:
                qp.value = w
                await FallingEdge(dut.clk)
            qv.value = 0
            bursts0, beats0 = int(dut.hbm_bursts.value), int(dut.hbm_beats.value)
            dut.go.value = 1
            await RisingEdge(dut.clk)
            t_go = get_sim_time("ns")
            q_s = time.perf_counter() - t0 + t_desc
            t_desc = 0.0
            t0 = time.perf_counter()
            await FallingEdge(dut.clk)
            dut.go.value = 0
            if not int(dut.done.value):
                await First(RisingEdge(dut.done),
                            Timer(plan["max_layer_cycles"] * period, unit="ns"))
            assert int(dut.done.value), (f"attention tile hung: round {ri} layer "
                                         f"{lay['layer']} not done after "
                                         f"{plan['max_layer_cycles']} cycles")
            cycles = round((get_sim_time("ns") - t_go) / period) + 1
            run_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            await FallingEdge(dut.clk)
            res = {"round": ri, "layer": lay["layer"], "cycles": cycles,
                   "err": int(dut.err.value), "te_status": int(dut.te_status.value),
                   "bursts": int(dut.hbm_bursts.value) - bursts0,
                   "beats": int(dut.hbm_beats.value) - beats0, "reads": lay["reads"], "out": []}
            for _, _, a0 in lay["reads"]:
                words = []
                dut.out_addr.value = a0
                for i in range(qbeats):
                    await FallingEdge(dut.clk)          # the rising edge between read a0 + i
                    words.append(int(dut.out_data.value))
                    if i + 1 < qbeats:
                        dut.out_addr.value = a0 + i + 1
                res["out"].append(words)
            res.update(q_s=q_s, run_s=run_s, out_s=time.perf_counter() - t0)
            layers.append(res)
    with open(os.environ["TRICUT_RESULTS"], "w") as f:
        json.dump({"layers": layers, "bench_s": time.perf_counter() - t_start}, f)
