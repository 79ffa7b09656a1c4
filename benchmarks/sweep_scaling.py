"""How `tricut sweep` scales: one fixed 32-point grid run in-process, on a local Ray cluster
of 1 worker and of 2 workers.

    .venv/bin/python benchmarks/sweep_scaling.py             # measure, print the report
    .venv/bin/python benchmarks/sweep_scaling.py --write     # ... and write it into docs/sweeps.md

The grid is ``sweeps/scaling32.toml`` (32 Llama-3-8B simulations of similar cost). Each
backend runs it through :func:`tricut.sim.sweep.runner.run_grid` into a fresh DuckDB database
in a temporary folder, ``--repeat`` times (default 3; the backends take turns, so a burst of
load on the machine falls on all of them); the report gives medians. A backend's wall time is
the whole ``run_grid`` call: for Ray it includes starting and stopping the local cluster. The
cluster's start-up (``ray.init``) and shut-down (``ray.shutdown``) are also timed alone, with
no task, through the runner's own context manager, so

    per-task overhead = (Ray 1-worker wall - sum of the tasks' own wall_s in the database
                         - ray.init - ray.shutdown) / 32

is what Ray adds per task on top of the simulation itself (worker start-up and imports,
serialisation, scheduling, the driver's database writes). Every database is checked to hold
the same keys with the same metrics as the first in-process one.

``--write`` replaces the text between ``<!-- scaling:begin -->`` and ``<!-- scaling:end -->``
in docs/sweeps.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

from doc_sections import write_section     # benchmarks/ is on sys.path when a script runs

ROOT = Path(__file__).resolve().parent.parent
GRID = ROOT / "sweeps" / "scaling32.toml"
DOC = ROOT / "docs" / "sweeps.md"
BEGIN, END = "<!-- scaling:begin -->", "<!-- scaling:end -->"
SCRIPT = "benchmarks/sweep_scaling.py"
#: (label, workers): workers 0 = in-process, without Ray
BACKENDS = (("in-process (`--workers 0`)", 0), ("Ray, 1 worker", 1), ("Ray, 2 workers", 2))


def run_once(workers: int) -> dict:
    """One run of the grid into a fresh database: wall time, the tasks' own time, the metrics."""
    from tricut.sim.sweep.grid import load_grid
    from tricut.sim.sweep.runner import run_grid
    from tricut.sim.sweep.store import ResultStore
    grid = load_grid(GRID)
    with tempfile.TemporaryDirectory(prefix="tricut-scaling-") as tmp:
        with ResultStore(Path(tmp) / "points.duckdb") as store:
            t0 = time.perf_counter()
            summary = run_grid(grid, store, workers=workers, progress=False)
            wall = time.perf_counter() - t0
            rows = store.rows()
    if summary.failed or summary.done != len(grid.points):
        raise SystemExit(f"sweep_scaling: {summary.failed} of {len(grid.points)} points failed "
                         f"({summary.failures[:1]}); no figures")
    return {"wall": wall, "tasks": sum(r["wall_s"] for r in rows),
            "metrics": {r["key"]: r["metrics"] for r in rows}, "points": len(rows)}


def ray_startup(workers: int) -> tuple[float, float]:
    """(ray.init, ray.shutdown) seconds of the runner's local cluster, with no task run."""
    from tricut.sim.sweep.runner import _ray_cluster
    t0 = time.perf_counter()
    cm = _ray_cluster(workers, None)
    cm.__enter__()
    t1 = time.perf_counter()
    cm.__exit__(None, None, None)
    return t1 - t0, time.perf_counter() - t1


def compare(reference: dict, other: dict) -> float | None:
    """None when the two runs hold different keys or metric names; else the largest relative
    difference of any numeric metric (0.0: every metric equal)."""
    if reference.keys() != other.keys():
        return None
    worst = 0.0
    for key, ref in reference.items():
        got = other[key]
        if ref.keys() != got.keys():
            return None
        for name, a in ref.items():
            b = got[name]
            if a == b:
                continue
            if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
                worst = max(worst, abs(a - b) / max(abs(a), abs(b)))
            else:
                return None
    return worst


def _med(xs):
    return statistics.median(xs)


def measure(repeat: int) -> dict:
    runs = {w: [] for _, w in BACKENDS}
    for i in range(repeat):
        for label, w in BACKENDS:
            r = run_once(w)
            runs[w].append(r)
            print(f"run {i + 1}/{repeat}: {label}: {r['wall']:.2f} s (tasks' own time {r['tasks']:.2f} s)",
                  file=sys.stderr, flush=True)
    startup = {w: [ray_startup(w) for _ in range(repeat)] for w in (1, 2)}
    for w, xs in startup.items():
        print(f"ray.init / ray.shutdown, {w} CPU(s): " + ", ".join(f"{a:.2f} / {b:.2f} s" for a, b in xs),
              file=sys.stderr, flush=True)
    reference = runs[0][0]["metrics"]
    diffs = [compare(reference, r["metrics"]) for w in runs for r in runs[w]]
    return {"runs": runs, "startup": startup, "diffs": diffs, "points": runs[0][0]["points"]}


def report(m: dict, repeat: int, command: str, load: tuple[float, float]) -> str:
    import duckdb
    import ray
    runs, n = m["runs"], m["points"]
    wall = {w: _med([r["wall"] for r in rs]) for w, rs in runs.items()}
    tasks = {w: _med([r["tasks"] for r in rs]) for w, rs in runs.items()}
    init = {w: _med([a for a, _ in xs]) for w, xs in m["startup"].items()}
    down = {w: _med([b for _, b in xs]) for w, xs in m["startup"].items()}
    # wall - tasks' own time per run (so both come from the same run), then the median
    extra = {w: _med([r["wall"] - r["tasks"] for r in rs]) for w, rs in runs.items()}
    overhead = (extra[1] - init[1] - down[1]) / n
    serial_overhead = extra[0] / n
    fixed = [a + b for a, b in m["startup"][1]]
    noise = (max(fixed) - min(fixed)) / n
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    lines = [
        f"_Written by `{command}` on {dt.date.today().isoformat()}; do not edit by hand._",
        "",
        f"Machine: `nproc` = {os.cpu_count()} ({cpu}), Python {platform.python_version()}, "
        f"Ray {ray.__version__}, DuckDB {duckdb.__version__}; 1-minute load average "
        f"{load[0]:.2f} before the runs, {load[1]:.2f} after (another process's load shows here "
        "and slows every backend). Grid: `sweeps/scaling32.toml`, "
        f"{n} Llama-3-8B simulations (1,000 synthetic requests each). "
        + (f"Median of {repeat} runs per " if repeat > 1 else "One run per ") +
        "backend, each into a fresh database; the backends take turns.",
        "",
        "| backend | wall time (median) | min – max | tasks' own time (sum of `wall_s`) | serial / this |",
        "|---|---|---|---|---|",
    ]
    for label, w in BACKENDS:
        xs = [r["wall"] for r in runs[w]]
        lines.append(f"| {label} | {wall[w]:.2f} s | {min(xs):.2f} – {max(xs):.2f} s | "
                     f"{tasks[w]:.2f} s | {wall[0] / wall[w]:.2f} |")
    ok = [d for d in m["diffs"] if d is not None]
    if len(ok) != len(m["diffs"]):
        same = (f"**{len(m['diffs']) - len(ok)} of the {len(m['diffs'])} databases hold other keys or "
                "metric names than the first in-process run.**")
    elif max(ok) == 0.0:
        same = (f"All {len(m['diffs'])} databases hold the same {n} keys with identical metrics "
                "(every metric equal, exactly): the backend does not change a result.")
    else:
        same = (f"All {len(m['diffs'])} databases hold the same {n} keys; the largest relative "
                f"difference of a metric between them is {max(ok):.2e}.")
    lines += [
        "",
        f"* serial / 2 workers = **{wall[0] / wall[2]:.2f}**; 1 worker / 2 workers = "
        f"**{wall[1] / wall[2]:.2f}**.",
        f"* Ray start-up alone (`ray.init` of the local cluster, no task): {init[1]:.2f} s with 1 CPU, "
        f"{init[2]:.2f} s with 2; `ray.shutdown`: {down[1]:.2f} s / {down[2]:.2f} s. Both are inside "
        "the Ray wall times above. Without them the 2-worker run takes "
        f"{wall[2] - init[2] - down[2]:.2f} s, serial / that = "
        f"{wall[0] / (wall[2] - init[2] - down[2]):.2f}: the fixed start-up is what a short grid "
        "pays; a longer one amortises it.",
        f"* Per-task overhead of Ray = (1-worker wall − tasks' own time − `ray.init` − `ray.shutdown`) "
        f"/ {n} = ({extra[1]:.2f} − {init[1]:.2f} − {down[1]:.2f}) / {n} = "
        f"**{overhead * 1e3:.0f} ms** per point"
        + (f", ± {noise * 1e3:.0f} ms (the spread of the {repeat} start-up + shut-down timings / {n})"
           if repeat > 1 else " (one run: no spread to judge it by)")
        + (": not measurable above the start-up's own variation; Ray adds less than about "
           f"{max(noise, overhead) * 1e3:.0f} ms per point here" if repeat > 1 and abs(overhead) <= noise else
           " (worker start-up, serialisation, scheduling, the driver's database write)")
        + f". In-process, (wall − tasks' own time) / {n} = {serial_overhead * 1e3:.0f} ms per point (the "
        "database write). Wall − tasks' own time is taken per run, then the median; a task's own "
        "time includes the imports its first call makes in a fresh worker.",
        f"* {same}",
    ]
    if tasks[2] > 1.1 * tasks[0]:
        lines.append(f"* With 2 workers on {os.cpu_count()} cores the tasks' own time grows "
                     f"({tasks[2]:.2f} s against {tasks[0]:.2f} s in-process): the two tasks share the "
                     "cores with the driver, Ray's own processes and anything else running.")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3, metavar="K",
                    help="runs per backend; the report gives medians (default: %(default)s)")
    ap.add_argument("--write", action="store_true", help="write the report into docs/sweeps.md")
    args = ap.parse_args(argv)
    if args.repeat < 1:
        ap.error("--repeat must be at least 1")
    command = " ".join([".venv/bin/python", SCRIPT] + (argv if argv is not None else sys.argv[1:]))
    t0 = time.perf_counter()
    load0 = os.getloadavg()[0]
    m = measure(args.repeat)
    text = report(m, args.repeat, command, (load0, os.getloadavg()[0]))
    print(text)
    print(f"sweep_scaling: {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    if args.write:
        write_section(DOC, BEGIN, END, text, SCRIPT)
        print("wrote docs/sweeps.md (scaling)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
