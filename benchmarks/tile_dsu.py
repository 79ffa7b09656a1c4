"""Whole decode steps with the DSU cluster in the loop (``tricut tile run --dsu``): the RV32IM
cores run the scheduler firmware, the slot arbiter issues each round's descriptors into the step
sequencer, the tile's completions go back to it, failed steps are rolled back and run again.

    .venv/bin/python benchmarks/tile_dsu.py            # run, print the table
    .venv/bin/python benchmarks/tile_dsu.py --write    # ... and into docs/tile/figures.md

Every run: 4 requests of different prompt lengths, 8 decode steps each, at most 3 per round
(so the batches change), ``tiny-te``, on Verilator. Each is checked as ``simulate`` checks it:
the rounds, the failed steps and the outcomes equal to the DSU model's run with the same faults,
every attention output of a completed step bit-exact with the golden decode step on the same
rounds, the tokens equal to the golden's and to the fault-free run's; with a CDU policy, every
CDU decision equal to the CDU golden model's; the fast model's cycles per round against the
measured (without the CDU: ``predict_dsu_rounds`` per round, ``predict_dsu_timeout`` for a
timed-out round; with the CDU: ``models/tile_timing.predict_dsu_run`` from each round's
first-descriptor cycle, the CDU's fill retries included). The run
whose fault outlasts the retries must
report exactly one difference kind: that request's tokens (it failed, and says so). Step cycles
are from a round's first descriptor to its last completion. ``--write`` replaces the text
between ``<!-- tile:dsu:begin -->`` and ``<!-- tile:dsu:end -->`` in docs/tile/figures.md.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from doc_sections import write_section     # benchmarks/ is on sys.path when a script runs

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "tile" / "figures.md"
BEGIN, END = "<!-- tile:dsu:begin -->", "<!-- tile:dsu:end -->"
SCRIPT = "benchmarks/tile_dsu.py"
#: the runs: ``DSU_RUNS`` on ``DSU_RUNS_BASE`` (``sim/harness/tile/cases.py``)


def run_all(only=None):
    from tricut.sim.harness.tile.cases import DSU_RUNS, DSU_RUNS_BASE
    from tricut.sim.harness.tile.cosim import simulate
    from tricut.sim.harness.tile.setup import Setup
    rows = []
    for label, kw, exact in DSU_RUNS:
        if only is not None and label not in only:
            continue
        s = Setup(**DSU_RUNS_BASE, **kw)
        t0 = time.perf_counter()
        rep = simulate(s, sim="verilator", stop_early=False)
        wall = time.perf_counter() - t0
        if exact and not rep.ok:
            raise SystemExit(f"{SCRIPT}: {label}: {rep.differences[0]}")
        if not exact:
            bad = [d for d in rep.differences if not d.startswith("request 1: tokens")]
            if bad or rep.tile.outcomes[1].status != "failed":
                raise SystemExit(f"{SCRIPT}: {label}: expected request 1 to fail and nothing "
                                 f"else to differ: {rep.differences[:2]}")
        rows.append((label, s, rep, wall))
    return rows


def _predicted(s, t):
    """The tile timing model against the measured rounds: ``predict_dsu_rounds`` from
    each round's first-descriptor cycle (the firmware's time between rounds is an input);
    without the CDU each round alone (it leaves no state behind), a round the DSU timed out
    ``predict_dsu_timeout``."""
    from tricut.models.tile_timing import predict_dsu_timeout
    from tricut.sim.harness.tile.setup import predict_dsu_rounds, watchdog_limit
    firsts = [t.round_spans[ri][0] for ri in range(len(t.rounds))]
    if s.policy is not None:
        pred, _ = predict_dsu_rounds(s, t.rounds, firsts)
    else:
        limit = watchdog_limit(s)
        pred = [predict_dsu_timeout([d["slot"] for d in r], limit) if ri in t.aborted else
                predict_dsu_rounds(s, [r], [firsts[ri]])[0][0]
                for ri, r in enumerate(t.rounds)]
    got = [t.step_cycles[ri] for ri in range(len(t.rounds))]
    worst = max(abs(p - g) / g for p, g in zip(pred, got))
    return f"{(sum(pred) - sum(got)) / sum(got):+.2%}, {worst:.2%}"


def report(rows, cmd):
    from tricut.sim.harness.tile.setup import watchdog_limit
    lines = [f"Measured by `{cmd}` (Verilator, `tiny-te`, prompts 3, 1, 13 and 2 tokens, 8 "
             f"steps each, at most 3 requests per round):", "",
             "| run | K/V | engines | DSU rounds | failed steps (round:request) | rounds timed "
             "out (watchdog) | CDU HBM retries | outcomes | outputs compared | step cycles "
             "(first descriptor to last completion): min / median / max, sum | fast model: "
             "summed, worst round | wall |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for label, s, rep, wall in rows:
        t = rep.tile
        cyc = sorted(t.step_cycles.values())
        fails = ", ".join(f"{ri}:{r}" for ri, r in t.failed) or "—"
        ends = ", ".join(f"{o.status} {o.tokens}" for _, o in sorted(t.outcomes.items()))
        compared = len([k for k in rep.golden.attn if (k[0], k[2]) not in set(t.failed)])
        timed = (f"{', '.join(map(str, t.aborted))} (limit {watchdog_limit(s):,})"
                 if t.aborted else "—")
        retries = t.cdu_counters.get("hbm_retries", "—") if s.policy else "—"
        lines.append(f"| {label} | {s.kv_dtype} | {s.engines} | {len(t.rounds)} | {fails} | "
                     f"{timed} | {retries} | {ends} | {compared} | {cyc[0]:,} / {cyc[len(cyc) // 2]:,} / "
                     f"{cyc[-1]:,}, {sum(cyc):,} | {_predicted(s, t)} | {wall:.0f} s |")
    lines += ["", "Every exact run: the DSU rounds, failed steps and outcomes equal to the DSU "
              "model's, every compared output bit-exact, tokens equal to the golden's and to "
              "the fault-free run's; the run past the retries differs only in request 1's "
              "tokens (it ended `failed`, reason `error: retries exhausted`, and no other "
              "request was lost). A timed-out round ends at the DSU link's abort (its cycles: "
              "the watchdog limit, automatic with a lost read: twice the fast model's longest "
              "round + 1,024); the round after it runs from the reset tile exactly as "
              "predicted. The CDU run's retries equal the expected (each faulty fill re-sent "
              "as often as its block's worst fault fails; `hbm_failures` 0), with every CDU "
              "decision as the CDU golden model's."]
    return "\n".join(lines) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", action="store_true", help="write the table into docs/tile/figures.md")
    ap.add_argument("--only", action="append", metavar="LABEL",
                    help="run only the run with this label (repeatable)")
    args = ap.parse_args(argv)
    text = report(run_all(args.only), ".venv/bin/python benchmarks/tile_dsu.py")
    print(text)
    if args.write:
        write_section(DOC, BEGIN, END, text, SCRIPT)


if __name__ == "__main__":
    main()
