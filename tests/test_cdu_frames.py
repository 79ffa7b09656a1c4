# amaranth: UnusedElaboratable=no
"""The CDU's frame fields against the policy model, in Amaranth's simulator.

The model places each block in frame ``CDUCore.where[tag] == (set, way)``; the RTL must
report that way on ``txn`` (R hit / miss_alloc, P pf_issue, W w_hit / w_alloc; 0 otherwise),
on ``ready`` (``way``; ``bypass`` exactly for miss_bypass) and on ``hbm_req`` (``way`` on every
attempt; ``alloc`` = 0 exactly for bypass reads and for attempts sent after the read's frame
was re-allocated to another block: orphaned fills). The eviction hold: no allocation fires
while its victim frame is the frame of a demand read whose ``ready`` beat has not been taken,
and the decisions stay those of the model. Random op mixes with retried HBM errors under
random backpressure on every stream, and directed cases."""

import random

import pytest

from tricut.models.cdu import CDUCore, Op, set_index
from tricut.rtl.cdu.layouts import WAY_BITS, desc_layout, hbm_req_layout, ready_layout, txn_layout
from tricut.sim.harness.cdu import (HbmModel, _Adapter, bench_schedules, compare_rtl,
                                    ops_to_descs)
from tricut.sim.harness.streams import Sink, Source, drained, stream_rng
from tricut.sim.harness import cdu_stimulus as B


FRAME_RESULTS = ("hit", "miss_alloc", "pf_issue", "w_hit", "w_alloc")
ALLOC_RESULTS = ("miss_alloc", "pf_issue", "w_alloc")


def run_frames(ops, params, seed=0, p_valid=0.7, p_ready=0.7, max_latency=12, err=None,
               ready_gate=None, timeout=60000):
    """Drive ``ops`` (as descriptors) into a :class:`CDUBackEnd`; record every stream with the
    frame fields, the cycle each decision fired (``fired``), each ``ready`` transfer cycle and
    the decisions done (counter registers) at each ``hbm_req`` transfer. ``ready_gate(now)``
    replaces the ``ready`` sink's backpressure schedule."""
    from amaranth.sim import Simulator

    from tricut.rtl.cdu.core import COUNTERS
    from tricut.rtl.cdu.top import CDUBackEnd

    idle, bp = bench_schedules(p_valid, p_ready, None, None)
    dut = CDUBackEnd(**params)
    w = dut.widths
    # the layouts carry the frame fields at fixed widths
    assert txn_layout(w)["way"].shape.width == WAY_BITS == 4
    assert hbm_req_layout(w)["alloc"].shape.width == ready_layout(w)["bypass"].shape.width == 1
    src = _Adapter(Source("desc", ops_to_descs(ops), idle, seed), dut.desc, desc_layout(w))
    hbm = HbmModel(stream_rng(seed, "hbm"), max_latency, err, idle, seed)
    sinks = {
        "txn": _Adapter(Sink("txn", bp, seed), dut.txn, read=lambda p: (
            (p.kind, p.req, p.layer, p.block, p.result, p.victim_valid, p.victim.req,
             p.victim.layer, p.victim.block, p.hbm), p.way)),
        "hbm_req": _Adapter(Sink("hbm_req", bp, seed), dut.hbm_req, read=lambda p: (
            p.id, p.req, p.layer, p.block, p.retry, p.way, p.alloc)),
        "ready": _Adapter(Sink("ready", bp, seed), dut.ready, read=lambda p: (
            p.req, p.layer, p.block, p.hit, p.err, p.way, p.bypass)),
        "status": _Adapter(Sink("status", bp, seed), dut.status,
                           read=lambda p: (p.id, p.req, p.layer, p.block)),
    }
    clock = {"now": 0}
    if ready_gate is not None:
        sinks["ready"].end.gate = lambda: int(ready_gate(clock["now"]))
    ends = [src.end, hbm] + [a.end for a in sinks.values()]
    out = {"fired": [], "ready_at": [], "req_decided": []}

    def decided(ctx):
        c = ctx.get(dut.counters)
        return c.accesses + c.prefetch_requests + c.writes + c.restores

    async def bench(ctx):
        now = idle_run = 0
        while True:
            clock["now"] = now
            for a in (src, *sinks.values()):
                a.drive(ctx)
            r = hbm.drive(now)
            if r is not None:
                ctx.set(dut.hbm_resp.payload.id, r[0])
                ctx.set(dut.hbm_resp.payload.err, r[1])
            ctx.set(dut.hbm_resp.valid, int(r is not None))
            src.sample(ctx)
            hbm.sample(ctx.get(dut.hbm_resp.ready))
            d0 = decided(ctx)          # decisions fired in the cycles before this one
            for name, a in sinks.items():
                if a.sample(ctx):
                    if name == "hbm_req":
                        p = a.end.beats[-1]
                        out["req_decided"].append(d0)
                        hbm.request(now, p[0], p[1:4], p[4])
                    elif name == "ready":
                        out["ready_at"].append(now)
            quiet = ctx.get(dut.idle)
            await ctx.tick()
            d1 = decided(ctx)
            assert d1 - d0 in (0, 1)
            if d1 > d0:
                out["fired"].append(now)
            now += 1
            idle_run = idle_run + 1 if (quiet and not drained(ends)) else 0
            if idle_run > 3:
                break
            assert now < timeout, f"CDU hung after {now} cycles: {drained(ends)}"
        assert not drained(ends), drained(ends)
        out["cycles"] = now
        out["idle"] = ctx.get(dut.idle)
        out["bad_resp"] = ctx.get(dut.bad_resp)
        out["bad_desc"] = ctx.get(dut.bad_desc)
        c = ctx.get(dut.counters)
        out["counters"] = {k: getattr(c, k) for k in COUNTERS}
        out["errors_injected"] = hbm.errors

    sim = Simulator(dut)
    sim.add_clock(1e-9)
    sim.add_testbench(bench)
    sim.run()
    t = sinks["txn"].end.beats
    out.update(txns=[x[0] for x in t], txn_way=[x[1] for x in t],
               hbm_reqs=sinks["hbm_req"].end.beats, ready=sinks["ready"].end.beats,
               status=sinks["status"].end.beats)
    return out


def frame_reference(ops, sets, ways, reserve=None, **_):
    """The model's frames: per op the frame ``(set, way)`` of its block (None when it takes
    none: bypass, dropped, redundant prefetch, restore) and whether it allocated; per HBM read
    (model order) ``[frame or None, decision index, index of the decision that re-allocated
    its frame or None]``."""
    core = CDUCore(sets, ways, reserve=reserve)
    frames, allocs, reads = [], [], []
    owner = {}                       # frame -> the read last allocated into it
    for i, op in enumerate(ops):
        t = core.apply(op)
        tag = (op.req, op.layer, op.block)
        f = core.where[tag] if t.result in FRAME_RESULTS else None
        if f is not None:
            assert f[0] == set_index(*tag, sets)
        frames.append(f)
        allocs.append(t.result in ALLOC_RESULTS)
        if t.result in ALLOC_RESULTS:
            n = owner.pop(f, None)
            if n is not None and reads[n][2] is None:
                reads[n][2] = i
        if t.hbm:
            reads.append([f if t.result != "miss_bypass" else None, i, None])
            if f is not None:
                owner[f] = len(reads) - 1
    return core, frames, allocs, reads


def check_frames(ops, got, params):
    """Everything :func:`compare_rtl` checks, then the frame fields and the eviction hold.
    Returns coverage counts."""
    compare_rtl(ops, got, **params)
    core, frames, allocs, reads = frame_reference(ops, **params)
    way = [0 if f is None else f[1] for f in frames]
    for i, (a, b) in enumerate(zip(got["txn_way"], way)):
        assert a == b, f"txn {i} {core.txns[i].result}: RTL way {a} != model way {b}"
    rd = [i for i, o in enumerate(ops) if o.kind == "R"]
    for k, (beat, i) in enumerate(zip(got["ready"], rd)):
        want = (way[i], int(core.txns[i].result == "miss_bypass"))
        assert beat[5:] == want, f"ready beat {k} (op {i} {core.txns[i].result}): RTL " \
                                 f"(way, bypass) {beat[5:]} != model {want}"
    # hbm_req: attempts mapped to reads through their MSHR id
    n_of, nxt = {}, 0
    cov = dict(orphan_retries=0, orphan_first=0, retries=0, held=0, allocs=sum(allocs))
    for k, (r, d) in enumerate(zip(got["hbm_reqs"], got["req_decided"])):
        if not r[4]:
            n_of[r[0]] = nxt
            nxt += 1
        n = n_of[r[0]]
        f, _, evicted = reads[n]
        want_way = 0 if f is None else f[1]
        orphaned = f is not None and evicted is not None and evicted < d
        want_alloc = int(f is not None and not orphaned)
        assert (r[5], r[6]) == (want_way, want_alloc), \
            f"hbm_req beat {k} (read {n}, retry {r[4]}, {d} decisions done, frame {f} " \
            f"re-allocated by decision {evicted}): RTL (way, alloc) {r[5:]} != " \
            f"({want_way}, {want_alloc})"
        cov["retries"] += r[4]
        if orphaned:
            cov["orphan_retries" if r[4] else "orphan_first"] += 1
    # eviction hold: an allocation fires only after every older demand read on its frame
    # (not a bypass) has had its ready beat taken
    fired, popped = got["fired"], dict(zip(rd, got["ready_at"]))
    assert len(fired) == len(ops)
    for j in (j for j in range(len(ops)) if allocs[j]):
        live = [i for i in rd if i < j and frames[i] == frames[j]]
        for i in live:
            assert popped[i] < fired[j], \
                f"op {j} {core.txns[j].result} into frame {frames[j]} fired at cycle " \
                f"{fired[j]}, before op {i}'s ready beat on that frame was taken " \
                f"(cycle {popped[i]})"
        # would-be conflicts: an older read on the frame still unpopped when the previous
        # decision fired (the op could have been decided earlier without the hold)
        if j and any(popped[i] >= fired[j - 1] for i in live):
            cov["held"] += 1
    return cov


def frame_ops(seed, n=150, reqs=2, layers=1, blocks=5):
    """A random R/P/W mix over few tags (``B.random_ops`` at a smaller tag space): many
    evictions of frames with unread prefetches and unpopped demand reads."""
    return B.random_ops(seed, n=n, reqs=reqs, layers=layers, blocks=blocks)


GEOMETRIES = {
    "4x2-reserve1": B.PARAMS,
    "1x2": dict(sets=1, ways=2, mshrs=4, rq_depth=4, max_retries=2),
    "2x4-m2": dict(sets=2, ways=4, mshrs=2, rq_depth=3, max_retries=1),
    "1x1-q1": dict(sets=1, ways=1, mshrs=2, rq_depth=1, max_retries=2),
}


@pytest.mark.parametrize("geo", list(GEOMETRIES))
@pytest.mark.parametrize("seed", range(2))
def test_random_frames_equal_model(geo, seed):
    params = GEOMETRIES[geo]
    ops = frame_ops(seed) if params["sets"] == 1 else B.random_ops(seed, n=160)
    rng = random.Random(50 + seed)
    mr = params["max_retries"]
    err = lambda tag, a: a < mr and rng.random() < 0.35  # noqa: E731
    got = run_frames(ops, params, seed=seed, p_valid=0.8, p_ready=0.4, max_latency=24, err=err)
    cov = check_frames(ops, got, params)
    assert cov["allocs"] > 20 and cov["retries"] > 0 and cov["held"] > 0, cov
    assert cov["orphan_retries"] + cov["orphan_first"] > 0, cov
    assert got["cycles"] < 20000


def test_orphans_and_holds_covered():
    """Across seeds of a 1 set x 2 ways instance with slow, error-prone HBM and a slow
    consumer: retries of orphaned fills (alloc = 0) happen, first attempts sent after their
    frame was re-allocated (also alloc = 0), and allocations that had to wait for a pop."""
    params = GEOMETRIES["1x2"]
    total = dict.fromkeys(("orphan_retries", "orphan_first", "held"), 0)
    for seed in range(4):
        ops = frame_ops(100 + seed)
        rng = random.Random(seed)
        err = lambda tag, a: a < 2 and rng.random() < 0.5  # noqa: E731
        got = run_frames(ops, params, seed=seed, p_valid=1, p_ready=0.3, max_latency=30,
                         err=err)
        cov = check_frames(ops, got, params)
        for k in total:
            total[k] += cov[k]
    assert total["orphan_retries"] > 0 and total["orphan_first"] > 0 and total["held"] > 0, total


def test_orphaned_retry_directed():
    """1 set x 2 ways: P a (way 0), P b (way 1), P c evicts a's frame while a's first
    attempt is in flight; a's first attempt fails, so its retry goes out with alloc = 0 (and
    still way 0); c's read fills way 0 with alloc = 1."""
    params = dict(sets=1, ways=2, mshrs=4, rq_depth=4, max_retries=2)
    a, b, c = (0, 0, 0), (0, 0, 1), (0, 0, 2)
    ops = [Op("P", *a, 1, False), Op("P", *b, 1, False), Op("P", *c, 1, False),
           Op("R", *c, 1, False)]
    got = run_frames(ops, params, p_valid=1, p_ready=1, max_latency=8,
                     err=lambda tag, att: tag == a and att == 0)
    cov = check_frames(ops, got, params)
    reqs = [(r[1:4], r[4], r[5], r[6]) for r in got["hbm_reqs"]]
    assert (a, 0, 0, 1) in reqs and (a, 1, 0, 0) in reqs, reqs      # first attempt, retry
    assert (b, 0, 1, 1) in reqs and (c, 0, 0, 1) in reqs, reqs
    assert cov["orphan_retries"] == 1
    assert got["ready"] == [(*c, 1, 0, 0, 0)]


@pytest.mark.parametrize("kind", ["R", "P", "W"])
def test_eviction_hold_waits_for_the_pop(kind):
    """1 set x 2 ways: W0, W1 fill ways 0 and 1; R0, R1 hit them (way 0 becomes the LRU);
    then an allocation (R miss_alloc, P pf_issue or W w_alloc of block 2) whose victim is way
    0, the frame of R0's ready entry. ``ready.ready`` is held low for 60 cycles: the
    allocation does not fire; the cycle R0's beat is taken (only it: R1's entry, on way 1,
    stays unpopped) it still does not; it fires on the next cycle with the model's decision
    (victim block 0, way 0)."""
    params = dict(sets=1, ways=2, mshrs=4, rq_depth=4, max_retries=2)
    ops = [Op("W", 0, 0, 0, 1, True), Op("W", 0, 0, 1, 1, True), Op("R", 0, 0, 0, 1, False),
           Op("R", 0, 0, 1, 1, False), Op(kind, 0, 0, 2, 1, kind == "W")]
    pop_at = 60
    got = run_frames(ops, params, p_valid=1, p_ready=1, max_latency=4,
                     ready_gate=lambda now: now == pop_at or now > pop_at + 40)
    check_frames(ops, got, params)
    fired = got["fired"]
    assert fired[3] < 15, fired                  # the hits went through at once
    assert got["ready_at"][:2] == [pop_at, pop_at + 41], got["ready_at"]
    assert fired[4] == pop_at + 1, fired         # waited for R0's pop, not for R1's
    result = {"R": "miss_alloc", "P": "pf_issue", "W": "w_alloc"}[kind]
    core = B.model_of(ops, **params)
    assert (core.txns[4].result, core.txns[4].victim) == (result, (0, 0, 0))
    assert got["txn_way"] == [0, 1, 0, 1, 0]
    assert [r[5:] for r in got["ready"]] == [(0, 0), (1, 0)] + ([(0, 0)] if kind == "R" else [])


def test_no_hold_on_bypass_or_other_frames():
    """The same stream without a conflict: the allocation's victim is way 0 but R0 was a
    bypass read (class 0), and R1's unpopped entry is on way 1: nothing waits; with the
    ``ready`` stream stalled the allocation fires within a few cycles."""
    params = dict(sets=1, ways=2, mshrs=4, rq_depth=4, max_retries=2)
    ops = [Op("W", 0, 0, 0, 1, True), Op("W", 0, 0, 1, 1, True), Op("R", 0, 0, 5, 0, False),
           Op("R", 0, 0, 1, 1, False), Op("P", 0, 0, 2, 1, False)]
    got = run_frames(ops, params, p_valid=1, p_ready=1, max_latency=4,
                     ready_gate=lambda now: now > 60)
    check_frames(ops, got, params)
    assert got["fired"][4] < 15, got["fired"]
    core = B.model_of(ops, **params)
    assert (core.txns[4].result, core.txns[4].victim) == ("pf_issue", (0, 0, 0))
    assert [r[5:] for r in got["ready"]] == [(0, 1), (1, 0)]
