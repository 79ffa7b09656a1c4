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


# -- parked slots: agentic sessions (issue 16) ----------------------------------------------------
from tricut.models.dsu import PARK_POLICIES, Move, Session, SessionTurn, run_sessions  # noqa: E402


def _turn_end(m, request, rounds=50):
    """Run rounds until ``request``'s turn ends; returns every batch seen."""
    seen = []
    for _ in range(rounds):
        seen.append(m.step().batch)
        if any(o.request == request for o in m.complete()):
            return seen
    raise AssertionError("turn did not end")


def test_keep_parks_in_hbm_and_continue_resumes():
    m = DsuModel(DsuParams("throughput-opt", n_slots=2, kv_capacity_tokens=100, park_policy="keep"))
    m.submit(RequestSpec(5, 10, 3, continues=True))
    _turn_end(m, 5)
    s = m.slots[0]
    assert m.outcomes[5].status == "completed" and m.outcomes[5].tokens == 3
    assert (s.state, s.kv_where, s.seq_len, s.reserved, m.kv_used) == ("parked", "hbm", 13, 13, 13)
    assert m.drain_moves() == []
    for _ in range(3):                       # parked: never batched, its wait does not grow
        r = m.step()
        assert r.batch == [] and r.parked == 1 and r.active == 1
        m.complete()
    assert s.wait == 0 and not m.idle
    m.continue_turn(5, new_tokens=7, max_new_tokens=2)
    r = m.step()
    assert (r.continued, r.parked) == (1, 0)
    assert [(d.request, d.seq_len) for d in r.batch] == [(5, 21)]      # 13 + 7 + this step's token
    assert m.kv_used == 13 + 7 + 2 and s.state == "active" and s.generated == 0
    m.complete()
    m.step()
    out = m.complete()
    assert out[0].status == "completed" and out[0].tokens == 2
    assert m.idle and m.kv_used == 0 and m.drain_moves() == []


@pytest.mark.parametrize("policy", ["park", "park-early"])
def test_park_moves_kv_to_g2_and_restore_brings_it_back(policy):
    m = DsuModel(DsuParams("throughput-opt", n_slots=2, kv_capacity_tokens=100, park_policy=policy))
    m.submit(RequestSpec(1, 10, 2, continues=True))
    _turn_end(m, 1)                          # ends in round 1
    s = m.slots[0]
    assert (s.state, s.kv_where, s.reserved, m.kv_used) == ("parked", "g2", 0, 0)
    assert m.drain_moves() == [Move(1, 1, "park", 12, 0)]
    m.continue_turn(1, 4, 3, continues=True)  # before its restore: waits
    r = m.step()
    assert (r.batch, r.restored, r.continued) == ([], 0, 0)
    m.complete()
    m.restore(1)
    r = m.step()                             # restore then continue, in the same round
    assert (r.restored, r.continued) == (1, 1)
    assert m.drain_moves() == [Move(3, 1, "restore", 12, 0)]
    assert [(d.request, d.seq_len) for d in r.batch] == [(1, 17)]
    assert m.kv_used == 12 + 4 + 3
    m.complete()
    _turn_end(m, 1)                          # the second turn parks again (continues=True)
    assert m.kv_used == 0 and m.drain_moves() == [Move(5, 1, "park", 19, 0)]
    m.restore(1)
    m.continue_turn(1, 1, 1)                 # the last turn
    _turn_end(m, 1)
    assert m.idle and m.kv_used == 0
    assert [mv.kind for mv in m.drain_moves()] == ["restore"]


def test_drop_frees_the_slot_and_the_next_turn_is_a_new_request():
    m = DsuModel(DsuParams("throughput-opt", n_slots=1, kv_capacity_tokens=100, park_policy="drop"))
    m.submit(RequestSpec(1, 10, 2, continues=True))
    _turn_end(m, 1)
    assert m.idle and m.kv_used == 0 and m.outcomes[1].status == "completed"
    assert m.drain_moves() == [Move(1, 1, "drop", 12, 0)]
    with pytest.raises(ValueError, match="park policy drop"):
        m.continue_turn(1, 3, 3)
    with pytest.raises(ValueError, match="park policy drop"):
        m.restore(1)
    m.submit(RequestSpec(2, 12 + 3, 3))      # recompute: the whole context as the prompt
    assert [d.seq_len for d in m.step().batch] == [16]


def test_every_slot_parked_blocks_the_intake_and_runs_nothing():
    m = DsuModel(DsuParams("fairness-opt", n_slots=2, max_batch=2, kv_capacity_tokens=1000,
                           park_policy="park"))
    m.submit(RequestSpec(0, 10, 1, continues=True))
    m.submit(RequestSpec(1, 20, 1, continues=True))
    m.step(); m.complete()
    m.submit(RequestSpec(2, 5, 1))
    r = m.step()
    assert (r.batch, r.parked, r.active, r.admitted, r.blocked) == ([], 2, 2, 0, True)
    m.complete()
    m.restore(1); m.continue_turn(1, 1, 1)
    m.restore(0)
    r = m.step()
    assert (r.restored, r.continued, r.parked) == (2, 1, 1)
    assert [d.request for d in r.batch] == [1]
    m.complete()                             # request 1 ends: its slot frees, 2 is admitted
    r = m.step()
    assert r.admitted == 1 and [d.request for d in r.batch] == [2]


def test_restore_and_continue_queues_are_strict_fifo():
    # capacity 100: session 0 parks 60 tokens, session 1 parks 30; a plain request holds 50
    m = DsuModel(DsuParams("throughput-opt", n_slots=4, kv_capacity_tokens=100, park_policy="park"))
    m.submit(RequestSpec(0, 59, 1, continues=True))
    m.submit(RequestSpec(1, 29, 1, continues=True))
    m.step(); m.complete()
    assert m.kv_used == 0 and m.parked_slots == 2
    m.submit(RequestSpec(2, 40, 10))
    m.step(); m.complete()                   # 2 holds 50
    m.restore(0)                             # 60 does not fit beside 50: blocks
    m.restore(1)                             # 30 would fit, but waits behind 0
    for _ in range(9):
        r = m.step()
        assert r.restored == 0 and m.kv_used == 50
        m.complete()
    assert m.idle is False and m.outcomes[2].status == "completed"
    r = m.step()                             # 2 freed its 50: both restores fit now
    assert r.restored == 2 and m.kv_used == 90
    m.complete()
    # the continue queue: 0's continue needs 60 + 30 more > 100 - 90: it blocks 1's
    m.continue_turn(0, 20, 10)
    m.continue_turn(1, 1, 1)
    r = m.step()
    assert r.continued == 0
    m.complete()
    assert [mv.kind for mv in m.drain_moves()] == ["park", "park", "restore", "restore"]


def test_a_continue_that_can_never_fit_fails_and_drops_its_kv():
    m = DsuModel(DsuParams("throughput-opt", n_slots=2, kv_capacity_tokens=50, park_policy="keep"))
    m.submit(RequestSpec(3, 20, 5, continues=True))
    _turn_end(m, 3)
    m.drain_moves()
    m.continue_turn(3, 20, 6)                # 25 + 26 > 50
    r = m.step()
    assert [(o.request, o.status, o.reason) for o in r.ended] == [(3, "failed", "too large")]
    assert m.outcomes[3].status == "failed" and m.idle and m.kv_used == 0
    assert [mv.kind for mv in m.drain_moves()] == ["drop"]


def test_session_command_errors():
    m = DsuModel(DsuParams(n_slots=2, park_policy="keep"))
    m.submit(RequestSpec(1, 10, 2, continues=True))
    with pytest.raises(ValueError, match="continue 9: no slot holds this request"):
        m.continue_turn(9, 1, 1)
    m.step()
    with pytest.raises(ValueError, match="continue 1: its slot is not parked"):
        m.continue_turn(1, 1, 1)
    m.complete(); m.step(); m.complete()
    with pytest.raises(ValueError, match="restore 1: its KV is not in G2"):
        m.restore(1)                          # keep: the KV never left HBM
    with pytest.raises(ValueError, match="max_new_tokens >= 1"):
        m.continue_turn(1, 1, 0)
    m.continue_turn(1, 1, 1)
    with pytest.raises(ValueError, match="already queued"):
        m.continue_turn(1, 1, 1)
    with pytest.raises(ValueError, match="submitted twice"):
        m.submit(RequestSpec(1, 1, 1))        # a parked session's id is still live
    with pytest.raises(ValueError, match="park_policy must be one of"):
        DsuParams(park_policy="evict")
    p = DsuModel(DsuParams(n_slots=1, park_policy="park"))
    p.submit(RequestSpec(1, 10, 1, continues=True))
    p.step(); p.complete()
    p.restore(1)
    with pytest.raises(ValueError, match="already queued"):
        p.restore(1)


@pytest.mark.parametrize("policy", PARK_POLICIES)
def test_without_sessions_every_policy_is_the_golden_schedule(policy):
    rng = random.Random(3)
    reqs = [RequestSpec(i, rng.randint(1, 3000), rng.randint(1, 20), rng.randint(0, 40), rng.randint(0, 3))
            for i in range(30)]
    faults = {(rng.randint(0, 200), rng.randrange(6)): rng.choice([ERROR, TIMEOUT]) for _ in range(20)}
    p = DsuParams("fairness-opt", n_slots=6, max_batch=3, kv_capacity_tokens=9000)
    golden, out = run_schedule(reqs, p, faults)
    batches, ended, moves, host = run_sessions(reqs, [], DsuParams(**{**p.__dict__, "park_policy": policy}),
                                               faults)
    assert batches == golden and {o.request: o for o in ended} == out
    assert moves == [] and host == []


def _random_sessions(rng, n, id0=100):
    return [Session(RequestSpec(id0 + i, rng.randint(1, 400), rng.randint(1, 8), rng.randint(0, 30),
                                rng.randint(0, 3)),
                    tuple(SessionTurn(rng.randint(1, 12), rng.randint(0, 200), rng.randint(1, 8))
                          for _ in range(rng.randint(0, 4))))
            for i in range(n)]


@pytest.mark.parametrize("policy", PARK_POLICIES)
@pytest.mark.parametrize("profile", PROFILES)
def test_random_sessions_budget_and_nothing_lost(policy, profile, monkeypatch):
    rng = random.Random(10 * PARK_POLICIES.index(policy) + PROFILES.index(profile))
    p = DsuParams(profile, n_slots=6, max_batch=4, latency_batch=3, kv_capacity_tokens=2500,
                  park_policy=policy)
    reqs = [RequestSpec(i, rng.randint(1, 600), rng.randint(1, 10), rng.randint(0, 40)) for i in range(12)]
    sessions = _random_sessions(rng, 10)
    faults = {(rng.randint(0, 300), rng.randrange(6)): rng.choice([ERROR, TIMEOUT]) for _ in range(10)}
    select = DsuModel._select

    def checked_select(model):               # a parked slot is never selected
        chosen = select(model)
        assert all(model.slots[i].state == "active" for i in chosen)
        return chosen
    monkeypatch.setattr(DsuModel, "_select", checked_select)
    final = {}

    def check(model, rnd):                   # the KV budget, after every round
        assert 0 <= model.kv_used <= p.kv_capacity_tokens
        assert sum(s.reserved for s in model.slots if s is not None) == model.kv_used
        for s in model.slots:
            if s is not None and s.kv_where == "g2":
                assert s.state == "parked" and s.reserved == 0
        final["model"] = model

    batches, ended, moves, host = run_sessions(reqs, sessions, p, faults, lead=3, on_round=check)
    model = final["model"]
    assert model.idle and model.kv_used == 0 and not model.restores and not model.continues
    failed = [o for o in ended if o.status == "failed"]
    n_turns = sum(1 + len(s.turns) for s in sessions) + len(reqs)
    if not failed:                           # every turn of every session ended, once
        assert len(ended) == n_turns
    assert sum(o.tokens for o in ended) == sum(
        1 for rnd, b in enumerate(batches) for d in b if (rnd, d.slot) not in faults)
    # KV: every parked KV is restored (or dropped), never lost
    kinds = [m.kind for m in moves]
    parked = [(m.request, m.tokens) for m in moves if m.kind == "park"]
    restored = [(m.request, m.tokens) for m in moves if m.kind == "restore"]
    if policy in ("park", "park-early"):
        assert sorted(parked) == sorted(restored) and parked
    elif policy == "keep":
        assert set(kinds) <= {"drop"}
    else:
        assert set(kinds) == {"drop"}
        assert len(kinds) == sum(len(s.turns) for s in sessions) or failed


def test_park_early_restores_before_the_tool_returns():
    sess = [Session(RequestSpec(0, 10, 2), (SessionTurn(6, 5, 2),))]
    p = DsuParams(n_slots=2, park_policy="park-early")
    _, ended, moves, host = run_sessions([], sess, p, lead=4)
    assert [(h[0], h[1]) for h in host] == [(3, "restore"), (7, "continue")]   # turn ends round 1
    assert [(m.round, m.kind) for m in moves] == [(1, "park"), (3, "restore")]
    _, ended2, moves2, host2 = run_sessions([], sess, DsuParams(n_slots=2, park_policy="park"))
    assert [(h[0], h[1]) for h in host2] == [(7, "restore"), (7, "continue")]
    assert [o.tokens for o in ended] == [o.tokens for o in ended2] == [2, 2]


@pytest.mark.parametrize("policy", ["keep", "park"])
def test_fairness_bound_holds_with_parked_slots(policy, monkeypatch):
    """A parked slot is out of the active set (its wait does not grow) and a continue is a
    re-admission, so the no-starvation bound of fairness-opt is unchanged."""
    rng = random.Random(5)
    p = DsuParams("fairness-opt", n_slots=8, max_batch=3, kv_capacity_tokens=100_000,
                  park_policy=policy)
    reqs = [RequestSpec(i, rng.randint(1, 900), rng.randint(1, 20), rng.randint(0, 40)) for i in range(15)]
    sessions = _random_sessions(rng, 8)
    since, bound = {}, {}
    step = DsuModel.step

    def checked_step(model):
        r = step(model)
        active = [s.request for s in model.slots if s is not None and s.state == "active"]
        for rid in list(since):
            if rid not in active:
                del since[rid]                 # ended or parked: a continue starts afresh
        for rid in active:
            if rid not in since:
                since[rid], bound[rid] = 0, math.ceil(len(active) / p.max_batch)
            since[rid] += 1
            assert since[rid] <= bound[rid], (rid, since[rid], bound[rid])
        for d in r.batch:
            since[d.request], bound[d.request] = 0, math.ceil(len(active) / p.max_batch)
        return r
    monkeypatch.setattr(DsuModel, "step", checked_step)
    batches, ended, moves, host = run_sessions(reqs, sessions, p)
    assert len(ended) == len(reqs) + sum(1 + len(s.turns) for s in sessions)


def test_resume_keeps_parked_slots_and_queued_commands():
    from tricut.models.dsu import Slot
    p = DsuParams(n_slots=2, kv_capacity_tokens=100, park_policy="park")
    m = DsuModel(p)
    m.submit(RequestSpec(1, 10, 1, continues=True))
    m.step(); m.complete()
    m.restore(1)
    m.continue_turn(1, 2, 2)
    s = m.slots[0]
    rec = Slot(s.request, s.seq_len, s.tokens_left, s.priority, s.arrival_seq, s.checkpoint,
               s.reserved, s.generated, s.retries, s.wait, s.continues, s.state, s.kv_where)
    host = DsuModel.resume(p, m.round, {0: rec}, m.outcomes, m.arrivals, restores=m.restores,
                           continues=m.continues)
    assert host.kv_used == 0 and host.parked_slots == 1
    for model in (m, host):
        r = model.step()
        assert (r.restored, r.continued, [d.seq_len for d in r.batch]) == (1, 1, [14])
        model.complete(); model.step(); model.complete()
        assert model.idle and model.kv_used == 0
    assert host.outcomes == m.outcomes and not host.continues and not host.restores
