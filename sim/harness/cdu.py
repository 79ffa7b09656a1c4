"""The CDU RTL against its policy model.

:func:`replay_rtl` (for ``tricut cdu replay --rtl``) drives the step descriptors (and
``topk`` demand lists) into the whole RTL of a small instance -- front end, intake, core --
and compares it with the model transaction by transaction (:func:`run_rtl`,
:func:`compare_rtl`); :func:`run_frontend_rtl` / :func:`compare_ops` check the RTL front end
alone op by op. The policy-model replay at real sizes is :mod:`tricut.sim.fast.cdu_replay`.

Every argument error is a :class:`ValueError` with a one-line message.
"""

from __future__ import annotations

import math
from pathlib import Path

from tricut.models.cdu import (BLOCK_TOKENS, PATTERNS, POLICIES, CDUCore, FrontEnd, Pattern,
                               SlotDesc, StepDesc)
from tricut.models.config import kv_dtype_bytes, load_model
from tricut.rtl.cdu.core import COUNTERS
from tricut.rtl.cdu.layouts import HINT as _HINT_CODE
from tricut.rtl.cdu.layouts import KIND as _KIND
from tricut.rtl.cdu.layouts import RESULT, RESULT_NAME, STEP_KIND
from tricut.sim.fast.cdu_replay import _pos_int
from tricut.sim.harness.streams import MemoryModel, Schedule, Sink, Source, drained, stream_rng

__all__ = ["replay_rtl", "run_rtl", "compare_rtl", "ops_to_descs", "HbmModel",
           "run_frontend_rtl", "compare_ops", "frontend_reference",
           "frontend_reference_lookahead", "step_beats", "demand_beats", "fe_config",
           "RtlMismatch", "frontend_cycles"]


# --------------------------------------------------------------------------- RTL replay


class RtlMismatch(AssertionError):
    """The RTL disagreed with the policy model; the message is one line."""


def ops_to_descs(ops, max_count=63):
    """Merge runs of ops (same kind/req/layer/cls/fresh, consecutive blocks) into descs."""
    descs = []
    for o in ops:
        if descs:
            d = descs[-1]
            if (d["kind"], d["req"], d["layer"], d["cls"], d["fresh"]) == \
                    (_KIND[o.kind], o.req, o.layer, o.cls, int(o.fresh)) and \
                    o.block == d["block"] + d["count"] and d["count"] < max_count:
                d["count"] += 1
                continue
        descs.append(dict(kind=_KIND[o.kind], req=o.req, layer=o.layer, block=o.block, count=1,
                          cls=o.cls, fresh=int(o.fresh)))
    return descs


class HbmModel(MemoryModel):
    """Background HBM: :class:`~tricut.sim.harness.streams.MemoryModel` on the
    ``hbm_req``/``hbm_resp`` streams: takes requests, answers each after a random latency
    (1..``max_latency``) in any order; ``err(tag, attempt)`` decides which answers carry the
    error bit; ``idle`` schedules when a due answer may be offered."""

    def __init__(self, rng, max_latency=12, err=None, idle=None, seed=0):
        super().__init__(rng, max_latency, err, idle, name="hbm_resp", seed=seed)


def bench_schedules(p_valid, p_ready, idle, backpressure):
    """(idle, backpressure) schedules of a CDU bench: given ones, else from the legacy
    probabilities of an active cycle (1: ``none``, else ``random`` with that p)."""
    return (Schedule.of(p_valid if idle is None else idle),
            Schedule.of(p_ready if backpressure is None else backpressure))


class _Adapter:
    """Amaranth side of the stream drivers: applies a Source / Sink to a ``stream`` port
    (``layout`` converts a Source's beat dicts; ``read`` turns a Sink's payload into a tuple)."""

    def __init__(self, end, port, layout=None, read=None):
        self.end, self.port, self.read = end, port, read
        if layout is not None:                 # beats -> constants once, not every cycle
            end.beats = [layout.const(b) for b in end.beats]

    def drive(self, ctx):
        if isinstance(self.end, Sink):
            ctx.set(self.port.ready, self.end.drive())
            return
        valid, payload = self.end.drive()
        if valid:
            ctx.set(self.port.payload, payload)
        ctx.set(self.port.valid, valid)

    def sample(self, ctx):
        if isinstance(self.end, Sink):
            return self.end.sample(ctx.get(self.port.valid),
                                   lambda: self.read(ctx.get(self.port.payload)))
        return self.end.sample(ctx.get(self.port.ready))


def run_rtl(descs, params=None, seed=0, p_valid=0.7, p_ready=0.7, max_latency=12, err=None,
            timeout=20000, bad_resp_at=None, front=None, idle=None, backpressure=None):
    """Drive a CDU in Amaranth's simulator with the stream drivers of
    :mod:`tricut.sim.harness.streams`: an idle schedule on every input stream (and on the
    HBM answers of :class:`HbmModel`), a backpressure schedule on every output stream;
    returns what came out of every stream (``txns``, ``hbm_reqs``, ``ready``, ``status``),
    the transfer cycles (``at``), the counters and register reads, and the end state. The run
    ends when the CDU is idle and every stream drained, then checks that (drained check,
    :class:`RtlMismatch`).

    ``idle``/``backpressure``: schedules (:class:`~tricut.sim.harness.streams.Schedule`, a
    mode name or its JSON); by default ``p_valid``/``p_ready``, the probability of an active
    cycle (1: none, else random). Without ``front``: ``descs`` (dicts of the desc layout)
    into :class:`CDUBackEnd` (intake -> core). With ``front = dict(beats=, lists=, config=,
    params=)``: step beats (:func:`step_beats`), demand lists and the front-end config into
    the whole :class:`CDU` (front end -> intake -> core); ``descs`` is ignored. ``params``
    (including ``reserve``) go to the RTL constructor; give :func:`compare_rtl` the same
    dict."""
    from amaranth.sim import Simulator

    from tricut.rtl.cdu.core import COUNTERS
    from tricut.rtl.cdu.layouts import (PATTERN, demand_layout, desc_layout, fe_config_layout,
                                        step_layout)
    from tricut.rtl.cdu.top import CDU, CDUBackEnd

    idle, backpressure = bench_schedules(p_valid, p_ready, idle, backpressure)
    if front is None:
        dut = CDUBackEnd(**(params or {}))
        w = dut.widths
        sources = [_Adapter(Source("desc", descs, idle, seed), dut.desc, desc_layout(w))]
    else:
        dut = CDU(**(params or {}), **front.get("params", {}))
        w = dut.widths
        lists = front["lists"] if front["config"]["pattern"] == PATTERN["list"] else []
        sources = [_Adapter(Source("step", front["beats"], idle, seed), dut.step,
                            step_layout(w, dut.front.slot_bits)),
                   _Adapter(Source("demand", demand_beats(lists), idle, seed), dut.demand,
                            demand_layout(w))]
    hbm = HbmModel(stream_rng(seed, "hbm"), max_latency, err, idle, seed)
    sinks = {
        "txn": _Adapter(Sink("txn", backpressure, seed), dut.txn, read=lambda p: (
            p.kind, p.req, p.layer, p.block, p.result, p.victim_valid, p.victim.req,
            p.victim.layer, p.victim.block, p.hbm)),
        "hbm_req": _Adapter(Sink("hbm_req", backpressure, seed), dut.hbm_req,
                            read=lambda p: (p.id, p.req, p.layer, p.block, p.retry)),
        "ready": _Adapter(Sink("ready", backpressure, seed), dut.ready,
                          read=lambda p: (p.req, p.layer, p.block, p.hit, p.err)),
        "status": _Adapter(Sink("status", backpressure, seed), dut.status,
                           read=lambda p: (p.id, p.req, p.layer, p.block)),
    }
    ends = [a.end for a in sources] + [hbm] + [a.end for a in sinks.values()]
    out = {"txns": sinks["txn"].end.beats, "hbm_reqs": sinks["hbm_req"].end.beats,
           "ready": sinks["ready"].end.beats, "status": sinks["status"].end.beats,
           "cycles": 0, "at": {}}

    async def bench(ctx):
        if front is not None:
            ctx.set(dut.config, fe_config_layout(w).const(front["config"]))
        now = 0
        idle_run = 0
        while True:
            # inputs for this cycle
            for a in (*sources, *sinks.values()):
                a.drive(ctx)
            r = hbm.drive(now)
            injected = bad_resp_at is not None and now == bad_resp_at
            if injected:
                r = (3, 0)                     # an id never requested (the model's answer waits)
            if r is not None:
                ctx.set(dut.hbm_resp.payload.id, r[0])
                ctx.set(dut.hbm_resp.payload.err, r[1])
            ctx.set(dut.hbm_resp.valid, int(r is not None))
            # transfers on this cycle
            if sources[0].sample(ctx):
                out["at"].setdefault("desc", []).append(now)
            for a in sources[1:]:
                a.sample(ctx)
            resp_ready = ctx.get(dut.hbm_resp.ready)
            if r is not None and resp_ready:
                out["at"].setdefault("resp", []).append(now)
            if not injected:
                hbm.sample(resp_ready)
            for name, a in sinks.items():
                if a.sample(ctx) and name != "status":
                    out["at"].setdefault(name, []).append(now)
                    if name == "hbm_req":
                        p = a.end.beats[-1]
                        hbm.request(now, p[0], p[1:4], p[4])
            quiet = ctx.get(dut.idle)
            await ctx.tick()
            now += 1
            idle_run = idle_run + 1 if (quiet and not drained(ends)) else 0
            if idle_run > 3:
                break
            _require(now < timeout, f"CDU hung after {now} cycles, {len(out['txns'])} txns: "
                                    + "; ".join(drained(ends) or ["streams drained, not idle"]))
        left = drained(ends)
        _require(not left, "CDU bench not drained: " + "; ".join(left))
        out["cycles"] = now
        out["idle"] = ctx.get(dut.idle)
        out["bad_resp"] = ctx.get(dut.bad_resp)
        if front is None:
            out["bad_desc"] = ctx.get(dut.bad_desc)
        else:
            out["bad_desc"] = ctx.get(dut.bad_step) | ctx.get(dut.bad_demand) | \
                ctx.get(dut.overflow)
        c = ctx.get(dut.counters)
        out["counters"] = {k: getattr(c, k) for k in COUNTERS}
        regs = []
        for a in range(len(COUNTERS)):
            ctx.set(dut.reg_addr, a)
            regs.append(ctx.get(dut.reg_data))
        out["regs"] = regs
        out["errors_injected"] = hbm.errors

    sim = Simulator(dut)
    sim.add_clock(1e-9)
    sim.add_testbench(bench)
    sim.run()
    return out


def _require(cond, msg):
    if not cond:
        raise RtlMismatch(msg)


_KIND_NAME = {v: k for k, v in _KIND.items()}


def txn_tuple(t):
    """Model Txn -> the RTL's txn fields."""
    v = t.victim or (0, 0, 0)
    return (_KIND[t.kind], t.req, t.layer, t.block, RESULT[t.result], int(t.victim is not None),
            *v, int(t.hbm))


def describe(tt):
    k, r, ly, b, res, vv, vr, vl, vb, h = tt
    vic = f" victim ({vr},{vl},{vb})" if vv else ""
    return f"{_KIND_NAME[k]} ({r},{ly},{b}) {RESULT_NAME.get(res, res)}{vic}{' hbm' if h else ''}"


def compare_rtl(ops, got, sets, ways, reserve=None, **_):
    """Check an RTL run (dict from :func:`run_rtl` or the cocotb bench) against the model,
    raising :class:`RtlMismatch` (one line) at the first difference; returns the model core.
    ``sets``, ``ways``, ``reserve`` (keep-cap reserve, ``None`` = ``ways // 8`` as in model
    and RTL) must be those of the RTL run: pass the same params dict to both."""
    core = CDUCore(sets, ways, reserve=reserve)
    for o in ops:
        core.apply(o)
    want = [txn_tuple(t) for t in core.txns]
    for i, (a, b) in enumerate(zip(got["txns"], want)):
        _require(a == b, f"txn {i}: RTL {describe(a)} != model {describe(b)}")
    _require(len(got["txns"]) == len(want), f"{len(got['txns'])} txns, model {len(want)}")
    first = [r[1:4] for r in got["hbm_reqs"] if not r[4]]
    _require(first == [(t.req, t.layer, t.block) for t in core.txns if t.hbm],
             "HBM requests differ")
    ready = [r[:4] for r in got["ready"]]
    _require(ready == [(t.req, t.layer, t.block, int(t.result == "hit"))
                       for t in core.txns if t.kind == "R"], "ready stream differs")
    _require(not any(r[4] for r in got["ready"]), "ready beat with err")
    c = core.counters()
    for k in COUNTERS:
        if k in ("prefetch_late", "hbm_reads", "hbm_retries", "hbm_failures"):
            continue
        _require(got["counters"][k] == c[k],
                 f"counter {k}: RTL {got['counters'][k]} model {c[k]}")
    _require(got["counters"]["hbm_reads"] == c["misses"] + c["prefetch_issued"],
             f"counter hbm_reads: RTL {got['counters']['hbm_reads']} model "
             f"{c['misses'] + c['prefetch_issued']}")
    _require(got["counters"]["hbm_retries"] == got["errors_injected"],
             f"counter hbm_retries: RTL {got['counters']['hbm_retries']}, "
             f"{got['errors_injected']} error answers")
    _require(got["counters"]["hbm_failures"] == 0 and not got["status"],
             f"{len(got['status'])} HBM reads failed after all retries")
    _require(got["idle"] and not got["bad_desc"] and not got["bad_resp"],
             f"end state: idle={got['idle']} bad_desc={got['bad_desc']} bad_resp={got['bad_resp']}")
    return core


def replay_rtl(model="tiny", pattern="window", policy="adaptive", steps=4, batch=2,
               kv_dtype="bf16", seed=0, *, context=100, sets=4, ways=2, distance=4,
               pattern_args=None, err_rate=0.0, max_cycles=200000, entries=8, reserve=None):
    """``tricut cdu replay --rtl``: the same kind of replay on a small CDU instance, through
    the whole RTL (DSU step descriptors into the front end, which generates and predicts
    the block operations; ``topk`` demand lists on its ``demand`` stream) in Amaranth's
    simulator (random stream idle/backpressure, HBM answering out of
    order, a fraction ``err_rate`` of answers with the error bit, always retried in time),
    compared with the policy model transaction by transaction.

    The small instance: ``sets`` x ``ways`` frames (``reserve`` ways per set kept from the
    keep class, default ``ways // 8``, the same in model and RTL), at most 8 layers, 16 requests and 1024
    blocks per request (the RTL's tag widths), ``entries`` adaptive predictor entries (model
    and RTL), the front end's unit FIFO sized to the run's lookahead. Returns the counters dict (model == RTL);
    raises :class:`RtlMismatch` (one line) on any difference and ``ValueError`` on bad
    arguments."""
    import random

    from tricut.rtl.cdu.core import check_params
    from tricut.rtl.cdu.layouts import Widths

    if isinstance(model, (str, Path)):
        model = load_model(model)
    if policy not in POLICIES:
        raise ValueError(f"unknown CDU policy {policy!r}; choose one of {', '.join(POLICIES)}")
    if pattern not in PATTERNS:
        raise ValueError(f"unknown access pattern {pattern!r}; choose one of {', '.join(PATTERNS)}")
    kv_dtype_bytes(kv_dtype)
    for name, v in (("steps", steps), ("batch", batch), ("context", context)):
        _pos_int(name, v)
    if not 0 <= err_rate < 1:
        raise ValueError(f"err_rate must be in [0, 1), got {err_rate!r}")
    widths = Widths()
    reserve = check_params(max_retries=2, mshrs=4, rq_depth=4, sets=sets, ways=ways, w=widths,
                           reserve=reserve)
    params = dict(sets=sets, ways=ways, mshrs=4, rq_depth=4, max_retries=2, reserve=reserve)
    if batch > 2 ** widths.req:
        raise ValueError(f"--rtl: batch must be <= {2 ** widths.req}, got {batch}")
    if -(-(context + steps) // BLOCK_TOKENS) > 2 ** widths.block:
        raise ValueError(f"--rtl: context + steps must be <= {BLOCK_TOKENS * 2 ** widths.block} "
                         f"tokens, got {context + steps}")
    layers = min(model.num_layers, 2 ** widths.layer)
    pat = Pattern(pattern, seed=seed, **(pattern_args or {}))
    descs = [StepDesc(t, tuple(SlotDesc(i, i, context + t + 1) for i in range(batch)),
                      tuple(range(layers))) for t in range(steps)]
    # the model's run, the demand lists (topk: what the TE scores would select) and how far
    # the RTL front end's walker must be able to run ahead (its unit FIFO is sized to that)
    ops, lists, deep = frontend_reference_lookahead(
        descs, lambda st, sd, ly: pat.blocks(st.step, sd.request, ly, sd.seq_len),
        policy, sets * ways, distance, entries)
    longest = max([len(d) for d in lists] + [1]) if pattern == "topk" else 1
    front = dict(beats=step_beats(descs), lists=lists,
                 config=fe_config(policy, pattern, distance, pat),
                 params=dict(slot_bits=4, max_slots=16, max_layers=2 ** widths.layer,
                             entries=entries, units=min(256, max(8, deep + 1)),
                             max_demand=min(1024, longest)))
    rng = random.Random(seed)
    err = (lambda tag, a: a < 2 and rng.random() < err_rate) if err_rate else None
    got = run_rtl(None, params=params, seed=seed, err=err, timeout=max_cycles, front=front)
    core = compare_rtl(ops, got, **params)
    token_bytes = model.kv_bytes_per_token(kv_dtype) / model.num_layers
    out = core.counters()
    out.update(hbm_read_bytes=got["counters"]["hbm_reads"] * token_bytes * BLOCK_TOKENS,
               hbm_write_bytes=got["counters"]["writes"] * token_bytes,
               rtl_cycles=got["cycles"], ops=len(ops), layers_simulated=layers)
    return out


# --------------------------------------------------------------------------- RTL front end


def step_beats(descs):
    """Model StepDescs -> ``step`` stream beats (dicts of ``rtl/cdu/layouts.step_layout``):
    per step a header, its slots, its layers; ``last`` on the step's final beat, ``end`` on
    the final beat of the final step."""
    beats = []
    for n, st in enumerate(descs):
        b = [dict(kind=STEP_KIND["header"], step=st.step)]
        b += [dict(kind=STEP_KIND["slot"], slot=sd.slot, req=sd.request, seq_len=sd.seq_len,
                   hint=_HINT_CODE[sd.hint]) for sd in st.slots]
        b += [dict(kind=STEP_KIND["layer"], layer=ly) for ly in st.layers]
        b[-1]["last"] = 1
        b[-1]["end"] = int(n == len(descs) - 1)
        beats += b
    full = dict(kind=STEP_KIND["header"], step=0, slot=0, req=0, seq_len=0, hint=0, layer=0, last=0, end=0)
    return [dict(full, **x) for x in beats]


def fe_config(policy, pattern, distance, pat=None):
    """The front end's ``config`` port for a model Pattern (``pat``) and policy."""
    from tricut.rtl.cdu.layouts import PATTERN, POLICY
    ceil = lambda t: -(-t // BLOCK_TOKENS)  # noqa: E731
    code = PATTERN["list"] if pattern in ("topk", "list", "trace") else PATTERN[pattern]
    cfg = dict(policy=POLICY[policy], pattern=code, distance=distance, sink_blocks=1,
               window_blocks=1, reread_blocks=1, burst_start=0, burst_len=0)
    if pat is not None:
        cfg.update(sink_blocks=ceil(pat.sinks), window_blocks=ceil(pat.window),
                   reread_blocks=ceil(pat.reread_tokens), burst_start=pat.burst_start,
                   burst_len=pat.burst_len)
    return cfg


def frontend_reference(descs, demand, policy, frames, distance, entries):
    """Run the model front end; returns (ops, demand lists in the order the front end asked
    for them, i.e. unit order) -- the vectors for the RTL front end."""
    ops, lists, _ = frontend_reference_lookahead(descs, demand, policy, frames, distance, entries)
    return ops, lists


def frontend_reference_lookahead(descs, demand, policy, frames, distance, entries):
    """:func:`frontend_reference` plus the deepest unit FIFO the RTL front end needs for
    this run: the most (slot, layer) units planned and not yet finished when a unit is
    planned (the RTL's ``units`` parameter must exceed it, else ``overflow``)."""
    lists = []
    planned = [0]
    deepest = [0]

    class Probe(FrontEnd):
        def _unit_plan(self, sd, layer):
            # units in the FIFO before this push: planned - finished (the current demand
            # unit, if its demand was asked for, is not finished)
            deepest[0] = max(deepest[0], planned[0] - max(0, len(lists) - 1))
            planned[0] += 1
            return super()._unit_plan(sd, layer)

    def rec(st, sd, ly):
        d = demand(st, sd, ly)
        lists.append(list(d))
        return d
    fe = Probe(policy, frames, distance=distance, entries=entries)
    ops = list(fe.ops(descs, rec))
    # disabled: the RTL's walker never runs (nothing is ever predicted)
    return ops, lists, 0 if policy == "disabled" else deepest[0]


def demand_beats(lists):
    return [dict(block=b, last=int(n == len(d) - 1)) for d in lists for n, b in enumerate(d)]


#: the RTL front end instance of the cycle measurements: 4 slots x 8 layers, 4 entries
CYCLE_FE_PARAMS = dict(slot_bits=2, max_slots=4, max_layers=8, entries=4, max_demand=16)


def frontend_cycles(descs, policy, distance=4, frames=8):
    """Run the RTL front end on DSU step descriptors with the ``full`` pattern and no idle or
    backpressure; returns (the model's op counts ``{"R", "P", "W"}``, RTL cycles less the
    one-time predictor clear after reset). The ops are checked equal to the model's."""
    pat = Pattern("full")
    entries = CYCLE_FE_PARAMS["entries"]
    ops, lists, deep = frontend_reference_lookahead(
        descs, lambda st, sd, ly: pat.blocks(st.step, sd.request, ly, sd.seq_len),
        policy, frames, distance, entries)
    params = dict(CYCLE_FE_PARAMS, units=max(16, deep + 1), frames=frames)
    got = run_frontend_rtl(step_beats(descs), lists, fe_config(policy, "full", distance, pat),
                           params, p_valid=1, p_ready=1)
    compare_ops(ops, got)
    clear = 2 ** (params["slot_bits"] + math.ceil(math.log2(params["max_layers"])))
    return {k: sum(1 for o in ops if o.kind == k) for k in "RPW"}, got["cycles"] - clear


def run_frontend_rtl(beats, lists, config, params=None, seed=0, p_valid=0.7, p_ready=0.7,
                     timeout=100000, idle=None, backpressure=None):
    """Drive step beats and demand lists into a :class:`FrontEndRTL` in Amaranth's simulator
    under an idle schedule on ``step``/``demand`` and a backpressure schedule on ``ops``
    (``idle``/``backpressure`` or ``p_valid``/``p_ready`` as in :func:`run_rtl`); returns
    ``ops`` (tuples kind, req, layer, block, cls, fresh), ``cycles``, the per-op transfer
    cycles ``at`` and the sticky flags. Ends with the drained check (:class:`RtlMismatch`)."""
    from amaranth.sim import Simulator

    from tricut.rtl.cdu.frontend import FrontEndRTL
    from tricut.rtl.cdu.layouts import PATTERN, demand_layout, fe_config_layout, step_layout

    idle, backpressure = bench_schedules(p_valid, p_ready, idle, backpressure)
    dut = FrontEndRTL(**(params or {}))
    w = dut.widths
    src = _Adapter(Source("step", beats, idle, seed), dut.step, step_layout(w, dut.slot_bits))
    dem = _Adapter(Source("demand", demand_beats(lists) if config["pattern"] == PATTERN["list"]
                          else [], idle, seed), dut.demand, demand_layout(w))
    ops = _Adapter(Sink("ops", backpressure, seed), dut.ops,
                   read=lambda q: (q.kind, q.req, q.layer, q.block, q.cls, q.fresh))
    ends = [src.end, dem.end, ops.end]
    out = {"ops": ops.end.beats, "at": []}

    async def bench(ctx):
        ctx.set(dut.config, fe_config_layout(w).const(config))
        now, idle_run = 0, 0
        while True:
            for a in (src, dem, ops):
                a.drive(ctx)
            src.sample(ctx)
            dem.sample(ctx)
            if ops.sample(ctx):
                out["at"].append(now)
            quiet = ctx.get(dut.idle)
            await ctx.tick()
            now += 1
            idle_run = idle_run + 1 if quiet and not drained(ends) else 0
            if idle_run > 3:
                break
            _require(now < timeout, f"front end hung after {now} cycles, {len(out['ops'])} "
                                    "ops: " + "; ".join(drained(ends) or ["not idle"]))
        left = drained(ends)
        _require(not left, "front-end bench not drained: " + "; ".join(left))
        out["cycles"] = now
        for k in ("bad_step", "bad_demand", "overflow"):
            out[k] = ctx.get(getattr(dut, k))

    sim = Simulator(dut)
    sim.add_clock(1e-9)
    sim.add_testbench(bench)
    sim.run()
    return out


def op_tuple(o):
    return (_KIND[o.kind], o.req, o.layer, o.block, o.cls, int(o.fresh))


def compare_ops(want_ops, got):
    """Front-end RTL ops == model ops, one by one (RtlMismatch at the first difference)."""
    want = [op_tuple(o) for o in want_ops]
    for n, (a, b) in enumerate(zip(got["ops"], want)):
        _require(a == b, f"op {n}: RTL {a} != model {b}")
    _require(len(got["ops"]) == len(want), f"{len(got['ops'])} ops, model {len(want)}")
    _require(not (got["bad_step"] or got["bad_demand"] or got["overflow"]),
             f"flags: bad_step={got['bad_step']} bad_demand={got['bad_demand']} "
             f"overflow={got['overflow']}")
