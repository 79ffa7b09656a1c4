"""Compiled twin of the TE golden model's :func:`tricut.models.te.te_decode`, with numba.

:func:`te_decode_fast` is ``te_decode`` itself with its one expensive part, the scores and
the online-softmax recurrence (:func:`tricut.models.te.softmax_recurrence`), replaced by
:func:`compiled_recurrence`: ``out``, ``m``, ``l``, status flags, cycles and errors are the
golden's by construction where the code is shared, and bit for bit where it is compiled. The
golden stays the oracle (``tests/test_te_twin.py`` compares both on seeded random inputs,
rising-maximum inputs and the edge cases). Compiled:

* the bit-level fp32 primitives the datapath uses (``fmul``, ``fadd``, ``fmax``,
  ``ceil_int``, ``exp2``/``exp2_diff``, the pairwise adder tree) as scalar functions on int64
  bit patterns, each a transcription of the numpy helper in ``models/te.py`` (same rounding,
  flush to zero, special values, the same ``exp2`` table and interpolation);
* the scores in the engine's order (serial: lane partial sums over the beats, then the
  tree; split/pipelined: a tree per beat, then the beats in order) and the recurrence over
  the tokens, in one loop per (token, head).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from tricut.models.te import (EXP2_FRAC_BITS, EXP2_INTERP_BITS, EXP2_TABLE, NEG_INF, ONE,
                              POS_INF, QNAN, softmax_recurrence, te_decode)

__all__ = ["te_decode_fast", "compiled_recurrence", "primitives", "PRIMITIVES"]

_M32 = 0xFFFFFFFF
_MAG = 0x7FFFFFFF
_SIGN = 0x80000000
_T = np.array(EXP2_TABLE, dtype=np.int64)
_D = _T[:-1] - _T[1:]
_NSEG = _D.shape[0]
_FRAC_MASK = (1 << EXP2_FRAC_BITS) - 1
_INTERP_MASK = (1 << EXP2_INTERP_BITS) - 1

_OPTS = dict(cache=True, nogil=True)


# --------------------------------------------------------------------------- fp32 primitives

@njit(**_OPTS)
def _round_pack(s, E, M, X):
    # models.te._round_pack: RNE with an unbounded exponent, then E >= 255 -> inf, E < 1 -> 0
    q = M >> X
    rem = M & ((1 << X) - 1)
    half = 1 << (X - 1)
    if rem > half or (rem == half and (q & 1) == 1):
        q += 1
    carry = q >> 24
    if carry == 1:
        q >>= 1
    E += carry
    if E >= 255:
        return (s << 31) | POS_INF
    if E < 1:
        return s << 31
    return (s << 31) | (E << 23) | (q & 0x7FFFFF)


@njit(**_OPTS)
def _fmul(a, b):
    a &= _M32
    b &= _M32
    sa, ea, fa = a >> 31, (a >> 23) & 0xFF, a & 0x7FFFFF
    sb, eb, fb = b >> 31, (b >> 23) & 0xFF, b & 0x7FFFFF
    s = sa ^ sb
    if ea == 255 or eb == 255:
        if (ea == 255 and fa != 0) or (eb == 255 and fb != 0) or ea == 0 or eb == 0:
            return QNAN             # a NaN, or inf * 0 (a zero is ea == 0, subnormals too)
        return (s << 31) | POS_INF
    if ea == 0 or eb == 0:
        return s << 31
    P = (fa | 0x800000) * (fb | 0x800000)
    top = (P >> 47) & 1
    if top == 0:
        P <<= 1
    return _round_pack(s, ea + eb - 127 + top, P, 24)


@njit(**_OPTS)
def _bit_length(x):
    n = 0
    if x >= 1 << 16:
        x >>= 16
        n += 16
    if x >= 1 << 8:
        x >>= 8
        n += 8
    if x >= 1 << 4:
        x >>= 4
        n += 4
    if x >= 1 << 2:
        x >>= 2
        n += 2
    if x >= 1 << 1:
        x >>= 1
        n += 1
    return n + x


@njit(**_OPTS)
def _fadd(a, b):
    a &= _M32
    b &= _M32
    sa, ea, fa = a >> 31, (a >> 23) & 0xFF, a & 0x7FFFFF
    sb, eb, fb = b >> 31, (b >> 23) & 0xFF, b & 0x7FFFFF
    if ea == 255 or eb == 255:
        if (ea == 255 and fa != 0) or (eb == 255 and fb != 0):
            return QNAN
        if ea == 255 and eb == 255:
            return QNAN if sa != sb else a
        return a if ea == 255 else b
    if ea == 0:
        if eb == 0:
            return (sa & sb) << 31
        return b
    if eb == 0:
        return a
    if (b & _MAG) > (a & _MAG):
        sL, eL, fL, sS, eS, fS = sb, eb, fb, sa, ea, fa
    else:
        sL, eL, fL, sS, eS, fS = sa, ea, fa, sb, eb, fb
    ML = (fL | 0x800000) << 3                     # leading one at bit 26, guard/round/sticky
    MS = (fS | 0x800000) << 3
    d = min(eL - eS, 27)
    MSs = MS >> d
    if (MS & ((1 << d) - 1)) != 0:
        MSs |= 1
    R = ML - MSs if sL != sS else ML + MSs
    if R == 0:
        return 0                                  # exact cancellation -> +0
    carry = (R >> 27) & 1
    R1 = ((R >> 1) | (R & 1)) if carry == 1 else R
    lsh = 27 - _bit_length(R1)
    return _round_pack(sL, eL + carry - lsh, R1 << lsh, 3)


@njit(**_OPTS)
def _key(a):
    if (a >> 23) & 0xFF == 0:
        return 0
    mag = a & _MAG
    return -mag if (a >> 31) == 1 else mag


@njit(**_OPTS)
def _fmax(a, b):
    a &= _M32
    b &= _M32
    if ((a & _MAG) > POS_INF) or ((b & _MAG) > POS_INF):
        return QNAN
    return b if _key(b) > _key(a) else a


@njit(**_OPTS)
def _ceil_int(x):
    x &= _M32
    s, e = x >> 31, (x >> 23) & 0xFF
    if e < 127:
        return ONE if (s == 0 and e != 0) else 0
    if e >= 150:
        return x
    fb = 150 - e
    mask = (1 << fb) - 1
    trunc = x & ~mask
    if s == 0 and (x & mask) != 0:
        return trunc + (1 << fb)                  # a carry into the exponent is right
    return trunc


@njit(**_OPTS)
def _exp2(x):
    x &= _M32
    s, e, f = x >> 31, (x >> 23) & 0xFF, x & 0x7FFFFF
    if e == 255 and f != 0:
        return QNAN
    if s == 0 or e == 0:
        return ONE                                # positive (clamped to 0), ±0, subnormal
    if e >= 127 + 7:
        return 0
    mant = f | 0x800000
    sh = e - 127 + 1                              # U = |x| * 2**24 = mant * 2**sh
    if sh >= 0:
        U = mant << sh
    else:
        U = mant >> min(-sh, 63)
    I = U >> EXP2_FRAC_BITS
    if I >= 126:
        return 0
    phi = U & _FRAC_MASK
    j = phi >> EXP2_INTERP_BITS
    rr = phi & _INTERP_MASK
    p = _T[j] - ((_D[min(j, _NSEG - 1)] * rr) >> EXP2_INTERP_BITS)
    if p >= 1 << 30:                              # only when phi == 0
        return _round_pack(0, 127 - I, p >> 1, 6)
    return _round_pack(0, 126 - I, p, 6)


@njit(**_OPTS)
def _exp2_diff(x, y):
    if (x & _M32) == NEG_INF and (y & _M32) == NEG_INF:
        return ONE
    return _exp2(_fadd(x, y ^ _SIGN))


@njit(**_OPTS)
def _tree(buf, n):
    """Pairwise adder tree over buf[:n] (n a power of two), in place: ((a0+a1)+(a2+a3))+..."""
    while n > 1:
        n >>= 1
        for i in range(n):
            buf[i] = _fadd(buf[2 * i], buf[2 * i + 1])
    return buf[0]


#: the compiled primitives :func:`primitives` returns, in its rows' order
PRIMITIVES = ("fmul", "fadd", "fmax", "ceil_int", "exp2", "exp2_diff")


@njit(**_OPTS)
def _primitives(a, b):
    r = np.empty((6, a.shape[0]), dtype=np.int64)
    for i in range(a.shape[0]):
        r[0, i] = _fmul(a[i], b[i])
        r[1, i] = _fadd(a[i], b[i])
        r[2, i] = _fmax(a[i], b[i])
        r[3, i] = _ceil_int(a[i])
        r[4, i] = _exp2(a[i])
        r[5, i] = _exp2_diff(a[i], b[i])
    return r


def primitives(a, b):
    """The compiled primitives on bit patterns ``a``, ``b`` (1-D): a ``[6, n]`` int64 array,
    rows as in :data:`PRIMITIVES` (unary ones on ``a``), for checking them against the
    numpy helpers of ``models/te.py``."""
    return _primitives(np.ascontiguousarray(a, dtype=np.int64),
                       np.ascontiguousarray(b, dtype=np.int64))


# --------------------------------------------------------------------------- the engine loop

@njit(**_OPTS)
def _decode_kernel(q, k, v, c, lanes, split, o, m, l):
    """Scores in the engine's order, then the online softmax over the tokens of one job.
    q [G, d], k/v [n, d] fp32 bits; o [G, d], m [G], l [G] are the state, updated in place."""
    n = k.shape[0]
    G, d = q.shape
    L = lanes
    nb = d // L
    prod = np.empty(d, dtype=np.int64)
    acc = np.empty(L, dtype=np.int64)
    s2 = np.empty(G, dtype=np.int64)
    for t in range(n):
        for g in range(G):
            for i in range(d):
                prod[i] = _fmul(q[g, i], k[t, i])
            if split:
                s = _tree(prod, L)                # the tree of beat 0 lands in prod[0]
                for b in range(1, nb):
                    for i in range(L):
                        acc[i] = prod[b * L + i]
                    s = _fadd(s, _tree(acc, L))
            else:
                for i in range(L):
                    acc[i] = prod[i]
                for b in range(1, nb):
                    for i in range(L):
                        acc[i] = _fadd(acc[i], prod[b * L + i])
                s = _tree(acc, L)
            s2[g] = _fmul(s, c)
        for g in range(G):
            x = s2[g]
            mn = _fmax(m[g], _ceil_int(x) if split else x)
            alpha = _exp2_diff(m[g], mn)
            p = _exp2_diff(x, mn)
            l[g] = _fadd(_fmul(l[g], alpha), p)
            m[g] = mn
            for i in range(d):
                o[g, i] = _fadd(_fmul(o[g, i], alpha), _fmul(p, v[t, i]))


# --------------------------------------------------------------------------- public API

def compiled_recurrence(q, k, v, c, lanes, engine, n):
    """:func:`tricut.models.te.softmax_recurrence`, compiled. Inputs whose dequantised K/V are
    not ``[n, d]`` (V shorter than K, odd block-scale arrays, ``n < 0``) or whose scale is not
    one number go to the golden's, so they fail or broadcast as it does."""
    G, d = q.shape
    rows = (max(n, 0), d)
    if k.shape != rows or v.shape != rows or np.ndim(c):
        return softmax_recurrence(q, k, v, c, lanes, engine, n)
    o = np.zeros((G, d), dtype=np.int64)
    m = np.full(G, NEG_INF, dtype=np.int64)
    l = np.zeros(G, dtype=np.int64)
    if n > 0:
        _decode_kernel(np.ascontiguousarray(q), np.ascontiguousarray(k),
                       np.ascontiguousarray(v), int(c), lanes, engine != "serial", o, m, l)
    return m, l, o


def te_decode_fast(*args, **kwargs):
    """:func:`tricut.models.te.te_decode` with :func:`compiled_recurrence`: the same arguments,
    the same result."""
    return te_decode(*args, recurrence=compiled_recurrence, **kwargs)
