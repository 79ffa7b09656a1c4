"""The TE decode engine's generated Verilog on Verilator (cocotb), driven by the same plans
(stimulus beats and idle/backpressure sequences) as the Amaranth bench: RTL == bit-exact
model, status flags, and the cycle formula; a short step sequence under every (idle,
backpressure) pair of schedules in one build and one cocotb test. Every plan ends with the
drained check (``simulate_verilator`` raises ``NotDrained``).

Each engine configuration is a separate Verilator build (~40 s of C++ compile on one core),
so the run builds two designs (bf16 and nvfp4; the nvfp4 decoder contains the E4M3 decode
that the fp8 design uses per lane). fp8 on Verilator: ``simulate_verilator`` on an fp8 vector.
"""

import os

import numpy as np
from tricut.models import te as M
from tricut.sim.harness.streams import IDLE_BACKPRESSURE
from tricut.sim.harness.te import simulate_verilator, simulate_verilator_matrix
from tricut.sim.harness.te_stimulus import (EDGE_NAMES, check_steps, edge_steps, matrix_steps,
                                            random_vector)

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



def test_cocotb_idle_backpressure_matrix():
    """The matrix steps of tests/test_te.py, four heads, on the bf16 build above: the nine
    (idle, backpressure) plans one after another (engine reset between them)."""
    rng = np.random.default_rng(103)
    vecs = matrix_steps(rng, G=4, lanes=8)
    runs = simulate_verilator_matrix(vecs, seed=7)
    assert list(runs) == IDLE_BACKPRESSURE
    formula = sum(M.te_cycles(v.n_announced, v.d, v.G, v.lanes, v.partial) for v in vecs[:2])
    for pair, res in runs.items():
        check_steps(vecs, res)
        if pair == ("none", "none"):
            check_steps(vecs[:2], res[:2], check_cycles=True)
        else:
            assert sum(r.cycles for r in res[:2]) > formula, pair
