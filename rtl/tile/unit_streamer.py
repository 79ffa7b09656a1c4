"""Unit streamer of the decode tile: attention jobs + the CDU's ``ready`` entries -> a routed
K/V stream over the TE array's engines, each KV block streamed once per pass."""

from __future__ import annotations

from types import SimpleNamespace

from amaranth.hdl import Array, Cat, Module, Mux, Signal, unsigned
from amaranth.lib import stream, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from tricut.models.cdu import KV_BLOCK_TOKENS
from tricut.models.tile_timing import walk_depth
from tricut.rtl.cdu.checked import CheckedComponent
from tricut.rtl.cdu.layouts import Widths, ready_layout, seq_bits
from tricut.rtl.te.layouts import q_layout

from .array_layouts import array_job_layout, routed_kv_layout
from .attention_layouts import (count_bits, hbm_req_layout, hbm_resp_layout,
                                index_bits, kv_word_bits, l2_data_layout, l2_read_layout,
                                q_write_layout, tag_layout)
from .block_reader import (HbmBlockReader, check_streamer_params, combine_parts,
                           default_scale_bits)
from .l2_fill import frame_value, block_beats
from .sequencer_layouts import attn_job_layout, head_bits
from .te_array import MAX_ENGINES

__all__ = ["UnitStreamer"]


def _ports(st, kv_payload):
    """The streamer's ports but the L2's (``st`` the unit streamer, its ``kv`` payload layout
    given): ``job``, ``q_write``, ``te_job``, ``q``,
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


def _flag_err(st, m, slot):
    """A K/V word of ``slot``'s job came with ``err``: the sticky ``err`` and ``slot``'s bit of
    ``err_slots`` (both cleared by ``clear``)."""
    m.d.sync += [st.err.eq(1), st.err_slots.eq(st.err_slots | (1 << slot))]


def _q_and_desc(st, m, slot, kv_head, qcnt, start, end, part, parts):
    """The streamer's Q buffer (written through ``q_write``, always ready; ``2**slot_bits * H *
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


class UnitStreamer(CheckedComponent):
    """Streams each (slot, layer) unit's K/V once to the TE engines working on it.

    A *unit* is the ``H * parts`` consecutive jobs of one (slot, layer) (the step sequencer's
    order: per KV head, per split part). The streamer takes them in *passes* of at most
    ``engines`` jobs; job ``k`` of the run goes to engine ``k mod engines`` (the TE array's
    round-robin). A pass dispatches its jobs (``te_job`` beat and ``G*Dk`` q beats each), then
    walks the 16-token blocks its jobs cover, in order, and sends every K/V word of a token
    that a pass job covers to that job's engine (``kv.engine``); words of tokens no pass job
    covers are dropped.

    Where a block comes from: the CDU sends one ``ready`` entry per demand block of the unit,
    blocks ``0, 1, ...`` in order (pattern ``full``). The first pass that reaches block ``b``
    uses its entry: a hit or an allocated miss is read from the L2 frame
    (:func:`~.l2_fill.frame_of`, all ``16*H*2*Dk`` words, token-major), a bypass from HBM;
    the entry is popped (``ready.ready``) when the block's last word has been taken, so the frame cannot be
    re-allocated while it is read (the CDU holds such allocations). A later pass of the same
    unit (fewer engines than jobs) re-reads the block from HBM, one request per (token, job).
    An entry that is not the expected (request, layer, block) raises sticky ``misorder``.

    Without the CDU (``l2=False``) there are no ``ready``, ``l2_read`` and ``l2_data`` ports:
    every pass reads its tokens from HBM, one request per (token, job), in one walk over the
    whole pass rather than block by block, so the reads of the next block are in flight
    while the previous block's answers arrive (a block-by-block walk waits for every answer
    of a block before the next: one HBM latency per block); and the walk steps offsets into
    every pass job in turn (job ``j``'s token ``start_j + offset``), so the split parts of a
    pass are fed side by side rather than one after another.

    Parameters
    ----------
    engines : int, 1..16
        The TE array's engines.
    head_dim, G, lanes, kv_dtype
        The TE array's configuration (``Dk = head_dim / lanes``).
    num_layers, num_kv_heads, split_tokens, widths, slot_bits
        As for the step sequencer (they set the ``job`` layout) and the KV image.
    max_ctx : int
        Tokens per (request, layer, kv_head) region of the KV image, a multiple of 16 (a
        job's ``end`` must not exceed it).
    num_requests : int, 1..2**widths.req
        Requests the KV image holds (its depth: ``num_requests * L * H * max_ctx * 2*Dk``).
    max_beats : int, 1..256
        Longest HBM burst (the HBM model's ``max_beats``).
    max_outstanding : int, 1..64
        HBM bursts in flight (reorder-buffer slots; HBM ``id`` width ``ceil(log2)``); the HBM
        walk keeps :func:`walk_depth` block reads in flight.
    scale_bits : int
        fp32 bits of the softmax scale every job uses (default ``1/sqrt(head_dim)``).
    sets, ways
        The CDU's L2 geometry (the frames the ``ready`` entries name).
    l2 : bool
        ``True`` (default): the CDU's ``ready`` entries and the L2 data array are in the K/V
        path.

    Ports: ``job`` (in), ``q_write`` (in, always ready: the Q buffer), ``te_job``, ``q`` and
    ``kv`` (out: the TE array's streams, ``kv`` routed to an engine), ``hbm_req``/``hbm_resp``
    (its block reader's HBM port), ``tensor_scale`` (in), ``clear`` (in: clears ``err``,
    ``err_slots`` and ``misorder``), ``err``/``err_slots`` (out, sticky: an HBM or L2 word came
    with ``err``, and its job's slot), ``busy`` (out), ``misorder`` (out), and with ``l2``
    ``ready`` (in), ``l2_read`` (out), ``l2_data`` (in).
    """

    @staticmethod
    def _check(engines, head_dim, G, lanes, kv_dtype, num_layers, num_kv_heads, split_tokens,
               widths, slot_bits, max_ctx, num_requests, max_beats, max_outstanding,
               scale_bits, sets, ways, l2):
        if not isinstance(l2, bool):
            raise ValueError(f"l2 must be True or False, got {l2!r}")
        if not isinstance(engines, int) or isinstance(engines, bool) or \
                not 1 <= engines <= MAX_ENGINES:
            raise ValueError(f"engines must be an integer in 1..{MAX_ENGINES}, got {engines!r}")
        if not isinstance(sets, int) or isinstance(sets, bool) or sets < 1 or sets & (sets - 1):
            raise ValueError(f"sets must be a power of 2, got {sets!r}")
        if not isinstance(ways, int) or isinstance(ways, bool) or not 1 <= ways <= 16:
            raise ValueError(f"ways must be an integer in 1..16, got {ways!r}")
        if isinstance(max_ctx, int) and max_ctx % KV_BLOCK_TOKENS:
            raise ValueError(f"max_ctx must be a multiple of {KV_BLOCK_TOKENS} (whole KV blocks), "
                             f"got {max_ctx!r}")
        return check_streamer_params(head_dim, G, lanes, kv_dtype, num_layers, num_kv_heads,
                                     split_tokens, widths, slot_bits, max_ctx, num_requests,
                                     max_beats, max_outstanding, scale_bits)

    def __init__(self, engines=1, head_dim=64, G=2, lanes=16, kv_dtype="bf16", num_layers=2,
                 num_kv_heads=2, split_tokens=0, widths=None, slot_bits=2, max_ctx=64,
                 num_requests=4, max_beats=16, max_outstanding=4, scale_bits=None, sets=4,
                 ways=2, l2=True):
        self.w = w = widths or Widths()
        self.l2 = l2
        self.E, self.head_dim, self.G, self.lanes = engines, head_dim, G, lanes
        self.kv_dtype, self.L, self.H = kv_dtype, num_layers, num_kv_heads
        self.split_tokens, self.slot_bits, self.max_ctx = split_tokens, slot_bits, max_ctx
        self.lanes = lanes
        self.sets, self.ways = sets, ways
        self.scale_bits = default_scale_bits(head_dim) if scale_bits is None else scale_bits
        self.dk = head_dim // lanes
        self.qbeats = G * self.dk
        self.hb = head_bits(num_kv_heads)
        self.parts_bits = count_bits(combine_parts(split_tokens, max_ctx))
        self.tag = tag_layout(slot_bits, self.hb, self.parts_bits)
        self.block_beats = block_beats(num_kv_heads, head_dim, lanes)
        self.frames = sets * ways
        self.reader = HbmBlockReader(w, num_layers, num_kv_heads, max_ctx, num_requests,
                                     head_dim, lanes, kv_dtype, max_beats, max_outstanding)
        ports = {**_ports(self, routed_kv_layout(lanes, kv_dtype, engines)),
                 **self._l2_ports(), "misorder": Out(1)}
        super().__init__(ports if l2 else {k: v for k, v in ports.items()
                                           if k not in self._l2_ports()})

    def _l2_ports(self):
        """The ports of the CDU's ``ready`` entries and the L2 data array's read side."""
        return {"ready": In(stream.Signature(ready_layout(self.w))),
                "l2_read": Out(stream.Signature(l2_read_layout(self.frames, self.block_beats,
                                                               1))),
                "l2_data": In(stream.Signature(l2_data_layout(1, self.reader.data_bits)))}

    def qbuf_addr(self, slot, kv_head, beat):
        """Word of the Q (and output) buffer: ``(slot * H + kv_head) * G*Dk + beat``."""
        return (slot * self.H + kv_head) * self.qbeats + beat

    def elaborate(self, platform):
        m = Module()
        m.submodules.reader = rd = self.reader
        wiring.connect(m, wiring.flipped(self.hbm_req), rd.hbm_req)
        wiring.connect(m, rd.hbm_resp, wiring.flipped(self.hbm_resp))
        E, H, sb = self.E, self.H, seq_bits(self.w)
        eb = index_bits(E)
        # without the L2, stand-ins that are never valid: every block is read from HBM
        l2_ports = self if self.l2 else SimpleNamespace(
            **{k: v.signature.create() for k, v in self._l2_ports().items()})
        ready, l2_read, l2_data = l2_ports.ready, l2_ports.l2_read, l2_ports.l2_data
        two_dk = 2 * self.dk
        jl = self.job.payload

        # ------------------------------------------------------------ pass table
        def field(name, shape):
            return Array(Signal(shape, name=f"{name}_{i}") for i in range(E))
        t_head = field("p_head", self.hb)
        t_part = field("p_part", len(jl.part))
        t_parts = field("p_parts", len(jl.parts))
        t_start = field("p_start", sb)
        t_end = field("p_end", sb + 1)
        t_eng = field("p_eng", eb)
        pc = Signal(range(E + 1))               # jobs in the pass
        slot = Signal.like(jl.slot)
        request = Signal.like(jl.request)
        layer = Signal.like(jl.layer)
        unit_open = Signal()
        total = Signal(range(H * (1 << len(jl.parts)) + 1))    # jobs of the unit
        taken = Signal.like(total)
        next_eng = Signal(eb)                    # engine of the next job (round-robin)
        next_block = Signal(self.w.block + 1)    # the unit's next ready entry's block
        lo = Signal(sb + 1)
        hi = Signal(sb + 1)
        span = Signal(sb + 1)                    # the pass's longest job (no L2: the walk)

        # ------------------------------------------------------------ Q buffer, job beat
        k = Signal(range(E))                     # pass job being dispatched
        qcnt = Signal(range(self.qbeats))
        _q_and_desc(self, m, slot, t_head[k], qcnt, t_start[k], t_end[k], t_part[k], t_parts[k])

        # ------------------------------------------------------------ routing
        blk = Signal(self.w.block + 1)           # block being streamed
        tok = Signal(range(KV_BLOCK_TOKENS))        # token within the block (L2 walk)
        head = Signal(range(H))
        word = Signal(range(two_dk))
        t_abs = Signal(sb + 1)

        def route(t, h):
            """(hit, engine, last-token) of token ``t`` of head ``h`` among the pass jobs."""
            hit = Signal()
            eng = Signal(eb)
            is_last = Signal()
            for i in range(E):
                with m.If((i < pc) & (t_head[i] == h) & (t_start[i] <= t) & (t < t_end[i])):
                    m.d.comb += [hit.eq(1), eng.eq(t_eng[i]), is_last.eq(t == t_end[i] - 1)]
            return hit, eng, is_last

        wb = kv_word_bits(self.lanes, self.kv_dtype)
        kvp = self.kv.payload
        kv_bits = kvp.kv.as_value()
        l2d = l2_data.payload
        m.d.comb += t_abs.eq(Cat(tok, blk))
        l2_hit, l2_eng, l2_lastt = route(t_abs, head)

        # HBM walk: one block read per (token, pass job covering it), its engine and
        # last flag queued for the answers (which come in order); as deep as the reader's
        # reorder buffer, so the walk keeps every burst slot busy. With the L2 the walker
        # steps tokens of one block; without it, offsets into every pass job at once (token
        # start + offset of each job in turn), so the split parts of a pass are fed side by
        # side, not one after another
        m.submodules.routes = routes = SyncFIFO(width=eb + 1, depth=walk_depth(self.reader.S))
        wt = Signal(sb + 1)                      # walker token (no L2: offset)
        wj = Signal(range(E + 1))                # walker job
        walking = Signal()
        wend = Signal(sb + 1)                    # end of the walked tokens (offsets)
        r = self.reader.rd_req.payload
        wsel = wj[:eb] if E > 1 else 0
        jh = t_head[wsel]
        cover = Signal()
        wtok = Signal(sb + 2)                    # the token the walker reads
        if self.l2:
            m.d.comb += [wtok.eq(wt), cover.eq((wj < pc) & (t_start[wsel] <= wt) &
                                               (wt < t_end[wsel]))]
        else:
            m.d.comb += [wtok.eq(t_start[wsel] + wt), cover.eq((wj < pc) & (wtok < t_end[wsel]))]
        m.d.comb += [r.request.eq(request), r.layer.eq(layer), r.kv_head.eq(jh),
                     r.block.eq(wtok[4:]), r.t0.eq(wtok[:4]), r.ntok.eq(1),
                     routes.w_data.eq(Cat(t_eng[wsel], wtok == t_end[wsel] - 1))]
        issue = Signal()
        m.d.comb += [self.reader.rd_req.valid.eq(walking & cover & routes.w_rdy),
                     routes.w_en.eq(issue),
                     issue.eq(self.reader.rd_req.valid & self.reader.rd_req.ready)]
        with m.If(walking & (~cover | issue)):
            with m.If(wj == E - 1):
                m.d.sync += [wj.eq(0), wt.eq(wt + 1)]
                with m.If(wt + 1 == wend):
                    m.d.sync += walking.eq(0)
            with m.Else():
                m.d.sync += wj.eq(wj + 1)
        rdd = self.reader.rd_data

        m.d.comb += self.busy.eq(unit_open | (pc != 0))
        with m.If(self.clear):
            m.d.sync += [self.err.eq(0), self.err_slots.eq(0), self.misorder.eq(0)]
        rdy = ready.payload
        ent_block_ok = Signal()
        m.d.comb += ent_block_ok.eq((rdy.req == request) & (rdy.layer == layer) &
                                    (rdy.block == blk))
        use_entry = Signal()                     # the block's source is its ready entry
        m.d.comb += use_entry.eq((next_block == blk) if self.l2 else 0)
        frame = Signal(index_bits(self.frames))
        m.d.comb += frame.eq(frame_value(request, layer, blk[:self.w.block], rdy.way, self.sets,
                                          self.ways, len(frame)))
        last_blk = Signal(sb + 1)
        m.d.comb += last_blk.eq((hi - 1) >> 4)
        blk_lo = Signal(sb + 1)                  # first token of the block walked
        blk_hi = Signal(sb + 1)
        m.d.comb += [blk_lo.eq(Mux(lo > (blk << 4), lo, blk << 4)),
                     blk_hi.eq(Mux(hi < ((blk + 1) << 4), hi, (blk + 1) << 4))]

        v = SimpleNamespace(**locals())
        with m.FSM(name="unit"):
            self._dispatch_states(m, v)
            self._stream_states(m, v)
        return m

    def _dispatch_states(self, m, v):
        """States of the unit FSM (see the class docs); ``v``: the signals of :meth:`elaborate`."""
        E, H, blk, hi, jl, k = v.E, v.H, v.blk, v.hi, v.jl, v.k
        layer, lo, next_block = v.layer, v.lo, v.next_block
        next_eng, pc, qcnt = v.next_eng, v.pc, v.qcnt
        request, slot, t_end = v.request, v.slot, v.t_end
        t_eng, t_head, t_part = v.t_eng, v.t_head, v.t_part
        t_parts, t_start, taken = v.t_parts, v.t_start, v.taken
        total, unit_open = v.total, v.unit_open
        with m.State("COLLECT"):
            m.d.comb += self.job.ready.eq(1)
            with m.If(self.job.valid):
                for i in range(E):
                    with m.If(pc == i):
                        m.d.sync += [t_head[i].eq(jl.kv_head), t_part[i].eq(jl.part),
                                     t_parts[i].eq(jl.parts), t_start[i].eq(jl.start),
                                     t_end[i].eq(jl.end), t_eng[i].eq(next_eng)]
                m.d.sync += [pc.eq(pc + 1), next_eng.eq(Mux(next_eng == E - 1, 0,
                                                            next_eng + 1))]
                with m.If((pc == 0) | (jl.start < lo)):
                    m.d.sync += lo.eq(jl.start)
                with m.If((pc == 0) | (jl.end > hi)):
                    m.d.sync += hi.eq(jl.end)
                if not self.l2:
                    with m.If((pc == 0) | (jl.end - jl.start > v.span)):
                        m.d.sync += v.span.eq(jl.end - jl.start)
                now_taken = Signal.like(taken)
                unit_total = Signal.like(total)
                m.d.comb += [now_taken.eq(Mux(unit_open, taken, 0) + 1),
                             unit_total.eq(Mux(unit_open, total, jl.parts * H))]
                m.d.sync += [taken.eq(now_taken), total.eq(unit_total), unit_open.eq(1)]
                with m.If(~unit_open):
                    m.d.sync += [slot.eq(jl.slot), request.eq(jl.request),
                                 layer.eq(jl.layer), next_block.eq(0)]
                with m.Elif((jl.slot != slot) | (jl.layer != layer) |
                            (jl.request != request)):
                    m.d.sync += self.misorder.eq(1)
                with m.If((pc == E - 1) | (now_taken == unit_total)):
                    m.d.sync += k.eq(0)
                    m.next = "DESC"
        with m.State("DESC"):
            m.d.comb += self.te_job.valid.eq(1)
            with m.If(self.te_job.ready):
                m.d.sync += qcnt.eq(0)
                m.next = "Q"
        with m.State("Q"):
            m.d.comb += self.q.valid.eq(1)
            with m.If(self.q.ready):
                m.d.sync += qcnt.eq(qcnt + 1)
                with m.If(qcnt == self.qbeats - 1):
                    with m.If(k == pc - 1):
                        m.d.sync += blk.eq(lo >> 4)
                        m.next = "BLOCK"
                    with m.Else():
                        m.d.sync += k.eq(k + 1)
                        m.next = "DESC"

    def _stream_states(self, m, v):
        """States of the unit FSM (see the class docs); ``v``: the signals of :meth:`elaborate`."""
        H, blk, blk_hi = v.H, v.blk, v.blk_hi
        blk_lo, eb, ent_block_ok = v.blk_lo, v.eb, v.ent_block_ok
        frame, head, kv_bits = v.frame, v.head, v.kv_bits
        kvp, l2_eng, l2_hit = v.kvp, v.l2_eng, v.l2_hit
        l2_lastt, l2d, last_blk = v.l2_lastt, v.l2d, v.last_blk
        next_block, pc, rdd = v.next_block, v.pc, v.rdd
        rdy, routes, taken, tok, total, two_dk = v.rdy, v.routes, v.taken, v.tok, v.total, v.two_dk
        unit_open, use_entry, walking = v.unit_open, v.use_entry, v.walking
        wb, wend, wj = v.wb, v.wend, v.wj
        word, wt, slot = v.word, v.wt, v.slot
        ready, l2_read, l2_data = v.ready, v.l2_read, v.l2_data
        with m.State("BLOCK"):
            # choose the block's source
            with m.If(~use_entry):
                if self.l2:
                    m.d.sync += [walking.eq(1), wt.eq(blk_lo), wj.eq(0), wend.eq(blk_hi)]
                else:
                    # no L2: one walk over the whole pass (offsets 0 .. its longest job),
                    # so a block's reads are in flight while the previous one's answers
                    # arrive, and the pass jobs are fed side by side
                    m.d.sync += [walking.eq(1), wt.eq(0), wj.eq(0), wend.eq(v.span),
                                 blk.eq(last_blk)]
                m.next = "HBM"
            with m.Elif(ready.valid):
                with m.If(~ent_block_ok):
                    m.d.sync += self.misorder.eq(1)
                with m.If(rdy.err):
                    _flag_err(self, m, slot)
                with m.If(rdy.bypass):
                    m.d.sync += [walking.eq(1), wt.eq(blk_lo), wj.eq(0), wend.eq(blk_hi)]
                    m.next = "HBM"
                with m.Else():
                    m.next = "L2REQ"
        with m.State("L2REQ"):
            rq = l2_read.payload
            m.d.comb += [l2_read.valid.eq(1), rq.frame.eq(frame),
                         rq.beats.eq(self.block_beats), rq.tag.eq(0)]
            with m.If(l2_read.ready):
                m.d.sync += [tok.eq(0), head.eq(0), word.eq(0)]
                m.next = "L2DATA"
        with m.State("L2DATA"):
            m.d.comb += [kv_bits[:wb].eq(l2d.data[:wb]), kvp.engine.eq(l2_eng),
                         kvp.kv.last.eq(l2_lastt & (word == two_dk - 1)),
                         self.kv.valid.eq(l2_data.valid & l2_hit),
                         l2_data.ready.eq(~l2_hit | self.kv.ready)]
            with m.If(l2_data.valid & l2_data.ready):
                with m.If(l2d.err):
                    _flag_err(self, m, slot)
                m.d.sync += word.eq(word + 1)
                with m.If(word == two_dk - 1):
                    m.d.sync += [word.eq(0), head.eq(head + 1)]
                    with m.If(head == H - 1):
                        m.d.sync += [head.eq(0), tok.eq(tok + 1)]
                with m.If(l2d.last):
                    m.d.comb += ready.ready.eq(1)
                    m.d.sync += next_block.eq(next_block + 1)
                    m.next = "NEXT"
        with m.State("HBM"):
            m.d.comb += [kv_bits[:wb].eq(rdd.payload.data[:wb]),
                         kvp.engine.eq(routes.r_data[:eb]),
                         kvp.kv.last.eq(routes.r_data[eb] & rdd.payload.last),
                         self.kv.valid.eq(rdd.valid), rdd.ready.eq(self.kv.ready)]
            with m.If(rdd.valid & self.kv.ready):
                with m.If(rdd.payload.err):
                    _flag_err(self, m, slot)
                with m.If(rdd.payload.last):
                    m.d.comb += routes.r_en.eq(1)
            done_walk = Signal()
            m.d.comb += done_walk.eq(~walking & ~routes.r_rdy)
            with m.If(done_walk):
                with m.If(use_entry):       # a bypass entry: popped once read
                    m.d.comb += ready.ready.eq(1)
                    m.d.sync += next_block.eq(next_block + 1)
                m.next = "NEXT"
        with m.State("NEXT"):
            with m.If(blk == last_blk):
                m.d.sync += pc.eq(0)
                with m.If(taken == total):
                    m.d.sync += unit_open.eq(0)
                m.next = "COLLECT"
            with m.Else():
                m.d.sync += blk.eq(blk + 1)
                m.next = "BLOCK"
