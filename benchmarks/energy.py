"""Energy of the fast model against measurement, and where a decode step's joules go.

    .venv/bin/python benchmarks/energy.py            # fit, print the report
    .venv/bin/python benchmarks/energy.py --write    # ... and write sim/fast/energy.json and docs/energy.md

Reads table A of ``../shared/calibration/energy-h100.md`` (``--calibration``): ML.ENERGY's
measured GPU energy per output token of vLLM 0.11.1 serving on H100. Each row is run as that
benchmark runs it: 1,024 requests sent at once to a server whose ``max_num_seqs`` is the
row's batch (decode slots and batch cap), vLLM V1's chunked prefill (stack ``vllm-v1``) with
admission control; prompt lengths lognormal with a mean of 600 tokens, output lengths
lognormal with the row's mean (clipped to 4,096), both with a log-space sigma of
:data:`SIGMA` (the lm-arena prompts and answers vary widely; their spread is not in the
file). Energy is counted over the benchmark's steady-state window: from the moment
``max_num_seqs`` requests have their first token to the moment all but ``max_num_seqs + 1``
have finished, the GPU's work in it (decode steps with their prefill chunks) and its static
power over its length; J/token = that energy / the output tokens emitted in it.

The model's energy is linear in its coefficients, so each row is simulated once and two
coefficients are fitted by linear least squares on the rows' relative errors: ``static_w``
(the power of a GPU running kernels beyond its bytes and FLOPs) and ``sm_pj_per_flop``, on
the Llama-3.1-8B rows; the Qwen3 rows (another model family, a larger model, two GPUs) are
held out. The other coefficients keep their cited values.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np

from tricut.models.config import load_gpu, load_model
from tricut.sim.fast.energy import ENERGY_FILE, GPU_COMPONENTS, EnergyLedger, GpuWork, load_energy
from tricut.sim.fast.setup import ServingSetup
from tricut.sim.fast.stacks import get_stack
from tricut.sim.fast.timing import StepModel
from tricut.sim.fast.workload import Request

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CALIBRATION = ROOT.parent / "shared" / "calibration" / "energy-h100.md"
COMMAND = ".venv/bin/python benchmarks/energy.py --write"
H100 = load_gpu("h100-sxm5")
MODELS = {"Llama-3.1-8B-Instruct": "llama-3-8b", "Qwen3-8B": "qwen3-8b", "Qwen3-32B": "qwen3-32b"}
FIT_MODEL = "llama-3-8b"
STACK = "vllm-v1"
REQUESTS, PROMPT_MEAN, OUTPUT_MAX, SIGMA, SEED = 1024, 600, 4096, 0.8, 1
FITTED = ("static_w", "sm_pj_per_flop")
#: the section benchmarks/unit_energy.py --write owns, kept as it is
UNIT_BEGIN, UNIT_END = "<!-- unit-energy:begin -->", "<!-- unit-energy:end -->"


def kept_unit_section() -> str:
    """The text docs/energy.md holds between :data:`UNIT_BEGIN` and :data:`UNIT_END`."""
    doc = (ROOT / "docs" / "energy.md").read_text(encoding="utf-8")
    i, j = doc.find(UNIT_BEGIN), doc.find(UNIT_END)
    if i < 0 or j < i:
        return "Not derived yet: run `.venv/bin/python benchmarks/unit_energy.py --write`.\n"
    return doc[i + len(UNIT_BEGIN):j].lstrip("\n")


# ------------------------------------------------------------------------------ the file
def rows(text: str) -> list[dict]:
    """Table A's rows, ``same`` resolved to the row above."""
    out, header, inside, last = [], None, False, {}
    for line in text.splitlines():
        if line.startswith("## "):
            inside = line.startswith("## A.")
            continue
        if not inside or not line.startswith("|"):
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        if header is None:
            header = cells
            continue
        if set(cells[0]) <= {"-"}:
            continue
        row = dict(zip(header, cells))
        row = {k: (last[k] if v == "same" and k in last else v) for k, v in row.items()}
        out.append(row)
        last = row
    return out


def case(row: dict) -> dict:
    name, _, precision = row["model, precision"].rpartition(" ")
    gpus = int(re.match(r"(\d+)", row["GPUs"]).group(1))
    return {"label": f"{name} {precision} {gpus}×H100 bs{row['bs']}", "model": MODELS[name], "tp": gpus,
            "batch": int(row["bs"]), "output_mean": float(row["mean output tokens"]),
            "watts": float(row["GPU power (W, total)"]), "j_per_token": float(row["J per output token"]),
            "tokens_per_s": float(row["output tok/s"].replace(",", "")), "fit": MODELS[name] == FIT_MODEL}


# ------------------------------------------------------------------------------ one row
def workload(output_mean: float) -> list[Request]:
    rng = np.random.default_rng(SEED)
    shift = SIGMA ** 2 / 2          # lognormal: mean = median × exp(sigma² / 2)
    prompts = np.clip(np.round(rng.lognormal(np.log(PROMPT_MEAN) - shift, SIGMA, REQUESTS)), 1, None)
    outputs = np.clip(np.round(rng.lognormal(np.log(output_mean) - shift, SIGMA, REQUESTS)), 2, OUTPUT_MAX)
    return [Request(i, 0.0, int(p), int(o)) for i, (p, o) in enumerate(zip(prompts, outputs))]


def window(c: dict) -> dict:
    """The row's run and its steady-state window: length, output tokens, and the GPU's work
    in it (per GPU)."""
    setup = ServingSetup(load_model(c["model"]), H100, "bf16", c["tp"], n_slots=c["batch"],
                         max_batch=c["batch"], stack=get_stack(STACK))
    res = setup.run(workload(c["output_mean"]), ())
    firsts = sorted(t.token_times_s[0] for t in res.request_times)
    ends = sorted(res.finish_s.values())
    start, end = firsts[c["batch"] - 1], ends[len(ends) - c["batch"] - 2]
    tokens = sum(1 for t in res.request_times for x in t.token_times_s if start < x <= end)
    work = GpuWork()
    for end_s, _, w in res.energy.records:
        if start < end_s <= end:
            work += w
    return {"time_s": end - start, "tokens": tokens, "work": work, "sim_tokens_per_s": tokens / (end - start)}


def predict(c: dict, w: dict, coeffs) -> tuple[float, float]:
    """(J per output token, W of all the row's GPUs) of window ``w`` under ``coeffs``."""
    led = EnergyLedger(coeffs, load_model(c["model"]).weight_dtype)
    per_gpu = led.step_j(w["work"], w["time_s"])
    return c["tp"] * per_gpu / w["tokens"], c["tp"] * per_gpu / w["time_s"]


def fit(cs: list[dict], ws: dict, coeffs):
    """``static_w`` and ``sm_pj_per_flop`` by linear least squares on the fit rows' relative
    errors in J per output token (the energy is linear in both)."""
    a, b = [], []
    for c in (c for c in cs if c["fit"]):
        w, m = ws[c["label"]], c["j_per_token"]
        rest, _ = predict(c, w, replace(coeffs, static_w=0.0, sm_pj_per_flop=0.0))
        scale = c["tp"] / w["tokens"] / m
        a.append([w["time_s"] * scale, w["work"].flops * 1e-12 * scale])
        b.append(1.0 - rest / m)
    (static, flop), *_ = np.linalg.lstsq(np.array(a), np.array(b), rcond=None)
    return replace(coeffs, static_w=float(static), sm_pj_per_flop=float(flop))


# ------------------------------------------------------------------------------ figures
def step_split(model: str, tp: int, batch: int, ctx: int, cuts, coeffs) -> dict:
    """Energy of one decode step by component (J per GPU) and the step's time."""
    sm = StepModel(load_model(model), H100, "bf16", tp, frozenset(cuts), stack=get_stack("vllm-v0"))
    st = sm.step_time([ctx + 1] * batch, [1] * batch, np.random.default_rng(0))
    led = EnergyLedger(coeffs, sm.model.weight_dtype)
    parts = led.dynamic_j(GpuWork.of_step(st))
    parts["static"] = coeffs.static_w * st.time_s
    return {"time_s": st.time_s, **parts}


CUT_SETS = (("baseline", ()), ("te", ("te",)), ("cdu", ("cdu",)), ("dsu", ("dsu",)),
            ("te+cdu+dsu", ("te", "cdu", "dsu")))
SAMPLE = "sim/data/mooncake_conversation_sample.jsonl"
#: the agentic workload of docs/agentic.md's figures (benchmarks/agentic.py), 24 sessions
AGENTIC = ("sessions=24,rate=inf,turns=6,gap=lognormal:5:1,system=2048,input=lognormal:32768:0.5,"
           "turn_input=uniform:2048:8192,output=lognormal:256:0.5,seed=1")


def sample_tokens_per_joule(gpu: str, workload: str, coefficients: Path) -> list[float]:
    """Output tokens per joule of each cut set on the Mooncake sample (the demo's operating point)
    or on the agentic sessions (keep policy, prefill on its pool, 512 slots), with the energy
    coefficients of file ``coefficients`` (the report's, not the shipped file's)."""
    from tricut.sim.fast.run import RunOptions, prepare
    out = []
    for _, cuts in CUT_SETS:
        if workload == "mooncake":
            o = RunOptions(model="llama-3-70b", gpu=gpu, tp=8, trace=ROOT / SAMPLE, prefill="disaggregated",
                           cuts=cuts, energy=coefficients, given=frozenset({"cuts"}))
        else:
            o = RunOptions(model="llama-3-70b", gpu=gpu, tp=8, agentic=AGENTIC, prefill="disaggregated",
                           slots=512, max_batch=512, cuts=cuts, energy=coefficients, given=frozenset({"cuts"}))
        (res,) = prepare(o).run().values()
        out.append(res.summary["tokens_per_joule"])
    return out


def _share(part: float, total: float) -> str:
    """A component's share of a step's energy: 0 when it has none, "< 0.1 %" when it is tiny."""
    if part == 0:
        return "0"
    pct = 100 * part / total
    return "< 0.1 %" if pct < 0.1 else f"{pct:.1f} %" if pct < 10 else f"{pct:.0f} %"


def _pct(e) -> str:
    return f"{100 * e:+.1f} %"


def report(cs, ws, coeffs, table, calibration, unit_section: str) -> str:
    got = {c["label"]: predict(c, ws[c["label"]], coeffs) for c in cs}
    err = {c["label"]: got[c["label"]][0] / c["j_per_token"] - 1 for c in cs}
    lines = ["# Energy: joules per output token, from bytes, FLOPs and static power", "",
             f"Written by `{COMMAND}` (reads `{calibration}`); do not edit by hand. The model: "
             "`sim/fast/energy.py`; what `tricut simulate` reports: docs/metrics.md.", "",
             "## The model", "",
             "Per GPU of a tensor-parallel group, a run's energy is its static power over the run "
             "plus, for every decode step and every prefill, HBM bytes × `hbm_pj_per_byte`, K/V "
             "bytes read from L2 instead of HBM (blocks the CDU kept resident from the previous "
             "step; a prefetched block came from HBM like a miss) × `l2_pj_per_byte`, the step's "
             "FLOPs (GEMVs, a chunk's GEMMs, attention) × `sm_pj_per_flop` (fp8 and NVFP4 weights "
             "at `fp8_flop_ratio` of it) and the all-reduces' NVLink bytes and the KV tier moves' link "
             "bytes × `link_pj_per_byte`; "
             "with the cuts, the decode units' logic: TE engine-busy cycles × `te_pj_per_cycle` (the "
             "TE then runs the attention FLOPs, not the SMs) and its K/V bytes through its FIFOs × 2 × "
             "`sram_pj_per_byte`, CDU cycles × `cdu_pj_per_cycle`, DSU cycles × `dsu_pj_per_cycle` "
             "(derived from the units' RTL: below); "
             "the host CPU's `host_w` is reported beside it; a disaggregated prefill pool's bytes and "
             "FLOPs are their own component (`pool`), in J per output token but not in the decode "
             "GPUs' power. `tricut simulate`, `compare` and "
             "`sweep` report J per output token (of the whole group), tokens per joule, mean and "
             "peak W per GPU (the peak over decode steps and prefill batches), tokens/s per MW and "
             "the energy split (`--energy FILE` takes other coefficients).", "",
             "**Physics.** A run's energy is never below its static power × its duration plus its "
             "HBM bytes × the energy per HBM byte (checked on every run: a `PhysicsViolation` "
             "otherwise). A mean power per GPU above the board power is reported as "
             "`power_capped` with `power_cap_clock`, the share of the clock at which the dynamic "
             "power (taken as proportional to the clock) would fit under the cap; the run's "
             "times are not stretched. The peak is per piece of work and may exceed the board power "
             "(a compute-bound prefill batch at the fitted energy per FLOP), where a real GPU would "
             "lower its clock for that batch.", "",
             "**What is first-order.** Energy per byte and per FLOP are constants (no dependence "
             "on access pattern, clock or voltage); `static_w` lumps the power of a GPU that runs "
             "kernels (leakage, clocks, HBM refresh, the SMs' activity that no byte or FLOP "
             "accounts for) and is fitted; the decode units' energy per busy cycle is an upper "
             "bound from their cell counts (below); a disaggregated "
             "prefill pool counts its bytes and FLOPs, not its GPUs' static power (the pool's "
             "size is not modelled); in session runs the KV moves to the tiers beyond HBM count their "
             "HBM bytes and their link bytes at `link_pj_per_byte`, C2C's figure, for every tier's link.", "",
             "## Against measurement (ML.ENERGY, vLLM 0.11.1, H100)", "",
             "Each row as the benchmark ran it (see this script's docstring): 1,024 requests at "
             f"once, `max_num_seqs` = bs, stack `{STACK}`, prompts lognormal with mean "
             f"{PROMPT_MEAN}, outputs lognormal with the row's mean (sigma {SIGMA}), the "
             "steady-state window. Fitted on the Llama-3.1-8B rows (`static_w`, "
             "`sm_pj_per_flop`); the Qwen3 rows are held out.", "",
             "| row | fit? | measured J/token | modelled | error | measured W | modelled W | error | "
             "measured tok/s | modelled tok/s |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    werr = {c["label"]: got[c["label"]][1] / c["watts"] - 1 for c in cs}
    for c in cs:
        j, w = got[c["label"]]
        lines.append(f"| {c['label']} | {'fit' if c['fit'] else 'held out'} | {c['j_per_token']:.3f} | "
                     f"{j:.3f} | {_pct(err[c['label']])} | {c['watts']:.0f} | {w:.0f} | {_pct(werr[c['label']])} | "
                     f"{c['tokens_per_s']:,.0f} | {ws[c['label']]['sim_tokens_per_s']:,.0f} |")
    lines += ["", "| rows | J/token: median abs. error | worst | signed median | W: median abs. error | worst "
              "| signed median |", "|---|---|---|---|---|---|---|"]
    for what, sel in (("fitted", [c for c in cs if c["fit"]]), ("held out", [c for c in cs if not c["fit"]])):
        cells = []
        for errs in (err, werr):
            e = [errs[c["label"]] for c in sel]
            a = [abs(x) for x in e]
            cells += [f"{100 * statistics.median(a):.1f} %", f"{100 * max(a):.1f} %", _pct(statistics.median(e))]
        lines.append(f"| {what} ({len(sel)}) | " + " | ".join(cells) + " |")
    lines += ["", "The modelled tokens/s is the simulated throughput over the same window: where it "
              "misses the measured one, J/token inherits the miss through the static power.", "",
              "## Where a decode step's joules go", "",
              "One decode step at a fixed batch and context (every request at that context), stack "
              "`vllm-v0`, bf16 weights and KV, H100 SXM5; energy per GPU by component, and the step's "
              "J per output token of the group (the batch's tokens).", "",
              "| model | batch | context | cuts | step | static | HBM | L2 | SM | TE | CDU | DSU | links | J/token |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for model, tp in (("llama-3-8b", 1), ("llama-3-70b", 8)):
        for batch in (1, 64, 256):
            for ctx in (4096, 32768):
                for label, cuts in (("baseline", ()), ("te", ("te",)), ("cdu", ("cdu",)), ("dsu", ("dsu",)),
                                    ("te+cdu+dsu", ("te", "cdu", "dsu"))):
                    s = step_split(model, tp, batch, ctx, cuts, coeffs)
                    total = sum(s[k] for k in GPU_COMPONENTS)
                    lines.append(f"| {model} TP{tp} | {batch} | {ctx // 1024}K | {label} | {s['time_s'] * 1e3:.2f} ms | "
                                 + " | ".join(_share(s[k], total) for k in GPU_COMPONENTS)
                                 + f" | {tp * total / batch:.3f} |")
    lines += ["", "## Tokens per joule of the cuts: the Mooncake sample and an agentic workload", "",
              "Llama-3-70B, TP8, bf16, prefill on its own pool. *mooncake*: the shipped Mooncake "
              f"conversation sample (`{SAMPLE}`) as `make demo` runs it (`tricut compare --model "
              "llama-3-70b --gpu GPU --tp 8 --trace ... --prefill disaggregated`). *agentic*: the "
              f"sessions of docs/agentic.md's figures (`--agentic {AGENTIC}`, keep policy, 512 slots). "
              "Output tokens per joule of the decode GPUs (the pool's bytes and FLOPs included, not its "
              "static power).", "",
              "| workload | GPU | " + " | ".join(label for label, _ in CUT_SETS) + " |",
              "|---|---|" + "---|" * len(CUT_SETS)]
    change = {"mooncake": [], "agentic": []}
    # the runs take the coefficients this report gives (a refit is not in the shipped file yet)
    with tempfile.TemporaryDirectory() as tmp:
        coefficients = Path(tmp) / ENERGY_FILE
        coefficients.write_text(table.to_json(), encoding="utf-8")
        for workload in ("mooncake", "agentic"):
            for gpu in ("h100-sxm5", "h200"):
                tpj = sample_tokens_per_joule(gpu, workload, coefficients)
                change[workload] += [t / tpj[0] - 1 for t in tpj[1:]]
                lines.append(f"| {workload} | {gpu} | " + " | ".join(f"{t:.4f}" for t in tpj) + " |")
    lo = {k: 100 * min(v) for k, v in change.items()}
    hi = {k: 100 * max(v) for k, v in change.items()}
    lines += ["", f"Against the baseline the cuts change tokens per joule by {lo['mooncake']:+.1f} % to "
              f"{hi['mooncake']:+.1f} % on the Mooncake sample and by {lo['agentic']:+.1f} % to "
              f"{hi['agentic']:+.1f} % on the agentic sessions. In both the group keeps up and spends "
              "much of the run waiting (arrivals, tool-call gaps): static power over the run is most of "
              "the energy, and a faster step that leaves the GPU waiting longer saves none of it; with "
              "shorter steps the batches are smaller, so the weights are read more often per token. A cut "
              "saves energy where it shortens the work of a busy GPU (the step table above), not where "
              "the GPU idles."]
    lines += ["", "## The decode units' energy, from their RTL", "", UNIT_BEGIN, unit_section.rstrip("\n"),
              UNIT_END]
    lines += ["", "## Coefficients (`sim/fast/energy.json`)", "",
              "| GPU | coefficient | value | source |", "|---|---|---|---|"]
    for gpu, co in table.gpus.items():
        for f in co.__dataclass_fields__:
            if f != "gpu":
                lines.append(f"| {gpu} | `{f}` | {getattr(co, f):.4g} | {table.sources[gpu][f]} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calibration", type=Path, default=DEFAULT_CALIBRATION,
                    help="the measurements (default: ../shared/calibration/energy-h100.md)")
    ap.add_argument("--write", action="store_true",
                    help=f"write the fitted values into sim/fast/{ENERGY_FILE} and the report into docs/energy.md")
    args = ap.parse_args(argv)
    try:
        text = args.calibration.read_text(encoding="utf-8")
    except OSError as e:
        print(f"energy: cannot read {args.calibration}: {e.strerror}", file=sys.stderr)
        return 2
    cs = [case(r) for r in rows(text)]
    if not cs:
        print(f"energy: {args.calibration} has no rows in its table A", file=sys.stderr)
        return 2
    table = load_energy()
    ws = {c["label"]: window(c) for c in cs}
    fitted = fit(cs, ws, table.gpus["h100-sxm5"])
    gpus = {g: (fitted if g == "h100-sxm5" else
                replace(co, **{f: getattr(fitted, f) for f in FITTED if table.sources[g][f].startswith("as h100")}))
            for g, co in table.gpus.items()}
    sources = {g: {f: (f"fit: {COMMAND} (on the Llama-3.1-8B rows of table A)" if g == "h100-sxm5" and f in FITTED
                       else s) for f, s in src.items()} for g, src in table.sources.items()}
    out = type(table)(gpus, sources, table.about)
    try:
        label = "../" + str(args.calibration.resolve().relative_to(ROOT.parent))
    except ValueError:
        label = str(args.calibration)
    doc = report(cs, ws, fitted, out, label, kept_unit_section())
    print(doc)
    if args.write:
        (ROOT / "sim" / "fast" / ENERGY_FILE).write_text(out.to_json(), encoding="utf-8")
        (ROOT / "docs" / "energy.md").write_text(doc, encoding="utf-8")
        print(f"wrote sim/fast/{ENERGY_FILE} and docs/energy.md", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
