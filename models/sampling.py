"""Token sampling of the golden model: greedy, temperature, top-k, top-p (nucleus).

Semantics follow Hugging Face ``generate`` and vLLM, in this order:

1. ``temperature == 0``: greedy, ``argmax(logits)`` (first index on ties); top-k and top-p
   are ignored and no random number is drawn.
2. ``z = logits / temperature``.
3. top-k (``top_k > 0``): keep the tokens whose ``z`` is >= the k-th largest ``z`` (ties at
   the threshold are kept, as in HF's ``TopKLogitsWarper``); ``top_k = 0`` disables it and
   ``top_k >= vocab`` keeps everything.
4. top-p (``top_p < 1``): on ``softmax(z)`` of the survivors, sorted ascending, drop every
   token whose cumulative probability is <= ``1 - top_p``; the most likely token is always
   kept (HF ``TopPLogitsWarper``, vLLM ``apply_top_p``). I.e. keep the smallest set of most
   likely tokens whose mass reaches ``top_p``.
5. sample from ``softmax(z)`` renormalised over the kept tokens.

The draw is by inverse CDF with one ``rng.random()`` per row: token = first index ``i``
with ``cdf[i] > u * cdf[-1]`` (float64), so a seeded :class:`numpy.random.Generator` gives
a reproducible token sequence. Probabilities are computed in float64.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["SamplingParams", "GREEDY", "greedy", "apply_top_k", "apply_top_p", "probabilities",
           "sample"]


@dataclass(frozen=True)
class SamplingParams:
    """``temperature`` >= 0 (0 = greedy), ``top_k`` >= 0 (0 = off), ``top_p`` in (0, 1] (1 = off)."""

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0

    def __post_init__(self):
        t, k, p = self.temperature, self.top_k, self.top_p
        if isinstance(t, bool) or not isinstance(t, (int, float, np.floating, np.integer)) \
                or not math.isfinite(t) or t < 0:
            raise ValueError(f"temperature must be a finite number >= 0 (0 = greedy), got {t!r}")
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 0:
            raise ValueError(f"top_k must be an integer >= 0 (0 = disabled), got {k!r}")
        if isinstance(p, bool) or not isinstance(p, (int, float, np.floating, np.integer)) \
                or not (0 < p <= 1):
            raise ValueError(f"top_p must be in (0, 1] (1 = disabled), got {p!r}")

    @property
    def is_greedy(self) -> bool:
        return self.temperature == 0


GREEDY = SamplingParams(temperature=0.0)


def _as_2d(logits) -> tuple[np.ndarray, bool]:
    x = np.asarray(logits)
    if x.ndim not in (1, 2) or x.shape[-1] == 0:
        raise ValueError(f"logits must be [vocab] or [batch, vocab]; got shape {x.shape}")
    return (x[None] if x.ndim == 1 else x), x.ndim == 1


def greedy(logits) -> np.ndarray | int:
    """``argmax`` over the last axis (first index on ties)."""
    x, single = _as_2d(logits)
    out = np.argmax(x, axis=-1)
    return int(out[0]) if single else out


def apply_top_k(z: np.ndarray, top_k: int) -> np.ndarray:
    """``z`` [B, V] with everything below the k-th largest value set to ``-inf`` (float64)."""
    z = np.array(z, dtype=np.float64)
    if top_k <= 0 or top_k >= z.shape[-1]:
        return z
    kth = np.partition(z, -top_k, axis=-1)[:, -top_k][:, None]
    return np.where(z < kth, -np.inf, z)


def apply_top_p(z: np.ndarray, top_p: float) -> np.ndarray:
    """``z`` [B, V] with the tokens outside the nucleus set to ``-inf`` (float64)."""
    z = np.array(z, dtype=np.float64)
    if top_p >= 1:
        return z
    order = np.argsort(z, axis=-1, kind="stable")                 # ascending
    zs = np.take_along_axis(z, order, axis=-1)
    ps = np.exp(zs - zs[:, -1:])                                   # -inf -> 0
    cum = np.cumsum(ps / ps.sum(axis=-1, keepdims=True), axis=-1)
    remove_sorted = cum <= 1 - top_p
    remove_sorted[:, -1] = False                                   # keep the most likely token
    remove = np.empty_like(remove_sorted)
    np.put_along_axis(remove, order, remove_sorted, axis=-1)
    return np.where(remove, -np.inf, z)


def probabilities(logits, params: SamplingParams) -> np.ndarray:
    """The distribution that :func:`sample` draws from, float64, same shape as ``logits``.

    Greedy gives a one-hot row at the argmax.
    """
    x, single = _as_2d(logits)
    if params.is_greedy:
        p = np.zeros(x.shape, dtype=np.float64)
        p[np.arange(x.shape[0]), np.argmax(x, axis=-1)] = 1.0
    else:
        z = x.astype(np.float64) / params.temperature
        z = apply_top_p(apply_top_k(z, params.top_k), params.top_p)
        e = np.exp(z - z.max(axis=-1, keepdims=True))
        p = e / e.sum(axis=-1, keepdims=True)
    return p[0] if single else p


def sample(logits, params: SamplingParams = GREEDY, rng: np.random.Generator | int | None = None):
    """Pick one token per row of ``logits`` ([V] -> int, [B, V] -> int64 array [B]).

    ``rng`` (a :class:`numpy.random.Generator` or an int seed) is required unless greedy;
    one ``rng.random()`` is consumed per row, rows in order.
    """
    if not isinstance(params, SamplingParams):
        raise ValueError(f"params must be a SamplingParams, got {type(params).__name__}")
    x, single = _as_2d(logits)
    if params.is_greedy:
        return greedy(logits)
    if rng is None:
        raise ValueError("rng: a numpy.random.Generator or an int seed is required when "
                         "temperature > 0 (sampling must be reproducible)")
    if not isinstance(rng, np.random.Generator):
        rng = np.random.default_rng(rng)
    p = probabilities(x, params)
    cdf = np.cumsum(p, axis=-1)
    u = rng.random(x.shape[0]) * cdf[:, -1]
    out = np.array([np.searchsorted(cdf[i], u[i], side="right") for i in range(x.shape[0])],
                   dtype=np.int64)
    out = np.minimum(out, x.shape[-1] - 1)
    return int(out[0]) if single else out
