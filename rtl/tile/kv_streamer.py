"""KV streamer of the decode tile: attention jobs -> the TE array's job, q and kv streams, its
K/V read from HBM through one block-read interface."""

from __future__ import annotations

import math

import numpy as np
from amaranth.hdl import Cat, Module, Mux, Signal, unsigned
from amaranth.lib import stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from tricut.models.te import HEAD_DIMS, KV_CODE_BITS, MAX_G, f2b
from tricut.models.tile import TILE_LANES as LANES
from tricut.rtl.cdu.checked import CheckedComponent
from tricut.rtl.cdu.layouts import Widths, seq_bits
from tricut.rtl.te.layouts import kv_layout, q_layout

from .array_layouts import array_job_layout
from .attention_layouts import (BLOCK_TOKENS, block_data_layout, block_req_layout, count_bits,
                                hbm_req_layout, hbm_resp_layout, index_bits, kv_data_bits,
                                kv_image_words, kv_region_words, kv_word_bits, q_write_layout,
                                tag_layout)
from .sequencer_layouts import attn_job_layout, head_bits

__all__ = ["KVStreamer", "HbmBlockReader", "default_scale_bits", "check_streamer_params",
           "MAX_HBM_WORDS"]

#: the deepest KV image the HBM port addresses (the behavioural HBM's limit)
MAX_HBM_WORDS = 1 << 22


def default_scale_bits(head_dim):
    """fp32 bits of ``1/sqrt(head_dim)``, the softmax scale the tile uses by default."""
    return int(f2b(np.float32(1.0 / math.sqrt(head_dim))))


def _need(name, v, lo, hi):
    if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
        raise ValueError(f"{name} must be an integer in {lo}..{hi}, got {v!r}")


def check_streamer_params(head_dim, G, lanes, kv_dtype, num_layers, num_kv_heads, split_tokens,
                          widths, slot_bits, max_ctx, num_requests, max_beats, max_outstanding,
                          scale_bits):
    """The parameter checks shared by :class:`KVStreamer` and the attention tile: one
    ``ValueError`` naming the first bad parameter and its value (``scale_bits`` may be
    ``None``: the default); returns the ``Widths``."""
    if head_dim not in HEAD_DIMS or isinstance(head_dim, bool):
        raise ValueError(f"head_dim must be one of {HEAD_DIMS}, got {head_dim!r}")
    _need("G", G, 1, MAX_G)
    if lanes not in LANES or isinstance(lanes, bool):
        raise ValueError(f"lanes must be one of {LANES}, got {lanes!r}")
    if not isinstance(kv_dtype, str) or kv_dtype not in KV_CODE_BITS:
        raise ValueError(f"kv_dtype must be one of {tuple(KV_CODE_BITS)}, got {kv_dtype!r}")
    if widths is not None and not isinstance(widths, Widths):
        raise ValueError(f"widths must be a tricut.rtl.cdu.layouts.Widths, got {widths!r}")
    w = widths or Widths()
    _need("slot_bits", slot_bits, 1, 8)
    _need("num_layers", num_layers, 1, 1 << w.layer)
    _need("num_kv_heads", num_kv_heads, 1, 256)
    _need("max_ctx", max_ctx, 1, (1 << seq_bits(w)) - 1)
    _need("split_tokens", split_tokens, 0, max_ctx)
    if split_tokens and -(-max_ctx // split_tokens) > 4096:
        raise ValueError(f"split_tokens must leave at most 4096 parts of max_ctx = {max_ctx} "
                         f"(the combine unit's limit), got {split_tokens!r}")
    _need("num_requests", num_requests, 1, 1 << w.req)
    _need("max_beats", max_beats, 1, 256)
    _need("max_outstanding", max_outstanding, 1, 64)
    if scale_bits is not None:
        _need("scale_bits", scale_bits, 0, 0xFFFFFFFF)
    depth = kv_image_words(num_requests, num_layers, num_kv_heads, max_ctx, head_dim, lanes)
    if depth > MAX_HBM_WORDS:
        raise ValueError(f"num_requests * num_layers * num_kv_heads * max_ctx * 2 * Dk must be "
                         f"at most {MAX_HBM_WORDS} words (the KV image), got {depth} "
                         f"(max_ctx = {max_ctx})")
    return w


def combine_parts(split_tokens, max_ctx):
    """The most parts of one context: ``ceil(max_ctx / split_tokens)`` (1: no split)."""
    return 1 if split_tokens == 0 else -(-max_ctx // split_tokens)


class HbmBlockReader(wiring.Component):
    """Answers block reads (:func:`~.attention_layouts.block_req_layout`) from HBM, in order,
    whatever order HBM answers its bursts in.

    A block read of ``ntok`` tokens from token ``block*16 + t0`` of region
    ``(request, layer, kv_head)`` is ``ntok * 2 * Dk`` words from
    :func:`~.attention_layouts.kv_addr`, issued as HBM bursts of up to ``max_beats`` beats.
    Each burst takes one of ``max_outstanding`` slots of a reorder buffer (``max_outstanding
    x 2**ceil(log2 max_beats)`` words) when it is issued, its HBM ``id`` is the slot; ``resp``
    is always ready (its burst has room). HBM bursts are never interleaved, so one beat
    counter places each response beat. Slots drain in issue order: ``rd_data`` offers the
    oldest slot's words one per cycle once its whole burst is in (``last`` on a block read's
    final word, ``err`` as HBM answered). ``rd_req.ready`` while no block read is being cut
    into bursts (one burst issued per cycle while a slot is free).

    Built by :class:`KVStreamer` (whose checks cover its parameters): ``w`` the CDU
    ``Widths``, the rest as there.
    """

    def __init__(self, w, num_layers, num_kv_heads, max_ctx, num_requests, head_dim, lanes,
                 kv_dtype, max_beats, max_outstanding):
        self.w, self.L, self.H, self.max_ctx = w, num_layers, num_kv_heads, max_ctx
        self.dk = head_dim // lanes
        self.max_beats, self.S = max_beats, max_outstanding
        self.region = kv_region_words(max_ctx, head_dim, lanes)
        self.depth = kv_image_words(num_requests, num_layers, num_kv_heads, max_ctx, head_dim,
                                    lanes)
        self.addr_bits = index_bits(self.depth)
        self.id_bits = index_bits(max_outstanding)
        self.data_bits = kv_data_bits(lanes, kv_dtype)
        super().__init__({
            "rd_req": In(stream.Signature(block_req_layout(w.req, w.layer,
                                                           head_bits(num_kv_heads), w.block))),
            "rd_data": Out(stream.Signature(block_data_layout(self.data_bits))),
            "hbm_req": Out(stream.Signature(hbm_req_layout(self.id_bits, self.addr_bits,
                                                           max_beats))),
            "hbm_resp": In(stream.Signature(hbm_resp_layout(self.id_bits, self.data_bits))),
        })

    def elaborate(self, platform):
        m = Module()
        S, bb = self.S, index_bits(self.max_beats)
        two_dk = 2 * self.dk
        # ------------------------------------------------------------ burst issue
        addr = Signal(self.addr_bits + 1)
        left = Signal(range(BLOCK_TOKENS * two_dk + 1))     # words of the block not yet issued
        cutting = Signal()
        wr = Signal(range(S))                               # next slot to issue into
        rd = Signal(range(S))                               # oldest slot (drain)
        used = Signal(range(S + 1))
        lens = [Signal(range(self.max_beats + 1), name=f"len_{i}") for i in range(S)]
        fin = Signal(S)                                     # the slot ends a block read
        full = Signal(S)                                    # the slot's burst is all in
        r = self.rd_req.payload
        region = (r.request * self.L + r.layer) * self.H + r.kv_head
        m.d.comb += self.rd_req.ready.eq(~cutting)
        with m.If(self.rd_req.valid & ~cutting):
            m.d.sync += [cutting.eq(1), left.eq(r.ntok * two_dk),
                         addr.eq(region * self.region + (Cat(r.t0, r.block)) * two_dk)]
        beats = Signal(range(self.max_beats + 1))
        m.d.comb += beats.eq(Mux(left > self.max_beats, self.max_beats, left))
        q = self.hbm_req.payload
        m.d.comb += [self.hbm_req.valid.eq(cutting & (used < S)), q.id.eq(wr), q.addr.eq(addr),
                     q.beats.eq(beats)]
        issue = Signal()
        m.d.comb += issue.eq(self.hbm_req.valid & self.hbm_req.ready)
        with m.If(issue):
            m.d.sync += [addr.eq(addr + beats), left.eq(left - beats),
                         wr.eq(Mux(wr == S - 1, 0, wr + 1)),
                         fin.bit_select(wr, 1).eq(left == beats)]
            for i in range(S):
                with m.If(wr == i):
                    m.d.sync += lens[i].eq(beats)
            with m.If(left == beats):
                m.d.sync += cutting.eq(0)
        # ------------------------------------------------------------ reorder buffer
        m.submodules.rob = rob = Memory(shape=unsigned(self.data_bits + 1), depth=S << bb,
                                        init=[])
        wp = rob.write_port()
        rp = rob.read_port(domain="comb")
        rx = Signal(bb)                                     # beat of the burst being received
        p = self.hbm_resp.payload
        m.d.comb += [self.hbm_resp.ready.eq(1), wp.addr.eq(Cat(rx, p.id) if bb else p.id),
                     wp.data.eq(Cat(p.data, p.err)), wp.en.eq(self.hbm_resp.valid)]
        with m.If(self.hbm_resp.valid):
            m.d.sync += rx.eq(rx + 1)
            with m.If(p.last):
                m.d.sync += [rx.eq(0), full.bit_select(p.id, 1).eq(1)]
        # ------------------------------------------------------------ in-order drain
        beat = Signal(bb)
        cur_len = Signal(range(self.max_beats + 1))
        for i in range(S):
            with m.If(rd == i):
                m.d.comb += cur_len.eq(lens[i])
        end = Signal()
        o = self.rd_data.payload
        m.d.comb += [rp.addr.eq(Cat(beat, rd) if bb else rd), end.eq(beat == cur_len - 1),
                     self.rd_data.valid.eq(full.bit_select(rd, 1)),
                     o.data.eq(rp.data[:self.data_bits]), o.err.eq(rp.data[self.data_bits]),
                     o.last.eq(end & fin.bit_select(rd, 1))]
        done = Signal()
        m.d.comb += done.eq(self.rd_data.valid & self.rd_data.ready & end)
        with m.If(self.rd_data.valid & self.rd_data.ready):
            m.d.sync += beat.eq(beat + 1)
            with m.If(end):
                m.d.sync += [beat.eq(0), rd.eq(Mux(rd == S - 1, 0, rd + 1))]
        with m.If(done):
            m.d.sync += full.bit_select(rd, 1).eq(0)
        m.d.sync += used.eq(used + issue - done)
        return m


def streamer_ports(st, kv_payload):
    """The ports every streamer of the tile has (``st`` a :class:`KVStreamer` or a unit
    streamer, its ``kv`` payload layout given): ``job``, ``q_write``, ``te_job``, ``q``,
    ``kv``, ``hbm_req``/``hbm_resp`` (its block reader's HBM port), ``tensor_scale``,
    ``clear``, ``err``, ``busy``."""
    r = st.reader
    return {
        "job": In(stream.Signature(attn_job_layout(st.w, st.slot_bits, st.H,
                                                   st.split_tokens))),
        "q_write": In(stream.Signature(q_write_layout(st.slot_bits, st.hb,
                                                      index_bits(st.qbeats), st.lanes))),
        "te_job": Out(stream.Signature(array_job_layout(st.tag.size))),
        "q": Out(stream.Signature(q_layout(st.lanes))),
        "kv": Out(stream.Signature(kv_payload)),
        "hbm_req": Out(stream.Signature(hbm_req_layout(r.id_bits, r.addr_bits, r.max_beats))),
        "hbm_resp": In(stream.Signature(hbm_resp_layout(r.id_bits, r.data_bits))),
        "tensor_scale": In(32),
        "clear": In(1),
        "err": Out(1),
        "err_slots": Out(1 << st.slot_bits),
        "busy": Out(1),
    }


def flag_err(st, m, slot):
    """A K/V word of ``slot``'s job came with ``err``: the sticky ``err`` and ``slot``'s bit of
    ``err_slots`` (both cleared by ``clear``)."""
    m.d.sync += [st.err.eq(1), st.err_slots.eq(st.err_slots | (1 << slot))]


def q_and_desc(st, m, slot, kv_head, qcnt, start, end, part, parts):
    """A streamer's Q buffer (written through ``q_write``, always ready; ``2**slot_bits * H *
    G*Dk`` words of ``lanes`` bf16 codes, read combinationally at ``(slot, kv_head, qcnt)``
    onto ``q``) and the ``te_job`` payload of the job ``(slot, kv_head, start, end, part,
    parts)``: ``n = end - start``, the softmax scale, ``tensor_scale``, partial when split,
    and the tag."""
    m.submodules.qbuf = qbuf = Memory(shape=unsigned(16 * st.lanes),
                                      depth=(1 << st.slot_bits) * st.H * st.qbeats, init=[])
    qw = qbuf.write_port()
    qr = qbuf.read_port(domain="comb")
    qp = st.q_write.payload
    m.d.comb += [st.q_write.ready.eq(1), qw.en.eq(st.q_write.valid),
                 qw.addr.eq(st.qbuf_addr(qp.slot, qp.kv_head, qp.beat)),
                 qw.data.eq(qp.data.as_value()),
                 qr.addr.eq(st.qbuf_addr(slot, kv_head, qcnt)),
                 st.q.payload.data.as_value().eq(qr.data)]
    d, tag = st.te_job.payload.desc, st.te_job.payload.tag
    m.d.comb += [d.n.eq(end - start), d.scale.eq(st.scale_bits),
                 d.tensor_scale.eq(st.tensor_scale), d.partial.eq(parts != 1),
                 tag.eq(Cat(slot, kv_head, part == parts - 1, parts[:st.parts_bits]))]


class KVStreamer(CheckedComponent):
    """Turns attention jobs (the step sequencer's ``job`` payload) into the TE array's input
    streams, reading each job's K/V from HBM.

    Parameters
    ----------
    head_dim, G, lanes, kv_dtype
        The TE array's configuration (``Dk = head_dim / lanes``).
    num_layers, num_kv_heads, split_tokens, widths, slot_bits
        As for the step sequencer (they set the ``job`` layout) and the KV image.
    max_ctx : int
        Tokens per (request, layer, kv_head) region of the KV image (a job's ``end`` must not
        exceed it).
    num_requests : int, 1..2**widths.req
        Requests the KV image holds (its depth: ``num_requests * L * H * max_ctx * 2*Dk``).
    max_beats : int, 1..256
        Longest HBM burst (the HBM model's ``max_beats``).
    max_outstanding : int, 1..64
        HBM bursts in flight (reorder-buffer slots; HBM ``id`` width ``ceil(log2)``).
    scale_bits : int
        fp32 bits of the softmax scale every job uses (default ``1/sqrt(head_dim)``).

    Ports (``amaranth.lib.stream``, valid never waits for ready):

    * ``job`` (in): one beat per job, taken when the streamer is idle (the previous job's
      last ``kv`` beat went out);
    * ``q_write`` (in, always ready): ``(slot, kv_head, beat, data)`` into the Q buffer
      (``2**slot_bits * H * G*Dk`` words of ``lanes`` bf16 codes), seen from the next cycle;
    * ``te_job`` (out): the TE array's ``job``: desc ``n = end - start``, ``scale``,
      ``tensor_scale`` (the input of that name, sampled when the beat is offered),
      ``partial = (parts != 1)``, and the tag :func:`~.attention_layouts.tag_layout`;
    * ``q`` (out): the job's ``G*Dk`` q beats from the Q buffer, word ``(slot, kv_head, i)``;
    * ``kv`` (out): the job's ``n * 2*Dk`` K/V beats, the HBM words with ``last`` on the
      final one;
    * ``hbm_req`` (out), ``hbm_resp`` (in): the behavioural HBM model's ``req`` and ``resp``
      payloads (:mod:`.attention_layouts`);
    * ``tensor_scale`` (in, 32 b), ``clear`` (in): clears ``err``; ``err`` (out): sticky, an
      HBM beat came with ``err``; ``busy`` (out): a job is being streamed.

    The job's block reads (one per 16-token block of ``[start, end)``, through
    :class:`HbmBlockReader`) are issued from the cycle the job is taken, so HBM latency
    overlaps the ``te_job`` and ``q`` beats.
    """

    @staticmethod
    def _check(head_dim, G, lanes, kv_dtype, num_layers, num_kv_heads, split_tokens, widths,
               slot_bits, max_ctx, num_requests, max_beats, max_outstanding, scale_bits):
        return check_streamer_params(head_dim, G, lanes, kv_dtype, num_layers, num_kv_heads,
                                     split_tokens, widths, slot_bits, max_ctx, num_requests,
                                     max_beats, max_outstanding, scale_bits)

    def __init__(self, head_dim=64, G=2, lanes=16, kv_dtype="bf16", num_layers=2,
                 num_kv_heads=2, split_tokens=0, widths=None, slot_bits=2, max_ctx=64,
                 num_requests=4, max_beats=16, max_outstanding=4, scale_bits=None):
        self.w = w = widths or Widths()
        self.head_dim, self.G, self.lanes, self.kv_dtype = head_dim, G, lanes, kv_dtype
        self.L, self.H, self.split_tokens, self.slot_bits = (num_layers, num_kv_heads,
                                                             split_tokens, slot_bits)
        self.max_ctx, self.num_requests = max_ctx, num_requests
        self.max_beats, self.max_outstanding = max_beats, max_outstanding
        self.scale_bits = default_scale_bits(head_dim) if scale_bits is None else scale_bits
        self.dk = head_dim // lanes
        self.qbeats = G * self.dk
        self.hb = head_bits(num_kv_heads)
        self.parts_bits = count_bits(combine_parts(split_tokens, max_ctx))
        self.tag = tag_layout(slot_bits, self.hb, self.parts_bits)
        self.reader = HbmBlockReader(w, num_layers, num_kv_heads, max_ctx, num_requests,
                                     head_dim, lanes, kv_dtype, max_beats, max_outstanding)
        super().__init__(streamer_ports(self, kv_layout(lanes, kv_dtype)))

    def qbuf_addr(self, slot, kv_head, beat):
        """Word of the Q (and output) buffer: ``(slot * H + kv_head) * G*Dk + beat``."""
        return (slot * self.H + kv_head) * self.qbeats + beat

    def elaborate(self, platform):
        m = Module()
        m.submodules.reader = rd = self.reader
        wiring.connect(m, wiring.flipped(self.hbm_req), rd.hbm_req)
        wiring.connect(m, rd.hbm_resp, wiring.flipped(self.hbm_resp))
        j = self._elaborate_job(m, rd.rd_data)
        self._elaborate_blocks(m, j, rd.rd_req)
        return m

    def _elaborate_job(self, m, rd_data):
        """The job register, the Q buffer and the job FSM: IDLE (take a job) -> DESC (the
        ``te_job`` beat) -> Q (``G*Dk`` q beats) -> KV (the block reads' words to ``kv``,
        ``last`` on the job's final word) -> IDLE."""
        sb = seq_bits(self.w)
        jl = self.job.payload
        j = Signal.like(jl, name="cur")                     # the job being streamed
        kv_left = Signal(sb + (2 * self.dk).bit_length())   # kv beats still to send
        qcnt = Signal(range(self.qbeats))
        q_and_desc(self, m, j.slot, j.kv_head, qcnt, j.start, j.end, j.part, j.parts)
        wb = kv_word_bits(self.lanes, self.kv_dtype)
        kv = self.kv.payload.as_value()
        m.d.comb += [kv[:wb].eq(rd_data.payload.data[:wb]),
                     self.kv.payload.last.eq(kv_left == 1)]
        with m.If(self.clear):
            m.d.sync += [self.err.eq(0), self.err_slots.eq(0)]
        take = Signal()
        m.d.comb += self.busy.eq(1)
        with m.FSM(name="streamer"):
            with m.State("IDLE"):
                m.d.comb += [self.busy.eq(0), self.job.ready.eq(1), take.eq(self.job.valid)]
                with m.If(self.job.valid):
                    m.d.sync += [j.eq(jl), qcnt.eq(0),
                                 kv_left.eq((jl.end - jl.start) * (2 * self.dk))]
                    m.next = "DESC"
            with m.State("DESC"):
                m.d.comb += self.te_job.valid.eq(1)
                with m.If(self.te_job.ready):
                    m.next = "Q"
            with m.State("Q"):
                m.d.comb += self.q.valid.eq(1)
                with m.If(self.q.ready):
                    m.d.sync += qcnt.eq(qcnt + 1)
                    with m.If(qcnt == self.qbeats - 1):
                        m.next = "KV"
                        with m.If(kv_left == 0):        # n = 0: no K/V (not from a sequencer)
                            m.next = "IDLE"
            with m.State("KV"):
                m.d.comb += [self.kv.valid.eq(rd_data.valid), rd_data.ready.eq(self.kv.ready)]
                with m.If(rd_data.valid & self.kv.ready):
                    m.d.sync += kv_left.eq(kv_left - 1)
                    with m.If(rd_data.payload.err):
                        flag_err(self, m, j.slot)
                    with m.If(kv_left == 1):
                        m.next = "IDLE"
        return type("J", (), dict(job=j, jl=jl, take=take))

    def _elaborate_blocks(self, m, j, rd_req):
        """The block walker: from the cycle a job is taken, one block read per 16-token block
        of ``[start, end)`` (the first and last may be partial blocks)."""
        sb = seq_bits(self.w)
        t = Signal(sb)                                      # next token to request
        walking = Signal()
        nxt = Signal(sb + 1)                                # the end of t's block, or end
        boundary = Signal(sb + 1)
        r = rd_req.payload
        m.d.comb += [boundary.eq((t[4:] + 1) << 4),
                     nxt.eq(Mux(boundary < j.job.end, boundary, j.job.end)),
                     rd_req.valid.eq(walking), r.request.eq(j.job.request),
                     r.layer.eq(j.job.layer), r.kv_head.eq(j.job.kv_head), r.block.eq(t[4:]),
                     r.t0.eq(t[:4]), r.ntok.eq(nxt - t)]
        with m.If(rd_req.valid & rd_req.ready):
            m.d.sync += t.eq(nxt)
            with m.If(nxt == j.job.end):
                m.d.sync += walking.eq(0)
        with m.If(j.take):
            m.d.sync += [t.eq(j.jl.start), walking.eq(j.jl.end != j.jl.start)]
