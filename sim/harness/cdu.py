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

from tricut.models.cdu import (KV_BLOCK_TOKENS, PATTERNS, POLICIES, CDUCore, FrontEnd, Pattern,
                               SlotDesc, StepDesc)
from tricut.models.config import kv_dtype_bytes, load_model
from tricut.rtl.cdu.core import COUNTERS
from tricut.rtl.cdu.layouts import HINT as _HINT_CODE
from tricut.rtl.cdu.layouts import KIND as _KIND
from tricut.rtl.cdu.layouts import RESULT, RESULT_NAME, STEP_KIND
from tricut.sim.fast.cdu_replay import check_positive_int
from tricut.sim.harness.shared_simulator import design
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


def _end_state(ctx, dut, back_end_only):
    """The CDU's flags, counters and counter registers at the end of a :func:`run_rtl`."""
    from tricut.rtl.cdu.core import COUNTERS
    if back_end_only:
        bad = ctx.get(dut.bad_desc)
    else:
        bad = ctx.get(dut.bad_step) | ctx.get(dut.bad_demand) | ctx.get(dut.overflow)
    c = ctx.get(dut.counters)
    regs = []
    for a in range(len(COUNTERS)):
        ctx.set(dut.reg_addr, a)
        regs.append(ctx.get(dut.reg_data))
    return {"idle": ctx.get(dut.idle), "bad_resp": ctx.get(dut.bad_resp), "bad_desc": bad,
            "counters": {k: getattr(c, k) for k in COUNTERS}, "regs": regs}


def run_rtl(descs, params=None, seed=0, p_valid=0.7, p_ready=0.7, max_latency=12, err=None,
            timeout=20000, bad_resp_at=None, front=None, idle=None, backpressure=None,
            faults=None, wave=None):
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
    dict.

    ``faults`` (a :class:`HbmFaults`, instead of ``err``): HBM errors by read -- the ``n``-th
    first attempt on ``hbm_req`` (= the model's ``n``-th HBM transaction) fails its first
    ``faults.fails(n)`` attempts; the run then also records, per read reported failed, when
    it failed relative to the decisions (``fail_events``: ``(n, decisions, same_cycle)``,
    ``decisions`` = operations decided at the end of the cycle the last answer was taken,
    ``same_cycle`` = one of them in that very cycle), for :func:`compare_rtl`.
    ``wave``: a :class:`tricut.sim.harness.waves.WaveSpec` (VCD of the run, cycle 0 = the
    bench's first cycle, kept to its window)."""
    from tricut.rtl.cdu.layouts import (PATTERN, demand_layout, desc_layout, fe_config_layout,
                                        step_layout)
    from tricut.rtl.cdu.top import CDU, CDUBackEnd

    idle, backpressure = bench_schedules(p_valid, p_ready, idle, backpressure)
    kwargs = {**(params or {}), **(front.get("params", {}) if front is not None else {})}
    unit = CDUBackEnd if front is None else CDU
    shared = design(unit, share=wave is None, **kwargs)
    dut = shared.dut
    w = dut.widths
    if front is None:
        sources = [_Adapter(Source("desc", descs, idle, seed), dut.desc, desc_layout(w))]
    else:
        lists = front["lists"] if front["config"]["pattern"] == PATTERN["list"] else []
        sources = [_Adapter(Source("step", front["beats"], idle, seed), dut.step,
                            step_layout(w, dut.front.slot_bits)),
                   _Adapter(Source("demand", demand_beats(lists), idle, seed), dut.demand,
                            demand_layout(w))]
    if faults is not None:
        if err is not None:
            raise ValueError("give err or faults, not both")
        err = lambda key, attempt: attempt < faults.fails(key[0])  # noqa: E731
    hbm = HbmModel(stream_rng(seed, "hbm"), max_latency, err, idle, seed)
    read_of = {"next": 0}   # MSHR id -> read number n of its read in flight (faults)
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
           "cycles": 0, "at": {}, "fail_events": [] if faults is not None else None}

    def decided(ctx):
        c = ctx.get(dut.counters)
        return c.accesses + c.prefetch_requests + c.writes + c.restores, c.hbm_failures

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
            probe = None
            if not injected and hbm.sample(resp_ready) and faults is not None and r[1]:
                probe = (read_of[r[0]], *decided(ctx))     # an error answer taken
            for name, a in sinks.items():
                if a.sample(ctx) and name != "status":
                    out["at"].setdefault(name, []).append(now)
                    if name == "hbm_req":
                        p = a.end.beats[-1]
                        key = p[1:4]
                        if faults is not None:
                            if not p[4]:
                                read_of[p[0]] = read_of["next"]
                                read_of["next"] += 1
                            key = (read_of[p[0]], key)
                        hbm.request(now, p[0], key, p[4])
            quiet = ctx.get(dut.idle)
            await ctx.tick()
            if probe is not None:
                d1, f1 = decided(ctx)
                if f1 > probe[2]:                          # it was the read's last attempt
                    out["fail_events"].append((probe[0], d1, d1 > probe[1]))
            now += 1
            idle_run = idle_run + 1 if (quiet and not drained(ends)) else 0
            if idle_run > 3:
                break
            _require(now < timeout, f"CDU hung after {now} cycles, {len(out['txns'])} txns: "
                                    + "; ".join(drained(ends) or ["streams drained, not idle"]))
        left = drained(ends)
        _require(not left, "CDU bench not drained: " + "; ".join(left))
        out["cycles"] = now
        out.update(_end_state(ctx, dut, front is None), errors_injected=hbm.errors)

    if wave is None:
        shared.run(bench)
    else:
        from tricut.sim.harness.waves import amaranth_waves, check_window
        with amaranth_waves(shared.sim, wave, period=1e-9, skip_cycles=0):
            shared.run(bench)
            check_window(wave, out["cycles"])
    return out


class HbmFaults:
    """HBM read errors by read (``tricut cdu replay --rtl --hbm-errors RATE[:persistent]``).

    Read ``n`` -- the ``n``-th first attempt on ``hbm_req``, which is the model's ``n``-th
    HBM transaction (first attempts go out in decision order) -- is *faulty* with
    probability ``rate``. A faulty read fails its first attempt; **transient** (default),
    each further attempt fails again with probability ``again`` (1/2), so it fails ``k``
    attempts with probability ``2**-k`` and then succeeds; **persistent**, every attempt
    fails. The CDU re-sends a failed attempt up to ``max_retries`` times: a read with ``k <=
    max_retries`` is *recovered* (``k`` retries), one with ``k > max_retries`` (with 2
    retries: 1/4 of the transient faulty reads, every persistent one) is *failed*: reported on
    ``status``, its frame invalidated, ``err`` on the demand reads that wait for it. The
    draw depends only on ``(seed, n)``: the same reads fail whatever the stream timing, so the
    expected outcome is known per read (:meth:`outcome`)."""

    PERSISTENT = 1 << 30

    def __init__(self, rate, persistent=False, seed=0, again=0.5):
        if isinstance(rate, bool) or not isinstance(rate, (int, float)) or \
                not math.isfinite(rate) or not 0 <= rate <= 1:
            raise ValueError(f"HBM error rate must be a number in [0, 1], got {rate!r}")
        self.rate, self.persistent, self.seed, self.again = float(rate), bool(persistent), seed, again
        self._k = {}

    def fails(self, n):
        """How many attempts of read ``n`` fail (``PERSISTENT``: all)."""
        k = self._k.get(n)
        if k is None:
            import random
            rng = random.Random(f"hbm-errors:{self.seed}:{n}")
            k = 0
            if rng.random() < self.rate:
                k = self.PERSISTENT if self.persistent else 1
                while k < 64 and rng.random() < self.again:
                    k += 1
            self._k[n] = k
        return k

    def outcome(self, n, max_retries):
        """``"ok"``, ``"recovered"`` (failed attempts retried, then success) or ``"failed"``
        (every allowed attempt failed)."""
        k = self.fails(n)
        return "ok" if k == 0 else "recovered" if k <= max_retries else "failed"

    def describe(self):
        return f"{self.rate:g}{':persistent' if self.persistent else ''}"


def fault_reference(ops, sets, ways, reserve=None, fail_events=(), failing=()):
    """The policy model under failed HBM reads: :class:`CDUCore` applying ``ops``, and after
    ``decisions`` operations of each ``(n, decisions, same_cycle)`` of ``fail_events``
    invalidating the frame read ``n`` was filling, as the RTL does when the read's last
    attempt fails (if that frame still holds the block read ``n`` was bringing; otherwise
    nothing). ``same_cycle``: the failure came in the cycle of the ``decisions``-th decision,
    whose occupancy peak then counts the invalidation. ``failing``: the reads that fail (to
    set ``err``: a demand read's own failed read, or a hit on a frame whose read fails).
    Returns ``(core, errs, invalidated)``: the core (its ``txns`` and counters), one ``err``
    bit per demand read in order, the frames invalidated."""
    core = CDUCore(sets, ways, reserve=reserve)
    failing = set(failing)
    events = list(fail_events)
    errs, reads = [], []
    invalidated = 0
    ei = 0
    peak_before = 0

    def invalidate(n, same):
        nonlocal invalidated
        loc = core.where.get(reads[n])
        if loc is not None:
            s, w = loc
            if core.entries[s][w].get("read") == n:
                core.entries[s][w] = None
                del core.where[reads[n]]
                core.c["occupancy"] = len(core.where)
                invalidated += 1
        if same:
            core.c["occupancy_peak"] = max(peak_before, len(core.where))

    for i, op in enumerate(ops + [None]):
        while ei < len(events) and events[ei][1] <= i:
            n, _, same = events[ei]
            invalidate(n, same and events[ei][1] == i)
            ei += 1
        if op is None:
            break
        tag = (op.req, op.layer, op.block)
        loc = core.where.get(tag)
        fill = core.entries[loc[0]][loc[1]].get("read") if loc is not None else None
        peak_before = core.c["occupancy_peak"]
        t = core.apply(op)
        if t.hbm:
            n = len(reads)
            reads.append(tag)
            if t.result in ("miss_alloc", "pf_issue"):
                s, w = core.where[tag]
                core.entries[s][w]["read"] = n
        if op.kind == "R":
            errs.append(int((n in failing) if t.hbm else (fill in failing)))
    _require(ei == len(events), f"{len(events) - ei} HBM failures after the last decision")
    return core, errs, invalidated


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


def compare_rtl(ops, got, sets, ways, reserve=None, max_retries=2, faults=None, **_):
    """Check an RTL run (dict from :func:`run_rtl` or the cocotb bench) against the model,
    raising :class:`RtlMismatch` (one line) at the first difference; returns the model core.
    ``sets``, ``ways``, ``reserve`` (keep-cap reserve, ``None`` = ``ways // 8`` as in model
    and RTL), ``max_retries`` must be those of the RTL run: pass the same params dict to both.

    With ``faults`` (the :class:`HbmFaults` of a :func:`run_rtl` run) reads may fail: the
    model is :func:`fault_reference` (the failed reads' frames invalidated when the RTL
    reported them), and besides the transactions, HBM requests, ready stream and counters,
    the check covers every read's attempts (``faults.fails(n)`` failed ones, at most
    ``max_retries + 1``), the ``status`` beats (one per failed read, its tag, in failure
    order), ``err`` on exactly the demand reads whose data failed, ``hbm_retries`` and
    ``hbm_failures``. The run's fault counts are added to the core as ``core.faults``."""
    if faults is not None:
        return _compare_faults(ops, got, sets, ways, reserve, max_retries, faults)
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


def _compare_faults(ops, got, sets, ways, reserve, max_retries, faults):
    events = got.get("fail_events")
    _require(events is not None, "compare_rtl(faults=...) needs a run_rtl(faults=...) run")
    nreads = sum(1 for r in got["hbm_reqs"] if not r[4])
    outcome = [faults.outcome(n, max_retries) for n in range(nreads)]
    failing = {n for n, o in enumerate(outcome) if o == "failed"}
    _require([e[0] for e in events if e[0] not in failing] == [],
             f"reads {[e[0] for e in events if e[0] not in failing][:5]} reported failed, "
             "but their errors were retried in time")
    _require(sorted(e[0] for e in events) == sorted(failing),
             f"{len(events)} reads reported failed, {len(failing)} expected "
             f"(reads {sorted(failing - {e[0] for e in events})[:5]} missing)")
    core, errs, invalidated = fault_reference(ops, sets, ways, reserve, events, failing)
    want = [txn_tuple(t) for t in core.txns]
    for i, (a, b) in enumerate(zip(got["txns"], want)):
        _require(a == b, f"txn {i}: RTL {describe(a)} != model {describe(b)}")
    _require(len(got["txns"]) == len(want), f"{len(got['txns'])} txns, model {len(want)}")
    reads = [(t.req, t.layer, t.block) for t in core.txns if t.hbm]
    first = [r[1:4] for r in got["hbm_reqs"] if not r[4]]
    _require(first == reads, "HBM requests differ")
    # attempts per read: 1 + min(fails, max_retries), every one of the read's tag
    tries = [0] * nreads
    n_of = {}               # MSHR id -> the read it is serving
    started = 0
    for r in got["hbm_reqs"]:
        if not r[4]:
            n_of[r[0]] = started
            started += 1
        n = n_of.get(r[0])
        _require(n is not None, f"HBM retry {r} of an MSHR id never sent")
        tries[n] += 1
        _require(r[1:4] == reads[n], f"HBM request {r} is not read {n}'s")
    want_tries = [1 + min(faults.fails(n), max_retries) for n in range(nreads)]
    bad = [n for n in range(nreads) if tries[n] != want_tries[n]]
    if bad:
        _require(False, f"read {bad[0]}: {tries[bad[0]]} attempts, expected {want_tries[bad[0]]}")
    # status: one beat per failed read, in failure order, with its tag
    _require([s[1:] for s in got["status"]] == [reads[e[0]] for e in events],
             f"status beats {[s[1:] for s in got['status']][:4]} != failed reads "
             f"{[reads[e[0]] for e in events][:4]}")
    ready = [r[:4] for r in got["ready"]]
    _require(ready == [(t.req, t.layer, t.block, int(t.result == "hit"))
                       for t in core.txns if t.kind == "R"], "ready stream differs")
    got_err = [r[4] for r in got["ready"]]
    for i, (a, b) in enumerate(zip(got_err, errs)):
        _require(a == b, f"ready beat {i}: RTL err={a}, model err={b}")
    c = core.counters()
    for k in COUNTERS:
        if k in ("prefetch_late", "hbm_reads", "hbm_retries", "hbm_failures"):
            continue
        _require(got["counters"][k] == c[k],
                 f"counter {k}: RTL {got['counters'][k]} model {c[k]}")
    retries = sum(min(faults.fails(n), max_retries) for n in range(nreads))
    answers = sum(min(faults.fails(n), max_retries + 1) for n in range(nreads))
    for k, v in (("hbm_reads", nreads), ("hbm_retries", retries),
                 ("hbm_failures", len(failing))):
        _require(got["counters"][k] == v, f"counter {k}: RTL {got['counters'][k]}, expected {v}")
    _require(got["errors_injected"] == answers,
             f"{got['errors_injected']} error answers, expected {answers}")
    _require(got["idle"] and not got["bad_desc"] and not got["bad_resp"],
             f"end state: idle={got['idle']} bad_desc={got['bad_desc']} bad_resp={got['bad_resp']}")
    core.faults = dict(
        hbm_errors=faults.describe(), hbm_error_answers=answers,
        reads_faulty=sum(o != "ok" for o in outcome),
        reads_recovered=sum(o == "recovered" for o in outcome),
        reads_failed=len(failing), frames_invalidated=invalidated,
        ready_err=sum(errs))
    return core


#: the ``--rtl`` replay's instance (core: sets x ways, MSHRs, ready-queue depth, retries)
RTL_PARAMS = dict(sets=4, ways=2, mshrs=4, rq_depth=4, max_retries=2)
#: the ``--rtl`` replay's size limit, in block operations (``steps x requests x layers x
#: ceil(final seq_len / 16)``, as for the model replay): ~2 min in Amaranth's simulator
RTL_MAX_BLOCK_OPS = 40_000


def _rtl_trace_descs(trace, model, hints, names, widths):
    """An access trace as the ``--rtl`` replay drives it: requests renumbered 0..n-1 in
    ascending order (slot = request), steps renumbered 0..T-1 in ascending order, every
    (request, layer) unit of a step present (the RTL front end asks for a demand list for
    each); returns (descs, demand, block-operation bound)."""
    from tricut.sim.fast.cdu_replay import arg_name, check_access_trace, trace_size
    from tricut.models.cdu import dsu_hints, read_access_trace

    max_layers = min(model.num_layers, 2 ** widths.layer)
    max_seq = min(model.max_context, KV_BLOCK_TOKENS * 2 ** widths.block)
    note = f" of the {arg_name(names, 'rtl')} instance" if names else " of the RTL instance"
    check_access_trace(trace, model, max_layers=max_layers, max_seq_len=max_seq,
                       limit_note=note if (max_layers < model.num_layers or
                                           max_seq < model.max_context) else "")
    recs = read_access_trace(trace)
    reqs = sorted({r for st in recs.values() for (r, _) in st})
    if len(reqs) > 2 ** widths.req:
        raise ValueError(f"{arg_name(names, 'rtl')}: trace {trace} has {len(reqs)} requests; "
                         f"the RTL instance takes at most {2 ** widths.req}")
    new_req = {r: i for i, r in enumerate(reqs)}
    descs, orig = [], []
    for t, step in enumerate(sorted(recs)):
        st = recs[step]
        rl = sorted({r for (r, _) in st})
        lay = sorted({ly for (_, ly) in st})
        for r in rl:
            for ly in lay:
                if (r, ly) not in st:
                    raise ValueError(
                        f"{arg_name(names, 'rtl')}: trace {trace} step {step} has request {r} and "
                        f"layer {ly} but no record for the pair; the RTL front end needs a "
                        "demand list for every (request, layer) of a step (replay it without "
                        f"{arg_name(names, 'rtl')})")
        seq = [max(sl for (rr, _), (_, sl) in st.items() if rr == r) for r in rl]
        hint = [hints] * len(rl) if hints != "dsu" else dsu_hints(seq)
        descs.append(StepDesc(t, tuple(SlotDesc(new_req[r], new_req[r], n, h)
                                       for r, n, h in zip(rl, seq, hint)), tuple(lay)))
        orig.append(step)
    by_t = dict(enumerate(orig))

    def demand(st, sd, layer):
        return recs[by_t[st.step]][(reqs[sd.request], layer)][0]
    return descs, demand, trace_size(recs)[1]


def replay_rtl(model="tiny", pattern="window", policy="adaptive", steps=4, batch=2,
               kv_dtype="bf16", seed=0, *, context=100, sets=4, ways=2, distance=4,
               pattern_args=None, err_rate=0.0, max_cycles=None, entries=8, reserve=None,
               hints="auto", hbm_errors=None, wave=None, names=None):
    """``tricut cdu replay --rtl``: the same kind of replay on a small CDU instance, through
    the whole RTL (DSU step descriptors into the front end, which generates and predicts
    the block operations; ``topk`` and trace demand lists on its ``demand`` stream) in
    Amaranth's simulator (random stream idle/backpressure, HBM answering out of order),
    compared with the policy model transaction by transaction.

    ``pattern``: a pattern name, or an access-trace path (``.jsonl`` / a Path): requests
    renumbered 0..n-1, steps 0..T-1, every (request, layer) of a step needs a record.
    ``hints``: ``auto``, ``dsu`` (the DSU's residency bit from the contexts) or a hint name.
    HBM errors: ``hbm_errors`` -- a :class:`HbmFaults` or ``(rate, persistent)``: reads fail
    (transient: some attempts, then succeed or exhaust the retries; persistent: every
    attempt), compared with :func:`fault_reference`; or the legacy ``err_rate``, a fraction
    of answers with the error bit, never on the last attempt (always retried in time).
    ``wave``: a :class:`tricut.sim.harness.waves.WaveSpec`.

    The small instance: ``sets`` x ``ways`` frames (``reserve`` ways per set kept from the
    keep class, default ``ways // 8``, the same in model and RTL), 4 MSHRs, 2 retries, at
    most 8 layers, 16 requests and 1024 blocks per request (the RTL's tag widths),
    ``entries`` adaptive predictor entries (model and RTL), the front end's unit FIFO sized
    to the run's lookahead, at most :data:`RTL_MAX_BLOCK_OPS` block operations. Returns the
    counters dict (model == RTL, plus the RTL's ``hbm_reads``, ``hbm_retries``,
    ``hbm_failures`` and, with ``hbm_errors``, the fault counts); raises
    :class:`RtlMismatch` (one line) on any difference and ``ValueError`` on bad arguments,
    before anything runs."""
    import random

    from tricut.models.cdu import HINTS, dsu_hints
    from tricut.rtl.cdu.core import check_params
    from tricut.rtl.cdu.layouts import Widths
    from tricut.sim.fast.cdu_replay import arg_name

    if isinstance(model, (str, Path)):
        model = load_model(model)
    if policy not in POLICIES:
        raise ValueError(f"unknown CDU policy {policy!r}; choose one of {', '.join(POLICIES)}")
    trace = None
    if isinstance(pattern, Path) or (isinstance(pattern, str) and pattern.endswith(".jsonl")):
        trace, pattern = pattern, None
    elif pattern not in PATTERNS:
        raise ValueError(f"unknown access pattern {pattern!r}; choose one of "
                         f"{', '.join(PATTERNS)}, or a .jsonl access trace")
    if hints != "dsu" and hints not in HINTS:
        raise ValueError(f"unknown hints {hints!r}; choose dsu or one of {', '.join(HINTS)}")
    kv_dtype_bytes(kv_dtype)
    for name, v in (("steps", steps), ("batch", batch), ("context", context)):
        check_positive_int(arg_name(names, name), v)
    if not 0 <= err_rate < 1:
        raise ValueError(f"err_rate must be in [0, 1), got {err_rate!r}")
    faults = hbm_errors
    if faults is not None and not isinstance(faults, HbmFaults):
        rate, persistent = faults
        faults = HbmFaults(rate, persistent, seed)
    if faults is not None and err_rate:
        raise ValueError("give err_rate or hbm_errors, not both")
    widths = Widths()
    reserve = check_params(max_retries=2, mshrs=4, rq_depth=4, sets=sets, ways=ways, w=widths,
                           reserve=reserve)
    params = dict(RTL_PARAMS, sets=sets, ways=ways, reserve=reserve)
    rtl = arg_name(names, "rtl")
    if trace is not None:
        descs, demand, bound = _rtl_trace_descs(trace, model, hints, names, widths)
        layers = len({ly for st in descs for ly in st.layers})
        what = f"trace {trace}"
    else:
        if batch > 2 ** widths.req:
            raise ValueError(f"{rtl}: {arg_name(names, 'batch')} must be <= {2 ** widths.req}, "
                             f"got {batch}")
        if -(-(context + steps) // KV_BLOCK_TOKENS) > 2 ** widths.block:
            raise ValueError(f"{rtl}: {arg_name(names, 'context')} + {arg_name(names, 'steps')} "
                             f"must be <= {KV_BLOCK_TOKENS * 2 ** widths.block} tokens, got "
                             f"{context + steps}")
        layers = min(model.num_layers, 2 ** widths.layer)
        bound = steps * batch * layers * -(-(context + steps) // KV_BLOCK_TOKENS)
        what = (f"{steps} steps x {batch} requests x {layers} layers x "
                f"{-(-(context + steps) // KV_BLOCK_TOKENS)} blocks")
    if bound > RTL_MAX_BLOCK_OPS:
        raise ValueError(f"{rtl}: {what} = {bound:,} block operations exceed the RTL replay's "
                         f"limit of {RTL_MAX_BLOCK_OPS:,} (Amaranth simulation, ~2 min)")
    if max_cycles is None:           # a run takes ~2-4 cycles per operation, <= 3 per block
        max_cycles = 200000 + 120 * bound
    if wave is not None and wave.start >= max_cycles:
        raise ValueError(f"--wave-window {wave.start}:{'' if wave.end is None else wave.end}: "
                         f"this run ends before cycle {max_cycles:,} (its time-out)")
    if trace is None:
        pat = Pattern(pattern, seed=seed, **(pattern_args or {}))
        hint = [hints] * batch if hints != "dsu" else dsu_hints([context] * batch)
        descs = [StepDesc(t, tuple(SlotDesc(i, i, context + t + 1, h)
                                   for i, h in zip(range(batch), hint)),
                          tuple(range(layers))) for t in range(steps)]

        def demand(st, sd, ly):
            return pat.blocks(st.step, sd.request, ly, sd.seq_len)
    else:
        pat = None
    # the model's run, the demand lists (topk, trace: what the TE scores would select) and
    # how far the RTL front end's walker must be able to run ahead (its unit FIFO is sized
    # to that)
    ops, lists, deep = frontend_reference_lookahead(descs, demand, policy, sets * ways,
                                                    distance, entries)
    listed = trace is not None or pattern == "topk"
    longest = max([len(d) for d in lists] + [1]) if listed else 1
    front = dict(beats=step_beats(descs), lists=lists,
                 config=fe_config(policy, "list" if trace is not None else pattern, distance,
                                  pat),
                 params=dict(slot_bits=4, max_slots=16, max_layers=2 ** widths.layer,
                             entries=entries, units=min(256, max(8, deep + 1)),
                             max_demand=min(1024, longest)))
    rng = random.Random(seed)
    err = (lambda tag, a: a < 2 and rng.random() < err_rate) if err_rate else None
    got = run_rtl(None, params=params, seed=seed, err=err, timeout=max_cycles, front=front,
                  faults=faults, wave=wave)
    core = compare_rtl(ops, got, **params, faults=faults)
    token_bytes = model.kv_bytes_per_token(kv_dtype) / model.num_layers
    out = core.counters()
    out.update(hbm_read_bytes=got["counters"]["hbm_reads"] * token_bytes * KV_BLOCK_TOKENS,
               hbm_write_bytes=got["counters"]["writes"] * token_bytes,
               rtl_cycles=got["cycles"], ops=len(ops), layers_simulated=layers,
               hbm_reads=got["counters"]["hbm_reads"],
               hbm_retries=got["counters"]["hbm_retries"],
               hbm_failures=got["counters"]["hbm_failures"],
               status_beats=len(got["status"]), ready_err=sum(r[4] for r in got["ready"]),
               steps=len(descs), requests=len({sd.request for st in descs for sd in st.slots}))
    if faults is not None:
        out.update(core.faults)
    return out


# --------------------------------------------------------------------------- RTL front end


def step_beats(descs):
    """Model StepDescs -> ``step`` stream beats (dicts of ``rtl/cdu/layouts.step_layout``):
    per step a header, its restores (in order), its slots, its layers; ``last`` on the
    step's final beat, ``end`` on the final beat of the final step. (Any interleaving of a
    step's restore, slot and layer beats gives the same ops, as long as the restores keep
    their order.)"""
    beats = []
    for n, st in enumerate(descs):
        b = [dict(kind=STEP_KIND["header"], step=st.step)]
        b += [dict(kind=STEP_KIND["restore"], req=req, layer=ly, seq_len=seq_len)
              for req, ly, seq_len in st.restores]
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
    ceil = lambda t: -(-t // KV_BLOCK_TOKENS)  # noqa: E731
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
    from tricut.rtl.cdu.frontend import FrontEndRTL
    from tricut.rtl.cdu.layouts import PATTERN, demand_layout, fe_config_layout, step_layout

    idle, backpressure = bench_schedules(p_valid, p_ready, idle, backpressure)
    shared = design(FrontEndRTL, **(params or {}))
    dut = shared.dut
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

    shared.run(bench)
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
