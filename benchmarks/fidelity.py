"""Fidelity of the baseline (``--cuts none``) against published H100 decode measurements.

    .venv/bin/python benchmarks/fidelity.py            # fit, print the report
    .venv/bin/python benchmarks/fidelity.py --write    # ... and write sim/fast/stacks.json and docs/fidelity.md

Reads every table row of the calibration file (``--calibration``, default
``../shared/calibration/published-h100-decode.md``), runs each row the fast model can express
under the stack that measured it and compares. Mechanisms are fitted on a stated subset and
judged on the rest (docs/fidelity.md, "Fit and held-out rows"):

* the decode-attention kernel curve (``attn_call_s``, ``attn_bw_efficiency``: a fixed cost per
  call plus the KV bytes at a bandwidth efficiency) on table B's timed kernel calls;
* per stack (``vllm-v0``, ``trtllm``) its host time per step and per request and its launch
  gap per layer with CUDA graphs, plus one all-reduce latency shared by both, on the A1 static
  batches at ISL = OSL = 1024 of that stack.

Held out: A1 at ISL = OSL = 128 and 2048, the A1 pure-decode ITLs, all of A3 (another source:
TensorRT-LLM's own tables, FP8 weights and KV, other models) and vLLM V1's TPOT row of table C.
A static batch of B requests is prefilled on the decode GPUs (colocated, in batches of at most
the stack's ``prefill_batch_tokens``) and then decoded for OSL - 1 steps:
``ms/token = (prefill + sum of steps) / OSL``. Steps are affine in the context between the
first and last step, so the sum is taken exactly by Simpson's rule on three steps.
"""

from __future__ import annotations

import argparse
import math
import re
import statistics
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from tricut.models.config import load_gpu, load_model
from tricut.sim.fast.stacks import STACKS_FILE, load_stacks
from tricut.sim.fast.timing import StepModel

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CALIBRATION = ROOT.parent / "shared" / "calibration" / "published-h100-decode.md"
COMMAND = ".venv/bin/python benchmarks/fidelity.py --write"
H100 = load_gpu("h100-sxm5")
MODELS = {"Llama-3-8B": "llama-3-8b", "Llama-3-70B": "llama-3-70b", "LLaMA-7B": "llama-2-7b",
          "LLaMA-70B": "llama-2-70b", "Llama-8B": "llama-3-8b"}
#: the stack whose kernel curve the table B rows measure (FlashAttention-class paged decode)
KERNEL_STACK = "vllm-v0"
#: fitted per stack / shared, with their starting points
PER_STACK = ("host_step_s", "host_per_request_s", "graph_layer_gap_s")
#: where the fit of the per-stack and shared values starts, the same on every run: a start
#: taken from the file would make each --write move the values a little (the loss is flat
#: along a per-layer gap near zero)
FIT_START = {"host_step_s": 1e-3, "host_per_request_s": 2e-5, "graph_layer_gap_s": 2e-5,
             "allreduce_latency_s": 1e-5, "attn_call_s": 1e-5, "attn_bw_efficiency": 0.6}
SHARED = ("allreduce_latency_s",)
KERNEL = ("attn_call_s", "attn_bw_efficiency")


# ------------------------------------------------------------------------------ the file
def tables(text: str) -> dict[str, list[dict]]:
    """Section letter (``A1``, ``A3``, ``B``, ``C``) -> its table rows as dicts."""
    out, section, header = {}, None, None
    for line in text.splitlines():
        m = re.match(r"^## (\w+)\.", line)
        if m:
            section, header = m.group(1), None
            continue
        if section is None or not line.startswith("|"):
            header = None if not line.startswith("|") else header
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if header is None:
            header = cells
        elif set("".join(cells)) <= set("-: "):
            continue
        else:
            rows = out.setdefault(section, [])
            # "same" repeats the cell above it
            if rows:
                cells = [rows[-1].get(h, c) if c == "same" else c for h, c in zip(header, cells)]
            rows.append(dict(zip(header, cells)))
    return out


def _num(text: str) -> float:
    return float(text.replace(",", "").split()[0])


@dataclass(frozen=True)
class Case:
    """One published figure the model can express."""
    label: str
    group: str          # source group (for the held-out split)
    stack: str
    kind: str           # static | itl | kernel | tpot
    published: float    # ms (per output token, per step or per call) or µs for kernels
    model: str = ""
    weights: str = "bf16"
    kv: str = "bf16"
    tp: int = 1
    batch: int = 1
    isl: int = 0
    osl: int = 0
    kv_bytes: float = 0.0     # kernel rows: KV bytes of the call
    fit: bool = False


def cases(rows: dict[str, list[dict]]) -> tuple[list[Case], list[tuple[str, str]]]:
    out, skipped = [], []
    for r in rows.get("A1", []):
        stack = "vllm-v0" if r["system"].startswith("vLLM") else "trtllm"
        isl = r["ISL/OSL"]
        if "TTFT" in r["metric"]:
            n = int(re.match(r"(\d+)", isl).group(1))
            ttft, e2e = (float(x.strip().rstrip("s")) for x in r["value"].split("/"))
            itl = (e2e - ttft) / (n - 1) * 1e3
            out.append(Case(f"A1 {r['system']} {r['model']} TP{r['TP']} bs{r['bs']} {n}/{n} ITL", "A1-itl",
                            stack, "itl", itl, MODELS[r["model"]], tp=int(r["TP"]), batch=int(r["bs"]),
                            isl=n, osl=n))
            continue
        i, o = (int(x) for x in isl.split("/"))
        out.append(Case(f"A1 {r['system']} {r['model']} TP{r['TP']} bs{r['bs']} {i}/{o}", "A1", stack,
                        "static", _num(r["derived ms/output token"]), MODELS[r["model"]], tp=int(r["TP"]),
                        batch=int(r["bs"]), isl=i, osl=o, fit=(i == 1024)))
    for r in rows.get("A3", []):
        i, o = (int(x) for x in r["ISL/OSL"].split("/"))
        out.append(Case(f"A3 {r['system']} {r['model']} TP{r['TP']} bs{r['batch']} {i}/{o} fp8", "A3",
                        "trtllm-2023", "static", _num(r["derived ms/step"]), MODELS[r["model"]], "fp8", "fp8",
                        int(r["TP"]), int(r["batch"]), i, o))
    for r in rows.get("B", []):
        m = re.match(r"([\d.]+) µs", r["value"])
        shape = re.search(r"(\d+) q / (\d+) kv, d=(\d+)|MHA (\d+)/(\d+), d=(\d+)", r["shape"])
        if not m or not shape or "Hopper" in r["GPU"] and "H100" not in r["GPU"]:
            skipped.append((f"B {r['kernel']} ({r['GPU']}, context {r['context']})", _why_not(r)))
            continue
        kv_heads, d = (int(shape.group(2)), int(shape.group(3))) if shape.group(1) else \
            (int(shape.group(5)), int(shape.group(6)))
        batch, ctx = int(r["batch"]), int(r["context"])
        out.append(Case(f"B {r['kernel'].split(',')[0]} bs{batch} ctx {ctx}", "B", "kernel", "kernel",
                        float(m.group(1)), batch=batch, isl=ctx,
                        kv_bytes=batch * ctx * kv_heads * d * 2 * 2, fit=True))
    for r in rows.get("C", []):
        if r["system"] == "vLLM V0" and "gap between consecutive decodes" in r["metric"]:
            lo, hi = (float(x) for x in re.findall(r"[\d.]+", r["value"])[:2])
            out.append(Case("C vLLM V0 0.6 Llama-2-7B bs256 gap between decode steps", "C", "vllm-v0.6",
                            "hostgap", (lo + hi) / 2, "llama-2-7b", batch=256, fit=True))
        elif r["system"].startswith("vLLM V1 full vs piecewise"):
            out.append(Case("C vLLM V1 Llama-8B conc 1 512/256 TPOT", "C", "vllm-v1", "tpot",
                            _num(r["value"].split(";")[1].replace("ms before", "")), "llama-3-8b",
                            batch=1, isl=512, osl=256))
        else:
            skipped.append((f"C {r['system']}, {r['model']}: {r['metric']}", _why_not(r)))
    return out, skipped


#: why a row is not expressed, by a phrase of its system or kernel cell
WHY_NOT = (
    ("FA3 (vLLM fork)", "neither the GPU nor the model's heads are stated (\"qwen32b-tp2\")"),
    ("FlashMLA", "MLA attention (DeepSeek), which no shipped model has; a peak bandwidth, not a timed call"),
    ("FlashInfer single-request", "the numbers are only in a figure"),
    ("FlashInfer vs vLLM", "a speed-up ratio between two kernels over A100 and H100, not a time"),
    ("vLLM ≤0.5.3", "shares of serving time including the HTTP API server, which the model does not run"),
    ("vLLM ≤0.5.x", "light load through the API server; batch and prompt lengths not stated"),
    ("vLLM 0.6.0", "a gain between two vLLM versions (multi-step scheduling), not a time"),
    ("vLLM V1", "GPU execution time only (\"as low as ~5 ms\"), batch not stated"),
    ("RFC #6854", "model, GPU and batch not stated; cited for vllm-v0's synchronous scheduling"),
    ("SGLang (-omni)", "SGLang and Qwen3-Omni: no stack profile or model config for them"),
    ("SGLang v0.4", "a speed-up ratio between SGLang versions on a 3B model"),
    ("analysis blog", "a share without a setup"),
    ("CUDA graph (early PR)", "vLLM of 2023, no shipped stack; its eager/graph difference is the source "
                              "of eager_extra_gap_s"),
    ("gpt-fast", "A100 and eager PyTorch, no stack profile"),
    ("secondary blog", "method unknown (low confidence), stack not stated"),
    ("TRT-LLM v1.3.0rc8", "GB200, not Hopper; graph memory and capture time, not a step time"),
)


def _why_not(row: dict) -> str:
    text = " ".join(row.values())
    return next((why for key, why in WHY_NOT if key in text), "no single time for a stated H100 setup")


# ------------------------------------------------------------------------------ the model
def step_model(case: Case, stack) -> StepModel:
    model = replace(load_model(case.model), weight_dtype=case.weights)
    return StepModel(model, H100, case.kv, case.tp, frozenset(), stack=stack)


def decode_s(sm: StepModel, batch: int, first_ctx: int, steps: int, rng) -> float:
    """Sum of ``steps`` decode steps of ``batch`` requests whose contexts (with the new token)
    run from ``first_ctx`` to ``first_ctx + steps - 1``: exact for steps affine in the context."""
    if steps <= 0:
        return 0.0
    t = [sm.step_time([c] * batch, [1] * batch, rng).time_s
         for c in (first_ctx, first_ctx + (steps - 1) / 2, first_ctx + steps - 1)]
    return steps * (t[0] + 4 * t[1] + t[2]) / 6


def prefill_s(sm: StepModel, batch: int, isl: int) -> float:
    per = max(1, sm.stack.prefill_batch_tokens // isl)
    full, rest = divmod(batch, per)
    return full * sm.prefill_batch_time([isl] * per) + (sm.prefill_batch_time([isl] * rest) if rest else 0.0)


def predict(case: Case, stacks: dict) -> float:
    rng = np.random.default_rng(0)
    if case.kind == "kernel":
        return stacks[KERNEL_STACK].attention_s(case.kv_bytes, 1, H100.hbm_bandwidth) * 1e6
    if case.kind == "hostgap":
        return stacks[case.stack].host_step_s * 1e3 + stacks[case.stack].host_per_request_s * case.batch * 1e3
    sm = step_model(case, stacks[case.stack])
    if case.kind == "static":
        total = prefill_s(sm, case.batch, case.isl) + decode_s(sm, case.batch, case.isl + 1, case.osl - 1, rng)
        return total / case.osl * 1e3
    # pure-decode ITL / TPOT: the mean decode step
    return decode_s(sm, case.batch, case.isl + 1, case.osl - 1, rng) / (case.osl - 1) * 1e3


def errors(cs: list[Case], stacks: dict) -> list[float]:
    return [predict(c, stacks) / c.published - 1 for c in cs]


# ------------------------------------------------------------------------------ the fit
def nelder_mead(f, x0, steps, iters=3000, tol=1e-10):
    """Minimise ``f`` from ``x0`` (plain Nelder-Mead; no SciPy in the environment)."""
    n = len(x0)
    pts = [np.array(x0, float)] + [np.array(x0, float) + np.eye(n)[i] * steps[i] for i in range(n)]
    vals = [f(p) for p in pts]
    for _ in range(iters):
        order = np.argsort(vals)
        pts, vals = [pts[i] for i in order], [vals[i] for i in order]
        if abs(vals[-1] - vals[0]) < tol:
            break
        c = sum(pts[:-1]) / n
        xr = c + (c - pts[-1])
        fr = f(xr)
        if fr < vals[0]:
            xe = c + 2 * (c - pts[-1])
            fe = f(xe)
            pts[-1], vals[-1] = (xe, fe) if fe < fr else (xr, fr)
        elif fr < vals[-2]:
            pts[-1], vals[-1] = xr, fr
        else:
            xc = c + 0.5 * (pts[-1] - c)
            fc = f(xc)
            if fc < vals[-1]:
                pts[-1], vals[-1] = xc, fc
            else:
                pts = [pts[0] + 0.5 * (p - pts[0]) for p in pts]
                vals = [f(p) for p in pts]
    i = int(np.argmin(vals))
    return pts[i], vals[i]


def _loss(errs):
    return sum(math.log1p(e) ** 2 for e in errs)


def resolve(stacks: dict, sources: dict) -> dict:
    """Copy every value whose source reads "as <stack>" from that stack."""
    out = dict(stacks)
    for _ in range(len(out)):
        for name, src in sources.items():
            copies = {}
            for f, text in src.items():
                m = re.match(r"as ([\w.-]+)", text)
                if m and m.group(1) in out:
                    copies[f] = getattr(out[m.group(1)], f)
            if copies:
                out[name] = replace(out[name], **copies)
    return out


def fit_kernel(rows: list[Case], start) -> tuple[float, float]:
    """``(attn_call_s, attn_bw_efficiency)`` of the kernel curve that best fits ``rows``
    (relative errors), from the profile ``start``."""
    def profile(x):
        return {KERNEL_STACK: start.with_values(attn_call_s=math.exp(x[0]),
                                                attn_bw_efficiency=1 / (1 + math.exp(-x[1])))}
    e = start.attn_bw_efficiency
    x, _ = nelder_mead(lambda x: _loss(errors(rows, profile(x))),
                       [math.log(max(start.attn_call_s, 1e-7)), math.log(e / (1 - e))], [0.3, 0.3])
    return math.exp(x[0]), 1 / (1 + math.exp(-x[1]))


def fit(cs: list[Case], base: dict, sources: dict) -> dict:
    """The profiles with every value whose source starts with "fit:" fitted: the kernel curve
    on table B, then each stack's host and gap values and the shared all-reduce latency on the
    fit rows of table A1; "as <stack>" values follow their stack."""
    fitted = lambda name, f: sources[name][f].startswith("fit:")       # noqa: E731
    kernel_rows = [c for c in cs if c.kind == "kernel" and c.fit]
    kernel_stacks = [n for n in base if all(fitted(n, f) for f in KERNEL)]

    call, eff = fit_kernel(kernel_rows, base[kernel_stacks[0]].with_values(
        attn_call_s=FIT_START["attn_call_s"], attn_bw_efficiency=FIT_START["attn_bw_efficiency"]))
    stacks = resolve({k: (v.with_values(attn_call_s=call, attn_bw_efficiency=eff) if k in kernel_stacks else v)
                      for k, v in base.items()}, sources)

    rows = [c for c in cs if c.fit and c.kind != "kernel"]
    names = [(s, p) for s in base for p in PER_STACK if fitted(s, p)]
    names += [(None, p) for p in SHARED if any(fitted(s, p) for s in base)]

    def apply(x):
        vals = dict(zip(names, (math.exp(v) for v in x)))
        out = {}
        for s, prof in stacks.items():
            own = {p: v for (n, p), v in vals.items() if n == s}
            own.update({p: v for (n, p), v in vals.items() if n is None and fitted(s, p)})
            out[s] = prof.with_values(**own) if own else prof
        return resolve(out, sources)

    x0 = [math.log(FIT_START[p]) for s, p in names]
    x, _ = nelder_mead(lambda x: _loss(errors(rows, apply(x))), x0, [0.5] * len(x0), iters=6000)
    x, _ = nelder_mead(lambda x: _loss(errors(rows, apply(x))), x, [0.2] * len(x0), iters=6000)
    return apply(x)


# ------------------------------------------------------------------------------ the report
def _stats(errs):
    if not errs:
        return "–", "–", "–"
    a = [abs(e) for e in errs]
    return f"{100 * statistics.median(a):.1f} %", f"{100 * max(a):.1f} %", f"{100 * statistics.median(errs):+.1f} %"


def _optimistic(errs) -> str:
    """The share of rows the model predicts faster than measured (error < 0)."""
    return f"{100 * sum(e < 0 for e in errs) / len(errs):.0f} %" if errs else "–"


def report(cs, skipped, stacks, before, table, calibration, peer=None) -> str:
    got = {c.label: predict(c, stacks) for c in cs}
    old = {c.label: predict(c, before) for c in cs}
    unit = {"kernel": "µs/call", "static": "ms/token", "itl": "ms/step", "tpot": "ms/token",
            "hostgap": "ms/step"}
    lines = ["# Fidelity: the baseline against published H100 decode measurements", "",
             f"Written by `{COMMAND}` (reads `{calibration}`); do not edit by hand. "
             "What the stacks are and how each enters the step time: `docs/system-model.md`; "
             "the stack parameters and their sources are at the end of this page.", "",
             "## Summary (|error| median, worst, and signed median)", "",
             "| stack | rows | fitted: median | worst | held out: median | worst | signed median (held out) "
             "| optimistic (held out) |",
             "|---|---|---|---|---|---|---|---|"]
    for s in sorted({c.stack for c in cs}):
        fe = [got[c.label] / c.published - 1 for c in cs if c.stack == s and c.fit]
        he = [got[c.label] / c.published - 1 for c in cs if c.stack == s and not c.fit]
        f_med, f_max, _ = _stats(fe)
        h_med, h_max, h_sig = _stats(he)
        lines.append(f"| {s} | {len(fe) + len(he)} | {f_med} | {f_max} | {h_med} | {h_max} | {h_sig} "
                     f"| {_optimistic(he)} |")
    allh = [got[c.label] / c.published - 1 for c in cs if not c.fit]
    h_med, h_max, h_sig = _stats(allh)
    lines += [f"| **all held out** | {len(allh)} | | | {h_med} | {h_max} | {h_sig} | {_optimistic(allh)} |", "",
              "Before stack profiles the model had one fixed set of constants (host 250 µs + 2 µs "
              "per request per step, 4 µs per layer, 5 µs per all-reduce, attention at 70 % of HBM "
              "bandwidth with no cost per call). With those constants, and prefill and jitter "
              "treated as on this page, the same rows had: " + _before_line(cs, old), "",
              "The `kernel` line is table B's attention calls (µs per call); every other line is a "
              "serving stack. Signed errors are predicted / published − 1: negative = the model is "
              "too fast.", "",
              "## Fit and held-out rows", "",
              "* **kernel** (`attn_call_s`, `attn_bw_efficiency`, shared by the vLLM and TensorRT-LLM "
              "stacks): fitted on table B's timed calls (FlashAttention-2 nvbench, FlashAttention-3 "
              "user measurement). KV bytes of a call = batch × context × KV heads × head_dim × 2 × 2 B. "
              "A call costs `attn_call_s + bytes / (HBM bw × attn_bw_efficiency)`, so the bandwidth "
              "it reaches, `bytes / time`, rises with the KV bytes per call (batch × context × heads) "
              "towards `attn_bw_efficiency`: the fixed cost dominates short contexts. Page size is "
              "not a parameter: table B's FlashInfer row finds it has little effect, and the FA2 "
              "(page 256) and FA3 (page 8) rows sit on one curve within the errors below.",
              f"* **per stack** ({', '.join(PER_STACK)}) for `vllm-v0` and `trtllm`, and the shared "
              f"`{SHARED[0]}`: fitted on table A1's static batches at ISL = OSL = 1024 of that stack "
              "(vLLM and TensorRT-LLM rows of LLM-Inference-Bench). Each stack is the version its rows "
              "ran: `vllm-v0` is vLLM of mid-2024, taken as before 0.6.0's asynchronous output "
              "processing (the rows' benchmark script predates its option), so its per-request host "
              "work sits between the steps; `trtllm` is tensorrt_llm 0.11.0 on the "
              "C++ executor, whose in-flight batch manager works per request each step.",
              "* **`vllm-v0.6`** (vLLM V0 0.6.x, asynchronous output processing on) is `vllm-v0` with "
              "its own `host_per_request_s`, fitted on table C's measured gap between decode steps at "
              "batch 256 (vLLM issue #10634, late 2024, 5–6 ms, taken as 5.5 ms = `host_step_s + "
              "256 × host_per_request_s`): one row, one value, so that row checks nothing. `vllm-v1` "
              "has no rows of its own to fit: it takes `vllm-v0`'s host step and `vllm-v0.6`'s "
              "per-request work (its sources say why).",
              "* **`trtllm-2023`** (TensorRT-LLM 0.5–0.6, the A3 rows' versions) is `trtllm` with three "
              "cited differences: GQA decode before the XQA kernels (0.7, December 2023) read K/V once "
              "per query head; "
              "the static-batch runs streamed a contiguous KV cache (taken at the `ideal` "
              "kernel efficiency); and they ran the C++ `gptSessionBenchmark`, whose `GptSession` has "
              "no per-request work per step (`host_per_request_s` = 0; it decodes the whole batch with "
              "`decoderPerRequest` off). Nothing was fitted on A3, but all three were set after seeing "
              "A3's errors (the first two under `trtllm`, +16 % to −46 %; the third under the first two, "
              "+8.6 % to +26.5 %), so A3 is not a blind test of this profile; the held-out rows of A1 "
              "and C are. Its scheduler and KV policy are `trtllm`'s in-flight batch manager's: for a "
              "serving run (not a static batch) it mixes the two runtimes.",
              "* **fp8 weight GEMVs** (`fp8_gemv_efficiency_ratio`, `fp8_gemv_call_extra_s`): for the "
              "vLLM stacks, fitted on AIConfigurator's measured H100 GEMM table of vLLM (read in the same "
              "run as its comparison below): over the table's decode-sized cells, each format's time per "
              "call is a fixed time plus the weight bytes at a bandwidth efficiency; the ratio of the two "
              "efficiencies and the difference of the fixed times are the stack's values. No calibration "
              "row has vLLM with fp8 weights, so no row checks them. "
              "The TensorRT-LLM stacks keep bf16's timing (ratio 1, no extra time): AIConfigurator's "
              "TensorRT-LLM table is of the 1.x "
              "PyTorch flow, not the TensorRT engines of 0.5–0.11 that the A1 and A3 rows ran.",
              "* **held out**: A1 at ISL = OSL = 128 and 2048 and its pure-decode ITL rows (same "
              "source, other shapes), every A3 row (another source: TensorRT-LLM's performance tables, "
              "FP8 weights and KV, Llama-2 models, batches to 480) and table C's vLLM V1 TPOT row.",
              "", "## Every row", "",
              "| row | fit? | stack | unit | published | predicted | error | before |",
              "|---|---|---|---|---|---|---|---|"]
    for c in cs:
        e = got[c.label] / c.published - 1
        b = old[c.label] / c.published - 1
        lines.append(f"| {c.label} | {'fit' if c.fit else 'held out'} | {c.stack} | {unit[c.kind]} | "
                     f"{c.published:.2f} | {got[c.label]:.2f} | {100 * e:+.1f} % | {100 * b:+.1f} % |")
    if peer is not None:
        lines += [""] + peer_section(cs, got, peer)
    lines += [""] + concurrency_sweep(stacks)
    lines += ["", "## Rows the model does not express", "", "| row | missing |", "|---|---|"]
    lines += [f"| {lab} | {why} |" for lab, why in skipped]
    lines += ["", "## Stack parameters (`sim/fast/stacks.json`)", "",
              "| stack | parameter | value | source |", "|---|---|---|---|"]
    for name, p in stacks.items():
        for f in p.__dataclass_fields__:
            if f == "name":
                continue
            lines.append(f"| {name} | `{f}` | {_fmt(getattr(p, f), f)} | {table.sources[name][f]} |")
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------ the peer
#: AIConfigurator's own environment (``make peer-aic``) and its runner
PEER_PYTHON = ROOT / ".build" / "peer-aic" / "bin" / "python"
PEER_RUNNER = ROOT / "benchmarks" / "peer_aiconfigurator.py"
#: our stacks -> the AIConfigurator backend whose kernel tables stand for them
PEER_BACKEND = {"vllm-v0": "vllm", "vllm-v0.6": "vllm", "vllm-v1": "vllm", "trtllm": "trtllm", "trtllm-2023": "trtllm"}
PEER_QUANT = {"bf16": "bfloat16", "fp8": "fp8"}


class PeerMissing(Exception):
    """AIConfigurator's environment is not there (``make peer-aic``)."""


#: AIConfigurator's measured H100 GEMM table of vLLM, inside its environment
PEER_GEMM_TABLE = "lib/python*/site-packages/aiconfigurator_core/systems/data/h100_sxm/gemm/vllm/*/gemm_perf.parquet"
#: the decode-sized cells of that table: at most 64 rows of activations, 2^24 to 2^30 weights
GEMM_DECODE_M, GEMM_DECODE_WEIGHTS = 64, (2 ** 24, 2 ** 30)
#: the two fp8 GEMV parameters the table gives
FP8_GEMV = ("fp8_gemv_efficiency_ratio", "fp8_gemv_call_extra_s")


def gemm_line(table: Path, dtype: str, bytes_per_weight: int) -> tuple[float, float]:
    """``(fixed s per call, bandwidth efficiency)`` of one weight format's GEMMs in the table's
    decode-sized cells: time = fixed + weight bytes / (H100's HBM bandwidth x efficiency),
    least squares on relative error."""
    import duckdb
    lo, hi = GEMM_DECODE_WEIGHTS
    cells = duckdb.execute(
        f"select n, k, median(latency) from read_parquet(?) where gemm_dtype = ? and m <= {GEMM_DECODE_M} "
        f"and n * k between {lo} and {hi} group by m, n, k order by m, n, k", [str(table), dtype]).fetchall()
    if len(cells) < 2:
        raise PeerMissing(f"{table}: fewer than 2 decode-sized {dtype} cells")
    weights = np.array([n * k * bytes_per_weight for n, k, _ in cells], dtype=float)
    t = np.array([ms * 1e-3 for _, _, ms in cells])
    a = np.vstack([np.ones_like(weights), weights]).T / t[:, None]
    (fixed, per_byte), *_ = np.linalg.lstsq(a, np.ones_like(t), rcond=None)
    return float(fixed), float(1 / (per_byte * H100.hbm_bandwidth))


def fp8_gemv_fit(python: Path) -> dict:
    """vLLM's fp8 GEMVs against its bf16 ones, from AIConfigurator's measured GEMM table
    (:func:`gemm_line` of each format): the ratio of their bandwidth efficiencies and the
    fp8 call's extra fixed time. The table ships with AIConfigurator (``make peer-aic``)."""
    found = sorted((python.parent.parent).glob(PEER_GEMM_TABLE))
    if len(found) != 1:
        raise PeerMissing(f"expected one vLLM GEMM table under {python.parent.parent}, found {len(found)}: "
                          "run `make peer-aic`")
    c16, e16 = gemm_line(found[0], "bfloat16", 2)
    c8, e8 = gemm_line(found[0], "fp8", 1)
    return {"fp8_gemv_efficiency_ratio": min(1.0, e8 / e16), "fp8_gemv_call_extra_s": max(0.0, c8 - c16)}


def with_gemm_table(stacks: dict, sources: dict, values: dict) -> dict:
    """The profiles with every fp8 GEMV parameter (:data:`FP8_GEMV`) whose source starts with
    "fit:" set from ``values`` (:func:`fp8_gemv_fit`); "as <stack>" values follow."""
    out = {}
    for n, p in stacks.items():
        own = {f: values[f] for f in FP8_GEMV if sources[n][f].startswith("fit:")}
        out[n] = p.with_values(**own) if own else p
    return resolve(out, sources)


def hf_config(name: str) -> dict:
    """The Hugging Face ``config.json`` of one of our model configs (what AIConfigurator reads)."""
    m = load_model(name)
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": m.hidden_size,
            "intermediate_size": m.ffn_size, "num_attention_heads": m.num_heads,
            "num_hidden_layers": m.num_layers, "num_key_value_heads": m.num_kv_heads,
            "head_dim": m.head_dim, "vocab_size": m.vocab_size, "max_position_embeddings": m.max_context,
            "rms_norm_eps": m.rms_norm_eps, "rope_theta": m.rope_theta,
            "tie_word_embeddings": m.tie_embeddings, "torch_dtype": "bfloat16"}


def peer_rows(cs) -> list[dict]:
    """The serving rows AIConfigurator can express: a static batch of a Llama model."""
    return [{"label": c.label, "config": hf_config(c.model), "backend": PEER_BACKEND[c.stack],
             "isl": c.isl, "osl": c.osl, "batch": c.batch, "tp": c.tp, "gemm": PEER_QUANT[c.weights],
             "kv": PEER_QUANT[c.kv]}
            for c in cs if c.kind in ("static", "itl", "tpot")]


def check_peer(python: Path) -> None:
    """Raise :class:`PeerMissing` unless AIConfigurator's environment is at ``python``."""
    if not python.exists():
        raise PeerMissing(f"AIConfigurator is not installed at {python}: run `make peer-aic` (its own "
                          "environment under .build/peer-aic, from PyPI), or pass --no-peer")


def run_peer(cs, python: Path, runner: Path = PEER_RUNNER) -> dict:
    """AIConfigurator's figure per row label, in the row's unit (ms per output token, per
    step); rows it could not run are left out (their reasons on stderr)."""
    import json
    import subprocess
    check_peer(python)
    rows = peer_rows(cs)
    done = subprocess.run([str(python), str(runner)], input=json.dumps(rows), capture_output=True,
                          text=True, check=False)
    if done.returncode != 0:
        raise PeerMissing(f"AIConfigurator's runner failed (exit {done.returncode}): "
                          f"{done.stderr.strip().splitlines()[-1] if done.stderr.strip() else 'no message'}")
    kind = {c.label: c for c in cs}
    out = {}
    for r in json.loads(done.stdout):
        if "error" in r:
            print(f"fidelity: AIConfigurator cannot run {r['label']}: {r['error']}", file=sys.stderr)
            continue
        c = kind[r["label"]]
        out[r["label"]] = (r["request_latency_ms"] / c.osl if c.kind == "static" else r["tpot_ms"],
                           r["version"])
    return out


def peer_section(cs, got, peer) -> list[str]:
    """tricut against AIConfigurator on the rows both express."""
    rows = [c for c in cs if c.label in peer]
    versions = sorted({v for _, v in peer.values()})
    lines = ["## tricut against AIConfigurator", "",
             "NVIDIA's AIConfigurator (PyPI `aiconfigurator`, the version pinned in the Makefile's "
             "`peer-aic` target; offline, on its measured H100 SXM kernel tables of backend versions "
             f"{', '.join(versions)}), static estimate (`aiconfigurator cli estimate --estimate-mode static`: "
             "one batch prefilled, then decoded; ms per output token = request latency / OSL, pure-decode "
             "rows its TPOT) of every serving row it can express: the vLLM rows on its `vllm` tables, "
             "the TensorRT-LLM rows on its `trtllm` tables, FP8 rows with `fp8` GEMMs and KV. Its tables "
             "are of today's backends, the rows of 2023–24 ones; it was fitted on none of these rows, "
             "tricut on the rows marked fit. Run by the same command as this page "
             "(`benchmarks/peer_aiconfigurator.py` in AIConfigurator's own environment).", "",
             "| rows | tool | median abs. error | worst | signed median | optimistic |",
             "|---|---|---|---|---|---|"]
    for what, sel in (("held out", [c for c in rows if not c.fit]), ("all", rows)):
        for tool, val in (("tricut", lambda c: got[c.label]), ("AIConfigurator", lambda c: peer[c.label][0])):
            e = [val(c) / c.published - 1 for c in sel]
            med, worst, sig = _stats(e)
            lines.append(f"| {what} ({len(sel)}) | {tool} | {med} | {worst} | {sig} | {_optimistic(e)} |")
    lines += ["", "| row | fit? | published | tricut | error | AIConfigurator | error |", "|---|---|---|---|---|---|---|"]
    for c in rows:
        a = peer[c.label][0]
        lines.append(f"| {c.label} | {'fit' if c.fit else 'held out'} | {c.published:.2f} | {got[c.label]:.2f} | "
                     f"{100 * (got[c.label] / c.published - 1):+.1f} % | {a:.2f} | {100 * (a / c.published - 1):+.1f} % |")
    missing = [c.label for c in cs if c.label not in peer]
    lines += ["", "Not expressible by AIConfigurator here: " + "; ".join(missing) + " (kernel calls and "
              "host gaps are not what its estimate reports)."]
    return lines


#: the concurrency sweep: Llama-3-70B with FP8 weights and KV on two H100s, long prompts, short
#: outputs, C closed-loop clients each sending 3 requests (at least 24 in all)
SWEEP_CLIENTS = (1, 4, 16, 32, 64, 96, 128, 160, 200, 250)
SWEEP_PROMPT, SWEEP_OUTPUT, SWEEP_TP = 4096, 128, 2
#: decode slots as vLLM's max_num_seqs default: the KV budget, not the slots, binds
SWEEP_SLOTS = 256


def concurrency_sweep(stacks) -> list[str]:
    """The Markdown section of the concurrency sweep: TTFT, TPOT and the decode-slot wait with
    the defaults (admission control, client jitter, the stack's KV policy: vLLM's pre-emption)
    against the model before them (admission and jitter off, whole outputs reserved)."""
    from tricut.sim.fast.setup import ServingSetup
    from tricut.sim.fast.workload import Request
    model = replace(load_model("llama-3-70b"), weight_dtype="fp8")
    stack = stacks["vllm-v0"]
    lines = ["## Admission control and pre-emption: a concurrency sweep", "",
             f"Llama-3-70B, FP8 weights and KV, TP{SWEEP_TP} on H100 SXM5, stack `{stack.name}` "
             f"({stack.prefill} prefill), {SWEEP_SLOTS} decode slots; C closed-loop clients, each "
             f"sending 3 requests (at least 24 in all) of {SWEEP_PROMPT} prompt and {SWEEP_OUTPUT} output "
             "tokens, no think time. *now*: the defaults, admission control and client jitter on and the "
             f"stack's KV policy (`kv_reserve` = {stack.kv_reserve}: admission reserves the prompt with a "
             f"{stack.kv_watermark:.0%} watermark, KV is taken as tokens are decoded, and the request admitted "
             "last is pre-empted and recomputed when KV runs out); *before*: the model before these "
             "mechanisms, admission and jitter off (`--admission off --client-jitter off`) and whole outputs "
             "reserved (the DSU's rule, `kv_reserve` = output), so every request is prefilled on arrival, "
             "the clients move in lock-step and nothing is pre-empted. p50 of each metric; the decode queue "
             "is the wait for a decode slot and KV (before the prefill with admission, after it without: "
             "docs/metrics.md). The *now* runs from the command line: `tricut simulate --model "
             f"llama-3-70b --tp {SWEEP_TP} --kv-dtype fp8 --slots {SWEEP_SLOTS} --max-batch {SWEEP_SLOTS} "
             f"--cuts none --synthetic 3C --prompt-tokens {SWEEP_PROMPT} --output-tokens {SWEEP_OUTPUT} "
             "--concurrency C` runs the model's bf16 weights (the weight format is not a flag).", "",
             "| C | TTFT now | TTFT before | TPOT now | TPOT before | decode queue now | before | "
             "tokens/s now | before | mean batch now | pre-emptions now |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    before = stack.with_values(kv_reserve="output")
    for c in SWEEP_CLIENTS:
        reqs = [Request(i, 0.0, SWEEP_PROMPT, SWEEP_OUTPUT) for i in range(max(3 * c, 24))]
        out = []
        for on in (True, False):
            setup = ServingSetup(model, H100, "fp8", SWEEP_TP, n_slots=SWEEP_SLOTS, max_batch=SWEEP_SLOTS,
                                 stack=stack if on else before, concurrency=c, admission=on, client_jitter=on)
            out.append(setup.run(reqs, ()).summary)
        now, old = out
        lines.append(f"| {c} | {now['ttft_p50_s']:.2f} s | {old['ttft_p50_s']:.2f} s | "
                     f"{now['tpot_p50_s'] * 1e3:.1f} ms | {old['tpot_p50_s'] * 1e3:.1f} ms | "
                     f"{now['decode_queue_p50_s']:.2f} s | {old['decode_queue_p50_s']:.2f} s | "
                     f"{now['tokens_per_s']:.0f} | {old['tokens_per_s']:.0f} | {now['mean_batch']:.1f} | "
                     f"{now['preemptions']} |")
    budget = setup.dsu_params().kv_capacity_tokens
    whole = budget // (SWEEP_PROMPT + SWEEP_OUTPUT)
    prompts = (budget - stack.watermark_tokens(budget)) // (SWEEP_PROMPT + 1)
    lines += ["", f"The KV budget ({budget:,} tokens) holds {whole} of these requests whole and the prompts "
              f"of {prompts}. Up to {whole} clients nothing waits for KV, and the two columns differ only by the "
              "clients' phases (in lock-step a wave's prompts are all prefilled before its first decode step). "
              f"Beyond {whole} clients vLLM's policy admits up to {prompts} requests, more than can finish "
              "together: as they decode, the request admitted last is pre-empted, waits at the head of the "
              "queue and is prefilled again with its whole context, which costs prefill time on the decode "
              "GPUs (the pre-emptions column). The requests beyond those wait for admission before their "
              "prefill, so the wait lands in their TTFT; without admission every prompt was prefilled and its "
              "request then waited for KV after its first token, so the wait landed in its TPOT. The colocated "
              "prefill of this stack runs every waiting prompt before the next decode step, so even below the "
              "budget a request's first token can wait for other prompts' prefills before its first decode "
              "step: that is the decode queue at 16 to 128 clients."]
    return lines


def _fmt(v, name: str):
    """Parameter ``name``'s value as the table shows it: a time below 0.1 s in µs."""
    if isinstance(v, bool) or isinstance(v, str) or isinstance(v, int):
        return str(v)
    if v == 0:
        return "0"
    if name.endswith("_s") and v < 0.1:
        return f"{v * 1e6:.2f} µs"
    return f"{v:.3f}" if v >= 0.1 else f"{v:g}"


def _before_line(cs, old):
    he = [old[c.label] / c.published - 1 for c in cs if not c.fit and c.kind != "kernel"]
    al = [old[c.label] / c.published - 1 for c in cs if c.kind != "kernel"]
    m1, w1, s1 = _stats(al)
    m2, w2, s2 = _stats(he)
    return (f"median |error| {m1}, worst {w1}, signed median {s1} over the {len(al)} serving rows "
            f"({m2}, {w2}, {s2} on the held-out ones).")


def previous_model(stacks: dict) -> dict:
    """The constants the model had before stack profiles, as profiles (for the 'before' column)."""
    return {k: v.with_values(host_step_s=250e-6, host_per_request_s=2e-6, host_jitter_s=0.0,
                             sched_overlap=0.0, graph_layer_gap_s=4e-6, eager_extra_gap_s=0.0,
                             attn_call_s=0.0, attn_bw_efficiency=0.70, allreduce_latency_s=5e-6)
            for k, v in stacks.items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calibration", type=Path, default=DEFAULT_CALIBRATION,
                    help="the published measurements (default: ../shared/calibration/published-h100-decode.md)")
    ap.add_argument("--peer", type=Path, default=PEER_PYTHON, metavar="PYTHON",
                    help="the Python of AIConfigurator's environment (default: .build/peer-aic/bin/python, "
                         "made by `make peer-aic`)")
    ap.add_argument("--no-peer", action="store_true",
                    help="leave out the AIConfigurator comparison (not with --write)")
    ap.add_argument("--write", action="store_true",
                    help=f"write the fitted values into sim/fast/{STACKS_FILE} and the report into docs/fidelity.md")
    args = ap.parse_args(argv)
    try:
        text = args.calibration.read_text(encoding="utf-8")
    except OSError as e:
        print(f"fidelity: cannot read {args.calibration}: {e.strerror}", file=sys.stderr)
        return 2
    cs, skipped = cases(tables(text))
    # the refusals first, before the fit's half a minute
    if args.write and args.no_peer:
        print("fidelity: --write writes the AIConfigurator comparison too: drop --no-peer", file=sys.stderr)
        return 2
    try:
        if not args.no_peer:
            check_peer(args.peer)
    except PeerMissing as e:
        print(f"fidelity: {e}", file=sys.stderr)
        return 2
    table = load_stacks()
    stacks = fit(cs, table.profiles, table.sources)
    before = previous_model(table.profiles)
    # "previous model" used prefill on a separate pool: run its rows without the colocated prefill
    try:
        label = str(args.calibration.resolve().relative_to(ROOT.parent))
        label = "../" + label
    except ValueError:
        label = str(args.calibration)
    try:
        peer = None if args.no_peer else run_peer(cs, args.peer)
        if not args.no_peer:
            stacks = with_gemm_table(stacks, table.sources, fp8_gemv_fit(args.peer))
    except PeerMissing as e:
        print(f"fidelity: {e}", file=sys.stderr)
        return 2
    text = report(cs, skipped, stacks, before, table, label, peer)
    print(text)
    if args.write:
        def source(text):
            if not text.startswith("fit:"):
                return text
            what = re.search(r"\(([^()]*)\)$", text)
            return f"fit: {COMMAND}" + (f" ({what.group(1)})" if what else "")
        fitted = {name: {f: source(src) for f, src in table.sources[name].items()} for name in stacks}
        out = type(table)(stacks, fitted, table.about)
        out.save(ROOT / "sim" / "fast" / STACKS_FILE)
        (ROOT / "docs" / "fidelity.md").write_text(text, encoding="utf-8")
        print(f"wrote sim/fast/{STACKS_FILE} and docs/fidelity.md", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
