"""What the garbage collector's thresholds (``sim/collector.py``) do to the conversion of the
decode tile to Verilog: the co-simulation top of ``ADAPTIVE`` (CDU, fp8, 4 engines; the
largest tile the test suite builds) converted with Amaranth's ``verilog.convert`` in a fresh
process per run, at Python's default thresholds and at tricut's, the two alternating.

    .venv/bin/python benchmarks/collector.py                 # measure, print the report
    .venv/bin/python benchmarks/collector.py --write         # ... and into docs/toolchain.md
    .venv/bin/python benchmarks/collector.py --repeats 5

Per setting: the median wall time of the conversion, the peak resident memory of its process
(``ru_maxrss``) and the collector's passes per generation. ``--write`` replaces the text
between ``<!-- toolchain:collector:begin -->`` and ``<!-- toolchain:collector:end -->`` in
docs/toolchain.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import statistics
import subprocess
import sys
from pathlib import Path

from doc_sections import publish     # benchmarks/ is on sys.path when a script runs

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "toolchain.md"
BEGIN, END = "<!-- toolchain:collector:begin -->", "<!-- toolchain:collector:end -->"
SCRIPT = "benchmarks/collector.py"
SETTINGS = ("default", "tricut")


def _child(setting: str) -> None:
    """One conversion in this process; prints its figures as JSON."""
    import gc
    import hashlib
    import resource
    import time
    import warnings

    from tricut.sim import collector
    if setting == "tricut":
        collector.tune()
    thresholds = gc.get_threshold()
    from amaranth.back import verilog

    from tricut.sim.harness.tile.cases import ADAPTIVE
    from tricut.sim.harness.tile.golden import RunInputs
    from tricut.sim.harness.tile.verilator_top import CosimVerilatorTop
    p = RunInputs(ADAPTIVE).params()
    before = [s["collections"] for s in gc.get_stats()]
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        text = verilog.convert(CosimVerilatorTop(p), name="tile", emit_src=False)
    seconds = time.perf_counter() - t0
    passes = [s["collections"] - b for s, b in zip(gc.get_stats(), before)]
    print(json.dumps({"setting": setting, "thresholds": thresholds, "s": seconds,
                      "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                      "passes": passes,
                      "verilog_sha256": hashlib.sha256(text.encode()).hexdigest()[:16]}))


def measure(repeats: int) -> dict:
    runs = {s: [] for s in SETTINGS}
    for i in range(repeats):
        for setting in (SETTINGS if i % 2 == 0 else SETTINGS[::-1]):
            done = subprocess.run([sys.executable, __file__, "--child", setting],
                                  capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise SystemExit(f"{SCRIPT}: the {setting} conversion failed:\n"
                                 f"{done.stderr[-2000:]}")
            runs[setting].append(json.loads(done.stdout.strip().splitlines()[-1]))
            print(f"  {setting}: {runs[setting][-1]['s']:.1f} s", file=sys.stderr)
    return runs


def report(runs: dict, repeats: int) -> str:
    med = {s: statistics.median(r["s"] for r in runs[s]) for s in SETTINGS}
    digests = {r["verilog_sha256"] for s in SETTINGS for r in runs[s]}
    lines = [f"Measured {dt.date.today().isoformat()} on {platform.node() or 'this machine'} "
             f"({platform.python_implementation()} {platform.python_version()}), "
             f"{repeats} runs per setting, alternating, one process each "
             f"(`.venv/bin/python {SCRIPT} --repeats {repeats}`):", "",
             "| collector | thresholds | conversion, median | peak memory | passes (gen 0, 1, 2) |",
             "|---|---|---:|---:|---|"]
    for s in SETTINGS:
        r = runs[s][0]
        lines.append(f"| {s} | {tuple(r['thresholds'])} | {med[s]:.1f} s | "
                     f"{max(x['rss_mb'] for x in runs[s]):.0f} MB | "
                     f"{', '.join(map(str, r['passes']))} |")
    lines += ["", f"tricut's thresholds take {med['tricut'] / med['default']:.2f} x the default's "
              f"time; " + (f"every run wrote the same Verilog (sha256 {digests.pop()}...)."
                          if len(digests) == 1 else
                          f"the runs wrote {len(digests)} different Verilog texts."), ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3,
                    help="runs per setting (default 3)")
    ap.add_argument("--write", action="store_true", help="write the report into docs/toolchain.md")
    ap.add_argument("--child", choices=SETTINGS, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        _child(args.child)
        return 0
    if args.repeats < 1:
        ap.error(f"--repeats must be at least 1, got {args.repeats}")
    text = report(measure(args.repeats), args.repeats)
    return publish(text, args.write, DOC, BEGIN, END, SCRIPT)


if __name__ == "__main__":
    sys.exit(main())
