"""Long runs tell the user (issue 32, item 4): ``tile run`` and ``verilog`` refuse a run
estimated over an hour unless ``--allow-long``, as ``dsu run`` does; ``te run``, ``dsu run``,
``tile run`` and ``verilog`` show their progress on stderr, in place on a terminal and as a
line every ~10 s elsewhere (``sim/cli/progress.py``). The simulations and generations are
replaced by stand-ins here (the refusal and the status lines are what is tested), the clock
or the interval shortened: no RTL is built or simulated."""

from __future__ import annotations

import io
import re
import time

import numpy as np
import pytest

from tricut.sim.cli import progress as P
from tricut.sim.cli.testing import assert_one_line_error, run_cli
from tricut.sim.options import InputError


class _Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


# ---- the status line ---------------------------------------------------------------------

def test_off_a_terminal_a_whole_line_every_ten_seconds_none_before():
    clock, out = _Clock(), io.StringIO()
    line = P.StatusLine(out, tty=False, clock=clock)
    for t in range(0, 35):
        clock.t = 100.0 + t
        line.show(f"at {t}")
    line.close()
    lines = out.getvalue().splitlines()
    assert lines == ["tricut: note: at 10 (10 s elapsed)", "tricut: note: at 20 (20 s elapsed)",
                     "tricut: note: at 30 (30 s elapsed)"]
    assert "\r" not in out.getvalue() and "\x1b" not in out.getvalue()


def test_a_run_shorter_than_the_interval_prints_nothing_off_a_terminal():
    clock, out = _Clock(), io.StringIO()
    line = P.StatusLine(out, tty=False, clock=clock)
    line.note("starting")
    clock.t += P.PIPE_INTERVAL_S - 1
    line.show("almost done")
    line.close()
    assert out.getvalue() == ""


def test_on_a_terminal_one_line_rewritten_in_place_then_cleared():
    clock, out = _Clock(), io.StringIO()
    line = P.StatusLine(out, tty=True, clock=clock)
    line.note("building")                           # at once
    line.show("cycle 1")                            # within 0.5 s of the last: not written
    clock.t += 0.6
    line.show("cycle 2")
    line.close()
    assert out.getvalue() == "\rbuilding\x1b[K\rcycle 2\x1b[K\r\x1b[K"


def test_ticking_reshows_a_status_that_follows_the_clock():
    out, calls = io.StringIO(), []

    def status():
        calls.append(1)
        return f"tick {len(calls)}"
    line = P.StatusLine(out, tty=True, status=status)
    with line.ticking(period_s=0.01):
        deadline = time.monotonic() + 5
        while len(calls) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
    assert len(calls) >= 3
    assert "\rtick 1\x1b[K" in out.getvalue() and out.getvalue().endswith("\r\x1b[K")


def test_refuse_long_run_names_the_estimate_and_the_override():
    P.refuse_long_run(P.LONG_RUN_S, "a run", allow_long=False)           # an hour: runs
    P.refuse_long_run(10 * P.LONG_RUN_S, "a run", allow_long=True)
    with pytest.raises(InputError, match=r"a run: about 10\.0 h, more than the 60 min allowed "
                                         r"\(--allow-long runs it anyway; try x\)"):
        P.refuse_long_run(10 * P.LONG_RUN_S, "a run", allow_long=False, faster="try x")


# ---- tile run ----------------------------------------------------------------------------

def test_tile_run_estimate_follows_the_timing_model():
    """The closed-form estimate is within 0.5-1.1 of the tile timing model's go->done cycles
    plus the host's traffic, on setups with splits, engines, a CDU and the serial engine."""
    from tricut.models.tile_timing import host_gaps
    from tricut.sim.harness.tile.options import TileRunOptions
    from tricut.sim.harness.tile.setup import (estimate_cycles, predict_layers, schedule,
                                               tile_config)
    for kw in ({}, dict(synthetic=4, max_prompt=40, engines=4),
               dict(synthetic=3, max_prompt=200, max_ctx=256, engines=4, split_tokens=64),
               dict(synthetic=3, max_prompt=200, max_ctx=256, policy="static"),
               dict(synthetic=3, max_prompt=100, max_ctx=128, kv_dtype="fp8", lanes=16,
                    engine="serial")):
        s = TileRunOptions(**kw).setup()
        cfg = tile_config(s)
        host = sum(h + cfg.num_layers * (b + a)
                   for b, a, h in (host_gaps(cfg, len(r)) for r in schedule(s)))
        model = sum(predict_layers(s).values()) + host
        assert 0.5 <= estimate_cycles(s) / model <= 1.1, (kw, estimate_cycles(s), model)


def test_tile_run_estimated_over_an_hour_is_refused_before_anything_runs(capsys, monkeypatch):
    from tricut.sim.harness.tile import cosim, setup
    from tricut.sim.harness.tile.options import TileRunOptions
    monkeypatch.setattr(setup, "TILE_SIM_CYCLES_PER_S", {"amaranth": 0.5, "verilator": 1000})
    monkeypatch.setattr(cosim, "simulate", lambda *a, **k: pytest.fail("the run started"))
    code, cap = run_cli(["tile", "run"], capsys)
    assert_one_line_error(code, cap, "--allow-long runs it anyway")
    line = cap.err.strip()
    cycles = int(re.search(r"about ([\d,]+) cycles", line)[1].replace(",", ""))
    assert cycles == setup.estimate_cycles(TileRunOptions().setup())
    assert "at ~0 cycles/s on the Amaranth simulator: about" in line
    assert "--sim verilator: ~" in line


def test_tile_run_allow_long_runs_it_and_out_of_memory_names_only_its_own_flags(capsys,
                                                                               monkeypatch):
    """--allow-long lets the run start; a MemoryError in it is one line that suggests only
    flags tile run has (it used to suggest simulate's --limit)."""
    from tricut.sim.cli.tile_cmd import tile_run_parser
    from tricut.sim.harness.tile import cosim, setup
    monkeypatch.setattr(setup, "TILE_SIM_CYCLES_PER_S", {"amaranth": 0.5, "verilator": 1000})

    def out_of_memory(*a, **k):
        raise MemoryError
    monkeypatch.setattr(cosim, "simulate", out_of_memory)
    code, cap = run_cli(["tile", "run", "--allow-long"], capsys)
    assert_one_line_error(code, cap, "out of memory")
    named = set(re.findall(r"--[a-z][a-z-]+", cap.err))
    flags = {f for a in tile_run_parser()._actions for f in a.option_strings}
    assert named and named <= flags, named - flags


def test_tile_run_progress_lines_off_a_terminal(capsys, monkeypatch):
    from tricut.sim.harness.tile import cosim
    from tricut.sim.harness.tile.setup import CosimError
    monkeypatch.setattr(P, "PIPE_INTERVAL_S", 0.05)

    def slow(*a, **k):
        time.sleep(2.5)
        raise CosimError("stopped by the test")
    monkeypatch.setattr(cosim, "simulate", slow)
    code, cap = run_cli(["tile", "run"], capsys)
    assert code == 1
    lines = cap.err.splitlines()
    assert lines[-1] == "tricut: error: stopped by the test"
    notes = lines[:-1]
    assert len(notes) >= 2 and all(
        re.fullmatch(r"tricut: note: tile run on the Amaranth simulator: \d+ s of ~\d+ s "
                     r"estimated for about [\d,]+ cycles", n) for n in notes), notes


# ---- verilog -----------------------------------------------------------------------------

def test_verilog_generation_over_an_hour_is_refused_nothing_written(tmp_path, capsys):
    out = tmp_path / "out"
    code, cap = run_cli(["verilog", "cdu", "-o", str(out), "-p", "sets=1024", "-p", "ways=16"],
                        capsys)
    assert_one_line_error(code, cap, "verilog cdu: generating its Verilog: about")
    assert "--allow-long runs it anyway" in cap.err
    assert not out.exists()


def test_verilog_estimate_grows_with_the_design():
    from tricut.sim.cli.verilog_cmd import generation_seconds
    from tricut.sim.harness.verilog_out import UNITS

    def est(unit, **kw):
        return generation_seconds(unit, {**UNITS[unit].defaults, **kw})
    assert est("cdu") < 60 < est("cdu", sets=64, ways=16) < P.LONG_RUN_S < est("cdu", sets=1024,
                                                                                 ways=16)
    assert est("tile") < est("tile", engines=8) < est("tile", engines=8, cdu_sets=64)
    assert est("tile", cdu=False, cdu_sets=1024, cdu_ways=16) == est("tile", cdu=False)
    assert est("dsu") < est("dsu", n_slots=256)


def test_verilog_allow_long_generates_with_progress(tmp_path, capsys, monkeypatch):
    from tricut.sim.cli import verilog_cmd
    monkeypatch.setattr(P, "PIPE_INTERVAL_S", 0.05)

    def slow_write(component, top, out_dir):
        time.sleep(2.5)
        raise InputError("stopped by the test")
    monkeypatch.setattr(verilog_cmd, "write_verilog", slow_write)
    code, cap = run_cli(["verilog", "cdu", "-o", str(tmp_path), "-p", "sets=1024", "-p",
                         "ways=16", "--allow-long"], capsys)
    lines = cap.err.splitlines()
    assert code == 2 and lines[-1] == "tricut: error: stopped by the test"
    assert len(lines) >= 3 and all(re.fullmatch(
        r"tricut: note: verilog cdu: generating its Verilog \(~[\d.]+ h\) \(\d+ s elapsed\)", n)
        for n in lines[:-1]), lines


# ---- dsu run and te run: progress off a terminal too -------------------------------------

def test_dsu_run_progress_lines_off_a_terminal(capsys, monkeypatch):
    from tricut.sim.harness import dsu
    monkeypatch.setattr(P, "PIPE_INTERVAL_S", 0.05)

    def run(plan, progress=None, wave=None):
        for cycle in range(0, 25_000, 1_000):
            progress({"cycle": cycle, "round": cycle // 1_000, "outcomes": 0, "requests": 8})
            time.sleep(0.1)
        raise InputError("stopped by the test")
    monkeypatch.setattr(dsu, "run_plan", run)
    code, cap = run_cli(["dsu", "run", "--sim", "amaranth"], capsys)
    lines = cap.err.splitlines()
    assert code == 2 and lines[-1] == "tricut: error: stopped by the test"
    notes = lines[:-1]
    assert len(notes) >= 3 and all(n.startswith("tricut: note: [dsu amaranth] ") for n in notes)
    assert any(re.search(r"cycle [\d,]+ \([\d,]+/s\), round \d+/\d+, outcomes 0/8", n)
               for n in notes), notes


def test_te_run_progress_lines_off_a_terminal(tmp_path, capsys, monkeypatch):
    from tricut.sim.harness import te
    monkeypatch.setattr(P, "PIPE_INTERVAL_S", 0.05)
    rng = np.random.default_rng(0)
    vec = tmp_path / "v.npz"
    np.savez(vec, q=rng.standard_normal((1, 64)), k=rng.standard_normal((3, 64)),
             v=rng.standard_normal((3, 64)))

    def run_te(*a, progress=None, **k):
        for cycles in range(0, 4000, 256):
            progress(cycles)
            time.sleep(0.1)
        raise AssertionError("stopped by the test")
    monkeypatch.setattr(te, "run_te", run_te)
    code, cap = run_cli(["te", "run", "--in", str(vec), "--out", str(tmp_path / "r.npz")],
                        capsys)
    lines = cap.err.splitlines()
    assert code == 1 and "RTL differs" in lines[-1]
    notes = lines[:-1]
    assert len(notes) >= 3 and all(n.startswith("tricut: note: te run: ") for n in notes), notes
    assert any(re.search(r"te run: [\d,]+ / [\d,]+ cycles .*ETA", n) for n in notes), notes


def test_te_run_over_an_hour_needs_allow_long_as_dsu_run_does(tmp_path, capsys, monkeypatch):
    """A step estimated over an hour is refused with its estimate and the override to use;
    ``--allow-long`` starts it, and so does a ``--max-cycles`` budget that stops it within the
    hour (the estimate counts up to the budget)."""
    from tricut.sim.harness import te
    started = []

    def run_te(*a, max_cycles=None, **k):
        started.append(max_cycles)
        raise AssertionError("stopped by the test")
    monkeypatch.setattr(te, "run_te", run_te)
    rng = np.random.default_rng(0)
    vec = tmp_path / "v.npz"
    n = 30_000
    np.savez(vec, q=rng.standard_normal((4, 128)), k=rng.standard_normal((n, 128)),
             v=rng.standard_normal((n, 128)))
    base = ["te", "run", "--in", str(vec), "--out", str(tmp_path / "r.npz"), "--lanes", "8",
            "--engine", "serial"]
    code, cap = run_cli(base, capsys)
    assert code == 2 and len(cap.err.splitlines()) == 1 and not started, cap.err
    assert re.search(r"needs [\d,]+ cycles: ~[\d.]+ h on Amaranth", cap.err), cap.err
    assert "--allow-long runs it anyway" in cap.err
    for extra in (["--allow-long"], ["--max-cycles", "10000"]):
        code, cap = run_cli(base + extra, capsys)
        assert code == 1 and "RTL differs" in cap.err.splitlines()[-1], cap.err
    assert started == [None, 10_000]
