"""Policy model of the CDU (Cache Director Unit): KV-block prefetch and L2 residency.

Golden and naive on purpose. Two halves, joined by a stream of block *operations*:

* the **front end** (:class:`FrontEnd`) turns step descriptors (DSU batch composition) and
  an access pattern into the operation stream the TE and the prefetcher generate: per step,
  per layer (in the descriptor's layer order), per slot: the new token's K/V write ``W``,
  then the demand reads ``R`` of the blocks attention reads, interleaved with prefetches
  ``P`` of predicted blocks, ``distance`` blocks ahead of the demand; and the restore
  ops ``S`` of the DSU's restore moves (``StepDesc.restores``) when each step descriptor is
  loaded. The policy decides what is predicted and with which residency class every block
  is allocated. Nothing in the front end looks at the tag store, so the operation stream is
  a pure function of (descriptors, pattern, policy, seed).
* the **core** (:class:`CDUCore`) applies each operation to a set-associative tag store
  (LRU ages, residency classes) and records one :class:`Txn` per operation: the decision
  (hit, miss-allocate, bypass, ...), the victim and whether an HBM read is issued. The RTL
  in ``rtl/cdu`` takes the same operations and must produce the same transactions.

Definitions (also in ``docs/cdu.md``)
-------------------------------------
* A KV *block* is (request, layer, block index): 16 tokens of K and V of all KV heads of
  one layer; ``block_bytes = kv_bytes_per_token / num_layers * 16``.
* **Hit** is defined on allocation state: a demand read whose block has a tag-store entry
  (filled or still in flight) at the moment the read is processed. It does not depend on
  memory latency. Timeliness is counted separately: a demand hit on a prefetched block that
  has not arrived yet (simple latency model, below) is a *late* prefetch (still useful).
* Latency model: time advances by one unit per demand read (the TE consumes one block per
  unit); an HBM read issued at time ``t`` arrives at ``t + latency`` units.
* Residency classes: 0 = stream (never allocated), 1 = normal, 2 = keep (evicted only when
  the set has no normal block), 3 = pinned (never evicted). A set holds at most ``keep_cap
  = ways - reserve`` keep/pinned blocks (``reserve``, default ``ways // 8``): a block that
  would become keep in a full set stays/becomes normal, so every set keeps ways for the
  prefetch stream (:meth:`CDUCore.effective_class`). Victim: the lowest-numbered
  invalid way; else among unpinned ways the lowest class, then the oldest (largest age).
  No unpinned way -> the block is not allocated (bypass). Allocation, a reuse hit and a
  write hit make the way the most recently used; the first demand hit on a prefetched block
  does not (it keeps the age of its prefetch).
* Writes are write-through (the new token's K/V goes to HBM: ``token_bytes`` per layer)
  and update a resident block; a write that starts a new block (``fresh``) allocates it
  without any HBM read (nothing of it exists in HBM yet). L2 blocks are therefore never
  dirty and an eviction writes nothing back.
* A restore (``S``) moves one block of a parked request from host memory (G2) into HBM over
  the host link. It is not an L2 access: the tag store is not touched (no allocation, no age
  or class change, no eviction; an L2 copy of the same block stays valid), no HBM read is
  issued; only ``restores`` and ``restore_bytes`` count it.

Counters (each has one definition; identities checked by :meth:`CDUCore.check`)::

    accesses          = hits + misses                         (demand reads)
    hits              = hits_reuse + hits_prefetched
    misses            = misses_alloc + misses_bypass
    prefetch_requests = prefetch_issued + prefetch_redundant + prefetch_dropped
    prefetch_issued   = prefetch_useful + prefetch_useless + prefetch_unused   (at the end)
    prefetch_useful   = hits_prefetched       prefetch_late <= prefetch_useful
    writes            = write_hits + write_allocs + write_bypass
    evictions         = victims that were valid
    fills             = misses_alloc + prefetch_issued + write_allocs
                      = evictions + occupancy                (occupancy at the end)
    hbm_read_bytes    = (misses + prefetch_issued) * block_bytes
    hbm_write_bytes   = writes * token_bytes
    restores          = S ops                 restore_bytes = restores * block_bytes
    accuracy = prefetch_useful / prefetch_issued
    coverage = prefetch_useful / (prefetch_useful + misses)
"""

from __future__ import annotations

import math
from collections import namedtuple
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .dsu import DsuParams, residency_bit
from .jsonl import TraceError, iter_jsonl_objects

__all__ = [
    "KV_BLOCK_TOKENS", "CLASS_STREAM", "CLASS_NORMAL", "CLASS_KEEP", "CLASS_PIN", "HINTS",
    "POLICIES", "PATTERNS", "KINDS", "RESULTS", "KEEP_HASH_MUL", "KEEP_HASH_BITS", "Op", "Txn",
    "SlotDesc", "StepDesc", "TraceError", "CDUCore",
    "FrontEnd", "AdaptivePredictor", "Pattern", "read_access_trace", "set_index",
    "predictor_budget_bits", "dsu_hints", "HINT_OF_RESIDENCY", "run", "STATIC_RECENT_TOKENS",
    "default_reserve", "keep_budget", "geometry", "MODEL_WAYS",
]

#: tokens per KV block: the paged-attention block the CDU tracks and prefetches, and the
#: decode tile's block read (``rtl/tile``; the CDU RTL's ``seq_bits = block_bits + 4``).
#: Declared here only. Not the KV tiers' 512-token prefix blocks
#: (``sim/fast/kv_tiers.py: TIER_BLOCK_TOKENS``).
KV_BLOCK_TOKENS = 16
CLASS_STREAM, CLASS_NORMAL, CLASS_KEEP, CLASS_PIN = 0, 1, 2, 3
# The names below are declared here only; the hardware codes (rtl/cdu/layouts.py: HINT,
# POLICY, PATTERN, KIND, RESULT) and the compiled twin's codes (sim/fast/cdu_twin.py) are
# each name's position in its tuple, so the order of every tuple is part of the encoding.
HINTS = ("auto", "stream", "priority", "pin")
POLICIES = ("disabled", "static", "adaptive")
PATTERNS = ("full", "window", "topk", "reread")
#: operation kinds (:data:`Op`): R demand read, W new-token write, P prefetch, S restore (one
#: block of a parked request moved from host memory, G2, into HBM by the host-link DMA)
KINDS = ("R", "W", "P", "S")
#: decisions of the core (:data:`Txn`): R: hit, miss_alloc, miss_bypass; P: pf_issue,
#: pf_redundant, pf_drop; W: w_hit, w_alloc, w_bypass; S: restore
RESULTS = ("hit", "miss_alloc", "miss_bypass", "pf_issue", "pf_redundant", "pf_drop",
           "w_hit", "w_alloc", "w_bypass", "restore")

#: One block operation. kind: one of KINDS.
#: cls: residency class to allocate with (0 = do not allocate). fresh: W starts a new block.
Op = namedtuple("Op", "kind req layer block cls fresh")

#: One decision of the core. result: one of RESULTS.
#: victim: (req, layer, block) of the evicted valid block, or None. hbm: an HBM read issued.
Txn = namedtuple("Txn", "kind req layer block result victim hbm")


@dataclass(frozen=True)
class SlotDesc:
    """One request of a step's batch, as the DSU describes it."""
    slot: int
    request: int
    seq_len: int          # tokens including the one decoded in this step
    hint: str = "auto"    # DSU residency hint, one of HINTS


@dataclass(frozen=True)
class StepDesc:
    step: int
    slots: tuple
    layers: tuple         # layer order of the step (TE order)
    #: the DSU's restore moves of the step: ``(req, layer, seq_len)`` triples, in order; each
    #: becomes the S ops of blocks ``0 .. ceil(seq_len/16) - 1`` of (req, layer)
    #: (:meth:`FrontEnd.ops` says when)
    restores: tuple = ()


#: odd strides of the set-index hash: consecutive blocks of one (request, layer) go to
#: consecutive sets, and different layers/requests start far apart in the set space
LAYER_STRIDE, REQ_STRIDE = 713, 949


#: ``static`` keeps each request's sink block and its most recent tokens resident
STATIC_RECENT_TOKENS = 128

#: keep-class hash of :meth:`AdaptivePredictor.keep_class`: ``h = (block * KEEP_HASH_MUL[0] +
#: layer * KEEP_HASH_MUL[1] + slot * KEEP_HASH_MUL[2]) mod 2**KEEP_HASH_BITS`` (the compiled
#: twin and the RTL front end compute the same; the RTL keeps the multipliers mod 2**bits)
KEEP_HASH_MUL = (2654435761, 40503, 977)
KEEP_HASH_BITS = 10


#: ways per set of the CDU policy model's replay (:func:`geometry`'s default, and
#: ``sim/fast/cdu_replay.py``'s): ``tricut cdu replay --reserve`` and a sweep's ``cdu-replay``
#: points are checked against it
MODEL_WAYS = 16


def default_reserve(ways):
    """Ways per set kept from the keep class for the prefetch stream when none is given."""
    return int(ways) // 8


def keep_budget(frames, distance):
    """Frames the adaptive predictor may fill with keep blocks: all but 1/8 of them and the
    ``2 × distance`` the prefetch stream keeps in flight."""
    return max(0, frames - frames // 8 - 2 * distance)


def geometry(l2_bytes, block_bytes, hbm_latency_s, hbm_bandwidth, ways=MODEL_WAYS):
    """``(sets, ways, latency, distance)`` of a CDU owning ``l2_bytes``: as many whole sets of
    ``min(ways, frames)`` ways as fit; latency in block slots (the TE consumes blocks at the HBM
    rate); default prefetch distance ``latency + 4``. ``sets`` is 0 when not one block fits."""
    frames = int(l2_bytes / block_bytes)
    ways = min(ways, frames)
    sets = frames // ways if ways else 0
    latency = math.ceil(hbm_latency_s * hbm_bandwidth / block_bytes)
    return sets, ways, latency, latency + 4


def set_index(req, layer, block, sets):
    """The set a block maps to (same formula in the RTL, where ``sets`` is a power of 2)."""
    return (block + LAYER_STRIDE * layer + REQ_STRIDE * req) % sets


#: The DSU's residency bit as a CDU hint: 0 -> ``stream`` (never allocated, never prefetched),
#: 1 -> ``auto`` (allocated; the policy decides what stays). Not ``priority``: keep class on
#: every block of every long request leaves no frames for the prefetch stream (docs/cdu.md).
HINT_OF_RESIDENCY = ("stream", "auto")


def dsu_hints(seq_lens, long_context_tokens=DsuParams.long_context_tokens):
    """The hints the DSU sends (the source's rule, one threshold: long contexts cached, short
    ones streamed), from the same residency bit as the DSU model and firmware."""
    return [HINT_OF_RESIDENCY[residency_bit(n, long_context_tokens)] for n in seq_lens]


# --------------------------------------------------------------------------- core

class CDUCore:
    """Set-associative tag store with LRU ages and residency classes; one Txn per op."""

    COUNTERS = (
        "accesses", "hits", "hits_reuse", "hits_prefetched", "misses", "misses_alloc",
        "misses_bypass", "prefetch_requests", "prefetch_issued", "prefetch_redundant",
        "prefetch_dropped", "prefetch_useful", "prefetch_late", "prefetch_useless",
        "prefetch_unused", "writes", "write_hits", "write_allocs", "write_bypass", "evictions",
        "fills", "hbm_read_bytes", "hbm_write_bytes", "occupancy", "occupancy_peak",
        "restores", "restore_bytes",
    )

    def __init__(self, sets, ways, block_bytes=1, token_bytes=1, latency=0, reserve=None):
        for name, v in (("sets", sets), ("ways", ways), ("block_bytes", block_bytes),
                        ("token_bytes", token_bytes)):
            if not isinstance(v, (int, float)) or v <= 0:
                raise ValueError(f"CDUCore: {name} must be positive, got {v!r}")
        if latency < 0:
            raise ValueError(f"CDUCore: latency must be >= 0, got {latency!r}")
        reserve = default_reserve(ways) if reserve is None else reserve
        if not isinstance(reserve, int) or isinstance(reserve, bool) or not 0 <= reserve < ways:
            raise ValueError(f"CDUCore: reserve must be an integer in [0, ways), got {reserve!r}")
        self.sets, self.ways = int(sets), int(ways)
        self.keep_cap = self.ways - reserve   # keep/pinned blocks a set may hold before a
        #                                       keep request is demoted to normal
        self.block_bytes, self.token_bytes, self.latency = block_bytes, token_bytes, latency
        # entry per (set, way): None or dict(tag, cls, pf, ready); ages: a permutation per set
        self.entries = [[None] * self.ways for _ in range(self.sets)]
        self.ages = [list(range(self.ways)) for _ in range(self.sets)]
        self.where = {}                       # tag -> (set, way)
        self.c = dict.fromkeys(self.COUNTERS, 0)
        self.now = 0
        self.txns = []

    # -- tag store primitives
    def _touch(self, s, w):
        """Make way w the most recently used of set s."""
        ages = self.ages[s]
        old = ages[w]
        if old:
            for i, a in enumerate(ages):
                if a < old:
                    ages[i] = a + 1
            ages[w] = 0

    def effective_class(self, s, cls, skip=-1, current=CLASS_STREAM):
        """The class a block gets: ``cls``, except that a block becoming *keep* while its set
        already holds ``keep_cap`` keep or pinned blocks (not counting way ``skip``, the
        victim being replaced) stays/becomes *normal*: every set keeps ``ways - keep_cap``
        ways for the prefetch stream."""
        if cls != CLASS_KEEP or current >= CLASS_KEEP:
            return cls
        held = sum(1 for w, e in enumerate(self.entries[s])
                   if w != skip and e is not None and e["cls"] >= CLASS_KEEP)
        return CLASS_NORMAL if held >= self.keep_cap else cls

    def victim(self, s):
        """(way, evicted tag or None), or None when every way is pinned."""
        ents = self.entries[s]
        if None in ents:
            return ents.index(None), None
        # lowest class, then the oldest (ages are a permutation: no ties); pinned never
        ages = self.ages[s]
        best_w, best_c, best_a = -1, CLASS_PIN, -1
        for w, e in enumerate(ents):
            c = e["cls"]
            if c < best_c or (c == best_c != CLASS_PIN and ages[w] > best_a):
                best_w, best_c, best_a = w, c, ages[w]
        if best_w < 0:
            return None
        return best_w, ents[best_w]["tag"]

    def _allocate(self, tag, cls, pf, ready):
        """Allocate tag with class cls; returns (allocated, victim tag or None)."""
        s = set_index(*tag, self.sets)
        v = self.victim(s)
        if v is None:
            return False, None
        w, old = v
        if old is not None:
            self.c["evictions"] += 1
            if self.entries[s][w]["pf"]:
                self.c["prefetch_useless"] += 1
            del self.where[old]
        cls = self.effective_class(s, cls, skip=w)
        self.entries[s][w] = {"tag": tag, "cls": cls, "pf": pf, "ready": ready}
        self.where[tag] = (s, w)
        self._touch(s, w)
        self.c["fills"] += 1
        self.c["occupancy"] = len(self.where)
        self.c["occupancy_peak"] = max(self.c["occupancy_peak"], len(self.where))
        return True, old

    def lookup(self, tag):
        return self.where.get(tag)

    # -- operations
    def apply(self, op: Op) -> Txn:
        c = self.c
        tag = (op.req, op.layer, op.block)
        loc = self.where.get(tag)
        victim, hbm = None, False
        if op.kind == "R":
            c["accesses"] += 1
            if loc is not None:
                s, w = loc
                e = self.entries[s][w]
                c["hits"] += 1
                if op.cls != CLASS_STREAM:
                    e["cls"] = self.effective_class(s, op.cls, current=e["cls"])
                if e["pf"]:
                    # first use of a prefetched block: its age stays that of the prefetch,
                    # so a consumed stream block does not push out blocks still in flight
                    e["pf"] = False
                    c["hits_prefetched"] += 1
                    c["prefetch_useful"] += 1
                    if e["ready"] > self.now:
                        c["prefetch_late"] += 1
                else:
                    c["hits_reuse"] += 1
                    self._touch(s, w)
                result = "hit"
            else:
                c["misses"] += 1
                hbm = True
                ok = False
                if op.cls != CLASS_STREAM:
                    ok, victim = self._allocate(tag, op.cls, False, self.now + self.latency)
                result = "miss_alloc" if ok else "miss_bypass"
                c["misses_alloc" if ok else "misses_bypass"] += 1
            self.now += 1
        elif op.kind == "P":
            c["prefetch_requests"] += 1
            if loc is not None:
                result = "pf_redundant"
                c["prefetch_redundant"] += 1
            else:
                ok = False
                if op.cls != CLASS_STREAM:
                    ok, victim = self._allocate(tag, op.cls, True, self.now + self.latency)
                result = "pf_issue" if ok else "pf_drop"
                hbm = ok
                c["prefetch_issued" if ok else "prefetch_dropped"] += 1
        elif op.kind == "W":
            c["writes"] += 1
            c["hbm_write_bytes"] += self.token_bytes
            if loc is not None:
                s, w = loc
                if op.cls != CLASS_STREAM:
                    e = self.entries[s][w]
                    e["cls"] = self.effective_class(s, op.cls, current=e["cls"])
                self._touch(s, w)
                result = "w_hit"
                c["write_hits"] += 1
            else:
                ok = False
                if op.fresh and op.cls != CLASS_STREAM:
                    ok, victim = self._allocate(tag, op.cls, False, self.now)
                result = "w_alloc" if ok else "w_bypass"
                c["write_allocs" if ok else "write_bypass"] += 1
        elif op.kind == "S":
            # G2 -> HBM over the host link: the L2 tag store is not involved
            c["restores"] += 1
            c["restore_bytes"] += self.block_bytes
            result = "restore"
        else:
            raise ValueError(f"CDUCore: unknown op kind {op.kind!r}")
        if hbm:
            c["hbm_read_bytes"] += self.block_bytes
        t = Txn(op.kind, op.req, op.layer, op.block, result, victim, hbm)
        self.txns.append(t)
        return t

    def counters(self):
        """Counters plus ``prefetch_unused`` (issued, still resident and never read)."""
        c = dict(self.c)
        c["prefetch_unused"] = sum(1 for s in self.entries for e in s if e is not None and e["pf"])
        c["occupancy"] = len(self.where)
        c["frames"] = self.sets * self.ways
        c["hit_rate"] = c["hits"] / c["accesses"] if c["accesses"] else 0.0
        c["reuse_hit_rate"] = c["hits_reuse"] / c["accesses"] if c["accesses"] else 0.0
        c["accuracy"] = c["prefetch_useful"] / c["prefetch_issued"] if c["prefetch_issued"] else 0.0
        cov = c["prefetch_useful"] + c["misses"]
        c["coverage"] = c["prefetch_useful"] / cov if cov else 0.0
        return c

    def check(self):
        """Raise AssertionError if any counter identity of the module docstring fails."""
        c = self.counters()
        ids = [
            ("accesses", c["hits"] + c["misses"]),
            ("hits", c["hits_reuse"] + c["hits_prefetched"]),
            ("misses", c["misses_alloc"] + c["misses_bypass"]),
            ("prefetch_requests",
             c["prefetch_issued"] + c["prefetch_redundant"] + c["prefetch_dropped"]),
            ("prefetch_issued",
             c["prefetch_useful"] + c["prefetch_useless"] + c["prefetch_unused"]),
            ("prefetch_useful", c["hits_prefetched"]),
            ("writes", c["write_hits"] + c["write_allocs"] + c["write_bypass"]),
            ("fills", c["misses_alloc"] + c["prefetch_issued"] + c["write_allocs"]),
            ("fills", c["evictions"] + c["occupancy"]),
            ("hbm_read_bytes", (c["misses"] + c["prefetch_issued"]) * self.block_bytes),
            ("hbm_write_bytes", c["writes"] * self.token_bytes),
            ("restore_bytes", c["restores"] * self.block_bytes),
        ]
        for name, value in ids:
            assert c[name] == value, f"counter identity broken: {name} = {c[name]} != {value}"
        assert c["prefetch_late"] <= c["prefetch_useful"]
        assert c["occupancy"] <= c["frames"] and c["occupancy_peak"] <= c["frames"]
        return c


# --------------------------------------------------------------------------- patterns

class Pattern:
    """Which blocks attention reads for (request, layer) at a step, given its seq_len.

    ``full``: every block. ``window``: the sink block(s) plus the most recent ``window``
    tokens (StreamingLLM). ``topk``: the current block plus ``k - 1`` pages chosen per step
    (Quest-like): each page selected at the previous step stays selected with probability
    ``overlap``, the others are redrawn from a per-(request, layer) Zipf-like importance
    distribution (seeded). ``reread``: ``window`` plus, during a burst of ``burst_len``
    steps starting at ``burst_start``, the first ``reread_tokens`` tokens ("summarise the
    above").
    """

    def __init__(self, name, seed=0, sinks=4, window=2048, k=32, overlap=0.85,
                 reread_tokens=1024, burst_start=2, burst_len=2):
        if name not in PATTERNS:
            raise ValueError(f"unknown access pattern {name!r}; "
                             f"choose one of {', '.join(PATTERNS)}")
        if not 0 <= overlap <= 1:
            raise ValueError(f"topk overlap must be in [0, 1], got {overlap!r}")
        for pname, v in (("sinks", sinks), ("window", window), ("k", k),
                         ("reread_tokens", reread_tokens), ("burst_len", burst_len)):
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"pattern parameter {pname} must be a positive integer, got {v!r}")
        self.name, self.seed = name, seed
        self.sinks, self.window, self.k, self.overlap = sinks, window, k, overlap
        self.reread_tokens, self.burst_start, self.burst_len = reread_tokens, burst_start, burst_len
        self._sel = {}    # (req, layer) -> (rng, weights, current selection set)

    def blocks(self, step, req, layer, seq_len):
        nb = -(-seq_len // KV_BLOCK_TOKENS)
        last = nb - 1
        if self.name == "full":
            return list(range(nb))
        win = set(range(-(-self.sinks // KV_BLOCK_TOKENS))) | set(
            range(max(0, last - -(-self.window // KV_BLOCK_TOKENS) + 1), nb))
        if self.name == "window":
            return sorted(b for b in win if b < nb)
        if self.name == "reread":
            if self.burst_start <= step < self.burst_start + self.burst_len:
                win |= set(range(min(nb, -(-self.reread_tokens // KV_BLOCK_TOKENS))))
            return sorted(b for b in win if b < nb)
        # topk
        key = (req, layer)
        if key not in self._sel:
            rng = np.random.default_rng([self.seed, req, layer])
            self._sel[key] = [rng, None, set()]
        st = self._sel[key]
        rng = st[0]
        want = min(self.k - 1, last)            # pages besides the current block
        if st[1] is None or len(st[1]) < last:
            # importance of each page: Zipf-like over a random permutation, fixed per (req, layer)
            old = st[1]
            n_new = last - (0 if old is None else len(old))
            extra = 1.0 / (1.0 + rng.permutation(max(n_new, 1))[:n_new]) ** 1.1
            st[1] = extra if old is None else np.concatenate([old, extra])
        w = st[1][:last]
        keep = {b for b in st[2] if b < last and rng.random() < self.overlap}
        need = want - len(keep)
        if need > 0:
            p = w.copy()
            if keep:
                p[list(keep)] = 0
            p = p / p.sum()
            keep |= set(int(x) for x in rng.choice(last, size=need, replace=False, p=p))
        st[2] = keep
        return sorted(keep | {last})


def read_access_trace(path):
    """Read an access-trace JSONL file: one object per line with ``step``, ``request``,
    ``layer`` (non-negative integers), ``blocks`` (a non-empty list of distinct
    non-negative integers) and optionally ``seq_len`` (default ``16 * (max(blocks) + 1)``).
    Blank lines are skipped. Returns ``{step: {(request, layer): (blocks, seq_len)}}``.
    Errors: :class:`TraceError` naming the file and the line."""
    path = Path(path)
    out = {}
    for where, rec in iter_jsonl_objects(path, TraceError):
        unknown = sorted(set(rec) - {"step", "request", "layer", "blocks", "seq_len"})
        if unknown:
            raise TraceError(f"{where}: unknown field {unknown[0]!r}")
        vals = {}
        for k in ("step", "request", "layer"):
            if k not in rec:
                raise TraceError(f"{where}: missing field {k!r}")
            v = rec[k]
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise TraceError(f"{where}: field {k!r} must be a non-negative integer, got {v!r}")
            vals[k] = v
        blocks = rec.get("blocks")
        if (not isinstance(blocks, list) or not blocks or
                any(not isinstance(b, int) or isinstance(b, bool) or b < 0 for b in blocks)):
            raise TraceError(f"{where}: field 'blocks' must be a non-empty list of non-negative "
                             f"integers, got {blocks!r}")
        if len(set(blocks)) != len(blocks):
            raise TraceError(f"{where}: field 'blocks' repeats a block")
        seq_len = rec.get("seq_len", KV_BLOCK_TOKENS * (max(blocks) + 1))
        if not isinstance(seq_len, int) or isinstance(seq_len, bool) or seq_len < 1:
            raise TraceError(f"{where}: field 'seq_len' must be a positive integer, "
                             f"got {seq_len!r}")
        if max(blocks) * KV_BLOCK_TOKENS >= seq_len:
            raise TraceError(f"{where}: block {max(blocks)} lies beyond seq_len {seq_len}")
        unit = (vals["request"], vals["layer"])
        step = out.setdefault(vals["step"], {})
        if unit in step:
            raise TraceError(f"{where}: step {vals['step']} request {unit[0]} layer {unit[1]} "
                             "appears twice")
        step[unit] = (sorted(blocks), seq_len)
    if not out:
        raise TraceError(f"{path}: no records")
    return out


# --------------------------------------------------------------------------- predictor

def predictor_budget_bits(slots, layers, entries=64, index_bits=14):
    """Storage of :class:`AdaptivePredictor`: per (slot, layer) a prefix run and a suffix
    run length (``index_bits`` each) and ``entries`` scatter entries (block index + 2-bit
    confidence); plus two global step counters (keep candidates, 24 bits each)."""
    return slots * layers * (2 * index_bits + entries * (index_bits + 2)) + 2 * 24


class AdaptivePredictor:
    """Per (slot, layer): the last step's demand set compressed as a prefix run ``[0, a)``,
    a suffix run of ``w`` blocks ending at the current block, and a table of ``entries``
    scattered blocks with 2-bit saturating confidence counters. It predicts for the next
    step ``[0, a)`` + confident scatter entries + the suffix run shifted to the new end.

    Residency: prefix/suffix blocks and scatter entries with confidence >= 2 are *keep*
    candidates. If the previous step's keep candidates exceed the keep budget (the frames
    less 1/8 and less twice the prefetch distance, left to normal blocks) a fixed hash keeps
    a ``budget/candidates`` fraction of them (the rest allocate as normal, so the thrashing
    part cycles through the normal frames and does not evict the kept part). Before it has seen a (slot, layer) it predicts dense, like ``static``.
    """

    def __init__(self, frames, entries=64, distance=16):
        self.entries = entries
        # frames left to the normal class: the prefetch stream (2 x distance) + 1/8
        self.budget = keep_budget(frames, distance)
        self.state = {}          # (slot, layer) -> [a, w, {block: conf}]
        self.keep_prev = 0       # keep candidates seen in the previous step
        self.keep_cur = 0

    def new_step(self):
        self.keep_prev, self.keep_cur = self.keep_cur, 0

    def predict(self, slot, layer, nb):
        """(predicted blocks ascending, set of keep candidates)."""
        st = self.state.get((slot, layer))
        if st is None:
            return list(range(nb)), set()
        a, w, table = st
        pre = set(range(min(a, nb)))
        suf = set(range(max(0, nb - w), nb))
        conf = {b for b, c in table.items() if c >= 1 and b < nb}
        keep = pre | suf | {b for b, c in table.items() if c >= 2 and b < nb}
        return sorted(pre | suf | conf), keep

    def keep_class(self, slot, layer, block, keep):
        """Class to allocate a predicted-keep block with (keep or normal)."""
        if block not in keep:
            return CLASS_NORMAL
        if self.keep_prev <= self.budget:
            return CLASS_KEEP
        m0, m1, m2 = KEEP_HASH_MUL
        h = (block * m0 + layer * m1 + slot * m2) & ((1 << KEEP_HASH_BITS) - 1)
        return CLASS_KEEP if h * self.keep_prev < (1 << KEEP_HASH_BITS) * self.budget \
            else CLASS_NORMAL

    def observe(self, slot, layer, blocks, nb):
        s = set(blocks)
        a = 0
        while a in s:
            a += 1
        w = 0
        while nb - 1 - w in s:
            w += 1
        scatter = {b for b in s if b >= a and b < nb - w}
        st = self.state.setdefault((slot, layer), [0, 0, {}])
        table = st[2]
        for b in list(table):
            if b in scatter:
                table[b] = min(3, table[b] + 1)
            else:
                table[b] -= 1
                if table[b] == 0:
                    del table[b]
        for b in sorted(scatter - set(table)):
            if len(table) < self.entries:
                table[b] = 1
            else:
                low = min(table, key=lambda x: (table[x], x))
                if table[low] <= 1:
                    del table[low]
                    table[b] = 1
        st[0], st[1] = a, w
        self.keep_cur += len(s & (set(range(a)) | set(range(nb - w, nb)))) + \
            sum(1 for b, c in table.items() if c >= 2)


# --------------------------------------------------------------------------- front end

class FrontEnd:
    """Turn step descriptors + demand lists into the CDU operation stream of a policy.

    ``demand(step_desc, slot_desc, layer) -> list of blocks`` gives what attention reads.
    ``static``: keep class for the sink block and the last ``KV_BLOCK_TOKENS * 8`` tokens,
    normal otherwise; predicts every block of the context in order (dense).
    ``adaptive``: :class:`AdaptivePredictor`. ``disabled``: class 0, no prefetch.
    DSU hints: ``stream`` -> class 0 and no prefetch; ``priority`` -> keep class;
    ``pin`` -> pinned class.
    Prefetch: one pointer into the concatenated predicted lists (TE order, crossing step
    boundaries); before the ``i``-th demand read of unit ``k`` it issues prefetches until it
    is ``distance`` blocks past ``base_k + i`` (it first jumps to ``base_k`` if behind); for a
    streamed unit (``stream`` hint) ``i`` counts as 0: its reads do not move the window.
    Units are *planned* (predicted list and classes fixed) lazily, in unit order: at the
    unit's start, or earlier when the prefetch pointer has reached the end of the planned
    lists (the *walk*; only with ``distance > 0`` and a policy other than ``disabled``,
    which predicts nothing).

    Restores (``StepDesc.restores``) are issued when the step's descriptor is *loaded*: just
    before the first unit of that step is planned -- so after every op already issued, and
    before every op of the step, including the prefetches of its blocks that the walk issues
    during the previous step. The descriptors of steps without units are loaded on the way
    to the next step that has one; when the walk finds no unit left to plan, every remaining
    descriptor is loaded; after the last unit, any descriptor not yet loaded is. Each
    ``(req, layer, seq_len)`` triple, in order, gives the S ops of blocks ``0 ..
    ceil(seq_len/16) - 1`` (class 0, not fresh). This is the order in which the RTL front
    end takes the step beats (it expands each restore beat when it takes it).
    """

    def __init__(self, policy, frames, distance=16, entries=64, recent_tokens=STATIC_RECENT_TOKENS):
        if policy not in POLICIES:
            raise ValueError(f"unknown CDU policy {policy!r}; choose one of {', '.join(POLICIES)}")
        if not isinstance(distance, int) or distance < 0:
            raise ValueError(f"prefetch distance must be a non-negative integer, got {distance!r}")
        self.policy, self.distance = policy, distance
        self.recent_blocks = -(-recent_tokens // KV_BLOCK_TOKENS)
        self.pred = AdaptivePredictor(frames, entries, distance) if policy == "adaptive" else None

    def _unit_plan(self, sd, layer):
        """(predicted list, class-of-block function) for one (slot, layer) unit."""
        nb = -(-sd.seq_len // KV_BLOCK_TOKENS)
        if self.policy == "disabled" or sd.hint == "stream":
            return [], lambda b: CLASS_STREAM
        if sd.hint == "pin":
            base = lambda b: CLASS_PIN  # noqa: E731
        elif sd.hint == "priority":
            base = lambda b: CLASS_KEEP  # noqa: E731
        else:
            base = None
        if self.policy == "static":
            pred = list(range(nb))
            rb = self.recent_blocks
            cls = base or (lambda b: CLASS_KEEP if b == 0 or b >= nb - rb else CLASS_NORMAL)
            return pred, cls
        pred, keep = self.pred.predict(sd.slot, layer, nb)
        cls = base or (lambda b: self.pred.keep_class(sd.slot, layer, b, keep))
        return pred, cls

    def ops(self, steps, demand):
        """Yield Ops for the list of StepDesc ``steps``."""
        steps = list(steps)
        units = [(n, st, sd, layer) for n, st in enumerate(steps) for layer in st.layers
                 for sd in st.slots]
        plans = []                     # per unit: (pred, cls) computed lazily in TE order
        pstream = []                   # (unit index, block) from absolute position poff on
        bases = []
        restores = []                  # S ops of descriptors loaded, not yet yielded
        loaded = 0                     # step descriptors loaded so far
        p = poff = 0
        # the walk: the prefetch pointer plans units ahead (disabled predicts nothing)
        walk = self.distance > 0 and self.policy != "disabled"

        def load(upto):
            nonlocal loaded
            for st in steps[loaded:upto]:
                for req, layer, seq_len in st.restores:
                    restores.extend(Op("S", req, layer, b, CLASS_STREAM, False)
                                    for b in range(-(-seq_len // KV_BLOCK_TOKENS)))
            loaded = max(loaded, upto)

        def plan(k):
            while len(plans) <= k:
                n, st, sd, layer = units[len(plans)]
                load(n + 1)
                pr, cls = self._unit_plan(sd, layer)
                bases.append(poff + len(pstream))
                pstream.extend((len(plans), b) for b in pr)
                plans.append((pr, cls))
            return plans[k]

        def flush():
            out = list(restores)
            restores.clear()
            return out

        prev_step = None
        for k, (_, st, sd, layer) in enumerate(units):
            if st is not prev_step:
                if self.pred is not None:
                    self.pred.new_step()
                prev_step = st
            _, cls = plan(k)
            yield from flush()
            d = demand(st, sd, layer)
            if d is None:          # trace without this unit: nothing happens for it
                continue
            nb = -(-sd.seq_len // KV_BLOCK_TOKENS)
            last = (sd.seq_len - 1) // KV_BLOCK_TOKENS
            yield Op("W", sd.request, layer, last, cls(last), (sd.seq_len - 1) % KV_BLOCK_TOKENS == 0)
            p = max(p, bases[k])
            if p - poff > 65536:       # forget the consumed part of the predicted stream
                del pstream[:p - poff]
                poff = p
            # a streamed unit reads from HBM past the prefetcher: the pointer stays
            # `distance` ahead of the unit's start instead of running ahead with its reads
            streamed = self.policy == "disabled" or sd.hint == "stream"
            for i, b in enumerate(d):
                lead = 0 if streamed else i
                if walk:
                    while True:
                        # make sure the plans reach p
                        while p >= poff + len(pstream) and len(plans) < len(units):
                            plan(len(plans))
                        if p >= poff + len(pstream) and len(plans) == len(units):
                            load(len(steps))      # nothing left to plan: the rest is read
                        yield from flush()
                        if p >= poff + len(pstream) or p >= bases[k] + lead + self.distance:
                            break
                        uk, pb = pstream[p - poff]
                        _, ust, usd, ul = units[uk]
                        pcls = plans[uk][1](pb)
                        yield Op("P", usd.request, ul, pb, pcls, False)
                        p += 1
                yield Op("R", sd.request, layer, b, cls(b), False)
            if self.pred is not None and sd.hint != "stream":
                self.pred.observe(sd.slot, layer, d, nb)
        load(len(steps))
        yield from flush()


# --------------------------------------------------------------------------- run

def run(steps, demand, policy, sets, ways, distance=16, block_bytes=1, token_bytes=1,
        latency=0, entries=64, keep_txns=True, reserve=None):
    """Run the front end and the core; returns the :class:`CDUCore` (counters, txns).
    ``reserve``: ways per set kept from the keep class (default ``ways // 8``)."""
    core = CDUCore(sets, ways, block_bytes, token_bytes, latency, reserve)
    fe = FrontEnd(policy, sets * ways, distance, entries)
    for op in fe.ops(steps, demand):
        core.apply(op)
        if not keep_txns:
            core.txns.clear()
    core.check()
    return core
