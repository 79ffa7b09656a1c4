"""The quick start's cost, as a newcomer pays it: a fresh clone of a commit, then `make demo`
(which creates .venv and installs everything from PyPI) and `make test` (the whole suite,
pytest -n 2), each timed by wall clock; the suite's ten slowest tests and ten heaviest test files
from its JUnit record.

    .venv/bin/python benchmarks/quickstart_time.py [--rev HEAD] [--write]
    .venv/bin/python benchmarks/quickstart_time.py --rev REV --from-junit FILE --test-wall S --write

``--write`` puts the figures in docs/toolchain.md ("What the quick start costs"), in the block
of ``--block`` (``after``: this tree; ``before``: an earlier commit's). ``--from-junit`` reports
a `make test` already run on a fresh clone of REV (its JUnit record and wall seconds) instead
of running one. The figures depend on the machine and on what else runs on it.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

from doc_sections import ROOT, write_section     # benchmarks/ is on sys.path when a script runs

DOC = ROOT / "docs" / "toolchain.md"
BLOCKS = ("before", "after")
SLOWEST = 10


def _timed(cmd: list[str], cwd: Path, env: dict, log: Path) -> tuple[float, int]:
    t = time.monotonic()
    with open(log, "wb") as out:
        rc = subprocess.run(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT).returncode
    return time.monotonic() - t, rc


def _cases(junit: Path) -> list[tuple[float, str, str]]:
    """A JUnit record's test cases: ``(seconds, file, name)``."""
    return [(float(c.get("time", 0.0)), c.get("classname", "").replace(".", "/") + ".py", c.get("name"))
            for c in ET.parse(junit).iter("testcase")]


def slowest(junit: Path, n: int = SLOWEST) -> list[tuple[float, str]]:
    """The ``n`` longest test cases of a JUnit record: ``(seconds, file::name)``."""
    return sorted(((s, f"{module}::{name}") for s, module, name in _cases(junit)), reverse=True)[:n]


def by_file(junit: Path, n: int = SLOWEST) -> tuple[float, list[tuple[float, int, str]]]:
    """The record's test time in all, and its ``n`` test files with the most:
    ``(seconds, tests, file)``."""
    files: dict[str, list] = {}
    for s, module, _ in _cases(junit):
        f = files.setdefault(module, [0.0, 0])
        f[0] += s
        f[1] += 1
    total = sum(s for s, _ in files.values())
    return total, sorted(((s, k, name) for name, (s, k) in files.items()), reverse=True)[:n]


def report(command: str, sha: str, demo_s: float | None, test_s: float, passed: str, slow,
           files) -> str:
    demo = "not measured" if demo_s is None else f"{demo_s / 60:.1f} min"
    lines = [f"Command: `{command}`, on a fresh clone of `{sha[:10]}`, {os.cpu_count()} cores.", "",
             "| step | wall |", "|---|---|",
             f"| `make demo` (creates .venv, installs from PyPI, runs the demo) | {demo} |",
             f"| `make test` (.venv present; {passed}) | {test_s / 60:.1f} min |", "",
             f"The {len(slow)} slowest tests of that run (each test's own time; two workers share "
             "the cores, so a test's time includes its share of the other's load and of any "
             "Verilator build it waited for):", "", "| s | test |", "|---|---|"]
    lines += [f"| {s:.1f} | `{name}` |" for s, name in slow]
    total, heavy = files
    lines += ["", f"The tests' own times add up to {total:,.0f} s ({total / test_s:.2f} x the "
              f"wall time); the {len(heavy)} files with the most of it:", "",
              "| s | share | tests | file |", "|---|---|---|---|"]
    lines += [f"| {s:.0f} | {s / total:.1%} | {k} | `{name}` |" for s, k, name in heavy]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rev", default="HEAD", help="the commit to clone (default: HEAD)")
    ap.add_argument("--write", action="store_true", help="write the figures into docs/toolchain.md")
    ap.add_argument("--block", choices=BLOCKS, default="after",
                    help="the docs block to write: after (default) or before")
    ap.add_argument("--from-junit", type=Path, metavar="FILE",
                    help="report this JUnit record of a make test on a fresh clone of --rev")
    ap.add_argument("--test-wall", type=float, metavar="S", help="with --from-junit: its wall seconds")
    ap.add_argument("--keep-junit", type=Path, metavar="FILE",
                    help="copy the run's JUnit record to FILE (for --from-junit, or a closer look; "
                         "kept when a test failed, with the failures' messages)")
    args = ap.parse_args(argv)
    if (args.from_junit is None) != (args.test_wall is None):
        ap.error("--from-junit and --test-wall go together")
    sha = subprocess.run(["git", "rev-parse", "--verify", args.rev + "^{commit}"], cwd=ROOT,
                         capture_output=True, text=True)
    if sha.returncode != 0:
        raise SystemExit(f"quickstart_time.py: --rev {args.rev}: not a commit of this repository")
    sha = sha.stdout.strip()
    if args.from_junit is not None:
        if not args.from_junit.is_file():
            ap.error(f"--from-junit {args.from_junit}: no such file")
        cases = list(ET.parse(args.from_junit).iter("testcase"))
        command = (f".venv/bin/python benchmarks/quickstart_time.py --rev {args.rev} --from-junit "
                   f"{args.from_junit.name} --test-wall {args.test_wall:.0f} --block {args.block} --write")
        body = report(command, sha, None, args.test_wall, f"{len(cases)} tests", slowest(args.from_junit),
                      by_file(args.from_junit))
        return _out(body, args)
    # the clone sits beside this checkout, as CI's does: the suite reads the shared traces
    # from the checkout's parent folder (tests/test_workload.py)
    with tempfile.TemporaryDirectory(prefix=".tricut-quickstart-", dir=ROOT.parent) as tmp:
        clone = Path(tmp).parent / (Path(tmp).name + "-clone")
        return _clone_and_time(args, sha, clone, Path(tmp))


def _clone_and_time(args, sha: str, clone: Path, tmp: Path) -> int:
    try:
        return _run_in(args, sha, clone, tmp)
    finally:
        shutil.rmtree(clone, ignore_errors=True)


def _run_in(args, sha: str, clone: Path, tmp: Path) -> int:
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    subprocess.run(["git", "checkout", "-q", sha], cwd=clone, check=True)
    junit = Path(tmp) / "junit.xml"
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    demo_s, rc = _timed(["make", "demo"], clone, env, Path(tmp) / "demo.log")
    if rc != 0:
        sys.stderr.write((Path(tmp) / "demo.log").read_text(errors="replace")[-3000:])
        raise SystemExit(f"quickstart_time.py: make demo failed (exit {rc})")
    env["PYTEST_ADDOPTS"] = f"--junitxml={junit}"
    test_s, rc = _timed(["make", "test"], clone, env, Path(tmp) / "test.log")
    tail = (Path(tmp) / "test.log").read_text(errors="replace").strip().splitlines()
    if args.keep_junit is not None and junit.is_file():      # kept when a test failed, too
        shutil.copyfile(junit, args.keep_junit)
    if rc != 0:
        sys.stderr.write("\n".join(tail[-40:]) + "\n")
        raise SystemExit(f"quickstart_time.py: make test failed (exit {rc})")
    summary = next((line.strip("= ") for line in reversed(tail) if " passed" in line), "?")
    passed = summary.split(" in ")[0]
    command = f".venv/bin/python benchmarks/quickstart_time.py --rev {args.rev} --block {args.block} --write"
    body = report(command, sha, demo_s, test_s, passed, slowest(junit), by_file(junit))
    return _out(body, args)


def _out(body: str, args) -> int:
    print(body, end="")
    if args.write:
        write_section(DOC, f"<!-- quickstart-{args.block}:begin -->", f"<!-- quickstart-{args.block}:end -->",
                      body, "quickstart_time.py")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
