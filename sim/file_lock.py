"""An exclusive lock on a file, held within a block, shared by processes that must not do the
same work at once (a Verilator build, a slice timing): the first holds it and works, the
others wait and then find the work done."""

from __future__ import annotations

import fcntl
from contextlib import contextmanager
from pathlib import Path

__all__ = ["held"]


@contextmanager
def held(lock_file: Path):
    """Hold the exclusive lock on ``lock_file`` (created if missing) within the block."""
    with open(lock_file, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
