"""The fast model's JSON data files (fitted tables written by the benchmark scripts): read one
from this package or from a given path, with one clear error for a missing or broken file."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

from tricut.models.config import ConfigError

__all__ = ["read_data_json", "parse_sourced_table"]


def parse_sourced_table(raw, label: str, group: str, what: str, names: list[str], make) -> tuple[dict, dict]:
    """A table of entries whose every value carries its source, ``{"about": ..., group: {entry:
    {name: {"value": v, "source": "..."}}}}`` (``stacks.json``, ``energy.json``):
    ``({entry: make(entry, values)}, {entry: {name: source}})``. ``what`` names an entry in
    messages; a malformed table, or a ``ValueError`` from ``make``, raises :class:`ConfigError`
    naming the file and the entry."""
    if not isinstance(raw, dict) or set(raw) != {"about", group} or not isinstance(raw[group], dict) \
            or not raw[group]:
        raise ConfigError(f"{label}: expected an object with 'about' and a non-empty '{group}'")
    made, sources = {}, {}
    for name, entry in raw[group].items():
        if not isinstance(entry, dict) or set(entry) != set(names):
            found = sorted(entry) if isinstance(entry, dict) else type(entry).__name__
            raise ConfigError(f"{label}: {what} {name!r}: expected the keys {', '.join(names)}, got {found}")
        values, src = {}, {}
        for key in names:
            item = entry[key]
            if not isinstance(item, dict) or set(item) != {"value", "source"} \
                    or not isinstance(item["source"], str) or not item["source"]:
                raise ConfigError(f"{label}: entry '{name}.{key}': expected {{\"value\": ..., "
                                  f"\"source\": \"...\"}}, got {item!r}")
            values[key], src[key] = item["value"], item["source"]
        try:
            made[name] = make(name, values)
        except ValueError as e:
            raise ConfigError(f"{label}: {e}") from None
        sources[name] = src
    return made, sources


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
