"""Calibration: the fast model's per-unit cycles agree with the RTL on small shapes (≤ 2 %)."""

import numpy as np
import pytest

from tricut.sim.te_run import run_te
from tricut.sim.timing import UnitTiming


@pytest.mark.parametrize("head_dim,G,n,kv_dtype", [(64, 1, 3, "bf16"), (64, 4, 5, "fp8"),
                                                 (64, 2, 17, "nvfp4")])
def test_te_cycles_fast_model_vs_rtl(head_dim, G, n, kv_dtype):
    rng = np.random.default_rng(n)
    q = rng.standard_normal((G, head_dim)).astype(np.float32)
    k = rng.standard_normal((n, head_dim)).astype(np.float32)
    v = rng.standard_normal((n, head_dim)).astype(np.float32)
    units = UnitTiming()
    *_, cycles, status = run_te(q, k, v, kv_dtype, lanes=units.te_lanes)
    predicted = units.te_job_cycles(n, head_dim, G)
    assert abs(predicted - cycles) / cycles <= 0.02, (predicted, cycles)
    # Two jobs with n tokens in all cost two fills: the fast model adds per job, not per step.
    assert units.te_job_cycles(2 * n, head_dim, G, jobs=2) == 2 * predicted
