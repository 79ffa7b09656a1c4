"""DSU golden model: admission, batching, profiles and recovery, in plain Python.

This is the oracle for the DSU firmware + slot arbiter (transaction by transaction: the same
batch in every step) and the one scheduler the system simulator uses. Everything is integer
arithmetic on slot records so that C firmware can do exactly the same.

One scheduling round (``DsuModel.step``):

1. **Intake.** Requests that have arrived wait in an intake FIFO. While a slot is free and the
   head of the FIFO fits the KV budget (``kv_used + prompt + max_new <= kv_capacity``), it is
   admitted into the lowest-numbered free slot (strict FIFO: a head that does not fit blocks
   the ones behind it). A request that could never fit (``prompt + max_new > kv_capacity``)
   is reported ``failed`` ("too large") at once — never dropped.
2. **Selection.** From the active slots, up to ``cap`` are chosen by the profile's key
   (smallest key first; slot index breaks ties):

   * ``latency-opt`` — key ``(-priority, arrival_seq)``; cap ``latency_batch``. Small batches,
     oldest first: short steps and steady token times for the requests that run.
   * ``throughput-opt`` — dynamic batching by context length: the *dominant* bucket is the
     context bucket (``bit_length(seq_len) - 1``) holding the most active slots (ties: the
     smaller bucket); key ``(|bucket - dominant|, arrival_seq)``; cap ``max_batch``.
   * ``fairness-opt`` — key ``(-wait, arrival_seq)``, where ``wait`` counts rounds since the
     slot last ran; cap ``max_batch``. No starvation: a waiting slot's ``wait`` grows by one
     every round it is passed over, and at most ``A - 1`` other slots can hold a larger or
     equal (wait, earlier arrival) key, so with ``A`` active slots and cap ``B`` a slot runs
     within ``ceil(A / B)`` rounds of its last run (proved in docs/dsu.md, tested).
3. **Descriptors.** One per chosen slot, in slot order: ``(step, slot, request, seq_len,
   priority, residency)``; ``residency`` is 1 (keep in L2) when ``seq_len >=
   long_context_tokens``, else 0 (stream from HBM). ``seq_len`` counts the tokens in the
   KV cache including the one this step appends.
4. **Completion.** Every descriptor comes back ``ok``, ``error`` or ``timeout``. ``ok``: the
   token is kept, ``seq_len += 1``, ``tokens_left -= 1``, checkpoint = seq_len, retries = 0;
   the request completes when ``tokens_left`` reaches 0. ``error``/``timeout``: roll back to
   the checkpoint (the step's token is discarded), ``retries += 1``; past ``max_retries`` the
   request is reported ``failed`` with the reason and its slot freed. Slots not chosen get
   ``wait += 1``; chosen ones ``wait = 0``.

Parked slots (agentic sessions; ``docs/dsu-scheduler.md``, "Parked slots"). A request
submitted with ``continues=True`` is one turn of a session with more turns to come. Nothing
changes unless a request has ``continues`` set.

* **Turn end.** When its tokens run out it is reported ``completed`` as usual, but its slot
  is *parked* (``state = "parked"``), not freed, by ``params.park_policy``:

  - ``keep``: the KV stays in HBM (``kv_where = "hbm"``); the reservation shrinks to
    ``seq_len`` (what the KV holds).
  - ``park`` / ``park-early``: the KV moves to G2: ``kv_used -= reserved``, ``reserved = 0``,
    ``kv_where = "g2"``; a ``park`` move. The two differ only in when the host asks for the
    restore (at the tool's return, or ``lead`` before it): the scheduler's rules are equal.
  - ``drop``: the slot is freed and the KV dropped (a ``drop`` move); the next turn is a new
    ``submit()`` (a new id) whose prompt is the whole context (recompute).

  A parked slot is never selected, its ``wait`` does not grow, and it still holds its slot.
* **Moves.** Every KV movement decided is appended to ``moves`` (``Move(round, request, kind,
  tokens, slot)``, kind ``park``/``restore``/``drop``, tokens = the slot's ``seq_len``); the
  host drains them (``drain_moves()``) each round and times them.
* **Host commands**, queued in call order (as the firmware receives them over MMIO):
  ``restore(request)`` (G2 -> HBM) and ``continue_turn(request, new_tokens, max_new_tokens,
  continues)`` (the tool returned; ``new_tokens`` of input were prefilled onto the KV).
* **Service, in** ``step()`` **before the intake** (sessions already holding a slot go first):

  1. *Restores*, strict FIFO: the head is served when ``kv_used + seq_len <= kv_capacity``
     (``kv_used += seq_len``, ``reserved = seq_len``, ``kv_where = "hbm"``, a ``restore``
     move); a head that does not fit blocks the queue.
  2. *Continues*, strict FIFO: the head waits while its KV is in G2 (the host must restore
     it first); if ``seq_len + new_tokens + max_new_tokens > kv_capacity`` it can never run:
     reported ``failed`` ("too large"), a ``drop`` move, its slot freed; otherwise it is
     served when ``kv_used + new_tokens + max_new_tokens <= kv_capacity``: ``seq_len +=
     new_tokens``, ``checkpoint = seq_len``, ``tokens_left = max_new_tokens``, ``reserved +=
     new_tokens + max_new_tokens``, ``generated = retries = wait = 0``, ``state =
     "active"``, ``continues`` updated, and a new ``arrival_seq`` (a continue is a
     re-admission: the fairness bound and the oldest-first order treat it as one). A head
     that waits or does not fit blocks the queue.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

__all__ = ["residency_bit", "PROFILES", "PARK_POLICIES", "OK", "ERROR", "TIMEOUT", "DsuParams",
           "RequestSpec", "Descriptor", "Outcome", "Slot", "Round", "Move", "Continue", "SessionTurn",
           "Session", "DsuModel", "run_schedule", "run_sessions"]

#: profile names, declared once; the position is the hardware code (rtl/dsu/regmap.Profile)
PROFILES = ("latency-opt", "throughput-opt", "fairness-opt")
OK, ERROR, TIMEOUT = "ok", "error", "timeout"
#: what happens to a session's KV when a turn ends with more turns to come; the position is
#: the hardware code
PARK_POLICIES = ("keep", "park", "park-early", "drop")


@dataclass(frozen=True)
class DsuParams:
    profile: str = "throughput-opt"
    n_slots: int = 64
    max_batch: int = 64
    latency_batch: int = 16
    kv_capacity_tokens: int = 1 << 20
    long_context_tokens: int = 4096
    max_retries: int = 2
    park_policy: str = "keep"

    def __post_init__(self):
        if self.profile not in PROFILES:
            raise ValueError(f"profile must be one of {', '.join(PROFILES)}, got {self.profile!r}")
        if self.park_policy not in PARK_POLICIES:
            raise ValueError(f"park_policy must be one of {', '.join(PARK_POLICIES)}, "
                             f"got {self.park_policy!r}")
        for name in ("n_slots", "max_batch", "latency_batch", "kv_capacity_tokens",
                     "long_context_tokens"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if isinstance(self.max_retries, bool) or not isinstance(self.max_retries, int) \
                or self.max_retries < 0:
            raise ValueError(f"max_retries must be an integer >= 0, got {self.max_retries!r}")

    @property
    def cap(self) -> int:
        return self.latency_batch if self.profile == "latency-opt" else self.max_batch


@dataclass(frozen=True)
class RequestSpec:
    id: int
    prompt_tokens: int
    max_new_tokens: int      # decode steps to run
    arrival_step: int = 0    # the scheduling round at which it is in the intake FIFO
    priority: int = 0        # 0..3, higher first under latency-opt
    continues: bool = False  # a turn of a session with more turns to come: park at the end


@dataclass(frozen=True)
class Descriptor:
    step: int
    slot: int
    request: int
    seq_len: int
    priority: int
    residency: int


@dataclass(frozen=True)
class Outcome:
    request: int
    status: str              # "completed" or "failed"
    tokens: int              # tokens generated (kept)
    reason: str = ""
    step: int = 0            # the round it ended in


@dataclass
class Slot:
    request: int
    seq_len: int
    tokens_left: int
    priority: int
    arrival_seq: int
    checkpoint: int
    reserved: int            # KV tokens reserved (the DSU: prompt + max_new)
    generated: int = 0
    retries: int = 0
    wait: int = 0
    continues: bool = False  # park (not free) when the tokens run out
    state: str = "active"    # "active" or "parked" (waiting on a tool)
    kv_where: str = "hbm"    # "hbm" or "g2" (parked KV moved to host memory)


@dataclass(frozen=True)
class Round:
    """What one scheduling round did: its number, the batch it chose and the counts the
    DSU's cost depends on (``docs/system-model.md``)."""
    number: int
    batch: list[Descriptor]
    active: int              # occupied slots after admission
    admitted: int            # requests admitted this round
    blocked: bool            # an arrived request still waits at the intake head
    restored: int = 0        # parked slots whose KV came back to HBM this round
    continued: int = 0       # parked slots that resumed (next turn) this round
    parked: int = 0          # slots parked after this round's intake (not selectable)
    ended: tuple = ()        # outcomes decided in step(): "too large" at the intake or a continue


@dataclass(frozen=True)
class Move:
    """A KV movement the scheduler decided: ``park`` (HBM -> G2), ``restore`` (G2 -> HBM) or
    ``drop`` (discarded; recomputed if needed again). ``tokens`` is the slot's ``seq_len``."""
    round: int
    request: int
    kind: str
    tokens: int
    slot: int = -1


@dataclass(frozen=True)
class Continue:
    """A queued host command: the next turn of the parked ``request``."""
    request: int
    new_tokens: int
    max_new_tokens: int
    continues: bool = False


def residency_bit(seq_len: int, long_context_tokens: int) -> int:
    """The descriptor's residency hint: 1 (the CDU may keep the request's KV blocks in L2)
    when ``seq_len >= long_context_tokens``, else 0 (its blocks are streamed from HBM)."""
    return int(seq_len >= long_context_tokens)


@dataclass(frozen=True)
class SessionTurn:
    """One later turn of a session: the tool returns ``gap`` rounds (>= 1) after the previous
    turn ended, with ``new_tokens`` of input; then ``max_new_tokens`` are decoded."""
    gap: int
    new_tokens: int
    max_new_tokens: int


@dataclass(frozen=True)
class Session:
    """A session for :func:`run_sessions`: its first turn (``first.continues`` is set by the
    driver when ``turns`` is not empty) and the turns after it."""
    first: RequestSpec
    turns: tuple[SessionTurn, ...] = ()


@dataclass
class DsuModel:
    params: DsuParams = field(default_factory=DsuParams)

    def __post_init__(self):
        self.slots: list[Slot | None] = [None] * self.params.n_slots
        self.intake: deque[RequestSpec] = deque()
        self.kv_used = 0
        self.round = 0
        self.arrivals = 0
        self.outcomes: dict[int, Outcome] = {}
        self.pending: list[Descriptor] = []
        self.rollbacks = 0
        self.timeouts = 0
        #: ids in the intake FIFO or in a slot: the duplicate check is O(1) (a request that
        #: ended is in ``outcomes``)
        self._live: set[int] = set()
        self.moves: list[Move] = []
        self.restores: deque[int] = deque()           # host restore commands, FIFO
        self.continues: deque[Continue] = deque()     # host continue commands, FIFO
        self._where: dict[int, int] = {}              # request -> slot, for live sessions
        self._ended_in_step: list[Outcome] = []

    @classmethod
    def resume(cls, params: DsuParams, round: int, slots: dict[int, Slot],
               outcomes: dict[int, Outcome] | None = None, arrivals: int | None = None,
               rollbacks: int = 0, timeouts: int = 0, restores=(), continues=()) -> "DsuModel":
        """A model that continues from a state read out of the hardware between rounds (the
        host takeover after the heartbeat watchdog fired, ``docs/dsu.md``): ``round`` is the
        next round, ``slots`` the occupied slot records by index (their KV reservation is
        ``reserved``), ``outcomes`` the requests that already ended, ``arrivals`` the
        admissions so far (default: the requests in ``slots`` and ``outcomes`` that were
        admitted, i.e. not failed "too large"). Requests still to come are ``submit()``-ed as
        usual; ``restores`` and ``continues`` are the host commands still queued (requests
        ids; :class:`Continue`). A parked slot's request may be in ``outcomes`` (its last turn
        ended). ``resume(params, 0, {})`` is a fresh model: a firmware that hangs before it
        schedules anything (even before it has armed its own heartbeat limit: the watchdog
        is armed from reset) hands the whole run to the host, and the schedule is the golden
        one from round 0."""
        m = cls(params)
        m.round = round
        m.outcomes = dict(outcomes or {})
        for i, s in slots.items():
            if not 0 <= i < params.n_slots:
                raise ValueError(f"slot {i} out of range (n_slots {params.n_slots})")
            if s.request in m._live or (s.request in m.outcomes and s.state != "parked"):
                raise ValueError(f"request {s.request} held twice")
            m.slots[i] = s
            m.kv_used += s.reserved
            m._live.add(s.request)
            m._where[s.request] = i
        if arrivals is None:
            arrivals = len(slots) + sum(1 for rid, o in m.outcomes.items()
                                        if o.reason != "too large" and rid not in m._live)
        m.arrivals = arrivals
        m.rollbacks, m.timeouts = rollbacks, timeouts
        m.restores.extend(restores)
        m.continues.extend(continues)
        return m

    # -- intake ------------------------------------------------------------------------------
    def submit(self, req: RequestSpec) -> None:
        if req.prompt_tokens < 1 or req.max_new_tokens < 1:
            raise ValueError(f"request {req.id}: prompt_tokens and max_new_tokens must be >= 1")
        if req.id in self.outcomes or req.id in self._live:
            raise ValueError(f"request {req.id} submitted twice")
        self.intake.append(req)
        self._live.add(req.id)

    def _admit(self) -> None:
        p = self.params
        while self.intake:
            head = self.intake[0]
            if self.too_large(head):
                self.intake.popleft()
                self._live.discard(head.id)
                self.outcomes[head.id] = Outcome(head.id, "failed", 0, "too large", self.round)
                self._ended_in_step.append(self.outcomes[head.id])
                continue
            free = next((i for i, s in enumerate(self.slots) if s is None), None)
            take = self.admission_kv(head)
            if free is None or self.kv_used + take > p.kv_capacity_tokens:
                return
            self.intake.popleft()
            self.slots[free] = Slot(head.id, head.prompt_tokens, head.max_new_tokens,
                                    head.priority, self.arrivals, head.prompt_tokens, take,
                                    continues=head.continues)
            self._where[head.id] = free
            self.arrivals += 1
            self.kv_used += take

    def too_large(self, req: RequestSpec) -> bool:
        """Whether ``req`` could never be admitted: its prompt and output exceed the KV budget
        (it fails, "too large")."""
        return req.prompt_tokens + req.max_new_tokens > self.params.kv_capacity_tokens

    def admission_kv(self, req: RequestSpec) -> int:
        """The KV tokens ``req`` reserves when admitted: the DSU reserves its prompt and every
        token it may decode, so KV never runs out mid-decode."""
        return req.prompt_tokens + req.max_new_tokens

    # -- selection ---------------------------------------------------------------------------
    def _select(self) -> list[int]:
        active = [i for i, s in enumerate(self.slots) if s is not None and s.state == "active"]
        profile = self.params.profile
        if profile == "latency-opt":
            key = lambda i: (-self.slots[i].priority, self.slots[i].arrival_seq, i)  # noqa: E731
        elif profile == "fairness-opt":
            key = lambda i: (-self.slots[i].wait, self.slots[i].arrival_seq, i)  # noqa: E731
        else:
            buckets = {i: self.slots[i].seq_len.bit_length() - 1 for i in active}
            counts: dict[int, int] = {}
            for b in buckets.values():
                counts[b] = counts.get(b, 0) + 1
            dominant = min(counts, key=lambda b: (-counts[b], b)) if counts else 0
            key = lambda i: (abs(buckets[i] - dominant), self.slots[i].arrival_seq, i)  # noqa: E731
        return sorted(sorted(active, key=key)[: self.params.cap])

    def step(self) -> Round:
        """Admit, select and return this round (its ``batch`` of descriptors is empty when
        nothing is active)."""
        if self.pending:
            raise RuntimeError("complete() the previous round before the next step()")
        self._ended_in_step = []
        restored = self._serve_restores()
        continued = self._serve_continues()
        readmitted = self.arrivals
        self._admit()
        chosen = self._select()
        lc = self.params.long_context_tokens
        self.pending = [Descriptor(self.round, i, s.request, s.seq_len + 1, s.priority,
                                   residency_bit(s.seq_len + 1, lc))
                        for i in chosen for s in [self.slots[i]]]
        chosen_set = set(chosen)
        for i, s in enumerate(self.slots):
            if s is not None and s.state == "active":
                s.wait = 0 if i in chosen_set else s.wait + 1
        return Round(self.round, list(self.pending), self.occupied_slots,
                     self.arrivals - readmitted, bool(self.intake), restored, continued,
                     self.parked_slots, tuple(self._ended_in_step))

    def complete(self, results: dict[int, str] | None = None) -> list[Outcome]:
        """Report this round's results by slot (missing slots are ``ok``). Returns the requests
        that ended in this round."""
        results = dict(results or {})
        unknown = set(results) - {d.slot for d in self.pending}
        if unknown:
            raise ValueError(f"results for slots not in this round's batch: {sorted(unknown)}")
        ended = []
        for d in self.pending:
            s = self.slots[d.slot]
            result = results.get(d.slot, OK)
            if result == OK:
                s.seq_len += 1
                s.tokens_left -= 1
                s.generated += 1
                s.checkpoint = s.seq_len
                s.retries = 0
                if s.tokens_left == 0:
                    if s.continues:
                        ended.append(self._park(d.slot))
                    else:
                        ended.append(self._finish(d.slot, "completed", ""))
            elif result in (ERROR, TIMEOUT):
                self.rollbacks += 1
                self.timeouts += result == TIMEOUT
                s.seq_len = s.checkpoint
                s.retries += 1
                if s.retries > self.params.max_retries:
                    ended.append(self._finish(d.slot, "failed", f"{result}: retries exhausted"))
            else:
                raise ValueError(f"slot {d.slot}: result must be ok, error or timeout, got {result!r}")
        self.pending = []
        self.round += 1
        return ended

    def _finish(self, slot: int, status: str, reason: str) -> Outcome:
        s = self.slots[slot]
        out = Outcome(s.request, status, s.generated, reason, self.round)
        self.outcomes[s.request] = out
        self._live.discard(s.request)
        self.kv_used -= s.reserved
        self.slots[slot] = None
        self._where.pop(s.request, None)
        return out

    # -- parked slots (sessions) -------------------------------------------------------------
    def _park(self, slot: int) -> Outcome:
        """A turn with more to come ended: report it completed and park its slot."""
        s = self.slots[slot]
        policy = self.params.park_policy
        if policy == "drop":
            self.moves.append(Move(self.round, s.request, "drop", s.seq_len, slot))
            return self._finish(slot, "completed", "")
        out = Outcome(s.request, "completed", s.generated, "", self.round)
        self.outcomes[s.request] = out          # its latest turn; the request stays live
        s.state = "parked"
        if policy == "keep":
            self.kv_used -= s.reserved - s.seq_len
            s.reserved = s.seq_len
        else:                                   # park, park-early: the KV goes to G2
            self.kv_used -= s.reserved
            s.reserved = 0
            s.kv_where = "g2"
            self.moves.append(Move(self.round, s.request, "park", s.seq_len, slot))
        return out

    def _parked_slot(self, request: int, what: str) -> int:
        if self.params.park_policy == "drop":
            raise ValueError(f"{what} {request}: park policy drop frees the slot at turn end "
                             "(the next turn is a new submit())")
        slot = self._where.get(request)
        if slot is None:
            raise ValueError(f"{what} {request}: no slot holds this request")
        if self.slots[slot].state != "parked":
            raise ValueError(f"{what} {request}: its slot is not parked")
        return slot

    def restore(self, request: int) -> None:
        """Queue the G2 -> HBM restore of a parked slot's KV (policies park, park-early)."""
        slot = self._parked_slot(request, "restore")
        if self.slots[slot].kv_where != "g2" or request in self.restores:
            raise ValueError(f"restore {request}: its KV is not in G2 or already queued")
        self.restores.append(request)

    def continue_turn(self, request: int, new_tokens: int, max_new_tokens: int,
                      continues: bool = False) -> None:
        """Queue the next turn of a parked session: ``new_tokens`` of input were prefilled onto
        its KV, ``max_new_tokens`` to decode, ``continues``: more turns after this one."""
        self._parked_slot(request, "continue")
        if isinstance(new_tokens, bool) or not isinstance(new_tokens, int) or new_tokens < 0 \
                or isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) \
                or max_new_tokens < 1:
            raise ValueError(f"continue {request}: new_tokens must be >= 0 and max_new_tokens >= 1")
        if any(c.request == request for c in self.continues):
            raise ValueError(f"continue {request}: already queued")
        self.continues.append(Continue(request, new_tokens, max_new_tokens, bool(continues)))

    def _serve_restores(self) -> int:
        cap, n = self.params.kv_capacity_tokens, 0
        while self.restores:
            slot = self._where[self.restores[0]]
            s = self.slots[slot]
            if self.kv_used + s.seq_len > cap:
                break
            self.restores.popleft()
            self.kv_used += s.seq_len
            s.reserved = s.seq_len
            s.kv_where = "hbm"
            self.moves.append(Move(self.round, s.request, "restore", s.seq_len, slot))
            n += 1
        return n

    def _serve_continues(self) -> int:
        cap, n = self.params.kv_capacity_tokens, 0
        while self.continues:
            c = self.continues[0]
            slot = self._where[c.request]
            s = self.slots[slot]
            if s.kv_where != "hbm":
                break                           # waits for its restore
            extra = c.new_tokens + c.max_new_tokens
            if s.seq_len + extra > cap:         # can never fit: failed, its KV dropped
                self.continues.popleft()
                self.moves.append(Move(self.round, s.request, "drop", s.seq_len, slot))
                s.generated = 0
                self._ended_in_step.append(self._finish(slot, "failed", "too large"))
                continue
            if self.kv_used + extra > cap:
                break
            self.continues.popleft()
            self.kv_used += extra
            s.seq_len += c.new_tokens
            s.checkpoint = s.seq_len
            s.tokens_left = c.max_new_tokens
            s.reserved += extra
            s.generated = s.retries = s.wait = 0
            s.state = "active"
            s.continues = c.continues
            s.arrival_seq = self.arrivals
            self.arrivals += 1
            n += 1
        return n

    def drain_moves(self) -> list[Move]:
        """The moves decided since the last drain, oldest first."""
        moves, self.moves = self.moves, []
        return moves

    @property
    def occupied_slots(self) -> int:
        return sum(1 for s in self.slots if s is not None)

    @property
    def parked_slots(self) -> int:
        return sum(1 for s in self.slots if s is not None and s.state == "parked")

    @property
    def idle(self) -> bool:
        return not self.intake and all(s is None for s in self.slots)


def run_schedule(requests: list[RequestSpec], params: DsuParams,
                 faults: dict[tuple[int, int], str] | None = None,
                 max_rounds: int = 1_000_000) -> tuple[list[list[Descriptor]], dict[int, Outcome]]:
    """Drive the model to completion: requests enter the intake at their ``arrival_step``;
    ``faults[(round, slot)]`` is ``error`` or ``timeout`` for that round's result. Returns the
    batch of every round and every request's outcome."""
    model = DsuModel(params)
    todo = sorted(requests, key=lambda r: (r.arrival_step, r.id))
    faults = faults or {}
    batches, k = [], 0
    while k < len(todo) or not model.idle:
        if model.round >= max_rounds:
            raise RuntimeError(f"schedule did not finish in {max_rounds} rounds")
        while k < len(todo) and todo[k].arrival_step <= model.round:
            model.submit(todo[k])
            k += 1
        batch = model.step().batch
        batches.append(batch)
        model.complete({d.slot: faults[(model.round, d.slot)] for d in batch
                        if (model.round, d.slot) in faults})
    return batches, model.outcomes


def run_sessions(requests: list[RequestSpec], sessions: list[Session], params: DsuParams,
                 faults: dict[tuple[int, int], str] | None = None, lead: int = 0,
                 max_rounds: int = 1_000_000, on_round=None):
    """Drive the model with plain requests and sessions, the host's commands issued as the
    system simulator issues them. A turn that ends in round ``r`` has its tool return at round
    ``t = r + gap``; before ``step()`` of round ``t`` the host calls, by policy: ``keep``
    continue_turn; ``park`` restore then continue_turn; ``park-early`` restore at round
    ``max(r + 1, t - lead)`` and continue_turn at ``t``; ``drop`` submit a new request (id:
    one above every id so far, in event order) whose prompt is the whole context
    (``seq_len`` at the turn end + ``new_tokens``). Within a round: restores, then continues
    and resubmissions, each by the session's first id; then arrivals. Returns ``(batches,
    ended, moves, host)``: every round's batch, every outcome as reported (turns included)
    in order, every move, and the host commands of every round (``(round, kind, args)``).
    ``on_round(model, round)``, if given, is called after every round's ``complete()``."""
    model = DsuModel(params)
    faults = faults or {}
    policy = params.park_policy
    firsts = [RequestSpec(s.first.id, s.first.prompt_tokens, s.first.max_new_tokens,
                          s.first.arrival_step, s.first.priority, bool(s.turns)) for s in sessions]
    todo = sorted(list(requests) + firsts, key=lambda r: (r.arrival_step, r.id))
    next_id = 1 + max((r.id for r in todo), default=-1)
    # current request id -> [session index, next turn index]
    live = {f.id: [k, 0] for k, f in enumerate(firsts) if sessions[k].turns}
    events: dict[int, list] = {}          # round -> [(rank, order, kind, session, request, turn)]
    turn_context: dict[int, int] = {}     # drop: a dropped request's seq_len at its turn end
    batches, ended, moves, host, k = [], [], [], [], 0
    while k < len(todo) or not model.idle or events:
        if model.round >= max_rounds:
            raise RuntimeError(f"schedule did not finish in {max_rounds} rounds")
        for _, _, kind, si, rid, turn in sorted(events.pop(model.round, []), key=lambda e: e[:2]):
            more = live[rid][1] + 1 < len(sessions[si].turns)
            if kind == "restore":
                model.restore(rid)
                host.append((model.round, "restore", (rid,)))
                continue
            if kind == "continue":
                model.continue_turn(rid, turn.new_tokens, turn.max_new_tokens, more)
                host.append((model.round, "continue", (rid, turn.new_tokens, turn.max_new_tokens,
                                                       more)))
                live[rid][1] += 1
                if not more:
                    del live[rid]
            else:                              # drop: the next turn is a new request
                new = RequestSpec(next_id, turn_context[rid] + turn.new_tokens,
                                  turn.max_new_tokens, model.round, sessions[si].first.priority,
                                  more)
                next_id += 1
                model.submit(new)
                host.append((model.round, "submit", (new,)))
                if more:
                    live[new.id] = [si, live[rid][1] + 1]
                del live[rid]
        while k < len(todo) and todo[k].arrival_step <= model.round:
            model.submit(todo[k])
            k += 1
        r = model.step()
        batch = r.batch
        batches.append(batch)
        ended.extend(r.ended)
        for o in r.ended:                      # a continue that can never fit ends its session
            live.pop(o.request, None)
        rnd = model.round
        out = model.complete({d.slot: faults[(rnd, d.slot)] for d in batch
                              if (rnd, d.slot) in faults})
        new_moves = model.drain_moves()
        moves.extend(new_moves)
        ended.extend(out)
        if on_round is not None:
            on_round(model, r)
        dropped = {m.request: m.tokens for m in new_moves if m.kind == "drop"}
        for o in out:
            if o.request not in live:
                continue
            si, ti = live[o.request]
            if o.status != "completed":
                del live[o.request]            # the session ends with its failed turn
                continue
            turn = sessions[si].turns[ti]
            t = rnd + max(1, turn.gap)
            order = sessions[si].first.id
            if policy == "drop":
                turn_context[o.request] = dropped[o.request]
                events.setdefault(t, []).append((1, order, "resubmit", si, o.request, turn))
                continue
            if policy == "park":
                events.setdefault(t, []).append((0, order, "restore", si, o.request, turn))
            elif policy == "park-early":
                events.setdefault(max(rnd + 1, t - lead), []).append(
                    (0, order, "restore", si, o.request, turn))
            events.setdefault(t, []).append((1, order, "continue", si, o.request, turn))
    return batches, ended, moves, host
