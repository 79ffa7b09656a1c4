"""Integration calibration of the decode tile: the tile's measured cycles per layer and per
step against the tile timing model's prediction for the same configuration
(``models/tile_timing.py``, with and without the CDU), on whole decode steps co-simulated with the golden decode step
(``sim/harness/tile/cosim.py``).

    .venv/bin/python benchmarks/tile_calibration.py            # run, print the table
    .venv/bin/python benchmarks/tile_calibration.py --write    # ... and into docs/tile/figures.md

Runs (tiny-te; each checked bit-exact against the golden first, the cached ones also with the
CDU's decisions equal to its golden model's; all on Verilator, cycle-identical to Amaranth's
simulator): the tile without the CDU (``--policy none``) with 1, 2 and 4 engines, with and
without split-K, bf16 and fp8; the tile with the CDU under the ``static``,
``adaptive`` and ``disabled`` CDU policies with 1, 2 and 4 engines, with and without split-K,
bf16, fp8 and NVFP4, on a thrashing two-frame L2 and with an 81-token context. The model
gets the CDU golden model's decisions (``cdu_decisions``), run one step at a time as the
tile's CDU sees them. A step's tile cycles are the sum of its layers' (``go`` to ``done``); the
host's K/V, q and output traffic between layers is the harness's, not the tile's, and is left
out. ``--write`` replaces the text between ``<!-- tile:calibration:begin -->`` and
``<!-- tile:calibration:end -->`` in docs/tile/figures.md.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from doc_sections import write_section     # benchmarks/ is on sys.path when a script runs

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "tile" / "figures.md"
BEGIN, END = "<!-- tile:calibration:begin -->", "<!-- tile:calibration:end -->"
SCRIPT = "benchmarks/tile_calibration.py"


def setups():
    from tricut.sim.harness.tile.setup import Setup
    base = Setup(lanes=16, model="tiny-te", requests=2, prompt_lens=(3, 17), steps=2, engines=1,
                 max_ctx=32)
    return [base,
            dataclasses.replace(base, engines=2, kv_dtype="fp8"),
            dataclasses.replace(base, requests=3, prompt_lens=(3, 17, 9), engines=4,
                                split_tokens=12)]


def cached_setups():
    """The cached tile's runs: the three policies' runs of tests/test_tile_cached.py (static
    bf16 1 engine, adaptive fp8 4 engines split-K, disabled NVFP4 2 engines), the static one
    again under ``disabled``, static with 2 engines and split-K, a thrashing L2 (one set of
    two frames, 4 engines, split-K, HBM latency 20: prefetches evicted before use, orphaned
    fills, eviction holds), and a long context (81 tokens, 6 blocks per unit: the CDU's MSHRs
    and ready queue full, the layer ending on a mostly dropped L2 frame)."""
    from tricut.sim.harness.tile.setup import Setup
    static = Setup(lanes=16, model="tiny-te", requests=2, prompt_lens=(3, 17), steps=2, engines=1,
                   max_ctx=32, policy="static")
    return [static, dataclasses.replace(static, policy="disabled"),
            dataclasses.replace(static, engines=2, split_tokens=12, kv_dtype="fp8"),
            Setup(lanes=16, model="tiny-te", requests=3, prompt_lens=(3, 17, 9), steps=2, engines=4,
                  max_ctx=32, policy="adaptive", split_tokens=12, kv_dtype="fp8"),
            Setup(lanes=16, model="tiny-te", requests=2, prompt_lens=(5, 16), steps=2, engines=2,
                  max_ctx=32, policy="disabled", kv_dtype="nvfp4"),
            Setup(lanes=16, model="tiny-te", requests=2, prompt_lens=(33, 14), steps=1, engines=4,
                  max_ctx=48, policy="static", split_tokens=16, cdu_sets=1, cdu_ways=2,
                  latency=20),
            Setup(lanes=16, model="tiny-te", requests=1, prompt_lens=(80,), steps=1, engines=2,
                  max_ctx=96, policy="adaptive")]


def measure(s):
    """``[(round, seq_lens, [measured per layer], [predicted per layer])]`` of one run."""
    from tricut.sim.harness.tile.cosim import simulate
    from tricut.sim.harness.tile.setup import predict_layers, schedule, tile_config
    rep = simulate(s, sim="verilator")
    if not rep.ok:
        raise SystemExit(f"{SCRIPT}: {s}: {rep.differences[0]}")
    cfg = tile_config(s)
    predicted = predict_layers(s)
    rows = []
    for ri, descs in enumerate(schedule(s)):
        lens = [d.seq_len for d in descs]
        got = [rep.tile.layer_cycles[(ri, li)] for li in range(cfg.num_layers)]
        want = [predicted[(ri, li)] for li in range(cfg.num_layers)]
        rows.append((ri, lens, got, want))
    return rows


def report(results, cmd):
    lines = [f"Measured by `{cmd}` (on Verilator, cycle-identical to Amaranth's simulator; "
             f"every run bit-exact with the golden, the runs' CDU decisions equal to the CDU "
             f"golden model's; the model: `models/tile_timing.py`):",
             "", "| tile | K/V | engines | split | step | contexts | measured (layers) | "
                 "predicted (layers) | error per step |", "|---|---|---|---|---|---|---|---|---|"]
    worst, tot_m, tot_p = 0.0, 0, 0
    for s, rows in results:
        for ri, lens, got, want in rows:
            err = (sum(want) - sum(got)) / sum(got)
            worst = max(worst, abs(err))
            tot_m += sum(got)
            tot_p += sum(want)
            split = f"{s.split_tokens}" if s.split_tokens else "—"
            tile = "no CDU" if s.policy is None else f"CDU {s.policy}"
            lines.append(f"| {tile} | {s.kv_dtype} | {s.engines} | {split} | {ri} | "
                         f"{', '.join(map(str, lens))} | {sum(got):,} "
                         f"({', '.join(map(str, got))}) | {sum(want):,} "
                         f"({', '.join(map(str, want))}) | {100 * err:+.2f} % |")
    lines += ["", f"Worst step: {100 * worst:.2f} %; summed over all runs: "
                  f"{100 * (tot_p - tot_m) / tot_m:+.2f} % (targets: 5 % per step, 2 % summed)."]
    return "\n".join(lines) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", action="store_true", help="write the table into docs/tile/figures.md")
    args = ap.parse_args(argv)
    results = [(s, measure(s)) for s in setups() + cached_setups()]
    text = report(results, ".venv/bin/python benchmarks/tile_calibration.py")
    print(text)
    if args.write:
        write_section(DOC, BEGIN, END, text, SCRIPT)


if __name__ == "__main__":
    main()
