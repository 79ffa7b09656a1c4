"""PNG figures for `tricut simulate --plot DIR` and `tricut bench`.

The directory is checked before a run (:func:`check_out_dir`), so that bad input never costs
a finished simulation; each PNG is written to a temporary file in the same directory and
renamed over its name (``os.replace``), so that a failure never leaves half a file behind.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np

from ..plotting import DPI, legend_below, likeness, pyplot, save_figures, save_png, series_style
from .errors import InputError

__all__ = ["plot_run", "plot_agentic", "plot_sweep", "run_figures", "agentic_figures",
           "check_out_dir", "prepare_out_dir", "remove_created",
           "RUN_FIGURES", "ENERGY_FIGURE", "BENCH_FIGURES", "AGENTIC_FIGURES", "energy_figure"]

#: the files :func:`plot_run` writes, and bench's figure
RUN_FIGURES = ("latency_cdf.png", "hbm_bandwidth.png")
#: and, when the GPU has energy coefficients (docs/energy.md), the energy per output token by
#: component, a stacked bar per run
ENERGY_FIGURE = "energy_split.png"
BENCH_FIGURES = ("throughput_vs_concurrency.png",)
AGENTIC_FIGURES = ("turn_ttft_cdf.png", "kv_occupancy.png")


def check_out_dir(out_dir: Path, names: tuple[str, ...] = ()) -> None:
    """An :class:`InputError` unless ``out_dir`` is a writable directory, or can be created as
    one (its nearest existing ancestor is a writable directory), and none of ``names`` in it
    is something other than a regular file. Creates nothing (:func:`prepare_out_dir` does)."""
    out_dir = Path(out_dir)
    if out_dir.exists():
        if not out_dir.is_dir():
            raise InputError(f"--plot {out_dir}: exists and is not a directory")
        if not os.access(out_dir, os.W_OK | os.X_OK):
            raise InputError(f"--plot {out_dir}: the directory is not writable")
        for name in names:
            target = out_dir / name
            if target.exists() and not target.is_file():
                raise InputError(f"--plot {out_dir}: {name} exists and is not a regular file")
        return
    parent = out_dir.absolute().parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise InputError(f"--plot {out_dir}: cannot create it, {parent} is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise InputError(f"--plot {out_dir}: cannot create it, {parent} is not writable")


def prepare_out_dir(out_dir: Path, names: tuple[str, ...] = ()) -> list[Path]:
    """:func:`check_out_dir`, then create ``out_dir`` (and its missing parents) and write and
    remove a probe file in it, so that a file system that refuses (read-only, full, a
    pseudo-file system) is found before a run, not after. Returns the directories it created,
    deepest first (:func:`remove_created` takes them away again if the run fails)."""
    out_dir = Path(out_dir)
    check_out_dir(out_dir, names)
    missing = []
    d = out_dir.absolute()
    while not d.exists():
        missing.append(d)
        d = d.parent
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".tricut-probe.", dir=out_dir)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        remove_created(missing)
        raise InputError(f"--plot {out_dir}: cannot write there ({e.strerror or e})") from None
    return missing


def remove_created(dirs: list[Path]) -> None:
    """Remove the directories :func:`prepare_out_dir` created, those still empty."""
    for d in dirs:
        try:
            d.rmdir()
        except OSError:
            pass


def _cdf_quantiles(a: np.ndarray, b: np.ndarray):
    """Two sorted samples made comparable: as they are when of one size, else their quantiles
    at the same 201 probabilities."""
    if len(a) == len(b):
        return a, b
    q = np.linspace(0, 1, 201)
    return np.quantile(a, q), np.quantile(b, q)


def _cdf_axes(ax, samples: dict, xlabel: str, title: str, ylabel: str | None) -> None:
    """One CDF per sample (``label -> sorted values``) with :func:`series_style`, x from 0; the
    markers of series ``i`` start ``i / n`` of their spacing along the line, so that series on
    one another show every marker."""
    n = len(samples)
    for i, (label, v) in enumerate(samples.items()):
        s = series_style(i, n)
        ax.plot(v, np.arange(1, len(v) + 1) / len(v), label=label,
                markevery=(0.01 + 0.07 * i / n, 0.07), **s)
    ax.set(xlabel=xlabel, title=title, ylim=(0, 1.03))
    if ylabel:
        ax.set_ylabel(ylabel)
    ax.set_xlim(left=0)
    ax.grid(alpha=0.3)
    legend_below(ax, likeness(samples, _cdf_quantiles), n)


def run_figures(results: dict) -> dict:
    """``results``: label -> SimResult. ``{file name: Figure}`` of :data:`RUN_FIGURES` (the
    caller closes them): the TTFT and TPOT CDFs, and the HBM bandwidth of each decode step
    over simulated time (seconds since the first request's arrival, the trace's time zero)."""
    plt = pyplot()
    figs = {}
    fig, axes = plt.subplots(1, 2, figsize=(10, 5.6), dpi=DPI, layout="constrained")
    ttft = {label: np.sort(np.asarray([x.ttft_s for x in r.request_times]) * 1e3)
            for label, r in results.items() if r.request_times}
    tpot = {label: np.sort(np.asarray(v) * 1e3) for label, r in results.items()
            if (v := [x.tpot_s for x in r.request_times if x.tpot_s is not None])}
    _cdf_axes(axes[0], ttft, "TTFT (ms), from 0", "TTFT CDF", "fraction of requests (cumulative, 0-1)")
    _cdf_axes(axes[1], tpot, "TPOT (ms), from 0", "TPOT CDF", None)
    figs[RUN_FIGURES[0]] = fig

    fig, ax = plt.subplots(figsize=(10, 5.2), dpi=DPI, layout="constrained")
    series = {label: (r.step_end_s, r.step_hbm_bytes / r.step_times_s / 1e9)
              for label, r in results.items() if len(r.step_end_s)}
    n = len(series)
    for i, (label, (t, gbps)) in enumerate(series.items()):
        stride = max(n, len(t) // 12)          # at least n: the n series' first markers at n steps
        ax.plot(t, gbps, label=label, markevery=(i * stride // n, stride), **series_style(i, n, (0.9, 2.4)))
    first = min((t[0] for t, _ in series.values()), default=0.0)
    last = max((t[-1] for t, _ in series.values()), default=0.0)
    xlabel = "simulated time since the first request's arrival (s); a point per decode step, at its end"
    if last > 0 and first > 0.05 * last:
        xlabel += f"\nno decode step ends before {first:.3g} s"
    ax.set(xlabel=xlabel, ylabel="HBM bandwidth per GPU (GB/s), from 0",
           title="HBM bandwidth per decode step")
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)

    def along(b, a):        # b's bandwidth at a's step ends, where both ran
        (ta, ya), (tb, yb) = a, b
        keep = (ta >= tb[0]) & (ta <= tb[-1])
        return (np.interp(ta[keep], tb, yb), ya[keep]) if keep.any() else None
    legend_below(ax, likeness(series, along), n, ncol=3)
    figs[RUN_FIGURES[1]] = fig
    return figs


def energy_per_token(r) -> dict | None:
    """A run's J per output token by component (docs/energy.md), or None without energy."""
    from ..fast.energy import COMPONENTS, GPU_COMPONENTS
    led = getattr(r, "energy", None)
    if led is None:
        return None
    total = r.summary["energy_j_per_token"]
    counted = sum(led.joules[k] for k in GPU_COMPONENTS) + led.joules["pool"]
    per = total / counted if counted else 0.0          # the group's GPUs over its output tokens
    return {k: led.joules[k] * per for k in COMPONENTS}


def energy_figure(results: dict):
    """The energy per output token of each run, stacked by component; None when no run has
    energy (a GPU without coefficients)."""
    from ..fast.energy import COMPONENTS
    rows = {label: e for label, r in results.items() if (e := energy_per_token(r)) is not None}
    if not rows:
        return None
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(10, 5.2), dpi=DPI, layout="constrained")
    labels = list(rows)
    bottom = np.zeros(len(labels))
    hatches = ("", "//", "..", "xx", "\\\\", "++", "oo", "--", "**", "||")
    for i, k in enumerate(COMPONENTS):
        values = np.array([rows[lab][k] for lab in labels])
        ax.bar(labels, values, bottom=bottom, label=k, color=f"C{i}", hatch=hatches[i], edgecolor="black", lw=0.5)
        bottom += values
    for x, top in enumerate(bottom):
        ax.annotate(f"{top:.3g} J", (x, top), ha="center", va="bottom", fontsize=8)
    ax.set(ylabel="energy per output token (J), from 0", xlabel="run (cuts)",
           title="Energy per output token by component (static, HBM, L2, SM, TE, CDU, DSU, links, host, "
                 "prefill pool)")
    ax.set_ylim(bottom=0, top=1.12 * max(bottom.max(), 1e-12))
    ax.grid(alpha=0.3, axis="y")
    legend_below(ax, {}, len(COMPONENTS), ncol=5)
    return fig


def plot_run(results: dict, out_dir: Path) -> list[Path]:
    """``results``: label -> SimResult. Writes :data:`RUN_FIGURES` (:func:`run_figures`) and,
    when the runs have energy, :data:`ENERGY_FIGURE` (:func:`energy_figure`)."""
    figs = run_figures(results)
    energy = energy_figure(results)
    if energy is not None:
        figs[ENERGY_FIGURE] = energy
    return save_figures(figs, out_dir)


def agentic_figures(results: dict) -> dict:
    """``results``: park policy -> AgenticResult. ``{file name: Figure}`` of
    :data:`AGENTIC_FIGURES` (the caller closes them): the TTFT CDF of turn 0 and of later turns
    per policy, and the KV held over time (HBM: running and waiting turns, parked slots; G2),
    per GPU, over seconds since the first session's arrival."""
    plt = pyplot()
    figs = {}
    fig, axes = plt.subplots(1, 2, figsize=(10, 5.6), dpi=DPI, layout="constrained")
    first, later = {}, {}
    for label, r in results.items():
        if r.turn_ttft_s.get(0):
            first[label] = np.sort(np.asarray(r.turn_ttft_s[0]))
        if v := [x for k, v in r.turn_ttft_s.items() if k > 0 for x in v]:
            later[label] = np.sort(np.asarray(v))
    for ax in axes:
        ax.set_xscale("symlog", linthresh=0.01)
    scale = "TTFT (s), from 0; log scale, linear below 0.01 s"
    _cdf_axes(axes[0], first, scale, "turn 0 (from the session's arrival)", "fraction of turns (cumulative, 0-1)")
    _cdf_axes(axes[1], later, scale, "turns 1+ (from the tool's return)", None)
    figs[AGENTIC_FIGURES[0]] = fig

    fig, axes = plt.subplots(len(results), 1, figsize=(10, 2.2 * len(results) + 0.8), sharex=True,
                             squeeze=False, dpi=DPI, layout="constrained")
    for ax, (label, r) in zip(axes[:, 0], results.items()):
        occ = r.occupancy
        gb = r.kv_bytes_per_token / 1e9
        ax.stackplot(occ[:, 0], occ[:, 1] * gb, occ[:, 2] * gb, labels=("HBM: running / waiting turns",
                                                                        "HBM: parked (tool call)"), alpha=0.8)
        ax.plot(occ[:, 0], occ[:, 3] * gb, color="k", lw=0.8, label="G2 (host memory)")
        ax.set(ylabel="KV per GPU (GB)", title=f"park policy {label}")
        ax.set_xlim(left=0)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    axes[-1, 0].set(xlabel="simulated time since the first session's arrival (s)")
    figs[AGENTIC_FIGURES[1]] = fig
    return figs


def plot_agentic(results: dict, out_dir: Path) -> list[Path]:
    """``results``: park policy -> AgenticResult. Writes :data:`AGENTIC_FIGURES`
    (:func:`agentic_figures`)."""
    return save_figures(agentic_figures(results), out_dir)


def plot_sweep(concurrency: list[int], series: dict, out_path: Path, sweet_spot: int | None = None) -> Path:
    """Throughput vs concurrency; ``series``: label -> list of tokens/s."""
    plt = pyplot()
    out_path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(6, 4.4), dpi=DPI, layout="constrained")
    n = len(series)
    for i, (label, tps) in enumerate(series.items()):
        ax.plot(concurrency, tps, label=label, **series_style(i, n, (1.2, 2.4)))
    if sweet_spot is not None:
        ax.axvline(sweet_spot, color="grey", ls="--", label=f"sweet spot ({sweet_spot})", zorder=1)
    ax.set(xscale="log", xlabel="concurrent requests (count, log scale)",
           ylabel="throughput (tokens/s), from 0", title="Throughput vs concurrency")
    ax.set_xticks(concurrency, [str(c) for c in concurrency])
    ax.minorticks_off()
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    try:
        save_png(fig, out_path)
    finally:
        plt.close(fig)
    return out_path
