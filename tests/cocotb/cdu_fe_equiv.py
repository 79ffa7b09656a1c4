"""cocotb side of the CDU front-end tests: the whole CDU (front end -> intake -> core) as
generated Verilog on Verilator, driven with DSU step descriptors (and demand lists for
``topk``) like tests/test_cdu_frontend.py, checked against the policy model transaction by
transaction, with random idle/backpressure on every stream and retried HBM errors."""

import random

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ReadOnly, RisingEdge

import cdu_bench as B
from cdu_equiv import MemorySide, pack
from tricut.rtl.cdu.layouts import PATTERN, Widths, demand_layout, fe_config_layout, step_layout
from tricut.sim.harness.cdu import demand_beats

W = Widths()


class Source:
    def __init__(self, sig, layout, items, rng, p):
        self.sig, self.layout, self.items, self.rng, self.p = sig, layout, items, rng, p
        self.i, self.presenting = 0, False

    def drive(self):
        valid = getattr(self.sig[0], "value")
        if self.i < len(self.items) and (self.presenting or self.rng.random() < self.p):
            self.sig[1].value = pack(self.layout, self.items[self.i])
            self.sig[0].value = 1
            self.presenting = True
        else:
            self.sig[0].value = 0
        return valid

    def sample(self):
        if int(self.sig[0].value) and int(self.sig[2].value):
            self.i += 1
            self.presenting = False

    @property
    def done(self):
        return self.i == len(self.items)


async def run(dut, front, seed, p_valid=0.7, p_ready=0.7, max_latency=12, err=None,
              timeout=40000):
    rng = random.Random(seed)
    mem = MemorySide(dut, rng, p_valid, p_ready, max_latency, err)
    lists = front["lists"] if front["config"]["pattern"] == PATTERN["list"] else []
    srcs = [Source((dut.step__valid, dut.step__payload, dut.step__ready),
                   step_layout(W, B.FE_PARAMS["slot_bits"]), front["beats"], rng, p_valid),
            Source((dut.demand__valid, dut.demand__payload, dut.demand__ready),
                   demand_layout(W), demand_beats(lists), rng, p_valid)]
    dut.rst.value = 1
    for s in ("step__valid", "demand__valid", "hbm_resp__valid", "txn__ready", "ready__ready",
              "status__ready", "hbm_req__ready"):
        getattr(dut, s).value = 0
    dut.reg_addr.value = 0
    dut.config.value = pack(fe_config_layout(W), front["config"])
    for _ in range(2):
        await RisingEdge(dut.clk)
    dut.rst.value = 0
    now, idle_run = 0, 0
    while True:
        for s in srcs:
            s.drive()
        mem.drive(now)
        await ReadOnly()
        for s in srcs:
            s.sample()
        mem.sample(now)
        idle = int(dut.idle.value)
        await RisingEdge(dut.clk)
        now += 1
        idle_run = idle_run + 1 if (idle and all(s.done for s in srcs) and mem.drained) else 0
        if idle_run > 3:
            break
        assert now < timeout, f"CDU hung: {srcs[0].i}/{len(srcs[0].items)} step beats"
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
        ops, front = B.fe_vectors(B.random_steps(300 + n, steps=4), pattern, policy, seed=n)
        assert front["lookahead"] < B.FE_PARAMS["units"]
        capped |= set(B.cap_events(ops, **B.PARAMS))
        rng = random.Random(n)
        err = lambda tag, a: a < B.PARAMS["max_retries"] and rng.random() < 0.2  # noqa: E731
        got = await run(dut, front, n, p_valid=0.6, p_ready=0.6, err=err)
        B.compare(ops, got, **B.PARAMS)
    # B.PARAMS reserve=1: the front end's keep traffic hits the keep cap at all five places
    assert capped == B.CAP_PLACES, capped


@cocotb.test()
async def edge_cases_and_long_context_predictor(dut):
    await start(dut)
    for n, pattern in enumerate(B.PATTERNS):
        ops, front = B.fe_vectors(B.edge_steps(), pattern, "adaptive",
                                  pat=B.make_pattern(pattern, 3, window=8))
        B.compare(ops, await run(dut, front, n, p_valid=0.3, p_ready=0.3), **B.PARAMS)
    descs = B.random_steps(61, steps=6, max_batch=2, layers=2, p_empty=0, hint_change=0.05,
                           seq=(200, 2000))
    ops, front = B.fe_vectors(descs, "topk", "adaptive",
                              pat=B.make_pattern("topk", 1, k=10, overlap=0.9), distance=2)
    B.compare(ops, await run(dut, front, 7), **B.PARAMS)
