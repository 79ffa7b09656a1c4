"""The CDU's data movers of the decode tile's K/V path: the L2 fill engine
(:class:`L2Filler`: the CDU's ``hbm_req`` -> HBM block reads -> L2 frame writes -> the CDU's
``hbm_resp``), the new-token writer (:class:`NewTokenWriter`: the CDU's W decisions -> the new
token's K/V into HBM and, on a write hit or allocation, into its L2 frame) and the priority
merge of their L2 write ports (:class:`L2WriteArbiter`).

**L2 frame layout.** The L2 data array holds ``frames = sets * ways`` frames, frame
``set * ways + way`` with ``set = (block + 713*layer + 949*req) mod sets`` (``models/cdu.py``
``set_index``; ``sets`` a power of 2, as in the CDU RTL). A frame holds one 16-token KV block
of every kv head, **token-major**: beat ``(t*H + h)*2*Dk + w`` is word ``w`` (``Dk`` K words,
then ``Dk`` V words) of token ``t`` of the block, kv head ``h`` (:func:`frame_beat`);
``block_beats = 16 * H * 2*Dk``.

Docs: docs/tile/l2-fill.md, section "L2 fill engine and new-token writer".
"""

from __future__ import annotations

from amaranth.hdl import Cat, Module, Mux, Signal, unsigned
from amaranth.lib import stream, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from tricut.models.cdu import KV_BLOCK_TOKENS, LAYER_STRIDE, REQ_STRIDE
from tricut.rtl.cdu.checked import CheckedComponent
from tricut.rtl.cdu import layouts as cdu_layouts
from tricut.rtl.cdu.layouts import KIND, RESULT, WAY_BITS, Widths, seq_bits

from .attention_layouts import (hbm_req_layout, hbm_resp_layout, hbm_write_layout,
                                index_bits, kv_data_bits, kv_image_words, kv_region_words,
                                l2_write_layout, newkv_write_layout)
from .block_reader import HbmBlockReader, check_streamer_params
from .sequencer_layouts import head_bits

__all__ = ["L2Filler", "NewTokenWriter", "L2WriteArbiter", "frame_of", "frame_value",
           "frame_beat", "block_beats", "check_fill_params", "MAX_WAYS", "MAX_SETS"]

MAX_WAYS = 1 << WAY_BITS
MAX_SETS = 1024


def block_beats(num_kv_heads, head_dim, lanes):
    """Beats of one L2 frame: ``16 * H * 2*Dk``."""
    return KV_BLOCK_TOKENS * num_kv_heads * 2 * (head_dim // lanes)


def frame_of(req, layer, block, way, sets, ways):
    """The L2 frame of ``(req, layer, block)`` in way ``way`` (Python)."""
    return ((block + LAYER_STRIDE * layer + REQ_STRIDE * req) % sets) * ways + way


def frame_beat(t, h, w, num_kv_heads, head_dim, lanes):
    """The frame beat of word ``w`` of token ``t`` (in its block) of kv head ``h`` (Python)."""
    return (t * num_kv_heads + h) * 2 * (head_dim // lanes) + w


def frame_value(req, layer, block, way, sets, ways, frame_bits):
    """:func:`frame_of` as an Amaranth value (``sets`` a power of 2: the mod is a mask)."""
    sb = (sets - 1).bit_length()
    if sb == 0:
        return way[:frame_bits]
    s = (block + LAYER_STRIDE * layer + REQ_STRIDE * req)[:sb]
    return (s * ways + way)[:frame_bits]


def _need(name, v, lo, hi):
    if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
        raise ValueError(f"{name} must be an integer in {lo}..{hi}, got {v!r}")


def check_fill_params(head_dim, lanes, kv_dtype, num_layers, num_kv_heads, max_ctx,
                      num_requests, sets, ways, widths, max_beats=16, max_outstanding=4):
    """The checks shared by :class:`L2Filler` and :class:`NewTokenWriter`: those of the KV
    streamer (KV image, widths), ``max_ctx`` a multiple of 16, ``sets`` a power of 2 in
    1..1024, ``ways`` 1..16; one ``ValueError`` naming the first bad parameter. Returns the
    ``Widths``."""
    w = check_streamer_params(head_dim, 1, lanes, kv_dtype, num_layers, num_kv_heads, 0, widths,
                              1, max_ctx, num_requests, max_beats, max_outstanding, None)
    if max_ctx % KV_BLOCK_TOKENS:
        raise ValueError(f"max_ctx must be a multiple of {KV_BLOCK_TOKENS} (whole KV blocks: "
                         f"an L2 frame holds a whole block), got {max_ctx!r}")
    if not isinstance(sets, int) or isinstance(sets, bool) or not 1 <= sets <= MAX_SETS \
            or sets & (sets - 1):
        raise ValueError(f"sets must be a power of 2 in 1..{MAX_SETS}, got {sets!r}")
    _need("ways", ways, 1, MAX_WAYS)
    return w


class _FillGeometry:
    """Parameters and derived sizes shared by the filler and the writer."""

    def _geometry(self, w, head_dim, lanes, kv_dtype, num_layers, num_kv_heads, max_ctx,
                  num_requests, sets, ways):
        self.w = w
        self.head_dim, self.lanes, self.kv_dtype = head_dim, lanes, kv_dtype
        self.L, self.H, self.max_ctx, self.num_requests = (num_layers, num_kv_heads, max_ctx,
                                                           num_requests)
        self.sets, self.ways, self.frames = sets, ways, sets * ways
        self.dk = head_dim // lanes
        self.two_dk = 2 * self.dk
        self.block_beats = block_beats(num_kv_heads, head_dim, lanes)
        self.region = kv_region_words(max_ctx, head_dim, lanes)
        self.depth = kv_image_words(num_requests, num_layers, num_kv_heads, max_ctx, head_dim,
                                    lanes)
        self.addr_bits = index_bits(self.depth)
        self.data_bits = kv_data_bits(lanes, kv_dtype)
        self.frame_bits = index_bits(self.frames)
        self.hb = head_bits(num_kv_heads)

    def _l2_write_sig(self):
        return stream.Signature(l2_write_layout(self.frames, self.block_beats, self.data_bits))


class L2Filler(_FillGeometry, CheckedComponent):
    """L2 fill engine: answers the CDU's HBM block reads by reading the block from HBM and
    writing it into its L2 frame.

    Parameters
    ----------
    head_dim, lanes, kv_dtype, num_layers, num_kv_heads, max_ctx, num_requests, widths
        The KV image in HBM (:mod:`.attention_layouts`) and the CDU ``Widths``, as for the KV
        streamer; ``max_ctx`` a multiple of 16.
    sets, ways
        The CDU's geometry (``sets`` a power of 2 in 1..1024, ``ways`` 1..16).
    max_beats, max_outstanding
        The own :class:`~.block_reader.HbmBlockReader`'s HBM burst length and bursts in flight
        (reorder-buffer slots; HBM ``id`` width ``ceil(log2 max_outstanding)``).
    depth : int, 1..64
        ``hbm_req`` beats accepted and not yet answered (the order queue).

    Ports (``amaranth.lib.stream``; an output's valid never waits for its ready):

    * ``hbm_req`` (in): the CDU's ``hbm_req`` (:func:`tricut.rtl.cdu.layouts.hbm_req_layout`:
      ``id``, ``req``, ``layer``, ``block``, ``retry``, ``way``, ``alloc``); ready while the
      order queue has room and the previous fill's H block reads are issued.
    * ``hbm_resp`` (out): the CDU's ``hbm_resp`` (``id``, ``err``), one per ``hbm_req`` beat,
      in ``hbm_req`` order: ``alloc = 1``: after the block's last word is written into L2,
      ``err`` = OR of its words' HBM ``err``; ``alloc = 0``: nothing read or written,
      ``err = 0``. ``retry`` is not used.
    * ``l2_write`` (out): ``frame``, ``beat``, ``data`` (the L2 data array's ``write``).
    * ``rd_hbm_req`` (out), ``rd_hbm_resp`` (in): the HBM model's ``req`` and ``resp``
      (through the block reader).
    * ``idle`` (out): no fill queued or in flight (the order queue is empty).

    Fill of ``(req, layer, block)`` into frame ``frame_of(req, layer, block, way)``: ``H``
    block reads (kv head 0..H-1, tokens 0..15 of the block) are issued to the block reader as
    soon as the beat is taken, so later fills' HBM reads overlap the current fill's L2 writes;
    the reader answers in order, and each word goes to frame beat ``(t*H + h)*2*Dk + w``.
    Fills complete (last L2 word, then ``hbm_resp``) strictly in ``hbm_req`` order.
    """

    @staticmethod
    def _check(head_dim, lanes, kv_dtype, num_layers, num_kv_heads, max_ctx, num_requests,
               sets, ways, widths, max_beats, max_outstanding, depth):
        w = check_fill_params(head_dim, lanes, kv_dtype, num_layers, num_kv_heads, max_ctx,
                              num_requests, sets, ways, widths, max_beats, max_outstanding)
        _need("depth", depth, 1, 64)
        return w

    def __init__(self, head_dim=64, lanes=16, kv_dtype="bf16", num_layers=2, num_kv_heads=2,
                 max_ctx=64, num_requests=4, sets=4, ways=2, widths=None, max_beats=16,
                 max_outstanding=4, depth=4):
        w = widths or Widths()
        self._geometry(w, head_dim, lanes, kv_dtype, num_layers, num_kv_heads, max_ctx,
                       num_requests, sets, ways)
        self.max_beats, self.max_outstanding, self.queue_depth = (max_beats, max_outstanding,
                                                                  depth)
        self.reader = rd = HbmBlockReader(w, num_layers, num_kv_heads, max_ctx, num_requests,
                                          head_dim, lanes, kv_dtype, max_beats, max_outstanding)
        self.id_bits = rd.id_bits
        super().__init__({
            "hbm_req": In(stream.Signature(cdu_layouts.hbm_req_layout(w))),
            "hbm_resp": Out(stream.Signature(cdu_layouts.hbm_resp_layout(w))),
            "l2_write": Out(self._l2_write_sig()),
            "rd_hbm_req": Out(stream.Signature(hbm_req_layout(rd.id_bits, rd.addr_bits,
                                                              max_beats))),
            "rd_hbm_resp": In(stream.Signature(hbm_resp_layout(rd.id_bits, rd.data_bits))),
            "idle": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        H, two_dk, w = self.H, self.two_dk, self.w
        m.submodules.reader = rd = self.reader
        wiring.connect(m, wiring.flipped(self.rd_hbm_req), rd.hbm_req)
        wiring.connect(m, rd.hbm_resp, wiring.flipped(self.rd_hbm_resp))

        # ------------------------------------------------ order queue: (id, alloc, frame)
        fb = self.frame_bits
        m.submodules.queue = q = SyncFIFO(width=w.id + 1 + fb, depth=self.queue_depth)
        r = self.hbm_req.payload
        issuing = Signal()                  # the H block reads of the newest fill are issued
        ireq, ilayer = Signal(w.req), Signal(w.layer)
        iblock, ih = Signal(w.block), Signal(range(H))
        take = Signal()
        m.d.comb += [self.hbm_req.ready.eq(~issuing & q.w_rdy),
                     take.eq(self.hbm_req.valid & self.hbm_req.ready),
                     q.w_en.eq(take),
                     q.w_data.eq(Cat(r.id, r.alloc, frame_value(r.req, r.layer, r.block, r.way,
                                                                 self.sets, self.ways, fb)))]
        with m.If(take & r.alloc):
            m.d.sync += [issuing.eq(1), ireq.eq(r.req), ilayer.eq(r.layer), iblock.eq(r.block),
                         ih.eq(0)]
        b = rd.rd_req.payload
        m.d.comb += [rd.rd_req.valid.eq(issuing), b.request.eq(ireq), b.layer.eq(ilayer),
                     b.kv_head.eq(ih), b.block.eq(iblock), b.t0.eq(0),
                     b.ntok.eq(KV_BLOCK_TOKENS)]
        with m.If(rd.rd_req.valid & rd.rd_req.ready):
            m.d.sync += ih.eq(ih + 1)
            with m.If(ih == H - 1):
                m.d.sync += issuing.eq(0)
        m.d.comb += self.idle.eq(q.level == 0)

        # ------------------------------------------------ in-order drain into L2
        hid = q.r_data[:w.id]
        halloc = q.r_data[w.id]
        hframe = q.r_data[w.id + 1:]
        dt = Signal(4)                      # token of the block
        dh = Signal(range(H))               # kv head (block read) being drained
        dw = Signal(range(two_dk))          # word of the token
        err = Signal()                      # OR of the fill's words' err so far
        rv, rid, rerr = Signal(), Signal(w.id), Signal()    # the hbm_resp register
        m.d.comb += [self.hbm_resp.valid.eq(rv), self.hbm_resp.payload.id.eq(rid),
                     self.hbm_resp.payload.err.eq(rerr)]
        free = Signal()                     # the resp register takes a beat this cycle
        m.d.comb += free.eq(~rv | self.hbm_resp.ready)
        with m.If(self.hbm_resp.valid & self.hbm_resp.ready):
            m.d.sync += rv.eq(0)
        last = Signal()
        m.d.comb += last.eq((dt == KV_BLOCK_TOKENS - 1) & (dh == H - 1) & (dw == two_dk - 1))
        d = rd.rd_data.payload
        o = self.l2_write.payload
        beat = (dt * H + dh) * two_dk + dw
        m.d.comb += [o.frame.eq(hframe), o.beat.eq(beat[:len(o.beat)]), o.data.eq(d.data)]
        with m.If(q.r_rdy & ~halloc):
            with m.If(free):                # no read: answer at once (in order)
                m.d.comb += q.r_en.eq(1)
                m.d.sync += [rv.eq(1), rid.eq(hid), rerr.eq(0)]
        with m.Elif(q.r_rdy):
            # the last word waits for an empty resp register (valid not from a ready)
            m.d.comb += [self.l2_write.valid.eq(rd.rd_data.valid & (~last | ~rv)),
                         rd.rd_data.ready.eq(self.l2_write.ready & (~last | ~rv))]
            with m.If(rd.rd_data.valid & rd.rd_data.ready):
                m.d.sync += [dw.eq(dw + 1), err.eq(err | d.err)]
                with m.If(dw == two_dk - 1):
                    m.d.sync += [dw.eq(0), dt.eq(dt + 1)]
                    with m.If(dt == KV_BLOCK_TOKENS - 1):
                        m.d.sync += dh.eq(dh + 1)
                        with m.If(dh == H - 1):
                            m.d.sync += dh.eq(0)
                with m.If(last):
                    m.d.comb += q.r_en.eq(1)
                    m.d.sync += [rv.eq(1), rid.eq(hid), rerr.eq(err | d.err), err.eq(0)]
        return m


class NewTokenWriter(_FillGeometry, CheckedComponent):
    """New-token writer: writes each W decision's new K/V into HBM and, on a write hit or
    allocation, into its L2 frame.

    Parameters: as :class:`L2Filler` (without the reader's and queue's).

    Ports:

    * ``newkv_write`` (in, always ready): ``request``, ``kv_head``, ``beat`` (0..2*Dk-1),
      ``data``, ``pos`` (:func:`~.attention_layouts.newkv_write_layout`): word ``beat`` of
      the request's new token for that kv head into the new-K/V buffer (``num_requests * H *
      2*Dk`` words), and the request's ``pos`` (the new token's index, ``seq_len - 1``: the
      last one written is kept); seen from the next cycle.
    * ``txn`` (in): the CDU's ``txn`` (:func:`tricut.rtl.cdu.layouts.txn_layout`: ``kind``,
      ``req``, ``layer``, ``block``, ``result``, ``way``). A txn of another kind than W is
      taken at once. A W is taken in the cycle its last word is written (so the CDU decides
      nothing after it before the write is complete):

      1. it waits until ``layer_open`` and ``open_layer == txn.layer`` (the tile's new K/V of
         that layer is in the buffer), then latches the request's ``pos``;
      2. ``hbm_write``: the ``H*2*Dk`` words, word ``w`` of kv head ``h`` to
         ``kv_addr(req, layer, h, pos) + w``, one per cycle (h outer, w inner);
      3. ``result`` ``w_hit`` or ``w_alloc`` only: it waits until ``fills_idle`` (the filler
         has no fill queued or in flight), then writes the same words to ``l2_write`` frame
         ``frame_of(req, layer, block, way)``, beat ``((pos % 16)*H + h)*2*Dk + w``, one per
         cycle. Any other result (``w_bypass``) writes HBM only.

      HBM is written before L2: a fill that starts after the idle check reads the new token
      from HBM, so whatever order the two land in L2 the frame ends with it.
    * ``layer_open`` (in), ``open_layer`` (in, layer bits), ``fills_idle`` (in).
    * ``hbm_write`` (out): ``addr``, ``data`` (the HBM model's ``write``).
    * ``l2_write`` (out): ``frame``, ``beat``, ``data``.
    * ``busy`` (out): a W is being written; ``bad_pos`` (out, sticky until ``clear``): a W
      whose ``block`` was not ``pos // 16`` (the words still go to ``pos``'s address in HBM
      and to the txn's frame).
    """

    @staticmethod
    def _check(head_dim, lanes, kv_dtype, num_layers, num_kv_heads, max_ctx, num_requests,
               sets, ways, widths):
        return check_fill_params(head_dim, lanes, kv_dtype, num_layers, num_kv_heads, max_ctx,
                                 num_requests, sets, ways, widths)

    def __init__(self, head_dim=64, lanes=16, kv_dtype="bf16", num_layers=2, num_kv_heads=2,
                 max_ctx=64, num_requests=4, sets=4, ways=2, widths=None):
        w = widths or Widths()
        self._geometry(w, head_dim, lanes, kv_dtype, num_layers, num_kv_heads, max_ctx,
                       num_requests, sets, ways)
        self.pos_bits = seq_bits(w)
        super().__init__({
            "newkv_write": In(stream.Signature(newkv_write_layout(
                w.req, self.hb, index_bits(self.two_dk), self.data_bits, self.pos_bits))),
            "txn": In(stream.Signature(cdu_layouts.txn_layout(w))),
            "layer_open": In(1),
            "open_layer": In(w.layer),
            "fills_idle": In(1),
            "hbm_write": Out(stream.Signature(hbm_write_layout(self.addr_bits,
                                                               self.data_bits))),
            "l2_write": Out(self._l2_write_sig()),
            "busy": Out(1),
            "bad_pos": Out(1),
            "clear": In(1),
        })

    def elaborate(self, platform):
        m = Module()
        H, two_dk = self.H, self.two_dk
        # ------------------------------------------------ new-K/V buffer and pos per request
        m.submodules.buf = buf = Memory(shape=unsigned(self.data_bits),
                                        depth=self.num_requests * H * two_dk, init=[])
        m.submodules.posmem = posmem = Memory(shape=unsigned(self.pos_bits),
                                              depth=self.num_requests, init=[])
        bw, br = buf.write_port(), buf.read_port(domain="comb")
        pw, pr = posmem.write_port(), posmem.read_port(domain="comb")
        nw = self.newkv_write.payload
        m.d.comb += [self.newkv_write.ready.eq(1),
                     bw.en.eq(self.newkv_write.valid),
                     bw.addr.eq((nw.request * H + nw.kv_head) * two_dk + nw.beat),
                     bw.data.eq(nw.data),
                     pw.en.eq(self.newkv_write.valid), pw.addr.eq(nw.request),
                     pw.data.eq(nw.pos)]
        # ------------------------------------------------ the W being written
        t = self.txn.payload
        pos = Signal(self.pos_bits)
        h = Signal(range(H))
        wd = Signal(range(two_dk))
        end = Signal()
        m.d.comb += [end.eq((h == H - 1) & (wd == two_dk - 1)),
                     pr.addr.eq(t.req),
                     br.addr.eq((t.req * H + h) * two_dk + wd)]
        region = (t.req * self.L + t.layer) * H + h
        hw = self.hbm_write.payload
        m.d.comb += [hw.addr.eq((region * self.region + pos * two_dk + wd)[:self.addr_bits]),
                     hw.data.eq(br.data)]
        lw = self.l2_write.payload
        m.d.comb += [lw.frame.eq(frame_value(t.req, t.layer, t.block, t.way, self.sets,
                                              self.ways, self.frame_bits)),
                     lw.beat.eq(((pos[:4] * H + h) * two_dk + wd)[:len(lw.beat)]),
                     lw.data.eq(br.data)]
        to_l2 = (t.result == RESULT["w_hit"]) | (t.result == RESULT["w_alloc"])
        with m.If(self.clear):
            m.d.sync += self.bad_pos.eq(0)

        def advance():
            m.d.sync += wd.eq(wd + 1)
            with m.If(wd == two_dk - 1):
                m.d.sync += [wd.eq(0), h.eq(h + 1)]
                with m.If(h == H - 1):
                    m.d.sync += h.eq(0)

        m.d.comb += self.busy.eq(1)
        with m.FSM(name="writer"):
            with m.State("IDLE"):
                m.d.comb += self.busy.eq(0)
                with m.If(self.txn.valid & (t.kind != KIND["W"])):
                    m.d.comb += self.txn.ready.eq(1)
                with m.Elif(self.txn.valid & self.layer_open & (self.open_layer == t.layer)):
                    m.d.sync += [pos.eq(pr.data), h.eq(0), wd.eq(0)]
                    with m.If(t.block != pr.data[4:]):
                        m.d.sync += self.bad_pos.eq(1)
                    m.next = "HBM"
            with m.State("HBM"):
                m.d.comb += self.hbm_write.valid.eq(1)
                with m.If(self.hbm_write.ready):
                    advance()
                    with m.If(end):
                        with m.If(to_l2):
                            m.next = "WAIT"
                        with m.Else():
                            m.d.comb += self.txn.ready.eq(1)
                            m.next = "IDLE"
            with m.State("WAIT"):
                with m.If(self.fills_idle):
                    m.next = "L2"
            with m.State("L2"):
                m.d.comb += self.l2_write.valid.eq(1)
                with m.If(self.l2_write.ready):
                    advance()
                    with m.If(end):
                        m.d.comb += self.txn.ready.eq(1)
                        m.next = "IDLE"
        return m


class L2WriteArbiter(wiring.Component):
    """Merges two ``l2_write`` streams onto the L2 data array's one write port, ``hi`` (the
    new-token writer) before ``lo`` (the filler): ``out`` carries ``hi`` whenever ``hi`` is
    valid, else ``lo``; ``lo.ready = out.ready & ~hi.valid``. Combinational (no register); the
    writer's L2 words are back to back, so a fill waits at most ``H*2*Dk`` cycles per W."""

    def __init__(self, frames, block_beats, data_bits):
        sig = stream.Signature(l2_write_layout(frames, block_beats, data_bits))
        super().__init__({"hi": In(sig), "lo": In(sig), "out": Out(sig)})

    def elaborate(self, platform):
        m = Module()
        hi, lo, out = self.hi, self.lo, self.out
        m.d.comb += [out.valid.eq(hi.valid | lo.valid),
                     out.payload.as_value().eq(Mux(hi.valid, hi.payload.as_value(),
                                                   lo.payload.as_value())),
                     hi.ready.eq(out.ready), lo.ready.eq(out.ready & ~hi.valid)]
        return m
