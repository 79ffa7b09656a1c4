"""Event-driven decode simulation over requests, at real sizes.

arrival -> admission (a decode slot and the request's KV budget free, else it waits in a FIFO
queue) -> prefill -> the first token -> the DSU golden model's intake -> one decode step per
remaining token -> done. Prefill runs, by ``prefill`` mode, on a separate pool
(``disaggregated``, :meth:`StepModel.prefill_time`), as whole prefill batches on the decode
GPUs that pre-empt decode (``colocated``, :meth:`StepModel.prefill_batch_time`), or as chunks
riding along in decode steps (``chunked``). With ``admission`` (the default) a request is
prefilled only when the DSU could admit it (as vLLM's block manager and TensorRT-LLM's
capacity scheduler admit before prefill); without it every arrival is prefilled and then waits
in the DSU's intake. Requests arrive at their own times (open loop) or
are sent by ``concurrency`` closed-loop clients. Batching decisions come from
:class:`tricut.models.dsu.DsuModel`, the same model the DSU RTL is checked against; step times
from :class:`tricut.sim.fast.timing.StepModel`. docs/system-model.md describes it.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass, field, replace
from itertools import islice

import numpy as np

from tricut.models.dsu import DsuModel, DsuParams, RequestSpec, TIMEOUT

from .energy import COMPONENTS, GPU_COMPONENTS, EnergyLedger, GpuWork, energy_of
from .metrics import RequestTimes, summarise
from .stack_scheduler import Preempted, StackScheduler
from .stacks import PREFILL_MODES
from .timing import BOUNDS, PhysicsViolation, StepModel
from .workload import TIME_HORIZON_S, Request, arrival_span_s

__all__ = ["SimResult", "simulate", "check_run_options", "check_horizon"]

#: the seed stream of the closed-loop clients' first sends (beside the run's own)
CLIENT_PHASE_STREAM = 0x636C


@dataclass
class SimResult:
    summary: dict
    steps: int
    step_times_s: np.ndarray
    step_end_s: np.ndarray
    step_hbm_bytes: np.ndarray
    step_floor_s: np.ndarray
    batch_sizes: np.ndarray          # decode requests per step (0: a step carrying only a prefill chunk)
    outcomes: dict
    request_times: list[RequestTimes] = field(repr=False, default_factory=list)
    arrival_s: dict = field(repr=False, default_factory=dict)   # request id -> time it was sent
    finish_s: dict = field(repr=False, default_factory=dict)    # request id -> last token or failure
    energy: object = field(repr=False, default=None)            # its EnergyLedger (None: no coefficients)


def check_run_options(prefill: str | None, concurrency: int | None, think_s: float) -> None:
    """A ``ValueError`` naming the first bad option of a run."""
    if prefill is not None and prefill not in PREFILL_MODES:
        raise ValueError(f"prefill mode must be one of {', '.join(PREFILL_MODES)}, got {prefill!r}")
    if concurrency is not None and (isinstance(concurrency, bool) or not isinstance(concurrency, int)
                                    or concurrency < 1):
        raise ValueError(f"concurrency must be an integer >= 1, got {concurrency!r}")
    if isinstance(think_s, bool) or not isinstance(think_s, (int, float)) or not math.isfinite(think_s) \
            or think_s < 0:
        raise ValueError(f"think time must be a finite number >= 0, got {think_s!r}")


def check_horizon(requests: list[Request], concurrency: int | None, think_s: float) -> None:
    """A ``ValueError`` when the workload would carry the simulated clock past
    :data:`TIME_HORIZON_S`, where float64 seconds no longer resolve a decode step: open loop,
    arrivals spanning more; closed loop, each client's think time summed over its requests."""
    if concurrency is None:
        span = arrival_span_s(requests)
        if span > TIME_HORIZON_S:
            raise ValueError(f"the arrivals span {span:.3g} s, beyond the simulator's horizon of "
                             f"{TIME_HORIZON_S:g} s (about 3 years; past it float64 seconds lose the "
                             "resolution of a decode step): use a higher rate or a shorter trace")
    else:
        think_total = think_s * -(-len(requests) // concurrency)
        if think_total > TIME_HORIZON_S:
            raise ValueError(f"think time {think_s:g} s x {-(-len(requests) // concurrency)} requests per "
                             f"client = {think_total:.3g} s, beyond the simulator's horizon of "
                             f"{TIME_HORIZON_S:g} s: use a shorter think time")


def simulate(requests: list[Request], step_model: StepModel, dsu: DsuParams, seed: int = 0,
             degraded_at_s: float | None = None, faults: dict[tuple[int, int], str] | None = None,
             progress=None, ttft_slo_s: float | None = None, tpot_slo_s: float | None = None,
             prefill: str | None = None, concurrency: int | None = None, think_s: float = 0.0,
             admission: bool = True, client_jitter: bool = True, energy_file=None) -> SimResult:
    """Run the workload to completion. ``degraded_at_s``: from that time on the DSU is degraded
    and the host schedules (same decisions, host overheads). ``faults[(round, slot)]``: a step
    result of ``error`` or ``timeout`` (rolled back and retried by the DSU model).
    ``prefill``: one of :data:`PREFILL_MODES` (None: the step model's stack's own mode).
    ``concurrency``: closed loop; ``requests`` is then a pool sent in list order (their arrival
    times ignored) by that many clients, each sending its next request ``think_s`` after its
    previous one finished (last token emitted, or failed); with ``client_jitter`` each client
    sends its first request at a seeded random time within one request's time alone
    (:meth:`_Run.client_window_s`), so that the clients do not move in lock-step, without it
    all at t = 0. ``energy_file``: another copy of the energy coefficients
    (:mod:`.energy`; None: the shipped ones). ``admission``: a request is
    prefilled only when a decode slot and the KV its scheduler reserves are free beside those
    of the requests already past admission; it waits before its prefill otherwise (the wait is in its TTFT and its ``decode_queue_s``). False: every
    request is prefilled on arrival and waits for the DSU after its first token. What a
    request reserves is the scheduler's: the DSU's (and a stack's with ``kv_reserve`` output)
    its prompt and whole output; a stack's with ``kv_reserve`` prompt its prompt, with the
    stack's watermark left free, then a token per decoded token, pre-empting the request
    admitted last when KV runs out (docs/system-model.md, "Admission and pre-emption").

    A ``ValueError`` before any work for a workload past :data:`TIME_HORIZON_S`
    (:func:`check_horizon`); after the run when no request finished (the reasons given)."""
    check_run_options(prefill, concurrency, think_s)
    if not requests:
        raise ValueError("no requests to simulate")
    if degraded_at_s is not None and (isinstance(degraded_at_s, bool) or not isinstance(degraded_at_s, (int, float))
                                      or not math.isfinite(degraded_at_s) or degraded_at_s < 0):
        raise ValueError(f"degraded_at_s must be a finite number >= 0 or None, got {degraded_at_s!r}")
    check_horizon(requests, concurrency, think_s)
    run = _Run(requests, step_model, dsu, seed, prefill or step_model.stack.prefill, concurrency,
               think_s, degraded_at_s, faults or {}, progress, admission, client_jitter, energy_file)
    run.loop()
    return run.result(ttft_slo_s, tpot_slo_s)


class _Run:
    """The state of one simulation: the GPU clock ``t``, where each request is (sent, waiting
    for admission, waiting for prefill, prefilled and waiting for the DSU, decoding, finished)
    and per-step records."""

    def __init__(self, requests, step_model, dsu, seed, mode, concurrency, think_s, degraded_at_s,
                 faults, progress, admission=False, client_jitter=False, energy_file=None):
        self.sm, self.dsu, self.mode = step_model, dsu, mode
        self.concurrency, self.think_s = concurrency, think_s
        self.degraded_at_s, self.faults, self.progress = degraded_at_s, faults, progress
        self.rng = np.random.default_rng(seed)
        self.model = self._scheduler(dsu)
        self.resume: dict[int, Preempted] = {}  # pre-empted, not yet back in the scheduler's intake
        self.requeued_at: dict[int, float] = {}  # pre-empted, waiting for admission again: since when
        self.preemption_recompute_tokens = 0     # context tokens prefilled again after pre-emptions
        self.requests = requests
        self.by_id = {r.id: r for r in requests}
        self.t = 0.0
        self.arrival: dict[int, float] = {}
        self.times: dict[int, list[float]] = {}
        self.finish: dict[int, float] = {}
        self.ready: list[tuple[float, int]] = []          # disaggregated: (first token time, id)
        self.arrivals: list[tuple[float, int, int]] = []  # colocated/chunked: (sent, order, id)
        self.waiting: deque[list[int]] = deque()          # [id, prompt tokens prefilled], arrival order
        self.intake: deque[int] = deque()       # ids submitted to the DSU, not yet admitted or refused
        self.admitted: dict[int, float] = {}    # id -> the round it entered a decode slot
        self.admission, self.client_jitter = admission, client_jitter
        self.gate: deque[tuple[int, int]] = deque()   # (order, id): sent, not yet admitted
        self.gate_order = 0
        self.blocked_upto = -1  # gate entries up to this order found no room at least once
        self.reserved: dict[int, int] = {}      # past admission, not yet in a DSU slot: id -> KV tokens
        self.reserved_kv = 0
        self.gated_s: dict[int, float] = {}     # id -> its wait for admission before prefill
        self.freed_at = 0.0     # the last time a DSU slot or KV was freed
        self.intake_wait_rounds = 0   # rounds a prefilled request spent in the DSU's intake
        self.retired = 0        # requests whose slots the previous round's completions freed
        self.prefill_s = 0.0    # GPU time of colocated prefill batches / chunks
        self.rows = {k: [] for k in ("dt", "end", "hbm", "floor", "batch")}
        self.busy = dict.fromkeys(("sm", "te", "cdu", "sched", "l2", "l2_reuse", "kv", "attn",
                                   "attn_hbm", "imbalance"), 0.0)
        self.bound = dict.fromkeys(BOUNDS, 0)
        coeffs = energy_of(step_model.gpu.name, energy_file)
        self.energy = EnergyLedger(coeffs, step_model.model.weight_dtype) if coeffs else None
        self.hbm_bytes = 0.0    # every HBM byte of the run on one GPU (decode and prefill)
        if concurrency is None:
            self.pool, self.free_at = None, deque()
            for r in requests:
                self._send(r, r.arrival_s)
        else:
            # clients beyond the pool's size would never send anything
            clients = min(concurrency, len(requests))
            self.pool, self.free_at = deque(requests), deque([0.0] * clients)
            if client_jitter:
                # their own random stream: the run's draws are those of a run without jitter
                phase = np.random.default_rng([seed, CLIENT_PHASE_STREAM])
                self.free_at = deque(sorted(phase.uniform(0.0, self.client_window_s(), clients)))

    def _scheduler(self, dsu: DsuParams) -> DsuModel:
        """The scheduler of the run: the DSU's (its model) when the DSU schedules or the stack
        reserves whole outputs; the stack's (:class:`StackScheduler`: KV reserved as it grows,
        pre-emption by recompute) when the stack reserves prompts."""
        stack = self.sm.stack
        if stack.schedules_kv(self.sm.cuts):
            return StackScheduler(dsu, watermark_tokens=stack.watermark_tokens(dsu.kv_capacity_tokens))
        return DsuModel(dsu)

    @property
    def preemptive(self) -> bool:
        return isinstance(self.model, StackScheduler)

    def client_window_s(self) -> float:
        """Closed loop with client jitter: the window of the clients' first sends, the time the
        pool's mean request takes alone (its prefill, then its decode steps at batch 1 and its
        mean context, its host jitter drawn from a fixed seed)."""
        prompt = float(np.mean([r.prompt_tokens for r in self.requests]))
        output = float(np.mean([r.output_tokens for r in self.requests]))
        ctx = int(round(prompt + output / 2))
        step = self.sm.step_time([ctx + 1], [1], np.random.default_rng(0)).time_s
        return self.sm.prefill_time(int(round(prompt))) + max(0.0, output - 1) * step

    # -- request life --------------------------------------------------------------------------
    def _send(self, r: Request, at: float) -> None:
        self.arrival[r.id] = at
        if self.mode == "disaggregated" and not self.admission:
            self._prefill_on_pool(r, at)
        else:
            heapq.heappush(self.arrivals, (at, len(self.arrival), r.id))

    def _prefill_on_pool(self, r: Request, start: float) -> None:
        """Disaggregated: the pool prefills ``r`` from ``start``; it is uncontended, so the
        first token's time is known at once."""
        first = start + self._pool_prefill_s(r)
        self._prefill_energy([r.id])
        self._first_token(r.id, first)

    def _prefill_tokens(self, rid: int) -> int:
        """The tokens request ``rid``'s prefill computes: its prompt, or after a pre-emption its
        whole context (recomputed)."""
        p = self.resume.get(rid)
        return self.by_id[rid].prompt_tokens if p is None else p.context_tokens

    def _spec(self, rid: int) -> RequestSpec:
        """What the scheduler is given after ``rid``'s prefill: its context in the KV cache (with
        the token the prefill emitted) and the decode steps still to run."""
        p = self.resume.get(rid)
        if p is None:
            r = self.by_id[rid]
            return RequestSpec(rid, r.prompt_tokens + 1, r.output_tokens - 1)
        return RequestSpec(rid, p.context_tokens + 1, p.tokens_left - 1)

    def _pool_prefill_s(self, r: Request) -> float:
        """Disaggregated: the prefill pool's time for request ``r``."""
        return self.sm.prefill_time(self._prefill_tokens(r.id))

    def _batch_prefill_s(self, rids: list[int]) -> float:
        """Colocated: the GPU time of one prefill batch of these requests."""
        return self.sm.prefill_batch_time([self._prefill_tokens(i) for i in rids], self.rng)

    def _send_due(self) -> None:
        """Closed loop: every free client sends the next request of the pool."""
        while self.pool and self.free_at:
            self._send(self.pool.popleft(), self.free_at.popleft())

    def _first_token(self, rid: int, at: float) -> None:
        """A prefill ended at ``at`` and emitted a token: the first, or after a pre-emption the
        next one (the recompute samples it, as vLLM's does)."""
        r = self.by_id[rid]
        if rid in self.resume:
            self.times[rid].append(at)
        else:
            self.times[rid] = [at]
        if self._spec(rid).max_new_tokens == 0:
            self.resume.pop(rid, None)
            self._release(rid)
            self._finished(rid, at)
        elif self.mode == "disaggregated":
            heapq.heappush(self.ready, (at, rid))
        else:           # prefilled on these GPUs between rounds: the DSU takes it now
            self._submit(r)

    def _submit(self, r: Request) -> None:
        """Into the scheduler's intake: its prompt and first token (after a pre-emption its
        context and next token) are in the KV cache."""
        self.model.submit(self._spec(r.id))
        self.resume.pop(r.id, None)
        self.intake.append(r.id)

    def _finished(self, rid: int, at: float) -> None:
        self.finish[rid] = at
        if self.pool is not None:
            self.free_at.append(at + self.think_s)

    def _arrive_due(self) -> None:
        """Up to the clock: sent requests queue for admission (or, without it, join the
        prefill queue); admitted ones are prefilled (colocated, chunked: the prefill queue;
        disaggregated: the pool); requests prefilled by the pool go to the DSU's intake."""
        while self.arrivals and self.arrivals[0][0] <= self.t:
            rid = heapq.heappop(self.arrivals)[2]
            if self.admission:
                self.gate.append((self.gate_order, rid))
                self.gate_order += 1
            else:
                self.waiting.append([rid, 0])
        self._admit_due()
        while self.ready and self.ready[0][0] <= self.t:
            self._submit(self.by_id[heapq.heappop(self.ready)[1]])

    # -- admission -----------------------------------------------------------------------------
    def _admit_due(self) -> None:
        """Admission in arrival order (strict FIFO): the head is prefilled when it fits
        (:meth:`_fits`); it reserves a slot and its KV until the DSU admits it."""
        while self.gate and self._fits(self.gate[0][1]):
            order, rid = self.gate.popleft()
            r = self.by_id[rid]
            if self._reserves(r):
                self.reserved[rid] = self._need(rid)
                self.reserved_kv += self.reserved[rid]
            # a request that found room is admitted at its arrival; one that waited, when the
            # room it took was freed (the end of the step that ended a request); a pre-empted
            # one, once room was freed after its pre-emption
            if rid in self.requeued_at:
                start = max(self.requeued_at.pop(rid), self.freed_at)
            else:
                start = self.arrival[rid] if order > self.blocked_upto else \
                    max(self.arrival[rid], self.freed_at)
                self.gated_s[rid] = start - self.arrival[rid]
            if self.mode == "disaggregated":
                self._prefill_on_pool(r, start)
            else:
                self.waiting.append([rid, 0])
        if self.gate:
            self.blocked_upto = self.gate[-1][0]

    def _need(self, rid: int) -> int:
        """The KV tokens the scheduler reserves for ``rid`` when it admits it: the DSU its
        prompt, first token and the tokens still to decode; a stack that reserves prompts, its
        prompt (or context) and the token its prefill emits."""
        return self.model.admission_kv(self._spec(rid))

    def _reserves(self, r: Request) -> bool:
        """Whether ``r`` will take a slot and KV: not a one-token request (done at its first
        token), nor one too large for the KV budget (the scheduler refuses it, "too large")."""
        return r.output_tokens > 1 and not self.model.too_large(self._spec(r.id))

    def _fits(self, rid: int) -> bool:
        """Whether request ``rid`` could be admitted by the scheduler now: a slot and its KV
        (with the stack's watermark left free) beside the requests already past admission; one
        that takes neither is let through."""
        if not self._reserves(self.by_id[rid]):
            return True
        keep_free = self.model.watermark_tokens if self.preemptive else 0
        return (self.model.occupied_slots + len(self.reserved) < self.dsu.n_slots
                and self.model.kv_used + self.reserved_kv + self._need(rid) + keep_free
                <= self.dsu.kv_capacity_tokens)

    def _release(self, rid: int) -> None:
        """Request ``rid`` holds no reservation any more (in a DSU slot, refused, or done)."""
        need = self.reserved.pop(rid, None)
        if need is not None:
            self.reserved_kv -= need

    def _next_event(self) -> float | None:
        times = [q[0][0] for q in (self.ready, self.arrivals) if q]
        if self.pool and self.free_at:      # a client freed outside a decode step (a one-token
            times.append(min(self.free_at))  # request, a refusal) sends its next request then
        extra = self._next_extra_event()
        if extra is not None:
            times.append(extra)
        return min(times) if times else None

    # hooks of the agentic sessions (sim/fast/agentic.py); plain requests have none of these
    def _next_extra_event(self) -> float | None:
        return None

    def _extra_due(self) -> None:
        """Events up to the clock other than arrivals and prefill completions."""

    def _token(self, request: int) -> None:
        """DSU request ``request`` emitted a token at the clock."""
        self.times[request].append(self.t)

    def _request_ended(self, outcome) -> None:
        self._finished(outcome.request, self.t)

    def _after_round(self, rnd, step) -> None:
        """After a round's step completed (``step`` None when nothing ran)."""

    def _finished_ok(self, rid: int) -> bool:
        """Whether request ``rid``'s token times count in the latency metrics."""
        outcome = self.model.outcomes.get(rid)
        return outcome is None or outcome.status == "completed"

    # -- the GPUs ------------------------------------------------------------------------------
    def loop(self) -> None:
        while True:
            if self.t > TIME_HORIZON_S:     # a guard: check_horizon refuses the known causes
                raise ValueError(f"the simulated clock passed the horizon of {TIME_HORIZON_S:g} s, "
                                 "where float64 seconds no longer resolve a decode step")
            self._send_due()
            self._extra_due()
            self._arrive_due()
            if self.mode == "colocated" and self.waiting:
                self._prefill_batch()
            elif not self._decode_step():
                nxt = self._next_event()
                if nxt is None:
                    if self.gate or self.resume or self.pool:     # an invariant, not an input error
                        raise RuntimeError(f"the run stopped with {len(self.gate)} requests waiting for "
                                           f"admission, {len(self.resume)} pre-empted ones not resumed and "
                                           f"{len(self.pool or ())} not sent")
                    break
                self.t = max(self.t, nxt)
            if self.progress is not None:
                self.progress(len(self.finish), len(self.requests))

    def _prefill_batch(self) -> None:
        """Colocated: whole waiting prompts in arrival order, up to the stack's batch budget
        (at least one), run before the next decode step; their first tokens at its end."""
        budget, total, rids = self.sm.stack.prefill_batch_tokens, 0, []
        while self.waiting:
            p = self._prefill_tokens(self.waiting[0][0])
            if rids and total + p > budget:
                break
            rids.append(self.waiting.popleft()[0])
            total += p
        dt = self._batch_prefill_s(rids)
        self.t += dt
        self._prefill_energy(rids, dt)
        self.prefill_s += dt
        for rid in rids:
            self._first_token(rid, self.t)

    def _take_chunk(self, decode_tokens: int) -> list[tuple[list[int], int]]:
        """Chunked: (waiting entry, prompt tokens) pieces in arrival order, within the stack's
        token budget less the step's ``decode_tokens`` (decode first, as vLLM V1 and
        TensorRT-LLM's in-flight batcher schedule); a prompt may be split across steps."""
        budget, pieces = max(0, self.sm.stack.prefill_chunk_tokens - decode_tokens), []
        for entry in self.waiting:
            if budget == 0:
                break
            n = min(self._prefill_tokens(entry[0]) - entry[1], budget)
            pieces.append((entry, n))
            budget -= n
        return pieces

    @staticmethod
    def _chunk_context(pieces) -> float:
        """One context for the chunk's attention FLOPs: step_time counts ``T·ctx + T²/2``
        query-key pairs for T chunk tokens, the pieces ``Σ n·done + Σ n²/2``; this ctx makes the
        two equal, clamped at 0 (several short pieces then count a little too much)."""
        total = sum(n for _, n in pieces)
        pairs = sum(n * entry[1] + n * n / 2 for entry, n in pieces)
        return max(0.0, (pairs - total * total / 2) / total) if total else 0.0

    def _decode_step(self) -> bool:
        """One scheduling round and its step (with a prefill chunk in chunked mode); False when
        there was nothing to run."""
        n_outcomes = len(self.model.outcomes)
        rnd = self.model.step()
        refused = list(islice(reversed(self.model.outcomes), len(self.model.outcomes) - n_outcomes))
        for rid in refused:
            self._finished(rid, self.t)          # refused at admission (too large)
        # the intake is strict FIFO: this round took its first admitted + refused requests
        for _ in range(rnd.admitted + len(refused)):
            rid = self.intake.popleft()
            self._release(rid)
            if rid not in refused:
                self.admitted.setdefault(rid, self.t)      # a pre-empted request keeps its first
        self.intake_wait_rounds += len(self.intake)
        if self.preemptive:
            rnd = self._make_room(rnd)
        chunk = self._take_chunk(len(rnd.batch)) if self.mode == "chunked" else []
        batch = rnd.batch
        if not batch and not chunk:
            self.model.complete()
            self.retired = 0
            self._after_round(rnd, None)
            return False
        st = self._timed_step(rnd, chunk)
        self.t += st.time_s
        results = {d.slot: self.faults[(rnd.number, d.slot)] for d in batch
                   if (rnd.number, d.slot) in self.faults} if self.faults else {}
        if any(v == TIMEOUT for v in results.values()):
            self.t += self.sm.stack.host_step_s  # the watchdog fires after a host step's worth
        ended = self.model.complete(results)
        self.retired = len(ended)
        if ended:
            self.freed_at = self.t
        for d in batch:
            if d.slot not in results:
                self._token(d.request)
        for o in ended:
            self._request_ended(o)
        for entry, n in chunk:
            entry[1] += n
            if entry[1] == self._prefill_tokens(entry[0]):
                self.waiting.popleft()
                self._first_token(entry[0], self.t)
        self._record(st, len(batch))
        self._after_round(rnd, st)
        return True

    def _make_room(self, rnd):
        """A stack that reserves KV as it grows: while this round's batch needs more KV (one
        token each) than is free beside what the requests past admission hold, pre-empt the
        running request admitted last; it waits to be prefilled again (admission: at the head of
        the queue; without it at once). Returns the round with its batch as run."""
        cap, victims = self.dsu.kv_capacity_tokens, []
        while self.model.pending and self.model.kv_used + self.reserved_kv + len(self.model.pending) > cap:
            victims.append(self.model.preempt_latest())
        for p in victims:
            self.resume[p.request] = p
            self.preemption_recompute_tokens += p.context_tokens
            if self.admission:
                self.requeued_at[p.request] = self.t
                self.gate.appendleft((-1, p.request))
            elif self.mode == "disaggregated":
                self._prefill_on_pool(self.by_id[p.request], self.t)
            else:   # behind the prompts part-prefilled (chunked), ahead of the others
                at = next((i for i, e in enumerate(self.waiting) if e[1] == 0), len(self.waiting))
                self.waiting.insert(at, [p.request, 0])
        if not victims:
            return rnd
        self.freed_at = self.t
        return replace(rnd, batch=list(self.model.pending), active=self.model.occupied_slots)

    def _timed_step(self, rnd, chunk):
        batch, dsu = rnd.batch, self.dsu
        degraded = self.degraded_at_s is not None and self.t >= self.degraded_at_s
        args = ([d.seq_len for d in batch], [d.residency for d in batch], self.rng, degraded,
                rnd.active, dsu.cap, dsu.profile, rnd.admitted, self.retired, rnd.blocked, dsu.n_slots)
        if not chunk:
            return self.sm.step_time(*args)
        tokens = sum(n for _, n in chunk)
        # the chunk's share of the step: its time minus the same step's without it (the same
        # random draws for both)
        state = self.rng.bit_generator.state
        without = self.sm.step_time(*args).time_s if batch else 0.0
        self.rng.bit_generator.state = state
        st = self.sm.step_time(*args, prefill_tokens=tokens, prefill_context=self._chunk_context(chunk))
        self.prefill_s += st.time_s - without
        return st

    def _prefill_parts_of(self, rids) -> tuple[list[int], list[int]]:
        """The prompt tokens each of ``rids`` prefills and the context they extend (asked after
        the prefill's time)."""
        return [self._prefill_tokens(i) for i in rids], [0] * len(rids)

    def _prefill_energy(self, rids, time_s: float | None = None) -> None:
        """A prefill's bytes and FLOPs (a colocated batch of ``time_s`` ending at the clock, or
        the pool's work for one request; a chunk is in its step's)."""
        hbm, flops, link = self.sm.prefill_work(*self._prefill_parts_of(rids))
        pool = self.mode == "disaggregated"
        if not pool:
            self.hbm_bytes += hbm
        if self.energy is not None:
            self.energy.work(GpuWork(hbm, 0.0, flops, link), time_s, self.t if time_s is not None else None, pool)

    def _record(self, st, batch: int) -> None:
        rows, busy = self.rows, self.busy
        self.hbm_bytes += st.hbm_read_bytes + st.hbm_write_bytes
        if self.energy is not None:
            self.energy.work(GpuWork.of_step(st), st.time_s, self.t)
        rows["dt"].append(st.time_s)
        rows["end"].append(self.t)
        rows["hbm"].append(st.hbm_read_bytes + st.hbm_write_bytes)
        rows["floor"].append(st.floor_s)
        rows["batch"].append(batch)
        busy["sm"] += st.sm_busy_s
        busy["te"] += st.te_busy_s
        busy["cdu"] += st.cdu_busy_s
        busy["sched"] += st.sched_s
        busy["l2"] += st.l2_kv_bytes
        busy["l2_reuse"] += st.l2_reuse_bytes
        busy["kv"] += st.kv_read_bytes
        busy["attn"] += st.attn_s
        busy["attn_hbm"] += st.attn_hbm_bytes
        if batch:
            self.bound[st.bound] += 1
            busy["imbalance"] += st.te_imbalance
    # -- the result ----------------------------------------------------------------------------
    def _energy_summary(self, summary) -> dict:
        """Energy and power (docs/energy.md): per output token of the whole group, per GPU, by
        component; None where the GPU has no energy coefficients."""
        keys = ("energy_j_per_token", "tokens_per_joule", "power_w_mean", "power_w_peak",
                "tokens_per_s_per_mw", "power_capped", "power_cap_clock", "energy_split")
        if self.energy is None:
            return dict.fromkeys(keys)
        led, tp = self.energy, self.sm.tp
        duration = summary["duration_s"]
        led.close(duration)
        gpu_j = sum(led.joules[k] for k in GPU_COMPONENTS)
        floor = led.floor_j(self.hbm_bytes, duration)
        if gpu_j < floor * (1 - 1e-9):
            raise PhysicsViolation(f"the run's energy {gpu_j:.6g} J per GPU is below its floor {floor:.6g} J "
                                   "(static power over its duration plus its HBM bytes)")
        tokens = summary["output_tokens"]
        mean_w = gpu_j / duration if duration > 0 else float("nan")
        total = sum(led.joules.values())
        board = led.coeffs.board_w
        serving_j = tp * (gpu_j + led.joules["pool"])
        return {"energy_j_per_token": serving_j / tokens,
                "tokens_per_joule": tokens / serving_j if serving_j > 0 else float("inf"),
                "power_w_mean": mean_w,
                "power_w_peak": led.peak_w(),
                "tokens_per_s_per_mw": summary["tokens_per_s"] / (tp * mean_w) * 1e6 if mean_w > 0 else float("nan"),
                "power_capped": bool(mean_w > board),
                # first order: dynamic power scales with the clock, so the cap holds at this share of it
                "power_cap_clock": (min(1.0, (board - led.coeffs.static_w) / (mean_w - led.coeffs.static_w))
                                    if mean_w > led.coeffs.static_w else 1.0),
                "energy_split": {k: (led.joules[k] / total if total else 0.0) for k in COMPONENTS}}

    def result(self, ttft_slo_s, tpot_slo_s) -> SimResult:
        model, busy = self.model, self.busy
        done = [RequestTimes(self.arrival[rid], tuple(ts), self.admitted.get(rid),
                             self.gated_s.get(rid, 0.0))
                for rid, ts in self.times.items() if self._finished_ok(rid)]
        if not done:
            reasons: dict[str, int] = {}
            for o in model.outcomes.values():
                reasons[o.reason] = reasons.get(o.reason, 0) + 1
            why = "; ".join(f"{n} {reason}" for reason, n in sorted(reasons.items()))
            raise ValueError(f"no request finished: all {len(self.requests)} failed ({why})"
                             + (f"; a request is too large when prompt + output tokens exceed the "
                                f"DSU's KV budget of {self.dsu.kv_capacity_tokens:,} tokens"
                                + (f" less the stack's KV watermark of {model.watermark_tokens:,}"
                                   if self.preemptive else "")
                                if "too large" in reasons else ""))
        summary = summarise(done, ttft_slo_s, tpot_slo_s).as_dict()
        dt, hbm, floor = (np.array(self.rows[k]) for k in ("dt", "hbm", "floor"))
        batches = np.array(self.rows["batch"], dtype=int)
        decode_time = float(dt.sum())
        share = (lambda x: x / decode_time) if decode_time else (lambda x: 0.0)  # noqa: E731
        summary.update(
            failed=sum(1 for o in model.outcomes.values() if o.status == "failed"),
            steps=len(dt),
            hbm_gbps_mean=share(float(hbm.sum())) / 1e9,
            hbm_gbps_peak=float((hbm / dt).max() / 1e9) if len(dt) else 0.0,
            l2_hit_rate=busy["l2"] / busy["kv"] if busy["kv"] else 0.0,
            l2_reuse_rate=busy["l2_reuse"] / busy["kv"] if busy["kv"] else 0.0,
            min_step_over_floor=float((dt / floor).min()) if len(dt) else float("nan"),
            sm_utilisation=share(busy["sm"]),
            te_utilisation=share(busy["te"]),
            cdu_utilisation=share(busy["cdu"]),
            dsu_utilisation=share(busy["sched"]) if "dsu" in self.sm.cuts else 0.0,
            mean_batch=float(batches[batches > 0].mean()) if (batches > 0).any() else 0.0,
            rollbacks=model.rollbacks,
            kv_tokens_leaked=model.kv_used,
            slots_in_use_at_end=model.occupied_slots,
            stack=self.sm.stack.name,
            prefill_mode=self.mode,
            prefill_s_total=self.prefill_s,
            concurrency=self.concurrency,
            think_s=float(self.think_s),
            admission=self.admission,
            client_jitter=self.client_jitter if self.concurrency else None,
            admission_waits=sum(1 for w in self.gated_s.values() if w > 0),
            intake_wait_rounds=self.intake_wait_rounds,
            kv_reserve="prompt" if self.preemptive else "output",
            preemptions=self.model.preemptions if self.preemptive else 0,
            preemption_recompute_tokens=self.preemption_recompute_tokens,
        )
        # what bound the decode steps, and how well the attention phase used HBM
        # (docs/system-model.md, "What binds")
        decode_steps = sum(self.bound.values())
        summary.update(
            bound_share={k: (n / decode_steps if decode_steps else 0.0)
                         for k, n in self.bound.items()},
            attn_hbm_utilisation=(busy["attn_hbm"] / (busy["attn"] * self.sm.gpu.hbm_bandwidth)
                                  if busy["attn"] else 0.0),
            te_grid_imbalance=(busy["imbalance"] / decode_steps
                               if decode_steps and "te" in self.sm.cuts else 1.0),
        )
        summary["requests"] = len(self.requests)
        summary.update(self._energy_summary(summary))
        return SimResult(summary, len(dt), dt, np.array(self.rows["end"]), hbm, floor, batches,
                         dict(model.outcomes), done, dict(self.arrival), dict(self.finish), self.energy)
