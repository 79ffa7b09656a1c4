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

__all__ = ["better_low", "pareto_front", "metric_unit", "plot_sweep", "sweep_figures"]

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
    least as good in both and better in one; equal points do not dominate each other, so all
    of them are on the front or none), sorted by x."""
    sx = 1 if x_low else -1
    sy = 1 if y_low else -1
    keyed = sorted(range(len(points)), key=lambda i: (sx * points[i][0], sy * points[i][1]))
    front, best, last = [], math.inf, None
    for i in keyed:
        y = sy * points[i][1]
        if y < best or (y == best and tuple(points[i]) == last):
            front.append(i)
            best, last = y, tuple(points[i])
    return front


def metric_unit(metric: str, values=()) -> str:
    """The unit of a metric, from its name (the conventions of ``simulate --json``, the tile
    tasks and ``cdu replay``): ``tokens_per_s`` -> tokens/s, ``..._s`` -> s, ``cycles...`` ->
    cycles; a name no rule knows is a count when every value is an integer."""
    m = metric.lower()
    if m.endswith("_per_s"):
        return f"{m[:-len('_per_s')].split('_')[-1]}/s"
    if m.endswith("_rps"):
        return "requests/s"
    if m.endswith("_s"):
        return "s"
    if "gbps" in m:
        return "GB/s"
    if "bytes" in m:
        return "bytes"
    if m.endswith("_mb"):
        return "MiB"
    if "flops" in m:
        return "FLOP"
    if m.startswith("cycles") or "_cycles" in m:
        return "cycles"
    if m.startswith("cells"):
        return "cells"
    if (m.endswith(("_rate", "utilisation", "_use", "_error", "_share")) or m in ("accuracy", "coverage")):
        return "fraction, 0-1"
    if "_over_" in m or "imbalance" in m:
        return "ratio"
    if "tokens" in m:
        return "tokens"
    if m == "mean_batch":
        return "requests"
    if values and all(isinstance(v, int) or float(v).is_integer() for v in values):
        return "count"
    return "unit not known"


def _axis_label(metric: str, values, scale: str, lims) -> str:
    """``metric (unit; lower/higher is better)``, and where the axis starts when not at 0."""
    text = f"{metric} ({metric_unit(metric, values)}; {'lower' if better_low(metric) else 'higher'} is better)"
    if scale == "log":
        return text + ", log scale"
    if lims[0] > 0:
        return text + f"\naxis from {lims[0]:.4g}, not 0: zoomed to the points"
    return text


def _value_label(v) -> str:
    return json.dumps(v, sort_keys=True) if isinstance(v, (dict, list)) else str(v)


def _file_part(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_") or "x"


def _load(db, sweep):
    """``(sweep, rows, older)``: the finished points of one sweep written by the code version of
    the newest of them, and how many of other code versions were left out (a ``--resume`` after
    a code change adds new points beside the old ones; their results are not comparable)."""
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
    newest = max(rows, key=lambda r: r["finished_at"])
    kept = [r for r in rows if (r["tricut_version"], r["git_commit"]) ==
            (newest["tricut_version"], newest["git_commit"])]
    older, rows = len(rows) - len(kept), kept
    # by their axes, not by key: a key hashes the code version, and the order of points at one
    # place is the order of their label's lines
    rows.sort(key=lambda r: [_sort_key(_value_label(v)) for v in r["axes"].values()])
    return sweep, rows, older


def _place_text(members, js, group) -> str:
    """The label of points ``js`` of ``members`` at one place: their axes other than ``group``,
    one line a point (up to three), else each axis with the values found there."""
    def axes_of(j):
        return {k.split(".")[-1]: _value_label(v) for k, v in members[j]["axes"].items() if k != group}
    if len(js) == 1:
        return " ".join(f"{k}={v}" for k, v in axes_of(js[0]).items()) or "the point"
    if len(js) <= 3:
        return f"{len(js)} points here:\n" + "\n".join(
            " ".join(f"{k}={v}" for k, v in axes_of(j).items()) or "the point" for j in js)
    values: dict = {}
    for j in js:
        for k, v in axes_of(j).items():
            values.setdefault(k, [])
            if v not in values[k]:
                values[k].append(v)
    return f"{len(js)} points here:\n" + "\n".join(
        f"{k}={'/'.join(sorted(v, key=_sort_key))}" for k, v in values.items())


#: front places named on the Pareto plot up to this many (beyond, the plot shows only markers)
MAX_LABELS = 40


def _pareto_figure(plt, sweep, usable, x, y, group, older=0):
    """The Pareto plot: per group its front (line and filled markers, a label per place naming
    the points there) and its dominated points (hollow markers in the group's colour and
    marker); earlier groups' markers larger, so that groups meeting at one place show as rings."""
    from ..plotting import DPI, labels_inside, series_style

    groups = {}
    for r in usable:
        groups.setdefault(_value_label(r["axes"].get(group)) if group else "all", []).append(r)
    groups = sorted(groups.items(), key=lambda kv: _sort_key(kv[0]))
    fig, ax = plt.subplots(figsize=(10, 5.6), dpi=DPI, layout="constrained")
    n = len(groups)
    on_front = dominated = shared = 0
    places = []                      # (x, y, text, colour) of each front place, and of shared dominated ones
    for i, (label, members) in enumerate(groups):
        st = series_style(i, n, (1.0, 2.0))
        color, marker = st["color"], st["marker"]
        ms = 11 - 5 * i / max(n - 1, 1)
        pts = [(float(r["metrics"][x]), float(r["metrics"][y])) for r in members]
        idx = pareto_front(pts, better_low(x), better_low(y))
        rest = sorted(set(range(len(pts))) - set(idx))
        on_front += len(idx)
        dominated += len(rest)
        if rest:
            ax.plot([pts[j][0] for j in rest], [pts[j][1] for j in rest], ls="none", marker=marker, ms=ms,
                    mfc="none", mec=color, mew=1.2, zorder=2 + i, gid="dominated", label="_dominated")
        ax.plot([pts[j][0] for j in idx], [pts[j][1] for j in idx], color=color, ls=st["linestyle"], lw=st["lw"],
                marker=marker, ms=ms, mec="white", mew=0.6, zorder=10 + i, gid="front",
                label=(f"{group} = {label}" if group else "Pareto front") + f": {len(idx)} of {len(pts)} on its front")
        for js, dom in ((idx, False), (rest, True)):
            at: dict = {}
            for j in js:
                at.setdefault(pts[j], []).append(j)
            for (px, py), same in at.items():
                shared += len(same) if len(same) > 1 else 0
                if not dom:
                    places.append((px, py, _place_text(members, same, group), color))
                elif len(same) > 1:
                    places.append((px, py, f"{len(same)} dominated points here", color))
    if dominated:
        ax.plot([], [], ls="none", marker="o", ms=7, mfc="none", mec="0.35", mew=1.2,
                label=f"dominated ({dominated}): hollow, its group's colour and marker")
    allx = [float(r["metrics"][x]) for r in usable]
    if min(allx) > 0 and max(allx) / min(allx) > 30:     # a wide range: the good end stays readable
        ax.set_xscale("log")
    ax.margins(0.1, 0.12)
    ax.set_xlabel(_axis_label(x, [r["metrics"][x] for r in usable], ax.get_xscale(), ax.get_xlim()))
    ax.set_ylabel(_axis_label(y, [r["metrics"][y] for r in usable], ax.get_yscale(), ax.get_ylim()))
    title = f"sweep {sweep}: Pareto front per {group or 'sweep'}\n{len(usable)} points: {on_front} on a front, " \
            f"{dominated} dominated"
    if shared:
        title += f"; {shared} share a place with another of their group (the label lists them)"
    if older:
        title += f"\n{older} points of older code versions in the database left out"
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    if len(places) <= MAX_LABELS:
        texts = [ax.annotate(text, (px, py), fontsize=6.5, color=color, xytext=(4, 4), textcoords="offset points",
                             zorder=30, gid="label", bbox={"boxstyle": "round,pad=0.15", "fc": "white",
                                                           "ec": "none", "alpha": 0.6})
                 for px, py, text, color in places]
        labels_inside(fig, ax, texts)
    return fig


def _heat_figure(plt, rows, axes, pair, metric):
    """The heat map: ``metric``'s mean over the other axes, per value of the two axes."""
    from ..plotting import DPI
    a, b = pair
    va = sorted({_value_label(r["axes"][a]) for r in rows}, key=_sort_key)
    vb = sorted({_value_label(r["axes"][b]) for r in rows}, key=_sort_key)
    grid = [[[] for _ in va] for _ in vb]
    for r in rows:
        v = r["metrics"].get(metric)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            grid[vb.index(_value_label(r["axes"][b]))][va.index(_value_label(r["axes"][a]))].append(v)
    cells = [[sum(c) / len(c) if c else math.nan for c in row] for row in grid]
    fig, ax = plt.subplots(figsize=(1.2 * len(va) + 3.5, 0.6 * len(vb) + 2.5), dpi=DPI, layout="constrained")
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
    fig.colorbar(im, ax=ax, label=f"{metric} ({metric_unit(metric, finite)}; "
                                  f"{'lower' if better_low(metric) else 'higher'} is better)")
    return fig


def _options(rows, sweep, x, y, group, heat, metric):
    """The checked plot options: (x, y, group, heat pair or None, metric)."""
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
    return x, y, group, pair, metric or y


def sweep_figures(db, *, x=None, y=None, group=None, sweep=None, heat=None, metric=None, out_dir=None) -> dict:
    """``{file name: Figure}`` of one sweep (the caller closes them): the Pareto plot and, with
    two axes, the heat map. ``out_dir``, when given, is created once the options are checked
    (before the figures are drawn)."""
    from ..plotting import pyplot as _plt
    plt = _plt()
    sweep, rows, older = _load(db, sweep)
    x, y, group, pair, metric = _options(rows, sweep, x, y, group, heat, metric)
    if out_dir is not None:
        try:
            Path(out_dir).mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise StoreError(f"cannot create {out_dir}: {e.strerror or e}") from None
    usable = [r for r in rows if isinstance(r["metrics"].get(x), (int, float))
              and isinstance(r["metrics"].get(y), (int, float))]
    if not usable:
        raise StoreError(f"no finished point of sweep {sweep!r} has both {x} and {y} defined")
    figs = {f"pareto_{_file_part(y)}_vs_{_file_part(x)}.png": _pareto_figure(plt, sweep, usable, x, y, group, older)}
    if pair is not None:
        a, b = pair
        figs[f"heatmap_{_file_part(metric)}_{_file_part(a)}_{_file_part(b)}.png"] = \
            _heat_figure(plt, rows, list(rows[0]["axes"]), pair, metric)
    return figs


def plot_sweep(db, out_dir, *, x=None, y=None, group=None, sweep=None, heat=None, metric=None) -> list[Path]:
    """Write the Pareto plot and the heat map of one sweep (:func:`sweep_figures`); returns the
    paths."""
    from ..plotting import save_figures
    out_dir = Path(out_dir)
    figs = sweep_figures(db, x=x, y=y, group=group, sweep=sweep, heat=heat, metric=metric, out_dir=out_dir)
    return save_figures(figs, out_dir)


def _sort_key(label: str):
    try:
        return (0, float(label), label)
    except ValueError:
        return (1, 0.0, label)
