"""The DSU slot arbiter: slot records, MMIO registers, descriptor emission, completions,
per-slot watchdogs, the firmware heartbeat watchdog and the counters.

Split with the firmware (``docs/dsu.md``): the firmware decides — admission, the profile's
selection keys, the batch — and the arbiter keeps the records and does everything per cycle:
it moves the intake head into a slot (``ADMIT``, atomic with the pop), emits one descriptor per
chosen slot in slot order (``ISSUE``), applies completions and watchdog timeouts to the records
(rollback, bounded retry) and emits an outcome for every request that ends.

Round life cycle::

    IDLE --ISSUE ok--> SCAN (one slot per cycle; a chosen ACTIVE slot waits for descriptor ready)
                         --> RUN (completions / timeouts until none outstanding) --> IDLE, ROUND+1

The MMIO target answers in the cycle of ``valid`` (``ready = valid``); register map in
:mod:`tricut.rtl.dsu.regmap`.
"""

from amaranth import Array, Cat, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.data import View
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.wiring import In, Out

from .layouts import (COMPLETION_LAYOUT, DESCRIPTOR_LAYOUT, INTAKE_LAYOUT, OUTCOME_LAYOUT,
                      MmioSignature)
from .regmap import BY_NAME, MAX_HARTS, SLOT_BASE, SLOT_FIELD, SLOT_STRIDE, Reason, Result
from .regmap import SlotState as SS
from .regmap import Status

__all__ = ["SlotArbiter", "DSU_ID"]

DSU_ID = 0x44535531


def _off(name):
    return BY_NAME[name].offset


class SlotArbiter(wiring.Component):
    """Slot records and the MMIO register block of the DSU.

    Parameters
    ----------
    n_slots : int
        Decode slots, 1..256.
    intake_depth : int
        Intake FIFO entries (the firmware reads only the head).
    n_harts : int
        Harts with a busy-cycle counter (1..4).

    Members
    -------
    bus : In(MmioSignature)
        MMIO target; ``ready`` = ``valid`` (the transfer is the request cycle), ``rdata``
        combinational, ``err`` never (rejections go to ``CMD_STATUS``).
    intake : In(stream.Signature(INTAKE_LAYOUT))
        Requests in arrival order. ``intake_end`` : In(1) — nothing more will be pushed.
    descriptors : Out(stream.Signature(DESCRIPTOR_LAYOUT))
        Step descriptors, in slot order within a round.
    completions : In(stream.Signature(COMPLETION_LAYOUT))
        One per descriptor; accepted one per cycle (unless the outcome FIFO is full).
    outcomes : Out(stream.Signature(OUTCOME_LAYOUT))
        One per request that ended (completed, retries exhausted, too large).
    count_en : In(1)
        Heartbeat watchdog and busy counters run only while 1 (the cores run).
    degraded, round_busy : Out(1); round : Out(24)
        ``STATUS.DEGRADED``, ``STATUS.ROUND_BUSY`` and ``ROUND``, as ports for the host.
    """

    def __init__(self, *, n_slots=64, intake_depth=4, n_harts=1):
        for name, value, lo, hi in (("n_slots", n_slots, 1, 256),
                                    ("intake_depth", intake_depth, 1, 1024),
                                    ("n_harts", n_harts, 1, MAX_HARTS)):
            if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
                raise ValueError(f"{name} must be an integer in {lo}..{hi}, not {value!r}")
        self.n_slots = n_slots
        self.intake_depth = intake_depth
        self.n_harts = n_harts
        super().__init__({
            "bus": In(MmioSignature()),
            "intake": In(stream.Signature(INTAKE_LAYOUT)),
            "intake_end": In(1),
            "descriptors": Out(stream.Signature(DESCRIPTOR_LAYOUT)),
            "completions": In(stream.Signature(COMPLETION_LAYOUT)),
            "outcomes": Out(stream.Signature(OUTCOME_LAYOUT)),
            "count_en": In(1),
            "degraded": Out(1),
            "round_busy": Out(1),
            "round": Out(24),
        })

    def elaborate(self, platform):
        m = Module()
        N = self.n_slots

        # -- slot records ----------------------------------------------------------------
        def rec(name, width):
            return [Signal(width, name=f"slot{i}_{name}") for i in range(N)]
        st, req = rec("state", 2), rec("request", 16)
        seq, left = rec("seq_len", 24), rec("left", 16)
        prio, res = rec("priority", 2), rec("residency", 1)
        wait, arr = rec("wait", 16), rec("arrival", 24)
        ckpt, retr = rec("checkpoint", 24), rec("retries", 4)
        wd, gen = rec("watchdog", 24), rec("generated", 16)
        fields = {"STATE": st, "REQUEST": req, "SEQ_LEN": seq, "TOKENS_LEFT": left,
                  "PRIORITY": prio, "RESIDENCY": res, "WAIT": wait, "ARRIVAL_SEQ": arr,
                  "CHECKPOINT": ckpt, "RETRIES": retr, "WATCHDOG": wd, "GENERATED": gen}
        assert set(fields) == set(SLOT_FIELD)

        # -- configuration and status registers -------------------------------------------
        profile = Signal(2)
        max_retries = Signal(4, init=2)
        wd_limit = Signal(24, init=(1 << 24) - 1)
        long_ctx = Signal(24, init=4096)
        hb_limit = Signal(24, init=(1 << 24) - 1)
        cmd_status = Signal(8)
        admit_seq = Signal(24)
        batch = Signal(N)
        ended = Signal(N)
        rolled_back = Signal(N)
        round_ = Signal(24)
        degraded = Signal()
        hb_cnt = Signal(24)
        idle = Signal(MAX_HARTS)
        cnt = {name: Signal(32, name=f"cnt_{name.lower()}") for name in
               ("DESCRIPTORS", "ROLLBACKS", "TIMEOUTS", "BAD_COMPLETIONS", "BAD_ACCESSES",
                "OUTCOMES")}
        busy = [Signal(32, name=f"busy_cycles{h}") for h in range(MAX_HARTS)]

        m.submodules.intake_fifo = ififo = SyncFIFOBuffered(
            width=INTAKE_LAYOUT.size, depth=self.intake_depth)
        m.submodules.outcome_fifo = ofifo = SyncFIFOBuffered(
            width=OUTCOME_LAYOUT.size, depth=N + 2)
        m.d.comb += [
            ififo.w_data.eq(self.intake.payload), ififo.w_en.eq(self.intake.valid),
            self.intake.ready.eq(ififo.w_rdy),
            self.outcomes.valid.eq(ofifo.r_rdy), self.outcomes.payload.eq(ofifo.r_data),
            ofifo.r_en.eq(self.outcomes.ready),
        ]
        head = View(INTAKE_LAYOUT, ififo.r_data)
        outcome = Signal(OUTCOME_LAYOUT)
        m.d.comb += ofifo.w_data.eq(outcome)

        # -- round state machine ---------------------------------------------------------
        IDLE, SCAN, RUN = 0, 1, 2
        phase = Signal(2)
        scan_idx = Signal(range(N))
        outstanding = Signal(range(N + 1))
        m.d.comb += [self.round.eq(round_), self.degraded.eq(degraded),
                     self.round_busy.eq(phase != IDLE)]
        active_mask = Cat(s == SS.ACTIVE for s in st)

        A = lambda sigs: Array(sigs)  # noqa: E731
        cur_sel = batch.bit_select(scan_idx, 1) & (A(st)[scan_idx] == SS.ACTIVE)
        cur_seq1 = A(seq)[scan_idx] + 1
        d = self.descriptors.payload
        m.d.comb += [
            d.step.eq(round_), d.slot.eq(scan_idx), d.request.eq(A(req)[scan_idx]),
            d.seq_len.eq(cur_seq1), d.priority.eq(A(prio)[scan_idx]),
            d.residency.eq(cur_seq1 >= long_ctx),
            self.descriptors.valid.eq((phase == SCAN) & cur_sel),
        ]
        scan_step = Signal()     # scan handles slot scan_idx this cycle
        emitted = Signal()
        m.d.comb += [scan_step.eq((phase == SCAN) & (~cur_sel | self.descriptors.ready)),
                     emitted.eq((phase == SCAN) & cur_sel & self.descriptors.ready)]

        # -- completion / watchdog engine ------------------------------------------------
        comp = self.completions.payload
        SW = max(1, (N - 1).bit_length())
        comp_in_range = comp.slot < N
        comp_idx = comp.slot[:SW]
        comp_running = comp_in_range & (A(st)[comp_idx] == SS.RUNNING)
        expired = Cat((st[i] == SS.RUNNING) & (wd[i] >= wd_limit) for i in range(N))
        exp_idx = Signal(range(N))
        for i in reversed(range(N)):
            with m.If(expired[i]):
                m.d.comb += exp_idx.eq(i)
        eng_go = Signal()
        eng_slot = Signal(range(N))
        eng_res = Signal(2)
        m.d.comb += self.completions.ready.eq(ofifo.w_rdy)
        with m.If(self.completions.valid & ofifo.w_rdy):
            with m.If(~comp_running | (comp.result == Result.INVALID)):
                m.d.sync += cnt["BAD_COMPLETIONS"].eq(cnt["BAD_COMPLETIONS"] + 1)
            with m.If(comp_running):
                m.d.comb += [eng_go.eq(1), eng_slot.eq(comp_idx),
                             eng_res.eq(Mux(comp.result == Result.INVALID, Result.ERROR,
                                            comp.result))]
        with m.Elif(expired.any() & ofifo.w_rdy):
            m.d.comb += [eng_go.eq(1), eng_slot.eq(exp_idx), eng_res.eq(Result.TIMEOUT)]
        e_ok = eng_res == Result.OK
        e_left, e_retr = A(left)[eng_slot], A(retr)[eng_slot]
        e_gen, e_req = A(gen)[eng_slot], A(req)[eng_slot]
        e_ends = Mux(e_ok, e_left == 1, e_retr >= max_retries)

        # -- MMIO -------------------------------------------------------------------------
        bus = self.bus
        off = bus.addr[:16]
        wr = bus.valid & bus.we
        rd = bus.valid & ~bus.we
        status = Signal(8)           # this access's CMD_STATUS (writes; rejected reads)
        set_status = Signal()
        m.d.comb += bus.ready.eq(bus.valid)
        admit_go = Signal()
        admit_slot = Signal(range(N))
        reject_go = Signal()
        issue_go = Signal()
        busy_round = phase != IDLE

        def reject(code):
            m.d.comb += [status.eq(code), set_status.eq(1)]

        rdata = Signal(32)
        m.d.comb += bus.rdata.eq(Mux(rd, rdata, 0))
        n_batch_words = BY_NAME["BATCH"].count
        with m.If(off >= SLOT_BASE):
            rel = off - SLOT_BASE
            s_idx = rel[SLOT_STRIDE.bit_length() - 1:]
            f_idx = rel[2:SLOT_STRIDE.bit_length() - 1]
            with m.If(wr):
                reject(Status.READ_ONLY)
            with m.Elif(rd & (s_idx >= N)):
                reject(Status.BAD_SLOT)
            with m.Elif(rd & (f_idx >= len(SLOT_FIELD))):
                reject(Status.BAD_ADDR)
            with m.Elif(rd):
                with m.Switch(f_idx):
                    for name, i in SLOT_FIELD.items():
                        with m.Case(i):
                            m.d.comb += rdata.eq(A(fields[name])[s_idx[:SW]])
        with m.Else():
            with m.Switch(off):
                def ro(name, value):
                    with m.Case(_off(name)):
                        m.d.comb += rdata.eq(value)
                        with m.If(wr):
                            reject(Status.READ_ONLY)

                def cfg(name, sig, bad, code=Status.BAD_VALUE):
                    with m.Case(_off(name)):
                        m.d.comb += rdata.eq(sig)
                        with m.If(wr):
                            with m.If(bad):
                                reject(code)
                            with m.Else():
                                reject(Status.OK)
                                m.d.sync += sig.eq(bus.wdata)

                ro("ID", DSU_ID)
                ro("STATUS", Cat(busy_round, degraded, ififo.r_rdy, self.intake_end,
                                 ~ofifo.w_rdy))
                ro("CMD_STATUS", cmd_status)
                ro("N_SLOTS", N)
                ro("ROUND", round_)
                for name, sig in cnt.items():
                    ro(name, sig)
                for h in range(MAX_HARTS):
                    with m.Case(_off("BUSY_CYCLES") + 4 * h):
                        m.d.comb += rdata.eq(busy[h])
                        with m.If(wr):
                            reject(Status.READ_ONLY)
                ro("INTAKE_REQUEST", Mux(ififo.r_rdy, head.request, 0))
                ro("INTAKE_PROMPT", Mux(ififo.r_rdy, head.prompt, 0))
                ro("INTAKE_MAX_NEW", Mux(ififo.r_rdy, head.max_new, 0))
                ro("INTAKE_PRIORITY", Mux(ififo.r_rdy, head.priority, 0))
                ro("INTAKE_ARRIVAL", Mux(ififo.r_rdy, head.arrival, 0))
                big = lambda v: (v == 0) | (v >= (1 << 24))  # noqa: E731
                cfg("PROFILE", profile, bus.wdata > 2, Status.BAD_PROFILE)
                cfg("MAX_RETRIES", max_retries, bus.wdata > 15)
                cfg("WATCHDOG_LIMIT", wd_limit, big(bus.wdata))
                cfg("LONG_CTX", long_ctx, big(bus.wdata))
                cfg("HEARTBEAT_LIMIT", hb_limit, big(bus.wdata))
                cfg("ADMIT_SEQ", admit_seq, bus.wdata >= (1 << 24))
                with m.Case(_off("HEARTBEAT")):
                    with m.If(wr):
                        reject(Status.OK)
                with m.Case(_off("CORE_IDLE")):
                    with m.If(wr):
                        reject(Status.OK)
                        with m.Switch(bus.hart):
                            for h in range(MAX_HARTS):
                                with m.Case(h):
                                    m.d.sync += idle[h].eq(bus.wdata[0])
                with m.Case(_off("ADMIT")):
                    with m.If(wr):
                        with m.If(busy_round):
                            reject(Status.BUSY)
                        with m.Elif(bus.wdata >= N):
                            reject(Status.BAD_SLOT)
                        with m.Elif(A(st)[bus.wdata[:SW]] != SS.FREE):
                            reject(Status.SLOT_BUSY)
                        with m.Elif(~ififo.r_rdy):
                            reject(Status.INTAKE_EMPTY)
                        with m.Else():
                            reject(Status.OK)
                            m.d.comb += [admit_go.eq(1), admit_slot.eq(bus.wdata[:SW]),
                                         ififo.r_en.eq(1)]
                with m.Case(_off("REJECT")):
                    with m.If(wr):
                        with m.If(busy_round):
                            reject(Status.BUSY)
                        with m.Elif((bus.wdata == 0) | (bus.wdata > 3)):
                            reject(Status.BAD_VALUE)
                        with m.Elif(~ififo.r_rdy):
                            reject(Status.INTAKE_EMPTY)
                        with m.Elif(~ofifo.w_rdy):
                            reject(Status.OUTCOME_FULL)
                        with m.Else():
                            reject(Status.OK)
                            m.d.comb += [reject_go.eq(1), ififo.r_en.eq(1)]
                with m.Case(_off("ISSUE")):
                    with m.If(wr):
                        with m.If(busy_round):
                            reject(Status.BUSY)
                        with m.Elif((batch & ~active_mask).any()):
                            reject(Status.BAD_BATCH)
                        with m.Else():
                            reject(Status.OK)
                            m.d.comb += issue_go.eq(1)
                for k in range(n_batch_words):
                    lo, hi = 32 * k, min(32 * k + 32, N)
                    with m.Case(_off("BATCH") + 4 * k):
                        if lo < N:
                            m.d.comb += rdata.eq(batch[lo:hi])
                        with m.If(wr):
                            legal = (bus.wdata >> (hi - lo)) == 0 if lo < N else bus.wdata == 0
                            with m.If(busy_round):
                                reject(Status.BUSY)
                            with m.Elif(~legal):
                                reject(Status.BAD_VALUE)
                            with m.Else():
                                reject(Status.OK)
                                if lo < N:
                                    m.d.sync += batch[lo:hi].eq(bus.wdata[:hi - lo])
                for name, sig in (("ENDED", ended), ("ROLLED_BACK", rolled_back)):
                    for k in range(BY_NAME[name].count):
                        lo, hi = 32 * k, min(32 * k + 32, N)
                        with m.Case(_off(name) + 4 * k):
                            if lo < N:
                                m.d.comb += rdata.eq(sig[lo:hi])
                            with m.If(wr):
                                reject(Status.READ_ONLY)
                # write-only registers read as 0
                for name in ("HEARTBEAT", "CORE_IDLE", "ADMIT", "REJECT", "ISSUE"):
                    assert BY_NAME[name].access == "WO"
                with m.Default():
                    reject(Status.BAD_ADDR)
        hb_restart = wr & (status == Status.OK) & (
            (off == _off("HEARTBEAT")) | (off == _off("HEARTBEAT_LIMIT")))   # a new limit too
        with m.If(bus.valid & set_status & (wr | (status != Status.OK))):
            m.d.sync += cmd_status.eq(status)
            with m.If(status != Status.OK):
                m.d.sync += cnt["BAD_ACCESSES"].eq(cnt["BAD_ACCESSES"] + 1)

        # -- outcome FIFO writes: the engine (round in flight) or REJECT (idle) --------------
        push_outcome = Signal()
        with m.If(eng_go & e_ends):
            m.d.comb += [push_outcome.eq(1), outcome.request.eq(e_req),
                         outcome.status.eq(~e_ok), outcome.tokens.eq(Mux(e_ok, e_gen + 1, e_gen)),
                         outcome.reason.eq(Mux(e_ok, Reason.NONE,
                                               Mux(eng_res == Result.TIMEOUT, Reason.TIMEOUT,
                                                   Reason.ERROR))),
                         outcome.step.eq(round_)]
        with m.Elif(reject_go):
            m.d.comb += [push_outcome.eq(1), outcome.request.eq(head.request),
                         outcome.status.eq(1), outcome.tokens.eq(0),
                         outcome.reason.eq(bus.wdata[:2]), outcome.step.eq(round_)]
        m.d.comb += ofifo.w_en.eq(push_outcome)
        with m.If(push_outcome):
            m.d.sync += cnt["OUTCOMES"].eq(cnt["OUTCOMES"] + 1)

        # -- record updates ----------------------------------------------------------------
        for i in range(N):
            with m.If(st[i] == SS.RUNNING):
                m.d.sync += wd[i].eq(wd[i] + 1)
            with m.If(admit_go & (admit_slot == i)):
                m.d.sync += [st[i].eq(SS.ACTIVE), req[i].eq(head.request),
                             seq[i].eq(head.prompt), ckpt[i].eq(head.prompt),
                             left[i].eq(head.max_new), prio[i].eq(head.priority),
                             arr[i].eq(admit_seq), wait[i].eq(0), retr[i].eq(0),
                             gen[i].eq(0), wd[i].eq(0), res[i].eq(0)]
            with m.If(scan_step & (scan_idx == i) & (st[i] == SS.ACTIVE)):
                with m.If(batch[i]):
                    m.d.sync += [st[i].eq(SS.RUNNING), wait[i].eq(0), wd[i].eq(0),
                                 res[i].eq(seq[i] + 1 >= long_ctx)]
                with m.Elif(wait[i] != 0xFFFF):
                    m.d.sync += wait[i].eq(wait[i] + 1)
            with m.If(eng_go & (eng_slot == i)):
                with m.If(e_ok):
                    m.d.sync += [seq[i].eq(seq[i] + 1), ckpt[i].eq(seq[i] + 1),
                                 left[i].eq(left[i] - 1), gen[i].eq(gen[i] + 1), retr[i].eq(0),
                                 st[i].eq(Mux(left[i] == 1, SS.FREE, SS.ACTIVE))]
                with m.Else():
                    m.d.sync += [seq[i].eq(ckpt[i]), retr[i].eq(retr[i] + 1),
                                 st[i].eq(Mux(retr[i] >= max_retries, SS.FREE, SS.ACTIVE))]

        with m.If(issue_go):
            m.d.sync += [ended.eq(0), rolled_back.eq(0)]
        for i in range(N):
            with m.If(eng_go & (eng_slot == i)):
                m.d.sync += [ended[i].eq(e_ends), rolled_back[i].eq(~e_ok)]
        with m.If(eng_go & ~e_ok):
            m.d.sync += cnt["ROLLBACKS"].eq(cnt["ROLLBACKS"] + 1)
        with m.If(eng_go & (eng_res == Result.TIMEOUT)):
            m.d.sync += cnt["TIMEOUTS"].eq(cnt["TIMEOUTS"] + 1)
        with m.If(emitted):
            m.d.sync += cnt["DESCRIPTORS"].eq(cnt["DESCRIPTORS"] + 1)
        m.d.sync += outstanding.eq(outstanding + emitted - eng_go)

        with m.Switch(phase):
            with m.Case(IDLE):
                with m.If(issue_go):
                    m.d.sync += [phase.eq(SCAN), scan_idx.eq(0)]
            with m.Case(SCAN):
                with m.If(scan_step):
                    m.d.sync += scan_idx.eq(scan_idx + 1)
                    with m.If(scan_idx == N - 1):
                        m.d.sync += [phase.eq(RUN), scan_idx.eq(0)]
            with m.Case(RUN):
                with m.If((outstanding == 0) | ((outstanding == 1) & eng_go)):
                    m.d.sync += [phase.eq(IDLE), round_.eq(round_ + 1)]

        # -- heartbeat watchdog and busy counters ---------------------------------------
        with m.If(self.count_en):
            m.d.sync += hb_cnt.eq(Mux(hb_cnt == (1 << 24) - 1, hb_cnt, hb_cnt + 1))
            with m.If(hb_cnt >= hb_limit):
                m.d.sync += degraded.eq(1)
            for h in range(self.n_harts):
                with m.If(~idle[h]):
                    m.d.sync += busy[h].eq(busy[h] + 1)
        with m.If(hb_restart):
            m.d.sync += hb_cnt.eq(0)
        return m
