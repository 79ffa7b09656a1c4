"""How many bad inputs the regression suite throws at each command, and what came back.

    .venv/bin/python benchmarks/bad_input_census.py

Reads the cases of tests/test_bad_input_{fast,units,cdu,dsu}.py (each module's ``BAD_INPUTS``:
``(command, case id)``), runs those four files with pytest, and prints the count per command
and the outcome classes. Every case asserts exit status 2, exactly one ``tricut: error:`` line,
no traceback and nothing written outside (or, for refusals, at all in) the target; a case that
showed a traceback, an internal error, a hang (pytest-timeout is not used: a hang never
finishes the run), a silent answer or a stray file fails its test, so "failed" counts them.
"""

from __future__ import annotations

import collections
import importlib.util
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FILES = [ROOT / "tests" / f"test_bad_input_{name}.py" for name in ("fast", "units", "cdu", "dsu")]


def cases() -> list[tuple[str, str]]:
    out = []
    for path in FILES:
        spec = importlib.util.spec_from_file_location(path.stem, path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = mod
        spec.loader.exec_module(mod)
        out += list(mod.BAD_INPUTS)
    return out


def main() -> int:
    per = collections.Counter(command for command, _ in cases())
    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:xdist", "-q", "-p", "no:cacheprovider",
                          *map(str, FILES)], cwd=ROOT, capture_output=True, text=True)
    tail = run.stdout.strip().splitlines()[-1] if run.stdout.strip() else run.stderr.strip()
    print("| command | bad inputs tried |")
    print("|---|---|")
    for command, n in sorted(per.items()):
        print(f"| `{command}` | {n} |")
    print(f"| **all** | **{sum(per.values())}** |")
    print()
    print(f"pytest on the four files: {tail}")
    print("outcome classes that must never occur (traceback, internal error, hang, silent wrong "
          f"answer, file outside the target): {'0' if run.returncode == 0 else 'see the failures above'}")
    return run.returncode


if __name__ == "__main__":
    sys.exit(main())
