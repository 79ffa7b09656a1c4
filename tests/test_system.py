"""The fast system model: physics floor, step-time pieces, end-to-end simulate/compare/bench."""

import dataclasses
import json
import math
import subprocess
import sys

import numpy as np
import pytest

from tricut.models.config import load_gpu, load_model
from tricut.models.dsu import DsuParams, ERROR
from tricut.models.roofline import roofline
from tricut.sim.system import simulate
from tricut.sim.timing import Assumptions, PhysicsViolation, StepModel
from tricut.sim.workload import synthetic

H100 = load_gpu("h100-sxm5")
L8B = load_model("llama-3-8b")
RNG = np.random.default_rng(0)


def test_single_request_step_matches_roofline_floor():
    sm = StepModel(L8B, H100, "bf16")
    st = sm.step_time([8193], [1], RNG)
    r = roofline(L8B, H100, "bf16", 8192, 1)
    # The step floor the system model uses equals the roofline's (plus the new token's write).
    assert st.floor_s == pytest.approx(r.step_floor_s + L8B.kv_bytes_per_token("bf16") / 3.35e12)
    assert st.time_s > st.floor_s


@pytest.mark.parametrize("cuts", [(), ("te",), ("cdu",), ("dsu",), ("te", "cdu", "dsu")])
def test_no_step_beats_the_floor_even_with_perfect_assumptions(cuts):
    perfect = Assumptions(gemv_bw_efficiency=1, sm_attention_bw_efficiency=1, te_bw_efficiency=1,
                          compute_efficiency=1, kernel_overhead_s=0, allreduce_latency_s=0,
                          host_sched_s=0, host_sched_per_request_s=0, host_jitter_s=0)
    sm = StepModel(load_model("llama-3-70b"), H100, "fp8", 8, frozenset(cuts), "adaptive", perfect)
    rng = np.random.default_rng(1)
    for _ in range(50):
        lens = list(rng.integers(1, 131072, size=rng.integers(1, 64)))
        st = sm.step_time(lens, [int(x >= 4096) for x in lens], rng)
        assert st.time_s >= st.floor_s


def test_physics_check_catches_a_broken_model():
    # An efficiency above 1 is rejected up front ...
    with pytest.raises(ValueError, match="gemv_bw_efficiency must be in"):
        Assumptions(gemv_bw_efficiency=1.5)
    # ... and if one slips in anyway, the step refuses to beat the floor.
    broken = Assumptions()
    object.__setattr__(broken, "sm_attention_bw_efficiency", 50.0)
    object.__setattr__(broken, "gemv_bw_efficiency", 50.0)
    sm = StepModel(L8B, H100, "bf16", assumptions=broken)
    with pytest.raises(PhysicsViolation, match="beats the bandwidth floor"):
        sm.step_time([100000], [0], RNG)


def test_cdu_hits_static_vs_adaptive_vs_disabled():
    lens, hint = [50001, 60001, 2001], [1, 1, 0]
    hist = [50000, 60000, 2000]
    static = StepModel(L8B, H100, cuts=frozenset({"cdu"}), policy="static").l2_hit_tokens(hist, hint)
    assert static == 2 * (16 + 128)
    adaptive = StepModel(L8B, H100, cuts=frozenset({"cdu"}), policy="adaptive")
    cap = 0.8 * 50 * 2**20 / 131072
    assert adaptive.l2_hit_tokens(hist, hint) == pytest.approx(cap)
    assert StepModel(L8B, H100, cuts=frozenset({"cdu"}), policy="disabled").l2_hit_tokens(hist, hint) == 0
    assert StepModel(L8B, H100).l2_hit_tokens(hist, hint) == 0
    with pytest.raises(ValueError, match="has no CDU"):
        StepModel(L8B, load_gpu("edge"), cuts=frozenset({"cdu"}))
    with pytest.raises(ValueError, match="unknown cut 'gpu'"):
        StepModel(L8B, H100, cuts=frozenset({"gpu"}))


def test_tp_adds_allreduce_time():
    m = load_model("llama-3-70b")
    a = StepModel(m, H100, tp=8).step_time([1000] * 8, [0] * 8, np.random.default_rng(0))
    zero = Assumptions(allreduce_latency_s=0)
    b = StepModel(m, H100, tp=8, assumptions=zero).step_time([1000] * 8, [0] * 8, np.random.default_rng(0))
    assert a.time_s - b.time_s == pytest.approx(2 * 80 * 5e-6, rel=1e-6)


def test_simulation_accounts_for_every_token():
    reqs = synthetic(40, 50.0, prompt=("uniform", 10, 3000), output=("uniform", 1, 40), seed=2)
    r = simulate(reqs, StepModel(L8B, H100), DsuParams("fairness-opt", n_slots=8, max_batch=8))
    assert r.summary["requests"] == 40 and r.summary["failed"] == 0
    assert r.summary["output_tokens"] == sum(q.output_tokens for q in reqs)
    assert r.summary["kv_tokens_leaked"] == 0 and r.summary["slots_in_use_at_end"] == 0
    assert r.summary["min_step_over_floor"] >= 1.0
    assert r.batch_sizes.max() <= 8
    # Tokens/s is output tokens over the whole duration.
    assert r.summary["tokens_per_s"] == pytest.approx(r.summary["output_tokens"] / r.summary["duration_s"])


def test_faults_are_rolled_back_not_lost():
    reqs = synthetic(6, math.inf, prompt=100, output=10, seed=0)
    faults = {(2, 0): ERROR, (3, 1): ERROR}
    r = simulate(reqs, StepModel(L8B, H100), DsuParams(n_slots=8), faults=faults)
    assert r.summary["rollbacks"] == 2 and r.summary["failed"] == 0
    assert r.summary["output_tokens"] == 60


def test_degraded_mode_keeps_going_and_costs_latency():
    reqs = synthetic(30, 20.0, prompt=500, output=50, seed=4)
    sm = StepModel(L8B, H100, cuts=frozenset({"dsu"}))
    ok = simulate(reqs, sm, DsuParams(n_slots=16, max_batch=16))
    degraded = simulate(reqs, sm, DsuParams(n_slots=16, max_batch=16), degraded_at_s=0.0)
    assert degraded.summary["output_tokens"] == ok.summary["output_tokens"]
    assert degraded.summary["tpot_p50_s"] > ok.summary["tpot_p50_s"]


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "tricut.sim", *args], capture_output=True, text=True)


def test_cli_simulate_json_keys():
    out = _cli("simulate", "--synthetic", "20", "--rate", "inf", "--prompt-tokens", "512",
               "--output-tokens", "16", "--cuts", "te,dsu", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    for key in ("requests", "output_tokens", "duration_s", "tokens_per_s", "ttft_p50_s", "ttft_p99_s",
                "tpot_p50_s", "tpot_p99_s", "itl_p99_s", "hbm_gbps_mean", "hbm_gbps_peak",
                "l2_hit_rate", "min_step_over_floor"):
        assert key in data, key
    assert data["requests"] == 20 and data["output_tokens"] == 320
    assert data["min_step_over_floor"] >= 1.0


def test_cli_compare_on_shipped_sample_and_plots(tmp_path):
    out = _cli("compare", "--trace", "sim/data/mooncake_conversation_sample.jsonl", "--limit", "40",
               "--model", "llama-3-70b", "--tp", "8", "--csv", "--plot", str(tmp_path))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert lines[0].startswith("config,") and [l.split(",")[0] for l in lines[1:]] == \
        ["baseline", "te", "cdu", "dsu", "te+cdu+dsu"]
    for png in ("latency_cdf.png", "hbm_bandwidth.png"):
        assert (tmp_path / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_bench_three_rounds():
    out = _cli("bench", "--prompt-tokens", "256", "--output-tokens", "8", "--slots", "8",
               "--max-batch", "8", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert 0 < data["single_request"]["fraction_of_ceiling"] < 1
    assert [s["concurrency"] for s in data["concurrency_sweep"]] == [1, 2, 4, 8, 16]
    assert data["sweet_spot"] in (1, 2, 4, 8, 16)
    st = data["stability"]
    assert st["kv_tokens_leaked"] == 0 and st["slots_in_use_at_end"] == 0 and st["all_accounted"]


@pytest.mark.parametrize("args,needle", [
    (["simulate", "--cuts", "te,gpu"], "'gpu' is not a cut"),
    (["simulate", "--prompt-tokens", "big"], "expected N, uniform:LO:HI"),
    (["simulate", "--trace", "nope.jsonl"], "nope.jsonl: file not found"),
    (["simulate", "--model", "llama-3-70b"], "do not fit in h100-sxm5 HBM at tp=1"),
    (["simulate", "--gpu", "edge", "--cuts", "cdu"], "has no CDU"),
    (["simulate", "--synthetic", "0"], "must be > 0"),
    (["simulate", "--synthetic", "3", "--trace", "x.jsonl"], "not allowed with argument"),
])
def test_cli_bad_input_one_line(args, needle):
    out = _cli(*args)
    assert out.returncode == 2
    assert needle in out.stderr and "Traceback" not in out.stderr


def test_cli_malformed_trace_names_line(tmp_path):
    f = tmp_path / "t.jsonl"
    f.write_text('{"timestamp": 0, "input_length": 5, "output_length": 2}\n{"timestamp": 1}\n')
    out = _cli("simulate", "--trace", str(f))
    assert out.returncode == 2 and f"{f}:2: missing field 'input_length'" in out.stderr
