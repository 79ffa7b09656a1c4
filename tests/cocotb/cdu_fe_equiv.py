"""cocotb side of the CDU front-end tests: the whole CDU (front end -> intake -> core) as
generated Verilog on Verilator, driven with DSU step descriptors (and demand lists for
``topk``) like tests/test_cdu_frontend.py, checked against the policy model transaction by
transaction, with the stream drivers of ``tricut.sim.harness.streams`` (idle on the inputs and
HBM answers, backpressure on the outputs; one test runs every pair of schedules), retried HBM
errors, and the drained check at the end of every run."""

import random

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ReadOnly, RisingEdge

from tricut.sim.harness import cdu_stimulus as B
from cdu_equiv import MemorySide, Port, drive_until_drained, pack, reset
from tricut.rtl.cdu.layouts import PATTERN, Widths, demand_layout, fe_config_layout, step_layout
from tricut.sim.harness.cdu import bench_schedules, demand_beats
from tricut.sim.harness.streams import IDLE_BACKPRESSURE, Source

W = Widths()


async def run(dut, front, seed, p_valid=0.7, p_ready=0.7, max_latency=12, err=None,
              timeout=40000, idle=None, backpressure=None):
    idle, backpressure = bench_schedules(p_valid, p_ready, idle, backpressure)
    mem = MemorySide(dut, seed, idle, backpressure, max_latency, err)
    lists = front["lists"] if front["config"]["pattern"] == PATTERN["list"] else []
    srcs = [Port(dut, "step", Source("step", front["beats"], idle, seed),
                 step_layout(W, B.FE_PARAMS["slot_bits"])),
            Port(dut, "demand", Source("demand", demand_beats(lists), idle, seed),
                 demand_layout(W))]
    reset(dut, ("step__valid", "demand__valid"))
    dut.config.value = pack(fe_config_layout(W), front["config"])
    for _ in range(2):
        await RisingEdge(dut.clk)
    dut.rst.value = 0
    await drive_until_drained(dut, srcs, mem, timeout, "CDU front-end bench")
    await ReadOnly()
    out = mem.finish()
    out["bad_desc"] = int(dut.bad_step.value) | int(dut.bad_demand.value) | int(dut.overflow.value)
    await RisingEdge(dut.clk)
    return out


async def start(dut):
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())


@cocotb.test()
async def every_pattern_and_policy_equal_model(dut):
    await start(dut)
    capped = set()
    for n, (pattern, policy) in enumerate((p, q) for p in B.PATTERNS for q in B.POLICIES):
        ops, front = B.fe_vectors(B.random_steps(300 + n, steps=4, restores=0.5), pattern,
                                  policy, seed=n)
        assert front["lookahead"] < B.FE_PARAMS["units"]
        capped |= set(B.cap_events(ops, **B.PARAMS))
        rng = random.Random(n)
        err = lambda tag, a: a < B.PARAMS["max_retries"] and rng.random() < 0.2  # noqa: E731
        got = await run(dut, front, n, p_valid=0.6, p_ready=0.6, err=err)
        B.compare(ops, got, **B.PARAMS)
    # B.PARAMS reserve=1: the front end's keep traffic hits the keep cap at all five places
    assert capped == B.CAP_PLACES, capped


@cocotb.test()
async def edge_cases_restores_and_long_context_predictor(dut):
    await start(dut)
    for n, pattern in enumerate(B.PATTERNS):
        ops, front = B.fe_vectors(B.edge_steps(), pattern, "adaptive",
                                  pat=B.make_pattern(pattern, 3, window=8))
        B.compare(ops, await run(dut, front, n, p_valid=0.3, p_ready=0.3), **B.PARAMS)
    for n, policy in enumerate(B.POLICIES):
        # restore beats: S ops at each step descriptor's load (mid-unit with the walk)
        ops, front = B.fe_vectors(B.restore_steps(), "full", policy, seed=n)
        front = dict(front, beats=B.shuffled_beats(B.restore_steps(), n))
        got = await run(dut, front, 20 + n, p_valid=0.5, p_ready=0.5)
        B.compare(ops, got, **B.PARAMS)
        assert got["counters"]["restores"] == 10
    descs = B.random_steps(61, steps=6, max_batch=2, layers=2, p_empty=0, hint_change=0.05,
                           seq=(200, 2000))
    ops, front = B.fe_vectors(descs, "topk", "adaptive",
                              pat=B.make_pattern("topk", 1, k=10, overlap=0.9), distance=2)
    B.compare(ops, await run(dut, front, 7), **B.PARAMS)


@cocotb.test()
async def idle_backpressure_matrix(dut):
    """The named edge-case steps (topk: demand lists; adaptive) with retried HBM errors under
    every (idle, backpressure) pair of schedules, one build, the CDU reset between runs."""
    await start(dut)
    ops, front = B.fe_vectors(B.edge_steps(), "topk", "adaptive",
                              pat=B.make_pattern("topk", 3, window=8))
    for n, (i, b) in enumerate(IDLE_BACKPRESSURE):
        rng = random.Random(300 + n)
        err = lambda tag, a: a < B.PARAMS["max_retries"] and rng.random() < 0.2  # noqa: E731
        B.compare(ops, await run(dut, front, n, idle=i, backpressure=b, err=err), **B.PARAMS)
