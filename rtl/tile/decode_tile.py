"""The synthesizable decode tile: DSU cluster (RV32IM cores, slot arbiter) and its link -> step
sequencer -> cached attention path (CDU, L2 fill engine, new-token writer, unit streamer, routed
TE array, split-K combine, output buffer).

Synthesizable only: the HBM and the L2 data array stay outside (their ports are the tile's
ports); the behavioural models of ``rtl/tile/behavioural/`` are for simulation tops.
"""

from __future__ import annotations

from amaranth.hdl import Module, ResetInserter
from amaranth.lib import wiring
from amaranth.lib.wiring import Out

from tricut.rtl.cdu.checked import CheckedComponent

from tricut.rtl.dsu.cluster import DsuCluster
from tricut.rtl.dsu.regmap import MAX_HARTS

from .attention_path import CDU_DEFAULTS, AttentionPath
from .dsu_link import DsuLink
from .sequencer import StepSequencer

__all__ = ["DecodeTile"]

#: the cached tile's ports the sequencer drives (not ports of the decode tile)
_INTERNAL = ("job", "step")
#: the DSU cluster's ports that are ports of the decode tile
_DSU_PORTS = ("host", "run", "stall", "intake", "intake_end", "outcomes", "moves", "degraded",
              "trap")


class DecodeTile(CheckedComponent):
    """:class:`~rtl.dsu.cluster.DsuCluster` and :class:`~.dsu_link.DsuLink` in front of
    :class:`~.sequencer.StepSequencer` in front of
    :class:`~.attention_path.AttentionPath`: the cluster's descriptors and the
    link's round beats drive the sequencer, whose ``job`` and ``step`` streams drive the tile;
    the link turns the tile's layers (``go``/``done``, ``fail_slots``) into the cluster's
    completions.

    Parameters: those of :class:`~.attention_path.AttentionPath` (``max_slots``
    is also the sequencer's round buffer and the DSU's ``n_slots``), and ``dsu_cores``
    (0..4): the cluster's cores; 0 leaves the DSU out (the sequencer's ``round`` and
    ``descriptor`` are then ports). ``dsu_mem_bytes``: each core's local memory;
    ``dsu_intake_depth``: the arbiter's intake FIFO; ``dsu_firmware``: the words the cores'
    memories hold at reset (default none: firmware loads through ``host``); ``engine``: the
    TE array's engine design (default the shipped ``"pipelined"``). ``cdu=None`` builds the
    tile without the CDU: the same unit streamer reads every block from HBM, and the CDU's,
    the new-token writer's and the L2's ports are absent.

    Ports: with the DSU, the cluster's ``host`` (firmware load, MMIO), ``run``, ``stall``,
    ``intake``, ``intake_end``, ``outcomes``, ``moves``, ``degraded``, ``trap`` and its
    ``round``/``round_busy`` as ``dsu_round``/``dsu_round_busy``, ``round_abort`` (the link's:
    it resets the sequencer and the tile; HBM and L2 must drop their answers in flight);
    without, the sequencer's
    ``round`` and ``descriptor`` (in); ``seq_busy`` and ``bad_desc`` (out, the sequencer's
    ``busy`` and ``bad_desc``), and every port of the cached tile but ``job`` and ``step``,
    under the same name (``q_write``, ``config``, ``layer``, ``newkv_write``, ``go``,
    ``done``, ``out_addr``/``out_data``, ``hbm_req``/``hbm_resp``, ``hbm_write``,
    ``l2_read``/``l2_data``/``l2_write``, ``tensor_scale``, ``err``, ``misorder``,
    ``te_status``, ``fail_slots``, ``cdu_counters``, ``reg_addr``/``reg_data``,
    ``cdu_idle``).
    """

    @staticmethod
    def _check(engines, head_dim, G, lanes, kv_dtype, num_layers, num_kv_heads, split_tokens,
               widths, slot_bits, max_ctx, num_requests, max_beats, max_outstanding,
               scale_bits, cdu, max_slots, dsu_cores, dsu_mem_bytes, dsu_intake_depth,
               dsu_firmware, engine):
        if isinstance(dsu_cores, bool) or not isinstance(dsu_cores, int) or \
                not 0 <= dsu_cores <= MAX_HARTS:
            raise ValueError(f"dsu_cores must be an integer in 0..{MAX_HARTS}, not {dsu_cores!r}")
        w = AttentionPath.check(engines, head_dim, G, lanes, kv_dtype, num_layers,
                                      num_kv_heads, split_tokens, widths, slot_bits, max_ctx,
                                      num_requests, max_beats, max_outstanding, scale_bits, cdu,
                                      max_slots, engine)
        StepSequencer.check(num_layers, num_kv_heads, max_slots, split_tokens, widths, slot_bits)
        return w

    def __init__(self, engines=1, head_dim=64, G=2, lanes=32, kv_dtype="bf16", num_layers=2,
                 num_kv_heads=2, split_tokens=0, widths=None, slot_bits=2, max_ctx=64,
                 num_requests=4, max_beats=16, max_outstanding=4, scale_bits=None,
                 cdu=CDU_DEFAULTS, max_slots=4, dsu_cores=1, dsu_mem_bytes=0x8000,
                 dsu_intake_depth=4,
                 dsu_firmware=(), engine="pipelined"):
        self.tile = t = AttentionPath(engines, head_dim, G, lanes, kv_dtype, num_layers,
                                            num_kv_heads, split_tokens, widths, slot_bits,
                                            max_ctx, num_requests, max_beats, max_outstanding,
                                            scale_bits, cdu, max_slots, engine)
        self.w = t.w
        self.seq = s = StepSequencer(num_layers, num_kv_heads, max_slots, split_tokens, t.w,
                                     slot_bits)
        self.dsu_cores = dsu_cores
        if dsu_cores:
            self.cluster = c = DsuCluster(n_cores=dsu_cores, n_slots=max_slots,
                                          intake_depth=dsu_intake_depth,
                                          mem_bytes=dsu_mem_bytes, firmware=dsu_firmware)
            self.link = DsuLink(num_layers, max_slots, slot_bits)
            members = {name: c.signature.members[name] for name in _DSU_PORTS}
            members.update({"dsu_round": Out(24), "dsu_round_busy": Out(1),
                            "round_abort": Out(1)})
        else:
            members = {"round": s.signature.members["round"],
                       "descriptor": s.signature.members["descriptor"]}
        members.update({"seq_busy": Out(1), "bad_desc": Out(1)})
        members.update((name, member) for name, member in t.signature.members.items()
                       if name not in _INTERNAL)
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        s, t = self.seq, self.tile
        reset = ResetInserter(self.link.round_abort) if self.dsu_cores else (lambda x: x)
        m.submodules.seq, m.submodules.tile = reset(s), reset(t)
        wiring.connect(m, s.job, t.job)
        if t.cdu is not None:
            wiring.connect(m, s.step, t.step)
        else:
            m.d.comb += s.step.ready.eq(1)
        if self.dsu_cores:
            self._elaborate_dsu(m)
        else:
            wiring.connect(m, wiring.flipped(self.round), s.round)
            wiring.connect(m, wiring.flipped(self.descriptor), s.descriptor)
        m.d.comb += [self.seq_busy.eq(s.busy), self.bad_desc.eq(s.bad_desc)]
        _forward(m, self, t, [n for n in t.signature.members if n not in _INTERNAL])
        return m

    def _elaborate_dsu(self, m):
        """The cluster's ports, its descriptors and the link's round beats into the
        sequencer, the link's completions back to the cluster."""
        c, ln, s, t = self.cluster, self.link, self.seq, self.tile
        m.submodules.dsu, m.submodules.link = c, ln
        _forward(m, self, c, _DSU_PORTS)
        wiring.connect(m, ln.round, s.round)
        wiring.connect(m, c.descriptors, s.descriptor)
        wiring.connect(m, ln.completions, c.completions)
        d = s.descriptor
        m.d.comb += [self.dsu_round.eq(c.round), self.dsu_round_busy.eq(c.round_busy),
                     self.round_abort.eq(ln.round_abort),
                     ln.issued.eq(c.issued), ln.issued_count.eq(c.issued_count),
                     ln.dsu_round.eq(c.round),
                     ln.desc_seen.eq(d.valid & d.ready), ln.desc_slot.eq(d.payload.slot),
                     ln.layer_go.eq(self.go), ln.layer_done.eq(t.done),
                     ln.fail_slots.eq(t.fail_slots)]


def _forward(m, outer, inner, names):
    """Ports ``names`` of ``inner`` as the same-named ports of ``outer``."""
    for name in names:
        member = inner.signature.members[name]
        o, i = getattr(outer, name), getattr(inner, name)
        if member.is_signature:
            if member.flow == wiring.In:
                wiring.connect(m, wiring.flipped(o), i)
            else:
                wiring.connect(m, i, wiring.flipped(o))
        elif member.flow == wiring.In:
            m.d.comb += i.eq(o)
        else:
            m.d.comb += o.eq(i)
