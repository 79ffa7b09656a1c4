"""The timing model of the decode tile (``AttentionPath``: CDU, L2 fill engine, new-token
writer, unit streamer, routed TE array; or without the CDU, the unit streamer reading every
block from HBM): cycles per layer (``go`` to ``done``, as ``RunResult.layer_cycles``) for a
whole run, from the tile's configuration and the CDU's decisions (the golden CDU model's
transactions, in order), for the integration calibration (docs/tile/timing.md, "Integration
calibration"; ``benchmarks/tile_calibration.py``).

The tile has four agents that meet on
shared resources (the HBM port and its response channel, the L2 write port, the CDU's
decision order, the per-engine K/V FIFOs), so the model steps them cycle by cycle, each by
the rule its RTL unit implements (a few dozen Python operations per cycle: ~0.1 s for a
two-step tiny-te run). Time is absolute over the run: the CDU's fills and prefetches run
across layer boundaries and through the host's traffic between layers, whose cycles are the
co-simulation harness's (``host_gaps``).

**HBM** (``HbmModel``, in order): a request accepted on cycle ``a`` is due on ``a + latency``;
the response channel answers due bursts in acceptance order, one beat per cycle, bursts back
to back; ``hbm_outstanding`` slots (a slot frees the cycle after its last beat).

**Block readers** (``HbmBlockReader``, one for the filler, one for the streamer; the filler
has priority on the HBM request port): a block read of ``ntok`` tokens (``ntok*2*Dk`` words)
is cut into bursts of ``max_beats``, one burst per cycle while one of ``max_outstanding``
reorder slots is free; a burst's words are handed on one per cycle from the cycle after its
last beat, oldest slot first; the next block read is taken the cycle after the previous one's
last burst was issued.

**Fill engine** (``L2Filler``): a fill (``hbm_req`` with ``alloc``) is taken when the order
queue has room and the previous fill's ``H`` block reads (kv head ``h``, 16 tokens) are all
taken by its reader; its ``16*H*2*Dk`` words go into the L2 frame one per cycle in order (the
new-token writer's L2 words have priority), the response the cycle after its last word. So a
fill ends ``latency + max_beats + 2 + 16*H*2*Dk`` cycles after it is taken when alone, and
back-to-back fills end ``16*H*2*Dk`` cycles apart. A read without ``alloc`` (a bypass) is
answered when it reaches the head of the queue.

**CDU retries** (``retries``: a block's first fill answered with ``err`` ``n`` times, the
HBM model's fault on one of its kv heads' first burst; ``rtl/cdu/core.py``): the filler
times a failed attempt as any fill (the HBM answers ``err`` beats on the same cycles) and
answers it the cycle after its last word (``c``); the CDU takes the response on ``c``, sets
its MSHR's retry bit (the MSHR stays busy, its ready entry waiting), and loads the read into
its ``hbm_req`` register from ``c + 1`` when the register is free or read, retries first
(lowest MSHR id, the lowest free one when the read was decided), then first attempts in
order. The retry is a new fill for the filler (queue slot, ``H`` block reads, every word
into L2 again), and the queue may be empty between the attempts (a W's L2 words may go
then). Only the final, clean response frees the MSHR and offers the ready entry. A retry's
``alloc`` is its MSHR's ``own`` (an orphaned attempt reads nothing, answers ``err = 0``).

**New-token writer**: a W decision waits for its layer's ``go`` (the layer opens the cycle
after), writes ``H*2*Dk`` HBM words, and on ``w_hit``/``w_alloc`` waits until no fill is
queued or in flight, then writes ``H*2*Dk`` L2 words::

    s = max(decided, go + 1)
    taken = s + H*2*Dk                                            (w_bypass)
    taken = max(s + H*2*Dk + 1, last fill response) + H*2*Dk      (w_hit, w_alloc)

**CDU** (the decisions are the golden model's, :func:`cdu_decisions`; their timing is the
RTL's): the front end emits decision ``i`` ``fe_i`` cycles after decision ``i-1``
(``rtl/cdu/frontend.py``: a P or R 1; a W 4, +5 when the previous unit is observed by the
adaptive predictor, +2 when its own unit is planned at its start) once its output register
is free, plus 2 per unit its prefetch walk plans just before a P or R (``p_i``; the walk
decides only when the register is free); the decision then passes the intake's and the
core's registers::

    e_i = max(e_{i-1} + fe_i, taken_{i-3}) + 2*p_i    (emitted; round's step beats first)
    o_i = max(e_i + 3, taken_{i-1} + 1)               (offered on txn)

A W is taken as above, any other decision at once, except that an HBM read (``pf_issue``,
``miss_alloc``, ``miss_bypass``: into the CDU's ``hbm_req`` register the cycle it is taken,
or when the register is next read) waits while ``mshrs`` fills are unanswered, a demand read
while ``rq_depth`` ``ready`` entries are not popped, and an allocation whose victim still has
a ``ready`` entry not popped waits (the eviction hold) -- a response or pop on cycle ``c``
frees its resource for a decision offered on ``c + 2``. An allocation whose victim's fill is
not yet answered orphans it: sent to the fill engine from then on, it has ``alloc = 0``.
A demand read's ``ready`` entry (one per block, in order) is offered from the cycle it is
taken (a hit on a resident block) or the cycle after its fill's (or bypass answer's)
response, and not before the cycle after the previous entry was popped.

**Unit streamer** (``UnitStreamer``): per (slot, layer) unit of ``H*parts`` jobs, passes of
at most ``E`` jobs (job ``k`` of the run to engine ``k mod E``): one cycle per job taken, per
job a ``job`` beat (when its engine is idle) and ``G*Dk`` q beats; then per 16-token block
the pass covers: one cycle to choose the source; the first pass's block with a hit or
allocated entry reads the whole L2 frame (request one cycle, data from two cycles later,
``16*H*2*Dk`` words token-major, a word of a token no pass job covers dropped in its cycle, a
covered word sent when its engine's FIFO has room), a bypass entry or a later pass reads HBM
(one 1-token block read per (token, pass job), issued at most one per two cycles, the walker
stepping over the ``E`` job slots per token, :func:`walk_depth` reads in flight); the entry
is popped after the block; one cycle between blocks and at the pass's end. Without the CDU
(``l2=False``: no decisions, no fills, no L2) every pass reads its tokens from HBM so, in one
walk over the whole pass (not block by block: the reads of a block are in flight while the
previous block's answers arrive) that steps offsets into every pass job in turn (job ``j``'s
token ``start_j + offset``: split parts fed side by side).

**Routed TE array** (``TEArray(routed_kv=True)``, ``engine`` of the config): per engine a
FIFO of ``2*2*Dk`` words; a job is dispatched when its engine is idle; the engine takes its
``G*Dk`` q beats, then its tokens, then its ``G*Dk`` (``+G`` for a split part) output beats
when its job is the oldest not yet out (a job's last beat not before 3 cycles after the
previous job's: the status register). The serial engine (``TEEngine``) takes per token ``Dk``
K words (``G`` cycles each, every cycle needing the word) and ``Dk`` V words (``2G`` cycles
each, the word needed every second cycle); its output beats are ready one a cycle. The
pipelined engine (``TEPipelinedEngine``, latencies :func:`tricut.models.te.te_pipe_timing`)
takes per token ``Dk`` K words (``G`` cycles each; the last one held while its V array is
``slots`` tokens behind) and then ``Dk`` V words, one a cycle, into its V buffer; the V array
works behind, op ``(b, g)`` once its beat is in and head ``g``'s ``p`` is out of the scalar
unit, ``score_to_v`` cycles after the K op that ended the head; after the last V op its
pipelines empty (``v_update`` cycles and one), and each normalised output beat is ready
``out_beat`` cycles (``+ recip`` at a head's first) after the previous one was taken, partial
beats at once. A split part's
beats go to the combine unit (``rtl/tile/combine.py``): a split's first part is preceded by
the combine unit's job beat (a cycle with no ``out`` beat), taken only when the unit is idle;
after its final part's last beat (cycle ``f``) the unit folds the last head (``Dk`` cycles)
and writes the ``G*Dk`` combined beats (cycles ``f+Dk+1 .. f+Dk+G*Dk``; no direct job's beat
goes into the output buffer then), idle from the cycle after. So with several engines a
split whose outputs are ready right after the previous split's waits ``Dk + G*Dk + 1``
cycles for it. The harness sees ``done``::

    done = max(last out beat + 4 (+ Dk + G*Dk - STATUS_TAIL after a split part: the
               combine unit's tail, :data:`.te_array_timing.STATUS_TAIL`),
               the streamer's last block popped + 3)     (its last frame read to the end)

**With the DSU cluster in the loop** (:func:`predict_dsu_run`): the same tile stepped on the
top's clock from each round's first descriptor (an input: the DSU firmware's time between
rounds is not modelled), the descriptors one per scanned slot, the harness's traffic and
the DSU link's completions (see its docs).

**A round with the DSU cluster in the loop that never completes** (a job waits forever:
``--hang``) ends when the arbiter's slot watchdogs have timed out every descriptor: slot
``k``'s watchdog runs from its issue (``k - first slot`` cycles after the first) for ``limit``
cycles, the expiries are applied one per cycle, the arbiter's ``ROUND`` then moves on and the
DSU link aborts the round (:func:`predict_dsu_timeout`)::

    timed-out round = span + limit + 3      (first descriptor to the abort, inclusive)
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from tricut.models.cdu import KV_BLOCK_TOKENS
from tricut.models.te import te_pipe_timing
from tricut.models.tile import split_parts

from .te_array_timing import STATUS_TAIL

__all__ = ["CDU_FE_ENTRIES", "TileConfig", "Decision", "host_gaps", "predict_run", "predict_dsu_run",
           "cdu_decisions", "engine_job_cycles", "predict_dsu_timeout",
           "DSU_TIMEOUT_EXTRA"]


def walk_depth(max_outstanding):
    """Block reads the unit streamer's HBM walk keeps in flight (its ``routes`` FIFO,
    ``rtl/tile/unit_streamer.py``): the block reader's burst slots, at least 8."""
    return max(8, max_outstanding)


#: the CDU front end's adaptive-predictor scatter entries per (slot, layer) in the tile
#: (``rtl/tile/attention_path.py``; the golden ``FrontEnd(entries=...)`` takes the same)
CDU_FE_ENTRIES = 8


@dataclass(frozen=True)
class TileConfig:
    """The tile's configuration: the TE array (``engines``, ``lanes``, the engine design),
    the model's attention shape (``head_dim``, ``G``, ``num_kv_heads``, ``num_layers``),
    split-K, the HBM model (``latency`` cycles, bursts of ``max_beats`` beats, outstanding
    bursts), the block readers' outstanding bursts, the L2 data array's latency, the CDU's
    MSHRs and the fill engine's order queue."""
    engines: int
    head_dim: int
    G: int
    lanes: int
    num_kv_heads: int
    num_layers: int
    split_tokens: int = 0
    latency: int = 8
    max_beats: int = 16
    max_outstanding: int = 4
    hbm_outstanding: int = 4
    #: the HBM's bandwidth: at most ``num`` beats per ``den`` cycles (``HbmModel(rate=)``)
    hbm_rate: tuple = (1, 1)
    l2_latency: int = 2
    mshrs: int = 4
    rq_depth: int = 4
    fill_depth: int = 4
    max_retries: int = 2
    #: the TE array's engine design and the K/V format (the pipelined engine's latencies
    #: depend on it)
    engine: str = "pipelined"
    kv_dtype: str = "bf16"
    #: the CDU and the L2 in the K/V path; False: the tile without the CDU, whose streamer
    #: reads every block from HBM (``DecodeTile(cdu=None)``; the run has no CDU decisions)
    l2: bool = True

    @property
    def dk(self):
        return self.head_dim // self.lanes

    @property
    def block_beats(self):
        return KV_BLOCK_TOKENS * self.num_kv_heads * 2 * self.dk


@dataclass(frozen=True)
class Decision:
    """One CDU decision (a golden ``Txn``): ``kind`` R/W/P/S, the block, the ``result``, the
    victim block (or None) and whether it reads HBM."""
    kind: str
    req: int
    layer: int
    block: int
    result: str
    victim: tuple | None = None
    hbm: bool = False
    #: the step (round) it belongs to, the front end's cycles from the previous decision's
    #: emission to its own, and the units its prefetch walk plans just before it (2 cycles
    #: each, once the front end's output register is free; see :func:`cdu_decisions`)
    step: int = 0
    fe: int = 1
    plans: int = 0

    @property
    def tag(self):
        return (self.req, self.layer, self.block)


# --------------------------------------------------------------------------- HBM and readers

class _Burst:
    __slots__ = ("n", "left", "due", "full", "taken", "fin", "meta")

    def __init__(self, n, fin, meta):
        self.n, self.left, self.fin, self.meta = n, n, fin, meta
        self.due = self.full = None
        self.taken = 0


class _Hbm:
    """The HBM model's request slots and in-order response channel, at most ``rate = (num,
    den)`` beats per ``den`` cycles (the credit rule of ``burst_responder``)."""

    def __init__(self, latency, slots, rate=(1, 1)):
        self.latency, self.slots = latency, slots
        self.num, self.den = rate
        self.credit = self.den
        self.q = deque()
        self.busy_port = False          # a request was accepted this cycle

    def free(self):
        return len(self.q) < self.slots and not self.busy_port

    def accept(self, t, burst):
        burst.due = t + self.latency
        self.q.append(burst)
        self.busy_port = True

    def tick(self, t):
        self.busy_port = False
        if self.credit < self.den:
            self.credit += self.num
        elif self.q and self.q[0].due <= t:
            self.credit += self.num - self.den
            b = self.q[0]
            b.left -= 1
            if b.left == 0:
                b.full = t + 1
                self.q.popleft()


class _Reader:
    """``HbmBlockReader``: block reads cut into bursts, reorder slots drained in order."""

    def __init__(self, cfg, hbm):
        self.hbm, self.slots, self.max_beats = hbm, cfg.max_outstanding, cfg.max_beats
        self.words_per_token = 2 * cfg.dk
        self.cut = deque()              # bursts of the block read being cut
        self.cut_from = 0               # first cycle a burst of it may be issued
        self.rob = deque()
        self.used = 0                   # slots in use at the start of the cycle

    def begin(self):
        self.used = len(self.rob)

    def ready(self):
        return not self.cut

    def request(self, t, ntok, meta):
        words = ntok * self.words_per_token
        sizes = []
        while words:
            sizes.append(min(words, self.max_beats))
            words -= sizes[-1]
        self.cut.extend(_Burst(n, i == len(sizes) - 1, meta) for i, n in enumerate(sizes))
        self.cut_from = t + 1

    def issue(self, t):
        if self.cut and t >= self.cut_from and self.used < self.slots and self.hbm.free():
            b = self.cut.popleft()
            self.hbm.accept(t, b)
            self.rob.append(b)

    def head(self, t):
        """The oldest slot's burst when its next word can be handed on this cycle."""
        if self.rob and self.rob[0].full is not None and self.rob[0].full <= t:
            return self.rob[0]
        return None

    def take(self):
        """Hands the head word on; returns (burst, last word of its block read)."""
        b = self.rob[0]
        b.taken += 1
        if b.taken == b.n:
            self.rob.popleft()
            return b, b.fin
        return b, False


# --------------------------------------------------------------------------- fill engine, writer

class _Fill:
    """One CDU HBM read (an MSHR): its attempts go through the fill engine until one is
    answered without ``err``; ``resp`` is the cycle of that (final) response."""
    __slots__ = ("d", "alloc", "decided", "at", "left", "resp", "orphan", "id", "fails",
                 "tries", "retry_from")

    def __init__(self, d, alloc, decided, words, mshr=0, fails=0):
        self.d, self.alloc, self.decided, self.left = d, alloc, decided, words
        self.at = self.resp = self.orphan = self.retry_from = None
        self.id, self.fails, self.tries = mshr, fails, 0


class _Filler:
    """``L2Filler``: order queue, the newest fill's ``H`` block reads, in-order drain into L2."""

    def __init__(self, cfg, hbm):
        self.cfg, self.H = cfg, cfg.num_kv_heads
        self.reader = _Reader(cfg, hbm)
        self.reqs = deque()             # the CDU's HBM reads not yet in its hbm_req register
        self.retries = []               # failed reads to re-send (before first attempts)
        self.reg = None                 # the one in it
        self.queue = deque()
        self.issuing = 0                # block reads of the newest fill not yet taken
        self.issue_from = 0
        self.last_resp = -1             # cycle of the latest response

    def idle(self):
        return not self.queue

    def tick_take(self, t):
        f = self.reg
        if f is not None and f.at <= t and not self.issuing and \
                len(self.queue) < self.cfg.fill_depth:
            # a fill orphaned (its frame re-allocated) before it is sent reads nothing
            f.alloc = f.alloc and (f.orphan is None or f.orphan > t)
            self.reg = None
            f.at = t + 1                    # at the queue's head from the next cycle
            self.queue.append(f)
            if f.alloc:
                self.issuing, self.issue_from = self.H, t + 1
        if self.reg is None:                        # the CDU's hbm_req register
            due = [r for r in self.retries if r.retry_from <= t] if self.retries else None
            if due:                                 # retries first (lowest MSHR id)
                f = self.reg = min(due, key=lambda r: r.id)
                self.retries.remove(f)
                f.at = t + 1
            elif self.reqs and self.reqs[0].decided <= t:
                f = self.reg = self.reqs.popleft()
                f.at = t + 1
        if self.issuing and t >= self.issue_from and self.reader.ready():
            self.reader.request(t, KV_BLOCK_TOKENS, None)
            self.issuing -= 1

    def tick_drain(self, t, l2_port_busy):
        """The queue head: a bypass answer, or one word into L2 (not while the writer
        writes L2). Returns the fill answered this cycle (its response is on ``t + 1``)."""
        if not self.queue:
            return None
        f = self.queue[0]
        if f.at > t:
            return None
        if f.alloc:
            if l2_port_busy or self.reader.head(t) is None:
                return None
            self.reader.take()
            f.left -= 1
            if f.left:
                return None
            if f.fails and f.tries < self.cfg.max_retries:
                # answered with err (the HBM fault's count lasts): the CDU takes the
                # response on t + 1, sets the MSHR's retry bit, and loads the read into its
                # hbm_req register from t + 2 (before any first attempt)
                self.queue.popleft()
                f.fails -= 1
                f.tries += 1
                f.left = self.cfg.block_beats
                f.retry_from = t + 2
                self.retries.append(f)
                return None
        self.queue.popleft()
        f.resp = self.last_resp = t + 1
        return f


class _Writer:
    """``NewTokenWriter``: a W's HBM words after its layer opens, then (hit, alloc) its L2
    words once no fill is queued or in flight."""

    def __init__(self, cfg):
        self.words = cfg.num_kv_heads * 2 * cfg.dk
        self.w = None                   # the W being written: [decision, phase, count]
        self.taken_at = None            # the cycle the last W was taken

    def start(self, d):
        self.w = [d, "open", 0]

    def tick(self, t, open_layer, filler):
        """Returns whether the L2 port is the writer's this cycle."""
        if self.w is None:
            return False
        d, phase, n = self.w
        if phase == "open":
            if open_layer == d.layer:
                self.w = [d, "hbm", 0]
        elif phase == "hbm":
            self.w[2] = n = n + 1
            if n == self.words:
                if d.result == "w_bypass":
                    self.w, self.taken_at = None, t
                else:
                    self.w = [d, "idle", 0]
        elif phase == "idle":
            if filler.idle():
                self.w = [d, "l2", 0]
        else:
            self.w[2] = n = n + 1
            if n == self.words:
                self.w, self.taken_at = None, t
            return True
        return False


# --------------------------------------------------------------------------- TE array

class _Engine:
    """One ``TEEngine`` behind its routed K/V FIFO (``2*2*Dk`` words)."""

    def __init__(self, cfg):
        self.G, self.dk, self.q = cfg.G, cfg.dk, cfg.G * cfg.dk
        self.depth = 4 * cfg.dk
        self.level = 0                  # FIFO words (registered)
        self.push = self.pop = 0
        self.state = "idle"
        self.free_at = 0                # first cycle a new job may be dispatched
        self.job = None
        self.n = self.tok = self.j = self.g = self.sub = self.cnt = 0

    def room(self):
        return self.level < self.depth

    def idle(self, t):
        return self.state == "idle" and t >= self.free_at

    def dispatch(self, job):
        """The ``job`` beat (the q beats follow in the next ``G*Dk`` cycles)."""
        self.job, self.n = job, job.n
        self.state, self.cnt = "q", 0

    def tick(self, t, out_grant):
        """One cycle; ``out_grant``: this engine's job is the oldest not yet out. Returns
        True when its last output beat went out this cycle."""
        st, avail = self.state, self.level > 0
        done = False
        if st == "q":
            self.cnt += 1
            if self.cnt == self.q:
                self.state = "k" if self.n else "out"
                self.tok = self.j = self.g = self.sub = self.cnt = 0
        elif st == "k":
            if avail:
                self.g += 1
                if self.g == self.G:
                    self.pop, self.g = 1, 0
                    self.j += 1
                    if self.j == self.dk:
                        self.state, self.j = "rv", 0
        elif st == "rv":
            if not self.sub:
                self.sub = 1
            elif avail:
                self.sub = 0
                self.g += 1
                if self.g == self.G:
                    self.pop, self.g = 1, 0
                    self.j += 1
                    if self.j == self.dk:
                        self.j, self.tok = 0, self.tok + 1
                        self.state = "out" if self.tok == self.n else "k"
                        self.cnt = 0
        elif st == "out" and out_grant:
            self.cnt += 1
            if self.cnt == self.outs():
                self.state, done, self.free_at = "idle", True, t + 1
        return done

    def outs(self):
        return self.q + (self.G if self.job.partial else 0)

    def edge(self):
        self.level += self.push - self.pop
        self.push = self.pop = 0


class _PipelinedEngine(_Engine):
    """One ``TEPipelinedEngine`` behind its routed K/V FIFO (``rtl/te/pipelined_engine.py``):
    after the q beats, per token ``Dk`` K words (``G`` cycles each, every cycle needing the
    word; the last one held while the V array is ``slots`` tokens behind) then ``Dk`` V words
    into the V buffer (one a cycle, when in the FIFO); the V array works behind, op ``(b, g)``
    of a token when its beat is in and head ``g``'s ``p`` is out of the scalar unit
    (``score_to_v`` cycles after the K op that ended the head); after the last V op the
    pipelines empty (``v_update`` cycles), then the output: per normalised beat the V lanes'
    passes and latency (``out_beat`` cycles, ``+ recip`` at each head's first), held until the
    arbiter takes it; partial beats at once."""

    def __init__(self, cfg):
        super().__init__(cfg)
        self.tm = te_pipe_timing(cfg.head_dim, cfg.G, cfg.lanes, cfg.kv_dtype)

    def dispatch(self, job):
        super().dispatch(job)
        self.tok = self.kb = self.kg = self.vcount = 0
        self.vtok = self.vb = self.vg = 0
        self.p_at = {}                  # (token, head) -> first cycle its p is ready
        self.last_v = -(1 << 30)
        self.ocyc = 0

    def tick(self, t, out_grant):
        st, avail = self.state, self.level > 0
        G, dk, tm = self.G, self.dk, self.tm
        if st == "out":
            return self._out(t, out_grant)
        # the V array, from the registered state
        vtok = self.vtok
        beat_in = vtok != self.tok or self.vb < self.vcount
        if beat_in and self.p_at.get((self.vtok, self.vg), 1 << 60) <= t:
            self.last_v = t
            self.vg += 1
            if self.vg == G:
                self.vg, self.vb = 0, self.vb + 1
                if self.vb == dk:
                    self.vb, self.vtok = 0, self.vtok + 1
        if st == "q":
            self.cnt += 1
            if self.cnt == self.q:
                self.state, self.cnt = ("k" if self.n else "out"), 0
        elif st == "k":
            last_kb = self.kb == dk - 1
            if avail and not (last_kb and self.tok - vtok >= tm.slots):
                if last_kb:
                    self.p_at[(self.tok, self.kg)] = t + tm.score_to_v
                self.kg += 1
                if self.kg == G:
                    self.pop, self.kg = 1, 0
                    self.kb += 1
                    if self.kb == dk:
                        self.kb, self.state = 0, "v"
        elif st == "v":
            if avail:
                self.pop = 1
                self.vcount += 1
                if self.vcount == dk:
                    self.vcount, self.tok = 0, self.tok + 1
                    self.state = "vwait" if self.tok == self.n else "k"
        elif st == "vwait":
            if vtok == self.tok and self.last_v < t - tm.v_update:
                self.state, self.cnt, self.ocyc = "out", 0, 0
        return False

    def _out(self, t, grant):
        """OUT: ``ocyc`` counts a normalised beat's cycles; partial beats are valid at once."""
        tm = self.tm
        if self.job.partial:
            valid = True
        else:
            ready_at = (tm.recip if self.cnt % self.dk == 0 else 0) + tm.out_beat - 1
            valid = self.ocyc == ready_at
        if not valid:
            self.ocyc += 1
            return False
        if not grant:
            return False
        self.cnt, self.ocyc = self.cnt + 1, 0
        if self.cnt == self.outs():
            self.state, self.free_at = "idle", t + 1
            return True
        return False


#: the timing model of each TE engine design the tile takes
_ENGINE_MODELS = {"serial": _Engine, "pipelined": _PipelinedEngine}


def engine_job_cycles(cfg, n, partial=False):
    """Cycles of one job of ``n >= 1`` tokens on one engine of the model (``cfg.engine``),
    from its ``job`` beat to its last output beat inclusive, with its K/V FIFO never empty
    and its output always taken: :func:`tricut.models.te.te_cycles` of that engine (a test
    holds the two together)."""
    eng = _ENGINE_MODELS[cfg.engine](cfg)
    job = _Job(0, 0, 0, 0, 0, n, partial, 0, 1)
    eng.dispatch(job)
    t = 0
    while True:
        t += 1
        eng.level = eng.depth
        if eng.tick(t, eng.state == "out"):
            return t + 1
        eng.edge()


# --------------------------------------------------------------------------- unit streamer

class _Job:
    __slots__ = ("slot", "req", "layer", "head", "start", "end", "partial", "n", "unit",
                 "total", "eng", "out_at", "final")

    def __init__(self, slot, req, layer, head, start, end, partial, unit, total, final=True):
        self.slot, self.req, self.layer, self.head = slot, req, layer, head
        self.start, self.end, self.partial, self.final = start, end, partial, final
        self.n, self.unit, self.total = end - start, unit, total
        self.eng = self.out_at = None


class _Entry:
    """A CDU ``ready`` entry: its block, bypass, and from when it is offered."""
    __slots__ = ("tag", "bypass", "decided", "fill", "popped")

    def __init__(self, tag, bypass, decided, fill):
        self.tag, self.bypass, self.decided, self.fill = tag, bypass, decided, fill
        self.popped = None

    def offered(self):
        """First cycle it may be offered (ignoring the entry ahead of it), or None."""
        if self.fill is None:
            return self.decided
        return None if self.fill.resp is None else max(self.decided, self.fill.resp + 1)


class _Streamer:
    """``UnitStreamer``'s unit FSM and HBM walker (see the module docs)."""

    def __init__(self, cfg, hbm, engines):
        self.cfg, self.E, self.H = cfg, cfg.engines, cfg.num_kv_heads
        self.two_dk, self.q = 2 * cfg.dk, cfg.G * cfg.dk
        self.reader = _Reader(cfg, hbm)
        self.walk_depth = walk_depth(cfg.max_outstanding)
        self.engines = engines
        self.jobs = deque()             # the open layer's jobs (past the layer gate)
        self.ready = deque()            # CDU ready entries not yet popped
        self.ready_from = 0             # the head entry is not offered before this cycle
        self.state, self.unit, self.taken, self.next_block = "collect", None, 0, 0
        self.unit_total = 0
        self.idle_from = 0              # not busy from this cycle (after its last pass)
        self.pass_, self.next_eng, self.k, self.cnt = [], 0, 0, 0
        self.blk = self.lo = self.hi = 0
        self.word = self.l2_due = 0
        self.walking, self.wt, self.wj, self.wend = False, 0, 0, 0
        self.routes = deque()
        self.dispatched = None          # the job dispatched this cycle (the tile reads it)

    def busy(self):
        return self.unit is not None or bool(self.pass_)

    def _cover(self, tok, head):
        for j in self.pass_:
            if j.head == head and j.start <= tok < j.end:
                return j
        return None

    def _head_offered(self, t):
        if not self.ready:
            return False
        o = self.ready[0].offered()
        return o is not None and max(o, self.ready_from) <= t

    def _pop(self, t):
        e = self.ready.popleft()
        e.popped = t
        self.ready_from = t + 1
        self.next_block += 1

    def _walk(self, t, routes_level):
        if not self.walking:
            return
        j = self.pass_[self.wj] if self.wj < len(self.pass_) else None
        if self.cfg.l2:
            cover = j is not None and j.start <= self.wt < j.end
        else:                           # offsets into every pass job
            cover = j is not None and j.start + self.wt < j.end
        issue = cover and routes_level < self.walk_depth and self.reader.ready()
        if issue:
            self.reader.request(t, 1, j.eng)
            self.routes.append(j.eng)
        if issue or not cover:
            if self.wj == self.E - 1:
                self.wj, self.wt = 0, self.wt + 1
                if self.wt == self.wend:
                    self.walking = False
            else:
                self.wj += 1

    def _start_walk(self):
        self.walking, self.wj = True, 0
        self.wt = max(self.lo, self.blk * KV_BLOCK_TOKENS)
        if self.cfg.l2:
            self.wend = min(self.hi, (self.blk + 1) * KV_BLOCK_TOKENS)
        else:                           # no L2: one walk over the pass, offsets into its jobs
            self.wt, self.wend = 0, max(j.end - j.start for j in self.pass_)
            self.blk = (self.hi - 1) // KV_BLOCK_TOKENS
        self.state = "hbm"

    def tick(self, t):
        routes_level, walking = len(self.routes), self.walking
        if walking:
            self._walk(t, routes_level)
        st = self.state
        if st == "collect":
            if self.jobs:
                self._collect(self.jobs.popleft())
        elif st == "desc":
            j = self.pass_[self.k]
            if self.engines[j.eng].idle(t):
                self.engines[j.eng].dispatch(j)
                self.dispatched = j
                self.state, self.cnt = "q", 0
        elif st == "q":
            self.cnt += 1
            if self.cnt == self.q:
                if self.k == len(self.pass_) - 1:
                    self.state, self.blk = "block", self.lo // KV_BLOCK_TOKENS
                else:
                    self.k, self.state = self.k + 1, "desc"
        elif st == "block":
            if not self.cfg.l2 or self.next_block != self.blk:
                self._start_walk()
            elif self._head_offered(t):
                if self.ready[0].bypass:
                    self._start_walk()
                else:
                    self.state = "l2req"
        elif st == "l2req":
            self.state, self.word, self.l2_due = "l2data", 0, t + self.cfg.l2_latency
        elif st == "l2data":
            self._l2_word(t)
        elif st == "hbm":
            self._hbm_word(t, walking, routes_level)
        else:                           # next
            if self.blk == (self.hi - 1) // KV_BLOCK_TOKENS:
                self.pass_ = []
                if self.taken == self.unit_total:
                    self.unit = None
                self.state, self.idle_from = "collect", t + 1
            else:
                self.blk += 1
                self.state = "block"

    def _collect(self, j):
        if self.unit is None:
            self.unit, self.taken, self.next_block = j.unit, 0, 0
            self.unit_total = j.total
        j.eng = self.next_eng
        self.next_eng = (self.next_eng + 1) % self.E
        self.taken += 1
        self.pass_.append(j)
        self.lo = min(x.start for x in self.pass_)
        self.hi = max(x.end for x in self.pass_)
        if len(self.pass_) == self.E or self.taken == self.unit_total:
            self.state, self.k = "desc", 0

    def _l2_word(self, t):
        if t < self.l2_due:
            return
        tok, rest = divmod(self.word, self.H * self.two_dk)
        j = self._cover(self.blk * KV_BLOCK_TOKENS + tok, rest // self.two_dk)
        if j is not None:
            e = self.engines[j.eng]
            if not e.room():
                return
            e.push += 1
        self.word += 1
        if self.word == self.cfg.block_beats:
            self._pop(t)
            self.state = "next"

    def _hbm_word(self, t, walking, routes_level):
        if not walking and not routes_level:
            if self.cfg.l2 and self.next_block == self.blk:
                self._pop(t)
            self.state = "next"
            return
        if self.reader.head(t) is None:
            return
        e = self.engines[self.routes[0]]
        if not e.room():
            return
        e.push += 1
        _, last = self.reader.take()
        if last:
            self.routes.popleft()


# --------------------------------------------------------------------------- CDU

_FILLS = ("pf_issue", "miss_alloc", "miss_bypass")


class _Cdu:
    """The CDU's decisions in order, timed (see the module docs)."""

    def __init__(self, cfg, decisions, filler, writer, streamer, retries=None):
        self.cfg, self.ops = cfg, list(decisions)
        self.fails = dict(retries or {})  # block -> failed attempts of its first fill
        self.filler, self.writer, self.streamer = filler, writer, streamer
        self.i = 0                      # next decision
        self.emit = None                # front-end emit cycle of the previous decision
        self.taken = []                 # cycle each decision was taken
        self.at = None                  # cycle decision i is offered
        self.step_from = {}             # step index -> first cycle of its round
        self.in_w = False
        self.outstanding = []           # fills not yet answered (MSHRs)
        self.rq = []                    # ready-queue entries not yet popped
        self.latest = {}                # block -> its newest fill
        self.pending = {}               # block -> ready entries not yet popped

    def _offer(self):
        """When decision ``i`` is offered: emitted by the front end ``fe`` cycles after the
        previous one once its output register is free (decision ``i-3`` taken), then through
        the intake's and the core's registers (3 cycles), after decision ``i-1``."""
        i, d, tk = self.i, self.ops[self.i], self.taken
        e = d.fe if self.emit is None else self.emit + d.fe
        e = max(e, tk[i - 3] if i >= 3 else 0, self.step_from.get(d.step, 1 << 60))
        e += 2 * d.plans                # the walk plans only once the register is free
        self.emit = e
        self.at = max(e + 3, tk[i - 1] + 1 if i else 0)

    def _stalled(self, t, d):
        """The core's conditions for deciding (in the cycle before the decision is offered):
        a free MSHR for an HBM read, room in the ready queue for a demand read, no eviction
        hold. A resource freed on cycle ``c`` (response, pop) serves a decision offered on
        ``c + 2``."""
        gone = t - 2                    # freed on a cycle up to this one: free now
        # (the lists are pruned only when full: only then can pruning change the answer)
        if d.hbm and d.result in _FILLS and len(self.outstanding) >= self.cfg.mshrs:
            self.outstanding = [f for f in self.outstanding if f.resp is None or f.resp > gone]
            if len(self.outstanding) >= self.cfg.mshrs:
                return True
        if d.kind == "R" and len(self.rq) >= self.cfg.rq_depth:
            self.rq = [e for e in self.rq if e.popped is None or e.popped > gone]
            if len(self.rq) >= self.cfg.rq_depth:
                return True
        if d.victim is not None and d.result in ("miss_alloc", "pf_issue", "w_alloc"):
            return any((e.popped is None or e.popped > gone) and not e.bypass
                       for e in self.pending.get(d.victim, ()))
        return False

    def _next(self, t):
        self.taken.append(t)
        self.i += 1
        self.at = None

    def tick(self, t):
        if self.in_w:
            if self.writer.taken_at is None:
                return
            self.in_w = False
            self._next(self.writer.taken_at)
        if self.i >= len(self.ops):
            return
        if self.at is None:
            if self.ops[self.i].step not in self.step_from:
                return
            self._offer()
        if t < self.at:
            return
        d = self.ops[self.i]
        if self._stalled(t, d):
            return
        if d.victim is not None and d.result in ("miss_alloc", "pf_issue", "w_alloc"):
            old = self.latest.pop(d.victim, None)
            if old is not None and old.resp is None:
                old.orphan = t
        if d.kind == "W":
            if d.result == "w_alloc":
                self.latest.pop(d.tag, None)
            self.writer.start(d)
            self.writer.taken_at = None
            self.in_w = True
            return
        fill = None
        if d.hbm and d.result in _FILLS:
            # the lowest free MSHR (a response on c frees it for a decision on c + 2)
            busy = {f.id for f in self.outstanding if f.resp is None or f.resp + 2 > t}
            mshr = min(set(range(self.cfg.mshrs)) - busy)
            alloc = d.result != "miss_bypass"
            fill = _Fill(d, alloc, t, self.cfg.block_beats, mshr,
                         self.fails.pop(d.tag, 0) if alloc else 0)
            self.filler.reqs.append(fill)
            self.outstanding.append(fill)
            if fill.alloc:
                self.latest[d.tag] = fill
        if d.kind == "R":
            f = fill if fill is not None else self.latest.get(d.tag)
            if f is not None and f.resp is not None and f.resp + 1 <= t:
                f = None
            e = _Entry(d.tag, d.result == "miss_bypass", t, f)
            self.streamer.ready.append(e)
            self.rq.append(e)
            self.pending.setdefault(d.tag, []).append(e)
        self._next(t)


# --------------------------------------------------------------------------- the run

def host_gaps(cfg, n_slots):
    """The co-simulation harness's cycles around a layer with ``n_slots`` requests:
    ``(before, after, round)``: the new K/V and q beats before ``go``, the output reads after
    ``done``, and the round and descriptor beats before a round's first layer."""
    per = n_slots * cfg.num_kv_heads
    return per * (2 * cfg.dk + cfg.G * cfg.dk), per * cfg.G * cfg.dk, 1 + n_slots


def _layer_jobs(cfg, descs, layer, unit0):
    jobs = []
    for u, (slot, req, n) in enumerate(descs):
        parts = split_parts(n, cfg.split_tokens)
        for h in range(cfg.num_kv_heads):
            for p in range(parts):
                lo, hi = (0, n) if parts == 1 else \
                    (p * cfg.split_tokens, min(n, (p + 1) * cfg.split_tokens))
                jobs.append(_Job(slot, req, layer, h, lo, hi, parts != 1, unit0 + u,
                                 cfg.num_kv_heads * parts, p == parts - 1))
    return jobs


class _Tile:
    def __init__(self, cfg, decisions, retries=None):
        self.cfg = cfg
        self.hbm = _Hbm(cfg.latency, cfg.hbm_outstanding, cfg.hbm_rate)
        if cfg.engine not in _ENGINE_MODELS:
            raise ValueError(f"the tile's timing model has the engines "
                             f"{', '.join(_ENGINE_MODELS)}, not {cfg.engine!r}")
        self.engines = [_ENGINE_MODELS[cfg.engine](cfg) for _ in range(cfg.engines)]
        self.filler = _Filler(cfg, self.hbm)
        self.writer = _Writer(cfg)
        self.streamer = _Streamer(cfg, self.hbm, self.engines)
        self.cdu = _Cdu(cfg, decisions, self.filler, self.writer, self.streamer, retries)
        self.open_layer = None
        self.outq = deque()             # jobs dispatched, oldest first (in-order output)
        self.last_out = -10
        # the split-K combine unit: its job beat of the current split sent; the first cycle
        # it takes a job beat (idle); its combined beats' cycles (the output buffer's write
        # port is theirs: no direct out beat then)
        self.c_sent = False
        self.c_free = 0
        self.c_beats = (0, -1)

    def cycle(self, t):
        """One clock cycle of every unit."""
        outq, engines = self.outq, self.engines
        oldest = outq[0] if outq else None
        cfg = self.cfg
        for e in engines:
            if e.state == "idle":
                continue
            grant = e.job is oldest and e.state == "out"
            if grant and e.cnt + 1 == e.outs() and t < self.last_out + 3:
                grant = False           # the previous job's status word is still pending
            if grant:
                if not oldest.partial:
                    grant = not self.c_beats[0] <= t <= self.c_beats[1]
                elif not self.c_sent:
                    if t >= self.c_free:
                        self.c_sent = True      # the combine job beat (no out beat)
                    grant = False
            if e.tick(t, grant):
                self.last_out = oldest.out_at = t
                outq.popleft()
                if oldest.partial and oldest.final:
                    # the fold of the last head (Dk cycles), then the G*Dk combined beats
                    self.c_sent = False
                    self.c_beats = (t + cfg.dk + 1, t + cfg.dk + cfg.G * cfg.dk)
                    self.c_free = self.c_beats[1] + 1
        filler, streamer = self.filler, self.streamer
        fr, sr = filler.reader, streamer.reader
        fr.used, sr.used = len(fr.rob), len(sr.rob)     # _Reader.begin, inline
        self.cdu.tick(t)
        l2_busy = self.writer.tick(t, self.open_layer, filler)
        filler.tick_take(t)
        filler.tick_drain(t, l2_busy)
        streamer.tick(t)
        if streamer.dispatched is not None:     # the one job the streamer dispatched
            outq.append(streamer.dispatched)
            streamer.dispatched = None
        if fr.cut:
            fr.issue(t)
        if sr.cut:
            sr.issue(t)
        self.hbm.tick(t)
        for e in engines:               # _Engine.edge, inline: the model's hottest call
            if e.push or e.pop:
                e.level += e.push - e.pop
                e.push = e.pop = 0


#: cycles from the layer's last output beat to ``done`` as the harness sees it
DONE_LAG = 4
#: cycles from a DSU round's last descriptor to the harness's first K/V word (its wake-up on
#: the descriptor, a falling edge, then the play as after its own descriptor beats)
DSU_KV_AT = 2


def predict_run(cfg: TileConfig, rounds, decisions, start=100, retries=None):
    """Cycles of every layer of a run: ``{(round, layer): cycles}`` (``go`` to ``done``).

    ``rounds``: per round the descriptors in slot order, ``(slot, request, seq_len)``;
    ``decisions``: the CDU's decisions for the whole run, in order (:func:`cdu_decisions`);
    ``start``: the cycle of the first round beat (only the differences matter); ``retries``
    (optional): ``{(request, layer, block): n}``, the block's first fill answered with
    ``err`` ``n`` times (at most ``cfg.max_retries``) and re-sent by the CDU (module docs,
    "CDU retries"). The host's traffic around each layer is :func:`host_gaps`'.
    """
    tile = _Tile(cfg, decisions, retries)
    clock = _Clock(tile, start)
    out = {}
    unit0 = 0
    for ri, descs in enumerate(rounds):
        before, after, rnd = host_gaps(cfg, len(descs))
        tile.cdu.step_from[ri] = clock.now + 1
        clock.run_to(clock.now + rnd)
        for li in range(cfg.num_layers):
            t_go = clock.now + before
            done = _layer(tile, clock, cfg, descs, ri, li, unit0, t_go)
            unit0 += len(descs)
            out[(ri, li)] = done - t_go
            clock.run_to(done + after)
    return out


class _Clock:
    """The model's cycle counter: :meth:`run_to` steps every unit up to a cycle."""

    def __init__(self, tile, start):
        self.tile, self.now = tile, start

    def run_to(self, t_end):
        while self.now < t_end:
            self.tile.cycle(self.now)
            self.now += 1


def _layer(tile, clock, cfg, descs, ri, li, unit0, t_go):
    """Runs layer ``li`` of round ``ri`` from its ``go`` (cycle ``t_go``) to the cycle after
    its ``done``; returns the cycle of ``done``."""
    clock.run_to(t_go + 1)
    jobs = _layer_jobs(cfg, descs, li, unit0)
    tile.open_layer = li
    tile.streamer.jobs.extend(jobs)
    # far beyond any layer that ends: every K/V word at the slower of the HBM's rate and an
    # engine's G cycles per word, plus a generous constant per job
    num, den = cfg.hbm_rate
    words = sum(j.end - j.start for j in jobs) * 2 * cfg.dk
    limit = 1_000_000 + 4 * words * (cfg.G + -(-den // num)) + 100_000 * len(jobs)
    streamer, cycle, out = tile.streamer, tile.cycle, 0    # jobs[:out] are out
    while True:
        while out < len(jobs) and jobs[out].out_at is not None:
            out += 1
        if not (streamer.jobs or streamer.unit is not None or streamer.pass_ or out < len(jobs)):
            break           # (the middle two: streamer.busy())
        cycle(clock.now)
        clock.now += 1
        if clock.now - t_go > limit:
            raise RuntimeError(f"cached tile model: round {ri} layer {li} never ends")
    last = max(jobs, key=lambda j: j.out_at)
    done = last.out_at + DONE_LAG
    if last.partial:
        done += max(0, cfg.dk + cfg.G * cfg.dk - STATUS_TAIL)
    # ... and after the streamer's last pass (it may still drop a frame's words): not
    # busy from the cycle after its last NEXT state, done registered the cycle after
    done = max(done, tile.streamer.idle_from + 1)
    clock.run_to(done + 1)
    tile.open_layer = None
    return done


def predict_dsu_run(cfg: TileConfig, rounds, decisions, firsts, layers=None,
                    retries=None):
    """Cycles of every round of a run with the DSU cluster in the loop (``tricut tile run
    --dsu``, a CDU policy), each from its first descriptor to its last completion, inclusive
    (``RunResult.step_cycles``), given each round's first-descriptor cycle ``firsts[ri]``
    (``RunResult.round_spans[ri][0]``: the DSU firmware's time between rounds is an input,
    not modelled). ``rounds``: per round the descriptors in slot order, ``(slot, request,
    seq_len)``; ``decisions``: the CDU's decisions for the whole run (:func:`cdu_decisions`
    on the rounds' step descriptors); ``layers`` (a dict, optional) gets ``{(round, layer):
    cycles}`` (``go`` to ``done``, as ``RunResult.layer_cycles``); ``retries`` (optional):
    the CDU-retried fills, as for :func:`predict_run` (``Setup.faults`` with a CDU policy:
    ``tricut.sim.harness.tile.setup.predict_dsu_rounds``). Rounds the DSU aborted (a
    lost read) are not modelled.

    The tile is stepped cycle by cycle on the top's clock, gaps between rounds included (the
    previous round's trailing CDU work ends there), with the round's traffic placed so:

    * the slot arbiter's scan emits one slot per cycle: descriptor ``k`` enters the step
      sequencer ``slot_k - slot_0`` cycles after the first; the sequencer passes each on to
      the CDU front end as a ``slot`` beat, then the ``layer`` beats, so the front end has
      the step when it would have it in the harness's back-to-back flow ending on the same
      last descriptor (:func:`predict_run`: the step from ``B - 1`` cycles before it);
    * the harness wakes on the last descriptor (a falling edge) and plays the new tokens'
      K/V from 2 cycles after it, then the q, ``go``; the output reads after every layer but
      the last (:func:`host_gaps`);
    * the DSU link sends the ``B`` completions one per cycle from the cycle ``done`` is
      seen: the round ends ``B - 1`` cycles after the last layer's ``done``.

    Why the DSU's time between rounds does not change a round's layers: a step's first CDU
    decision is its first unit's W, which waits for layer 0's ``go``, and every fill and
    prefetch of the step comes after it in decision order; so the layers are those of the
    harness-driven run on the same rounds as long as the front end has the step more than a
    few cycles before ``go`` (the K/V and q play is at least ``H*(2+G)*Dk`` cycles) and the
    previous round's fills are answered (the DSU's gap is hundreds of cycles). The round's
    cycles are then the scan span, the host traffic, the layers and the completions::

        round = span + L*B*H*(2*Dk + G*Dk) + (L-1)*B*H*G*Dk + sum(layers) + B + 2
    """
    tile = _Tile(cfg, decisions, retries)
    clock = _Clock(tile, firsts[0] if rounds else 0)
    out = []
    unit0 = 0
    for ri, descs in enumerate(rounds):
        before, after, _ = host_gaps(cfg, len(descs))
        slots = [d[0] for d in descs]
        last_desc = firsts[ri] + max(slots) - min(slots)
        if last_desc < clock.now:
            raise ValueError(f"round {ri}: its descriptors (from cycle {firsts[ri]}) before the "
                             f"previous round's end (cycle {clock.now})")
        tile.cdu.step_from[ri] = last_desc - len(descs) + 1
        clock.run_to(last_desc + DSU_KV_AT)
        for li in range(cfg.num_layers):
            t_go = clock.now + before
            done = _layer(tile, clock, cfg, descs, ri, li, unit0, t_go)
            unit0 += len(descs)
            if layers is not None:
                layers[(ri, li)] = done - t_go
            if li < cfg.num_layers - 1:
                clock.run_to(done + after)
        out.append(done + len(descs) - 1 - firsts[ri] + 1)
    return out


def cdu_decisions(policy, sets, ways, distance, steps, entries):
    """The CDU golden model's decisions for ``steps`` (``tricut.models.cdu.StepDesc``, one
    per round), run one step at a time as the tile's CDU sees them (pattern ``full``), each
    with the RTL front end's cycles from the previous decision's emission to its own
    (``rtl/cdu/frontend.py``): a P or R 1 cycle, and ``plans`` units the prefetch walk
    plans before it (STREAM -> PLAN -> STREAM, 2 cycles each once the front end's output
    register is free); a W 4 (the previous unit's end, POP, UNIT, WOP), +5 when the
    previous unit is observed (``adaptive``, not streamed: OBS_RD .. OBS_WB), +2 when its
    own unit is planned at its start."""
    from tricut.models.cdu import CDUCore, FrontEnd
    fe = FrontEnd(policy, sets * ways, distance=distance, entries=entries)
    core = CDUCore(sets, ways)
    planned = []
    plan = fe._unit_plan

    def traced(sd, layer):
        planned.append(layer)
        return plan(sd, layer)
    fe._unit_plan = traced
    out = []
    observed = False                    # the previous unit is observed at its end
    for si, step in enumerate(steps):
        hint = {sd.request: sd.hint for sd in step.slots}
        for op in fe.ops([step], lambda st, sd, ly: list(range(-(-sd.seq_len // 16)))):
            plans = len(planned)
            planned.clear()
            if op.kind == "W":
                cost, plans = 4 + 5 * observed + 2 * plans, 0
                observed = policy == "adaptive" and hint[op.req] != "stream"
            else:
                cost = 1
            t = core.apply(op)
            out.append(Decision(t.kind, t.req, t.layer, t.block, t.result, t.victim,
                                bool(t.hbm), si, cost, plans))
    return out


#: a timed-out round's cycles beyond the scan and the watchdog limit: the last expiry applied,
#: the arbiter's ``ROUND`` + 1, the link's abort
DSU_TIMEOUT_EXTRA = 3


def predict_dsu_timeout(slots, limit) -> int:
    """Cycles of a round the DSU's slot watchdogs time out (limit ``limit``), from its first
    descriptor to the DSU link's abort, inclusive (see the module docs)."""
    return max(slots) - min(slots) + limit + DSU_TIMEOUT_EXTRA
