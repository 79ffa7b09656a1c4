"""The decode tile at a real layer shape: Llama-3-8B's attention (8 KV heads, G = 4, i.e. 32
query heads, head_dim 128) on model ``llama-3-8b-attn1`` (that attention, one layer, a small
MLP and vocabulary, random weights), 4 requests with contexts of 1K-4K tokens, 8 TE engines,
whole decode steps through the tile on Verilator (``sim/harness/tile/cosim.py``) against the
golden decode step with the bit-exact TE golden as the attention. (The tile's KV image is at
most 2^22 HBM words, ``rtl/tile/block_reader.py``: at this shape requests x layers x max_ctx
<= 32768, so 4 requests of up to 4K tokens on two layers, or 8 on one.)

    .venv/bin/python benchmarks/tile_real_layer.py            # run, print the tables
    .venv/bin/python benchmarks/tile_real_layer.py --write    # ... and into docs/tile/figures.md

A run passes when its report is ``ok`` (every attention output bit-exact, every token equal;
with a CDU policy every CDU decision and counter equal to the CDU golden model's); the script
exits 1 otherwise. It reports the cycles per step, the HBM bytes the memory model served, the
simulation rate (cycles/s, the build excluded) and where the wall time goes: the parent's
golden run (the one prefill of the run, the TE golden attention, the rest of the golden
decode step) and the
Verilator run (the parent's image, the simulator's start-up and ``$readmemh``, the bench's
set-up (the parent's prefill from its plan), the golden decode step between layers, the host traffic stepped by Python, and
``go`` to ``done`` in Verilator alone). ``--write`` replaces the text between
``<!-- tile:real-layer:begin -->`` and ``<!-- tile:real-layer:end -->`` in docs/tile/figures.md.

HBM bytes served are the HBM model's own counts (its ``resp`` and ``write`` transfers, beats
of the HBM word width): K/V reads (with the CDU: its fills and the streamer's bypass reads)
and each step's new token written. Without the CDU they must equal the count from the
jobs the step sequencer issued (each job's tokens read once, ``2*Dk`` words of K/V per token
and KV head; each step's new token, ``2*Dk`` words per (request, layer, KV head)), or the run
does not pass. The L2 data array's traffic is not counted.
"""

from __future__ import annotations

import argparse
import dataclasses
import platform
import sys
import time
from datetime import date
from pathlib import Path

from doc_sections import write_section     # benchmarks/ is on sys.path when a script runs
from tricut.sim.harness.call_timer import CallTimer

ROOT = Path(__file__).resolve().parent.parent

DOC = ROOT / "docs" / "tile" / "figures.md"
BEGIN, END = "<!-- tile:real-layer:begin -->", "<!-- tile:real-layer:end -->"
SCRIPT = "benchmarks/tile_real_layer.py"
MODEL = "llama-3-8b-attn1"


@dataclasses.dataclass
class Result:
    """One run: its report (``ok``), the Verilator run's ``RunInfo`` and ``Build``, and the
    parent's golden phases (s)."""
    setup: object
    report: object = None
    info: object = None
    build: object = None
    error: str = ""
    golden_s: float = 0.0            # golden_run, all of it
    golden_prefill_s: float = 0.0    # ... of which the prefill (and weights)
    golden_te_s: float = 0.0         # ... of which the TE golden attention
    compare_s: float = 0.0           # compare (+ the CDU reference)
    tile_s: float = 0.0              # the Verilator run, parent's wall time (build excluded)
    hbm_read_bytes: int = 0
    hbm_write_bytes: int = 0
    port_bytes: int = 0              # the HBM port's bytes per cycle (one beat a cycle)
    predicted: dict = dataclasses.field(default_factory=dict)

    @property
    def ok(self):
        return self.report is not None and self.report.ok


def hbm_bytes(s, cfg, rounds, data_bits):
    """(read, write) bytes of the HBM model: every job's tokens once (``2*Dk`` words each),
    every step's new token per (request, layer, KV head)."""
    from tricut.models.tile import split_parts
    words_tok = 2 * (cfg.head_dim // s.lanes)
    reads = writes = 0
    for descs in rounds:
        for d in descs:
            parts = split_parts(d.seq_len, s.split_tokens)
            assert parts >= 1
            reads += cfg.num_layers * cfg.num_kv_heads * d.seq_len * words_tok
            writes += cfg.num_layers * cfg.num_kv_heads * words_tok
    return reads * data_bits // 8, writes * data_bits // 8


def predicted_cycles(s, cfg, rounds):
    """The tile timing model's layer cycles (``models/tile_timing.py``, with or without
    the CDU: ``tricut.sim.harness.tile.setup.predict_layers``)."""
    from tricut.sim.harness.tile.setup import predict_layers
    return predict_layers(s)


def _params_and_bits(s, cfg):
    """The tile's parameters (``RunInputs.params`` needs only the setup and the model config:
    a ``RunInputs`` without its prefill) and the HBM model's word width (a K/V word,
    ``kv_data_bits``, in both tiles)."""
    from tricut.rtl.tile.attention_layouts import kv_data_bits
    from tricut.sim.harness.tile.golden import RunInputs
    r = RunInputs.__new__(RunInputs)
    r.s, r.cfg = s, cfg
    p = r.params()
    return p, kv_data_bits(s.lanes, s.kv_dtype)


def run_one(s, opt, corrupt=None, max_layer_cycles=50_000_000):
    """Golden run (phases timed), build, Verilator run, comparison: a :class:`Result`."""
    from tricut.sim.harness.tile import golden as G
    from tricut.sim.harness.tile import verilator as V
    from tricut.sim.harness.tile.compare import compare, compare_cdu
    from tricut.sim.harness.tile.cosim import Report
    from tricut.sim.harness.tile.setup import check_setup, schedule
    res = Result(s)
    cfg = check_setup(s)
    rounds = schedule(s)
    try:
        p, data_bits = _params_and_bits(s, cfg)
        b = V.build(p, s.policy is not None, opt)
        t0 = time.perf_counter()
        with CallTimer(G, "prefill") as tp, CallTimer(G, "te_golden_attention", inner=True) as tt:
            golden = G.golden_run(s)
        res.golden_s = time.perf_counter() - t0
        res.golden_te_s, res.golden_prefill_s = tt.s, tp.s
        t0 = time.perf_counter()
        tile, res.info, res.build = V.run(s, corrupt=corrupt, golden=golden, b=b,
                                          max_layer_cycles=max_layer_cycles)
        res.tile_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        diffs = compare(golden, tile) + compare_cdu(s, tile)
        res.compare_s = time.perf_counter() - t0
        res.report = Report(s, s.lens(), [[d.request for d in ds] for ds in rounds], golden,
                              tile, diffs)
    except Exception as e:                     # noqa: BLE001 (a failed run is a result)
        res.error = f"{type(e).__name__}: {e}".splitlines()[0]
        return res
    res.hbm_read_bytes, res.hbm_write_bytes = (n * data_bits // 8 for n in tile.hbm_beats)
    res.port_bytes = data_bits // 8
    res.predicted = predicted_cycles(s, cfg, rounds)
    if s.policy is None:
        jobs = hbm_bytes(s, cfg, rounds, data_bits)
        if jobs != (res.hbm_read_bytes, res.hbm_write_bytes):
            res.report.differences.append(
                f"HBM bytes served (read, written) {(res.hbm_read_bytes, res.hbm_write_bytes)}, "
                f"the jobs' count {jobs}")
    return res


def _ms(x):
    return f"{x:,.1f}"


def tables(results):
    """The figures: one row per run, then where the wall time went."""
    lines = ["| run | ok | outputs bit-exact | tokens equal | step cycles (go→done + host) | "
             "fast model | HBM read / written | HBM port use (go→done) | tile cycles/s "
             "(go→done) | whole simulator cycles/s |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        name = _name(r.setup)
        if r.report is None:
            lines.append(f"| {name} | **NO** | {r.error} | | | | | | | |")
            continue
        t, g, i = r.report.tile, r.report.golden, r.info
        steps = ", ".join(f"{t.step_cycles[k]:,}" for k in sorted(t.step_cycles))
        pred = "—"
        if r.predicted and not t.stopped:
            same = all(t.layer_cycles.get(k) == c for k, c in r.predicted.items())
            pred = "every layer's cycles equal" if same else "differs: " + ", ".join(
                f"{k}: {t.layer_cycles.get(k):,} vs {c:,}" for k, c in r.predicted.items()
                if t.layer_cycles.get(k) != c)
        exact = sum(k in t.attn and (t.attn[k] == g.attn[k]).all() for k in g.attn)
        lines.append(
            f"| {name} | {'yes' if r.ok else '**NO**'} | {exact} / {len(g.attn)} | "
            f"{'yes' if t.tokens == g.tokens else 'no'} | {steps} ({i.tile_cycles:,} + "
            f"{i.host_cycles:,}) | {pred} | "
            f"{r.hbm_read_bytes / 2**20:,.1f} MiB / {r.hbm_write_bytes / 2**10:,.1f} KiB | "
            f"{port_use(r):.3f} | {i.tile_cycles / max(i.tile_s, 1e-9):,.0f} | "
            f"{i.cycles / max(i.sim_s, 1e-9):,.0f} |")
    lines += ["", "Where the wall time went (s):", "",
              "| run | build: Verilog + C++ | golden run: prefill + TE golden + rest | "
              "Verilator run: parent (image, hex) | simulator start-up, `$readmemh`, "
              "exit | bench set-up (plan, weights) | golden decode step | host traffic (Python) | go→done "
              "(Verilator) | compare |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        if r.report is None:
            continue
        i, b = r.info, r.build
        built = f"{b.verilog_s:.0f} + {b.build_s:.0f}" + (" (an earlier build)" if b.cached
                                                           else "")
        rest = r.golden_s - r.golden_prefill_s - r.golden_te_s
        lines.append(
            f"| {_name(r.setup)} | {built} | {_ms(r.golden_prefill_s)} + "
            f"{_ms(r.golden_te_s)} + {_ms(rest)} | {_ms(i.prep_s)} | "
            f"{_ms(i.sim_s - i.bench_s)} | {_ms(i.setup_s)} | {_ms(i.golden_s)} | "
            f"{_ms(i.host_s)} | {_ms(i.tile_s)} | {_ms(r.compare_s)} |")
    return "\n".join(lines) + "\n"


def port_use(r):
    """HBM bytes served ÷ (go→done cycles × the port's bytes per cycle): 1.0 is a port busy
    every cycle of the layers (the new tokens' writes, made outside go→done by the host
    without the CDU, are counted too)."""
    cycles = r.info.tile_cycles
    return (r.hbm_read_bytes + r.hbm_write_bytes) / max(1, cycles * r.port_bytes)


def _name(s):
    pol = f"CDU {s.policy}" if s.policy else "no CDU"
    split = f", split-K {s.split_tokens}" if s.split_tokens else ""
    return (f"{pol}, {s.te_engine()} engine, {s.lanes} lanes, {s.kv_dtype}, "
            f"{s.engines} engines{split}")


def report(results, args, cmd):
    s = results[0].setup
    from tricut.models.config import load_model
    cfg = load_model(s.model)
    n_ok = sum(r.ok for r in results)
    total = sum(r.golden_s + r.tile_s + r.compare_s for r in results)
    head = (f"Measured {date.today().isoformat()} by `{cmd}` ({platform.machine()}, 2 shared "
            f"cores, Verilator, C++ `{args.opt}`): `{s.model}` ({cfg.num_layers} layer"
            f"{'s' * (cfg.num_layers != 1)}, "
            f"{cfg.num_heads} query heads over {cfg.num_kv_heads} KV heads, head_dim "
            f"{cfg.head_dim}), {s.requests} requests with prompts "
            f"{', '.join(map(str, s.prompt_lens))} tokens, {s.steps} decode steps, "
            f"max_ctx {s.max_ctx}, HBM latency {s.latency}, bursts of "
            f"{s.max_beats}, HBM port {results[0].port_bytes or '?'} B/cycle. **{n_ok} of {len(results)} runs pass** (every attention output "
            f"bit-exact with the TE golden, tokens equal). Wall time, builds excluded: "
            f"{total / 60:.1f} min.")
    note = ("HBM bytes are the HBM model's counts of the beats it served (reads: the K/V, with "
            "the CDU its fills and bypass reads; writes: each step's new token); without the "
            "CDU they equal the count from the jobs the sequencer issued (each job's "
            "tokens read once, `2*Dk` words per token and KV head). HBM port use: those bytes "
            "÷ (go→done cycles × the port's bytes per cycle, one word a cycle). The timing "
            "model's cycles are `models/tile_timing.py`'s (with and without the CDU).")
    return head + "\n\n" + tables(results) + "\n" + note + "\n"


def _csv(kind):
    return lambda text: [kind(x) for x in text.split(",") if x]


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    ap.add_argument("--model", default=MODEL, help="model config (default: %(default)s)")
    ap.add_argument("--prompt-lens", type=_csv(int), default=[1024, 2048, 3072, 4090],
                    help="one prompt length per request (default: %(default)s)")
    ap.add_argument("--steps", type=int, default=2, help="decode steps (default: %(default)s)")
    ap.add_argument("--engines", type=int, default=8, help="TE engines (default: %(default)s)")
    ap.add_argument("--kv-dtype", default="bf16", help="K/V dtype (default: %(default)s)")
    ap.add_argument("--policies", type=_csv(str), default=["none", "static"],
                    help="CDU policies; disabled = the CDU in the path, every block a "
                         "bypass; none = the tile without the CDU (default: %(default)s)")
    ap.add_argument("--lanes", type=int, default=32,
                    help="TE lanes (default: %(default)s)")
    ap.add_argument("--engine", default=None,
                    help="TE engine design, pipelined or serial (default: the shipped "
                         "pipelined one)")
    ap.add_argument("--split-tokens", type=int, default=0,
                    help="split-K part length, 0 = no split (default: %(default)s)")
    ap.add_argument("--max-ctx", type=int, default=4096,
                    help="the tile's context limit (default: %(default)s)")
    ap.add_argument("--max-layer-cycles", type=int, default=50_000_000,
                    help="hang limit per layer (default: %(default)s)")
    ap.add_argument("--seed", type=int, default=0, help="prompts, weights (default: %(default)s)")
    ap.add_argument("--opt", default="-O2",
                    help="C++ optimisation of the Verilator build, e.g. --opt=-O0 "
                         "(default: %(default)s)")
    ap.add_argument("--corrupt", type=_csv(int), default=None, metavar="ADDR,BIT",
                    help="flip bit BIT of HBM word ADDR of the initial image (the golden keeps "
                         "it): the run must then fail")
    ap.add_argument("--write", action="store_true", help="write the tables into docs/tile/figures.md")
    args = ap.parse_args(argv)
    if args.corrupt is not None and len(args.corrupt) != 2:
        ap.error("--corrupt takes ADDR,BIT")
    return args


def _command(argv):
    """The command line as run (``--write`` left out)."""
    rest = [a for a in (sys.argv[1:] if argv is None else argv) if a != "--write"]
    return " ".join([".venv/bin/python", SCRIPT] + rest)


def main(argv=None):
    args = parse_args(argv)
    from tricut.sim.harness.tile.setup import Setup, SetupError, check_setup
    lens = tuple(args.prompt_lens)
    todo = [Setup(model=args.model, requests=len(lens), prompt_lens=lens, steps=args.steps,
                  kv_dtype=args.kv_dtype, engines=args.engines, lanes=args.lanes,
                  engine=args.engine, split_tokens=args.split_tokens,
                  max_ctx=args.max_ctx, seed=args.seed,
                  policy=None if pol == "none" else pol) for pol in args.policies]
    try:
        for s in todo:
            check_setup(s)
    except SetupError as e:
        raise SystemExit(f"{SCRIPT}: {e}")
    results = []
    for s in todo:
        r = run_one(s, args.opt, None if args.corrupt is None else tuple(args.corrupt),
                    args.max_layer_cycles)
        results.append(r)
        print(f"{_name(s)}: {'ok' if r.ok else 'FAILS: ' + (r.error or r.report.differences[0])}"
              f" (golden {r.golden_s:.0f} s, Verilator run {r.tile_s:.0f} s)", file=sys.stderr,
              flush=True)
    text = report(results, args, _command(argv))
    print(text)
    if args.write:
        write_section(DOC, BEGIN, END, text, SCRIPT)
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
