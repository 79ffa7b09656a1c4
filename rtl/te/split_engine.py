"""TE decode engine with separate K and V lane arrays and an integer running maximum."""

from __future__ import annotations

from types import SimpleNamespace

from amaranth.hdl import Array, Cat, Module, Mux, Signal, unsigned
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import Out

from tricut.models.te import (KV_CODE_BITS, KV_SIGNIFICAND_BITS, LOG2E_BITS, NEG_INF,
                              te_out_passes, validate_params)

from .ceil_int import CeilInt
from .dequant import KVDequant
from .engine import TEEngine, _lane, engine_ports, qload_state
from .exp2 import Exp2
from .fadd import FP32Add
from .fmul import FP32Mul
from .fputil import ONE
from .layouts import N_BITS, kv_scale_bits
from .pow2scale import Pow2Scale
from .recip import FP32Recip
from .vmul import VLaneMul

__all__ = ["TESplitEngine", "two_array_ports", "output_beat"]


def two_array_ports(lanes, kv_dtype):
    """The ports of the two-array engines (split, pipelined): the serial engine's streams,
    status and busy flags, plus ``k_busy``, ``v_busy`` and ``v_rescale``."""
    return engine_ports(lanes, kv_dtype) | {"k_busy": Out(1), "v_busy": Out(1),
                                            "v_rescale": Out(1)}


def output_beat(m, t, out, lanes):
    """The two-array engines' ``out`` payload of beat ``(t.vg, t.vb)`` in OUT: ``o * (1/l)``
    from the V lanes (``t.v_mul_y``), or ``o`` / ``[m, l]`` in partial mode, or zeros
    (``-inf`` for ``m``) after an empty or early-ended context; sets ``t.out_nonfinite``."""
    g = t.vg
    out_word = Signal(t.W)
    with m.If(t.stat):
        with m.If(t.zero_out):
            m.d.comb += _lane(out_word, 0).eq(NEG_INF)
        with m.Else():
            m.d.comb += [_lane(out_word, 0).eq(t.m_r[g]), _lane(out_word, 1).eq(t.l_r[g])]
    with m.Elif(t.zero_out):
        m.d.comb += out_word.eq(0)
    with m.Elif(t.partial):
        m.d.comb += out_word.eq(t.o_rd.data)
    with m.Else():
        m.d.comb += out_word.eq(Cat(*t.v_mul_y))
    t.out_nonfinite = Signal()
    m.d.comb += t.out_nonfinite.eq(
        ~t.stat & Cat(*[_lane(out_word, i)[23:31] == 0xFF for i in range(lanes)]).any())
    m.d.comb += out.payload.data.as_value().eq(out_word)


class TESplitEngine(wiring.Component):
    """Single-query attention for one (request, layer, KV head), ``engine="split"`` of
    :mod:`tricut.models.te`: a K lane array and a V lane array that work on different tokens.

    Parameters and streams are those of :class:`.engine.TEEngine` (same payloads, beat counts,
    ``last``, status flags, ``busy``); ``mac_busy`` is high when either array works (or the
    output normalises), ``k_busy`` / ``v_busy`` per array, ``v_rescale`` when a V operation
    rescales (``alpha != 1`` after the first token).

    Schedule (``Dk = head_dim / lanes``): load q (``G*Dk`` beats); per token the K array takes
    each K beat for ``G`` cycles (``acc[g] += q[g][b]*k``, ``for b: for g``) and the scalar
    unit runs for head ``g`` the cycle after its last K op; then the ``Dk`` V beats go into the
    V buffer at one per cycle, and the stream moves on to the next token's K beats while the V
    array works through the buffer (``o = pow2scale(o, alpha) + p*v``, ``for b: for g``), one
    op per cycle as soon as the beat is in. ``alpha`` is a power of two (integer maxima), so
    the rescale is an exponent shift inside the V op. The K op that ends a head's next token
    waits until the V array has finished that head (never in an unstalled stream, as
    ``Dk >= 2``). Output as :class:`.engine.TEEngine`, through the V array's multipliers. Cycle
    formula: :func:`tricut.models.te.te_cycles` with ``engine="split"``.
    """

    #: this design's name in ``models.te.ENGINES``
    ENGINE = "split"

    def __init__(self, head_dim=128, G=4, lanes=8, kv_dtype="bf16"):
        validate_params(head_dim, G, lanes, kv_dtype, self.ENGINE)
        self.head_dim = head_dim
        self.G = G
        self.lanes = lanes
        self.kv_dtype = kv_dtype
        self.dk = head_dim // lanes
        #: V lanes of 24 x 8 bits, the output's ``o * (1/l)`` in three passes (bf16, fp8 V);
        #: NVFP4 values have full significands: fp32 multipliers, one pass
        self.three_pass = te_out_passes(kv_dtype, self.ENGINE) == 3
        super().__init__(two_array_ports(lanes, kv_dtype))

    def elaborate(self, platform):
        m = Module()
        t = self._elaborate_storage(m)
        self._elaborate_k_array(m, t)
        self._elaborate_softmax(m, t)
        self._elaborate_v_array(m, t)
        output_beat(m, t, self.out, self.lanes)
        self._elaborate_sequencer(m, t)
        return m

    # ---------------------------------------------------------------- state
    def _elaborate_storage(self, m):
        """Registers and memories (read combinationally, written at the clock edge): the
        descriptor's ``n``, ``c``, ``ts``, ``partial``; the stream's token ``tok``; the K
        array's position ``kb``/``kg`` (also the q-load counters); the V array's position
        ``vb``/``vg`` (also the output counters), ``vcount`` (V beats of its token in the
        buffer), ``v_run``, ``v_first`` (its token is token 0); per head the score
        accumulator ``acc_r`` and the softmax registers; memories ``qmem`` (at ``kg, kb``),
        ``omem`` (at ``vg, vb``) and ``vbuf`` (raw V beats, written at ``vcount``, read at
        ``vb``)."""
        G, L, dk = self.G, self.lanes, self.dk
        dkb = (dk - 1).bit_length()
        gb = max(1, (G - 1).bit_length())
        W = 32 * L
        raw_bits = KV_CODE_BITS[self.kv_dtype] * L + kv_scale_bits(L)
        t = SimpleNamespace(W=W, dkb=dkb, raw_bits=raw_bits)
        t.n, t.c, t.ts, t.partial = Signal(N_BITS), Signal(32), Signal(32), Signal()
        t.tok = Signal(N_BITS)
        t.kb, t.kg = Signal(dkb), Signal(gb)
        t.vb, t.vg = Signal(dkb), Signal(gb)
        t.vcount = Signal(dkb + 1)
        t.v_run, t.v_first = Signal(), Signal()
        t.stat, t.zero_out, t.drain = Signal(), Signal(), Signal()
        t.m_r = Array(Signal(32, name=f"m_{i}") for i in range(G))
        t.l_r = Array(Signal(32, name=f"l_{i}") for i in range(G))
        t.alpha_r = Array(Signal(32, name=f"alpha_{i}") for i in range(G))
        t.p_r = Array(Signal(32, name=f"p_{i}") for i in range(G))
        t.sc_go, t.sc_head = Signal(), Signal(gb)
        m.submodules.qmem = qmem = Memory(shape=unsigned(W), depth=G * dk, init=[])
        m.submodules.omem = omem = Memory(shape=unsigned(W), depth=G * dk, init=[])
        m.submodules.vbuf = vbuf = Memory(shape=unsigned(raw_bits), depth=dk, init=[])
        t.q_rd, t.q_wr = qmem.read_port(domain="comb"), qmem.write_port()
        t.o_rd, t.o_wr = omem.read_port(domain="comb"), omem.write_port()
        t.acc_r = Array(Signal(32, name=f"acc_{i}") for i in range(G))
        t.vb_rd, t.vb_wr = vbuf.read_port(domain="comb"), vbuf.write_port()
        k_addr, v_addr = Cat(t.kb, t.kg), Cat(t.vb, t.vg)
        m.d.comb += [t.q_rd.addr.eq(k_addr), t.q_wr.addr.eq(k_addr),
                     t.o_rd.addr.eq(v_addr), t.o_wr.addr.eq(v_addr),
                     t.vb_rd.addr.eq(t.vb), t.vb_wr.addr.eq(t.vcount[:dkb])]
        return t

    # ---------------------------------------------------------------- K array
    def _elaborate_k_array(self, m, t):
        """On the stream's K beat (``t.op_k``): the ``lanes`` products ``q[g][b] * k`` (narrow
        multipliers, 8 x 8 for bf16 keys, 8 x 4 for E4M3) through a pairwise adder tree, then ``acc[g] = tree`` (beat 0) or ``acc[g] + tree``; the K
        decoder ``t.deq_k`` also flags non-finite V beats as they arrive."""
        L = self.lanes
        m.submodules.deq_k = deq = KVDequant(L, self.kv_dtype)
        m.d.comb += [deq.codes.eq(self.kv.payload.data), deq.scale.eq(self.kv.payload.scale),
                     deq.tensor_scale.eq(t.ts)]
        t.deq_k, t.op_k = deq, Signal()
        kbits = KV_SIGNIFICAND_BITS[self.kv_dtype]     # q is bf16: 8 bits, exact products
        level = []
        for i in range(L):
            m.submodules[f"k_mul{i}"] = mul = FP32Mul(a_bits=8, b_bits=kbits)
            m.d.comb += [mul.a.eq(_lane(t.q_rd.data, i)), mul.b.eq(deq.values[i])]
            level.append(mul.y)
        k = 0
        while len(level) > 1:
            nxt = []
            for i in range(0, len(level), 2):
                m.submodules[f"tree{k}"] = add = FP32Add()
                k += 1
                m.d.comb += [add.a.eq(level[i]), add.b.eq(level[i + 1])]
                nxt.append(add.y)
            level = nxt
        m.submodules.k_acc = acc = FP32Add()
        m.d.comb += [acc.a.eq(t.acc_r[t.kg]), acc.b.eq(level[0]), self.k_busy.eq(t.op_k)]
        with m.If(t.op_k):
            m.d.sync += t.acc_r[t.kg].eq(Mux(t.kb == 0, level[0], acc.y))

    # ---------------------------------------------------------------- scalar softmax unit
    def _elaborate_softmax(self, m, t):
        """For head ``sc_head`` in a cycle with ``sc_go``: ``s2 = acc*c`` -> ``m' = fmax(m,
        ceil_int(s2))``, ``alpha``, ``p``, ``l' = pow2scale(l, alpha) + p`` (registered at the
        clock edge). ``t.mul_c`` also scales the descriptor in IDLE."""
        sc_head = t.sc_head
        m.submodules.mul_c = mul_c = FP32Mul()
        m.d.comb += [mul_c.a.eq(Mux(t.sc_go, t.acc_r[sc_head], 0)), mul_c.b.eq(t.c)]
        s2 = mul_c.y
        m.submodules.ceil = ceil = CeilInt()
        m.d.comb += ceil.x.eq(s2)
        m_old, m_new = t.m_r[sc_head], Signal(32)
        TEEngine._fmax(m, m_old, ceil.y, m_new)
        m.submodules.sub_a = sub_a = FP32Add()
        m.submodules.sub_p = sub_p = FP32Add()
        m.submodules.exp_a = exp_a = Exp2()
        m.submodules.exp_p = exp_p = Exp2()
        m.d.comb += [sub_a.a.eq(m_old), sub_a.b.eq(m_new ^ 0x80000000), exp_a.x.eq(sub_a.y),
                     sub_p.a.eq(s2), sub_p.b.eq(m_new ^ 0x80000000), exp_p.x.eq(sub_p.y)]
        alpha, p = Signal(32), Signal(32)
        m.d.comb += [
            alpha.eq(Mux((m_old == NEG_INF) & (m_new == NEG_INF), ONE, exp_a.y)),
            p.eq(Mux((s2 == NEG_INF) & (m_new == NEG_INF), ONE, exp_p.y)),
        ]
        m.submodules.scale_l = scale_l = Pow2Scale()
        m.submodules.add_l = add_l = FP32Add()
        m.d.comb += [scale_l.a.eq(t.l_r[sc_head]), scale_l.p.eq(alpha),
                     add_l.a.eq(scale_l.y), add_l.b.eq(p)]
        m.d.sync += t.sc_go.eq(0)
        with m.If(t.sc_go):
            m.d.sync += [m_old.eq(m_new), t.l_r[sc_head].eq(add_l.y),
                         t.alpha_r[sc_head].eq(alpha), t.p_r[sc_head].eq(p)]
        t.mul_c = mul_c

    # ---------------------------------------------------------------- V array
    def _elaborate_v_array(self, m, t):
        """``o[g][b] = pow2scale(o, alpha[g]) + p[g]*v`` from the V buffer (``t.op_v``, issued
        here whenever the beat is in), and the output's ``o * (1/l)`` on the same multipliers
        (``t.op_n``; ``t.recip`` of ``l[vg]``, enabled by ``t.recip_en``)."""
        G, L, dk = self.G, self.lanes, self.dk
        codes_bits = KV_CODE_BITS[self.kv_dtype] * L
        m.submodules.deq_v = deq = KVDequant(L, self.kv_dtype)
        m.d.comb += [deq.codes.as_value().eq(t.vb_rd.data[:codes_bits]),
                     deq.scale.eq(t.vb_rd.data[codes_bits:]), deq.tensor_scale.eq(t.ts)]
        m.submodules.recip = recip = FP32Recip()
        t.recip_en, t.op_v, t.op_n = Signal(), Signal(), Signal()
        t.opass, t.out_three = Signal(2), Signal()      # the output's pass (three-pass lanes)
        m.d.comb += recip.x.eq(Mux(t.recip_en, t.l_r[t.vg], ONE))
        m.d.comb += t.op_v.eq(t.v_run & (t.vb < t.vcount))
        alpha_g = t.alpha_r[t.vg]
        t.v_mul_y = []
        o_new = Signal(t.W)
        for i in range(L):
            if self.three_pass:
                m.submodules[f"v_mul{i}"] = mul = VLaneMul()
                m.d.comb += [mul.three.eq(t.out_three), mul.pass_.eq(t.opass),
                             mul.en.eq(t.out_three & (t.opass != 2))]
            else:
                m.submodules[f"v_mul{i}"] = mul = FP32Mul()
            m.submodules[f"v_scale{i}"] = scale = Pow2Scale()
            m.submodules[f"v_add{i}"] = add = FP32Add()
            with m.If(t.recip_en):
                m.d.comb += [mul.a.eq(_lane(t.o_rd.data, i)), mul.b.eq(recip.y)]
            with m.Else():
                m.d.comb += [mul.a.eq(t.p_r[t.vg]), mul.b.eq(deq.values[i])]
            m.d.comb += [scale.a.eq(Mux(t.v_first, 0, _lane(t.o_rd.data, i))),
                         scale.p.eq(alpha_g), add.a.eq(scale.y), add.b.eq(mul.y),
                         _lane(o_new, i).eq(add.y)]
            t.v_mul_y.append(mul.y)
        m.d.comb += [t.o_wr.data.eq(o_new), t.o_wr.en.eq(t.op_v), self.v_busy.eq(t.op_v),
                     self.v_rescale.eq(t.op_v & ~t.v_first & (alpha_g != ONE)),
                     self.mac_busy.eq(t.op_k | t.op_v | t.op_n)]
        t.v_last_op = Signal()
        m.d.comb += t.v_last_op.eq(t.op_v & (t.vg == G - 1) & (t.vb == dk - 1))
        with m.If(t.op_v):
            m.d.sync += t.vg.eq(t.vg + 1)
            with m.If(t.vg == G - 1):
                m.d.sync += [t.vg.eq(0), t.vb.eq(t.vb + 1)]
                with m.If(t.vb == dk - 1):
                    m.d.sync += [t.vb.eq(0), t.v_run.eq(0), t.vcount.eq(0)]

    # ---------------------------------------------------------------- sequencer
    def _elaborate_sequencer(self, m, t):
        """IDLE (take a descriptor) -> QLOAD -> per token K then V (into the buffer) -> VWAIT
        (the V array finishes) -> OUT (-> DRAIN after a too-long stream) -> IDLE."""
        G, L, dk = self.G, self.lanes, self.dk
        st, kv = self.status, self.kv
        kb, kg, vb, vg = t.kb, t.kg, t.vb, t.vg
        last_kg, last_kb = kg == G - 1, kb == dk - 1

        def to_out(zero):
            m.d.sync += [kb.eq(0), kg.eq(0), vb.eq(0), vg.eq(0), t.stat.eq(0)]
            if zero:
                m.d.sync += [st.early_end.eq(1), t.zero_out.eq(1), t.v_run.eq(0),
                             t.vcount.eq(0)]
            m.next = "OUT"

        m.d.comb += self.busy.eq(1)
        with m.FSM(name="te"):
            with m.State("IDLE"):
                m.d.comb += [self.busy.eq(0), self.desc.ready.eq(1),
                             t.mul_c.a.eq(self.desc.payload.scale), t.mul_c.b.eq(LOG2E_BITS)]
                with m.If(self.desc.valid):
                    m.d.sync += [t.n.eq(self.desc.payload.n), t.c.eq(t.mul_c.y),
                                 t.ts.eq(self.desc.payload.tensor_scale),
                                 t.partial.eq(self.desc.payload.partial),
                                 st.as_value().eq(0), t.zero_out.eq(0), t.drain.eq(0),
                                 kb.eq(0), kg.eq(0), vb.eq(0), vg.eq(0), t.vcount.eq(0),
                                 t.v_run.eq(0), t.stat.eq(0), t.tok.eq(0)]
                    for i in range(G):
                        m.d.sync += [t.m_r[i].eq(NEG_INF), t.l_r[i].eq(0)]
                    m.next = "QLOAD"
            with m.State("QLOAD"):
                qload_state(m, self.q, t.q_wr, kb, kg, last_kb, last_kg, st, t.n, t.zero_out, L)
            with m.State("K"):
                # the op that ends head kg of this token waits for the V array to be past it
                v_past = ~t.v_run | ((vb == dk - 1) & (vg > kg))
                hold = last_kb & ~v_past
                m.d.comb += [t.op_k.eq(kv.valid & ~hold), kv.ready.eq(last_kg & ~hold)]
                with m.If(t.op_k):
                    with m.If(last_kb):
                        m.d.sync += [t.sc_go.eq(1), t.sc_head.eq(kg)]
                    m.d.sync += kg.eq(kg + 1)
                    with m.If(last_kg):
                        m.d.sync += [kg.eq(0), kb.eq(kb + 1)]
                        with m.If(t.deq_k.nonfinite):
                            m.d.sync += st.nonfinite_in.eq(1)
                        with m.If(kv.payload.last):
                            to_out(zero=True)
                        with m.Elif(last_kb):
                            m.d.sync += kb.eq(0)
                            m.next = "V"
            with m.State("V"):
                m.d.comb += [kv.ready.eq(1), t.vb_wr.en.eq(kv.valid),
                             t.vb_wr.data.eq(Cat(kv.payload.data.as_value(), kv.payload.scale))]
                last_vbeat = t.vcount == dk - 1
                with m.If(kv.valid):
                    m.d.sync += [t.vcount.eq(t.vcount + 1), t.v_run.eq(1)]
                    with m.If(t.vcount == 0):
                        m.d.sync += t.v_first.eq(t.tok == 0)
                    with m.If(t.deq_k.nonfinite):
                        m.d.sync += st.nonfinite_in.eq(1)
                    final_tok = (t.tok + 1) == t.n
                    with m.If(last_vbeat & final_tok):
                        with m.If(~kv.payload.last):
                            m.d.sync += [st.too_long.eq(1), t.drain.eq(1)]
                        m.next = "VWAIT"
                    with m.Elif(kv.payload.last):
                        to_out(zero=True)
                    with m.Elif(last_vbeat):
                        m.d.sync += t.tok.eq(t.tok + 1)
                        m.next = "K"
            with m.State("VWAIT"):
                with m.If(t.v_last_op):
                    to_out(zero=False)
            with m.State("OUT"):
                computing = ~t.partial & ~t.zero_out
                if self.three_pass:     # o * (1/l) in passes 0, 1, 2; the beat is out in 2
                    m.d.comb += [t.out_three.eq(computing),
                                 self.out.valid.eq(~computing | (t.opass == 2)),
                                 t.op_n.eq(computing & ((t.opass != 2) | self.out.ready))]
                    with m.If(computing & (t.opass != 2)):
                        m.d.sync += t.opass.eq(t.opass + 1)
                else:
                    m.d.comb += [self.out.valid.eq(1), t.op_n.eq(computing & self.out.ready)]
                m.d.comb += [t.recip_en.eq(1),
                             self.out.payload.last.eq((vg == G - 1) & Mux(t.partial, t.stat,
                                                                          vb == dk - 1))]
                with m.If(self.out.ready & self.out.valid):
                    m.d.sync += t.opass.eq(0)
                    with m.If(t.out_nonfinite):
                        m.d.sync += st.nonfinite_out.eq(1)
                    with m.If(t.stat | (~t.partial & (vb == dk - 1))):
                        m.d.sync += [t.stat.eq(0), vb.eq(0), vg.eq(vg + 1)]
                        with m.If(vg == G - 1):
                            m.d.sync += vg.eq(0)
                            m.next = "IDLE"
                            with m.If(t.drain):
                                m.next = "DRAIN"
                    with m.Elif(vb == dk - 1):
                        m.d.sync += t.stat.eq(1)
                    with m.Else():
                        m.d.sync += vb.eq(vb + 1)
            with m.State("DRAIN"):
                m.d.comb += kv.ready.eq(1)
                with m.If(kv.valid & kv.payload.last):
                    m.next = "IDLE"
