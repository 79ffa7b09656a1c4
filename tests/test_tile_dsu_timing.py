"""The cached tile's fast model with the DSU cluster in the loop
(``models/tile_timing.predict_dsu_run``): every round's cycles (first descriptor to
last completion) and every layer's predicted exactly from the configuration, the CDU golden
model's decisions and each round's first-descriptor cycle, on a real Verilator run (CDU
``static``, the configuration ``tests/test_tile_dsu.py`` builds); a wrong configuration or
another policy's decisions predict differently; the prediction does not depend on when a
round starts (the step's first CDU decision waits for layer 0's ``go``); the same run with
transient HBM errors on two fills, which the CDU re-sends (exact only with the retries
modelled); and, without a simulator, the rounds of a recorded Verilator run with split-K on
4 engines (CDU ``adaptive``), where one split's outputs wait for the combine unit's previous
split.

One Verilator build (shared with ``tests/test_tile_dsu.py``): a few seconds when it exists,
1-4 minutes the first time.
"""

from __future__ import annotations

import dataclasses

import pytest

from tricut.sim.harness.tile.cosim import simulate
from tricut.sim.harness.tile.setup import Setup, predict_dsu_rounds, schedule


STATIC = Setup(lanes=16, requests=4, prompt_lens=(3, 1, 13, 2), steps=3, engines=1, dsu=True,
                 max_batch=3, max_ctx=32, policy="static")

#: ``STATIC`` with transient HBM errors (the HBM model's fault table is loaded at run time:
#: the same Verilator build): request 2's layer-0 block 0 (kv head 1) fails twice, request
#: 0's layer-1 block 0 (kv head 0) once; both blocks are first read by a CDU fill, which the
#: CDU re-sends (``hbm_retries`` 3, checked by ``simulate``)
FAULTS = dataclasses.replace(STATIC, faults=((2, 0, 1, 0, 2), (0, 1, 0, 0, 1)))

#: ``benchmarks/tile_dsu.py``'s "CDU adaptive, split-K 12" run with 3 steps on the serial
#: engine, measured on Verilator: per round ``(first descriptor, last completion)``
#: (``RunResult.round_spans``); its rounds are the DSU model's (``tile.setup.schedule``)
ADAPTIVE = dataclasses.replace(STATIC, engines=4, policy="adaptive", kv_dtype="fp8",
                               split_tokens=12, engine="serial")
ADAPTIVE_SPANS = [(7198, 10189), (11817, 14248), (15869, 18492), (19321, 21232),
                  (21701, 23457), (23925, 25777)]
#: ... and its layers (``RunResult.layer_cycles``, layers 0 and 1 per round)
ADAPTIVE_LAYERS = [(1658, 942), (1024, 1016), (1120, 1112), (1005, 776), (813, 813),
                   (861, 861)]


@pytest.fixture(scope="module")
def run():
    """The static run on Verilator, checked bit-exact and CDU-equal first."""
    rep = simulate(STATIC, sim="verilator", stop_early=False)
    assert rep.ok, rep.differences[:3]
    t = rep.tile
    assert len(t.rounds) == 6 and not t.aborted
    return t


@pytest.fixture(scope="module")
def faults_run():
    """The static run with ``FAULTS``' HBM errors on Verilator, checked bit-exact, CDU-equal
    and with the expected CDU retries first."""
    rep = simulate(FAULTS, sim="verilator", stop_early=False)
    assert rep.ok, rep.differences[:3]
    t = rep.tile
    assert len(t.rounds) == 6 and not t.aborted
    return t


def _firsts(t):
    return [t.round_spans[ri][0] for ri in range(len(t.rounds))]


def _measured(t):
    return [t.step_cycles[ri] for ri in range(len(t.rounds))]


def test_every_round_and_layer_exact(run):
    pred, layers = predict_dsu_rounds(STATIC, run.rounds, _firsts(run))
    assert pred == _measured(run)
    assert layers == run.layer_cycles
    # the DSU's time between rounds is there (and is not in the prediction)
    assert all(run.round_spans[ri + 1][0] - run.round_spans[ri][1] > 100
               for ri in range(len(run.rounds) - 1))


def test_round_start_only_shifts_the_round(run):
    """A round's cycles do not depend on when it starts (its first CDU decision, a W, waits
    for layer 0's ``go``; the previous round's fills are answered in the gap); a round
    starting before the previous one ended is refused."""
    firsts = _firsts(run)
    later = [f + 1000 * ri for ri, f in enumerate(firsts)]
    assert predict_dsu_rounds(STATIC, run.rounds, later)[0] == _measured(run)
    early = list(firsts)
    early[2] = run.round_spans[1][1] - 500
    with pytest.raises(ValueError, match="round 2"):
        predict_dsu_rounds(STATIC, run.rounds, early)


def test_wrong_configuration_or_decisions_predict_differently(run):
    measured, firsts = _measured(run), _firsts(run)
    for wrong in (dict(latency=STATIC.latency + 1), dict(engines=2), dict(max_beats=8)):
        got = predict_dsu_rounds(dataclasses.replace(STATIC, **wrong), run.rounds,
                                          firsts)[0]
        assert got != measured, wrong
    assert predict_dsu_rounds(STATIC, run.rounds, firsts,
                                       policy="disabled")[0] != measured


def test_cdu_fill_retries_exact(faults_run, run):
    """The faulty fills answered with ``err`` (every kv head of the block read again per
    attempt), re-sent by the CDU (its retry bit from the response, loaded into ``hbm_req``
    before first attempts), the MSHR held and the ready entry waiting until the clean
    response: every round and layer exact; the same rounds with the retries ignored
    (``retries={}``) predict differently, and the faults do cost cycles."""
    t = faults_run
    firsts = _firsts(t)
    pred, layers = predict_dsu_rounds(FAULTS, t.rounds, firsts)
    assert pred == _measured(t)
    assert layers == t.layer_cycles
    ignored, ignored_layers = predict_dsu_rounds(FAULTS, t.rounds, firsts, retries={})
    assert ignored != pred and ignored_layers != layers
    assert sum(ignored) < sum(pred)
    # the steps are the fault-free ones (the CDU recovers every error); the errors cost cycles
    assert t.rounds == run.rounds
    assert sum(t.layer_cycles.values()) > sum(run.layer_cycles.values())


def test_split_k_combine_unit_recorded_run():
    """The recorded adaptive run (no simulator): every round and layer exact. Rounds 3-5 are
    one request alone (14-16 tokens: two parts per KV head, the four jobs on four engines
    at once): head 1's first part is ready while the combine unit still folds and writes
    head 0, and waits ``Dk + G*Dk + 1`` = 21 cycles for it (without that wait the model
    gave 21-22 cycles less per layer)."""
    rounds = [[dataclasses.asdict(d) for d in descs] for descs in schedule(ADAPTIVE)]
    assert [len(r) for r in rounds] == [3, 3, 3, 1, 1, 1]
    pred, layers = predict_dsu_rounds(ADAPTIVE, rounds, [a for a, _ in ADAPTIVE_SPANS])
    assert pred == [z - a + 1 for a, z in ADAPTIVE_SPANS]
    assert layers == {(ri, li): c for ri, pair in enumerate(ADAPTIVE_LAYERS)
                      for li, c in enumerate(pair)}
