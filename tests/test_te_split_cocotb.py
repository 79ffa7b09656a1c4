"""The split and pipelined TE engines' generated Verilog on Verilator (cocotb), driven by the
same plans as the Amaranth bench (tests/test_te_split.py): RTL == bit-exact model on random,
rising-maximum and edge-case steps under every (idle, backpressure) pair, one build and one
cocotb test per engine (32 lanes); the cycle formula and the rescale count without stalls."""

import numpy as np
from tricut.sim.harness.streams import IDLE_BACKPRESSURE
from tricut.sim.harness.te import make_vector, rising_max_inputs, simulate_verilator_matrix

from test_te import edge_steps, random_vector
from test_te_split import check_split, split


def test_cocotb_split_nvfp4_l32_matrix_random_rising_and_edges():
    rng = np.random.default_rng(202)
    G, d, L = 4, 128, 32
    vecs = split([random_vector(rng, "nvfp4", G, d, L, 6),
                  make_vector(*rising_max_inputs(rng, G, d, 5), "nvfp4", lanes=L),
                  random_vector(rng, "nvfp4", G, d, L, 3, partial=True)]
                 + edge_steps(rng, "nvfp4", G, d, L,
                              only=["mask", "bad_kv", "empty", "early", "toolong", "normal"]))
    runs = simulate_verilator_matrix(vecs, seed=9)
    assert list(runs) == IDLE_BACKPRESSURE
    for pair, res in runs.items():
        check_split(vecs, res, check_cycles=pair == ("none", "none"))
    res = runs[("none", "none")]
    assert res[1].v_rescale == G * 4 * (d // L)
    assert res[0].cycles == vecs[0].golden().cycles


def test_cocotb_pipelined_fp8_l32_matrix_random_rising_and_edges():
    """The pipelined engine on Verilator: fp8 (24 x 8 V lanes, the output in three passes), G 2,
    head_dim 64, 32 lanes (Dk 2: 8 token slots, the deepest V buffer of the shipped lanes)."""
    rng = np.random.default_rng(303)
    G, d, L = 2, 64, 32
    vecs = split([random_vector(rng, "fp8", G, d, L, 7),
                  make_vector(*rising_max_inputs(rng, G, d, 6), "fp8", lanes=L),
                  random_vector(rng, "fp8", G, d, L, 3, partial=True)]
                 + edge_steps(rng, "fp8", G, d, L,
                              only=["mask", "bad_kv", "empty", "early", "toolong", "normal"]),
                 "pipelined")
    runs = simulate_verilator_matrix(vecs, seed=10)
    assert list(runs) == IDLE_BACKPRESSURE
    for pair, res in runs.items():
        check_split(vecs, res, check_cycles=pair == ("none", "none"))
    res = runs[("none", "none")]
    assert res[1].v_rescale == G * 5 * (d // L)
    assert res[0].cycles == vecs[0].golden().cycles
