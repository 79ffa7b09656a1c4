"""The engines of the tile's timing model (``models/tile_timing.py``) against
the TE's cycle formula (``models.te.te_cycles``): one job on one engine, its K/V always there
and its output always taken, takes exactly the engine's cycles, for both designs the tile
runs, every K/V format, 2..32 lanes, normalised and partial outputs. (In the tile the engines
wait for K/V and for the output arbiter; those runs are checked against Verilator in
``tests/test_tile_timing.py``.)"""

import dataclasses

import pytest

from tricut.models.config import KV_DTYPES
from tricut.models.te import te_cycles
from tricut.models.tile import TILE_ENGINES
from tricut.models.tile_timing import TileConfig, engine_job_cycles, predict_run

SHAPES = [(64, 1, 2), (64, 2, 16), (64, 4, 32), (128, 4, 32), (128, 7, 16), (128, 8, 32),
          (256, 2, 8)]


@pytest.mark.parametrize("engine", TILE_ENGINES)
@pytest.mark.parametrize("kv_dtype", KV_DTYPES)
def test_one_job_takes_the_engines_cycles(engine, kv_dtype):
    for head_dim, G, lanes in SHAPES:
        cfg = TileConfig(engines=1, head_dim=head_dim, G=G, lanes=lanes, num_kv_heads=1,
                               num_layers=1, engine=engine, kv_dtype=kv_dtype)
        for n in (1, 2, 3, 9):
            for partial in (False, True):
                want = te_cycles(n, head_dim, G, lanes, partial, engine=engine,
                                 kv_dtype=kv_dtype)
                assert engine_job_cycles(cfg, n, partial) == want, \
                    (head_dim, G, lanes, n, partial)


def test_the_engines_differ_and_a_wrong_latency_is_seen():
    cfg = TileConfig(engines=1, head_dim=128, G=4, lanes=32, num_kv_heads=1,
                           num_layers=1, kv_dtype="fp8")
    serial = dataclasses.replace(cfg, engine="serial")
    assert engine_job_cycles(cfg, 9) < engine_job_cycles(serial, 9)
    # the pipelined engine's fp8 and NVFP4 latencies differ (its K multipliers, V passes)
    assert engine_job_cycles(cfg, 9) != engine_job_cycles(
        dataclasses.replace(cfg, kv_dtype="nvfp4"), 9)


def test_an_engine_the_model_does_not_have_is_refused():
    cfg = TileConfig(engines=1, head_dim=64, G=2, lanes=16, num_kv_heads=1,
                           num_layers=1, engine="split")
    with pytest.raises(ValueError, match="timing model has the engines serial, pipelined"):
        predict_run(cfg, [], [])
