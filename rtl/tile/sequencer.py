"""Step sequencer of the decode tile: one DSU round -> the CDU's step beats + the TE's jobs."""

from __future__ import annotations

from amaranth.hdl import Module, Mux, Signal, unsigned
from amaranth.lib import data, stream
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from tricut.models.cdu import HINT_OF_RESIDENCY
from tricut.rtl.cdu.checked import CheckedComponent
from tricut.rtl.cdu.layouts import HINT, STEP_KIND, Widths, seq_bits, step_bits

from .sequencer_layouts import (DESCRIPTOR_LAYOUT, ROUND_STEP_BITS, attn_job_layout, parts_bits,
                                round_layout, step_layout)

__all__ = ["StepSequencer", "sequencer_cycles", "ceil_div_const", "MAX_KV_HEADS"]

#: the most KV heads a sequencer walks per (slot, layer)
MAX_KV_HEADS = 256


def ceil_div_const(divisor, n_bits):
    """``(mul, shift)`` with ``ceil(n / divisor) == ((n + divisor - 1) * mul) >> shift`` for
    every ``0 <= n < 2**n_bits`` (``1 <= divisor < 2**n_bits``): division by a constant as a
    multiply (Granlund-Montgomery: ``shift = N + ceil(log2 divisor)``, ``mul =
    ceil(2**shift / divisor)``, ``N = n_bits + 1`` the width of ``n + divisor - 1``)."""
    shift = n_bits + 1 + (divisor - 1).bit_length()
    return -(-(1 << shift) // divisor), shift


def sequencer_cycles(seq_lens, num_layers, num_kv_heads, split_tokens, dropped=0):
    """Cycles of one round with every input beat offered at once and both outputs always
    ready, from the cycle its ``round`` beat (= the ``header`` beat) transfers to the cycle
    of its last output beat (its last job; its last ``layer`` beat if it has no job),
    inclusive: ``1 + n + L + L*H*sum(parts)``; ``n`` descriptors taken (``seq_lens`` of the
    good ones, plus ``dropped`` bad ones), ``parts = ceil(seq_len / split_tokens)`` (1 when
    not split). Rounds run back to back: the next ``round`` beat transfers the cycle after."""
    parts = sum(1 if split_tokens == 0 else -(-n // split_tokens) for n in seq_lens)
    return 1 + len(seq_lens) + dropped + num_layers + num_layers * num_kv_heads * parts


class StepSequencer(CheckedComponent):
    """Turns one DSU round (a decode step's batch) into the CDU front end's step descriptor
    and the TE array's attention jobs, transaction for transaction equal to
    :func:`tricut.models.tile.sequence`.

    Parameters
    ----------
    num_layers : int, 1..2**widths.layer
    num_kv_heads : int, 1..256
    max_slots : int, 1..2**slot_bits
        The most descriptors in one round (entries of the round buffer).
    split_tokens : int, 0..2**seq_bits - 1
        Flash-Decoding split-K: a context of ``n > split_tokens`` tokens becomes
        ``ceil(n / split_tokens)`` jobs per (slot, layer, KV head); 0 never splits.
    widths : :class:`tricut.rtl.cdu.layouts.Widths`, default ``Widths()``
        The CDU's field widths (``req``, ``layer``, ``seq_bits`` = ``block + 4``).
    slot_bits : int, 1..8
        Slot field width of the CDU ``step`` and of ``job`` (slots ``0 .. 2**slot_bits-1``).

    Streams (``amaranth.lib.stream``; payloads in :mod:`tricut.rtl.tile.sequencer_layouts`):

    * ``round`` (in): one beat per round, ``step``, ``count``, ``end``; taken when the unit is
      idle, in the same cycle as the ``header`` beat it turns into (``round.ready`` =
      ``step.ready`` there). Why a separate beat: the arbiter's ``descriptor`` stream has
      no in-band end of round (its scan leaves ``SCAN`` after the last slot, and ``ROUND``
      moves only when every completion is back, i.e. after the TE ran the step), and an
      empty batch emits nothing; the scheduler knows its batch (``BATCH``, whose slots
      ``ISSUE`` requires to be ACTIVE: exactly ``popcount(BATCH)`` descriptors follow).
    * ``descriptor`` (in): ``count`` DSU descriptors; each is passed through as a ``slot``
      beat in the cycle it is taken (``descriptor.ready`` = ``step.ready``) and stored. A
      bad descriptor (``step`` != the round's, ``slot >= 2**slot_bits``, ``request`` or
      ``seq_len`` too wide for the CDU fields, ``seq_len`` = 0, or ``max_slots`` good ones
      already stored: ``count`` may exceed ``max_slots``) is taken in one cycle and
      dropped, and sets the sticky ``bad_desc`` (cleared when the next round beat is taken).
      ``priority`` is not used (the hint comes from ``residency`` only).
    * ``step`` (out): ``header`` (step mod ``2**16``), the ``slot`` beats, then ``layer``
      beats ``0..num_layers-1``, one per cycle, ``last`` on the final one (``end`` too if the
      round beat had ``end``);
    * ``job`` (out): after the last ``layer`` beat, one job per cycle in the order layer,
      slot (round order), KV head, part; valid as a register (from the cycle after the
      last layer beat, or the previous job, transferred); ``last`` on the round's final job.

    ``busy``: from the round beat until the round's last output beat transferred.
    Cycles: :func:`sequencer_cycles`. The number of parts is computed when a descriptor is
    taken, by a multiply with a constant (:func:`ceil_div_const`), and stored with it.
    """

    @staticmethod
    def _check(num_layers, num_kv_heads, max_slots, split_tokens, widths, slot_bits):
        if widths is not None and not isinstance(widths, Widths):
            raise ValueError(f"widths must be a tricut.rtl.cdu.layouts.Widths, got {widths!r}")
        w = widths or Widths()

        def need(name, v, lo, hi):
            if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
                raise ValueError(f"step sequencer: {name} must be an integer in {lo}..{hi}, "
                                 f"got {v!r}")
        need("slot_bits", slot_bits, 1, 8)
        need("num_layers", num_layers, 1, 1 << w.layer)
        need("num_kv_heads", num_kv_heads, 1, MAX_KV_HEADS)
        need("max_slots", max_slots, 1, 1 << slot_bits)
        need("split_tokens", split_tokens, 0, (1 << seq_bits(w)) - 1)

    def __init__(self, num_layers=2, num_kv_heads=2, max_slots=4, split_tokens=0, widths=None,
                 slot_bits=2):
        self.w = w = widths or Widths()
        self.num_layers, self.num_kv_heads = num_layers, num_kv_heads
        self.max_slots, self.split_tokens, self.slot_bits = max_slots, split_tokens, slot_bits
        super().__init__({
            "round": In(stream.Signature(round_layout(max_slots))),
            "descriptor": In(stream.Signature(DESCRIPTOR_LAYOUT)),
            "step": Out(stream.Signature(step_layout(w, slot_bits))),
            "job": Out(stream.Signature(attn_job_layout(w, slot_bits, num_kv_heads,
                                                        split_tokens))),
            "busy": Out(1),
            "bad_desc": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        s = self._elaborate_intake(m)
        self._elaborate_jobs(m, s)
        self._elaborate_fsm(m, s)
        return m

    # ---------------------------------------------------------------- descriptor intake
    def _elaborate_intake(self, m):
        """The round buffer (``mem``: one entry per good descriptor: slot, request, seq_len,
        parts; written at intake, read combinationally by the job walker), the descriptor
        checks (``bad``) and the parts of the descriptor on the bus (``parts_in``)."""
        w, sb = self.w, seq_bits(self.w)
        d = self.descriptor.payload
        entry = data.StructLayout({"slot": unsigned(self.slot_bits), "request": unsigned(w.req),
                                   "seq_len": unsigned(sb),
                                   "parts": unsigned(parts_bits(self.split_tokens, w))})
        m.submodules.mem = mem = Memory(shape=entry, depth=self.max_slots, init=[])
        wp = mem.write_port()
        rp = mem.read_port(domain="comb")
        step_r = Signal(ROUND_STEP_BITS)
        n = Signal(range(self.max_slots + 1))      # good descriptors stored
        bad = Signal()
        m.d.comb += bad.eq((d.step != step_r) | (d.slot >> self.slot_bits != 0) |
                           (d.request >> w.req != 0) | (d.seq_len >> sb != 0) |
                           (d.seq_len == 0) | (n == self.max_slots))
        parts_in = Signal(parts_bits(self.split_tokens, w))
        if self.split_tokens == 0:
            m.d.comb += parts_in.eq(1)
        else:
            mul, shift = ceil_div_const(self.split_tokens, sb)
            x = Signal(sb + 1)
            m.d.comb += [x.eq(d.seq_len[:sb] + (self.split_tokens - 1)),
                         parts_in.eq((x * mul) >> shift)]
        m.d.comb += [wp.addr.eq(n), wp.data.slot.eq(d.slot), wp.data.request.eq(d.request),
                     wp.data.seq_len.eq(d.seq_len), wp.data.parts.eq(parts_in)]
        hint = Mux(d.residency, HINT[HINT_OF_RESIDENCY[1]], HINT[HINT_OF_RESIDENCY[0]])
        return type("S", (), dict(mem=mem, wp=wp, rp=rp, step_r=step_r, bad=bad, n=n,
                                  hint=hint))

    # ---------------------------------------------------------------- job walker
    def _elaborate_jobs(self, m, s):
        """Walker registers ``li`` (layer), ``si`` (buffer entry), ``h`` (KV head), ``p``
        (part), ``start`` (first token of part ``p``) and the job payload from them."""
        sb = seq_bits(self.w)
        s.li = Signal(range(self.num_layers))
        s.si = Signal(range(self.max_slots))
        s.h = Signal(range(self.num_kv_heads))
        s.p = Signal(parts_bits(self.split_tokens, self.w))
        s.start = Signal(sb)
        e = s.rp.data
        m.d.comb += s.rp.addr.eq(s.si)
        j = self.job.payload
        split = self.split_tokens
        stop = Signal(sb + 1)
        if split == 0:
            m.d.comb += stop.eq(e.seq_len)
        else:
            m.d.comb += stop.eq(Mux(s.start + split < e.seq_len, s.start + split, e.seq_len))
        s.last_p = s.p == e.parts - 1
        s.last_h = s.h == self.num_kv_heads - 1
        s.last_s = s.si == s.n - 1
        s.last_l = s.li == self.num_layers - 1
        m.d.comb += [j.slot.eq(e.slot), j.request.eq(e.request), j.layer.eq(s.li),
                     j.kv_head.eq(s.h), j.part.eq(s.p), j.parts.eq(e.parts),
                     j.start.eq(s.start), j.end.eq(stop[:sb]),
                     j.last.eq(s.last_p & s.last_h & s.last_s & s.last_l)]

    def _advance_job(self, m, s):
        """At a job transfer: the next (layer, slot, head, part); True after the last."""
        with m.If(s.last_p):
            m.d.sync += [s.p.eq(0), s.start.eq(0), s.h.eq(s.h + 1)]
            with m.If(s.last_h):
                m.d.sync += [s.h.eq(0), s.si.eq(s.si + 1)]
                with m.If(s.last_s):
                    m.d.sync += [s.si.eq(0), s.li.eq(s.li + 1)]
        with m.Else():
            m.d.sync += [s.p.eq(s.p + 1), s.start.eq(s.start + self.split_tokens)]

    # ---------------------------------------------------------------- sequencer
    def _elaborate_fsm(self, m, s):
        r, d, st = self.round.payload, self.descriptor.payload, self.step.payload
        count = Signal.like(r.count)
        taken = Signal.like(r.count)
        end_r = Signal()
        m.d.comb += self.busy.eq(1)
        with m.FSM(name="sequencer"):
            with m.State("IDLE"):
                m.d.comb += [self.busy.eq(0), self.step.valid.eq(self.round.valid),
                             self.round.ready.eq(self.step.ready),
                             st.kind.eq(STEP_KIND["header"]), st.step.eq(r.step[:step_bits()])]
                with m.If(self.round.valid & self.step.ready):
                    m.d.sync += [s.step_r.eq(r.step), count.eq(r.count), end_r.eq(r.end),
                                 taken.eq(0), s.n.eq(0), self.bad_desc.eq(0),
                                 s.li.eq(0), s.si.eq(0), s.h.eq(0), s.p.eq(0), s.start.eq(0)]
                    m.next = "SLOTS"
                    with m.If(r.count == 0):
                        m.next = "LAYERS"
            with m.State("SLOTS"):
                go = self.descriptor.valid & (s.bad | self.step.ready)
                m.d.comb += [self.step.valid.eq(self.descriptor.valid & ~s.bad),
                             self.descriptor.ready.eq(s.bad | self.step.ready),
                             st.kind.eq(STEP_KIND["slot"]), st.slot.eq(d.slot),
                             st.req.eq(d.request), st.seq_len.eq(d.seq_len), st.hint.eq(s.hint),
                             s.wp.en.eq(go & ~s.bad)]
                with m.If(go):
                    m.d.sync += taken.eq(taken + 1)
                    with m.If(s.bad):
                        m.d.sync += self.bad_desc.eq(1)
                    with m.Else():
                        m.d.sync += s.n.eq(s.n + 1)
                    with m.If(taken == count - 1):
                        m.next = "LAYERS"
            with m.State("LAYERS"):
                m.d.comb += [self.step.valid.eq(1), st.kind.eq(STEP_KIND["layer"]),
                             st.layer.eq(s.li), st.last.eq(s.last_l),
                             st.end.eq(s.last_l & end_r)]
                with m.If(self.step.ready):
                    m.d.sync += s.li.eq(s.li + 1)
                    with m.If(s.last_l):
                        m.d.sync += s.li.eq(0)
                        m.next = "IDLE"
                        with m.If(s.n != 0):
                            m.next = "JOBS"
            with m.State("JOBS"):
                m.d.comb += self.job.valid.eq(1)
                with m.If(self.job.ready):
                    self._advance_job(m, s)
                    with m.If(self.job.payload.last):
                        m.next = "IDLE"
