"""Agentic sessions through the system model: turns separated by tool-call gaps, the session's
KV kept in HBM, parked in G2 host memory or dropped during a gap, and prefix reuse.

A session (:mod:`.sessions`) is a list of turns. Turn 0 arrives at the session's arrival time
and runs like any request: its prompt is prefilled (minus the blocks the prefix cache holds),
the prefill gives the first token, the DSU decodes the rest. When a turn that has a successor
ends, the DSU parks its slot (``models/dsu.py``, "Parked slots"); what happens to its KV
during the tool call is the **park policy**:

* ``keep`` — the KV stays in HBM, holding its share of the DSU's KV budget.
* ``park`` — the KV moves to G2 (host memory) when the turn ends and back when the tool
  returns: the next turn waits for the restore.
* ``park-early`` — as ``park``, but the restore starts ``restore_lead_s`` before the tool is
  expected to return (the tool's duration is taken as known: an oracle that a tool-call-aware
  DSU approximates), so the next turn need not wait; default lead: the restore's own time.
* ``drop`` — the KV is dropped; the next turn is a new request whose prompt is the whole
  context, prefilled again (recompute), minus what the prefix cache still holds.

When the tool returns (turn ``k``'s input is ready) and the session's KV is in HBM, the new
input tokens are prefilled onto it: the marginal cost of a prefill that extends ``context``
tokens (:meth:`StepModel.prefill_batch_time` with ``contexts``; disaggregated, the prefill
pool also receives the context's KV over the prefill link). Then the DSU continues the parked
slot (``continue_turn``) and decodes the turn's output tokens; the turn's first token is its
first decode step's (a continued turn's prefill emits none). A turn's TTFT is measured from the
tool's return (turn 0: the session's arrival).

Moves between tiers take link time (:func:`.kv_tiers.transfer_time_s`: the tier's latency +
bytes / its bandwidth, per GPU, the KV shard this GPU holds) and queue for their link
(:class:`.kv_tiers.LinkQueue`: one move at a time per tier and direction, first come first
served; a restore also waits for its own park to have finished), and contend with decode for
HBM: the bytes a move reads from or writes into HBM are added to the next decode step's HBM
traffic (its time grows by bytes / HBM bandwidth).

**Eviction.** When no turn is decoding and parked sessions hold so much of the DSU's KV budget
that the continue (or restore) at the head of its queue cannot be served, no budget would ever
be freed: the host evicts a parked session's KV from HBM (the DSU's state is taken between
rounds and resumed without its slot, as in the host takeover, ``DsuModel.resume``), first a
session whose tool is still running (the one that returns last), else the continue queued
last. The evicted session's next turn is then a new request whose prompt is the whole context,
prefilled again (recompute), as under ``drop``. Under ``keep`` this is how a run whose parked
sessions fill HBM goes on (counted in ``evictions``).

Tier capacities are enforced. A park goes to G2 while the parked KV fits there; when it does
not, to G3 (local NVMe) if the system has one with room; when neither has room, the host drops
the KV and recomputes it when the session is restored (the restore then takes the prefill time
of the context instead of a transfer; the recompute is a delay of that session's next turn and
does not pre-empt decode). With a prefix cache and ``prefix_spill`` (a G3 or G3.5 tier), prefix
blocks evicted from HBM spill there, and a later request whose cached prefix continues into
them fetches them over that tier's link before its prefill instead of recomputing them.

A :class:`.kv_tiers.TierLedger` counts every session's KV tokens per tier after every round,
holds each tier to its capacity, and is checked against the DSU model's own view of where every
session's KV is (every round while the sessions it holds fit in the DSU's slots; with a long
queue, as often as the walk costs no more than the rounds between, the changed sessions alone
in those rounds, and at the end); a token is never lost: it is parked, restored or explicitly
dropped (and recomputed).
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field, replace

import numpy as np

from tricut.models.dsu import PARK_POLICIES, DsuModel, DsuParams, RequestSpec

from tricut.models.tiers import HBM

from .kv_tiers import LinkQueue, PrefixCache, TierLedger, transfer_time_s
from .metrics import percentile
from .sessions import Session
from .system import SimResult, _Run
from .timing import StepModel
from .workload import Request

__all__ = ["AgenticOptions", "AgenticResult", "simulate_sessions", "PARK_POLICIES", "needs_g2"]

G2, G3 = "G2", "G3"


def needs_g2(policy: str) -> bool:
    return policy in ("park", "park-early")


@dataclass(frozen=True)
class AgenticOptions:
    park_policy: str = "keep"
    g2: object | None = None               # the G2 tier (models/tiers.py); needed by park, park-early
    restore_lead_s: float | None = None    # park-early: start this long before the tool returns
    prefix_cache_tokens: int = 0           # HBM tokens set aside for shared prefix blocks (0: none)
    g3: object | None = None               # where parks go when G2 is full (None: no G3, recompute)
    prefix_spill: object | None = None     # a G3 or G3.5 tier: prefix blocks evicted from HBM go there

    def __post_init__(self):
        if self.park_policy not in PARK_POLICIES:
            raise ValueError(f"park policy must be one of {', '.join(PARK_POLICIES)}, got {self.park_policy!r}")
        if needs_g2(self.park_policy) and self.g2 is None:
            raise ValueError(f"park policy {self.park_policy} needs a G2 tier (host memory): give --tiers "
                             "with a g2 tier")
        if self.restore_lead_s is not None and (not math.isfinite(self.restore_lead_s) or self.restore_lead_s < 0):
            raise ValueError(f"restore lead must be a finite number of seconds >= 0, got {self.restore_lead_s!r}")
        if not isinstance(self.prefix_cache_tokens, int) or self.prefix_cache_tokens < 0:
            raise ValueError(f"prefix cache tokens must be an integer >= 0, got {self.prefix_cache_tokens!r}")
        if self.prefix_spill is not None:
            if self.prefix_spill.tier not in ("G3", "G3.5"):
                raise ValueError(f"prefix blocks spill to G3 or G3.5, not {self.prefix_spill.tier}")
            if not self.prefix_cache_tokens:
                raise ValueError("a prefix spill tier needs a prefix cache (prefix cache tokens > 0)")


@dataclass
class AgenticResult:
    summary: dict
    sim: SimResult
    turn_ttft_s: dict = field(repr=False)          # turn index -> [TTFT of that turn, per session]
    kv_bytes_per_token: float = field(repr=False)  # this GPU's share
    occupancy: np.ndarray = field(repr=False)      # per round: time s, KV tokens in HBM of running and
                                                   # waiting turns, of parked slots, in G2; sessions with KV in HBM


@dataclass
class _Turn:
    session: Session
    k: int
    tid: int
    dsu_id: int                         # the DSU request: the session's slot, or (drop) the turn's own
    ready_s: float = math.nan           # input ready (turn 0: arrival; later: the tool returned)
    restored: bool = True               # the session's KV is in HBM
    sent: bool = False                  # handed to the prefill path
    done_s: float | None = None
    failed: bool = False


class _SessionRun(_Run):
    """The request simulation (:class:`tricut.sim.fast.system._Run`) with turns. Every turn's
    output tokens come from decode steps (its prefill emits none), so that a continued turn
    and a new one are timed alike."""

    def __init__(self, sessions, step_model: StepModel, dsu: DsuParams, opts: AgenticOptions, seed, mode,
                 progress=None, energy_file=None):
        if mode == "chunked":
            raise ValueError("sessions run with prefill disaggregated or colocated, not chunked")
        self.opts = opts
        self.sessions = list(sessions)
        self.turns: dict[int, _Turn] = {}
        self.slot_of: dict[int, int] = {}          # session id -> the DSU request holding its slot
        self.current: dict[int, int] = {}          # DSU request id -> the turn running under it
        self.events: list = []                     # (time, seq, kind, tid)
        self._seq = 0
        self.kv_bytes = step_model.kv_token_bytes        # per token, this GPU's shard
        spill = opts.prefix_spill
        self.cache = PrefixCache(opts.prefix_cache_tokens,
                                 lower_tokens=spill.capacity_bytes // self.kv_bytes if spill else 0) \
            if opts.prefix_cache_tokens else None
        self.park_tiers = [t for t in (opts.g2, opts.g3) if t is not None]
        self.ledger = TierLedger(self.kv_bytes, {t.tier: t.capacity_bytes // self.kv_bytes for t in self.park_tiers})
        self.links = LinkQueue()
        self.host_tier: dict[int, object] = {}     # session id -> the Tier holding its parked KV (None: dropped)
        self.park_end: dict[int, float] = {}       # session id -> when its park's transfer ends
        self.latest: dict[int, _Turn] = {}         # session id -> its latest turn
        self.parks_to = {t.tier: 0 for t in self.park_tiers}
        self.parks_dropped = 0             # parks that found no room in any tier: recomputed at restore
        self.evictions = 0                 # parked sessions evicted from HBM to let a queued turn run
        self.recomputed_tokens = 0
        self.g3_peak = 0                   # G3 tokens, the most at the end of any round
        self.prefix_bytes_spilled = 0.0
        self.prefix_bytes_fetched = 0.0
        self.move_bytes = 0.0              # HBM bytes of tier moves not yet charged to a step
        self.rounds_unchecked = 0          # rounds since the ledger was last checked against the DSU
        self.prefill_tokens = 0            # prompt tokens prefilled
        self.prefill_saved = 0             # prompt tokens not prefilled: cached prefix blocks, kept context
        self.flops_saved = 0.0             # prefill FLOPs those tokens would have cost (the TP group)
        self.last_parts: dict[int, tuple[int, int]] = {}   # id -> (tokens, context) of its last prefill
        self.occupancy = []
        first = [self._request(self._new_turn(s, 0)) for s in self.sessions]
        super().__init__(first, step_model, dsu, seed, mode, None, 0.0, None, {}, progress,
                         energy_file=energy_file)
        self.turn_count = sum(len(s.turns) for s in self.sessions)

    def _scheduler(self, dsu: DsuParams) -> DsuModel:
        """Sessions park and restore their slots through the DSU model: it schedules them with
        every stack (whole outputs reserved, no pre-emption)."""
        return DsuModel(dsu)

    # -- turns -------------------------------------------------------------------------------------
    def _new_turn(self, session: Session, k: int) -> _Turn:
        tid = len(self.turns)
        same_slot = k > 0 and self.opts.park_policy != "drop"
        t = _Turn(session, k, tid, self.slot_of[session.id] if same_slot else tid)
        if k == 0:
            self.slot_of[session.id] = tid
            t.ready_s = session.turns[0].gap_s
        self.turns[tid] = t
        self.latest[session.id] = t
        return t

    def _continued(self, t: _Turn) -> bool:
        """A turn that extends its session's parked slot (not turn 0, not under drop)."""
        return t.dsu_id != t.tid

    def _request(self, t: _Turn) -> Request:
        """What the prefill path sees: a whole prompt, or a continued turn's new input."""
        s, k = t.session, t.k
        prompt = s.turns[k].input_tokens if self._continued(t) else s.prompt_tokens(k)
        return Request(t.tid, t.ready_s, prompt, s.turns[k].output_tokens, s.turns[k].prefix_hashes)

    def _continues(self, t: _Turn) -> bool:
        return t.k + 1 < len(t.session.turns) and self.opts.park_policy != "drop"

    def _event(self, at: float, kind: str, tid: int) -> None:
        heapq.heappush(self.events, (at, self._seq, kind, tid))
        self._seq += 1

    def _next_extra_event(self):
        return self.events[0][0] if self.events else None

    def _extra_due(self) -> None:
        while self.events and self.events[0][0] <= self.t:
            at, _, kind, tid = heapq.heappop(self.events)
            t = self.turns[tid]
            if kind == "restore":            # ask the DSU to bring the KV back (it waits for budget)
                self.model.restore(t.dsu_id)
            elif kind == "restored":
                t.restored = True
                self._start(t)
            elif kind == "ready":            # the tool returned
                self._start(t)
            # "evicted": room was made; the loop runs the next round at once

    def _start(self, t: _Turn) -> None:
        """Hand the turn to the prefill path once its input is ready and its KV in HBM."""
        if t.sent or not t.restored or self.t < t.ready_s:
            return
        t.sent = True
        r = self._request(t)
        self.by_id[t.tid] = r
        self.requests.append(r)
        self._send(r, self.t)
        self.arrival[t.tid] = t.ready_s          # TTFT counts from the tool's return

    def _send(self, r: Request, at: float) -> None:
        t = self.turns[r.id]
        self.current[t.dsu_id] = t.tid
        super()._send(r, at)

    # -- prefill: cached prefix blocks are not recomputed; a continued turn extends its context --------
    def _cached(self, r: Request) -> tuple[int, int]:
        """``(cached, fetched)``: prompt tokens whose KV the prefix cache holds, and how many of
        them are in its spill tier (fetched before the prefill). A continued turn's context is
        its own slot's KV already (counted as saved there); its new input is the session's own,
        so it takes nothing from the cache."""
        if self.cache is None or not r.prefix_hashes or self._continued(self.turns[r.id]):
            return 0, 0
        in_hbm, lower = self.cache.lookup_split(r.prefix_hashes)
        bt = self.cache.block_tokens
        cached = min((in_hbm + lower) * bt, r.prompt_tokens - 1)
        return cached, max(0, cached - in_hbm * bt)

    def _context(self, t: _Turn) -> int:
        return t.session.context_before(t.k) if self._continued(t) else 0

    def _prefill_parts(self, rid: int) -> tuple[int, int, float]:
        """(tokens to compute, tokens they attend to, seconds until spilled prefix blocks are
        back in HBM) of one prefill; counts and caches it."""
        r, t = self.by_id[rid], self.turns[rid]
        cached, fetched = self._cached(r)
        wait = 0.0
        if self.cache is not None and r.prefix_hashes:
            spilled = self.cache.spilled_blocks
            self.cache.insert(r.prefix_hashes)
            tier = self.opts.prefix_spill
            if tier is not None:
                out = (self.cache.spilled_blocks - spilled) * self.cache.block_tokens * self.kv_bytes
                fetch = fetched * self.kv_bytes
                self.links.book(self.t, out, tier, "out")
                wait = self.links.book(self.t, fetch, tier, "in")[1] - self.t
                self.prefix_bytes_spilled += out
                self.prefix_bytes_fetched += fetch
                self.move_bytes += out + fetch
        n, c = r.prompt_tokens - cached, self._context(t) + cached
        self.last_parts[rid] = (n, c)
        self.prefill_tokens += n
        self.prefill_saved += c
        self.flops_saved += self._flops_of(c)
        return n, c, wait

    def _flops_of(self, c: int) -> float:
        """What recomputing ``c`` more tokens would cost: their GEMMs and their own causal
        attention (prefill FLOPs of n + c tokens minus those of n tokens after c), on every GPU
        of the group."""
        return (self.sm.gemv_flops_per_request * c + self.sm._prefill_attention_flops(c, 0)) * self.sm.tp

    def _pool_prefill_s(self, r: Request) -> float:
        n, context, wait = self._prefill_parts(r.id)
        return wait + self.sm.prefill_time(n, context)

    def _prefill_parts_of(self, rids) -> tuple[list[int], list[int]]:
        """Each turn's new tokens and the context they extend (for the prefill's energy)."""
        return [self.last_parts[r][0] for r in rids], [self.last_parts[r][1] for r in rids]

    def _batch_prefill_s(self, rids) -> float:
        parts = [self._prefill_parts(rid) for rid in rids]
        return max(w for _, _, w in parts) + \
            self.sm.prefill_batch_time([n for n, _, _ in parts], self.rng, [c for _, c, _ in parts])

    # -- into the DSU --------------------------------------------------------------------------------
    def _first_token(self, rid: int, at: float) -> None:
        """The prefill ended: no token (decode emits them all); the DSU takes the turn."""
        self.times[rid] = []
        if self.mode == "disaggregated":
            heapq.heappush(self.ready, (at, rid))
        else:
            self._submit(self.by_id[rid])

    def _submit(self, r: Request) -> None:
        t = self.turns[r.id]
        if self._continued(t):
            self.model.continue_turn(t.dsu_id, r.prompt_tokens, r.output_tokens, self._continues(t))
        else:
            self.model.submit(RequestSpec(t.dsu_id, r.prompt_tokens, r.output_tokens,
                                          continues=self._continues(t)))
            self.intake.append(t.dsu_id)
        self.ledger.add(t.session.id, HBM, r.prompt_tokens)

    def _token(self, request: int) -> None:
        t = self.turns[self.current[request]]
        self.times[t.tid].append(self.t)
        self.ledger.add(t.session.id, HBM, 1)

    def _request_ended(self, outcome) -> None:
        t = self.turns[self.current[outcome.request]]
        t.failed = outcome.status != "completed"
        self._turn_done(t, self.t)

    def _finished(self, rid: int, at: float) -> None:
        """Refused by the DSU at admission (too large): the turn, and its session, end."""
        super()._finished(rid, at)
        t = self.turns[rid]
        if t.done_s is None:
            t.failed = True
            self._turn_done(t, at)

    def _turn_done(self, t: _Turn, at: float) -> None:
        t.done_s = at
        self.finish[t.tid] = at
        s = t.session
        last = t.k + 1 >= len(s.turns) or t.failed
        if last or self.opts.park_policy == "drop":       # the DSU freed the slot: its KV is dropped
            self.ledger.drop_all(s.id)
        if last:
            self.ledger.retire(s.id)
            return
        nxt = self._new_turn(s, t.k + 1)
        nxt.ready_s = at + s.turns[t.k + 1].gap_s
        nxt.restored = not needs_g2(self.opts.park_policy)
        self._event(nxt.ready_s, "ready", nxt.tid)      # park policies: the restore is asked for at the park

    # -- parks and restores: where the KV goes, how long its link takes -------------------------------
    def _park_tier(self, tokens: int):
        """The first park tier (G2, then G3) with room for ``tokens`` more, or None."""
        for tier in self.park_tiers:
            if self.ledger.total(tier.tier) + tokens <= self.ledger.capacity[tier.tier]:
                return tier
        return None

    def _park(self, sid: int, tokens: int) -> None:
        tier = self._park_tier(tokens)
        self.host_tier[sid] = tier
        nxt = self.latest[sid]
        if tier is None:                  # no room beyond HBM: drop now, recompute at the restore
            self.ledger.drop(sid, HBM, tokens)
            self.parks_dropped += 1
            restore_s = self._recompute_s(tokens)
        else:
            nbytes = tokens * self.kv_bytes
            self.ledger.move(sid, HBM, tier.tier, tokens)
            self.move_bytes += nbytes
            self.park_end[sid] = self.links.book(self.t, nbytes, tier, "out")[1]
            self.parks_to[tier.tier] += 1
            restore_s = transfer_time_s(nbytes, tier)
        lead = 0.0
        if self.opts.park_policy == "park-early":
            lead = restore_s if self.opts.restore_lead_s is None else self.opts.restore_lead_s
        self._event(max(self.t, nxt.ready_s - lead), "restore", nxt.tid)

    def _recompute_s(self, tokens: int) -> float:
        if self.mode == "disaggregated":
            return self.sm.prefill_time(tokens)
        return self.sm.prefill_batch_time([tokens], self.rng)

    def _restore(self, sid: int, tokens: int) -> None:
        tier = self.host_tier.pop(sid)
        if tier is None:
            self.ledger.add(sid, HBM, tokens)
            self.recomputed_tokens += tokens
            done = self.t + self._recompute_s(tokens)
        else:
            nbytes = tokens * self.kv_bytes
            self.ledger.move(sid, tier.tier, HBM, tokens)
            self.move_bytes += nbytes
            done = self.links.book(max(self.t, self.park_end.pop(sid)), nbytes, tier, "in")[1]
        self._event(done, "restored", self.latest[sid].tid)

    # -- after each round: the DSU's KV moves -----------------------------------------------------------
    def _after_round(self, rnd, step) -> None:
        for mv in self.model.moves:       # park / restore (a turn that ends under drop is dropped there)
            sid = self.turns[mv.request].session.id   # mv.request: a turn-0 (slot) or a dropped turn's id
            if mv.kind == "park":
                self._park(sid, mv.tokens)
            elif mv.kind == "restore":
                self._restore(sid, mv.tokens)
        self.model.moves.clear()
        for o in rnd.ended:              # a continue that can never fit: failed, its slot freed
            t = self.turns[self.current.get(o.request, o.request)]
            if o.status == "failed" and t.done_s is None:
                t.failed = True
                self._turn_done(t, self.t)
        if step is None:
            self._evict_if_stuck()
        self._check_ledger()
        parked = self._parked_hbm_tokens()
        self.occupancy.append((self.t, self.ledger.total(HBM) - parked, parked, self.ledger.total(G2),
                               self.ledger.holders(HBM)))
        self.g3_peak = max(self.g3_peak, self.ledger.total(G3))

    def _evict_if_stuck(self) -> None:
        """Nothing ran, nothing is decoding, and a continue or restore waits for room that only
        a decoding turn could free: evict one parked session's KV from HBM (module docstring,
        "Eviction"). A session whose next turn's prefill is under way is not evicted."""
        m = self.model
        if not (m.continues or m.restores) or any(sl is not None and sl.state == "active" for sl in m.slots):
            return
        head = m.continues[0].request if m.continues else None
        queued = [c.request for c in m.continues]
        waiting, late = [], []
        for i, sl in enumerate(m.slots):
            if sl is None or sl.kv_where != "hbm" or sl.request == head:
                continue
            t = self.latest[self.turns[sl.request].session.id]
            if not t.sent:
                waiting.append((t.ready_s, i))
            elif sl.request in queued:
                late.append((queued.index(sl.request), i))
        if waiting or late:
            self._evict(max(waiting)[1] if waiting else max(late)[1])

    def _evict(self, index: int) -> None:
        m, victim = self.model, self.model.slots[index]
        sid = self.turns[victim.request].session.id
        self.model = DsuModel.resume(
            m.params, m.round, {i: sl for i, sl in enumerate(m.slots) if sl is not None and i != index},
            m.outcomes, m.arrivals, m.rollbacks, m.timeouts, m.restores,
            [c for c in m.continues if c.request != victim.request])
        for spec in m.intake:
            self.model.submit(spec)
        self.ledger.drop(sid, HBM, self.ledger.held(sid).get(HBM, 0))
        self.evictions += 1
        t = self.latest[sid]
        context = self._context(t)
        t.dsu_id = self.slot_of[sid] = t.tid        # its next turn: a new request, the whole context
        if t.sent:                                  # its continue was queued: prefilled again, whole
            self.prefill_saved -= context
            self.flops_saved -= self._flops_of(context)
            self.requests.remove(self.by_id[t.tid])
            t.sent = False
            self._start(t)
        self._event(self.t, "evicted", t.tid)

    def _check_ledger(self, full: bool = False) -> None:
        """The ledger against the DSU model's view (:meth:`_dsu_view`), which walks every
        session the DSU holds: it runs when that costs at most the slot work of the rounds since
        it last ran (so every round while the sessions held fit in the slots), and at the end
        (``full``). In the rounds between, the sessions whose counts changed are checked alone;
        a per-round walk of a queue of 10**5 sessions made long overloaded runs quadratic."""
        m = self.model
        self.rounds_unchecked += 1
        touched = self.ledger.take_touched()
        if full or self.rounds_unchecked * len(m.slots) >= len(self.ledger) + len(m.intake) + len(m.continues):
            self.ledger.check(observed=self._dsu_view())
            self.rounds_unchecked = 0
        else:
            self.ledger.check(sessions=touched)

    def _parked_hbm_tokens(self) -> int:
        """KV tokens of parked slots whose KV is in HBM."""
        return sum(sl.seq_len for sl in self.model.slots
                   if sl is not None and sl.state == "parked" and sl.kv_where == "hbm")

    def _dsu_view(self) -> dict:
        """Where the DSU model says each session's KV is: its slot's ``seq_len`` in HBM or G2,
        plus what waits in its intake (a prompt) or continue queue (new input)."""
        seen: dict = {}
        m = self.model
        for slot in m.slots:
            if slot is None:
                continue
            sid = self.turns[slot.request].session.id
            tier = HBM
            if slot.kv_where == "g2":     # the DSU's "g2" is wherever the host put it, or dropped
                host = self.host_tier.get(sid)
                if host is None:
                    continue
                tier = host.tier
            seen.setdefault(sid, {})[tier] = seen.get(sid, {}).get(tier, 0) + slot.seq_len
        for spec in m.intake:
            sid = self.turns[spec.id].session.id
            seen.setdefault(sid, {})[HBM] = seen.get(sid, {}).get(HBM, 0) + spec.prompt_tokens
        for c in m.continues:
            sid = self.turns[c.request].session.id
            seen.setdefault(sid, {})[HBM] = seen.get(sid, {}).get(HBM, 0) + c.new_tokens
        return seen

    def _timed_step(self, rnd, chunk):
        st = super()._timed_step(rnd, chunk)
        if self.move_bytes:           # tier moves read / write HBM beside the step, over the tier's link
            extra = self.move_bytes / self.sm.gpu.hbm_bandwidth
            st = replace(st, time_s=st.time_s + extra, hbm_read_bytes=st.hbm_read_bytes + self.move_bytes,
                         link_bytes=st.link_bytes + self.move_bytes)
            self.move_bytes = 0.0
        return st

    def _finished_ok(self, rid) -> bool:
        t = self.turns[rid]
        return t.done_s is not None and not t.failed and bool(self.times.get(rid))


def simulate_sessions(sessions, step_model: StepModel, dsu: DsuParams, options: AgenticOptions, seed: int = 0,
                      prefill: str | None = None, progress=None, ttft_slo_s=None, tpot_slo_s=None,
                      energy_file=None) -> AgenticResult:
    """Run the sessions to completion under one park policy (module docstring)."""
    if not sessions:
        raise ValueError("no sessions to simulate")
    if dsu.kv_capacity_tokens - options.prefix_cache_tokens < 1:
        raise ValueError(f"the prefix cache ({options.prefix_cache_tokens:,} tokens) leaves no KV budget "
                         f"(the DSU's is {dsu.kv_capacity_tokens:,} tokens)")
    params = replace(dsu, park_policy=options.park_policy,
                     kv_capacity_tokens=dsu.kv_capacity_tokens - options.prefix_cache_tokens)
    run = _SessionRun(sessions, step_model, params, options, seed, prefill or step_model.stack.prefill, progress,
                      energy_file)
    run.loop()
    run._check_ledger(full=True)
    return _result(run, ttft_slo_s, tpot_slo_s)


def _result(run: _SessionRun, ttft_slo_s, tpot_slo_s) -> AgenticResult:
    lost = [t for t in run.turns.values() if t.done_s is None]
    sim_failed = sum(t.failed for t in run.turns.values())
    if lost:
        m = run.model
        if m.continues or m.restores:
            held = sum(sl.seq_len for sl in m.slots if sl is not None and sl.kv_where == "hbm")
            raise ValueError(
                f"deadlock under park policy {run.opts.park_policy}: {len(lost)} turns cannot run because "
                f"{m.parked_slots} parked sessions hold {held:,} of the DSU's {m.params.kv_capacity_tokens:,} KV "
                f"tokens in HBM while their next turns wait for room ({len(m.continues)} continues, "
                f"{len(m.restores)} restores queued); use park or drop, or a larger KV budget")
        t = lost[0]
        raise AssertionError(f"{len(lost)} turns never finished (session {t.session.id} turn {t.k} first): a bug")
    # a turn's tokens all come from decode steps, so "admitted between its first and second
    # token" does not hold: its wait for a slot is inside its TTFT, and the decode-queue metrics
    # are left undefined
    run.admitted = {}
    sim = run.result(ttft_slo_s, tpot_slo_s)
    turn_ttft: dict[int, list[float]] = {}
    for t in run.turns.values():
        times = run.times.get(t.tid)
        if times:
            turn_ttft.setdefault(t.k, []).append(times[0] - t.ready_s)
    later = [x for k, v in turn_ttft.items() if k > 0 for x in v]
    last_done: dict[int, float] = {}
    for t in run.turns.values():
        last_done[t.session.id] = max(t.done_s, last_done.get(t.session.id, t.done_s))
    sess_time = [last_done[s.id] - s.turns[0].gap_s for s in run.sessions]
    occ = np.array(run.occupancy, dtype=float).reshape(-1, 5)
    if not len(occ):
        occ = np.zeros((1, 5))
    active, parked, g2_tokens, held = occ[:, 1], occ[:, 2], occ[:, 3], occ[:, 4]
    tp = run.sm.tp
    summary = dict(sim.summary)
    summary.update(
        sessions=len(run.sessions), turns=run.turn_count, park_policy=run.opts.park_policy,
        ttft_turn0_p50_s=percentile(turn_ttft.get(0, []), 50), ttft_turn0_p99_s=percentile(turn_ttft.get(0, []), 99),
        ttft_later_p50_s=percentile(later, 50), ttft_later_p99_s=percentile(later, 99),
        session_time_p50_s=percentile(sess_time, 50), session_time_p99_s=percentile(sess_time, 99),
        failed_turns=sim_failed,
        sessions_held_peak=int(held.max()), sessions_held_mean=float(held.mean()),
        sessions_held_per_gpu_peak=float(held.max() / tp),
        hbm_kv_bytes_peak=float((active + parked).max() * run.kv_bytes),
        parked_hbm_kv_bytes_peak=float(parked.max() * run.kv_bytes),
        g2_kv_bytes_peak=float(g2_tokens.max() * run.kv_bytes),
        bytes_hbm_to_g2=run.ledger.bytes_moved[(HBM, G2)], bytes_g2_to_hbm=run.ledger.bytes_moved[(G2, HBM)],
        g3_kv_bytes_peak=float(run.g3_peak * run.kv_bytes),
        bytes_hbm_to_g3=run.ledger.bytes_moved[(HBM, G3)], bytes_g3_to_hbm=run.ledger.bytes_moved[(G3, HBM)],
        parks_g2=run.parks_to.get(G2, 0), parks_g3=run.parks_to.get(G3, 0), parks_dropped=run.parks_dropped,
        evictions=run.evictions,
        recomputed_tokens=run.recomputed_tokens, link_wait_s=run.links.wait_s,
        prefix_bytes_spilled=run.prefix_bytes_spilled, prefix_bytes_fetched=run.prefix_bytes_fetched,
        prefix_lower_hit_blocks=run.cache.lower_hit_blocks if run.cache is not None else 0,
        prefix_hit_rate=run.cache.hit_rate if run.cache is not None else 0.0,
        prefill_tokens=run.prefill_tokens, prefill_tokens_saved=run.prefill_saved,
        prefill_flops_saved=run.flops_saved,
    )
    return AgenticResult(summary, sim, turn_ttft, run.kv_bytes, occ)
