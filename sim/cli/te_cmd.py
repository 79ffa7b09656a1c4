"""`tricut te run`: the TE decode engine RTL on the user's vectors."""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path

import numpy as np

from tricut.models.config import KV_DTYPES

from .errors import InputError

__all__ = ["add_commands"]


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



def add_commands(sub) -> None:
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
