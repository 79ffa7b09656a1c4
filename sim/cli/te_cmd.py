"""`tricut te run`: the TE decode engine RTL on the user's vectors.

Every bad input (flags, the vector file, the output and wave paths, a run too long to finish)
is refused before the simulation starts: one line ``tricut: error: ...`` and exit status 2.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import zipfile
from pathlib import Path

import numpy as np

from tricut.models.config import KV_DTYPES
from tricut.models.jsonl import stat_input_file
from tricut.models.te import ENGINES as TE_ENGINES
from tricut.models.te import LANES as TE_LANES
from tricut.sim.harness.waves import (WaveError, add_wave_arguments, atomic_output,
                                      check_output_file, check_window, one_line, parse_wave_args)

from .errors import InputError, one_line_argparse
from .progress import StatusLine
from .progress import duration_text as _duration

__all__ = ["add_commands", "path_arg", "DEFAULT_ENGINE"]

#: the engine ``tricut te run`` and ``tricut verilog te`` use without ``--engine``: the shipped
#: design (``rtl/te/pipelined_engine.py``, the one the fast model times); the library functions
#: (``sim.harness.te``, ``models.te``) keep their own defaults
DEFAULT_ENGINE = "pipelined"

#: what the engine takes (docs/te.md; models.te.validate_params, rtl/te/layouts.N_BITS)
HEAD_DIMS = (64, 128, 256)
MAX_G = 16
MAX_N = (1 << 20) - 1
#: a run estimated to take longer than this (simulation + build, up to the --max-cycles
#: budget when one is given) is refused unless --allow-long is given, as in dsu run
REFUSE_ESTIMATE_S = 3600
_F32_MAX = float(np.finfo(np.float32).max)




def path_arg(text: str) -> Path:
    """An argparse type: a path, not empty (``Path("")`` would silently be ``.``)."""
    if text == "" or "\0" in text:
        raise argparse.ArgumentTypeError("empty path" if text == "" else "NUL in the path")
    return Path(text)


def _cycles_arg(text: str) -> int:
    try:
        value = int(text.replace("_", "").replace(",", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of cycles") from None
    if not 1 <= value <= 10 ** 12:
        raise argparse.ArgumentTypeError(f"{value} is not in 1..10^12")
    return value


# ----------------------------------------------------------------------------------------------
# the vector file
# ----------------------------------------------------------------------------------------------
def _show(path) -> str:
    s = os.fspath(path)
    return s if s.isprintable() and s else repr(s)


def _read_header_any(fp, version):
    try:
        from numpy.lib._format_impl import _read_array_header     # numpy 2
    except ImportError:                                             # numpy 1.26
        from numpy.lib.format import _read_array_header
    return _read_array_header(fp, version)


def _npz_headers(path: Path) -> dict:
    """``{array name: (shape, dtype)}`` from the .npy headers inside the .npz, without loading
    any data (so a huge or pickled array is refused before it is read)."""
    fmt = np.lib.format
    out = {}
    with zipfile.ZipFile(path) as zf:
        for info in zf.infolist():
            name = info.filename[:-4] if info.filename.endswith(".npy") else info.filename
            with zf.open(info) as fp:
                version = fmt.read_magic(fp)
                if version == (1, 0):
                    shape, _, dtype = fmt.read_array_header_1_0(fp)
                elif version == (2, 0):
                    shape, _, dtype = fmt.read_array_header_2_0(fp)
                else:       # version 3.0 (utf-8 header): numpy's own reader
                    shape, _, dtype = _read_header_any(fp, version)
            out[name] = (tuple(shape), np.dtype(dtype))
    return out


def _dtype_problem(dtype: np.dtype) -> str | None:
    if dtype.hasobject:
        return "an object array (pickled Python objects are not read)"
    if dtype.kind == "c":
        return f"complex ({dtype}); the TE takes real values"
    if dtype.kind in "iub":
        return f"{dtype} ({'booleans' if dtype.kind == 'b' else 'integers'}); give float values"
    if dtype.kind != "f":
        return f"of dtype {dtype}"
    return None


def _first_index(mask) -> str:
    idx = np.argwhere(mask)[0]
    return "[" + ", ".join(str(int(i)) for i in idx) + "]"


_ZIP_ERRORS = (OSError, ValueError, zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, SyntaxError,
               RuntimeError, NotImplementedError, KeyError, OverflowError, MemoryError)


def _check_vector_file(path: Path) -> dict:
    """Validate the .npz from its headers alone (nothing loaded): q [G, head_dim], k and v
    [n, head_dim] real float arrays (float16/32/64) with head_dim in 64/128/256, G in 1..16,
    n in 0..2^20-1; optional scale, one real number. Returns the headers
    (``{name: (shape, dtype)}``); raises InputError (one line)."""
    p = _show(path)
    stat_input_file(path, "an .npz file", InputError, label=p)
    try:
        headers = _npz_headers(path)
    except _ZIP_ERRORS as e:
        why = one_line(e, 120) or type(e).__name__
        raise InputError(f"{p}: not a readable .npz file ({why})") from None
    for key in ("q", "k", "v"):
        if key not in headers:
            raise InputError(f"{p}: missing array {key!r} (needs q [G, d], k [n, d], v [n, d])")
    unknown = set(headers) - {"q", "k", "v", "scale"}
    if unknown:
        raise InputError(f"{p}: unknown array {sorted(unknown)[0]!r} (allowed: q, k, v, scale)")
    for key in ("q", "k", "v"):
        shape, dtype = headers[key]
        why = _dtype_problem(dtype)
        if why:
            raise InputError(f"{p}: {key} is {why}; q, k and v must be float16/32/64 arrays")
        if len(shape) != 2:
            raise InputError(f"{p}: {key} must be a 2-D float array, got shape {shape} "
                             f"({'q [G, head_dim]' if key == 'q' else key + ' [n, head_dim]'})")
    (G, d), (n, dk), vshape = headers["q"][0], headers["k"][0], headers["v"][0]
    if (n, dk) != vshape:
        raise InputError(f"{p}: k {(n, dk)} and v {vshape} differ in shape")
    if dk != d:
        raise InputError(f"{p}: q has head_dim {d} but k has {dk}")
    if d not in HEAD_DIMS:
        raise InputError(f"{p}: head_dim (q's second dimension) is {d}; the TE supports "
                         f"{', '.join(map(str, HEAD_DIMS))}")
    if not 1 <= G <= MAX_G:
        raise InputError(f"{p}: q has {G} query heads (G); the TE supports G in 1..{MAX_G}")
    if n > MAX_N:
        raise InputError(f"{p}: context length n = {n:,} is more than the descriptor's "
                         f"20-bit field holds ({MAX_N:,})")
    if "scale" in headers:
        shape, dtype = headers["scale"]
        if dtype.hasobject or dtype.kind not in "iuf" or int(np.prod(shape)) != 1:
            raise InputError(f"{p}: scale must be one real number, got "
                             f"{'an object array' if dtype.hasobject else f'{dtype} {shape}'}")
    return headers


def _load_vectors(path: Path, headers: dict, kv_dtype: str) -> dict:
    """Load the checked .npz and validate the values: q, k, v within the float32 range;
    inf/NaN in q (and in bf16 K/V; NaN in fp8 K/V) are allowed: the engine computes with them
    and flags ``nonfinite_in``; fp8 K/V refuse ±inf (E4M3 would saturate it silently), NVFP4
    K/V refuse inf and NaN (no encoding); scale finite in float32. Raises InputError."""
    p = _show(path)
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {k: data[k] for k in headers}
    except _ZIP_ERRORS as e:
        why = one_line(e, 120) or type(e).__name__
        raise InputError(f"{p}: not a readable .npz file ({why})") from None
    out = {}
    for key in ("q", "k", "v"):
        a = arrays[key]
        finite = np.isfinite(a)
        big = finite & (np.abs(a) > _F32_MAX) if a.dtype.itemsize > 4 else None
        if big is not None and big.any():
            raise InputError(f"{p}: {key}{_first_index(big)} = {float(a[big][0]):g} is outside "
                             "the float32 range")
        if key != "q" and not finite.all():
            nan = np.isnan(a)
            if kv_dtype == "nvfp4":
                raise InputError(f"{p}: {key} has {int((~finite).sum())} inf/NaN value(s) "
                                 f"(first at {key}{_first_index(~finite)}); NVFP4 has no inf/NaN "
                                 "encoding (bf16 K/V carries them)")
            if kv_dtype == "fp8" and (~finite & ~nan).any():
                at = _first_index(~finite & ~nan)
                raise InputError(f"{p}: {key} has ±inf (first at {key}{at}); E4M3 (fp8) has no "
                                 "inf and would saturate it to ±448 silently (NaN is kept; bf16 "
                                 "K/V carries inf)")
        out[key] = a.astype(np.float32)
    if "scale" in arrays:
        s = arrays["scale"].reshape(()).item()
        if not np.isfinite(s) or abs(float(s)) > _F32_MAX:
            raise InputError(f"{p}: scale must be a finite float32 number, got {s!r}")
        out["scale"] = float(s)
    return out


# ----------------------------------------------------------------------------------------------
# progress
# ----------------------------------------------------------------------------------------------
class Progress:
    """``progress(cycles)`` for :func:`run_te`: the run's status (cycles, rate, ETA) as a
    :class:`~tricut.sim.cli.progress.StatusLine` (``tty``: on a terminal, the default, one
    line rewritten in place at most twice a second; else a line every ~10 s); :meth:`done`
    clears it."""

    def __init__(self, total: int, stream=None, tty: bool = True):
        self.total = total
        self.line = StatusLine(stream, tty=tty, clock=lambda: time.monotonic())
        self.t_first = None
        self.c_first = 0

    def note(self, text: str) -> None:
        self.line.note(text)

    def __call__(self, cycles: int) -> None:
        now = time.monotonic()
        if self.t_first is None:
            self.t_first, self.c_first = now, cycles
            return
        rate = (cycles - self.c_first) / max(now - self.t_first, 1e-9)
        eta = _duration((self.total - cycles) / rate) if rate > 0 else "?"
        pct = 100 * cycles / self.total
        self.line.show(f"te run: {cycles:,} / {self.total:,} cycles ({pct:.1f} %), "
                       f"{rate:,.0f} cycles/s, ETA {eta}", now=now)

    def done(self) -> None:
        self.line.close()


# ----------------------------------------------------------------------------------------------
# the command
# ----------------------------------------------------------------------------------------------
def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve() or (a.exists() and b.exists() and os.path.samefile(a, b))
    except OSError:
        return False


def cmd_te_run(args) -> int:
    from ..harness import te as H

    headers = _check_vector_file(args.inp)
    try:
        out_path = check_output_file(args.out, flag="--out", suffixes=(".npz",))
        wave = parse_wave_args(args.wave, args.wave_window)
    except WaveError as e:
        raise InputError(str(e)) from None
    if _same_file(out_path, args.inp):
        raise InputError(f"--out {_show(out_path)} is the --in file; write the result elsewhere")
    if wave is not None and (_same_file(wave.path, args.inp) or _same_file(wave.path, out_path)):
        raise InputError(f"--wave {_show(wave.path)} is the same file as --in or --out")
    G, d = headers["q"][0]
    n = headers["k"][0][0]
    lanes, sim, engine = args.lanes, args.sim, args.engine
    need = H.run_cycles(n, d, G, lanes, engine=engine, kv_dtype=args.kv_dtype)
    step = need - H.TAIL_CYCLES
    try:
        check_window(wave, need if args.max_cycles is None else min(need, args.max_cycles))
    except WaveError as e:
        raise InputError(str(e)) from None
    _, secs = H.estimate_run(n, d, G, lanes, sim, engine=engine, kv_dtype=args.kv_dtype)
    if args.max_cycles is not None and args.max_cycles < need:      # the budget stops it sooner
        secs *= args.max_cycles / need
    if not args.allow_long and secs > REFUSE_ESTIMATE_S:
        where = {"amaranth": "Amaranth", "verilator": "Verilator"}[sim]
        alt = ""
        if sim == "amaranth":
            _, vsecs = H.estimate_run(n, d, G, lanes, "verilator", engine=engine,
                                      kv_dtype=args.kv_dtype)
            alt = f"use --sim verilator (~{_duration(vsecs)}) or "
        raise InputError(
            f"n = {n:,} (G={G}, head_dim={d}, lanes={lanes}) needs {step:,} cycles: "
            f"~{_duration(secs)} on {where} at ~{H.sim_rate(sim, lanes):,.0f} cycles/s; "
            f"{alt}--allow-long runs it anyway (--max-cycles N stops it after N cycles)")
    vec = _load_vectors(args.inp, headers, args.kv_dtype)

    progress = Progress(step, tty=sys.stderr.isatty())
    progress.note(f"te run: building the Verilator model (~{H.VERILATOR_BUILD_S} s the first "
                  "time for this configuration)" if sim == "verilator" else
                  f"te run: starting the simulation of {step:,} cycles (~{_duration(secs)})")
    try:
        with progress.line.ticking():   # cleared before anything else is printed
            out, golden, q_used, k_used, v_used, cycles, status = H.run_te(
                vec["q"], vec["k"], vec["v"], args.kv_dtype, scale=vec.get("scale"), sim=sim,
                lanes=lanes, max_cycles=args.max_cycles, progress=progress, wave=wave,
                engine=engine)
    except H.CycleBudgetExceeded as e:
        kept = f"; waves up to there in {wave.path}" if wave is not None else ""
        print(f"tricut: error: stopped at the --max-cycles budget after {e.cycles:,} cycles; the "
              f"step needs {step:,} (models.te.te_cycles); no result written{kept}",
              file=sys.stderr)
        return 1
    except AssertionError as e:
        print(f"tricut: error: RTL differs from the bit-exact model: {one_line(e, 200)}",
              file=sys.stderr)
        return 1
    flags = [k for k, v in status.items() if v]
    try:
        with atomic_output(out_path) as f:
            np.savez(f, out=out, golden=golden, q_used=q_used, k_used=k_used, v_used=v_used,
                     cycles=np.int64(cycles),
                     status=np.array([int(bool(v)) for v in status.values()], dtype=np.int8),
                     status_names=np.array(list(status.keys())))
    except OSError as e:
        print(f"tricut: error: cannot write --out {_show(out_path)} ({e.strerror or e})",
              file=sys.stderr)
        return 1
    same = np.array_equal(out.view(np.uint32), golden.view(np.uint32))
    waves = f"; waves: {wave.describe()}" if wave is not None else ""
    print(f"TE {engine} {args.kv_dtype} G={G} d={d} n={n} lanes={lanes} on {sim}: {cycles} cycles, "
          f"RTL == model: {same}, status: {', '.join(flags) or 'ok'}; "
          f"wrote {_show(out_path)}{waves}")
    return 0 if same else 1


def add_commands(sub) -> None:
    te = one_line_argparse(sub.add_parser(
        "te", help="run the TE decode engine RTL on your vectors",
        description="TE decode engine (docs/te.md)."), with_command=True)
    te_sub = te.add_subparsers(dest="te_command", metavar="SUBCOMMAND", required=True)
    p = one_line_argparse(te_sub.add_parser(
        "run", help="quantise q/k/v, run the RTL, write its output beside the bit-exact model",
        description="Reads q (G x d), k and v (n x d) float arrays and an optional scale from an "
                    ".npz; quantises q to bf16 and K/V to --kv-dtype (docs/formats.md), runs the "
                    "RTL and writes out (RTL), golden (bit-exact model), q_used/k_used/v_used "
                    "(what the hardware saw), cycles and status. Bad input: one error line, exit "
                    "status 2, before the run. Exit status 1 if RTL and model differ or "
                    "--max-cycles stopped the run. docs/te.md, 'Command line'."), with_command=True)
    p.add_argument("--in", dest="inp", type=path_arg, required=True, metavar="VEC.npz")
    p.add_argument("--out", type=path_arg, required=True, metavar="RES.npz",
                   help="result file; must end in .npz, its directory must exist")
    p.add_argument("--kv-dtype", choices=KV_DTYPES, default="bf16")
    p.add_argument("--sim", choices=("amaranth", "verilator"), default="amaranth",
                   help="simulator (default: amaranth; verilator builds the design first, ~35 s)")
    p.add_argument("--lanes", type=int, choices=TE_LANES, default=8,
                   help="multiplier lanes per lane array (default: 8)")
    p.add_argument("--engine", choices=TE_ENGINES, default=DEFAULT_ENGINE,
                   help="the engine design (default: pipelined, the shipped engine and the one "
                        "the fast model and the decode tile run: separate K and V lane arrays, integer "
                        "running maximum, (G+1)*Dk cycles per token, registered stages in its units). "
                        "Earlier designs: split, the same arithmetic and cycles per token with "
                        "combinational units; serial, one lane array, exact running maximum, "
                        "3*G*Dk cycles per token (the tile's engine=serial variant). docs/te.md")
    p.add_argument("--max-cycles", type=_cycles_arg, metavar="N",
                   help="stop the simulation after N cycles if the step is not done (exit 1, no "
                        "result; waves up to there are kept); the estimate that --allow-long "
                        "overrides counts up to N")
    p.add_argument("--allow-long", action="store_true",
                   help=f"run even when the estimate exceeds {REFUSE_ESTIMATE_S // 60} minutes of "
                        "simulation (as dsu run, tile run and verilog)")
    add_wave_arguments(p)
    p.set_defaults(func=cmd_te_run)
