"""`tricut cdu replay`: access patterns through the CDU policy model or RTL."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tricut.models.cdu import PATTERNS, POLICIES
from tricut.models.config import KV_DTYPES

__all__ = ["add_commands"]


def cmd_cdu_replay(args) -> int:
    from ..fast.cdu_replay import COUNTER_KEYS, replay
    from ..harness.cdu import RtlMismatch, replay_rtl

    source = args.trace if args.trace is not None else args.pattern
    if args.rtl:
        try:
            counters = replay_rtl(args.model, source, args.policy, steps=args.steps,
                                  batch=args.batch, kv_dtype=args.kv_dtype, seed=args.seed,
                                  context=args.context, reserve=args.reserve)
        except RtlMismatch as e:
            print(f"tricut: error: CDU RTL differs from the policy model: {e}", file=sys.stderr)
            return 1
    else:
        counters = replay(args.model, source, args.policy, args.l2_mb, args.steps, args.batch,
                          args.kv_dtype, args.seed, context=args.context,
                          hints="dsu" if args.dsu_hints else "auto", engine=args.engine,
                          reserve=args.reserve)
    if args.json:
        print(json.dumps(counters, indent=2))
        return 0
    where = "RTL (small instance) == policy model" if args.rtl else f"policy model, {args.l2_mb} MB of L2"
    print(f"CDU {args.policy} on {args.model}, {args.trace or args.pattern}, {args.batch} x {args.context} "
          f"tokens, {args.steps} steps, {args.kv_dtype} KV: {where}")
    keys = list(COUNTER_KEYS) + [k for k in ("hit_rate", "reuse_hit_rate", "accuracy", "coverage",
                                             "occupancy_peak", "frames", "rtl_cycles") if k in counters]
    width = max(len(k) for k in keys)
    for k in keys:
        v = counters[k]
        text = f"{100 * v:.2f} %" if k in ("hit_rate", "reuse_hit_rate", "accuracy", "coverage") \
            else f"{v:,.0f}"
        print(f"  {k.ljust(width)}  {text}")
    return 0



def add_commands(sub) -> None:
    cdu = sub.add_parser("cdu", help="Cache Director Unit: replay access patterns through its policy model or RTL",
                         description="Cache Director Unit (docs/cdu.md).")
    cdu_sub = cdu.add_subparsers(dest="cdu_command", metavar="SUBCOMMAND", required=True)
    p = cdu_sub.add_parser(
        "replay", help="counters of a CDU policy on an access pattern or an access trace",
        description="Replays a batch decoding --steps tokens through the CDU policy model and prints its "
                    "counters (definitions in docs/cdu.md). --rtl runs the same kind of replay through the "
                    "RTL on a small instance (few sets and ways, --l2-mb ignored) and exits 1 if any "
                    "transaction or counter differs from the model.")
    p.add_argument("--model", default="llama-3-8b", help="model id or .toml (default: %(default)s)")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--pattern", choices=PATTERNS, help="access pattern")
    src.add_argument("--trace", type=Path, help="access trace, JSONL: step, request, layer, blocks")
    p.add_argument("--policy", choices=POLICIES[::-1], default="adaptive")
    p.add_argument("--l2-mb", type=float, default=50.0, help="L2 the CDU owns, MiB (default: 50)")
    p.add_argument("--steps", type=int, default=8, help="decode steps (default: 8)")
    p.add_argument("--batch", type=int, default=1, help="requests (default: 1)")
    p.add_argument("--context", type=int, default=4096, help="tokens per request at the start (default: 4096)")
    p.add_argument("--kv-dtype", choices=KV_DTYPES, default="bf16")
    p.add_argument("--dsu-hints", action="store_true",
                   help="apply the DSU's residency hints (contexts < 4096 tokens streamed, the others "
                        "left to the policy)")
    p.add_argument("--reserve", type=int, default=None,
                   help="ways per set kept from the keep class for the prefetch stream (default: ways // 8)")
    p.add_argument("--engine", choices=("fast", "golden"), default="fast",
                   help="fast: the policy model's exact compiled twin (default; same transactions, "
                        "tests/test_cdu_fast.py); golden: models/cdu.py itself, ~100x slower")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--rtl", action="store_true", help="run through the RTL and compare with the model")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_cdu_replay)
