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
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

__all__ = ["residency_bit", "PROFILES", "OK", "ERROR", "TIMEOUT", "DsuParams", "RequestSpec", "Descriptor",
           "Outcome", "Slot", "Round", "DsuModel", "run_schedule"]

#: profile names, declared once; the position is the hardware code (rtl/dsu/regmap.Profile)
PROFILES = ("latency-opt", "throughput-opt", "fairness-opt")
OK, ERROR, TIMEOUT = "ok", "error", "timeout"


@dataclass(frozen=True)
class DsuParams:
    profile: str = "throughput-opt"
    n_slots: int = 64
    max_batch: int = 64
    latency_batch: int = 16
    kv_capacity_tokens: int = 1 << 20
    long_context_tokens: int = 4096
    max_retries: int = 2

    def __post_init__(self):
        if self.profile not in PROFILES:
            raise ValueError(f"profile must be one of {', '.join(PROFILES)}, got {self.profile!r}")
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
    reserved: int            # KV tokens reserved: prompt + max_new
    generated: int = 0
    retries: int = 0
    wait: int = 0


@dataclass(frozen=True)
class Round:
    """What one scheduling round did: its number, the batch it chose and the counts the
    DSU's cost depends on (``docs/system-model.md``)."""
    number: int
    batch: list[Descriptor]
    active: int              # occupied slots after admission
    admitted: int            # requests admitted this round
    blocked: bool            # an arrived request still waits at the intake head


def residency_bit(seq_len: int, long_context_tokens: int) -> int:
    """The descriptor's residency hint: 1 (the CDU may keep the request's KV blocks in L2)
    when ``seq_len >= long_context_tokens``, else 0 (its blocks are streamed from HBM)."""
    return int(seq_len >= long_context_tokens)


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

    @classmethod
    def resume(cls, params: DsuParams, round: int, slots: dict[int, Slot],
               outcomes: dict[int, Outcome] | None = None, arrivals: int | None = None,
               rollbacks: int = 0, timeouts: int = 0) -> "DsuModel":
        """A model that continues from a state read out of the hardware between rounds (the
        host takeover after the heartbeat watchdog fired, ``docs/dsu.md``): ``round`` is the
        next round, ``slots`` the occupied slot records by index (their KV reservation is
        ``reserved``), ``outcomes`` the requests that already ended, ``arrivals`` the
        admissions so far (default: the requests in ``slots`` and ``outcomes`` that were
        admitted, i.e. not failed "too large"). Requests still to come are ``submit()``-ed as
        usual. ``resume(params, 0, {})`` is a fresh model: a firmware that hangs before it
        schedules anything (even before it has armed its own heartbeat limit: the watchdog
        is armed from reset) hands the whole run to the host, and the schedule is the golden
        one from round 0."""
        m = cls(params)
        m.round = round
        m.outcomes = dict(outcomes or {})
        for i, s in slots.items():
            if not 0 <= i < params.n_slots:
                raise ValueError(f"slot {i} out of range (n_slots {params.n_slots})")
            if s.request in m._live or s.request in m.outcomes:
                raise ValueError(f"request {s.request} held twice")
            m.slots[i] = s
            m.kv_used += s.reserved
            m._live.add(s.request)
        if arrivals is None:
            arrivals = len(slots) + sum(1 for o in m.outcomes.values() if o.reason != "too large")
        m.arrivals = arrivals
        m.rollbacks, m.timeouts = rollbacks, timeouts
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
            need = head.prompt_tokens + head.max_new_tokens
            if need > p.kv_capacity_tokens:
                self.intake.popleft()
                self._live.discard(head.id)
                self.outcomes[head.id] = Outcome(head.id, "failed", 0, "too large", self.round)
                continue
            free = next((i for i, s in enumerate(self.slots) if s is None), None)
            if free is None or self.kv_used + need > p.kv_capacity_tokens:
                return
            self.intake.popleft()
            self.slots[free] = Slot(head.id, head.prompt_tokens, head.max_new_tokens,
                                    head.priority, self.arrivals, head.prompt_tokens, need)
            self.arrivals += 1
            self.kv_used += need

    # -- selection ---------------------------------------------------------------------------
    def _select(self) -> list[int]:
        active = [i for i, s in enumerate(self.slots) if s is not None]
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
        arrivals = self.arrivals
        self._admit()
        chosen = self._select()
        lc = self.params.long_context_tokens
        self.pending = [Descriptor(self.round, i, s.request, s.seq_len + 1, s.priority,
                                   residency_bit(s.seq_len + 1, lc))
                        for i in chosen for s in [self.slots[i]]]
        chosen_set = set(chosen)
        for i, s in enumerate(self.slots):
            if s is not None:
                s.wait = 0 if i in chosen_set else s.wait + 1
        return Round(self.round, list(self.pending), self.occupied_slots,
                     self.arrivals - arrivals, bool(self.intake))

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
        return out

    @property
    def occupied_slots(self) -> int:
        return sum(1 for s in self.slots if s is not None)

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
