"""KV reserved as it grows and pre-emption by recompute (sim/fast/stack_scheduler.py and the
serving loop, sim/fast/system.py): the baseline of a stack that reserves prompts (vLLM) admits
more requests than the DSU's whole-output reservation would and pre-empts the latest admitted
when KV runs out; no step ever holds more KV than the budget, and every token is emitted."""

import json

import pytest

from tricut.models.config import load_gpu, load_model
from tricut.models.dsu import ERROR, DsuModel, DsuParams, RequestSpec
from tricut.sim.cli.testing import assert_one_line_error, run_cli
from tricut.sim.fast import system
from tricut.sim.fast.stack_scheduler import Preempted, StackScheduler
from tricut.sim.fast.stacks import get_stack
from tricut.sim.fast.setup import ServingSetup
from tricut.sim.fast.system import simulate
from tricut.sim.fast.timing import StepModel
from tricut.sim.fast.workload import Request, TraceError

H100 = load_gpu("h100-sxm5")
TINY = load_model("tiny")
MODES = ("disaggregated", "colocated", "chunked")


def step_model(stack="vllm-v0", cuts=()) -> StepModel:
    return StepModel(TINY, H100, cuts=frozenset(cuts), stack=get_stack(stack).with_values(host_jitter_s=0.0))


def crowd(n=40):
    """More requests at once than whole outputs fit in KV: 40 of 200 + 200 tokens at t = 0."""
    return [Request(i, 0.0, 200, 200) for i in range(n)]


KV = DsuParams(n_slots=64, max_batch=64, kv_capacity_tokens=3000)


def test_scheduler_reserves_prompts_grows_by_token_and_preempts_the_latest():
    m = StackScheduler(DsuParams(n_slots=4, max_batch=4, kv_capacity_tokens=100))
    for i in range(3):
        m.submit(RequestSpec(i, 30, 20))
    rnd = m.step()
    assert rnd.admitted == 3 and m.kv_used == 90            # prompts only (the DSU would refuse two)
    m.complete({rnd.batch[0].slot: ERROR})                   # rolled back: no token, no KV
    assert m.kv_used == 92 and [s.reserved for s in m.slots[:3]] == [30, 31, 31]
    m.step()
    p = m.preempt_latest()
    assert p == Preempted(2, 31, 19) and m.preemptions == 1 and m.kv_used == 61
    assert [d.request for d in m.pending] == [0, 1] and m.slots[2] is None
    m.complete()
    assert m.kv_used == 63
    m.submit(RequestSpec(2, 32, 18))                         # forgotten: it may come back
    assert m.step().admitted == 1 and m.kv_used == 95
    dsu = DsuModel(DsuParams(n_slots=4, max_batch=4, kv_capacity_tokens=100))
    assert dsu.admission_kv(RequestSpec(9, 30, 20)) == 50 and m.admission_kv(RequestSpec(9, 30, 20)) == 30


def test_too_large_leaves_room_for_the_watermark():
    params = DsuParams(kv_capacity_tokens=1000)
    m = StackScheduler(params, watermark_tokens=10)
    assert m.too_large(RequestSpec(0, 600, 391)) and not m.too_large(RequestSpec(0, 600, 390))
    assert not DsuModel(params).too_large(RequestSpec(0, 600, 400))
    for bad in (-1, 1000, 2.5, True):
        with pytest.raises(ValueError, match="watermark_tokens must be an integer"):
            StackScheduler(params, watermark_tokens=bad)


@pytest.fixture
def kv_checked(monkeypatch):
    """Every step checked before it runs: the KV of the running requests, the one token each
    of the batch adds, and the KV of the requests past admission together within the budget."""
    steps = []
    timed = system._Run._timed_step

    def checked(run, rnd, chunk):
        held = run.model.kv_used + run.reserved_kv + len(rnd.batch)
        assert held <= run.dsu.kv_capacity_tokens, (run.t, held)
        assert [d.request for d in rnd.batch] == [d.request for d in run.model.pending]
        steps.append(held)
        return timed(run, rnd, chunk)
    monkeypatch.setattr(system._Run, "_timed_step", checked)
    return steps


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("admission", [True, False])
def test_kv_never_exceeds_the_budget_and_every_token_is_emitted(kv_checked, mode, admission):
    r = simulate(crowd(), step_model(), KV, prefill=mode, admission=admission)
    s = r.summary
    assert s["kv_reserve"] == "prompt" and s["preemptions"] > 10 and s["failed"] == 0
    assert sorted(len(t.token_times_s) for t in r.request_times) == [200] * 40
    assert s["kv_tokens_leaked"] == 0 and s["slots_in_use_at_end"] == 0
    assert max(kv_checked) == KV.kv_capacity_tokens          # KV binds, up to its last token
    # the KV budget holds 7 whole requests: reserving prompts runs larger batches
    assert s["mean_batch"] > KV.kv_capacity_tokens / 400


@pytest.mark.parametrize("stack,cuts", [("trtllm", ()), ("vllm-v0", ("dsu",))])
def test_whole_outputs_reserved_never_preempt(kv_checked, stack, cuts):
    """TensorRT-LLM's GUARANTEED_NO_EVICT, and the DSU under any stack, reserve whole outputs."""
    r = simulate(crowd(), step_model(stack, cuts), KV, prefill="disaggregated")
    s = r.summary
    assert s["kv_reserve"] == "output" and s["preemptions"] == 0 and s["preemption_recompute_tokens"] == 0
    assert sorted(len(t.token_times_s) for t in r.request_times) == [200] * 40
    assert s["mean_batch"] <= KV.kv_capacity_tokens / 400


def test_the_victim_waits_for_room_then_recomputes_its_context():
    """Two requests of 40 + 30 tokens in a budget of 100 (disaggregated prefill): both admitted
    by their prompts; when their growth no longer fits, B (admitted last) is pre-empted, waits
    at the head of the queue until A's last step frees its KV, is prefilled again with its
    whole context and emits its next token at the end of that prefill, then decodes the rest."""
    sm = step_model()
    dsu = DsuParams(n_slots=4, max_batch=4, kv_capacity_tokens=100)
    r = simulate([Request(0, 0.0, 40, 30), Request(1, 0.0, 40, 30)], sm, dsu, prefill="disaggregated")
    s = r.summary
    a, b = r.request_times
    assert s["preemptions"] == 1 and len(a.token_times_s) == len(b.token_times_s) == 30
    # one token each per step until 41 + 41 + 2k > 100: B had emitted 1 + 9 tokens
    context = s["preemption_recompute_tokens"]
    assert context == 40 + 10
    assert b.token_times_s[10] == pytest.approx(a.token_times_s[-1] + sm.prefill_time(context), rel=1e-12)
    assert a.tpot_s < b.tpot_s and b.admission_wait_s == 0.0 and a.admission_wait_s == 0.0
    assert b.decode_queue_s == a.decode_queue_s == 0.0


def test_a_workload_too_large_beside_the_watermark_is_refused_before_the_run():
    """Every request fits the budget whole, not with the stack's watermark beside it: refused
    by the check before the run (it would fail every request), unless the DSU schedules."""
    setup = ServingSetup(TINY, H100, kv_capacity_tokens=1000,
                         stack=get_stack("vllm-v0").with_values(kv_watermark=0.05))
    reqs = [Request(i, 0.0, 600, 380) for i in range(3)]
    with pytest.raises(TraceError, match="less the stack's KV watermark of 50: the smallest"):
        setup.check(reqs, ())
    setup.check(reqs, ("dsu",))
    assert setup.run(reqs, ("dsu",)).summary["failed"] == 0


def test_a_stack_with_a_bad_kv_policy_is_refused():
    with pytest.raises(ValueError, match="kv_reserve must be one of output, prompt, got 'tokens'"):
        get_stack("vllm-v0").with_values(kv_reserve="tokens")
    with pytest.raises(ValueError, match=r"kv_watermark must be in \[0, 1\), got 1"):
        get_stack("vllm-v0").with_values(kv_watermark=1)


def test_cli_reports_preemptions_and_refuses_a_bad_watermark(capsys):
    """Llama-3-70B (bf16 weights) with FP8 KV on two H100s: a KV budget of about 187K tokens
    holds 43 of these requests whole and the prompts of 45, whose decoding then outgrows it."""
    base = ["simulate", "--model", "llama-3-70b", "--tp", "2", "--kv-dtype", "fp8", "--cuts", "none",
            "--synthetic", "80", "--rate", "inf", "--prompt-tokens", "4096", "--output-tokens", "256",
            "--slots", "256", "--max-batch", "256", "--no-progress", "--json"]
    code, cap = run_cli(base, capsys)
    assert code == 0, cap.err
    out = json.loads(cap.out)
    assert out["kv_reserve"] == "prompt" and out["preemptions"] > 0 and out["preemption_recompute_tokens"] > 0
    code, cap = run_cli([*base, "--stack", "trtllm"], capsys)
    assert code == 0, cap.err
    out = json.loads(cap.out)
    assert out["kv_reserve"] == "output" and out["preemptions"] == 0
    code, cap = run_cli([*base, "--assume", "kv_watermark=1.5"], capsys)
    assert_one_line_error(code, cap, "kv_watermark must be in [0, 1), got 1.5")
    code, cap = run_cli([*base, "--assume", "kv_watermark=0.05"], capsys)
    assert code == 0 and json.loads(cap.out)["preemptions"] == 0       # 43 admitted: their growth fits
    code, cap = run_cli([*base, "--stack", "trtllm", "--assume", "kv_watermark=0.05"], capsys)
    assert_one_line_error(code, cap, "--assume kv_watermark changes nothing under --stack trtllm")
    # compare's runs without the dsu cut use it
    code, cap = run_cli(["compare", "--synthetic", "8", "--output-tokens", "8", "--assume", "kv_watermark=0.05",
                         "--no-progress", "--json"], capsys)
    assert code == 0, cap.err


def test_the_fp8_gemv_parameters_act_on_a_model_with_fp8_weights(tmp_path, capsys):
    """--assume fp8_gemv_* is taken for a model whose weights are fp8 (a TOML file) and slows
    its decode; for the shipped bf16 models it is refused (tests/test_bad_input_fast.py)."""
    from pathlib import Path
    src = Path(__file__).resolve().parent.parent / "models" / "configs" / "models" / "llama-3-8b.toml"
    text = src.read_text()
    assert 'weight_dtype = "bf16"' in text
    model = tmp_path / "llama-3-8b-fp8.toml"
    model.write_text(text.replace('weight_dtype = "bf16"', 'weight_dtype = "fp8"'))
    base = ["simulate", "--model", str(model), "--cuts", "none", "--synthetic", "4", "--output-tokens", "16",
            "--json"]
    tpot = {}
    for label, extra in (("shipped", []), ("ratio", ["--assume", "fp8_gemv_efficiency_ratio=0.5"]),
                         ("call", ["--assume", "fp8_gemv_call_extra_s=2e-5"])):
        code, cap = run_cli([*base, *extra], capsys)
        assert code == 0, cap.err
        tpot[label] = json.loads(cap.out)["tpot_p50_s"]
    assert tpot["ratio"] > tpot["shipped"] and tpot["call"] > tpot["shipped"]
