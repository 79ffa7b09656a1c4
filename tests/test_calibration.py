"""Calibration: the fast model's per-unit cycles agree with the RTL on small shapes (≤ 2 %):
TE engine cycles, CDU front-end cycles, DSU scheduling-round cycles (the CDU and DSU
coefficients as read from sim/fast/unit_costs.json, which the fit scripts write)."""

import numpy as np
import pytest

from tricut.models.cdu import POLICIES
from tricut.models.config import load_gpu
from tricut.sim.harness.te import run_te
from tricut.sim.harness.unit_matrices import MATRICES
from tricut.sim.fast.timing import UnitTiming

H100 = load_gpu("h100-sxm5")


@pytest.mark.parametrize("head_dim,G,n,kv_dtype", [(64, 1, 3, "bf16"), (64, 4, 5, "fp8"),
                                                 (64, 2, 17, "nvfp4")])
def test_te_cycles_fast_model_vs_rtl(head_dim, G, n, kv_dtype):
    rng = np.random.default_rng(n)
    q = rng.standard_normal((G, head_dim)).astype(np.float32)
    k = rng.standard_normal((n, head_dim)).astype(np.float32)
    v = rng.standard_normal((n, head_dim)).astype(np.float32)
    units = UnitTiming.from_gpu(H100)     # cycles: the GPU's clocks do not enter
    *_, cycles, status = run_te(q, k, v, kv_dtype, lanes=units.te_lanes,
                                engine=units.te_engine)
    predicted = units.te_job_cycles(n, head_dim, G, kv_dtype=kv_dtype)
    assert predicted == cycles
    # Two jobs with n tokens in all cost two fills: the fast model adds per job, not per step.
    assert units.te_job_cycles(2 * n, head_dim, G, jobs=2, kv_dtype=kv_dtype) == 2 * predicted


#: the DSU's calibration matrix (sim/harness/unit_matrices.py): the suite runs one case per
#: profile; benchmarks/unit_matrices.py every case (benchmarks/dsu_fit.py reports the same
#: held-out schedules' errors)
DSU_ROUNDS = MATRICES["dsu_round_cycles"]


@pytest.mark.parametrize("profile,n_slots,cap", DSU_ROUNDS.in_tests, ids=DSU_ROUNDS.ids())
def test_dsu_round_cycles_fast_model_vs_rtl(profile, n_slots, cap):
    DSU_ROUNDS.check(profile, n_slots, cap)


@pytest.mark.parametrize("policy", POLICIES)
def test_cdu_cycles_fast_model_vs_rtl(policy):
    """The CDU front end in RTL (full pattern, no stalls) on shapes not used by the fit
    (benchmarks/cdu_cycles_fit.py), against ``UnitTiming.cdu_step_cycles`` with the op counts
    the system model's reduction gives (reads = every block, prefetches = every cached block,
    one write per unit)."""
    from tricut.models.cdu import SlotDesc, StepDesc
    from tricut.sim.fast.cdu_reduction import CduReduction
    from tricut.sim.harness.cdu import frontend_cycles

    units = UnitTiming.from_gpu(H100)     # cycles: the GPU's clocks do not enter
    for slots, layers, steps, ctx in ((2, 2, 3, 250), (3, 2, 2, 500), (1, 3, 2, 700)):
        descs = [StepDesc(t, tuple(SlotDesc(i, i, ctx + 37 * i + t) for i in range(slots)),
                          tuple(range(layers))) for t in range(steps)]
        counts, cycles = frontend_cycles(descs, policy)
        red = CduReduction(policy, 64, 16, 4, layers)      # op counts do not depend on sizing
        per_step = [red.step([sd.seq_len for sd in st.slots], [1] * slots) for st in descs]
        predicted = sum(units.cdu_step_cycles(c.accesses, c.prefetches, slots * layers,
                                              1 + slots + layers, policy) for c in per_step)
        assert counts["R"] == sum(c.accesses for c in per_step)
        assert abs(predicted - cycles) / cycles <= 0.02, (slots, layers, steps, ctx, predicted, cycles)
