"""Speed of the fast system model under overload: N synthetic requests arriving far faster than
the GPU serves them (Llama-3-8B on one H100 SXM5, bf16 KV, all three cuts, the default stack;
1024-token prompts, 128 output tokens, Poisson arrivals at --rate requests/s, about 45x the
≈ 22 requests/s this configuration sustains), for each prefill mode asked. The DSU's intake then
holds thousands of requests: a per-request cost that grows with the queue shows as a wall time
per request that grows with N. Prints a Markdown table: wall time (the whole `simulate` path:
workload, input checks, the run, the metrics), wall time per request, simulated decode steps,
and the decode-slot wait (decode_queue, docs/metrics.md) that the overload builds.

    .venv/bin/python benchmarks/overload.py [--sizes 10000,30000,100000] [--prefill default,disaggregated]
                                            [--rate 1000] [--stack S]

The same run from the command line (one row):
    tricut simulate --model llama-3-8b --gpu h100-sxm5 --synthetic 100000 --rate 1000 [--prefill disaggregated]
"""

from __future__ import annotations

import argparse
import time

from tricut.models.config import load_gpu, load_model
from tricut.sim.fast.setup import ServingSetup
from tricut.sim.fast.stacks import DEFAULT_STACK, PREFILL_MODES, get_stack, stack_names
from tricut.sim.fast.timing import CUTS
from tricut.sim.fast.workload import synthetic


def _ints(text: str) -> list[int]:
    return [int(x.replace("_", "")) for x in text.split(",")]


def _modes(text: str) -> list[str]:
    modes = text.split(",")
    for m in modes:
        if m != "default" and m not in PREFILL_MODES:
            raise argparse.ArgumentTypeError(f"{m!r}: use default or one of {', '.join(PREFILL_MODES)}")
    return modes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=_ints, default=[10_000, 30_000, 100_000], help="request counts")
    ap.add_argument("--prefill", type=_modes, default=["default", "disaggregated"],
                    help="prefill modes; 'default' is the stack's own (vllm-v0: colocated)")
    ap.add_argument("--rate", type=float, default=1000.0, help="arrival rate, requests/s")
    ap.add_argument("--stack", choices=stack_names(), default=DEFAULT_STACK)
    args = ap.parse_args()
    model, gpu, stack = load_model("llama-3-8b"), load_gpu("h100-sxm5"), get_stack(args.stack)
    print(f"llama-3-8b, h100-sxm5, bf16 KV, cuts te+cdu+dsu, stack {args.stack}; synthetic requests "
          f"(1024 prompt + 128 output tokens) at {args.rate:g} requests/s\n")
    print("| prefill | requests | wall s | wall ms / request | decode steps | decode_queue p50 s | TTFT p50 s |")
    print("|---|---|---|---|---|---|---|")
    for mode in args.prefill:
        setup = ServingSetup(model, gpu, stack=stack, prefill=None if mode == "default" else mode)
        label = f"{stack.prefill} (default)" if mode == "default" else mode
        for n in args.sizes:
            t0 = time.perf_counter()
            r = setup.run(synthetic(n, args.rate, 1024, 128, seed=0), CUTS, seed=0)
            wall = time.perf_counter() - t0
            s = r.summary
            print(f"| {label} | {n:,} | {wall:.1f} | {1e3 * wall / n:.2f} | {r.steps:,} | "
                  f"{s['decode_queue_p50_s']:.4g} | {s['ttft_p50_s']:.4g} |", flush=True)


if __name__ == "__main__":
    main()
