"""The split and pipelined TE engines' generated Verilog on Verilator (cocotb), driven by the
same plans as the Amaranth bench (tests/test_te_split.py): RTL == bit-exact model on random,
rising-maximum and edge-case steps under every (idle, backpressure) pair, one build and one
cocotb test per engine (32 lanes); the cycle formula and the rescale count without stalls."""

import numpy as np
from tricut.sim.harness.streams import IDLE_BACKPRESSURE
from tricut.sim.harness.te import make_vector, rising_max_inputs, simulate_verilator_matrix
from tricut.sim.harness.te_stimulus import check_split, edge_steps, on_engine, random_vector


def _matrix(engine, kv_dtype, G, d, L, n_random, n_rising, seed, plan_seed):
    """Random (``n_random`` tokens), rising-maximum (``n_rising``), partial and edge-case
    steps through one Verilator build under every (idle, backpressure) pair: RTL == model;
    unstalled, the cycle formula and the worst-case rescale count."""
    rng = np.random.default_rng(seed)
    vecs = on_engine([random_vector(rng, kv_dtype, G, d, L, n_random),
                      make_vector(*rising_max_inputs(rng, G, d, n_rising), kv_dtype, lanes=L),
                      random_vector(rng, kv_dtype, G, d, L, 3, partial=True)]
                     + edge_steps(rng, kv_dtype, G, d, L,
                                  only=["mask", "bad_kv", "empty", "early", "toolong", "normal"]),
                     engine)
    runs = simulate_verilator_matrix(vecs, seed=plan_seed)
    assert list(runs) == IDLE_BACKPRESSURE
    for pair, res in runs.items():
        check_split(vecs, res, check_cycles=pair == ("none", "none"))
    res = runs[("none", "none")]
    assert res[1].v_rescale == G * (n_rising - 1) * (d // L)
    assert res[0].cycles == vecs[0].golden().cycles


def test_cocotb_split_nvfp4_l32_matrix_random_rising_and_edges():
    _matrix("split", "nvfp4", G=4, d=128, L=32, n_random=6, n_rising=5, seed=202, plan_seed=9)


def test_cocotb_pipelined_fp8_l32_matrix_random_rising_and_edges():
    """The pipelined engine on Verilator: fp8 (24 x 8 V lanes, the output in three passes), G 2,
    head_dim 64, 32 lanes (Dk 2: 8 token slots, the deepest V buffer of the shipped lanes)."""
    _matrix("pipelined", "fp8", G=2, d=64, L=32, n_random=7, n_rising=6, seed=303, plan_seed=10)
