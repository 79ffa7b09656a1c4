"""Integration calibration of the decode tile: the tile's measured cycles per layer and per
step against the fast model's prediction for the same configuration
(``sim/fast/tile_timing.py``), on whole decode steps co-simulated with the golden decode step
(``sim/harness/tile_cosim.py``).

    .venv/bin/python benchmarks/tile_calibration.py            # run, print the table
    .venv/bin/python benchmarks/tile_calibration.py --write    # ... and into docs/tile.md

Runs (tiny-te; each checked bit-exact against the golden first): the HBM-only tile with 1, 2
and 4 engines, with and without split-K, bf16 and fp8. A step's tile cycles are the sum of its
layers' (``go`` to ``done``); the host's K/V, q and output traffic between layers is the
harness's, not the tile's, and is left out. ``--write`` replaces the text between
``<!-- tile:calibration:begin -->`` and ``<!-- tile:calibration:end -->`` in docs/tile.md.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from doc_sections import write_section     # benchmarks/ is on sys.path when a script runs

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "tile.md"
BEGIN, END = "<!-- tile:calibration:begin -->", "<!-- tile:calibration:end -->"
SCRIPT = "benchmarks/tile_calibration.py"


def setups():
    from tricut.sim.harness.tile_cosim import Setup
    base = Setup(model="tiny-te", requests=2, prompt_lens=(3, 17), steps=2, engines=1,
                 max_ctx=32)
    return [base,
            dataclasses.replace(base, engines=2, kv_dtype="fp8"),
            dataclasses.replace(base, requests=3, prompt_lens=(3, 17, 9), engines=4,
                                split_tokens=12)]


def config_of(s):
    from tricut.models.config import load_model
    from tricut.sim.fast.tile_timing import TileConfig
    cfg = load_model(s.model)
    return TileConfig(engines=s.engines, head_dim=cfg.head_dim, G=cfg.group_size, lanes=s.lanes,
                      num_kv_heads=cfg.num_kv_heads, num_layers=cfg.num_layers,
                      split_tokens=s.split_tokens, latency=s.latency, max_beats=s.max_beats)


def measure(s):
    """``[(round, seq_lens, [measured per layer], [predicted per layer])]`` of one run."""
    from tricut.sim.fast.tile_timing import predict_step
    from tricut.sim.harness import tile_cosim as C
    rep = C.simulate(s)
    if not rep.ok:
        raise SystemExit(f"{SCRIPT}: {s}: {rep.differences[0]}")
    cfg = config_of(s)
    rows = []
    for ri, descs in enumerate(C.schedule(s)):
        lens = [d.seq_len for d in descs]
        got = [rep.tile.layer_cycles[(ri, li)] for li in range(cfg.num_layers)]
        rows.append((ri, lens, got, predict_step(cfg, lens)))
    return rows


def report(results, cmd):
    lines = [f"Measured by `{cmd}` (Amaranth simulator; every run bit-exact with the golden):",
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
            lines.append(f"| HBM only | {s.kv_dtype} | {s.engines} | {split} | {ri} | "
                         f"{', '.join(map(str, lens))} | {sum(got):,} "
                         f"({', '.join(map(str, got))}) | {sum(want):,} "
                         f"({', '.join(map(str, want))}) | {100 * err:+.2f} % |")
    lines += ["", f"Worst step: {100 * worst:.2f} %; summed over all runs: "
                  f"{100 * (tot_p - tot_m) / tot_m:+.2f} % (targets: 5 % per step, 2 % summed)."]
    return "\n".join(lines) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", action="store_true", help="write the table into docs/tile.md")
    args = ap.parse_args(argv)
    results = [(s, measure(s)) for s in setups()]
    text = report(results, ".venv/bin/python benchmarks/tile_calibration.py")
    print(text)
    if args.write:
        write_section(DOC, BEGIN, END, text, SCRIPT)


if __name__ == "__main__":
    main()
