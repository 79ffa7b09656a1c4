"""Whole decode steps with the tile's attention on Verilator (``tricut tile run --sim
verilator``; ``sim/harness/tile/verilator.py``, bench ``sim/harness/benches/
tile_cosim.py``; docs/tile/cosim.md, "Co-simulation on Verilator").

* equivalence with the golden decode step on Verilator, one run per CDU policy (the setups
  of ``tests/test_tile_cached.py``, in ``sim/harness/tile/cases.py``): ``static`` (bf16, 1
  engine), ``adaptive`` (fp8, 4 engines, split-K), ``disabled`` (NVFP4, 2 engines): every
  attention output bit-exact, the golden tokens, every CDU decision and counter equal to the
  CDU golden model's; and the HBM-only tile (no CDU, ``tests/test_tile_cosim.py``'s
  equivalence setup: bf16, 2 engines, split-K);
* identity: on a small cached case, the Amaranth and the Verilator runs give the same
  :class:`RunResult` (outputs, tokens, layer and step cycles, CDU decisions and counters)
  and ``tricut tile run`` prints the same report but for the simulator's name;
* a flipped HBM bit (behind an L2 fill) is reported on Verilator too.

Four Verilator builds (one per tile shape, ``-O0``: they compile fastest, and these runs
are short), cached under ``.build/cocotb`` per configuration, shared by the workers: 2-4
min the first time on 2 shared cores (137 s lightly loaded, 245 s loaded), ~25 s when the
builds exist (17 s of it the Amaranth run of the identity case).
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from tricut.rtl.tile.attention_layouts import kv_addr
from tricut.sim.cli.testing import run_cli
from tricut.sim.harness.cdu import txn_tuple
from tricut.sim.harness.tile import cosim
from tricut.sim.harness.tile import verilator as V
from tricut.sim.harness.tile.compare import compare, compare_cdu
from tricut.sim.harness.tile.cases import ADAPTIVE, DISABLED, EQUIV, QUICK_OPT, STATIC
from tricut.sim.harness.tile.cosim import simulate
from tricut.sim.harness.tile.golden import RunInputs, RunResult, golden_run
from tricut.sim.harness.tile.setup import SetupError, schedule

#: the identity case: STATIC's tile shape (same build), short prompts, one step
SMALL = dataclasses.replace(STATIC, prompt_lens=(2, 3), steps=1)
SMALL_ARGV = ["tile", "run", "--prompt-lens", "2,3", "--steps", "1", "--max-ctx", "32",
              "--policy", "static", "--lanes", "16"]


def _verilator(s, corrupt=None):
    golden = golden_run(s)
    res, info, b = V.run(s, corrupt=corrupt, golden=golden, opt=QUICK_OPT)
    return golden, res, info


def _assert_equivalent(s, golden, t):
    assert compare(golden, t) == [] and compare_cdu(s, t) == []
    assert not t.stopped and not t.problems
    assert set(golden.attn) == set(t.attn) and golden.attn
    for k in golden.attn:
        assert np.array_equal(golden.attn[k], t.attn[k]), k
    assert t.tokens == golden.tokens
    assert sorted(t.layer_cycles) == sorted({(ri, li) for ri, li, _ in golden.attn})
    if s.policy is None:
        assert t.txns == [] and t.cdu_counters == {}
        return None
    core = RunInputs(s).cdu_reference()
    assert t.txns == [txn_tuple(x) for x in core.txns] and t.txns
    c = core.counters()
    for k in ("accesses", "hits", "misses_alloc", "misses_bypass", "prefetch_issued",
              "writes", "write_hits", "write_allocs", "evictions", "fills"):
        assert t.cdu_counters[k] == c[k], k
    return c


def _assert_same(a: RunResult, b: RunResult):
    """Two tile runs equal field by field (cycles included)."""
    assert a.tokens == b.tokens
    assert a.attn.keys() == b.attn.keys()
    assert all(np.array_equal(a.attn[k], b.attn[k]) for k in a.attn)
    assert a.layer_cycles == b.layer_cycles
    assert a.step_cycles == b.step_cycles
    assert (a.problems, a.stopped) == (b.problems, b.stopped)
    assert a.txns == b.txns
    assert a.cdu_counters == b.cdu_counters


def test_static_bf16_one_engine():
    golden, t, info = _verilator(STATIC)
    c = _assert_equivalent(STATIC, golden, t)
    assert c["accesses"] == c["hits"] > 0 and c["fills"] > 0
    assert info.cycles >= sum(t.step_cycles.values()) > 0 and info.tile_s > 0


def test_adaptive_fp8_four_engines_split_k():
    golden, t, _ = _verilator(ADAPTIVE)
    c = _assert_equivalent(ADAPTIVE, golden, t)
    seq = [d.seq_len for descs in schedule(ADAPTIVE) for d in descs]
    assert max(seq) > ADAPTIVE.split_tokens >= min(seq)
    assert c["evictions"] > 0 and c["hits"] > 0 and c["misses_alloc"] > 0
    print(f"\n[tile cached adaptive] step cycles {t.step_cycles}, counters "
          f"{ {k: c[k] for k in ('hits', 'misses_alloc', 'evictions', 'prefetch_issued')} }")


def test_disabled_nvfp4_two_engines():
    golden, t, _ = _verilator(DISABLED)
    c = _assert_equivalent(DISABLED, golden, t)
    assert c["hits"] == 0 and c["fills"] == 0 and c["misses_bypass"] == c["accesses"] > 0


def test_hbm_only_bf16_two_engines_split_k():
    golden, t, _ = _verilator(EQUIV)
    _assert_equivalent(EQUIV, golden, t)
    assert all(len(v) == 4 for v in t.tokens.values())


def test_amaranth_and_verilator_runs_are_identical(capsys, monkeypatch):
    """The same small cached setup on both simulators: the same RunResult, cycle for cycle,
    and ``tricut tile run`` prints the same report (``--sim verilator`` on the command line)."""
    from tricut.sim.cli.tile_cmd import _text
    amaranth = simulate(SMALL)
    verilator = simulate(SMALL, sim="verilator")
    assert amaranth.ok and verilator.ok, (amaranth.differences, verilator.differences)
    _assert_same(amaranth.tile, verilator.tile)
    assert verilator.tile.txns and verilator.tile.layer_cycles
    assert _text(amaranth, "amaranth").replace("Amaranth simulator", "Verilator") == \
        _text(verilator, "verilator")
    reports = []
    real = simulate

    def keep(s, **kw):
        reports.append((kw, real(s, **kw)))
        return reports[-1][1]
    monkeypatch.setattr(cosim, "simulate", keep)
    code, cap = run_cli(SMALL_ARGV + ["--sim", "verilator"], capsys)
    assert code == 0, cap.err
    (kw, rep), = reports
    assert kw == {"sim": "verilator"} and rep.setup == SMALL
    assert cap.out.strip() == _text(verilator, "verilator")
    code, cap = run_cli(SMALL_ARGV + ["--sim", "verilator", "--json"], capsys)
    out = json.loads(cap.out)
    assert code == 0 and out["ok"] and out["sim"] == "verilator"
    assert out["step_cycles"] == [amaranth.tile.step_cycles[k]
                                  for k in sorted(amaranth.tile.step_cycles)]
    print(f"\n[tile cosim verilator] identical: layer cycles {verilator.tile.layer_cycles}, "
          f"{len(verilator.tile.txns)} CDU decisions")


def test_a_bench_with_other_blas_threads_agrees_with_the_golden(monkeypatch):
    """The parent's golden step with two BLAS threads, the bench's recomputation (its own
    process, ``OPENBLAS_NUM_THREADS``) with one and with two: both runs bit-exact, identical
    (the golden decode step's products are exact sums, ``models/matmul.py``)."""
    from threadpoolctl import threadpool_limits
    s = dataclasses.replace(STATIC, prompt_lens=(3, 2), steps=1, seed=4)
    with threadpool_limits(limits=2, user_api="blas"):
        golden = golden_run(s)
    runs = []
    for threads in ("1", "2"):
        monkeypatch.setenv("OPENBLAS_NUM_THREADS", threads)
        t = V.run(s, golden=golden, opt=QUICK_OPT)[0]
        assert compare(golden, t) == [] and not t.problems, threads
        runs.append(t)
    _assert_same(*runs)


def test_a_flipped_hbm_bit_behind_an_l2_fill_is_reported():
    """Request 0's K of token 1 (layer 0, KV head 0) reaches the TE from an L2 frame under
    ``static``: one flipped bit in the image the simulator loads is caught."""
    addr = kv_addr(0, 0, 0, 1, num_layers=2, num_kv_heads=2, max_ctx=32, head_dim=64,
                   lanes=16) + 1
    rep = simulate(SMALL, corrupt=(addr, 14), sim="verilator")
    assert rep.differences and "attention[" in rep.differences[0]
    assert rep.tile.stopped
    assert rep.tile.cdu_counters["hits"] == rep.tile.cdu_counters["accesses"] > 0


def test_unknown_simulator():
    with pytest.raises(SetupError, match="sim must be amaranth or verilator"):
        simulate(SMALL, sim="vcs")


@pytest.mark.parametrize("plusargs, message", [
    ([], r"no \+tricut_clock_ns=<period> argument"),
    (["+tricut_clock_ns=0.0001"], r"the half period of \+tricut_clock_ns=0.0001 is not a whole "
                                  r"number of time steps"),
    (["+tricut_clock_ns=ten"], r"bad clock period: \+tricut_clock_ns=ten"),
])
def test_the_builds_main_refuses_a_run_without_its_clock_period(plusargs, message):
    """The builds' main (``cosim_main.cpp``) drives the clock: a run that does not give its
    period is refused with one line before anything is simulated."""
    import re
    import subprocess
    b = V.build(RunInputs(EQUIV).params(), False, QUICK_OPT)
    done = subprocess.run([str(b.build_dir / b.toplevel), *plusargs], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and re.search(message, lines[0]), done.stderr
