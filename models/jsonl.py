"""Reading JSON-lines input files with one clear error per bad line.

Shared by every JSONL reader (serving traces, DSU request files, CDU access traces): the file
is UTF-8 text, blank lines are skipped, and every other line is one JSON object. The trace
readers (``models/cdu.read_access_trace``, ``sim/fast/workload``) raise :class:`TraceError`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

__all__ = ["TraceError", "iter_jsonl_objects"]


class TraceError(ValueError):
    """A malformed trace file (serving trace, CDU access trace) or a bad workload generator
    parameter; ``str()`` is one line, naming the file and line where there is one."""


def iter_jsonl_objects(path: str | Path, error: type[Exception]) -> Iterator[tuple[str, dict]]:
    """Yield ``("FILE:LINE", object)`` for every non-blank line; raise ``error`` with a
    one-line message naming the file (and line) when the file cannot be read, is not UTF-8,
    or a line is not a JSON object."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise error(f"{path}: file not found") from None
    except UnicodeDecodeError:
        raise error(f"{path}: not UTF-8 text") from None
    except OSError as e:
        raise error(f"{path}: cannot read: {e.strerror}") from None
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        label = f"{path}:{number}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise error(f"{label}: not valid JSON ({e.msg})") from None
        if not isinstance(row, dict):
            raise error(f"{label}: expected a JSON object")
        yield label, row
