"""CDU policy figures over the issue's whole grid: Llama-3-8B and -70B x 4K/32K/128K context x
batch 1/16/64, every pattern x policy, 50 MB of L2 -- hit rate, reuse hit rate, accuracy,
coverage, late prefetches, HBM read bytes vs ``disabled``.

    .venv/bin/python benchmarks/cdu_figures.py --cases missing --out /tmp/cdu_grid.jsonl
    .venv/bin/python benchmarks/cdu_figures.py --md /tmp/cdu_grid.jsonl     # Markdown table

Every layer is simulated by default. ``--sample`` runs the configurations not in
``docs/cdu.md`` with **layer sampling** (``replay(layers=N)``: N of the model's layers,
frames scaled by N / num_layers). Measured, it does NOT approximate the full replay: for
Llama-3-70B 4K x 64, 3 steps, full/static gives 99.9 % hits with all 80 layers (800 frames)
but 3.9 % with 10 layers (96 frames); at 4K x 16, 10 and 20 layers give 5.1 % and 5.3 %
where the 6-step all-layer table has 99.0 % (fewer sets: the keep class and the prefetch
stream collide). So sampled rows are
printed with their ``layers`` and must not be read as the grid's figures.

The policy model is the golden (``models/cdu.py``); its tag store's victim search and LRU
update were made ~1.6x faster without changing any decision (same transactions on the
existing tests and on a before/after comparison), not enough for 128K x 64 at all layers.
``--engine fast`` (the default) replays with ``sim/cdu_fast.py``, the golden's exact numba
twin (same counters and transaction checksum on ``tests/test_cdu_fast.py``); ``--engine
golden`` runs the golden itself.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from tricut.sim.cdu_replay import FIGURE_CASES, figures_markdown, replay

PATTERNS = ("full", "window", "topk", "reread")
POLICIES = ("disabled", "static", "adaptive")
#: the grid (model, context, batch) at 50 MB; `None` layers = all layers
GRID = [(m, c, b) for m in ("llama-3-8b", "llama-3-70b") for c in (4096, 32768, 131072)
        for b in (1, 16, 64)]
DONE = {(m, c, b) for m, c, b, l2 in FIGURE_CASES if l2 == 50}
#: cheapest first (blocks read per step x sampled layers)
MISSING = sorted((g for g in GRID if g not in DONE),
                 key=lambda g: g[1] * g[2] * (4 if g[0] == "llama-3-8b" else 10))
#: sampled layers with --sample (frames = 100 in both)
SAMPLE = {"llama-3-8b": 4, "llama-3-70b": 10}


def run(cases, steps=6, seed=0, out=None, sample=False, engine="fast"):
    rows = []
    for model, ctx, batch in cases:
        layers = SAMPLE[model] if sample and (model, ctx, batch) not in DONE else None
        for pat in PATTERNS:
            base = None
            for pol in POLICIES:
                t0 = time.time()
                c = replay(model, pat, pol, 50, steps=steps, batch=batch, context=ctx,
                           seed=seed, layers=layers, engine=engine)
                if pol == "disabled":
                    base = c["hbm_read_bytes"]
                row = {k: c[k] for k in (
                    "model", "pattern", "policy", "l2_mb", "accesses", "hits", "hits_reuse",
                    "misses", "prefetch_issued", "prefetch_useful", "prefetch_late",
                    "prefetch_useless", "hbm_read_bytes", "hbm_write_bytes", "hit_rate",
                    "reuse_hit_rate", "accuracy", "coverage", "frames", "layers_simulated")}
                row.update(context=ctx, batch=batch, steps=steps,
                           seconds=round(time.time() - t0, 1),
                           hbm_read_vs_disabled=c["hbm_read_bytes"] / base if base else None)
                rows.append(row)
                if out:
                    with open(out, "a") as f:
                        f.write(json.dumps(row) + "\n")
                print(f"{model} {ctx // 1024}K x{batch} {pat:6} {pol:8} "
                      f"hit {row['hit_rate']:.1%} acc {row['accuracy']:.1%} "
                      f"HBM/dis {row['hbm_read_vs_disabled']:.2f} "
                      f"layers {row['layers_simulated']} {row['seconds']}s",
                      file=sys.stderr, flush=True)
    return rows


def markdown(rows):
    """The docs table, with a column for the simulated layers."""
    table = figures_markdown(rows).splitlines()
    table[0] += " layers |"
    table[1] += "---|"
    return "\n".join([table[0], table[1]] + [
        line + f" {r['layers_simulated']} |" for line, r in zip(table[2:], rows)])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", choices=("missing", "all"), default="missing",
                    help="missing: the six grid points not in docs/cdu.md; all: the whole grid")
    ap.add_argument("--steps", type=int, default=6, help="decode steps (docs/cdu.md: 6)")
    ap.add_argument("--out", help="append each row to this JSONL file as it finishes")
    ap.add_argument("--md", metavar="JSONL", help="print the Markdown table of a JSONL file")
    ap.add_argument("--sample", action="store_true",
                    help="layer sampling for the missing configurations (NOT faithful, see above)")
    ap.add_argument("--engine", choices=("golden", "fast"), default="fast",
                    help="fast: the exact numba twin of the policy model (default); "
                         "golden: models/cdu.py itself")
    ap.add_argument("--only", nargs="*", default=None, metavar="MODEL:CTX:BATCH",
                    help="run only these grid points, e.g. llama-3-70b:4096:64")
    a = ap.parse_args(argv)
    if a.md:
        rows = [json.loads(x) for x in open(a.md) if x.strip()]
        print(markdown(rows))
        return 0
    cases = MISSING if a.cases == "missing" else GRID
    if a.only is not None:
        want = [tuple(x.split(":")) for x in a.only]
        cases = [(m, int(c), int(b)) for m, c, b in want]
    rows = run(cases, steps=a.steps, out=a.out, sample=a.sample, engine=a.engine)
    print(markdown(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
