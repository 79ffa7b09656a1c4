"""Speed of the fast system model: the full Mooncake conversation trace (12,031 requests) for
Llama-3-70B on 8xH100 (TP8), baseline and all three cuts, under one software stack and
prefill mode (default: the default stack, colocated prefill). Prints wall time and simulated
steps per second per configuration (median of --repeats runs) as a Markdown table.

    .venv/bin/python benchmarks/full_trace.py [--trace PATH] [--repeats 3] [--stack S] [--prefill M]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from tricut.models.config import load_gpu, load_model
from tricut.sim.fast.setup import ServingSetup
from tricut.sim.fast.stacks import DEFAULT_STACK, PREFILL_MODES, get_stack, stack_names
from tricut.sim.fast.workload import read_trace

DEFAULT_TRACE = Path(__file__).resolve().parents[2] / "shared" / "traces" / "mooncake" / "conversation_trace.jsonl"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--stack", choices=stack_names(), default=DEFAULT_STACK)
    ap.add_argument("--prefill", choices=PREFILL_MODES, default="colocated")
    args = ap.parse_args()
    reqs = read_trace(args.trace)
    setup = ServingSetup(load_model("llama-3-70b"), load_gpu("h100-sxm5"), "bf16", tp=8,
                         stack=get_stack(args.stack), prefill=args.prefill)
    print(f"{len(reqs)} requests from {args.trace.name}; llama-3-70b, h100-sxm5 x8 (TP8), bf16 KV; "
          f"stack {args.stack}, prefill {args.prefill}\n")
    print("| config | wall s (median) | steps | simulated steps/s | tokens/s (simulated) | TPOT p99 ms |")
    print("|---|---|---|---|---|---|")
    for label, cuts in (("baseline", ()), ("te+cdu+dsu", ("te", "cdu", "dsu"))):
        walls, result = [], None
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            result = setup.run(reqs, cuts)
            walls.append(time.perf_counter() - t0)
        wall = statistics.median(walls)
        s = result.summary
        print(f"| {label} | {wall:.1f} | {result.steps:,} | {result.steps / wall:,.0f} | "
              f"{s['tokens_per_s']:,.0f} | {s['tpot_p99_s'] * 1e3:.2f} |")


if __name__ == "__main__":
    main()
