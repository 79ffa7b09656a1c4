"""How closely the system model's CDU reduction (sim/fast/cdu_reduction.py) follows the block-level
policy model, at the sizes the system model runs: random mixed batches (streamed and cached
requests, 1-64 of them, 16-30000 tokens), every layer, steady state (steps 3-4 of 5), with
the exact compiled twin of models/cdu.py. Prints, per configuration, the worst and median
absolute difference in hit rate and in HBM block reads per demand read.

    .venv/bin/python benchmarks/cdu_reduction.py [--batches 12]
"""

from __future__ import annotations

import argparse
import random
import statistics

from tricut.models.config import load_gpu, load_model
from tricut.sim.fast.cdu_reduction import against_block_model
from tricut.sim.fast.timing import StepModel

CONFIGS = [("llama-3-8b", 1, "bf16"), ("llama-3-8b", 1, "fp8"), ("llama-3-70b", 8, "bf16"),
           ("llama-3-70b", 4, "fp8")]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", type=int, default=12, help="random batches per configuration")
    args = ap.parse_args(argv)
    print("| model | TP | KV | policy | sets × ways | distance | hit rate: max / median abs. diff "
          "| HBM reads: max / median abs. diff | mean hit rate | mean HBM reads |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for model, tp, kv in CONFIGS:
        for policy in ("static", "adaptive"):
            sm = StepModel(load_model(model), load_gpu("h100-sxm5"), kv, tp, frozenset({"cdu"}), policy)
            red = sm.cdu
            rng = random.Random(f"{model}{tp}{kv}")
            rows = []
            for _ in range(args.batches):
                n = rng.choice([1, 2, 4, 8, 16, 32, 64])
                frac = rng.random()
                ctxs = [rng.randint(4096, 30000) if rng.random() < frac else rng.randint(16, 4000)
                        for _ in range(n)]
                rows.append(against_block_model(ctxs, red))
            dh = [abs(r[1] - r[0]) for r in rows]
            db = [abs(r[3] - r[2]) for r in rows]
            print(f"| {model} | {tp} | {kv} | {policy} | {red.sets} × {red.ways} | {red.distance} "
                  f"| {max(dh):.4f} / {statistics.median(dh):.4f} | {max(db):.4f} / {statistics.median(db):.4f} "
                  f"| {statistics.mean(r[0] for r in rows):.3f} | {statistics.mean(r[2] for r in rows):.4f} |",
                  flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
