"""The tile design sweep of docs/sweeps.md: ``sweeps/tile_designs.toml`` (the decode tile's TE
engines × lanes × TE design and CDU policy × K/V format at Llama-3-8B's and Llama-3-70B's
attention shapes on one H100 SM's share of HBM), every point co-simulated on Verilator and
synthesized by Yosys.

    .venv/bin/python benchmarks/tile_design_sweep.py             # run (resumable), report
    .venv/bin/python benchmarks/tile_design_sweep.py --write     # ... and write docs/sweeps.md and its figure

Runs the grid the way a user does, ``tricut sweep sweeps/tile_designs.toml --db DB --resume
--workers N`` (points already done in ``DB`` by the same code are skipped), plots cycles per
step against cells with one Pareto front per model and K/V format, and reads the database:
every point's cycles per step, cells, HBM port use, TE use and equivalence; the
Pareto-optimal designs per model and K/V format; where more engines or wider lanes stop
paying (for each design, the step's cycles against the same design with half the engines, or
half the lanes, and the share of the SM's HBM bytes per cycle the tile uses); and what the
serial engine and the CDU change against the pipelined engine without it at the same engines
and lanes.

``--report-only`` reads ``DB`` as it is (no sweep run): the rows of another checkout's run,
whose code version each row carries.

``--write`` writes the plot to docs/figures/tile_designs_pareto.png and replaces the
text between ``<!-- tile-designs:begin -->`` and ``<!-- tile-designs:end -->`` in docs/sweeps.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from doc_sections import publish     # benchmarks/ is on sys.path when a script runs
from sweep_example import tricut

ROOT = Path(__file__).resolve().parent.parent
GRID_REL = "sweeps/tile_designs.toml"
DOC = ROOT / "docs" / "sweeps.md"
FIGURE = "docs/figures/tile_designs_pareto.png"
BEGIN, END = "<!-- tile-designs:begin -->", "<!-- tile-designs:end -->"
SCRIPT = "benchmarks/tile_design_sweep.py"
SWEEP = "tile-designs"
#: a step faster by less than this is "no longer paying"
PAYS = 0.05


def run(argv: list[str], what: str) -> str:
    proc = subprocess.run(argv, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    if proc.returncode not in (0, 1):        # 1: a point failed (reported below)
        raise SystemExit(f"{SCRIPT}: {what} exited {proc.returncode}")
    return proc.stdout


def load(db: Path) -> list[dict]:
    from tricut.sim.sweep.store import ResultStore
    with ResultStore(db, read_only=True) as store:
        return store.rows(SWEEP)


#: the grid's ``variant`` values: (TE design, CDU policy) -> the name in the report
VARIANTS = {("pipelined", "none"): "pipelined", ("serial", "none"): "serial",
            ("pipelined", "static"): "pipelined + CDU static"}
#: the variant every engine count and lane width is swept with
BASE = "pipelined"


def _variant(r) -> str:
    v = r["axes"]["variant"]
    return VARIANTS.get((v["engine"], v["policy"]), f"{v['engine']} + CDU {v['policy']}")


def _design(r) -> tuple:
    """``(model, K/V, variant, engines, lanes)``."""
    a = r["axes"]
    return a["model"], a["kv_dtype"], _variant(r), a["engines"], a["lanes"]


def _name(key) -> str:
    return f"{_engines(key[3])} × {key[4]} lanes, {key[2]}"


def _engines(n: int) -> str:
    return f"{n} engine{'s' * (n > 1)}"


def pareto(rows) -> list[dict]:
    """Designs no other design of the same model and K/V format beats in both cycles per step
    and cells (ties kept)."""
    def dominates(a, b):
        ax, ay = a["metrics"]["cells"], a["metrics"]["cycles_per_step"]
        bx, by = b["metrics"]["cells"], b["metrics"]["cycles_per_step"]
        return ax <= bx and ay <= by and (ax < bx or ay < by)
    out = []
    for r in rows:
        same = [o for o in rows if _design(o)[:2] == _design(r)[:2]]
        if not any(dominates(o, r) for o in same):
            out.append(r)
    return sorted(out, key=lambda r: (_design(r)[:2], r["metrics"]["cells"]))


def report(rows, summary: dict, command: str, workers: int) -> str:
    done = [r for r in rows if r["status"] == "done"]
    failed = [r for r in rows if r["status"] != "done"]
    by = {_design(r): r for r in done}
    fixed = done[0]["config"] if done else {}
    commits = sorted({r["git_commit"] for r in rows})
    lines = [
        f"_Written by `{command}` on {dt.date.today().isoformat()}; do not edit by hand._",
        "",
        f"Grid `{GRID_REL}` (task `tile-design`): one H100 SM's slice (`gpu = \"h100-sxm5\"`: "
        f"its HBM share as the HBM model's rate, its latency, the burst slots that cover it, "
        f"split-K where one engine cannot keep up), one KV head of each model, prompts "
        f"{', '.join(map(str, fixed.get('prompt_lens', [])))} tokens, {fixed.get('steps')} decode "
        f"steps, Verilator builds at `{fixed.get('cxx_opt')}`; designs: "
        + "; ".join(sorted({_variant(r) for r in rows})) + ". "
        f"{len(rows)} points: {len(done)} done, {len(failed)} failed, run by tricut "
        + ", ".join(f"`{c}`" for c in commits)
        + (f"; this run: {summary.get('done', 0)} run, {summary.get('skipped', 0)} already in "
           f"the database, {summary.get('wall_s', 0):.0f} s wall with {workers} workers"
           if summary else " (read from the database, no run)")
        + f"; {sum(r['wall_s'] for r in done):.0f} s of point time in all on {os.cpu_count()} "
        f"cores (Verilator builds, runs, Yosys; a design's point time is "
        f"{min(r['wall_s'] for r in done):.0f}–{max(r['wall_s'] for r in done):.0f} s).",
        "",
        f"![cycles per step against cells, one front per model]({FIGURE.removeprefix('docs/')})",
        "",
        "| model | K/V | design | engines | lanes | split-K | cycles per step | cells | TE engines' "
        "cells | CDU cells | HBM port use | TE use | bit-exact | timing model error |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|",
    ]
    for key in sorted(by, key=lambda k: (k[0], k[1], k[2] != BASE, k[2], k[3], k[4])):
        r = by[key]
        m, c = r["metrics"], r["config"]
        lines.append(
            f"| {key[0]} | {key[1]} | {key[2]} | {key[3]} | {key[4]} | "
            f"{c['split_tokens'] or '–'} | {m['cycles_per_step']:,.0f} | {m['cells']:,} | "
            f"{m['cells_te_engines']:,} | {m['cells_cdu']:,} | {m['hbm_port_use']:.3f} | "
            f"{m['te_utilisation']:.3f} | {'yes' if m['ok'] else 'NO'} | "
            f"{m['timing_model_error']:.1e} |")
    for r in failed:
        lines.append(f"| {' | '.join(map(str, _design(r)))} | failed: {r['error'][:120]} "
                     f"||||||||||")
    lines += ["", f"**What it says**: per shape, the cheapest design within {PAYS:.0%} of the "
              "fastest step; every design with more cells buys less than that:", ""]
    for (model, kv) in sorted({_design(r)[:2] for r in done}):
        same = [r for r in done if _design(r)[:2] == (model, kv)]
        best = min(r["metrics"]["cycles_per_step"] for r in same)
        pick = min((r for r in same if r["metrics"]["cycles_per_step"] <= (1 + PAYS) * best),
                   key=lambda r: r["metrics"]["cells"])
        lines.append(f"* {model}, {kv}: {_name(_design(pick))}, "
                     f"{pick['metrics']['cycles_per_step']:,.0f} cycles per step "
                     f"({pick['metrics']['cycles_per_step'] / best - 1:+.1%} against the fastest), "
                     f"{pick['metrics']['cells']:,} cells, HBM port use "
                     f"{pick['metrics']['hbm_port_use']:.2f}, TE use {pick['metrics']['te_utilisation']:.2f}.")
    lines += ["", "**Pareto-optimal designs** (no design of the same model and K/V format has "
              "both fewer cells and fewer cycles per step):", ""]
    for (model, kv) in sorted({_design(r)[:2] for r in done}):
        front = [r for r in pareto(done) if _design(r)[:2] == (model, kv)]
        lines.append(f"* {model}, {kv}: " + "; ".join(
            f"{_name(_design(r))} ({r['metrics']['cycles_per_step']:,.0f} cycles, "
            f"{r['metrics']['cells']:,} cells)" for r in front))
    lines += ["", f"**Where more hardware stops paying** (a step less than {PAYS:.0%} faster "
              "than the same design with half the engines, or half the lanes; the HBM port "
              "use says why: near 1 the SM's share binds):", ""]
    for (model, kv) in sorted({_design(r)[:2] for r in done}):
        notes = []
        for variant in sorted({k[2] for k in by if k[:2] == (model, kv)}, key=lambda v: v != BASE):
            keys = [k for k in by if k[:3] == (model, kv, variant)]
            for e in sorted({k[3] for k in keys}):
                for lanes in sorted({k[4] for k in keys}):
                    r = by.get((model, kv, variant, e, lanes))
                    half_e = by.get((model, kv, variant, e // 2, lanes)) if e > 1 else None
                    half_l = by.get((model, kv, variant, e, lanes // 2))
                    for what, base in (("engines", half_e), ("lanes", half_l)):
                        if r is None or base is None:
                            continue
                        notes.append(_step(base, r, f"{variant}: " + (
                            f"{_engines(e // 2)} × {lanes} lanes" if what == "engines"
                            else f"{_engines(e)} × {lanes // 2} lanes") + f" → {e} × {lanes}"))
        lines.append(f"* {model}, {kv}:")
        lines += [f"  * {n}" for n in notes]
    lines += ["", f"**The TE design and the CDU** (against the {BASE} engine without the CDU at "
              "the same engines and lanes):", ""]
    for (model, kv) in sorted({_design(r)[:2] for r in done}):
        notes = []
        for key in sorted(k for k in by if k[:2] == (model, kv) and k[2] != BASE):
            base = by.get((model, kv, BASE, key[3], key[4]))
            if base is not None:
                notes.append(_step(base, by[key], f"{_engines(key[3])} × {key[4]} lanes: "
                                                   f"{BASE} → {key[2]}"))
        if notes:
            lines.append(f"* {model}, {kv}:")
            lines += [f"  * {n}" for n in notes]
    return "\n".join(lines) + "\n"


def _step(base, r, what) -> str:
    """One comparison line: ``what``, the speed and the cells of ``r`` against ``base``."""
    gain = base["metrics"]["cycles_per_step"] / r["metrics"]["cycles_per_step"] - 1
    cost = r["metrics"]["cells"] / base["metrics"]["cells"] - 1
    verdict = "pays" if gain >= PAYS else "does not pay" if cost > 0 else "saves cells"
    return (f"{what}: {gain:+.1%} speed for {cost:+.0%} cells, {verdict} (port use "
            f"{base['metrics']['hbm_port_use']:.2f} → {r['metrics']['hbm_port_use']:.2f})")


def plot(rows, path: Path) -> None:
    """Cycles per step against cells: every design, one Pareto front per model and K/V
    format, each point named engines × lanes."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    done = [r for r in rows if r["status"] == "done"]
    front = {id(r) for r in pareto(done)}
    fig, ax = plt.subplots(figsize=(8.5, 6))
    shapes = sorted({_design(r)[:2] for r in done})
    variants = sorted({_variant(r) for r in done}, key=lambda v: v != BASE)
    marks = {v: "osD^v<>"[i % 7] for i, v in enumerate(variants)}
    #: a point's label: engines×lanes, "s" before it for the serial engine, "+C" after it
    #: with the CDU
    tags = {v: ("s" if v.startswith("serial") else "", "+C" if "CDU" in v else "")
            for v in variants}
    for i, (model, kv) in enumerate(shapes):
        same = sorted((r for r in done if _design(r)[:2] == (model, kv)),
                      key=lambda r: r["metrics"]["cells"])
        color = f"C{i}"
        for v in variants:
            pts = [r for r in same if _variant(r) == v]
            ax.scatter([r["metrics"]["cells"] for r in pts],
                       [r["metrics"]["cycles_per_step"] for r in pts],
                       color=color, marker=marks[v], s=24, alpha=0.4)
        best = [r for r in same if id(r) in front]
        ax.plot([r["metrics"]["cells"] for r in best], [r["metrics"]["cycles_per_step"] for r in best],
                "-", color=color, lw=1.2, label=f"{model}, {kv} (front)")
        for r in best:
            key = _design(r)
            ax.annotate(f"{tags[key[2]][0]}{key[3]}×{key[4]}{tags[key[2]][1]}",
                        (r["metrics"]["cells"], r["metrics"]["cycles_per_step"]), fontsize=7,
                        color=color, xytext=(4, 4 if i % 2 else -10), textcoords="offset points",
                        annotation_clip=True)
    for v in variants:
        ax.scatter([], [], color="grey", marker=marks[v], s=24,
                   label=f"{v} (label {tags[v][0]}E×L{tags[v][1]})")
    ax.set_xlabel("cells (Yosys generic cells of the tile; lower is better)")
    ax.set_ylabel("cycles per decode step (lower is better)")
    ax.set_ylim(bottom=0)
    ax.set_xlim(left=0, right=1.15 * max(r["metrics"]["cells"] for r in done))
    ax.set_title("decode tile designs on one H100 SM's HBM share: engines × lanes, TE design, "
                 "CDU\n(faint: every design; line: the Pareto front of its model and K/V "
                 "format)", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--db", type=Path, default=ROOT / ".build" / "tile_designs.duckdb",
                    help="the sweep's database (default: .build/tile_designs.duckdb; resumed)")
    ap.add_argument("--workers", type=int, default=2, help="Ray workers (default: %(default)s)")
    ap.add_argument("--report-only", action="store_true",
                    help="report the database as it is, without running the sweep")
    ap.add_argument("--write", action="store_true",
                    help="write docs/sweeps.md's section and docs/figures/tile_designs_pareto.png")
    args = ap.parse_args(argv)
    if args.workers < 1:
        ap.error("--workers must be at least 1")
    args.db.parent.mkdir(parents=True, exist_ok=True)
    summary = {}
    if not args.report_only:
        out = run(tricut() + ["sweep", GRID_REL, "--db", str(args.db), "--resume", "--workers",
                              str(args.workers), "--json"], "tricut sweep")
        summary = json.loads(out) if out.strip() else {}
    rows = load(args.db)
    if not any(r["status"] == "done" for r in rows):
        raise SystemExit(f"{SCRIPT}: no point of {GRID_REL} finished")
    figure = ROOT / FIGURE if args.write else Path(tempfile.mkdtemp()) / Path(FIGURE).name
    plot(rows, figure)
    print(f"wrote {figure}", file=sys.stderr)
    command = f".venv/bin/python {SCRIPT}" + (f" --workers {args.workers}" if args.workers != 2 else "")
    if args.report_only:
        command += " --report-only"
    text = report(rows, summary, command, args.workers)
    return publish(text, args.write, DOC, BEGIN, END, SCRIPT)


if __name__ == "__main__":
    sys.exit(main())
