"""The docs/results.md rows that involve the TE, re-measured with the TE before issue 12 (the
serial engine at 16 lanes) and after (the pipelined engine at 32 lanes, the fast model's
default): the step time, the TE grid's time (the grid of decode tiles, one per SM:
docs/system-model.md, "The TE term: a grid of tiles"), the HBM time and the GEMV time of each
row's first decode step with the ``te`` cut, and which one bounds the step.

    .venv/bin/python benchmarks/te_rows.py            # print the table
    .venv/bin/python benchmarks/te_rows.py --write    # ... into docs/results.md

The fast system model with its default assumptions and the ``vllm-v0`` stack without host
jitter (as benchmarks/claims.py), H100 SXM5; only the TE's engine and lanes differ.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from tricut.sim.fast.stacks import DEFAULT_STACK
from tricut.sim.fast.step_terms import first_step_terms
from tricut.sim.fast.timing import DEFAULT_TE_ENGINE, DEFAULT_TE_LANES

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "results.md"
CMD = ".venv/bin/python benchmarks/te_rows.py"
BEGIN, END = "<!-- results:te-rows:begin -->", "<!-- results:te-rows:end -->"

#: (row, model, tp, kv dtype, batch, context tokens)
ROWS = (
    ("Llama-3-8B step (claim 1)", "llama-3-8b", 1, "bf16", 1, 4096),
    ("fp8 first step (claim 7), bf16 KV", "llama-3-70b", 8, "bf16", 1, 32768),
    ("fp8 first step (claim 7), fp8 KV", "llama-3-70b", 8, "fp8", 1, 32768),
    ("Llama-3-70B 128K (claim 5), batch 8", "llama-3-70b", 8, "bf16", 8, 131072),
    ("Llama-3-70B 128K, batch 8, fp8 KV", "llama-3-70b", 8, "fp8", 8, 131072),
    ("Llama-3-8B 20 × 64K, NVFP4 KV", "llama-3-8b", 1, "nvfp4", 20, 65536),
)
ENGINES = (("serial", 16), (DEFAULT_TE_ENGINE, DEFAULT_TE_LANES))


def report() -> str:
    head = ("| row | TE | step | TE grid | HBM | GEMV | bound |\n"
            "|---|---|---|---|---|---|---|\n")
    lines = []
    for name, model, tp, dt, b, ctx in ROWS:
        for engine, lanes in ENGINES:
            r = first_step_terms(model, tp, dt, b, ctx, engine, lanes)
            lines.append(f"| {name} | {engine}, {lanes} lanes | {r['step_ms']:.2f} ms | "
                         f"{r['te_ms']:.2f} ms | {r['hbm_ms']:.2f} ms | {r['gemv_ms']:.2f} ms | "
                         f"**{r['bound']}** |")
    return (f"Measured by `{CMD}` (fast system model, H100 SXM5, `{DEFAULT_STACK}` stack without "
            "host jitter, the first decode step with the `te` cut; HBM = all bytes the step moves "
            "at the TE path's bandwidth efficiency):\n\n" + head + "\n".join(lines) + "\n")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--write", action="store_true",
                    help=f"replace the block between {BEGIN} and {END} in docs/results.md")
    args = ap.parse_args(argv)
    text = report()
    print(text)
    if args.write:
        doc = DOC.read_text()
        pat = re.compile(re.escape(BEGIN) + ".*?" + re.escape(END), re.S)
        if not pat.search(doc):
            print(f"te_rows.py: error: docs/results.md has no {BEGIN} ... {END} block",
                  file=sys.stderr)
            return 2
        DOC.write_text(pat.sub(lambda _: f"{BEGIN}\n{text}{END}", doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
