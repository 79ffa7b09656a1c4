"""`tricut dsu run`: the scheduler firmware on the DSU RTL cluster against its golden model.

Every bad input (flags, the requests or session file, the fault spec, a session that does not
fit the hardware's fields, a run that cannot fit its budget)
ends as one line ``tricut: error: ...`` and exit status 2 before any simulation. Exit 1: the
run did not verify (the RTL differs from the golden model, the run hit its cycle budget, or
with ``--faults-strict`` an injected hang did not fire); the one line says which.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import stat
import sys
import time
from pathlib import Path

from tricut.models.dsu import PARK_POLICIES, PROFILES
from tricut.models.jsonl import iter_jsonl_objects, stat_input_file

from ..options import Needs, refuse_inapplicable
from .errors import InputError, one_line_argparse
from .progress import LONG_RUN_S, StatusLine

__all__ = ["add_commands", "read_dsu_requests", "dsu_sessions", "session_counts",
           "MAX_REQUESTS_FILE_BYTES", "LONG_RUN_S", "ROUND_S", "PARK_EARLY_LEAD"]

#: a requests file larger than this is refused (65,536 requests of ~100 bytes fit easily)
MAX_REQUESTS_FILE_BYTES = 64 << 20

#: --round-s: the seconds one scheduling round stands for when a session file's (or the
#: generator's) arrivals and tool gaps become rounds. An assumption (a 20 ms decode step),
#: not a measurement
ROUND_S = 0.02
#: --round-s range (a shorter round turns a session's seconds into more rounds than the
#: hardware's 24-bit round counter holds long before the lower end)
ROUND_S_RANGE = (1e-6, 3600.0)
#: --restore-lead default under park-early, in rounds (lead 0 would be park)
PARK_EARLY_LEAD = 1

_REQUEST_FIELDS = {"id": 0, "prompt_tokens": None, "max_new_tokens": None, "arrival_step": 0,
                   "priority": 0}


def read_dsu_requests(path: Path):
    """JSONL, one request a line: ``prompt_tokens``, ``max_new_tokens`` (required), ``id``
    (default: the line's index), ``arrival_step`` (scheduling round, default 0), ``priority``
    (0..3, default 0). Every value must fit the hardware's field (``REQUEST_LIMITS`` in
    ``sim/harness/dsu.py``); errors name the file and line."""
    from tricut.models.dsu import RequestSpec

    from ..harness.dsu import MAX_REQUESTS, REQUEST_LIMITS

    path = Path(path)
    st = stat_input_file(path, "a requests file", InputError, pipe_ok=True)
    if stat.S_ISREG(st.st_mode) and st.st_size > MAX_REQUESTS_FILE_BYTES:
        raise InputError(f"{path}: {st.st_size:,} bytes, more than the "
                         f"{MAX_REQUESTS_FILE_BYTES >> 20} MiB a requests file may have "
                         f"(at most {MAX_REQUESTS:,} requests)")
    out, ids = [], set()
    for label, row in iter_jsonl_objects(path, InputError):
        unknown = set(row) - set(_REQUEST_FIELDS)
        if unknown:
            raise InputError(f"{label}: unknown field {sorted(unknown)[0]!r} (fields: "
                             f"{', '.join(_REQUEST_FIELDS)})")
        if len(out) >= MAX_REQUESTS:
            raise InputError(f"{label}: more than {MAX_REQUESTS:,} requests (request ids are "
                             f"16 bits)")
        values = {}
        for key, default in _REQUEST_FIELDS.items():
            value = row.get(key, len(out) if key == "id" else default)
            if value is None:
                raise InputError(f"{label}: missing field {key!r}")
            if isinstance(value, bool) or not isinstance(value, int):
                raise InputError(f"{label}: {key} must be an integer, got "
                                 f"{_short(json.dumps(value))}")
            lo, hi = REQUEST_LIMITS[key]
            if not lo <= value < hi:
                raise InputError(f"{label}: {key} out of range: {_short(str(value))} (must be "
                                 f"{lo}..{hi - 1:,}, the hardware's field)")
            values[key] = value
        if values["id"] in ids:
            raise InputError(f"{label}: request id {values['id']} appears twice")
        ids.add(values["id"])
        out.append(RequestSpec(values["id"], values["prompt_tokens"], values["max_new_tokens"],
                               values["arrival_step"], values["priority"]))
    if not out:
        raise InputError(f"{path}: no requests in the file")
    return out


def _rounds(seconds: float, round_s: float) -> int:
    """Seconds to whole rounds, rounded half up."""
    return math.floor(seconds / round_s + 0.5)


def dsu_sessions(sessions, round_s: float = ROUND_S):
    """The sessions of a session file or of the generator (``sim/fast/sessions.py``) as the
    golden model's (:class:`tricut.models.dsu.Session`): a session's first turn is request
    ``session id`` (priority 0) arriving in round ``arrival_s / round_s`` (rounded), with
    ``input_tokens`` as its prompt and ``output_tokens`` to decode; every later turn returns
    ``max(1, gap_s / round_s)`` rounds after the previous one ended, with ``input_tokens`` of
    new input and ``output_tokens`` to decode. Session ids are request ids: below 65,536.
    The turns' fields are checked against the hardware's by :func:`plan_dsu`."""
    from tricut.models.dsu import RequestSpec, Session, SessionTurn

    from ..harness.dsu import MAX_REQUESTS
    if len(sessions) > MAX_REQUESTS:
        raise InputError(f"{len(sessions):,} sessions: at most {MAX_REQUESTS:,} (a session's "
                         f"id is its first turn's request id, 16 bits)")
    out = []
    for x in sessions:
        if x.id >= MAX_REQUESTS:
            raise InputError(f"session {x.id}: the id must be below {MAX_REQUESTS:,} (it is "
                             f"the first turn's request id, 16 bits)")
        t0 = x.turns[0]
        first = RequestSpec(x.id, t0.input_tokens, t0.output_tokens,
                            _rounds(t0.gap_s, round_s), 0)
        turns = tuple(SessionTurn(max(1, _rounds(t.gap_s, round_s)), t.input_tokens,
                                  t.output_tokens) for t in x.turns[1:])
        out.append(Session(first, turns))
    return out


def session_counts(ended, moves) -> dict:
    """Outcome and move counts of a session run: turns completed and failed (by reason),
    moves and their tokens by kind."""
    failed: dict[str, int] = {}
    for o in ended:
        if o.status != "completed":
            failed[o.reason] = failed.get(o.reason, 0) + 1
    kinds = ("park", "restore", "drop")
    return {"turns_ended": len(ended),
            "completed": sum(o.status == "completed" for o in ended),
            "failed": sum(failed.values()), "failed_by_reason": dict(sorted(failed.items())),
            "tokens": sum(o.tokens for o in ended),
            "moves": {k: sum(m.kind == k for m in moves) for k in kinds},
            "moved_tokens": {k: sum(m.tokens for m in moves if m.kind == k) for k in kinds}}


def _short(text, limit=40):
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _synthetic(n, seed):
    import random

    from tricut.models.dsu import RequestSpec
    rng = random.Random(seed)
    return [RequestSpec(i, rng.randint(1, 8192), rng.randint(1, 12), rng.randint(0, 8),
                        rng.randint(0, 3)) for i in range(n)]


def _dur(seconds):
    seconds = max(0, int(round(seconds)))
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 7200:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds / 3600:.1f} h"


class Progress:
    """The run's status (:class:`~tricut.sim.cli.progress.StatusLine`: on a terminal one line
    rewritten in place, else a line every ~10 s): cycles, simulation rate, rounds against the
    golden schedule's, outcomes, and an ETA from the rounds' rate."""

    def __init__(self, stream, plan, label, tty=None):
        self.plan, self.label = plan, label
        self.line = StatusLine(stream, tty=tty)
        self.first = None            # (time, cycle, round) of the first report

    def start(self, text):
        self.line.note(f"[{self.label}] {text}")

    def __call__(self, st):
        now = time.monotonic()
        if self.first is None:
            self.first = (now, st["cycle"], st["round"])
        t1, c1, r1 = self.first
        dt = now - t1
        rate = (st["cycle"] - c1) / dt if dt > 0.2 else None
        rounds = self.plan.rounds
        eta = None
        if dt > 1 and st["round"] > r1 and not st.get("degraded"):
            eta = (rounds - st["round"]) * dt / (st["round"] - r1)
        elif rate and self.plan.estimate_cycles > st["cycle"]:
            eta = (self.plan.estimate_cycles - st["cycle"]) / rate
        parts = [f"cycle {st['cycle']:,}" + (f" ({rate:,.0f}/s)" if rate else ""),
                 f"round {st['round']:,}/{rounds:,}",
                 f"outcomes {st['outcomes']:,}/{st['requests']:,}"]
        if st.get("degraded"):
            parts.append("degraded: the host is taking over")
        if eta is not None:
            parts.append(f"ETA {_dur(eta)}")
        self.line.show(f"[{self.label}] " + ", ".join(parts), now=now)

    def close(self):
        self.line.close()


_SESSIONS = Needs("applies to sessions (--sessions or --agentic), and there are none",
                  lambda a: a.sessions is not None or a.agentic is not None)

#: Where dsu run's flags act (the rest act in every run): ``{dest: (Needs, ...)}``, refused
#: where they would not (``sim/options.py``, :func:`~tricut.sim.options.refuse_inapplicable`).
APPLIES = {
    "park_policy": (_SESSIONS,),
    "round_s": (_SESSIONS,),
    "restore_lead": (_SESSIONS, Needs("applies to --park-policy park-early",
                                      lambda a: a.park_policy == "park-early")),
    "faults_strict": (Needs("needs --faults (it makes a fault that cannot fire an error)",
                            lambda a: a.faults is not None),),
}


def cmd_dsu_run(args) -> int:
    from ..harness.dsu import MAX_REQUESTS, parse_faults, plan_dsu, run_plan
    from ..harness.waves import WaveError, parse_wave_args

    # -- everything checked before any work ----------------------------------------------
    refuse_inapplicable(args, APPLIES)
    wave = parse_wave_args(args.wave, args.wave_window)
    if wave is not None and args.sim == "verilator":
        from ..harness.dsu import verilator_waves_supported
        if not verilator_waves_supported():
            raise InputError("--wave with --sim verilator: run_cocotb in this checkout cannot "
                             "record waves yet; use --sim amaranth")
    if args.max_cycles is not None and args.max_cycles < 1:
        raise InputError(f"--max-cycles must be at least 1, not {args.max_cycles}")
    sessions, policy, lead, round_s = None, "keep", 0, None
    if args.sessions is not None or args.agentic is not None:
        sessions, policy, lead, round_s = _session_workload(args)
        reqs = []
    if sessions is None and args.requests is not None:
        reqs = read_dsu_requests(args.requests)
    elif sessions is None:
        n = 8 if args.synthetic is None else args.synthetic
        if not 1 <= n <= MAX_REQUESTS:
            raise InputError(f"--synthetic must be 1..{MAX_REQUESTS:,} (request ids are 16 "
                             f"bits), not {n}")
        reqs = _synthetic(n, args.seed)
    faults = parse_faults(args.faults) if args.faults else None
    try:
        plan = plan_dsu(reqs, args.profile, cores=args.cores, faults=faults, sim=args.sim,
                        n_slots=args.slots, seed=args.seed, max_cycles=args.max_cycles,
                        faults_strict=args.faults_strict,
                        max_seconds=None if args.allow_long else LONG_RUN_S,
                        sessions=sessions, park_policy=policy, lead=lead)
    except ValueError as e:
        msg = str(e)
        if args.allow_long or "allowed" not in msg:
            raise InputError(_flags(msg)) from None
        raise InputError(msg + " (--allow-long runs it anyway"
                         + ("; --sim verilator is faster" if args.sim == "amaranth" else "")
                         + ")") from None
    if wave is not None and wave.start >= plan.max_cycles:
        raise WaveError(f"--wave-window {wave.start}:{'' if wave.end is None else wave.end}: "
                        f"starts after the run's cycle budget ({plan.max_cycles:,} cycles)")

    # -- the run ---------------------------------------------------------------------------
    progress = Progress(sys.stderr, plan, f"dsu {args.sim}")
    what = f"{len(reqs):,} requests" if sessions is None else \
        f"{len(sessions):,} sessions ({_n_turns(sessions):,} turns, {policy})"
    progress.start(f"{what}, {plan.rounds:,} rounds in the golden "
                   f"schedule, about {plan.estimate_cycles:,} cycles "
                   f"(≈{_dur(plan.estimate_seconds())}); starting the simulator"
                   + (" (a first Verilator build takes 1-3 min)"
                      if args.sim == "verilator" else ""))
    with progress.line.ticking():       # the status through the build and the boot too
        result = run_plan(plan, progress=progress, wave=wave)

    # -- report ----------------------------------------------------------------------------
    summary = None
    if sessions is not None:
        summary = {"sessions": len(sessions), "turns": _n_turns(sessions), "park_policy": policy,
                   "restore_lead_rounds": lead, "round_s": round_s,
                   "rtl": session_counts(result.ended, result.moves),
                   "golden": session_counts(plan.sessions["ended"], plan.sessions["moves"])}
    if args.json:
        out = result.to_json()
        out["faults_requested"] = [str(f) for f in plan.faults]
        if summary is not None:
            out["sessions"] = summary
        print(json.dumps(out, indent=2))
    else:
        _print_text(result, plan, summary)
    if result.budget_exhausted:
        got, want = (len(result.outcomes), len(reqs)) if sessions is None else \
            (len(result.ended), len(plan.sessions["ended"]))
        print(f"tricut: error: stopped at the cycle budget ({result.max_cycles:,} cycles, "
              f"--max-cycles) in round {result.counters.get('round', '?')} of "
              f"{plan.rounds:,}, {got:,} of {want:,} outcomes: the run "
              f"is incomplete, not compared; raise --max-cycles", file=sys.stderr)
        return 1
    if result.differences:
        print(f"tricut: error: DSU RTL differs from the golden model: {result.differences[0]}"
              + (f" (+{len(result.differences) - 1} more)" if len(result.differences) > 1
                 else ""), file=sys.stderr)
        return 1
    if args.faults_strict and result.faults_not_fired:
        f, why = result.faults_not_fired[0]
        print(f"tricut: error: fault {f} did not fire: {why} [--faults-strict]",
              file=sys.stderr)
        return 1
    if not args.json:
        print("RTL == golden model: every round's batch and every outcome" if sessions is None
              else "RTL == golden model: every round's batch, every outcome and every move")
    return 0


def _n_turns(sessions):
    return sum(1 + len(x.turns) for x in sessions)


def _session_workload(args):
    """``(sessions, park policy, lead in rounds, seconds per round)`` of ``--sessions`` /
    ``--agentic`` and their flags, every check made."""
    from ..fast.sessions import agentic, parse_agentic_spec, read_sessions
    from ..harness.dsu import MAX_REQUESTS, REQUEST_LIMITS
    policy = args.park_policy or "keep"
    lead = args.restore_lead if args.restore_lead is not None else \
        PARK_EARLY_LEAD if policy == "park-early" else 0
    round_s = ROUND_S if args.round_s is None else args.round_s
    if args.sessions is not None:
        found = read_sessions(args.sessions)
    else:
        spec = parse_agentic_spec(args.agentic)
        if spec["n_sessions"] > MAX_REQUESTS:
            raise InputError(f"--agentic: sessions={spec['n_sessions']:,}: at most "
                             f"{MAX_REQUESTS:,} (a session's id is a 16-bit request id)")
        if spec.get("max_context") is None:    # a context the hardware's fields hold
            spec["max_context"] = REQUEST_LIMITS["prompt_tokens"][1] - 1
        found = agentic(**spec)
    return dsu_sessions(found, round_s), policy, lead, round_s


def _non_negative_rounds(text):
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of rounds") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be a number of rounds >= 0, not {value}")
    return value


def _round_seconds(text):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    lo, hi = ROUND_S_RANGE
    if not math.isfinite(value) or not lo <= value <= hi:
        raise argparse.ArgumentTypeError(f"must be a number of seconds in {lo:g}..{hi:g}, "
                                         f"not {text}")
    return value


#: a session's fields in the harness's messages -> where they come from in a session file
_SESSION_FIELDS = {"prompt_tokens": "input_tokens", "max_new_tokens": "output_tokens",
                   "new_tokens": "input_tokens", "arrival_step": "arrival_s / --round-s",
                   "gap": "gap_s / --round-s"}


def _flags(msg):
    """Name the CLI flags in the harness's messages (and a session field's source)."""
    m = re.match(r"session \d+ turn \d+: (\w+) must", msg)
    if m and m[1] in _SESSION_FIELDS:
        return f"{msg} [{_SESSION_FIELDS[m[1]]}]"
    for name, flag in (("n_slots", "--slots"), ("seed", "--seed"), ("cores", "--cores"),
                       ("max_cycles", "--max-cycles"), ("lead", "--restore-lead")):
        if msg.startswith(name + " "):
            return flag + msg[len(name):]
    return msg


def _print_text(result, plan, summary=None):
    for rnd, batch in enumerate(result.batches):
        if batch:
            print(f"round {rnd:4d}: " + "  ".join(f"s{d.slot}:r{d.request}@{d.seq_len}"
                                                  for d in batch))
    if summary is None:
        print("outcomes:")
        for rid, o in sorted(result.outcomes.items()):
            print(f"  request {rid}: {o.status}, {o.tokens} tokens"
                  + (f" ({o.reason})" if o.reason else ""))
    else:
        _print_sessions(result, summary)
    lat = sorted(x["cycles"] for x in result.latencies)
    if lat:
        print(f"scheduler latency per round: median {lat[len(lat) // 2]} cycles "
              f"({lat[len(lat) // 2] / 1.2:.0f} ns at 1.2 GHz), max {lat[-1]} cycles")
    if plan.faults:
        print(f"faults: {len(plan.faults)} requested, {len(result.faults_fired)} fired"
              + (f" ({', '.join(result.faults_fired)})" if result.faults_fired else ""))
        if result.faults_not_fired:
            print(f"faults not fired ({len(result.faults_not_fired)}): "
                  + "; ".join(f"{f}: {why}" for f, why in result.faults_not_fired))
    c = result.counters
    print(f"firmware {result.firmware_bytes} bytes, boot {result.boot_cycles:,} cycles, "
          f"{result.cycles:,} cycles, {result.rounds_rtl} rounds scheduled by the firmware"
          + (f", degraded at cycle {result.degraded_cycle:,} (the host scheduled the rest)"
             if result.degraded_cycle is not None else "")
          + (f"; rollbacks {c.get('rollbacks', 0)}, timeouts {c.get('timeouts', 0)}"
             if plan.faults else ""))
    if result.wave:
        print(f"waves: {result.wave}")


def _print_sessions(result, summary):
    print("outcomes (every turn, in stream order):")
    for o in result.ended:
        print(f"  round {o.step:4d}: request {o.request}: {o.status}, {o.tokens} tokens"
              + (f" ({o.reason})" if o.reason else ""))
    print("moves:")
    for m in result.moves:
        print(f"  round {m.round:4d}: {m.kind} request {m.request} (slot {m.slot}), "
              f"{m.tokens} tokens")
    run = "RTL run" if result.degraded_cycle is None else \
        f"RTL run (the host from round {result.rounds_rtl})"
    for label, c in ((run, summary["rtl"]), ("golden model", summary["golden"])):
        failed = ", ".join(f"{n} {why}" for why, n in c["failed_by_reason"].items())
        mv = c["moves"]
        print(f"{label}: {c['turns_ended']} turns ended: {c['completed']} completed, "
              f"{c['failed']} failed" + (f" ({failed})" if failed else "")
              + f"; moves: {mv['park']} park, {mv['restore']} restore, {mv['drop']} drop")
    print(f"sessions: {summary['sessions']} ({summary['turns']} turns), park policy "
          f"{summary['park_policy']}"
          + (f", restore lead {summary['restore_lead_rounds']} rounds"
             if summary["park_policy"] == "park-early" else "")
          + f", {summary['round_s']:g} s a round")


def add_commands(sub) -> None:
    dsu = sub.add_parser("dsu", help="DSU: the scheduler firmware on the RTL cluster, checked against its golden model",
                         description="Decoding Scheduler Unit (docs/dsu.md, docs/dsu-scheduler.md).")
    one_line_argparse(dsu)
    dsu_sub = dsu.add_subparsers(dest="dsu_command", metavar="SUBCOMMAND", required=True)
    p = dsu_sub.add_parser(
        "run", help="run the firmware + arbiter on requests and compare with the golden model",
        description="Builds the scheduler firmware, runs it on the DSU cluster RTL against scripted "
                    "completions and injected faults, prints every round's batch, every request's outcome "
                    "and the scheduler latency, and exits 1 on any difference from models/dsu.py. "
                    "--requests: JSONL with prompt_tokens, max_new_tokens and optional id, arrival_step "
                    "(round), priority (0..3). --sessions/--agentic: agentic sessions, parked between "
                    "turns by --park-policy; batches, every turn's outcome and every KV move are "
                    "compared. --faults: e.g. error:slot=3:step=5,timeout:slot=7:step=2,"
                    "hang:cycle=20000 (a fault that does not fire is reported; --faults-strict makes it an "
                    "error). Exit status: 0 RTL == golden model; 1 the run did not verify (a difference, "
                    "the cycle budget ran out, or a --faults-strict hang did not fire); 2 bad input, "
                    "refused before any simulation.")
    one_line_argparse(p)
    src = p.add_mutually_exclusive_group()
    src.add_argument("--requests", type=Path, metavar="FILE")
    src.add_argument("--synthetic", type=int, metavar="N",
                     help="N random small requests, 1..65,536 (default: 8)")
    src.add_argument("--sessions", type=Path, metavar="FILE",
                     help="agentic sessions: a session file (JSONL, one turn a line, the format "
                          "of tricut simulate --sessions, docs/agentic.md); a session's id is "
                          "its first turn's request id (below 65,536), its times become rounds "
                          "(--round-s); the host pushes restores and continues round by round "
                          "and every move is compared too")
    src.add_argument("--agentic", metavar="SPEC",
                     help="synthetic agentic sessions, e.g. sessions=4,rate=inf,turns=2,output=8,"
                          "input=64,turn_input=16,gap=0.1 (keys of tricut simulate --agentic; "
                          "max_context defaults to what the hardware's fields hold)")
    p.add_argument("--park-policy", choices=PARK_POLICIES,
                   help="sessions: what a parked session's KV does during its tool call: keep "
                        "(stays in HBM), park (moved to G2, restored when the tool returns), "
                        "park-early (restored --restore-lead rounds before it returns), drop "
                        "(freed; the next turn is a new request with the whole context) "
                        "(default: keep)")
    p.add_argument("--restore-lead", type=_non_negative_rounds, metavar="ROUNDS",
                   help="park-early only: the host asks for the restore this many scheduling "
                        f"rounds before the tool returns (rounds, not seconds; default: "
                        f"{PARK_EARLY_LEAD})")
    p.add_argument("--round-s", type=_round_seconds, metavar="SECONDS",
                   help="sessions: seconds one scheduling round stands for, to turn arrival_s "
                        "and gap_s into rounds (rounded; a gap is at least 1 round) "
                        f"(default: {ROUND_S:g}, an assumed 20 ms decode step)")
    p.add_argument("--profile", choices=PROFILES, default="throughput-opt")
    p.add_argument("--cores", type=int, choices=(1, 2, 3, 4), default=1)
    p.add_argument("--slots", type=int, default=8,
                   help="decode slots, 1..256 (default: 8; the Verilator build grows with it)")
    p.add_argument("--faults", help="fault spec (see above)")
    p.add_argument("--faults-strict", action="store_true",
                   help="a fault that cannot fire is an error: a step fault on a (step, slot) the "
                        "golden schedule never issues is refused before the run (exit 2), a hang "
                        "after the run's end fails it (exit 1)")
    p.add_argument("--sim", choices=("verilator", "amaranth"), default="verilator")
    p.add_argument("--seed", type=int, default=0, help="0..2^32-1 (default: 0)")
    p.add_argument("--max-cycles", type=int, metavar="N",
                   help="cycle budget of the simulation (default: about twice the estimate from "
                        "the golden schedule); a run that certainly needs more is refused up front")
    p.add_argument("--allow-long", action="store_true",
                   help=f"run even when the estimate exceeds {LONG_RUN_S // 60} minutes of "
                        "simulation")
    p.add_argument("--wave", metavar="FILE.vcd|FILE.fst", help="write the waveforms of the run")
    p.add_argument("--wave-window", metavar="START:END",
                   help="only cycles START..END in --wave (cycles from reset)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_dsu_run)
