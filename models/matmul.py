"""Matrix products of the golden models whose bits do not depend on the machine.

A float32 ``a @ b`` goes through the BLAS library, whose summation order (and so the
float32 result) changes with its thread count, its kernel for the processor and the shape's
blocking: two processes computing the same decode step could disagree in the last bit, and a
co-simulation whose golden step ran in another process would report a bit-exact design wrong.

:func:`matmul` defines each entry as the **exact** sum of the products of the float32
operands, rounded once to float32 (round to nearest, ties to even; a zero sum is ``+0``). No
summation order appears in that definition, so no thread count, kernel or process can change
it. It is computed fast and exactly:

1. every product of two float32 numbers is exact in float64, so a float64 BLAS product ``c``
   (any order, any thread count) is within ``K * 2**-52 * sum|a||b|`` of the exact sum (the
   bound of any summation order of ``K`` terms, with margin; ``sum|a||b|`` is a second BLAS
   product);
2. where no float32 rounding boundary (a midpoint between two neighbouring float32 values)
   lies within that bound of ``c``, the exact sum rounds to the same float32 as ``c`` does;
3. the other entries (well under 1 %) are summed again without error: a pairwise TwoSum
   tree gives ``hi + lo`` within ``4 * (K * 2**-53)**2 * sum|a||b|`` of the exact sum, which
   settles all but the entries within that of a boundary; those few are summed by
   ``math.fsum`` and decided by the sign of its remainder.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["matmul"]

_F32, _F64 = np.float32, np.float64
_F32_MAX = float(np.finfo(_F32).max)
#: where float32 rounding overflows to infinity: the largest float32 plus half its ulp
_F32_OVERFLOW = _F32_MAX + 2.0 ** 103


def matmul(a, b) -> np.ndarray:
    """``a @ b`` as float32 (``np.matmul``'s broadcasting; ``a`` ``[..., M, K]``, ``b``
    ``[..., K, N]``, or 1-D operands as ``np.matmul`` takes them), each entry the exact sum of
    the products rounded once to float32 (see the module docs)."""
    a = np.asarray(a, dtype=_F32)
    b = np.asarray(b, dtype=_F32)
    vec_a, vec_b = a.ndim == 1, b.ndim == 1
    if vec_a:
        a = a[None, :]
    if vec_b:
        b = b[:, None]
    if a.ndim < 1 or b.ndim < 1 or a.shape[-1] != b.shape[-2]:
        raise ValueError(f"matmul: shapes {a.shape} and {b.shape} do not contract")
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    a64 = np.broadcast_to(a, batch + a.shape[-2:]).astype(_F64)
    b64 = np.broadcast_to(b, batch + b.shape[-2:]).astype(_F64)
    with np.errstate(all="ignore"):
        out = _exact_rounded(a64, b64)
    if vec_a:
        out = out[..., 0, :]
    if vec_b:
        out = out[..., 0]
    return out


def _exact_rounded(a64: np.ndarray, b64: np.ndarray) -> np.ndarray:
    k = a64.shape[-1]
    c = np.matmul(a64, b64)
    out = c.astype(_F32)
    total_abs = np.matmul(np.abs(a64), np.abs(b64))
    unsafe = np.isfinite(c) & ((np.abs(c) + total_abs >= _F32_MAX)
                               | ~_settled(out, c, 0.0, total_abs * (k * 2.0 ** -52)))
    where = np.nonzero(unsafe)
    if where[0].size:
        out[where] = _refine(a64, np.swapaxes(b64, -1, -2), where, total_abs[where])
    return out + _F32(0.0)


def _settled(rounded, hi, lo, bound):
    """Whether ``hi + lo``, known within ``bound``, lies strictly inside the float32 rounding
    interval of ``rounded`` (between the midpoints to its neighbours): the distances to the
    midpoints are ``(hi - midpoint) + lo``, exact to their sign when ``hi`` is near the
    midpoint (sums near the overflow threshold are left to the caller)."""
    f64 = rounded.astype(_F64)
    up = (f64 + np.nextafter(rounded, _F32(np.inf)).astype(_F64)) / 2
    down = (f64 + np.nextafter(rounded, _F32(-np.inf)).astype(_F64)) / 2
    return ((hi - up) + lo < -bound) & ((hi - down) + lo > bound)


_CHUNK_ELEMS = 1 << 18


def _refine(a64: np.ndarray, bt64: np.ndarray, where: tuple, total_abs: np.ndarray) -> np.ndarray:
    """Entries ``where`` of ``a64 @ bt64ᵀ``: the exact sums rounded to float32. A pairwise
    error-free summation (TwoSum at every node) gives ``hi + lo`` within
    ``4 * (K u)**2 * sum|p|`` of the exact sum (``K`` rounded up to a power of two); the
    entries whose float32 rounding that does not settle are summed by ``math.fsum``."""
    n, k = where[0].size, a64.shape[-1]
    width = 1 << max(0, (k - 1).bit_length())
    out = np.empty(n, dtype=_F32)
    step = max(1, _CHUNK_ELEMS // width)
    for at in range(0, n, step):
        part = slice(at, at + step)
        rows = a64[tuple(w[part] for w in where[:-1])]
        cols = bt64[tuple(w[part] for w in where[:-2] + where[-1:])]
        hi = np.zeros((rows.shape[0], width))
        hi[:, :k] = rows * cols
        lo = np.zeros_like(hi)
        while hi.shape[1] > 1:
            x, y = hi[:, 0::2], hi[:, 1::2]
            s = x + y
            z = s - x
            lo = lo[:, 0::2] + lo[:, 1::2] + ((x - (s - z)) + (y - z))
            hi = s
        hi, lo = hi[:, 0], lo[:, 0]
        got = (hi + lo).astype(_F32)
        bound = total_abs[part] * (4 * (width * 2.0 ** -53) ** 2)
        undecided = (~np.isfinite(got) | (np.abs(hi) + total_abs[part] >= _F32_MAX)
                     | ~_settled(got, hi, lo, bound))
        for i in np.nonzero(undecided)[0]:
            got[i] = _round_exact_sum(rows[i], cols[i])
        out[part] = got
    return out


def _round_exact_sum(row: np.ndarray, col: np.ndarray) -> np.float32:
    """The exact sum of ``row * col`` rounded to float32: ``s`` is that sum rounded to float64
    and ``r`` the sign of the remainder (its rounding keeps the sign: the products are
    multiples of 2**-298, so a non-zero remainder is no float64 underflow). Only when ``s`` is
    itself a float32 rounding boundary does ``r`` decide the side."""
    products = (row * col).tolist()
    s = math.fsum(products)
    r = math.fsum(products + [-s])
    f = _F32(s)
    if r == 0.0 or float(f) == s:
        return f
    if np.isfinite(f):
        toward = np.nextafter(f, _F32(math.copysign(math.inf, s - float(f))))
        boundary = (float(f) + float(toward)) / 2
    else:
        boundary = math.copysign(_F32_OVERFLOW, s)
    if s != boundary:
        return f
    return _F32(np.nextafter(s, math.copysign(math.inf, r)))
