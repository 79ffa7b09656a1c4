"""CDU front end: block address generation and prediction, from DSU step descriptors to the
operation stream of ``models/cdu.FrontEnd`` (W, R, P with residency classes, S restores), in
its exact order."""

from types import SimpleNamespace

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from tricut.models.cdu import KEEP_HASH_BITS, KEEP_HASH_MUL

from .checked import CheckedComponent
from .layouts import (HINT, KIND, MODE_ADAPTIVE, MODE_FIXED, MODE_STATIC, MODE_STREAM, PATTERN,
                      POLICY, STEP_KIND, Widths, demand_layout, desc_layout, entry_layout,
                      fe_config_layout, pred_row_layout, seq_bits, step_bits, step_layout)

__all__ = ["FrontEndRTL", "predictor_bits", "HASH_MUL"]

#: keep-class hash of ``models/cdu.AdaptivePredictor.keep_class``, multipliers mod 2**bits
HASH_MUL = tuple(m % (1 << KEEP_HASH_BITS) for m in KEEP_HASH_MUL)


def _log2(n):
    return max(1, (n - 1).bit_length())


def predictor_bits(slots, layers, entries, block_bits):
    """Predictor state of :class:`FrontEndRTL` in bits: per (slot, layer) row ``seen`` +
    ``a`` + ``w`` (``block_bits + 1`` each) + ``entries`` x (block + 2-bit confidence); plus
    the two 24-bit keep-candidate counters."""
    return slots * layers * (1 + 2 * (block_bits + 1) + entries * (block_bits + 2)) + 2 * 24


def _reduce(items, pick):
    items = list(items)
    while len(items) > 1:
        items = [pick(items[i], items[i + 1]) if i + 1 < len(items) else items[i]
                 for i in range(0, len(items), 2)]
    return items[0]


def _popcount(bits):
    return _reduce([b.as_unsigned() if hasattr(b, "as_unsigned") else b for b in bits] or
                   [Const(0)], lambda a, b: a + b)


def _nblocks(seq_len):
    return (seq_len + 15) >> 4


class FrontEndRTL(CheckedComponent):
    """Block address generation and prediction (``models/cdu.FrontEnd`` in gates).

    Parameters
    ----------
    widths : :class:`~.layouts.Widths`
    slot_bits : slots are ``0 .. 2**slot_bits - 1`` (predictor rows per layer)
    max_slots, max_layers : capacity of one step descriptor
    entries : adaptive predictor scatter entries per (slot, layer)
    units : planned-unit FIFO depth (how far the prefetch walker may run ahead of the demand
        walker, in (slot, layer) units); running out sets the sticky ``overflow`` output
    max_demand : demand blocks of one unit kept for the predictor update when the pattern
        is ``list`` (more set ``overflow``)
    frames : CDU frames (adaptive keep budget ``frames - frames//8 - 2*distance``)
    recent_blocks : ``static`` keeps the last ``recent_blocks`` blocks (128 tokens = 8)

    Streams: ``step`` in (descriptor beats, :func:`~.layouts.step_layout`), ``demand`` in
    (pattern ``list`` only), ``ops`` out (one block op per beat, ``desc_layout`` with
    ``count = 1``; a register: valid from the cycle after the decision that emits it).
    ``config`` in (stable during a run). Sticky ``bad_step``, ``bad_demand``, ``overflow``.
    ``idle``: waiting for a step descriptor with nothing planned and no op pending.

    Restores: the walker takes a step's beats when it needs the step's first unit (or, with
    nothing left to plan, until the final step); a ``restore`` beat (req, layer, seq_len),
    taken inside a step, emits the S ops of blocks ``0 .. ceil(seq_len/16) - 1`` (class 0),
    one per cycle (state RESTORE), before the walker takes the next beat -- the model's
    "restores when the step descriptor is loaded" (``models/cdu.FrontEnd.ops``). Nothing of a
    restore is stored beyond the beat being expanded.

    One unit (slot, layer) costs: 1 cycle (start) + 1 (W) + one cycle per R and per P
    (+ 1 at the end of a generated demand list), + 1 per plan of a unit (+ 1 per descriptor
    beat when the walker loads a step), + for ``adaptive``: 4 cycles of predictor update
    (+ 2 per demand block with pattern ``list``), + 1 (pop). A restore beat of ``n``
    blocks costs 1 + ``n`` cycles (its beat, then one S op per cycle).

    A parameter out of its range raises ``ValueError`` naming it and its value, before the
    component exists.
    """

    @staticmethod
    def _check(widths, slot_bits, max_slots, max_layers, entries, units, max_demand, frames,
               recent_blocks):
        for name, v, lo, hi in (("slot_bits", slot_bits, 1, 8), ("max_slots", max_slots, 1, 256),
                                ("max_layers", max_layers, 1, 256), ("entries", entries, 1, 64),
                                ("units", units, 1, 256), ("max_demand", max_demand, 1, 1024),
                                ("frames", frames, 1, 1 << 20),
                                ("recent_blocks", recent_blocks, 0, 1 << 16)):
            if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
                raise ValueError(f"CDU front end: {name} must be an integer in {lo}..{hi}, "
                                 f"got {v!r}")

    def __init__(self, widths=None, slot_bits=2, max_slots=4, max_layers=8, entries=8,
                 units=8, max_demand=16, frames=8, recent_blocks=8):
        self.widths = w = widths or Widths()
        self.slot_bits, self.max_slots, self.max_layers = slot_bits, max_slots, max_layers
        self.entries, self.units, self.max_demand = entries, units, max_demand
        self.frames, self.recent_blocks = frames, recent_blocks
        super().__init__({
            "step": In(stream.Signature(step_layout(w, slot_bits))),
            "demand": In(stream.Signature(demand_layout(w))),
            "ops": Out(stream.Signature(desc_layout(w))),
            "config": In(fe_config_layout(w)),
            "bad_step": Out(1), "bad_demand": Out(1), "overflow": Out(1), "idle": Out(1),
        })

    def budget_bits(self):
        return predictor_bits(2 ** self.slot_bits, 2 ** self.widths.layer, self.entries,
                              self.widths.block)

    def elaborate(self, platform):
        m = Module()
        s = self._elaborate_storage(m)
        self._elaborate_prediction(s)
        self._elaborate_output(m, s)
        self._elaborate_plan(m, s)
        self._elaborate_demand_element(s)
        with m.FSM(init="CLEAR") as fsm:
            clr = Signal(range(s.rows + 1))
            with m.State("CLEAR"):
                m.d.comb += [s.wp.addr.eq(clr), s.wp.data.eq(0), s.wp.en.eq(1)]
                m.d.sync += clr.eq(clr + 1)
                with m.If(clr == s.rows - 1):
                    m.next = "UNIT"
            self._elaborate_unit_start(m, s)
            self._elaborate_walker(m, s)
            self._elaborate_demand(m, s)
            self._elaborate_observe(m, s)
            self._elaborate_restore(m, s)
            with m.State("POP"):
                # pushes happen only in PLAN, so count never moves both ways at once
                m.d.sync += [s.rd.eq(Mux(s.rd == s.Q - 1, 0, s.rd + 1)), s.count.eq(s.count - 1)]
                m.next = "UNIT"

        m.d.comb += self.idle.eq(fsm.ongoing("PLAN") & ~s.plan_b & ~s.loaded & ~s.in_step &
                                 ~self.step.valid & ~self.ops.valid & (s.count == 0))
        return m

    # ---------------------------------------------------------------- storage
    def _elaborate_storage(self, m):
        """Registers and the predictor memory; every stage reads them combinationally.

        Returns
        -------
        SimpleNamespace
            ``unit_layout``, ``slot_layout``, ``row_layout``; the predictor memory ``mem``
            (``rows`` rows, read port ``rp`` comb, write port ``wp``); the step being walked
            (``slots``, ``layers``, ``n_slots``, ``n_layers``, walker position ``si``/``li``,
            ``in_step``, ``loaded``, ``ended``, ``w_first``, ``w_step``); the planned-unit
            FIFO (``fifo`` of ``Q`` units, ``rd``, ``wr``, ``count``, ``head`` = ``fifo[rd]``
            (comb), the last planned unit ``tail`` and its walk position ``t_cur``); the
            prefetch count ``p``; ``keep_prev``/``keep_cur``; the demand walk of the head
            unit (``i_dem``, ``g_cur``, ``gA``, ``gS``, ``a_run``, ``a_open``, ``run``,
            ``prevb``, ``have_prev``; the demand buffer ``buf`` of ``D`` blocks, ``nbuf``);
            the predictor update (``orow``, ``hits``, ``newbit``, ``j``, ``fin_a``,
            ``fin_w``); ``plan_b`` (the walker was entered from STREAM); the restore beat
            being expanded (``r_req``, ``r_layer``, next block ``r_blk``, blocks ``r_nb``).
        """
        w, E = self.widths, self.entries
        BB, SB = w.block, self.slot_bits
        unit_layout = data.StructLayout({
            "first": 1, "step": step_bits(), "slot": SB, "req": w.req, "layer": w.layer,
            "seq_len": seq_bits(w), "mode": 2, "fixcls": 2, "base": 32,
            "pA": BB + 1, "pS": BB + 1, "seen": 1, "e": data.ArrayLayout(entry_layout(w), E)})
        slot_layout = data.StructLayout({"slot": SB, "req": w.req, "seq_len": seq_bits(w),
                                         "hint": 2})
        row_layout = pred_row_layout(w, E)

        rows = 2 ** (SB + w.layer)
        m.submodules.rows = mem = Memory(shape=row_layout, depth=rows, init=[])
        rp = mem.read_port(domain="comb")
        wp = mem.write_port()

        slots = Array(Signal(slot_layout, name=f"sd{i}") for i in range(self.max_slots))
        layers = Array(Signal(w.layer, name=f"ly{i}") for i in range(self.max_layers))
        n_slots = Signal(range(self.max_slots + 1))
        n_layers = Signal(range(self.max_layers + 1))
        si = Signal(range(self.max_slots))
        li = Signal(range(self.max_layers))
        in_step, loaded, ended, w_first = Signal(), Signal(), Signal(), Signal()
        w_step = Signal(step_bits())

        Q = self.units
        fifo = Array(Signal(unit_layout, name=f"u{i}") for i in range(Q))
        rd = Signal(range(Q))
        wr = Signal(range(Q))
        count = Signal(range(Q + 1))
        tail = Signal(unit_layout)
        t_cur = Signal(BB + 1)
        p = Signal(32)
        keep_prev, keep_cur = Signal(24), Signal(24)

        head = Signal(unit_layout)
        m.d.comb += head.eq(fifo[rd])
        D = self.max_demand
        buf = Array(Signal(BB, name=f"db{i}") for i in range(D))
        newbit = Signal(D)
        nbuf = Signal(range(D + 2))
        i_dem = Signal(16)
        g_cur, gA, gS = Signal(BB + 1), Signal(BB + 1), Signal(BB + 1)
        a_run, a_open, run, prevb, have_prev = (Signal(BB + 1), Signal(), Signal(BB + 1),
                                                Signal(BB), Signal())
        fin_a, fin_w = Signal(BB + 1), Signal(BB + 1)
        orow = Signal(row_layout)
        hits = Signal(E)
        j = Signal(range(D + 1))
        plan_b = Signal()
        # the restore beat being expanded: (req, layer), next block, blocks
        r_req, r_layer = Signal(w.req), Signal(w.layer)
        r_blk, r_nb = Signal(BB + 1), Signal(BB + 1)
        return SimpleNamespace(
            r_req=r_req, r_layer=r_layer, r_blk=r_blk, r_nb=r_nb,
            unit_layout=unit_layout, slot_layout=slot_layout, row_layout=row_layout,
            rows=rows, mem=mem, rp=rp, wp=wp,
            slots=slots, layers=layers, n_slots=n_slots, n_layers=n_layers, si=si, li=li,
            in_step=in_step, loaded=loaded, ended=ended, w_first=w_first, w_step=w_step,
            Q=Q, fifo=fifo, rd=rd, wr=wr, count=count, tail=tail, t_cur=t_cur, p=p,
            keep_prev=keep_prev, keep_cur=keep_cur, head=head,
            D=D, buf=buf, newbit=newbit, nbuf=nbuf, i_dem=i_dem, g_cur=g_cur, gA=gA, gS=gS,
            a_run=a_run, a_open=a_open, run=run, prevb=prevb, have_prev=have_prev,
            fin_a=fin_a, fin_w=fin_w, orow=orow, hits=hits, j=j, plan_b=plan_b)

    # ---------------------------------------------------------------- class of a block
    def _elaborate_prediction(self, s):
        """Combinational: adds ``budget`` (adaptive keep budget), ``cls_of(u, b)`` (the
        residency class of block ``b`` of unit ``u``) and the tail unit's next predicted
        block at or after ``t_cur``: ``t_cand``, ``t_has`` (it exists)."""
        E, cfg = self.entries, self.config
        keep_prev, tail, t_cur = s.keep_prev, s.tail, s.t_cur
        budget_c = self.frames - self.frames // 8
        two_d = cfg.distance * 2
        budget = Mux(two_d >= budget_c, 0, budget_c - two_d)

        def in_keep(u, b):
            hit = Const(0)
            for x in range(E):
                hit = hit | ((u.e[x].conf >= 2) & (u.e[x].block == b))
            return u.seen & ((b < u.pA) | (b >= u.pS) | hit)

        def cls_of(u, b):
            nb = _nblocks(u.seq_len)
            h = (b * HASH_MUL[0] + u.layer * HASH_MUL[1] + u.slot * HASH_MUL[2])[:KEEP_HASH_BITS]
            keep = (keep_prev <= budget) | (h * keep_prev < (budget << KEEP_HASH_BITS))
            adaptive = Mux(in_keep(u, b) & keep, 2, 1)
            static = Mux((b == 0) | (b + self.recent_blocks >= nb), 2, 1)
            return Mux(u.mode == MODE_STREAM, 0,
                       Mux(u.mode == MODE_FIXED, u.fixcls,
                           Mux(u.mode == MODE_STATIC, static, adaptive)))

        # next predicted block of the tail unit at or after t_cur
        t_nb = _nblocks(tail.seq_len)
        cands = [(tail.e[x].conf != 0) & (tail.e[x].block >= t_cur) & (tail.e[x].block < tail.pS)
                 for x in range(E)]
        best_v, best_b = _reduce(
            [(cands[x], tail.e[x].block) for x in range(E)],
            lambda a, b: (a[0] | b[0], Mux(a[0] & (~b[0] | (a[1] <= b[1])), a[1], b[1])))
        suf = Mux(t_cur > tail.pS, t_cur, tail.pS)
        t_cand = Mux(t_cur < tail.pA, t_cur, Mux(best_v, best_b, suf))
        s.budget, s.cls_of, s.t_cand, s.t_has = budget, cls_of, t_cand, t_cand < t_nb

    def _elaborate_output(self, m, s):
        """The ``ops`` register: cleared when read; ``s.emit(kind, u, b, cls, fresh)`` gives
        the statements that load it (valid from the next cycle); ``s.out_free``: it may be
        loaded this cycle."""
        ops = self.ops
        s.out_free = ~ops.valid | ops.ready
        with m.If(ops.ready):
            m.d.sync += ops.valid.eq(0)

        def emit(kind, u, b, cls, fresh=0):
            return [ops.valid.eq(1), ops.p.kind.eq(KIND[kind]), ops.p.req.eq(u.req),
                    ops.p.layer.eq(u.layer), ops.p.block.eq(b), ops.p.count.eq(1),
                    ops.p.cls.eq(cls), ops.p.fresh.eq(fresh)]
        s.emit = emit

    # ---------------------------------------------------------------- plan of a unit
    def _elaborate_plan(self, m, s):
        """Combinational: ``s.new``, the unit the walker plans next (slot ``si``, layer
        ``li`` of the loaded step) with its class mode and predicted list from the predictor
        row; the predictor read address (``s.obs_rd``: the head unit's row instead);
        ``s.disabled``, ``s.adaptive_pol``."""
        w, cfg = self.widths, self.config
        slots, layers, si, li, head, rp = s.slots, s.layers, s.si, s.li, s.head, s.rp
        sd = Signal(s.slot_layout)
        ly = Signal(w.layer)
        obs_rd = Signal()
        m.d.comb += [sd.eq(slots[si]), ly.eq(layers[li]),
                     rp.addr.eq(Mux(obs_rd, Cat(head.layer, head.slot), Cat(ly, sd.slot)))]
        row = rp.data
        nb_new = _nblocks(sd.seq_len)
        new = Signal(s.unit_layout)
        disabled = cfg.policy == POLICY["disabled"]
        adaptive_pol = cfg.policy == POLICY["adaptive"]
        fixed = (sd.hint == HINT["pin"]) | (sd.hint == HINT["priority"])
        m.d.comb += [new.first.eq(s.w_first), new.step.eq(s.w_step), new.slot.eq(sd.slot),
                     new.req.eq(sd.req), new.layer.eq(ly), new.seq_len.eq(sd.seq_len),
                     new.base.eq(s.p), new.fixcls.eq(Mux(sd.hint == HINT["pin"], 3, 2))]
        with m.If(disabled | (sd.hint == HINT["stream"])):
            m.d.comb += [new.mode.eq(MODE_STREAM), new.pA.eq(0), new.pS.eq(nb_new)]
        with m.Elif(~adaptive_pol | ~row.seen):
            m.d.comb += [new.mode.eq(Mux(fixed, MODE_FIXED,
                                         Mux(adaptive_pol, MODE_ADAPTIVE, MODE_STATIC))),
                         new.pA.eq(nb_new), new.pS.eq(nb_new)]
        with m.Else():
            m.d.comb += [new.mode.eq(Mux(fixed, MODE_FIXED, MODE_ADAPTIVE)), new.seen.eq(1),
                         new.pA.eq(Mux(row.a < nb_new, row.a, nb_new)),
                         new.pS.eq(Mux(row.w >= nb_new, 0, nb_new - row.w)),
                         new.e.eq(row.e)]
        s.new, s.obs_rd, s.disabled, s.adaptive_pol = new, obs_rd, disabled, adaptive_pol

    # ---------------------------------------------------------------- step intake
    def _take_step_beat(self, m, s):
        """Statements that take the ``step`` beat on the bus (at the next clock edge)."""
        st = self.step.p
        slots, layers, n_slots, n_layers = s.slots, s.layers, s.n_slots, s.n_layers
        in_step = s.in_step
        ok_slot = in_step & (n_slots < self.max_slots)
        ok_layer = in_step & (n_layers < self.max_layers)
        ns_next = n_slots + ((st.kind == STEP_KIND["slot"]) & ok_slot)
        nl_next = n_layers + ((st.kind == STEP_KIND["layer"]) & ok_layer)
        with m.Switch(st.kind):
            with m.Case(STEP_KIND["header"]):
                m.d.sync += [in_step.eq(~st.last), n_slots.eq(0), n_layers.eq(0),
                             s.w_step.eq(st.step), s.ended.eq(st.last & st.end)]
            with m.Case(STEP_KIND["slot"]):
                with m.If(ok_slot):
                    m.d.sync += [slots[n_slots].slot.eq(st.slot), slots[n_slots].req.eq(st.req),
                                 slots[n_slots].seq_len.eq(st.seq_len),
                                 slots[n_slots].hint.eq(st.hint), n_slots.eq(ns_next)]
                with m.Else():
                    m.d.sync += self.bad_step.eq(1)
            with m.Case(STEP_KIND["layer"]):
                with m.If(ok_layer):
                    m.d.sync += [layers[n_layers].eq(st.layer), n_layers.eq(nl_next)]
                with m.Else():
                    m.d.sync += self.bad_step.eq(1)
            with m.Case(STEP_KIND["restore"]):
                with m.If(in_step):
                    nb = _nblocks(st.seq_len)
                    m.d.sync += [s.r_req.eq(st.req), s.r_layer.eq(st.layer), s.r_blk.eq(0),
                                 s.r_nb.eq(nb)]
                    with m.If(nb != 0):
                        m.next = "RESTORE"
                with m.Else():
                    m.d.sync += self.bad_step.eq(1)
            with m.Default():
                m.d.sync += self.bad_step.eq(1)
        with m.If(st.last & (st.kind != STEP_KIND["header"]) & in_step):
            m.d.sync += [in_step.eq(0), s.ended.eq(st.end), s.si.eq(0), s.li.eq(0),
                         s.w_first.eq(1), s.loaded.eq((ns_next != 0) & (nl_next != 0))]

    # ---------------------------------------------------------------- demand element
    def _elaborate_demand_element(self, s):
        """Combinational, for the head unit: ``h_nb`` (its blocks), ``ext`` (pattern
        ``list``), the next demand block ``dem_b`` and whether there is one (``dem_ok``),
        the prefetch limit ``lim``; for the predictor update on ``orow``: ``o_conf_ne``,
        ``o_used``, ``o_free_i`` (a free entry), ``o_min_i`` (the weakest entry)."""
        E, cfg = self.entries, self.config
        head, g_cur, gA, gS, orow = s.head, s.g_cur, s.gA, s.gS, s.orow
        h_nb = _nblocks(head.seq_len)
        ext = cfg.pattern == PATTERN["list"]
        b_int = Mux(g_cur < gA, g_cur, Mux(g_cur > gS, g_cur, gS))
        s.dem_b = Mux(ext, self.demand.p.block, b_int)
        s.dem_ok = Mux(ext, self.demand.valid, b_int < h_nb)
        # a streamed unit's reads do not move the prefetch window (models/cdu.FrontEnd)
        s.lim = head.base + Mux(head.mode == MODE_STREAM, 0, s.i_dem) + cfg.distance
        s.h_nb, s.ext = h_nb, ext

        # predictor update helpers (orow)
        o_conf_ne = [orow.e[x].conf != 0 for x in range(E)]
        s.o_conf_ne = o_conf_ne
        s.o_used = _popcount(o_conf_ne)
        _, s.o_free_i = _reduce(
            [(~o_conf_ne[x], Const(x, _log2(E))) for x in range(E)],
            lambda a, b: (a[0] | b[0], Mux(a[0], a[1], b[1])))
        _, s.o_min_i = _reduce(
            [(Cat(orow.e[x].block, orow.e[x].conf), Const(x, _log2(E))) for x in range(E)],
            lambda a, b: (Mux(a[0] <= b[0], a[0], b[0]), Mux(a[0] <= b[0], a[1], b[1])))

    # ---------------------------------------------------------------- FSM states
    def _elaborate_unit_start(self, m, s):
        """State UNIT: start the head unit's demand walk (its demand window from the pattern
        counters), or let the walker plan when no unit is planned."""
        cfg = self.config
        count, head, h_nb = s.count, s.head, s.h_nb
        with m.State("UNIT"):
            with m.If(count != 0):
                with m.If(head.first):
                    m.d.sync += [s.keep_prev.eq(s.keep_cur), s.keep_cur.eq(0)]
                sb_ = cfg.sink_blocks
                A_win = Mux(sb_ < h_nb, sb_, h_nb)
                S_win = Mux(cfg.window_blocks >= h_nb, 0, h_nb - cfg.window_blocks)
                burst = (head.step >= cfg.burst_start) & \
                    (head.step < cfg.burst_start + cfg.burst_len)
                rr = Mux(burst & (cfg.reread_blocks > sb_), cfg.reread_blocks, sb_)
                A_rr = Mux(rr < h_nb, rr, h_nb)
                with m.Switch(cfg.pattern):
                    with m.Case(PATTERN["full"]):
                        m.d.sync += [s.gA.eq(h_nb), s.gS.eq(h_nb)]
                    with m.Case(PATTERN["window"]):
                        m.d.sync += [s.gA.eq(A_win), s.gS.eq(S_win)]
                    with m.Default():
                        m.d.sync += [s.gA.eq(A_rr), s.gS.eq(S_win)]
                m.d.sync += [s.i_dem.eq(0), s.g_cur.eq(0), s.a_run.eq(0), s.a_open.eq(1),
                             s.run.eq(0), s.have_prev.eq(0), s.nbuf.eq(0), s.prevb.eq(0)]
                m.next = "WOP"
            with m.Else():
                m.d.sync += s.plan_b.eq(0)
                m.next = "PLAN"

    def _elaborate_walker(self, m, s):
        """State PLAN: the walker pushes ``s.new`` into the unit FIFO and moves to the next
        (slot, layer), or takes step descriptor beats until a step is loaded."""
        Q, count, loaded, si, li = s.Q, s.count, s.loaded, s.si, s.li
        wr, plan_b = s.wr, s.plan_b
        with m.State("PLAN"):
            with m.If(loaded):
                with m.If(count == Q):
                    m.d.sync += self.overflow.eq(1)
                with m.Else():
                    m.d.sync += [s.fifo[wr].eq(s.new), wr.eq(Mux(wr == Q - 1, 0, wr + 1)),
                                 count.eq(count + 1), s.tail.eq(s.new), s.t_cur.eq(0),
                                 s.w_first.eq(0)]
                    with m.If(si == s.n_slots - 1):
                        m.d.sync += si.eq(0)
                        with m.If(li == s.n_layers - 1):
                            m.d.sync += loaded.eq(0)
                        with m.Else():
                            m.d.sync += li.eq(li + 1)
                    with m.Else():
                        m.d.sync += si.eq(si + 1)
                with m.If(plan_b):
                    m.next = "STREAM"
                with m.Else():
                    m.next = "UNIT"
            with m.Elif(self.step.valid):
                m.d.comb += self.step.ready.eq(1)
                self._take_step_beat(m, s)
            with m.Elif(s.ended & plan_b):
                m.next = "STREAM"

    def _elaborate_demand(self, m, s):
        """States WOP (the head unit's new-token write) and STREAM: per demand block, a P op
        of the walker's next predicted block while ``p < lim``, else the R op (ops valid
        from the next cycle); the walker plans a unit when the tail has nothing left."""
        cfg, D = self.config, s.D
        head, tail, count, p, h_nb, ext = s.head, s.tail, s.count, s.p, s.h_nb, s.ext
        i_dem, prevb, have_prev, run, a_open, nbuf = (s.i_dem, s.prevb, s.have_prev, s.run,
                                                      s.a_open, s.nbuf)
        emit, cls_of, out_free = s.emit, s.cls_of, s.out_free
        with m.State("WOP"):
            last = (head.seq_len - 1)[4:]
            with m.If(out_free):
                m.d.sync += emit("W", head, last, cls_of(head, last),
                                 (head.seq_len - 1)[:4] == 0)
                m.next = "STREAM"

        with m.State("STREAM"):
            observe = s.adaptive_pol & (head.mode != MODE_STREAM)
            with m.If(~ext & ~s.dem_ok):
                with m.If(observe):
                    m.next = "OBS_RD"
                with m.Else():
                    m.next = "POP"
            with m.Elif(s.dem_ok & out_free):
                # disabled: nothing is ever predicted, so the walker has nothing to find
                walk = (cfg.distance != 0) & ~s.disabled
                pf = walk & s.t_has & (p < s.lim)
                need_plan = walk & ~s.t_has & (count != s.Q) & \
                    (s.loaded | ~s.ended | self.step.valid)
                with m.If(walk & ~s.t_has & (count == s.Q) &
                          (s.loaded | ~s.ended | self.step.valid)):
                    m.d.sync += self.overflow.eq(1)
                with m.If(pf):
                    m.d.sync += emit("P", tail, s.t_cand, cls_of(tail, s.t_cand))
                    m.d.sync += [p.eq(p + 1), s.t_cur.eq(s.t_cand + 1)]
                with m.Elif(need_plan):
                    m.d.sync += s.plan_b.eq(1)
                    m.next = "PLAN"
                with m.Else():
                    b = s.dem_b
                    m.d.sync += emit("R", head, b, cls_of(head, b))
                    m.d.comb += self.demand.ready.eq(ext)
                    m.d.sync += [i_dem.eq(i_dem + 1), s.g_cur.eq(b + 1), prevb.eq(b),
                                 have_prev.eq(1),
                                 run.eq(Mux(have_prev & (b == prevb + 1), run + 1, 1))]
                    with m.If(a_open & (b == i_dem)):
                        m.d.sync += s.a_run.eq(i_dem + 1)
                    with m.Else():
                        m.d.sync += a_open.eq(0)
                    with m.If(ext):
                        with m.If((b >= h_nb) | (have_prev & (b <= prevb))):
                            m.d.sync += self.bad_demand.eq(1)
                        with m.If(nbuf < D):
                            m.d.sync += s.buf[nbuf].eq(b)
                        with m.Else():
                            m.d.sync += self.overflow.eq(1)
                        m.d.sync += nbuf.eq(nbuf + 1)
                        with m.If(self.demand.p.last):
                            with m.If(observe):
                                m.next = "OBS_RD"
                            with m.Else():
                                m.next = "POP"

    def _elaborate_restore(self, m, s):
        """State RESTORE: the S ops of the restore beat just taken, blocks ``0 .. r_nb - 1``
        of (``r_req``, ``r_layer``), one per cycle while ``ops`` is free; then back to PLAN
        (which goes on taking the step's beats, or plans)."""
        with m.State("RESTORE"):
            with m.If(s.out_free):
                u = SimpleNamespace(req=s.r_req, layer=s.r_layer)
                m.d.sync += s.emit("S", u, s.r_blk, 0)
                m.d.sync += s.r_blk.eq(s.r_blk + 1)
                with m.If(s.r_blk + 1 == s.r_nb):
                    m.next = "PLAN"

    def _elaborate_observe(self, m, s):
        """States OBS_RD .. OBS_WB (adaptive policy): read the head unit's predictor row,
        scan the demand buffer against its scatter entries, age the counters, insert new
        blocks and write the row back with the prefix/suffix runs; one row per unit."""
        E, D = self.entries, s.D
        orow, hits, newbit, j, nbuf, buf = s.orow, s.hits, s.newbit, s.j, s.nbuf, s.buf
        fin_a, fin_w, head, o_nb, wp = s.fin_a, s.fin_w, s.head, s.h_nb, s.wp
        with m.State("OBS_RD"):
            m.d.comb += s.obs_rd.eq(1)
            m.d.sync += [orow.eq(s.rp.data), fin_a.eq(s.a_run),
                         fin_w.eq(Mux(s.prevb == o_nb - 1, s.run, 0)), j.eq(0), hits.eq(0),
                         newbit.eq(0),
                         nbuf.eq(Mux(nbuf > D, D, nbuf))]
            m.next = "OBS_SCAN"

        with m.State("OBS_SCAN"):
            with m.If(j >= nbuf):
                m.d.sync += j.eq(0)
                m.next = "OBS_UPD"
            with m.Else():
                b = buf[j]
                scat = (b >= fin_a) & (b + fin_w < o_nb)
                match = Cat(*[s.o_conf_ne[x] & (orow.e[x].block == b) for x in range(E)])
                with m.If(scat):
                    m.d.sync += hits.eq(hits | match)
                    with m.If(match == 0):
                        m.d.sync += newbit.bit_select(j, 1).eq(1)
                m.d.sync += j.eq(j + 1)

        with m.State("OBS_UPD"):
            for x in range(E):
                c = orow.e[x].conf
                with m.If(c != 0):
                    m.d.sync += orow.e[x].conf.eq(Mux(hits[x], Mux(c == 3, 3, c + 1), c - 1))
            m.next = "OBS_INS"

        with m.State("OBS_INS"):
            with m.If(j >= nbuf):
                m.next = "OBS_WB"
            with m.Else():
                with m.If(newbit.bit_select(j, 1)):
                    b = buf[j]
                    o_free_i, o_min_i = s.o_free_i, s.o_min_i
                    with m.If(s.o_used < E):
                        m.d.sync += [orow.e[o_free_i].block.eq(b), orow.e[o_free_i].conf.eq(1)]
                    with m.Elif(orow.e[o_min_i].conf <= 1):
                        m.d.sync += [orow.e[o_min_i].block.eq(b), orow.e[o_min_i].conf.eq(1)]
                m.d.sync += j.eq(j + 1)

        with m.State("OBS_WB"):
            m.d.comb += [wp.addr.eq(Cat(head.layer, head.slot)), wp.en.eq(1),
                         wp.data.seen.eq(1), wp.data.a.eq(fin_a), wp.data.w.eq(fin_w),
                         wp.data.e.eq(orow.e)]
            both = fin_a + fin_w
            over = Mux(both > o_nb, both - o_nb, 0)
            c2 = _popcount([orow.e[x].conf >= 2 for x in range(E)])
            m.d.sync += s.keep_cur.eq(s.keep_cur + both - over + c2)
            m.next = "POP"
