"""TE array: TE engines behind a round-robin job dispatcher and an in-order output arbiter."""

from __future__ import annotations

from amaranth.hdl import Array, Cat, Module, Mux, Signal
from amaranth.lib import stream
from amaranth.lib.wiring import In, Out

from tricut.models.te import HEAD_DIMS, KV_CODE_BITS, LANES, MAX_G
from tricut.rtl.cdu.checked import CheckedComponent
from tricut.rtl.te.engine import TEEngine
from tricut.rtl.te.layouts import kv_layout, q_layout

from .array_layouts import (MAX_TAG_BITS, array_job_layout, tagged_out_layout,
                            tagged_status_layout)

__all__ = ["TEArray", "MAX_ENGINES", "te_array_schedule", "te_array_cycles"]

#: the most engines one array holds
MAX_ENGINES = 16


def _phases(n, head_dim, G, lanes, partial):
    """``(I, O)`` of one job on one engine, unstalled: ``I`` cycles from the job beat to the
    last ``kv`` beat inclusive (``1 + G*Dk + 3*n*G*Dk``), ``O`` output beats
    (``G*Dk``, ``+ G`` in partial mode)."""
    q = G * (head_dim // lanes)
    return 1 + q + 3 * n * q, q + (G if partial else 0)


def te_array_schedule(jobs, head_dim, G, lanes, engines):
    """Exact cycles of a job list on an unstalled array (every input beat offered as soon as
    it can be taken, ``out`` and ``status`` always ready); ``jobs`` is a list of
    ``(n, partial)`` with exactly ``n`` tokens of K/V each (no early end, no too-long stream).

    Returns ``[(s_k, f_k)]``: the cycle job ``k``'s ``job`` beat transfers and the cycle its
    last ``out`` beat transfers, counted from the first job beat's cycle (0). With
    ``I_k, O_k`` from the single engine (input phase ``1 + G*Dk + 3*n*G*Dk``, output
    ``G*Dk (+G)``)::

        s_0 = 0
        s_k = max(s_{k-1} + I_{k-1}, f_{k-E} + 1)    (input is serial; engine k mod E free)
        f_k = max(s_k + I_k, f_{k-1} + 1) + O_k - 1  (output in job order)
    """
    out = []
    for k, (n, partial) in enumerate(jobs):
        i_k, o_k = _phases(n, head_dim, G, lanes, partial)
        if k == 0:
            s = 0
        else:
            s = out[-1][0] + _phases(jobs[k - 1][0], head_dim, G, lanes, jobs[k - 1][1])[0]
            if k >= engines:
                s = max(s, out[k - engines][1] + 1)
        first = s + i_k if k == 0 else max(s + i_k, out[-1][1] + 1)
        out.append((s, first + o_k - 1))
    return out


def te_array_cycles(J, n, head_dim, G, lanes, engines, partial=False):
    """Cycles, first ``job`` beat to last ``out`` beat inclusive, of ``J`` equal jobs of
    ``n >= 1`` tokens on an unstalled array: ``J*(I + O)`` for one engine (a single TE,
    ``J * te_cycles``), ``J*I + O`` for two or more (input phases back to back; each output
    hidden under the next job's input), ``I = 1 + G*Dk + 3*n*G*Dk``, ``O = G*Dk (+G)``."""
    if n < 1 or J < 1:
        raise ValueError(f"te_array_cycles needs J >= 1 and n >= 1, got J={J}, n={n}")
    i, o = _phases(n, head_dim, G, lanes, partial)
    return J * (i + o) if engines == 1 else J * i + o


class TEArray(CheckedComponent):
    """``engines`` :class:`~tricut.rtl.te.engine.TEEngine` instances fed from one serial job
    stream, with one tagged output stream in job order.

    Parameters
    ----------
    engines : int, 1..16
    head_dim : {64, 128, 256}
    G : int, 1..16
    lanes : {2, 4, 8, 16}
    kv_dtype : {"bf16", "fp8", "nvfp4"}
        As for the TE engine: an array is built for one K/V format (it sets the ``kv``
        payload width).
    tag_bits : int, 1..32
        Width of the job tag the array carries from ``job`` to ``out`` and ``status``.

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
    input stream allows. Each engine takes its K/V at its compute rate (one beat every ``G``
    or ``2G`` cycles), so the input phases of successive jobs never overlap. Unstalled cycle
    counts: :func:`te_array_schedule`, :func:`te_array_cycles`.

    The ``status`` beat is held in one register: a job's last ``out`` beat is offered only
    once the previous job's ``status`` beat has been taken (``out.valid`` never depends on
    ``status.ready`` in the same cycle). ``busy`` (out) is high while any engine is busy or
    a job's inputs are being forwarded.
    """

    @staticmethod
    def _check(engines, head_dim, G, lanes, kv_dtype, tag_bits):
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

    def __init__(self, engines=2, head_dim=128, G=4, lanes=8, kv_dtype="bf16", tag_bits=16):
        self.engines, self.head_dim, self.G, self.lanes = engines, head_dim, G, lanes
        self.kv_dtype, self.tag_bits = kv_dtype, tag_bits
        self.dk = head_dim // lanes
        super().__init__({
            "job": In(stream.Signature(array_job_layout(tag_bits))),
            "q": In(stream.Signature(q_layout(lanes))),
            "kv": In(stream.Signature(kv_layout(lanes, kv_dtype))),
            "out": Out(stream.Signature(tagged_out_layout(lanes, tag_bits))),
            "status": Out(stream.Signature(tagged_status_layout(tag_bits))),
            "busy": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        E = self.engines
        eb = max(1, (E - 1).bit_length())
        qbeats = self.G * self.dk
        engs = []
        for i in range(E):
            eng = TEEngine(head_dim=self.head_dim, G=self.G, lanes=self.lanes,
                           kv_dtype=self.kv_dtype)
            m.submodules[f"te{i}"] = eng
            engs.append(eng)

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
                         e.q.payload.eq(self.q.payload), e.kv.payload.eq(self.kv.payload)]
        fwd = Signal()                  # forwarding a job's inputs
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
                        with m.If(no_kv):
                            m.next = "JOB"
                        with m.Else():
                            m.next = "KV"
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
                     self.busy.eq(fwd | st_pend | st_valid | Cat(*[e.busy for e in engs]).any())]
        return m
