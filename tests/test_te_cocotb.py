"""The TE engines' generated Verilog on Verilator (cocotb), driven by the same plans
(stimulus beats and idle/backpressure sequences) as the Amaranth benches: RTL == bit-exact
model, status flags, and the cycle formula. Every plan ends with the drained check
(``simulate_verilator`` raises ``NotDrained``).

Each engine configuration is a separate Verilator build, so the suite runs two of the
``te_verilator`` matrix's designs (sim/harness/unit_matrices.py): the shipped pipelined engine
(fp8, 32 lanes, every (idle, backpressure) pair) and the serial engine (bf16, every edge case,
a long context); ``benchmarks/unit_matrices.py`` runs the split engine's and the serial NVFP4
builds too. The serial bf16 build also runs the matrix steps of tests/test_te.py below.
"""

import numpy as np
import pytest
from tricut.models import te as M
from tricut.sim.harness.streams import IDLE_BACKPRESSURE
from tricut.sim.harness.te import simulate_verilator_matrix
from tricut.sim.harness.te_stimulus import check_steps, matrix_steps
from tricut.sim.harness.unit_matrices import MATRICES

ON_VERILATOR = MATRICES["te_verilator"]


@pytest.mark.parametrize("engine,kv_dtype", ON_VERILATOR.in_tests, ids=ON_VERILATOR.ids())
def test_engine_on_verilator_equals_the_model(engine, kv_dtype):
    ON_VERILATOR.check(engine, kv_dtype)


def test_cocotb_idle_backpressure_matrix():
    """The matrix steps of tests/test_te.py, four heads, on the serial bf16 build: the nine
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
