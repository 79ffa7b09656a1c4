"""KV cache beyond HBM in the fast model: move costs, a prefix cache, and a ledger of KV per tier.

* :func:`transfer_time_s` / :func:`hbm_bytes_of_move`: what one move between HBM (G1) and a tier
  (G2 host memory, G3 NVMe, G3.5 pod storage; :mod:`tricut.models.tiers`) costs: link time, and
  HBM bytes that contend with decode for HBM bandwidth.
* :class:`PrefixCache`: deduplicates 512-token prefix blocks (Mooncake's ``hash_ids``) across
  requests and sessions, with LRU eviction of blocks no running request uses;
  :func:`physical_bound` is the hit rate no cache can beat.
* :class:`LinkQueue`: moves that share a tier's link and direction queue for it, first come
  first served, each at the link's full bandwidth in turn.
* :class:`PrefixCache`'s optional lower level (``lower_tokens``): prefix blocks evicted from HBM
  spill to a tier beyond it (G3 or G3.5), from where a later hit fetches them instead of
  recomputing them.
* :class:`TierLedger`: how many KV tokens each session holds in each tier, changed only by
  explicit adds, moves and drops, and a :meth:`TierLedger.check` the simulator runs every step
  so that no block is ever lost silently.

All sizes are per GPU: under tensor parallelism a GPU holds ``1/TP`` of every token's KV and
moves it over its own link.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Hashable, Iterable, Mapping, Sequence

from tricut.models.tiers import HBM, TIERS, Tier

__all__ = ["TIER_BLOCK_TOKENS", "LedgerError", "transfer_time_s", "hbm_bytes_of_move", "LinkQueue",
           "PrefixCache", "block_references", "physical_bound", "TierLedger"]

#: tokens per block of the KV tiers: Mooncake's prefix-block size, one ``hash_ids`` entry per
#: 512 prompt tokens (the last block may be partial), the unit the prefix cache deduplicates and
#: moves between HBM and the host tiers. Declared here only. Not the 16-token KV block of the
#: CDU and the tile (``models/cdu.py: KV_BLOCK_TOKENS``).
TIER_BLOCK_TOKENS = 512


class LedgerError(AssertionError):
    """KV was lost, created or double-counted: a bug in the simulator, never a result."""


def _bytes(nbytes) -> float:
    if isinstance(nbytes, bool) or not isinstance(nbytes, (int, float)) or not math.isfinite(nbytes) \
            or nbytes < 0:
        raise ValueError(f"bytes to move must be a finite number >= 0, got {nbytes!r}")
    return float(nbytes)


def transfer_time_s(nbytes: float, tier: Tier) -> float:
    """Seconds for one move of ``nbytes`` (per GPU) between HBM and ``tier``, one direction:
    ``latency + nbytes / bandwidth``, with the link to itself. A move of 0 bytes is no move and
    takes 0 s. Moves that share a link and a direction share its bandwidth (the caller queues
    them); the two directions are independent (a park and a restore can overlap)."""
    nbytes = _bytes(nbytes)
    if nbytes == 0:
        return 0.0
    return tier.latency_s + nbytes / tier.bandwidth


def hbm_bytes_of_move(nbytes: float, src: str | None = None, dst: str | None = None) -> float:
    """HBM bytes one move reads or writes: a park reads ``nbytes`` from HBM, a restore writes
    them; either way they contend with decode for HBM bandwidth, so the simulator adds them to
    the HBM bytes of the steps the move overlaps. A move between two tiers beyond HBM (``src``
    and ``dst`` given, neither ``"G1"``) does not touch HBM. Without ``src``/``dst`` the move is
    taken to be between HBM and some tier."""
    nbytes = _bytes(nbytes)
    for name in (src, dst):
        if name is not None and name not in TIERS:
            raise ValueError(f"unknown tier {name!r}; choose one of {', '.join(TIERS)}")
    if src is None and dst is None:
        return nbytes
    if src is not None and src == dst:
        raise ValueError(f"a move needs two different tiers, got {src!r} twice")
    return nbytes if HBM in (src, dst) else 0.0


class LinkQueue:
    """The links between HBM and the tiers beyond it, one queue per (tier, direction).

    A move books its link with :meth:`book`: it starts when both the move is ready (``ready_s``)
    and every move booked earlier on the same tier and direction has finished (first come, first
    served; a move never overtakes one booked before it), and takes :func:`transfer_time_s` of
    its bytes — the whole link is its own while it runs. The two directions (``"out"``: HBM to
    the tier, a park or a spill; ``"in"``: the tier to HBM, a restore or a fetch) and different
    tiers are independent. :attr:`wait_s` sums the time moves waited for their link."""

    DIRECTIONS = ("out", "in")

    def __init__(self):
        self._free: dict[tuple[str, str], float] = {}
        self.wait_s = 0.0
        self.moves = 0

    def free_at(self, tier: Tier, direction: str) -> float:
        """When the link of ``tier`` in ``direction`` is next free (0 if never used)."""
        return self._free.get(self._key(tier, direction), 0.0)

    def _key(self, tier: Tier, direction: str) -> tuple[str, str]:
        if direction not in self.DIRECTIONS:
            raise ValueError(f"direction must be one of {', '.join(self.DIRECTIONS)}, got {direction!r}")
        return tier.tier, direction

    def book(self, ready_s: float, nbytes: float, tier: Tier, direction: str) -> tuple[float, float]:
        """Queue one move of ``nbytes`` that can start at ``ready_s``: ``(start, end)`` in
        seconds. A move of 0 bytes takes no time and does not wait."""
        if not math.isfinite(ready_s):
            raise ValueError(f"a move must be ready at a finite time, got {ready_s!r}")
        key = self._key(tier, direction)
        if _bytes(nbytes) == 0:
            return ready_s, ready_s
        start = max(ready_s, self._free.get(key, 0.0))
        end = start + transfer_time_s(nbytes, tier)
        self._free[key] = end
        self.wait_s += start - ready_s
        self.moves += 1
        return start, end


class PrefixCache:
    """Prefix blocks (by hash) whose KV is cached, shared by every request and session.

    A request's prompt is a list of block hashes, block ``i`` standing for prompt tokens
    ``[i*block_tokens, (i+1)*block_tokens)`` and for everything before them (a Mooncake hash
    identifies a prefix, not a block's own content). Only a contiguous run from the first block
    can be reused: :meth:`lookup` counts it. After a prefill, :meth:`insert` caches the
    request's blocks. Blocks a running request uses are pinned (:meth:`pin`) and never evicted;
    the others leave in least-recently-used order when the cache is full. Within one request's
    blocks the later ones are used "less recently" than the earlier (touched in reverse order),
    so a prefix is evicted from its tail: a block is useless once a block before it is gone.

    ``capacity_tokens`` may be ``math.inf`` (an infinite cache: :attr:`hit_rate` then reaches
    :func:`physical_bound` of the lookups, if the hashes are prefix hashes like Mooncake's).

    ``lower_tokens`` > 0 adds a lower level beyond HBM (a G3 or G3.5 tier): a block evicted from
    HBM is spilled there (:attr:`spilled_blocks`) instead of forgotten, the lower level dropping
    its own least recently spilled block when full. The levels are exclusive: a block is in one
    or the other. A lookup's contiguous run may continue into the lower level
    (:meth:`lookup_split`); :meth:`insert` brings such blocks back into HBM.
    """

    def __init__(self, capacity_tokens: float, block_tokens: int = TIER_BLOCK_TOKENS,
                 lower_tokens: float = 0):
        if isinstance(block_tokens, bool) or not isinstance(block_tokens, int) or block_tokens < 1:
            raise ValueError(f"block_tokens must be an integer >= 1, got {block_tokens!r}")
        if isinstance(capacity_tokens, bool) or not isinstance(capacity_tokens, (int, float)) \
                or math.isnan(capacity_tokens) or capacity_tokens < 0:
            raise ValueError(f"capacity_tokens must be a number >= 0 (or math.inf), got {capacity_tokens!r}")
        if isinstance(lower_tokens, bool) or not isinstance(lower_tokens, (int, float)) \
                or math.isnan(lower_tokens) or lower_tokens < 0:
            raise ValueError(f"lower_tokens must be a number >= 0 (or math.inf), got {lower_tokens!r}")
        self.block_tokens = block_tokens
        self.capacity_blocks: float = math.inf if math.isinf(capacity_tokens) \
            else int(capacity_tokens) // block_tokens
        self.lower_capacity_blocks: float = math.inf if math.isinf(lower_tokens) \
            else int(lower_tokens) // block_tokens
        self._blocks: OrderedDict[Hashable, int] = OrderedDict()   # hash -> pin count; LRU first
        self._lower: OrderedDict[Hashable, None] = OrderedDict()   # spilled blocks; oldest first
        self.lookups_blocks = 0
        self.hit_blocks = 0              # both levels
        self.lower_hit_blocks = 0        # of which in the lower level
        self.inserted_blocks = 0
        self.evicted_blocks = 0          # left HBM (spilled or forgotten)
        self.spilled_blocks = 0          # of which spilled to the lower level
        self.lower_evicted_blocks = 0    # forgotten by the lower level

    # --- state ---
    def __len__(self) -> int:
        return len(self._blocks)

    def __contains__(self, block: Hashable) -> bool:
        return block in self._blocks

    @property
    def cached_tokens(self) -> int:
        return len(self._blocks) * self.block_tokens

    @property
    def pinned_blocks(self) -> int:
        return sum(1 for n in self._blocks.values() if n > 0)

    @property
    def hit_rate(self) -> float:
        """``hit_blocks / lookups_blocks`` (0 before any lookup)."""
        return self.hit_blocks / self.lookups_blocks if self.lookups_blocks else 0.0

    def lru_order(self) -> list:
        """The cached blocks, the next to evict first."""
        return list(self._blocks)

    # --- operations ---
    def _touch(self, hashes: Sequence[Hashable]) -> None:
        for h in reversed(hashes):          # the first block ends most recently used
            self._blocks.move_to_end(h)

    @property
    def lower_blocks(self) -> int:
        return len(self._lower)

    def lookup(self, hashes: Sequence[Hashable]) -> int:
        """The number of leading blocks of ``hashes`` that are cached in either level (a prefix
        hit): the sum of :meth:`lookup_split`."""
        return sum(self.lookup_split(hashes))

    def lookup_split(self, hashes: Sequence[Hashable]) -> tuple[int, int]:
        """``(in_hbm, in_lower)``: the leading blocks of ``hashes`` that are cached, by level
        (the run is contiguous across levels). Counts ``len(hashes)`` looked-up blocks and the
        hits, and marks the HBM hits used."""
        n = lower = 0
        for h in hashes:
            if h in self._blocks:
                n += 1
            elif h in self._lower:
                lower += 1
            else:
                break
        self.lookups_blocks += len(hashes)
        self.hit_blocks += n + lower
        self.lower_hit_blocks += lower
        self._touch([h for h in hashes[:n + lower] if h in self._blocks])
        return n, lower

    def _evict_one(self, keep: set) -> bool:
        for h, pins in self._blocks.items():
            if pins == 0 and h not in keep:
                del self._blocks[h]
                self.evicted_blocks += 1
                if self.lower_capacity_blocks >= 1:
                    if len(self._lower) + 1 > self.lower_capacity_blocks:
                        self._lower.popitem(last=False)
                        self.lower_evicted_blocks += 1
                    self._lower[h] = None
                    self.spilled_blocks += 1
                return True
        return False

    def insert(self, hashes: Sequence[Hashable]) -> int:
        """Cache the blocks of ``hashes`` (after their prefill), evicting least recently used
        unpinned blocks of other requests to make room. Blocks are added in order; when no
        block can be evicted the rest are not cached (a prefix without its head is useless).
        Returns the number of blocks newly cached."""
        keep = set(hashes)
        added = 0
        for h in hashes:
            if h in self._blocks:
                continue
            fetched = self._lower.pop(h, 0) is None       # back from the lower level: it leaves there
            if len(self._blocks) + 1 > self.capacity_blocks and not self._evict_one(keep):
                if fetched:                                # no room in HBM after all: it stays below
                    self._lower[h] = None
                break
            self._blocks[h] = 0
            added += 1
        self.inserted_blocks += added
        self._touch([h for h in dict.fromkeys(hashes) if h in self._blocks])
        return added

    def pin(self, hashes: Iterable[Hashable]) -> None:
        """Mark cached blocks in use by a running request: not evictable until unpinned. Each
        pin is counted (two requests sharing a block pin it twice). A block not cached is an
        error."""
        hashes = list(hashes)
        missing = [h for h in hashes if h not in self._blocks]
        if missing:
            raise KeyError(f"cannot pin block {missing[0]!r}: not cached")
        for h in hashes:
            self._blocks[h] += 1

    def unpin(self, hashes: Iterable[Hashable]) -> None:
        """Undo one :meth:`pin` of each block."""
        hashes = list(hashes)
        counts: dict = {}
        for h in hashes:
            counts[h] = counts.get(h, 0) + 1
        for h, n in counts.items():
            if self._blocks.get(h, 0) < n:
                raise KeyError(f"cannot unpin block {h!r}: not pinned")
        for h, n in counts.items():
            self._blocks[h] -= n


def block_references(hash_lists: Iterable[Sequence[Hashable]]) -> tuple[int, int]:
    """``(references, repeats)``: all block hashes of all requests, and those equal to a hash
    referenced earlier (in an earlier request or earlier in the same one)."""
    seen: set = set()
    refs = repeats = 0
    for hashes in hash_lists:
        for h in hashes:
            refs += 1
            if h in seen:
                repeats += 1
            else:
                seen.add(h)
    return refs, repeats


def physical_bound(hash_lists: Iterable[Sequence[Hashable]]) -> float:
    """The share of block references that repeat an earlier reference: the hit rate of a cache
    of unbounded size that keeps everything, the best any prefix cache can do on these requests
    in this order (0 when there are no references). Mooncake conversation trace: 36.6 %."""
    refs, repeats = block_references(hash_lists)
    return repeats / refs if refs else 0.0


class TierLedger:
    """KV tokens (or blocks: any integer unit, used consistently) held per session per tier.

    Counts change only through :meth:`add` (new KV written to a tier, normally G1 by a prefill
    or a decode step), :meth:`move` and :meth:`drop`. Each session also keeps the total it has
    added and dropped, so :meth:`check` can prove that nothing was lost: for every session the
    tokens held across all tiers equal those added minus those explicitly dropped, no count is
    negative, no tier holds more than its capacity, and (given the simulator's own view of where
    KV is) the ledger agrees with the simulator. Run :meth:`check` at every step.

    ``bytes_per_token``: KV bytes per unit per GPU, for :attr:`bytes_moved` (keyed
    ``(from_tier, to_tier)``). ``capacity``: optional tier -> capacity in the same unit.
    """

    def __init__(self, bytes_per_token: float, capacity: Mapping[str, float] | None = None,
                 tiers: Sequence[str] = TIERS):
        if isinstance(bytes_per_token, bool) or not isinstance(bytes_per_token, (int, float)) \
                or not math.isfinite(bytes_per_token) or bytes_per_token < 0:
            raise ValueError(f"bytes_per_token must be a finite number >= 0, got {bytes_per_token!r}")
        self.tiers = tuple(tiers)
        for t in self.tiers:
            if t not in TIERS:
                raise ValueError(f"unknown tier {t!r}; choose from {', '.join(TIERS)}")
        self.bytes_per_token = float(bytes_per_token)
        self.capacity = dict(capacity or {})
        for t, cap in self.capacity.items():
            self._tier(t)
            if isinstance(cap, bool) or not isinstance(cap, (int, float)) or math.isnan(cap) or cap < 0:
                raise ValueError(f"capacity of {t} must be a number >= 0, got {cap!r}")
        self._held: dict[Hashable, dict[str, int]] = {}
        self._added: dict[Hashable, int] = {}
        self._dropped: dict[Hashable, int] = {}
        self._totals: dict[str, int] = {t: 0 for t in self.tiers}      # tokens per tier, all sessions
        self._holders: dict[str, int] = {t: 0 for t in self.tiers}     # sessions holding > 0 per tier
        self._touched: set = set()           # sessions changed since take_touched()
        self.bytes_moved: dict[tuple[str, str], float] = {
            (a, b): 0.0 for a in self.tiers for b in self.tiers if a != b}
        self.tokens_moved: dict[tuple[str, str], int] = {k: 0 for k in self.bytes_moved}
        self.tokens_dropped: dict[str, int] = {t: 0 for t in self.tiers}
        self.tokens_added: dict[str, int] = {t: 0 for t in self.tiers}
        self.retired = 0             # sessions forgotten by retire()

    def _tier(self, tier: str) -> str:
        if tier not in self.tiers:
            raise ValueError(f"unknown tier {tier!r}; this ledger has {', '.join(self.tiers)}")
        return tier

    @staticmethod
    def _count(tokens) -> int:
        if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0:
            raise ValueError(f"tokens must be an integer >= 0, got {tokens!r}")
        return tokens

    def _session(self, session: Hashable) -> dict[str, int]:
        if session not in self._held:
            self._held[session] = {t: 0 for t in self.tiers}
            self._added[session] = 0
            self._dropped[session] = 0
        return self._held[session]

    def _change(self, session: Hashable, held: dict[str, int], tier: str, delta: int) -> None:
        before = held[tier]
        held[tier] = before + delta
        self._totals[tier] += delta
        self._holders[tier] += (before + delta > 0) - (before > 0)
        self._touched.add(session)

    # --- changes ---
    def add(self, session: Hashable, tier: str, tokens: int) -> None:
        """``tokens`` of new KV of ``session`` written to ``tier`` (a prefill, a decode step, a
        recompute)."""
        self._tier(tier)
        tokens = self._count(tokens)
        self._change(session, self._session(session), tier, tokens)
        self._added[session] += tokens
        self.tokens_added[tier] += tokens

    def _take(self, session: Hashable, tier: str, tokens: int, what: str) -> dict | None:
        """``session``'s counts, after checking it holds ``tokens`` in ``tier``
        (:class:`LedgerError` naming ``what`` otherwise)."""
        held = self._held.get(session)
        have = held[tier] if held else 0
        if tokens > have:
            raise LedgerError(f"session {session!r}: cannot {what}: it holds {have} there")
        return held

    def move(self, session: Hashable, from_tier: str, to_tier: str, tokens: int) -> None:
        """Move ``tokens`` of ``session``'s KV from one tier to another (a park, a restore, a
        spill). Moving more than the session holds there raises :class:`LedgerError`."""
        self._tier(from_tier)
        self._tier(to_tier)
        if from_tier == to_tier:
            raise ValueError(f"a move needs two different tiers, got {from_tier!r} twice")
        tokens = self._count(tokens)
        held = self._take(session, from_tier, tokens, f"move {tokens} tokens from {from_tier} to {to_tier}")
        if tokens == 0:
            return
        self._change(session, held, from_tier, -tokens)
        self._change(session, held, to_tier, tokens)
        self.tokens_moved[(from_tier, to_tier)] += tokens
        self.bytes_moved[(from_tier, to_tier)] += tokens * self.bytes_per_token

    def drop(self, session: Hashable, tier: str, tokens: int) -> None:
        """Explicitly discard ``tokens`` of ``session``'s KV in ``tier`` (to be recomputed, or the
        session ended). Dropping more than it holds there raises :class:`LedgerError`."""
        self._tier(tier)
        tokens = self._count(tokens)
        held = self._take(session, tier, tokens, f"drop {tokens} tokens from {tier}")
        if tokens == 0:
            return
        self._change(session, held, tier, -tokens)
        self._dropped[session] += tokens
        self.tokens_dropped[tier] += tokens

    def drop_all(self, session: Hashable) -> dict[str, int]:
        """Drop everything ``session`` holds (it ended); returns what was dropped per tier."""
        out = dict(self.held(session))
        for tier, n in out.items():
            self.drop(session, tier, n)
        return out

    def retire(self, session: Hashable) -> None:
        """Forget a session that ended and holds nothing (its adds and drops balance), so that
        the per-step checks and totals walk only the live sessions."""
        held = self._held.get(session)
        if held is None:
            return
        if any(held.values()) or self._added[session] != self._dropped[session]:
            raise LedgerError(f"session {session!r} retired while it holds {held}")
        del self._held[session], self._added[session], self._dropped[session]
        self.retired += 1

    # --- queries ---
    def held(self, session: Hashable) -> dict[str, int]:
        """Tokens ``session`` holds per tier (a copy; all zero for an unknown session)."""
        return dict(self._held.get(session) or {t: 0 for t in self.tiers})

    def total(self, tier: str) -> int:
        """Tokens held in ``tier`` by all sessions (a running total: O(1))."""
        return self._totals[self._tier(tier)]

    def holders(self, tier: str) -> int:
        """How many sessions hold more than 0 tokens in ``tier`` (O(1))."""
        return self._holders[self._tier(tier)]

    def __len__(self) -> int:
        """Sessions the ledger tracks (not retired)."""
        return len(self._held)

    def take_touched(self) -> set:
        """The sessions whose counts changed since the previous call (retired ones included)."""
        touched, self._touched = self._touched, set()
        return touched

    def totals(self) -> dict[str, int]:
        return {t: self.total(t) for t in self.tiers}

    def sessions(self) -> list:
        return list(self._held)

    # --- the invariant ---
    def check(self, observed: Mapping[Hashable, Mapping[str, int]] | None = None,
              sessions: Iterable[Hashable] | None = None) -> None:
        """Raise :class:`LedgerError` unless: every count is >= 0; every session holds, across
        all tiers, exactly what it added minus what it explicitly dropped; no tier is over its
        capacity; and, when ``observed`` (session -> tier -> tokens: where the simulator's own
        state says KV is) is given, it equals the ledger for every session and tier (a session
        or tier missing from it counts as 0). ``sessions``: check only these sessions (against
        ``observed`` too), in time proportional to their number; None: every session, and the
        running per-tier totals against the sessions' counts."""
        names = list(self._held) if sessions is None else list(sessions)
        tokens, holders = dict.fromkeys(self.tiers, 0), dict.fromkeys(self.tiers, 0)
        for s in names:
            held = self._held.get(s)
            if held is None:
                continue
            for t, n in held.items():
                if n < 0:
                    raise LedgerError(f"session {s!r}: {n} tokens in {t} (negative)")
                tokens[t] += n
                holders[t] += n > 0
            expect = self._added[s] - self._dropped[s]
            have = sum(held.values())
            if have != expect:
                what = (f"{expect - have} lost without a drop" if have < expect
                        else f"{have - expect} appeared without an add")
                raise LedgerError(f"session {s!r}: holds {have} tokens across tiers, but added "
                                  f"{self._added[s]} and dropped {self._dropped[s]}: {what}")
        if sessions is None:
            for t in self.tiers:
                if (tokens[t], holders[t]) != (self._totals[t], self._holders[t]):
                    raise LedgerError(f"{t}: the running count is {self._totals[t]} tokens in {self._holders[t]} "
                                      f"sessions, the sessions hold {tokens[t]} in {holders[t]}")
        for t, cap in self.capacity.items():
            if self.total(t) > cap:
                raise LedgerError(f"{t} holds {self.total(t)} tokens, over its capacity {cap:g}")
        if observed is not None:
            if sessions is None:
                names += [s for s in observed if s not in self._held]
            for s in names:
                mine = self._held.get(s, {})
                theirs = observed.get(s, {})
                for t in theirs:
                    self._tier(t)
                for t in self.tiers:
                    a, b = mine.get(t, 0), theirs.get(t, 0)
                    if a != b:
                        raise LedgerError(f"session {s!r}: the ledger has {a} tokens in {t}, "
                                          f"the simulator {b}")
