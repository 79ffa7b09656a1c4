"""The stream-driver vocabulary (``sim/harness/streams.py``): schedule modes, the idle x
backpressure matrix, Source / Sink / MemoryModel protocol rules, the drained check (it must be
able to fail), and the DSU cluster's bench under the whole matrix on Verilator (the TE and
CDU benches run it in tests/test_te*.py and tests/test_cdu_*.py)."""

import itertools
import random

import pytest

from tricut.sim.harness.streams import (IDLE_BACKPRESSURE, MODES, PERIODIC, RANDOM_P,
                                        MemoryModel, NotDrained, Schedule, Sink, Source,
                                        assert_drained, drained, matrix_id, stream_rng)


# -- schedules ----------------------------------------------------------------------------------
def bits(schedule, n, seed=0):
    g = Schedule.of(schedule).gate(random.Random(seed))
    return [g() for _ in range(n)]


def test_none_is_always_active_and_draws_nothing():
    rng = random.Random(1)
    state = rng.getstate()
    g = Schedule("none").gate(rng)
    assert [g() for _ in range(100)] == [1] * 100
    assert rng.getstate() == state
    assert Schedule().duty == 1.0 and str(Schedule()) == "none"


def test_random_is_seeded_and_has_its_duty():
    a, b = bits("random", 20000, seed=3), bits("random", 20000, seed=3)
    assert a == b and a != bits("random", 20000, seed=4)
    assert abs(sum(a) / len(a) - RANDOM_P) < 0.015
    low = bits(Schedule("random", p=0.2), 20000)
    assert abs(sum(low) / len(low) - 0.2) < 0.015
    assert bits(Schedule("random", p=1), 500) == [1] * 500
    # runs of both values occur (not a degenerate pattern)
    assert max(len(list(g)) for k, g in itertools.groupby(a) if k == 0) >= 3


def test_periodic_repeats_its_pattern_exactly():
    assert bits("periodic", 12) == list(PERIODIC) * 3 == [1, 1, 1, 0] * 3
    assert bits(Schedule("periodic", pattern=[0, 1]), 5) == [0, 1, 0, 1, 0]
    # cocotbext-axi's pause generator itertools.cycle([1, 1, 1, 0]) is our complement
    pause = itertools.cycle([1, 1, 1, 0])
    s = Schedule("periodic", pattern=[1 - next(pause) for _ in range(4)])
    assert bits(s, 8) == [0, 0, 0, 1] * 2 and s.duty == 0.25
    rng = random.Random(2)
    state = rng.getstate()
    g = Schedule("periodic").gate(rng)
    [g() for _ in range(50)]
    assert rng.getstate() == state


def test_schedule_specs_and_errors():
    assert Schedule.of(None) == Schedule() == Schedule.of("none") == Schedule.of(1)
    assert Schedule.of(0.6) == Schedule("random", p=0.6)
    s = Schedule("periodic", pattern=(1, 0, 1))
    assert Schedule.of(s.to_json()) == s and Schedule.of(s) is s
    assert str(s) == "periodic(101)" and str(Schedule("random", p=0.5)) == "random(p=0.5)"
    for bad, msg in [("sometimes", "mode must be one of none, random, periodic"),
                     (0, r"p must be in \(0, 1\]"), (1.5, r"p must be in \(0, 1\]"),
                     ([1], "not a schedule")]:
        with pytest.raises(ValueError, match=msg):
            Schedule.of(bad)
    with pytest.raises(ValueError, match="at least one 1"):
        Schedule("periodic", pattern=(0, 0))
    with pytest.raises(ValueError, match="0/1 values"):
        Schedule("periodic", pattern=(1, 2))


def test_the_matrix_is_every_pair_of_modes():
    assert MODES == ("none", "random", "periodic")
    assert len(IDLE_BACKPRESSURE) == len(set(IDLE_BACKPRESSURE)) == 9
    assert set(IDLE_BACKPRESSURE) == set(itertools.product(MODES, MODES))
    assert IDLE_BACKPRESSURE[0] == ("none", "none")
    assert matrix_id(("random", "periodic")) == "idle=random-bp=periodic"


def test_stream_rngs_are_independent_and_reproducible():
    assert stream_rng(5, "q").random() == stream_rng(5, "q").random()
    assert stream_rng(5, "q").random() != stream_rng(5, "kv").random()
    assert stream_rng(5, "q").random() != stream_rng(6, "q").random()


# -- drivers against a small Python design ------------------------------------------------------
class Fifo:
    """A 2-deep FIFO design in plain Python: in.ready while not full; out.valid while not
    empty; both transfers at the edge."""

    def __init__(self, depth=2):
        self.q, self.depth = [], depth

    def run(self, src, snk, max_cycles=10_000, check=None):
        cycle = 0
        while not (src.done and not self.q) or snk.in_flight:
            assert cycle < max_cycles, drained(src, snk)
            valid, payload = src.drive()
            snk.drive()
            in_ready = len(self.q) < self.depth
            out_valid = bool(self.q)
            if check:
                check(valid, payload, in_ready)
            head = self.q[0] if self.q else None
            took = snk.sample(out_valid, head)
            if src.sample(in_ready):
                self.q.append(payload)
            if took:
                self.q.pop(0)
            cycle += 1
        # a few more cycles: nothing may come out
        for _ in range(4):
            snk.drive()
            snk.sample(bool(self.q), None)
        return cycle


@pytest.mark.parametrize("idle,backpressure", IDLE_BACKPRESSURE,
                         ids=[matrix_id(p) for p in IDLE_BACKPRESSURE])
def test_source_and_sink_through_a_fifo_under_the_matrix(idle, backpressure):
    beats = list(range(100, 160))
    src = Source("in", beats, idle, seed=1)
    snk = Sink("out", backpressure, seed=1, expect=beats)
    held = {}

    def check(valid, payload, ready):
        # valid never drops and the payload never changes before the beat transferred
        if held.get("beat") is not None:
            assert valid and payload == held["beat"], (valid, payload, held)
        held["beat"] = payload if valid and not ready else None

    cycles = Fifo().run(src, snk, check=check)
    assert snk.beats == beats
    assert_drained(src, snk)
    if (idle, backpressure) == ("none", "none"):
        assert cycles == len(beats) + 1        # one beat per cycle, one cycle of latency
    else:
        assert cycles > len(beats) + 1


def test_source_offers_on_the_idle_schedule_and_holds_until_taken():
    src = Source("s", ["a", "b", "c"], Schedule("periodic", pattern=(0, 1)))
    seen = []
    for ready in (1, 0, 0, 1, 1, 1, 1, 1):
        v, p = src.drive()
        seen.append((v, p))
        src.sample(ready)
    # cycle 0 idle (nothing driven yet); 1 offers "a", not ready at 1, 2: held; taken at 3;
    # idle at 4 (pattern 0) with the payload kept; "b" at 5 taken; idle 6; "c" at 7
    assert seen == [(0, None), (1, "a"), (1, "a"), (1, "a"), (0, "a"), (1, "b"), (0, "b"),
                    (1, "c")]
    assert src.done and drained(src) == []


def test_sink_records_only_transfers_and_reads_payload_lazily():
    snk = Sink("k", Schedule("periodic", pattern=(1, 0)))
    reads = []

    def payload(x):
        return lambda: reads.append(x) or x
    for n in range(6):
        ready = snk.drive()
        assert ready == (1 - n % 2)
        snk.sample(1, payload(n))
    assert snk.beats == [0, 2, 4] and reads == [0, 2, 4]
    assert snk.in_flight                      # beat 5 valid, not ready on the last cycle
    with pytest.raises(NotDrained, match="k: a beat valid and not taken"):
        assert_drained(snk)


def test_memory_model_answers_out_of_order_within_latency_and_holds():
    orders = set()
    for seed in range(5):
        mem = MemoryModel(random.Random(seed), max_latency=8, name="hbm")
        for rid in range(4):
            mem.request(0, rid, tag=("t", rid))
        order, offered, now = [], None, 0
        while not mem.idle:
            r = mem.drive(now)
            if offered is not None:
                assert r == offered               # held until taken
            assert r is None or now >= 1          # latency >= 1
            ready = now % 3 != 0                  # the design refuses every third cycle
            if mem.sample(ready):
                order.append(r[0])
                offered = None
            else:
                offered = r
            now += 1
            assert now < 100
        assert sorted(order) == [0, 1, 2, 3] and mem.answered == 4 and drained(mem) == []
        orders.add(tuple(order))
    assert len(orders) > 1 and orders != {(0, 1, 2, 3)}    # out of order, seed-dependent


def test_memory_model_due_order_errors_and_attempts():
    mem = MemoryModel(random.Random(1), max_latency=1, order="due",
                      err=lambda tag, a: tag == "bad" and a < 1)
    mem.request(0, 2, "ok")
    mem.request(0, 1, "bad")
    got = []
    for now in range(1, 4):
        r = mem.drive(now)
        if r is not None:
            got.append(r)
        mem.sample(1)
    assert got == [(1, 1), (2, 0)] and mem.errors == 1
    mem.request(5, 1, "bad", retry=True)        # attempt 1: no error any more
    assert mem.drive(6) == (1, 0) and mem.sample(1)
    with pytest.raises(ValueError, match="order"):
        MemoryModel(random.Random(), order="lifo")


# -- the drained check can fail -----------------------------------------------------------------
def test_drained_check_fails_when_a_beat_is_left_behind():
    src = Source("desc", [1, 2, 3])
    snk = Sink("out", expect=3)
    for _ in range(2):                        # the design takes two beats, passes them on
        v, p = src.drive()
        snk.drive()
        src.sample(1)
        snk.sample(v, p)
    assert drained(snk) == ["out: 2 beats received, 3 expected"]
    with pytest.raises(NotDrained, match=r"^bench not drained: desc: 1 of 3 beats not sent"):
        assert_drained(src, snk)
    v, p = src.drive()                        # the last beat offered, never taken
    with pytest.raises(NotDrained, match="desc: beat 2 valid and never taken"):
        assert_drained({"inputs": [src]}, where="bench")
    src.sample(1)
    snk.drive()
    snk.sample(v, p)
    assert_drained(src, snk)                  # now everything is where it should be
    snk.expect = [1, 2, 4]
    with pytest.raises(NotDrained, match="first difference at beat 2"):
        assert_drained(src, snk)


def test_drained_check_fails_on_a_memory_request_never_answered():
    mem = MemoryModel(random.Random(0), max_latency=3, name="hbm_resp")
    mem.request(0, 1)
    with pytest.raises(NotDrained, match="hbm_resp: 1 requests never answered"):
        assert_drained(mem)
    assert mem.drive(10) == (1, 0)
    with pytest.raises(NotDrained, match=r"hbm_resp: answer \(1, 0\) valid and never taken"):
        assert_drained(mem)
    mem.sample(1)
    assert_drained(mem)


def test_dsu_env_reports_streams_not_drained():
    """The DSU environment's end-of-run check: a request never pushed and its outcome never
    received are differences of the run (no simulation needed to see them)."""
    from dataclasses import asdict

    from tricut.models.dsu import DsuParams, RequestSpec
    from tricut.sim.harness.dsu import DsuEnv, stream_schedules

    spec = {"cores": 1, "n_slots": 4, "params": asdict(DsuParams(n_slots=4)),
            "requests": [asdict(RequestSpec(0, 4, 2))], "step_faults": [], "hang": None,
            "max_cycles": 10, "seed": 0, "backpressure": True,
            "streams": stream_schedules("periodic", "random"), "symbols": {}, "image": [],
            "dump": {}}
    env = DsuEnv(spec)
    assert env.intake.gate.schedule == Schedule("periodic")
    assert env.desc_sink.gate.schedule == Schedule("random")
    errors = env.result()[2]
    assert "intake: 1 of 1 beats not sent" in errors
    assert "outcomes: 0 beats received, 1 expected" in errors


def test_dsu_stream_schedules_keep_the_legacy_meaning():
    from tricut.sim.harness.dsu import stream_schedules

    legacy = stream_schedules()                       # run_dsu(backpressure=True)
    assert Schedule.of(legacy["descriptors"]) == Schedule("random", p=0.75)
    assert Schedule.of(legacy["completions"]) == Schedule("random", p=0.8)
    assert Schedule.of(legacy["intake"]) == Schedule.of(legacy["outcomes"]) == Schedule()
    assert all(Schedule.of(v) == Schedule() for v in stream_schedules(None, False).values())
    both = stream_schedules("periodic", "random")
    assert Schedule.of(both["intake"]) == Schedule.of(both["completions"]) == Schedule("periodic")
    assert Schedule.of(both["descriptors"]) == Schedule.of(both["outcomes"]) == Schedule("random")


def test_streams_module_is_simulator_agnostic():
    import ast
    from pathlib import Path

    import tricut.sim.harness.streams as S
    tree = ast.parse(Path(S.__file__).read_text())
    names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert not {m for m in names if m.split(".")[0] in ("amaranth", "cocotb")}, names


# -- DSU cluster under the matrix (Verilator: one build, one cocotb test) -----------------------
def test_dsu_cluster_idle_backpressure_matrix_on_verilator():
    """The scheduler firmware on the cluster under every (idle: request source and
    completions, backpressure: descriptor and outcome sinks) pair, one simulation with the
    cluster reset between runs: every round's batch and every outcome == the golden model,
    an error fault rolled back, and every stream drained (a leftover is a difference)."""
    from tricut.models.dsu import RequestSpec
    from tricut.sim.harness.dsu import run_dsu

    rng = random.Random(8)
    reqs = [RequestSpec(i, rng.choice([3, 12, 40, 90]), rng.randint(1, 3),
                        arrival_step=rng.randint(0, 3), priority=rng.randint(0, 3))
            for i in range(6)]
    runs = run_dsu(reqs, "throughput-opt", cores=1, sim="verilator", n_slots=8, max_batch=3,
                   latency_batch=2, kv_capacity_tokens=300, faults="error:slot=1:step=1",
                   seed=3, matrix=IDLE_BACKPRESSURE)
    assert list(runs) == IDLE_BACKPRESSURE
    cycles = {}
    for pair, res in runs.items():
        assert res.differences == [], (pair, res.differences[:3])
        assert res.counters["rollbacks"] == 1, pair
        cycles[pair] = res.cycles
    assert cycles[("none", "none")] < max(cycles.values())
