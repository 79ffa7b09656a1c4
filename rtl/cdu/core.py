"""CDU core: tag lookup, miss allocation and victim choice, MSHRs with HBM request/response
streams and bounded retry, in-order ready stream to the TE, counters as registers."""

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from tricut.models.cdu import LAYER_STRIDE, REQ_STRIDE, default_reserve

from .layouts import (KIND, RESULT, Widths, hbm_req_layout, hbm_resp_layout, op_layout,
                      ready_layout, status_layout, txn_layout)

__all__ = ["CDUCoreRTL", "COUNTERS", "check_params"]

#: Counter registers, in register-map order (index = register number, 32 bits each).
COUNTERS = (
    "accesses", "hits", "hits_reuse", "hits_prefetched", "misses", "misses_alloc",
    "misses_bypass", "prefetch_requests", "prefetch_issued", "prefetch_redundant",
    "prefetch_dropped", "prefetch_useless", "writes", "write_hits", "write_allocs",
    "write_bypass", "evictions", "fills", "hbm_reads", "hbm_retries", "hbm_failures",
    "occupancy", "occupancy_peak", "prefetch_late",
)


def memory_side_ports(w: Widths) -> dict:
    """The ports every CDU top shares with its core: decisions out, the HBM request/response
    streams, the in-order ready stream to the TE, the status stream and the counter registers."""
    return {
        "txn": Out(stream.Signature(txn_layout(w))),
        "hbm_req": Out(stream.Signature(hbm_req_layout(w))),
        "hbm_resp": In(stream.Signature(hbm_resp_layout(w))),
        "ready": Out(stream.Signature(ready_layout(w))),
        "status": Out(stream.Signature(status_layout(w))),
        "counters": Out(data.StructLayout({k: 32 for k in COUNTERS})),
        "reg_addr": In(5),
        "reg_data": Out(32),
    }


def _log2(n):
    return (n - 1).bit_length()


def check_params(sets, ways, mshrs, rq_depth, max_retries, w, reserve=None):
    """Raise ValueError naming the first bad parameter and its value; returns ``reserve``
    resolved (``None`` -> ``ways // 8``, the policy model's default)."""
    if not isinstance(sets, int) or sets < 1 or sets > 1024 or sets & (sets - 1):
        raise ValueError(f"CDU: sets must be a power of 2 in 1..1024, got {sets!r}")
    if not isinstance(ways, int) or not 1 <= ways <= 16:
        raise ValueError(f"CDU: ways must be an integer in 1..16, got {ways!r}")
    if not isinstance(mshrs, int) or not 1 <= mshrs <= 2 ** w.id:
        raise ValueError(f"CDU: mshrs must be an integer in 1..{2 ** w.id} "
                         f"(id_bits = {w.id}), got {mshrs!r}")
    if not isinstance(rq_depth, int) or not 1 <= rq_depth <= 64:
        raise ValueError(f"CDU: rq_depth must be an integer in 1..64, got {rq_depth!r}")
    if not isinstance(max_retries, int) or not 0 <= max_retries <= 7:
        raise ValueError(f"CDU: max_retries must be an integer in 0..7, got {max_retries!r}")
    if reserve is None:
        return default_reserve(ways)
    if not isinstance(reserve, int) or isinstance(reserve, bool) or not 0 <= reserve < ways:
        raise ValueError(f"CDU: reserve must be an integer in 0..{ways - 1} (< ways), "
                         f"got {reserve!r}")
    return reserve


def _tree_sum(terms):
    """Sum as a balanced adder tree: a linear ``sum()`` of sets x ways terms nests too deeply
    for Amaranth's expression checks at real tag-store sizes."""
    terms = list(terms) or [Const(0)]
    while len(terms) > 1:
        terms = [terms[i] + terms[i + 1] if i + 1 < len(terms) else terms[i]
                 for i in range(0, len(terms), 2)]
    return terms[0]

class CDUCoreRTL(wiring.Component):
    """The decision core of the CDU (see ``models/cdu.py`` for the policy it implements).

    Parameters
    ----------
    sets : power of 2, 1..1024
    ways : 1..16
    mshrs : 1..2**widths.id
        HBM reads in flight (bypass reads included).
    rq_depth : 1..64
        Demand reads waiting for their data (ready queue).
    max_retries : 0..7
        An HBM read answered with ``err`` is re-sent up to this many times.
    reserve : 0..ways-1, default ``ways // 8``
        Ways per set kept from the keep class (``models/cdu.CDUCore``): a block that would
        become keep (class 2) from a class below keep -- on allocation or on a class update
        at a demand-read or write hit -- gets normal (1) instead when its set already holds
        ``keep_cap = ways - reserve`` valid keep/pinned blocks (for an allocation not
        counting the victim way).

    Timing: one operation is decided in the cycle it is valid on ``op`` if the ``txn``
    register is free (or being read), a free MSHR exists when it needs an HBM read and the
    ready queue has room when it is a demand read; its ``txn`` beat is valid from the next
    cycle. So an uncongested stream of operations is decided at one per cycle. A demand
    read's ``ready`` beat is valid from the cycle after its data is known to be in L2 (a
    filled hit: the cycle after the decision), in operation order. ``hbm_req`` is a register
    loaded when empty or read: retries first (lowest id), then first attempts in order.
    ``hbm_resp.ready`` is low only while a ``status`` beat waits to be read.
    """

    def __init__(self, sets=4, ways=2, mshrs=4, rq_depth=4, max_retries=2, widths=None,
                 reserve=None):
        w = widths or Widths()
        try:
            reserve = check_params(sets, ways, mshrs, rq_depth, max_retries, w, reserve)
        except ValueError:
            self._MustUse__silence = True      # a component that failed to build is not "unused"
            raise
        self.sets, self.ways, self.mshrs, self.rq_depth = sets, ways, mshrs, rq_depth
        self.reserve, self.keep_cap = reserve, ways - reserve
        self.max_retries, self.widths = max_retries, w
        super().__init__({
            "op": In(stream.Signature(op_layout(w))),
            **memory_side_ports(w),
            "bad_resp": Out(1),
            "idle": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        S, W, M, Q = self.sets, self.ways, self.mshrs, self.rq_depth
        wd = self.widths
        ab, idb, qb = max(1, _log2(W)), wd.id, max(1, _log2(Q))
        op = self.op.p
        cnt = self.counters

        def tag_sigs(name):
            return {"req": Signal(wd.req, name=f"{name}_req"),
                    "layer": Signal(wd.layer, name=f"{name}_layer"),
                    "block": Signal(wd.block, name=f"{name}_block")}

        # ------------------------------------------------------------ state
        valid = [[Signal(name=f"v_{s}_{i}") for i in range(W)] for s in range(S)]
        ftag = [[tag_sigs(f"t_{s}_{i}") for i in range(W)] for s in range(S)]
        cls = [[Signal(2, name=f"cls_{s}_{i}") for i in range(W)] for s in range(S)]
        age = [[Signal(ab, name=f"age_{s}_{i}", init=i) for i in range(W)] for s in range(S)]
        pf = [[Signal(name=f"pf_{s}_{i}") for i in range(W)] for s in range(S)]
        pend = [[Signal(name=f"pend_{s}_{i}") for i in range(W)] for s in range(S)]
        pid = [[Signal(idb, name=f"pid_{s}_{i}") for i in range(W)] for s in range(S)]

        busy = [Signal(name=f"m_busy_{j}") for j in range(M)]
        mtag = [tag_sigs(f"m_tag_{j}") for j in range(M)]
        tries = [Signal(3, name=f"m_tries_{j}") for j in range(M)]
        retry = [Signal(name=f"m_retry_{j}") for j in range(M)]
        fifo = [Signal(idb, name=f"sendq_{j}") for j in range(M)]
        f_head, f_tail = Signal(max(1, _log2(M)) + 1), Signal(max(1, _log2(M)) + 1)
        f_count = Signal(range(M + 1))

        rq_wait = [Signal(name=f"rq_wait_{q}") for q in range(Q)]
        rq_id = [Signal(idb, name=f"rq_id_{q}") for q in range(Q)]
        rq_err = [Signal(name=f"rq_err_{q}") for q in range(Q)]
        rq_hit = [Signal(name=f"rq_hit_{q}") for q in range(Q)]
        rq_tag = [tag_sigs(f"rq_tag_{q}") for q in range(Q)]
        rq_head, rq_tail = Signal(qb), Signal(qb)
        rq_count = Signal(range(Q + 1))

        # ------------------------------------------------------------ lookup (s = set)
        sb = _log2(S)
        sidx = Signal(max(1, sb))
        full_idx = op.block + op.layer * LAYER_STRIDE + op.req * REQ_STRIDE
        m.d.comb += sidx.eq(full_idx[:sb] if sb else 0)

        def sel(arr2d, i, key=None):
            col = [arr2d[s][i] if key is None else arr2d[s][i][key] for s in range(S)]
            return Array(col)[sidx] if S > 1 else col[0]

        s_valid = [sel(valid, i) for i in range(W)]
        s_cls = [sel(cls, i) for i in range(W)]
        s_age = [sel(age, i) for i in range(W)]
        s_pf = [sel(pf, i) for i in range(W)]
        s_pend = [sel(pend, i) for i in range(W)]
        s_pid = [sel(pid, i) for i in range(W)]
        s_tag = [{k: sel(ftag, i, k) for k in ("req", "layer", "block")} for i in range(W)]

        hitv = Signal(W)
        for i in range(W):
            m.d.comb += hitv[i].eq(s_valid[i] & (s_tag[i]["req"] == op.req) &
                                   (s_tag[i]["layer"] == op.layer) &
                                   (s_tag[i]["block"] == op.block))
        hit = hitv.any()
        hway = Signal(ab)
        for i in reversed(range(W)):
            with m.If(hitv[i]):
                m.d.comb += hway.eq(i)

        # victim: lowest invalid way, else lowest class then oldest among unpinned
        inv_any, inv_way = Signal(), Signal(ab)
        for i in reversed(range(W)):
            with m.If(~s_valid[i]):
                m.d.comb += [inv_any.eq(1), inv_way.eq(i)]
        best_ok, best_cls, best_age, best_way = Const(0, 1), Const(3, 2), Const(0, ab), Const(0, ab)
        for i in range(W):
            cand = s_valid[i] & (s_cls[i] != 3)
            better = cand & (~best_ok | (s_cls[i] < best_cls) |
                             ((s_cls[i] == best_cls) & (s_age[i] > best_age)))
            nb_ok, nb_cls, nb_age, nb_way = (Signal(name=f"vb_ok_{i}"), Signal(2, name=f"vb_cls_{i}"),
                                             Signal(ab, name=f"vb_age_{i}"), Signal(ab, name=f"vb_way_{i}"))
            m.d.comb += [nb_ok.eq(best_ok | cand), nb_cls.eq(Mux(better, s_cls[i], best_cls)),
                         nb_age.eq(Mux(better, s_age[i], best_age)),
                         nb_way.eq(Mux(better, i, best_way))]
            best_ok, best_cls, best_age, best_way = nb_ok, nb_cls, nb_age, nb_way
        vic_ok = inv_any | best_ok
        vway = Signal(ab)
        m.d.comb += vway.eq(Mux(inv_any, inv_way, best_way))
        vic_valid = ~inv_any

        def at(lst, idx):
            return Array(lst)[idx] if len(lst) > 1 else lst[0]

        h_pf, h_pend, h_pid = at(s_pf, hway), at(s_pend, hway), at(s_pid, hway)
        h_cls = at(s_cls, hway)
        v_pf = at(s_pf, vway)

        # keep cap: valid keep/pinned ways of the set (class >= 2: the class's top bit); an
        # allocation does not count the victim way it replaces. A keep request onto a block
        # below keep is demoted to normal when the count reaches keep_cap (models/cdu.py
        # CDUCore.effective_class).
        held_hit = Signal(range(W + 1))
        held_alloc = Signal(range(W + 1))
        m.d.comb += [
            held_hit.eq(_tree_sum(s_valid[i] & s_cls[i][1] for i in range(W))),
            held_alloc.eq(_tree_sum(s_valid[i] & s_cls[i][1] & (vway != i) for i in range(W))),
        ]
        want_keep = op.cls == 2
        alloc_cls, hit_cls = Signal(2), Signal(2)
        m.d.comb += [
            alloc_cls.eq(Mux(want_keep & (held_alloc >= self.keep_cap), 1, op.cls)),
            hit_cls.eq(Mux(want_keep & ~h_cls[1] & (held_hit >= self.keep_cap), 1, op.cls)),
        ]
        v_tag = {k: at([t[k] for t in s_tag], vway) for k in ("req", "layer", "block")}

        # ------------------------------------------------------------ decision
        isR, isW, isP = op.kind == KIND["R"], op.kind == KIND["W"], op.kind == KIND["P"]
        cls_nz = op.cls != 0
        alloc = Signal()
        hbm = Signal()
        result = Signal(4)
        m.d.comb += [
            alloc.eq(~hit & cls_nz & vic_ok & (isR | isP | (isW & op.fresh))),
            hbm.eq(~hit & (isR | (isP & cls_nz & vic_ok))),
        ]
        with m.If(isR):
            m.d.comb += result.eq(Mux(hit, RESULT["hit"],
                                      Mux(alloc, RESULT["miss_alloc"], RESULT["miss_bypass"])))
        with m.Elif(isP):
            m.d.comb += result.eq(Mux(hit, RESULT["pf_redundant"],
                                      Mux(alloc, RESULT["pf_issue"], RESULT["pf_drop"])))
        with m.Else():
            m.d.comb += result.eq(Mux(hit, RESULT["w_hit"],
                                      Mux(alloc, RESULT["w_alloc"], RESULT["w_bypass"])))

        # free MSHR (lowest index)
        m_free_any, new_id = Signal(), Signal(idb)
        for j in reversed(range(M)):
            with m.If(~busy[j]):
                m.d.comb += [m_free_any.eq(1), new_id.eq(j)]
        txn_free = ~self.txn.valid | self.txn.ready
        fire = Signal()
        m.d.comb += [
            fire.eq(self.op.valid & txn_free & (~hbm | m_free_any) & (~isR | (rq_count < Q))),
            self.op.ready.eq(fire),
        ]

        # ------------------------------------------------------------ HBM response / done
        resp = self.hbm_resp
        m.d.comb += resp.ready.eq(~self.status.valid)
        r_id = resp.p.id
        r_busy = at(busy, r_id) if M > 1 else busy[0]
        r_tries = at(tries, r_id)
        take = resp.valid & resp.ready
        done_v, done_fail = Signal(), Signal()
        done_id = r_id
        with m.If(take):
            with m.If(~r_busy | (r_id >= M)):
                m.d.sync += self.bad_resp.eq(1)
            with m.Elif(resp.p.err & (r_tries < self.max_retries)):
                for j in range(M):
                    with m.If(r_id == j):
                        m.d.sync += [tries[j].eq(tries[j] + 1), retry[j].eq(1)]
                m.d.sync += cnt.hbm_retries.eq(cnt.hbm_retries + 1)
            with m.Else():
                m.d.comb += [done_v.eq(1), done_fail.eq(resp.p.err)]
        with m.If(done_v):
            for j in range(M):
                with m.If(r_id == j):
                    m.d.sync += busy[j].eq(0)
            with m.If(done_fail):
                m.d.sync += [self.status.valid.eq(1), self.status.p.id.eq(r_id),
                             cnt.hbm_failures.eq(cnt.hbm_failures + 1)]
                for k in ("req", "layer", "block"):
                    m.d.sync += getattr(self.status.p, k).eq(at([t[k] for t in mtag], r_id))
        with m.Elif(self.status.ready):
            m.d.sync += self.status.valid.eq(0)

        # frames: a completed read clears pend; a failed one invalidates the frame
        fail_dec = Signal(range(S * W + 1))
        fail_terms = []
        for s in range(S):
            for i in range(W):
                match = done_v & pend[s][i] & (pid[s][i] == done_id)
                with m.If(match):
                    m.d.sync += pend[s][i].eq(0)
                    with m.If(done_fail):
                        m.d.sync += valid[s][i].eq(0)
                overwritten = fire & alloc & (sidx == s) & (vway == i)
                fail_terms.append(match & done_fail & valid[s][i] & ~overwritten)
        m.d.comb += fail_dec.eq(_tree_sum(fail_terms))

        # ------------------------------------------------------------ apply the decision
        h_wait_now = h_pend & ~(done_v & (done_id == h_pid))
        h_err_now = h_pend & done_v & done_fail & (done_id == h_pid)
        touch = Signal()
        tway = Signal(ab)
        m.d.comb += [touch.eq(fire & ((hit & ~(isR & h_pf) & ~isP) | alloc)),
                     tway.eq(Mux(hit, hway, vway))]
        t_age = at(s_age, tway)
        for s in range(S):
            with m.If(touch & (sidx == s)):
                for i in range(W):
                    with m.If(tway == i):
                        m.d.sync += age[s][i].eq(0)
                    with m.Elif(age[s][i] < t_age):
                        m.d.sync += age[s][i].eq(age[s][i] + 1)
            for i in range(W):
                with m.If(fire & (sidx == s)):
                    with m.If(hit & (hway == i) & ~isP):
                        with m.If(cls_nz):
                            m.d.sync += cls[s][i].eq(hit_cls)
                        with m.If(isR):
                            m.d.sync += pf[s][i].eq(0)
                    with m.If(alloc & (vway == i)):
                        m.d.sync += [valid[s][i].eq(1), cls[s][i].eq(alloc_cls), pf[s][i].eq(isP),
                                     pend[s][i].eq(hbm), pid[s][i].eq(new_id),
                                     ftag[s][i]["req"].eq(op.req), ftag[s][i]["layer"].eq(op.layer),
                                     ftag[s][i]["block"].eq(op.block)]

        # MSHR allocation and the first-attempt send queue
        push = fire & hbm
        with m.If(push):
            for j in range(M):
                with m.If(new_id == j):
                    m.d.sync += [busy[j].eq(1), tries[j].eq(0), retry[j].eq(0),
                                 mtag[j]["req"].eq(op.req), mtag[j]["layer"].eq(op.layer),
                                 mtag[j]["block"].eq(op.block)]
            for j in range(M):
                with m.If(f_tail[:max(1, _log2(M))] == j if M > 1 else Const(1)):
                    m.d.sync += fifo[j].eq(new_id)
            m.d.sync += f_tail.eq(Mux(f_tail == M - 1, 0, f_tail + 1))

        # HBM request register: retries first, then first attempts in order
        hreq = self.hbm_req
        pop = Signal()
        r_any, r_sel = Signal(), Signal(idb)
        for j in reversed(range(M)):
            with m.If(retry[j]):
                m.d.comb += [r_any.eq(1), r_sel.eq(j)]
        with m.If(~hreq.valid | hreq.ready):
            with m.If(r_any):
                m.d.sync += [hreq.valid.eq(1), hreq.p.id.eq(r_sel), hreq.p.retry.eq(1)]
                for k in ("req", "layer", "block"):
                    m.d.sync += getattr(hreq.p, k).eq(at([t[k] for t in mtag], r_sel))
                for j in range(M):
                    with m.If(r_sel == j):
                        m.d.sync += retry[j].eq(0)
            with m.Elif(f_count != 0):
                hid = at(fifo, f_head)
                m.d.comb += pop.eq(1)
                m.d.sync += [hreq.valid.eq(1), hreq.p.id.eq(hid), hreq.p.retry.eq(0),
                             f_head.eq(Mux(f_head == M - 1, 0, f_head + 1)),
                             cnt.hbm_reads.eq(cnt.hbm_reads + 1)]
                for k in ("req", "layer", "block"):
                    m.d.sync += getattr(hreq.p, k).eq(at([t[k] for t in mtag], hid))
            with m.Else():
                m.d.sync += hreq.valid.eq(0)
        m.d.sync += f_count.eq(f_count + push - pop)

        # ------------------------------------------------------------ ready queue
        for q in range(Q):
            with m.If(done_v & rq_wait[q] & (rq_id[q] == done_id)):
                m.d.sync += [rq_wait[q].eq(0), rq_err[q].eq(done_fail)]
        rq_push = fire & isR
        with m.If(rq_push):
            for q in range(Q):
                with m.If(rq_tail == q):
                    m.d.sync += [
                        rq_wait[q].eq(Mux(hit, h_wait_now, 1)),
                        rq_id[q].eq(Mux(hit, h_pid, new_id)),
                        rq_err[q].eq(hit & h_err_now), rq_hit[q].eq(hit),
                        rq_tag[q]["req"].eq(op.req), rq_tag[q]["layer"].eq(op.layer),
                        rq_tag[q]["block"].eq(op.block)]
            m.d.sync += rq_tail.eq(Mux(rq_tail == Q - 1, 0, rq_tail + 1))
        rdy = self.ready
        m.d.comb += [rdy.valid.eq((rq_count != 0) & ~at(rq_wait, rq_head)),
                     rdy.p.hit.eq(at(rq_hit, rq_head)), rdy.p.err.eq(at(rq_err, rq_head))]
        for k in ("req", "layer", "block"):
            m.d.comb += getattr(rdy.p, k).eq(at([t[k] for t in rq_tag], rq_head))
        rq_pop = rdy.valid & rdy.ready
        with m.If(rq_pop):
            m.d.sync += rq_head.eq(Mux(rq_head == Q - 1, 0, rq_head + 1))
        m.d.sync += rq_count.eq(rq_count + rq_push - rq_pop)

        # ------------------------------------------------------------ txn out
        with m.If(fire):
            m.d.sync += [self.txn.valid.eq(1), self.txn.p.kind.eq(op.kind),
                         self.txn.p.req.eq(op.req), self.txn.p.layer.eq(op.layer),
                         self.txn.p.block.eq(op.block), self.txn.p.result.eq(result),
                         self.txn.p.victim_valid.eq(alloc & vic_valid), self.txn.p.hbm.eq(hbm)]
            for k in ("req", "layer", "block"):
                m.d.sync += getattr(self.txn.p.victim, k).eq(Mux(alloc & vic_valid, v_tag[k], 0))
        with m.Elif(self.txn.ready):
            m.d.sync += self.txn.valid.eq(0)

        # ------------------------------------------------------------ counters
        def inc(name, cond):
            with m.If(cond):
                m.d.sync += getattr(cnt, name).eq(getattr(cnt, name) + 1)

        inc("accesses", fire & isR)
        inc("hits", fire & isR & hit)
        inc("hits_reuse", fire & isR & hit & ~h_pf)
        inc("hits_prefetched", fire & isR & hit & h_pf)
        inc("prefetch_late", fire & isR & hit & h_pf & h_pend)
        inc("misses", fire & isR & ~hit)
        inc("misses_alloc", fire & isR & ~hit & alloc)
        inc("misses_bypass", fire & isR & ~hit & ~alloc)
        inc("prefetch_requests", fire & isP)
        inc("prefetch_issued", fire & isP & alloc)
        inc("prefetch_redundant", fire & isP & hit)
        inc("prefetch_dropped", fire & isP & ~hit & ~alloc)
        inc("prefetch_useless", fire & alloc & vic_valid & v_pf)
        inc("writes", fire & isW)
        inc("write_hits", fire & isW & hit)
        inc("write_allocs", fire & isW & alloc)
        inc("write_bypass", fire & isW & ~hit & ~alloc)
        inc("evictions", fire & alloc & vic_valid)
        inc("fills", fire & alloc)
        occ_next = cnt.occupancy + (fire & alloc & ~vic_valid) - fail_dec
        m.d.sync += cnt.occupancy.eq(occ_next)
        with m.If(occ_next > cnt.occupancy_peak):
            m.d.sync += cnt.occupancy_peak.eq(occ_next)

        regs = Array(getattr(cnt, k) for k in COUNTERS)
        m.d.comb += self.reg_data.eq(Mux(self.reg_addr < len(COUNTERS), regs[self.reg_addr], 0))
        m.d.comb += self.idle.eq(~Cat(*busy).any() & (rq_count == 0) & (f_count == 0) &
                                 ~hreq.valid & ~self.txn.valid & ~self.status.valid)
        return m
