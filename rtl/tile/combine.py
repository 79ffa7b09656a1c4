"""Flash-Decoding split-K combine unit: K partial results of one job -> the normalised output."""

from __future__ import annotations

from types import SimpleNamespace

from amaranth.hdl import Array, Cat, Module, Mux, Signal, unsigned
from amaranth.lib import stream
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from tricut.models.te import HEAD_DIMS, MAX_G, NEG_INF
from tricut.models.tile import TILE_LANES as LANES
from tricut.rtl.cdu.checked import CheckedComponent
from tricut.rtl.te.engine import TEEngine
from tricut.rtl.te.exp2 import Exp2
from tricut.rtl.te.fadd import FP32Add
from tricut.rtl.te.fmul import FP32Mul
from tricut.rtl.te.fputil import ONE
from tricut.rtl.te.recip import FP32Recip

from .layouts import MAX_PARTS_LIMIT, job_layout, out_layout, parts_bits

__all__ = ["CombineUnit", "combine_cycles"]

SIGN = 0x80000000


def combine_cycles(parts, head_dim, G, lanes):
    """Cycles of one job, from the cycle its ``job`` beat transfers to the cycle its last
    ``combined`` beat transfers, inclusive, with an unstalled ``partial`` stream and an
    always-ready ``combined``: ``1 + K*G*(Dk+1) + [K > 1]*Dk + G*Dk``, ``Dk = head_dim/lanes``
    (job beat; every partial beat at one per cycle; the fold of the last head; the output)."""
    dk = head_dim // lanes
    return 1 + parts * G * (dk + 1) + (dk if parts > 1 else 0) + G * dk


def _lane(word, i):
    return word[32 * i:32 * (i + 1)]


class CombineUnit(CheckedComponent):
    """Flash-Decoding split-K combine of one (request, layer, KV head) job, bit-exact with
    :func:`tricut.models.te.combine_partials` (left fold in arrival order).

    Parameters
    ----------
    head_dim : {64, 128, 256}
    G : int, 1..16
        Query heads of the job (the TE engine's GQA group).
    lanes : {2, 4, 8, 16}
        fp32 values per beat, and lanes of the fold datapath.
    max_parts : int, 1..4096
        Sets the width of the ``parts`` field (``max_parts.bit_length()`` bits). The fold
        keeps no per-part state, so any count the field holds is combined the same way.

    Streams (``amaranth.lib.stream``; payloads in :mod:`tricut.rtl.tile.layouts`):

    * ``job`` (in): ``parts`` = K, one beat per job, taken when the unit is idle;
    * ``partial`` (in): the K partial results one after another, each exactly as a TE engine
      emits it in partial mode (the TE ``out`` layout): per head ``Dk`` beats of ``o`` then
      one beat ``[m, l, 0, ...]``, ``last`` on the part's final beat. The unit counts beats
      (``K*G*(Dk+1)`` per job); ``last`` is only checked: a beat whose ``last`` is not set
      exactly on a part's final beat raises the sticky ``misframed`` output (cleared when the
      next job is accepted; the data are still taken by position);
    * ``combined`` (out): ``G*Dk`` beats of ``lanes`` fp32 values, head-major, ``last`` on
      the final beat: the TE engine's non-partial ``out`` format.

    ``busy``: from the job beat until the job's last ``combined`` beat has transferred.
    K = 0 emits zeros without taking any ``partial`` beat (what an all-empty job gives).

    Datapath: the first part is stored as it arrives (``O = o_0``, ``M = m_0``, ``L = l_0``).
    A later part's ``o`` beats go to a one-part buffer; at its ``[m, l]`` beat of head ``g``
    the scalar unit computes ``Mn = fmax(M, m)``, ``a = exp2_diff(M, Mn)`` (0 if ``L == 0``),
    ``b = exp2_diff(m, Mn)`` (0 if ``l == 0``) and, on lane 0 of the lane array,
    ``L = L*a + l*b``; then during the next ``Dk`` cycles (while head ``g+1`` arrives) the
    lane array folds the head: ``O = fadd(fmul(O, a), fmul(o, b))``, ``lanes`` values per
    cycle (2 ``FP32Mul`` + 1 ``FP32Add`` per lane). Output: ``O * (1/L)`` (one
    ``FP32Recip``, the lane multipliers), zeros where ``L`` is +0. The ``partial`` stream
    is never stalled while a job is open: one beat per cycle. Cycles: :func:`combine_cycles`.
    All arithmetic units are the TE engine's (combinational, bit-exact with
    :mod:`tricut.models.te`).
    """

    @staticmethod
    def _check(head_dim, G, lanes, max_parts):
        if head_dim not in HEAD_DIMS or isinstance(head_dim, bool):
            raise ValueError(f"head_dim must be one of {HEAD_DIMS}, got {head_dim!r}")
        if not isinstance(G, int) or isinstance(G, bool) or not 1 <= G <= MAX_G:
            raise ValueError(f"G must be an int in 1..{MAX_G}, got {G!r}")
        if lanes not in LANES or isinstance(lanes, bool):
            raise ValueError(f"lanes must be one of {LANES}, got {lanes!r}")
        if not isinstance(max_parts, int) or isinstance(max_parts, bool) or \
                not 1 <= max_parts <= MAX_PARTS_LIMIT:
            raise ValueError(f"max_parts must be an int in 1..{MAX_PARTS_LIMIT}, "
                             f"got {max_parts!r}")

    def __init__(self, head_dim=128, G=4, lanes=8, max_parts=8):
        self.head_dim, self.G, self.lanes, self.max_parts = head_dim, G, lanes, max_parts
        self.dk = head_dim // lanes
        super().__init__({
            "job": In(stream.Signature(job_layout(max_parts))),
            "partial": In(stream.Signature(out_layout(lanes))),
            "combined": Out(stream.Signature(out_layout(lanes))),
            "busy": Out(1),
            "misframed": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        G, L, dk = self.G, self.lanes, self.dk
        W = 32 * L
        dkb = (dk - 1).bit_length()
        gb = max(1, (G - 1).bit_length())
        pb = parts_bits(self.max_parts)

        # ---------------------------------------------------------------- state
        parts = Signal(pb)          # K of the current job
        part = Signal(pb)           # part being received
        g = Signal(gb)              # head (receive and output)
        b = Signal(dkb)             # beat of the head
        stat = Signal()             # the [m, l] beat of head g is next
        fold = Signal()             # the lane array folds head fg, beat fb, this cycle
        fg = Signal(gb)
        fb = Signal(dkb)
        a_r = Signal(32)            # fold factors of head fg
        b_r = Signal(32)
        M_r = Array(Signal(32, name=f"M_{i}") for i in range(G))
        L_r = Array(Signal(32, name=f"L_{i}") for i in range(G))

        m.submodules.omem = omem = Memory(shape=unsigned(W), depth=G * dk, init=[])
        m.submodules.pmem = pmem = Memory(shape=unsigned(W), depth=G * dk, init=[])
        o_rd = omem.read_port(domain="comb")
        o_wr = omem.write_port()
        p_rd = pmem.read_port(domain="comb")
        p_wr = pmem.write_port()

        def addr(hi, lo):
            return Cat(lo, hi) if dkb else hi

        outp = Signal()             # in the output phase
        m.d.comb += [o_rd.addr.eq(Mux(outp, addr(g, b), addr(fg, fb))),
                     p_rd.addr.eq(addr(fg, fb)), p_wr.addr.eq(addr(g, b))]

        # ---------------------------------------------------------------- input beat
        inp = self.partial.payload
        take = Signal()             # a partial beat transfers this cycle
        m.d.comb += take.eq(self.partial.valid & self.partial.ready)
        first = part == 0
        m_i = _lane(inp.data.as_value(), 0)
        l_i = _lane(inp.data.as_value(), 1)
        o_write = take & ~stat & first
        m.d.comb += [p_wr.data.eq(inp.data.as_value()), p_wr.en.eq(take & ~stat & ~first)]

        # ---------------------------------------------------------------- scalar unit
        M_old, L_old = M_r[g], L_r[g]
        Mn = Signal(32)
        TEEngine._fmax(m, M_old, m_i, Mn)
        m.submodules.sub_a = sub_a = FP32Add()
        m.submodules.sub_b = sub_b = FP32Add()
        m.submodules.exp_a = exp_a = Exp2()
        m.submodules.exp_b = exp_b = Exp2()
        sc_on = Signal()            # scalar inputs held at 0 except on a stat beat
        m.d.comb += sc_on.eq(take & stat & ~first)
        m.d.comb += [sub_a.a.eq(Mux(sc_on, M_old, 0)), sub_a.b.eq(Mux(sc_on, Mn ^ SIGN, 0)),
                     sub_b.a.eq(Mux(sc_on, m_i, 0)), sub_b.b.eq(Mux(sc_on, Mn ^ SIGN, 0)),
                     exp_a.x.eq(sub_a.y), exp_b.x.eq(sub_b.y)]
        fa = Signal(32)
        fb_ = Signal(32)
        both_a = (M_old == NEG_INF) & (Mn == NEG_INF)
        both_b = (m_i == NEG_INF) & (Mn == NEG_INF)
        m.d.comb += [fa.eq(Mux(L_old == 0, 0, Mux(both_a, ONE, exp_a.y))),
                     fb_.eq(Mux(l_i == 0, 0, Mux(both_b, ONE, exp_b.y)))]

        # ---------------------------------------------------------------- lane array
        m.submodules.recip = recip = FP32Recip()
        m.d.comb += recip.x.eq(Mux(outp, L_r[g], ONE))
        o_word, p_word = o_rd.data, p_rd.data
        fold_new = Signal(W)
        out_word = Signal(W)
        zero_l = L_r[g] == 0
        L_new = Signal(32)
        for i in range(L):
            mul_a, mul_b, add = FP32Mul(), FP32Mul(), FP32Add()
            m.submodules[f"lane_mul_a{i}"] = mul_a
            m.submodules[f"lane_mul_b{i}"] = mul_b
            m.submodules[f"lane_add{i}"] = add
            with m.If(fold):
                m.d.comb += [mul_a.a.eq(_lane(o_word, i)), mul_a.b.eq(a_r),
                             mul_b.a.eq(_lane(p_word, i)), mul_b.b.eq(b_r)]
            with m.Elif(outp):
                m.d.comb += [mul_a.a.eq(_lane(o_word, i)), mul_a.b.eq(recip.y)]
            if i == 0:
                with m.Elif(sc_on):             # L = L*a + l*b on lane 0
                    m.d.comb += [mul_a.a.eq(L_old), mul_a.b.eq(fa),
                                 mul_b.a.eq(l_i), mul_b.b.eq(fb_)]
                m.d.comb += L_new.eq(add.y)
            m.d.comb += [add.a.eq(mul_a.y), add.b.eq(mul_b.y),
                         _lane(fold_new, i).eq(add.y),
                         _lane(out_word, i).eq(Mux(zero_l, 0, mul_a.y))]
        m.d.comb += [o_wr.addr.eq(Mux(fold, addr(fg, fb), addr(g, b))),
                     o_wr.data.eq(Mux(fold, fold_new, inp.data.as_value())),
                     o_wr.en.eq(fold | o_write),
                     self.combined.payload.data.as_value().eq(out_word)]

        # fold sequencer: Dk cycles after each [m, l] beat of a part after the first
        with m.If(fold):
            m.d.sync += fb.eq(fb + 1)
            with m.If(fb == dk - 1):
                m.d.sync += [fold.eq(0), fb.eq(0)]
        with m.If(sc_on):
            m.d.sync += [fold.eq(1), fg.eq(g), fb.eq(0), a_r.eq(fa), b_r.eq(fb_),
                         M_r[g].eq(Mn), L_r[g].eq(L_new)]

        self._elaborate_sequencer(m, SimpleNamespace(
            parts=parts, part=part, g=g, b=b, stat=stat, fb=fb, M_r=M_r, L_r=L_r, outp=outp,
            take=take, first=first, m_i=m_i, l_i=l_i))
        return m

    def _elaborate_sequencer(self, m, s):
        """The job FSM: IDLE takes a ``job`` beat; RECV takes the parts' ``partial`` beats
        (Dk ``o`` beats then one ``[m, l]`` beat per head; the first part initialises M, L);
        TAIL waits for the fold of the last head; OUT emits G·Dk ``combined`` beats, one per
        cycle while ``combined.ready``."""
        G, dk = self.G, self.dk
        parts, part, g, b, stat, fb = s.parts, s.part, s.g, s.b, s.stat, s.fb
        M_r, L_r, take, first, m_i, l_i, inp = s.M_r, s.L_r, s.take, s.first, s.m_i, s.l_i, \
            self.partial.payload
        last_g = g == G - 1
        last_b = b == dk - 1
        m.d.comb += self.busy.eq(1)
        with m.FSM(name="combine"):
            with m.State("IDLE"):
                m.d.comb += [self.busy.eq(0), self.job.ready.eq(1)]
                with m.If(self.job.valid):
                    m.d.sync += [parts.eq(self.job.payload.parts), part.eq(0), g.eq(0),
                                 b.eq(0), stat.eq(0), self.misframed.eq(0)]
                    for i in range(G):
                        m.d.sync += L_r[i].eq(0)
                    with m.If(self.job.payload.parts == 0):
                        m.next = "OUT"
                    with m.Else():
                        m.next = "RECV"
            with m.State("RECV"):
                m.d.comb += self.partial.ready.eq(1)
                with m.If(take):
                    with m.If(inp.last != (stat & last_g)):
                        m.d.sync += self.misframed.eq(1)
                    with m.If(~stat):
                        m.d.sync += b.eq(b + 1)
                        with m.If(last_b):
                            m.d.sync += [b.eq(0), stat.eq(1)]
                    with m.Else():
                        m.d.sync += [stat.eq(0), g.eq(g + 1)]
                        with m.If(first):
                            m.d.sync += [M_r[g].eq(m_i), L_r[g].eq(l_i)]
                        with m.If(last_g):
                            m.d.sync += [g.eq(0), part.eq(part + 1)]
                            with m.If(part == parts - 1):
                                with m.If(first):
                                    m.next = "OUT"
                                with m.Else():
                                    m.next = "TAIL"
            with m.State("TAIL"):              # the fold of the last head
                with m.If(fb == dk - 1):
                    m.next = "OUT"
            with m.State("OUT"):
                m.d.comb += [s.outp.eq(1), self.combined.valid.eq(1),
                             self.combined.payload.last.eq(last_g & last_b)]
                with m.If(self.combined.ready):
                    m.d.sync += b.eq(b + 1)
                    with m.If(last_b):
                        m.d.sync += [b.eq(0), g.eq(g + 1)]
                        with m.If(last_g):
                            m.d.sync += g.eq(0)
                            m.next = "IDLE"
