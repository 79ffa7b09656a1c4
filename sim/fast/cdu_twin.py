"""Exact fast implementation of the CDU policy model (:mod:`tricut.models.cdu`) with numba.

:func:`run_fast` takes the arguments of :func:`tricut.models.cdu.run` and returns exactly the
dict ``run(...).counters()`` returns (same keys, same values, floats computed the same way),
plus ``txn_checksum``: a 64-bit checksum over the whole transaction sequence, equal to
:func:`txn_checksum` of the golden core's ``txns``. The counter identities of
:meth:`CDUCore.check` are verified (``AssertionError`` if one fails).

The golden stays the oracle (``tests/test_cdu_fast.py`` compares both on seeded random
configurations); this module re-implements the same decisions with arrays:

* front end: units (step, layer in the step's order, slot) are planned lazily, exactly when
  the golden plans them (at the unit's start, or when the prefetch pointer reaches them), so
  the adaptive predictor's prediction sees the same state; the keep set is captured at plan
  time, ``keep_prev`` is read when each op is generated. A planned unit is stored compactly
  (prefix run, table blocks between, suffix run) instead of a materialised block list.
* core: the tag store is arrays per (set, way); LRU ages are kept as last-touch time stamps
  (ordering the ways exactly like the golden's age permutation), valid ways are a prefix of
  the set (the golden always fills the lowest invalid way and never invalidates), a lookup
  scans the set's valid ways.
* restores (``StepDesc.restores``): S transactions at the moment the golden loads each step
  descriptor (just before the first unit of the step is planned; when the prefetch walk finds
  no unit left to plan; after the last unit) -- counters ``restores``/``restore_bytes`` and
  the checksum; they never touch the tag store.
* demand: with ``pattern=`` a :class:`~tricut.models.cdu.Pattern` named ``full``, ``window``
  or ``reread``, the demand lists (two block ranges per unit) are generated inside the
  compiled loop and ``demand`` is not called per unit (it must then be that pattern's
  ``blocks(step.step, slot.request, layer, slot.seq_len)``; the first unit is spot-checked).
  Otherwise (``topk``, traces, any callback) ``demand`` is called once per unit in unit order
  -- the order the golden calls it -- and ``None`` skips the unit.

Every compiled function runs with ``boundscheck=True`` (about 15 % slower): an undersized
buffer raises ``IndexError`` instead of silently corrupting memory and counters.

Tags are encoded as one int64 ``req * 2**40 + layer * 2**24 + block``; requests must be
< 2**23, layers < 2**16 and blocks < 2**24 (else ``ValueError``; the same for restores).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from tricut.models.cdu import (
    KV_BLOCK_TOKENS, KEEP_HASH_BITS, KEEP_HASH_MUL, KINDS, LAYER_STRIDE, REQ_STRIDE, RESULTS,
    CDUCore, FrontEnd, Pattern, AdaptivePredictor)

__all__ = ["run_fast", "txn_checksum", "KIND_CODE", "RESULT_CODE"]

#: codes of the checksum: positions in the model's KINDS / RESULTS (as in rtl/cdu/layouts.py)
KIND_CODE = {k: i for i, k in enumerate(KINDS)}
RESULT_CODE = {r: i for i, r in enumerate(RESULTS)}
#: the keep-class hash of AdaptivePredictor.keep_class, as compile-time constants
_KH0, _KH1, _KH2 = KEEP_HASH_MUL
_KH_MASK, _KH_SIZE = (1 << KEEP_HASH_BITS) - 1, float(1 << KEEP_HASH_BITS)

REQ_LIMIT, LAYER_LIMIT, BLOCK_LIMIT = 1 << 23, 1 << 16, 1 << 24

# counter slots of the compiled core (order of CDUCore.COUNTERS)
_NAMES = CDUCore.COUNTERS
(C_ACC, C_HITS, C_HREUSE, C_HPF, C_MISS, C_MALLOC, C_MBYP, C_PFREQ, C_PFISS, C_PFRED, C_PFDROP,
 C_PFUSEFUL, C_PFLATE, C_PFUSELESS, C_PFUNUSED, C_WRITES, C_WHITS, C_WALLOC, C_WBYP, C_EVICT,
 C_FILLS, C_HBMR, C_HBMW, C_OCC, C_OCCPEAK, C_REST, C_RBYTES) = range(len(_NAMES))
assert _NAMES[C_OCCPEAK] == "occupancy_peak" and _NAMES[C_HBMR] == "hbm_read_bytes"
assert _NAMES[C_REST] == "restores" and _NAMES[C_RBYTES] == "restore_bytes"
_NC = len(_NAMES)
#: the checksum word of a restore (kind S, result restore, no HBM read, no victim)
_S_WORD = KIND_CODE["S"] | (RESULT_CODE["restore"] << 3)
_W_KIND, _P_KIND = KIND_CODE["W"], KIND_CODE["P"]
assert KIND_CODE["R"] == 0

_H0 = np.uint64(0xCBF29CE484222325)
_PRIME = np.uint64(0x100000001B3)
_S29 = np.uint64(29)

# per-unit class modes and prediction modes
CM_STREAM, CM_STATIC, CM_ADAPTIVE, CM_PIN, CM_PRIORITY = 0, 1, 2, 3, 4
PM_NONE, PM_DENSE, PM_ADAPTIVE = 0, 1, 2
# demand kinds
DK_NONE, DK_RANGES, DK_LIST = 0, 1, 2

_CLS_SHIFT = 56
_PIN_KEY = 3 << 56
_TS_MASK = (1 << 56) - 1

# error codes of the compiled run
E_OK, E_EMPTY_TABLE = 0, 1


# --------------------------------------------------------------------------- checksum

@njit(cache=True, boundscheck=True, inline="always")
def _mix(h, x):
    h = (h ^ np.uint64(x)) * _PRIME
    return h ^ (h >> _S29)


@njit(cache=True, boundscheck=True)
def _checksum_words(w0, tag, vtag):
    h = _H0
    for i in range(w0.shape[0]):
        h = _mix(h, w0[i])
        h = _mix(h, tag[i])
        h = _mix(h, vtag[i])
    return h


def _enc(req, layer, block):
    return (req << 40) | (layer << 24) | block


def txn_checksum(txns):
    """The checksum :func:`run_fast` reports, computed from a golden ``CDUCore.txns`` list:
    per transaction the words (kind | result << 3 | hbm << 7 | has victim << 8), the
    encoded tag and the encoded victim tag (0 if none) folded in order (FNV-1a style with an
    xor-shift); an int in [0, 2**64)."""
    n = len(txns)
    w0 = np.empty(n, np.int64)
    tag = np.empty(n, np.int64)
    vtag = np.zeros(n, np.int64)
    for i, t in enumerate(txns):
        has = t.victim is not None
        w0[i] = KIND_CODE[t.kind] | (RESULT_CODE[t.result] << 3) | (int(bool(t.hbm)) << 7) \
            | (int(has) << 8)
        tag[i] = _enc(t.req, t.layer, t.block)
        if has:
            vtag[i] = _enc(*t.victim)
    return int(_checksum_words(w0, tag, vtag))


# --------------------------------------------------------------------------- compiled core

@njit(cache=True, boundscheck=True, inline="always")
def _victim(s, W, ekey, nvalid):
    """Way to fill in set s, or -1 when every way is pinned (golden CDUCore.victim).
    ekey = class << 56 | last-touch time: the lowest class, then the oldest, is the minimum."""
    n = nvalid[s]
    if n < W:
        return n
    base = s * W
    best_w = 0
    best = ekey[base]
    for w in range(1, W):
        k = ekey[base + w]
        if k < best:
            best_w, best = w, k
    if best >= _PIN_KEY:
        return -1
    return best_w


@njit(cache=True, boundscheck=True, inline="always")
def _lookup(s, W, tag, tags, nvalid):
    base = s * W
    for w in range(nvalid[s]):
        if tags[base + w] == tag:
            return w
    return -1


@njit(cache=True, boundscheck=True, inline="always")
def _eff_cls(cls, s, W, ekey, nvalid, skip, current, keep_cap):
    """golden CDUCore.effective_class: keep demoted to normal in a set already holding
    keep_cap keep/pinned blocks (way ``skip`` not counted)."""
    if cls != 2 or current >= 2:
        return cls
    base = s * W
    held = 0
    for w in range(nvalid[s]):
        if w != skip and (ekey[base + w] >> 56) >= 2:
            held += 1
    return 1 if held >= keep_cap else cls


@njit(cache=True, boundscheck=True, inline="always")
def _fill(s, W, tag, cls, pf, ready, keep_cap, tags, ekey, epf, eready, nvalid, C, clock, occ,
          peak):
    """golden CDUCore._allocate into set s: victim, eviction counters, the new entry with its
    effective class. Returns (allocated, victim tag, has victim, clock, occupancy, peak)."""
    w = _victim(s, W, ekey, nvalid)
    if w < 0:
        return False, 0, 0, clock, occ, peak
    i = s * W + w
    vtag = 0
    hasv = 0
    if w < nvalid[s]:
        vtag = tags[i]
        hasv = 1
        C[C_EVICT] += 1
        if epf[i]:
            C[C_PFUSELESS] += 1
    else:
        nvalid[s] += 1
        occ += 1
    ec = _eff_cls(cls, s, W, ekey, nvalid, w, 0, keep_cap)
    tags[i] = tag
    epf[i] = pf
    eready[i] = ready
    clock += 1
    ekey[i] = (ec << 56) | clock
    C[C_FILLS] += 1
    if occ > peak:
        peak = occ
    return True, vtag, hasv, clock, occ, peak


@njit(cache=True, boundscheck=True, inline="always")
def _in_sorted(arr, lo, hi, x):
    """x in arr[lo:hi] (ascending)."""
    while lo < hi:
        mid = (lo + hi) >> 1
        v = arr[mid]
        if v == x:
            return True
        if v < x:
            lo = mid + 1
        else:
            hi = mid
    return False


@njit(cache=True, boundscheck=True)
def _sort_slice(arr, lo, hi):
    """Insertion sort of arr[lo:hi] (at most `entries` elements)."""
    for i in range(lo + 1, hi):
        x = arr[i]
        j = i - 1
        while j >= lo and arr[j] > x:
            arr[j + 1] = arr[j]
            j -= 1
        arr[j + 1] = x


@njit(cache=True, boundscheck=True)
def _plan(u, plan_end, u_pmode, u_nb, u_pidx, ps_seen, ps_a, ps_w, ps_n, tb_blk, tb_conf,
          base, plen, pA, pS, kA, kS, midn, kn, mid_flat, keep_flat, ecap):
    """Plan unit u (golden FrontEnd._unit_plan at this moment); returns the new stream end."""
    base[u] = plan_end
    pm = u_pmode[u]
    nb = u_nb[u]
    midn[u] = 0
    kn[u] = 0
    if pm == 0:
        pA[u] = 0
        pS[u] = 0
        kA[u] = 0
        kS[u] = nb
        plen[u] = 0
        return plan_end
    if pm == 1:
        pA[u] = nb
        pS[u] = nb
        kA[u] = 0
        kS[u] = nb
        plen[u] = nb
        return plan_end + nb
    q = u_pidx[u]
    if ps_seen[q] == 0:
        # never observed: dense, no keep candidates
        pA[u] = nb
        pS[u] = nb
        kA[u] = 0
        kS[u] = nb
        plen[u] = nb
        return plan_end + nb
    A = min(ps_a[q], nb)
    S = max(0, nb - ps_w[q])
    pA[u] = A
    pS[u] = S
    kA[u] = A
    kS[u] = S
    off = u * ecap
    m = 0
    k = 0
    for t in range(ps_n[q]):
        b = tb_blk[q, t]
        if b < nb:
            if A <= b and b < S:
                mid_flat[off + m] = b
                m += 1
            if tb_conf[q, t] >= 2:
                keep_flat[off + k] = b
                k += 1
    _sort_slice(mid_flat, off, off + m)
    _sort_slice(keep_flat, off, off + k)
    midn[u] = m
    kn[u] = k
    n = A + m + (nb - max(A, S))
    plen[u] = n
    return plan_end + n


@njit(cache=True, boundscheck=True, inline="always")
def _cls(u, b, u_cmode, u_nb, u_slot, u_layer, rb, kA, kS, kn, keep_flat, ecap, keep_prev,
         budget):
    """Class of block b of unit u now (golden plan's cls(b))."""
    cm = u_cmode[u]
    if cm == 0:
        return 0
    if cm == 3:
        return 3
    if cm == 4:
        return 2
    nb = u_nb[u]
    if cm == 1:
        if b == 0 or b >= nb - rb:
            return 2
        return 1
    # adaptive keep_class
    inkeep = b < kA[u] or (kS[u] <= b and b < nb)
    if not inkeep:
        off = u * ecap
        inkeep = _in_sorted(keep_flat, off, off + kn[u], b)
    if not inkeep:
        return 1
    if keep_prev <= budget:
        return 2
    h = (b * _KH0 + u_layer[u] * _KH1 + u_slot[u] * _KH2) & _KH_MASK
    if h * keep_prev < _KH_SIZE * budget:
        return 2
    return 1


@njit(cache=True, boundscheck=True)
def _observe(q, sbuf, n, nb, entries, ps_seen, ps_a, ps_w, ps_n, tb_blk, tb_conf, mark):
    """Golden AdaptivePredictor.observe with the sorted distinct demand sbuf[:n].
    Returns (keep candidates added, error code)."""
    a = 0
    while a < n and sbuf[a] == a:
        a += 1
    w = 0
    i = np.searchsorted(sbuf[:n], nb - 1)
    if i < n and sbuf[i] == nb - 1:
        w = 1
        while i - w >= 0 and sbuf[i - w] == nb - 1 - w:
            w += 1
    lo = a
    hi = np.searchsorted(sbuf[:n], nb - w)
    if hi < lo:
        hi = lo
    for j in range(lo, hi):
        mark[j - lo] = 0
    # existing entries: confirm (saturating) or decay (drop at 0)
    tn = ps_n[q]
    out = 0
    for t in range(tn):
        b = tb_blk[q, t]
        c = tb_conf[q, t]
        # b in scatter s[lo:hi]
        x, y = lo, hi
        found = -1
        while x < y:
            mid = (x + y) >> 1
            v = sbuf[mid]
            if v == b:
                found = mid
                break
            if v < b:
                x = mid + 1
            else:
                y = mid
        if found >= 0:
            mark[found - lo] = 1
            c = min(3, c + 1)
        else:
            c -= 1
        if c > 0:
            tb_blk[q, out] = b
            tb_conf[q, out] = c
            out += 1
    tn = out
    err = 0
    for j in range(lo, hi):
        if mark[j - lo]:
            continue
        b = sbuf[j]
        if tn < entries:
            tb_blk[q, tn] = b
            tb_conf[q, tn] = 1
            tn += 1
        else:
            if tn == 0:
                err = 1       # golden: min() of an empty table
                break
            low = 0
            for t in range(1, tn):
                if tb_conf[q, t] < tb_conf[q, low] or (
                        tb_conf[q, t] == tb_conf[q, low] and tb_blk[q, t] < tb_blk[q, low]):
                    low = t
            if tb_conf[q, low] <= 1:
                tb_blk[q, low] = b
                tb_conf[q, low] = 1
            else:
                break          # full and every entry confident: nothing more changes
    ps_n[q] = tn
    ps_a[q] = a
    ps_w[q] = w
    ps_seen[q] = 1
    ov = min(a, nb) - (nb - w)
    if ov < 0:
        ov = 0
    kc = a + w - ov
    for t in range(tn):
        if tb_conf[q, t] >= 2:
            kc += 1
    return kc, err


@njit(cache=True, boundscheck=True)
def _load(upto, loaded, r_off, r_req, r_layer, r_nb, h, C):
    """Load the step descriptors ``loaded .. upto - 1``: the S transactions of their restores
    (golden FrontEnd.ops' load). Returns (descriptors loaded, checksum)."""
    for st in range(loaded, upto):
        for j in range(r_off[st], r_off[st + 1]):
            rl = (r_req[j] << 40) | (r_layer[j] << 24)
            for b in range(r_nb[j]):
                C[C_REST] += 1
                C[C_RBYTES] += 1
                h = _mix(h, _S_WORD)
                h = _mix(h, rl | b)
                h = _mix(h, 0)
    return max(loaded, upto), h


@njit(cache=True, boundscheck=True)
def _run(sets, W, keep_cap, distance, latency, entries, budget, rb, adaptive, walk,
         u_req, u_layer, u_slot, u_nb, u_seq, u_pidx, u_cmode, u_pmode, u_obs, u_new,
         u_dkind, u_d0, u_d1, dflat, maxd, npred, ecap, u_sidx, r_off, r_req, r_layer, r_nb):
    NSTEPS = r_off.shape[0] - 1
    U = u_req.shape[0]
    NS = sets * W
    # tag store
    tags = np.full(NS, -1, np.int64)
    # class << 56 | last-touch time (LRU order of the golden's age permutation; the times
    # of never-filled ways are never compared: a victim is searched only in a full set)
    ekey = np.zeros(NS, np.int64)
    epf = np.zeros(NS, np.uint8)
    eready = np.zeros(NS, np.float64)
    nvalid = np.zeros(sets, np.int64)
    C = np.zeros(_NC, np.int64)
    # predictor state
    ps_seen = np.zeros(npred, np.uint8)
    ps_a = np.zeros(npred, np.int64)
    ps_w = np.zeros(npred, np.int64)
    ps_n = np.zeros(npred, np.int64)
    tw = max(entries, 1) if adaptive else 1
    tb_blk = np.zeros((npred if adaptive else 1, tw), np.int64)
    tb_conf = np.zeros((npred if adaptive else 1, tw), np.int64)
    # plans
    base = np.zeros(U, np.int64)
    plen = np.zeros(U, np.int64)
    pA = np.zeros(U, np.int64)
    pS = np.zeros(U, np.int64)
    kA = np.zeros(U, np.int64)
    kS = np.zeros(U, np.int64)
    midn = np.zeros(U, np.int64)
    kn = np.zeros(U, np.int64)
    mid_flat = np.zeros(U * ecap if adaptive else 1, np.int64)
    keep_flat = np.zeros(U * ecap if adaptive else 1, np.int64)
    # scratch
    dbuf = np.zeros(max(maxd, 1), np.int64)
    sbuf = np.zeros(max(maxd, 1), np.int64)
    mark = np.zeros(max(maxd, 1), np.uint8)

    h = _H0
    now = 0
    clock = 0
    occ = 0
    peak = 0
    nplanned = 0
    plan_end = 0
    p = 0
    pu = 0
    keep_prev = 0
    keep_cur = 0
    err = 0
    ppu = -1
    ppb = -2
    pps = 0
    loaded = 0
    for k in range(U):
        if adaptive and u_new[k]:
            keep_prev = keep_cur
            keep_cur = 0
        while nplanned <= k:
            loaded, h = _load(u_sidx[nplanned] + 1, loaded, r_off, r_req, r_layer, r_nb, h, C)
            plan_end = _plan(nplanned, plan_end, u_pmode, u_nb, u_pidx, ps_seen, ps_a, ps_w,
                             ps_n, tb_blk, tb_conf, base, plen, pA, pS, kA, kS, midn, kn,
                             mid_flat, keep_flat, ecap)
            nplanned += 1
        dk = u_dkind[k]
        if dk == 0:
            continue
        nb = u_nb[k]
        req = u_req[k]
        layer = u_layer[k]
        rl = (req << 40) | (layer << 24)
        sbase = LAYER_STRIDE * layer + REQ_STRIDE * req
        # demand list into dbuf
        if dk == 1:
            x0 = u_d0[k]
            y = u_d1[k]
            dlen = x0 + (nb - y)
            for i in range(x0):
                dbuf[i] = i
            for i in range(nb - y):
                dbuf[x0 + i] = y + i
        else:
            off = u_d0[k]
            dlen = u_d1[k]
            for i in range(dlen):
                dbuf[i] = dflat[off + i]

        # ---- W of the new token
        seq = u_seq[k]
        last = (seq - 1) // 16
        fresh = (seq - 1) % 16 == 0
        cls = _cls(k, last, u_cmode, u_nb, u_slot, u_layer, rb, kA, kS, kn, keep_flat, ecap,
                   keep_prev, budget)
        tag = rl | last
        s = (last + sbase) % sets
        C[C_WRITES] += 1
        C[C_HBMW] += 1
        wl = _lookup(s, W, tag, tags, nvalid)
        vtag = 0
        hasv = 0
        if wl >= 0:
            i = s * W + wl
            clock += 1
            if cls != 0:
                ec = _eff_cls(cls, s, W, ekey, nvalid, -1, ekey[i] >> 56, keep_cap)
                ekey[i] = (ec << 56) | clock
            else:
                ekey[i] = (ekey[i] & ~_TS_MASK) | clock
            res = 6
            C[C_WHITS] += 1
        else:
            ok = False
            if fresh and cls != 0:
                ok, vtag, hasv, clock, occ, peak = _fill(
                    s, W, tag, cls, 0, now, keep_cap, tags, ekey, epf, eready,
                    nvalid, C, clock, occ, peak)
            if ok:
                res = 7
                C[C_WALLOC] += 1
            else:
                res = 8
                C[C_WBYP] += 1
        h = _mix(h, _W_KIND | (res << 3) | (hasv << 8))
        h = _mix(h, tag)
        h = _mix(h, vtag)

        rprev = -2
        rs = 0
        bk = base[k]
        if bk > p:
            p = bk
        streamed = u_pmode[k] == PM_NONE
        for di in range(dlen):
            b = dbuf[di]
            if walk:
                lim = bk + (0 if streamed else di) + distance
                while True:
                    while p >= plan_end and nplanned < U:
                        loaded, h = _load(u_sidx[nplanned] + 1, loaded, r_off, r_req, r_layer,
                                          r_nb, h, C)
                        plan_end = _plan(nplanned, plan_end, u_pmode, u_nb, u_pidx, ps_seen,
                                         ps_a, ps_w, ps_n, tb_blk, tb_conf, base, plen, pA, pS,
                                         kA, kS, midn, kn, mid_flat, keep_flat, ecap)
                        nplanned += 1
                    if p >= plan_end and nplanned == U:
                        # nothing left to plan: the remaining descriptors are read
                        loaded, h = _load(NSTEPS, loaded, r_off, r_req, r_layer, r_nb, h, C)
                    if p >= plan_end or p >= lim:
                        break
                    # ---- P of stream position p
                    while base[pu] + plen[pu] <= p:
                        pu += 1
                    j = p - base[pu]
                    A = pA[pu]
                    m = midn[pu]
                    if j < A:
                        pb = j
                    elif j < A + m:
                        pb = mid_flat[pu * ecap + j - A]
                    else:
                        pb = max(A, pS[pu]) + (j - A - m)
                    pcls = _cls(pu, pb, u_cmode, u_nb, u_slot, u_layer, rb, kA, kS, kn,
                                keep_flat, ecap, keep_prev, budget)
                    preq = u_req[pu]
                    pl = u_layer[pu]
                    ptag = (preq << 40) | (pl << 24) | pb
                    if pu == ppu and pb == ppb + 1:     # next block: next set (no division)
                        ps = pps + 1
                        if ps == sets:
                            ps = 0
                    else:
                        ps = (pb + LAYER_STRIDE * pl + REQ_STRIDE * preq) % sets
                    ppu = pu
                    ppb = pb
                    pps = ps
                    C[C_PFREQ] += 1
                    vtag = 0
                    hasv = 0
                    hbm = 0
                    if _lookup(ps, W, ptag, tags, nvalid) >= 0:
                        res = 4
                        C[C_PFRED] += 1
                    else:
                        ok = False
                        if pcls != 0:
                            ok, vtag, hasv, clock, occ, peak = _fill(
                                ps, W, ptag, pcls, 1, now + latency, keep_cap, tags, ekey, epf, eready,
                                nvalid, C, clock, occ, peak)
                        if ok:
                            res = 3
                            hbm = 1
                            C[C_PFISS] += 1
                            C[C_HBMR] += 1
                        else:
                            res = 5
                            C[C_PFDROP] += 1
                    h = _mix(h, _P_KIND | (res << 3) | (hbm << 7) | (hasv << 8))
                    h = _mix(h, ptag)
                    h = _mix(h, vtag)
                    p += 1
            # ---- R of block b
            cls = _cls(k, b, u_cmode, u_nb, u_slot, u_layer, rb, kA, kS, kn, keep_flat, ecap,
                       keep_prev, budget)
            tag = rl | b
            if b == rprev + 1:
                s = rs + 1
                if s == sets:
                    s = 0
            else:
                s = (b + sbase) % sets
            rprev = b
            rs = s
            C[C_ACC] += 1
            vtag = 0
            hasv = 0
            hbm = 0
            wl = _lookup(s, W, tag, tags, nvalid)
            if wl >= 0:
                i = s * W + wl
                C[C_HITS] += 1
                if cls != 0:
                    ec = _eff_cls(cls, s, W, ekey, nvalid, -1, ekey[i] >> 56, keep_cap)
                    ekey[i] = (ec << 56) | (ekey[i] & _TS_MASK)
                if epf[i]:
                    epf[i] = 0
                    C[C_HPF] += 1
                    C[C_PFUSEFUL] += 1
                    if eready[i] > now:
                        C[C_PFLATE] += 1
                else:
                    C[C_HREUSE] += 1
                    clock += 1
                    ekey[i] = (ekey[i] & ~_TS_MASK) | clock
                res = 0
            else:
                C[C_MISS] += 1
                C[C_HBMR] += 1
                hbm = 1
                ok = False
                if cls != 0:
                    ok, vtag, hasv, clock, occ, peak = _fill(
                        s, W, tag, cls, 0, now + latency, keep_cap, tags, ekey, epf, eready,
                        nvalid, C, clock, occ, peak)
                if ok:
                    res = 1
                    C[C_MALLOC] += 1
                else:
                    res = 2
                    C[C_MBYP] += 1
            h = _mix(h, (res << 3) | (hbm << 7) | (hasv << 8))
            h = _mix(h, tag)
            h = _mix(h, vtag)
            now += 1
        # ---- predictor learns the unit's demand
        if u_obs[k]:
            if dk == 1:
                for i in range(dlen):
                    sbuf[i] = dbuf[i]
                n = dlen
            else:
                for i in range(dlen):
                    sbuf[i] = dbuf[i]
                sbuf[:dlen].sort()
                n = 0
                for i in range(dlen):
                    if n == 0 or sbuf[i] != sbuf[n - 1]:
                        sbuf[n] = sbuf[i]
                        n += 1
            kc, e = _observe(u_pidx[k], sbuf, n, nb, entries, ps_seen, ps_a, ps_w, ps_n,
                             tb_blk, tb_conf, mark)
            keep_cur += kc
            if e != 0:
                err = e
                break
    if err == 0:
        loaded, h = _load(NSTEPS, loaded, r_off, r_req, r_layer, r_nb, h, C)
    unused = 0
    for i in range(NS):
        if tags[i] >= 0 and epf[i]:
            unused += 1
    C[C_PFUNUSED] = unused
    C[C_OCC] = occ
    C[C_OCCPEAK] = peak
    return C, h, err


@njit(cache=True, boundscheck=True)
def _repeat_add(x, n):
    """0 + x + x + ... (n times) in float64, in order (the golden's float accumulation)."""
    acc = 0.0
    for _ in range(n):
        acc += x
    return acc


def _bytes(x, n):
    """The golden's ``c[...] += x`` done n times from the int 0."""
    if n == 0:
        return 0
    if isinstance(x, int):
        return n * x
    xf = float(x)
    if xf.is_integer() and abs(xf) * n < 2.0 ** 53:
        r = float(n) * xf                      # exact: every partial sum is an exact integer
    else:
        r = float(_repeat_add(xf, n))
    return type(x)(r) if isinstance(x, float) else r


class _Counted:
    """Just enough of a CDUCore for :meth:`CDUCore.check` (reuses the golden's identities)."""

    def __init__(self, c, block_bytes, token_bytes):
        self._c, self.block_bytes, self.token_bytes = c, block_bytes, token_bytes

    def counters(self):
        return dict(self._c)


# --------------------------------------------------------------------------- driver

def _ceil_blocks(t):
    return -(-t // KV_BLOCK_TOKENS)


def run_fast(descs, demand, policy, sets, ways, distance=16, block_bytes=1, token_bytes=1,
             latency=0, entries=64, pattern=None, reserve=None):
    """``run(descs, demand, policy, ...).counters()`` computed by the compiled model, plus
    ``txn_checksum`` (see :func:`txn_checksum`). ``pattern``: the
    :class:`~tricut.models.cdu.Pattern` behind ``demand`` (``full``/``window``/``reread``
    are then generated in compiled code; ``topk`` still calls ``demand``)."""
    # argument validation exactly as the golden (same exceptions and messages)
    core0 = CDUCore(sets, ways, block_bytes, token_bytes, latency, reserve)
    S, W = core0.sets, core0.ways
    fe = FrontEnd(policy, sets * ways, distance, entries)
    adaptive = policy == "adaptive"
    budget = float(AdaptivePredictor(sets * ways, entries, distance).budget) if adaptive else 0.0
    rb = fe.recent_blocks
    if pattern is not None and not isinstance(pattern, Pattern):
        raise ValueError(f"pattern must be a tricut.models.cdu.Pattern, got {pattern!r}")
    internal = pattern is not None and pattern.name in ("full", "window", "reread")

    descs = list(descs)
    units = [(st, sd, layer) for st in descs for layer in st.layers for sd in st.slots]
    U = len(units)
    u_sidx = np.array([n for n, st in enumerate(descs) for _ in st.layers for _ in st.slots],
                      dtype=np.int64)
    r_off = np.zeros(len(descs) + 1, np.int64)
    rs = []
    for n, st in enumerate(descs):
        for r in st.restores:
            if len(r) != 3:
                raise ValueError(f"run_fast: a restore is (req, layer, seq_len), got {r!r}")
            req, layer, seq = r
            for name, v, lim in (("request", req, REQ_LIMIT), ("layer", layer, LAYER_LIMIT)):
                if not isinstance(v, (int, np.integer)) or not 0 <= v < lim:
                    raise ValueError(f"run_fast: restore {name} must be an integer in "
                                     f"[0, {lim}), got {v!r}")
            if not isinstance(seq, (int, np.integer)) or not 0 <= seq <= BLOCK_LIMIT * KV_BLOCK_TOKENS:
                raise ValueError("run_fast: restore seq_len must be an integer in "
                                 f"[0, {BLOCK_LIMIT * KV_BLOCK_TOKENS}], got {seq!r}")
            rs.append((req, layer, _ceil_blocks(seq)))
        r_off[n + 1] = len(rs)
    r_req = np.array([r[0] for r in rs] or [0], np.int64)
    r_layer = np.array([r[1] for r in rs] or [0], np.int64)
    r_nb = np.array([r[2] for r in rs] or [0], np.int64)
    u_req = np.empty(U, np.int64)
    u_layer = np.empty(U, np.int64)
    u_slot = np.empty(U, np.int64)
    u_nb = np.empty(U, np.int64)
    u_seq = np.empty(U, np.int64)
    u_pidx = np.zeros(U, np.int64)
    u_cmode = np.empty(U, np.int64)
    u_pmode = np.empty(U, np.int64)
    u_obs = np.zeros(U, np.uint8)
    u_new = np.zeros(U, np.uint8)
    u_dkind = np.empty(U, np.int64)
    u_d0 = np.zeros(U, np.int64)
    u_d1 = np.zeros(U, np.int64)
    pidx = {}
    lists = []
    flat_len = 0
    maxd = 0
    prev = None
    if internal:
        sink_b = _ceil_blocks(pattern.sinks)
        win_b = _ceil_blocks(pattern.window)
        rr_b = _ceil_blocks(pattern.reread_tokens)
        b0, b1 = pattern.burst_start, pattern.burst_start + pattern.burst_len
    for k, (st, sd, layer) in enumerate(units):
        req, slot, seq = sd.request, sd.slot, sd.seq_len
        for name, v, lim in (("request", req, REQ_LIMIT), ("layer", layer, LAYER_LIMIT)):
            if not isinstance(v, (int, np.integer)) or not 0 <= v < lim:
                raise ValueError(f"run_fast: {name} must be an integer in [0, {lim}), got {v!r}")
        if not isinstance(slot, (int, np.integer)) or not -(1 << 40) < slot < (1 << 40):
            raise ValueError(f"run_fast: slot must be an integer of magnitude < 2**40, "
                             f"got {slot!r}")
        if not isinstance(seq, (int, np.integer)) or not 1 <= seq <= BLOCK_LIMIT * KV_BLOCK_TOKENS:
            raise ValueError("run_fast: seq_len must be an integer in "
                             f"[1, {BLOCK_LIMIT * KV_BLOCK_TOKENS}], got {seq!r}")
        nb = _ceil_blocks(seq)
        u_req[k], u_layer[k], u_slot[k], u_seq[k], u_nb[k] = req, layer, slot, seq, nb
        u_new[k] = st is not prev
        prev = st
        if policy == "disabled" or sd.hint == "stream":
            cm, pm = CM_STREAM, PM_NONE
        else:
            pm = PM_DENSE if policy == "static" else PM_ADAPTIVE
            if sd.hint == "pin":
                cm = CM_PIN
            elif sd.hint == "priority":
                cm = CM_PRIORITY
            else:
                cm = CM_STATIC if policy == "static" else CM_ADAPTIVE
        u_cmode[k], u_pmode[k] = cm, pm
        if adaptive and sd.hint != "stream":
            u_obs[k] = 1
        if adaptive:
            u_pidx[k] = pidx.setdefault((slot, layer), len(pidx))
        if internal:
            last = nb - 1
            x0 = min(sink_b, nb)
            y0 = max(0, last - win_b + 1)
            if pattern.name == "full":
                x0, y0 = nb, nb
            elif pattern.name == "reread" and b0 <= st.step < b1:
                x0 = max(x0, min(nb, rr_b))
            y = max(x0, y0)
            u_dkind[k], u_d0[k], u_d1[k] = DK_RANGES, x0, y
            maxd = max(maxd, nb)
            if k == 0:
                want = list(range(x0)) + list(range(y, nb))
                got = demand(st, sd, layer)
                if got is None or [int(b) for b in got] != want:
                    raise ValueError("run_fast: demand(...) disagrees with pattern "
                                     f"{pattern.name!r} on the first unit")
        else:
            d = demand(st, sd, layer)
            if d is None:
                u_dkind[k] = DK_NONE
                continue
            a = np.asarray(list(d), dtype=np.int64)
            if a.size and (a.min() < 0 or a.max() >= BLOCK_LIMIT):
                raise ValueError(f"run_fast: demand blocks must lie in [0, {BLOCK_LIMIT}), "
                                 f"got {int(a.min())}..{int(a.max())}")
            u_dkind[k], u_d0[k], u_d1[k] = DK_LIST, flat_len, a.size
            lists.append(a)
            flat_len += a.size
            maxd = max(maxd, a.size)
    dflat = np.concatenate(lists) if lists else np.zeros(1, np.int64)
    npred = max(len(pidx), 1)
    ecap = max(1, entries) if adaptive else 1      # the table outlives a step: up to entries blocks

    walk = distance > 0 and policy != "disabled"     # golden FrontEnd.ops' prefetch walk
    C, h, err = _run(S, W, core0.keep_cap, distance, float(latency), int(entries), budget, rb, adaptive,
                     walk, u_req, u_layer, u_slot, u_nb, u_seq, u_pidx, u_cmode, u_pmode, u_obs,
                     u_new, u_dkind, u_d0, u_d1, dflat, maxd, npred, ecap, u_sidx, r_off, r_req,
                     r_layer, r_nb)
    if err == E_EMPTY_TABLE:
        raise ValueError("min() arg is an empty sequence (adaptive predictor with entries "
                         f"= {entries} cannot hold a scatter block; the golden fails the same way)")
    c = {name: int(C[i]) for i, name in enumerate(_NAMES)}
    nread, nwrite = c["hbm_read_bytes"], c["hbm_write_bytes"]
    c["hbm_read_bytes"] = _bytes(block_bytes, nread)
    c["hbm_write_bytes"] = _bytes(token_bytes, nwrite)
    c["restore_bytes"] = _bytes(block_bytes, c["restore_bytes"])
    c["frames"] = S * W
    c["hit_rate"] = c["hits"] / c["accesses"] if c["accesses"] else 0.0
    c["reuse_hit_rate"] = c["hits_reuse"] / c["accesses"] if c["accesses"] else 0.0
    c["accuracy"] = c["prefetch_useful"] / c["prefetch_issued"] if c["prefetch_issued"] else 0.0
    cov = c["prefetch_useful"] + c["misses"]
    c["coverage"] = c["prefetch_useful"] / cov if cov else 0.0
    CDUCore.check(_Counted(c, block_bytes, token_bytes))
    c["txn_checksum"] = int(h)
    return c
