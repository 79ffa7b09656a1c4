"""TE decode engine with separate K and V lane arrays and pipelined arithmetic."""

from __future__ import annotations

from types import SimpleNamespace

from amaranth.hdl import Array, Cat, Const, Mux, Signal, unsigned
from amaranth.lib.memory import Memory

from tricut.models.te import (KV_CODE_BITS, KV_SIGNIFICAND_BITS, LOG2E_BITS, NEG_INF,
                              PIPE_STAGES, te_out_passes, te_pipe_timing)

from .ceil_int import CeilInt
from .dequant import KVDequant
from .engine import TEEngine, _lane, qload_state
from .exp2 import Exp2
from .fadd import FP32Add
from .fmul import FP32Mul
from .fputil import ONE
from .layouts import N_BITS, kv_scale_bits
from .pow2scale import Pow2Scale
from .recip import FP32Recip
from .split_engine import TESplitEngine
from .vmul import VLaneMul

__all__ = ["TEPipelinedEngine"]


def _delay(m, name, fields, cycles, flush):
    """``fields`` (name -> value) through ``cycles`` registers; ``valid`` is cleared by
    ``flush``, the rest are reset-less. Returns the last stage's fields and every stage's
    (``stages[i]``: delayed by ``i + 1``)."""
    cur, stages = dict(fields), []
    for i in range(cycles):
        nxt = {}
        for key, v in cur.items():
            r = Signal(v.shape(), name=f"{name}{i + 1}_{key}", reset_less=key != "valid")
            m.d.sync += r.eq(v & ~flush if key == "valid" else v)
            nxt[key] = r
        cur = nxt
        stages.append(SimpleNamespace(**cur))
    return SimpleNamespace(**cur), stages


class TEPipelinedEngine(TESplitEngine):
    """Single-query attention for one (request, layer, KV head), ``engine="pipelined"`` of
    :mod:`tricut.models.te`: the split engine's arithmetic (integer running maximum, K tree
    then per-head accumulator, rescale fused into the V op) with registered stages in its
    arithmetic units (:data:`tricut.models.te.PIPE_STAGES`).

    A :class:`.split_engine.TESplitEngine` (its parameters, streams, status flags, activity
    outputs and ``elaborate`` order) whose storage, arrays, scalar unit and sequencer are
    replaced (``v_rescale`` is high at the rescaling ``o`` update, ``v_update`` cycles after the V
    op's issue; the counts are the same).

    Pipelines (latencies: :func:`tricut.models.te.te_pipe_timing`):

    * K: ``q`` (``qmem`` at ``kg, kb``) and the dequantised K beat into the lane
      multipliers, then the adder tree (registered stages), then the per-head accumulator
      (one combinational add: ``acc[g]`` is a loop);
    * scalar, per head: ``s2 = acc*c`` (pipelined) -> ``m' = fmax(m, ceil_int(s2))`` (the
      ``m`` loop, one stage) -> the two subtractions and ``exp2`` (pipelined) -> ``p``,
      ``alpha`` into token slot ``t mod slots``, ``l' = pow2scale(l, alpha) + p`` (the ``l``
      loop, one stage);
    * V: the V beat (a synchronous read of the V buffer, ``slots`` tokens deep) is dequantised
      into the lane multipliers with the slot's ``p`` (registered output), then ``o =
      pow2scale(o, alpha) + p*v`` with the slot's ``alpha`` (the ``o`` loop, one stage).
      ``alpha`` is kept as its exponent byte: with integer maxima it is ``2**-k``, 0, 1 or
      NaN, all with a zero significand but NaN's quiet bit.

    Hazards: a V op waits for its beat and for its head's ``p`` of its token; the K op that
    ends a token's head waits until the V array has finished token ``t - slots`` (whose slot
    the scalar unit will overwrite); the loops revisit an address at most once a cycle. In an
    unstalled stream nothing waits, so the cycles follow :func:`tricut.models.te.te_cycles`.
    Output: per head wait for ``1/l`` (the reciprocal's stages), then per beat the V lanes'
    passes plus their latency; partial and zero outputs take one cycle per beat.
    """

    ENGINE = "pipelined"

    def __init__(self, head_dim=128, G=4, lanes=8, kv_dtype="bf16"):
        super().__init__(head_dim, G, lanes, kv_dtype)
        self.timing = te_pipe_timing(head_dim, G, lanes, kv_dtype)

    # ---------------------------------------------------------------- state
    def _elaborate_storage(self, m):
        """Registers and memories: the descriptor's ``n``, ``c``, ``ts``, ``partial``; the
        stream's token ``tok`` (K and V beats, counts every token written) with ``kb``/``kg``
        (K position, also the q-load counters) and ``vcount`` (V beats of ``tok`` written);
        the V array's token ``vtok`` and position ``vb``/``vg`` (also the output counters);
        per head ``acc``, ``m``, ``l``; per (slot, head) ``p``, ``alpha`` (exponent byte),
        ``p_ready``;
        ``qmem`` (at ``kg, kb``) and ``omem``, read combinationally, and ``vbuf`` (``slots *
        Dk`` raw V beats, synchronous read)."""
        G, L, dk, S = self.G, self.lanes, self.dk, self.timing.slots
        dkb = (dk - 1).bit_length()
        gb = max(1, (G - 1).bit_length())
        sb = (S - 1).bit_length()
        W = 32 * L
        raw_bits = KV_CODE_BITS[self.kv_dtype] * L + kv_scale_bits(L)
        t = SimpleNamespace(W=W, dkb=dkb, gb=gb, sb=sb, raw_bits=raw_bits)
        t.n, t.c, t.ts, t.partial = Signal(N_BITS), Signal(32), Signal(32), Signal()
        t.tok, t.vtok = Signal(N_BITS), Signal(N_BITS)
        t.kb, t.kg = Signal(dkb), Signal(gb)
        t.vb, t.vg = Signal(dkb), Signal(gb)
        t.vcount = Signal(dkb)
        t.stat, t.zero_out, t.drain = Signal(), Signal(), Signal()
        t.flush = Signal()
        t.m_r = Array(Signal(32, name=f"m_{i}") for i in range(G))
        t.l_r = Array(Signal(32, name=f"l_{i}") for i in range(G))
        t.acc_r = Array(Signal(32, name=f"acc_{i}") for i in range(G))
        n_slot = S << gb            # index Cat(head, slot)
        t.alpha_r = Array(Signal(8, name=f"alpha_e_{i}") for i in range(n_slot))
        t.p_r = Array(Signal(32, name=f"p_{i}") for i in range(n_slot))
        t.p_ready = Array(Signal(name=f"p_ready_{i}") for i in range(n_slot))
        m.submodules.qmem = qmem = Memory(shape=unsigned(W), depth=G * dk, init=[])
        m.submodules.omem = omem = Memory(shape=unsigned(W), depth=G * dk, init=[])
        m.submodules.vbuf = vbuf = Memory(shape=unsigned(raw_bits), depth=S * dk, init=[])
        t.q_rd, t.q_wr = qmem.read_port(domain="comb"), qmem.write_port()
        t.o_rd, t.o_wr = omem.read_port(domain="comb"), omem.write_port()
        t.vb_rd, t.vb_wr = vbuf.read_port(), vbuf.write_port()
        k_addr = Cat(t.kb, t.kg)
        m.d.comb += [t.q_rd.addr.eq(k_addr), t.q_wr.addr.eq(k_addr),
                     t.vb_rd.addr.eq(Cat(t.vb, t.vtok[:sb])),
                     t.vb_wr.addr.eq(Cat(t.vcount, t.tok[:sb]))]
        return t

    # ---------------------------------------------------------------- K array
    def _elaborate_k_array(self, m, t):
        """``t.op_k`` issues K op ``(kb, kg)``: the beat's products through the tree into
        ``acc[g]``; a head's last beat starts the scalar unit one cycle after its accumulator
        stage. ``t.deq_k`` decodes the stream's beats (K values, and the non-finite flag of
        every K and V beat)."""
        L, dk = self.lanes, self.dk
        m.submodules.deq_k = deq = KVDequant(L, self.kv_dtype)
        m.d.comb += [deq.codes.eq(self.kv.payload.data), deq.scale.eq(self.kv.payload.scale),
                     deq.tensor_scale.eq(t.ts)]
        t.deq_k, t.op_k = deq, Signal()
        kbits = KV_SIGNIFICAND_BITS[self.kv_dtype]     # q is bf16: 8 bits, exact products
        level = []
        for i in range(L):
            m.submodules[f"k_mul{i}"] = mul = FP32Mul(stages=self.timing.k_mul, a_bits=8,
                                                      b_bits=kbits)
            m.d.comb += [mul.a.eq(_lane(t.q_rd.data, i)), mul.b.eq(deq.values[i])]
            level.append(mul.y)
        k = 0
        while len(level) > 1:
            nxt = []
            for i in range(0, len(level), 2):
                m.submodules[f"tree{k}"] = add = FP32Add(stages=PIPE_STAGES["tree_add"])
                k += 1
                m.d.comb += [add.a.eq(level[i]), add.b.eq(level[i + 1])]
                nxt.append(add.y)
            level = nxt
        tag = dict(valid=t.op_k, g=t.kg, first=t.kb == 0, last=t.kb == dk - 1,
                   slot=t.tok[:t.sb] if t.sb else Const(0, 1))
        a, stages = _delay(m, "k", tag, self.timing.k_mul + self.timing.tree, t.flush)
        t.k_valids = [x.valid for x in stages]
        m.submodules.k_acc = acc = FP32Add()
        m.d.comb += [acc.a.eq(t.acc_r[a.g]), acc.b.eq(level[0]), self.k_busy.eq(t.op_k)]
        with m.If(a.valid):
            m.d.sync += t.acc_r[a.g].eq(Mux(a.first, level[0], acc.y))
        t.sc0 = SimpleNamespace(valid=Signal(), h=Signal.like(a.g), slot=Signal.like(a.slot))
        m.d.sync += [t.sc0.valid.eq(a.valid & a.last & ~t.flush),
                     t.sc0.h.eq(a.g), t.sc0.slot.eq(a.slot)]

    # ---------------------------------------------------------------- scalar softmax unit
    def _elaborate_softmax(self, m, t):
        """Per head, from ``t.sc0``: ``s2 = acc*c`` -> ``m' = fmax(m, ceil_int(s2))`` ->
        ``alpha = exp2(m - m')``, ``p = exp2(s2 - m')`` -> ``l' = pow2scale(l, alpha) + p``,
        ``p``/``alpha``/``p_ready`` of (slot, head). ``t.mul_c`` also scales the descriptor
        (``t.c_load`` writes ``c`` when the product arrives)."""
        P = PIPE_STAGES
        sc0 = t.sc0
        m.submodules.mul_c = mul_c = FP32Mul(stages=P["c_mul"])
        t.mul_c, t.c_load = mul_c, Signal()
        m.d.comb += [mul_c.a.eq(t.acc_r[sc0.h]), mul_c.b.eq(t.c)]
        c_arrives, _ = _delay(m, "c_load", dict(valid=t.c_load), P["c_mul"], Const(0, 1))
        with m.If(c_arrives.valid):
            m.d.sync += t.c.eq(mul_c.y)
        s1, stages = _delay(m, "s1", dict(valid=sc0.valid, h=sc0.h, slot=sc0.slot),
                            P["c_mul"], t.flush)
        t.sc_valids = [x.valid for x in stages]
        s2 = mul_c.y
        m.submodules.ceil = ceil = CeilInt()
        m.d.comb += ceil.x.eq(s2)
        m_old, m_new = t.m_r[s1.h], Signal(32)
        TEEngine._fmax(m, m_old, ceil.y, m_new)
        with m.If(s1.valid):
            m.d.sync += m_old.eq(m_new)
        sub_in = SimpleNamespace(**{k: Signal(32, name=f"sub_in_{k}", reset_less=True)
                                    for k in ("m_old", "m_new", "s2")})
        m.d.sync += [sub_in.m_old.eq(m_old), sub_in.m_new.eq(m_new), sub_in.s2.eq(s2)]
        m.submodules.sub_a = sub_a = FP32Add(stages=P["sub"])
        m.submodules.sub_p = sub_p = FP32Add(stages=P["sub"])
        m.submodules.exp_a = exp_a = Exp2(stages=P["exp2"])
        m.submodules.exp_p = exp_p = Exp2(stages=P["exp2"])
        neg_m = sub_in.m_new ^ 0x80000000
        m.d.comb += [sub_a.a.eq(sub_in.m_old), sub_a.b.eq(neg_m), exp_a.x.eq(sub_a.y),
                     sub_p.a.eq(sub_in.s2), sub_p.b.eq(neg_m), exp_p.x.eq(sub_p.y)]
        s3, stages = _delay(m, "s3", dict(
            valid=s1.valid, h=s1.h, slot=s1.slot,
            a_one=(m_old == NEG_INF) & (m_new == NEG_INF),
            p_one=(s2 == NEG_INF) & (m_new == NEG_INF)), 1 + P["sub"] + P["exp2"], t.flush)
        t.sc_valids += [x.valid for x in stages]
        alpha, p = Signal(32), Signal(32)
        m.d.comb += [alpha.eq(Mux(s3.a_one, ONE, exp_a.y)), p.eq(Mux(s3.p_one, ONE, exp_p.y))]
        m.submodules.scale_l = scale_l = Pow2Scale()
        m.submodules.add_l = add_l = FP32Add()
        m.d.comb += [scale_l.a.eq(t.l_r[s3.h]), scale_l.p.eq(alpha),
                     add_l.a.eq(scale_l.y), add_l.b.eq(p)]
        idx = Cat(s3.h, s3.slot) if t.sb else s3.h
        with m.If(s3.valid):
            m.d.sync += [t.l_r[s3.h].eq(add_l.y), t.alpha_r[idx].eq(alpha[23:31]),
                         t.p_r[idx].eq(p),
                         t.p_ready[idx].eq(1)]

    # ---------------------------------------------------------------- V array
    def _elaborate_v_array(self, m, t):
        """``t.op_v`` issues V op ``(vb, vg)`` of token ``vtok`` when its beat is in and its
        head's ``p`` is ready: ``o[g][b] = pow2scale(o, alpha) + p*v`` ``1 + v_mul`` cycles
        later. In OUT the same multipliers take ``o`` and ``1/l`` (``t.out_mode``)."""
        G, L, dk = self.G, self.lanes, self.dk
        codes_bits = KV_CODE_BITS[self.kv_dtype] * L
        idx = Cat(t.vg, t.vtok[:t.sb]) if t.sb else t.vg
        beat_in = (t.vtok != t.tok) | (t.vb < t.vcount)
        t.op_v, t.out_mode = Signal(), Signal()
        m.d.comb += t.op_v.eq(beat_in & t.p_ready[idx] & ~t.out_mode)
        v_first, v_last = t.vtok == 0, (t.vg == G - 1) & (t.vb == dk - 1)
        # the V beat arrives from vbuf's synchronous read, with p, one cycle after issue
        m.submodules.deq_v = deq = KVDequant(L, self.kv_dtype)
        m.d.comb += [deq.codes.as_value().eq(t.vb_rd.data[:codes_bits]),
                     deq.scale.eq(t.vb_rd.data[codes_bits:]), deq.tensor_scale.eq(t.ts)]
        m.submodules.recip = recip = FP32Recip(stages=PIPE_STAGES["recip"])
        t.recip = recip
        t.opass, t.op_n = Signal(2), Signal()
        tag = dict(valid=t.op_v, g=t.vg, b=t.vb, first=v_first,
                   slot=t.vtok[:t.sb] if t.sb else Const(0, 1))
        u, stages = _delay(m, "v", tag, self.timing.v_update, t.flush)
        t.v_valids, v1 = [x.valid for x in stages], stages[0]
        # a slot's p and alpha are rewritten only after the V array has left that token
        p_in = t.p_r[Cat(v1.g, v1.slot) if t.sb else v1.g]
        u_alpha_e = t.alpha_r[Cat(u.g, u.slot) if t.sb else u.g]
        u_alpha = Cat(Const(0, 22), u_alpha_e == 0xFF, u_alpha_e, Const(0, 1))
        t.v_mul_y = []
        o_new = Signal(t.W)
        m.d.comb += t.o_rd.addr.eq(Mux(u.valid, Cat(u.b, u.g), Cat(t.vb, t.vg)))
        for i in range(L):
            if self.three_pass:
                m.submodules[f"v_mul{i}"] = mul = VLaneMul(stages=self.timing.v_mul)
                m.d.comb += [mul.three.eq(t.out_mode), mul.pass_.eq(t.opass),
                             mul.en.eq(t.out_mode & (t.opass != 2))]
            else:
                m.submodules[f"v_mul{i}"] = mul = FP32Mul(stages=self.timing.v_mul)
            m.submodules[f"v_scale{i}"] = scale = Pow2Scale()
            m.submodules[f"v_add{i}"] = add = FP32Add()
            with m.If(t.out_mode):
                m.d.comb += [mul.a.eq(_lane(t.o_rd.data, i)), mul.b.eq(recip.y)]
            with m.Else():
                m.d.comb += [mul.a.eq(p_in), mul.b.eq(deq.values[i])]
            m.d.comb += [scale.a.eq(Mux(u.first, 0, _lane(t.o_rd.data, i))),
                         scale.p.eq(u_alpha), add.a.eq(scale.y), add.b.eq(mul.y),
                         _lane(o_new, i).eq(add.y)]
            t.v_mul_y.append(mul.y)
        m.d.comb += [t.o_wr.addr.eq(Cat(u.b, u.g)), t.o_wr.data.eq(o_new),
                     t.o_wr.en.eq(u.valid), self.v_busy.eq(t.op_v),
                     self.v_rescale.eq(u.valid & ~u.first & (u_alpha != ONE)),
                     self.mac_busy.eq(t.op_k | t.op_v | t.op_n)]
        with m.If(t.op_v):
            m.d.sync += t.vg.eq(t.vg + 1)
            with m.If(t.vb == dk - 1):
                m.d.sync += t.p_ready[idx].eq(0)
            with m.If(t.vg == G - 1):
                m.d.sync += [t.vg.eq(0), t.vb.eq(t.vb + 1)]
                with m.If(v_last):
                    m.d.sync += [t.vb.eq(0), t.vtok.eq(t.vtok + 1)]
        t.pipes_busy = Cat(*t.k_valids, t.sc0.valid, *t.sc_valids, *t.v_valids).any()

    # ---------------------------------------------------------------- sequencer
    def _elaborate_sequencer(self, m, t):
        """IDLE (take a descriptor) -> QLOAD -> per token K then V (into the V buffer) ->
        VWAIT (the pipelines empty) -> OUT (-> DRAIN after a too-long stream) -> IDLE."""
        G, L, dk, S = self.G, self.lanes, self.dk, self.timing.slots
        st, kv = self.status, self.kv
        kb, kg, vb, vg = t.kb, t.kg, t.vb, t.vg
        last_kg, last_kb = kg == G - 1, kb == dk - 1

        def to_out(zero):
            m.d.sync += [kb.eq(0), kg.eq(0), vb.eq(0), vg.eq(0), t.stat.eq(0), t.opass.eq(0),
                         ocyc.eq(0)]
            if zero:
                m.d.sync += [st.early_end.eq(1), t.zero_out.eq(1)]
                m.d.comb += t.flush.eq(1)
            m.next = "OUT"

        ocyc = Signal(range(self.timing.recip + self.timing.out_beat + 1))
        m.d.comb += self.busy.eq(1)
        with m.FSM(name="te"):
            with m.State("IDLE"):
                m.d.comb += [self.busy.eq(0), self.desc.ready.eq(1),
                             t.mul_c.a.eq(self.desc.payload.scale), t.mul_c.b.eq(LOG2E_BITS)]
                with m.If(self.desc.valid):
                    m.d.comb += [t.c_load.eq(1), t.flush.eq(1)]
                    m.d.sync += [t.n.eq(self.desc.payload.n),
                                 t.ts.eq(self.desc.payload.tensor_scale),
                                 t.partial.eq(self.desc.payload.partial),
                                 st.as_value().eq(0), t.zero_out.eq(0), t.drain.eq(0),
                                 kb.eq(0), kg.eq(0), t.stat.eq(0)]
                    for i in range(G):
                        m.d.sync += [t.m_r[i].eq(NEG_INF), t.l_r[i].eq(0)]
                    m.next = "QLOAD"
            with m.State("QLOAD"):
                qload_state(m, self.q, t.q_wr, kb, kg, last_kb, last_kg, st, t.n, t.zero_out, L)
            with m.State("K"):
                # a head's last K op starts the scalar unit, which will write slot tok % S:
                # the V array must be done with token tok - S
                hold = last_kb & ((t.tok - t.vtok)[:N_BITS] >= S)
                m.d.comb += [t.op_k.eq(kv.valid & ~hold), kv.ready.eq(last_kg & ~hold)]
                with m.If(t.op_k):
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
                    m.d.sync += t.vcount.eq(t.vcount + 1)
                    with m.If(t.deq_k.nonfinite):
                        m.d.sync += st.nonfinite_in.eq(1)
                    with m.If(last_vbeat):
                        m.d.sync += [t.vcount.eq(0), t.tok.eq(t.tok + 1)]
                    final_tok = (t.tok + 1) == t.n
                    with m.If(last_vbeat & final_tok):
                        with m.If(~kv.payload.last):
                            m.d.sync += [st.too_long.eq(1), t.drain.eq(1)]
                        m.next = "VWAIT"
                    with m.Elif(kv.payload.last):
                        to_out(zero=True)
                    with m.Elif(last_vbeat):
                        m.next = "K"
            with m.State("VWAIT"):
                with m.If((t.vtok == t.tok) & ~t.pipes_busy):
                    to_out(zero=False)
            with m.State("OUT"):
                self._out_state(m, t, ocyc)
            with m.State("DRAIN"):
                m.d.comb += kv.ready.eq(1)
                with m.If(kv.valid & kv.payload.last):
                    m.next = "IDLE"
        with m.If(t.flush):           # after every other write: a flush wins
            m.d.sync += [t.tok.eq(0), t.vtok.eq(0), t.vcount.eq(0), vb.eq(0), vg.eq(0)]
            for r in t.p_ready:
                m.d.sync += r.eq(0)

    def _out_state(self, m, t, ocyc):
        """OUT: a normalised beat counts ``ocyc`` from 0 (from ``recip`` at a head's first
        beat, while ``1/l`` of that head comes out of the reciprocal): the V lanes' passes,
        then the product after their latency; ``out`` is valid at the last count and the
        inputs are held until it is taken. Partial and zero beats are valid at once."""
        G, dk, tm = self.G, self.dk, self.timing
        st, vb, vg = self.status, t.vb, t.vg
        computing = ~t.partial & ~t.zero_out
        start = Mux(vb == 0, tm.recip, 0)
        ready_at = start + tm.out_beat - 1
        m.d.comb += [t.out_mode.eq(computing), t.recip.x.eq(t.l_r[vg])]
        with m.If(computing):
            passes = te_out_passes(self.kv_dtype, "pipelined")
            m.d.comb += [self.out.valid.eq(ocyc == ready_at),
                         t.op_n.eq((ocyc >= start) & (ocyc < start + passes))]
            with m.If(ocyc != ready_at):
                m.d.sync += ocyc.eq(ocyc + 1)
            if self.three_pass:     # passes 0, 1, 2 from ``start``; pass 2 held
                with m.If((ocyc >= start) & (t.opass != 2)):
                    m.d.sync += t.opass.eq(t.opass + 1)
        with m.Else():
            m.d.comb += self.out.valid.eq(1)
        m.d.comb += self.out.payload.last.eq((vg == G - 1) & Mux(t.partial, t.stat,
                                                                vb == dk - 1))
        with m.If(self.out.ready & self.out.valid):
            m.d.sync += [t.opass.eq(0), ocyc.eq(0)]
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
