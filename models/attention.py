"""Attention kernels of the golden model: the swappable part of a decode step.

The decode step (:func:`tricut.models.llama.decode_step`) calls an *attention function*
once per request and per layer, with that request's query for the new token and its whole
K/V history gathered from the paged cache into contiguous arrays. The default,
:func:`decode_attention`, is the float32 reference that matches Hugging Face's eager
attention; a bit-exact model of the TE datapath (which may tile the history into 16-token
blocks, use an online softmax, bf16/fp8 inputs, ...) plugs in by passing a function with the
same signature:

    attention_fn(q, k, v, scale) -> out
        q:     [num_heads, head_dim]           query of the new token, RoPE applied
        k, v:  [n, num_kv_heads, head_dim]      keys (RoPE applied) and values of positions
                                                0..n-1; the new token's own K/V is the last
                                                row (n = its position + 1)
        scale: float                            1 / sqrt(head_dim)
        out:   [num_heads, head_dim]            float32

GQA: query head ``h`` attends with KV head ``h // G``, ``G = num_heads // num_kv_heads``
(the same as Hugging Face's ``repeat_kv``).

:func:`prefill_attention` is the causal (many-query) counterpart used by prefill:

    prefill_attention_fn(q, k, v, scale) -> out
        q:    [T, num_heads, head_dim]          the T newest tokens, positions n-T .. n-1
        k, v: [n, num_kv_heads, head_dim]       all positions 0..n-1 (n >= T)
        out:  [T, num_heads, head_dim]

Arithmetic of the references, in float32, in Hugging Face's order:
``s = (q · kᵀ) * scale``; masked scores are -inf; ``p = exp(s - max s) / Σ exp(s - max s)``;
``out = p · v``.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from .matmul import matmul

__all__ = ["AttentionFn", "decode_attention", "prefill_attention", "softmax"]

#: ``(q, k, v, scale) -> out``; see the module docstring for shapes.
AttentionFn = Callable[[np.ndarray, np.ndarray, np.ndarray, float], np.ndarray]

_F32 = np.float32


def softmax(s: np.ndarray, axis: int = -1) -> np.ndarray:
    """Float32 softmax along ``axis``: ``exp(s - max) / sum(exp(s - max))`` (``-inf`` -> 0)."""
    s = np.asarray(s, dtype=_F32)
    m = np.max(s, axis=axis, keepdims=True)
    e = np.exp(s - m)
    return e / np.sum(e, axis=axis, keepdims=True)


def _check_kv(q_heads: int, head_dim: int, k: np.ndarray, v: np.ndarray) -> tuple[int, int]:
    if k.ndim != 3 or v.shape != k.shape:
        raise ValueError(f"k and v must both be [n, kv_heads, head_dim]; got {k.shape} and {v.shape}")
    n, kv_heads, kd = k.shape
    if kd != head_dim:
        raise ValueError(f"head_dim mismatch: q has {head_dim}, k has {kd}")
    if n == 0:
        raise ValueError("attention over an empty K/V history")
    if q_heads % kv_heads:
        raise ValueError(f"num_heads {q_heads} is not a multiple of kv_heads {kv_heads}")
    return n, kv_heads


def decode_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float) -> np.ndarray:
    """Single-query GQA attention of one request's new token over its history.

    ``q`` [num_heads, head_dim], ``k``/``v`` [n, kv_heads, head_dim] -> [num_heads, head_dim].
    """
    q = np.asarray(q, dtype=_F32)
    k = np.asarray(k, dtype=_F32)
    v = np.asarray(v, dtype=_F32)
    if q.ndim != 2:
        raise ValueError(f"q must be [num_heads, head_dim]; got {q.shape}")
    num_heads, head_dim = q.shape
    n, kv_heads = _check_kv(num_heads, head_dim, k, v)
    g = num_heads // kv_heads
    qg = q.reshape(kv_heads, g, head_dim)                  # [KVH, G, D]
    s = matmul(qg, k.transpose(1, 2, 0)) * _F32(scale)     # [KVH, G, n]
    p = softmax(s, axis=-1)
    out = matmul(p, v.transpose(1, 0, 2))                  # [KVH, G, D]
    return out.reshape(num_heads, head_dim)


def prefill_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float) -> np.ndarray:
    """Causal GQA attention of the ``T`` newest tokens (positions ``n-T .. n-1``).

    ``q`` [T, num_heads, head_dim], ``k``/``v`` [n, kv_heads, head_dim] -> [T, num_heads, head_dim].
    Query ``t`` sees keys ``0 .. n-T+t``.
    """
    q = np.asarray(q, dtype=_F32)
    k = np.asarray(k, dtype=_F32)
    v = np.asarray(v, dtype=_F32)
    if q.ndim != 3:
        raise ValueError(f"q must be [T, num_heads, head_dim]; got {q.shape}")
    t, num_heads, head_dim = q.shape
    n, kv_heads = _check_kv(num_heads, head_dim, k, v)
    if t > n:
        raise ValueError(f"{t} queries but only {n} keys")
    g = num_heads // kv_heads
    qg = q.reshape(t, kv_heads, g, head_dim).transpose(1, 2, 0, 3)   # [KVH, G, T, D]
    s = matmul(qg, k.transpose(1, 2, 0)[:, None]) * _F32(scale)      # [KVH, G, T, n]
    visible = np.arange(n)[None, :] <= (n - t + np.arange(t))[:, None]  # [T, n]
    s = np.where(visible, s, _F32(-np.inf))
    p = softmax(s, axis=-1)
    out = matmul(p, v.transpose(1, 0, 2)[:, None])                   # [KVH, G, T, D]
    return out.transpose(2, 0, 1, 3).reshape(t, num_heads, head_dim)
