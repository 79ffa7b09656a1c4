"""PNG figures for `tricut simulate --plot DIR` and `tricut bench`."""

from __future__ import annotations

from pathlib import Path

import numpy as np

__all__ = ["plot_run", "plot_sweep"]


def _plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


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
        ax.legend()
    fig.tight_layout()
    path = out_dir / "latency_cdf.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    written.append(path)

    fig, ax = plt.subplots(figsize=(10, 4))
    for label, r in results.items():
        if len(r.step_end_s):
            ax.plot(r.step_end_s, r.step_hbm_bytes / r.step_times_s / 1e9, label=label, lw=0.8)
    ax.set(xlabel="simulated time (s)", ylabel="HBM GB/s (per GPU)", title="HBM bandwidth per decode step")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    path = out_dir / "hbm_bandwidth.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    written.append(path)
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
    fig.savefig(out_path, dpi=110)
    plt.close(fig)
    return out_path
