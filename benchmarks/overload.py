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

With --files N it measures the input paths instead: in a temporary directory it writes a
Mooncake trace of N requests (the requests `synthetic(N, --rate, 1024, --output-tokens)` draws;
hash_ids: a block shared by all, then one of the request's own) and a session file of the same
requests as one-turn sessions, runs `tricut simulate` (the defaults: llama-3-8b, h100-sxm5) on the
synthetic workload, the trace and the sessions, each in a process of its own, and prints each
run's wall time and peak memory (the process's maximum resident set). --write puts the table
and the command into docs/reliability.md ("10⁶ requests from a trace, 10⁶ sessions"):

    .venv/bin/python benchmarks/overload.py --files 1000000 [--rate 1000] [--output-tokens 8] [--write]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from doc_sections import ROOT, write_section     # benchmarks/ is on sys.path when a script runs

from tricut.models.config import load_gpu, load_model
from tricut.sim.fast.sessions import sessions_from_requests, write_sessions
from tricut.sim.fast.setup import ServingSetup
from tricut.sim.fast.stacks import DEFAULT_STACK, PREFILL_MODES, get_stack, stack_names
from tricut.sim.fast.timing import CUTS
from tricut.sim.fast.workload import read_trace, synthetic

DOC = ROOT / "docs" / "reliability.md"
BEGIN, END = "<!-- overload-files:begin -->", "<!-- overload-files:end -->"
FILE_PROMPT_TOKENS = 1024
TRICUT = Path(sys.executable).with_name("tricut")


def _ints(text: str) -> list[int]:
    return [int(x.replace("_", "")) for x in text.split(",")]


def _modes(text: str) -> list[str]:
    modes = text.split(",")
    for m in modes:
        if m != "default" and m not in PREFILL_MODES:
            raise argparse.ArgumentTypeError(f"{m!r}: use default or one of {', '.join(PREFILL_MODES)}")
    return modes


def write_files(n: int, rate: float, output_tokens: int, folder: Path) -> tuple[Path, Path]:
    """A Mooncake trace of the ``n`` requests :func:`synthetic` draws, and the session file of
    the same requests (as the trace reader gives them back) as one-turn sessions."""
    trace = folder / "trace.jsonl"
    with open(trace, "w", encoding="utf-8") as f:
        for r in synthetic(n, rate, FILE_PROMPT_TOKENS, output_tokens, seed=0):
            f.write(json.dumps({"timestamp": r.arrival_s * 1e3, "input_length": r.prompt_tokens,
                                "output_length": r.output_tokens, "hash_ids": [0, r.id + 1]}) + "\n")
    sessions = folder / "sessions.jsonl"
    write_sessions(sessions_from_requests(read_trace(trace)), sessions)
    return trace, sessions


def measure(argv: list[str], folder: Path) -> tuple[float, float, dict]:
    """``tricut simulate ARGV --json`` in a process of its own: (wall s, peak resident MB, its
    JSON summary)."""
    out, err = folder / "out.json", folder / "err.txt"
    t0 = time.perf_counter()
    with open(out, "wb") as stdout, open(err, "wb") as stderr:
        p = subprocess.Popen([str(TRICUT), "simulate", *argv, "--json", "--no-progress"],
                             stdout=stdout, stderr=stderr)
        _, status, usage = os.wait4(p.pid, 0)        # this child's own peak memory
    wall = time.perf_counter() - t0
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode:
        raise SystemExit(f"overload.py: tricut simulate {' '.join(argv)} exited {p.returncode}: "
                         f"{err.read_text(errors='replace').strip()[-500:]}")
    return wall, usage.ru_maxrss / 1024, json.loads(out.read_text())


def files_report(n: int, rate: float, output_tokens: int) -> str:
    """The table of the synthetic, trace and session runs of ``n`` requests (Markdown)."""
    command = f"python benchmarks/overload.py --files {n} --rate {rate:g} --output-tokens {output_tokens}"
    lines = [f"    .venv/bin/{command} --write", "",
             f"{n:,} requests: {FILE_PROMPT_TOKENS}-token prompts, {output_tokens} output tokens, Poisson "
             f"arrivals at {rate:g} requests/s;",
             f"`tricut simulate` at its defaults (llama-3-8b, h100-sxm5, all cuts, stack {DEFAULT_STACK}) "
             f"on {os.cpu_count()} cores.", "",
             "| workload | flags | requests | decode steps | wall s | wall µs / request | peak memory MB |",
             "|---|---|---|---|---|---|---|"]
    with tempfile.TemporaryDirectory(prefix="tricut-overload-") as tmp:
        folder = Path(tmp)
        t0 = time.perf_counter()
        trace, sessions = write_files(n, rate, output_tokens, folder)
        print(f"wrote the trace and the sessions in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
        runs = [("synthetic", ["--synthetic", str(n), "--rate", f"{rate:g}",
                               "--prompt-tokens", str(FILE_PROMPT_TOKENS), "--output-tokens", str(output_tokens)]),
                ("Mooncake trace", ["--trace", str(trace)]),
                ("one-turn sessions", ["--sessions", str(sessions)])]
        for label, argv in runs:
            wall, peak_mb, summary = measure(argv, folder)
            flags = " ".join(a if not a.startswith(tmp) else Path(a).name for a in argv)
            lines.append(f"| {label} | `{flags}` | {summary['requests']:,} | {summary['steps']:,} | {wall:.1f} | "
                         f"{1e6 * wall / n:.0f} | {peak_mb:,.0f} |")
            print(lines[-1], file=sys.stderr, flush=True)
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=_ints, default=[10_000, 30_000, 100_000], help="request counts")
    ap.add_argument("--prefill", type=_modes, default=["default", "disaggregated"],
                    help="prefill modes; 'default' is the stack's own (vllm-v0: colocated)")
    ap.add_argument("--rate", type=float, default=1000.0, help="arrival rate, requests/s")
    ap.add_argument("--stack", choices=stack_names(), default=DEFAULT_STACK)
    ap.add_argument("--files", type=int, metavar="N",
                    help="measure N requests from a Mooncake trace and as one-turn sessions, beside the same "
                         "synthetic requests, each run by tricut simulate (instead of the table above)")
    ap.add_argument("--output-tokens", type=int, default=8, help="with --files: output tokens per request")
    ap.add_argument("--write", action="store_true", help="with --files: write the table into docs/reliability.md")
    args = ap.parse_args()
    if args.files is not None:
        if args.files < 1 or args.output_tokens < 1:
            ap.error("--files and --output-tokens must be >= 1")
        report = files_report(args.files, args.rate, args.output_tokens)
        print(report)
        if args.write:
            write_section(DOC, BEGIN, END, report, "overload.py")
        return
    if args.write:
        ap.error("--write goes with --files")
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
