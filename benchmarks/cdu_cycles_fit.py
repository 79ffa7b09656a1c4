"""Fit of the CDU front end's cycles for the fast system model (``UnitTiming.cdu_fit``).

The RTL front end (``rtl/cdu/frontend.py``) issues one operation (a prefetch or a demand
read) per cycle inside a (slot, layer) unit, plus a fixed cost per unit (its W decision,
planning, predictor update) and per step-descriptor beat. This script runs the RTL front end
(Amaranth simulator, ``full`` pattern, no idle or backpressure) on training shapes and fits

    cycles = R + P + W + per_unit · units + per_beat · beats

per policy by least squares; ``tests/test_calibration.py`` checks held-out shapes within 2 %.

    .venv/bin/python benchmarks/cdu_cycles_fit.py
"""

from __future__ import annotations

import numpy as np

from tricut.models.cdu import SlotDesc, StepDesc
from tricut.sim.harness.cdu import frontend_cycles

#: (slots, layers, steps, context): training shapes (the test uses others)
TRAIN = [(1, 2, 2, 300), (2, 3, 3, 160), (2, 2, 2, 640), (3, 1, 2, 400), (4, 2, 2, 90)]


def descs_of(slots, layers, steps, ctx):
    return [StepDesc(t, tuple(SlotDesc(i, i, ctx + 37 * i + t) for i in range(slots)),
                     tuple(range(layers))) for t in range(steps)]


def measure(policy, shape):
    slots, layers, steps, ctx = shape
    counts, cycles = frontend_cycles(descs_of(*shape), policy)
    units = counts["W"]
    beats = steps * (1 + slots + layers)
    return counts, units, beats, cycles


def main():
    print("| policy | per_unit | per_beat | worst training residual (cycles) |")
    print("|---|---|---|---|")
    for policy in ("disabled", "static", "adaptive"):
        rows = [measure(policy, s) for s in TRAIN]
        a = np.array([[u, b] for _, u, b, _ in rows], float)
        y = np.array([c - sum(k.values()) for k, _, _, c in rows], float)
        coef, *_ = np.linalg.lstsq(a, y, rcond=None)
        print(f"| {policy} | {coef[0]:.2f} | {coef[1]:.2f} | {np.abs(a @ coef - y).max():.1f} |", flush=True)


if __name__ == "__main__":
    main()
