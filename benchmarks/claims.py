"""Every claim of SPEC.md's "Claims to evaluate": our figure, the physical bound, a verdict.

    .venv/bin/python benchmarks/claims.py [--stack vllm-v0|trtllm|...] > /tmp/claims.md

Prints the Markdown table that docs/results.md reproduces, for one software stack (default:
the model's default stack). Uses the fast system model with its default assumptions
(docs/system-model.md) and the roofline; each row states its setting. The serving rows run
the source's design, a disaggregated prefill pool (``--prefill`` changes it), so that they
measure decode; the stack sets the host work the DSU replaces.
"""

from __future__ import annotations

import argparse

import numpy as np

from tricut.models.config import KV_DTYPES, load_gpu, load_model
from tricut.models.dsu import DsuParams
from tricut.models.roofline import roofline
from tricut.sim.fast.energy import EnergyLedger, GpuWork, load_energy
from tricut.sim.fast.setup import ServingSetup
from tricut.sim.fast.stacks import DEFAULT_STACK, PREFILL_MODES, get_stack, stack_names
from tricut.sim.fast.timing import StepModel
from tricut.sim.fast.workload import synthetic

H100 = load_gpu("h100-sxm5")
L8B, L70B = load_model("llama-3-8b"), load_model("llama-3-70b")
RNG = np.random.default_rng(0)
_ap = argparse.ArgumentParser(description="Print the claims table (docs/results.md) for one stack.")
_ap.add_argument("--stack", choices=stack_names(), default=DEFAULT_STACK,
                 help="software-stack profile (default: %(default)s)")
_ap.add_argument("--prefill", choices=PREFILL_MODES, default="disaggregated",
                 help="prefill mode of the serving rows (default: %(default)s, the source's design)")
ARGS = _ap.parse_args()
STACK = get_stack(ARGS.stack)
NO_JITTER = STACK.with_values(host_jitter_s=0.0)   # the chosen stack, no host jitter
#: the serving rows keep the DSU's default KV budget (1M tokens), not what fits beside the weights
KV_BUDGET = DsuParams().kv_capacity_tokens
rows = []


def row(claim, ours, bound, verdict):
    rows.append((claim, ours, bound, verdict))


# 1. Llama-3-8B single decode step 1.8 ms -> 0.9 ms with TE.
ctx = 4096
floor = roofline(L8B, H100, "bf16", ctx, 1).step_floor_s
base = StepModel(L8B, H100, stack=NO_JITTER).step_time([ctx + 1], [1], RNG)
te = StepModel(L8B, H100, cuts=frozenset({"te"}), stack=NO_JITTER).step_time([ctx + 1], [1], RNG)
row("Llama-3-8B decode step 1.8 ms → 0.9 ms with TE offload (bf16, batch 1)",
    f"{base.time_s * 1e3:.2f} ms → {te.time_s * 1e3:.2f} ms at {ctx} tokens (SM busy {base.sm_busy_s * 1e3:.2f} → "
    f"{te.sm_busy_s * 1e3:.2f} ms)",
    f"floor {floor * 1e3:.2f} ms: 15.0 GB of bf16 weights at 3.35 TB/s",
    "**impossible** as stated: both figures are below the bandwidth floor; with fp8 weights the floor is "
    f"{roofline(load_model('llama-3-8b'), H100, 'bf16', ctx, 1).weight_bytes / 2 / 3.35e12 * 1e3:.2f} ms, still above 0.9 ms")

# 2. > 32K context: HBM use > 95 %, useful < 40 %.
sm = StepModel(L8B, H100, stack=NO_JITTER)
st = sm.step_time([32769] * 8, [1] * 8, RNG)
use = (st.hbm_read_bytes + st.hbm_write_bytes) / st.time_s / H100.hbm_bandwidth
row("Context > 32K: HBM bandwidth use > 95 % but useful bandwidth < 40 %",
    f"{100 * use:.0f} % of peak HBM bandwidth on the SM path (Llama-3-8B, 8 × 32K); every byte read is used once",
    "decode reads each weight and KV byte once per step: nothing to re-read, so 'useful' = all bytes moved",
    "**not reproducible**: our model has no idle-but-busy bandwidth; a < 40 % figure needs a definition the source does not give")

# 3./4. L2 hit rate 68 % -> 91 % with adaptive; HBM -44 %; 6.8x lower mean KV latency.
kv_tok = L8B.kv_bytes_per_token("bf16")
cap = 0.8 * H100.l2_bytes / kv_tok
work = 16 * 32768
cdu = StepModel(L8B, H100, cuts=frozenset({"cdu"}), policy="adaptive", stack=NO_JITTER)
st = cdu.step_time([32769] * 16, [1] * 16, RNG)
nocdu = StepModel(L8B, H100, stack=NO_JITTER).step_time([32769] * 16, [1] * 16, RNG)
row("L2 hit rate 68 % → 91 % with `adaptive`; HBM −44 %",
    f"Llama-3-8B, 16 × 32K, full attention, `adaptive`: CDU hit rate {100 * st.l2_kv_bytes / st.kv_read_bytes:.1f} % "
    f"(prefetch hits), of which resident from the previous step {100 * st.l2_reuse_bytes / st.kv_read_bytes:.3f} %; "
    f"HBM bytes per step {100 * (st.hbm_read_bytes / nocdu.hbm_read_bytes - 1):+.2f} % "
    "(block-level policy model over the grid: hit 100 % full, 84 % window, 65–75 % topk; HBM −5 % to +57 %, docs/cdu.md)",
    f"bytes saved ≤ resident KV / KV read per step = {cap:.0f} / {work:,} tokens = {100 * cap / work:.3f} % "
    "(every block is read once per step)",
    "**hit rate reachable, −44 % impossible** at long context with full attention: a prefetch hit hides latency but "
    "saves no byte; −44 % needs the step's KV working set within ~2.3× the CDU's L2 share (short contexts × small "
    "batch, or sparse attention)")
h = (1 - 1 / 6.8) * H100.hbm_latency_s / (H100.hbm_latency_s - H100.l2_latency_s)
row("50 MB L2 lowers mean KV access latency 6.8×",
    f"needs an L2 hit rate of {100 * h:.1f} % (L2 20 ns, HBM 500 ns)",
    "mean latency = h·20 ns + (1−h)·500 ns",
    "**only with ≥ 89 % hits**, which the row above rules out at long context")

# 5. Llama-3-70B at 128K on 8xH100.
r = [roofline(L70B, H100, "bf16", 131072, b, tp=8) for b in (1, 8, 64)]
limit = H100.hbm_bandwidth / (L70B.kv_bytes_per_token("bf16") / 8 * 131072)
prefill_flops = 2 * L70B.param_count() * 131072
row("Llama-3-70B, 128K context, 8×H100: 1,842 → 3,916 tokens/s; P99 247 → 89 ms; HBM peak 1,820 → 940 GB/s; 210 → 480 req/s",
    f"ceiling {r[0].tokens_per_s_ceiling:.0f} / {r[1].tokens_per_s_ceiling:.0f} / {r[2].tokens_per_s_ceiling:.0f} tokens/s "
    f"at batch 1 / 8 / 64; step floor {r[0].step_floor_s * 1e3:.1f} / {r[1].step_floor_s * 1e3:.1f} / "
    f"{r[2].step_floor_s * 1e3:.1f} ms",
    f"tokens/s < {limit:.0f} for any batch (KV alone: 5.4 GB per request per step per GPU); 480 req/s of 128K prompts "
    f"needs {480 * prefill_flops / 1e18:.1f} EFLOP/s of prefill vs {8 * H100.bf16_flops / 1e15:.1f} PFLOP/s",
    "**impossible**: 3,916 tokens/s is > 6× the bandwidth limit at 128K; HBM peak 940 GB/s cannot carry it")

# 6. DSU latency-opt at 128 concurrent requests: P99 3.2x steadier.
reqs = synthetic(512, 200.0, prompt=("uniform", 512, 4096), output=128, seed=5)
res = {}
setup = ServingSetup(L8B, H100, profile="latency-opt", n_slots=128, max_batch=128, latency_batch=128,
                     kv_capacity_tokens=KV_BUDGET, stack=STACK, prefill=ARGS.prefill)
for label, cuts in (("host", ()), ("dsu", ("dsu",))):
    s = setup.run(reqs, cuts).summary
    res[label] = s["itl_p99_s"] / s["itl_p50_s"]
row("DSU `latency-opt`, 128 concurrent: P99 3.2× steadier than CPU scheduling",
    f"ITL P99/P50 {res['host']:.3f} (host) vs {res['dsu']:.3f} (DSU): {res['host'] / res['dsu']:.2f}× steadier",
    f"`{STACK.name}`'s host work per step is {STACK.host_step_s * 1e6:.0f} µs + {STACK.host_per_request_s * 1e6:.1f} µs "
    f"per request, jitter Exp({STACK.host_jitter_s * 1e6:.0f} µs): nearly the same every step, so removing it "
    "shortens steps but barely changes their spread",
    "**not reproduced**: the DSU shortens steps; it makes them steadier only by the host's own jitter, which is "
    "a small share of a step")

# 7. fp8 holds 2.3x the tokens of fp16.
fit = {d: roofline(L70B, H100, d, 1024, 1, tp=8).kv_tokens_fit for d in KV_DTYPES}
te_step = {d: StepModel(L70B, H100, d, 8, frozenset({"te"}), stack=NO_JITTER).step_time([32769], [1], RNG).time_s
           for d in ("bf16", "fp8")}
row("fp8 KV holds 2.3× the tokens of fp16, +0.3 ms on the first decode step",
    f"{fit['fp8'] / fit['bf16']:.2f}× (Llama-3-70B, TP8, beside the weights); first step at 32K tokens with the TE: "
    f"{te_step['bf16'] * 1e3:.2f} ms (bf16 KV) → {te_step['fp8'] * 1e3:.2f} ms (fp8 KV)",
    "bytes per element 2 → 1: exactly 2×; the TE dequantises in line at no cycle cost (its cycle formula is the "
    "same for every KV format, checked against the RTL)",
    "**impossible** (2.3×); no +0.3 ms: fp8 KV moves fewer bytes and costs the TE no extra cycles")
row("NVFP4 KV halves the footprint vs FP8 (~2× resident context) (`003_*`)",
    f"{fit['nvfp4'] / fit['fp8']:.2f}×",
    "4 bits + one 8-bit scale per 16 elements = 4.5 bits: 8 / 4.5 = 1.78×",
    "**roughly**: 1.78×, not 2×, once block scales are counted")

# 8. Degraded DSU: +40 % latency, no interruption.
reqs = synthetic(256, 100.0, prompt=("uniform", 512, 4096), output=64, seed=6)
setup = ServingSetup(L8B, H100, n_slots=64, kv_capacity_tokens=KV_BUDGET, stack=STACK, prefill=ARGS.prefill)
ok = setup.run(reqs, ("dsu",)).summary
bad = setup.run(reqs, ("dsu",), degraded_at_s=0.0).summary
row("DSU degraded to CPU scheduling: latency +40 %, no interruption",
    f"TPOT P50 {ok['tpot_p50_s'] * 1e3:.2f} → {bad['tpot_p50_s'] * 1e3:.2f} ms "
    f"({100 * (bad['tpot_p50_s'] / ok['tpot_p50_s'] - 1):+.1f} %); all {bad['requests']} requests complete",
    f"degraded, `{STACK.name}`'s host work per step ({STACK.host_step_s * 1e6:.0f} µs + "
    f"{STACK.host_per_request_s * 1e6:.1f} µs per request) + the hand-over check returns to every step",
    "**no interruption: confirmed**; +40 % only if host scheduling costs ~40 % of a step "
    f"(here {100 * (bad['tpot_p50_s'] / ok['tpot_p50_s'] - 1):.0f} %)")

# 9. Energy (docs/energy.md): more tokens per megawatt from NVFP4 KV, and from each cut.
COEFFS = load_energy().gpus["h100-sxm5"]


def tokens_per_joule(kv_dtype, cuts, batch, ctx, model=L70B, tp=8):
    """One decode step at ``batch`` × ``ctx``: output tokens per joule of the group's GPUs
    (static power over the step, its HBM and L2 bytes, FLOPs, NVLink bytes and the units' cycles)."""
    sm = StepModel(model, H100, kv_dtype, tp, frozenset(cuts), stack=NO_JITTER)
    st = sm.step_time([ctx + 1] * batch, [1] * batch, RNG)
    led = EnergyLedger(COEFFS, model.weight_dtype)
    return batch / (tp * led.step_j(GpuWork.of_step(st), st.time_s))


kv_tpj = {d: tokens_per_joule(d, (), 64, 32768) for d in ("bf16", "fp8", "nvfp4")}
row("NVFP4 frees HBM for more context and batch, and so more throughput per megawatt (`003_*`)",
    f"Llama-3-70B TP8, batch 64 × 32K, decode step, no cuts: {kv_tpj['bf16'] * 1e6:,.0f} / {kv_tpj['fp8'] * 1e6:,.0f} / "
    f"{kv_tpj['nvfp4'] * 1e6:,.0f} tokens per MJ with bf16 / fp8 / NVFP4 KV: NVFP4 "
    f"{kv_tpj['nvfp4'] / kv_tpj['fp8']:.2f}× fp8, {kv_tpj['nvfp4'] / kv_tpj['bf16']:.2f}× bf16",
    f"the step's KV bytes shrink 8 → 4.5 bits per element (HBM {COEFFS.hbm_pj_per_byte:.0f} pJ/B, docs/energy.md) "
    "and the step is shorter (less static energy); weights and FLOPs do not change",
    "**direction confirmed**, at long context; the 30× per megawatt of Rubin over GB300 is a different "
    "GPU generation and is not expressible here")
cut_tpj = {label: tokens_per_joule("bf16", cuts, 64, 32768) for label, cuts in
           (("baseline", ()), ("te", ("te",)), ("cdu", ("cdu",)), ("dsu", ("dsu",)),
            ("te+cdu+dsu", ("te", "cdu", "dsu")))}
row("Each cut's tokens per joule against the baseline (the issue's per-megawatt framing)",
    "Llama-3-70B TP8, batch 64 × 32K, decode step: " + ", ".join(
        f"{k} {v / cut_tpj['baseline']:.2f}×" for k, v in cut_tpj.items() if k != "baseline"),
    "a cut saves energy only by shortening a busy step (less static energy) or by moving fewer bytes; "
    "the units' own logic costs energy (per busy cycle from their Yosys cells, an upper bound: docs/energy.md), "
    "and the TE's fp32 lanes cost more per attention FLOP than the SMs' tensor cores",
    "**the TE saves energy** where it shortens the step; the CDU and DSU barely move it at this point; "
    "at a light load (the Mooncake sample, docs/energy.md) no cut moves it")

print("| claim | our figure | physical bound / reasoning | verdict |")
print("|---|---|---|---|")
for r_ in rows:
    print("| " + " | ".join(r_) + " |")
