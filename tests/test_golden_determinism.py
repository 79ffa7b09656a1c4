"""The golden decode step's bits do not depend on the machine (``models/matmul.py``).

A float32 BLAS product changes its last bits with the BLAS thread count (on this machine
OpenBLAS's sgemm differs between one and two threads on most shapes); the golden models'
products go through :func:`tricut.models.matmul.matmul`, which calls no BLAS. Checked here:

* ``matmul`` against an exact sum (``math.fsum``) rounded once: within one float32 ulp, the
  shapes ``np.matmul`` broadcasts, and a bad contraction named;
* the same bits under one and two BLAS threads: ``matmul``, a prefill and decode step of two
  models, and a whole co-simulation's golden side (``golden_run``: tokens and every TE
  attention output). The Verilator bench recomputing the golden step in its own process
  with one and two threads is in ``tests/test_tile_cosim_verilator.py``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from tricut.models.config import load_model
from tricut.models.llama import LlamaWeights, decode_step, prefill
from tricut.models.matmul import matmul
from tricut.models.paged_kv import PagedKVCache
from tricut.sim.harness.tile.golden import golden_run
from tricut.sim.harness.tile.setup import Setup


def _rand(rng, shape):
    return rng.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("sa,sb", [((3, 5), (5, 7)), ((2, 3, 4, 5), (3, 5, 6)), ((5,), (5, 4)),
                                   ((4, 5), (5,)), ((1, 300), (300, 2))])
def test_matmul_is_the_exact_sum_rounded_once(sa, sb):
    rng = np.random.default_rng(7)
    a, b = _rand(rng, sa), _rand(rng, sb)
    got = matmul(a, b)
    assert got.dtype == np.float32 and got.shape == np.matmul(a, b).shape
    a2 = a[None] if a.ndim == 1 else a                  # np.matmul's promotion of 1-D operands
    b2 = b[:, None] if b.ndim == 1 else b
    batch = np.broadcast_shapes(a2.shape[:-2], b2.shape[:-2])
    a2 = np.broadcast_to(a2, batch + a2.shape[-2:])
    b2 = np.broadcast_to(b2, batch + b2.shape[-2:])
    exact = np.empty(batch + (a2.shape[-2], b2.shape[-1]))
    for idx in np.ndindex(*exact.shape):
        row, col = a2[idx[:-1]], b2[idx[:-2] + (slice(None), idx[-1])]
        exact[idx] = math.fsum(float(x) * float(y) for x, y in zip(row, col))
    exact = exact.astype(np.float32).reshape(got.shape)
    assert np.all(np.abs(got.astype(np.float64) - exact) <= np.spacing(np.abs(exact)))


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
    s = Setup(requests=4, max_prompt=6, steps=2, kv_dtype="fp8", engines=2, seed=5)
    one, two = _both_thread_counts(lambda: golden_run(s))
    assert one.tokens == two.tokens and one.attn.keys() == two.attn.keys() and one.attn
    assert all(np.array_equal(one.attn[k], two.attn[k]) for k in one.attn)
