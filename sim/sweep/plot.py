"""Figures of a finished sweep: Pareto fronts of two metrics (one per group) and a heat map of
one metric over two axes. A metric whose name ends in ``_s`` (a time, not a rate), a count of
cycles (``cycles``, ``cycles_per_step``, ``..._cycles_...``), of cells (``cells``,
``cells_...``) or of failures is better low; any other is better high."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

from .store import ResultStore, StoreError

__all__ = ["better_low", "pareto_front", "plot_sweep"]

DEFAULT_X, DEFAULT_Y = "tpot_p99_s", "tokens_per_s"
#: the default (x, y) of a sweep's Pareto plot per task (else DEFAULT_X, DEFAULT_Y)
TASK_AXES = {"tile-design": ("cells", "cycles_per_step"),
             "tile-run": ("hbm_port_use", "cycles_per_step"),
             "tile-area": ("cells_te_engines", "cells")}


def better_low(metric: str) -> bool:
    return (metric.endswith("_s") and not metric.endswith("per_s")
            or metric in ("failed", "rollbacks", "differences", "timing_model_error")
            or metric.startswith(("cycles", "cells")) or "_cycles" in metric)


def pareto_front(points, x_low: bool, y_low: bool) -> list[int]:
    """Indices of the non-dominated ``(x, y)`` points (a point is dominated when another is at
    least as good in both and better in one), sorted by x."""
    sx = 1 if x_low else -1
    sy = 1 if y_low else -1
    keyed = sorted(range(len(points)), key=lambda i: (sx * points[i][0], sy * points[i][1]))
    front, best = [], math.inf
    for i in keyed:
        y = sy * points[i][1]
        if y < best:
            front.append(i)
            best = y
    return front


def _value_label(v) -> str:
    return json.dumps(v, sort_keys=True) if isinstance(v, (dict, list)) else str(v)


def _file_part(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_") or "x"


def _load(db, sweep):
    with ResultStore(db, read_only=True) as store:
        names = store.sweeps()
        if sweep is None:
            if len(names) != 1:
                raise StoreError(f"{db} holds {len(names)} sweeps ({', '.join(names)}): choose one with --sweep")
            sweep = names[0]
        elif sweep not in names:
            raise StoreError(f"--sweep {sweep!r}: not in {db} (sweeps: {', '.join(names)})")
        rows = store.rows(sweep, status="done")
    if not rows:
        raise StoreError(f"sweep {sweep!r} in {db} has no finished point to plot")
    return sweep, rows


def plot_sweep(db, out_dir, *, x=None, y=None, group=None, sweep=None, heat=None, metric=None) -> list[Path]:
    """Write the Pareto plot and the heat map of one sweep; returns the paths."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sweep, rows = _load(db, sweep)
    axes = list(rows[0]["axes"])
    numeric = sorted({k for r in rows for k, v in r["metrics"].items()
                      if isinstance(v, (int, float)) and not isinstance(v, bool)})
    if not numeric:
        raise StoreError(f"sweep {sweep!r} has no numeric metric to plot")
    dx, dy = TASK_AXES.get(rows[0].get("task"), (DEFAULT_X, DEFAULT_Y))
    x = x or (dx if dx in numeric else numeric[0])
    y = y or (dy if dy in numeric else numeric[min(1, len(numeric) - 1)])
    for flag, m in (("--x", x), ("--y", y), ("--metric", metric)):
        if m is not None and m not in numeric:
            raise StoreError(f"{flag} {m!r} is not a numeric metric of sweep {sweep!r}; metrics: {', '.join(numeric)}")
    if group is not None and group not in axes:
        raise StoreError(f"--group {group!r} is not an axis of sweep {sweep!r}; axes: {', '.join(axes) or 'none'}")
    group = group or (axes[0] if axes else None)
    if heat is not None:
        pair = [a.strip() for a in heat.split(",")]
        if len(pair) != 2 or any(a not in axes for a in pair) or pair[0] == pair[1]:
            raise StoreError(f"--heat {heat!r}: expected two different axes of sweep {sweep!r} "
                             f"({', '.join(axes) or 'none'}) separated by a comma")
    else:
        pair = axes[:2] if len(axes) >= 2 else None
    metric = metric or y

    out_dir = Path(out_dir)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise StoreError(f"cannot create {out_dir}: {e.strerror or e}") from None
    written = []

    # ----- Pareto fronts
    usable = [r for r in rows if isinstance(r["metrics"].get(x), (int, float))
              and isinstance(r["metrics"].get(y), (int, float))]
    if not usable:
        raise StoreError(f"no finished point of sweep {sweep!r} has both {x} and {y} defined")
    groups = {}
    for r in usable:
        groups.setdefault(_value_label(r["axes"].get(group)) if group else "all", []).append(r)
    fig, ax = plt.subplots(figsize=(7, 5))
    ax.scatter([r["metrics"][x] for r in usable], [r["metrics"][y] for r in usable], s=18,
               color="0.8", label="dominated", zorder=1)
    for i, (label, members) in enumerate(sorted(groups.items())):
        pts = [(r["metrics"][x], r["metrics"][y]) for r in members]
        idx = pareto_front(pts, better_low(x), better_low(y))
        front = [pts[j] for j in idx]
        color = f"C{i % 10}"
        ax.plot([p[0] for p in front], [p[1] for p in front], "-o", color=color, ms=5, zorder=2,
                label=f"{group} = {label}" if group else "Pareto front")
        if len(usable) <= 200:       # name each front point by its other axes (one label per place)
            places: dict = {}
            for j, (px, py) in zip(idx, front):
                places.setdefault((f"{px:.2g}", f"{py:.2g}"), []).append((j, px, py))
            for same in places.values():
                j, px, py = same[0]
                text = " ".join(f"{k.split('.')[-1]}={_value_label(v)}" for k, v in members[j]["axes"].items()
                                if k != group) + (f" (+{len(same) - 1} alike)" if len(same) > 1 else "")
                ax.annotate(text, (px, py), fontsize=6, color=color, xytext=(3, 3),
                            textcoords="offset points")
    xs = [r["metrics"][x] for r in usable]
    if min(xs) > 0 and max(xs) / min(xs) > 30:     # a wide range: the good end stays readable
        ax.set_xscale("log")
    ax.set_xlabel(f"{x} ({'lower' if better_low(x) else 'higher'} is better)")
    ax.set_ylabel(f"{y} ({'lower' if better_low(y) else 'higher'} is better)")
    ax.set_title(f"sweep {sweep}: Pareto front per {group or 'sweep'} ({len(usable)} points)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    path = out_dir / f"pareto_{_file_part(y)}_vs_{_file_part(x)}.png"
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    written.append(path)

    # ----- heat map: the metric's mean over the other axes, per (a, b)
    if pair is not None:
        a, b = pair
        va = sorted({_value_label(r["axes"][a]) for r in rows}, key=_sort_key)
        vb = sorted({_value_label(r["axes"][b]) for r in rows}, key=_sort_key)
        grid = [[[] for _ in va] for _ in vb]
        for r in rows:
            v = r["metrics"].get(metric)
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                grid[vb.index(_value_label(r["axes"][b]))][va.index(_value_label(r["axes"][a]))].append(v)
        cells = [[sum(c) / len(c) if c else math.nan for c in row] for row in grid]
        fig, ax = plt.subplots(figsize=(1.2 * len(va) + 3, 0.6 * len(vb) + 2.5))
        im = ax.imshow(cells, cmap="viridis_r" if better_low(metric) else "viridis", aspect="auto")
        ax.set_xticks(range(len(va)), va, rotation=30, ha="right", fontsize=8)
        ax.set_yticks(range(len(vb)), vb, fontsize=8)
        ax.set_xlabel(a)
        ax.set_ylabel(b)
        finite = [v for row in cells for v in row if not math.isnan(v)]
        mid = (min(finite) + max(finite)) / 2 if finite else 0.0
        for i, row in enumerate(cells):
            for j, v in enumerate(row):
                if not math.isnan(v):
                    light = (v > mid) != better_low(metric)      # the colour map's bright end
                    ax.text(j, i, f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.3g}", ha="center", va="center", fontsize=7,
                            color="k" if light else "w")
        others = [k for k in axes if k not in pair]
        ax.set_title(f"{metric}" + (f" (mean over {', '.join(others)})" if others else ""), fontsize=9)
        fig.colorbar(im, ax=ax)
        path = out_dir / f"heatmap_{_file_part(metric)}_{_file_part(a)}_{_file_part(b)}.png"
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written


def _sort_key(label: str):
    try:
        return (0, float(label), label)
    except ValueError:
        return (1, 0.0, label)
