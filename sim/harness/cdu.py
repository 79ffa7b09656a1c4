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
from tricut.sim.fast.cdu_replay import _pos_int

__all__ = ["replay_rtl", "run_rtl", "compare_rtl", "ops_to_descs", "HbmModel",
           "run_frontend_rtl", "compare_ops", "frontend_reference",
           "frontend_reference_lookahead", "step_beats", "demand_beats", "fe_config",
           "RtlMismatch", "frontend_cycles"]


# --------------------------------------------------------------------------- RTL replay

_KIND = {"R": 0, "W": 1, "P": 2}


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


class HbmModel:
    """Background HBM: takes requests, answers each after a random latency in any order;
    ``err(tag, attempt)`` decides which answers carry the error bit."""

    def __init__(self, rng, max_latency=12, err=None):
        self.rng, self.max_latency, self.err = rng, max_latency, err or (lambda tag, a: False)
        self.pending = []     # [due cycle, id, tag, attempt]
        self.attempts = {}
        self.errors = 0
        self.presenting = None

    def request(self, now, rid, tag, retry):
        a = self.attempts.get(rid, 0) + 1 if retry else 0
        self.attempts[rid] = a
        self.pending.append([now + self.rng.randrange(1, self.max_latency + 1), rid, tag, a])

    def next_response(self, now):
        """(id, err) to present this cycle or None (keeps presenting until taken)."""
        if self.presenting is None:
            due = [p for p in self.pending if p[0] <= now]
            if due:
                p = self.rng.choice(due)
                self.pending.remove(p)
                e = bool(self.err(p[2], p[3]))
                self.errors += e
                self.presenting = (p[1], int(e))
        return self.presenting

    def taken(self):
        self.presenting = None


def run_rtl(descs, params=None, seed=0, p_valid=0.7, p_ready=0.7, max_latency=12, err=None,
            timeout=20000, bad_resp_at=None, front=None):
    """Drive a CDU in Amaranth's simulator with random idle/backpressure on every stream and
    :class:`HbmModel` answering; returns what came out of every stream (``txns``,
    ``hbm_reqs``, ``ready``, ``status``), the transfer cycles (``at``), the counters and
    register reads, and the end state.

    Without ``front``: ``descs`` (dicts of the desc layout) into :class:`CDUBackEnd`
    (intake -> core). With ``front = dict(beats=, lists=, config=, params=)``: step beats
    (:func:`step_beats`), demand lists and the front-end config into the whole :class:`CDU`
    (front end -> intake -> core); ``descs`` is ignored. ``params`` (including ``reserve``)
    go to the RTL constructor; give :func:`compare_rtl` the same dict."""
    import random

    from amaranth.sim import Simulator

    from tricut.rtl.cdu.core import COUNTERS
    from tricut.rtl.cdu.layouts import (PATTERN, demand_layout, desc_layout, fe_config_layout,
                                        step_layout)
    from tricut.rtl.cdu.top import CDU, CDUBackEnd

    rng = random.Random(seed)
    if front is None:
        dut = CDUBackEnd(**(params or {}))
        w = dut.widths
        sources = [_StreamSource(dut.desc, desc_layout(w), descs, rng, p_valid)]
    else:
        dut = CDU(**(params or {}), **front.get("params", {}))
        w = dut.widths
        lists = front["lists"] if front["config"]["pattern"] == PATTERN["list"] else []
        sources = [_StreamSource(dut.step, step_layout(w, dut.front.slot_bits), front["beats"],
                                 rng, p_valid),
                   _StreamSource(dut.demand, demand_layout(w), demand_beats(lists), rng, p_valid)]
    hbm = HbmModel(rng, max_latency, err)
    out = {"txns": [], "hbm_reqs": [], "ready": [], "status": [], "cycles": 0, "at": {}}

    def tag(p):
        return (p.req, p.layer, p.block)

    async def bench(ctx):
        if front is not None:
            ctx.set(dut.config, fe_config_layout(w).const(front["config"]))
        now = 0
        idle_run = 0
        while True:
            # inputs for this cycle
            for src in sources:
                src.drive(ctx)
            for s in (dut.txn, dut.ready, dut.status, dut.hbm_req):
                ctx.set(s.ready, int(rng.random() < p_ready))
            r = hbm.next_response(now) if rng.random() < p_valid or hbm.presenting else None
            if bad_resp_at is not None and now == bad_resp_at:
                r = (3, 0)                     # an id never requested
                hbm.presenting = None
            if r is not None:
                ctx.set(dut.hbm_resp.payload.id, r[0])
                ctx.set(dut.hbm_resp.payload.err, r[1])
            ctx.set(dut.hbm_resp.valid, int(r is not None))
            # transfers on this cycle
            if sources[0].sample(ctx):
                out["at"].setdefault("desc", []).append(now)
            for src in sources[1:]:
                src.sample(ctx)
            if r is not None and ctx.get(dut.hbm_resp.ready):
                if hbm.presenting is not None:
                    hbm.taken()
                out["at"].setdefault("resp", []).append(now)
            if ctx.get(dut.txn.valid) and ctx.get(dut.txn.ready):
                p = ctx.get(dut.txn.payload)
                out["at"].setdefault("txn", []).append(now)
                out["txns"].append((p.kind, p.req, p.layer, p.block, p.result, p.victim_valid,
                                    p.victim.req, p.victim.layer, p.victim.block, p.hbm))
            if ctx.get(dut.hbm_req.valid) and ctx.get(dut.hbm_req.ready):
                p = ctx.get(dut.hbm_req.payload)
                out["at"].setdefault("hbm_req", []).append(now)
                out["hbm_reqs"].append((p.id, p.req, p.layer, p.block, p.retry))
                hbm.request(now, p.id, tag(p), p.retry)
            if ctx.get(dut.ready.valid) and ctx.get(dut.ready.ready):
                p = ctx.get(dut.ready.payload)
                out["at"].setdefault("ready", []).append(now)
                out["ready"].append((p.req, p.layer, p.block, p.hit, p.err))
            if ctx.get(dut.status.valid) and ctx.get(dut.status.ready):
                p = ctx.get(dut.status.payload)
                out["status"].append((p.id, p.req, p.layer, p.block))
            idle = ctx.get(dut.idle)
            await ctx.tick()
            now += 1
            done = all(src.done for src in sources)
            idle_run = idle_run + 1 if (idle and done and not hbm.pending
                                        and hbm.presenting is None) else 0
            if idle_run > 3:
                break
            _require(now < timeout, f"CDU hung: {sources[0].i}/{len(sources[0].items)} input "
                                    f"beats, {len(out['txns'])} txns after {now} cycles")
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


def _rtl_names():
    from tricut.rtl.cdu.core import COUNTERS
    from tricut.rtl.cdu.layouts import RESULT, RESULT_NAME
    return COUNTERS, RESULT, RESULT_NAME


def txn_tuple(t):
    """Model Txn -> the RTL's txn fields."""
    RESULT = _rtl_names()[1]
    v = t.victim or (0, 0, 0)
    return (_KIND[t.kind], t.req, t.layer, t.block, RESULT[t.result], int(t.victim is not None),
            *v, int(t.hbm))


def describe(tt):
    k, r, ly, b, res, vv, vr, vl, vb, h = tt
    RESULT_NAME = _rtl_names()[2]
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
    for k in _rtl_names()[0]:
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

_HINT_CODE = {"auto": 0, "stream": 1, "priority": 2, "pin": 3}


def step_beats(descs):
    """Model StepDescs -> ``step`` stream beats (dicts of ``rtl/cdu/layouts.step_layout``):
    per step a header, its slots, its layers; ``last`` on the step's final beat, ``end`` on
    the final beat of the final step."""
    beats = []
    for n, st in enumerate(descs):
        b = [dict(kind=0, step=st.step)]
        b += [dict(kind=1, slot=sd.slot, req=sd.request, seq_len=sd.seq_len,
                   hint=_HINT_CODE[sd.hint]) for sd in st.slots]
        b += [dict(kind=2, layer=ly) for ly in st.layers]
        b[-1]["last"] = 1
        b[-1]["end"] = int(n == len(descs) - 1)
        beats += b
    full = dict(kind=0, step=0, slot=0, req=0, seq_len=0, hint=0, layer=0, last=0, end=0)
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


class _StreamSource:
    """Drive one input stream with random idle: keeps a beat valid until it transfers."""

    def __init__(self, port, layout, items, rng, p_valid):
        self.port, self.layout, self.items, self.rng, self.p = port, layout, items, rng, p_valid
        self.i, self.presenting = 0, False

    def drive(self, ctx):
        if self.i < len(self.items) and (self.presenting or self.rng.random() < self.p):
            ctx.set(self.port.payload, self.layout.const(self.items[self.i]))
            ctx.set(self.port.valid, 1)
            self.presenting = True
        else:
            ctx.set(self.port.valid, 0)

    def sample(self, ctx):
        if ctx.get(self.port.valid) and ctx.get(self.port.ready):
            self.i += 1
            self.presenting = False
            return True
        return False

    @property
    def done(self):
        return self.i == len(self.items)


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
                     timeout=100000):
    """Drive step beats and demand lists into a :class:`FrontEndRTL` in Amaranth's simulator
    with random idle/backpressure; returns ``ops`` (tuples kind, req, layer, block, cls,
    fresh), ``cycles``, the per-op transfer cycles ``at`` and the sticky flags."""
    import random

    from amaranth.sim import Simulator

    from tricut.rtl.cdu.frontend import FrontEndRTL
    from tricut.rtl.cdu.layouts import PATTERN, demand_layout, fe_config_layout, step_layout

    dut = FrontEndRTL(**(params or {}))
    w = dut.widths
    rng = random.Random(seed)
    src = _StreamSource(dut.step, step_layout(w, dut.slot_bits), beats, rng, p_valid)
    dem = _StreamSource(dut.demand, demand_layout(w),
                        demand_beats(lists) if config["pattern"] == PATTERN["list"] else [],
                        rng, p_valid)
    out = {"ops": [], "at": []}

    async def bench(ctx):
        ctx.set(dut.config, fe_config_layout(w).const(config))
        now, idle_run = 0, 0
        while True:
            src.drive(ctx)
            dem.drive(ctx)
            ctx.set(dut.ops.ready, int(rng.random() < p_ready))
            src.sample(ctx)
            dem.sample(ctx)
            if ctx.get(dut.ops.valid) and ctx.get(dut.ops.ready):
                q = ctx.get(dut.ops.payload)
                out["ops"].append((q.kind, q.req, q.layer, q.block, q.cls, q.fresh))
                out["at"].append(now)
            idle = ctx.get(dut.idle)
            await ctx.tick()
            now += 1
            idle_run = idle_run + 1 if idle and src.done and dem.done else 0
            if idle_run > 3:
                break
            _require(now < timeout, f"front end hung: {src.i}/{len(beats)} step beats, "
                                    f"{len(out['ops'])} ops after {now} cycles")
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
