"""`tricut cdu replay`: access patterns through the CDU policy model or RTL.

Every bad input -- a flag, a combination of flags, a size beyond a stated limit, a malformed
access trace -- is refused before any work with one line ``tricut: error: ...`` and exit 2
(argparse's own errors included: this module's parsers print one line, not the usage)."""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from tricut.models.cdu import PATTERNS, POLICIES
from tricut.models.config import KV_DTYPES
from ..options import Needs, refuse_inapplicable
from ..fast.cdu_replay_checks import check_values
from .errors import one_line_argparse

__all__ = ["add_commands"]

#: replay() / replay_rtl() argument names (and this command's own) -> its flags (for messages);
#: replay()'s ``engine`` is the replay's implementation, --implementation
FLAGS = {"l2_mb": "--l2-mb", "steps": "--steps", "batch": "--batch", "context": "--context",
         "seed": "--seed", "reserve": "--reserve", "engine": "--implementation",
         "implementation": "--implementation", "rtl": "--rtl", "hints": "--dsu-hints"}
#: defaults of the flags that a trace or --rtl makes meaningless (None = not given; APPLIES)
DEFAULTS = {"l2_mb": 50.0, "steps": 8, "batch": 1, "context": 4096, "implementation": "fast"}
#: --implementation's values: replay()'s ``engine`` (sim/fast/cdu_replay.py)
IMPLEMENTATIONS = ("fast", "golden")
#: the note a run given the deprecated spelling --engine prints on stderr
ENGINE_NOTE = "tricut: note: cdu replay --engine is deprecated; use --implementation"


class _Bad(ValueError):
    pass


def _fail(msg):
    raise _Bad(msg)


def _parse_hbm_errors(text):
    """``RATE`` or ``RATE:persistent`` (RATE a number in [0, 1]) -> (rate, persistent)."""
    s = str(text).strip()
    rate_text, _, mode = s.partition(":")
    if mode not in ("", "persistent", "transient"):
        _fail(f"--hbm-errors {text!r}: the mode after ':' must be 'persistent' (or "
              "'transient', the default), got " + repr(mode))
    try:
        rate = float(rate_text)
    except ValueError:
        _fail(f"--hbm-errors {text!r}: expected RATE[:persistent] with RATE a number in [0, 1] "
              "(the fraction of HBM reads that fail)")
    if not math.isfinite(rate) or not 0 <= rate <= 1:
        _fail(f"--hbm-errors {text!r}: RATE must be a number in [0, 1], got {rate_text}")
    return rate, mode == "persistent"


def _implementation_alias(args):
    """Fold the deprecated ``--engine`` into ``args.implementation`` (``_Bad`` when both are
    given and disagree); the flags messages name (``--engine`` where it was given)."""
    old = args.deprecated_engine
    if old is None:
        return FLAGS
    if args.implementation is not None and args.implementation != old:
        _fail(f"--engine {old} and --implementation {args.implementation} disagree (--engine is "
              "the deprecated name of --implementation): give --implementation only")
    args.implementation = old
    return dict(FLAGS, engine="--engine", implementation="--engine")


_NOT_TRACE = Needs("does not apply to --trace (the trace gives the steps, requests and their seq_len)",
                   lambda a: a.trace is None)
_NOT_RTL = Needs("does not apply to --rtl (the RTL instance is 4 sets x 2 ways, compared with the "
                 "golden policy model)", lambda a: not a.rtl)
_RTL = Needs("needs --rtl (HBM errors and waveforms are of the RTL replay)", lambda a: a.rtl)

#: Where cdu replay's flags act (the rest act in every replay): ``{dest: (Needs, ...)}``,
#: refused where they would not (``sim/options.py``, :func:`~tricut.sim.options.refuse_inapplicable`)
APPLIES = {"steps": (_NOT_TRACE,), "batch": (_NOT_TRACE,), "context": (_NOT_TRACE,),
           "l2_mb": (_NOT_RTL,), "implementation": (_NOT_RTL,), "deprecated_engine": (_NOT_RTL,),
           "hbm_errors": (_RTL,), "wave": (_RTL,), "wave_window": (_RTL,)}


def _check_args(args):
    """Flag values, before anything is loaded or run (``_Bad``; where a flag applies:
    :data:`APPLIES`)."""
    # the values' checks a sweep's cdu-replay points share (an InputError: one line, exit 2)
    check_values(l2_mb=args.l2_mb, steps=args.steps, batch=args.batch, context=args.context,
                 seed=args.seed, reserve=args.reserve, rtl=args.rtl)
    return _parse_hbm_errors(args.hbm_errors) if args.hbm_errors is not None else None


def cmd_cdu_replay(args) -> int:
    from tricut.models.config import load_model

    from ..fast.cdu_replay import COUNTER_KEYS, replay
    from ..harness.cdu import HbmFaults, RtlMismatch, replay_rtl

    refuse_inapplicable(args, APPLIES, flags={**FLAGS, "deprecated_engine": "--engine",
                                              "hbm_errors": "--hbm-errors", "wave": "--wave",
                                              "wave_window": "--wave-window"})
    try:
        names = _implementation_alias(args)
        hbm = _check_args(args)
    except _Bad as e:
        print(f"tricut: error: {e}", file=sys.stderr)
        return 2
    wave = None
    if args.rtl and (args.wave is not None or args.wave_window is not None):
        from ..harness.waves import parse_wave_args
        wave = parse_wave_args(args.wave, args.wave_window)      # WaveError: exit 2
    for k, v in DEFAULTS.items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    model = load_model(args.model)                                # ConfigError: exit 2
    if args.trace is None and args.context + args.steps > model.max_context:
        print(f"tricut: error: --context {args.context} + --steps {args.steps} = "
              f"{args.context + args.steps:,} tokens exceeds {model.name}'s max_context "
              f"{model.max_context:,}", file=sys.stderr)
        return 2
    source = args.trace if args.trace is not None else args.pattern
    hints = "dsu" if args.dsu_hints else "auto"
    if args.rtl:
        faults = HbmFaults(hbm[0], hbm[1], args.seed) if hbm is not None else None
        try:
            counters = replay_rtl(model, source, args.policy, steps=args.steps,
                                  batch=args.batch, kv_dtype=args.kv_dtype, seed=args.seed,
                                  context=args.context, reserve=args.reserve, hints=hints,
                                  hbm_errors=faults, wave=wave, names=names)
        except RtlMismatch as e:
            print(f"tricut: error: CDU RTL differs from the policy model: {e}", file=sys.stderr)
            return 1
    else:
        counters = replay(model, source, args.policy, args.l2_mb, args.steps, args.batch,
                          args.kv_dtype, args.seed, context=args.context, hints=hints,
                          engine=args.implementation, reserve=args.reserve, names=names)
    if args.deprecated_engine is not None:                # after the checks: a refusal stays one line
        print(ENGINE_NOTE, file=sys.stderr)
    if args.json:
        print(json.dumps(counters, indent=2))
        return 0
    if args.rtl:
        where = (f"RTL (4 sets x 2 ways, 8 predictor entries, {counters['layers_simulated']} of "
                 f"{model.num_layers} layers) == policy model")
        if hbm is not None:
            where += f", HBM errors {faults.describe()}"
    else:
        where = f"policy model, {args.l2_mb:g} MB of L2"
    if args.trace is not None:
        what = (f"trace {args.trace} ({counters.get('requests', '?')} requests)"
                if args.rtl else f"trace {args.trace}")
    else:
        what = f"{args.pattern}, {args.batch} x {args.context} tokens"
    print(f"CDU {args.policy} on {model.name}, {what}, {counters['steps']} steps, "
          f"{args.kv_dtype} KV: {where}")
    extra = ("hit_rate", "reuse_hit_rate", "accuracy", "coverage", "occupancy_peak", "frames",
             "rtl_cycles", "hbm_reads", "hbm_retries", "hbm_failures", "status_beats",
             "ready_err")
    keys = list(COUNTER_KEYS) + [k for k in extra if k in counters]
    width = max(len(k) for k in keys)
    for k in keys:
        v = counters[k]
        text = f"{100 * v:.2f} %" if k in ("hit_rate", "reuse_hit_rate", "accuracy", "coverage") \
            else f"{v:,.0f}"
        print(f"  {k.ljust(width)}  {text}")
    if hbm is not None:
        print(f"  HBM errors {faults.describe()}: {counters['reads_faulty']:,} of "
              f"{counters['hbm_reads']:,} reads faulty ({counters['hbm_error_answers']:,} error "
              f"answers): {counters['reads_recovered']:,} recovered by retry, "
              f"{counters['reads_failed']:,} failed after all retries "
              f"({counters['frames_invalidated']:,} frames invalidated, "
              f"{counters['ready_err']:,} ready beats with err); RTL == model")
    if wave is not None:
        print(f"  waves: {wave.describe()}")
    return 0


def add_commands(sub) -> None:
    cdu = sub.add_parser("cdu", help="Cache Director Unit: replay access patterns through its policy model or RTL",
                         description="Cache Director Unit (docs/cdu.md).")
    one_line_argparse(cdu)
    cdu_sub = cdu.add_subparsers(dest="cdu_command", metavar="SUBCOMMAND", required=True)
    p = one_line_argparse(cdu_sub.add_parser(
        "replay", help="counters of a CDU policy on an access pattern or an access trace",
        description="Replays a batch decoding --steps tokens (or an access trace) through the CDU "
                    "policy model and prints its counters (definitions in docs/cdu.md). --rtl runs "
                    "the same replay through the whole CDU RTL on a small instance (4 sets x 2 ways, "
                    "at most 8 layers, 16 requests, 16K tokens, 40,000 block operations) in "
                    "Amaranth's simulator and exits 1 if any transaction or counter differs from "
                    "the model; --hbm-errors injects HBM read errors there. Limits and every "
                    "refusal: docs/cdu.md."))
    p.add_argument("--model", default="llama-3-8b", help="model id or .toml (default: %(default)s)")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--pattern", choices=PATTERNS, help="access pattern")
    src.add_argument("--trace", type=Path, help="access trace, JSONL: step, request, layer, blocks "
                                                "[, seq_len]")
    p.add_argument("--policy", choices=POLICIES[::-1], default="adaptive")
    p.add_argument("--l2-mb", type=float, default=None,
                   help="L2 the CDU owns, MiB (default: 50; at most 2^20 frames)")
    p.add_argument("--steps", type=int, default=None, help="decode steps (default: 8)")
    p.add_argument("--batch", type=int, default=None, help="requests (default: 1)")
    p.add_argument("--context", type=int, default=None,
                   help="tokens per request at the start (default: 4096; context + steps <= the "
                        "model's max_context)")
    p.add_argument("--kv-dtype", choices=KV_DTYPES, default="bf16")
    p.add_argument("--dsu-hints", action="store_true",
                   help="apply the DSU's residency hints (contexts < 4096 tokens streamed, the others "
                        "left to the policy)")
    p.add_argument("--reserve", type=int, default=None,
                   help="ways per set kept from the keep class for the prefetch stream (default: ways // 8)")
    p.add_argument("--implementation", choices=IMPLEMENTATIONS, default=None,
                   help="the policy model's implementation that replays: fast, its exact compiled "
                        "twin (default; same transactions, tests/test_cdu_fast.py); golden, "
                        "models/cdu.py itself, ~100x slower")
    # the deprecated spelling of --implementation (a note on stderr), not shown in --help
    p.add_argument("--engine", dest="deprecated_engine", choices=IMPLEMENTATIONS, default=None,
                   help=argparse.SUPPRESS)
    p.add_argument("--seed", type=int, default=0, help="pattern and HBM-error seed, 0..2^63-1")
    p.add_argument("--rtl", action="store_true", help="run through the RTL and compare with the model")
    p.add_argument("--hbm-errors", metavar="RATE[:persistent]", default=None,
                   help="--rtl: the fraction RATE in [0, 1] of HBM reads that fail; transient "
                        "(default): a failing read fails 1, 2, ... attempts with probability 1/2, "
                        "1/4, ... and then succeeds (exhausting the CDU's 2 retries in 1/4 of the "
                        "cases); persistent: it fails every attempt (reported on status, err on "
                        "ready). Compared with the model read by read. Default: no errors")
    p.add_argument("--wave", metavar="FILE.vcd|FILE.fst", default=None,
                   help="--rtl: write the Amaranth simulation's waveforms")
    p.add_argument("--wave-window", metavar="START:END", default=None,
                   help="with --wave: keep only cycles START..END (START: or :END open)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_cdu_replay)
