"""Reading JSON-lines input files with one clear error per bad line.

Shared by every JSONL reader (serving traces, DSU request files, CDU access traces): the file
is UTF-8 text, blank lines are skipped, and every other line is one JSON object. The trace
readers (``models/cdu.read_access_trace``, ``sim/fast/workload``) raise :class:`TraceError`.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Iterator

__all__ = ["TraceError", "iter_jsonl_objects", "parse_json_object", "stat_input_file"]


class TraceError(ValueError):
    """A malformed trace file (serving trace, CDU access trace) or a bad workload generator
    parameter; ``str()`` is one line, naming the file and line where there is one."""


def stat_input_file(path: str | Path, what: str, error: type[Exception], *, label: str | None = None,
                    pipe_ok: bool = False) -> os.stat_result:
    """The ``os.stat`` of an input file, or ``error`` with one line naming it (``label``,
    default the path) when it is missing, unreadable, a directory (not ``what``, e.g. "an .npz
    file") or anything but a regular file (or a pipe, with ``pipe_ok``)."""
    label = str(path) if label is None else label
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise error(f"{label}: file not found") from None
    except OSError as e:
        raise error(f"{label}: cannot read: {e.strerror}") from None
    if stat.S_ISDIR(st.st_mode):
        raise error(f"{label}: is a directory, not {what}")
    if not (stat.S_ISREG(st.st_mode) or (pipe_ok and stat.S_ISFIFO(st.st_mode))):
        raise error(f"{label}: not a regular file" + (" or a pipe" if pipe_ok else ""))
    return st


def parse_json_object(line: str, where: str, error: type[Exception]) -> dict:
    """One line of JSON that must be an object; any failure of the decoder (bad syntax, an
    integer of more than 4300 digits, nesting deeper than the recursion limit) is ``error``
    with one line naming ``where``."""
    try:
        row = json.loads(line)
    except json.JSONDecodeError as e:
        raise error(f"{where}: not valid JSON ({e.msg})") from None
    except RecursionError:
        raise error(f"{where}: not valid JSON (nested too deeply)") from None
    except ValueError as e:
        raise error(f"{where}: not valid JSON ({' '.join(str(e).split(';')[0].split())[:120]})") from None
    if not isinstance(row, dict):
        raise error(f"{where}: expected a JSON object")
    return row


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
        row = parse_json_object(line, label, error)
        yield label, row
