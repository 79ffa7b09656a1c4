"""TE array: TE engines behind a round-robin job dispatcher and an in-order output arbiter."""

from __future__ import annotations

from amaranth.hdl import Array, Cat, Module, Mux, Signal
from amaranth.lib import stream
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.wiring import In, Out

from tricut.models.te import ENGINES, HEAD_DIMS, KV_CODE_BITS, MAX_G
from tricut.models.tile import TILE_LANES as LANES
from tricut.rtl.cdu.checked import CheckedComponent
from tricut.rtl.te.engine import TEEngine
from tricut.rtl.te.pipelined_engine import TEPipelinedEngine
from tricut.rtl.te.split_engine import TESplitEngine
from tricut.rtl.te.layouts import kv_layout, q_layout

from .array_layouts import (MAX_TAG_BITS, array_job_layout, engine_bits, routed_kv_layout,
                            tagged_out_layout, tagged_status_layout)

__all__ = ["TEArray", "ENGINE_DESIGNS", "MAX_ENGINES", "MAX_KV_FIFO_DEPTH"]

#: the most engines one array holds
MAX_ENGINES = 16
#: the deepest per-engine K/V FIFO of a routed array
MAX_KV_FIFO_DEPTH = 4096
#: the TE engine design of each ``engine`` value (:data:`tricut.models.te.ENGINES`)
ENGINE_DESIGNS = {"serial": TEEngine, "split": TESplitEngine, "pipelined": TEPipelinedEngine}


class TEArray(CheckedComponent):
    """``engines`` TE engines of one design fed from one serial job stream, with one tagged
    output stream in job order.

    Parameters
    ----------
    engines : int, 1..16
    head_dim : {64, 128, 256}
    G : int, 1..16
    lanes : {2, 4, 8, 16, 32}
    kv_dtype : {"bf16", "fp8", "nvfp4"}
        As for the TE engine: an array is built for one K/V format (it sets the ``kv``
        payload width).
    tag_bits : int, 1..32
        Width of the job tag the array carries from ``job`` to ``out`` and ``status``.
    routed_kv : bool
        False (serial mode): ``kv`` follows ``q`` job by job, as below. True (routed mode):
        every ``kv`` beat names its engine and goes through that engine's FIFO; see
        *Routed K/V*.
    kv_fifo_depth : int, 1..4096, or None
        Routed mode: beats in each engine's K/V FIFO (default ``None``: ``2 * 2*Dk``, two
        tokens). Unused in serial mode.
    engine : {"pipelined", "split", "serial"}
        The TE design of every engine (:data:`ENGINE_DESIGNS`): the shipped
        :class:`~tricut.rtl.te.pipelined_engine.TEPipelinedEngine` by default. All take the
        same streams and payloads; they differ in cycles and arithmetic
        (:func:`tricut.models.te.te_decode` with the same ``engine``).

    Streams (``amaranth.lib.stream``; payloads in :mod:`tricut.rtl.tile.array_layouts`):

    * ``job`` (in): one beat per job, the TE ``desc`` fields and the job ``tag``;
    * ``q``, ``kv`` (in): the TE ``q`` and ``kv`` payloads, serialised job by job in job
      order: a job's ``G*Dk`` ``q`` beats, then (if ``n > 0``) its ``kv`` beats up to and
      including the one with ``last`` (a job with ``n = 0`` has no ``kv`` beats, as for the
      engine; early-ended and too-long streams are framed by ``last`` like for the engine);
    * ``out`` (out): the TE ``out`` payload plus the ``tag`` of its job; whole jobs, in job
      order, ``last`` on each job's final beat;
    * ``status`` (out): one beat per job, ``{status, tag}``: the engine's status word, final
      (valid) from the second cycle after the job's last ``out`` beat transferred.

    Dispatch is **round-robin**: job ``k`` goes to engine ``k mod engines``; the ``job`` beat
    is taken (and passed to the engine as its ``desc`` in the same cycle) when the previous
    job's inputs have all been taken and that engine is idle. The output is **in job order**
    (oldest job first): the arbiter forwards the oldest job's engine's ``out`` beats through
    ``last``, then the next job's. Engines free up in job order, so round-robin never waits
    while another engine is idle. In-order output keeps the tile deterministic: a split-K
    combine downstream folds parts in the same order whatever the timing.

    While job ``k+1`` receives its Q/K/V, engine ``k`` emits its output: the overlap a serial
    input stream allows. Each engine takes its K/V at its compute rate (serial engine: one
    beat every ``G`` or ``2G`` cycles), so the input phases of successive jobs never overlap.
    Unstalled cycle counts of serial engines: :func:`tricut.models.te_array_timing.te_array_schedule`,
    :func:`tricut.models.te_array_timing.te_array_cycles`.

    **Routed K/V** (``routed_kv=True``): ``job`` and ``q`` are dispatched exactly as above,
    but after a job's ``q`` beats the dispatcher goes straight back to the next ``job`` beat.
    The ``kv`` payload is :func:`~.array_layouts.routed_kv_layout`: the TE ``kv`` payload
    (``kv``) and ``engine``; a beat is written into engine ``engine``'s FIFO
    (``kv_fifo_depth`` beats, first-word-fall-through, feeding that engine's ``kv`` port) and
    ``kv.ready`` is "that FIFO is not full" (from the FIFO levels, registers, and
    ``kv.payload.engine``: no combinational path from any engine). A beat whose ``engine >= engines`` is taken and dropped. Each engine
    takes from its FIFO exactly as from a serial stream: only after its job's ``desc`` and
    ``q``, the job's beats through ``last`` (none if ``n = 0``), so beats of an engine's next
    job may wait in its FIFO while the engine is busy with the previous one. Engine ``e``'s
    beats must arrive in job order, and the array cannot deadlock if the producer keeps to
    this rule (any FIFO depth >= 1; ``out`` and ``status`` eventually ready):

    * **(R1)** on ``kv``, no beat of job ``j`` before the last beat of every job ``<= j - E``
      (so the jobs whose beats may be interleaved are at most ``E`` consecutive ones, one
      per engine);
    * **(R2)** the ``job`` and ``q`` beats of job ``j`` never wait for a ``kv`` beat of a
      job ``> j - E`` to be taken (a producer with independent streams; or a sequential one
      that sends job ``j``'s ``job`` and ``q`` beats after the ``kv`` of jobs ``<= j - E``
      and the ``kv`` of each job only after that job's ``job`` beat).

    Why: job ``j`` is dispatched once jobs ``<= j - E`` are finished, which needs only their
    beats, all ahead of job ``j``'s on ``kv`` (R1) and not behind a ``job``/``q`` beat (R2);
    so the beat at the head of ``kv`` (of some job ``j``) is taken at the latest when job
    ``j`` starts on its engine and drains its FIFO. A producer that breaks R1 (e.g. sends
    more than a FIFO's worth of engine ``e``'s next job, then a beat another engine's current
    job needs) can deadlock. Unstalled cycles:
    :func:`tricut.models.te_array_timing.te_array_routed_schedule`,
    :func:`tricut.models.te_array_timing.te_array_routed_cycles`.

    The ``status`` beat is held in one register: a job's last ``out`` beat is offered only
    once the previous job's ``status`` beat has been taken (``out.valid`` never depends on
    ``status.ready`` in the same cycle). ``busy`` (out) is high while any engine is busy or
    a job's inputs are being forwarded (routed mode: also while any K/V FIFO holds a beat).
    """

    @staticmethod
    def _check(engines, head_dim, G, lanes, kv_dtype, tag_bits, routed_kv, kv_fifo_depth,
               engine):
        if not isinstance(engine, str) or engine not in ENGINE_DESIGNS:
            raise ValueError(f"engine must be one of {ENGINES}, got {engine!r}")
        if not isinstance(engines, int) or isinstance(engines, bool) or \
                not 1 <= engines <= MAX_ENGINES:
            raise ValueError(f"engines must be an int in 1..{MAX_ENGINES}, got {engines!r}")
        if head_dim not in HEAD_DIMS or isinstance(head_dim, bool):
            raise ValueError(f"head_dim must be one of {HEAD_DIMS}, got {head_dim!r}")
        if not isinstance(G, int) or isinstance(G, bool) or not 1 <= G <= MAX_G:
            raise ValueError(f"G must be an int in 1..{MAX_G}, got {G!r}")
        if lanes not in LANES or isinstance(lanes, bool):
            raise ValueError(f"lanes must be one of {LANES}, got {lanes!r}")
        if not isinstance(kv_dtype, str) or kv_dtype not in KV_CODE_BITS:
            raise ValueError(f"kv_dtype must be one of {tuple(KV_CODE_BITS)}, got {kv_dtype!r}")
        if not isinstance(tag_bits, int) or isinstance(tag_bits, bool) or \
                not 1 <= tag_bits <= MAX_TAG_BITS:
            raise ValueError(f"tag_bits must be an int in 1..{MAX_TAG_BITS}, got {tag_bits!r}")
        if not isinstance(routed_kv, bool):
            raise ValueError(f"routed_kv must be True or False, got {routed_kv!r}")
        if kv_fifo_depth is not None and (
                not isinstance(kv_fifo_depth, int) or isinstance(kv_fifo_depth, bool) or
                not 1 <= kv_fifo_depth <= MAX_KV_FIFO_DEPTH):
            raise ValueError(f"kv_fifo_depth must be None or an int in 1..{MAX_KV_FIFO_DEPTH}, "
                             f"got {kv_fifo_depth!r}")

    def __init__(self, engines=2, head_dim=128, G=4, lanes=8, kv_dtype="bf16", tag_bits=16,
                 routed_kv=False, kv_fifo_depth=None, engine="pipelined"):
        self.engines, self.head_dim, self.G, self.lanes = engines, head_dim, G, lanes
        self.engine = engine
        self.kv_dtype, self.tag_bits = kv_dtype, tag_bits
        self.dk = head_dim // lanes
        self.routed_kv = routed_kv
        self.kv_fifo_depth = 4 * self.dk if kv_fifo_depth is None else kv_fifo_depth
        kv = routed_kv_layout(lanes, kv_dtype, engines) if routed_kv else \
            kv_layout(lanes, kv_dtype)
        super().__init__({
            "job": In(stream.Signature(array_job_layout(tag_bits))),
            "q": In(stream.Signature(q_layout(lanes))),
            "kv": In(stream.Signature(kv)),
            "out": Out(stream.Signature(tagged_out_layout(lanes, tag_bits))),
            "status": Out(stream.Signature(tagged_status_layout(tag_bits))),
            "busy": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        E = self.engines
        eb = engine_bits(E)
        qbeats = self.G * self.dk
        engs = []
        for i in range(E):
            eng = ENGINE_DESIGNS[self.engine](head_dim=self.head_dim, G=self.G,
                                              lanes=self.lanes, kv_dtype=self.kv_dtype)
            m.submodules[f"te{i}"] = eng
            engs.append(eng)
        # the engines of the latest elaboration: a simulation reads their busy flags for its
        # activity counts (sim/harness/tile/amaranth_run.py)
        self.engine_units = engs

        def nxt(ptr):
            return Mux(ptr == E - 1, 0, ptr + 1)

        # ---------------------------------------------------------------- dispatcher
        in_ptr = Signal(eb)             # engine of the next job (round-robin)
        cur = Signal(eb)                # engine of the job whose inputs are forwarded
        qcnt = Signal(range(qbeats + 1))
        no_kv = Signal()                # the current job has n == 0: no kv beats
        tags = Array(Signal(self.tag_bits, name=f"tag_{i}") for i in range(E))
        idle = Array(~e.busy for e in engs)
        desc_ready = Array(e.desc.ready for e in engs)
        q_ready = Array(e.q.ready for e in engs)
        kv_ready = Array(e.kv.ready for e in engs)
        for e in engs:                  # payloads are shared; only valid is routed
            m.d.comb += [e.desc.payload.eq(self.job.payload.desc),
                         e.q.payload.eq(self.q.payload)]
            if not self.routed_kv:
                m.d.comb += e.kv.payload.eq(self.kv.payload)
        fwd = Signal()                  # forwarding a job's inputs
        kv_held = Signal()              # routed mode: a K/V FIFO holds a beat
        if self.routed_kv:
            self._elaborate_kv_fifos(m, engs, kv_held)
        with m.FSM(name="dispatch"):
            with m.State("JOB"):
                free = idle[in_ptr]
                m.d.comb += self.job.ready.eq(free & desc_ready[in_ptr])
                for i, e in enumerate(engs):
                    m.d.comb += e.desc.valid.eq(self.job.valid & free & (in_ptr == i))
                with m.If(self.job.valid & self.job.ready):
                    m.d.sync += [cur.eq(in_ptr), in_ptr.eq(nxt(in_ptr)), qcnt.eq(0),
                                 no_kv.eq(self.job.payload.desc.n == 0),
                                 tags[in_ptr].eq(self.job.payload.tag)]
                    m.next = "Q"
            with m.State("Q"):
                m.d.comb += [fwd.eq(1), self.q.ready.eq(q_ready[cur])]
                for i, e in enumerate(engs):
                    m.d.comb += e.q.valid.eq(self.q.valid & (cur == i))
                with m.If(self.q.valid & self.q.ready):
                    m.d.sync += qcnt.eq(qcnt + 1)
                    with m.If(qcnt == qbeats - 1):
                        if self.routed_kv:
                            m.next = "JOB"
                        else:
                            with m.If(no_kv):
                                m.next = "JOB"
                            with m.Else():
                                m.next = "KV"
            if not self.routed_kv:      # routed mode: the FIFOs take kv (no KV state)
                with m.State("KV"):
                    m.d.comb += [fwd.eq(1), self.kv.ready.eq(kv_ready[cur])]
                    for i, e in enumerate(engs):
                        m.d.comb += e.kv.valid.eq(self.kv.valid & (cur == i))
                    with m.If(self.kv.valid & self.kv.ready & self.kv.payload.last):
                        m.next = "JOB"

        # ---------------------------------------------------------------- output arbiter
        out_ptr = Signal(eb)            # engine of the oldest job not yet fully out
        st_pend = Signal()              # the oldest job's last beat went out last cycle
        st_eng = Signal(eb)
        st_valid = Signal()
        out_valid = Array(e.out.valid for e in engs)
        out_data = Array(e.out.payload.data.as_value() for e in engs)
        out_last = Array(e.out.payload.last for e in engs)
        status = Array(e.status.as_value() for e in engs)
        last = out_last[out_ptr]
        offer = Signal()
        m.d.comb += [offer.eq(out_valid[out_ptr] & ~(last & (st_pend | st_valid))),
                     self.out.valid.eq(offer),
                     self.out.payload.data.as_value().eq(out_data[out_ptr]),
                     self.out.payload.last.eq(last),
                     self.out.payload.tag.eq(tags[out_ptr])]
        for i, e in enumerate(engs):
            m.d.comb += e.out.ready.eq(self.out.ready & offer & (out_ptr == i))
        m.d.sync += st_pend.eq(0)
        with m.If(offer & self.out.ready & last):
            m.d.sync += [out_ptr.eq(nxt(out_ptr)), st_pend.eq(1), st_eng.eq(out_ptr)]
        # the engine's status is final the cycle after its last out beat (it has no new
        # descriptor before that edge): latch it with the job's tag
        with m.If(self.status.valid & self.status.ready):
            m.d.sync += st_valid.eq(0)
        with m.If(st_pend):
            m.d.sync += [st_valid.eq(1), self.status.payload.status.as_value().eq(status[st_eng]),
                         self.status.payload.tag.eq(tags[st_eng])]
        m.d.comb += [self.status.valid.eq(st_valid),
                     self.busy.eq(fwd | kv_held | st_pend | st_valid |
                                  Cat(*[e.busy for e in engs]).any())]
        return m

    def _elaborate_kv_fifos(self, m, engs, kv_held):
        """Routed mode: one K/V FIFO per engine between ``kv`` (by its ``engine`` field) and
        the engine's ``kv`` port; ``kv.ready`` = the addressed FIFO has room (out-of-range
        engines: taken and dropped)."""
        E = self.engines
        width = kv_layout(self.lanes, self.kv_dtype).size
        fifos = []
        for i, e in enumerate(engs):
            f = SyncFIFO(width=width, depth=self.kv_fifo_depth)
            m.submodules[f"kv_fifo{i}"] = f
            fifos.append(f)
            m.d.comb += [f.w_data.eq(self.kv.payload.kv.as_value()),
                         f.w_en.eq(self.kv.valid & (self.kv.payload.engine == i)),
                         e.kv.valid.eq(f.r_rdy), e.kv.payload.as_value().eq(f.r_data),
                         f.r_en.eq(e.kv.ready)]
        eng = self.kv.payload.engine
        w_rdy = Array(f.w_rdy for f in fifos)
        if E == 1 << len(eng):
            m.d.comb += self.kv.ready.eq(w_rdy[eng])
        else:
            m.d.comb += self.kv.ready.eq(Mux(eng < E, w_rdy[eng], 1))
        m.d.comb += kv_held.eq(Cat(*[f.r_rdy for f in fifos]).any())
