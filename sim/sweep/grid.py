"""A sweep's grid file (TOML) -> its points, each checked before anything runs.

```toml
name = "l2-policy"                 # optional; default: the file's stem
task = "simulate"                  # simulate (default), cdu-replay, tile-run, tile-area, tile-design

[fixed]                            # settings every point shares
model = "llama-3-70b"
tp = 8
trace = "../sim/data/mooncake_conversation_sample.jsonl"   # relative to this file
limit = 100

[axes]                             # the grid: every combination of these values
kv_dtype = ["bf16", "fp8"]
policy = ["static", "adaptive"]
"assume.cdu_l2_share" = [0.4, 0.8]         # any --assume NAME
"unit.te_engines_per_sm" = [1, 4]          # any --unit NAME
workload = [{synthetic = 64, rate = 4}, {trace = "t.jsonl", limit = 50}]  # a table sets several

[[exclude]]                        # drop the points that match every key of one table
kv_dtype = "fp8"
policy = "static"

[filter]
drop_impossible = true             # drop combinations the configuration refuses (say, a tp
                                   # that does not divide the heads) instead of failing
```

A setting's name is the task's flag without ``--`` and with ``_`` for ``-`` (``kv_dtype``,
``max_batch``); ``assume.NAME`` and ``unit.NAME`` set one ``--assume`` / ``--unit``. An axis
whose values are tables sets several flags per value (a workload). Every point is checked the
way its command checks its flags (:mod:`.tasks`); a value the command refuses stops the sweep
with one line naming the point, an impossible *combination* does so too unless
``drop_impossible``. Checking takes milliseconds a point, minutes for the largest grids:
:class:`CheckProgress` tells the user how far it is.
"""

from __future__ import annotations

import datetime
import hashlib
import itertools
import json
import sys
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from .tasks import TASKS, GridError, Impossible, code_version

__all__ = ["GridError", "Point", "Grid", "load_grid", "MAX_POINTS", "CheckProgress"]

#: the most points one grid may expand to (a larger one is a typo, or several sweeps)
MAX_POINTS = 100_000
#: checking a grid says nothing for this long, then prints a line this often (not on a terminal)
CHECK_QUIET_S = 1.0
CHECK_INTERVAL_S = 10.0
_TOP_KEYS = {"name", "task", "fixed", "axes", "exclude", "filter"}


@dataclass(frozen=True)
class Point:
    """One point of a sweep: its settings (axis and fixed values merged, paths resolved),
    the axis values that name it, the task's full resolved configuration and its key."""
    settings: dict
    axes: dict
    config: dict = field(compare=False)
    key: str = ""

    def label(self) -> str:
        return " ".join(f"{k}={_show(v)}" for k, v in self.axes.items()) or "(the one point)"


@dataclass
class Grid:
    path: Path
    name: str
    task: str
    axes: dict
    points: list
    dropped: list          # (axis values, reason) of the points drop_impossible removed
    excluded: int          # points removed by [[exclude]]


def _show(v):
    if isinstance(v, dict):
        return "{" + ",".join(f"{k}={_show(x)}" for k, x in v.items()) + "}"
    return str(v)


def _key(task: str, config: dict) -> str:
    """A hash of the task, its resolved configuration and the code version. A file known by
    its content hash (``trace`` with ``trace_sha256``) enters by that hash and its name, not its
    folder, so the same grid in another checkout has the same keys."""
    for name in ("trace", "sessions"):
        if config.get(name) and config.get(f"{name}_sha256"):
            config = {**config, name: Path(config[name]).name}
    text = json.dumps({"task": task, "config": config, "code": code_version()}, sort_keys=True,
                      default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def _check_plain(where: str, value, path: Path) -> None:
    """A TOML date or time is no setting's value (and JSON cannot hold it)."""
    for v in value if isinstance(value, list) else [value]:
        if isinstance(v, (datetime.date, datetime.time)):
            raise GridError(f"{path}: {where}: a date or time is not a setting's value, got {v}")


def _settings_of(where: str, value, path: Path, task) -> dict:
    """A fixed table or an axis value (a table or one value of a named axis) -> settings."""
    if not isinstance(value, dict):
        raise GridError(f"{path}: {where}: expected a table, got {value!r}")
    out = {}
    for k, v in value.items():
        task.check_name(k, f"{path}: {where}")
        if isinstance(v, (dict, list)) and not (k in task.LIST_SETTINGS and isinstance(v, list)):
            raise GridError(f"{path}: {where}: {k} must be one value, got {v!r}")
        _check_plain(f"{where}: {k}", v, path)
        out[k] = v
    return out


class CheckProgress:
    """``progress(checked, total)`` of :func:`load_grid` on ``stream`` (stderr): nothing for a
    grid checked within ``quiet_s`` (:data:`CHECK_QUIET_S`); then a line redrawn in place on a
    terminal, else one line every ``interval_s`` (:data:`CHECK_INTERVAL_S`). As a context
    manager it ends a line left open on a terminal (a refused point's error then starts a line
    of its own)."""

    def __init__(self, stream=None, interval_s: float | None = None, quiet_s: float | None = None,
                 clock=time.monotonic):
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.interval_s = CHECK_INTERVAL_S if interval_s is None else interval_s
        self.quiet_s = CHECK_QUIET_S if quiet_s is None else quiet_s
        self.clock = clock
        self.t0 = clock()
        self.shown = None            # when the last line was printed
        self.open_line = False       # a terminal line not yet ended

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.open_line:
            print(file=self.stream, flush=True)
            self.open_line = False

    def __call__(self, checked: int, total: int) -> None:
        now = self.clock()
        if now - self.t0 < self.quiet_s and checked < total:
            return
        if self.shown is None and checked == total:
            return                   # done before anything was shown: nothing to say
        every = 0.2 if self.tty else self.interval_s
        if checked < total and self.shown is not None and now - self.shown < every:
            return
        self.shown = now
        spent = now - self.t0
        left = spent / max(checked, 1) * (total - checked)
        text = (f"sweep: checked {checked:,} of {total:,} points ({100 * checked / total:.0f} %), "
                f"{spent:,.0f} s so far" + (f", about {left:,.0f} s left" if checked < total else ""))
        if self.tty:
            self.open_line = checked < total
            print(f"\r{text} ", end="" if self.open_line else "\n", file=self.stream, flush=True)
        else:
            print(text, file=self.stream, flush=True)


def load_grid(path, progress=None) -> Grid:
    """Read, expand and check a grid file (:class:`GridError`, or the task's own one-line
    ``ValueError`` naming the point that is refused); ``progress(checked, total)`` is called
    as the points are checked (:class:`CheckProgress`)."""
    path = Path(path)
    try:
        text = path.read_bytes()
    except FileNotFoundError:
        raise GridError(f"grid file {path} does not exist") from None
    except IsADirectoryError:
        raise GridError(f"grid file {path} is a directory") from None
    except OSError as e:
        raise GridError(f"cannot read grid file {path}: {e.strerror or e}") from None
    try:
        doc = tomllib.loads(text.decode("utf-8"))
    except UnicodeDecodeError:
        raise GridError(f"{path}: not UTF-8 text (a grid file is TOML)") from None
    except tomllib.TOMLDecodeError as e:
        raise GridError(f"{path}: not valid TOML: {e}") from None
    unknown = set(doc) - _TOP_KEYS
    if unknown:
        raise GridError(f"{path}: unknown top-level key {sorted(unknown)[0]!r}; a grid has "
                        f"{', '.join(sorted(_TOP_KEYS))}")
    name = doc.get("name", path.stem)
    if not isinstance(name, str) or not name or len(name) > 64:
        raise GridError(f"{path}: name must be a non-empty string of at most 64 characters, got {name!r}")
    task_name = doc.get("task", "simulate")
    if task_name not in TASKS:
        raise GridError(f"{path}: unknown task {task_name!r}; choose one of {', '.join(TASKS)}")
    task = TASKS[task_name]
    fixed = _settings_of("[fixed]", doc.get("fixed", {}), path, task)
    axes_doc = doc.get("axes", {})
    if not isinstance(axes_doc, dict):
        raise GridError(f"{path}: [axes] must be a table of name = [values]")
    axes = {}
    for axis, values in axes_doc.items():
        if not isinstance(values, list) or not values:
            raise GridError(f"{path}: axis {axis!r} must be a non-empty list of values, got {values!r}")
        if all(isinstance(v, dict) for v in values):
            axes[axis] = [_settings_of(f"axis {axis!r}", v, path, task) for v in values]
        else:
            task.check_name(axis, f"{path}: axis")
            if axis in fixed:
                raise GridError(f"{path}: {axis!r} is both an axis and in [fixed]")
            for v in values:
                if isinstance(v, dict) or (isinstance(v, list) and axis not in task.LIST_SETTINGS):
                    raise GridError(f"{path}: axis {axis!r}: a value must be one value, got {v!r}")
                _check_plain(f"axis {axis!r}", v, path)
            if len({json.dumps(v, sort_keys=True) for v in values}) != len(values):
                raise GridError(f"{path}: axis {axis!r} repeats a value: {values!r}")
            axes[axis] = values
    if not axes and not fixed:
        raise GridError(f"{path}: the grid is empty: give [axes] (and [fixed]) settings")
    excludes = doc.get("exclude", [])
    if not isinstance(excludes, list) or not all(isinstance(e, dict) and e for e in excludes):
        raise GridError(f"{path}: [[exclude]] must be tables of name = value")
    for e in excludes:
        for k in e:
            if k not in axes:
                raise GridError(f"{path}: [[exclude]] names {k!r}, which is not an axis "
                                f"({', '.join(axes) or 'none'})")
    flt = doc.get("filter", {})
    if not isinstance(flt, dict) or set(flt) - {"drop_impossible"} \
            or not isinstance(flt.get("drop_impossible", False), bool):
        raise GridError(f"{path}: [filter] takes only drop_impossible = true|false")
    drop = flt.get("drop_impossible", False)

    count = 1
    for values in axes.values():
        count *= len(values)
    if count > MAX_POINTS:
        raise GridError(f"{path}: the grid has {count:,} points, more than {MAX_POINTS:,}")

    points, dropped, excluded, seen = [], [], 0, {}
    for checked, combo in enumerate(itertools.product(*axes.values())):
        if progress is not None:
            progress(checked, count)
        named = dict(zip(axes, combo))
        if any(all(named[k] == v for k, v in e.items()) for e in excludes):
            excluded += 1
            continue
        settings = dict(fixed)
        for axis, v in named.items():
            if isinstance(v, dict):
                for k in v:
                    if k in settings:
                        raise GridError(f"{path}: axis {axis!r} sets {k!r}, which [fixed] or "
                                        "another axis sets too")
                settings.update(v)
            else:
                settings[axis] = v
        settings = task.resolve_paths(settings, path.parent)
        point_label = " ".join(f"{k}={_show(v)}" for k, v in named.items())
        try:
            config = task.check(settings)
        except Impossible as e:
            if drop:
                dropped.append((named, str(e)))
                continue
            raise GridError(f"{path}: point {point_label or '(fixed)'}: {e} (set [filter] "
                            "drop_impossible = true to drop such combinations)") from None
        except ValueError as e:
            raise GridError(f"{path}: point {point_label or '(fixed)'}: {e}") from None
        key = _key(task.NAME, config)
        if key in seen:
            raise GridError(f"{path}: points {seen[key]} and {point_label} are the same "
                            "configuration")
        seen[key] = point_label
        points.append(Point(settings, named, config, key))
    if progress is not None:
        progress(count, count)
    if not points:
        raise GridError(f"{path}: no point is left after [[exclude]] and drop_impossible "
                        f"({excluded} excluded, {len(dropped)} impossible)")
    return Grid(path, name, task.NAME, axes, points, dropped, excluded)
