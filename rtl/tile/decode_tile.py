"""The synthesizable decode tile: step sequencer -> cached attention path (CDU, L2 fill engine,
new-token writer, unit streamer, routed TE array, split-K combine, output buffer).

Synthesizable only: the HBM and the L2 data array stay outside (their ports are the tile's
ports); the behavioural models of ``rtl/tile/behavioural/`` are for simulation tops.
"""

from __future__ import annotations

from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import Out

from tricut.rtl.cdu.checked import CheckedComponent

from .cached_attention_tile import CachedAttentionTile
from .sequencer import StepSequencer

__all__ = ["DecodeTile"]

#: the cached tile's ports the sequencer drives (not ports of the decode tile)
_INTERNAL = ("job", "step")


class DecodeTile(CheckedComponent):
    """:class:`~.sequencer.StepSequencer` in front of
    :class:`~.cached_attention_tile.CachedAttentionTile`: the sequencer's ``job`` and ``step``
    streams drive the tile's ``job`` and ``step``.

    Parameters: those of :class:`~.cached_attention_tile.CachedAttentionTile` (``max_slots``
    is also the sequencer's round buffer).

    Ports: the sequencer's ``round`` and ``descriptor`` (in), ``seq_busy`` and ``bad_desc``
    (out, the sequencer's ``busy`` and ``bad_desc``), and every port of the cached tile but
    ``job`` and ``step``, under the same name (``q_write``, ``config``, ``layer``,
    ``newkv_write``, ``go``, ``done``, ``out_addr``/``out_data``, ``hbm_req``/``hbm_resp``,
    ``hbm_write``, ``l2_read``/``l2_data``/``l2_write``, ``tensor_scale``, ``err``,
    ``misorder``, ``te_status``, ``cdu_counters``, ``reg_addr``/``reg_data``, ``cdu_idle``).
    """

    @staticmethod
    def _check(engines, head_dim, G, lanes, kv_dtype, num_layers, num_kv_heads, split_tokens,
               widths, slot_bits, max_ctx, num_requests, max_beats, max_outstanding,
               scale_bits, cdu, max_slots):
        w = CachedAttentionTile.check(engines, head_dim, G, lanes, kv_dtype, num_layers,
                                      num_kv_heads, split_tokens, widths, slot_bits, max_ctx,
                                      num_requests, max_beats, max_outstanding, scale_bits, cdu,
                                      max_slots)
        StepSequencer.check(num_layers, num_kv_heads, max_slots, split_tokens, widths, slot_bits)
        return w

    def __init__(self, engines=1, head_dim=64, G=2, lanes=16, kv_dtype="bf16", num_layers=2,
                 num_kv_heads=2, split_tokens=0, widths=None, slot_bits=2, max_ctx=64,
                 num_requests=4, max_beats=16, max_outstanding=4, scale_bits=None, cdu=None,
                 max_slots=4):
        self.tile = t = CachedAttentionTile(engines, head_dim, G, lanes, kv_dtype, num_layers,
                                            num_kv_heads, split_tokens, widths, slot_bits,
                                            max_ctx, num_requests, max_beats, max_outstanding,
                                            scale_bits, cdu, max_slots)
        self.w = t.w
        self.seq = s = StepSequencer(num_layers, num_kv_heads, max_slots, split_tokens, t.w,
                                     slot_bits)
        members = {"round": s.signature.members["round"],
                   "descriptor": s.signature.members["descriptor"],
                   "seq_busy": Out(1), "bad_desc": Out(1)}
        members.update((name, member) for name, member in t.signature.members.items()
                       if name not in _INTERNAL)
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        m.submodules.seq = s = self.seq
        m.submodules.tile = t = self.tile
        wiring.connect(m, s.job, t.job)
        wiring.connect(m, s.step, t.step)
        wiring.connect(m, wiring.flipped(self.round), s.round)
        wiring.connect(m, wiring.flipped(self.descriptor), s.descriptor)
        m.d.comb += [self.seq_busy.eq(s.busy), self.bad_desc.eq(s.bad_desc)]
        for name, member in t.signature.members.items():
            if name in _INTERNAL:
                continue
            outer, inner = getattr(self, name), getattr(t, name)
            if member.is_signature:
                if member.flow == wiring.In:
                    wiring.connect(m, wiring.flipped(outer), inner)
                else:
                    wiring.connect(m, inner, wiring.flipped(outer))
            elif member.flow == wiring.In:
                m.d.comb += inner.eq(outer)
            else:
                m.d.comb += outer.eq(inner)
        return m
