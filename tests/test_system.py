"""The fast system model: physics floor, step-time pieces, end-to-end simulate/compare/bench."""

import dataclasses
import json
import os
import math
import subprocess
import sys

import numpy as np
import pytest

from tricut.models.config import load_gpu, load_model
from tricut.models.dsu import DsuParams, ERROR
from tricut.models.roofline import roofline
from tricut.sim.fast.stacks import get_stack
from tricut.sim.fast.system import simulate
from tricut.sim.fast.timing import Assumptions, PhysicsViolation, StepModel
from tricut.sim.fast.workload import synthetic

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
    perfect = Assumptions(gemv_bw_efficiency=1, te_bw_efficiency=1, compute_efficiency=1)
    no_overhead = {name: 0 for name in ("host_step_s", "host_per_request_s", "host_jitter_s",
                                        "graph_layer_gap_s", "attn_call_s", "allreduce_latency_s")}
    stack = get_stack("ideal").with_values(attn_bw_efficiency=1, **no_overhead)
    sm = StepModel(load_model("llama-3-70b"), H100, "fp8", 8, frozenset(cuts), "adaptive", perfect,
                   stack=stack)
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
    broken, stack = Assumptions(), get_stack("ideal").with_values()
    object.__setattr__(stack, "attn_bw_efficiency", 50.0)
    object.__setattr__(broken, "gemv_bw_efficiency", 50.0)
    sm = StepModel(L8B, H100, "bf16", assumptions=broken, stack=stack)
    with pytest.raises(PhysicsViolation, match="beats the bandwidth floor"):
        sm.step_time([100000], [0], RNG)


def test_cdu_step_hits_and_reuse_by_policy():
    lens, residency = [50001, 60001, 2001], [1, 1, 0]
    blocks = [math.ceil(n / 16) for n in lens]
    steps = {pol: StepModel(L8B, H100, cuts=frozenset({"cdu"}), policy=pol).step_time(lens, residency, RNG)
             for pol in ("static", "adaptive", "disabled")}
    cached = (blocks[0] + blocks[1]) / sum(blocks)
    kv_read = sum(n - 1 for n in lens) * L8B.kv_bytes_per_token("bf16")
    for pol in ("static", "adaptive"):
        # every read of a cached request hits (prefetched); the streamed one misses
        assert steps[pol].l2_kv_bytes == pytest.approx(cached * kv_read)
        assert 0 < steps[pol].l2_reuse_bytes < steps[pol].l2_kv_bytes
    # reuse (bytes that skip HBM) is the reduction's, in blocks: static keeps at most sink + last
    # 128 tokens of each cached request and layer (2 x 32 x 9 blocks), adaptive at most its budget
    static_reuse = steps["static"].l2_reuse_bytes / kv_read * sum(blocks) * 32
    assert 0.8 * 2 * 32 * 9 < static_reuse <= 2 * 32 * 9
    adaptive = StepModel(L8B, H100, cuts=frozenset({"cdu"}), policy="adaptive")
    adaptive_reuse = steps["adaptive"].l2_reuse_bytes / kv_read * sum(blocks) * 32
    assert adaptive_reuse == pytest.approx(adaptive.cdu.step(lens, residency).reuse)
    assert 0.8 * adaptive.cdu.keep_budget < adaptive_reuse < 1.2 * adaptive.cdu.keep_budget
    assert steps["disabled"].l2_kv_bytes == steps["disabled"].l2_reuse_bytes == 0
    base = StepModel(L8B, H100).step_time(lens, residency, RNG)
    assert base.l2_kv_bytes == 0
    assert steps["adaptive"].hbm_read_bytes == pytest.approx(base.hbm_read_bytes - steps["adaptive"].l2_reuse_bytes)
    with pytest.raises(ValueError, match="has no CDU"):
        StepModel(L8B, load_gpu("edge"), cuts=frozenset({"cdu"}))
    with pytest.raises(ValueError, match="unknown cut 'gpu'"):
        StepModel(L8B, H100, cuts=frozenset({"gpu"}))
    with pytest.raises(ValueError, match="unknown CDU policy 'lru'"):
        StepModel(L8B, H100, cuts=frozenset({"cdu"}), policy="lru")


def test_tp_adds_allreduce_time():
    m = load_model("llama-3-70b")
    a = StepModel(m, H100, tp=8).step_time([1000] * 8, [0] * 8, np.random.default_rng(0))
    stack = StepModel(m, H100, tp=8).stack
    zero = stack.with_values(allreduce_latency_s=0)
    b = StepModel(m, H100, tp=8, stack=zero).step_time([1000] * 8, [0] * 8, np.random.default_rng(0))
    # 2 all-reduces per layer, each allreduce_latency_s per doubling of TP (log2 8 = 3)
    assert stack.allreduce_latency_s > 0
    assert a.time_s - b.time_s == pytest.approx(2 * 80 * 3 * stack.allreduce_latency_s, rel=1e-6)


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


def test_what_binds_and_the_attention_phase_hbm_use():
    """``bound_share`` counts every decode step once and ``attn_hbm_utilisation`` never
    exceeds 1. Llama-3-8B at batch 1 and a short context: the GEMVs bind every step with and
    without the TE. Llama-3-8B, 20 × 64K tokens of NVFP4 K/V: the TE grid binds (the block
    reader's 64 reads in flight), and with one engine per SM its attention phase uses HBM
    less than with four."""
    reqs = synthetic(6, 50.0, prompt=("uniform", 100, 300), output=("uniform", 2, 6), seed=3)
    dsu = DsuParams("throughput-opt", n_slots=8, max_batch=1)
    for cuts in ((), ("te",)):
        s = simulate(reqs, StepModel(L8B, H100, cuts=frozenset(cuts)), dsu).summary
        assert sum(s["bound_share"].values()) == pytest.approx(1.0)
        assert s["bound_share"]["gemv"] == 1.0
        assert 0 < s["attn_hbm_utilisation"] <= 1.0
    # Llama-3-8B, 20 x 64K tokens of NVFP4 K/V (the te_rows case of docs/results.md)
    long = synthetic(20, 1e6, prompt=("uniform", 65536, 65536), output=("uniform", 3, 3), seed=4)
    dsu = DsuParams("throughput-opt", n_slots=32, max_batch=20)
    util = {}
    for engines in (1, 4):
        from tricut.models.config import replace
        gpu = replace(H100, te_engines_per_sm=engines)
        s = simulate(long, StepModel(L8B, gpu, "nvfp4", cuts=frozenset({"te"})), dsu).summary
        assert sum(s["bound_share"].values()) == pytest.approx(1.0)
        assert 0 < s["attn_hbm_utilisation"] <= 1.0 and s["te_grid_imbalance"] >= 1.0
        assert s["bound_share"]["te_feed"] >= 0.5, engines
        util[engines] = s["attn_hbm_utilisation"]
    assert util[1] < util[4]


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


def _cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "tricut.sim", *args], capture_output=True, text=True,
                          env=env)


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
    """... and the plots write nothing outside the folder asked for: no matplotlib cache or
    config in the user's home (an empty home here; the cache goes to a temporary folder that
    the run removes)."""
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items()
           if k not in ("MPLCONFIGDIR", "XDG_CACHE_HOME", "XDG_CONFIG_HOME")}
    env.update(HOME=str(home), TMPDIR=str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    out = _cli("compare", "--trace", "sim/data/mooncake_conversation_sample.jsonl", "--limit", "40",
               "--model", "llama-3-70b", "--tp", "8", "--csv", "--plot", str(tmp_path), env=env)
    assert out.returncode == 0, out.stderr
    assert list(home.iterdir()) == [] and list((tmp_path / "tmp").iterdir()) == []
    assert "Matplotlib" not in out.stderr
    lines = out.stdout.strip().splitlines()
    assert lines[0].startswith("config,") and [l.split(",")[0] for l in lines[1:]] == \
        ["baseline", "te", "cdu", "dsu", "te+cdu+dsu"]
    for png in ("latency_cdf.png", "hbm_bandwidth.png"):
        assert (tmp_path / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_table_durations_in_one_unit_per_row_the_largest_the_row_allows():
    from tricut.sim.cli.simulate import _fmt_row
    assert _fmt_row("tpot_p50_s", [0.0263, 0.0186]) == ["26.3 ms", "18.6 ms"]
    assert _fmt_row("ttft_p99_s", [0.5, 5.2223]) == ["0.50 s", "5.22 s"]
    assert _fmt_row("duration_s", [138.85, 900.0]) == ["2.3 min", "15.0 min"]
    assert _fmt_row("decode_queue_p99_s", [86400.0, None]) == ["24.00 h", "-"]
    assert _fmt_row("prefill_s_total", [0.0]) == ["0.0 ms"]
    assert _fmt_row("tokens_per_s", [814.39]) == ["814.39"]       # a rate, not a duration


def _summary(queue_s, tpot_s, prefill_s=0.0):
    return {"tpot_p50_s": tpot_s, "tpot_p99_s": 2 * tpot_s, "tokens_per_s": 100.0, "hbm_gbps_mean": 1000.0,
            "decode_queue_p50_s": queue_s, "mean_batch": 19.08, "duration_s": 100.0,
            "prefill_s_total": prefill_s}


def test_compare_reading_says_what_the_cuts_buy_and_when_the_group_is_overloaded():
    from tricut.sim.cli.simulate import OVERLOAD_QUEUE_STEPS, reading
    fast = dict(_summary(0.01, 0.02), tpot_p50_s=0.015, tokens_per_s=110.0)
    kept = reading({"baseline": _summary(0.01, 0.02), "te+cdu+dsu": fast}, 64)
    assert kept[0] == "reading: te+cdu+dsu against baseline"
    assert "TPOT p50 20.0 ms -> 15.0 ms (-25.0 %)" in kept[1] and "(+10.0 %) tokens/s" in kept[2]
    assert kept[-1].endswith("the group keeps up with this workload") and "of at most 64" in kept[-1]
    edge = OVERLOAD_QUEUE_STEPS * 0.02
    assert "overloads" not in " ".join(reading({"b": _summary(edge, 0.02), "a": fast}, 64))
    over = reading({"b": _summary(2 * edge, 0.02, prefill_s=70.0), "a": fast}, 64)
    assert "overloads the group" in " ".join(over) and "--prefill disaggregated" in over[-1]
    assert "--rate-scale" in reading({"b": _summary(2 * edge, 0.02), "a": fast}, 64)[-1]
    assert reading({"b": _summary(None, 0.02), "a": fast}, 64) == []     # an undefined metric: no reading
    assert reading({"b": _summary(0.01, 0.02)}, 64) == []                # one column: nothing to compare


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
    (["simulate", "--assume", "gemv_efficiency=0.5"], "NAME one of gemv_bw_efficiency,"),
    (["simulate", "--assume", "cdu_l2_share=2"], "cdu_l2_share must be in (0, 1]"),
    (["simulate", "--assume", "host_step_s"], "expected NAME=VALUE"),
    (["simulate", "--assume", "host_sched_s=0"], "(assumptions) or host_step_s,"),
    (["simulate", "--assume", "sched_overlap=2"], "sched_overlap must be in [0, 1]"),
    (["simulate", "--assume", "graph_max_batch=1.5"], "graph_max_batch must be an integer"),
    (["simulate", "--stack", "nope"], "argument --stack: invalid choice: 'nope'"),
    (["simulate", "--prefill", "nope"], "argument --prefill: invalid choice: 'nope'"),
    (["simulate", "--concurrency", "0"], "argument --concurrency: 0 must be > 0"),
    (["simulate", "--concurrency", "-1"], "argument --concurrency: -1 must be > 0"),
    (["simulate", "--think-time", "-1"], "argument --think-time: -1 must be a finite number >= 0"),
    (["compare", "--stack", "nope"], "argument --stack: invalid choice: 'nope'"),
    (["bench", "--concurrency", "0"], "argument --concurrency: 0 must be > 0"),
])
def test_cli_bad_input_one_line(args, needle):
    out = _cli(*args)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tricut: error: "), out.stderr
    assert needle in lines[0]


def test_cli_assumption_override_changes_the_result():
    base = ["simulate", "--synthetic", "20", "--rate", "inf", "--prompt-tokens", "512",
            "--output-tokens", "16", "--cuts", "none", "--prefill", "disaggregated", "--json"]
    slow = _cli(*base, "--assume", "gemv_bw_efficiency=0.4", "--assume", "host_jitter_s=0")
    fast = _cli(*base, "--assume", "host_jitter_s=0")
    assert slow.returncode == fast.returncode == 0, slow.stderr + fast.stderr
    assert json.loads(slow.stdout)["tokens_per_s"] < 0.8 * json.loads(fast.stdout)["tokens_per_s"]


def test_cli_stack_flags_reach_the_result():
    base = ["simulate", "--synthetic", "8", "--rate", "inf", "--prompt-tokens", "256",
            "--output-tokens", "16", "--cuts", "none", "--prefill", "disaggregated", "--json"]
    runs = {name: _cli(*base, *extra) for name, extra in (
        ("v0", ["--stack", "vllm-v0"]), ("v0_slow_host", ["--stack", "vllm-v0", "--assume", "host_step_s=0.01"]),
        ("ideal", ["--stack", "ideal"]))}
    for out in runs.values():
        assert out.returncode == 0, out.stderr
    got = {k: json.loads(v.stdout) for k, v in runs.items()}
    assert got["v0"]["stack"] == got["v0_slow_host"]["stack"] == "vllm-v0" and got["ideal"]["stack"] == "ideal"
    # vllm-v0 runs its host work serially with the GPU: 16-token requests decode in 15 steps,
    # each one host_step_s longer (10 ms instead of the profile's value)
    extra = 0.01 - get_stack("vllm-v0").host_step_s
    assert got["v0_slow_host"]["tpot_p50_s"] - got["v0"]["tpot_p50_s"] == pytest.approx(extra, rel=1e-6)
    assert got["ideal"]["tokens_per_s"] > got["v0"]["tokens_per_s"]
    assert got["ideal"]["tpot_p50_s"] < got["v0"]["tpot_p50_s"]


def test_cli_closed_loop_and_prefill_mode():
    out = _cli("simulate", "--synthetic", "12", "--prompt-tokens", "256", "--output-tokens", "8",
               "--cuts", "none", "--concurrency", "3", "--think-time", "0.002", "--prefill", "chunked",
               "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert (data["concurrency"], data["think_s"], data["prefill_mode"]) == (3, 0.002, "chunked")
    assert data["requests"] == 12 and data["output_tokens"] == 96 and data["prefill_s_total"] > 0
    table = _cli("simulate", "--synthetic", "4", "--rate", "inf", "--output-tokens", "4", "--cuts", "none")
    assert table.returncode == 0, table.stderr
    assert "prefill_mode" in table.stdout and "colocated" in table.stdout   # vllm-v0's own mode


def test_cli_malformed_trace_names_line(tmp_path):
    f = tmp_path / "t.jsonl"
    f.write_text('{"timestamp": 0, "input_length": 5, "output_length": 2}\n{"timestamp": 1}\n')
    out = _cli("simulate", "--trace", str(f))
    assert out.returncode == 2 and f"{f}:2: missing field 'input_length'" in out.stderr
