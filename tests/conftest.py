"""Shared fixtures of the test suites: for every test a fresh prefill cache of the tile
co-simulation. (What tests share besides fixtures lives in the package: the command-line
checks of the bad-input suites in ``sim/cli/testing.py``, stimulus in ``sim/harness/``.)"""

from __future__ import annotations

import os

# one BLAS / OpenMP / numba thread per pytest worker (set before numpy loads; subprocesses
# inherit it): the workers already fill the cores, and the golden models' bits do not depend
# on the thread count (models/matmul.py; tests/test_golden_determinism.py checks it)
for _threads in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ.setdefault(_threads, "1")

# the tile's Verilator builds at -O0 (sim/harness/tile/verilator.py DEFAULT_OPT; the
# suite's runs are short and its builds many): set before the harness loads
os.environ.setdefault("TRICUT_TILE_CXX_OPT", "-O0")

import gc  # noqa: E402
import warnings  # noqa: E402

import pytest  # noqa: E402
from amaranth.hdl import UnusedElaboratable  # noqa: E402

from tricut.sim import collector  # noqa: E402

collector.tune()



def pytest_unconfigure(config):
    """Designs a test built and never elaborated (a constructor refusing a bad parameter, a top
    built for its ports) and still alive at the end are collected when the worker exits, after
    pytest's own warning capture: Amaranth's UnusedElaboratable then printed some 250 lines
    below the summary. Ignored from here on; within the run pytest still reports it, and the
    tests that check that a half-built unit leaves none make it an error."""
    warnings.filterwarnings("ignore", category=UnusedElaboratable)


@pytest.fixture(autouse=True)
def _fresh_prefill_cache(monkeypatch, tmp_path_factory):
    """Each test starts with no kept prefill (``golden.PREFILL_CACHE`` in a fresh folder), so
    what a test computes does not depend on the runs before it."""
    from tricut.sim.harness.tile import golden
    monkeypatch.setattr(golden, "PREFILL_CACHE", tmp_path_factory.mktemp("prefill"))


@pytest.fixture(autouse=True)
def _old_objects_frozen():
    """The objects alive before a test (modules, kept simulators and builds) are frozen for its
    duration: a test's ``gc.collect()`` (the bad-parameter tests collect a half-built unit
    within their warnings check) then walks only what the test allocated."""
    gc.freeze()
    yield
    gc.unfreeze()
