"""What every tricut figure shares, below the command line and the sweep: the headless
pyplot, the resolution and metadata that make a PNG's bytes repeatable, the atomic write,
series styles that keep coinciding lines visible, the likeness notes, and labels kept inside
their axes."""

from __future__ import annotations

import math
import os
import tempfile
from pathlib import Path

import numpy as np

__all__ = ["pyplot", "save_png", "save_figures", "DPI", "PNG_METADATA", "series_style", "likeness", "legend_below",
           "labels_inside", "LINE_STYLES", "MARKERS", "ALIKE"]


def pyplot():
    """Matplotlib's pyplot, headless. Unless the user set ``MPLCONFIGDIR``, matplotlib keeps
    its font cache in a temporary folder this process removes at exit, not in ``~/.cache`` or
    ``~/.config``: a run writes only the outputs it was asked for."""
    import sys
    if "matplotlib" not in sys.modules and not os.environ.get("MPLCONFIGDIR"):
        import atexit
        import shutil
        folder = tempfile.mkdtemp(prefix="tricut-matplotlib-")
        os.environ["MPLCONFIGDIR"] = folder
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


#: figures are drawn and written at this resolution, so that what a test measures after
#: ``fig.canvas.draw()`` is what the PNG shows
DPI = 110
#: PNG metadata: none that changes from run to run or between installs (no "Software" line)
PNG_METADATA = {"Software": None}


def save_png(fig, path: Path) -> Path:
    """``fig`` as a PNG at ``path``, atomically: a temporary file beside it, then renamed. The
    same figure gives the same bytes on every run."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            fig.savefig(f, format="png", dpi=DPI, metadata=PNG_METADATA)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def save_figures(figures: dict, out_dir: Path) -> list[Path]:
    """Each ``name -> figure`` of ``figures`` as ``out_dir/name`` (:func:`save_png`), every
    figure closed, written or not; the paths written."""
    plt = pyplot()
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    try:
        for name, fig in figures.items():
            written.append(save_png(fig, out_dir / name))
    finally:
        for fig in figures.values():
            plt.close(fig)
    return written


# ------------------------------------------------------------------ every series visible
#: line styles cycled against the ten colours: (colour, style) stays distinct for 50 series
LINE_STYLES = ("-", "--", "-.", ":", (0, (6, 2, 1, 2, 1, 2)))
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "*")
#: two series closer than this (mean absolute difference over the mean) are noted as alike
ALIKE = 0.01


def series_style(i: int, n: int, lw: tuple[float, float] = (1.0, 3.0)) -> dict:
    """Plot keywords of series ``i`` of ``n``: its own colour and line style (the pair differs
    between any two of 50 series) and marker; the first series is the widest and lowest, each
    later one narrower and on top, so that series lying on one another still show as a line
    with an edge of every colour beneath it."""
    wide = lw[0] + (lw[1] - lw[0]) * (n - 1 - i) / max(n - 1, 1)
    return {"color": f"C{i % 10}", "linestyle": LINE_STYLES[(i + i // 10) % len(LINE_STYLES)],
            "marker": MARKERS[i % len(MARKERS)], "lw": wide, "ms": 4 + 0.6 * wide, "zorder": 2 + i}


def likeness(values: dict, compare) -> dict:
    """``label -> note``: for each series after the first, how it relates to an earlier one:
    ``"identical to A"`` (same numbers), ``"≈ A (mean difference 0.3 %)"`` (within
    :data:`ALIKE`), or nothing. ``compare(a, b)`` gives ``b`` sampled where ``a`` is, as two
    equal-length arrays, or None when they cannot be compared; ``values``: label -> series,
    in drawing order."""
    notes = {}
    labels = list(values)
    for j, b in enumerate(labels):
        near = None
        for a in labels[:j]:
            pair = compare(values[b], values[a])
            if pair is None:
                continue
            vb, va = pair
            if len(vb) == len(va) and np.array_equal(vb, va):
                notes[b] = f"identical to {a}"
                break
            scale = float(np.mean(np.abs(va)))
            diff = float(np.mean(np.abs(vb - va))) / scale if scale > 0 else math.inf
            if diff <= ALIKE and (near is None or diff < near[1]):
                near = (a, diff)
        else:
            if near is not None:
                notes[b] = f"≈ {near[0]} (mean difference {100 * near[1]:.2g} %)"
    return notes


def legend_below(ax, notes: dict, n: int, ncol: int = 2) -> None:
    """The axes' legend, its labels carrying ``notes``, below the axes (it covers no data);
    titled when every series is identical to the first."""
    handles, labels = ax.get_legend_handles_labels()
    if not handles:
        return
    title = None
    if n > 1 and len(notes) == n - 1 and all(v.startswith("identical") for v in notes.values()):
        title = f"all {n} identical: the lines lie on one another"
    labels = [f"{lab}: {notes[lab]}" if lab in notes else lab for lab in labels]
    ax.legend(handles, labels, title=title, fontsize=8, title_fontsize=8, loc="upper center",
              bbox_to_anchor=(0.5, -0.17), ncol=max(1, min(n, ncol)))


def labels_inside(fig, ax, texts, pad_px: float = 3.0) -> None:
    """Place each annotation of ``texts`` (text offset in points from its point) so that its box
    lies inside ``ax``'s frame and, where it can, clear of those placed before it: beside its
    point (right and above first, else left or below, else stacked further up or down), pushed
    in from any edge it would cross; a label wider or taller than the frame is set smaller. The
    figure's layout is fixed first (a later draw moves nothing)."""
    fig.canvas.draw()
    fig.set_layout_engine("none")
    r = fig.canvas.get_renderer()
    frame = ax.get_window_extent(r)
    to_pt = 72 / fig.dpi
    placed = []
    for t in texts:
        t.set_in_layout(False)
        t.set_clip_on(False)
        while t.get_fontsize() > 4:
            bb = t.get_window_extent(r)
            if bb.width <= frame.width - 2 * pad_px and bb.height <= frame.height - 2 * pad_px:
                break
            t.set_fontsize(t.get_fontsize() - 0.5)
        h = t.get_window_extent(r).height * to_pt + 1
        tries = [(4, 4, "left", "bottom"), (4, -4, "left", "top"), (-4, 4, "right", "bottom"),
                 (-4, -4, "right", "top")]
        tries += [(dx, dy + k * h * (1 if dy > 0 else -1), ha, va)
                  for k in range(1, 5) for dx, dy, ha, va in tries[:4]]
        best = None
        for dx, dy, ha, va in tries:
            t.set(ha=ha, va=va)
            t.xyann = (dx, dy)
            bb = t.get_window_extent(r)
            sx = max(0.0, frame.x0 + pad_px - bb.x0) - max(0.0, bb.x1 - (frame.x1 - pad_px))
            sy = max(0.0, frame.y0 + pad_px - bb.y0) - max(0.0, bb.y1 - (frame.y1 - pad_px))
            t.xyann = (dx + sx * to_pt, dy + sy * to_pt)
            bb = t.get_window_extent(r)
            cover = sum(max(0.0, min(bb.x1, o.x1) - max(bb.x0, o.x0)) * max(0.0, min(bb.y1, o.y1) - max(bb.y0, o.y0))
                        for o in placed)
            score = (cover, abs(sx) + abs(sy))         # clear of the others first, then least pushed
            if best is None or score < best[0]:
                best = (score, ha, va, t.xyann)
            if score == (0, 0):
                break
        _, ha, va, at = best
        t.set(ha=ha, va=va)
        t.xyann = at
        placed.append(t.get_window_extent(r))
