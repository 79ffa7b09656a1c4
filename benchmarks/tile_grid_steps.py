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

A second table shows what the ``cdu`` cut changes in the TE term: one SM's tile on its
slice of H100 without the CDU and with it (``static`` at the SM's share of the L2,
``slice_cdu``), for a request the DSU marks cached and one it streams, one KV head of
Llama-3-70B (TP8), one unit of 2,000 tokens.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from tricut.models.config import load_gpu, load_model
from tricut.models.roofline import roofline
from tricut.sim.fast.stacks import DEFAULT_STACK, get_stack
from tricut.sim.fast.timing import StepModel

from doc_sections import write_section     # benchmarks/ is on sys.path when a script runs

ROOT = Path(__file__).resolve().parent.parent

DOC = ROOT / "docs" / "system-model.md"
BEGIN, END = "<!-- sm-slice:steps:begin -->", "<!-- sm-slice:steps:end -->"
SCRIPT = "benchmarks/tile_grid_steps.py"
CONTEXTS = (8192, 32768, 131072)
BATCHES = (1, 8, 64)
CUTS = (("none", ()), ("te", ("te",)), ("te+cdu+dsu", ("te", "cdu", "dsu")))
#: tokens of the second table's unit
UNIT = 2000


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
    from tricut.models.sm_slice import cdu_slice_timing, slice_cdu, slice_config, slice_timing
    from tricut.sim.fast.timing import Assumptions
    a, rows = Assumptions(), []
    for kv in ("bf16", "fp8"):
        cfg = slice_config(gpu, load_model("llama-3-70b"), kv, a.te_bw_efficiency)
        l2 = dataclasses.replace(cfg, l2=True)
        cdu = slice_cdu(gpu, l2, "static", a.cdu_l2_share)
        plain, ct = slice_timing(cfg), cdu_slice_timing(l2, cdu)
        ideal = UNIT * 2 * cfg.dk * cfg.hbm_rate[1] / cfg.hbm_rate[0]
        rows.append(f"| {kv} | {cdu.sets} × {cdu.ways}, {cdu.distance} | "
                    f"{cfg.split_tokens or 'none'} | {plain.unit(UNIT):,.0f} | "
                    f"{ct.auto.unit(UNIT):,.0f} | {ct.stream.unit(UNIT):,.0f} | {ideal:,.0f} |")
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
    lines += ["", f"One SM's tile on its slice, one unit of {UNIT:,} tokens (one KV head of "
              "Llama-3-70B; cycles of the expected-value model, `SliceTiming` and "
              "`CduSliceTiming`; `ideal`: its K/V words at the slice's HBM rate):", "",
              "| K/V | the slice's CDU: sets × ways, distance | split | no CDU | CDU, cached "
              "(hint auto) | CDU, streamed (hint stream) | ideal |",
              "|---|---|---|---|---|---|---|"]
    lines += cdu_rows(gpu)
    body = "\n".join(lines) + "\n"
    print(body)
    if args.write:
        write_section(DOC, BEGIN, END, body, SCRIPT)


if __name__ == "__main__":
    main()
