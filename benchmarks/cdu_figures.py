"""CDU policy figures over the issue's whole grid: Llama-3-8B and -70B x 4K/32K/128K context x
batch 1/16/64, every pattern x policy, 50 MB of L2, 6 decode steps, every layer -- hit rate,
reuse hit rate, accuracy, coverage, HBM read bytes vs ``disabled``.

    .venv/bin/python benchmarks/cdu_figures.py --out /tmp/cdu_grid.jsonl   # ~5 min, prints the table
    .venv/bin/python benchmarks/cdu_figures.py --md /tmp/cdu_grid.jsonl    # the table again
    .venv/bin/python benchmarks/cdu_figures.py --extras                    # L2 size, steady state, hints

``--engine fast`` (the default) replays with ``sim/fast/cdu_twin.py``, the policy model's exact
compiled twin (same counters and transaction checksum as ``models/cdu.py`` on
``tests/test_cdu_fast.py``); ``--engine golden`` runs ``models/cdu.py`` itself (hours for the
128K x 64 points).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from tricut.models.cdu import PATTERNS, POLICIES
from tricut.sim.fast.cdu_replay import replay

GRID = [(m, c, b) for m in ("llama-3-8b", "llama-3-70b") for c in (4096, 32768, 131072)
        for b in (1, 16, 64)]
KEYS = ("model", "pattern", "policy", "l2_mb", "accesses", "hits", "hits_reuse", "misses",
        "prefetch_issued", "prefetch_useful", "prefetch_late", "prefetch_useless",
        "hbm_read_bytes", "hbm_write_bytes", "hit_rate", "reuse_hit_rate", "accuracy",
        "coverage", "frames", "layers_simulated")


def run(cases, steps=6, seed=0, out=None, engine="fast", l2_mb=50):
    rows = []
    for model, ctx, batch in cases:
        for pat in PATTERNS:
            base = None
            for pol in POLICIES:
                t0 = time.time()
                c = replay(model, pat, pol, l2_mb, steps=steps, batch=batch, context=ctx,
                           seed=seed, engine=engine)
                if pol == "disabled":
                    base = c["hbm_read_bytes"]
                row = {k: c[k] for k in KEYS}
                row.update(context=ctx, batch=batch, steps=steps,
                           seconds=round(time.time() - t0, 1),
                           hbm_read_vs_disabled=c["hbm_read_bytes"] / base if base else None)
                rows.append(row)
                if out:
                    with open(out, "a") as f:
                        f.write(json.dumps(row) + "\n")
                print(f"{model} {ctx // 1024}K x{batch} {pat:6} {pol:8} "
                      f"hit {row['hit_rate']:.1%} acc {row['accuracy']:.1%} "
                      f"HBM/dis {row['hbm_read_vs_disabled']:.2f} {row['seconds']}s",
                      file=sys.stderr, flush=True)
    return rows


def markdown(rows):
    """One line per (model, context, batch, pattern): ``disabled``'s HBM reads, then per policy
    hit rate / reuse hit rate / accuracy / coverage / HBM reads ÷ disabled."""
    head = ("| model | context × batch | pattern | HBM GB (disabled) | static: hit / reuse / acc / cov "
            "/ HBM÷dis | adaptive: hit / reuse / acc / cov / HBM÷dis |")
    lines = [head, "|---|---|---|---|---|---|"]
    groups = {}
    for r in rows:
        groups.setdefault((r["model"], r["context"], r["batch"], r["pattern"]), {})[r["policy"]] = r

    def cell(r):
        return (f"{r['hit_rate']:.1%} / {r['reuse_hit_rate']:.1%} / {r['accuracy']:.1%} / "
                f"{r['coverage']:.1%} / {r['hbm_read_vs_disabled']:.2f}")
    for (model, ctx, batch, pat), by in groups.items():
        if not all(p in by for p in POLICIES):
            continue
        lines.append(f"| {model.replace('llama-3-', '')} | {ctx // 1024}K × {batch} | {pat} | "
                     f"{by['disabled']['hbm_read_bytes'] / 1e9:.1f} | {cell(by['static'])} | "
                     f"{cell(by['adaptive'])} |")
    return "\n".join(lines)


def _diff(end, start):
    """Counters of the steps between two runs of the same replay (steady state)."""
    d = {k: end[k] - start[k] for k in ("accesses", "hits", "hits_reuse", "prefetch_issued",
                                         "prefetch_useful", "hbm_read_bytes")}
    d["hit_rate"] = d["hits"] / d["accesses"]
    d["reuse_hit_rate"] = d["hits_reuse"] / d["accesses"]
    d["accuracy"] = d["prefetch_useful"] / d["prefetch_issued"] if d["prefetch_issued"] else 0.0
    return d


def extras(engine="fast"):
    """The other tables of docs/cdu.md: L2 size, steady state, DSU hints."""
    out = ["### L2 size (Llama-3-8B, 4K × 1, 6 steps)", "",
           "| L2 MB | pattern | static: hit / reuse / HBM÷dis | adaptive: hit / reuse / HBM÷dis |",
           "|---|---|---|---|"]
    for l2 in (50, 256, 1024):
        for pat in PATTERNS:
            c = {pol: replay("llama-3-8b", pat, pol, l2, steps=6, context=4096, engine=engine)
                 for pol in POLICIES}
            base = c["disabled"]["hbm_read_bytes"]
            cells = [f"{c[p]['hit_rate']:.1%} / {c[p]['reuse_hit_rate']:.1%} / "
                     f"{c[p]['hbm_read_bytes'] / base:.2f}" for p in ("static", "adaptive")]
            out.append(f"| {l2} | {pat} | {cells[0]} | {cells[1]} |")
    out += ["", "### Steady state (Llama-3-8B, 50 MB: steps 3–12 of 12, reread burst in steps 6–7)",
            "", "| context × batch | pattern | static: hit / acc / HBM GB | adaptive: hit / acc / "
            "HBM GB | disabled HBM GB |", "|---|---|---|---|---|"]
    args = dict(burst_start=6, burst_len=2)
    for ctx, batch in ((4096, 1), (4096, 16), (32768, 1)):
        for pat in PATTERNS:
            d = {}
            for pol in POLICIES:
                kw = dict(context=ctx, batch=batch, engine=engine, pattern_args=args)
                d[pol] = _diff(replay("llama-3-8b", pat, pol, 50, steps=12, **kw),
                               replay("llama-3-8b", pat, pol, 50, steps=2, **kw))
            cells = [f"{d[p]['hit_rate']:.1%} / {d[p]['accuracy']:.1%} / {d[p]['hbm_read_bytes'] / 1e9:.2f}"
                     for p in ("static", "adaptive")]
            out.append(f"| {ctx // 1024}K × {batch} | {pat} | {cells[0]} | {cells[1]} | "
                       f"{d['disabled']['hbm_read_bytes'] / 1e9:.2f} |")
    out += ["", "### DSU hints (Llama-3-8B, 50 MB, 6 steps, 12 requests of 1K and 4 of 32K tokens)",
            "", "| pattern | policy | hints | hit rate | reuse hit | HBM read GB |",
            "|---|---|---|---|---|---|"]
    ctxs = [1024] * 12 + [32768] * 4
    for pat in ("full", "window", "topk"):
        for pol in ("static", "adaptive"):
            for hints in ("auto", "dsu"):
                c = replay("llama-3-8b", pat, pol, 50, steps=6, contexts=ctxs, hints=hints,
                           engine=engine)
                out.append(f"| {pat} | {pol} | {hints} | {c['hit_rate']:.1%} | "
                           f"{c['reuse_hit_rate']:.1%} | {c['hbm_read_bytes'] / 1e9:.2f} |")
    return "\n".join(out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=6, help="decode steps (docs/cdu.md: 6)")
    ap.add_argument("--out", help="append each row to this JSONL file as it finishes")
    ap.add_argument("--md", metavar="JSONL", help="print the Markdown table of a JSONL file")
    ap.add_argument("--engine", choices=("golden", "fast"), default="fast",
                    help="fast: the exact numba twin of the policy model (default); "
                         "golden: models/cdu.py itself")
    ap.add_argument("--only", nargs="*", default=None, metavar="MODEL:CTX:BATCH",
                    help="run only these grid points, e.g. llama-3-70b:4096:64")
    ap.add_argument("--extras", action="store_true",
                    help="print the L2-size, steady-state and DSU-hint tables instead of the grid")
    a = ap.parse_args(argv)
    if a.extras:
        print(extras(a.engine))
        return 0
    if a.md:
        rows = [json.loads(x) for x in open(a.md) if x.strip()]
        print(markdown(rows))
        return 0
    cases = GRID
    if a.only is not None:
        cases = [(m, int(c), int(b)) for m, c, b in (x.split(":") for x in a.only)]
    rows = run(cases, steps=a.steps, out=a.out, engine=a.engine)
    print(markdown(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
