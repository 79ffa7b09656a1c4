"""CDU policy figures over the issue's whole grid: Llama-3-8B and -70B x 4K/32K/128K context x
batch 1/16/64, every pattern x policy, 50 MB of L2, 6 decode steps, every layer -- hit rate,
reuse hit rate, accuracy, coverage, HBM read bytes vs ``disabled``.

The grid is the sweep grid file ``sweeps/cdu_figures.toml`` (task ``cdu-replay``; axes model x
context x batch x pattern x policy; fixed ``l2_mb = 50``, ``steps = 6``, ``seed = 0``,
``engine = "fast"``; "128K" is 131,066 tokens of context, so that the 6th step reaches the
models' ``max_context`` of 131,072 -- a replay past it is refused, as by ``tricut cdu replay``).
Its points -- one replay each -- run through the sweep runner
(``tricut.sim.sweep.runner.run_grid``: a local Ray cluster of ``--workers`` CPUs, or in this
process with ``--workers 0``), one row per replay in a DuckDB database (``--db``); the table is
then computed from the database's rows (``hbm_read_vs_disabled``: a point's HBM read bytes over
those of the same model, context, batch and pattern with policy ``disabled``)::

    .venv/bin/python benchmarks/cdu_figures.py                         # whole grid, 2 workers
    .venv/bin/python benchmarks/cdu_figures.py --db cdu.duckdb         # the same, rows kept there
    .venv/bin/python benchmarks/cdu_figures.py --db cdu.duckdb --resume  # finish an interrupted
                                                     # run, or (all done) print the table again
    .venv/bin/python benchmarks/cdu_figures.py --only 8b:128K:64,70b:32K:16  # some cells only
    .venv/bin/python benchmarks/cdu_figures.py --extras     # L2 size, steady state, DSU hints

``tricut sweep sweeps/cdu_figures.toml --db FILE`` runs the same points (same keys), after
which ``benchmarks/cdu_figures.py --db FILE --resume`` runs nothing and prints the table. Without
``--db`` the rows go to a new database in a temporary folder (named on stderr). A point's key
includes the code version (the package version and ``git describe --always --dirty``), so
after a commit ``--resume`` runs every point again. Per-cell replay times (the rows'
``wall_s``) and the sweep's wall time go to stderr.

``--grid FILE`` runs another grid file with the same five axes (say, a copy with
``engine = "golden"``: ``models/cdu.py`` itself, hours for the 128K x 64 points, or other
``steps``). ``engine = "fast"`` replays with ``sim/fast/cdu_twin.py``, the policy model's exact
compiled twin (same counters and transaction checksum as ``models/cdu.py`` on
``tests/test_cdu_fast.py``). ``--implementation`` (as ``tricut cdu replay``'s: the grid's
``engine`` setting) applies to ``--extras`` only.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
from pathlib import Path

from tricut.models.cdu import PATTERNS, POLICIES
from tricut.sim.fast.cdu_replay import replay

GRID_FILE = Path(__file__).resolve().parents[1] / "sweeps" / "cdu_figures.toml"
#: the grid's axes, in the order its rows are grouped (a table line per model, context, batch, pattern)
AXES = ("model", "context", "batch", "pattern", "policy")
KEYS = ("model", "pattern", "policy", "l2_mb", "accesses", "hits", "hits_reuse", "misses",
        "prefetch_issued", "prefetch_useful", "prefetch_late", "prefetch_useless",
        "hbm_read_bytes", "hbm_write_bytes", "hit_rate", "reuse_hit_rate", "accuracy",
        "coverage", "frames", "layers_simulated")


class FigureError(ValueError):
    """A grid or option this script cannot use; one line."""


def load(grid_file=GRID_FILE):
    """The figure grid (:class:`tricut.sim.sweep.grid.Grid`), checked to be a ``cdu-replay``
    grid over exactly :data:`AXES` whose policy axis has every policy."""
    from tricut.sim.sweep.grid import load_grid
    grid = load_grid(grid_file)
    if grid.task != "cdu-replay":
        raise FigureError(f"{grid_file}: task is {grid.task!r}; the figure grid is a cdu-replay grid")
    if tuple(grid.axes) != AXES:
        raise FigureError(f"{grid_file}: axes are {', '.join(grid.axes)}; the figure grid's axes are "
                          f"{', '.join(AXES)} in that order (other settings go in [fixed])")
    if set(grid.axes["policy"]) != set(POLICIES):
        raise FigureError(f"{grid_file}: the policy axis must hold {', '.join(POLICIES)} "
                          "(the table divides by disabled's HBM reads)")
    return grid


def _k(tokens: int) -> int:
    """A context's label in KiB-tokens, rounded (the table's ``128K`` is 131,066 tokens)."""
    return round(tokens / 1024)


def _cell(text: str, grid) -> tuple:
    """``MODEL:CONTEXT:BATCH`` -> axis values. ``8b`` means ``llama-3-8b``; a context matches
    the grid's value itself or its label (``128K`` or 131072 for 131,066)."""
    parts = text.split(":")
    if len(parts) != 3:
        raise FigureError(f"--only {text!r}: expected MODEL:CONTEXT:BATCH, e.g. 8b:131072:64")
    m, c, b = (p.strip() for p in parts)
    models = {v: v for v in grid.axes["model"]}
    models.update({v.removeprefix("llama-3-"): v for v in grid.axes["model"]})
    if m not in models:
        raise FigureError(f"--only {text!r}: model {m!r} is not in the grid "
                          f"({', '.join(grid.axes['model'])})")
    try:
        ctx = int(c[:-1]) * 1024 if c[-1:] in "kK" and c[:-1] else int(c)
        batch = int(b)
    except ValueError:
        raise FigureError(f"--only {text!r}: context and batch must be integers "
                          "(context may end in K)") from None
    contexts = [v for v in grid.axes["context"] if ctx in (v, _k(v) * 1024)]
    if not contexts:
        raise FigureError(f"--only {text!r}: context {ctx} is not in the grid "
                          f"({', '.join(f'{v} ({_k(v)}K)' for v in grid.axes['context'])})")
    if batch not in grid.axes["batch"]:
        raise FigureError(f"--only {text!r}: batch {batch} is not in the grid "
                          f"({', '.join(map(str, grid.axes['batch']))})")
    return models[m], contexts[0], batch


def select(grid, only):
    """The grid restricted to the ``MODEL:CONTEXT:BATCH`` cells of ``only`` (strings, each
    possibly comma-separated); the points keep their keys, so a later full run reuses them."""
    cells = {_cell(x, grid) for item in only for x in item.split(",") if x.strip()}
    if not cells:
        raise FigureError("--only: no cell given")
    points = [p for p in grid.points if (p.axes["model"], p.axes["context"], p.axes["batch"]) in cells]
    return dataclasses.replace(grid, points=points)


def run(grid, db, workers=2, resume=False):
    """Run the grid's points not yet done in ``db``; the sweep summary."""
    from tricut.sim.sweep.runner import run_grid
    from tricut.sim.sweep.store import ResultStore
    with ResultStore(db) as store:
        return run_grid(grid, store, workers=workers, resume=resume)


def table_rows(grid, db):
    """The grid's done points in ``db`` as the table's rows, in grid order: the counters of
    :data:`KEYS`, context, batch, steps, ``seconds`` (the replay's ``wall_s``) and
    ``hbm_read_vs_disabled``."""
    from tricut.sim.sweep.store import ResultStore
    with ResultStore(db, read_only=True) as store:
        stored = {r["key"]: r for r in store.rows(sweep=grid.name, status="done")}
    rows, base = [], {}
    for p in grid.points:
        r = stored.get(p.key)
        if r is None:
            continue
        m, c = r["metrics"], r["config"]
        row = {k: m[k] for k in KEYS}
        row.update(context=c["context"], batch=c["batch"], steps=c["steps"], seconds=r["wall_s"])
        cell = tuple(p.axes[a] for a in AXES[:-1])
        rows.append((cell, row))
        if p.axes["policy"] == "disabled":
            base[cell] = m["hbm_read_bytes"]
    for cell, row in rows:
        b = base.get(cell)
        row["hbm_read_vs_disabled"] = row["hbm_read_bytes"] / b if b else None
    return [row for _, row in rows]


def cell_times(rows):
    """``{(model, context, batch): (replays, total s, slowest s)}`` from the rows' wall times."""
    out = {}
    for r in rows:
        cell = (r["model"], r["context"], r["batch"])
        n, tot, top = out.get(cell, (0, 0.0, 0.0))
        out[cell] = (n + 1, tot + r["seconds"], max(top, r["seconds"]))
    return out


def markdown(rows):
    """One line per (model, context, batch, pattern): ``disabled``'s HBM reads, then per policy
    hit rate / reuse hit rate / accuracy / coverage / HBM reads ÷ disabled."""
    head = ("| model | context × batch | pattern | HBM GB (disabled) | static: hit / reuse / acc / cov "
            "/ HBM÷dis | adaptive: hit / reuse / acc / cov / HBM÷dis |")
    lines = [head, "|---|---|---|---|---|---|"]
    groups = {}
    for r in rows:
        groups.setdefault((r["model"], r["context"], r["batch"], r["pattern"]), {})[r["policy"]] = r

    def cell(r):
        return (f"{r['hit_rate']:.1%} / {r['reuse_hit_rate']:.1%} / {r['accuracy']:.1%} / "
                f"{r['coverage']:.1%} / {r['hbm_read_vs_disabled']:.2f}")
    for (model, ctx, batch, pat), by in groups.items():
        if not all(p in by for p in POLICIES):
            continue
        lines.append(f"| {model.replace('llama-3-', '')} | {_k(ctx)}K × {batch} | {pat} | "
                     f"{by['disabled']['hbm_read_bytes'] / 1e9:.1f} | {cell(by['static'])} | "
                     f"{cell(by['adaptive'])} |")
    return "\n".join(lines)


def _diff(end, start):
    """Counters of the steps between two runs of the same replay (steady state)."""
    d = {k: end[k] - start[k] for k in ("accesses", "hits", "hits_reuse", "prefetch_issued",
                                         "prefetch_useful", "hbm_read_bytes")}
    d["hit_rate"] = d["hits"] / d["accesses"]
    d["reuse_hit_rate"] = d["hits_reuse"] / d["accesses"]
    d["accuracy"] = d["prefetch_useful"] / d["prefetch_issued"] if d["prefetch_issued"] else 0.0
    return d


def extras(engine="fast"):
    """The other tables of docs/cdu.md: L2 size, steady state, DSU hints."""
    out = ["### L2 size (Llama-3-8B, 4K × 1, 6 steps)", "",
           "| L2 MB | pattern | static: hit / reuse / HBM÷dis | adaptive: hit / reuse / HBM÷dis |",
           "|---|---|---|---|"]
    for l2 in (50, 256, 1024):
        for pat in PATTERNS:
            c = {pol: replay("llama-3-8b", pat, pol, l2, steps=6, context=4096, engine=engine)
                 for pol in POLICIES}
            base = c["disabled"]["hbm_read_bytes"]
            cells = [f"{c[p]['hit_rate']:.1%} / {c[p]['reuse_hit_rate']:.1%} / "
                     f"{c[p]['hbm_read_bytes'] / base:.2f}" for p in ("static", "adaptive")]
            out.append(f"| {l2} | {pat} | {cells[0]} | {cells[1]} |")
    out += ["", "### Steady state (Llama-3-8B, 50 MB: steps 3–12 of 12, reread burst in steps 6–7)",
            "", "| context × batch | pattern | static: hit / acc / HBM GB | adaptive: hit / acc / "
            "HBM GB | disabled HBM GB |", "|---|---|---|---|---|"]
    args = dict(burst_start=6, burst_len=2)
    for ctx, batch in ((4096, 1), (4096, 16), (32768, 1)):
        for pat in PATTERNS:
            d = {}
            for pol in POLICIES:
                kw = dict(context=ctx, batch=batch, engine=engine, pattern_args=args)
                d[pol] = _diff(replay("llama-3-8b", pat, pol, 50, steps=12, **kw),
                               replay("llama-3-8b", pat, pol, 50, steps=2, **kw))
            cells = [f"{d[p]['hit_rate']:.1%} / {d[p]['accuracy']:.1%} / {d[p]['hbm_read_bytes'] / 1e9:.2f}"
                     for p in ("static", "adaptive")]
            out.append(f"| {ctx // 1024}K × {batch} | {pat} | {cells[0]} | {cells[1]} | "
                       f"{d['disabled']['hbm_read_bytes'] / 1e9:.2f} |")
    out += ["", "### DSU hints (Llama-3-8B, 50 MB, 6 steps, 12 requests of 1K and 4 of 32K tokens)",
            "", "| pattern | policy | hints | hit rate | reuse hit | HBM read GB |",
            "|---|---|---|---|---|---|"]
    ctxs = [1024] * 12 + [32768] * 4
    for pat in ("full", "window", "topk"):
        for pol in ("static", "adaptive"):
            for hints in ("auto", "dsu"):
                c = replay("llama-3-8b", pat, pol, 50, steps=6, contexts=ctxs, hints=hints,
                           engine=engine)
                out.append(f"| {pat} | {pol} | {hints} | {c['hit_rate']:.1%} | "
                           f"{c['reuse_hit_rate']:.1%} | {c['hbm_read_bytes'] / 1e9:.2f} |")
    return "\n".join(out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--grid", type=Path, default=GRID_FILE, metavar="TOML",
                    help="the grid file (default: sweeps/cdu_figures.toml)")
    ap.add_argument("--db", type=Path, metavar="FILE",
                    help="the DuckDB database the rows go to (default: a new one in a temporary folder)")
    ap.add_argument("--workers", type=int, default=2, metavar="N",
                    help="local Ray workers (default 2); 0 = in this process, one after another")
    ap.add_argument("--resume", action="store_true",
                    help="skip the points already done in --db (failed ones run again)")
    ap.add_argument("--only", nargs="+", default=None, metavar="MODEL:CTX:BATCH",
                    help="run only these cells (comma- or space-separated), e.g. "
                         "8b:128K:64,70b:131072:16")
    ap.add_argument("--extras", action="store_true",
                    help="print the L2-size, steady-state and DSU-hint tables instead of the grid")
    ap.add_argument("--implementation", choices=("golden", "fast"), default=None,
                    help="--extras only: fast = the exact numba twin of the policy model (default), "
                         "golden = models/cdu.py itself (the grid's is its file's engine setting)")
    a = ap.parse_args(argv)
    if a.extras:
        print(extras(a.implementation or "fast"))
        return 0
    if a.implementation is not None:
        ap.error("--implementation applies to --extras; the grid's is its grid file's engine "
                 "setting (--grid)")
    if a.workers < 0:
        ap.error("--workers must be >= 0")
    if a.resume and a.db is None:
        ap.error("--resume needs --db (the database to resume)")
    from tricut.sim.sweep.grid import GridError
    from tricut.sim.sweep.runner import SweepError
    from tricut.sim.sweep.store import StoreError
    try:
        grid = load(a.grid)
        if a.only is not None:
            grid = select(grid, a.only)
        db = a.db
        if db is None:
            db = Path(tempfile.mkdtemp(prefix="cdu_figures_")) / "cdu_figures.duckdb"
        print(f"cdu_figures: {len(grid.points)} replays of {a.grid.name}, rows in {db}",
              file=sys.stderr)
        summary = run(grid, db, workers=a.workers, resume=a.resume)
        rows = table_rows(grid, db)
    except (GridError, SweepError, StoreError, FigureError) as e:
        print(f"cdu_figures: {e}", file=sys.stderr)
        return 2
    for (model, ctx, batch), (n, tot, top) in cell_times(rows).items():
        print(f"  {model} {_k(ctx)}K x {batch}: {n} replays, {tot:.1f} s (slowest {top:.1f} s)",
              file=sys.stderr)
    print(f"cdu_figures: {summary.done} run, {summary.skipped} already done, {summary.failed} failed; "
          f"{summary.wall_s:.1f} s on {summary.backend}"
          f"{f' ({summary.workers} workers)' if summary.backend.startswith('ray') else ''}; rows in {db}",
          file=sys.stderr)
    for label, error in summary.failures:
        print(f"  failed: {label}: {error}", file=sys.stderr)
    print(markdown(rows))
    return 1 if summary.failed else 0


if __name__ == "__main__":
    sys.exit(main())
