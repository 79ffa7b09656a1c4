"""The decode tile's equivalence matrix on Verilator: whole decode steps of ``tiny-te`` through
the tile (``sim/harness/tile/cosim.py``, ``simulate(..., sim="verilator")``) against the
golden decode step with the bit-exact TE golden as the attention, for every K/V dtype (bf16,
fp8, NVFP4) x every CDU policy (none: ``DecodeTile(cdu=None)``; ``disabled``, ``static``,
``adaptive``: the CDU in the K/V path) x engines 1 and 4 x TE design (the shipped pipelined
engine at 32 lanes and the serial engine at 16), the
rounds chosen by the DSU cluster's RTL
(RV32IM cores running the scheduler firmware, slot arbiter; ``--scheduler model``: the golden
DSU model's schedule, computed up front).

    .venv/bin/python benchmarks/tile_equivalence.py            # run, print the table
    .venv/bin/python benchmarks/tile_equivalence.py --write    # ... and into docs/tile/figures.md
    .venv/bin/python benchmarks/tile_equivalence.py --dtypes fp8 --policies none,adaptive

Every run: 4 requests of different prompt lengths (5, 17, 9 and 30 tokens), 8 decode steps,
split-K at 24 tokens (the longer contexts run in two parts through the combine unit); the
multi-engine runs cap the DSU batch at 3 requests (``--max-batch``), so the DSU's batches
change from round to round. A run passes when its report is ``ok``: every attention output
bit-exact with the TE golden, every token equal, with the DSU cluster its rounds and outcomes
equal to the DSU model's and, with a CDU policy, every CDU decision and counter equal to the
CDU golden model's. The script exits 1 if any run does not
pass (``--corrupt ADDR,BIT`` flips one bit of every run's initial HBM image, to see it fail).
``--write`` replaces the text between ``<!-- tile:equivalence:begin -->`` and
``<!-- tile:equivalence:end -->`` in docs/tile/figures.md.
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
from tricut.models.cdu import POLICIES
from tricut.models.config import KV_DTYPES

ROOT = Path(__file__).resolve().parent.parent

DOC = ROOT / "docs" / "tile" / "figures.md"
BEGIN, END = "<!-- tile:equivalence:begin -->", "<!-- tile:equivalence:end -->"
SCRIPT = "benchmarks/tile_equivalence.py"
#: the tile's --policy values: none (the tile without the CDU), then the CDU's policies
TILE_POLICIES = ("none", *POLICIES)
ENGINES = (1, 4)
#: TE designs, ``engine@lanes``
DESIGNS = ("pipelined@32", "serial@16")


def _design(text):
    engine, _, lanes = text.partition("@")
    if engine not in ("pipelined", "serial") or not lanes.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not ENGINE@LANES (ENGINE pipelined or "
                                         f"serial)")
    return engine, int(lanes)


def setups(args):
    """The matrix: one ``Setup`` per (dtype, policy, engines), in table order."""
    from tricut.sim.harness.tile.setup import Setup
    lens = tuple(args.prompt_lens)
    base = Setup(lanes=16, model="tiny-te", requests=len(lens), prompt_lens=lens, steps=args.steps,
                 split_tokens=args.split_tokens, max_ctx=args.max_ctx, seed=args.seed,
                 long_context=args.long_context, dsu=args.scheduler == "dsu")
    out = []
    for engine, lanes in args.designs:
        for dt in args.dtypes:
            for pol in args.policies:
                for e in args.engines:
                    cap = args.max_batch if args.max_batch and e > 1 else None
                    out.append(dataclasses.replace(
                        base, kv_dtype=dt, engines=e, max_batch=cap, engine=engine,
                        lanes=lanes, policy=None if pol == "none" else pol))
    return out


@dataclasses.dataclass
class Row:
    """One run of the matrix."""
    setup: object
    ok: bool
    exact: int = 0              # tile attention outputs bit-exact with the golden's
    expected: int = 0           # the golden run's outputs
    tokens_equal: bool = False
    rounds: int = 0
    cycles: int = 0             # step cycles summed over the rounds
    cdu: dict = dataclasses.field(default_factory=dict)
    first_difference: str = ""
    build_s: float = 0.0
    run_s: float = 0.0


def run_one(s, opt, corrupt=None):
    """Build (timed apart) and simulate one setup on Verilator; a run that raises is a row
    that did not pass."""
    from tricut.sim.harness.tile.cosim import simulate
    from tricut.sim.harness.tile.golden import RunInputs
    from tricut.sim.harness.tile import verilator as V
    V.DEFAULT_OPT = opt                        # simulate() builds with DEFAULT_OPT
    t0 = time.perf_counter()
    row = Row(s, False)
    try:
        V.build(RunInputs(s).params(), s.policy is not None, opt)
        row.build_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        rep = simulate(s, corrupt=corrupt, sim="verilator")
    except Exception as e:                     # noqa: BLE001 (a failed run is a row)
        row.first_difference = f"{type(e).__name__}: {e}".splitlines()[0]
        row.run_s = time.perf_counter() - t0
        return row
    row.run_s = time.perf_counter() - t0
    t, g = rep.tile, rep.golden
    row.ok = rep.ok
    row.exact = sum(k in t.attn and (t.attn[k] == g.attn[k]).all() for k in g.attn)
    row.expected = len(g.attn)
    row.tokens_equal = t.tokens == g.tokens
    row.rounds, row.cycles = len(rep.rounds), sum(t.step_cycles.values())
    row.cdu = dict(t.cdu_counters)
    row.first_difference = rep.differences[0] if rep.differences else ""
    return row


def _config(s):
    cap = s.max_batch if s.max_batch else "all"
    return (f"{s.te_engine()}@{s.lanes}, {s.kv_dtype}, {s.policy or 'none (no CDU)'}, "
            f"{s.engines} eng, batch ≤ {cap}")


def table(rows):
    lines = ["| config (TE design@lanes, K/V, CDU policy, engines, DSU batch cap) | ok | "
             "attention outputs "
             "bit-exact | tokens equal | rounds | step cycles, summed | CDU reads: hits / "
             "allocated misses / bypass | build + run (s) |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        c = r.cdu
        cdu = (f"{c['accesses']}: {c['hits']} / {c['misses_alloc']} / {c['misses_bypass']}"
               if c else "—")
        lines.append(f"| {_config(r.setup)} | {'yes' if r.ok else '**NO**'} | "
                     f"{r.exact} / {r.expected} | {'yes' if r.tokens_equal else 'no'} | "
                     f"{r.rounds} | {r.cycles:,} | {cdu} | {r.build_s:.0f} + {r.run_s:.1f} |")
    bad = [r for r in rows if not r.ok]
    for r in bad:
        lines.append(f"\n{_config(r.setup)}: {r.first_difference}")
    return "\n".join(lines) + "\n"


def report(rows, args, cmd):
    n_ok = sum(r.ok for r in rows)
    s = rows[0].setup
    who = "the DSU cluster's RTL (1 core, scheduler firmware)" if s.dsu else "the DSU model"
    dsu = "DSU rounds and outcomes equal to the DSU model's, " if s.dsu else ""
    head = (f"Measured {date.today().isoformat()} by `{cmd}` ({platform.machine()}, Verilator, "
            f"C++ `{args.opt}`; for a configuration already built, the build column is the "
            f"set-up alone): "
            f"{s.model}, {s.requests} requests with prompts "
            f"{', '.join(map(str, s.prompt_lens))}, {s.steps} decode steps, "
            f"split-K at {s.split_tokens} tokens, max_ctx {s.max_ctx}, CDU {s.cdu_sets} sets × "
            f"{s.cdu_ways} ways, residency hint `auto` from {s.long_context} tokens; rounds "
            f"chosen by {who}. **{n_ok} of {len(rows)} runs pass** (every attention output "
            f"bit-exact with the TE golden, tokens equal, {dsu}CDU decisions and counters "
            f"equal to the CDU golden model's).")
    return head + "\n\n" + table(rows)


def _csv(kind, allowed=None):
    def parse(text):
        vals = [kind(x) for x in text.split(",") if x]
        if allowed is not None and not set(vals) <= set(allowed):
            raise argparse.ArgumentTypeError(f"each must be one of {', '.join(allowed)}")
        return vals
    return parse


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    ap.add_argument("--dtypes", type=_csv(str, KV_DTYPES), default=list(KV_DTYPES),
                    help="K/V dtypes (default: %(default)s)")
    ap.add_argument("--policies", type=_csv(str, TILE_POLICIES), default=list(TILE_POLICIES),
                    help="CDU policies, none = the tile without the CDU (default: %(default)s)")
    ap.add_argument("--designs", type=_csv(_design), default=[_design(d) for d in DESIGNS],
                    help="TE designs as ENGINE@LANES, e.g. pipelined@32,serial@16 (default: "
                         "the shipped pipelined engine at 32 lanes and the serial one at 16)")
    ap.add_argument("--engines", type=_csv(int), default=list(ENGINES),
                    help="TE engines per tile, each in 1..4 (default: %(default)s)")
    ap.add_argument("--prompt-lens", type=_csv(int), default=[5, 17, 9, 30],
                    help="one prompt length per request (default: %(default)s)")
    ap.add_argument("--steps", type=int, default=8, help="decode steps (default: %(default)s)")
    ap.add_argument("--split-tokens", type=int, default=24,
                    help="split-K part length, 0 = no split (default: %(default)s)")
    ap.add_argument("--max-ctx", type=int, default=48,
                    help="the tile's context limit (default: %(default)s)")
    ap.add_argument("--max-batch", type=int, default=3,
                    help="DSU batch cap of the multi-engine runs (the 1-engine runs batch "
                         "every request); 0 = no cap (default: %(default)s)")
    ap.add_argument("--long-context", type=int, default=16,
                    help="contexts of at least this many tokens get the residency hint "
                         "'auto', shorter ones 'stream' (default: %(default)s)")
    ap.add_argument("--seed", type=int, default=3, help="prompts and weights (default: "
                                                        "%(default)s)")
    ap.add_argument("--scheduler", choices=("dsu", "model"), default="dsu",
                    help="who chooses the rounds: dsu = the DSU cluster's RTL (firmware, "
                         "arbiter) in the loop; model = the golden DSU model's schedule "
                         "(default: %(default)s)")
    ap.add_argument("--opt", default="-O0",
                    help="C++ optimisation of the Verilator builds, e.g. --opt=-O2 (default: "
                         "%(default)s: the runs are short, -O0 compiles fastest)")
    ap.add_argument("--corrupt", type=_csv(int), default=None, metavar="ADDR,BIT",
                    help="flip bit BIT of HBM word ADDR in every run's initial image (the "
                         "golden keeps it): the runs must then fail")
    ap.add_argument("--write", action="store_true", help="write the table into docs/tile/figures.md")
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
    from tricut.sim.harness.tile.setup import SetupError, check_setup
    todo = setups(args)
    try:
        for s in todo:
            check_setup(s)
    except SetupError as e:
        raise SystemExit(f"{SCRIPT}: {e}")
    rows = []
    for s in todo:
        r = run_one(s, args.opt, None if args.corrupt is None else tuple(args.corrupt))
        rows.append(r)
        print(f"{_config(s)}: {'ok' if r.ok else 'DIFFERS: ' + r.first_difference} "
              f"({r.build_s:.0f} + {r.run_s:.1f} s)", file=sys.stderr, flush=True)
    text = report(rows, args, _command(argv))
    print(text)
    if args.write:
        write_section(DOC, BEGIN, END, text, SCRIPT)
    return 0 if all(r.ok for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
