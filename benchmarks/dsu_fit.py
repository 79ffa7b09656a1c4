"""Fit the fast model's DSU cost per scheduling round to the scheduler firmware on the RTL.

Runs random schedules through ``tricut.sim.harness.dsu.run_dsu`` (the RISC-V cluster with
``rtl/dsu/firmware/scheduler.c``, Verilator, no backpressure) at several slot counts, takes
every round's measured cycles (end of the previous round -> first descriptor of this one) and
its counts (active slots A after admission, requests admitted, requests retired by the
previous round's completions, blocked intake head), and fits per profile and regime (A <= cap:
"all fit"; A > cap: "select") by least squares on the relative error per round

    cycles = base + per_active·A + per_admitted·adm + per_retired·ret
             + per_compact·A_prev·[ret > 0] + per_blocked·blocked
             + per_scan·(adm·A_prev + adm·(adm - 1)/2) + per_blocked_scan·blocked·A
             + per_cap·cap·[A > cap] + per_word·(ceil(n_slots / 32) - 1),
    A_prev = A - adm + ret

(the regressors are ``UnitTiming.dsu_round_terms``). The scan term is the firmware's
free-slot search plus the insertion into its slot-ordered active list: together they walk
every slot occupied at the moment of each admission; a blocked head's search walks the
occupied slots below the first free one (all A when none is free). The mask words (BATCH,
ENDED, ROLLED_BACK) are one per 32 slots.

Training (per profile): 8 slots, 24 requests (arrival rounds 0-30), seeds 11-14, caps 8 and
4; 16 / 32 / 64 slots, 3·n_slots requests (arrival rounds 0-20), seeds 15 / 16 / 17, caps
n_slots and (16 and 32 slots) n_slots / 2. Held out: 8 slots seed 7 caps 8 and 4 and 32 slots seed 21 cap 32
(tests/test_calibration.py), 64 slots seed 21 cap 64 (the system model's default DSU). Prints
the coefficients and the train / held-out errors: aggregate (summed cycles) and per round
(median / p90 / max |error|). ≈ 8 min with 2 jobs.

With ``--write`` it stores the two tables, with this command line, in the fast model's data
file ``sim/fast/unit_costs.json`` (its "dsu" entry; the "cdu" entry is kept), which
``sim/fast/timing.py`` reads; without it, it only prints.

    .venv/bin/python benchmarks/dsu_fit.py [--jobs 2] [--cache runs.json] [--write]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

from tricut.models.config import load_gpu
from tricut.models.dsu import PROFILES, RequestSpec
from tricut.sim.fast.timing import UnitCosts, UnitTiming

ORDER = ("throughput-opt", "latency-opt", "fairness-opt")
COLUMNS = UnitTiming.DSU_COLUMNS
#: the fast model's data file in this checkout
COSTS_PATH = Path(__file__).resolve().parent.parent / "sim" / "fast" / "unit_costs.json"
#: (n_slots, seed, cap) per profile
TRAIN = ([(8, s, c) for c in (8, 4) for s in (11, 12, 13, 14)]
         + [(16, 15, 16), (16, 15, 8), (32, 16, 32), (32, 16, 16), (64, 17, 64)])
HELD = [(8, 7, 8), (8, 7, 4), (32, 21, 32), (64, 21, 64)]


def schedule(seed: int, n_slots: int = 8) -> list[RequestSpec]:
    """The random schedules of tests/test_calibration.py: 3·n_slots requests, prompt 1..8000,
    2..12 new tokens, arrival round 0..30 (8 slots) or 0..20 (more slots), priority 0..3."""
    rng = random.Random(seed)
    last = 30 if n_slots == 8 else 20
    return [RequestSpec(i, rng.randint(1, 8000), rng.randint(2, 12), rng.randint(0, last),
                        rng.randint(0, 3)) for i in range(3 * n_slots)]


def measure(job):
    """One RTL run: (profile, n_slots, seed, cap) -> rounds with active > 0 (dicts: round,
    cycles, active, admitted, retired, blocked, batch)."""
    from tricut.sim.harness.dsu import run_dsu
    profile, n_slots, seed, cap = job
    res = run_dsu(schedule(seed, n_slots), profile, n_slots=n_slots, max_batch=cap,
                  latency_batch=cap, backpressure=False)
    if res.differences:
        raise RuntimeError(f"{job}: RTL differs from the golden model: {res.differences[:3]}")
    return job, [x for x in res.latencies if x["active"]]


def regime(row, cap):
    return "select" if row["active"] > cap else "all fit"


def design(rows, cap, n_slots):
    return np.array([UnitTiming.dsu_round_terms(r["active"], r["admitted"], r["retired"],
                                                r["blocked"], cap, n_slots) for r in rows])


def errors(pred, meas):
    """(aggregate relative error of the sums, per-round |relative error| median, p90, max) in %."""
    pred, meas = np.asarray(pred, float), np.asarray(meas, float)
    rel = np.abs(pred - meas) / meas * 100
    return ((pred.sum() - meas.sum()) / meas.sum() * 100, float(np.median(rel)),
            float(np.percentile(rel, 90)), float(rel.max()))


def fmt(e):
    return f"agg {e[0]:+6.2f} %  per round median {e[1]:4.1f} % p90 {e[2]:4.1f} % max {e[3]:4.1f} %"


def costs_with(costs: UnitCosts, fits, command: str) -> UnitCosts:
    """``costs`` with the DSU's tables replaced by ``fits`` ((profile, "all fit" | "select") ->
    coefficients in COLUMNS order), produced by ``command``."""
    return dataclasses.replace(
        costs, dsu_all_fit={p: fits[p, "all fit"] for p in ORDER},
        dsu_select={p: fits[p, "select"] for p in ORDER}, dsu_command=command)


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=2, help="parallel RTL runs (default 2)")
    ap.add_argument("--cache", help="JSON file of measured runs: reused when present, "
                    "written otherwise (to refit without rerunning the RTL)")
    ap.add_argument("--write", action="store_true",
                    help="store the fitted tables in sim/fast/unit_costs.json (default: print only)")
    return ap.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    current = UnitCosts.load(COSTS_PATH)       # a broken data file stops us before the RTL runs
    # the command recorded in the data file (the cache's path is not: it may be anyone's)
    command = f".venv/bin/python benchmarks/dsu_fit.py --jobs {args.jobs}" + \
        (" --cache RUNS.json" if args.cache else "") + " --write"
    jobs = [(p, n, s, c) for p in ORDER for (n, s, c) in TRAIN + HELD]
    jobs.sort(key=lambda j: -j[1])                 # the long 64-slot runs first
    runs = {}
    if args.cache and Path(args.cache).exists():
        runs = {tuple(k): v for k, v in json.loads(Path(args.cache).read_text())}
    todo = [j for j in jobs if j not in runs]
    # one run per slot count first: each slot count builds its own Verilator model, and two
    # runs must not build the same one at once
    first = list({j[1]: j for j in reversed(todo)}.values())
    t0 = time.time()
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        for batch in (first, [j for j in todo if j not in first]):
            for job, rows in pool.map(measure, batch):
                runs[job] = rows
                if args.cache:
                    Path(args.cache).write_text(json.dumps([[list(k), v]
                                                            for k, v in runs.items()]))
    print(f"{len(todo)} RTL runs (Verilator, 8-64 slots) in {time.time() - t0:.0f} s\n")

    fits = {}
    for profile in ORDER:
        for reg in ("all fit", "select"):
            X, y = [], []
            for (n, s, c) in TRAIN:
                rows = [r for r in runs[profile, n, s, c] if regime(r, c) == reg]
                if rows:
                    X.append(design(rows, c, n))
                    y += [r["cycles"] for r in rows]
            X, y = np.vstack(X), np.array(y, float)
            # relative least squares: every round counts alike, at 8 slots as at 64
            coef, *_ = np.linalg.lstsq(X / y[:, None], np.ones_like(y), rcond=None)
            coef[np.all(X == 0, axis=0)] = 0.0          # per_cap in "all fit"
            fits[profile, reg] = tuple(round(float(c), 2) + 0.0 for c in coef)
            print(f"{profile:15s} {reg:8s} train ({len(y):3d} rounds): {fmt(errors(X @ coef, y))}")
    print()

    costs = costs_with(current, fits, command)
    units = UnitTiming.from_gpu(load_gpu("h100-sxm5"), costs)     # cycles: the GPU does not matter
    print("training runs: summed predicted vs measured cycles per run")
    for profile in ORDER:
        for (n, s, c) in TRAIN:
            rows = runs[profile, n, s, c]
            pred = [units.dsu_round_cycles(r["active"], c, profile, r["admitted"], r["retired"],
                                           r["blocked"], n) for r in rows]
            print(f"{profile:15s} {n:2d} slots seed {s} cap {c:2d}: "
                  f"{fmt(errors(pred, [r['cycles'] for r in rows]))}")
    print("\nheld out: summed predicted vs measured cycles over the schedule")
    worst = 0.0
    for profile in ORDER:
        for (n, s, cap) in HELD:
            rows = runs[profile, n, s, cap]
            pred = [units.dsu_round_cycles(r["active"], cap, profile, r["admitted"],
                                           r["retired"], r["blocked"], n) for r in rows]
            meas = [r["cycles"] for r in rows]
            e = errors(pred, meas)
            worst = max(worst, abs(e[0]))
            n_sel = sum(regime(r, cap) == "select" for r in rows)
            print(f"{profile:15s} {n:2d} slots seed {s} cap {cap:2d} ({len(rows)} rounds, "
                  f"{n_sel} select): {fmt(e)}")
            for reg in ("all fit", "select"):
                idx = [i for i, r in enumerate(rows) if regime(r, cap) == reg]
                if idx and n_sel and len(idx) < len(rows):
                    print(f"{'':15s}   {reg:8s} ({len(idx):3d} rounds): "
                          f"{fmt(errors([pred[i] for i in idx], [meas[i] for i in idx]))}")
    print(f"\nworst held-out aggregate error: {worst:.2f} %\n")

    print("columns: profile, " + ", ".join(COLUMNS))
    for reg in ("all fit", "select"):
        for p in ORDER:
            print(f"{reg:8s} {p:15s} " + ", ".join(f"{c}" for c in fits[p, reg]))
    assert set(ORDER) == set(PROFILES)
    if args.write:
        costs.save(COSTS_PATH)
        print("\nwritten to sim/fast/unit_costs.json")
    else:
        print("\nnot written (pass --write to store them in sim/fast/unit_costs.json)")


if __name__ == "__main__":
    main()
