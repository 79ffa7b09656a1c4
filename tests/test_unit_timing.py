"""Unit timing from the GPU config and the fitted costs from their data file: TE engines and the
TE / CDU / DSU clocks of each GPU come from its toml, the DSU and CDU coefficients from
sim/fast/unit_costs.json (written by the fit scripts), and both reach the step model."""

import dataclasses
import importlib.util
import json
from importlib import resources
from pathlib import Path

import numpy as np
import pytest

from tricut.models.config import ConfigError, load_gpu, load_model, replace
from tricut.models.roofline import roofline
from tricut.sim.fast.stacks import get_stack
from tricut.sim.fast.timing import StepModel, UnitCosts, UnitTiming

ROOT = Path(__file__).resolve().parent.parent
H100, EDGE = load_gpu("h100-sxm5"), load_gpu("edge")
L8B = load_model("llama-3-8b")
SHIPPED = resources.files("tricut.sim.fast").joinpath("unit_costs.json")


def test_units_come_from_the_gpu_config():
    # H100 SXM5 and H200: exactly the numbers the fast model always used
    for gpu in (H100, load_gpu("h200")):
        u = UnitTiming.from_gpu(gpu)
        assert (u.te_engines, u.te_clock_hz, u.cdu_clock_hz, u.dsu_clock_hz, u.te_lanes,
                u.te_engine) == (528, 1.98e9, 1.98e9, 1.2e9, 32, "pipelined")
    # edge: 16 SMs × 4 engines at its 1.3 GHz SM clock, not H100's 528 at 1.98 GHz
    u = UnitTiming.from_gpu(EDGE)
    assert (u.te_engines, u.te_clock_hz, u.dsu_clock_hz) == (16 * 4, 1.3e9, 1.2e9)
    assert EDGE.te_clock_hz == EDGE.sm_clock_hz and H100.te_clock_hz == H100.sm_clock_hz
    # a step model takes its units from its GPU unless given others
    assert StepModel(L8B, EDGE).units == u
    mine = dataclasses.replace(u, te_engines=1)
    assert StepModel(L8B, EDGE, units=mine).units is mine


def test_the_te_term_is_the_grid_of_tiles_of_the_gpu_config():
    """Llama-3-8B, NVFP4 KV, 20 requests × 64K tokens (the KV fits edge's 64 GB): the te cut's
    attention term is the grid of tiles (models/sm_slice.py) of each GPU's config, its engines
    per SM, TE clock, SM count, HBM share and latency; the serial engine at 16 lanes is slower
    than the shipped pipelined one at 32; and the config's engines per SM reach the tile."""
    from tricut.models.sm_slice import grid_layer_cycles, slice_config, slice_timing
    b, ctx = 20, 65536
    assert b * ctx <= roofline(L8B, EDGE, "nvfp4", ctx, b).kv_tokens_fit
    for gpu in (H100, EDGE):
        te = {}
        for engine, lanes in (("serial", 16), ("pipelined", 32)):
            units = dataclasses.replace(UnitTiming.from_gpu(gpu), te_engine=engine, te_lanes=lanes)
            sm = StepModel(L8B, gpu, "nvfp4", cuts=frozenset({"te"}), units=units,
                           stack=get_stack("ideal"))     # no jitter, no launch gaps
            st = sm.step_time([ctx + 1] * b, [1] * b, np.random.default_rng(0))
            cfg = slice_config(gpu, L8B, "nvfp4", sm.assumptions.te_bw_efficiency, lanes, engine)
            assert (cfg.engines, cfg.G, cfg.lanes, cfg.engine) == \
                (gpu.te_engines_per_sm, L8B.group_size, lanes, engine)
            slowest, _ = grid_layer_cycles(slice_timing(cfg), [ctx + 1] * b * L8B.num_kv_heads,
                                           gpu.sm_count)
            assert st.te_busy_s == pytest.approx(L8B.num_layers * slowest / gpu.te_clock_hz,
                                                 rel=1e-12)
            assert st.attn_s == st.te_busy_s
            te[engine] = st.te_busy_s
        assert te["serial"] > te["pipelined"], gpu.name
    split = dataclasses.replace(UnitTiming.from_gpu(H100), te_engine="split")
    with pytest.raises(ValueError, match="runs the tile's engines"):
        StepModel(L8B, H100, cuts=frozenset({"te"}), units=split)
    doubled = replace(EDGE, te_engines_per_sm=8)
    sm = StepModel(L8B, doubled, "nvfp4", cuts=frozenset({"te"}))
    assert sm.grid.cfg.engines == 8


def test_the_data_file_is_what_the_timing_uses(tmp_path):
    raw = json.loads(SHIPPED.read_text())
    units = UnitTiming.from_gpu(H100)
    assert units.costs == UnitCosts.load(SHIPPED) == UnitCosts.load()
    # one steady round with one active slot costs base + per_active, as the file says
    row = raw["dsu"]["all_fit"]["latency-opt"]
    assert units.dsu_round_cycles(1, 8, "latency-opt") == row[0] + row[1]
    per_unit, per_beat = raw["cdu"]["policies"]["adaptive"]
    assert units.cdu_step_cycles(10, 5, 2, 3, "adaptive") == 10 + 5 + 2 * (1 + per_unit) + 3 * per_beat
    assert raw["dsu"]["command"].startswith(".venv/bin/python benchmarks/dsu_fit.py")
    assert raw["cdu"]["command"].startswith(".venv/bin/python benchmarks/cdu_cycles_fit.py")
    # a modified copy changes the results, through the step model too
    raw["dsu"]["all_fit"]["throughput-opt"][0] += 1200.0
    raw["cdu"]["policies"]["adaptive"][0] += 1.0
    copy = tmp_path / "costs.json"
    copy.write_text(json.dumps(raw))
    changed = UnitTiming.from_gpu(H100, UnitCosts.load(copy))
    assert changed.dsu_round_cycles(4, 8, "throughput-opt") == \
        pytest.approx(units.dsu_round_cycles(4, 8, "throughput-opt") + 1200, rel=1e-12)
    assert changed.cdu_step_cycles(10, 5, 2, 3, "adaptive") == \
        pytest.approx(units.cdu_step_cycles(10, 5, 2, 3, "adaptive") + 2, rel=1e-12)
    rng = np.random.default_rng(0)
    dsu = dict(cuts=frozenset({"dsu"}))
    base = StepModel(L8B, H100, **dsu).sched_time(4, False, rng)
    assert StepModel(L8B, H100, units=changed, **dsu).sched_time(4, False, rng) == \
        pytest.approx(base + 1200 / 1.2e9, rel=1e-12)


def _edit(raw, path, value):
    *parents, last = path
    for key in parents:
        raw = raw[key]
    if value is KeyError:
        del raw[last]
    else:
        raw[last] = value


@pytest.mark.parametrize("path,value,message", [
    (("dsu", "select", "latency-opt"), [1.0, 2.0], "entry 'dsu.select.latency-opt': expected 10 finite numbers"),
    (("dsu", "all_fit", "fairness-opt", 3), "3.0", "entry 'dsu.all_fit.fairness-opt': expected 10"),
    (("dsu", "all_fit", "fairness-opt", 3), True, "entry 'dsu.all_fit.fairness-opt': expected 10"),
    (("cdu", "policies", "static", 0), float("nan"), "entry 'cdu.policies.static': expected 2 finite"),
    (("cdu", "policies", "lru"), [1.0, 1.0], "entry 'cdu.policies': expected the keys disabled, static, adaptive"),
    (("dsu", "select", "throughput-opt"), KeyError, "entry 'dsu.select': expected the keys"),
    (("cdu", "command"), KeyError, "entry 'cdu': expected the keys command, columns, policies"),
    (("dsu", "command"), 3, "entry 'dsu.command': expected a string"),
    (("dsu", "columns", 0), "per_base", "entry 'dsu.columns': expected ['base', 'per_active'"),
])
def test_a_malformed_data_file_names_file_and_entry(tmp_path, path, value, message):
    raw = json.loads(SHIPPED.read_text())
    _edit(raw, path, value)
    f = tmp_path / "bad.json"
    f.write_text(json.dumps(raw))
    with pytest.raises(ConfigError) as e:
        UnitCosts.load(f)
    assert str(e.value).startswith(f"{f}: ") and message in str(e.value)
    assert "\n" not in str(e.value)


def test_unreadable_data_files(tmp_path):
    with pytest.raises(ConfigError, match="nope.json: file not found"):
        UnitCosts.load(tmp_path / "nope.json")
    f = tmp_path / "cut.json"
    f.write_text(SHIPPED.read_text()[:200])
    with pytest.raises(ConfigError, match="cut.json: not valid JSON"):
        UnitCosts.load(f)


def _script(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_fit_scripts_write_their_table_on_request(tmp_path):
    """The fit scripts' --write path on a fabricated fit (the RTL runs take minutes): each
    replaces its own table and command, keeps the other, and the file loads back."""
    dsu_fit, cdu_fit = _script("dsu_fit"), _script("cdu_cycles_fit")
    assert dsu_fit.COSTS_PATH.resolve() == Path(str(SHIPPED)).resolve()
    assert cdu_fit.COSTS_PATH == dsu_fit.COSTS_PATH
    assert not dsu_fit.parse_args([]).write and dsu_fit.parse_args(["--jobs", "1", "--write"]).write
    assert not cdu_fit.parse_args([]).write and cdu_fit.parse_args(["--write"]).write

    shipped = UnitCosts.load()
    fits = {(p, reg): tuple(float(i + k) for i in range(10))
            for k, p in enumerate(dsu_fit.ORDER) for reg in ("all fit", "select")}
    out = tmp_path / "unit_costs.json"
    dsu_fit.costs_with(shipped, fits, "dsu command").save(out)
    got = UnitCosts.load(out)
    assert got.dsu_all_fit["latency-opt"] == fits["latency-opt", "all fit"]
    assert (got.dsu_command, got.cdu, got.cdu_command) == ("dsu command", shipped.cdu, shipped.cdu_command)

    cdu_fit.costs_with(got, {"disabled": (1.234, 2.0), "static": (3.0, 4.0),
                             "adaptive": np.array([5.006, 6.0])}).save(out)
    again = UnitCosts.load(out)
    assert again.cdu == {"disabled": (1.23, 2.0), "static": (3.0, 4.0), "adaptive": (5.01, 6.0)}
    assert again.cdu_command == ".venv/bin/python benchmarks/cdu_cycles_fit.py --write"
    assert again.dsu_all_fit == got.dsu_all_fit
    # a broken fit is never written
    bad = dict(fits)
    bad["fairness-opt", "select"] = (float("nan"),) * 10
    with pytest.raises(ConfigError, match="'dsu.select.fairness-opt'"):
        dsu_fit.costs_with(shipped, bad, "x").save(out)
    assert UnitCosts.load(out) == again


def test_docs_coefficient_tables_match_the_data_file():
    """docs/system-model.md quotes the fitted tables; they must be the shipped file's numbers."""
    costs = json.loads(SHIPPED.read_text())
    doc = (ROOT / "docs" / "system-model.md").read_text()
    rows = {}
    for line in doc.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 11 and cells[0].endswith((", all fit", ", select")):
            profile, regime = cells[0].rsplit(", ", 1)
            rows[(profile, regime)] = [0.0 if c == "—" else float(c.replace("−", "-")) for c in cells[1:]]
    want = {(p, "all fit"): v for p, v in costs["dsu"]["all_fit"].items()}
    want.update({(p, "select"): v for p, v in costs["dsu"]["select"].items()})
    assert rows == want
    cdu = costs["cdu"]["policies"]
    assert cdu["disabled"][0] == cdu["static"][0]
    assert len({v[1] for v in cdu.values()}) == 1
    assert (f"`per_unit` {cdu['static'][0]} (`disabled`, `static`) / {cdu['adaptive'][0]} (`adaptive`"
            in doc.replace("\n", " "))
    assert f"`per_beat` {cdu['static'][1]} " in doc.replace("\n", " ")
