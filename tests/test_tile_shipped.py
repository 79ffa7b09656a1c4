"""The tile the co-simulations run is the tile that ships.

Both simulation tops of a run, with the CDU or without, (``CosimTop`` in Amaranth, ``CosimVerilatorTop``
on Verilator) instantiate the :class:`~tricut.rtl.tile.decode_tile.DecodeTile` object that
``tricut verilog tile`` writes, and add only the behavioural HBM and L2 models and the host
port: the design under test inside each top is constructed with the same arguments as the
command line's for the same parameters, and the Verilator top's generates the command line's
Verilog; with ``--dsu`` the top's DecodeTile carries the DSU cluster and
link (their firmware in the cores' memories) and no second copy of them exists in the top.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect

import pytest
from amaranth.back import verilog

from tricut.rtl.tile.attention_path import CDU_DEFAULTS
from tricut.rtl.tile.decode_tile import DecodeTile
from tricut.sim.cli.testing import run_cli
from tricut.sim.harness.tile.golden import RunInputs
from tricut.sim.harness.tile.params import TILE_KEYS
from tricut.sim.harness.tile.setup import Setup
from tricut.sim.harness.tile.tops import CosimTop
from tricut.sim.harness.tile.verilator_top import CosimVerilatorTop


SETUP = Setup(requests=2, prompt_lens=(2, 3), steps=1, engines=2, lanes=8, split_tokens=3,
                max_ctx=32, policy="static", cdu_sets=4, cdu_ways=2)


def _cli_verilog(p, tmp_path, capsys, dsu_cores=0):
    argv = ["verilog", "tile", "-o", str(tmp_path), "--top", "tile"]
    for k in TILE_KEYS + ("max_slots", "engine"):
        argv += ["-p", f"{k}={p[k]!r}"]
    if p["cdu"] is None:
        argv += ["-p", "cdu=False"]
    else:
        argv += ["-p", f"cdu_sets={p['cdu']['sets']}", "-p", f"cdu_ways={p['cdu']['ways']}"]
    argv += ["-p", f"dsu_cores={dsu_cores}"]
    code, cap = run_cli(argv, capsys)
    assert code == 0, cap.err
    return (tmp_path / "tile.v").read_text()


@pytest.mark.parametrize("policy", ["static", None])
def test_both_cosim_tops_simulate_the_verilog_that_ships(tmp_path, capsys, monkeypatch, policy):
    """The command line, the Amaranth top and the Verilator top each construct one DecodeTile,
    with the same arguments; the Verilator top's generates the command line's Verilog (the
    Amaranth top's, constructed alike, is not converted a third time)."""
    built = []
    construct = DecodeTile.__init__

    @functools.wraps(construct)       # its signature: the parameter checks read it
    def recorded(self, *args, **kwargs):
        bound = inspect.signature(construct).bind(self, *args, **kwargs)
        bound.apply_defaults()
        given = {k: v for k, v in bound.arguments.items() if k != "self"}
        if given["cdu"] is not None:            # a missing CDU parameter takes its default
            given["cdu"] = dict(CDU_DEFAULTS, **given["cdu"])
        built.append((self, given))
        construct(self, *args, **kwargs)
    monkeypatch.setattr(DecodeTile, "__init__", recorded)
    run = RunInputs(dataclasses.replace(SETUP, policy=policy))
    p = run.params()
    shipped = _cli_verilog(p, tmp_path, capsys)
    amaranth_top = CosimTop(run.image()[0], p)
    verilator_top = CosimVerilatorTop(p)
    assert [obj for obj, _ in built[1:]] == [amaranth_top.dut, verilator_top.dut]
    assert len(built) == 3 and built[0][1] == built[1][1] == built[2][1]
    for top in (amaranth_top, verilator_top):
        assert type(top.dut) is DecodeTile and top.dut.dsu_cores == 0
        assert (top.tile, top.seq) == (top.dut.tile, top.dut.seq)
    assert verilog.convert(verilator_top.dut, name="tile", emit_src=False) == shipped


def test_the_dsu_top_runs_the_decode_tiles_own_cluster_and_link():
    s = Setup(lanes=16, requests=2, prompt_lens=(2, 3), steps=1, engines=1, max_ctx=32,
                policy="static", dsu=True)
    p = RunInputs(s).params()
    top = CosimVerilatorTop(p)
    dt = top.dut
    assert isinstance(dt, DecodeTile) and dt.dsu_cores == p["dsu"]["cores"]
    assert (top.cluster, top.link) == (dt.cluster, dt.link)
    assert dt.cluster.firmware == p["dsu"]["firmware"] and dt.cluster.firmware
    assert "round_abort" in dt.signature.members
