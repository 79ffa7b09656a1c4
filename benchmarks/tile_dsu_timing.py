"""The cached tile's fast model with the DSU cluster in the loop
(``models/tile_timing.predict_dsu_run``) against the tile on Verilator: each round's
cycles, from its first descriptor to its last completion, predicted from the configuration,
the CDU golden model's decisions on the run's rounds and each round's first-descriptor cycle
(the DSU firmware's time between rounds is an input, not modelled).

    .venv/bin/python benchmarks/tile_dsu_timing.py              # the 3 policy runs
    .venv/bin/python benchmarks/tile_dsu_timing.py --steps 3    # shorter runs

The runs are ``benchmarks/tile_dsu.py``'s fault-free runs with a CDU policy (``CDU static``,
``CDU adaptive, split-K 12``, ``CDU disabled``), each checked as ``simulate`` checks it
(bit-exact, the CDU's decisions equal to its golden model's) first.
"""

from __future__ import annotations

import argparse

from tricut.sim.harness.tile.cases import DSU_RUNS, DSU_RUNS_BASE

SCRIPT = "benchmarks/tile_dsu_timing.py"
LABELS = ("CDU static", "CDU adaptive, split-K 12", "CDU disabled")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=DSU_RUNS_BASE["steps"],
                    help="decode steps per request")
    args = ap.parse_args(argv)
    from tricut.sim.harness.tile.cosim import simulate
    from tricut.sim.harness.tile.setup import Setup, predict_dsu_rounds
    tot_p = tot_m = 0
    for label, kw, _ in DSU_RUNS:
        if label not in LABELS:
            continue
        s = Setup(**dict(DSU_RUNS_BASE, steps=args.steps), **kw)
        rep = simulate(s, sim="verilator", stop_early=False)
        if not rep.ok:
            raise SystemExit(f"{SCRIPT}: {label}: {rep.differences[0]}")
        t = rep.tile
        n = len(t.rounds)
        pred, layers = predict_dsu_rounds(s, t.rounds,
                                                 [t.round_spans[ri][0] for ri in range(n)])
        got = [t.step_cycles[ri] for ri in range(n)]
        errs = [(p - g) / g for p, g in zip(pred, got)]
        tot_p, tot_m = tot_p + sum(pred), tot_m + sum(got)
        print(f"{label} ({s.kv_dtype}, {s.engines} engines): {n} rounds, measured "
              f"{sum(got):,}, predicted {sum(pred):,}: summed {(sum(pred) - sum(got)) / sum(got):+.2%}, "
              f"worst round {max(map(abs, errs)):.2%}, rounds exact {sum(p == g for p, g in zip(pred, got))}"
              f"/{n}, layers exact {sum(layers[k] == v for k, v in t.layer_cycles.items())}"
              f"/{len(t.layer_cycles)}")
        for ri, (p, g) in enumerate(zip(pred, got)):
            if p != g:
                print(f"  round {ri}: measured {g:,}, predicted {p:,}")
    print(f"all runs: summed {(tot_p - tot_m) / tot_m:+.2%} (targets: 5 % per round, 2 % summed)")


if __name__ == "__main__":
    main()
