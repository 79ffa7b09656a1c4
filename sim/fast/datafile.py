"""The fast model's JSON data files (fitted tables written by the benchmark scripts): read one
from this package or from a given path, with one clear error for a missing or broken file."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

from tricut.models.config import ConfigError

__all__ = ["read_data_json"]


def read_data_json(filename: str, path: str | Path | None = None) -> tuple[object, str]:
    """``(parsed JSON, label)`` of the shipped ``sim/fast/<filename>`` (``path=None``) or of
    ``path``; a missing, unreadable or invalid file raises :class:`ConfigError` naming it."""
    if path is None:
        label, res = f"sim/fast/{filename}", resources.files(__package__).joinpath(filename)
    else:
        label, res = str(path), Path(path)
    try:
        return json.loads(res.read_text(encoding="utf-8")), label
    except FileNotFoundError:
        raise ConfigError(f"{label}: file not found") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{label}: cannot read: {e}") from None
    except json.JSONDecodeError as e:
        raise ConfigError(f"{label}: not valid JSON: {e}") from None
