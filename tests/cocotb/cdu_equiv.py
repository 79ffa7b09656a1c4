"""cocotb side of the CDU tests: the generated Verilog on Verilator, driven with the same
vectors as tests/test_cdu_rtl.py and checked against the policy model the same way."""

import random

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ReadOnly, RisingEdge

import cdu_bench as B
from amaranth.lib import data
from tricut.rtl.cdu.core import COUNTERS
from tricut.rtl.cdu.layouts import (Widths, desc_layout, hbm_req_layout, ready_layout,
                                    status_layout, txn_layout)

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


class MemorySide:
    """The CDU's memory-side streams, shared by both benches: random backpressure on txn,
    ready, status and hbm_req (each beat taken is recorded in ``out``) and the background
    HBM model answering hbm_req after random latencies (and errors)."""

    def __init__(self, dut, rng, p_valid, p_ready, max_latency, err):
        self.dut, self.rng, self.p_valid, self.p_ready = dut, rng, p_valid, p_ready
        self.hbm = B.HbmModel(rng, max_latency, err)
        self.out = {"txns": [], "hbm_reqs": [], "ready": [], "status": []}
        self.layouts = txn_layout(W), hbm_req_layout(W), ready_layout(W), status_layout(W)

    def drive(self, now):
        dut, hbm = self.dut, self.hbm
        self.readies = {s: int(self.rng.random() < self.p_ready)
                        for s in ("txn", "ready", "status", "hbm_req")}
        for s, v in self.readies.items():
            getattr(dut, f"{s}__ready").value = v
        r = hbm.next_response(now) if self.rng.random() < self.p_valid or hbm.presenting else None
        if r is not None:
            dut.hbm_resp__payload.value = r[0] | (r[1] << W.id)
        dut.hbm_resp__valid.value = int(r is not None)
        self.resp = r

    def sample(self, now):
        """After ReadOnly: record the beats that transferred this cycle."""
        dut, out, hbm, readies = self.dut, self.out, self.hbm, self.readies
        tl, hl, rl, sl = self.layouts
        if self.resp is not None and int(dut.hbm_resp__ready.value):
            hbm.taken()
        if int(dut.txn__valid.value) and readies["txn"]:
            p = unpack(tl, int(dut.txn__payload.value))
            v = p["victim"]
            out["txns"].append((p["kind"], p["req"], p["layer"], p["block"], p["result"],
                                p["victim_valid"], v["req"], v["layer"], v["block"], p["hbm"]))
        if int(dut.hbm_req__valid.value) and readies["hbm_req"]:
            p = unpack(hl, int(dut.hbm_req__payload.value))
            out["hbm_reqs"].append((p["id"], p["req"], p["layer"], p["block"], p["retry"]))
            hbm.request(now, p["id"], (p["req"], p["layer"], p["block"]), p["retry"])
        if int(dut.ready__valid.value) and readies["ready"]:
            p = unpack(rl, int(dut.ready__payload.value))
            out["ready"].append((p["req"], p["layer"], p["block"], p["hit"], p["err"]))
        if int(dut.status__valid.value) and readies["status"]:
            p = unpack(sl, int(dut.status__payload.value))
            out["status"].append((p["id"], p["req"], p["layer"], p["block"]))

    @property
    def drained(self):
        return not self.hbm.pending and self.hbm.presenting is None

    def finish(self):
        """After the last ReadOnly: idle, bad_resp, the counter registers, errors injected."""
        dut, out = self.dut, self.out
        out["idle"] = int(dut.idle.value)
        out["bad_resp"] = int(dut.bad_resp.value)
        flat = int(dut.counters.value)
        out["counters"] = {k: (flat >> (32 * n)) & 0xFFFFFFFF for n, k in enumerate(COUNTERS)}
        out["errors_injected"] = self.hbm.errors
        return out


async def run(dut, descs, seed, p_valid=0.7, p_ready=0.7, max_latency=12, err=None,
              timeout=20000):
    rng = random.Random(seed)
    mem = MemorySide(dut, rng, p_valid, p_ready, max_latency, err)
    dl = desc_layout(W)
    dut.rst.value = 1
    for s in ("desc__valid", "hbm_resp__valid", "txn__ready", "ready__ready", "status__ready",
              "hbm_req__ready"):
        getattr(dut, s).value = 0
    dut.reg_addr.value = 0
    for _ in range(2):
        await RisingEdge(dut.clk)
    dut.rst.value = 0
    i, now, presenting, idle_run = 0, 0, False, 0
    while True:
        if i < len(descs) and (presenting or rng.random() < p_valid):
            dut.desc__payload.value = pack(dl, descs[i])
            dut.desc__valid.value = 1
            presenting = True
        else:
            dut.desc__valid.value = 0
        mem.drive(now)
        await ReadOnly()
        if int(dut.desc__valid.value) and int(dut.desc__ready.value):
            i += 1
            presenting = False
        mem.sample(now)
        idle = int(dut.idle.value)
        await RisingEdge(dut.clk)
        now += 1
        idle_run = idle_run + 1 if (idle and i == len(descs) and mem.drained) else 0
        if idle_run > 3:
            break
        assert now < timeout, f"CDU hung: {i}/{len(descs)} descriptors"
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
