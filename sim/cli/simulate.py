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

from ..fast import run as fast_run
from ..fast.run import ADMISSION, MAX_SLOTS, MAX_SYNTHETIC, OPTIONS, UNIT_FIELDS, RunOptions, cuts_label, prepare
from ..fast.run import defined as _defined
from ..fast.setup import ServingSetup
from ..fast.stacks import DEFAULT_STACK, PREFILL_MODES, stack_names
from ..fast.timing import CUTS
from ..fast.workload import TRACE_FORMATS, synthetic
from ..options import given_on_command_line
from .errors import InputError, argparse_type, one_line_argparse
from .plots import BENCH_FIGURES, ENERGY_FIGURE, RUN_FIGURES, prepare_out_dir, remove_created

__all__ = ["add_commands", "simulate_parser", "prepared_run", "run_options", "workload_of", "setup_of",
           "session_mode", "UNIT_FIELDS"]

KEY_COLUMNS = ("requests", "output_tokens", "duration_s", "tokens_per_s", "ttft_p50_s", "ttft_p99_s",
               "tpot_p50_s", "tpot_p99_s", "itl_p99_s", "hbm_gbps_mean", "hbm_gbps_peak",
               "l2_hit_rate", "min_step_over_floor")
ABLATION = (("baseline", ()), ("te", ("te",)), ("cdu", ("cdu",)), ("dsu", ("dsu",)),
            ("te+cdu+dsu", ("te", "cdu", "dsu")))


def _type(name: str):
    """The argparse ``type`` of option ``name``: its parser in :class:`RunOptions`
    (``sim/fast/run.py``), the one a sweep's grid values go through too."""
    return argparse_type(OPTIONS[name].parse)


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
    p.add_argument("--restore-lead", type=_type("restore_lead"), metavar="SECONDS",
                   help="park-early: start the restore this long before the tool returns (default: the "
                        "restore's own time)")
    p.add_argument("--prefix-cache-tokens", type=_type("prefix_cache_tokens"), default=0, metavar="N",
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
    p.add_argument("--tp", type=_type("tp"), default=1, help="tensor-parallel GPUs (default: 1)")
    p.add_argument("--kv-dtype", choices=KV_DTYPES, default="bf16", help="KV cache format (default: bf16)")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--trace", type=Path, help="trace file: Mooncake .jsonl, Azure or Vidur .csv")
    src.add_argument("--synthetic", type=_type("synthetic"), metavar="N",
                     help=f"N synthetic requests, at most {MAX_SYNTHETIC:,} (default: 200)")
    if not bench:
        src.add_argument("--sessions", type=Path, metavar="FILE",
                         help="agentic sessions: a JSONL file of turns separated by tool-call gaps (docs/agentic.md)")
        src.add_argument("--agentic", metavar="SPEC",
                         help="synthetic agentic sessions, e.g. 'sessions=64,rate=0.5,turns=uniform:4:12,"
                              "gap=lognormal:5:1,system=2048,input=lognormal:32768:0.5,turn_input=uniform:512:4096,"
                              "output=lognormal:256:0.5,seed=0' (every key optional; docs/agentic.md)")
    p.add_argument("--trace-format", choices=tuple(TRACE_FORMATS), help="trace format (default: guessed)")
    p.add_argument("--limit", type=_type("limit"), help="use only the first N requests of the trace")
    p.add_argument("--rate", type=_type("rate"), default=None if bench else 10.0,
                   help="synthetic Poisson arrival rate, requests/s; 'inf' = all at t=0; open loop only "
                        "(refused with --concurrency, --trace, --sessions, --agentic) (default: 10)")
    p.add_argument("--rate-scale", type=_type("rate_scale"), default=None if bench else 1.0,
                   help="speed arrivals (synthetic or a trace's) up by this factor; open loop only (default: 1)")
    p.add_argument("--prompt-tokens", type=_type("prompt_tokens"), default=1024,
                   help="synthetic prompt lengths: N, uniform:LO:HI, lognormal:MEDIAN:SIGMA (default: 1024)")
    p.add_argument("--output-tokens", type=_type("output_tokens"), default=128,
                   help="synthetic output lengths (same forms; default: 128)")
    if with_cuts:
        p.add_argument("--cuts", type=_type("cuts"), default=CUTS,
                       help="which cuts are on: none, all, or a list of te,cdu,dsu (default: every cut the "
                            "GPU has; without a CDU, te,dsu and a note)")
    # choices listed adaptive (the default) first, as before
    p.add_argument("--policy", choices=POLICIES[::-1], default="adaptive",
                   help="CDU policy; needs the cdu cut (default: adaptive)")
    p.add_argument("--profile", choices=PROFILES, default="throughput-opt", help="DSU profile (default: throughput-opt)")
    p.add_argument("--slots", type=_type("slots"), default=64,
                   help=f"decode slots, at most {MAX_SLOTS:,} (default: 64)")
    p.add_argument("--max-batch", type=_type("max_batch"), default=64,
                   help=f"batch cap, at most {MAX_SLOTS:,} (default: 64)")
    p.add_argument("--ttft-slo", type=_type("ttft_slo"), help="TTFT SLO in seconds, for goodput")
    p.add_argument("--tpot-slo", type=_type("tpot_slo"), help="TPOT SLO in seconds, for goodput")
    p.add_argument("--degraded-at", type=_type("degraded_at"), metavar="SECONDS",
                   help="DSU degrades to host scheduling from this simulated time on (a finite number >= 0; "
                        "needs the dsu cut)")
    p.add_argument("--stack", choices=stack_names(), default=DEFAULT_STACK,
                   help="software-stack profile: what a serving stack adds to the GPU's physics (host "
                        "time per step, its overlap with the GPU, CUDA-graph and launch gaps, the attention "
                        "kernel, all-reduce latency, how prefill shares the GPUs, what admission reserves of "
                        "a request's KV and whether it pre-empts); one of "
                        f"{', '.join(stack_names())}; values and sources: docs/fidelity.md (default: %(default)s)")
    p.add_argument("--prefill", choices=PREFILL_MODES,
                   help="how prefill shares the GPUs: disaggregated (a separate, uncontended pool), colocated "
                        "(whole prefill batches on the decode GPUs, pre-empting decode), chunked (prompt chunks "
                        "riding along in decode steps) (default: the stack's own mode)")
    p.add_argument("--concurrency", type=_type("concurrency"), metavar="C",
                   help="closed loop: C clients, each sending its next request when its previous one finished "
                        "(plus --think-time); arrival times (--rate, the trace's timestamps) are then ignored "
                        "(default: open loop)")
    p.add_argument("--think-time", type=_type("think_time"), default=0.0, metavar="SECONDS",
                   help="closed loop (needs --concurrency): a client's pause between a finished request and "
                        "its next (default: 0)")
    p.add_argument("--client-jitter", choices=ADMISSION, default="on",
                   help="closed loop (needs --concurrency): on, each client sends its first request at a "
                        "seeded random time within the time one request takes alone, so that the clients "
                        "drift apart as real load generators do; off, all at t = 0 (with fixed lengths they "
                        "then move in waves) (default: on)")
    p.add_argument("--energy", type=_type("energy"), metavar="FILE",
                   help="energy coefficients in sim/fast/energy.json's format (per GPU: board and static "
                        "power, pJ per HBM and L2 byte, per FLOP, per NVLink byte, host power; each with its "
                        "source) instead of the shipped ones (docs/energy.md)")
    p.add_argument("--admission", choices=ADMISSION, default="on",
                   help="on: a request is prefilled only when a decode slot and the KV its scheduler "
                        "reserves are free (the DSU and TensorRT-LLM: prompt + output tokens; vLLM: the "
                        "prompt and a watermark, pre-empting later when KV runs out), else it waits before "
                        "its prefill (in its TTFT), as vLLM's and TensorRT-LLM's schedulers admit; off: "
                        "every arrival is prefilled at once and then waits for a slot (the wait lands in "
                        "its first inter-token gap); not for sessions (default: on)")
    p.add_argument("--assume", type=_type("assume"), action="append", default=[], metavar="NAME=VALUE",
                   help="override one modelling assumption or one numeric parameter of the chosen stack "
                        "(repeatable), e.g. --assume gemv_bw_efficiency=0.8 --assume host_step_s=0.0005; "
                        "names and defaults: docs/system-model.md, docs/fidelity.md")
    if not bench:
        _agentic_flags(p)
    p.add_argument("--unit", type=_type("unit"), action="append", default=[], metavar="NAME=VALUE",
                   help="size one decode unit (repeatable): " + "; ".join(f"{k}: {v}" for k, v in UNIT_FIELDS.items())
                        + " (default: the GPU config's, 16 lanes)")
    p.add_argument("--seed", type=_type("seed"), default=0, help="random seed, an integer >= 0 (default: 0)")
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true",
                     help="print JSON instead of a table (an undefined metric is null)")
    fmt.add_argument("--csv", action="store_true",
                     help="print CSV instead of a table (an undefined metric is an empty cell)")
    p.add_argument("--plot", type=Path, metavar="DIR",
                   help="write PNG figures into DIR (created if missing; checked before the run)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")


def run_options(args) -> RunOptions:
    """The typed options of parsed flags (a flag the command does not take: its default); the
    flags given on the command line (``args.flags_given``, set by ``tricut``'s main) count as
    given whatever their values."""
    given = getattr(args, "flags_given", frozenset()) & OPTIONS.keys()
    return RunOptions(**{name: getattr(args, name) for name in OPTIONS if hasattr(args, name)},
                      given=frozenset(given))


def _notes(options: RunOptions) -> None:
    for note in options.notes:
        print(f"tricut: note: {note}", file=sys.stderr)


def workload_of(args):
    """:func:`tricut.sim.fast.run.workload_of` of parsed flags."""
    return fast_run.workload_of(run_options(args))


def setup_of(args) -> ServingSetup:
    """:func:`tricut.sim.fast.run.setup_of` of parsed flags."""
    return fast_run.setup_of(run_options(args))


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
    parser = simulate_parser()
    args = parser.parse_args(argv)
    args.flags_given = given_on_command_line(parser, argv)
    prepared = prepare(run_options(args))
    if prepare_only:
        return args, prepared.setup, None
    args.no_progress = True
    return args, prepared.setup, _defined(next(iter(prepared.run().values())).summary)


def _run(args, setup: ServingSetup, reqs, cuts, label):
    return setup.run(reqs, cuts, seed=args.seed, degraded_at_s=args.degraded_at,
                     progress=_progress(not args.no_progress, label),
                     ttft_slo_s=args.ttft_slo, tpot_slo_s=args.tpot_slo)


def _is_duration(key: str) -> bool:
    return (key.endswith("_s") and not key.endswith("per_s")) or key.endswith("_s_total")


#: a table row of durations in one unit, the largest its values allow: (below, unit, scale, digits)
DURATION_UNITS = ((1.0, "ms", 1e3, 1), (600.0, "s", 1.0, 2), (36000.0, "min", 1 / 60, 1),
                  (math.inf, "h", 1 / 3600, 2))


def _duration_unit(values) -> tuple[str, float, int]:
    """The unit of a row of durations (seconds): ms below 1 s, s below 10 min, min below 10 h,
    else h, chosen by the row's largest value so a row's cells compare at a glance."""
    top = max((abs(v) for v in values if isinstance(v, (int, float))), default=0.0)
    for below, unit, scale, digits in DURATION_UNITS:
        if top < below:
            return unit, scale, digits
    raise AssertionError(top)


def _fmt(key: str, value, unit: tuple[str, float, int] | None = None) -> str:
    if value is None:
        return "-"
    if isinstance(value, (int, float)) and ("bytes" in key):
        return f"{value / 1e9:,.2f} GB"
    if isinstance(value, (int, float)) and key.endswith("flops_saved"):
        return f"{value / 1e15:,.1f} PFLOP"
    if isinstance(value, float):
        if _is_duration(key):
            name, scale, digits = unit or _duration_unit([value])
            return f"{value * scale:,.{digits}f} {name}"
        if key in ("l2_hit_rate", "l2_reuse_rate") or key.endswith("utilisation"):
            return f"{100 * value:.1f} %"
        if key.startswith("power_w_"):
            return f"{value:,.0f} W"
        if key == "energy_j_per_token":
            return f"{value:,.4f} J"
        return f"{value:,.2f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def _fmt_row(key: str, values: list) -> list[str]:
    unit = _duration_unit(values) if _is_duration(key) else None
    return [_fmt(key, v, unit) for v in values]


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
                                    "dsu_utilisation", "mean_batch", "energy_j_per_token", "tokens_per_joule",
                                    "power_w_mean", "power_w_peak", "failed", "preemptions", "stack", "prefill_mode",
                                    "prefill_s_total", "concurrency"]
        if session_keys:
            keys = [k for k in keys if k != "concurrency"] + list(SESSION_COLUMNS)
        width = max(len(k) for k in keys)
        cells = [_fmt_row(k, [rows[lab][k] for lab in labels]) for k in keys]
        cols = [[row[j] for row in cells] for j in range(len(labels))]
        cw = [max(len(lab), *(len(c) for c in col)) for lab, col in zip(labels, cols)]
        print(" " * width + "  " + "  ".join(lab.rjust(w) for lab, w in zip(labels, cw)))
        for i, k in enumerate(keys):
            print(k.ljust(width) + "  " + "  ".join(col[i].rjust(w) for col, w in zip(cols, cw)))


#: the decode queue's p50, in TPOT p50s, beyond which a run is read as overloaded
OVERLOAD_QUEUE_STEPS = 10


def _change(before, after, key: str) -> str:
    a, b = before[key], after[key]
    unit = _duration_unit([a, b]) if _is_duration(key) else None
    text = f"{_fmt(key, a, unit)} -> {_fmt(key, b, unit)}"
    return text + (f" ({100 * (b / a - 1):+.1f} %)" if a else "")


def reading(summaries: dict[str, dict], max_batch: int) -> list[str]:
    """compare's closing lines: what the all-cuts column shows against the baseline, and
    whether the workload overloads the group (then the latencies measure a backlog)."""
    labels = list(summaries)
    base, last = summaries[labels[0]], summaries[labels[-1]]
    needed = ("tpot_p50_s", "tpot_p99_s", "tokens_per_s", "hbm_gbps_mean", "decode_queue_p50_s")
    if len(labels) < 2 or any(s.get(k) is None for s in (base, last) for k in needed):
        return []
    lines = [f"reading: {labels[-1]} against {labels[0]}",
             f"  TPOT p50 {_change(base, last, 'tpot_p50_s')}, p99 {_change(base, last, 'tpot_p99_s')}",
             f"  throughput {_change(base, last, 'tokens_per_s')} tokens/s; "
             f"HBM mean {_change(base, last, 'hbm_gbps_mean')} GB/s"]
    if base.get("energy_j_per_token") is not None and last.get("energy_j_per_token") is not None:
        lines.append(f"  energy {_change(base, last, 'energy_j_per_token')} per output token; mean power "
                     f"per GPU {_change(base, last, 'power_w_mean')} (docs/energy.md)")
    queue, step = base["decode_queue_p50_s"], base["tpot_p50_s"]
    load = f"  load: mean batch {base['mean_batch']:,.1f} of at most {max_batch:,}; decode queue p50 " \
           f"{_fmt('decode_queue_p50_s', queue)}"
    prefill = base.get("prefill_s_total") or 0.0
    if step and queue > OVERLOAD_QUEUE_STEPS * step:
        lines += [load + f", {queue / step:,.0f} decode steps:",
                  "  the workload overloads the group, and its latencies measure the backlog more "
                  "than the hardware;"]
        if base.get("duration_s") and prefill > 0.5 * base["duration_s"]:
            lines.append(f"  prefill holds the decode GPUs {100 * prefill / base['duration_s']:.0f} % of the run: "
                         "try --prefill disaggregated or a lower --rate-scale")
        else:
            lines.append("  try a lower --rate-scale (or --rate), or more GPUs (--tp)")
    else:
        lines.append(load + ": the group keeps up with this workload")
    return lines


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
    """:func:`tricut.sim.fast.run.session_mode` of parsed flags."""
    return fast_run.session_mode(run_options(args))


def _run_sessions(args, policies) -> int:
    """compare --park-policies over sessions: one column per park policy."""
    return _report_sessions(args, prepare(run_options(args), policies))


def _report_sessions(args, prepared) -> int:
    """A prepared run over sessions, run and printed: one column per park policy."""
    from .plots import AGENTIC_FIGURES
    with _plot_dir(args.plot, AGENTIC_FIGURES):
        results = prepared.run()
        _emit(args, {p: r.summary for p, r in results.items()}, session_keys=True)
        if args.plot:
            from .plots import plot_agentic
            for path in plot_agentic(results, args.plot):
                print(f"wrote {path}", file=sys.stderr)
    return 0


def cmd_simulate(args) -> int:
    options = run_options(args)
    prepared = prepare(options)
    _notes(options)
    if prepared.sessions is not None:
        return _report_sessions(args, prepared)
    label = cuts_label(options.cuts)
    with _plot_dir(args.plot, RUN_FIGURES + (ENERGY_FIGURE,)):
        results = prepared.run(progress=_progress(not args.no_progress, label))
        _emit(args, {k: r.summary for k, r in results.items()})
        _failure_notes(results)
        if args.plot:
            _plot_runs(results, args.plot)
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
    _notes(run_options(args))
    with _plot_dir(args.plot, RUN_FIGURES + (ENERGY_FIGURE,)):
        results = {label: _run(args, setup, reqs, cuts, label) for label, cuts in runs}
        _emit(args, {k: v.summary for k, v in results.items()})
        if not (args.json or args.csv):
            lines = reading({k: _defined(v.summary) for k, v in results.items()}, args.max_batch)
            print("\n" + "\n".join(lines) if lines else "", end="\n" if lines else "")
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


def cmd_bench(args) -> int:
    """The source's three-round method (docs/system-model.md)."""
    _bench_check(args)
    options = run_options(args)
    fast_run.refuse_watermark_with_the_dsu(options)
    model, gpu, cuts, seed = load_model(args.model), load_gpu(args.gpu), options.cuts, args.seed
    setup = fast_run.setup_of(options)
    _notes(options)
    args.cuts = cuts                  # the rounds' (the GPU's cuts by default)
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
