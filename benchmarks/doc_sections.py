"""The one way a benchmark script rewrites its section of a docs page: the text between two
marker lines (e.g. ``<!-- scaling:begin -->`` / ``<!-- scaling:end -->``) is replaced
(:func:`write_section`, :func:`publish`); and the one way a script reads its ``--configs``
choice (:func:`chosen_configs`)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def write_section(doc: Path, begin: str, end: str, body: str, script: str) -> None:
    """Replace the text between the marker lines ``begin`` and ``end`` of ``doc`` with
    ``body``; a page without them stops ``script`` with one line."""
    text = doc.read_text(encoding="utf-8")
    i, j = text.find(begin), text.find(end)
    if i < 0 or j < i:
        raise SystemExit(f"{script}: {doc.relative_to(ROOT)} has no {begin} ... {end} markers")
    doc.write_text(text[:i + len(begin)] + "\n" + body + text[j:], encoding="utf-8")


def publish(text: str, write: bool, doc: Path, begin: str, end: str, script: str) -> int:
    """A script's report: printed, and with ``write`` (its ``--write``) put between the
    markers of ``doc`` (:func:`write_section`). Returns the script's exit code, 0."""
    print(text)
    if write:
        write_section(doc, begin, end, text, script)
    return 0


def chosen_configs(ap, value: str, choices) -> list[str]:
    """The configurations named in ``value`` (the ``--configs`` option of the script whose
    parser is ``ap``: comma-separated, each one of ``choices``); none, or one not among them,
    stops the script with one line (``ap.error``, exit 2)."""
    names = [n for n in value.split(",") if n]
    unknown = [n for n in names if n not in choices]
    if unknown or not names:
        ap.error(f"--configs: unknown configuration {unknown[0] if unknown else '(none)'!r}; "
                 f"choose from {', '.join(choices)}")
    return names
