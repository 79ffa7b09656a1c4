"""The terms of one decode step's time with the ``te`` cut, and which of them bounds it: the TE
grid's busy time (the grid of decode tiles, one per SM: docs/system-model.md, "The TE term: a
grid of tiles"), the HBM time and the GEMV time (docs/results.md's TE rows,
``benchmarks/te_rows.py``)."""

from __future__ import annotations

import dataclasses

import numpy as np

from tricut.models.config import load_gpu, load_model
from tricut.sim.fast.stacks import DEFAULT_STACK, get_stack
from tricut.sim.fast.timing import StepModel, UnitTiming

__all__ = ["first_step_terms"]


def first_step_terms(model, tp, kv_dtype, batch, ctx, engine, lanes, gpu="h100-sxm5") -> dict:
    """One first decode step with the ``te`` cut (``batch`` requests of ``ctx`` context tokens,
    the TE design ``engine`` at ``lanes`` lanes; the ``DEFAULT_STACK`` without host jitter):
    its time and the terms of its ``max``, in ms (``step_ms``, ``te_ms``, ``hbm_ms``,
    ``gemv_ms``), and the term that bounds it (``bound``: ``"TE"``, ``"HBM"`` or ``"GEMV"``)."""
    g, m = load_gpu(gpu), load_model(model)
    units = dataclasses.replace(UnitTiming.from_gpu(g), te_engine=engine, te_lanes=lanes)
    sm = StepModel(m, g, kv_dtype, tp, frozenset({"te"}), units=units,
                   stack=get_stack(DEFAULT_STACK).with_values(host_jitter_s=0.0))
    st = sm.step_time([ctx + 1] * batch, [1] * batch, np.random.default_rng(0))
    hbm = (st.hbm_read_bytes + st.hbm_write_bytes) / (g.hbm_bandwidth * sm.assumptions.te_bw_efficiency)
    terms = {"TE": st.te_busy_s, "HBM": hbm, "GEMV": st.sm_busy_s}
    return dict(step_ms=st.time_s * 1e3, te_ms=st.te_busy_s * 1e3, hbm_ms=hbm * 1e3,
                gemv_ms=st.sm_busy_s * 1e3, bound=max(terms, key=terms.get))
