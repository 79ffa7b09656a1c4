"""DSU golden model: hand-computed schedules for each profile, recovery rules, accounting."""

import math
import random

import pytest

from tricut.models.dsu import (
    ERROR, PROFILES, TIMEOUT, DsuModel, DsuParams, RequestSpec, run_schedule)


def _slots(batch):
    return [d.slot for d in batch]


def test_latency_opt_oldest_first_with_priority():
    m = DsuModel(DsuParams("latency-opt", n_slots=4, latency_batch=2))
    for i, prio in enumerate([0, 0, 1, 0]):
        m.submit(RequestSpec(i, prompt_tokens=10, max_new_tokens=5, priority=prio))
    batch = m.step().batch
    # Priority 1 (request 2, slot 2) first, then the oldest (request 0, slot 0).
    assert [(d.slot, d.request) for d in batch] == [(0, 0), (2, 2)]
    assert all(d.seq_len == 11 and d.residency == 0 for d in batch)
    m.complete()
    assert [(d.slot, d.seq_len) for d in m.step().batch] == [(0, 12), (2, 12)]


def test_throughput_opt_groups_by_context_bucket():
    m = DsuModel(DsuParams("throughput-opt", n_slots=6, max_batch=3))
    # buckets: 100 -> 6, 3000 -> 11, 3500 -> 11, 70 -> 6, 4000 -> 11, 20 -> 4
    for i, n in enumerate([100, 3000, 3500, 70, 4000, 20]):
        m.submit(RequestSpec(i, n, 4))
    assert _slots(m.step().batch) == [1, 2, 4]          # bucket 11 holds three: the dominant group
    m.complete()
    m2 = DsuModel(DsuParams("throughput-opt", n_slots=4, max_batch=3))
    for i, n in enumerate([100, 3000, 70, 20]):   # buckets 6, 11, 6, 4: dominant 6
        m2.submit(RequestSpec(i, n, 4))
    # distance 0: slots 0, 2; distance 2: slot 3 (bucket 4) before slot 1 (bucket 11, distance 5)
    assert _slots(m2.step().batch) == [0, 2, 3]


def test_fairness_opt_round_robin_and_bound():
    p = DsuParams("fairness-opt", n_slots=5, max_batch=2)
    m = DsuModel(p)
    for i in range(5):
        m.submit(RequestSpec(i, 10, 100))
    seen = []
    for _ in range(6):
        seen.append(_slots(m.step().batch))
        m.complete()
    assert seen == [[0, 1], [2, 3], [0, 4], [1, 2], [0, 3], [1, 4]]


@pytest.mark.parametrize("seed", range(5))
def test_fairness_opt_never_starves(seed):
    rng = random.Random(seed)
    p = DsuParams("fairness-opt", n_slots=12, max_batch=3)
    reqs = [RequestSpec(i, rng.randint(1, 9000), rng.randint(1, 40), arrival_step=rng.randint(0, 60))
            for i in range(40)]
    model = DsuModel(p)
    todo = sorted(reqs, key=lambda r: r.arrival_step)
    # Bound: a slot runs within ceil(A / B) rounds of its admission or last run, A being the
    # number of active slots (itself included) at that moment.
    since, bound, k = {}, {}, 0
    while k < len(todo) or not model.idle:
        while k < len(todo) and todo[k].arrival_step <= model.round:
            model.submit(todo[k]); k += 1
        batch = model.step().batch
        active = [s.request for s in model.slots if s is not None]
        for rid in active:
            if rid not in since:
                since[rid], bound[rid] = 0, math.ceil(len(active) / p.max_batch)
            since[rid] += 1
            assert since[rid] <= bound[rid], (rid, since[rid], bound[rid])
        for d in batch:
            since[d.request], bound[d.request] = 0, math.ceil(len(active) / p.max_batch)
        model.complete()
    assert len(model.outcomes) == 40


def test_rollback_then_success_keeps_every_token():
    p = DsuParams("throughput-opt", n_slots=2, max_batch=2, max_retries=2)
    batches, out = run_schedule([RequestSpec(7, 20, 3)], p, faults={(1, 0): ERROR, (2, 0): TIMEOUT})
    assert [d.seq_len for b in batches for d in b] == [21, 22, 22, 22, 23]
    assert out[7].status == "completed" and out[7].tokens == 3


def test_retries_exhausted_reports_failure_and_frees_slot():
    p = DsuParams("latency-opt", n_slots=1, latency_batch=1, max_retries=1)
    reqs = [RequestSpec(0, 5, 10), RequestSpec(1, 5, 2)]
    batches, out = run_schedule(reqs, p, faults={(1, 0): ERROR, (2, 0): ERROR})
    assert out[0].status == "failed" and out[0].reason == "error: retries exhausted" and out[0].tokens == 1
    assert out[1].status == "completed" and out[1].tokens == 2
    assert [d.request for b in batches for d in b] == [0, 0, 0, 1, 1]


def test_kv_budget_fifo_and_too_large():
    p = DsuParams("throughput-opt", n_slots=8, kv_capacity_tokens=100)
    m = DsuModel(p)
    m.submit(RequestSpec(0, 50, 10))     # 60
    m.submit(RequestSpec(1, 150, 1))     # can never fit: failed at once
    m.submit(RequestSpec(2, 40, 10))     # 50: does not fit beside request 0, blocks the FIFO
    m.submit(RequestSpec(3, 5, 5))       # would fit, but waits behind request 2
    assert [d.request for d in m.step().batch] == [0]
    assert m.outcomes[1].status == "failed" and m.outcomes[1].reason == "too large"
    for _ in range(10):
        m.complete()
        batch = m.step().batch
    assert m.outcomes[0].status == "completed"
    assert sorted(d.request for d in batch) == [2, 3]


def test_residency_hint_follows_context_length():
    p = DsuParams(long_context_tokens=4096)
    m = DsuModel(p)
    m.submit(RequestSpec(0, 4094, 3))
    m.submit(RequestSpec(1, 100, 3))
    assert [(d.request, d.seq_len, d.residency) for d in m.step().batch] == [(0, 4095, 0), (1, 101, 0)]
    m.complete()
    assert [(d.request, d.residency) for d in m.step().batch] == [(0, 1), (1, 0)]


@pytest.mark.parametrize("profile", PROFILES)
def test_every_request_accounted_for_under_random_faults(profile):
    rng = random.Random(11)
    p = DsuParams(profile, n_slots=8, max_batch=4, latency_batch=3, kv_capacity_tokens=20000,
                  max_retries=2)
    reqs = [RequestSpec(i, rng.randint(1, 8000), rng.randint(1, 30), rng.randint(0, 100), rng.randint(0, 3))
            for i in range(60)]
    faults = {(rng.randint(0, 600), rng.randint(0, 7)): rng.choice([ERROR, TIMEOUT]) for _ in range(150)}
    batches, out = run_schedule(reqs, p, faults)
    assert set(out) == {r.id for r in reqs}
    by_id = {r.id: r for r in reqs}
    kept = {}
    for rnd, b in enumerate(batches):
        assert len(b) <= p.cap and len({d.slot for d in b}) == len(b)
        for d in b:
            if faults.get((rnd, d.slot)) is None:
                kept[d.request] = kept.get(d.request, 0) + 1
    for rid, o in out.items():
        assert o.tokens == kept.get(rid, 0)
        if o.status == "completed":
            assert o.tokens == by_id[rid].max_new_tokens
        else:
            assert o.reason in ("error: retries exhausted", "timeout: retries exhausted", "too large")


@pytest.mark.parametrize("kwargs,message", [
    (dict(profile="speed-opt"), "profile must be one of"),
    (dict(n_slots=0), "n_slots must be a positive integer"),
    (dict(max_batch=2.5), "max_batch must be a positive integer"),
    (dict(max_retries=-1), "max_retries must be an integer >= 0"),
])
def test_bad_parameters(kwargs, message):
    with pytest.raises(ValueError, match=message):
        DsuParams(**kwargs)


def test_protocol_errors():
    m = DsuModel()
    m.submit(RequestSpec(1, 3, 3))
    with pytest.raises(ValueError, match="submitted twice"):
        m.submit(RequestSpec(1, 3, 3))
    with pytest.raises(ValueError, match=">= 1"):
        m.submit(RequestSpec(2, 0, 3))
    m.step()
    with pytest.raises(RuntimeError, match="complete"):
        m.step()
    with pytest.raises(ValueError, match="slots not in this round"):
        m.complete({5: ERROR})
    with pytest.raises(ValueError, match="must be ok, error or timeout"):
        m.complete({0: "melted"})


def test_round_record_counts_admissions_occupancy_and_a_blocked_head():
    # 3 slots, a KV budget for two requests of 100 + 10 tokens: the third waits at the head
    m = DsuModel(DsuParams("throughput-opt", n_slots=3, max_batch=3, kv_capacity_tokens=220))
    for i in range(3):
        m.submit(RequestSpec(i, prompt_tokens=100, max_new_tokens=10))
    r0 = m.step()
    assert (r0.number, r0.active, r0.admitted, r0.blocked) == (0, 2, 2, True)
    assert [d.request for d in r0.batch] == [0, 1]
    m.complete()
    r1 = m.step()
    assert (r1.number, r1.active, r1.admitted, r1.blocked) == (1, 2, 0, True)
    assert m.occupied_slots == 2
    m.complete({0: ERROR, 1: ERROR})
    for _ in range(2):        # the retries run out: both fail, and the waiting request is admitted
        m.step()
        m.complete({0: ERROR, 1: ERROR})
    r = m.step()
    assert (r.active, r.admitted, r.blocked) == (1, 1, False)
    assert [d.request for d in r.batch] == [2]


# -- duplicate check at scale, and the host takeover (resume) ------------------------------------
def test_duplicate_check_is_constant_time_and_behaviour_unchanged():
    """A set of the ids in the intake or a slot: 60,000 submissions take well under a second
    (the scan over the intake took minutes), and every kind of duplicate is still refused:
    waiting in the intake, admitted into a slot, already ended (completed or too large)."""
    import time
    m = DsuModel(DsuParams("throughput-opt", n_slots=4, kv_capacity_tokens=1000))
    t = time.perf_counter()
    for i in range(60_000):
        m.submit(RequestSpec(i, 10, 2))
    assert time.perf_counter() - t < 2.0
    m.submit(RequestSpec(60_000, 5000, 1))               # too large: fails at admission
    m2 = DsuModel(DsuParams("throughput-opt", n_slots=2, kv_capacity_tokens=1000))
    for i in range(4):
        m2.submit(RequestSpec(i, 10, 1))
    m2.submit(RequestSpec(9, 5000, 1))
    m2.step()                                            # 0, 1 in slots; 2, 3, 9 waiting
    for rid in (0, 1, 2, 3, 9):
        with pytest.raises(ValueError, match="submitted twice"):
            m2.submit(RequestSpec(rid, 10, 1))
    m2.complete()                                        # 0, 1 completed
    m2.step()                                            # 2, 3 admitted, 9 too large
    for rid in (0, 1, 2, 3, 9):
        with pytest.raises(ValueError, match="submitted twice"):
            m2.submit(RequestSpec(rid, 10, 1))
    assert m2.outcomes[9].reason == "too large"
    m2.complete()
    assert m2.idle
    m2.submit(RequestSpec(4, 10, 1))                     # a new id is still accepted


def _records(model):
    """What the host reads over MMIO at a takeover: the occupied slots' records (the KV
    reservation is seq_len + tokens_left) and the outcomes so far."""
    from tricut.models.dsu import Slot
    return {i: Slot(s.request, s.seq_len, s.tokens_left, s.priority, s.arrival_seq,
                    s.checkpoint, s.seq_len + s.tokens_left, s.generated, s.retries, s.wait)
            for i, s in enumerate(model.slots) if s is not None}


@pytest.mark.parametrize("profile", PROFILES)
def test_takeover_at_any_round_continues_the_golden_schedule(profile):
    """The degraded-mode semantics: the firmware stops between two rounds (round 0 included:
    a firmware that never starts, caught by the heartbeat watchdog armed from reset); the
    host rebuilds the model from the slot records and the outcomes (``DsuModel.resume``) and
    schedules the rest. For every takeover round the concatenated schedule and the outcomes
    equal the golden run's."""
    rng = random.Random(7)
    p = DsuParams(profile, n_slots=4, max_batch=3, latency_batch=2, kv_capacity_tokens=300,
                  max_retries=1)
    reqs = [RequestSpec(i, rng.choice([5, 30, 90, 400]), rng.randint(1, 5), rng.randint(0, 8),
                        rng.randint(0, 3)) for i in range(14)]
    faults = {(rng.randint(0, 20), rng.randrange(4)): rng.choice([ERROR, TIMEOUT])
              for _ in range(8)}
    golden, golden_out = run_schedule(reqs, p, faults)
    todo = sorted(reqs, key=lambda r: (r.arrival_step, r.id))
    assert len(golden) > 10
    for stop in range(len(golden) + 1):
        model, k, batches = DsuModel(p), 0, []
        while model.round < stop:                       # the firmware's rounds
            while k < len(todo) and todo[k].arrival_step <= model.round:
                model.submit(todo[k]); k += 1
            batches.append(model.step().batch)
            model.complete({d.slot: faults[(model.round, d.slot)] for d in batches[-1]
                            if (model.round, d.slot) in faults})
        host = DsuModel.resume(p, model.round, _records(model), model.outcomes)
        assert host.arrivals == model.arrivals and host.kv_used == model.kv_used
        taken = {s.request for s in model.slots if s} | set(model.outcomes)
        rest = [r for r in todo if r.id not in taken]   # still in the intake or to come
        k = 0
        while k < len(rest) or not host.idle:
            while k < len(rest) and rest[k].arrival_step <= host.round:
                host.submit(rest[k]); k += 1
            batches.append(host.step().batch)
            host.complete({d.slot: faults[(host.round, d.slot)] for d in batches[-1]
                           if (host.round, d.slot) in faults})
        assert batches == golden, f"takeover at round {stop}"
        assert host.outcomes == golden_out, f"takeover at round {stop}"
    fresh = DsuModel.resume(p, 0, {})
    assert fresh.round == 0 and fresh.idle and fresh.arrivals == 0


def test_resume_rejects_inconsistent_records():
    from tricut.models.dsu import Outcome, Slot
    p = DsuParams(n_slots=2)
    s = Slot(1, 10, 2, 0, 0, 10, 12)
    with pytest.raises(ValueError, match="slot 5 out of range"):
        DsuModel.resume(p, 3, {5: s})
    with pytest.raises(ValueError, match="request 1 held twice"):
        DsuModel.resume(p, 3, {0: s, 1: s})
    with pytest.raises(ValueError, match="request 1 held twice"):
        DsuModel.resume(p, 3, {0: s}, {1: Outcome(1, "completed", 2)})
    m = DsuModel.resume(p, 3, {1: s})
    with pytest.raises(ValueError, match="submitted twice"):
        m.submit(RequestSpec(1, 4, 1))
