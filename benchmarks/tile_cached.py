"""Whole decode steps through the decode tile with the CDU in the K/V path, one run per CDU
policy (``sim/harness/tile/cosim.py`` with a ``policy``; the setups of
``tests/test_tile_cached.py``, and the static one's again under ``disabled``), on Verilator
(``tricut tile run --sim verilator``; the same cycles as Amaranth's simulator).

    .venv/bin/python benchmarks/tile_cached.py            # run, print the table
    .venv/bin/python benchmarks/tile_cached.py --write    # ... and into docs/tile/figures.md

Each run is checked as the tests check it (attention outputs bit-exact with the TE golden,
tokens equal, every CDU decision equal to the CDU golden model's); the table gives the CDU's
counters and the tile's cycles per step (first ``go`` to last ``done``, the host's K/V, q and
output traffic between layers included). ``--write`` replaces the text between
``<!-- tile:cached:begin -->`` and ``<!-- tile:cached:end -->`` in docs/tile/figures.md.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from doc_sections import write_section     # benchmarks/ is on sys.path when a script runs

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "tile" / "figures.md"
BEGIN, END = "<!-- tile:cached:begin -->", "<!-- tile:cached:end -->"
SCRIPT = "benchmarks/tile_cached.py"


def run_all():
    from tricut.sim.harness.tile.cases import ADAPTIVE, DISABLED, STATIC
    from tricut.sim.harness.tile.cosim import simulate

    import dataclasses
    rows = []
    # STATIC's setup again without a CDU policy in effect: the same steps, every block a bypass
    for s in (STATIC, dataclasses.replace(STATIC, policy="disabled"), ADAPTIVE, DISABLED):
        t0 = time.perf_counter()
        rep = simulate(s, sim="verilator")
        wall = time.perf_counter() - t0
        if not rep.ok:
            raise SystemExit(f"{SCRIPT}: {s.policy}: {rep.differences[0]}")
        rows.append((s, rep, wall))
    return rows


def report(rows, cmd):
    lines = [f"Measured by `{cmd}` (Verilator; every run bit-exact with the TE golden, "
             f"tokens equal, CDU decisions equal to the CDU golden model):", "",
             "| policy | K/V | engines | prompts | split | reads: hits / allocated misses / "
             "bypass | prefetches issued | evictions | step cycles | wall |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for s, rep, wall in rows:
        c, t = rep.tile.cdu_counters, rep.tile
        steps = ", ".join(f"{t.step_cycles[k]:,}" for k in sorted(t.step_cycles))
        split = f"{s.split_tokens} tokens" if s.split_tokens else "—"
        lines.append(f"| {s.policy} | {s.kv_dtype} | {s.engines} | "
                     f"{', '.join(map(str, s.prompt_lens))} | {split} | {c['accesses']}: "
                     f"{c['hits']} / {c['misses_alloc']} / {c['misses_bypass']} | "
                     f"{c['prefetch_issued']} | {c['evictions']} | {steps} | {wall:.0f} s |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", action="store_true", help="write the table into docs/tile/figures.md")
    args = ap.parse_args(argv)
    text = report(run_all(), ".venv/bin/python benchmarks/tile_cached.py")
    print(text)
    if args.write:
        write_section(DOC, BEGIN, END, text, SCRIPT)


if __name__ == "__main__":
    main()
