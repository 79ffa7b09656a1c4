"""The ``tricut`` command line.

Every error a user can cause (a bad flag, a bad config file, an impossible parameter) ends
as one line ``tricut: error: ...`` on stderr and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from tricut.models.config import KV_DTYPES, ConfigError, gpu_ids, load_gpu, load_model, model_ids
from tricut.models.jsonl import TraceError
from tricut.models.roofline import roofline

from . import simulate as cli_simulate
from . import sweep_cmd as cli_sweep
from . import tile_cmd as cli_tile
from . import units as cli_units
from .. import collector
from ..options import given_on_command_line
from .errors import InputError, one_line_argparse, positive_int_list

__all__ = ["main"]


class UsageError(Exception):
    """Bad input from the user; the message is printed as one line."""


def _kv_dtype_list(text: str) -> list[str]:
    values = text.split(",")
    for v in values:
        if v not in KV_DTYPES:
            raise argparse.ArgumentTypeError(f"{v!r} is not one of {', '.join(KV_DTYPES)}")
    return values


def _si(value: float, unit: str) -> str:
    for prefix, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.2f} {prefix}{unit}"
    return f"{value:.0f} {unit}"


def _table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    line = lambda cells: "  ".join(c.rjust(w) for c, w in zip(cells, widths))  # noqa: E731
    return "\n".join([line(headers), line(["-" * w for w in widths])] + [line(r) for r in rows])


def _roofline_notes(results, model, gpu, tp: int) -> list[str]:
    """One note per combination whose batch's KV does not fit beside the weights (its ceiling
    cannot be reached), or one note when the weights alone do not fit."""
    if not results[0].weights_fit:
        return [f"note: {model.name} weights do not fit in {gpu.name} HBM at tp={tp}: no room for any KV"]
    return [f"note: {r.kv_dtype}, context {r.context:,}, batch {r.batch:,}: the batch needs "
            f"{r.kv_tokens_needed:,} tokens of KV but {r.kv_tokens_fit:,} fit beside the weights "
            f"(at most {r.max_batch_fit:,} such requests): its {r.tokens_per_s_ceiling:,.0f} tok/s "
            "ceiling is not reachable" for r in results if not r.batch_fits]


def cmd_roofline(args) -> int:
    model = load_model(args.model)
    gpu = load_gpu(args.gpu)
    results = [roofline(model, gpu, d, c, b, tp=args.tp)
               for d in args.kv_dtype for c in args.context for b in args.batch]
    notes = _roofline_notes(results, model, gpu, args.tp)
    if args.json:
        out = [r.as_dict() for r in results]
        print(json.dumps(out[0] if len(out) == 1 else out, indent=2))
        for note in notes:
            print(note, file=sys.stderr)
        return 0
    print(f"{model.name} on {gpu.name}" + (f" x{args.tp} (tensor parallel)" if args.tp > 1 else "")
          + f": HBM {gpu.hbm_bandwidth / 1e12:.2f} TB/s, {gpu.hbm_bytes / 2**30:.0f} GiB per GPU;"
          f" weights {_si(results[0].weight_bytes, 'B')} read per step per GPU")
    rows = [[r.kv_dtype, str(r.context), str(r.batch), _si(r.kv_bytes_per_token, "B"),
             _si(r.kv_bytes_per_step, "B"), f"{r.step_floor_s * 1e3:.3f}",
             f"{r.request_tokens_per_s_ceiling:.1f}", f"{r.tokens_per_s_ceiling:.1f}",
             f"{r.kv_tokens_fit:,}", "yes" if r.batch_fits else "NO"] for r in results]
    print(_table(["kv", "context", "batch", "KV/token", "KV/step", "floor ms",
                  "tok/s/req", "tok/s", "KV tokens fit", "batch fits"], rows))
    for note in notes:
        print(note, file=sys.stderr)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tricut",
        description="Cycle-approximate model of a GPU that splits LLM decode three ways: "
                    "TE decode datapath, Cache Director Unit (CDU), Decoding Scheduler Unit (DSU).")
    one_line_argparse(parser)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = sub.add_parser(
        "roofline", help="bandwidth floor of a decode step and what it implies",
        description="Per model x GPU x KV dtype x context x batch: weight bytes read per step, "
                    "KV bytes per token (2 x layers x kv_heads x head_dim x bytes) and per step, "
                    "the step floor (weights + KV read) / HBM bandwidth, the tokens/s ceiling "
                    "and how many tokens of KV fit in HBM beside the weights. "
                    "--kv-dtype, --context and --batch take comma-separated lists for a sweep.")
    p.add_argument("--model", default="llama-3-8b",
                   help=f"model id ({', '.join(model_ids())}) or a .toml file (default: %(default)s)")
    p.add_argument("--gpu", default="h100-sxm5",
                   help=f"GPU id ({', '.join(gpu_ids())}) or a .toml file (default: %(default)s)")
    p.add_argument("--kv-dtype", type=_kv_dtype_list, default=["bf16"],
                   help=f"KV cache format(s): {', '.join(KV_DTYPES)} (default: bf16)")
    p.add_argument("--context", type=positive_int_list, default=[8192],
                   help="tokens of KV per request (default: 8192)")
    p.add_argument("--batch", type=positive_int_list, default=[1],
                   help="requests decoded together (default: 1)")
    p.add_argument("--tp", type=int, default=1,
                   help="tensor-parallel GPUs: must divide the query heads, and divide or be a "
                        "multiple of the KV heads (default: 1)")
    p.add_argument("--json", action="store_true",
                   help="JSON (bytes, seconds): one object, or a list for a sweep")
    one_line_argparse(p)
    p.set_defaults(func=cmd_roofline)
    cli_simulate.add_commands(sub)
    cli_units.add_commands(sub)
    cli_sweep.add_commands(sub)
    cli_tile.add_commands(sub)
    return parser


def _error(message) -> int:
    """``tricut: error: MESSAGE`` as one line (a message from a file may hold a newline)."""
    print("tricut: error: " + " ".join(str(message).splitlines()), file=sys.stderr)
    return 2


def parse_command_line(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """``argv`` parsed as ``tricut`` parses it (``sweep plot`` / ``export`` by their own
    parsers); bad flags exit 2 with one ``tricut: error:`` line."""
    if len(argv) > 1 and argv[0] == "sweep" and argv[1] in cli_sweep.SUBCOMMANDS:
        return cli_sweep.parse_subcommand(argv[1:])
    args = parser.parse_args(argv)
    args.flags_given = given_on_command_line(parser, argv)   # refused where they would not act
    return args


def main(argv: list[str] | None = None) -> int:
    collector.tune()
    try:
        parser = build_parser()      # reads the shipped config and stack lists
    except ConfigError as e:
        return _error(e)
    args = parse_command_line(parser, sys.argv[1:] if argv is None else list(argv))
    try:
        return args.func(args)
    except (ConfigError, UsageError, TraceError, InputError, ValueError) as e:
        return _error(e)
    except MemoryError:
        return _error("out of memory: the workload is too large for this machine "
                      "(fewer requests, --limit, or shorter requests)")
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:
        print("tricut: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # a bug, not bad input: still one line, the traceback on request
        if os.environ.get("TRICUT_DEBUG"):
            raise
        print(f"tricut: internal error: {type(e).__name__}: {str(e)[:300]} "
              "(set TRICUT_DEBUG=1 for the traceback)", file=sys.stderr)
        return 3


if __name__ == "__main__":
    sys.exit(main())
