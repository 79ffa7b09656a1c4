"""The decode tile's link to the DSU cluster: the step sequencer's ``round`` beat from the slot
arbiter's ``ISSUE``, and one completion per descriptor once every layer of the round is done."""

from __future__ import annotations

from amaranth.hdl import Array, Module, Mux, Signal
from amaranth.lib import stream
from amaranth.lib.wiring import In, Out

from tricut.rtl.cdu.checked import CheckedComponent
from tricut.rtl.dsu.layouts import COMPLETION_LAYOUT
from tricut.rtl.dsu.regmap import Result

from .sequencer_layouts import round_layout

__all__ = ["DsuLink"]


class DsuLink(CheckedComponent):
    """Parameters
    ----------
    num_layers : int, >= 1
        Layers of a decode step (``done`` pulses per round).
    max_slots : int, 1..256
        The most descriptors of one round (the DSU's ``n_slots``, the sequencer's round buffer).
    slot_bits : int, 1..8
        Width of ``fail_slots`` (``2**slot_bits`` bits) and of the slots kept.

    Ports
    -----
    * ``issued``, ``issued_count``, ``dsu_round`` (in): the arbiter's ``issued`` pulse, its
      ``popcount(BATCH)`` and ``ROUND``;
    * ``round`` (out stream, :func:`~.sequencer_layouts.round_layout`): ``{step = ROUND, count,
      end = 1}``, offered from the cycle after ``issued`` until the sequencer takes it; an empty
      batch (``count`` 0) sends nothing (the arbiter expects no completion). ``end`` is always
      1: the DSU issues a round only once the previous one completed, so the CDU's prefetch
      walk must not wait for a next step;
    * ``desc_seen`` (in), ``desc_slot`` (in, 8 b): a descriptor went into the sequencer this
      cycle, and its slot (kept in arrival order, at most ``max_slots`` per round);
    * ``layer_go``, ``layer_done`` (in): the tile's ``go`` and ``done``: a layer ends at the
      first ``done`` after a ``go`` (``done`` is high while the tile is idle, so a level
      alone would count layers that never ran); ``fail_slots`` (in): the tile's failed
      slots of that layer, sampled then;
    * ``completions`` (out stream, ``dsu.layouts.COMPLETION_LAYOUT``): after ``num_layers``
      layers, one beat per kept descriptor in arrival order, ``result`` ``ERROR`` if its slot
      failed in any layer of the round, else ``OK``; then the round's state is cleared;
    * ``failed`` (out): the failed slots of the last round completed; ``rounds`` (out, 16 b):
      rounds completed;
    * ``round_abort`` (out): the arbiter ended the link's open round without its completions
      (its slot watchdogs completed every descriptor as ``timeout``: ``dsu_round`` moved past the
      round while the link still holds it). One cycle; the link drops the round (nothing is
      sent for it) and the tile's datapath and memory models must drop theirs (the tile
      resets them); ``aborts`` (out, 16 b): rounds aborted.
    """

    @staticmethod
    def _check(num_layers, max_slots, slot_bits):
        for name, v, lo, hi in (("num_layers", num_layers, 1, 1 << 16),
                                ("max_slots", max_slots, 1, 256), ("slot_bits", slot_bits, 1, 8)):
            if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
                raise ValueError(f"{name} must be an integer in {lo}..{hi}, not {v!r}")

    def __init__(self, num_layers, max_slots, slot_bits):
        self.num_layers, self.max_slots, self.slot_bits = num_layers, max_slots, slot_bits
        super().__init__({
            "issued": In(1),
            "issued_count": In(range(max_slots + 1)),
            "dsu_round": In(24),
            "round": Out(stream.Signature(round_layout(max_slots))),
            "desc_seen": In(1),
            "desc_slot": In(8),
            "layer_go": In(1),
            "layer_done": In(1),
            "fail_slots": In(1 << slot_bits),
            "completions": Out(stream.Signature(COMPLETION_LAYOUT)),
            "failed": Out(1 << slot_bits),
            "rounds": Out(16),
            "round_abort": Out(1),
            "aborts": Out(16),
        })

    def elaborate(self, platform):
        m = Module()
        N = self.max_slots
        beat = self.round.payload
        with m.If(self.round.valid & self.round.ready):
            m.d.sync += self.round.valid.eq(0)
        with m.If(self.issued & (self.issued_count != 0)):
            m.d.sync += [self.round.valid.eq(1), beat.step.eq(self.dsu_round),
                         beat.count.eq(self.issued_count), beat.end.eq(1)]

        slots = Array(Signal(self.slot_bits, name=f"slot{i}") for i in range(N))
        kept = Signal(range(N + 1))
        with m.If(self.desc_seen & (kept < N)):
            m.d.sync += [slots[kept].eq(self.desc_slot), kept.eq(kept + 1)]

        armed = Signal()            # a go was seen, its done not yet
        layers = Signal(range(self.num_layers + 1))
        acc = Signal(1 << self.slot_bits)
        edge = armed & self.layer_done & ~self.layer_go
        with m.If(self.layer_go):
            m.d.sync += armed.eq(1)
        with m.Elif(edge):
            m.d.sync += armed.eq(0)
        emit = Signal(range(N + 1))
        cur = slots[emit]
        c = self.completions.payload
        m.d.comb += [c.slot.eq(cur),
                     c.result.eq(Mux(acc.bit_select(cur, 1), Result.ERROR, Result.OK)),
                     self.completions.valid.eq((layers == self.num_layers) & (emit < kept))]
        with m.If(edge & (layers < self.num_layers)):
            m.d.sync += [layers.eq(layers + 1), acc.eq(acc | self.fail_slots)]
        with m.If(self.completions.valid & self.completions.ready):
            m.d.sync += emit.eq(emit + 1)
        with m.If((layers == self.num_layers) & ((emit == kept) |
                  ((emit + 1 == kept) & self.completions.valid & self.completions.ready))):
            m.d.sync += [layers.eq(0), acc.eq(0), emit.eq(0), kept.eq(0), self.failed.eq(acc),
                         self.rounds.eq(self.rounds + 1)]

        open_round = Signal(24)     # the ROUND of the round the link holds
        with m.If(self.issued & (self.issued_count != 0)):
            m.d.sync += open_round.eq(self.dsu_round)
        holding = self.round.valid | (kept != 0) | (layers != 0) | armed
        m.d.comb += self.round_abort.eq(holding & (self.dsu_round != open_round))
        with m.If(self.round_abort):
            m.d.sync += [self.round.valid.eq(0), kept.eq(0), layers.eq(0), armed.eq(0),
                         acc.eq(0), emit.eq(0), self.aborts.eq(self.aborts + 1)]
        return m
