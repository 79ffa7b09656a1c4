"""Attention path of the decode tile: sequencer jobs -> KV streamer -> TE array (+ split-K
combine) -> output buffer, one layer at a time."""

from __future__ import annotations

from amaranth.hdl import Cat, Module, Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from tricut.rtl.cdu.checked import CheckedComponent
from tricut.rtl.cdu.layouts import Widths

from .attention_layouts import (hbm_req_layout, hbm_resp_layout, index_bits, q_write_layout,
                                tag_layout)
from .combine import CombineUnit
from .kv_streamer import KVStreamer, check_streamer_params, combine_parts
from .sequencer_layouts import attn_job_layout
from .te_array import MAX_ENGINES, TEArray

__all__ = ["AttentionTile"]


class AttentionTile(CheckedComponent):
    """The tile's attention path for one layer of a decode step at a time.

    Parameters
    ----------
    engines : int, 1..16
        TE engines of the array.
    head_dim, G, lanes, kv_dtype
        The TE configuration (one K/V format per tile, as for the TE).
    num_layers, num_kv_heads, split_tokens, widths, slot_bits
        As for the step sequencer whose ``job`` stream drives the tile; ``split_tokens > 0``
        adds a split-K :class:`~.combine.CombineUnit`.
    max_ctx, num_requests, max_beats, max_outstanding, scale_bits
        As for :class:`~.kv_streamer.KVStreamer` (the KV image and the HBM port).

    Ports (streams: ``amaranth.lib.stream``, valid never waits for ready):

    * ``job`` (in): the step sequencer's ``job`` stream;
    * ``q_write`` (in, always ready): the Q buffer's write port ``(slot, kv_head, beat,
      data)``, ``G*Dk`` words of ``lanes`` bf16 codes per (slot, kv_head), head-major;
    * ``go`` (in): a one-cycle pulse starting a layer; ``done`` (out): sticky, set when the
      layer's last output word is in the output buffer, cleared by ``go``;
    * ``out_addr`` (in), ``out_data`` (out): the output buffer's read port, word
      ``(slot * H + kv_head) * G*Dk + beat`` (``lanes`` fp32), ``out_data`` valid the cycle
      after ``out_addr``;
    * ``hbm_req`` (out), ``hbm_resp`` (in): to the HBM (the behavioural model's payloads);
    * ``tensor_scale`` (in, 32 b): NVFP4 tensor scale of every job (fp32 bits);
    * ``err`` (out): sticky per layer, an HBM beat came with ``err``; ``te_status`` (out):
      the OR of the layer's TE status words (``STATUS_BITS`` order), cleared by ``go``;
    * ``fail_slots`` (out, one bit per slot): the slots of the layer's jobs that met an HBM
      ``err`` or ended with a TE status flag, cleared by ``go`` (the completion unit's failed
      completions).

    The layer gate: after ``go`` the tile takes jobs while they carry one layer (the layer of
    the first job taken); it stops at a job of another layer (left on the stream) or after a
    job with ``last``. ``done`` rises when that layer's every result is written.
    """

    @staticmethod
    def _check(engines, head_dim, G, lanes, kv_dtype, num_layers, num_kv_heads, split_tokens,
               widths, slot_bits, max_ctx, num_requests, max_beats, max_outstanding,
               scale_bits):
        if not isinstance(engines, int) or isinstance(engines, bool) or \
                not 1 <= engines <= MAX_ENGINES:
            raise ValueError(f"engines must be an integer in 1..{MAX_ENGINES}, got {engines!r}")
        return check_streamer_params(head_dim, G, lanes, kv_dtype, num_layers, num_kv_heads,
                                     split_tokens, widths, slot_bits, max_ctx, num_requests,
                                     max_beats, max_outstanding, scale_bits)

    def __init__(self, engines=1, head_dim=64, G=2, lanes=16, kv_dtype="bf16", num_layers=2,
                 num_kv_heads=2, split_tokens=0, widths=None, slot_bits=2, max_ctx=64,
                 num_requests=4, max_beats=16, max_outstanding=4, scale_bits=None):
        self.w = w = widths or Widths()
        self.engines, self.split_tokens = engines, split_tokens
        self.streamer = KVStreamer(head_dim, G, lanes, kv_dtype, num_layers, num_kv_heads,
                                   split_tokens, w, slot_bits, max_ctx, num_requests, max_beats,
                                   max_outstanding, scale_bits)
        st = self.streamer
        self.H, self.qbeats, self.lanes = num_kv_heads, st.qbeats, lanes
        self.array = TEArray(engines, head_dim, G, lanes, kv_dtype, st.tag.size, engine="serial")
        self.combine = (CombineUnit(head_dim, G, lanes, combine_parts(split_tokens, max_ctx))
                        if split_tokens else None)
        self.out_words = (1 << slot_bits) * num_kv_heads * st.qbeats
        r = st.reader
        super().__init__({
            "job": In(stream.Signature(attn_job_layout(w, slot_bits, num_kv_heads,
                                                       split_tokens))),
            "q_write": In(stream.Signature(q_write_layout(slot_bits, st.hb,
                                                          index_bits(st.qbeats), lanes))),
            "go": In(1),
            "done": Out(1),
            "out_addr": In(index_bits(self.out_words)),
            "out_data": Out(32 * lanes),
            "hbm_req": Out(stream.Signature(hbm_req_layout(r.id_bits, r.addr_bits, max_beats))),
            "hbm_resp": In(stream.Signature(hbm_resp_layout(r.id_bits, r.data_bits))),
            "tensor_scale": In(32),
            "err": Out(1),
            "te_status": Out(5),
            "fail_slots": Out(1 << slot_bits),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.streamer = st = self.streamer
        m.submodules.array = arr = self.array
        wiring.connect(m, wiring.flipped(self.hbm_req), st.hbm_req)
        wiring.connect(m, st.hbm_resp, wiring.flipped(self.hbm_resp))
        self._elaborate_attention(m, st, arr)
        return m

    def _elaborate_attention(self, m, st, arr):
        """The Q buffer's writes, streamer -> TE array, the TE status, the layer gate and the
        output side (the cached tile shares them)."""
        wiring.connect(m, wiring.flipped(self.q_write), st.q_write)
        wiring.connect(m, st.te_job, arr.job)
        wiring.connect(m, st.q, arr.q)
        wiring.connect(m, st.kv, arr.kv)
        m.d.comb += [st.tensor_scale.eq(self.tensor_scale), st.clear.eq(self.go),
                     self.err.eq(st.err), arr.status.ready.eq(1)]
        status_slots = Signal.like(self.fail_slots)
        m.d.comb += self.fail_slots.eq(st.err_slots | status_slots)
        with m.If(self.go):
            m.d.sync += [self.te_status.eq(0), status_slots.eq(0)]
        with m.Elif(arr.status.valid):
            word = arr.status.payload.status.as_value()
            m.d.sync += self.te_status.eq(self.te_status | word)
            with m.If(word.any()):
                slot = arr.status.payload.tag[:st.slot_bits]
                m.d.sync += status_slots.eq(status_slots | (1 << slot))
        pending = self._elaborate_gate(m, st, arr)
        self._elaborate_output(m, arr, pending)

    def _elaborate_gate(self, m, st, arr):
        """The layer gate between ``job`` and the streamer, and ``pending``: results of the
        layer taken and not yet written (+1 at a job with ``final``, -1 per result written;
        the output side drives ``pending_dec``). ``done`` also waits for the streamer and the
        array to be idle, so that the last job's status word is in ``te_status``."""
        j = self.job.payload
        running = Signal()          # between go and the layer's end
        first = Signal()            # no job of the layer taken yet
        layer = Signal.like(j.layer)
        pending = Signal(16)
        dec = Signal(name="pending_dec")
        same = first | (j.layer == layer)
        pass_ = running & same
        m.d.comb += [st.job.payload.as_value().eq(j.as_value()),
                     st.job.valid.eq(self.job.valid & pass_),
                     self.job.ready.eq(st.job.ready & pass_)]
        inc = Signal()
        m.d.comb += inc.eq(self.job.valid & self.job.ready & (j.part == j.parts - 1))
        m.d.sync += pending.eq(pending + inc - dec)
        with m.If(self.job.valid & self.job.ready):
            m.d.sync += [first.eq(0), layer.eq(j.layer)]
            with m.If(j.last):
                m.d.sync += running.eq(0)
        with m.If(running & self.job.valid & ~same):
            m.d.sync += running.eq(0)
        with m.If(~running & (pending == 0) & ~st.busy & ~arr.busy):
            m.d.sync += self.done.eq(1)
        with m.If(self.go):
            m.d.sync += [running.eq(1), first.eq(1), self.done.eq(0)]
        return type("P", (), dict(dec=dec))

    def _elaborate_output(self, m, arr, pending):
        """Output side: a non-split job's ``out`` beats go straight into the output buffer;
        a split part's go to the combine unit (its ``job`` beat = ``parts`` before part 0's
        first beat) whose ``combined`` beats go into the buffer (and have priority on its
        write port: they are never stalled)."""
        m.submodules.obuf = obuf = Memory(shape=unsigned(32 * self.lanes), depth=self.out_words,
                                          init=[])
        wp = obuf.write_port()
        rp = obuf.read_port()
        m.d.comb += [rp.addr.eq(self.out_addr), self.out_data.eq(rp.data)]
        o = arr.out
        tag = data.View(tag_layout(self.streamer.slot_bits, self.streamer.hb,
                                   self.streamer.parts_bits), o.payload.tag)
        split = tag.parts != 1
        addr = self.streamer.qbuf_addr
        dbeat = Signal(range(self.qbeats))          # beat of the direct job being written
        cbeat = Signal(range(self.qbeats))
        c_busy = Signal()
        if self.combine is not None:
            m.submodules.combine = cu = self.combine
            c_sent = Signal()               # the combine job beat of the current split is sent
            c_slot = Signal.like(tag.slot)
            c_head = Signal.like(tag.kv_head)
            m.d.comb += [cu.job.payload.parts.eq(tag.parts),
                         cu.job.valid.eq(o.valid & split & ~c_sent),
                         cu.partial.payload.data.eq(o.payload.data),
                         cu.partial.payload.last.eq(o.payload.last),
                         cu.partial.valid.eq(o.valid & split & c_sent),
                         cu.combined.ready.eq(1), c_busy.eq(cu.combined.valid)]
            with m.If(cu.job.valid & cu.job.ready):
                m.d.sync += [c_sent.eq(1), c_slot.eq(tag.slot), c_head.eq(tag.kv_head)]
            with m.If(cu.partial.valid & cu.partial.ready & o.payload.last & tag.final):
                m.d.sync += c_sent.eq(0)
            with m.If(cu.combined.valid):
                m.d.comb += [wp.en.eq(1), wp.addr.eq(addr(c_slot, c_head, cbeat)),
                             wp.data.eq(cu.combined.payload.data.as_value())]
                m.d.sync += cbeat.eq(cbeat + 1)
                with m.If(cu.combined.payload.last):
                    m.d.sync += cbeat.eq(0)
                    m.d.comb += pending.dec.eq(1)
            m.d.comb += o.ready.eq(Cat(split & c_sent & cu.partial.ready,
                                       ~split & ~c_busy).any())
        else:
            m.d.comb += o.ready.eq(~split)
        with m.If(o.valid & o.ready & ~split):
            m.d.comb += [wp.en.eq(1), wp.addr.eq(addr(tag.slot, tag.kv_head, dbeat)),
                         wp.data.eq(o.payload.data.as_value())]
            m.d.sync += dbeat.eq(dbeat + 1)
            with m.If(o.payload.last):
                m.d.sync += dbeat.eq(0)
                m.d.comb += pending.dec.eq(1)
