"""Checking the command line from a test: run ``tricut`` in-process and read what it printed
(:func:`run_cli`), check the one-line error every bad input must give
(:func:`assert_one_line_error`), and make the files a bad-input case names
(:func:`expand_argv`)."""

from __future__ import annotations

from .. import cli

__all__ = ["run_cli", "assert_one_line_error", "expand_argv", "only_progress", "without_notes"]


def expand_argv(argv, tmp_path, files: dict, big_bytes: int) -> list[str]:
    """``argv`` with placeholders made real under ``tmp_path/d``: ``@dir...`` -> that directory
    (plus the rest), ``@big`` -> a sparse file of ``big_bytes`` (no disk used), ``@name`` -> a
    ``name.jsonl`` holding ``files[name]`` (str or bytes)."""
    d = tmp_path / "d"
    d.mkdir(exist_ok=True)
    out = []
    for a in argv:
        if a.startswith("@dir"):
            out.append(str(d) + a[4:])
        elif a == "@big":
            big = d / "big.jsonl"
            with open(big, "wb") as f:
                f.truncate(big_bytes)
            out.append(str(big))
        elif a.startswith("@"):
            f = d / f"{a[1:]}.jsonl"
            body = files[a[1:]]
            f.write_bytes(body if isinstance(body, bytes) else body.encode())
            out.append(str(f))
        else:
            out.append(a)
    return out


def run_cli(argv, capsys):
    """``(exit code, captured)`` of ``tricut argv`` run in-process (``capsys``: pytest's
    fixture of that name)."""
    try:
        code = cli.main(argv)
    except SystemExit as e:                      # argparse's own errors exit from parse_args
        code = e.code
    return code, capsys.readouterr()


def only_progress(err: str) -> bool:
    """Whether stderr holds nothing but notes (``sim/cli/progress.py``'s status lines: off a
    terminal, one ``tricut: note: ...`` line every 10 s of a run; a loaded machine may take
    that long on a short one)."""
    return all(line.startswith("tricut: note: ") for line in err.splitlines())


def without_notes(err: str) -> list[str]:
    """The lines of stderr that are not notes (a long run's status lines, :func:`only_progress`)."""
    return [line for line in err.splitlines() if not line.startswith("tricut: note: ")]


def assert_one_line_error(code, captured, needle: str) -> None:
    """Exit 2, exactly one ``tricut: error:`` line holding ``needle``, no traceback, no output."""
    lines = captured.err.splitlines()
    assert code == 2, (code, captured.err)
    assert len(lines) == 1 and lines[0].startswith("tricut: error: "), captured.err
    assert "Traceback" not in captured.err and "internal error" not in captured.err
    assert needle in lines[0], lines[0]
    assert captured.out == ""
