"""Every ``tricut`` command line the docs show is one the command line accepts (issue 32): the
examples in the README and every page of ``docs/`` -- in code blocks and inline -- are parsed
by the parser ``tricut`` runs, so a flag renamed, removed or given a value it no longer takes
is caught where it is documented. Synopsis lines (``[--flag X]``, ``A | B``, ``...``, upper-case
placeholders such as ``FILE``) are skipped; an inline mention may stop before a required
argument (``tricut sweep plot``), a code-block example may not.

The code-block examples of ``dsu run`` (the fault matrix of docs/dsu.md) and of the small
``verilog`` units also run here in full and must exit 0; ``tests/test_shipped_defaults.py`` runs
the simulate and compare examples (the demo's, ``--help``'s, ``docs/agentic.md``'s). Not run
here: ``tile run`` (each example minutes on Amaranth's simulator; ``tests/test_tile_*.py`` run
the same setups), ``cdu replay --rtl --hbm-errors`` (docs/reliability.md; the same replays on a
smaller workload: ``tests/test_cdu_faults.py::test_cli_hbm_errors_transient_and_persistent``),
``verilog tile-attention`` (the tile's attention path, ``tests/test_tile_attention_path.py``)
and the ``sweep`` examples (``sweeps/smoke.toml`` is the demo's sweep, ``tests/test_sweep.py``
runs the same commands on a smaller grid)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from tricut.sim.cli.main import build_parser, parse_command_line
from tricut.sim.cli.testing import run_cli

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


#: the code-block examples that run in full: (command, subcommand or unit)
RUN_IN_FULL = {("dsu", "run"), ("verilog", "tile-newtoken-writer")}
RUNS = [x for x in EXAMPLES if not x[2] and tuple(x[1][:2]) in RUN_IN_FULL]


def test_the_examples_that_run_cover_each_command_in_the_list():
    assert {tuple(a[:2]) for _, a, _ in RUNS} == RUN_IN_FULL


@pytest.mark.parametrize("where,argv,inline", RUNS, ids=[x[0] for x in RUNS])
def test_a_documented_example_runs(where, argv, inline, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    # an output folder the docs give as an absolute scratch path, or DIR: one under tmp_path
    argv = [str(tmp_path / "out") if a == "DIR" or Path(a).is_absolute() else a for a in argv]
    code, cap = run_cli(argv, capsys)
    assert code == 0, f"{where}: tricut {shlex.join(argv)}: exit {code}: {cap.err[-2000:]}"
