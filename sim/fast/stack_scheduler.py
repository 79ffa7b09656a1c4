"""The baseline's scheduler under a stack that reserves KV as it grows (vLLM), beside the DSU's.

The DSU (:class:`tricut.models.dsu.DsuModel`) reserves a request's prompt and every token it
may decode when it admits it, so KV never runs out mid-decode; so does TensorRT-LLM's default
capacity scheduler (``GUARANTEED_NO_EVICT``). vLLM reserves only what a request holds: its
block manager admits a request when its prompt's blocks and a watermark are free
(``BlockSpaceManager.can_allocate``), each decoded token takes one more slot, and when a
running request cannot grow the scheduler pre-empts the running request admitted last
(``running_queue.pop()``; V1 ``self.running.pop()``) by recompute: its KV is freed and it goes
back to the head of the waiting queue, to be prefilled again with the tokens it had decoded.

:class:`StackScheduler` is the DSU model's rounds and batch choice with that KV policy; the
serving loop (:mod:`.system`) asks it to pre-empt and re-queues the victims. docs/system-model.md,
"Admission and pre-emption".
"""

from __future__ import annotations

from dataclasses import dataclass

from tricut.models.dsu import OK, DsuModel, RequestSpec

__all__ = ["Preempted", "StackScheduler"]


@dataclass(frozen=True)
class Preempted:
    """A request pre-empted by recompute: its KV is gone and it waits to be prefilled again."""
    request: int
    context_tokens: int      # its KV when pre-empted (prompt and tokens emitted): recomputed
    tokens_left: int         # decode steps it still had to run


@dataclass
class StackScheduler(DsuModel):
    """:class:`DsuModel` with KV reserved as it grows: admission takes the prompt's KV, each
    completed token one more, and :meth:`preempt_latest` frees a running request's KV.
    ``watermark_tokens``: the KV the serving loop's admission control leaves free beside a new
    request (vLLM checks its watermark before the prefill, which the loop's admission is; a
    request past it is not held back again)."""

    watermark_tokens: int = 0

    def __post_init__(self):
        super().__post_init__()
        w = self.watermark_tokens
        if isinstance(w, bool) or not isinstance(w, int) or not 0 <= w < self.params.kv_capacity_tokens:
            raise ValueError(f"watermark_tokens must be an integer in [0, {self.params.kv_capacity_tokens}), "
                             f"got {w!r}")
        self.preemptions = 0

    def too_large(self, req: RequestSpec) -> bool:
        """Beyond the budget less the watermark: such a request, pre-empted, could not be
        admitted again even alone (vLLM refuses a prompt whose blocks leave less than the
        watermark free, ``AllocStatus.NEVER``)."""
        return req.prompt_tokens + req.max_new_tokens + self.watermark_tokens > self.params.kv_capacity_tokens

    def admission_kv(self, req: RequestSpec) -> int:
        """Its prompt (after a pre-emption its context) and the token its prefill emitted."""
        return req.prompt_tokens

    def complete(self, results: dict[int, str] | None = None):
        results = dict(results or {})
        batch = {d.slot for d in self.pending}
        if set(results) <= batch:          # the base class refuses the others, unchanged
            for slot in batch:
                if results.get(slot, OK) == OK:
                    self.slots[slot].reserved += 1      # the token's KV, before a finish frees it
                    self.kv_used += 1
        return super().complete(results)

    def preempt_latest(self) -> Preempted:
        """Pre-empt the running request admitted last (FCFS: the tail of vLLM's running queue):
        free its slot and KV and drop it from this round's batch. The request is forgotten; the
        serving loop submits it again after its recompute."""
        running = [i for i, s in enumerate(self.slots) if s is not None and s.state == "active"]
        if not running:
            raise RuntimeError("no running request to pre-empt")
        i = max(running, key=lambda j: self.slots[j].arrival_seq)
        s = self.slots[i]
        self.slots[i] = None
        self.kv_used -= s.reserved
        self._live.discard(s.request)
        self._where.pop(s.request, None)
        self.pending = [d for d in self.pending if d.slot != i]
        self.preemptions += 1
        return Preempted(s.request, s.seq_len, s.tokens_left)
