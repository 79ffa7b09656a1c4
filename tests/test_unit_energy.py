"""The decode units' energy per busy cycle (sim/harness/unit_energy.py, written into
sim/fast/energy.json and docs/energy.md by benchmarks/unit_energy.py --write): the shipped
coefficients follow from the cells and memories their sources quote, and the docs' reference
operators are what Yosys makes of them."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tricut.sim.fast.energy import load_energy
from tricut.sim.harness import unit_energy as U

ROOT = Path(__file__).resolve().parent.parent
DOC = (ROOT / "docs" / "energy.md").read_text()
MEMORY_PJ = {f"{unit}_pj_per_cycle": pj for unit, pj in U.MEMORY_PJ.items()}


@pytest.mark.parametrize("field", sorted(MEMORY_PJ))
def test_a_units_energy_per_cycle_is_its_cells_times_the_energy_per_cell_plus_its_memories(field):
    table = load_energy()
    value, source = getattr(table.gpus["h100-sxm5"], field), table.sources["h100-sxm5"][field]
    cells = int(re.search(r"([\d,]+) cells", source).group(1).replace(",", ""))
    fj = float(re.search(r"x ([\d.]+) fJ per generic cell", source).group(1))
    memories = 1 if field == "dsu_pj_per_cycle" else int(re.search(r"its (\d+) memories", source).group(1))
    assert value == pytest.approx(cells * fj * 1e-3 + memories * MEMORY_PJ[field], rel=2e-3)
    # the docs' table quotes the same figure
    assert f"| {cells:,} | {memories} |" in DOC and f"| {value:.1f} |" in DOC


def test_the_energy_per_cell_is_the_median_of_the_references_scaled_to_7nm():
    refs = re.findall(r"^\| (int8 mul|fp16 mul|fp32 mul|fp32 add) \| ([\d.]+) \| ([\d,]+) \| ([\d.]+) \|$", DOC, re.M)
    assert [r[0] for r in refs] == list(U.HOROWITZ_PJ)
    per_cell = sorted(float(pj) * 1e3 / int(cells.replace(",", "")) for _, pj, cells, _ in refs)
    median = (per_cell[1] + per_cell[2]) / 2
    source = load_energy().sources["h100-sxm5"]["te_pj_per_cycle"]
    assert f"median {median:.3f} fJ" in source
    assert f"x {median * 0.75 * U.SWITCHING:.3f} fJ per generic cell" in source


def test_the_int8_reference_is_what_yosys_makes_of_it():
    cells = U.synthesize(U.reference_component("int8 mul"), "int8_mul")["total"]["cells"]
    assert f"| int8 mul | 0.2 | {cells:,} |" in DOC


def test_the_fast_models_te_cycles_lie_between_a_tile_runs_mac_and_busy_cycles():
    """A tile run in Amaranth's simulator, each engine's flags counted every cycle: the fast
    model's TE cycles for the same jobs are at least the cycles the engine issued
    multiply-accumulates and at most those it was busy (stalls on the K/V stream included)."""
    from tricut.sim.harness.tile.setup import Setup
    a = U.tile_te_activity(Setup(lanes=16, requests=1, prompt_lens=(2,), steps=1, engines=1, max_ctx=16))
    assert 0 < a["mac_busy"] <= a["model"] <= a["busy"] <= a["cycles"]
    with pytest.raises(ValueError, match="split_tokens 0"):
        U.tile_te_activity(Setup(lanes=16, requests=1, prompt_lens=(2,), steps=1, split_tokens=1))


def test_a_bad_switching_factor_is_one_error_line():
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "unit_energy.py"), "--switching", "0"],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 2 and "--switching 0.0: must be in (0, 1]" in r.stderr
    assert "Traceback" not in r.stderr
