"""The units' equivalence matrices (``sim/harness/unit_matrices.py``): declared consistently,
named on their docs page, their checks able to fail, and their full-run script refusing bad
flags in one line."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tricut.models import te as M
from tricut.sim.harness import unit_matrices as U

ROOT = Path(__file__).resolve().parent.parent


def test_every_matrix_runs_some_cases_in_the_suite_and_names_its_test():
    for m in U.MATRICES.values():
        assert m.in_tests and set(m.in_tests) <= set(m.cases), m.name
        assert len(set(m.cases)) == len(m.cases), m.name
        assert len(set(m.ids(m.cases))) == len(m.cases), m.name      # ids name one case
        assert f'MATRICES["{m.name}"]' in (ROOT / m.test).read_text(), m.name
    with pytest.raises(ValueError, match="in_tests must be a non-empty subset"):
        U.Matrix("x", "t", "w", ((1,),), ((2,),), print, str)


def test_the_suite_runs_each_kind_the_matrices_vary():
    """Each engine, each K/V dtype, each CDU pattern and policy and each DSU profile has a case
    in the suite."""
    cases = {n: m.in_tests for n, m in U.MATRICES.items()}
    assert {e for e, _ in cases["te_split_random"]} == set(U.TWO_ARRAY_ENGINES)
    assert {s[0] for _, s in cases["te_split_random"]} == {"bf16", "fp8", "nvfp4"}
    assert {c[0] for c in cases["te_serial_random"]} == {"bf16", "fp8", "nvfp4"}
    assert {c[0] for c in cases["dsu_round_cycles"]} == {"throughput-opt", "fairness-opt",
                                                         "latency-opt"}
    assert {c[1] for c in cases["dsu_firmware"]} == {1, 4}
    from tricut.sim.harness import cdu_stimulus as B
    for name in ("cdu_frontend_random", "cdu_whole_random", "cdu_frontend_restores"):
        assert {c[0] for c in cases[name]} == set(B.PATTERNS), name
        assert {c[1] for c in cases[name]} == set(B.POLICIES), name


def test_the_docs_page_names_every_matrix_and_its_test():
    doc = (ROOT / "docs" / "unit-matrices.md").read_text()
    rows = dict(re.findall(r"^\| `(\w+)` \| [^|]+ \| `([\w/.]+)` \|$", doc, re.M))
    assert rows == {n: m.test for n, m in U.MATRICES.items()}


def test_a_check_fails_on_a_wrong_cycle_formula(monkeypatch):
    """The lane-utilisation check against a model whose cost per token is one cycle off."""
    real = M.te_token_cycles
    monkeypatch.setattr(M, "te_token_cycles", lambda *a, **k: real(*a, **k) + 1)
    with pytest.raises(AssertionError):
        U.split_engine_lane_utilisation("split", 1, 64, 16)


@pytest.mark.parametrize("argv, needle", [
    (["--only", "te_nope"], "unknown matrix te_nope"),
    (["--jobs", "0"], "--jobs must be at least 1"),
    (["--write", "--not-in-tests"], "--write needs every matrix"),
])
def test_the_full_run_script_refuses_bad_flags_in_one_line(argv, needle):
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "unit_matrices.py"), *argv],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and needle in r.stderr and "Traceback" not in r.stderr, r.stderr
