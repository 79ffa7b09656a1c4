"""The TE decode engine's generated Verilog on Verilator (cocotb), driven by the same plans
(stimulus beats and idle/backpressure sequences) as the Amaranth bench: RTL == bit-exact
model, status flags, and the cycle formula.

Each engine configuration is a separate Verilator build (~40 s of C++ compile on one core),
so the run builds two designs (bf16 and nvfp4; the nvfp4 decoder contains the E4M3 decode
that the fp8 design uses per lane). fp8 on Verilator: ``simulate_verilator`` on an fp8 vector.
"""

import os

import numpy as np
from tricut.sim.harness.te import simulate_verilator

from test_te import EDGE_NAMES, check_steps, edge_steps, random_vector

LONG_N = int(os.environ.get("TRICUT_TE_LONG_N", "20"))


def test_cocotb_bf16_g4_random_edge_cases_and_long_context():
    rng = np.random.default_rng(101)
    G, d, L = 4, 64, 8
    vecs = [random_vector(rng, "bf16", G, d, L, 5)]
    vecs += edge_steps(rng, "bf16", G, d, L)
    vecs.append(random_vector(rng, "bf16", G, d, L, max(300, LONG_N)))   # crosses 16-token blocks
    res = simulate_verilator(vecs, idle=0.3, backpressure=0.3, seed=5)
    check_steps(vecs, res)
    assert res[1 + EDGE_NAMES.index("nan_q")].status["nonfinite_in"]
    assert res[1 + EDGE_NAMES.index("empty")].status["empty"]


def test_cocotb_nvfp4_g7_d128_unstalled_cycles():
    rng = np.random.default_rng(102)
    vecs = [random_vector(rng, "nvfp4", 7, 128, 16, 20),
            random_vector(rng, "nvfp4", 7, 128, 16, 3, partial=True)]
    vecs += edge_steps(rng, "nvfp4", 7, 128, 16, only=["mask", "bad_kv", "early", "normal"])
    res = simulate_verilator(vecs, seed=6)
    check_steps(vecs[:2], res[:2], check_cycles=True)
    check_steps(vecs, res)

