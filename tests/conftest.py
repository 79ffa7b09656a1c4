"""Shared pieces of the test suites: for the bad-input suites (tests/test_bad_input_*.py)
argv placeholders for files made in the test's tmp dir and the one-line-error check every
case must pass; for every test a fresh prefill cache of the tile co-simulation."""

from __future__ import annotations

import pytest

from tricut.sim import cli


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
    """``(exit code, captured)`` of ``tricut argv`` run in-process."""
    try:
        code = cli.main(argv)
    except SystemExit as e:                      # argparse's own errors exit from parse_args
        code = e.code
    return code, capsys.readouterr()


def assert_one_line_error(code, captured, needle: str) -> None:
    """Exit 2, exactly one ``tricut: error:`` line holding ``needle``, no traceback, no output."""
    lines = captured.err.splitlines()
    assert code == 2, (code, captured.err)
    assert len(lines) == 1 and lines[0].startswith("tricut: error: "), captured.err
    assert "Traceback" not in captured.err and "internal error" not in captured.err
    assert needle in lines[0], lines[0]
    assert captured.out == ""


def load_benchmark(name: str):
    """The module of ``benchmarks/<name>.py`` (``benchmarks/`` on ``sys.path`` while it loads,
    as when the script runs)."""
    import importlib.util
    import sys
    from pathlib import Path
    bench = Path(__file__).resolve().parent.parent / "benchmarks"
    spec = importlib.util.spec_from_file_location(name, bench / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(bench))
    try:
        spec.loader.exec_module(mod)
    finally:
        sys.path.remove(str(bench))
    return mod


@pytest.fixture(autouse=True)
def _fresh_prefill_cache(monkeypatch, tmp_path_factory):
    """Each test starts with no kept prefill (``golden.PREFILL_CACHE`` in a fresh folder), so
    what a test computes does not depend on the runs before it."""
    from tricut.sim.harness.tile import golden
    monkeypatch.setattr(golden, "PREFILL_CACHE", tmp_path_factory.mktemp("prefill"))
