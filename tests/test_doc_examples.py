"""Every ``tricut`` command line the docs show is one the command line accepts (issue 32): the
examples in the README and every page of ``docs/`` -- in code blocks and inline -- are parsed
by the parser ``tricut`` runs, so a flag renamed, removed or given a value it no longer takes
is caught where it is documented. Synopsis lines (``[--flag X]``, ``A | B``, ``...``, upper-case
placeholders such as ``FILE``) are skipped; an inline mention may stop before a required
argument (``tricut sweep plot``), a code-block example may not. Examples that also run in
full: ``tests/test_shipped_defaults.py`` (simulate, compare, the demo's and ``--help``'s)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from tricut.sim.cli.main import build_parser, parse_command_line

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
PREFIX = re.compile(r"^(?:\.venv/bin/)?tricut\s+(?=[a-z])")
#: upper-case placeholders of a synopsis (FILE, DIR, N, VEC.npz, NAME=VALUE, ...)
PLACEHOLDER = re.compile(r"(?:^|[=:,])[A-Z][A-Z0-9_]*(?:\.[a-z]+)?(?:$|[=:,])")


def _refusal(argv, capsys):
    """The one-line error ``tricut`` gives for ``argv`` at parse time, or None."""
    capsys.readouterr()
    try:
        parse_command_line(build_parser(), argv)
    except SystemExit as e:
        err = capsys.readouterr().err.strip()
        return (err or f"exit {e.code}") if e.code else None
    return None


def _examples():
    """``(page, line, argv, inline)`` of every concrete example."""
    out = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        in_block, lines = False, text.splitlines()
        i = 0
        while i < len(lines):
            line = lines[i]
            if line.lstrip().startswith("```"):
                in_block = not in_block
            elif in_block and PREFIX.match(line.strip()):
                start, cmd = i, line.strip()
                while cmd.endswith("\\") and i + 1 < len(lines):
                    i += 1
                    cmd = cmd[:-1] + " " + lines[i].strip()
                out.append((page, start + 1, cmd, False))
            elif not in_block:
                for m in re.finditer(r"`([^`]+)`", line):
                    if PREFIX.match(m.group(1)):
                        out.append((page, i + 1, m.group(1), True))
            i += 1
    examples = []
    for page, line, cmd, inline in out:
        try:
            argv = shlex.split(PREFIX.sub("", cmd), comments=True)
        except ValueError:
            continue
        if any(t in cmd for t in ("[", "|", "...", "…", "<")) or \
                any(PLACEHOLDER.search(t) for t in argv):
            continue
        examples.append((f"{page.relative_to(ROOT)}:{line}", argv, inline))
    return examples


EXAMPLES = _examples()


def test_the_docs_have_examples_to_check():
    assert len(EXAMPLES) > 40 and sum(not x[2] for x in EXAMPLES) > 10, len(EXAMPLES)


@pytest.mark.parametrize("where,argv,inline", EXAMPLES, ids=[x[0] for x in EXAMPLES])
def test_a_documented_command_line_is_accepted(where, argv, inline, capsys):
    msg = _refusal(argv, capsys)
    if msg is not None:
        partial = inline and ("expected one argument" in msg or "required" in msg)
        assert partial, f"{where}: tricut {shlex.join(argv)}: {msg}"


def test_a_renamed_flag_in_an_example_is_caught(capsys):
    assert "unrecognized arguments: --no-such-flag" in _refusal(["simulate", "--no-such-flag"],
                                                               capsys)
    assert "unrecognized arguments: --bogus" in _refusal(["sweep", "plot", "--db", "x.duckdb", "-o",
                                                          "figs", "--bogus"], capsys)
