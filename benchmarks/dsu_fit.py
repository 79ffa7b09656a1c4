"""Fit the fast model's DSU cost per scheduling round to the scheduler firmware on the RTL.

Runs random schedules through ``sim.dsu_run.run_dsu`` (the RISC-V cluster with
``rtl/dsu/firmware/scheduler.c``, Verilator, no backpressure), takes every round's measured
cycles (end of the previous round -> first descriptor of this one) and its counts (active
slots A after admission, requests admitted, requests retired by the previous round's
completions, blocked intake head), and fits per profile and regime (A <= cap: "all fit";
A > cap: "select") by least squares

    cycles = base + per_active·A + per_admitted·admitted + per_retired·retired
             + per_compact·A_prev·[retired > 0] + per_blocked·blocked,   A_prev = A - admitted + retired

(the regressors are ``UnitTiming.dsu_round_terms``). Training: 8 slots, 24 requests, seeds
11-14, caps 8 and 4. Held out: seed 7 with cap 8 (tests/test_calibration.py) and cap 4
(the select regime). Prints the coefficients as ``UnitTiming`` tuples and the train /
held-out errors: aggregate (summed cycles) and per round (median / p90 / max |error|).

    .venv/bin/python benchmarks/dsu_fit.py [--jobs 2]
"""

from __future__ import annotations

import argparse
import random
import time
from concurrent.futures import ProcessPoolExecutor

import numpy as np

from tricut.models.dsu import PROFILES, RequestSpec
from tricut.sim.timing import UnitTiming

N_SLOTS = 8
N_REQUESTS = 24
TRAIN_SEEDS = (11, 12, 13, 14)
HELD_SEED = 7                  # the schedule of tests/test_calibration.py
CAPS = (8, 4)                  # 8: every active slot fits; 4: the profile must select
ORDER = ("throughput-opt", "latency-opt", "fairness-opt")
COLUMNS = ("base", "per_active", "per_admitted", "per_retired", "per_compact", "per_blocked")


def schedule(seed: int, n: int = N_REQUESTS) -> list[RequestSpec]:
    """The random schedule of tests/test_calibration.py: prompt 1..8000, 2..12 new tokens,
    arrival round 0..30, priority 0..3."""
    rng = random.Random(seed)
    return [RequestSpec(i, rng.randint(1, 8000), rng.randint(2, 12), rng.randint(0, 30),
                        rng.randint(0, 3)) for i in range(n)]


def measure(job):
    """One RTL run: (profile, seed, cap) -> rounds with active > 0 (dicts: round, cycles,
    active, admitted, retired, blocked, batch)."""
    from tricut.sim.dsu_run import run_dsu
    profile, seed, cap = job
    res = run_dsu(schedule(seed), profile, n_slots=N_SLOTS, max_batch=cap, latency_batch=cap,
                  backpressure=False)
    if res.differences:
        raise RuntimeError(f"{job}: RTL differs from the golden model: {res.differences[:3]}")
    return job, [x for x in res.latencies if x["active"]]


def regime(row, cap):
    return "select" if row["active"] > cap else "all fit"


def design(rows):
    return np.array([UnitTiming.dsu_round_terms(r["active"], r["admitted"], r["retired"],
                                                r["blocked"]) for r in rows])


def errors(pred, meas):
    """(aggregate relative error of the sums, per-round |relative error| median, p90, max) in %."""
    pred, meas = np.asarray(pred, float), np.asarray(meas, float)
    rel = np.abs(pred - meas) / meas * 100
    return ((pred.sum() - meas.sum()) / meas.sum() * 100, float(np.median(rel)),
            float(np.percentile(rel, 90)), float(rel.max()))


def fmt(e):
    return f"agg {e[0]:+6.2f} %  per round median {e[1]:4.1f} % p90 {e[2]:4.1f} % max {e[3]:4.1f} %"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=2, help="parallel RTL runs (default 2)")
    args = ap.parse_args(argv)
    jobs = [(p, s, c) for p in ORDER for c in CAPS for s in (*TRAIN_SEEDS, HELD_SEED)]
    t0 = time.time()
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        runs = dict(pool.map(measure, jobs))
    print(f"{len(jobs)} RTL runs (Verilator, {N_SLOTS} slots, {N_REQUESTS} requests) "
          f"in {time.time() - t0:.0f} s\n")

    fits = {}
    for profile in ORDER:
        for reg in ("all fit", "select"):
            rows = [r for (p, s, c), rr in runs.items() if p == profile and s != HELD_SEED
                    for r in rr if regime(r, c) == reg]
            y = np.array([r["cycles"] for r in rows], float)
            coef, *_ = np.linalg.lstsq(design(rows), y, rcond=None)
            fits[profile, reg] = tuple(round(float(c), 1) for c in coef)
            e = errors(design(rows) @ coef, y)
            print(f"{profile:15s} {reg:8s} train ({len(rows):3d} rounds): {fmt(e)}")
    print()

    units = UnitTiming(
        dsu_fit_all_fit=tuple((p, *fits[p, "all fit"]) for p in ORDER),
        dsu_fit_select=tuple((p, *fits[p, "select"]) for p in ORDER))
    print("held out (seed 7): summed predicted vs measured cycles over the schedule")
    worst = 0.0
    for profile in ORDER:
        for cap in CAPS:
            rows = runs[profile, HELD_SEED, cap]
            pred = [units.dsu_round_cycles(r["active"], cap, profile, r["admitted"],
                                           r["retired"], r["blocked"]) for r in rows]
            meas = [r["cycles"] for r in rows]
            e = errors(pred, meas)
            worst = max(worst, abs(e[0]))
            n_sel = sum(regime(r, cap) == "select" for r in rows)
            print(f"{profile:15s} cap {cap} ({len(rows)} rounds, {n_sel} select): {fmt(e)}")
            for reg in ("all fit", "select"):
                idx = [i for i, r in enumerate(rows) if regime(r, cap) == reg]
                if idx and n_sel and len(idx) < len(rows):
                    print(f"{'':15s}   {reg:8s} ({len(idx):3d} rounds): "
                          f"{fmt(errors([pred[i] for i in idx], [meas[i] for i in idx]))}")
    print(f"\nworst held-out aggregate error: {worst:.2f} %\n")

    print("UnitTiming (sim/timing.py), columns profile, " + ", ".join(COLUMNS) + ":")
    for name, reg in (("dsu_fit_all_fit", "all fit"), ("dsu_fit_select", "select")):
        print(f"    {name}: tuple = (")
        print(",\n".join(f"        ({p!r}, " + ", ".join(f"{c}" for c in fits[p, reg]) + ")"
                         for p in ORDER) + ")")
    assert set(ORDER) == set(PROFILES)


if __name__ == "__main__":
    main()
