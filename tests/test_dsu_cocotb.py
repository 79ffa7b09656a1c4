"""DSU core lockstep on the generated Verilog (Verilator + cocotb): longer random streams and
the compiled C programs."""

from pathlib import Path

import pytest

from tricut.rtl.dsu.core import Core
from tricut.sim.harness.cocotb_run import CocotbFailure, run_cocotb
from tricut.sim.harness.firmware_programs import C_PROGRAMS

COCOTB_DIR = Path(__file__).parent / "cocotb"


def test_core_lockstep_on_verilator():
    # eight seeded random streams of 4000 items (~3,500 instructions each), random wait
    # states; the last four include trapping instructions, handled in lockstep
    assert run_cocotb(Core(), "dsu_core", "dsu_lockstep", COCOTB_DIR,
                      extra_env={"DSU_SEEDS": "11,12,13,14,15,16,17,18", "DSU_ITEMS": "4000",
                                 "DSU_TRAP_SEEDS": "15,16,17,18"},
                      testcase="random_streams_in_lockstep") == 1


def test_c_programs_on_verilator():
    expect = ",".join(f"{name}={fn():#x}" for name, fn in sorted(C_PROGRAMS.items()))
    assert run_cocotb(Core(), "dsu_core", "dsu_lockstep", COCOTB_DIR,
                      extra_env={"DSU_C_EXPECT": expect},
                      testcase="c_programs_in_lockstep") == 1


def test_c_program_on_verilator_wrong_exit_code_fails():
    expect = f"muldiv={C_PROGRAMS['muldiv']() ^ 0x100:#x}"
    with pytest.raises(CocotbFailure):
        run_cocotb(Core(), "dsu_core", "dsu_lockstep", COCOTB_DIR,
                   extra_env={"DSU_C_EXPECT": expect}, testcase="c_programs_in_lockstep")


def test_core_lockstep_on_verilator_can_fail():
    with pytest.raises(CocotbFailure):
        run_cocotb(Core(), "dsu_core", "dsu_lockstep", COCOTB_DIR,
                   extra_env={"DSU_SEEDS": "11", "DSU_ITEMS": "50", "DSU_CORRUPT": "1"},
                   testcase="random_streams_in_lockstep")
