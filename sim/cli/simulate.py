"""`tricut simulate`, `tricut compare` and `tricut bench`: the system model from the command line."""

from __future__ import annotations

import argparse
import contextlib
import csv
import io
import json
import math
import sys
from dataclasses import replace
from pathlib import Path

from tricut.models.cdu import POLICIES
from tricut.models.config import KV_DTYPES, gpu_ids, load_gpu, load_model, model_ids
from tricut.models.dsu import PROFILES
from tricut.models.roofline import roofline
from tricut.models.te import LANES as TE_LANES

from ..fast.setup import ServingSetup
from ..fast.stacks import DEFAULT_STACK, PREFILL_MODES, StackProfile, get_stack, stack_names
from ..fast.timing import CUTS, DEFAULT_TE_LANES, Assumptions
from ..fast.workload import TRACE_FORMATS, TraceError, check_lengths, read_trace, scale_rate, synthetic
from .errors import InputError, one_line_argparse
from .plots import BENCH_FIGURES, RUN_FIGURES, prepare_out_dir, remove_created

__all__ = ["add_commands", "simulate_parser", "prepared_run", "workload_of", "setup_of", "session_mode",
           "prepare_sessions", "UNIT_FIELDS"]

#: Upper limits of the size flags (docs/system-model.md, "Bad input"): beyond them a run needs
#: more memory than a workstation has (every token time is kept) or is a typo.
MAX_SYNTHETIC = 1_000_000
MAX_SLOTS = 65_536
#: --assume on a stack parameter: seconds at most this, token budgets and batch sizes at most that
MAX_STACK_SECONDS = 10.0
MAX_STACK_INT = 10**9

KEY_COLUMNS = ("requests", "output_tokens", "duration_s", "tokens_per_s", "ttft_p50_s", "ttft_p99_s",
               "tpot_p50_s", "tpot_p99_s", "itl_p99_s", "hbm_gbps_mean", "hbm_gbps_peak",
               "l2_hit_rate", "min_step_over_floor")
ABLATION = (("baseline", ()), ("te", ("te",)), ("cdu", ("cdu",)), ("dsu", ("dsu",)),
            ("te+cdu+dsu", ("te", "cdu", "dsu")))


def _cuts(text: str) -> tuple[str, ...]:
    if text in ("none", ""):
        return ()
    if text == "all":
        return CUTS
    parts = tuple(text.split(","))
    for p in parts:
        if p not in CUTS:
            raise argparse.ArgumentTypeError(f"{p!r} is not a cut; use none, all, or a list of {', '.join(CUTS)}")
    return parts


def _lengths(what: str):
    """``1024``, ``uniform:LO:HI`` or ``lognormal:MEDIAN:SIGMA``, checked at once
    (:func:`check_lengths`: finite, in range) so that the message names the flag."""
    def parse(text: str):
        spec = None
        try:
            if ":" not in text:
                spec = int(text)
            else:
                kind, a, b = text.split(":")
                if kind == "uniform":
                    spec = ("uniform", int(a), int(b))
                elif kind == "lognormal":
                    spec = ("lognormal", float(a), float(b))
        except ValueError:
            pass
        if spec is None:
            raise argparse.ArgumentTypeError(f"{text!r}: expected N, uniform:LO:HI or lognormal:MEDIAN:SIGMA")
        try:
            check_lengths(spec, what)
        except TraceError as e:
            raise argparse.ArgumentTypeError(f"{text!r}: {e}") from None
        return spec
    return parse


def _positive(kind, maximum=None, allow_inf: bool = False):
    """A parser of a number > 0 (and <= ``maximum``); a float must be finite unless
    ``allow_inf`` (then ``inf`` is accepted)."""
    def parse(text):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {'an integer' if kind is int else 'a number'}") from None
        if not value > 0:
            raise argparse.ArgumentTypeError(f"{text} must be > 0")
        if kind is float and not math.isfinite(value) and not allow_inf:
            raise argparse.ArgumentTypeError(f"{text} must be a finite number > 0")
        if maximum is not None and value > maximum:
            raise argparse.ArgumentTypeError(f"{text} must be at most {maximum:,}")
        return value
    return parse


def _seed(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text} must be an integer >= 0")
    return value


def _non_negative(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"{text} must be a finite number >= 0")
    return value


def _assumption(text: str) -> tuple[str, float]:
    """``NAME=VALUE`` for one field of :class:`Assumptions` or one numeric parameter of the
    stack (:meth:`StackProfile.numeric_fields`); checked here against the default stack, applied
    to the chosen one in :func:`setup_of`."""
    name, sep, value = text.partition("=")
    assumed, stacked = list(Assumptions.__dataclass_fields__), list(StackProfile.numeric_fields())
    if not sep or name not in assumed + stacked:
        raise argparse.ArgumentTypeError(f"{text!r}: expected NAME=VALUE with NAME one of {', '.join(assumed)} "
                                         f"(assumptions) or {', '.join(stacked)} (stack)")
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: {value!r} is not a number") from None
    try:
        if name in assumed:
            Assumptions(**{name: number})
        else:
            get_stack(DEFAULT_STACK).with_values(**{name: number})
    except (ValueError, OverflowError) as e:
        raise argparse.ArgumentTypeError(f"{text!r}: {e}") from None
    if name not in assumed:
        # the stack's own check wants finite numbers >= 0; here also a sane upper limit
        if name.endswith("_s") and number > MAX_STACK_SECONDS:
            raise argparse.ArgumentTypeError(f"{text!r}: {name} must be at most {MAX_STACK_SECONDS:g} s")
        if name in ("graph_max_batch", "prefill_batch_tokens", "prefill_chunk_tokens") \
                and number > MAX_STACK_INT:
            raise argparse.ArgumentTypeError(f"{text!r}: {name} must be at most {MAX_STACK_INT:,}")
        if name == "attn_bw_efficiency" and number < 0.01:
            raise argparse.ArgumentTypeError(f"{text!r}: {name} must be at least 0.01")
    return name, number




#: --unit NAME=VALUE: the decode units' sizes, beside the GPU config's (docs/system-model.md)
UNIT_FIELDS = {"te_engines_per_sm": "TE decode engines per SM (the GPU config's)",
               "te_lanes": f"multiplier lanes per lane array of the (split) TE engine ({', '.join(map(str, TE_LANES[:-1]))} or {TE_LANES[-1]}; "
                           f"default {DEFAULT_TE_LANES})",
               "dsu_cores": "DSU RISC-V cores (the GPU config's; the fast model's DSU round runs on one)"}


def _unit(text: str) -> tuple[str, int]:
    """``NAME=VALUE`` for one decode-unit size (:data:`UNIT_FIELDS`), an integer, range-checked
    by :meth:`ServingSetup.with_units` when the GPU is known."""
    name, sep, value = text.partition("=")
    if not sep or name not in UNIT_FIELDS:
        raise argparse.ArgumentTypeError(f"{text!r}: expected NAME=VALUE with NAME one of {', '.join(UNIT_FIELDS)}")
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: {value!r} is not an integer") from None
    try:
        ServingSetup.check_units({name: number})
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"{text!r}: {e}") from None
    return name, number


def _agentic_flags(p: argparse.ArgumentParser) -> None:
    from tricut.models.dsu import PARK_POLICIES
    from tricut.models.tiers import tier_ids
    p.add_argument("--tiers", default="none",
                   help=f"KV tiers beyond HBM: {', '.join(tier_ids())} or a .toml (models/configs/tiers/; "
                        "default: none)")
    p.add_argument("--park-policy", choices=PARK_POLICIES,
                   help="sessions: what a session's KV does during a tool call: keep (stays in HBM), park (to G2 "
                        "host memory, restored when the tool returns), park-early (restored --restore-lead before "
                        "it returns), drop (recomputed) (default: keep)")
    p.add_argument("--restore-lead", type=_non_negative, metavar="SECONDS",
                   help="park-early: start the restore this long before the tool returns (default: the "
                        "restore's own time)")
    p.add_argument("--prefix-cache-tokens", type=_seed, default=0, metavar="N",
                   help="HBM tokens kept for shared prefix blocks (Mooncake hash_ids, session prefixes); their "
                        "prefill is skipped; taken from the DSU's KV budget (default: 0, no prefix cache)")
    p.add_argument("--prefix-spill", choices=("G3", "G3.5"),
                   help="with --prefix-cache-tokens: prefix blocks evicted from HBM spill to this tier of --tiers "
                        "(its capacity), and a later hit fetches them over its link instead of recomputing them "
                        "(default: evicted blocks are forgotten)")


def _common(p: argparse.ArgumentParser, with_cuts: bool = True, bench: bool = False) -> None:
    """The flags of simulate, compare and bench. ``bench``: the trace and arrival-rate flags
    exist but default to None, so that :func:`cmd_bench` can refuse them (its rounds are
    synthetic with their own rates)."""
    p.add_argument("--model", default="llama-3-8b", help=f"model id ({', '.join(model_ids())}) or .toml (default: %(default)s)")
    p.add_argument("--gpu", default="h100-sxm5", help=f"GPU id ({', '.join(gpu_ids())}) or .toml (default: %(default)s)")
    p.add_argument("--tp", type=_positive(int), default=1, help="tensor-parallel GPUs (default: 1)")
    p.add_argument("--kv-dtype", choices=KV_DTYPES, default="bf16", help="KV cache format (default: bf16)")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--trace", type=Path, help="trace file: Mooncake .jsonl, Azure or Vidur .csv")
    src.add_argument("--synthetic", type=_positive(int, MAX_SYNTHETIC), metavar="N",
                     help=f"N synthetic requests, at most {MAX_SYNTHETIC:,} (default: 200)")
    if not bench:
        src.add_argument("--sessions", type=Path, metavar="FILE",
                         help="agentic sessions: a JSONL file of turns separated by tool-call gaps (docs/agentic.md)")
        src.add_argument("--agentic", metavar="SPEC",
                         help="synthetic agentic sessions, e.g. 'sessions=64,rate=0.5,turns=uniform:4:12,"
                              "gap=lognormal:5:1,system=2048,input=lognormal:32768:0.5,turn_input=uniform:512:4096,"
                              "output=lognormal:256:0.5,seed=0' (every key optional; docs/agentic.md)")
    p.add_argument("--trace-format", choices=tuple(TRACE_FORMATS), help="trace format (default: guessed)")
    p.add_argument("--limit", type=_positive(int), help="use only the first N requests of the trace")
    p.add_argument("--rate", type=_positive(float, allow_inf=True), default=None if bench else 10.0,
                   help="synthetic Poisson arrival rate, requests/s; 'inf' = all at t=0; ignored with "
                        "--concurrency (default: 10)")
    p.add_argument("--rate-scale", type=_positive(float), default=None if bench else 1.0,
                   help="speed arrivals up by this factor")
    p.add_argument("--prompt-tokens", type=_lengths("prompt"), default=1024,
                   help="synthetic prompt lengths: N, uniform:LO:HI, lognormal:MEDIAN:SIGMA (default: 1024)")
    p.add_argument("--output-tokens", type=_lengths("output"), default=128,
                   help="synthetic output lengths (same forms; default: 128)")
    if with_cuts:
        p.add_argument("--cuts", type=_cuts, default=CUTS,
                       help="which cuts are on: none, all, or a list of te,cdu,dsu (default: all)")
    # choices listed adaptive (the default) first, as before
    p.add_argument("--policy", choices=POLICIES[::-1], default="adaptive", help="CDU policy (default: adaptive)")
    p.add_argument("--profile", choices=PROFILES, default="throughput-opt", help="DSU profile (default: throughput-opt)")
    p.add_argument("--slots", type=_positive(int, MAX_SLOTS), default=64,
                   help=f"decode slots, at most {MAX_SLOTS:,} (default: 64)")
    p.add_argument("--max-batch", type=_positive(int, MAX_SLOTS), default=64,
                   help=f"batch cap, at most {MAX_SLOTS:,} (default: 64)")
    p.add_argument("--ttft-slo", type=_positive(float, allow_inf=True), help="TTFT SLO in seconds, for goodput")
    p.add_argument("--tpot-slo", type=_positive(float, allow_inf=True), help="TPOT SLO in seconds, for goodput")
    p.add_argument("--degraded-at", type=_non_negative, metavar="SECONDS",
                   help="DSU degrades to host scheduling from this simulated time on (a finite number >= 0)")
    p.add_argument("--stack", choices=stack_names(), default=DEFAULT_STACK,
                   help="software-stack profile: what a serving stack adds to the GPU's physics (host "
                        "time per step, its overlap with the GPU, CUDA-graph and launch gaps, the attention "
                        "kernel, all-reduce latency, how prefill shares the GPUs); one of "
                        f"{', '.join(stack_names())}; values and sources: docs/fidelity.md (default: %(default)s)")
    p.add_argument("--prefill", choices=PREFILL_MODES,
                   help="how prefill shares the GPUs: disaggregated (a separate, uncontended pool), colocated "
                        "(whole prefill batches on the decode GPUs, pre-empting decode), chunked (prompt chunks "
                        "riding along in decode steps) (default: the stack's own mode)")
    p.add_argument("--concurrency", type=_positive(int), metavar="C",
                   help="closed loop: C clients, each sending its next request when its previous one finished "
                        "(plus --think-time); arrival times (--rate, the trace's timestamps) are then ignored "
                        "(default: open loop)")
    p.add_argument("--think-time", type=_non_negative, default=0.0, metavar="SECONDS",
                   help="closed loop: a client's pause between a finished request and its next (default: 0)")
    p.add_argument("--assume", type=_assumption, action="append", default=[], metavar="NAME=VALUE",
                   help="override one modelling assumption or one numeric parameter of the chosen stack "
                        "(repeatable), e.g. --assume gemv_bw_efficiency=0.8 --assume host_step_s=0.0005; "
                        "names and defaults: docs/system-model.md, docs/fidelity.md")
    if not bench:
        _agentic_flags(p)
    p.add_argument("--unit", type=_unit, action="append", default=[], metavar="NAME=VALUE",
                   help="size one decode unit (repeatable): " + "; ".join(f"{k}: {v}" for k, v in UNIT_FIELDS.items())
                        + " (default: the GPU config's, 16 lanes)")
    p.add_argument("--seed", type=_seed, default=0, help="random seed, an integer >= 0 (default: 0)")
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true",
                     help="print JSON instead of a table (an undefined metric is null)")
    fmt.add_argument("--csv", action="store_true",
                     help="print CSV instead of a table (an undefined metric is an empty cell)")
    p.add_argument("--plot", type=Path, metavar="DIR",
                   help="write PNG figures into DIR (created if missing; checked before the run)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")


def workload_of(args):
    if args.trace is not None:
        reqs = read_trace(args.trace, args.trace_format)
        if args.limit:
            reqs = reqs[: args.limit]
    else:
        for flag, value in (("--limit", args.limit), ("--trace-format", args.trace_format)):
            if value is not None:
                raise InputError(f"{flag} applies to a --trace, and there is none")
        reqs = synthetic(args.synthetic or 200, args.rate, args.prompt_tokens, args.output_tokens, args.seed)
    return scale_rate(reqs, args.rate_scale) if args.rate_scale != 1.0 else reqs


def setup_of(args) -> ServingSetup:
    assumed = {k: v for k, v in args.assume if k in Assumptions.__dataclass_fields__}
    stacked = {k: v for k, v in args.assume if k not in assumed}
    return ServingSetup(load_model(args.model), load_gpu(args.gpu), args.kv_dtype, args.tp, args.policy,
                        args.profile, args.slots, args.max_batch,
                        assumptions=Assumptions(**assumed),
                        stack=get_stack(args.stack).with_values(**stacked),
                        prefill=args.prefill, concurrency=args.concurrency, think_s=args.think_time,
                        units=dict(args.unit))


def _prepare(args, cut_sets):
    """Every check of the input before any simulation runs (docs/system-model.md, "Bad
    input"): the configs, the stack and its overrides, the workload, each cut set's step model
    and the DSU's KV budget against the requests. Returns the setup and the requests."""
    setup = setup_of(args)
    reqs = workload_of(args)
    for cuts in cut_sets:
        setup.check(reqs, cuts)
    return setup, reqs


@contextlib.contextmanager
def _plot_dir(path: Path | None, figures: tuple[str, ...]):
    """The --plot directory, checked and created (with a probe file written and removed)
    after every other check and before the run; removed again if the run then fails."""
    created = prepare_out_dir(path, figures) if path is not None else []
    try:
        yield
    except BaseException:
        remove_created(created)
        raise


def _progress(enabled: bool, label: str):
    if not enabled or not sys.stderr.isatty():
        return None
    state = {"last": -1}

    def show(done, total):
        pct = int(100 * done / max(total, 1))
        if pct != state["last"]:
            state["last"] = pct
            bar = "#" * (pct // 4)
            print(f"\r{label} [{bar:<25}] {pct:3d}% ({done}/{total} requests)", end="", file=sys.stderr)
            if done >= total:
                print(file=sys.stderr)
    return show


def simulate_parser() -> argparse.ArgumentParser:
    """A parser of ``tricut simulate``'s flags that raises :class:`InputError` on a bad one
    (instead of printing and exiting): how ``tricut sweep`` checks and runs its points."""
    p = argparse.ArgumentParser(prog="tricut simulate", add_help=False)
    _common(p)

    def error(message):
        raise InputError(message)
    p.error = error
    return p


def prepared_run(argv: list[str], prepare_only: bool = False):
    """``tricut simulate ARGV`` without printing: ``(args, setup, summary)`` with the summary
    exactly as ``--json`` prints it (undefined metrics None); ``prepare_only``: every check of
    the input and no run (summary None). Bad input raises one-line ``ValueError``s."""
    args = simulate_parser().parse_args(argv)
    if session_mode(args):
        policy = args.park_policy or "keep"
        setup, sessions, options = prepare_sessions(args, [policy])
        if prepare_only:
            return args, setup, None
        return args, setup, _defined(_session_results(args, setup, sessions, options)[policy].summary)
    setup, reqs = _prepare(args, [args.cuts])
    if prepare_only:
        return args, setup, None
    args.no_progress = True
    label = "+".join(args.cuts) if args.cuts else "baseline"
    return args, setup, _defined(_run(args, setup, reqs, args.cuts, label).summary)


def _run(args, setup: ServingSetup, reqs, cuts, label):
    return setup.run(reqs, cuts, seed=args.seed, degraded_at_s=args.degraded_at,
                     progress=_progress(not args.no_progress, label),
                     ttft_slo_s=args.ttft_slo, tpot_slo_s=args.tpot_slo)


def _defined(value):
    """An undefined metric (NaN: TPOT of one-token requests; inf: a rate over no time) is
    None: null in JSON, an empty cell in CSV, '-' in the table (docs/metrics.md)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _defined(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_defined(v) for v in value]
    return value


def _fmt(key: str, value) -> str:
    if value is None:
        return "-"
    if isinstance(value, (int, float)) and ("bytes" in key):
        return f"{value / 1e9:,.2f} GB"
    if isinstance(value, (int, float)) and key.endswith("flops_saved"):
        return f"{value / 1e15:,.1f} PFLOP"
    if isinstance(value, float):
        if (key.endswith("_s") and not key.endswith("per_s")) or key.endswith("_s_total"):
            return f"{value * 1e3:.3f} ms"
        if key in ("l2_hit_rate", "l2_reuse_rate") or key.endswith("utilisation"):
            return f"{100 * value:.1f} %"
        return f"{value:,.2f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


#: the table's rows of a session run, after KEY_COLUMNS
SESSION_COLUMNS = ("sessions", "turns", "park_policy", "ttft_turn0_p50_s", "ttft_turn0_p99_s", "ttft_later_p50_s",
                   "ttft_later_p99_s", "session_time_p50_s", "session_time_p99_s", "sessions_held_peak",
                   "hbm_kv_bytes_peak", "parked_hbm_kv_bytes_peak", "g2_kv_bytes_peak", "bytes_hbm_to_g2",
                   "bytes_g2_to_hbm", "g3_kv_bytes_peak", "bytes_hbm_to_g3", "bytes_g3_to_hbm", "parks_g2",
                   "parks_g3", "parks_dropped", "recomputed_tokens", "link_wait_s", "prefix_hit_rate",
                   "prefix_lower_hit_blocks", "prefix_bytes_spilled", "prefix_bytes_fetched", "prefill_tokens",
                   "prefill_tokens_saved", "prefill_flops_saved")


def _emit(args, rows: dict[str, dict], session_keys: bool = False) -> None:
    rows = _defined(rows)
    if args.json:
        print(json.dumps(next(iter(rows.values())) if len(rows) == 1 else rows, indent=2, allow_nan=False))
    elif args.csv:
        buf = io.StringIO()
        keys = list(next(iter(rows.values())).keys())
        w = csv.writer(buf)
        w.writerow(["config"] + keys)
        for label, row in rows.items():
            w.writerow([label] + ["" if row[k] is None else row[k] for k in keys])
        print(buf.getvalue(), end="")
    else:
        labels = list(rows)
        keys = list(KEY_COLUMNS) + ["decode_queue_p50_s", "decode_queue_p99_s", "l2_reuse_rate",
                                    "sm_utilisation", "te_utilisation", "cdu_utilisation",
                                    "dsu_utilisation", "mean_batch", "failed", "stack", "prefill_mode",
                                    "prefill_s_total", "concurrency"]
        if session_keys:
            keys = [k for k in keys if k != "concurrency"] + list(SESSION_COLUMNS)
        width = max(len(k) for k in keys)
        cols = [[_fmt(k, rows[lab][k]) for k in keys] for lab in labels]
        cw = [max(len(lab), *(len(c) for c in col)) for lab, col in zip(labels, cols)]
        print(" " * width + "  " + "  ".join(lab.rjust(w) for lab, w in zip(labels, cw)))
        for i, k in enumerate(keys):
            print(k.ljust(width) + "  " + "  ".join(col[i].rjust(w) for col, w in zip(cols, cw)))


def _failure_notes(results: dict) -> None:
    """A note on stderr per run in which some requests failed (they are not in the latency
    metrics): how many, and why."""
    for label, r in results.items():
        reasons: dict[str, int] = {}
        for o in r.outcomes.values():
            if o.status == "failed":
                reasons[o.reason] = reasons.get(o.reason, 0) + 1
        if reasons:
            why = ", ".join(f"{n} {reason}" for reason, n in sorted(reasons.items()))
            print(f"note: {label}: {sum(reasons.values())} of {r.summary['requests']} requests failed "
                  f"({why}) and are left out of the latency metrics", file=sys.stderr)


def _plot_runs(results: dict, out_dir: Path) -> None:
    from .plots import plot_run
    for path in plot_run(results, out_dir):
        print(f"wrote {path}", file=sys.stderr)


def _park_policies(text: str) -> list[str]:
    from tricut.models.dsu import PARK_POLICIES
    if text == "all":
        return list(PARK_POLICIES)
    out = text.split(",")
    for p in out:
        if p not in PARK_POLICIES:
            raise argparse.ArgumentTypeError(f"{p!r} is not a park policy; use all or a list of {', '.join(PARK_POLICIES)}")
    if len(set(out)) != len(out):
        raise argparse.ArgumentTypeError(f"{text!r} repeats a policy")
    return out


def session_mode(args) -> bool:
    """Sessions run through sim/fast/agentic.py: --sessions, --agentic, or a trace with a
    prefix cache (each request a one-turn session)."""
    on = args.sessions is not None or args.agentic is not None or args.prefix_cache_tokens > 0
    if not on:
        for flag, value in (("--park-policy", args.park_policy), ("--restore-lead", args.restore_lead)):
            if value is not None:
                raise InputError(f"{flag} applies to agentic sessions (--sessions or --agentic), and there are none")
        if args.tiers != "none":
            raise InputError("--tiers applies to agentic sessions (--sessions, --agentic) or a prefix cache")
        if args.prefix_spill is not None:
            raise InputError("--prefix-spill applies to a prefix cache (--prefix-cache-tokens N > 0)")
        return False
    if args.prefix_spill is not None and args.prefix_cache_tokens == 0:
        raise InputError("--prefix-spill applies to a prefix cache (--prefix-cache-tokens N > 0)")
    flags = [("--concurrency", args.concurrency)]
    if args.trace is None:           # a trace with a prefix cache keeps its own --limit and format
        flags += [("--limit", args.limit), ("--trace-format", args.trace_format)]
    for flag, value in flags:
        if value is not None:
            raise InputError(f"{flag} does not apply to sessions")
    if args.prefill == "chunked":
        raise InputError("sessions run with --prefill disaggregated or colocated, not chunked")
    if args.restore_lead is not None and args.park_policy != "park-early":
        raise InputError("--restore-lead applies to --park-policy park-early")
    return True


def _sessions_of(args, model):
    from ..fast.sessions import agentic, check_sessions, parse_agentic_spec, read_sessions, sessions_from_requests
    if args.sessions is not None:
        sessions = read_sessions(args.sessions)
    elif args.agentic is not None:
        spec = parse_agentic_spec(args.agentic)
        if spec.get("max_context") is None:
            spec["max_context"] = model.max_context
        sessions = agentic(**spec)
    else:
        sessions = sessions_from_requests(workload_of(args))
    check_sessions(sessions, model.max_context)
    return sessions


def _agentic_options(args, policy):
    from tricut.models.tiers import load_tiers

    from ..fast.agentic import AgenticOptions
    tiers = load_tiers(args.tiers)
    spill = None
    if args.prefix_spill is not None:
        spill = tiers.tier(args.prefix_spill)
        if spill is None:
            raise InputError(f"--prefix-spill {args.prefix_spill}: the tier config {args.tiers!r} has no "
                             f"{args.prefix_spill} tier")
    return AgenticOptions(policy, g2=tiers.g2, g3=tiers.g3, restore_lead_s=args.restore_lead,
                          prefix_cache_tokens=args.prefix_cache_tokens, prefix_spill=spill)


def prepare_sessions(args, policies):
    """Every check of a session run before it runs: ``(setup, sessions, {policy: options})``."""
    setup = setup_of(args)
    sessions = _sessions_of(args, setup.model)
    options = {p: _agentic_options(args, p) for p in policies}
    setup.step_model(args.cuts)
    setup.dsu_params()
    return setup, sessions, options


def _session_results(args, setup, sessions, options) -> dict:
    from ..fast.agentic import simulate_sessions
    sm, dsu = setup.step_model(args.cuts), setup.dsu_params()
    return {p: simulate_sessions(sessions, sm, dsu, o, seed=args.seed, prefill=args.prefill,
                                 ttft_slo_s=args.ttft_slo, tpot_slo_s=args.tpot_slo)
            for p, o in options.items()}


def _run_sessions(args, policies) -> int:
    """simulate / compare --park-policies over sessions: one column per park policy."""
    setup, sessions, options = prepare_sessions(args, policies)
    from .plots import AGENTIC_FIGURES
    with _plot_dir(args.plot, AGENTIC_FIGURES):
        results = _session_results(args, setup, sessions, options)
        _emit(args, {p: r.summary for p, r in results.items()}, session_keys=True)
        if args.plot:
            from .plots import plot_agentic
            for path in plot_agentic(results, args.plot):
                print(f"wrote {path}", file=sys.stderr)
    return 0


def cmd_simulate(args) -> int:
    if session_mode(args):
        return _run_sessions(args, [args.park_policy or "keep"])
    label = "+".join(args.cuts) if args.cuts else "baseline"
    setup, reqs = _prepare(args, [args.cuts])
    with _plot_dir(args.plot, RUN_FIGURES):
        result = _run(args, setup, reqs, args.cuts, label)
        _emit(args, {label: result.summary})
        _failure_notes({label: result})
        if args.plot:
            _plot_runs({label: result}, args.plot)
    return 0


def _ablation(gpu) -> list[tuple[str, tuple]]:
    """compare's runs: without a CDU the cdu run is left out and the others say so."""
    runs = []
    for label, cuts in ABLATION:
        if "cdu" in cuts and not gpu.has_cdu:
            cuts = tuple(c for c in cuts if c != "cdu")
            label = label + " (no CDU)" if cuts else label
            if not cuts:
                continue
        runs.append((label, cuts))
    return runs


def cmd_compare(args) -> int:
    if args.park_policies is not None:
        if args.sessions is None and args.agentic is None:
            raise InputError("--park-policies compares park policies over sessions: give --sessions or --agentic")
        if args.park_policy is not None:
            raise InputError("--park-policies runs every policy it lists; drop --park-policy")
        args.cuts = CUTS
        session_mode(args)
        return _run_sessions(args, args.park_policies)
    if session_mode(args):
        raise InputError("compare over sessions compares park policies: add --park-policies (e.g. all)")
    runs = _ablation(load_gpu(args.gpu))
    setup, reqs = _prepare(args, [cuts for _, cuts in runs])
    with _plot_dir(args.plot, RUN_FIGURES):
        results = {label: _run(args, setup, reqs, cuts, label) for label, cuts in runs}
        _emit(args, {k: v.summary for k, v in results.items()})
        _failure_notes(results)
        if args.plot:
            _plot_runs(results, args.plot)
    return 0


def _bench_check(args) -> None:
    """bench's own refusals: it replays no trace and sets its own arrival rates, and every
    round measures TPOT, which needs two output tokens."""
    for flag, value in (("--trace", args.trace), ("--trace-format", args.trace_format),
                        ("--limit", args.limit), ("--rate", args.rate), ("--rate-scale", args.rate_scale)):
        if value is not None:
            raise InputError(f"bench does not take {flag}: its three rounds are synthetic requests "
                             "(--prompt-tokens, --output-tokens) with arrivals of their own "
                             "(docs/system-model.md); replay a trace with simulate or compare")
    spec = args.output_tokens
    low = spec if isinstance(spec, int) else spec[1]     # N, uniform's LO or lognormal's MEDIAN
    if low < 2:
        raise InputError(f"bench needs --output-tokens of at least 2 (N, uniform LO or lognormal MEDIAN): "
                         f"its rounds measure TPOT, the time per output token after the first; got {low:g}")
    args.rate, args.rate_scale = math.inf, 1.0       # each round sets its own


def cmd_bench(args) -> int:
    """The source's three-round method (docs/system-model.md)."""
    _bench_check(args)
    model, gpu, cuts, seed = load_model(args.model), load_gpu(args.gpu), args.cuts, args.seed
    setup = setup_of(args)
    lengths = lambda n: synthetic(n, math.inf, args.prompt_tokens, args.output_tokens, seed)  # noqa: E731
    # every round's requests (their lengths) are checked before the first round runs
    single = lengths(1)
    if single[0].output_tokens < 2:
        raise InputError(f"bench's round-1 request drew 1 output token (--seed {seed}); TPOT needs 2: "
                         "use another --seed or a larger --output-tokens")
    sizes = [2**k for k in range((2 * args.slots).bit_length())]          # 1, 2, 4, ... <= 2 slots
    n_long = max(4 * args.slots, args.synthetic or 0)
    rounds = {n: lengths(n) for n in sorted({*sizes, n_long})}
    for reqs in [single, *rounds.values()]:
        setup.check(reqs, cuts)
    with _plot_dir(args.plot, BENCH_FIGURES):
        return _bench_rounds(args, setup, model, gpu, single, sizes, rounds, n_long)


def _bench_rounds(args, setup, model, gpu, single, sizes, rounds, n_long) -> int:
    cuts, seed = args.cuts, args.seed
    out = {}
    # Round 1: single request vs the roofline ceiling at its mean context.
    r1 = _run(_sub(args), setup, single, cuts, "single")
    req = single[0]
    ceiling = roofline(model, gpu, args.kv_dtype, req.prompt_tokens + req.output_tokens // 2, 1,
                       tp=args.tp).request_tokens_per_s_ceiling
    tps = 1 / r1.summary["tpot_p50_s"]
    out["single_request"] = {"tokens_per_s": tps, "ceiling_tokens_per_s": ceiling,
                             "fraction_of_ceiling": tps / ceiling}
    # Round 2: concurrency sweep, all requests at t=0.
    sweep = []
    for n in sizes:
        r = _run(_sub(args), setup, rounds[n], cuts, f"c{n}")
        sweep.append({"concurrency": n, "tokens_per_s": r.summary["tokens_per_s"],
                      "tpot_p99_s": r.summary["tpot_p99_s"],
                      "mean_output_tokens": r.summary["output_tokens"] / r.summary["requests"]})
    best = max(s["tokens_per_s"] for s in sweep)
    sweet = next(s for s in sweep if s["tokens_per_s"] >= 0.9 * best)
    out["concurrency_sweep"] = sweep
    out["sweet_spot"] = sweet["concurrency"]
    # Round 3: long stability run at 80 % of the sweet spot's request rate: the lengths checked
    # above, Poisson arrivals at that rate (seeded as a synthetic workload's).
    rate = 0.8 * sweet["tokens_per_s"] / sweet["mean_output_tokens"]
    arrivals = synthetic(n_long, rate, 1, 2, seed)
    long = [replace(r, arrival_s=a.arrival_s) for r, a in zip(rounds[n_long], arrivals)]
    r3 = _run(_sub(args), setup, long, cuts, "stability")
    ends = r3.step_end_s
    half = ends[-1] / 2 if len(ends) else 0
    batch = r3.batch_sizes
    first = batch[ends <= half].sum() / half if half else 0.0
    second = batch[ends > half].sum() / (ends[-1] - half) if half else 0.0
    out["stability"] = {"requests": n_long, "rate_rps": rate, "tokens_per_s_first_half": float(first),
                        "tokens_per_s_second_half": float(second),
                        "drift": float(second / first - 1) if first else 0.0,
                        "kv_tokens_leaked": r3.summary["kv_tokens_leaked"],
                        "slots_in_use_at_end": r3.summary["slots_in_use_at_end"],
                        "failed": r3.summary["failed"],
                        "all_accounted": len(r3.request_times) + r3.summary["failed"] == n_long}
    if args.plot:
        from .plots import plot_sweep
        p = plot_sweep([s["concurrency"] for s in sweep], {"+".join(cuts) or "baseline":
                                                          [s["tokens_per_s"] for s in sweep]},
                       args.plot / BENCH_FIGURES[0], sweet["concurrency"])
        print(f"wrote {p}", file=sys.stderr)
    if args.json:
        print(json.dumps(_defined(out), indent=2, allow_nan=False))
        return 0
    s1 = out["single_request"]
    print(f"round 1  single request: {s1['tokens_per_s']:.1f} tokens/s = "
          f"{100 * s1['fraction_of_ceiling']:.1f} % of the roofline ceiling {s1['ceiling_tokens_per_s']:.1f}")
    print("round 2  concurrency sweep:")
    for s in sweep:
        mark = "  <- sweet spot" if s is sweet else ""
        print(f"         {s['concurrency']:5d} requests  {s['tokens_per_s']:10.1f} tokens/s  "
              f"TPOT p99 {s['tpot_p99_s'] * 1e3:8.3f} ms{mark}")
    st = out["stability"]
    print(f"round 3  stability: {st['requests']} requests at {st['rate_rps']:.2f} req/s; throughput drift "
          f"{100 * st['drift']:+.1f} %; KV tokens leaked {st['kv_tokens_leaked']}; slots in use at end "
          f"{st['slots_in_use_at_end']}; failed {st['failed']}; all accounted: {st['all_accounted']}")
    return 0


def _sub(args, **changes):
    ns = argparse.Namespace(**vars(args))
    ns.trace = None
    ns.no_progress = True
    for k, v in changes.items():
        setattr(ns, k, v)
    return ns


def add_commands(sub) -> None:
    p = sub.add_parser("simulate", help="simulate decode serving a workload, with the cuts on or off",
                       description="Event-driven decode simulation at real sizes: requests arrive (open "
                                   "loop, or --concurrency closed-loop clients), are prefilled (--prefill: a "
                                   "separate pool, colocated batches or chunks), batched by the DSU golden model "
                                   "and decoded step by step; prints latency, throughput, HBM and L2 figures. "
                                   "Definitions: docs/metrics.md; the model: docs/system-model.md.")
    one_line_argparse(p)
    _common(p)
    p.set_defaults(func=cmd_simulate)
    p = sub.add_parser("compare", help="ablation: baseline, each cut alone, all three",
                       description="Runs the same workload five times (baseline, te, cdu, dsu, all three) "
                                   "and prints one column each.")
    one_line_argparse(p)
    _common(p, with_cuts=False)
    p.add_argument("--park-policies", type=_park_policies, metavar="LIST",
                   help="over sessions (--sessions, --agentic): one column per park policy, all cuts on: "
                        "'all' or a comma list of keep, park, park-early, drop")
    p.set_defaults(func=cmd_compare)
    p = sub.add_parser("bench", help="the source's three-round benchmark method",
                       description="Round 1: one request vs the roofline ceiling; round 2: concurrency "
                                   "sweep with the sweet spot marked (first concurrency within 90 %% of the "
                                   "best throughput); round 3: a long Poisson run at 80 %% of that rate, "
                                   "checking throughput drift and KV accounting leaks. With --concurrency "
                                   "every round runs that many closed-loop clients. The rounds are synthetic "
                                   "(--prompt-tokens, --output-tokens of at least 2) with arrivals of their "
                                   "own: --trace, --limit, --rate and --rate-scale are refused.")
    one_line_argparse(p)
    _common(p, bench=True)
    p.set_defaults(func=cmd_bench)
