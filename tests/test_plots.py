"""The figures of `tricut simulate/compare --plot DIR` (``sim/cli/plots.py``) and of
`tricut sweep plot` (``sim/sweep/plot.py``), checked through their matplotlib objects: one
series per run or group, each with its own (colour, line style); a note where two series are
identical or alike; units and the origin in the axis labels; dominated points drawn; every
label inside the axes; the same PNG bytes on a re-run.

The run figures come from one real ``compare`` (``--synthetic``, a few requests, on the ``edge``
GPU: without its CDU the runs skip the te + cdu tile timing model, ~10 s to build on an H100)
and from hand-made results where an exact relation (identical, alike, a late first step) is
wanted. The sweep figures come from
small databases written through :class:`ResultStore` (no sweep runs, no Ray).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from types import SimpleNamespace

import matplotlib
import numpy as np
import pytest

matplotlib.use("Agg")

from tricut.sim import cli  # noqa: E402
from tricut.sim import plotting  # noqa: E402
from tricut.sim.cli import plots  # noqa: E402
from tricut.sim.sweep import plot as sweep_plot  # noqa: E402
from tricut.sim.sweep.store import ResultStore  # noqa: E402

COMPARE = ["compare", "--model", "tiny-te", "--gpu", "edge", "--synthetic", "6", "--prompt-tokens", "64",
           "--output-tokens", "6", "--no-progress", "--json"]


def _series(ax) -> list:
    """The labelled lines of ``ax`` (a legend entry each)."""
    return [ln for ln in ax.get_lines() if not ln.get_label().startswith("_")]


def _style(line) -> tuple:
    return (matplotlib.colors.to_hex(line.get_color()), str(line.get_linestyle()))


def _inside(inner, outer, slack: float = 0.5) -> bool:
    return (inner.x0 >= outer.x0 - slack and inner.x1 <= outer.x1 + slack
            and inner.y0 >= outer.y0 - slack and inner.y1 <= outer.y1 + slack)


def _legend_texts(ax) -> list[str]:
    return [t.get_text() for t in ax.get_legend().get_texts()]


def _close(figs: dict) -> None:
    plt = plotting.pyplot()
    for fig in figs.values():
        plt.close(fig)


# =========================================================================== run figures
@pytest.fixture(scope="module")
def compared(tmp_path_factory):
    """``tricut compare ... --plot DIR`` in this process: ``{"dir", "results"}`` (the results
    plot_run was given)."""
    seen = {}
    real = plots.plot_run

    def spy(results, out_dir):
        seen.update(results)
        return real(results, out_dir)
    out = tmp_path_factory.mktemp("compare") / "figs"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(plots, "plot_run", spy)
        assert cli.main([*COMPARE, "--plot", str(out)]) == 0
    return {"dir": out, "results": seen}


def _fake(label_values: dict) -> dict:
    """Hand-made results: ``label -> (ttft list s, tpot list s, step_end_s, GB/s per step)``."""
    out = {}
    for label, (ttft, tpot, ends, gbps) in label_values.items():
        ends = np.asarray(ends, dtype=float)
        times = np.full(len(ends), 0.01)
        out[label] = SimpleNamespace(
            request_times=[SimpleNamespace(ttft_s=a, tpot_s=b) for a, b in zip(ttft, tpot)],
            step_end_s=ends, step_times_s=times, step_hbm_bytes=np.asarray(gbps, dtype=float) * 1e9 * times)
    return out


def test_compare_writes_both_figures_and_the_same_bytes_again(compared, tmp_path):
    out = compared["dir"]
    assert sorted(p.name for p in out.iterdir()) == sorted(plots.RUN_FIGURES)
    again = tmp_path / "again"
    plots.plot_run(compared["results"], again)
    for name in plots.RUN_FIGURES:
        first, second = (out / name).read_bytes(), (again / name).read_bytes()
        assert first[:8] == b"\x89PNG\r\n\x1a\n"
        assert hashlib.sha256(first).hexdigest() == hashlib.sha256(second).hexdigest(), name
        assert b"Software" not in first and b"Matplotlib" not in first


def test_every_run_is_a_series_with_its_own_colour_and_line_style(compared):
    results = compared["results"]
    assert list(results) == ["baseline", "te", "dsu", "te+cdu+dsu (no CDU)"]     # the edge GPU has no CDU
    figs = plots.run_figures(results)
    try:
        (ttft, tpot), = [figs["latency_cdf.png"].axes[:2]]
        hbm = figs["hbm_bandwidth.png"].axes[0]
        for ax in (ttft, tpot, hbm):
            lines = _series(ax)
            assert [ln.get_label() for ln in lines] == list(results), ax.get_title()
            assert len({_style(ln) for ln in lines}) == len(lines), [_style(ln) for ln in lines]
            # drawn later = on top = narrower: an earlier series always shows at the edges
            order = sorted(lines, key=lambda ln: ln.get_zorder())
            widths = [ln.get_linewidth() for ln in order]
            assert widths == sorted(widths, reverse=True) and len(set(widths)) == len(widths)
            # markers staggered: two series on one another do not put their markers together
            assert len({str(ln.get_markevery()) for ln in lines}) == len(lines)
            assert len({ln.get_marker() for ln in lines}) == len(lines)
    finally:
        _close(figs)


def test_run_axes_name_their_units_and_start_at_zero(compared):
    figs = plots.run_figures(compared["results"])
    try:
        ttft, tpot = figs["latency_cdf.png"].axes[:2]
        hbm = figs["hbm_bandwidth.png"].axes[0]
        assert "TTFT (ms)" in ttft.get_xlabel() and "TPOT (ms)" in tpot.get_xlabel()
        assert "fraction of requests" in ttft.get_ylabel() and "0-1" in ttft.get_ylabel()
        assert "(s)" in hbm.get_xlabel() and "since the first request's arrival" in hbm.get_xlabel()
        assert "(GB/s)" in hbm.get_ylabel()
        for ax in (ttft, tpot, hbm):
            assert ax.get_xlim()[0] == 0, ax.get_title()
        assert ttft.get_ylim() == (0, 1.03) and hbm.get_ylim()[0] == 0
    finally:
        _close(figs)


def test_legends_and_labels_stay_inside_the_figure(compared):
    figs = plots.run_figures(compared["results"])
    try:
        for name, fig in figs.items():
            fig.canvas.draw()
            r = fig.canvas.get_renderer()
            box = fig.bbox
            for ax in fig.axes:
                for artist in (ax.get_legend(), ax.xaxis.label, ax.yaxis.label, ax.title):
                    if artist is not None and artist.get_visible():
                        assert _inside(artist.get_window_extent(r), box), (name, artist)
                legend = ax.get_legend().get_window_extent(r)
                frame = ax.get_window_extent(r)
                assert legend.y1 <= frame.y0, f"{name}: the legend lies over the data"
    finally:
        _close(figs)


def test_identical_and_alike_series_are_noted_in_the_legend():
    ends = [1.0, 2.0, 3.0, 4.0]
    base = ([0.1, 0.2, 0.3], [0.01, 0.02, 0.03], ends, [100, 110, 120, 130])
    results = _fake({"baseline": base,
                     "same": base,                                              # every number equal
                     "close": ([0.1, 0.2, 0.301], [0.01, 0.02, 0.0301], ends, [100, 110, 120, 130.5]),
                     "other": ([0.5, 0.6, 0.7], [0.05, 0.06, 0.07], ends, [200, 210, 220, 230])})
    figs = plots.run_figures(results)
    try:
        ttft = figs["latency_cdf.png"].axes[0]
        hbm = figs["hbm_bandwidth.png"].axes[0]
        for ax in (ttft, hbm):
            texts = _legend_texts(ax)
            assert texts[0] == "baseline" and texts[3] == "other"
            assert texts[1] == "same: identical to baseline"
            assert texts[2].startswith("close: ≈ ") and "mean difference" in texts[2]
            assert ax.get_legend().get_title().get_text() == ""
            assert len(_series(ax)) == 4
    finally:
        _close(figs)
    figs = plots.run_figures(_fake({"a": base, "b": base, "c": base}))
    try:
        title = figs["latency_cdf.png"].axes[0].get_legend().get_title().get_text()
        assert title == "all 3 identical: the lines lie on one another"
    finally:
        _close(figs)


def test_a_late_first_decode_step_is_stated_on_the_time_axis():
    results = _fake({"baseline": ([1.0], [0.01], [215.0, 216.0, 300.0], [10, 20, 30]),
                     "te": ([1.0], [0.01], [215.5, 290.0], [15, 25])})
    figs = plots.run_figures(results)
    try:
        hbm = figs["hbm_bandwidth.png"].axes[0]
        assert hbm.get_xlim()[0] == 0
        assert "no decode step ends before 215 s" in hbm.get_xlabel()
    finally:
        _close(figs)
    figs = plots.run_figures(_fake({"baseline": ([1.0], [0.01], [0.5, 216.0, 300.0], [10, 20, 30])}))
    try:
        assert "no decode step ends before" not in figs["hbm_bandwidth.png"].axes[0].get_xlabel()
    finally:
        _close(figs)


def test_series_style_pairs_stay_distinct_for_fifty_series():
    styles = [plotting.series_style(i, 50) for i in range(50)]
    assert len({(s["color"], str(s["linestyle"])) for s in styles}) == 50


# =========================================================================== sweep figures
VERSION = {"tricut": "0", "commit": "c"}

#: (kv_dtype, policy, te engines) -> (tpot_p99_s, tokens_per_s): per kv_dtype group a front,
#: points dominated, three equal points at one place (a front place), two equal dominated
#: points, a point of each group at one place, and a front point at the right edge with a
#: long label
POINTS = {
    ("bf16", "static", 1): (0.020, 900.0),
    ("bf16", "static", 2): (0.020, 900.0),
    ("bf16", "static", 4): (0.020, 900.0),          # three equal: all on the front
    ("bf16", "adaptive", 1): (0.030, 1200.0),
    ("bf16", "adaptive", 2): (0.025, 800.0),        # dominated by (0.020, 900)
    ("bf16", "adaptive", 4): (0.025, 800.0),        # the same, dominated too
    ("bf16", "adaptive-long-policy-name-for-the-edge", 8): (0.060, 1500.0),   # rightmost, on the front
    ("fp8", "static", 1): (0.030, 1200.0),          # where bf16's adaptive/1 is
    ("fp8", "static", 2): (0.018, 700.0),
    ("fp8", "adaptive", 1): (0.040, 1000.0),        # dominated
}


def _db(path: Path, points: dict = POINTS, sweep: str = "crafted", keys_reversed: bool = False) -> Path:
    with ResultStore(path) as store:
        for n, ((kv, policy, te), (tpot, tps)) in enumerate(points.items()):
            axes = {"kv_dtype": kv, "policy": policy, "unit.te_engines_per_sm": te}
            store.write(key=f"k{len(points) - n if keys_reversed else n:03d}", sweep=sweep, task="simulate", status="done", error=None, wall_s=0.1,
                        version=VERSION, axes=axes, config=dict(axes),
                        metrics={"tpot_p99_s": tpot, "tokens_per_s": tps, "requests": 10 + n})
    return path


@pytest.fixture(scope="module")
def crafted(tmp_path_factory):
    return _db(tmp_path_factory.mktemp("sweepdb") / "crafted.duckdb")


def _pareto(figs):
    (name, fig), = [(k, v) for k, v in figs.items() if k.startswith("pareto_")]
    return name, fig, fig.axes[0]


def _points(ax, gid: str) -> dict:
    """``colour -> sorted (x, y)`` of the lines tagged ``gid``."""
    out = {}
    for ln in ax.get_lines():
        if ln.get_gid() == gid:
            out.setdefault(matplotlib.colors.to_hex(ln.get_color()), []).extend(map(tuple, ln.get_xydata()))
    return {k: sorted(v) for k, v in out.items()}


def test_pareto_front_keeps_equal_points_and_drops_dominated_ones():
    pts = [(1.0, 5.0), (1.0, 5.0), (2.0, 4.0), (0.5, 1.0), (1.0, 4.0), (3.0, 9.0)]
    # x low, y high: (0.5, 1) < (1, 5) x2 < (3, 9); (2, 4) and (1, 4) are dominated by (1, 5)
    assert sweep_plot.pareto_front(pts, x_low=True, y_low=False) == [3, 0, 1, 5]
    assert sweep_plot.pareto_front([(1, 1), (1, 1)], True, True) == [0, 1]
    assert sweep_plot.pareto_front([(1, 1), (1, 2)], True, True) == [0]


def test_pareto_draws_every_point_front_and_dominated(crafted):
    figs = sweep_plot.sweep_figures(crafted)
    try:
        name, fig, ax = _pareto(figs)
        assert name == "pareto_tokens_per_s_vs_tpot_p99_s.png"
        front, dominated = _points(ax, "front"), _points(ax, "dominated")
        bf16, fp8 = "#1f77b4", "#ff7f0e"
        assert front == {bf16: sorted([(0.02, 900.0)] * 3 + [(0.03, 1200.0), (0.06, 1500.0)]),
                         fp8: [(0.018, 700.0), (0.03, 1200.0)]}
        assert dominated == {bf16: [(0.025, 800.0), (0.025, 800.0)], fp8: [(0.04, 1000.0)]}
        assert sum(len(v) for v in (*front.values(), *dominated.values())) == len(POINTS)
        # dominated: hollow markers, in the legend
        for ln in ax.get_lines():
            if ln.get_gid() == "dominated":
                assert ln.get_markerfacecolor() == "none" and ln.get_linestyle() == "None"
        texts = _legend_texts(ax)
        assert texts == ["kv_dtype = bf16: 5 of 7 on its front", "kv_dtype = fp8: 2 of 3 on its front",
                         "dominated (3): hollow, its group's colour and marker"]
        fronts = [ln for ln in ax.get_lines() if ln.get_gid() == "front"]
        assert len(fronts) == 2 and len({_style(ln) for ln in fronts}) == 2
        assert len({ln.get_marker() for ln in fronts}) == 2
        # where the groups meet, the earlier group's marker is the larger ring
        assert fronts[0].get_markersize() > fronts[1].get_markersize()
        assert "10 points: 7 on a front, 3 dominated" in ax.get_title()
    finally:
        _close(figs)


def test_pareto_labels_list_equal_points_and_stay_inside_the_axes(crafted):
    figs = sweep_plot.sweep_figures(crafted)
    try:
        _, fig, ax = _pareto(figs)
        labels = [t for t in ax.texts if t.get_gid() == "label"]
        by_text = {t.get_text(): t for t in labels}
        assert len(labels) == 6           # 5 front places (bf16 3, fp8 2) and 1 shared dominated place
        assert "3 points here:\npolicy=static te_engines_per_sm=1\npolicy=static te_engines_per_sm=2\n" \
               "policy=static te_engines_per_sm=4" in by_text
        assert "2 dominated points here" in by_text
        edge = by_text["policy=adaptive-long-policy-name-for-the-edge te_engines_per_sm=8"]
        fig.canvas.draw()
        r = fig.canvas.get_renderer()
        frame = ax.get_window_extent(r)
        boxes = [t.get_window_extent(r) for t in labels]
        for t, box in zip(labels, boxes):
            assert _inside(box, frame), (t.get_text(), box, frame)
        assert edge.get_horizontalalignment() == "right"         # turned back at the right edge
        for i, a in enumerate(boxes):                             # and no two on one another
            for b in boxes[:i]:
                assert not a.overlaps(b), (labels[i].get_text(), a, b)
    finally:
        _close(figs)


def test_pareto_axis_labels_carry_units_and_origin(crafted, tmp_path):
    figs = sweep_plot.sweep_figures(crafted)
    try:
        _, _, ax = _pareto(figs)
        assert ax.get_xlabel().startswith("tpot_p99_s (s; lower is better)")
        assert ax.get_ylabel().startswith("tokens_per_s (tokens/s; higher is better)")
        for label, lims in ((ax.get_xlabel(), ax.get_xlim()), (ax.get_ylabel(), ax.get_ylim())):
            assert lims[0] > 0 and f"axis from {lims[0]:.4g}, not 0" in label
        heat = next(f for k, f in figs.items() if k.startswith("heatmap_"))
        assert heat.axes[1].get_ylabel() == "tokens_per_s (tokens/s; higher is better)"
    finally:
        _close(figs)
    figs = sweep_plot.sweep_figures(crafted, x="requests", y="tpot_p99_s", group="policy")
    try:
        _, _, ax = _pareto(figs)
        assert ax.get_xlabel().startswith("requests (count; higher is better)")
        assert len([ln for ln in ax.get_lines() if ln.get_gid() == "front"]) == \
            len({k[1] for k in POINTS})
    finally:
        _close(figs)


def test_metric_units_follow_the_names():
    unit = sweep_plot.metric_unit
    assert [unit(m) for m in ("tokens_per_s", "requests_per_s", "goodput_rps", "ttft_p99_s",
                              "hbm_gbps_mean", "hbm_read_bytes", "cycles_per_step", "layer_cycles_mean",
                              "cells_te_engines", "l2_hit_rate", "sm_utilisation", "hbm_port_use",
                              "min_step_over_floor", "kv_tokens_leaked", "mean_batch")] == \
        ["tokens/s", "requests/s", "requests/s", "s", "GB/s", "bytes", "cycles", "cycles", "cells",
         "fraction, 0-1", "fraction, 0-1", "fraction, 0-1", "ratio", "tokens", "requests"]
    assert unit("ffs", [3, 4]) == "count" and unit("widgets", [0.5]) == "unit not known"


def test_sweep_plot_writes_the_same_files_and_bytes_twice(crafted, tmp_path):
    a = sweep_plot.plot_sweep(crafted, tmp_path / "a")
    b = sweep_plot.plot_sweep(crafted, tmp_path / "b")
    assert [p.name for p in a] == [p.name for p in b] == \
        ["pareto_tokens_per_s_vs_tpot_p99_s.png", "heatmap_tokens_per_s_kv_dtype_policy.png"]
    for p, q in zip(a, b):
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.read_bytes() == q.read_bytes(), p.name
    assert sorted(x.name for x in (tmp_path / "a").iterdir()) == sorted(p.name for p in a)   # no temp files


def test_sweep_plots_do_not_depend_on_the_points_keys(crafted, tmp_path):
    """A point's key hashes the code version: another commit's keys order the points otherwise,
    and the plots (the order of a shared place's label lines) must not follow them."""
    reordered = _db(tmp_path / "reordered.duckdb", keys_reversed=True)
    a = sweep_plot.plot_sweep(crafted, tmp_path / "a")
    b = sweep_plot.plot_sweep(reordered, tmp_path / "b")
    for p, q in zip(a, b, strict=True):
        assert p.read_bytes() == q.read_bytes(), p.name


def test_points_of_older_code_are_left_out_and_counted(tmp_path):
    """A --resume after a code change adds the new code's points beside the old ones: the plot
    shows the newest code version's alone and says how many it left out."""
    db = tmp_path / "mixed.duckdb"
    with ResultStore(db) as store:
        for n, ((kv, policy, te), (tpot, tps)) in enumerate(list(POINTS.items())[:3]):
            axes = {"kv_dtype": kv, "policy": policy, "unit.te_engines_per_sm": te}
            store.write(key=f"old{n}", sweep="crafted", task="simulate", status="done", error=None, wall_s=0.1,
                        version={"tricut": "0", "commit": "older"}, axes=axes, config=dict(axes),
                        metrics={"tpot_p99_s": tpot * 9, "tokens_per_s": tps / 9, "requests": 10})
    _db(db)
    figs = sweep_plot.sweep_figures(db)
    try:
        _, fig, ax = _pareto(figs)
        drawn = sum(len(v) for gid in ("front", "dominated") for v in _points(ax, gid).values())
        assert drawn == len(POINTS)
        assert ax.get_title().endswith("\n3 points of older code versions in the database left out")
    finally:
        _close(figs)
    figs = sweep_plot.sweep_figures(_db(tmp_path / "one_version.duckdb"))
    try:
        assert "older code" not in _pareto(figs)[2].get_title()
    finally:
        _close(figs)


def test_a_single_point_sweep_still_plots(tmp_path):
    db = _db(tmp_path / "one.duckdb", {("bf16", "static", 1): (0.02, 900.0)}, sweep="one")
    figs = sweep_plot.sweep_figures(db)
    try:
        _, fig, ax = _pareto(figs)
        assert _points(ax, "front") == {"#1f77b4": [(0.02, 900.0)]} and _points(ax, "dominated") == {}
        assert "dominated" not in " ".join(_legend_texts(ax))
        fig.canvas.draw()
        r = fig.canvas.get_renderer()
        assert all(_inside(t.get_window_extent(r), ax.get_window_extent(r)) for t in ax.texts)
    finally:
        _close(figs)


def test_the_energy_figure_stacks_each_runs_components_and_keeps_its_legend_below():
    from tricut.models.config import load_gpu, load_model
    from tricut.sim.fast.energy import COMPONENTS
    from tricut.sim.fast.setup import ServingSetup
    from tricut.sim.fast.workload import synthetic
    setup = ServingSetup(load_model("llama-3-8b"), load_gpu("h100-sxm5"))
    reqs = synthetic(8, 50.0, prompt=256, output=8, seed=2)
    results = {"baseline": setup.run(reqs, ()), "dsu": setup.run(reqs, ("dsu",))}
    fig = plots.energy_figure(results)
    try:
        ax = fig.axes[0]
        bars = [p for p in ax.patches]
        assert len(bars) == len(results) * len(COMPONENTS)
        tops = {}
        for p in bars:
            x = round(p.get_x() + p.get_width() / 2)
            tops[x] = max(tops.get(x, 0.0), p.get_y() + p.get_height())
        for x, label in enumerate(results):
            assert tops[x] == pytest.approx(results[label].summary["energy_j_per_token"])
        assert "(J)" in ax.get_ylabel() and ax.get_ylim()[0] == 0
        fig.canvas.draw()
        r = fig.canvas.get_renderer()
        legend = ax.get_legend()
        assert [t.get_text() for t in legend.get_texts()] == list(COMPONENTS)
        assert legend.get_window_extent(r).y1 <= ax.get_window_extent(r).y0
        assert _inside(legend.get_window_extent(r), fig.bbox)
    finally:
        _close({"e": fig})
    # a GPU without energy coefficients: no figure, and compare writes only the run figures
    assert plots.energy_figure({"x": SimpleNamespace(energy=None)}) is None
