"""Fit of the CDU front end's cycles for the fast system model.

The RTL front end (``rtl/cdu/frontend.py``) issues one operation (a prefetch or a demand
read) per cycle inside a (slot, layer) unit, plus a fixed cost per unit (its W decision,
planning, predictor update) and per step-descriptor beat. This script runs the RTL front end
(Amaranth simulator, ``full`` pattern, no idle or backpressure) on training shapes and fits

    cycles = R + P + W + per_unit · units + per_beat · beats

per policy by least squares; ``tests/test_calibration.py`` checks held-out shapes within 2 %.
It prints the table; with ``--write`` it also stores it (rounded to 0.01 cycle), with this
command line, as the "cdu" entry of the fast model's data file ``sim/fast/unit_costs.json``
(``UnitCosts.cdu``, read by ``sim/fast/timing.py``; the "dsu" entry is kept).

    .venv/bin/python benchmarks/cdu_cycles_fit.py [--write]
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import numpy as np

from tricut.models.cdu import POLICIES, SlotDesc, StepDesc
from tricut.sim.fast.timing import UnitCosts
from tricut.sim.harness.cdu import frontend_cycles

#: (slots, layers, steps, context): training shapes (the test uses others)
TRAIN = [(1, 2, 2, 300), (2, 3, 3, 160), (2, 2, 2, 640), (3, 1, 2, 400), (4, 2, 2, 90)]
#: the fast model's data file in this checkout
COSTS_PATH = Path(__file__).resolve().parent.parent / "sim" / "fast" / "unit_costs.json"
COMMAND = ".venv/bin/python benchmarks/cdu_cycles_fit.py --write"


def descs_of(slots, layers, steps, ctx):
    return [StepDesc(t, tuple(SlotDesc(i, i, ctx + 37 * i + t) for i in range(slots)),
                     tuple(range(layers))) for t in range(steps)]


def measure(policy, shape):
    slots, layers, steps, ctx = shape
    counts, cycles = frontend_cycles(descs_of(*shape), policy)
    units = counts["W"]
    beats = steps * (1 + slots + layers)
    return counts, units, beats, cycles


def costs_with(costs: UnitCosts, fits: dict, command: str = COMMAND) -> UnitCosts:
    """``costs`` with the CDU table replaced by ``fits`` (policy -> (per_unit, per_beat)),
    rounded to 0.01 cycle, produced by ``command``."""
    table = {p: tuple(round(float(c), 2) + 0.0 for c in fits[p]) for p in POLICIES}
    return dataclasses.replace(costs, cdu=table, cdu_command=command)


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true",
                    help="store the fitted table in sim/fast/unit_costs.json (default: print only)")
    return ap.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    current = UnitCosts.load(COSTS_PATH)       # a broken data file stops us before the RTL runs
    print("| policy | per_unit | per_beat | worst training residual (cycles) |")
    print("|---|---|---|---|")
    fits = {}
    for policy in POLICIES:
        rows = [measure(policy, s) for s in TRAIN]
        a = np.array([[u, b] for _, u, b, _ in rows], float)
        y = np.array([c - sum(k.values()) for k, _, _, c in rows], float)
        coef, *_ = np.linalg.lstsq(a, y, rcond=None)
        fits[policy] = coef
        print(f"| {policy} | {coef[0]:.2f} | {coef[1]:.2f} | {np.abs(a @ coef - y).max():.1f} |", flush=True)
    if args.write:
        costs_with(current, fits).save(COSTS_PATH)
        print("\nwritten to sim/fast/unit_costs.json")
    else:
        print("\nnot written (pass --write to store it in sim/fast/unit_costs.json)")


if __name__ == "__main__":
    main()
