"""Llama-3-70B TP8 on H100 at 8K, 32K and 128K tokens of context, batch 1, 8 and 64: one decode
step (the first, every request at that context) with no cut, the ``te`` cut (the grid of
decode tiles, docs/system-model.md "The TE term: a grid of tiles") and all three cuts; the
step time, what bound it, the attention phase's HBM utilisation (its K/V bytes over
attention time × peak bandwidth), the attention time over its share of the bandwidth floor
(the step's K/V bytes / peak bandwidth), the grid's imbalance (slowest SM over mean), and
the step over its bandwidth floor.

    .venv/bin/python benchmarks/tile_grid_steps.py            # print the table
    .venv/bin/python benchmarks/tile_grid_steps.py --write    # ... into docs/system-model.md

The fast system model with its default assumptions and the ``vllm-v0`` stack without host
jitter (as benchmarks/claims.py). A batch whose K/V does not fit the group's HBM beside the
weights (``models/roofline.py``) is reported as such and not simulated.

A second table shows why the ``cdu`` cut does not change the TE term yet: the tile with the
CDU (``static``, two L2 geometries) against the tile without it, on one SM's slice of H100,
timed by the tile's timing model (which the RTL matches cycle for cycle, tests/
test_tile_timing.py): one KV head of Llama-3-70B (TP8), two requests of 1,000 and 700
tokens, two decode steps.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from tricut.models.config import load_gpu, load_model
from tricut.models.roofline import roofline
from tricut.sim.fast.stacks import DEFAULT_STACK, get_stack
from tricut.sim.fast.timing import StepModel

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
from doc_sections import write_section     # noqa: E402  (benchmarks/ on sys.path)

DOC = ROOT / "docs" / "system-model.md"
BEGIN, END = "<!-- sm-slice:steps:begin -->", "<!-- sm-slice:steps:end -->"
SCRIPT = "benchmarks/tile_grid_steps.py"
CONTEXTS = (8192, 32768, 131072)
BATCHES = (1, 8, 64)
CUTS = (("none", ()), ("te", ("te",)), ("te+cdu+dsu", ("te", "cdu", "dsu")))


def step(model, gpu, tp, ctx, batch, cuts):
    sm = StepModel(model, gpu, "bf16", tp, frozenset(cuts),
                   stack=get_stack(DEFAULT_STACK).with_values(host_jitter_s=0.0))
    st = sm.step_time([ctx + 1] * batch, [1] * batch, np.random.default_rng(0))
    kv_bytes = st.kv_read_bytes + st.hbm_write_bytes
    share = kv_bytes / gpu.hbm_bandwidth
    util = st.attn_hbm_bytes / (st.attn_s * gpu.hbm_bandwidth) if st.attn_s else 0.0
    return st, util, st.attn_s / share


def cdu_rows(gpu):
    """The second table's rows (module docs)."""
    import dataclasses
    from tricut.models.sm_slice import slice_config
    from tricut.sim.harness.tile.setup import Setup, predict_layers
    rows = []
    prompts = (1000, 700)
    for kv in ("bf16", "fp8"):
        cfg = slice_config(gpu, load_model("llama-3-70b"), kv, 0.9)
        base = Setup(model="llama-3-70b-kv1", requests=2, prompt_lens=prompts, steps=2,
                     engines=cfg.engines, lanes=cfg.lanes, kv_dtype=kv, max_ctx=1024 + 16,
                     latency=cfg.latency, max_outstanding=cfg.max_outstanding,
                     hbm_rate=cfg.hbm_rate, split_tokens=cfg.split_tokens)
        cells = []
        for policy, geo in ((None, {}), ("static", dict(cdu_sets=4, cdu_ways=2, distance=4)),
                            ("static", dict(cdu_sets=16, cdu_ways=8, distance=32))):
            r = predict_layers(dataclasses.replace(base, policy=policy, **geo))
            cells.append(f"{r[(0, 0)]:,} / {r[(1, 0)]:,}")
        words = sum(p + 1 for p in prompts) * 2 * cfg.dk
        ideal = words * cfg.hbm_rate[1] / cfg.hbm_rate[0]
        rows.append(f"| {kv} | " + " | ".join(cells) + f" | {ideal:,.0f} |")
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--write", action="store_true", help=f"write the table into {DOC.name}")
    args = ap.parse_args()
    model, gpu, tp = load_model("llama-3-70b"), load_gpu("h100-sxm5"), 8
    lines = [f"`{SCRIPT}{' --write' if args.write else ''}` (Llama-3-70B, TP8, H100 SXM5, bf16, "
             f"`{DEFAULT_STACK}` without host jitter; the first step, every request at the "
             "context):", "",
             "| context | batch | cuts | step ms | bound | attention ms | attention HBM use "
             "| attention / its floor share | grid imbalance | step / floor |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for ctx in CONTEXTS:
        for batch in BATCHES:
            if not roofline(model, gpu, "bf16", ctx, batch, tp).batch_fits:
                lines.append(f"| {ctx // 1024}K | {batch} | – | K/V does not fit 8 × 80 GiB "
                             "beside the weights | | | | | | |")
                continue
            for label, cuts in CUTS:
                st, util, over = step(model, gpu, tp, ctx, batch, cuts)
                lines.append(f"| {ctx // 1024}K | {batch} | {label} | {st.time_s * 1e3:.2f} | "
                             f"{st.bound} | {st.attn_s * 1e3:.2f} | {util:.1%} | {over:.3f} | "
                             f"{st.te_imbalance:.3f} | {st.time_s / st.floor_s:.2f} |")
    lines += ["", "The tile with the CDU on one SM's slice (tile timing model; cycles per layer, "
              "steps 0 and 1; `ideal`: step 0's K/V words at the slice's HBM rate):", "",
              "| K/V | no CDU | static, 4 sets × 2 ways, distance 4 | static, 16 × 8, distance 32 "
              "| ideal |", "|---|---|---|---|---|"]
    lines += cdu_rows(gpu)
    body = "\n".join(lines) + "\n"
    print(body)
    if args.write:
        write_section(DOC, BEGIN, END, body, SCRIPT)


if __name__ == "__main__":
    main()
