"""The compiled twin of the grid of tiles' placement (``models/sm_slice.py``
:func:`~tricut.models.sm_slice.grid_layer_cycles`): the same rule and the same expected-value
tile model, unit by unit in a numba loop instead of numpy array operations, for the fast
model's steps (``StepModel`` calls it every decode step under the ``te`` cut). The numpy
version stays the oracle; ``tests/test_sm_slice.py`` checks the twin against it."""

from __future__ import annotations

import numpy as np
from numba import njit

from tricut.models.cdu import KV_BLOCK_TOKENS
from tricut.models.sm_slice import PARTS_PER_SM, CduSliceTiming

__all__ = ["grid_layer_cycles_fast"]

_OPTS = dict(cache=True, nogil=True)
_B = KV_BLOCK_TOKENS


@njit(inline="always", **_OPTS)
def _interp(n, points, values, window, period, per_period):
    k = 0
    if n > window:
        k = -(-(n - window) // period)
    x = n - k * period
    j = np.searchsorted(points, x)               # points[j - 1] < x <= points[j]
    if j == 0:
        v = values[0]
    elif j == points.size:
        v = values[-1]
    elif points[j] == x:
        v = values[j]
    else:
        x0, x1 = points[j - 1], points[j]
        v = values[j - 1] + (values[j] - values[j - 1]) * ((x - x0) / (x1 - x0))
    return v + k * per_period


@njit(inline="always", **_OPTS)
def _unit(n, points, values, window, period, per_period, shape):
    if shape.size == 0:
        return _interp(n, points, values, window, period, per_period)
    whole = -(-n // _B) * _B
    return _interp(whole, points, values, window, period, per_period) + shape[n - whole + _B - 1]


@njit(inline="always", **_OPTS)
def _place(i, sms, tokens, c, u, load, prev_len, prev_c, by_tail, by_next):
    rnd, pos = divmod(i, sms)
    sm = pos if rnd % 2 == 0 else sms - 1 - pos
    p = prev_c[sm]
    if p >= 0:
        k = min(-(-tokens // _B), by_next.shape[2]) - 1
        load[sm] -= by_tail[p, c, (prev_len[sm] - 1) % _B] + by_next[p, c, k]
    load[sm] += u
    prev_len[sm] = tokens
    prev_c[sm] = c


@njit(**_OPTS)
def _grid(lengths, flags, sms, saving, parts_per_sm,
          points0, values0, window0, period0, per0, shape0,
          points1, values1, window1, period1, per1, shape1, by_tail, by_next):
    n = lengths.size
    total = lengths.sum()
    best_max, best_mean = np.inf, 0.0
    for m in parts_per_sm:
        per = -(-total // (sms * m))
        S = max(_B, -(-per // _B) * _B)
        load = np.zeros(sms)
        prev_len = np.zeros(sms, dtype=np.int64)
        prev_c = np.full(sms, -1, dtype=np.int64)
        u_streamed = _unit(S, points0, values0, window0, period0, per0, shape0)
        u_cached = _unit(S, points1, values1, window1, period1, per1, shape1) - saving * S
        i = 0
        for c in range(1, -1, -1):             # the cached jobs' full parts, then the streamed
            u = u_cached if c == 1 else u_streamed
            for j in range(n):
                if flags[j] == c:
                    for _ in range(lengths[j] // S):
                        _place(i, sms, S, c, u, load, prev_len, prev_c, by_tail, by_next)
                        i += 1
        rest = lengths % S
        for j in np.argsort(-rest, kind="mergesort"):       # the tails, longest first
            r = rest[j]
            if r == 0:
                break
            c = flags[j]
            if c == 1:
                u = _unit(r, points1, values1, window1, period1, per1, shape1) - saving * r
            else:
                u = _unit(r, points0, values0, window0, period0, per0, shape0)
            _place(i, sms, r, c, u, load, prev_len, prev_c, by_tail, by_next)
            i += 1
        top = load.max()
        if top < best_max:
            best_max, best_mean = top, load.mean()
    return best_max, best_mean


def _curve(t):
    shape = np.zeros(0) if t.shape is None else t.shape
    return (t.points, t.values, int(t.window), int(t.period), float(t.per_period), shape)


def _tables(timing):
    """The kernel's arguments of ``timing`` beyond the step's, built once per timing."""
    tables = getattr(timing, "_twin_tables", None)
    if tables is None:
        if isinstance(timing, CduSliceTiming):
            curves, by_tail, by_next = (timing.stream, timing.auto), timing.by_tail, timing.by_next
        else:
            curves = (timing, timing)
            by_tail = np.ascontiguousarray(np.broadcast_to(timing.by_tail,
                                                           (2, 2) + timing.by_tail.shape))
            by_next = np.ascontiguousarray(np.broadcast_to(timing.by_next,
                                                           (2, 2) + timing.by_next.shape))
        tables = timing._twin_tables = (np.array(PARTS_PER_SM, dtype=np.int64),
                                        *_curve(curves[0]), *_curve(curves[1]), by_tail, by_next)
    return tables


def grid_layer_cycles_fast(timing, lengths, sms: int, cached=None, reuse: float = 0.0) -> tuple:
    """:func:`~tricut.models.sm_slice.grid_layer_cycles`, compiled: ``(slowest, mean)`` SM
    cycles of one layer."""
    lengths = np.asarray(lengths, dtype=np.int64)
    if lengths.size == 0:
        return 0.0, 0.0
    cdu = isinstance(timing, CduSliceTiming)
    saving = reuse * timing.token_cycles if cdu else 0.0
    if cdu and cached is not None:
        flags = np.asarray(cached, dtype=np.int64)
    else:
        flags = np.zeros(lengths.size, dtype=np.int64)
    top, mean = _grid(lengths, flags, int(sms), float(saving), *_tables(timing))
    return float(top), float(mean)
