"""Block reads of the decode tile's K/V from HBM (:class:`HbmBlockReader`, one in the unit
streamer, one in the L2 fill engine) and the parameter checks of the attention path."""

from __future__ import annotations

import math

import numpy as np
from amaranth.hdl import Cat, Module, Mux, Signal, unsigned
from amaranth.lib import stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from tricut.models.cdu import KV_BLOCK_TOKENS
from tricut.models.te import HEAD_DIMS, KV_CODE_BITS, MAX_G, f2b
from tricut.models.tile import TILE_LANES as LANES
from tricut.rtl.cdu.checked import CheckedComponent
from tricut.rtl.cdu.layouts import Widths, seq_bits
from tricut.rtl.te.layouts import kv_layout, q_layout

from .array_layouts import array_job_layout
from .attention_layouts import (block_data_layout, block_req_layout, count_bits,
                                hbm_req_layout, hbm_resp_layout, index_bits, kv_data_bits,
                                kv_image_words, kv_region_words, kv_word_bits, q_write_layout,
                                tag_layout)
from .sequencer_layouts import attn_job_layout, head_bits

__all__ = ["HbmBlockReader", "default_scale_bits", "check_streamer_params", "combine_parts",
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
    """The parameter checks shared by the unit streamer and the L2 fill engine: one
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

    Built by the unit streamer and the L2 fill engine (whose checks,
    :func:`check_streamer_params`, cover its parameters): ``w`` the CDU ``Widths``, the rest as
    there.
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
        left = Signal(range(KV_BLOCK_TOKENS * two_dk + 1))     # words of the block not yet issued
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
