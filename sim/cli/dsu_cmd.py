"""`tricut dsu run`: the scheduler firmware on the DSU RTL cluster against its golden model."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tricut.models.dsu import PROFILES
from tricut.models.jsonl import iter_jsonl_objects

from .errors import InputError

__all__ = ["add_commands", "read_dsu_requests"]


_REQUEST_FIELDS = {"id": 0, "prompt_tokens": None, "max_new_tokens": None, "arrival_step": 0, "priority": 0}


def read_dsu_requests(path: Path):
    """JSONL, one request a line: ``prompt_tokens``, ``max_new_tokens`` (required), ``id``
    (default: the line's index), ``arrival_step`` (scheduling round, default 0), ``priority``
    (0..3, default 0)."""
    from tricut.models.dsu import RequestSpec

    out, ids = [], set()
    for label, row in iter_jsonl_objects(path, InputError):
        unknown = set(row) - set(_REQUEST_FIELDS)
        if unknown:
            raise InputError(f"{label}: unknown field {sorted(unknown)[0]!r}")
        values = {}
        for key, default in _REQUEST_FIELDS.items():
            value = row.get(key, len(out) if key == "id" else default)
            if value is None:
                raise InputError(f"{label}: missing field {key!r}")
            if isinstance(value, bool) or not isinstance(value, int):
                raise InputError(f"{label}: {key} must be an integer, got {value!r}")
            low = 1 if key in ("prompt_tokens", "max_new_tokens") else 0
            if value < low or (key == "priority" and value > 3):
                raise InputError(f"{label}: {key} out of range: {value}")
            values[key] = value
        if values["id"] in ids:
            raise InputError(f"{label}: request id {values['id']} appears twice")
        ids.add(values["id"])
        out.append(RequestSpec(values["id"], values["prompt_tokens"], values["max_new_tokens"],
                               values["arrival_step"], values["priority"]))
    if not out:
        raise InputError(f"{path}: no requests in the file")
    return out


def cmd_dsu_run(args) -> int:
    import random

    from tricut.models.dsu import RequestSpec

    from ..harness.dsu import parse_faults, run_dsu

    if args.requests is not None:
        reqs = read_dsu_requests(args.requests)
    else:
        rng = random.Random(args.seed)
        reqs = [RequestSpec(i, rng.randint(1, 8192), rng.randint(1, 12), rng.randint(0, 8), rng.randint(0, 3))
                for i in range(args.synthetic or 8)]
    faults = parse_faults(args.faults) if args.faults else None
    result = run_dsu(reqs, args.profile, cores=args.cores, faults=faults, sim=args.sim,
                     n_slots=args.slots, seed=args.seed)
    if args.json:
        print(json.dumps(result.to_json(), indent=2))
    else:
        for rnd, batch in enumerate(result.batches):
            if batch:
                print(f"round {rnd:4d}: " + "  ".join(f"s{d.slot}:r{d.request}@{d.seq_len}" for d in batch))
        print("outcomes:")
        for rid, o in sorted(result.outcomes.items()):
            print(f"  request {rid}: {o.status}, {o.tokens} tokens" + (f" ({o.reason})" if o.reason else ""))
        lat = [x["cycles"] for x in result.latencies]
        if lat:
            lat.sort()
            print(f"scheduler latency per round: median {lat[len(lat) // 2]} cycles "
                  f"({lat[len(lat) // 2] / 1.2:.0f} ns at 1.2 GHz), max {lat[-1]} cycles")
        print(f"firmware {result.firmware_bytes} bytes, {result.cycles} cycles, "
              f"{result.rounds_rtl} rounds scheduled by the firmware"
              + (f", degraded at cycle {result.degraded_cycle}" if result.degraded_cycle is not None else ""))
    if result.differences:
        print(f"tricut: error: DSU RTL differs from the golden model: {result.differences[0]}"
              + (f" (+{len(result.differences) - 1} more)" if len(result.differences) > 1 else ""),
              file=sys.stderr)
        return 1
    if not args.json:
        print("RTL == golden model: every round's batch and every outcome")
    return 0



def add_commands(sub) -> None:
    dsu = sub.add_parser("dsu", help="DSU: the scheduler firmware on the RTL cluster, checked against its golden model",
                         description="Decoding Scheduler Unit (docs/dsu.md, docs/dsu-scheduler.md).")
    dsu_sub = dsu.add_subparsers(dest="dsu_command", metavar="SUBCOMMAND", required=True)
    p = dsu_sub.add_parser(
        "run", help="run the firmware + arbiter on requests and compare with the golden model",
        description="Builds the scheduler firmware, runs it on the DSU cluster RTL against scripted "
                    "completions and injected faults, prints every round's batch, every request's outcome "
                    "and the scheduler latency, and exits 1 on any difference from models/dsu.py. "
                    "--requests: JSONL with prompt_tokens, max_new_tokens and optional id, arrival_step "
                    "(round), priority (0..3). --faults: e.g. error:slot=3:step=5,timeout:slot=7:step=2,"
                    "hang:cycle=20000.")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--requests", type=Path, metavar="FILE")
    src.add_argument("--synthetic", type=int, metavar="N", help="N random small requests (default: 8)")
    p.add_argument("--profile", choices=PROFILES, default="throughput-opt")
    p.add_argument("--cores", type=int, choices=(1, 2, 3, 4), default=1)
    p.add_argument("--slots", type=int, default=8, help="decode slots (default: 8; the Verilator build grows with it)")
    p.add_argument("--faults", help="fault spec (see above)")
    p.add_argument("--sim", choices=("verilator", "amaranth"), default="verilator")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_dsu_run)
