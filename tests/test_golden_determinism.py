"""The golden decode step's bits do not depend on the machine (``models/matmul.py``).

A float32 BLAS product changes its last bits with the BLAS thread count (on this machine
OpenBLAS's sgemm differs between one and two threads on most shapes); the golden models'
products go through :func:`tricut.models.matmul.matmul`: each entry the exact sum of the
products rounded once, whatever order a float64 BLAS sums them in. Checked here:

* ``matmul`` bit for bit against the exact sum (``Fraction``) rounded once to float32: the
  shapes ``np.matmul`` broadcasts, wide exponents and cancellation, the rounding edge cases
  of every path (ties, just above and below a tie, +0, overflow), and a bad contraction;
* the same bits under one and two BLAS threads: ``matmul``, a prefill and decode step of two
  models, and a whole co-simulation's golden side (``golden_run``: tokens and every TE
  attention output). The Verilator bench recomputing the golden step in its own process
  with one and two threads is in ``tests/test_tile_cosim_verilator.py``.
"""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from tricut.models.config import load_model
from tricut.models.llama import LlamaWeights, decode_step, prefill
from tricut.models.matmul import matmul
from tricut.models.paged_kv import PagedKVCache
from tricut.sim.harness.tile.golden import golden_run
from tricut.sim.harness.tile.setup import CosimError, Setup


def _rand(rng, shape):
    return rng.standard_normal(shape).astype(np.float32)


def _exact_rounded(row, col) -> np.float32:
    """Independent reference: the exact sum as a Fraction, rounded to the nearest float32
    (ties to the even significand; beyond the largest float32 plus half an ulp, infinity)."""
    exact = sum((Fraction(float(x)) * Fraction(float(y)) for x, y in zip(row, col)), Fraction(0))
    if abs(exact) >= Fraction(2 ** 128 - 2 ** 103):
        return np.float32(math.copysign(math.inf, exact))
    near = np.float32(float(exact))
    with np.errstate(over="ignore"):        # past the largest float32: infinity, dropped below
        candidates = [np.nextafter(near, np.float32(-np.inf)), near,
                      np.nextafter(near, np.float32(np.inf))]
    best = min((c for c in candidates if np.isfinite(c)),
               key=lambda c: (abs(Fraction(float(c)) - exact), int(c.view(np.uint32)) & 1))
    return best + np.float32(0.0)


def _reference(a, b):
    a2 = a[None] if a.ndim == 1 else a                  # np.matmul's promotion of 1-D operands
    b2 = b[:, None] if b.ndim == 1 else b
    batch = np.broadcast_shapes(a2.shape[:-2], b2.shape[:-2])
    a2 = np.broadcast_to(a2, batch + a2.shape[-2:])
    b2 = np.broadcast_to(b2, batch + b2.shape[-2:])
    want = np.empty(batch + (a2.shape[-2], b2.shape[-1]), dtype=np.float32)
    for idx in np.ndindex(*want.shape):
        want[idx] = _exact_rounded(a2[idx[:-1]], b2[idx[:-2] + (slice(None), idx[-1])])
    return want.reshape(np.matmul(a, b).shape)


def _same_bits(x, y):
    return x.dtype == y.dtype == np.float32 and x.shape == y.shape and \
        np.array_equal(x.view(np.uint32), y.view(np.uint32))


@pytest.mark.parametrize("sa,sb", [((3, 5), (5, 7)), ((2, 3, 4, 5), (3, 5, 6)), ((5,), (5, 4)),
                                   ((4, 5), (5,)), ((1, 300), (300, 2))])
def test_matmul_is_the_exact_sum_rounded_once(sa, sb):
    rng = np.random.default_rng(7)
    a, b = _rand(rng, sa), _rand(rng, sb)
    assert _same_bits(matmul(a, b), _reference(a, b))


def test_matmul_is_exact_over_wide_exponents_and_cancellation():
    """Operands spread over 2**±30 and columns that cancel a row almost exactly: the float64
    sum is off by far more than a float32 ulp of the result, which must still be exact."""
    rng = np.random.default_rng(11)
    for trial in range(60):
        k = int(rng.integers(1, 70))
        a = (rng.standard_normal((3, k)) * 2.0 ** rng.integers(-30, 30, (3, k))).astype(np.float32)
        b = (rng.standard_normal((k, 3)) * 2.0 ** rng.integers(-30, 30, (k, 3))).astype(np.float32)
        b[:, 1] = -a[0] * np.float32(1.5)
        a[0, -1] *= np.float32(3.0)
        assert _same_bits(matmul(a, b), _reference(a, b)), f"trial {trial}"


_TIE = 2.0 ** -24                   # 1 + 2**-24 is the midpoint between 1 and 1 + 2**-23


@pytest.mark.parametrize("row,col,want", [
    # an exact tie rounds to the even neighbour (float64 and exact sum agree)
    ([1.0, _TIE], [1.0, 1.0], 1.0),
    ([1.0 + 2.0 ** -23, _TIE], [1.0, 1.0], 1.0 + 2.0 ** -22),
    # just above the tie: float64 loses the last term and would round down
    ([1.0, _TIE, 2.0 ** -40], [1.0, 1.0, 2.0 ** -20], 1.0 + 2.0 ** -23),
    # just below the tie
    ([1.0, _TIE, -2.0 ** -40], [1.0, 1.0, 2.0 ** -20], 1.0),
    # above the tie by less than the TwoSum tree's bound: decided by fsum's remainder
    ([1.0, _TIE, 2.0 ** -60], [1.0, 1.0, 2.0 ** -45], 1.0 + 2.0 ** -23),
    ([1.0, _TIE, -2.0 ** -60], [1.0, 1.0, 2.0 ** -45], 1.0),
    # exact cancellation is +0, never -0
    ([1.0, -1.0], [1.0, 1.0], 0.0),
    ([-0.0, 0.0], [1.0, -1.0], 0.0),
    # overflow: past the largest float32 plus half an ulp is infinity, below it is not
    ([3e38, 3e38], [1.0, 1.0], math.inf),
    ([float(np.finfo(np.float32).max), 2.0 ** 103], [1.0, 1.0], math.inf),
    ([float(np.finfo(np.float32).max), 2.0 ** 102], [1.0, 1.0], float(np.finfo(np.float32).max)),
])
def test_matmul_rounding_edge_cases(row, col, want):
    a = np.array([row], dtype=np.float32)
    b = np.array(col, dtype=np.float32)[:, None]
    got = matmul(a, b)[0, 0]
    assert got.view(np.uint32) == np.float32(want).view(np.uint32), (got, want)
    assert got.view(np.uint32) == _exact_rounded(a[0], b[:, 0]).view(np.uint32)


def test_matmul_is_exact_where_float64_blas_is_not():
    """A projection-sized product: most entries are settled by the float64 BLAS sum and its
    error bound, the others by the TwoSum tree; those and sampled others equal the exact
    reference."""
    rng = np.random.default_rng(2)
    a = rng.standard_normal((64, 2048)).astype(np.float32)
    b = (rng.standard_normal((2048, 96)) * 0.02).astype(np.float32)
    got = matmul(a, b)
    c = a.astype(np.float64) @ b.astype(np.float64)
    bound = np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64) * (2048 * 2.0 ** -52)
    half_ulp = np.spacing(np.abs(got)).astype(np.float64) / 2
    near = np.argwhere(np.abs(np.abs(c - got) - half_ulp) <= bound)
    assert len(near) > 0, "no entry near a rounding boundary: the TwoSum path is not exercised"
    picks = list(map(tuple, near[:20])) + list(zip(rng.integers(0, 64, 20), rng.integers(0, 96, 20)))
    for i, j in picks:
        assert got[i, j].view(np.uint32) == _exact_rounded(a[i], b[:, j]).view(np.uint32)


def test_matmul_names_a_bad_contraction():
    with pytest.raises(ValueError, match=r"\(3, 4\) and \(5, 2\)"):
        matmul(np.zeros((3, 4)), np.zeros((5, 2)))


def _both_thread_counts(fn):
    out = []
    for threads in (1, 2):
        with threadpool_limits(limits=threads, user_api="blas"):
            out.append(fn())
    return out


def test_blas_bits_depend_on_how_the_sum_is_split():
    """The hazard the golden models avoid: a float32 BLAS product's bits depend on how the
    library splits the contraction (by thread count on some builds, by build on others; this
    machine's OpenBLAS may split by rows only, so the split is made explicit here), while
    ``matmul``'s do not depend on the BLAS threads."""
    rng = np.random.default_rng(0)
    a, b = _rand(rng, (64, 256)), _rand(rng, (256, 96))
    whole = a @ b
    halves = a[:, :128] @ b[:128] + a[:, 128:] @ b[128:]
    assert not np.array_equal(whole, halves), "BLAS gave the same bits for both splits: the " \
        "checks below would not catch a golden model that uses it"
    one, two = _both_thread_counts(lambda: matmul(a, b))
    assert np.array_equal(one, two)


@pytest.mark.parametrize("model", ["tiny", "tiny-te"])
def test_decode_step_bits_do_not_depend_on_blas_threads(model):
    cfg = load_model(model)

    def step():
        w = LlamaWeights.random(cfg, seed=3, std=0.15 * (64 / cfg.hidden_size) ** 0.5)
        cache = PagedKVCache.for_model(cfg, 8, 16)
        rng = np.random.default_rng(3)
        first = [prefill(w, cache, r, rng.integers(0, cfg.vocab_size, n))
                 for r, n in enumerate((5, 17))]
        batch = [(r, int(np.argmax(lg))) for r, lg in enumerate(first)]
        return np.stack(first), decode_step(w, cache, batch)

    (p1, d1), (p2, d2) = _both_thread_counts(step)
    assert np.array_equal(p1, p2) and np.array_equal(d1, d2)


def test_cosim_golden_side_does_not_depend_on_blas_threads():
    s = Setup(lanes=16, requests=4, max_prompt=6, steps=2, kv_dtype="fp8", engines=2, seed=5)
    one, two = _both_thread_counts(lambda: golden_run(s))
    assert one.tokens == two.tokens and one.attn.keys() == two.attn.keys() and one.attn
    assert all(np.array_equal(one.attn[k], two.attn[k]) for k in one.attn)


def test_a_run_prefills_its_prompts_once(monkeypatch):
    """Both sides of a run start from copies of one prefill: the golden run's, reused by the
    tile side in the same process and sent with the Verilator bench's plan (``Prefilled``)."""
    from tricut.sim.harness.tile import golden as G
    s = Setup(requests=3, prompt_lens=(4, 9, 2), steps=2, engines=2, seed=23)
    calls = []
    real = G.prefill
    monkeypatch.setattr(G, "prefill", lambda *a, **k: calls.append(a[2]) or real(*a, **k))
    monkeypatch.setattr(G, "_LAST_PREFILL", [])
    first = G.golden_run(s)
    assert calls == [0, 1, 2]
    again = G.RunInputs(s)                      # the tile side: no prefill of its own
    sent = G.RunInputs(s, again.prefilled())    # the bench, from the plan
    assert calls == [0, 1, 2] and sent.weights is not again.weights
    for r in range(3):
        for a, b in zip(again.cache.gather(0, r), sent.cache.gather(0, r)):
            assert np.array_equal(a, b)
    assert again.tokens == sent.tokens == {r: [t[0]] for r, t in first.tokens.items()}
    assert again.cache.seq_len(0) == 4          # a copy: the golden run's steps are not in it
    with pytest.raises(CosimError, match="a prefill of"):
        G.RunInputs(dataclasses.replace(s, seed=24), again.prefilled())
    assert G.golden_run(s).tokens == first.tokens


def test_a_prefill_is_kept_for_later_runs_of_the_same_prompts(monkeypatch):
    """A new process (no prefill in memory) running the same prompts loads the kept prefill
    instead of computing it; it equals the computed one; other prompts are not served it; a
    damaged file is recomputed."""
    from tricut.sim.harness.tile import golden as G
    s = Setup(requests=2, prompt_lens=(5, 3), steps=2, seed=31)
    calls = []
    real = G.prefill
    monkeypatch.setattr(G, "prefill", lambda *a, **k: calls.append(a[2]) or real(*a, **k))
    monkeypatch.setattr(G, "_LAST_PREFILL", [])
    first = G.RunInputs(s)
    assert calls == [0, 1] and len(list(G.PREFILL_CACHE.glob("*.pkl"))) == 1
    G._LAST_PREFILL.clear()                     # as a new process
    kept = G.RunInputs(s)
    assert calls == [0, 1] and kept.tokens == first.tokens
    for r in range(2):
        for a, b in zip(first.cache.gather(0, r), kept.cache.gather(0, r)):
            assert np.array_equal(a, b)
    G._LAST_PREFILL.clear()
    G.RunInputs(dataclasses.replace(s, prompt_lens=(5, 4)))
    assert calls == [0, 1, 0, 1] and len(list(G.PREFILL_CACHE.glob("*.pkl"))) == 2
    for f in G.PREFILL_CACHE.glob("*.pkl"):
        f.write_bytes(b"not a pickle")
    G._LAST_PREFILL.clear()
    again = G.RunInputs(s)
    assert calls == [0, 1, 0, 1, 0, 1] and again.tokens == first.tokens
    assert G.golden_run(s).tokens == G.golden_run(s).tokens
