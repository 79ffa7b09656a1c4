"""One SM's tile timing (``models/sm_slice.py``) kept on disk between processes.

Building a :class:`~tricut.models.sm_slice.SliceTiming` or
:class:`~tricut.models.sm_slice.CduSliceTiming` runs probes of the cycle-stepped tile model:
one to forty seconds per configuration, paid again by every process that runs the te cut at
that configuration (each ``tricut simulate``, each sweep point, each test). The built object
is kept in one file per configuration and version of the model code under
``.build/slice-timing``; a run that loads it is the run that builds it (the object is the
same, float for float). A file that cannot be read is built again and replaced. Two processes
that need one configuration at once build it once: the second waits on the configuration's
lock file and loads what the first kept.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import tempfile
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path

from tricut import models
from tricut.models.sm_slice import CduSliceTiming, SliceCdu, SliceTiming, TileConfig

from ..file_lock import held

__all__ = ["SLICE_MEMO", "memo_slice_timing", "memo_cdu_slice_timing"]

#: where the built timings are kept (a test may point it elsewhere)
SLICE_MEMO = Path(__file__).resolve().parents[2] / ".build" / "slice-timing"
#: the golden-model sources a slice timing is computed from: any change to them is a new key
_SOURCES = ("sm_slice.py", "tile_timing.py", "te_array_timing.py", "te.py", "cdu.py", "tile.py")


@lru_cache(maxsize=1)
def _code_digest() -> str:
    h = hashlib.sha256()
    root = Path(models.__file__).resolve().parent
    for name in _SOURCES:
        h.update(name.encode() + b"\0" + (root / name).read_bytes())
    return h.hexdigest()


def _key(*parts) -> str:
    return hashlib.sha256((_code_digest() + "".join(map(repr, parts))).encode()).hexdigest()[:32]


def _load(path: Path, build, cfg: TileConfig, cdu: SliceCdu | None):
    """The timing kept at ``path`` if it is ``build``'s of ``cfg`` and ``cdu``, else None."""
    try:
        with open(path, "rb") as f:
            kept = pickle.load(f)
        if type(kept) is build and kept.cfg == cfg and kept.cdu == cdu:
            return kept
    except (OSError, EOFError, pickle.UnpicklingError, AttributeError, ImportError, IndexError,
            TypeError, ValueError):
        pass
    return None


@contextmanager
def _building(path: Path):
    """Within the block, the configuration's lock (``<file>.lock``): a second process that
    needs the same timing (a pytest worker, a sweep point) waits for the first one's and loads
    it instead of building it again. No lock on a read-only checkout."""
    lock = path.with_name(path.name + ".lock")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        lock.touch()
    except OSError:
        yield
        return
    with held(lock):
        yield


def _memo(kind: str, build, cfg: TileConfig, cdu: SliceCdu | None = None):
    path = SLICE_MEMO / f"{kind}-{_key(kind, cfg, cdu)}.pickle"
    kept = _load(path, build, cfg, cdu)
    if kept is not None:
        return kept
    with _building(path):
        kept = _load(path, build, cfg, cdu)         # another process built it meanwhile
        if kept is not None:
            return kept
        built = build(cfg) if cdu is None else build(cfg, cdu)
        _keep(path, built)
    return built


def _keep(path: Path, built) -> None:
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        with os.fdopen(fd, "wb") as f:
            pickle.dump(built, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, path)
    except OSError:                            # a read-only checkout: the run goes on unkept
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)


@lru_cache(maxsize=16)
def memo_slice_timing(cfg: TileConfig) -> SliceTiming:
    """:class:`SliceTiming` of ``cfg``: from this process, from disk, or built (and kept)."""
    return _memo("slice", SliceTiming, cfg)


@lru_cache(maxsize=16)
def memo_cdu_slice_timing(cfg: TileConfig, cdu: SliceCdu) -> CduSliceTiming:
    """:class:`CduSliceTiming` of ``cfg`` with ``cdu``: from this process, from disk, or built
    (and kept)."""
    return _memo("cdu-slice", CduSliceTiming, cfg, cdu)
