"""How many bad inputs the regression suite throws at each command, and what came back.

    .venv/bin/python benchmarks/bad_input_census.py [--write]

Three classes of case, each counted from the test module itself:

* **bad inputs**: tests/test_bad_input_{fast,units,cdu,dsu}.py (each module's ``BAD_INPUTS``:
  ``(command, case id)``), tests/test_bad_input_agentic.py (``CASES``: ``(command, case id, ...)``)
  and tests/test_bad_input_sweep.py (``CASES``: ``(case id, files, argv, ...)``; the command is
  ``sweep``, ``sweep export`` or ``sweep plot`` from the argv);
* **flags refused where they would not act**: tests/test_flag_applicability.py, one case per
  (command, flag, mode) of the command's ``APPLIES`` table; counted are those in which one of the
  flag's needs fails (the test then asserts the refusal), not those in which the flag acts;
* **long runs**: the tests of tests/test_long_runs.py (a run estimated over an hour refused
  unless ``--allow-long``; progress lines; the estimates), by name.

It runs those files with pytest and prints the count per command and the outcome classes. Every
bad-input case asserts exit status 2, exactly one ``tricut: error:`` line, no traceback and
nothing written outside (or, for refusals, at all in) the target; a case that showed a
traceback, an internal error, a hang (pytest-timeout is not used: a hang never finishes the
run), a silent answer or a stray file fails its test, so "failed" counts them.
"""

from __future__ import annotations

import ast
import collections
import importlib.util
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"
FILES = [TESTS / f"test_bad_input_{name}.py" for name in ("fast", "units", "cdu", "dsu")]
AGENTIC = TESTS / "test_bad_input_agentic.py"
SWEEP = TESTS / "test_bad_input_sweep.py"
FLAGS = TESTS / "test_flag_applicability.py"
LONG = TESTS / "test_long_runs.py"
ALL_FILES = FILES + [AGENTIC, SWEEP, FLAGS, LONG]


def _module(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def _sweep_command(argv: list[str]) -> str:
    return " ".join(argv[:2]) if argv[1:2] in (["export"], ["plot"]) else "sweep"


def cases() -> dict[str, list[tuple[str, str]]]:
    """The bad-input cases, ``(command, case id)``, per file."""
    out = {path.name: list(_module(path).BAD_INPUTS) for path in FILES}
    out[AGENTIC.name] = [(command, case) for command, case, *_ in _module(AGENTIC).CASES]
    out[SWEEP.name] = [(_sweep_command(argv), case) for case, _, argv, *_ in _module(SWEEP).CASES]
    return out


def flag_refusals() -> tuple[collections.Counter, int]:
    """Per command, the (flag, mode) pairs of tests/test_flag_applicability.py in which the flag
    is refused (a need fails); and the number of pairs walked."""
    mod = _module(FLAGS)
    per, walked = collections.Counter(), 0
    for param in mod._cases():
        command, dest, mode = param.values
        path, applies, _, modes, _ = mod.COMMANDS[command]
        state = mod._options(command, mod._argv(mod._actions(path), modes[mode]))
        walked += 1
        if not all(need.holds(state) for need in applies[dest]):
            per[command] += 1
    return per, walked


def long_run_tests() -> tuple[int, int]:
    """The tests of tests/test_long_runs.py, and those among them that assert a refusal."""
    names = [n.name for n in ast.parse(LONG.read_text(encoding="utf-8")).body
             if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")]
    return len(names), sum("refuse" in n for n in names)


DOC = ROOT / "docs" / "reliability.md"
BEGIN, END = "<!-- census:begin -->", "<!-- census:end -->"


def main(argv=None) -> int:
    import argparse
    ap = argparse.ArgumentParser(prog="benchmarks/bad_input_census.py",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", action="store_true",
                    help="also write the census into docs/reliability.md")
    args = ap.parse_args(argv)
    by_file = cases()
    per = collections.Counter(command for got in by_file.values() for command, _ in got)
    flags, walked = flag_refusals()
    n_long, n_long_refused = long_run_tests()
    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:xdist", "-q", "-p", "no:cacheprovider",
                          *map(str, ALL_FILES)], cwd=ROOT, capture_output=True, text=True)
    tail = run.stdout.strip().splitlines()[-1] if run.stdout.strip() else run.stderr.strip()
    lines = ["| command | bad inputs tried | flags refused where they would not act |", "|---|---|---|"]
    for command in sorted(set(per) | set(flags)):
        lines.append(f"| `{command}` | {per[command] or '–'} | {flags[command] or '–'} |")
    lines += [f"| **all** | **{sum(per.values())}** | **{sum(flags.values())}** |", "",
              "Bad inputs per file: " + ", ".join(f"`{name}` {len(got)}" for name, got in by_file.items()) + ".",
              f"Flags: `{FLAGS.name}` walks {walked} (command, flag, mode) pairs; in the "
              f"{sum(flags.values())} counted one of the flag's needs fails and the flag is refused, in the "
              f"other {walked - sum(flags.values())} it acts.",
              f"Long runs: `{LONG.name}` has {n_long} tests, {n_long_refused} of them a refusal of a run "
              "estimated over an hour (without `--allow-long`), the others the estimates, `--allow-long` "
              "and the progress lines.", "",
              f"pytest on the {len(ALL_FILES)} files: {tail}",
              "outcome classes that must never occur (traceback, internal error, hang, silent wrong "
              f"answer, file outside the target): {'0' if run.returncode == 0 else 'see the failures above'}"]
    print("\n".join(lines))
    if args.write:
        if run.returncode != 0:
            print(run.stdout[-3000:], file=sys.stderr)
            raise SystemExit("bad_input_census.py: a case failed; docs/reliability.md not written")
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from doc_sections import write_section
        write_section(DOC, BEGIN, END, "\n".join(lines) + "\n", "bad_input_census.py")
        print(f"wrote {DOC.relative_to(ROOT)}")
    return run.returncode


if __name__ == "__main__":
    sys.exit(main())
