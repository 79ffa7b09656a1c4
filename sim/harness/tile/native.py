"""The native replay of a co-simulation (``docs/tile/cosim.md``, "Native replay"): the same
generated Verilog, the same Verilator build and the same HBM image as a ``tricut tile run
--sim verilator`` run, driven by a C++ main (``native_replay.cpp``) instead of cocotb, with
no Python in the loop: the reference for how fast the cocotb-driven run could go
(``benchmarks/tile_native_speed.py``).

* :func:`record` runs the co-simulation on Verilator with the bench recording its stimulus
  (:mod:`.stimulus`: every input it wrote and every output it read, at the half clock period
  it did) and keeps the run's HBM image;
* :func:`link` links ``native_replay.cpp`` against the cocotb build's Verilated objects
  (``Vtop__ALL.a`` and the Verilator runtime: no second Verilator or model compile; cached in
  the build directory, keyed by the source's digest);
* :func:`replay` plays the stimulus and checks every value the bench read, at the half period
  it read it: a replay that passes ran the same cycles with the same outputs as the cocotb
  run. It reports the clock cycles and the wall time of its loop (Verilator's evaluation
  alone, two evaluations a cycle).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from tricut.sim.harness.cocotb_run import REPO_ROOT, build_lock, compiler_cache, run_tag
from tricut.sim.harness.toolchain import ToolchainError, verilator_root

from . import verilator as V

__all__ = ["SOURCE", "NativeRun", "NativeError", "link", "replay", "record"]

#: the native replay's main
SOURCE = Path(__file__).with_name("native_replay.cpp")
#: the Verilator runtime objects of a cocotb build (``verilated.mk``), linked as they are
RUNTIME = ("verilated.o", "verilated_dpi.o", "verilated_vpi.o", "verilated_threads.o")
EXE = "native_replay"


class NativeError(RuntimeError):
    """The native replay could not run, or what it read differs from the cocotb run."""


@dataclass
class NativeRun:
    """One :func:`replay`: ``cycles`` clock cycles played, ``loop_s`` the wall time of the
    loop (Verilator's evaluation and the stimulus, no Python), ``startup_s`` reading the
    stimulus and constructing the model (``$readmemh`` runs in the loop's first evaluation),
    ``wall_s`` the process; ``writes``/``checks`` the stimulus records played."""
    cycles: int
    loop_s: float
    startup_s: float
    wall_s: float
    writes: int
    checks: int

    @property
    def rate(self):
        """Cycles per second of the loop."""
        return self.cycles / self.loop_s if self.loop_s > 0 else float("inf")


def _compile_flags(bdir, opt):
    root = verilator_root()
    return [f"-I{bdir}", f"-I{root / 'include'}", f"-I{root / 'include' / 'vltstd'}",
            "-DVERILATOR=1", "-DVM_COVERAGE=0", "-DVM_SC=0", "-DVM_TIMING=0", "-DVM_TRACE=0",
            "-DVM_TRACE_FST=0", "-DVM_TRACE_VCD=0", "-DVM_TRACE_SAIF=0", opt]


def link(b: V.Build) -> Path:
    """The native replay's executable for build ``b`` (made once per build and source; see
    the module docs)."""
    bdir = b.build_dir
    missing = [f for f in (*RUNTIME, "Vtop__ALL.a") if not (bdir / f).exists()]
    if missing:
        raise NativeError(f"{bdir} is not a complete Verilator build (no {', '.join(missing)})")
    key = hashlib.sha256(SOURCE.read_bytes() + b.opt.encode()).hexdigest()
    exe, stamp = bdir / EXE, bdir / f"{EXE}.key"
    with build_lock(bdir):
        if exe.exists() and stamp.exists() and stamp.read_text() == key:
            return exe
        cache = compiler_cache()
        cxx = [cache["OBJCACHE"], os.environ.get("CXX", "c++")]
        env = {**os.environ, **{k: v for k, v in cache.items() if k != "OBJCACHE"}}
        obj = bdir / f"{EXE}.o"
        steps = [cxx + _compile_flags(bdir, b.opt) + ["-c", "-o", str(obj), str(SOURCE)],
                 [cxx[1], str(obj), *(str(bdir / f) for f in RUNTIME),
                  str(bdir / "Vtop__ALL.a"), "-pthread", "-o", str(exe)]]
        for cmd in steps:
            done = subprocess.run(cmd, env=env, capture_output=True, text=True)
            if done.returncode:
                raise ToolchainError(f"building the native replay failed: {' '.join(cmd)}\n"
                                     f"{done.stderr[-4000:]}")
        stamp.write_text(key)
    return exe


def replay(b: V.Build, stimulus, image_hex, timeout=None) -> NativeRun:
    """Play ``stimulus`` (a :mod:`.stimulus` file) on build ``b`` with the HBM image
    ``image_hex``; raises :class:`NativeError` if a value read differs from the cocotb run's
    or the replay cannot run."""
    exe = link(b)
    t0 = time.perf_counter()
    try:
        done = subprocess.run([str(exe), str(stimulus), f"+hbm_image={image_hex}"],
                              capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise NativeError(f"the native replay of {stimulus} ran over {timeout} s") from None
    wall = time.perf_counter() - t0
    if done.returncode:
        msg = (done.stderr.strip() or done.stdout.strip()).splitlines()
        raise NativeError(msg[-1] if msg else f"the native replay exited {done.returncode}")
    out = json.loads(done.stdout.strip().splitlines()[-1])
    return NativeRun(out["cycles"], out["loop_s"], out["startup_s"], wall, out["writes"],
                     out["checks"])


def record(s, golden=None, b=None, opt=None, workdir=None):
    """The co-simulation of setup ``s`` on Verilator (:func:`~.verilator.run`) with its
    stimulus recorded: ``(RunResult, RunInfo, Build, stimulus path, HBM image path)``; the
    two files are the caller's to delete."""
    workdir = Path(workdir or (REPO_ROOT / ".build" / "plans"))
    workdir.mkdir(parents=True, exist_ok=True)
    stim = workdir / f"stimulus-{run_tag()}.txt"
    res, info, b = V.run(s, golden=golden, b=b, opt=opt, workdir=workdir, stimulus=stim)
    return res, info, b, stim, stim.with_suffix(".hex")
