"""The cached tile's fast model (``models/tile_timing.py``) against the tile on
Verilator (docs/tile/timing.md, "Integration calibration"): every layer's cycles (``go`` to
``done``) predicted exactly from the configuration and the CDU golden model's decisions, on
a ``static`` run (L2 fills, prefetches, new-token writes waiting for fills, a second pass
re-reading HBM with one engine) and the same steps under ``disabled`` (every block a bypass
read from HBM); and the prediction fails when the model is given a wrong configuration or
another policy's decisions.

One Verilator build (``-O0``, the tile shape of ``tests/test_tile_cached.py``'s STATIC,
shared with ``tests/test_tile_cosim_verilator.py``): ~90 s the first time on 2 loaded cores,
~20 s when it exists.
"""

from __future__ import annotations

import dataclasses

import pytest

from tricut.models.cdu import HINT_OF_RESIDENCY, SlotDesc, StepDesc
from tricut.rtl.tile.attention_path import CDU_FE_ENTRIES
from tricut.models.tile_timing import cdu_decisions, predict_run
from tricut.sim.harness.tile.cosim import simulate
from tricut.sim.harness.tile.setup import Setup, predict_layers, schedule, tile_config


#: tiny-te, bf16, 1 engine, prompts 3 and 17, two decode steps (STATIC of test_tile_cached)
STATIC = Setup(lanes=16, model="tiny-te", requests=2, prompt_lens=(3, 17), steps=2, engines=1,
                 max_ctx=32, policy="static")


@pytest.fixture(scope="module")
def runs():
    """The two runs on Verilator (``-O0``), each checked bit-exact and CDU-equal first."""
    out = {}
    for s in (STATIC, dataclasses.replace(STATIC, policy="disabled")):
        rep = simulate(s, sim="verilator")
        assert rep.ok, rep.differences[:3]
        out[s.policy] = (s, rep.tile.layer_cycles)
    return out


@pytest.mark.parametrize("policy", ["static", "disabled"])
def test_model_predicts_every_layer_exactly(runs, policy):
    s, measured = runs[policy]
    predicted = predict_layers(s)
    assert set(predicted) == set(measured) and len(measured) == 4
    assert predicted == measured
    if policy == "static":      # the L2 path is slower here: fills, waits, HBM re-reads
        assert all(measured[k] > runs["disabled"][1][k] for k in measured if k[0] == 0)


def test_model_fails_with_a_wrong_configuration(runs):
    s, measured = runs["static"]
    for wrong in (dict(latency=s.latency + 1), dict(engines=2), dict(max_beats=8),
                  dict(engine="serial")):
        assert predict_layers(dataclasses.replace(s, **wrong)) != measured, wrong


def test_model_fails_with_another_policys_decisions(runs):
    s, measured = runs["static"]
    rounds = [[(d.slot, d.request, d.seq_len) for d in descs] for descs in schedule(s)]
    steps = [StepDesc(descs[0].step, tuple(SlotDesc(d.slot, d.request, d.seq_len,
                                                    HINT_OF_RESIDENCY[d.residency])
                                           for d in descs), (0, 1)) for descs in schedule(s)]
    mine = cdu_decisions("static", s.cdu_sets, s.cdu_ways, s.distance, steps, CDU_FE_ENTRIES)
    other = cdu_decisions("disabled", s.cdu_sets, s.cdu_ways, s.distance, steps,
                          CDU_FE_ENTRIES)
    cfg = tile_config(s)
    assert predict_run(cfg, rounds, mine) == measured
    assert predict_run(cfg, rounds, other) != measured
