"""Sampling: greedy, temperature, top-k, top-p, seeded draws, parameter checks."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers.generation.logits_process import (TemperatureLogitsWarper, TopKLogitsWarper,
                                                    TopPLogitsWarper)

from tricut.models.sampling import (GREEDY, SamplingParams, apply_top_k, apply_top_p, greedy,
                                    probabilities, sample)


def _logits(rows=6, vocab=50, seed=0, scale=2.0):
    return (np.random.default_rng(seed).standard_normal((rows, vocab)) * scale).astype(np.float32)


def _softmax(z):
    e = np.exp(z - z.max())
    return e / e.sum()


def test_greedy_is_argmax():
    x = _logits()
    np.testing.assert_array_equal(greedy(x), np.argmax(x, axis=-1))
    assert greedy(x[2]) == int(np.argmax(x[2]))
    np.testing.assert_array_equal(sample(x), np.argmax(x, axis=-1))           # default = greedy
    np.testing.assert_array_equal(sample(x, SamplingParams(temperature=0.0, top_k=3, top_p=0.5)),
                                  np.argmax(x, axis=-1))                        # no rng needed
    assert greedy(np.array([1.0, 3.0, 3.0])) == 1                               # first on ties
    assert probabilities(x[0], GREEDY)[np.argmax(x[0])] == 1.0


@pytest.mark.parametrize("params", [
    SamplingParams(temperature=1.0, top_k=1),
    SamplingParams(temperature=5.0, top_k=1, top_p=0.9),
    SamplingParams(temperature=1.0, top_p=1e-6),
    SamplingParams(temperature=3.0, top_p=1e-3),
], ids=["top_k=1", "top_k=1,hot", "top_p=1e-6", "top_p=1e-3,hot"])
def test_degenerate_filters_are_greedy(params):
    x = _logits(rows=64, seed=1, scale=0.5)
    rng = np.random.default_rng(0)
    for _ in range(20):
        np.testing.assert_array_equal(sample(x, params, rng), np.argmax(x, axis=-1))


def test_seeded_determinism():
    x = _logits(rows=1, vocab=100, seed=2)[0]
    p = SamplingParams(temperature=0.9, top_k=40, top_p=0.95)

    def draws(rng):
        return [sample(x, p, rng) for _ in range(200)]

    a = draws(np.random.default_rng(42))
    assert a == draws(np.random.default_rng(42))
    assert a != draws(np.random.default_rng(43))
    assert sample(x, p, 7) == sample(x, p, np.random.default_rng(7))            # int seed
    # a batch consumes one uniform per row, in row order: the same as 5 single draws
    assert sample(np.stack([x] * 5), p, np.random.default_rng(42)).tolist() == a[:5]
    assert len(set(a)) > 5


@pytest.mark.parametrize("temperature", [0.5, 1.0, 2.0])
def test_temperature_distribution_matches_softmax(temperature):
    logits = np.array([2.0, 1.0, 0.5, 0.0, -0.5, -1.0, -3.0, 1.5], dtype=np.float32)
    n = 60_000
    got = sample(np.tile(logits, (n, 1)), SamplingParams(temperature=temperature),
                 np.random.default_rng(int(temperature * 10)))
    freq = np.bincount(got, minlength=logits.size) / n
    want = _softmax(logits.astype(np.float64) / temperature)
    sigma = np.sqrt(want * (1 - want) / n)
    assert np.all(np.abs(freq - want) <= 5 * sigma + 1e-4), (freq, want)
    assert 0.5 * np.abs(freq - want).sum() < 0.01                                # total variation


def test_top_k_never_samples_outside_top_k():
    x = _logits(rows=1, vocab=200, seed=3, scale=0.3)[0]
    k = 5
    top = set(np.argsort(x)[-k:].tolist())
    got = sample(np.tile(x, (20_000, 1)), SamplingParams(temperature=2.0, top_k=k),
                 np.random.default_rng(3))
    assert set(got.tolist()) == top                                             # all k, only k
    freq = np.bincount(got, minlength=x.size)[sorted(top)] / got.size
    want = _softmax(x[sorted(top)].astype(np.float64) / 2.0)
    np.testing.assert_allclose(freq, want, atol=0.02)
    # ties at the k-th value are kept (HF semantics); k >= vocab keeps everything
    z = apply_top_k(np.array([[3.0, 1.0, 2.0, 2.0, 0.0]]), 2)
    assert np.isfinite(z).tolist() == [[True, False, True, True, False]]
    assert np.isfinite(apply_top_k(x[None], 10_000)).all()


def test_top_p_nucleus():
    probs = np.array([0.05, 0.5, 0.15, 0.3])
    z = np.log(probs)[None]
    assert np.isfinite(apply_top_p(z, 0.7)).tolist() == [[False, True, False, True]]   # 0.5+0.3
    assert np.isfinite(apply_top_p(z, 0.4)).tolist() == [[False, True, False, False]]
    assert np.isfinite(apply_top_p(z, 0.9)).tolist() == [[False, True, True, True]]
    assert np.isfinite(apply_top_p(z, 1.0)).all()
    p = probabilities(z[0], SamplingParams(temperature=1.0, top_p=0.7))
    np.testing.assert_allclose(p, [0, 0.5 / 0.8, 0, 0.3 / 0.8], atol=1e-12)
    got = sample(np.tile(z[0], (20_000, 1)), SamplingParams(top_p=0.7), np.random.default_rng(4))
    assert set(got.tolist()) == {1, 3}
    assert abs(np.mean(got == 1) - 0.625) < 0.02


@pytest.mark.parametrize("temperature,top_k,top_p", [
    (1.0, 0, 0.9), (0.7, 10, 1.0), (1.3, 20, 0.8), (0.5, 0, 0.5), (2.0, 3, 0.99), (1.0, 50, 0.3),
])
def test_filters_match_transformers_warpers(temperature, top_k, top_p):
    """Same kept set and same distribution as HF's Temperature -> TopK -> TopP warpers."""
    x = _logits(rows=8, vocab=64, seed=5)
    scores = torch.from_numpy(x.astype(np.float64))
    scores = TemperatureLogitsWarper(temperature)(None, scores)
    if top_k:
        scores = TopKLogitsWarper(top_k)(None, scores)
    if top_p < 1:
        scores = TopPLogitsWarper(top_p)(None, scores)
    want = torch.softmax(scores, dim=-1).numpy()
    got = probabilities(x, SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p))
    np.testing.assert_array_equal(got > 0, want > 0)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("kwargs,name", [
    ({"temperature": -0.1}, "temperature"),
    ({"temperature": float("nan")}, "temperature"),
    ({"temperature": float("inf")}, "temperature"),
    ({"top_k": -1}, "top_k"),
    ({"top_k": 2.5}, "top_k"),
    ({"top_p": 0.0}, "top_p"),
    ({"top_p": 1.5}, "top_p"),
    ({"top_p": -0.2}, "top_p"),
    ({"top_p": float("nan")}, "top_p"),
])
def test_parameter_errors_name_the_parameter(kwargs, name):
    with pytest.raises(ValueError, match=name):
        SamplingParams(**kwargs)


def test_sampling_needs_rng_and_good_logits():
    x = _logits()
    with pytest.raises(ValueError, match="rng"):
        sample(x, SamplingParams(temperature=1.0))
    with pytest.raises(ValueError, match="logits"):
        sample(np.zeros((2, 3, 4)), GREEDY)
    with pytest.raises(ValueError, match="params"):
        sample(x, {"temperature": 1.0}, 0)
