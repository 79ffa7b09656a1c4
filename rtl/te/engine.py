"""TE decode engine: single-query GQA attention with an online softmax over a K/V stream."""

from __future__ import annotations

from types import SimpleNamespace

from amaranth.hdl import Array, Cat, Module, Mux, Signal, signed, unsigned
from amaranth.lib import stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from tricut.models.te import LOG2E_BITS, NEG_INF, validate_params

from .dequant import KVDequant, bf16_to_f32
from .exp2 import Exp2
from .fadd import FP32Add
from .fmul import FP32Mul
from .fputil import ONE, QNAN
from .layouts import N_BITS, desc_layout, kv_layout, out_layout, q_layout, status_layout
from .recip import FP32Recip

__all__ = ["TEEngine"]


def _lane(word, i):
    return word[32 * i:32 * (i + 1)]


def engine_ports(lanes, kv_dtype):
    """Every TE engine's ports: the ``desc``, ``q``, ``kv``, ``out`` streams, ``status``,
    ``busy`` and ``mac_busy``."""
    return {
        "desc": In(stream.Signature(desc_layout())),
        "q": In(stream.Signature(q_layout(lanes))),
        "kv": In(stream.Signature(kv_layout(lanes, kv_dtype))),
        "out": Out(stream.Signature(out_layout(lanes))),
        "status": Out(status_layout()),
        "busy": Out(1),
        "mac_busy": Out(1),
    }


def qload_state(m, q, q_wr, b, g, last_b, last_g, status, n, zero_out, lanes):
    """Both engines' QLOAD state: take the q beats head-major into ``qmem`` at ``(g, b)``
    (bf16 -> fp32, a non-finite element sets ``nonfinite_in``); after the last one go to
    OUT with ``empty`` and zeros when ``n == 0``, else to K."""
    m.d.comb += q.ready.eq(1)
    qvals = [bf16_to_f32(m, q.payload.data[i], f"q{i}") for i in range(lanes)]
    m.d.comb += [q_wr.data.eq(Cat(*qvals)), q_wr.en.eq(q.valid)]
    with m.If(q.valid):
        with m.If(Cat(*[v[23:31] == 0xFF for v in qvals]).any()):
            m.d.sync += status.nonfinite_in.eq(1)
        m.d.sync += b.eq(b + 1)
        with m.If(last_b):
            m.d.sync += [b.eq(0), g.eq(g + 1)]
            with m.If(last_g):
                m.d.sync += g.eq(0)
                with m.If(n == 0):
                    m.d.sync += [status.empty.eq(1), zero_out.eq(1)]
                    m.next = "OUT"
                with m.Else():
                    m.next = "K"


class TEEngine(wiring.Component):
    """Single-query attention for one (request, layer, KV head) and a GQA group of ``G`` heads.

    Parameters
    ----------
    head_dim : {64, 128, 256}
    G : int, 1..16
        Query heads sharing the KV head; every K/V beat is used by all ``G`` heads.
    lanes : {2, 4, 8, 16}
        fp32 multipliers (and adders) in the lane array; one beat carries ``lanes`` elements.
    kv_dtype : {"bf16", "fp8", "nvfp4"}

    Streams (``amaranth.lib.stream``, payloads in :mod:`.layouts`): ``desc`` and ``q`` and
    ``kv`` in, ``out`` out. ``status`` holds sticky flags, cleared when a descriptor is
    accepted and final once the ``out`` beat with ``last`` has been transferred (they then
    stay until the next descriptor). ``busy`` is high from the descriptor until the engine is
    ready for the next one. ``mac_busy`` is high in every cycle the lane multipliers do
    useful work (a K, R, V or N operation, see ``docs/te.md``).

    Schedule (one lane-array operation per cycle, ``Dk = head_dim / lanes``): load q
    (``G*Dk`` beats); per token: K ops ``for b: for g`` (each K beat held ``G`` cycles), then
    ``for b: for g: R, V`` (rescale ``o *= alpha``, then ``o += p*v``; each V beat held
    ``2G`` cycles); the softmax scalar unit runs for head ``g`` in the cycle after its last K
    op, overlapped with the lane array (for ``G == 1`` its ``alpha`` is bypassed into the
    first R op), so the lane array never waits for it. Output: ``for g: for b`` one beat per
    cycle, ``o * (1/l)`` (or ``o`` then ``[m, l]`` in partial mode). Cycle formula:
    :func:`tricut.models.te.te_cycles`.
    """

    def __init__(self, head_dim=128, G=4, lanes=8, kv_dtype="bf16"):
        validate_params(head_dim, G, lanes, kv_dtype)
        self.head_dim = head_dim
        self.G = G
        self.lanes = lanes
        self.kv_dtype = kv_dtype
        self.dk = head_dim // lanes
        super().__init__(engine_ports(lanes, kv_dtype))

    def elaborate(self, platform):
        m = Module()
        t = self._elaborate_storage(m)

        # ---------------------------------------------------------------- K/V decode
        m.submodules.deq = t.deq = deq = KVDequant(self.lanes, self.kv_dtype)
        m.d.comb += [deq.codes.eq(self.kv.payload.data), deq.scale.eq(self.kv.payload.scale),
                     deq.tensor_scale.eq(t.ts)]

        self._elaborate_lane_array(m, t)
        self._elaborate_softmax(m, t)
        self._elaborate_lane_datapath(m, t)
        self._elaborate_output_beat(m, t)
        self._elaborate_sequencer(m, t)
        return m

    # ---------------------------------------------------------------- state
    def _elaborate_storage(self, m):
        """Registers and memories (read combinationally, written at the clock edge).

        Returns
        -------
        SimpleNamespace
            Descriptor registers ``n``, ``c`` (scale * log2e), ``ts``, ``partial``; the
            schedule position ``tok``, ``b`` (beat of a head), ``g`` (head), ``sub`` (R or V
            op), ``stat`` (partial mode: the ``[m, l]`` beat); ``zero_out``, ``drain``;
            per-head softmax registers ``m_r``, ``l_r``, ``alpha_r``, ``p_r``; the scalar
            unit's ``sc_go``/``sc_head``; memories ``qmem``, ``omem``, ``accmem`` through the
            ports ``q_rd``, ``q_wr``, ``o_rd``, ``o_wr`` (at ``(g, b)``), ``acc_rd``,
            ``acc_wr`` (at ``g``) and ``acc_rd2`` (at ``sc_head``).
        """
        G, L, dk = self.G, self.lanes, self.dk
        dkb = (dk - 1).bit_length()
        gb = max(1, (G - 1).bit_length())
        W = 32 * L
        n = Signal(N_BITS)
        c = Signal(32)          # fmul(scale, log2e)
        ts = Signal(32)
        partial = Signal()
        tok = Signal(N_BITS)
        b = Signal(dkb)
        g = Signal(gb)
        sub = Signal()          # 0: R op, 1: V op
        stat = Signal()         # partial mode: the [m, l] beat of head g
        zero_out = Signal()
        drain = Signal()
        m_r = Array(Signal(32, name=f"m_{i}") for i in range(G))
        l_r = Array(Signal(32, name=f"l_{i}") for i in range(G))
        alpha_r = Array(Signal(32, name=f"alpha_{i}") for i in range(G))
        p_r = Array(Signal(32, name=f"p_{i}") for i in range(G))
        sc_go = Signal()
        sc_head = Signal(gb)

        addr = Signal(gb + dkb)
        m.d.comb += addr.eq(Cat(b, g) if dkb else g)
        m.submodules.qmem = qmem = Memory(shape=unsigned(W), depth=G * dk, init=[])
        m.submodules.omem = omem = Memory(shape=unsigned(W), depth=G * dk, init=[])
        m.submodules.accmem = accmem = Memory(shape=unsigned(W), depth=G, init=[])
        q_rd = qmem.read_port(domain="comb")
        q_wr = qmem.write_port()
        o_rd = omem.read_port(domain="comb")
        o_wr = omem.write_port()
        acc_rd = accmem.read_port(domain="comb")
        acc_rd2 = accmem.read_port(domain="comb")
        acc_wr = accmem.write_port()
        m.d.comb += [q_rd.addr.eq(addr), q_wr.addr.eq(addr), o_rd.addr.eq(addr),
                     o_wr.addr.eq(addr), acc_rd.addr.eq(g), acc_wr.addr.eq(g),
                     acc_rd2.addr.eq(sc_head)]
        return SimpleNamespace(
            W=W, n=n, c=c, ts=ts, partial=partial, tok=tok, b=b, g=g, sub=sub, stat=stat,
            zero_out=zero_out, drain=drain, m_r=m_r, l_r=l_r, alpha_r=alpha_r, p_r=p_r,
            sc_go=sc_go, sc_head=sc_head, q_rd=q_rd, q_wr=q_wr, o_rd=o_rd, o_wr=o_wr,
            acc_rd=acc_rd, acc_rd2=acc_rd2, acc_wr=acc_wr)

    # ---------------------------------------------------------------- lane array
    def _elaborate_lane_array(self, m, t):
        """The ``lanes`` multipliers and adders (``t.muls``, ``t.adds``) and the operation
        of this cycle (``t.op_k``, ``op_r``, ``op_v``, ``op_n``; ``mac_busy`` = any)."""
        L = self.lanes
        muls = [FP32Mul() for _ in range(L)]
        adds = [FP32Add() for _ in range(L)]
        for i in range(L):
            m.submodules[f"lane_mul{i}"] = muls[i]
            m.submodules[f"lane_add{i}"] = adds[i]
        op_k = Signal()
        op_r = Signal()
        op_v = Signal()
        op_n = Signal()
        m.d.comb += self.mac_busy.eq(op_k | op_r | op_v | op_n)
        t.muls, t.adds, t.op_k, t.op_r, t.op_v, t.op_n = muls, adds, op_k, op_r, op_v, op_n

    # ---------------------------------------------------------------- scalar softmax unit
    def _elaborate_softmax(self, m, t):
        """The scalar unit, for head ``sc_head`` in a cycle with ``sc_go``: lane partial
        sums -> pairwise adder tree -> ``s2 = s*c`` -> ``m``, ``alpha``, ``p``, ``l``
        (combinational; the head's registers take them at the clock edge). Adds ``t.mul_c``
        (also scales the descriptor in IDLE) and ``t.alpha`` (for the G = 1 bypass)."""
        L = self.lanes
        sc_go, sc_head, m_r, l_r = t.sc_go, t.sc_head, t.m_r, t.l_r
        # lane partial sums of head sc_head -> pairwise tree -> s2 = s*c -> m, alpha, p, l
        # inputs held at 0 except in the scalar cycle (saves toggling; result unused then)
        tree_in = Signal(t.W)
        m.d.comb += tree_in.eq(Mux(sc_go, t.acc_rd2.data, 0))
        level = [_lane(tree_in, i) for i in range(L)]
        k = 0
        while len(level) > 1:
            nxt = []
            for i in range(0, len(level), 2):
                add = FP32Add()
                m.submodules[f"tree{k}"] = add
                k += 1
                m.d.comb += [add.a.eq(level[i]), add.b.eq(level[i + 1])]
                nxt.append(add.y)
            level = nxt
        score = level[0]
        m.submodules.mul_c = mul_c = FP32Mul()
        m.d.comb += [mul_c.a.eq(score), mul_c.b.eq(t.c)]
        s2 = mul_c.y
        m_old = m_r[sc_head]
        m_new = Signal(32)
        self._fmax(m, m_old, s2, m_new)
        m.submodules.sub_a = sub_a = FP32Add()
        m.submodules.sub_p = sub_p = FP32Add()
        m.submodules.exp_a = exp_a = Exp2()
        m.submodules.exp_p = exp_p = Exp2()
        m.d.comb += [sub_a.a.eq(m_old), sub_a.b.eq(m_new ^ 0x80000000), exp_a.x.eq(sub_a.y),
                     sub_p.a.eq(s2), sub_p.b.eq(m_new ^ 0x80000000), exp_p.x.eq(sub_p.y)]
        alpha = Signal(32)
        p = Signal(32)
        m.d.comb += [
            alpha.eq(Mux((m_old == NEG_INF) & (m_new == NEG_INF), ONE, exp_a.y)),
            p.eq(Mux((s2 == NEG_INF) & (m_new == NEG_INF), ONE, exp_p.y)),
        ]
        m.submodules.mul_l = mul_l = FP32Mul()
        m.submodules.add_l = add_l = FP32Add()
        m.d.comb += [mul_l.a.eq(l_r[sc_head]), mul_l.b.eq(alpha),
                     add_l.a.eq(mul_l.y), add_l.b.eq(p)]
        m.d.sync += sc_go.eq(0)
        with m.If(sc_go):
            m.d.sync += [m_r[sc_head].eq(m_new), l_r[sc_head].eq(add_l.y),
                         t.alpha_r[sc_head].eq(alpha), t.p_r[sc_head].eq(p)]
        t.mul_c, t.alpha = mul_c, alpha

    # ---------------------------------------------------------------- lane datapath
    def _elaborate_lane_datapath(self, m, t):
        """Operands of the lane array for the operation of this cycle and the results
        written back (``acc``/``o`` read-modify-write completes in the cycle); the final
        reciprocal ``t.recip`` of ``l[g]`` (enabled by ``t.recip_en`` in the output phase)."""
        L = self.lanes
        g, sc_go, sc_head, deq = t.g, t.sc_go, t.sc_head, t.deq
        op_k, op_r, op_v = t.op_k, t.op_r, t.op_v
        # ---------------------------------------------------------------- final reciprocal
        m.submodules.recip = recip = FP32Recip()
        recip_en = Signal()     # only the output phase needs 1/l (also keeps it from toggling)
        m.d.comb += recip.x.eq(Mux(recip_en, t.l_r[g], ONE))

        # alpha of head g; bypassed from the scalar unit in the cycle it is computed (only
        # happens for G == 1, where the first R op directly follows the head's last K op)
        alpha_g = Signal(32)
        m.d.comb += alpha_g.eq(Mux(sc_go & (sc_head == g), t.alpha, t.alpha_r[g]))
        o_word = t.o_rd.data
        q_word = t.q_rd.data
        acc_word = t.acc_rd.data
        acc_new = Signal(t.W)
        o_new = Signal(t.W)
        for i in range(L):
            mul, add = t.muls[i], t.adds[i]
            with m.If(op_k):
                m.d.comb += [mul.a.eq(_lane(q_word, i)), mul.b.eq(deq.values[i])]
            with m.Elif(op_r):
                m.d.comb += [mul.a.eq(Mux(t.tok == 0, 0, _lane(o_word, i))), mul.b.eq(alpha_g)]
            with m.Elif(op_v):
                m.d.comb += [mul.a.eq(t.p_r[g]), mul.b.eq(deq.values[i])]
            with m.Else():
                m.d.comb += [mul.a.eq(_lane(o_word, i)), mul.b.eq(recip.y)]
            m.d.comb += [add.a.eq(Mux(op_k, _lane(acc_word, i), _lane(o_word, i))),
                         add.b.eq(mul.y),
                         _lane(acc_new, i).eq(Mux(t.b == 0, mul.y, add.y)),
                         _lane(o_new, i).eq(Mux(op_r, mul.y, add.y))]
        m.d.comb += [t.acc_wr.data.eq(acc_new), t.acc_wr.en.eq(op_k),
                     t.o_wr.data.eq(o_new), t.o_wr.en.eq(op_r | op_v)]
        t.recip_en = recip_en

    # ---------------------------------------------------------------- output beat
    def _elaborate_output_beat(self, m, t):
        """The ``out`` payload of beat ``(g, b)`` (combinational, valid in OUT): ``o * (1/l)``,
        or ``o`` / ``[m, l]`` in partial mode, or zeros (``-inf`` for ``m``) after an empty
        or early-ended context; ``t.out_nonfinite`` flags a non-finite output lane."""
        L = self.lanes
        g, stat, zero_out = t.g, t.stat, t.zero_out
        out_word = Signal(t.W)
        with m.If(stat):
            with m.If(zero_out):
                m.d.comb += _lane(out_word, 0).eq(NEG_INF)
            with m.Else():
                m.d.comb += [_lane(out_word, 0).eq(t.m_r[g]), _lane(out_word, 1).eq(t.l_r[g])]
        with m.Elif(zero_out):
            m.d.comb += out_word.eq(0)
        with m.Elif(t.partial):
            m.d.comb += out_word.eq(t.o_rd.data)
        with m.Else():
            for i in range(L):
                m.d.comb += _lane(out_word, i).eq(t.muls[i].y)
        out_nonfinite = Signal()
        m.d.comb += out_nonfinite.eq(
            ~stat & Cat(*[_lane(out_word, i)[23:31] == 0xFF for i in range(L)]).any())
        m.d.comb += [self.out.payload.data.as_value().eq(out_word)]
        t.out_nonfinite = out_nonfinite

    # ---------------------------------------------------------------- sequencer
    def _elaborate_sequencer(self, m, t):
        """The schedule: IDLE (take a descriptor) -> QLOAD -> per token K then RV -> OUT
        (-> DRAIN after a too-long K/V stream) -> IDLE; one lane-array operation per cycle."""
        G, L, dk = self.G, self.lanes, self.dk
        st = self.status
        n, b, g, sub, stat, tok = t.n, t.b, t.g, t.sub, t.stat, t.tok
        zero_out, drain, partial, deq = t.zero_out, t.drain, t.partial, t.deq
        op_k, op_r, op_v, op_n = t.op_k, t.op_r, t.op_v, t.op_n
        last_g = g == G - 1
        last_b = b == dk - 1

        m.d.comb += self.busy.eq(1)
        with m.FSM(name="te"):
            with m.State("IDLE"):
                m.d.comb += [self.busy.eq(0), self.desc.ready.eq(1)]
                m.d.comb += [t.mul_c.a.eq(self.desc.payload.scale), t.mul_c.b.eq(LOG2E_BITS)]
                with m.If(self.desc.valid):
                    m.d.sync += [n.eq(self.desc.payload.n), t.c.eq(t.mul_c.y),
                                 t.ts.eq(self.desc.payload.tensor_scale),
                                 partial.eq(self.desc.payload.partial),
                                 st.as_value().eq(0), zero_out.eq(0), drain.eq(0),
                                 b.eq(0), g.eq(0), sub.eq(0), stat.eq(0), tok.eq(0)]
                    for i in range(G):
                        m.d.sync += [t.m_r[i].eq(NEG_INF), t.l_r[i].eq(0)]
                    m.next = "QLOAD"
            with m.State("QLOAD"):
                qload_state(m, self.q, t.q_wr, b, g, last_b, last_g, st, n, zero_out, L)
            with m.State("K"):
                m.d.comb += [op_k.eq(self.kv.valid), self.kv.ready.eq(last_g)]
                with m.If(op_k):
                    with m.If(last_b):
                        m.d.sync += [t.sc_go.eq(1), t.sc_head.eq(g)]
                    m.d.sync += g.eq(g + 1)
                    with m.If(last_g):
                        m.d.sync += [g.eq(0), b.eq(b + 1)]
                        with m.If(deq.nonfinite):
                            m.d.sync += st.nonfinite_in.eq(1)
                        with m.If(self.kv.payload.last):
                            m.d.sync += [st.early_end.eq(1), zero_out.eq(1), g.eq(0), b.eq(0)]
                            m.next = "OUT"
                        with m.Elif(last_b):
                            m.d.sync += b.eq(0)
                            m.next = "RV"
            with m.State("RV"):
                m.d.comb += [op_r.eq(~sub), op_v.eq(sub & self.kv.valid),
                             self.kv.ready.eq(sub & last_g)]
                with m.If(op_r):
                    m.d.sync += sub.eq(1)
                with m.If(op_v):
                    m.d.sync += [sub.eq(0), g.eq(g + 1)]
                    with m.If(last_g):
                        m.d.sync += [g.eq(0), b.eq(b + 1)]
                        with m.If(deq.nonfinite):
                            m.d.sync += st.nonfinite_in.eq(1)
                        final_tok = (tok + 1) == n
                        with m.If(last_b & final_tok):
                            m.d.sync += b.eq(0)
                            with m.If(~self.kv.payload.last):
                                m.d.sync += [st.too_long.eq(1), drain.eq(1)]
                            m.next = "OUT"
                        with m.Elif(self.kv.payload.last):
                            m.d.sync += [st.early_end.eq(1), zero_out.eq(1), b.eq(0)]
                            m.next = "OUT"
                        with m.Elif(last_b):
                            m.d.sync += [b.eq(0), tok.eq(tok + 1)]
                            m.next = "K"
            with m.State("OUT"):
                m.d.comb += [self.out.valid.eq(1), t.recip_en.eq(1),
                             self.out.payload.last.eq(last_g & Mux(partial, stat, last_b)),
                             op_n.eq(self.out.ready & ~partial & ~zero_out)]
                with m.If(self.out.ready):
                    with m.If(t.out_nonfinite):
                        m.d.sync += st.nonfinite_out.eq(1)
                    with m.If(stat | (~partial & last_b)):
                        m.d.sync += [stat.eq(0), b.eq(0), g.eq(g + 1)]
                        with m.If(last_g):
                            m.d.sync += g.eq(0)
                            m.next = "IDLE"
                            with m.If(drain):
                                m.next = "DRAIN"
                    with m.Elif(last_b):
                        m.d.sync += stat.eq(1)
                    with m.Else():
                        m.d.sync += b.eq(b + 1)
            with m.State("DRAIN"):
                m.d.comb += self.kv.ready.eq(1)
                with m.If(self.kv.valid & self.kv.payload.last):
                    m.next = "IDLE"

    @staticmethod
    def _fmax(m, a, b, y):
        """``y = b if b > a else a`` (±0 equal); NaN -> canonical NaN."""
        def key(x, name):
            k = Signal(signed(33), name=name)
            mag = Mux(x[23:31] == 0, 0, x[0:31])
            m.d.comb += k.eq(Mux(x[31], -mag, mag))
            return k
        ka, kb = key(a, "max_ka"), key(b, "max_kb")
        nan = ((a[23:31] == 0xFF) & (a[0:23] != 0)) | ((b[23:31] == 0xFF) & (b[0:23] != 0))
        m.d.comb += y.eq(Mux(nan, QNAN, Mux(kb > ka, b, a)))
