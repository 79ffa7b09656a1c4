"""`tricut sweep GRID.toml`, `tricut sweep export` and `tricut sweep plot` (docs/sweeps.md)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from .errors import InputError, one_line_argparse

__all__ = ["add_commands", "SUBCOMMANDS", "parse_subcommand"]

DEFAULT_DB = "results.duckdb"
#: the most local Ray workers (this is a workstation tool; a cluster is joined with --address)
MAX_WORKERS = 256


def _workers(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if not 0 <= value <= MAX_WORKERS:
        raise argparse.ArgumentTypeError(f"{text} must be in 0..{MAX_WORKERS} (0: in this process, no Ray)")
    return value


def cmd_sweep(args) -> int:
    from ..sweep.grid import CheckProgress, load_grid
    from ..sweep.runner import check_address, run_grid
    from ..sweep.store import ResultStore
    if args.address is not None and args.workers == 0:
        raise InputError("--workers 0 runs in this process and cannot use --address")
    # a bad or unreachable address (auto: the cluster it names) is refused before --db is written
    address = check_address(args.address) if args.address is not None else None
    progress = not args.no_progress and not args.json
    with CheckProgress(sys.stderr) as check_progress:
        grid = load_grid(args.grid, progress=check_progress if progress else None)
    if args.workers is not None:
        workers = args.workers
    else:       # joined: as many tasks in flight as the cluster has CPUs (x2); local: this machine's cores
        workers = 0 if address is not None else (os.cpu_count() or 1)
    new_db = not args.db.exists()
    with ResultStore(args.db) as store:
        try:
            summary = run_grid(grid, store, workers=workers, address=address, resume=args.resume,
                               progress=progress)
        except BaseException:        # a refused or failed join, Ctrl-C, a failed write
            if new_db and store.is_empty():
                store.close()
                for path in (args.db, Path(f"{args.db}.wal")):
                    path.unlink(missing_ok=True)      # a database this run made and left empty
            raise
    out = summary.as_dict()
    out["db"] = str(args.db)
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print(f"sweep {summary.sweep}: {summary.total} points: {summary.done} done, {summary.failed} failed, "
              f"{summary.skipped} skipped (already done); {summary.dropped} impossible and "
              f"{summary.excluded} excluded combinations left out; {summary.wall_s:.1f} s on {summary.backend}"
              f"{'' if summary.backend == 'in-process' else f' ({summary.workers} workers)'}; results in {args.db}")
        for label, error in summary.failures[:10]:
            print(f"  failed: {label}: {error}")
        if len(summary.failures) > 10:
            print(f"  ... and {len(summary.failures) - 10} more (status = 'failed' in the database)")
    return 1 if summary.failed else 0


def cmd_export(args) -> int:
    from ..sweep.store import ResultStore
    with ResultStore(args.db, read_only=True) as store:
        if args.sweep is not None and args.sweep not in store.sweeps():
            raise InputError(f"--sweep {args.sweep!r}: not in {args.db} (sweeps: {', '.join(store.sweeps())})")
        n = store.export_parquet(args.parquet, args.sweep)
    print(f"wrote {args.parquet} ({n} rows)", file=sys.stderr)
    return 0


def cmd_plot(args) -> int:
    from ..sweep.plot import plot_sweep
    for path in plot_sweep(args.db, args.out, x=args.x, y=args.y, group=args.group, sweep=args.sweep,
                           heat=args.heat, metric=args.metric):
        print(f"wrote {path}", file=sys.stderr)
    return 0


def _export_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tricut sweep export",
                                description="Write a sweep database's points table as Parquet.")
    one_line_argparse(p)
    p.add_argument("--db", type=Path, default=Path(DEFAULT_DB), help="the sweep database (default: %(default)s)")
    p.add_argument("--parquet", type=Path, required=True, metavar="FILE", help="the Parquet file to write")
    p.add_argument("--sweep", help="only this sweep's rows (default: every row)")
    p.set_defaults(func=cmd_export)
    return p


def _plot_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="tricut sweep plot",
        description="Pareto fronts of a finished sweep (one per value of --group; dominated points grey) "
                    "and a heat map of one metric over two axes. Metrics are the simulate --json names "
                    "(or a tile task's: cycles_per_step, cells, hbm_port_use, ...); a metric ending in "
                    "_s (a latency), a count of cycles or of cells is better low, any other better "
                    "high. With no flags: tokens_per_s against tpot_p99_s (a tile-design sweep: "
                    "cycles_per_step against cells) grouped by the sweep's first axis, and the y "
                    "metric over its first two axes.")
    one_line_argparse(p)
    p.add_argument("--db", type=Path, default=Path(DEFAULT_DB), help="the sweep database (default: %(default)s)")
    p.add_argument("--sweep", help="which sweep in the database (default: the only one)")
    p.add_argument("--x", help="metric on the x axis (default: tpot_p99_s; cells for a tile-design sweep, "
                                    "hbm_port_use for tile-run; else the first metric)")
    p.add_argument("--y", help="metric on the y axis (default: tokens_per_s; cycles_per_step for the tile "
                                    "sweeps; else the second metric)")
    p.add_argument("--group", metavar="AXIS", help="one front per value of this axis (default: the first axis)")
    p.add_argument("--heat", metavar="AXIS,AXIS", help="the heat map's two axes (default: the first two axes)")
    p.add_argument("--metric", help="the heat map's metric (default: the --y metric)")
    p.add_argument("-o", "--out", type=Path, required=True, metavar="DIR", help="folder for the PNGs (created)")
    p.set_defaults(func=cmd_plot)
    return p


#: `tricut sweep SUBCOMMAND ...` (a grid file cannot be called export or plot)
SUBCOMMANDS = {"export": _export_parser, "plot": _plot_parser}


def parse_subcommand(argv: list[str]) -> argparse.Namespace:
    """``argv`` after ``sweep``, starting with a :data:`SUBCOMMANDS` name."""
    return SUBCOMMANDS[argv[0]]().parse_args(argv[1:])


def add_commands(sub) -> None:
    p = sub.add_parser(
        "sweep", help="run a design-space grid on Ray; results in DuckDB (also: sweep export, sweep plot)",
        description="Run every point of a grid file (TOML: [fixed] settings, [axes] of values, "
                    "[[exclude]] tables, [filter] drop_impossible; format in docs/sweeps.md) as one "
                    "run of its task (task = simulate, cdu-replay, tile-run, tile-area or tile-design), "
                    "each a Ray task on a local Ray cluster (default) "
                    "or on the cluster at --address, and write one row per point to a DuckDB database. "
                    "Every point is checked before any runs. A failed point is recorded with its error "
                    "and the sweep goes on (exit 1 at the end); a worker that dies is retried by Ray. "
                    "Also: 'tricut sweep export --parquet FILE' and 'tricut sweep plot -o DIR' "
                    "(each with --help).")
    one_line_argparse(p)
    p.add_argument("grid", type=Path, metavar="GRID.toml", help="the grid file")
    p.add_argument("--db", type=Path, default=Path(DEFAULT_DB),
                   help="the DuckDB database to write (created if missing; default: %(default)s)")
    p.add_argument("--workers", type=_workers, default=None, metavar="N",
                   help="tasks run at once: the local Ray cluster's CPUs (with --address: the driver keeps "
                        "2 x N tasks in flight; default there: 2 x the cluster's CPUs); 0 = in this process, "
                        "one after another, without Ray (default: this machine's cores)")
    p.add_argument("--address", metavar="ADDR",
                   help="join an existing Ray cluster (HOST:PORT of its head, ray://HOST:PORT, or auto) "
                        "instead of starting a local one; every node needs this tricut installed")
    p.add_argument("--resume", action="store_true",
                   help="skip the points already done in --db (failed ones run again); without it a "
                        "database holding some of the grid's points is refused")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("--no-progress", action="store_true", help="no progress bar or per-point lines on stderr")
    p.set_defaults(func=cmd_sweep)
