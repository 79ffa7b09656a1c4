"""Integration calibration of the fast model's TE term on the RTL: the decode tile run as one
SM's slice of a GPU (``tricut tile run --gpu``: the GPU's TE engines per SM, its SM's share of
HBM bandwidth as the HBM model's rate, its HBM latency, burst slots by Little's law), on
Verilator, against the expected-value tile model that ``tricut simulate``'s grid of tiles
uses for the same units (``models/sm_slice.py``; docs/system-model.md, "The TE term: a grid
of tiles").

One KV head of Llama-3-8B (G 4, ``llama-3-8b-kv1``) and of Llama-3-70B as TP8 holds it (G 8,
``llama-3-70b-kv1``), bf16 and fp8 K/V, without the CDU and with the CDU ``static`` at the
slice's share of L2 (``slice_cdu``), the slice's split-K (``slice_config``), 4
requests with contexts of 1K-8K tokens (``max_ctx`` 8192), 2 decode
steps. The last column is the streaming efficiency: the K/V words over the slice's HBM rate,
against the RTL's cycles. Each run must pass (every attention
output bit-exact with the TE golden, every token equal) and every layer must equal the
cycle-stepped timing model's prediction, or the script exits 1. The table gives, per step,
the RTL's cycles, the fast model's and the error; and the error summed over the run.

    .venv/bin/python benchmarks/tile_slice_calibration.py            # run, print the table
    .venv/bin/python benchmarks/tile_slice_calibration.py --write    # ... into docs/system-model.md

Each configuration is one Verilator build (about 5 minutes of C++ without the CDU and 7
with it the first time, cached under .build/cocotb).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

from doc_sections import write_section     # benchmarks/ is on sys.path when a script runs

ROOT = Path(__file__).resolve().parent.parent

DOC = ROOT / "docs" / "system-model.md"
BEGIN, END = "<!-- sm-slice:calibration:begin -->", "<!-- sm-slice:calibration:end -->"
SCRIPT = "benchmarks/tile_slice_calibration.py"
GPU = "h100-sxm5"
CONFIGS = [(model, kv, policy) for policy in (None, "static")
           for model, kv in (("llama-3-8b-kv1", "bf16"), ("llama-3-8b-kv1", "fp8"),
                             ("llama-3-70b-kv1", "bf16"), ("llama-3-70b-kv1", "fp8"))]
PROMPTS = (1000, 3000, 5500, 8100)
MAX_CTX = 8192
STEPS = 2


def run(model, kv_dtype, policy=None, gpu=GPU, prompts=PROMPTS, steps=STEPS):
    """One calibration run: ``(setup, rows, wall)``; rows per step ``(step, lens, rtl, fast,
    ideal)``. ``policy``: the tile with the CDU (the slice's geometry, ``slice_cdu``; the
    DSU's default residency threshold), timed by the expected-value model the fast model's
    ``te`` + ``cdu`` cuts use (``sim/harness/tile/slice_prediction.py``)."""
    from tricut.models.config import load_gpu, load_model
    from tricut.models.dsu import DsuParams
    from tricut.models.sm_slice import slice_cdu, slice_config
    from tricut.sim.fast.timing import Assumptions
    from tricut.sim.harness.tile.cosim import simulate
    from tricut.sim.harness.tile.setup import Setup, check_setup, predict_layers, schedule
    from tricut.sim.harness.tile.slice_prediction import fast_layer_cycles
    a = Assumptions()
    g = load_gpu(gpu)
    cfg = slice_config(g, load_model(model), kv_dtype, a.te_bw_efficiency)
    geo = {}
    if policy is not None:
        cdu = slice_cdu(g, dataclasses.replace(cfg, l2=True), policy, a.cdu_l2_share)
        geo = dict(policy=policy, cdu_sets=cdu.sets, cdu_ways=cdu.ways, distance=cdu.distance,
                   long_context=DsuParams().long_context_tokens)
    s = Setup(model=model, requests=len(prompts), prompt_lens=tuple(prompts), steps=steps,
              kv_dtype=kv_dtype, engines=cfg.engines, lanes=cfg.lanes, max_ctx=MAX_CTX,
              latency=cfg.latency, max_outstanding=cfg.max_outstanding, hbm_rate=cfg.hbm_rate,
              split_tokens=cfg.split_tokens, **geo)
    check_setup(s)
    t0 = time.perf_counter()
    rep = simulate(s, sim="verilator")
    wall = time.perf_counter() - t0
    what = f"{model} {kv_dtype} {policy or 'no CDU'}"
    if not rep.ok:
        raise SystemExit(f"{SCRIPT}: {what}: the tile differs from the golden: "
                         f"{rep.differences[0]}")
    measured = rep.tile.layer_cycles
    if predict_layers(s) != measured:
        raise SystemExit(f"{SCRIPT}: {what}: the timing model's layers "
                         f"{predict_layers(s)} are not the RTL's {measured}")
    fast = fast_layer_cycles(s)
    rows = []
    for ri, descs in enumerate(schedule(s)):
        lens = [d.seq_len for d in descs]
        rtl = sum(v for k, v in measured.items() if k[0] == ri)
        layers = sum(1 for k in measured if k[0] == ri)
        ideal = layers * sum(lens) * 2 * cfg.dk * cfg.hbm_rate[1] / cfg.hbm_rate[0]
        rows.append((ri, lens, rtl, sum(v for k, v in fast.items() if k[0] == ri), ideal))
    return s, rows, wall


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--write", action="store_true", help=f"write the table into {DOC.name}")
    args = ap.parse_args()
    lines = [f"`{SCRIPT}{' --write' if args.write else ''}` (Verilator; {GPU}'s SM slice; "
             f"prompts {', '.join(map(str, PROMPTS))}, {STEPS} steps, max_ctx {MAX_CTX}; CDU "
             "off, and `static` at the slice's share of L2 with the DSU's residency threshold "
             "(4,096 tokens: the two shorter requests streamed)):", "",
             "| configuration | HBM rate (words/cycle), latency, burst slots, split | CDU sets "
             "× ways, distance | step | contexts | RTL cycles | fast model | error "
             "| K/V words at the rate / RTL |",
             "|---|---|---|---|---|---|---|---|---|"]
    worst, sums = 0.0, []
    for model, kv, policy in CONFIGS:
        s, rows, wall = run(model, kv, policy)
        num, den = s.hbm_rate
        name = f"{model} {kv} {policy or 'no CDU'}"
        geo = f"{s.cdu_sets} × {s.cdu_ways}, {s.distance}" if policy else "–"
        for ri, lens, rtl, fast, ideal in rows:
            err = (fast - rtl) / rtl
            worst = max(worst, abs(err))
            lines.append(f"| {name} | {num}/{den}, {s.latency}, {s.max_outstanding}, "
                         f"{s.split_tokens or 'none'} | {geo} | {ri} | "
                         f"{'/'.join(map(str, lens))} | {rtl:,} | {fast:,.0f} | {err:+.3%} "
                         f"| {ideal / rtl:.1%} |")
        rtl_sum = sum(r[2] for r in rows)
        fast_sum = sum(r[3] for r in rows)
        sums.append((name, rtl_sum, fast_sum, wall))
        print(f"{name}: {wall:.0f} s", file=sys.stderr, flush=True)
    lines += ["", "| configuration | RTL cycles, run | fast model | summed error "
              "| wall s (the run; and the build where it was not cached) |",
              "|---|---|---|---|---|"]
    for name, rtl_sum, fast_sum, wall in sums:
        lines.append(f"| {name} | {rtl_sum:,} | {fast_sum:,.0f} | "
                     f"{(fast_sum - rtl_sum) / rtl_sum:+.3%} | {wall:.0f} |")
    lines += ["", f"Worst error per step: {worst:.3%}. Every layer equals the cycle-stepped "
              "timing model's prediction (checked), and every run is bit-exact with the "
              "golden decode step."]
    body = "\n".join(lines) + "\n"
    print(body)
    if args.write:
        write_section(DOC, BEGIN, END, body, SCRIPT)


if __name__ == "__main__":
    main()
