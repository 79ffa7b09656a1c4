"""KV-cache tiers beyond HBM: typed records, loaded from TOML files shipped in the package.

G1 is the GPU's HBM (its size and bandwidth are in the GPU config). A tier config describes what
lies beyond it, per GPU:

* **G2** host memory (LPDDR5X over NVLink-C2C on Grace/Vera, DDR5 over PCIe on x86),
* **G3** local NVMe,
* **G3.5** pod-level storage reached over the network (the source articles' CMX tier).

A config is named by its id (``grace-hopper``: a file in ``models/configs/tiers/``) or by a path
to a user's own TOML file. A file holds a ``name`` and one table per tier present (``[g2]``,
``[g3]``, ``[g3_5]``); a tier may be absent. Each table has four fields, the unit part of the key:

``link``            what connects the tier to HBM (printed in tables)
``capacity_gib``    the tier's capacity one GPU may use, GiB (2**30 bytes)
``bandwidth_gb_s``  per GPU, one direction, GB/s (10**9 bytes/s): the slowest of the link into
                    HBM and the tier's own memory or media, for one GPU while every GPU of the
                    node moves at once
``latency_us``      fixed cost of one move (set-up and first byte), microseconds; may be 0

Every field is checked on load; anything wrong raises :class:`~tricut.models.config.ConfigError`
whose one-line message names the file and the field (``g2.capacity_gib``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from .config import ConfigError, _config_dir, _read, _show

__all__ = ["TIERS", "HBM", "Tier", "TierConfig", "load_tiers", "tier_ids", "TIER_LIMITS"]

#: The tier names, nearest first. G1 is HBM and has no entry in a tier config.
HBM = "G1"
TIERS = (HBM, "G2", "G3", "G3.5")
#: file table -> tier name
_TABLES = {"g2": "G2", "g3": "G3", "g3_5": "G3.5"}
_TIER_FIELDS = ("link", "capacity_gib", "bandwidth_gb_s", "latency_us")
#: The range each number must lie in, in the file's own units (inclusive). Beyond it a number is
#: a typo or a unit slip (GB/s typed as MB/s, TiB typed as GiB).
TIER_LIMITS = {
    "capacity_gib": (2.0**-10, 2.0**24),     # 1 MiB .. 16 PiB
    "bandwidth_gb_s": (0.001, 1e5),          # 1 MB/s .. 100 TB/s
    "latency_us": (0.0, 1e6),                # 0 .. 1 s
}
_NAME_MAX = 64


@dataclass(frozen=True)
class Tier:
    """One tier beyond HBM, per GPU. Bytes, bytes/s, seconds."""

    tier: str                 # "G2", "G3" or "G3.5"
    link: str
    capacity_bytes: int
    bandwidth: float          # bytes/s, one direction, per GPU
    latency_s: float


@dataclass(frozen=True)
class TierConfig:
    """The tiers of one system; a tier it lacks is ``None``."""

    name: str
    g2: Tier | None = None
    g3: Tier | None = None
    g3_5: Tier | None = None

    def tier(self, name: str) -> Tier | None:
        """The tier named ``"G2"``, ``"G3"`` or ``"G3.5"`` (``None`` when absent)."""
        if name not in TIERS[1:]:
            raise ValueError(f"unknown tier {name!r}; choose one of {', '.join(TIERS[1:])}")
        return {"G2": self.g2, "G3": self.g3, "G3.5": self.g3_5}[name]

    def present(self) -> tuple[str, ...]:
        """The names of the tiers this system has, nearest first (G1 not included)."""
        return tuple(t for t in TIERS[1:] if self.tier(t) is not None)

    def __contains__(self, name: str) -> bool:
        return name in TIERS[1:] and self.tier(name) is not None


def tier_ids() -> list[str]:
    return sorted(p.name[:-5] for p in _config_dir("tiers").iterdir() if p.name.endswith(".toml"))


def _number(label: str, key: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{label}: field {key!r}: expected float, got {type(value).__name__} {_show(value)}")
    try:
        value = float(value)
    except OverflowError:
        value = math.inf
    field = key.rsplit(".", 1)[1]
    lo, hi = TIER_LIMITS[field]
    if not math.isfinite(value) or value < 0 or (value == 0 and lo > 0):
        must = "a positive number" if lo > 0 else "a number >= 0"
        raise ConfigError(f"{label}: field {key!r}: must be {must}, got {_show(value)}")
    if not lo <= value <= hi:
        unit = {"capacity_gib": "GiB", "bandwidth_gb_s": "GB/s", "latency_us": "us"}[field]
        raise ConfigError(f"{label}: field {key!r}: must be between {lo:g} and {hi:g} {unit}, got {_show(value)}")
    return value


def _text(label: str, key: str, value) -> str:
    if not isinstance(value, str):
        raise ConfigError(f"{label}: field {key!r}: expected str, got {type(value).__name__} {_show(value)}")
    if not (0 < len(value) <= _NAME_MAX and value.isprintable()):
        raise ConfigError(f"{label}: field {key!r}: expected 1 to {_NAME_MAX} printable characters "
                          f"on one line, got {value[:80]!r}")
    return value


def _tier(label: str, table: str, raw) -> Tier:
    if not isinstance(raw, dict):
        raise ConfigError(f"{label}: field {table!r}: expected a table of {', '.join(_TIER_FIELDS)}, "
                          f"got {type(raw).__name__} {_show(raw)}")
    unknown = sorted(set(raw) - set(_TIER_FIELDS))
    if unknown:
        raise ConfigError(f"{label}: unknown field {table + '.' + unknown[0]!r}")
    for key in _TIER_FIELDS:
        if key not in raw:
            raise ConfigError(f"{label}: missing field {table + '.' + key!r}")
    link = _text(label, f"{table}.link", raw["link"])
    capacity = _number(label, f"{table}.capacity_gib", raw["capacity_gib"])
    bandwidth = _number(label, f"{table}.bandwidth_gb_s", raw["bandwidth_gb_s"])
    latency = _number(label, f"{table}.latency_us", raw["latency_us"])
    return Tier(_TABLES[table], link, int(capacity * 2**30), bandwidth * 1e9, latency * 1e-6)


def load_tiers(name_or_path: str | Path) -> TierConfig:
    """Load a tier config by id (see :func:`tier_ids`) or from a TOML file."""
    label, raw = _read("tiers", name_or_path, tier_ids())
    unknown = sorted(set(raw) - {"name", *_TABLES})
    if unknown:
        raise ConfigError(f"{label}: unknown field {_show(unknown[0])}"
                          + (" (tables are g2, g3, g3_5)" if unknown[0].lower().startswith("g") else ""))
    if "name" not in raw:
        raise ConfigError(f"{label}: missing field 'name'")
    name = _text(label, "name", raw["name"])
    return TierConfig(name, **{table: _tier(label, table, raw[table]) for table in _TABLES if table in raw})
