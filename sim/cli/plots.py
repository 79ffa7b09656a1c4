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

from .errors import InputError

__all__ = ["plot_run", "plot_sweep", "check_out_dir", "prepare_out_dir", "remove_created",
           "RUN_FIGURES", "BENCH_FIGURES"]

#: the files :func:`plot_run` writes, and bench's figure
RUN_FIGURES = ("latency_cdf.png", "hbm_bandwidth.png")
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


def _plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _save(fig, path: Path) -> Path:
    """``fig`` as a PNG at ``path``, atomically: a temporary file beside it, then renamed."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            fig.savefig(f, format="png", dpi=110)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def plot_run(results: dict, out_dir: Path) -> list[Path]:
    """``results``: label -> SimResult. Writes latency CDFs and HBM bandwidth over time."""
    plt = _plt()
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for label, r in results.items():
        for ax, values in ((axes[0], [x.ttft_s for x in r.request_times]),
                           (axes[1], [x.tpot_s for x in r.request_times if x.tpot_s is not None])):
            if values:
                v = np.sort(np.asarray(values) * 1e3)
                ax.plot(v, np.arange(1, len(v) + 1) / len(v), label=label)
    axes[0].set(xlabel="TTFT (ms)", ylabel="fraction of requests", title="TTFT CDF")
    axes[1].set(xlabel="TPOT (ms)", title="TPOT CDF")
    for ax in axes:
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend()
    fig.tight_layout()
    written.append(_save(fig, out_dir / RUN_FIGURES[0]))
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(10, 4))
    for label, r in results.items():
        if len(r.step_end_s):
            ax.plot(r.step_end_s, r.step_hbm_bytes / r.step_times_s / 1e9, label=label, lw=0.8)
    ax.set(xlabel="simulated time (s)", ylabel="HBM GB/s (per GPU)", title="HBM bandwidth per decode step")
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend()
    fig.tight_layout()
    written.append(_save(fig, out_dir / RUN_FIGURES[1]))
    plt.close(fig)
    return written


def plot_agentic(results: dict, out_dir: Path) -> list[Path]:
    """``results``: park policy -> AgenticResult. Writes the TTFT CDF of turn 0 and of later
    turns per policy, and the KV held over time (HBM: running and waiting turns, parked slots;
    G2), per GPU."""
    plt = _plt()
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for label, r in results.items():
        first = r.turn_ttft_s.get(0, [])
        later = [x for k, v in r.turn_ttft_s.items() if k > 0 for x in v]
        for ax, values in ((axes[0], first), (axes[1], later)):
            if values:
                v = np.sort(np.asarray(values))
                ax.plot(v, np.arange(1, len(v) + 1) / len(v), label=label)
    axes[0].set(xlabel="TTFT (s)", ylabel="fraction of turns", title="turn 0 (from the session's arrival)")
    axes[1].set(xlabel="TTFT (s)", title="turns 1+ (from the tool's return)")
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.set_xscale("symlog", linthresh=0.01)
        if ax.get_legend_handles_labels()[0]:
            ax.legend()
    fig.tight_layout()
    written.append(_save(fig, out_dir / AGENTIC_FIGURES[0]))
    plt.close(fig)

    fig, axes = plt.subplots(len(results), 1, figsize=(10, 2.2 * len(results) + 0.6), sharex=True, squeeze=False)
    for ax, (label, r) in zip(axes[:, 0], results.items()):
        occ = r.occupancy
        gb = r.kv_bytes_per_token / 1e9
        ax.stackplot(occ[:, 0], occ[:, 1] * gb, occ[:, 2] * gb, labels=("HBM: running / waiting turns",
                                                                        "HBM: parked (tool call)"), alpha=0.8)
        ax.plot(occ[:, 0], occ[:, 3] * gb, color="k", lw=0.8, label="G2 (host memory)")
        ax.set(ylabel="KV GB per GPU", title=f"park policy {label}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="upper right")
    axes[-1, 0].set(xlabel="simulated time (s)")
    fig.tight_layout()
    written.append(_save(fig, out_dir / AGENTIC_FIGURES[1]))
    plt.close(fig)
    return written


def plot_sweep(concurrency: list[int], series: dict, out_path: Path, sweet_spot: int | None = None) -> Path:
    """Throughput vs concurrency; ``series``: label -> list of tokens/s."""
    plt = _plt()
    out_path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(6, 4))
    for label, tps in series.items():
        ax.plot(concurrency, tps, marker="o", label=label)
    if sweet_spot is not None:
        ax.axvline(sweet_spot, color="grey", ls="--", label=f"sweet spot ({sweet_spot})")
    ax.set(xscale="log", xlabel="concurrent requests", ylabel="tokens/s", title="Throughput vs concurrency")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    _save(fig, out_path)
    plt.close(fig)
    return out_path
