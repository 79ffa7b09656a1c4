"""Prefill modes (disaggregated, colocated, chunked) and closed-loop clients in the fast system
model (sim/fast/system.py), checked against step and prefill times computed by hand from the
StepModel's own methods."""

import math

import numpy as np
import pytest

from tricut.models.config import load_gpu, load_model
from tricut.models.dsu import DsuParams
from tricut.sim.fast.stacks import get_stack
from tricut.sim.fast.system import simulate
from tricut.sim.fast.timing import StepModel
from tricut.sim.fast.workload import Request, synthetic

H100 = load_gpu("h100-sxm5")
TINY = load_model("tiny")
DSU = DsuParams(n_slots=8, max_batch=8)
PROFILE = DSU.profile


def step_model(**stack_values) -> StepModel:
    """The tiny model without cuts (host scheduling) on a jitter-free vllm-v0 stack."""
    return StepModel(TINY, H100, stack=get_stack("vllm-v0").with_values(host_jitter_s=0.0, **stack_values))


def step(sm, seq_lens, active, admitted, prefill_tokens=0, prefill_context=0):
    """The time of one round's step as simulate() asks for it (nothing retired, nothing blocked)."""
    rng = np.random.default_rng(0)
    return sm.step_time(seq_lens, [0] * len(seq_lens), rng, False, active, DSU.cap, PROFILE, admitted, 0,
                        False, DSU.n_slots, prefill_tokens=prefill_tokens,
                        prefill_context=prefill_context).time_s


def tokens_of(result, arrival):
    """Token times of the finished request that arrived at ``arrival`` (unique in these tests)."""
    found = [r.token_times_s for r in result.request_times if r.arrival_s == arrival]
    assert len(found) == 1
    return found[0]


# -- closed loop -------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["disaggregated", "colocated", "chunked"])
def test_closed_loop_keeps_exactly_c_requests_in_flight(mode):
    # arrival times far in the future: a closed loop ignores them
    reqs = [Request(i, 100.0 + i, 20 + 37 * i % 300, 1 + 7 * i % 12) for i in range(20)]
    assert any(r.output_tokens == 1 for r in reqs)
    r = simulate(reqs, step_model(), DSU, prefill=mode, concurrency=3, client_jitter=False)
    sent, done = r.arrival_s, r.finish_s
    assert len(sent) == len(done) == 20 and r.summary["failed"] == 0
    assert r.summary["concurrency"] == 3 and r.summary["prefill_mode"] == mode
    # three clients start at t=0; every later request is sent the moment one finishes, in pool order
    assert [sent[i] for i in range(3)] == [0.0] * 3
    assert sorted(sent.values())[3:] == sorted(done.values())[:17]
    assert [i for i in sorted(sent, key=lambda i: (sent[i], i))] == list(range(20))
    last_send = max(sent.values())
    assert last_send < 100.0                              # the trace's times played no part
    checks = 0
    for t in sorted(set(r.step_end_s) | set(sent.values()) | set(done.values())):
        in_flight = sum(1 for i in sent if sent[i] <= t < done[i])
        if t < last_send:
            assert in_flight == 3, (t, in_flight)
            checks += 1
        else:
            assert in_flight == sum(1 for i in done if done[i] > t) <= 3
    assert checks > 20
    # TTFT counts from the actual send time
    assert sorted(x.arrival_s for x in r.request_times) == sorted(sent.values())
    assert r.summary["duration_s"] == pytest.approx(max(done.values()))


def test_think_time_delays_each_next_request():
    reqs = synthetic(12, math.inf, prompt=("uniform", 16, 200), output=("uniform", 1, 10), seed=5)
    think = 0.004
    r = simulate(reqs, step_model(), DSU, prefill="colocated", concurrency=2, think_s=think,
                 client_jitter=False)
    sent, done = r.arrival_s, r.finish_s
    assert [sent[0], sent[1]] == [0.0, 0.0]
    assert sorted(sent.values())[2:] == [f + think for f in sorted(done.values())[:10]]
    for t in sorted(set(sent.values()) | set(done.values())):
        assert sum(1 for i in sent if sent[i] <= t < done[i]) <= 2
    assert r.summary["think_s"] == think


def test_open_loop_uses_the_arrival_times():
    reqs = synthetic(10, 30.0, prompt=64, output=5, seed=1)
    for mode in ("disaggregated", "colocated", "chunked"):
        r = simulate(reqs, step_model(), DSU, prefill=mode)
        assert r.arrival_s == {q.id: q.arrival_s for q in reqs}
        assert r.summary["concurrency"] is None and r.summary["output_tokens"] == 50


def test_more_clients_than_requests_sends_them_all_at_once():
    reqs = synthetic(4, 1.0, prompt=64, output=5, seed=1)
    r = simulate(reqs, step_model(), DSU, prefill="disaggregated", concurrency=10,
                 client_jitter=False)
    assert set(r.arrival_s.values()) == {0.0}


# -- colocated ---------------------------------------------------------------------------------
def test_colocated_prefill_preempts_the_next_decode_step_by_its_duration():
    sm = step_model()
    pa, pb = 100, 300
    a = Request(0, 0.0, pa, 20)
    alone = simulate([a], sm, DSU, prefill="colocated")
    ends = alone.step_end_s
    # A's own prefill batch, then one decode step per remaining token
    prefill_a = sm.prefill_batch_time([pa])
    assert tokens_of(alone, 0.0)[0] == prefill_a
    assert ends[0] == pytest.approx(prefill_a + step(sm, [pa + 2], 1, 1), rel=1e-12)
    assert ends[1] - ends[0] == pytest.approx(step(sm, [pa + 3], 1, 0), rel=1e-12)
    # B (one output token) arrives during step 5: its prefill runs when that step ends, and
    # every later decode step of A ends exactly prefill_batch_time([pb]) later
    arrive = (ends[4] + ends[5]) / 2
    both = simulate([a, Request(1, arrive, pb, 1)], sm, DSU, prefill="colocated")
    prefill_b = sm.prefill_batch_time([pb])
    assert np.array_equal(both.step_end_s[:6], ends[:6])
    assert both.step_end_s[6:] == pytest.approx(ends[6:] + prefill_b, rel=1e-12, abs=0)
    assert tokens_of(both, arrive) == (ends[5] + prefill_b,)
    assert both.summary["prefill_s_total"] == pytest.approx(prefill_a + prefill_b, rel=1e-12)
    assert alone.summary["prefill_s_total"] == prefill_a


def test_colocated_request_joins_the_batch_after_its_prefill():
    sm = step_model()
    pa, pb = 100, 300
    a = Request(0, 0.0, pa, 20)
    ends = simulate([a], sm, DSU, prefill="colocated").step_end_s
    arrive = (ends[4] + ends[5]) / 2
    both = simulate([a, Request(1, arrive, pb, 4)], sm, DSU, prefill="colocated")
    first_b = ends[5] + sm.prefill_batch_time([pb])
    # step 6 decodes A (its 8th decode token) and B (its 2nd token) together
    step6 = step(sm, [pa + 8, pb + 2], 2, 1)
    assert tokens_of(both, arrive)[:2] == pytest.approx((first_b, first_b + step6), rel=1e-12)
    assert tokens_of(both, 0.0)[7] == pytest.approx(first_b + step6, rel=1e-12)
    assert list(both.batch_sizes[5:10]) == [1, 2, 2, 2, 1]


def test_colocated_batches_follow_the_token_budget():
    sm = step_model(prefill_batch_tokens=500)
    # 300 + 200 fill the budget exactly; 100 + 600 would exceed it; 600 alone exceeds it and
    # still runs, alone
    prompts = [300, 200, 100, 600, 50]
    reqs = [Request(i, 0.0, p, 1) for i, p in enumerate(prompts)]
    r = simulate(reqs, sm, DSU, prefill="colocated")
    b1 = sm.prefill_batch_time([300, 200])
    b2 = b1 + sm.prefill_batch_time([100])
    b3 = b2 + sm.prefill_batch_time([600])
    b4 = b3 + sm.prefill_batch_time([50])
    assert sorted(r.finish_s.items()) == [(0, b1), (1, b1), (2, b2), (3, b3), (4, b4)]
    assert r.steps == 0 and r.summary["prefill_s_total"] == pytest.approx(b4, rel=1e-12)


# -- chunked -----------------------------------------------------------------------------------
@pytest.mark.parametrize("prompt,chunk", [(1000, 300), (900, 300), (300, 300), (1, 300), (2049, 2048)])
def test_chunked_prefill_takes_ceil_p_over_c_steps(prompt, chunk):
    sm = step_model(prefill_chunk_tokens=chunk)
    r = simulate([Request(0, 0.0, prompt, 3)], sm, DSU, prefill="chunked")
    n = math.ceil(prompt / chunk)
    # n steps carry only the chunk (nothing decodes yet), then the two remaining tokens
    assert list(r.batch_sizes) == [0] * n + [1, 1]
    want, t = [], 0.0
    for k in range(n):
        piece = min(chunk, prompt - k * chunk)
        t += step(sm, [], 0, 0, piece, k * chunk)
        want.append(t)
    assert r.step_end_s[:n] == pytest.approx(want, rel=1e-12)
    token_times = tokens_of(r, 0.0)
    assert token_times[0] == r.step_end_s[n - 1]
    assert token_times[1] == pytest.approx(t + step(sm, [prompt + 2], 1, 1), rel=1e-12)
    assert r.summary["prefill_s_total"] == pytest.approx(t, rel=1e-12)


def test_chunks_ride_along_in_decode_steps():
    sm = step_model(prefill_chunk_tokens=300)
    # A's 300-token prompt fills step 0's budget; B's 700 tokens ride in steps 1-3 beside A's
    # decode token, which takes one token of each step's budget (299, 299, 102); B's first
    # token at step 3's end, then both decode
    reqs = [Request(0, 0.0, 300, 10), Request(1, 0.0, 700, 3)]
    r = simulate(reqs, sm, DSU, prefill="chunked")
    steps = [step(sm, [], 0, 0, 300, 0),
             step(sm, [302], 1, 1, 299, 0), step(sm, [303], 1, 0, 299, 299), step(sm, [304], 1, 0, 102, 598),
             step(sm, [305, 702], 2, 1)]
    ends = np.cumsum(steps)
    assert r.step_end_s[:5] == pytest.approx(ends, rel=1e-12)
    assert list(r.batch_sizes[:5]) == [0, 1, 1, 1, 2]
    a = r.request_times[[x.token_times_s[0] for x in r.request_times].index(ends[0])]
    assert a.token_times_s[:5] == pytest.approx(tuple(ends), rel=1e-12)
    b = [x for x in r.request_times if x is not a][0]
    assert b.token_times_s[:2] == pytest.approx((ends[3], ends[4]), rel=1e-12)
    # the chunks' share of the GPU: step 0 whole, steps 1-3 beyond their decode-only time
    without = [step(sm, [302], 1, 1), step(sm, [303], 1, 0), step(sm, [304], 1, 0)]
    share = steps[0] + sum(s - w for s, w in zip(steps[1:4], without))
    assert r.summary["prefill_s_total"] == pytest.approx(share, rel=1e-12)
    assert 0 < share < sum(steps[:4])


def test_disaggregated_prefill_uses_the_pool():
    sm = step_model()
    r = simulate([Request(0, 0.5, 400, 3)], sm, DSU, prefill="disaggregated")
    first = 0.5 + sm.prefill_time(400)
    assert tokens_of(r, 0.5)[0] == first
    assert r.step_end_s[0] == pytest.approx(first + step(sm, [402], 1, 1), rel=1e-12)
    assert r.summary["prefill_s_total"] == 0.0


@pytest.mark.parametrize("mode", ["disaggregated", "colocated", "chunked"])
def test_every_mode_accounts_for_every_token(mode):
    reqs = synthetic(40, 200.0, prompt=("uniform", 10, 3000), output=("uniform", 1, 30), seed=7)
    r = simulate(reqs, step_model(), DSU, prefill=mode)
    assert r.summary["failed"] == 0 and r.summary["output_tokens"] == sum(q.output_tokens for q in reqs)
    assert r.summary["kv_tokens_leaked"] == 0 and r.summary["slots_in_use_at_end"] == 0
    assert r.summary["min_step_over_floor"] >= 1.0
    assert (r.summary["prefill_s_total"] > 0) == (mode != "disaggregated")


def test_the_stacks_mode_is_the_default():
    reqs = synthetic(3, 10.0, prompt=64, output=4, seed=0)
    for name in ("vllm-v0", "vllm-v0.6", "vllm-v1", "ideal"):
        sm = StepModel(TINY, H100, stack=get_stack(name))
        assert simulate(reqs, sm, DSU).summary["prefill_mode"] == get_stack(name).prefill


@pytest.mark.parametrize("options,needle", [
    ({"prefill": "both"}, "prefill mode must be one of"),
    ({"concurrency": 0}, "concurrency must be an integer >= 1"),
    ({"think_s": -1.0}, "think time must be a finite number >= 0"),
])
def test_simulate_refuses_bad_options(options, needle):
    with pytest.raises(ValueError, match=needle):
        simulate(synthetic(2, 1.0, 64, 2), step_model(), DSU, **options)
