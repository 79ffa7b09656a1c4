# amaranth: UnusedElaboratable=no
"""CDU RTL against the policy model, transaction by transaction, in Amaranth's simulator:
pattern-driven and random operation streams, named edge cases, random idle/backpressure on
every stream (``random`` x ``random`` for the long runs; edge cases under every (idle,
backpressure) pair of ``streams.IDLE_BACKPRESSURE``), an HBM model answering out of order
after random latencies, error injection (retried reads stay equivalent; reads failing every
retry are reported, never dropped); every run ends with the drained check."""

import random
from pathlib import Path

import pytest

from tricut.rtl.cdu.core import COUNTERS, CDUCoreRTL
from tricut.rtl.cdu.layouts import Widths
from tricut.rtl.cdu.top import CDU, CDUBackEnd
from tricut.sim.harness.cdu import RtlMismatch, replay_rtl
from tricut.sim.harness.cdu import run_rtl as _run_rtl
from tricut.sim.harness.streams import IDLE_BACKPRESSURE, matrix_id
from tricut.sim.harness import cdu_stimulus as B


def run_rtl(descs, **kw):
    return _run_rtl(descs, params=B.PARAMS, **kw)


@pytest.mark.parametrize("pattern,policy,seed", [
    ("full", "static", 1), ("window", "adaptive", 2), ("topk", "adaptive", 3),
    ("reread", "static", 4), ("topk", "disabled", 5), ("window", "static", 6),
])
def test_patterns_equal_model(pattern, policy, seed):
    ops = B.pattern_ops(pattern, policy, seed)
    got = run_rtl(B.ops_to_descs(ops), seed=seed)
    B.compare(ops, got, **B.PARAMS)
    assert got["regs"] == [got["counters"][k] for k in COUNTERS]


@pytest.mark.parametrize("seed", range(3))
def test_random_ops_equal_model_with_retried_errors(seed):
    ops = B.random_ops(seed, n=160)
    # B.PARAMS has reserve=1 of 2 ways: the keep cap demotes keep allocations of every kind
    events = B.cap_events(ops, **B.PARAMS)
    assert {("R", "alloc"), ("P", "alloc"), ("W", "alloc")} <= set(events), events
    rng = random.Random(100 + seed)
    # 25 % of answers carry the error bit, never on the last allowed attempt
    err = lambda tag, attempt: attempt < B.PARAMS["max_retries"] and rng.random() < 0.25  # noqa: E731
    got = run_rtl(B.ops_to_descs(ops), seed=seed, err=err, p_valid=0.5, p_ready=0.5)
    B.compare(ops, got, **B.PARAMS)
    assert got["errors_injected"] > 0


def test_edge_cases_equal_model_fast_and_slow():
    ops = B.edge_ops()
    core = B.compare(ops, run_rtl(B.ops_to_descs(ops), p_valid=1, p_ready=1, max_latency=1), **B.PARAMS)
    c = core.counters()
    assert c["misses_bypass"] >= 2 and c["prefetch_dropped"] == 2 and c["prefetch_useless"] >= 1
    assert c["write_allocs"] == 1 and c["write_bypass"] == 1
    B.compare(ops, run_rtl(B.ops_to_descs(ops), seed=9, p_valid=0.3, p_ready=0.3, max_latency=40),
              **B.PARAMS)


@pytest.mark.parametrize("idle,backpressure", IDLE_BACKPRESSURE,
                         ids=[matrix_id(p) for p in IDLE_BACKPRESSURE])
def test_idle_backpressure_matrix_equal_model(idle, backpressure):
    """Named edge cases (pinned sets, bypasses, dropped prefetches, a miss burst beyond the
    MSHRs) with retried HBM errors under every (idle, backpressure) pair of schedules."""
    ops = B.edge_ops()
    rng = random.Random(17)
    err = lambda tag, a: a < B.PARAMS["max_retries"] and rng.random() < 0.25  # noqa: E731
    got = run_rtl(B.ops_to_descs(ops), seed=5, idle=idle, backpressure=backpressure, err=err,
                  max_latency=20)
    B.compare(ops, got, **B.PARAMS)
    assert got["regs"] == [got["counters"][k] for k in COUNTERS]
    assert got["errors_injected"] > 0


@pytest.mark.parametrize("reserve", [1, 0])
def test_keep_cap_edge_cases_equal_model(reserve):
    """A set holding keep_cap keep (or pinned) blocks: keep allocations by R, P, W and keep
    promotions at R and W hits are demoted to normal (reserve=1, keep_cap=1), equal to the
    model transaction by transaction; with reserve=0 (keep_cap = ways) the same stream
    allocates keep blocks into sets full of keep blocks, where only not counting the
    victim way keeps them keep. Each demotion shows in a later victim choice."""
    params = dict(B.PARAMS, reserve=reserve)
    ops = B.keep_cap_ops()
    events = B.cap_events(ops, **params)
    if reserve:
        assert set(events) == B.CAP_PLACES, events
    else:
        assert {k for k in events if k[0] == "skip"} == {("skip", x) for x in "RPW"}, events
    B.compare(ops, _run_rtl(B.ops_to_descs(ops), params=params, p_valid=1, p_ready=1,
                            max_latency=1), **params)
    B.compare(ops, _run_rtl(B.ops_to_descs(ops), params=params, seed=4, p_valid=0.4,
                            p_ready=0.4, max_latency=30), **params)


def test_restore_leaves_the_tag_store_alone():
    """The model's hand-computed restore case on a 1-set, 2-way RTL: S ops on a resident
    block (with class keep), an unread prefetched one (pin) and an absent one give
    ``restore`` and change nothing -- the later victims prove the ages, classes and the pf
    bit unchanged and the absent block not allocated. Would fail if S touched the tag store."""
    params = dict(sets=1, ways=2, mshrs=4, rq_depth=4, max_retries=2, reserve=0)
    ops = [B.Op("R", 0, 0, 0, 1, False), B.Op("P", 0, 0, 1, 1, False),
           B.Op("S", 0, 0, 1, 3, False), B.Op("S", 0, 0, 7, 0, False),
           B.Op("S", 0, 0, 7, 1, False), B.Op("S", 0, 0, 0, 2, False),
           B.Op("R", 0, 0, 1, 1, False), B.Op("R", 0, 0, 2, 1, False),
           B.Op("P", 0, 0, 7, 1, False)]
    for pv, lat in ((1, 1), (0.4, 30)):
        got = _run_rtl(B.ops_to_descs(ops), params=params, seed=2, p_valid=pv, p_ready=pv,
                       max_latency=lat)
        core = B.compare(ops, got, **params)
        assert [(t.result, t.victim) for t in core.txns[6:]] == [
            ("hit", None), ("miss_alloc", (0, 0, 0)), ("pf_issue", (0, 0, 1))]
        assert got["counters"]["restores"] == 4 and got["counters"]["hits_prefetched"] == 1
        assert [r[:4] for r in got["ready"]] == [(0, 0, 0, 0), (0, 0, 1, 1), (0, 0, 2, 0)]


@pytest.mark.parametrize("idle,backpressure", IDLE_BACKPRESSURE,
                         ids=[matrix_id(p) for p in IDLE_BACKPRESSURE])
def test_random_mix_with_restores_idle_backpressure_matrix(idle, backpressure):
    """A seeded random R/P/W/S mix (restores of resident, in-flight and absent blocks, runs
    of them merged into one descriptor) with retried HBM errors under every (idle,
    backpressure) pair: == model transaction by transaction."""
    ops = B.random_ops(31, n=120)
    assert sum(o.kind == "S" for o in ops) >= 10
    rng = random.Random(31)
    err = lambda tag, a: a < B.PARAMS["max_retries"] and rng.random() < 0.25  # noqa: E731
    got = run_rtl(B.ops_to_descs(ops), seed=6, idle=idle, backpressure=backpressure, err=err,
                  max_latency=20)
    core = B.compare(ops, got, **B.PARAMS)
    assert core.counters()["restores"] == got["counters"]["restores"] > 0
    assert got["regs"] == [got["counters"][k] for k in COUNTERS]


def test_throughput_one_op_per_cycle():
    """Hits on filled blocks with no backpressure: one operation decided per cycle."""
    ops = [B.Op("W", 0, 0, b, 1, True) for b in range(8)] + \
          [B.Op("R", 0, 0, b % 8, 1, False) for b in range(64)]
    got = run_rtl(B.ops_to_descs(ops, max_count=1), p_valid=1, p_ready=1)
    B.compare(ops, got, **B.PARAMS)
    assert got["cycles"] <= len(ops) + 12, got["cycles"]


def test_latency_cycles():
    """Cycle counts of docs/cdu.md (no backpressure): descriptor transfer at cycle d, txn beat
    at d + 2; a hit on a filled block is ready at d + 2; a miss's HBM request at d + 3 and
    its ready beat on the cycle after the response transfer."""
    ops = [B.Op("W", 0, 0, 0, 1, True), B.Op("R", 0, 0, 0, 1, False), B.Op("R", 0, 0, 1, 1, False)]
    got = run_rtl(B.ops_to_descs(ops, max_count=1), p_valid=1, p_ready=1, max_latency=1)
    B.compare(ops, got, **B.PARAMS)
    at = got["at"]
    d = at["desc"]
    assert [t - x for t, x in zip(at["txn"], d)] == [2, 2, 2]
    assert at["ready"][0] - d[1] == 2
    assert at["hbm_req"][0] - d[2] == 3
    assert at["ready"][1] - at["resp"][0] == 1


def test_persistent_hbm_errors_are_reported_not_dropped():
    bad = {(1, 0, 2), (2, 1, 5)}
    ops = [B.Op("R", 1, 0, 2, 1, False), B.Op("R", 0, 0, 0, 1, False),
           B.Op("P", 2, 1, 5, 1, False), B.Op("R", 2, 1, 5, 1, False),
           B.Op("R", 1, 0, 2, 1, False), B.Op("R", 0, 0, 1, 0, False)]
    for seed in (3, 4):
        _persistent(ops, bad, run_rtl(B.ops_to_descs(ops), seed=seed, max_latency=30,
                                      err=lambda tag, a: tag in bad))
    fast = run_rtl(B.ops_to_descs(ops), p_valid=1, p_ready=1, max_latency=1,
                   err=lambda tag, a: tag in bad)
    _persistent(ops, bad, fast)


def _persistent(ops, bad, got):
    # every failed read is reported once on status, after max_retries + 1 attempts; the
    # second read of (1, 0, 2) either waits on the failing fill or, if the failure came
    # first (the frame is then invalid), misses and fails on its own: 2 or 3 reports
    fails = got["counters"]["hbm_failures"]
    assert fails in (2, 3) and len(got["status"]) == fails
    assert {s[1:] for s in got["status"]} == bad
    tries = [r for r in got["hbm_reqs"] if r[1:4] in bad]
    assert len(tries) == fails * (B.PARAMS["max_retries"] + 1)
    # one ready beat per demand read, in order; the ones whose data failed carry err
    assert [r[:3] for r in got["ready"]] == [o[1:4] for o in ops if o.kind == "R"]
    assert [r[4] for r in got["ready"]] == [1, 0, 1, 1, 0]
    assert got["idle"]


def test_bad_descriptor_and_bad_response_flags():
    lay_ok = dict(kind=0, req=0, layer=0, block=0, count=1, cls=1, fresh=0)
    got = run_rtl([dict(lay_ok, count=0), dict(lay_ok, kind=7), lay_ok], p_valid=1, p_ready=1,
                  bad_resp_at=2)
    assert got["bad_desc"] and got["bad_resp"]
    assert len(got["txns"]) == 1 and got["idle"]


@pytest.mark.parametrize("bad", [dict(kind=4), dict(kind=5), dict(kind=6), dict(kind=7),
                                 dict(count=0), dict(kind=3, count=0)])
def test_bad_descriptors_consumed_sticky_nothing_done(bad):
    """Kind codes 4..7 (3-bit field, 0..3 = R W P S) and count 0 are bad descriptors:
    consumed without any operation, sticky ``bad_desc``; the good descriptors around them
    (an S run among them) are decided as if the bad ones were not there."""
    ok = [dict(kind=0, req=1, layer=0, block=0, count=2, cls=1, fresh=0),
          dict(kind=3, req=1, layer=0, block=0, count=3, cls=0, fresh=0),
          dict(kind=0, req=1, layer=0, block=1, count=1, cls=1, fresh=0)]
    descs = [ok[0], dict(ok[0], **bad), ok[1], dict(ok[1], **bad), ok[2]]
    for pv in (1, 0.5):
        got = run_rtl(descs, seed=3, p_valid=pv, p_ready=pv)
        assert got["bad_desc"] and got["idle"]
        ops = [B.Op("R", 1, 0, 0, 1, False), B.Op("R", 1, 0, 1, 1, False)] + \
            [B.Op("S", 1, 0, b, 0, False) for b in range(3)] + [B.Op("R", 1, 0, 1, 1, False)]
        model = B.model_of(ops, **B.PARAMS)
        assert [t[4] for t in got["txns"]] == [1, 1, 9, 9, 9, 0]     # miss, miss, restore x3, hit
        assert got["counters"]["restores"] == 3 and got["counters"]["accesses"] == 3
        assert len(got["txns"]) == len(model.txns)
    good = run_rtl([ok[0], ok[1], ok[2]], seed=3, p_valid=1, p_ready=1)
    assert not good["bad_desc"]


@pytest.mark.parametrize("kw,msg", [
    (dict(sets=3), "sets must be a power of 2 in 1..1024, got 3"),
    (dict(ways=0), "ways must be an integer in 1..16, got 0"),
    (dict(mshrs=5), r"mshrs must be an integer in 1..4 \(id_bits = 2\), got 5"),
    (dict(rq_depth=0), "rq_depth must be an integer in 1..64, got 0"),
    (dict(max_retries=9), "max_retries must be an integer in 0..7, got 9"),
    (dict(reserve=2), r"reserve must be an integer in 0..1 \(< ways\), got 2"),
    (dict(ways=8, reserve=-1), r"reserve must be an integer in 0..7 \(< ways\), got -1"),
    (dict(reserve=True), r"reserve must be an integer in 0..1 \(< ways\), got True"),
])
def test_parameter_errors(kw, msg):
    with pytest.raises(ValueError, match=msg):
        CDUCoreRTL(**kw)
    for top in (CDUBackEnd, CDU):
        with pytest.raises(ValueError, match=msg):
            top(**kw)
    with pytest.raises(ValueError, match="block_bits must be an integer in 1..32, got 0"):
        Widths(block_bits=0)


def test_reserve_default_is_ways_div_8():
    for ways, want in ((2, 0), (8, 1), (16, 2)):
        core = CDUCoreRTL(sets=2, ways=ways)
        assert (core.reserve, core.keep_cap) == (want, ways - want)
        be = CDUBackEnd(sets=2, ways=ways)
        assert be.params["reserve"] == want


def test_cocotb_verilator_same_vectors():
    """The same vectors through the generated Verilog on Verilator (tests/cocotb/cdu_equiv.py),
    one cocotb test running the whole idle x backpressure matrix."""
    from tricut.sim.harness.cocotb_run import run_cocotb
    assert run_cocotb(CDUBackEnd(**B.PARAMS), "cdu", "cdu_equiv", Path(__file__).parent / "cocotb") == 5


def test_verilog_lint_clean_with_documented_waivers(tmp_path):
    from tricut.sim.harness.verilog_out import lint, write_verilog

    src = write_verilog(CDU(**B.PARAMS), "cdu", tmp_path)
    clean, messages = lint(src, "cdu")
    assert clean, messages[:3000]
    # without the waivers -Wall does warn: the check above is not vacuous
    clean, messages = lint(src, "cdu", waivers=())
    assert not clean and "%Warning-" in messages


def test_replay_rtl_matches_and_mismatch_is_loud(monkeypatch):
    c = replay_rtl("tiny", "window", "adaptive", steps=3, batch=2, context=60, seed=1,
                   pattern_args=dict(window=32), err_rate=0.2)
    assert c["accesses"] == c["hits"] + c["misses"] > 0 and c["rtl_cycles"] > 0
    # a model that disagrees (victim = youngest) must make the replay fail loudly
    import tricut.models.cdu as cdu
    orig = cdu.CDUCore.victim

    def youngest(self, s):
        v = orig(self, s)
        if v is None or v[1] is None:
            return v
        ents = self.entries[s]
        w = min((w for w in range(self.ways) if ents[w]["cls"] != 3),
                key=lambda w: (ents[w]["cls"], self.ages[s][w]))
        return w, ents[w]["tag"]
    monkeypatch.setattr(cdu.CDUCore, "victim", youngest)
    with pytest.raises(RtlMismatch, match=r"^txn \d+: RTL .* != model "):
        replay_rtl("tiny", "full", "static", steps=2, batch=2, context=60, seed=1)
    with pytest.raises(ValueError, match="batch must be <= 16, got 17"):
        replay_rtl("tiny", "full", "static", batch=17)


@pytest.mark.parametrize("params", [
    dict(sets=1, ways=1, mshrs=1, rq_depth=1, max_retries=0),
    dict(sets=2, ways=4, mshrs=2, rq_depth=2, max_retries=1),
    dict(sets=8, ways=3, mshrs=4, rq_depth=8, max_retries=3),
    dict(sets=2, ways=8, mshrs=4, rq_depth=4, max_retries=2),
    dict(sets=2, ways=4, mshrs=4, rq_depth=4, max_retries=1, reserve=2),
], ids=["1x1-m1-q1", "2x4-m2-q2", "8x3-m4-q8", "2x8-default-reserve", "2x4-reserve2"])
def test_other_geometries_equal_model(params):
    ops = B.random_ops(7, n=120) + B.edge_ops()
    # reserve 0 (ways < 8, default): the victim way is not counted, so keep allocations into
    # sets full of keep blocks stay keep; reserve >= 1 (ways // 8 = 1 for 8 ways, or given):
    # keep requests are demoted to normal
    events = B.cap_events(ops, **params)
    if params.get("reserve", params["ways"] // 8):
        assert {("R", "alloc"), ("P", "alloc"), ("W", "alloc")} <= set(events), events
    else:
        assert ("skip", "R") in events and ("skip", "P") in events, events
    rng = random.Random(5)
    mr = params["max_retries"]
    err = (lambda tag, a: a < mr and rng.random() < 0.3) if mr else None
    got = _run_rtl(B.ops_to_descs(ops), params=params, seed=11, err=err, p_valid=0.6, p_ready=0.6)
    B.compare(ops, got, **params)
