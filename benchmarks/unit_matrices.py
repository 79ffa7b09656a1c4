"""Run the units' long equivalence matrices in full (``sim/harness/unit_matrices.py``): the
two-array and serial TE engines against the TE golden on the Amaranth simulator, the DSU
firmware on the RTL cluster (Verilator) against the DSU golden, the fast model's DSU round
cycles against the RTL. ``make test`` runs each matrix's small cases (``in tests``); this
script runs every case and prints one row per case: pass or the first line of its failure,
and the wall time.

    .venv/bin/python benchmarks/unit_matrices.py                   # every case, 2 jobs
    .venv/bin/python benchmarks/unit_matrices.py --only dsu_firmware,dsu_sessions
    .venv/bin/python benchmarks/unit_matrices.py --not-in-tests    # what make test skips
    .venv/bin/python benchmarks/unit_matrices.py --write           # ... into docs/unit-matrices.md

Exits 1 when a case fails. ``--write`` (with every matrix, every case) replaces the text
between ``<!-- unit-matrices:begin -->`` and ``<!-- unit-matrices:end -->`` in
docs/unit-matrices.md. About 8 minutes with 2 jobs on this machine (builds included).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from datetime import date
from pathlib import Path

for _threads in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_threads, "1")

from doc_sections import write_section     # noqa: E402  (benchmarks/ is on sys.path)
from tricut.sim.harness.unit_matrices import MATRICES  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "unit-matrices.md"
BEGIN, END = "<!-- unit-matrices:begin -->", "<!-- unit-matrices:end -->"
SCRIPT = "benchmarks/unit_matrices.py"


def _run(name, case):
    t0 = time.perf_counter()
    try:
        MATRICES[name].check(*case)
        outcome = "pass"
    except AssertionError as e:
        outcome = "FAIL: " + (str(e).splitlines() or ["assertion"])[0][:120]
    return outcome, time.perf_counter() - t0


def _names(text):
    names = [n for n in text.split(",") if n]
    bad = [n for n in names if n not in MATRICES]
    if bad or not names:
        raise argparse.ArgumentTypeError(f"unknown matrix {', '.join(bad) or repr(text)}; "
                                         f"choose from {', '.join(MATRICES)}")
    return names


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog=SCRIPT, description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", type=_names, default=list(MATRICES), metavar="M1,M2",
                    help=f"matrices to run (default: all: {', '.join(MATRICES)})")
    ap.add_argument("--not-in-tests", action="store_true",
                    help="only the cases make test does not run")
    ap.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    ap.add_argument("--write", action="store_true",
                    help="write the table into docs/unit-matrices.md (every matrix and case)")
    args = ap.parse_args(argv)
    if args.jobs < 1:
        ap.error("--jobs must be at least 1")
    if args.write and (args.not_in_tests or args.only != list(MATRICES)):
        ap.error("--write needs every matrix and every case (no --only, no --not-in-tests)")
    work = [(n, c) for n in args.only for c in MATRICES[n].cases
            if not (args.not_in_tests and c in MATRICES[n].in_tests)]
    t0 = time.perf_counter()
    with ProcessPoolExecutor(args.jobs) as pool:
        futures = [pool.submit(_run, n, c) for n, c in work]
        results = []
        for (n, c), f in zip(work, futures):
            outcome, secs = f.result()
            results.append((n, c, outcome, secs))
            print(f"{n:28s} {MATRICES[n].case_id(c):34s} {outcome:8s} {secs:6.1f} s",
                  flush=True)
    wall = time.perf_counter() - t0
    failed = [r for r in results if r[2] != "pass"]
    lines = [f"Measured {date.today().isoformat()} with `{SCRIPT} --write` ({args.jobs} jobs, "
             f"{platform.machine()}, Python {platform.python_version()}): {len(results)} "
             f"cases, {len(failed)} failed, {sum(r[3] for r in results) / 60:.1f} min of simulation "
             f"in all, {wall / 60:.1f} min wall.", "",
             "| matrix | case | in `make test` | result | s |", "|---|---|---|---|---|"]
    for n, c, outcome, secs in results:
        lines.append(f"| `{n}` | `{MATRICES[n].case_id(c)}` | "
                     f"{'yes' if c in MATRICES[n].in_tests else 'no'} | {outcome} | "
                     f"{secs:.1f} |")
    print(f"\n{len(results)} cases, {len(failed)} failed, {wall:.0f} s wall")
    if args.write:
        write_section(DOC, BEGIN, END, "\n".join(lines) + "\n", SCRIPT)
        print(f"wrote {DOC.relative_to(ROOT)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
