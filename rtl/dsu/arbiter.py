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

from types import SimpleNamespace

from amaranth import Array, Cat, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.data import View
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.wiring import In, Out

from .layouts import (COMPLETION_LAYOUT, DESCRIPTOR_LAYOUT, HCMD_LAYOUT, INTAKE_LAYOUT,
                      MOVE_LAYOUT, OUTCOME_LAYOUT, MmioSignature)
from .regmap import BY_NAME, MAX_HARTS, SLOT_BASE, SLOT_FIELD, SLOT_STRIDE, Reason, Result
from .regmap import SlotState as SS
from .regmap import Profile, Status

__all__ = ["SlotArbiter", "DSU_ID"]

DSU_ID = 0x44535531

#: round phases (``STATUS.ROUND_BUSY`` = phase != IDLE)
_IDLE, _SCAN, _RUN = 0, 1, 2


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
        One per request that ended (completed, retries exhausted, too large) and one per
        completed session turn.
    moves : Out(stream.Signature(MOVE_LAYOUT))
        The KV movements the firmware decided (``MOVE``), in command order.
    count_en : In(1)
        Heartbeat watchdog and busy counters run only while 1 (the cores run).
    degraded, round_busy : Out(1); round : Out(24)
        ``STATUS.DEGRADED``, ``STATUS.ROUND_BUSY`` and ``ROUND``, as ports for the host.
    issued : Out(1); issued_count : Out(range(n_slots + 1))
        An ``ISSUE`` command was accepted this cycle (round ``round`` starts), and the number
        of descriptors it will emit (``popcount(BATCH)``): the decode tile's round beat.
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
            "moves": Out(stream.Signature(MOVE_LAYOUT)),
            "count_en": In(1),
            "degraded": Out(1),
            "round_busy": Out(1),
            "round": Out(24),
            "issued": Out(1),
            "issued_count": Out(range(n_slots + 1)),
        })

    def elaborate(self, platform):
        m = Module()
        a = self._registers()
        self._elaborate_fifos(m, a)
        self._elaborate_scan(m, a)
        self._elaborate_engine(m, a)
        self._elaborate_mmio(m, a)
        self._elaborate_outcomes(m, a)
        self._elaborate_records(m, a)
        self._elaborate_round(m, a)
        self._elaborate_heartbeat(m, a)
        return m

    # -- state ------------------------------------------------------------------------------
    def _registers(self):
        """Slot records (``st``, ``req``, ``seq``, ``left``, ``prio``, ``res``, ``wait``,
        ``arr``, ``ckpt``, ``retr``, ``wd``, ``gen``: one signal per slot; ``fields`` maps the
        register-map field names to them), configuration and status registers and the
        counters (``cnt``, ``busy``)."""
        N = self.n_slots

        def rec(name, width):
            return [Signal(width, name=f"slot{i}_{name}") for i in range(N)]
        st, req = rec("state", 2), rec("request", 16)
        seq, left = rec("seq_len", 24), rec("left", 16)
        prio, res = rec("priority", 2), rec("residency", 1)
        wait, arr = rec("wait", 16), rec("arrival", 24)
        ckpt, retr = rec("checkpoint", 24), rec("retries", 4)
        wd, gen = rec("watchdog", 24), rec("generated", 16)
        cont = rec("continues", 1)
        fields = {"STATE": st, "REQUEST": req, "SEQ_LEN": seq, "TOKENS_LEFT": left,
                  "PRIORITY": prio, "RESIDENCY": res, "WAIT": wait, "ARRIVAL_SEQ": arr,
                  "CHECKPOINT": ckpt, "RETRIES": retr, "WATCHDOG": wd, "GENERATED": gen,
                  "CONTINUES": cont}
        assert set(fields) == set(SLOT_FIELD)

        # -- configuration and status registers -------------------------------------------
        reset = lambda name: BY_NAME[name].reset  # noqa: E731 (regmap: one source of truth)
        profile = Signal(2, init=reset("PROFILE"))
        max_retries = Signal(4, init=reset("MAX_RETRIES"))
        wd_limit = Signal(24, init=reset("WATCHDOG_LIMIT"))
        long_ctx = Signal(24, init=reset("LONG_CTX"))
        # armed from reset: counts from the cores' release (count_en) with this limit until the
        # firmware writes its own, so a firmware that never starts is caught too
        hb_limit = Signal(24, init=reset("HEARTBEAT_LIMIT"))
        # one CMD_STATUS per initiator (harts 0..MAX_HARTS-1, the host MAX_HARTS): a host
        # access between a hart's write and its CMD_STATUS read cannot change what it reads
        cmd_status = Array(Signal(8, name=f"cmd_status{h}") for h in range(MAX_HARTS + 1))
        admit_seq = Signal(24, init=reset("ADMIT_SEQ"))
        resume_new = Signal(24, init=reset("RESUME_NEW"))
        resume_max_new = Signal(16, init=reset("RESUME_MAX_NEW"))
        resume_cont = Signal(1, init=reset("RESUME_CONT"))
        hcmd_arg = [Signal(18, init=reset("HCMD_ARG0")), Signal(24, init=reset("HCMD_ARG1")),
                    Signal(16, init=reset("HCMD_ARG2"))]
        host_round = Signal(24, init=reset("HOST_ROUND"))
        batch = Signal(N)
        ended = Signal(N)
        rolled_back = Signal(N)
        round_ = Signal(24)
        degraded = Signal()
        hb_cnt = Signal(24)
        idle = Signal(MAX_HARTS)
        cnt = {name: Signal(32, name=f"cnt_{name.lower()}") for name in
               ("DESCRIPTORS", "ROLLBACKS", "TIMEOUTS", "BAD_COMPLETIONS", "BAD_ACCESSES",
                "OUTCOMES", "MOVES")}
        busy = [Signal(32, name=f"busy_cycles{h}") for h in range(MAX_HARTS)]
        return SimpleNamespace(
            st=st, req=req, seq=seq, left=left, prio=prio, res=res, wait=wait, arr=arr,
            ckpt=ckpt, retr=retr, wd=wd, gen=gen, cont=cont, fields=fields,
            resume_new=resume_new, resume_max_new=resume_max_new, resume_cont=resume_cont,
            hcmd_arg=hcmd_arg, host_round=host_round,
            profile=profile, max_retries=max_retries, wd_limit=wd_limit, long_ctx=long_ctx,
            hb_limit=hb_limit, cmd_status=cmd_status, admit_seq=admit_seq, batch=batch,
            ended=ended, rolled_back=rolled_back, round_=round_, degraded=degraded,
            hb_cnt=hb_cnt, idle=idle, cnt=cnt, busy=busy)

    def _elaborate_fifos(self, m, a):
        """The intake FIFO (``a.ififo``, head ``a.head``: valid while ``ififo.r_rdy``) and the
        outcome FIFO (``a.ofifo``, written from ``a.outcome`` when ``ofifo.w_en``)."""
        N = self.n_slots
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
        a.head = View(INTAKE_LAYOUT, ififo.r_data)
        a.outcome = outcome = Signal(OUTCOME_LAYOUT)
        m.d.comb += ofifo.w_data.eq(outcome)
        a.ififo, a.ofifo = ififo, ofifo
        # parked slots: the move FIFO (MOVE -> the moves stream) and the host command FIFO
        m.submodules.move_fifo = mfifo = SyncFIFOBuffered(width=MOVE_LAYOUT.size, depth=N + 2)
        m.submodules.hcmd_fifo = hfifo = SyncFIFOBuffered(width=HCMD_LAYOUT.size,
                                                          depth=2 * N + 2)
        m.d.comb += [self.moves.valid.eq(mfifo.r_rdy), self.moves.payload.eq(mfifo.r_data),
                     mfifo.r_en.eq(self.moves.ready)]
        a.move = move = Signal(MOVE_LAYOUT)
        m.d.comb += mfifo.w_data.eq(move)
        hin = Signal(HCMD_LAYOUT)
        m.d.comb += [hin.request.eq(a.hcmd_arg[0][:16]), hin.kind.eq(a.hcmd_arg[0][16]),
                     hin.cont.eq(a.hcmd_arg[0][17]), hin.new.eq(a.hcmd_arg[1]),
                     hin.max_new.eq(a.hcmd_arg[2]), hfifo.w_data.eq(hin)]
        a.hhead = View(HCMD_LAYOUT, hfifo.r_data)
        a.mfifo, a.hfifo = mfifo, hfifo

    # -- round: descriptor scan -------------------------------------------------------------
    def _elaborate_scan(self, m, a):
        """The round state (``a.phase``: IDLE, SCAN, RUN) and the SCAN of one slot per cycle:
        a chosen ACTIVE slot's descriptor is valid (combinationally) while its slot is
        scanned and the scan waits for ``ready``. Adds ``scan_step`` (slot ``scan_idx`` is
        handled this cycle), ``emitted``, ``active_mask``."""
        N = self.n_slots
        round_, batch, st, seq = a.round_, a.batch, a.st, a.seq
        phase = Signal(2)
        scan_idx = Signal(range(N))
        outstanding = Signal(range(N + 1))
        m.d.comb += [self.round.eq(round_), self.degraded.eq(a.degraded),
                     self.round_busy.eq(phase != _IDLE)]
        active_mask = Cat(s == SS.ACTIVE for s in st)

        A = Array
        cur_sel = batch.bit_select(scan_idx, 1) & (A(st)[scan_idx] == SS.ACTIVE)
        cur_seq1 = A(seq)[scan_idx] + 1
        d = self.descriptors.payload
        m.d.comb += [
            d.step.eq(round_), d.slot.eq(scan_idx), d.request.eq(A(a.req)[scan_idx]),
            d.seq_len.eq(cur_seq1), d.priority.eq(A(a.prio)[scan_idx]),
            d.residency.eq(cur_seq1 >= a.long_ctx),
            self.descriptors.valid.eq((phase == _SCAN) & cur_sel),
        ]
        scan_step = Signal()     # scan handles slot scan_idx this cycle
        emitted = Signal()
        m.d.comb += [scan_step.eq((phase == _SCAN) & (~cur_sel | self.descriptors.ready)),
                     emitted.eq((phase == _SCAN) & cur_sel & self.descriptors.ready)]
        a.phase, a.scan_idx, a.outstanding = phase, scan_idx, outstanding
        a.active_mask = active_mask
        a.scan_step, a.emitted = scan_step, emitted

    # -- completion / watchdog engine -------------------------------------------------------
    def _elaborate_engine(self, m, a):
        """One completion (or else the lowest expired watchdog) per cycle, when the outcome
        FIFO has room. Adds, combinational in that cycle: ``eng_go``, ``eng_slot``,
        ``eng_res`` (the result applied: a bad completion counts as ERROR), ``e_ok``,
        ``e_ends`` (the request ends), ``e_gen``, ``e_req``."""
        N = self.n_slots
        st, wd, ofifo = a.st, a.wd, a.ofifo
        A = Array
        comp = self.completions.payload
        SW = max(1, (N - 1).bit_length())
        comp_in_range = comp.slot < N
        comp_idx = comp.slot[:SW]
        comp_running = comp_in_range & (A(st)[comp_idx] == SS.RUNNING)
        expired = Cat((st[i] == SS.RUNNING) & (wd[i] >= a.wd_limit) for i in range(N))
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
                m.d.sync += a.cnt["BAD_COMPLETIONS"].eq(a.cnt["BAD_COMPLETIONS"] + 1)
            with m.If(comp_running):
                m.d.comb += [eng_go.eq(1), eng_slot.eq(comp_idx),
                             eng_res.eq(Mux(comp.result == Result.INVALID, Result.ERROR,
                                            comp.result))]
        with m.Elif(expired.any() & ofifo.w_rdy):
            m.d.comb += [eng_go.eq(1), eng_slot.eq(exp_idx), eng_res.eq(Result.TIMEOUT)]
        e_ok = eng_res == Result.OK
        e_left, e_retr = A(a.left)[eng_slot], A(a.retr)[eng_slot]
        a.e_gen, a.e_req = A(a.gen)[eng_slot], A(a.req)[eng_slot]
        a.e_ends = Mux(e_ok, e_left == 1, e_retr >= a.max_retries)
        a.eng_go, a.eng_slot, a.eng_res, a.e_ok = eng_go, eng_slot, eng_res, e_ok

    # -- MMIO -------------------------------------------------------------------------------
    def _elaborate_mmio(self, m, a):
        """The MMIO target: ``rdata`` combinational in the request cycle, register writes
        and ``CMD_STATUS`` at the next clock edge. Adds the commands of this cycle
        (combinational): ``admit_go`` with ``admit_slot``, ``reject_go``, ``issue_go``, and
        ``hb_restart``."""
        N = self.n_slots
        A = Array
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
        resume_go, free_go, move_go = Signal(), Signal(), Signal()
        cmd_slot = Signal(range(N))      # the slot of RESUME / FREE / MOVE

        def reject(code):
            m.d.comb += [status.eq(code), set_status.eq(1)]

        rdata = Signal(32)
        m.d.comb += bus.rdata.eq(Mux(rd, rdata, 0))
        a.admit_go, a.admit_slot = admit_go, admit_slot
        a.reject_go, a.issue_go = reject_go, issue_go
        a.resume_go, a.free_go, a.move_go, a.cmd_slot = resume_go, free_go, move_go, cmd_slot
        mm = SimpleNamespace(off=off, wr=wr, reject=reject, rdata=rdata,
                             SW=max(1, (N - 1).bit_length()), busy_round=a.phase != _IDLE)
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
                            m.d.comb += rdata.eq(A(a.fields[name])[s_idx[:mm.SW]])
        with m.Else():
            with m.Switch(off):
                self._mmio_registers(m, a, mm)
                self._mmio_commands(m, a, mm)
                self._mmio_bitmaps(m, a, mm)
                # write-only registers read as 0
                for name in ("HEARTBEAT", "CORE_IDLE", "ADMIT", "REJECT", "ISSUE"):
                    assert BY_NAME[name].access == "WO"
                with m.Default():
                    reject(Status.BAD_ADDR)
        a.hb_restart = wr & (status == Status.OK) & (
            (off == _off("HEARTBEAT")) | (off == _off("HEARTBEAT_LIMIT")))   # a new limit too
        with m.If(bus.valid & set_status & (wr | (status != Status.OK))):
            with m.Switch(bus.hart):
                for h in range(MAX_HARTS + 1):
                    with m.Case(h):
                        m.d.sync += a.cmd_status[h].eq(status)
            with m.If(status != Status.OK):
                m.d.sync += a.cnt["BAD_ACCESSES"].eq(a.cnt["BAD_ACCESSES"] + 1)

    def _mmio_registers(self, m, a, mm):
        """Cases of the MMIO switch: read-only registers, the intake head, configuration."""
        N = self.n_slots
        bus, ififo, head = self.bus, a.ififo, a.head
        wr, reject, rdata = mm.wr, mm.reject, mm.rdata

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
        ro("STATUS", Cat(mm.busy_round, a.degraded, ififo.r_rdy, self.intake_end,
                         ~a.ofifo.w_rdy, a.hfifo.r_rdy))
        ro("CMD_STATUS", a.cmd_status[self.bus.hart])
        ro("N_SLOTS", N)
        ro("ROUND", a.round_)
        for name, sig in a.cnt.items():
            ro(name, sig)
        for h in range(MAX_HARTS):
            with m.Case(_off("BUSY_CYCLES") + 4 * h):
                m.d.comb += rdata.eq(a.busy[h])
                with m.If(wr):
                    reject(Status.READ_ONLY)
        ro("INTAKE_REQUEST", Mux(ififo.r_rdy, head.request, 0))
        ro("INTAKE_PROMPT", Mux(ififo.r_rdy, head.prompt, 0))
        ro("INTAKE_MAX_NEW", Mux(ififo.r_rdy, head.max_new, 0))
        ro("INTAKE_PRIORITY", Mux(ififo.r_rdy, head.priority, 0))
        ro("INTAKE_ARRIVAL", Mux(ififo.r_rdy, head.arrival, 0))
        big = lambda v: (v == 0) | (v >= (1 << 24))  # noqa: E731
        cfg("PROFILE", a.profile, bus.wdata >= len(Profile), Status.BAD_PROFILE)
        cfg("MAX_RETRIES", a.max_retries, bus.wdata > 15)
        cfg("WATCHDOG_LIMIT", a.wd_limit, big(bus.wdata))
        cfg("LONG_CTX", a.long_ctx, big(bus.wdata))
        cfg("HEARTBEAT_LIMIT", a.hb_limit, big(bus.wdata))
        cfg("ADMIT_SEQ", a.admit_seq, bus.wdata >= (1 << 24))
        cfg("RESUME_NEW", a.resume_new, bus.wdata >= (1 << 24))
        cfg("RESUME_MAX_NEW", a.resume_max_new, (bus.wdata == 0) | (bus.wdata >= (1 << 16)))
        cfg("RESUME_CONT", a.resume_cont, bus.wdata > 1)
        cfg("HCMD_ARG0", a.hcmd_arg[0], bus.wdata >= (1 << 18))
        cfg("HCMD_ARG1", a.hcmd_arg[1], bus.wdata >= (1 << 24))
        cfg("HCMD_ARG2", a.hcmd_arg[2], bus.wdata >= (1 << 16))
        cfg("HOST_ROUND", a.host_round, bus.wdata >= (1 << 24))
        hh, hv = a.hhead, a.hfifo.r_rdy
        ro("HCMD_HEAD0", Mux(hv, Cat(hh.request, hh.kind, hh.cont), 0))
        ro("HCMD_HEAD1", Mux(hv, hh.new, 0))
        ro("HCMD_HEAD2", Mux(hv, hh.max_new, 0))

    def _mmio_commands(self, m, a, mm):
        """Cases of the MMIO switch: the write-only commands (HEARTBEAT, CORE_IDLE, ADMIT,
        REJECT, ISSUE); a command takes effect in its cycle (``admit_go``, ...)."""
        N = self.n_slots
        A = Array
        bus, ififo, SW = self.bus, a.ififo, mm.SW
        wr, reject, busy_round = mm.wr, mm.reject, mm.busy_round
        with m.Case(_off("HEARTBEAT")):
            with m.If(wr):
                reject(Status.OK)
        with m.Case(_off("CORE_IDLE")):
            with m.If(wr):
                reject(Status.OK)
                with m.Switch(bus.hart):
                    for h in range(MAX_HARTS):
                        with m.Case(h):
                            m.d.sync += a.idle[h].eq(bus.wdata[0])
        with m.Case(_off("ADMIT")):
            with m.If(wr):
                with m.If(busy_round):
                    reject(Status.BUSY)
                with m.Elif(bus.wdata >= N):
                    reject(Status.BAD_SLOT)
                with m.Elif(A(a.st)[bus.wdata[:SW]] != SS.FREE):
                    reject(Status.SLOT_BUSY)
                with m.Elif(~ififo.r_rdy):
                    reject(Status.INTAKE_EMPTY)
                with m.Else():
                    reject(Status.OK)
                    m.d.comb += [a.admit_go.eq(1), a.admit_slot.eq(bus.wdata[:SW]),
                                 ififo.r_en.eq(1)]
        with m.Case(_off("REJECT")):
            with m.If(wr):
                with m.If(busy_round):
                    reject(Status.BUSY)
                with m.Elif((bus.wdata == 0) | (bus.wdata > 3)):
                    reject(Status.BAD_VALUE)
                with m.Elif(~ififo.r_rdy):
                    reject(Status.INTAKE_EMPTY)
                with m.Elif(~a.ofifo.w_rdy):
                    reject(Status.OUTCOME_FULL)
                with m.Else():
                    reject(Status.OK)
                    m.d.comb += [a.reject_go.eq(1), ififo.r_en.eq(1)]
        with m.Case(_off("ISSUE")):
            with m.If(wr):
                with m.If(busy_round):
                    reject(Status.BUSY)
                with m.Elif((a.batch & ~a.active_mask).any()):
                    reject(Status.BAD_BATCH)
                with m.Else():
                    reject(Status.OK)
                    m.d.comb += [a.issue_go.eq(1), self.issued.eq(1),
                                 self.issued_count.eq(sum(a.batch))]
        # parked slots: RESUME, FREE, MOVE (between rounds, on a PARKED slot)
        slot8 = bus.wdata[:8]
        parked = A(a.st)[slot8[:SW]] == SS.PARKED
        m.d.comb += a.cmd_slot.eq(slot8[:SW])
        with m.Case(_off("RESUME")):
            with m.If(wr):
                with m.If(busy_round):
                    reject(Status.BUSY)
                with m.Elif(bus.wdata >= N):
                    reject(Status.BAD_SLOT)
                with m.Elif(~parked):
                    reject(Status.NOT_PARKED)
                with m.Elif(A(a.seq)[slot8[:SW]] + a.resume_new >= (1 << 24)):
                    reject(Status.BAD_VALUE)
                with m.Else():
                    reject(Status.OK)
                    m.d.comb += a.resume_go.eq(1)
        with m.Case(_off("FREE")):
            with m.If(wr):
                with m.If(busy_round):
                    reject(Status.BUSY)
                with m.Elif((bus.wdata >> 10) != 0):
                    reject(Status.BAD_VALUE)
                with m.Elif(slot8 >= N):
                    reject(Status.BAD_SLOT)
                with m.Elif(~parked):
                    reject(Status.NOT_PARKED)
                with m.Elif((bus.wdata[8:10] != 0) & ~a.ofifo.w_rdy):
                    reject(Status.OUTCOME_FULL)
                with m.Else():
                    reject(Status.OK)
                    m.d.comb += a.free_go.eq(1)
        with m.Case(_off("MOVE")):
            with m.If(wr):
                with m.If(busy_round):
                    reject(Status.BUSY)
                with m.Elif(((bus.wdata >> 13) != 0) | bus.wdata[10:12].any()
                            | (bus.wdata[8:10] > 2)):
                    reject(Status.BAD_VALUE)
                with m.Elif(slot8 >= N):
                    reject(Status.BAD_SLOT)
                with m.Elif(~parked):
                    reject(Status.NOT_PARKED)
                with m.Elif(~a.mfifo.w_rdy):
                    reject(Status.FIFO_FULL)
                with m.Else():
                    reject(Status.OK)
                    mv = a.move
                    m.d.comb += [a.move_go.eq(1), a.mfifo.w_en.eq(1),
                                 mv.step.eq(a.round_ - bus.wdata[12]),
                                 mv.request.eq(A(a.req)[slot8[:SW]]), mv.kind.eq(bus.wdata[8:10]),
                                 mv.tokens.eq(A(a.seq)[slot8[:SW]]), mv.slot.eq(slot8)]
                    m.d.sync += a.cnt["MOVES"].eq(a.cnt["MOVES"] + 1)
        with m.Case(_off("HCMD_PUSH")):
            with m.If(wr):
                with m.If(~a.hfifo.w_rdy):
                    reject(Status.FIFO_FULL)
                with m.Else():
                    reject(Status.OK)
                    m.d.comb += a.hfifo.w_en.eq(1)
        with m.Case(_off("HCMD_POP")):
            with m.If(wr):
                with m.If(~a.hfifo.r_rdy):
                    reject(Status.FIFO_EMPTY)
                with m.Else():
                    reject(Status.OK)
                    m.d.comb += a.hfifo.r_en.eq(1)

    def _mmio_bitmaps(self, m, a, mm):
        """Cases of the MMIO switch: the per-slot bitmaps, 32 slots a word (BATCH written
        between rounds; ENDED and ROLLED_BACK read only)."""
        N = self.n_slots
        bus, batch = self.bus, a.batch
        wr, reject, rdata = mm.wr, mm.reject, mm.rdata
        n_batch_words = BY_NAME["BATCH"].count
        for k in range(n_batch_words):
            lo, hi = 32 * k, min(32 * k + 32, N)
            with m.Case(_off("BATCH") + 4 * k):
                if lo < N:
                    m.d.comb += rdata.eq(batch[lo:hi])
                with m.If(wr):
                    legal = (bus.wdata >> (hi - lo)) == 0 if lo < N else bus.wdata == 0
                    with m.If(mm.busy_round):
                        reject(Status.BUSY)
                    with m.Elif(~legal):
                        reject(Status.BAD_VALUE)
                    with m.Else():
                        reject(Status.OK)
                        if lo < N:
                            m.d.sync += batch[lo:hi].eq(bus.wdata[:hi - lo])
        for name, sig in (("ENDED", a.ended), ("ROLLED_BACK", a.rolled_back)):
            for k in range(BY_NAME[name].count):
                lo, hi = 32 * k, min(32 * k + 32, N)
                with m.Case(_off(name) + 4 * k):
                    if lo < N:
                        m.d.comb += rdata.eq(sig[lo:hi])
                    with m.If(wr):
                        reject(Status.READ_ONLY)

    # -- outcomes, records, round, heartbeat ------------------------------------------------
    def _elaborate_outcomes(self, m, a):
        """Outcome FIFO writes, in the cycle of the event: the engine (a request ends while
        a round is in flight) or a REJECT command (between rounds)."""
        eng_res, e_ok, e_gen, head, outcome = a.eng_res, a.e_ok, a.e_gen, a.head, a.outcome
        push_outcome = Signal()
        with m.If(a.eng_go & a.e_ends):
            m.d.comb += [push_outcome.eq(1), outcome.request.eq(a.e_req),
                         outcome.status.eq(~e_ok), outcome.tokens.eq(Mux(e_ok, e_gen + 1, e_gen)),
                         outcome.reason.eq(Mux(e_ok, Reason.NONE,
                                               Mux(eng_res == Result.TIMEOUT, Reason.TIMEOUT,
                                                   Reason.ERROR))),
                         outcome.step.eq(a.round_)]
        with m.Elif(a.reject_go):
            m.d.comb += [push_outcome.eq(1), outcome.request.eq(head.request),
                         outcome.status.eq(1), outcome.tokens.eq(0),
                         outcome.reason.eq(self.bus.wdata[:2]), outcome.step.eq(a.round_)]
        with m.Elif(a.free_go & (self.bus.wdata[8:10] != 0)):
            m.d.comb += [push_outcome.eq(1), outcome.request.eq(Array(a.req)[a.cmd_slot]),
                         outcome.status.eq(1), outcome.tokens.eq(0),
                         outcome.reason.eq(self.bus.wdata[8:10]), outcome.step.eq(a.round_)]
        m.d.comb += a.ofifo.w_en.eq(push_outcome)
        with m.If(push_outcome):
            m.d.sync += a.cnt["OUTCOMES"].eq(a.cnt["OUTCOMES"] + 1)

    def _elaborate_records(self, m, a):
        """Slot record updates at the next clock edge: watchdogs, ADMIT, the scan (RUNNING
        or waiting), the engine (advance or roll back); ENDED/ROLLED_BACK bitmaps; the
        DESCRIPTORS, ROLLBACKS and TIMEOUTS counters; ``outstanding`` descriptors."""
        N = self.n_slots
        st, req, seq, left, prio, res = a.st, a.req, a.seq, a.left, a.prio, a.res
        wait, arr, ckpt, retr, wd, gen = a.wait, a.arr, a.ckpt, a.retr, a.wd, a.gen
        cont = a.cont
        head, batch, long_ctx, max_retries = a.head, a.batch, a.long_ctx, a.max_retries
        eng_go, eng_slot, e_ok, cnt = a.eng_go, a.eng_slot, a.e_ok, a.cnt
        for i in range(N):
            with m.If(st[i] == SS.RUNNING):
                m.d.sync += wd[i].eq(wd[i] + 1)
            with m.If(a.admit_go & (a.admit_slot == i)):
                m.d.sync += [st[i].eq(SS.ACTIVE), req[i].eq(head.request),
                             seq[i].eq(head.prompt), ckpt[i].eq(head.prompt),
                             left[i].eq(head.max_new), prio[i].eq(head.priority),
                             arr[i].eq(a.admit_seq), wait[i].eq(0), retr[i].eq(0),
                             gen[i].eq(0), wd[i].eq(0), res[i].eq(0),
                             cont[i].eq(head.continues)]
            with m.If(a.resume_go & (a.cmd_slot == i)):
                m.d.sync += [st[i].eq(SS.ACTIVE), seq[i].eq(seq[i] + a.resume_new),
                             ckpt[i].eq(seq[i] + a.resume_new), left[i].eq(a.resume_max_new),
                             cont[i].eq(a.resume_cont), arr[i].eq(a.admit_seq), wait[i].eq(0),
                             retr[i].eq(0), gen[i].eq(0), wd[i].eq(0)]
            with m.If(a.free_go & (a.cmd_slot == i)):
                m.d.sync += st[i].eq(SS.FREE)
            with m.If(a.scan_step & (a.scan_idx == i) & (st[i] == SS.ACTIVE)):
                with m.If(batch[i]):
                    m.d.sync += [st[i].eq(SS.RUNNING), wait[i].eq(0), wd[i].eq(0),
                                 res[i].eq(seq[i] + 1 >= long_ctx)]
                with m.Elif(wait[i] != 0xFFFF):
                    m.d.sync += wait[i].eq(wait[i] + 1)
            with m.If(eng_go & (eng_slot == i)):
                with m.If(e_ok):
                    m.d.sync += [seq[i].eq(seq[i] + 1), ckpt[i].eq(seq[i] + 1),
                                 left[i].eq(left[i] - 1), gen[i].eq(gen[i] + 1), retr[i].eq(0),
                                 st[i].eq(Mux(left[i] == 1, Mux(cont[i], SS.PARKED, SS.FREE),
                                              SS.ACTIVE))]
                with m.Else():
                    m.d.sync += [seq[i].eq(ckpt[i]), retr[i].eq(retr[i] + 1),
                                 st[i].eq(Mux(retr[i] >= max_retries, SS.FREE, SS.ACTIVE))]

        with m.If(a.issue_go):
            m.d.sync += [a.ended.eq(0), a.rolled_back.eq(0)]
        for i in range(N):
            with m.If(eng_go & (eng_slot == i)):
                m.d.sync += [a.ended[i].eq(a.e_ends), a.rolled_back[i].eq(~e_ok)]
        with m.If(eng_go & ~e_ok):
            m.d.sync += cnt["ROLLBACKS"].eq(cnt["ROLLBACKS"] + 1)
        with m.If(eng_go & (a.eng_res == Result.TIMEOUT)):
            m.d.sync += cnt["TIMEOUTS"].eq(cnt["TIMEOUTS"] + 1)
        with m.If(a.emitted):
            m.d.sync += cnt["DESCRIPTORS"].eq(cnt["DESCRIPTORS"] + 1)
        m.d.sync += a.outstanding.eq(a.outstanding + a.emitted - eng_go)

    def _elaborate_round(self, m, a):
        """Round phase at the next clock edge: IDLE --ISSUE--> SCAN --last slot--> RUN --no
        descriptor outstanding--> IDLE with ROUND + 1."""
        N = self.n_slots
        phase, scan_idx, outstanding, eng_go = a.phase, a.scan_idx, a.outstanding, a.eng_go
        with m.Switch(phase):
            with m.Case(_IDLE):
                with m.If(a.issue_go):
                    m.d.sync += [phase.eq(_SCAN), scan_idx.eq(0)]
            with m.Case(_SCAN):
                with m.If(a.scan_step):
                    m.d.sync += scan_idx.eq(scan_idx + 1)
                    with m.If(scan_idx == N - 1):
                        m.d.sync += [phase.eq(_RUN), scan_idx.eq(0)]
            with m.Case(_RUN):
                with m.If((outstanding == 0) | ((outstanding == 1) & eng_go)):
                    m.d.sync += [phase.eq(_IDLE), a.round_.eq(a.round_ + 1)]

    def _elaborate_heartbeat(self, m, a):
        """Heartbeat watchdog (sets ``degraded`` at ``HEARTBEAT_LIMIT``) and per-hart busy
        counters, counting while ``count_en``."""
        hb_cnt = a.hb_cnt
        with m.If(self.count_en):
            m.d.sync += hb_cnt.eq(Mux(hb_cnt == (1 << 24) - 1, hb_cnt, hb_cnt + 1))
            with m.If(hb_cnt >= a.hb_limit):
                m.d.sync += a.degraded.eq(1)
            for h in range(self.n_harts):
                with m.If(~a.idle[h]):
                    m.d.sync += a.busy[h].eq(a.busy[h] + 1)
        with m.If(a.hb_restart):
            m.d.sync += hb_cnt.eq(0)
