"""Admission control and closed-loop client jitter in the fast system model (sim/fast/system.py):
a request is prefilled only when the DSU could admit it, and closed-loop clients do not start in
lock-step unless asked to."""

from collections import Counter

import numpy as np
import pytest

from tricut.models.config import load_gpu, load_model
from tricut.models.dsu import DsuParams
from tricut.sim.cli.testing import assert_one_line_error, run_cli
from tricut.sim.fast.setup import ServingSetup
from tricut.sim.fast.stacks import get_stack
from tricut.sim.fast.system import simulate
from tricut.sim.fast.timing import StepModel
from tricut.sim.fast.workload import Request, synthetic

H100 = load_gpu("h100-sxm5")
TINY = load_model("tiny")
MODES = ("disaggregated", "colocated", "chunked")


def step_model() -> StepModel:
    return StepModel(TINY, H100, stack=get_stack("vllm-v0").with_values(host_jitter_s=0.0))


def overload(n=40):
    """More requests at once than slots or KV: 40 requests of 200 + 20 tokens at t = 0."""
    return [Request(i, 0.0, 200, 20) for i in range(n)]


def test_one_slot_by_hand():
    """One slot, two identical requests at t = 0 (disaggregated, ideal stack): A takes the slot
    and is prefilled at once; B waits for admission until A's last step ends, is prefilled
    then, and enters the slot at its first token: its whole wait is before the prefill, in its
    TTFT and its decode queue, none of it in its TPOT."""
    setup = ServingSetup(TINY, H100, n_slots=1, max_batch=1, stack=get_stack("ideal"),
                         prefill="disaggregated")
    r = setup.run([Request(0, 0.0, 64, 3), Request(1, 0.0, 64, 3)], ())
    f = setup.step_model(()).prefill_time(64)
    ends = r.step_end_s
    assert len(ends) == 4
    a, b = r.request_times
    assert a.token_times_s == (f, ends[0], ends[1]) and a.decode_queue_s == 0.0
    assert b.admission_wait_s == ends[1]
    assert b.token_times_s == (ends[1] + f, ends[2], ends[3]) and b.admitted_s == ends[1] + f
    assert b.ttft_s == pytest.approx(ends[1] + f, rel=1e-12)
    assert b.decode_queue_s == ends[1]
    assert b.tpot_s == pytest.approx((ends[3] - ends[1] - f) / 2, rel=1e-12)
    assert r.summary["admission_waits"] == 1 and r.summary["intake_wait_rounds"] == 0


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("bound", ["slots", "kv"])
def test_admission_never_prefills_what_cannot_be_admitted(mode, bound):
    """With admission every prefilled request enters a slot in the first round after its first
    token (``intake_wait_rounds``, counted by the loop from the DSU's intake, not from the
    admission rule), whether slots or KV bind; without admission the same run leaves prefilled
    requests waiting in the intake, so the counter catches a rule that lets too many through."""
    dsu = DsuParams(n_slots=4, max_batch=4) if bound == "slots" else \
        DsuParams(n_slots=64, max_batch=64, kv_capacity_tokens=3 * 220)
    on = simulate(overload(), step_model(), dsu, prefill=mode)
    off = simulate(overload(), step_model(), dsu, prefill=mode, admission=False)
    for r in (on, off):
        assert r.summary["failed"] == 0 and len(r.request_times) == 40
    assert on.summary["intake_wait_rounds"] == 0 and on.summary["admission_waits"] > 30
    assert off.summary["intake_wait_rounds"] > 40 and off.summary["admission_waits"] == 0
    # the wait moves from the first inter-token gap (TPOT) to before the prefill (TTFT)
    assert on.summary["tpot_p99_s"] < off.summary["tpot_p99_s"] / 3
    assert on.summary["ttft_p99_s"] > off.summary["ttft_p99_s"]
    longest_step = float(on.step_times_s.max())
    for t in on.request_times:
        assert t.admitted_s - t.token_times_s[0] <= longest_step
        assert t.decode_queue_s == pytest.approx(t.admission_wait_s + t.admitted_s - t.token_times_s[0])


def test_a_request_too_large_for_the_kv_budget_does_not_block_the_queue():
    """Admission lets a request that can never fit through to the DSU, which refuses it ("too
    large"); the requests behind it run."""
    dsu = DsuParams(n_slots=4, max_batch=4, kv_capacity_tokens=500)
    reqs = [Request(0, 0.0, 100, 10), Request(1, 0.0, 600, 10), Request(2, 0.0, 100, 10)]
    r = simulate(reqs, step_model(), dsu, prefill="colocated")
    assert r.summary["failed"] == 1 and r.outcomes[1].reason == "too large"
    assert len(r.request_times) == 2 and r.summary["intake_wait_rounds"] == 0


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("admission", [True, False])
def test_a_client_freed_outside_a_decode_step_sends_its_next_request(mode, admission):
    """One closed-loop client whose request ends without a decode step (refused "too large",
    or done at its first token): the client still sends the rest of the pool (the run once
    stopped there, the rest never sent)."""
    dsu = DsuParams(n_slots=4, max_batch=4, kv_capacity_tokens=100)
    for stack in ("trtllm", "vllm-v0"):
        sm = StepModel(TINY, H100, stack=get_stack(stack).with_values(host_jitter_s=0.0))
        for pool in ([Request(0, 0.0, 10, 5), Request(1, 0.0, 60, 60), Request(2, 0.0, 10, 5), Request(3, 0.0, 10, 5)],
                     [Request(0, 0.0, 10, 1), Request(1, 0.0, 10, 5), Request(2, 0.0, 10, 1)]):
            r = simulate(pool, sm, dsu, prefill=mode, admission=admission, concurrency=1)
            assert sorted(r.finish_s) == [q.id for q in pool], (stack, pool)
            assert len(r.request_times) + r.summary["failed"] == len(pool)


@pytest.mark.parametrize("mode", MODES)
def test_clients_drift_apart_with_jitter_and_stay_in_lockstep_without(mode):
    reqs = [Request(i, 0.0, 128, 16) for i in range(48)]
    dsu = DsuParams(n_slots=64, max_batch=64)
    lock = simulate(reqs, step_model(), dsu, prefill=mode, concurrency=8, client_jitter=False)
    drift = simulate(reqs, step_model(), dsu, prefill=mode, concurrency=8, seed=3)
    sends = sorted(lock.arrival_s.values())
    assert sends[:8] == [0.0] * 8 and lock.summary["client_jitter"] is False
    # in lock-step the clients send in waves (which a chunk budget may split): few send times
    assert len(set(sends)) <= 48 // 3
    drifted = sorted(drift.arrival_s.values())
    assert len(set(drifted[:8])) == 8 and drift.summary["client_jitter"] is True
    # later sends stay apart, except where a colocated prefill batch takes several requests
    # that arrived during one step (they then finish together)
    assert len(set(drifted)) >= 28 and max(Counter(drift.arrival_s.values()).values()) <= 4
    assert len(set(drifted)) > len(set(sends))
    window = simulate(reqs[:1], step_model(), dsu, prefill=mode).request_times[0].e2e_s
    assert 0.0 <= drifted[0] and drifted[7] < window * 1.5
    # the same seed, the same phases; another seed, others
    again = simulate(reqs, step_model(), dsu, prefill=mode, concurrency=8, seed=3)
    other = simulate(reqs, step_model(), dsu, prefill=mode, concurrency=8, seed=4)
    assert again.arrival_s == drift.arrival_s != other.arrival_s


def test_client_jitter_leaves_the_runs_own_random_draws_alone():
    """The phases come from a stream of their own: an open-loop run's summary does not depend
    on the flag, and a closed-loop run's step times differ only through the new send times."""
    reqs = synthetic(30, 50.0, prompt=128, output=8, seed=2)
    a = simulate(reqs, step_model(), DsuParams(), client_jitter=True)
    b = simulate(reqs, step_model(), DsuParams(), client_jitter=False)
    assert a.summary == b.summary and np.array_equal(a.step_times_s, b.step_times_s)


def test_command_line_flags(capsys):
    base = ["simulate", "--synthetic", "24", "--prompt-tokens", "512", "--output-tokens", "16",
            "--slots", "4", "--max-batch", "4", "--no-progress", "--json"]
    import json
    code, cap = run_cli([*base, "--rate", "inf"], capsys)
    assert code == 0, cap.err
    on = json.loads(cap.out)
    code, cap = run_cli([*base, "--rate", "inf", "--admission", "off"], capsys)
    assert code == 0, cap.err
    off = json.loads(cap.out)
    assert on["admission"] is True and off["admission"] is False
    assert on["intake_wait_rounds"] == 0 < off["intake_wait_rounds"]
    code, cap = run_cli([*base, "--concurrency", "4", "--client-jitter", "off"], capsys)
    assert code == 0 and json.loads(cap.out)["client_jitter"] is False
    code, cap = run_cli([*base, "--client-jitter", "off"], capsys)
    assert code == 2 and "--client-jitter" in cap.err and "needs --concurrency" in cap.err
    for flag in ("--admission", "--client-jitter"):
        code, cap = run_cli([*base, "--concurrency", "4", flag, "maybe"], capsys)
        assert_one_line_error(code, cap, f"argument {flag}: invalid choice: 'maybe'")
