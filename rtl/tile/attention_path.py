"""The decode tile's attention path: step sequencer beats -> CDU (front end, intake, core) ->
L2 fill engine and new-token writer; attention jobs + the CDU's ``ready`` entries -> unit
streamer -> TE array (routed K/V) (+ split-K combine) -> output buffer, one layer at a time.
Without the CDU the unit streamer reads every block from HBM."""

from __future__ import annotations

from amaranth.hdl import Cat, Module, Mux, Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from tricut.models.tile import TILE_ENGINES
from tricut.models.tile_timing import CDU_FE_ENTRIES
from tricut.rtl.cdu.checked import CheckedComponent
from tricut.rtl.cdu.layouts import Widths, fe_config_layout, step_layout
from tricut.rtl.cdu.top import CDU

from .attention_layouts import (hbm_req_layout, hbm_resp_layout, hbm_write_layout, index_bits,
                                l2_data_layout, l2_read_layout, l2_write_layout, q_write_layout,
                                tag_layout)
from .combine import CombineUnit
from .block_reader import combine_parts
from .l2_fill import L2Filler, L2WriteArbiter, NewTokenWriter
from .sequencer_layouts import attn_job_layout
from .te_array import TEArray
from .unit_streamer import UnitStreamer

__all__ = ["AttentionPath", "CDU_DEFAULTS", "CDU_FE_ENTRIES", "CDU_FE_UNITS"]

#: the CDU parameters of the attention path when none are given
CDU_DEFAULTS = dict(sets=4, ways=2, mshrs=4, rq_depth=4, max_retries=2)
#: the CDU front end's unit FIFO depth (its scatter entries per (slot, layer),
#: ``CDU_FE_ENTRIES``, are the timing model's: the golden ``FrontEnd`` takes the same)
CDU_FE_UNITS = 16


class AttentionPath(CheckedComponent):
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
        The KV image (``max_ctx`` a multiple of 16) and the HBM port, as for
        :class:`~.unit_streamer.UnitStreamer`.
    cdu
        A dict of :class:`~tricut.rtl.cdu.top.CDU` parameters (``sets``, ``ways``, ``mshrs``,
        ``rq_depth``, ``max_retries``; each missing one from :data:`CDU_DEFAULTS`, by default
        all of them); ``None``: no CDU, see below.
    max_slots
        The CDU front end's slot table.
    engine
        The TE array's engine design, :data:`tricut.models.tile.TILE_ENGINES` (the shipped
        ``"pipelined"`` by default).

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
      completions);
    * ``misorder`` (out): sticky, a ``ready`` entry or a job was not the one expected;

    and with the CDU:

    * ``step`` (in): the step sequencer's ``step`` beats, to the CDU front end;
    * ``config`` (in): the CDU front end's configuration (policy, pattern ``full``, distance);
    * ``layer`` (in): the layer a ``go`` starts (sampled at ``go``): the new-token writer writes
      that layer's W operations only;
    * ``newkv_write`` (in, always ready): the new token's K/V of a request, ``2*Dk`` words per
      KV head, and its position;
    * ``hbm_write`` (out): the new tokens' words to HBM (write-through);
    * ``l2_read`` (out), ``l2_data`` (in), ``l2_write`` (out): the L2 data array's ports;
    * ``cdu_counters`` (out), ``reg_addr``/``reg_data``: the CDU's counters;
    * ``cdu_idle`` (out).

    The HBM port is shared by the fill engine's and the streamer's block readers: HBM ``id`` =
    the reader's id with the reader's number (0 fill, 1 streamer) on top; the fill engine
    has priority.

    Without the CDU (``cdu=None``) the same unit streamer reads every block from HBM
    (``UnitStreamer(l2=False)``) and the tile has none of the CDU's, the new-token writer's and
    the L2's ports (``step``, ``config``, ``layer``, ``newkv_write``, ``hbm_write``, ``l2_*``,
    ``cdu_counters``, ``reg_*``, ``cdu_idle``): the new tokens' K/V are in HBM before ``go``,
    written by whatever produced them (the host port of a simulation top). The HBM ``id`` is
    the streamer's reader's.

    The layer gate: after ``go`` the tile takes jobs while they carry one layer (the layer of
    the first job taken); it stops at a job of another layer (left on the stream) or after a
    job with ``last``. ``done`` rises when that layer's every result is written.
    """

    @staticmethod
    def _check(engines, head_dim, G, lanes, kv_dtype, num_layers, num_kv_heads, split_tokens,
               widths, slot_bits, max_ctx, num_requests, max_beats, max_outstanding,
               scale_bits, cdu, max_slots, engine):
        from tricut.rtl.cdu.core import check_params
        if not isinstance(engine, str) or engine not in TILE_ENGINES:
            raise ValueError(f"engine must be one of {TILE_ENGINES}, got {engine!r}")
        c = dict(CDU_DEFAULTS)
        if cdu is not None:
            if not isinstance(cdu, dict) or set(cdu) - set(CDU_DEFAULTS):
                raise ValueError(f"cdu must be None or a dict with keys from "
                                 f"{sorted(CDU_DEFAULTS)}, got {cdu!r}")
            c.update(cdu)
        w = UnitStreamer.check(engines, head_dim, G, lanes, kv_dtype, num_layers, num_kv_heads,
                               split_tokens, widths, slot_bits, max_ctx, num_requests,
                               max_beats, max_outstanding, scale_bits, c["sets"], c["ways"],
                               cdu is not None)
        if cdu is not None:
            check_params(c["sets"], c["ways"], c["mshrs"], c["rq_depth"], c["max_retries"], w)
        if not isinstance(max_slots, int) or isinstance(max_slots, bool) or \
                not 1 <= max_slots <= 1 << slot_bits:
            raise ValueError(f"max_slots must be an integer in 1..{1 << slot_bits}, "
                             f"got {max_slots!r}")
        return w

    def __init__(self, engines=1, head_dim=64, G=2, lanes=32, kv_dtype="bf16", num_layers=2,
                 num_kv_heads=2, split_tokens=0, widths=None, slot_bits=2, max_ctx=64,
                 num_requests=4, max_beats=16, max_outstanding=4, scale_bits=None,
                 cdu=CDU_DEFAULTS, max_slots=4, engine="pipelined"):
        self.w = w = widths or Widths()
        self.engine = engine
        c = dict(CDU_DEFAULTS)
        c.update(cdu or {})
        #: the CDU's parameters, ``None`` without the CDU
        self.cdu_params = c if cdu is not None else None
        self.engines, self.split_tokens = engines, split_tokens
        self.streamer = UnitStreamer(engines, head_dim, G, lanes, kv_dtype, num_layers,
                                     num_kv_heads, split_tokens, w, slot_bits, max_ctx,
                                     num_requests, max_beats, max_outstanding, scale_bits,
                                     c["sets"], c["ways"], cdu is not None)
        st = self.streamer
        self.H, self.qbeats, self.lanes = num_kv_heads, st.qbeats, lanes
        self.array = TEArray(engines, head_dim, G, lanes, kv_dtype, st.tag.size, routed_kv=True,
                             engine=engine)
        self.combine = (CombineUnit(head_dim, G, lanes, combine_parts(split_tokens, max_ctx))
                        if split_tokens else None)
        self.out_words = (1 << slot_bits) * num_kv_heads * st.qbeats
        r = st.reader
        self.addr_bits, self.data_bits = r.addr_bits, r.data_bits
        ports = {
            "job": In(stream.Signature(attn_job_layout(w, slot_bits, num_kv_heads,
                                                       split_tokens))),
            "q_write": In(stream.Signature(q_write_layout(slot_bits, st.hb,
                                                          index_bits(st.qbeats), lanes))),
            "go": In(1),
            "done": Out(1),
            "out_addr": In(index_bits(self.out_words)),
            "out_data": Out(32 * lanes),
            "tensor_scale": In(32),
            "err": Out(1),
            "misorder": Out(1),
            "te_status": Out(5),
            "fail_slots": Out(1 << slot_bits),
        }
        if cdu is None:
            self.cdu = None
            self.id_bits = r.id_bits
            ports.update({
                "hbm_req": Out(stream.Signature(hbm_req_layout(r.id_bits, r.addr_bits,
                                                               max_beats))),
                "hbm_resp": In(stream.Signature(hbm_resp_layout(r.id_bits, r.data_bits)))})
        else:
            ports.update(self._cdu_parts(c, w, head_dim, lanes, kv_dtype, num_layers,
                                         num_kv_heads, max_ctx, num_requests, max_beats,
                                         max_outstanding, slot_bits, max_slots))
        super().__init__(ports)

    def _cdu_parts(self, c, w, head_dim, lanes, kv_dtype, num_layers, num_kv_heads, max_ctx,
                   num_requests, max_beats, max_outstanding, slot_bits, max_slots):
        """The CDU, the L2 fill engine, the new-token writer and the L2 write arbiter; their
        ports."""
        st, r = self.streamer, self.streamer.reader
        self.cdu = CDU(c["sets"], c["ways"], c["mshrs"], c["rq_depth"], c["max_retries"], w,
                       slot_bits=slot_bits, max_slots=max_slots, max_layers=num_layers,
                       entries=CDU_FE_ENTRIES, units=CDU_FE_UNITS)
        geo = dict(head_dim=head_dim, lanes=lanes, kv_dtype=kv_dtype, num_layers=num_layers,
                   num_kv_heads=num_kv_heads, max_ctx=max_ctx, num_requests=num_requests,
                   sets=c["sets"], ways=c["ways"], widths=w)
        self.filler = L2Filler(**geo, max_beats=max_beats, max_outstanding=max_outstanding)
        self.writer = NewTokenWriter(**geo)
        self.l2_arbiter = L2WriteArbiter(st.frames, st.block_beats, r.data_bits)
        self.id_bits = r.id_bits + 1
        return {
            "step": In(stream.Signature(step_layout(w, slot_bits))),
            "config": In(fe_config_layout(w)),
            "layer": In(w.layer),
            "newkv_write": In(self.writer.newkv_write.signature.flip()),
            "hbm_req": Out(stream.Signature(hbm_req_layout(self.id_bits, r.addr_bits,
                                                           max_beats))),
            "hbm_resp": In(stream.Signature(hbm_resp_layout(self.id_bits, r.data_bits))),
            "hbm_write": Out(stream.Signature(hbm_write_layout(r.addr_bits, r.data_bits))),
            "l2_read": Out(stream.Signature(l2_read_layout(st.frames, st.block_beats, 1))),
            "l2_data": In(stream.Signature(l2_data_layout(1, r.data_bits))),
            "l2_write": Out(stream.Signature(l2_write_layout(st.frames, st.block_beats,
                                                             r.data_bits))),
            "cdu_counters": Out(self.cdu.counters.shape()),
            "reg_addr": In(5),
            "reg_data": Out(32),
            "cdu_idle": Out(1),
        }

    def elaborate(self, platform):
        m = Module()
        m.submodules.streamer = st = self.streamer
        m.submodules.array = arr = self.array
        m.d.comb += self.misorder.eq(st.misorder)
        if self.cdu is None:
            wiring.connect(m, wiring.flipped(self.hbm_req), st.hbm_req)
            wiring.connect(m, st.hbm_resp, wiring.flipped(self.hbm_resp))
        else:
            self._elaborate_cdu(m, st)
        self._elaborate_attention(m, st, arr)
        return m

    def _elaborate_cdu(self, m, st):
        """The CDU, the fill engine, the new-token writer and the L2 around the streamer."""
        m.submodules.cdu = cdu = self.cdu
        m.submodules.filler = fl = self.filler
        m.submodules.writer = wr = self.writer
        # CDU: steps in, decisions to the writer, fills to the filler, ready to the streamer
        wiring.connect(m, wiring.flipped(self.step), cdu.step)
        m.d.comb += [cdu.demand.valid.eq(0), cdu.config.eq(self.config),
                     self.cdu_counters.eq(cdu.counters), cdu.reg_addr.eq(self.reg_addr),
                     self.reg_data.eq(cdu.reg_data), self.cdu_idle.eq(cdu.idle),
                     cdu.status.ready.eq(1)]
        wiring.connect(m, cdu.txn, wr.txn)
        wiring.connect(m, cdu.hbm_req, fl.hbm_req)
        wiring.connect(m, fl.hbm_resp, cdu.hbm_resp)
        wiring.connect(m, cdu.ready, st.ready)
        # the layer whose new K/V the writer may write: from go to done
        open_layer = Signal.like(self.layer)
        layer_open = Signal()
        with m.If(self.go):
            m.d.sync += [open_layer.eq(self.layer), layer_open.eq(1)]
        with m.Elif(self.done):
            m.d.sync += layer_open.eq(0)
        wiring.connect(m, wiring.flipped(self.newkv_write), wr.newkv_write)
        wiring.connect(m, wr.hbm_write, wiring.flipped(self.hbm_write))
        m.d.comb += [wr.layer_open.eq(layer_open), wr.open_layer.eq(open_layer),
                     wr.fills_idle.eq(fl.idle), wr.clear.eq(self.go)]
        # L2: the filler and the writer write (the writer has priority), the streamer reads
        m.submodules.l2_arbiter = arb = self.l2_arbiter
        wiring.connect(m, wr.l2_write, arb.hi)
        wiring.connect(m, fl.l2_write, arb.lo)
        wiring.connect(m, arb.out, wiring.flipped(self.l2_write))
        wiring.connect(m, st.l2_read, wiring.flipped(self.l2_read))
        wiring.connect(m, wiring.flipped(self.l2_data), st.l2_data)
        self._elaborate_hbm_mux(m, fl, st)

    def _elaborate_hbm_mux(self, m, fl, st):
        """Two block readers on one HBM port: requests by fixed priority (fill engine first),
        responses back by the ``id``'s top bit."""
        q, p = self.hbm_req, self.hbm_resp
        ib = self.id_bits - 1
        fq, sq = fl.rd_hbm_req, st.hbm_req
        with m.If(fq.valid):
            m.d.comb += [q.valid.eq(1), q.payload.id.eq(fq.payload.id),
                         q.payload.addr.eq(fq.payload.addr), q.payload.beats.eq(fq.payload.beats),
                         fq.ready.eq(q.ready)]
        with m.Else():
            m.d.comb += [q.valid.eq(sq.valid), q.payload.id.eq(Cat(sq.payload.id[:ib], 1)),
                         q.payload.addr.eq(sq.payload.addr), q.payload.beats.eq(sq.payload.beats),
                         sq.ready.eq(q.ready)]
        src = p.payload.id[ib]
        for dst, sel in ((fl.rd_hbm_resp, ~src), (st.hbm_resp, src)):
            m.d.comb += [dst.valid.eq(p.valid & sel), dst.payload.id.eq(p.payload.id[:ib]),
                         dst.payload.data.eq(p.payload.data), dst.payload.last.eq(p.payload.last),
                         dst.payload.err.eq(p.payload.err)]
        m.d.comb += p.ready.eq(Mux(src, st.hbm_resp.ready, fl.rd_hbm_resp.ready))

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
