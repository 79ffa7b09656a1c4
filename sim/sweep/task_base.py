"""What every sweep task shares: the grid's errors, a setting's name check, paths relative to
the grid file, JSON-safe configuration values (the tasks: :mod:`.tasks`, :mod:`.tile_tasks`)."""

from __future__ import annotations

import math
from pathlib import Path

__all__ = ["GridError", "Impossible", "Task"]


class GridError(ValueError):
    """A bad grid file; the message names the file and what is wrong (one line)."""


class Impossible(ValueError):
    """A combination of valid values that the configuration refuses (a tp that does not
    divide the heads, a request longer than the model's context); ``drop_impossible`` drops
    such points."""


class Task:
    """A sweep task: ``NAME``, the settings a grid may give (:meth:`names`), those whose value
    may be a list (``LIST_SETTINGS``) or a file path (``PATH_SETTINGS``: setting -> the
    suffixes of a value taken as a path, ``""`` for any), and ``check``/``run``."""
    NAME = ""
    LIST_SETTINGS: tuple = ()
    PATH_SETTINGS: dict = {}

    @classmethod
    def names(cls) -> list[str]:
        raise NotImplementedError

    @classmethod
    def check_name(cls, name: str, where: str) -> None:
        names = cls.names()
        if name not in names:
            raise GridError(f"{where}: unknown setting {name!r} for task {cls.NAME}; settings: "
                            f"{', '.join(names)}")

    @classmethod
    def resolve_paths(cls, settings: dict, base: Path) -> dict:
        """A relative path (a trace, a model or GPU .toml, ...) is relative to the grid file."""
        out = dict(settings)
        for k, suffixes in cls.PATH_SETTINGS.items():
            v = out.get(k)
            if isinstance(v, str) and v.endswith(suffixes) and not Path(v).is_absolute():
                out[k] = str((base / v).resolve())
        return out


def _jsonable(v):
    if isinstance(v, Path):
        return str(v)
    if isinstance(v, (tuple, list)):
        return [_jsonable(x) for x in v]
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)                 # inf (a rate, an SLO): JSON has no infinity
    return v
