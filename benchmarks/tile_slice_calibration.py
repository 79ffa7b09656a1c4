"""Integration calibration of the fast model's TE term on the RTL: the decode tile run as one
SM's slice of a GPU (``tricut tile run --gpu``: the GPU's TE engines per SM, its SM's share of
HBM bandwidth as the HBM model's rate, its HBM latency, burst slots by Little's law), on
Verilator, against the expected-value tile model that ``tricut simulate``'s grid of tiles
uses for the same units (``models/sm_slice.py``; docs/system-model.md, "The TE term: a grid
of tiles").

One KV head of Llama-3-8B (G 4, ``llama-3-8b-kv1``) and of Llama-3-70B as TP8 holds it (G 8,
``llama-3-70b-kv1``), bf16 and fp8 K/V, no CDU, the slice's split-K (``slice_config``), 4
requests with contexts of 1K-4K tokens (the tile's ``max_ctx`` is at most 4096), 2 decode
steps. The last column is the streaming efficiency: the K/V words over the slice's HBM rate,
against the RTL's cycles. Each run must pass (every attention
output bit-exact with the TE golden, every token equal) and every layer must equal the
cycle-stepped timing model's prediction, or the script exits 1. The table gives, per step,
the RTL's cycles, the fast model's and the error; and the error summed over the run.

    .venv/bin/python benchmarks/tile_slice_calibration.py            # run, print the table
    .venv/bin/python benchmarks/tile_slice_calibration.py --write    # ... into docs/system-model.md

Each configuration is one Verilator build (4 engines at 32 lanes: about 10 minutes of C++ the
first time, cached under .build/cocotb).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
from doc_sections import write_section     # noqa: E402  (benchmarks/ on sys.path)

DOC = ROOT / "docs" / "system-model.md"
BEGIN, END = "<!-- sm-slice:calibration:begin -->", "<!-- sm-slice:calibration:end -->"
SCRIPT = "benchmarks/tile_slice_calibration.py"
GPU = "h100-sxm5"
CONFIGS = [("llama-3-8b-kv1", "bf16"), ("llama-3-8b-kv1", "fp8"),
           ("llama-3-70b-kv1", "bf16"), ("llama-3-70b-kv1", "fp8")]
PROMPTS = (1000, 2000, 3000, 4000)
STEPS = 2


def run(model, kv_dtype, gpu=GPU, prompts=PROMPTS, steps=STEPS):
    """One calibration run: ``(rows, summed, wall)``; rows per step ``(step, rtl, fast)``."""
    from tricut.models.config import load_gpu, load_model
    from tricut.models.sm_slice import slice_config, slice_timing
    from tricut.sim.fast.timing import Assumptions
    from tricut.sim.harness.tile.cosim import simulate
    from tricut.sim.harness.tile.setup import (Setup, check_setup, predict_layers, schedule,
                                               tile_config)
    cfg = slice_config(load_gpu(gpu), load_model(model), kv_dtype,
                       Assumptions().te_bw_efficiency)
    s = Setup(model=model, requests=len(prompts), prompt_lens=tuple(prompts), steps=steps,
              kv_dtype=kv_dtype, engines=cfg.engines, lanes=cfg.lanes, max_ctx=4096,
              latency=cfg.latency, max_outstanding=cfg.max_outstanding, hbm_rate=cfg.hbm_rate,
              split_tokens=cfg.split_tokens)
    check_setup(s)
    t0 = time.perf_counter()
    rep = simulate(s, sim="verilator")
    wall = time.perf_counter() - t0
    if not rep.ok:
        raise SystemExit(f"{SCRIPT}: {model} {kv_dtype}: the tile differs from the golden: "
                         f"{rep.differences[0]}")
    measured = rep.tile.layer_cycles
    if predict_layers(s) != measured:
        raise SystemExit(f"{SCRIPT}: {model} {kv_dtype}: the timing model's layers "
                         f"{predict_layers(s)} are not the RTL's {measured}")
    timing = slice_timing(tile_config(s))
    rows = []
    for ri, descs in enumerate(schedule(s)):
        lens = [d.seq_len for d in descs]
        rtl = sum(v for k, v in measured.items() if k[0] == ri)
        layers = sum(1 for k in measured if k[0] == ri)
        ideal = layers * sum(lens) * 2 * cfg.dk * cfg.hbm_rate[1] / cfg.hbm_rate[0]
        rows.append((ri, lens, rtl, layers * timing.sm_cycles(lens), ideal))
    return s, rows, wall


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--write", action="store_true", help=f"write the table into {DOC.name}")
    args = ap.parse_args()
    lines = [f"`{SCRIPT}{' --write' if args.write else ''}` (Verilator; {GPU}'s SM slice; "
             f"prompts {', '.join(map(str, PROMPTS))}, {STEPS} steps, no CDU):", "",
             "| configuration | HBM rate (words/cycle), latency, burst slots, split | step "
             "| contexts | RTL cycles | fast model | error | K/V words at the rate / RTL |",
             "|---|---|---|---|---|---|---|---|"]
    worst, sums = 0.0, []
    for model, kv in CONFIGS:
        s, rows, wall = run(model, kv)
        num, den = s.hbm_rate
        for ri, lens, rtl, fast, ideal in rows:
            err = (fast - rtl) / rtl
            worst = max(worst, abs(err))
            lines.append(f"| {model} {kv} | {num}/{den}, {s.latency}, {s.max_outstanding}, "
                         f"{s.split_tokens or 'none'} | {ri} | {'/'.join(map(str, lens))} "
                         f"| {rtl:,} | {fast:,.0f} | {err:+.3%} | {ideal / rtl:.1%} |")
        rtl_sum = sum(r[2] for r in rows)
        fast_sum = sum(r[3] for r in rows)
        sums.append((model, kv, rtl_sum, fast_sum, wall))
        print(f"{model} {kv}: {wall:.0f} s", file=sys.stderr, flush=True)
    lines += ["", "| configuration | RTL cycles, run | fast model | summed error "
              "| wall s (the run; and the build where it was not cached) |",
              "|---|---|---|---|---|"]
    for model, kv, rtl_sum, fast_sum, wall in sums:
        lines.append(f"| {model} {kv} | {rtl_sum:,} | {fast_sum:,.0f} | "
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
