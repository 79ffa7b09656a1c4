"""Matrix products of the golden models whose bits do not depend on the machine.

A float32 ``a @ b`` goes through the BLAS library, whose summation order (and so the
float32 result) changes with its thread count, its kernel for the processor and the shape's
blocking: two processes computing the same decode step could disagree in the last bit, and a
co-simulation whose golden step ran in another process would report a bit-exact design wrong.
:func:`matmul` never calls BLAS: every product of two float32 numbers is exact in float64,
the products are summed in float64 in numpy's pairwise order along the contracted axis (fixed
by the shape alone), and the sum is rounded once to float32.
"""

from __future__ import annotations

import numpy as np

__all__ = ["matmul"]

_F32, _F64 = np.float32, np.float64
#: float64 elements of one product block (bounds the temporary to 32 MiB)
_BLOCK_ELEMS = 1 << 22


def matmul(a, b) -> np.ndarray:
    """``a @ b`` as float32 (``np.matmul``'s broadcasting; ``a`` ``[..., M, K]``, ``b``
    ``[..., K, N]``, or 1-D operands as ``np.matmul`` takes them), each entry the float64 sum
    of the exact float64 products rounded once to float32 (see the module docs)."""
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
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
    a64 = np.broadcast_to(a, batch + (m, k)).astype(_F64)
    bt64 = np.ascontiguousarray(np.swapaxes(np.broadcast_to(b, batch + (k, n)), -1, -2),
                                dtype=_F64)                         # [..., N, K]
    out = np.empty(batch + (m, n), dtype=_F32)
    per_row = max(1, k * int(np.prod(batch, dtype=np.int64)))      # elements of one (M, N) cell
    cols = max(1, min(n, _BLOCK_ELEMS // per_row))
    rows = max(1, _BLOCK_ELEMS // (per_row * cols))
    for i in range(0, m, rows):
        for j in range(0, n, cols):
            prod = a64[..., i:i + rows, None, :] * bt64[..., None, j:j + cols, :]
            out[..., i:i + rows, j:j + cols] = prod.sum(axis=-1).astype(_F32)
    if vec_a:
        out = out[..., 0, :]
    if vec_b:
        out = out[..., 0]
    return out
