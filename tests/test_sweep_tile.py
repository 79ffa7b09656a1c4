"""Tile points in sweeps (``sim/sweep/tile_tasks.py``): a 2-point ``tile-run`` sweep in-process
on Verilator (the shape of ``tests/test_tile_cached.py``'s STATIC, so the ``-O0`` build is the
one the co-simulation tests use), its rows against a direct run of the same setups, and the
grid checks of the tile tasks (the command's own refusals, one line naming the point)."""

from __future__ import annotations

import dataclasses

import pytest

from tricut.sim.harness.tile.cosim import simulate
from tricut.sim.harness.tile.setup import Setup, predict_layers
from tricut.sim.sweep.grid import GridError, load_grid
from tricut.sim.sweep.runner import run_grid
from tricut.sim.sweep.store import ResultStore
from tricut.sim.sweep.tile_tasks import TileDesignTask, _area_groups, tile_unit_params

STATIC = Setup(lanes=16, model="tiny-te", requests=2, prompt_lens=(3, 17), steps=2, engines=1,
               max_ctx=32, policy="static")

GRID = """
name = "tile-pair"
task = "tile-run"

[fixed]
model = "tiny-te"
prompt_lens = [3, 17]
steps = 2
engines = 1
lanes = 16
max_ctx = 32

[axes]
policy = ["static", "adaptive"]
"""


def test_two_point_tile_sweep_in_process(tmp_path):
    grid_path = tmp_path / "tile.toml"
    grid_path.write_text(GRID)
    grid = load_grid(grid_path)
    assert [p.axes["policy"] for p in grid.points] == ["static", "adaptive"]
    with ResultStore(tmp_path / "tile.duckdb") as store:
        summary = run_grid(grid, store, workers=0, progress=False)
        rows = {r["axes"]["policy"]: r for r in store.rows("tile-pair")}
    assert (summary.done, summary.failed) == (2, 0), summary.failures
    for policy, row in rows.items():
        m = row["metrics"]
        s = dataclasses.replace(STATIC, policy=policy)
        rep = simulate(s, sim="verilator")
        assert rep.ok and m["ok"] is True and m["differences"] == 0
        steps = [rep.tile.step_cycles[k] for k in sorted(rep.tile.step_cycles)]
        assert m["steps"] == len(steps) == 2
        assert m["cycles_per_step"] == pytest.approx(sum(steps) / 2, rel=0, abs=1e-9)
        assert m["timing_model_error"] == 0.0      # the tile timing model is cycle-exact
        assert predict_layers(s) == rep.tile.layer_cycles
        assert 0 < m["hbm_port_use"] <= 1 and 0 < m["te_utilisation"] <= 1
        assert m["cdu_accesses"] == rep.tile.cdu_counters["accesses"] > 0
        assert row["config"]["policy"] == policy and row["config"]["sim"] == "verilator"


@pytest.mark.parametrize("extra, needle", [
    ("max_ctx = 8", "point policy=static: --max-ctx"),                  # prompts beyond it
    ("lanes = 5", "--lanes"),                                           # refused by the flag
    ("dsu = 3", "dsu = 3: expected true or false"),
    ("cdu_sets = 3", "--cdu-sets"),
    ('cxx_opt = "-Ofast"', "cxx_opt = '-Ofast': choose one of -O0, -O1, -O2, -O3"),
    ('sim = "amaranth"\ncxx_opt = "-O0"', "cxx_opt = '-O0': the C++ optimisation of a Verilator build"),
])
def test_tile_grid_refuses_what_the_command_refuses(tmp_path, extra, needle):
    key = extra.split(" =")[0]
    lines = [ln for ln in GRID.splitlines() if not ln.startswith(key + " =")]
    lines.insert(lines.index("[fixed]") + 1, extra)
    path = tmp_path / "bad.toml"
    path.write_text("\n".join(lines))
    with pytest.raises((GridError, ValueError)) as e:
        load_grid(path)
    msg = str(e.value)
    assert needle in msg and "\n" not in msg, msg


def test_the_typed_options_are_the_commands_flags():
    """A tile point's settings are :class:`TileRunOptions` (sim/harness/tile/options.py), not
    ``tricut tile run``'s parser: each option is one of its flags, with its default and
    choices; and the command takes no configuration flag the options lack."""
    from tricut.sim.cli.tile_cmd import tile_run_parser
    from tricut.sim.harness.tile.options import OPTIONS, TileRunOptions
    actions = {a.dest: a for a in tile_run_parser()._actions if a.option_strings}
    assert set(actions) - set(OPTIONS) == {"json"}
    defaults = TileRunOptions()
    for name, opt in OPTIONS.items():
        a = actions[name]
        assert a.option_strings == [opt.flag] and (a.nargs == 0) == opt.switch, name
        assert a.default == getattr(defaults, name), name
        assert (None if a.choices is None else list(a.choices)) == \
            (None if opt.allowed() is None else list(opt.allowed())), name


def test_unknown_tile_setting_is_named(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text(GRID.replace("lanes = 16", "lane = 16"))
    with pytest.raises(GridError, match="unknown setting 'lane' for task tile-run"):
        load_grid(path)


def test_design_task_area_parameters_are_the_simulated_tile():
    """The area of a tile-design point is of the tile the run simulates: its engines, lanes,
    TE shape, K/V format, split, CDU geometry; the policy (an input) does not change it."""
    base = {"model": "tiny-te", "prompt_lens": [3, 17], "max_ctx": 32, "lanes": 16,
            "engines": 2, "split_tokens": 12, "kv_dtype": "fp8"}
    cfg = {pol: TileDesignTask.check({**base, "policy": pol}) for pol in ("none", "static", "adaptive")}
    assert cfg["static"]["area"] == cfg["adaptive"]["area"] != cfg["none"]["area"]
    a = cfg["static"]["area"]
    assert (a["engines"], a["lanes"], a["kv_dtype"], a["split_tokens"], a["cdu"]) == \
        (2, 16, "fp8", 12, True)
    assert (a["head_dim"], a["G"], a["num_kv_heads"], a["num_layers"]) == (64, 4, 2, 2)
    assert cfg["none"]["area"]["cdu"] is False
    s = dataclasses.replace(STATIC, engines=2)
    assert tile_unit_params(s, {**a, "engines": 2})["engines"] == 2


def test_area_groups_sum_to_the_total():
    rows = {"TE engine 0": {"cells": 10}, "TE engine 1": {"cells": 10}, "split-K combine": {"cells": 7},
            "CDU core": {"cells": 3}, "CDU front end": {"cells": 2}, "DSU cores": {"cells": 5},
            "unit streamer (Q buffer, readers, ROB)": {"cells": 1}}
    g = _area_groups(rows)
    assert g == {"cells_te_engines": 20, "cells_combine": 7, "cells_cdu": 5, "cells_dsu": 5,
                 "cells_other": 1}
    assert sum(g.values()) == sum(r["cells"] for r in rows.values())
