"""cocotb side of the CDU tests: the generated Verilog on Verilator, driven with the same
vectors as tests/test_cdu_rtl.py through the same stream drivers (``tricut.sim.harness.streams``:
idle schedules on the inputs and the HBM answers, backpressure schedules on the outputs),
ending with the drained check and checked against the policy model the same way."""

import random

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ReadOnly, RisingEdge

from tricut.sim.harness import cdu_stimulus as B
from amaranth.lib import data
from tricut.rtl.cdu.core import COUNTERS
from tricut.rtl.cdu.layouts import (Widths, desc_layout, hbm_req_layout, ready_layout,
                                    status_layout, txn_layout)
from tricut.sim.harness.cdu import bench_schedules
from tricut.sim.harness.streams import (IDLE_BACKPRESSURE, Sink, Source, assert_drained,
                                        drained, stream_rng)

W = Widths()


def pack(layout, values):
    v = 0
    for name, f in layout:
        v |= (int(values[name]) & ((1 << f.width) - 1)) << f.offset
    return v


def unpack(layout, v):
    out = {}
    for name, f in layout:
        x = (v >> f.offset) & ((1 << f.width) - 1)
        out[name] = unpack(f.shape, x) if isinstance(f.shape, data.StructLayout) else x
    return out


class Port:
    """cocotb side of a stream driver: applies a Source (beats packed with ``layout``) or a
    Sink (beats unpacked with ``layout``, then ``read``) to the ``<name>__valid/ready/payload``
    signals of the design."""

    def __init__(self, dut, name, end, layout, read=None):
        self.end, self.read, self.layout = end, read, layout
        self.valid = getattr(dut, f"{name}__valid")
        self.ready = getattr(dut, f"{name}__ready")
        self.payload = getattr(dut, f"{name}__payload")
        if isinstance(end, Source):
            end.beats = [pack(layout, b) for b in end.beats]

    def drive(self):
        if isinstance(self.end, Sink):
            self.ready.value = self.end.drive()
            return
        valid, payload = self.end.drive()
        if valid:
            self.payload.value = payload
        self.valid.value = valid

    def sample(self):
        """After ReadOnly: True if a beat transferred on this cycle."""
        if isinstance(self.end, Sink):
            return self.end.sample(int(self.valid.value), lambda: self.read(
                unpack(self.layout, int(self.payload.value))))
        return self.end.sample(int(self.ready.value))


def _txn(p):
    v = p["victim"]
    return (p["kind"], p["req"], p["layer"], p["block"], p["result"], p["victim_valid"],
            v["req"], v["layer"], v["block"], p["hbm"])


class MemorySide:
    """The CDU's memory-side streams, shared by both benches: Sinks with the backpressure
    schedule on txn, ready, status and hbm_req (each beat taken recorded in ``out``) and the
    background HBM model answering hbm_req after random latencies (and errors) under the idle
    schedule -- the drivers of the Amaranth bench (``sim/harness/cdu.py``)."""

    def __init__(self, dut, seed, idle, backpressure, max_latency, err):
        self.dut = dut
        self.hbm = B.HbmModel(stream_rng(seed, "hbm"), max_latency, err, idle, seed)
        self.sinks = [
            Port(dut, "txn", Sink("txn", backpressure, seed), txn_layout(W), _txn),
            Port(dut, "hbm_req", Sink("hbm_req", backpressure, seed), hbm_req_layout(W),
                 lambda p: (p["id"], p["req"], p["layer"], p["block"], p["retry"])),
            Port(dut, "ready", Sink("ready", backpressure, seed), ready_layout(W),
                 lambda p: (p["req"], p["layer"], p["block"], p["hit"], p["err"])),
            Port(dut, "status", Sink("status", backpressure, seed), status_layout(W),
                 lambda p: (p["id"], p["req"], p["layer"], p["block"])),
        ]
        self.out = {k: port.end.beats for k, port in
                    zip(("txns", "hbm_reqs", "ready", "status"), self.sinks)}
        self.ends = [self.hbm] + [port.end for port in self.sinks]

    def drive(self, now):
        dut, hbm = self.dut, self.hbm
        for port in self.sinks:
            port.drive()
        r = hbm.drive(now)
        if r is not None:
            dut.hbm_resp__payload.value = r[0] | (r[1] << W.id)
        dut.hbm_resp__valid.value = int(r is not None)

    def sample(self, now):
        """After ReadOnly: record the beats that transferred this cycle."""
        self.hbm.sample(int(self.dut.hbm_resp__ready.value))
        for port in self.sinks:
            if port.sample() and port.end.name == "hbm_req":
                p = port.end.beats[-1]
                self.hbm.request(now, p[0], p[1:4], p[4])

    def finish(self):
        """After the last ReadOnly: idle, bad_resp, the counter registers, errors injected."""
        dut, out = self.dut, self.out
        out["idle"] = int(dut.idle.value)
        out["bad_resp"] = int(dut.bad_resp.value)
        flat = int(dut.counters.value)
        out["counters"] = {k: (flat >> (32 * n)) & 0xFFFFFFFF for n, k in enumerate(COUNTERS)}
        out["errors_injected"] = self.hbm.errors
        return out


def reset(dut, inputs):
    """Assert reset, every input stream idle and every output not ready."""
    dut.rst.value = 1
    for s in inputs + ("hbm_resp__valid", "txn__ready", "ready__ready", "status__ready",
                       "hbm_req__ready"):
        getattr(dut, s).value = 0
    dut.reg_addr.value = 0


async def drive_until_drained(dut, sources, mem, timeout, what):
    """The cycle loop shared by both benches: drive, settle, sample, until the CDU is idle
    and every stream drained for 4 cycles; then the drained check."""
    ends = [p.end for p in sources] + mem.ends
    now, idle_run = 0, 0
    while True:
        for p in sources:
            p.drive()
        mem.drive(now)
        await ReadOnly()
        for p in sources:
            p.sample()
        mem.sample(now)
        idle = int(dut.idle.value)
        await RisingEdge(dut.clk)
        now += 1
        idle_run = idle_run + 1 if (idle and not drained(ends)) else 0
        if idle_run > 3:
            break
        assert now < timeout, f"{what} hung after {now} cycles: " + "; ".join(
            drained(ends) or ["streams drained, not idle"])
    assert_drained(ends, where=what)
    return now


async def run(dut, descs, seed, p_valid=0.7, p_ready=0.7, max_latency=12, err=None,
              timeout=20000, idle=None, backpressure=None):
    idle, backpressure = bench_schedules(p_valid, p_ready, idle, backpressure)
    mem = MemorySide(dut, seed, idle, backpressure, max_latency, err)
    src = Port(dut, "desc", Source("desc", descs, idle, seed), desc_layout(W))
    reset(dut, ("desc__valid",))
    for _ in range(2):
        await RisingEdge(dut.clk)
    dut.rst.value = 0
    await drive_until_drained(dut, [src], mem, timeout, "CDU bench")
    await ReadOnly()
    out = mem.finish()
    out["bad_desc"] = int(dut.bad_desc.value)
    await RisingEdge(dut.clk)
    regs = []
    for a in range(len(COUNTERS)):
        dut.reg_addr.value = a
        await ReadOnly()
        regs.append(int(dut.reg_data.value))
        await RisingEdge(dut.clk)
    out["regs"] = regs
    return out


async def start(dut):
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())


@cocotb.test()
async def patterns_equal_model(dut):
    await start(dut)
    for pattern, policy, seed in [("full", "static", 1), ("window", "adaptive", 2),
                                  ("topk", "adaptive", 3), ("reread", "static", 4)]:
        ops = B.pattern_ops(pattern, policy, seed)
        got = await run(dut, B.ops_to_descs(ops), seed)
        B.compare(ops, got, **B.PARAMS)
        assert got["regs"] == [got["counters"][k] for k in COUNTERS]


@cocotb.test()
async def random_and_edge_equal_model_with_errors(dut):
    await start(dut)
    for seed in range(2):
        ops = B.random_ops(seed, n=160)
        rng = random.Random(100 + seed)
        err = lambda tag, a: a < B.PARAMS["max_retries"] and rng.random() < 0.25  # noqa: E731
        got = await run(dut, B.ops_to_descs(ops), seed, p_valid=0.5, p_ready=0.5, err=err)
        B.compare(ops, got, **B.PARAMS)
        assert got["errors_injected"] > 0
        assert got["counters"]["restores"] == sum(o.kind == "S" for o in ops) > 0
    ops = B.edge_ops()
    B.compare(ops, await run(dut, B.ops_to_descs(ops), 9, p_valid=0.3, p_ready=0.3,
                             max_latency=40), **B.PARAMS)


@cocotb.test()
async def persistent_errors_reported(dut):
    await start(dut)
    bad = {(1, 0, 2), (2, 1, 5)}
    ops = [B.Op("R", 1, 0, 2, 1, False), B.Op("R", 0, 0, 0, 1, False),
           B.Op("P", 2, 1, 5, 1, False), B.Op("R", 2, 1, 5, 1, False),
           B.Op("R", 1, 0, 2, 1, False), B.Op("R", 0, 0, 1, 0, False)]
    got = await run(dut, B.ops_to_descs(ops), 3, max_latency=30, err=lambda tag, a: tag in bad)
    fails = got["counters"]["hbm_failures"]
    assert fails in (2, 3) and len(got["status"]) == fails
    assert {s[1:] for s in got["status"]} == bad
    assert [r[4] for r in got["ready"]] == [1, 0, 1, 1, 0]
    assert got["idle"]


@cocotb.test()
async def keep_cap_edge_cases(dut):
    """A set holding keep_cap keep blocks: keep allocations (R, P, W) and keep promotions
    (R, W hits) demoted to normal, equal to the model (B.PARAMS: reserve=1 of 2 ways)."""
    await start(dut)
    ops = B.keep_cap_ops()
    assert set(B.cap_events(ops, **B.PARAMS)) == B.CAP_PLACES
    for seed, p in ((0, 1.0), (4, 0.4)):
        got = await run(dut, B.ops_to_descs(ops), seed, p_valid=p, p_ready=p,
                        max_latency=1 if p == 1.0 else 30)
        B.compare(ops, got, **B.PARAMS)


@cocotb.test()
async def idle_backpressure_matrix(dut):
    """Edge cases and a random stream with retried HBM errors under every (idle,
    backpressure) pair of schedules, one build, the CDU reset between runs."""
    await start(dut)
    ops = B.edge_ops() + B.random_ops(21, n=60)
    for n, (i, b) in enumerate(IDLE_BACKPRESSURE):
        rng = random.Random(200 + n)
        err = lambda tag, a: a < B.PARAMS["max_retries"] and rng.random() < 0.2  # noqa: E731
        got = await run(dut, B.ops_to_descs(ops), n, idle=i, backpressure=b, err=err,
                        max_latency=20)
        B.compare(ops, got, **B.PARAMS)
        assert got["regs"] == [got["counters"][k] for k in COUNTERS]
