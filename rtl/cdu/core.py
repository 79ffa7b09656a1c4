"""CDU core: tag lookup, miss allocation and victim choice, MSHRs with HBM request/response
streams and bounded retry, in-order ready stream to the TE, counters as registers."""

from types import SimpleNamespace

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.wiring import In, Out

from tricut.models.cdu import LAYER_STRIDE, REQ_STRIDE, default_reserve

from .checked import CheckedComponent
from .layouts import (KIND, RESULT, WAY_BITS, Widths, hbm_req_layout, hbm_resp_layout,
                      op_layout, ready_layout, status_layout, txn_layout)

__all__ = ["CDUCoreRTL", "COUNTERS", "check_params"]

#: Counter registers, in register-map order (index = register number, 32 bits each).
COUNTERS = (
    "accesses", "hits", "hits_reuse", "hits_prefetched", "misses", "misses_alloc",
    "misses_bypass", "prefetch_requests", "prefetch_issued", "prefetch_redundant",
    "prefetch_dropped", "prefetch_useless", "writes", "write_hits", "write_allocs",
    "write_bypass", "evictions", "fills", "hbm_reads", "hbm_retries", "hbm_failures",
    "occupancy", "occupancy_peak", "prefetch_late", "restores",
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


def _tag_sigs(wd, name):
    return {"req": Signal(wd.req, name=f"{name}_req"),
            "layer": Signal(wd.layer, name=f"{name}_layer"),
            "block": Signal(wd.block, name=f"{name}_block")}


def _at(lst, idx):
    """``lst[idx]`` for a signal index (a plain element when there is only one)."""
    return Array(lst)[idx] if len(lst) > 1 else lst[0]


class CDUCoreRTL(CheckedComponent):
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

    Raises
    ------
    ValueError
        Naming the first bad parameter and its value (:func:`check_params`), before the
        component exists.

    A restore (S) takes only the ``txn`` register: result ``restore``, no tag-store change,
    no MSHR, no ready-queue entry; it counts in ``restores``.

    Timing: one operation is decided in the cycle it is valid on ``op`` if the ``txn``
    register is free (or being read), a free MSHR exists when it needs an HBM read and the
    ready queue has room when it is a demand read; its ``txn`` beat is valid from the next
    cycle. So an uncongested stream of operations is decided at one per cycle. A demand
    read's ``ready`` beat is valid from the cycle after its data is known to be in L2 (a
    filled hit: the cycle after the decision), in operation order. ``hbm_req`` is a register
    loaded when empty or read: retries first (lowest id), then first attempts in order.
    ``hbm_resp.ready`` is low only while a ``status`` beat waits to be read.

    Frames: ``txn``, ``ready`` and ``hbm_req`` carry the way of the block's L2 frame (data
    frame ``set * ways + way``), ``ready.bypass`` and ``hbm_req.alloc`` (``layouts.py``).
    *Eviction hold*: an allocating decision (R miss_alloc, P pf_issue, W w_alloc) whose
    victim frame is the frame of a ready-queue entry not yet popped (and not a bypass) waits
    until the cycle after that entry's ``ready`` beat transferred: the consumer reads the
    frame until it takes the beat. Timing only: the decision is that of the stalled cycle
    (the allocation state does not change while it waits), and it waits only on older
    demand reads. *Orphans*: an allocation evicting a frame whose fill is still in flight
    (``pend``) clears its MSHR's ``own`` bit; every ``hbm_req`` beat of that MSHR sent from
    the next cycle on has ``alloc`` = 0.
    """

    @staticmethod
    def _check(sets, ways, mshrs, rq_depth, max_retries, widths, reserve):
        return check_params(sets, ways, mshrs, rq_depth, max_retries, widths or Widths(),
                            reserve)

    def __init__(self, sets=4, ways=2, mshrs=4, rq_depth=4, max_retries=2, widths=None,
                 reserve=None):
        w = widths or Widths()
        reserve = check_params(sets, ways, mshrs, rq_depth, max_retries, w, reserve)
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
        tags = self._tag_store()
        mshr = self._mshr_file()
        rq = self._ready_queue_regs()
        lk = self._elaborate_lookup(m, tags)
        dec = self._elaborate_decide(m, lk, mshr, rq)
        done = self._elaborate_hbm_response(m, mshr)
        fail_dec = self._elaborate_frames(m, tags, lk, dec, done)
        sendq = self._elaborate_mshr(m, mshr, lk, dec)
        self._elaborate_ready_queue(m, rq, lk, dec, done)
        self._elaborate_txn(m, lk, dec)
        self._elaborate_counters(m, lk, dec, fail_dec)
        m.d.comb += self.idle.eq(~Cat(*mshr.busy).any() & (rq.count == 0) & ~sendq.r_rdy &
                                 ~self.hbm_req.valid & ~self.txn.valid & ~self.status.valid)
        return m

    # ---------------------------------------------------------------- state
    def _tag_store(self):
        """Per set ``s`` and way ``i``: ``valid``, ``tag`` (req, layer, block), ``cls``,
        ``age`` (0 = most recent; reset value ``i``), ``pf`` (filled by a prefetch, not yet
        read), ``pend`` (its HBM read is in flight on MSHR ``pid``)."""
        S, W, wd = self.sets, self.ways, self.widths
        ab, idb = max(1, _log2(W)), wd.id
        valid = [[Signal(name=f"v_{s}_{i}") for i in range(W)] for s in range(S)]
        ftag = [[_tag_sigs(wd, f"t_{s}_{i}") for i in range(W)] for s in range(S)]
        cls = [[Signal(2, name=f"cls_{s}_{i}") for i in range(W)] for s in range(S)]
        age = [[Signal(ab, name=f"age_{s}_{i}", init=i) for i in range(W)] for s in range(S)]
        pf = [[Signal(name=f"pf_{s}_{i}") for i in range(W)] for s in range(S)]
        pend = [[Signal(name=f"pend_{s}_{i}") for i in range(W)] for s in range(S)]
        pid = [[Signal(idb, name=f"pid_{s}_{i}") for i in range(W)] for s in range(S)]
        return SimpleNamespace(valid=valid, tag=ftag, cls=cls, age=age, pf=pf, pend=pend,
                               pid=pid)

    def _mshr_file(self):
        """Per MSHR ``j``: ``busy``, ``tag``, ``tries`` (retries so far), ``retry`` (to be
        re-sent), ``way`` (the frame way it fills, 0 for a bypass read) and ``own`` (its frame
        still belongs to it: set by an allocating read, cleared by a bypass read and when an
        allocation evicts its frame while the fill is in flight)."""
        M, wd = self.mshrs, self.widths
        busy = [Signal(name=f"m_busy_{j}") for j in range(M)]
        mtag = [_tag_sigs(wd, f"m_tag_{j}") for j in range(M)]
        tries = [Signal(3, name=f"m_tries_{j}") for j in range(M)]
        retry = [Signal(name=f"m_retry_{j}") for j in range(M)]
        way = [Signal(WAY_BITS, name=f"m_way_{j}") for j in range(M)]
        own = [Signal(name=f"m_own_{j}") for j in range(M)]
        return SimpleNamespace(busy=busy, tag=mtag, tries=tries, retry=retry, way=way, own=own)

    def _ready_queue_regs(self):
        """Ring of ``rq_depth`` demand reads: ``wait`` (data not yet in L2, on MSHR ``id``),
        ``err``, ``hit``, ``tag``, ``way``/``bypass`` and ``set`` (its frame), ``live``
        (pushed, not yet popped); ``head``, ``tail``, ``count``."""
        Q, wd = self.rq_depth, self.widths
        idb, qb = wd.id, max(1, _log2(Q))
        sb = max(1, _log2(self.sets))
        rq_way = [Signal(WAY_BITS, name=f"rq_way_{q}") for q in range(Q)]
        rq_byp = [Signal(name=f"rq_bypass_{q}") for q in range(Q)]
        rq_set = [Signal(sb, name=f"rq_set_{q}") for q in range(Q)]
        rq_live = [Signal(name=f"rq_live_{q}") for q in range(Q)]
        rq_wait = [Signal(name=f"rq_wait_{q}") for q in range(Q)]
        rq_id = [Signal(idb, name=f"rq_id_{q}") for q in range(Q)]
        rq_err = [Signal(name=f"rq_err_{q}") for q in range(Q)]
        rq_hit = [Signal(name=f"rq_hit_{q}") for q in range(Q)]
        rq_tag = [_tag_sigs(wd, f"rq_tag_{q}") for q in range(Q)]
        rq_head, rq_tail = Signal(qb), Signal(qb)
        rq_count = Signal(range(Q + 1))
        return SimpleNamespace(wait=rq_wait, id=rq_id, err=rq_err, hit=rq_hit, tag=rq_tag,
                               way=rq_way, bypass=rq_byp, set=rq_set, live=rq_live,
                               head=rq_head, tail=rq_tail, count=rq_count)

    # ---------------------------------------------------------------- lookup and victim
    def _elaborate_lookup(self, m, tags):
        """Tag compare, victim choice and the keep cap for the operation on ``op``.

        Returns
        -------
        SimpleNamespace
            All combinational, valid in the cycle the operation is on ``op``: ``sidx`` (its
            set), ``row`` (that set's ways: ``valid``, ``cls``, ``age``, ``pf``, ``pend``,
            ``pid``, ``tag``), ``hit``/``hway``, the victim ``vway`` with ``vic_ok`` (a way
            may be replaced) and ``vic_valid`` (it holds a block), ``h_*`` (the hit way's
            fields), ``v_pf``/``v_pend``/``v_pid``/``v_tag`` (the victim's),
            ``alloc_cls``/``hit_cls`` (``op.cls`` after the keep cap).
        """
        S, W = self.sets, self.ways
        ab = max(1, _log2(W))
        op = self.op.p
        sb = _log2(S)
        sidx = Signal(max(1, sb))
        full_idx = op.block + op.layer * LAYER_STRIDE + op.req * REQ_STRIDE
        m.d.comb += sidx.eq(full_idx[:sb] if sb else 0)

        def sel(arr2d, i, key=None):
            col = [arr2d[s][i] if key is None else arr2d[s][i][key] for s in range(S)]
            return Array(col)[sidx] if S > 1 else col[0]

        s_valid = [sel(tags.valid, i) for i in range(W)]
        s_cls = [sel(tags.cls, i) for i in range(W)]
        s_age = [sel(tags.age, i) for i in range(W)]
        s_pf = [sel(tags.pf, i) for i in range(W)]
        s_pend = [sel(tags.pend, i) for i in range(W)]
        s_pid = [sel(tags.pid, i) for i in range(W)]
        s_tag = [{k: sel(tags.tag, i, k) for k in ("req", "layer", "block")} for i in range(W)]

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

        h_pf, h_pend, h_pid = _at(s_pf, hway), _at(s_pend, hway), _at(s_pid, hway)
        h_cls = _at(s_cls, hway)
        v_pf = _at(s_pf, vway)
        v_pend, v_pid = _at(s_pend, vway), _at(s_pid, vway)

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
        v_tag = {k: _at([t[k] for t in s_tag], vway) for k in ("req", "layer", "block")}
        row = SimpleNamespace(valid=s_valid, cls=s_cls, age=s_age, pf=s_pf, pend=s_pend,
                              pid=s_pid, tag=s_tag)
        return SimpleNamespace(sidx=sidx, row=row, hit=hit, hway=hway, vway=vway,
                               vic_ok=vic_ok, vic_valid=vic_valid, h_pf=h_pf, h_pend=h_pend,
                               h_pid=h_pid, v_pf=v_pf, v_pend=v_pend, v_pid=v_pid, v_tag=v_tag,
                               alloc_cls=alloc_cls, hit_cls=hit_cls)

    def _elaborate_decide(self, m, lk, mshr, rq):
        """The decision on the operation on ``op`` and whether it is taken this cycle.

        Returns
        -------
        SimpleNamespace
            Combinational, in the cycle the operation is on ``op``:
            ``isR``/``isW``/``isP``/``isS``, ``cls_nz``, ``alloc`` (it takes a frame),
            ``hbm`` (it needs an HBM read), ``result`` (``txn.result`` code), ``new_id`` (the
            free MSHR it gets, lowest index), ``way`` (the frame way of the block: hit way,
            else the allocated way, else 0), ``hold`` (the eviction hold: the victim frame is
            that of a live, non-bypass ready-queue entry) and ``fire`` (taken: ``op.ready``).
        """
        op = self.op.p
        M, Q, idb = self.mshrs, self.rq_depth, self.widths.id
        hit = lk.hit
        isR, isW, isP = op.kind == KIND["R"], op.kind == KIND["W"], op.kind == KIND["P"]
        isS = op.kind == KIND["S"]
        cls_nz = op.cls != 0
        alloc = Signal()
        hbm = Signal()
        result = Signal(4)
        m.d.comb += [
            alloc.eq(~hit & cls_nz & lk.vic_ok & (isR | isP | (isW & op.fresh))),
            hbm.eq(~hit & (isR | (isP & cls_nz & lk.vic_ok))),
        ]
        with m.If(isR):
            m.d.comb += result.eq(Mux(hit, RESULT["hit"],
                                      Mux(alloc, RESULT["miss_alloc"], RESULT["miss_bypass"])))
        with m.Elif(isP):
            m.d.comb += result.eq(Mux(hit, RESULT["pf_redundant"],
                                      Mux(alloc, RESULT["pf_issue"], RESULT["pf_drop"])))
        with m.Elif(isS):
            m.d.comb += result.eq(RESULT["restore"])
        with m.Else():
            m.d.comb += result.eq(Mux(hit, RESULT["w_hit"],
                                      Mux(alloc, RESULT["w_alloc"], RESULT["w_bypass"])))

        # free MSHR (lowest index)
        m_free_any, new_id = Signal(), Signal(idb)
        for j in reversed(range(M)):
            with m.If(~mshr.busy[j]):
                m.d.comb += [m_free_any.eq(1), new_id.eq(j)]
        # eviction hold: the victim frame (set, way) is read by a demand read still in the
        # ready queue (pushed by an older decision, not yet popped): wait for its pop
        way = Signal(WAY_BITS)
        m.d.comb += way.eq(Mux(hit, lk.hway, Mux(alloc, lk.vway, 0)))
        hold = Signal()
        m.d.comb += hold.eq(alloc & Cat(
            rq.live[q] & ~rq.bypass[q] & (rq.set[q] == lk.sidx) & (rq.way[q] == lk.vway)
            for q in range(Q)).any())
        txn_free = ~self.txn.valid | self.txn.ready
        fire = Signal()
        m.d.comb += [
            fire.eq(self.op.valid & txn_free & (~hbm | m_free_any) & (~isR | (rq.count < Q)) &
                    ~hold),
            self.op.ready.eq(fire),
        ]
        return SimpleNamespace(isR=isR, isW=isW, isP=isP, isS=isS, cls_nz=cls_nz, alloc=alloc,
                               hbm=hbm, result=result, new_id=new_id, way=way, hold=hold,
                               fire=fire)

    # ---------------------------------------------------------------- MSHRs and retry
    def _elaborate_hbm_response(self, m, mshr):
        """Take an ``hbm_resp`` beat: schedule a retry (``err`` with retries left), or finish
        the MSHR; a failed read raises a ``status`` beat (valid from the next cycle).

        Returns
        -------
        SimpleNamespace
            Combinational, in the cycle the response is taken: ``done_v`` (an MSHR
            finishes), ``done_fail`` (its read failed), ``done_id``.
        """
        M = self.mshrs
        cnt = self.counters
        resp = self.hbm_resp
        busy, tries, retry = mshr.busy, mshr.tries, mshr.retry
        m.d.comb += resp.ready.eq(~self.status.valid)
        r_id = resp.p.id
        r_busy = _at(busy, r_id) if M > 1 else busy[0]
        r_tries = _at(tries, r_id)
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
                    m.d.sync += getattr(self.status.p, k).eq(_at([t[k] for t in mshr.tag], r_id))
        with m.Elif(self.status.ready):
            m.d.sync += self.status.valid.eq(0)
        return SimpleNamespace(done_v=done_v, done_fail=done_fail, done_id=done_id)

    def _elaborate_frames(self, m, tags, lk, dec, done):
        """Tag-store updates at the next clock edge: a finished read clears ``pend`` (a
        failed one invalidates the frame); the decision touches ages, classes, ``pf`` and
        fills the victim way.

        Returns
        -------
        Value
            Frames invalidated by a failed read this cycle (combinational).
        """
        S, W = self.sets, self.ways
        ab = max(1, _log2(W))
        op = self.op.p
        valid, pend, pid = tags.valid, tags.pend, tags.pid
        sidx, hit, hway, vway = lk.sidx, lk.hit, lk.hway, lk.vway
        fire, alloc, isR, isP, isS = dec.fire, dec.alloc, dec.isR, dec.isP, dec.isS
        done_v, done_fail, done_id = done.done_v, done.done_fail, done.done_id
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

        # apply the decision (a restore changes nothing: no age, class or pf update)
        touch = Signal()
        tway = Signal(ab)
        m.d.comb += [touch.eq(fire & ((hit & ~(isR & lk.h_pf) & ~isP & ~isS) | alloc)),
                     tway.eq(Mux(hit, hway, vway))]
        t_age = _at(lk.row.age, tway)
        age, cls, pf, ftag = tags.age, tags.cls, tags.pf, tags.tag
        for s in range(S):
            with m.If(touch & (sidx == s)):
                for i in range(W):
                    with m.If(tway == i):
                        m.d.sync += age[s][i].eq(0)
                    with m.Elif(age[s][i] < t_age):
                        m.d.sync += age[s][i].eq(age[s][i] + 1)
            for i in range(W):
                with m.If(fire & (sidx == s)):
                    with m.If(hit & (hway == i) & ~isP & ~isS):
                        with m.If(dec.cls_nz):
                            m.d.sync += cls[s][i].eq(lk.hit_cls)
                        with m.If(isR):
                            m.d.sync += pf[s][i].eq(0)
                    with m.If(alloc & (vway == i)):
                        m.d.sync += [valid[s][i].eq(1), cls[s][i].eq(lk.alloc_cls),
                                     pf[s][i].eq(isP), pend[s][i].eq(dec.hbm),
                                     pid[s][i].eq(dec.new_id),
                                     ftag[s][i]["req"].eq(op.req), ftag[s][i]["layer"].eq(op.layer),
                                     ftag[s][i]["block"].eq(op.block)]
        return fail_dec

    def _elaborate_mshr(self, m, mshr, lk, dec):
        """MSHR allocation on a decision with ``hbm``, the first-attempt send queue and the
        ``hbm_req`` register (loaded when empty or read, valid from the next cycle):
        retries first (lowest id), then first attempts in allocation order.

        Orphans: an allocation whose victim frame is still being filled (``pend``, MSHR
        ``pid``) clears that MSHR's ``own``; the ``alloc`` bit of the ``hbm_req`` register is
        ``own`` of its MSHR as of the previous clock edge, also while the beat waits to be
        read (so it says whether the frame still belongs to the read when the beat transfers).

        The send queue is a :class:`~amaranth.lib.fifo.SyncFIFO` of MSHR ids: an id written
        in the decision's cycle can be read (combinationally) in the next, so a miss's first
        ``hbm_req`` beat is valid 2 cycles after its decision when the register is free.

        Returns
        -------
        SyncFIFO
            The send queue (``r_rdy``: first attempts waiting).
        """
        M, idb = self.mshrs, self.widths.id
        op = self.op.p
        cnt = self.counters
        busy, tries, retry, mtag = mshr.busy, mshr.tries, mshr.retry, mshr.tag
        mway, own = mshr.way, mshr.own
        new_id = dec.new_id
        push = dec.fire & dec.hbm
        # orphaning: the decision re-allocates a frame whose fill (MSHR v_pid) is in flight
        orphan = Signal()
        m.d.comb += orphan.eq(dec.fire & dec.alloc & lk.vic_valid & lk.v_pend)
        for j in range(M):
            with m.If(push & (new_id == j)):
                m.d.sync += [busy[j].eq(1), tries[j].eq(0), retry[j].eq(0),
                             mway[j].eq(Mux(dec.alloc, lk.vway, 0)), own[j].eq(dec.alloc),
                             mtag[j]["req"].eq(op.req), mtag[j]["layer"].eq(op.layer),
                             mtag[j]["block"].eq(op.block)]
            with m.Elif(orphan & (lk.v_pid == j)):
                m.d.sync += own[j].eq(0)
        # never full: an id is queued once per allocation and at most M MSHRs are busy
        m.submodules.send_queue = sendq = SyncFIFO(width=idb, depth=M)
        m.d.comb += [sendq.w_data.eq(new_id), sendq.w_en.eq(push)]

        # HBM request register: retries first, then first attempts in order
        hreq = self.hbm_req
        r_any, r_sel = Signal(), Signal(idb)
        for j in reversed(range(M)):
            with m.If(retry[j]):
                m.d.comb += [r_any.eq(1), r_sel.eq(j)]

        def load(hid):
            """Load MSHR ``hid``'s request; ``alloc``: it still owns its frame after this edge."""
            m.d.sync += [hreq.valid.eq(1), hreq.p.id.eq(hid), hreq.p.way.eq(_at(mway, hid)),
                         hreq.p.alloc.eq(_at(own, hid) & ~(orphan & (lk.v_pid == hid)))]
            for k in ("req", "layer", "block"):
                m.d.sync += getattr(hreq.p, k).eq(_at([t[k] for t in mtag], hid))

        with m.If(~hreq.valid | hreq.ready):
            with m.If(r_any):
                load(r_sel)
                m.d.sync += hreq.p.retry.eq(1)
                for j in range(M):
                    with m.If(r_sel == j):
                        m.d.sync += retry[j].eq(0)
            with m.Elif(sendq.r_rdy):
                hid = sendq.r_data
                m.d.comb += sendq.r_en.eq(1)
                load(hid)
                m.d.sync += [hreq.p.retry.eq(0), cnt.hbm_reads.eq(cnt.hbm_reads + 1)]
            with m.Else():
                m.d.sync += hreq.valid.eq(0)
        with m.Elif(orphan & (lk.v_pid == hreq.p.id)):
            m.d.sync += hreq.p.alloc.eq(0)         # orphaned while waiting to be read
        return sendq

    # ---------------------------------------------------------------- ready queue
    def _elaborate_ready_queue(self, m, rq, lk, dec, done):
        """Demand reads in operation order; the head's ``ready`` beat is valid (combinational)
        once it no longer waits for its MSHR, i.e. from the cycle after the read finished (or
        after the decision, for a hit on a filled frame)."""
        Q = self.rq_depth
        op = self.op.p
        hit, h_pid = lk.hit, lk.h_pid
        done_v, done_fail, done_id = done.done_v, done.done_fail, done.done_id
        h_wait_now = lk.h_pend & ~(done_v & (done_id == h_pid))
        h_err_now = lk.h_pend & done_v & done_fail & (done_id == h_pid)
        for q in range(Q):
            with m.If(done_v & rq.wait[q] & (rq.id[q] == done_id)):
                m.d.sync += [rq.wait[q].eq(0), rq.err[q].eq(done_fail)]
        rq_push = dec.fire & dec.isR
        rdy = self.ready
        rq_pop = rdy.valid & rdy.ready
        for q in range(Q):
            with m.If(rq_push & (rq.tail == q)):
                m.d.sync += rq.live[q].eq(1)
            with m.Elif(rq_pop & (rq.head == q)):
                m.d.sync += rq.live[q].eq(0)
        with m.If(rq_push):
            for q in range(Q):
                with m.If(rq.tail == q):
                    m.d.sync += [
                        rq.way[q].eq(dec.way), rq.bypass[q].eq(~hit & ~dec.alloc),
                        rq.set[q].eq(lk.sidx),
                        rq.wait[q].eq(Mux(hit, h_wait_now, 1)),
                        rq.id[q].eq(Mux(hit, h_pid, dec.new_id)),
                        rq.err[q].eq(hit & h_err_now), rq.hit[q].eq(hit),
                        rq.tag[q]["req"].eq(op.req), rq.tag[q]["layer"].eq(op.layer),
                        rq.tag[q]["block"].eq(op.block)]
            m.d.sync += rq.tail.eq(Mux(rq.tail == Q - 1, 0, rq.tail + 1))
        m.d.comb += [rdy.valid.eq((rq.count != 0) & ~_at(rq.wait, rq.head)),
                     rdy.p.hit.eq(_at(rq.hit, rq.head)), rdy.p.err.eq(_at(rq.err, rq.head)),
                     rdy.p.way.eq(_at(rq.way, rq.head)),
                     rdy.p.bypass.eq(_at(rq.bypass, rq.head))]
        for k in ("req", "layer", "block"):
            m.d.comb += getattr(rdy.p, k).eq(_at([t[k] for t in rq.tag], rq.head))
        with m.If(rq_pop):
            m.d.sync += rq.head.eq(Mux(rq.head == Q - 1, 0, rq.head + 1))
        m.d.sync += rq.count.eq(rq.count + rq_push - rq_pop)

    # ---------------------------------------------------------------- txn and counters
    def _elaborate_txn(self, m, lk, dec):
        """The ``txn`` register: the decision, valid from the cycle after ``fire``."""
        op = self.op.p
        alloc, vic_valid = dec.alloc, lk.vic_valid
        with m.If(dec.fire):
            m.d.sync += [self.txn.valid.eq(1), self.txn.p.kind.eq(op.kind),
                         self.txn.p.req.eq(op.req), self.txn.p.layer.eq(op.layer),
                         self.txn.p.block.eq(op.block), self.txn.p.result.eq(dec.result),
                         self.txn.p.victim_valid.eq(alloc & vic_valid), self.txn.p.hbm.eq(dec.hbm),
                         self.txn.p.way.eq(Mux((dec.isP | dec.isS) & lk.hit, 0, dec.way))]
            for k in ("req", "layer", "block"):
                m.d.sync += getattr(self.txn.p.victim, k).eq(Mux(alloc & vic_valid, lk.v_tag[k], 0))
        with m.Elif(self.txn.ready):
            m.d.sync += self.txn.valid.eq(0)

    def _elaborate_counters(self, m, lk, dec, fail_dec):
        """Counter registers (updated at the clock edge after the event) and the register
        read port (``reg_data`` combinational from ``reg_addr``)."""
        cnt = self.counters
        fire, alloc, isR, isW, isP = dec.fire, dec.alloc, dec.isR, dec.isW, dec.isP
        hit, h_pf, vic_valid = lk.hit, lk.h_pf, lk.vic_valid

        def inc(name, cond):
            with m.If(cond):
                m.d.sync += getattr(cnt, name).eq(getattr(cnt, name) + 1)

        inc("accesses", fire & isR)
        inc("hits", fire & isR & hit)
        inc("hits_reuse", fire & isR & hit & ~h_pf)
        inc("hits_prefetched", fire & isR & hit & h_pf)
        inc("prefetch_late", fire & isR & hit & h_pf & lk.h_pend)
        inc("misses", fire & isR & ~hit)
        inc("misses_alloc", fire & isR & ~hit & alloc)
        inc("misses_bypass", fire & isR & ~hit & ~alloc)
        inc("prefetch_requests", fire & isP)
        inc("prefetch_issued", fire & isP & alloc)
        inc("prefetch_redundant", fire & isP & hit)
        inc("prefetch_dropped", fire & isP & ~hit & ~alloc)
        inc("prefetch_useless", fire & alloc & vic_valid & lk.v_pf)
        inc("writes", fire & isW)
        inc("write_hits", fire & isW & hit)
        inc("write_allocs", fire & isW & alloc)
        inc("write_bypass", fire & isW & ~hit & ~alloc)
        inc("evictions", fire & alloc & vic_valid)
        inc("fills", fire & alloc)
        inc("restores", fire & dec.isS)
        occ_next = cnt.occupancy + (fire & alloc & ~vic_valid) - fail_dec
        m.d.sync += cnt.occupancy.eq(occ_next)
        with m.If(occ_next > cnt.occupancy_peak):
            m.d.sync += cnt.occupancy_peak.eq(occ_next)

        regs = Array(getattr(cnt, k) for k in COUNTERS)
        m.d.comb += self.reg_data.eq(Mux(self.reg_addr < len(COUNTERS), regs[self.reg_addr], 0))
