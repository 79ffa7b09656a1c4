"""Run the DSU cluster (RV32IM cores + scheduler firmware + slot arbiter) on a request stream,
in Amaranth's simulator or on Verilator (cocotb), and compare every round's batch and every
request's outcome with the golden model :mod:`tricut.models.dsu`.

Entry point: :func:`run_dsu`. Fault specs: :func:`parse_faults`.

The testbench side (:class:`DsuEnv`) is plain Python and shared by both simulators: each cycle
it drives the cluster's inputs from its own state (never from this cycle's outputs), then
samples the outputs and commits the handshakes of that clock edge. It plays

* the **request source**: pushes requests into the intake stream in ``(arrival_step, id)``
  order as fast as the FIFO takes them (a :class:`~tricut.sim.harness.streams.Source` under
  the run's idle schedule), then raises ``intake_end``;
* the **CDU/TE**: takes descriptors (a Sink under the backpressure schedule), answers each
  with a completion after 1..6 cycles (a :class:`~tricut.sim.harness.streams.MemoryModel`
  under the idle schedule) — ``error`` where a fault says so, *nothing* for ``timeout``
  faults (the slot watchdog must fire); takes outcomes (a Sink under the backpressure
  schedule);
* the **host**: loads the firmware through the host port, reads results, and — when the
  heartbeat watchdog reports ``degraded`` — takes over scheduling: it reads the slot records
  over MMIO and continues with the golden model from exactly that state.
"""

from __future__ import annotations

import functools
import hashlib
import json
import random
import re
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ...models.dsu import (ERROR, OK, PARK_POLICIES, PROFILES, TIMEOUT, Continue, Descriptor,
                          DsuModel, DsuParams, Move, Outcome, RequestSpec, Session, Slot,
                          run_sessions)
from ...rtl.dsu.cluster import HOST_LOCAL_BASE
from ...rtl.dsu.layouts import (COMPLETION_LAYOUT, DESCRIPTOR_LAYOUT, INTAKE_LAYOUT, MOVE_LAYOUT,
                                OUTCOME_LAYOUT)
from ...rtl.dsu.regmap import (BY_NAME, CONFIG_MAGIC, CONFIG_STRUCT, HEARTBEAT_LIMIT_RESET,
                              HOST_ROUND_END, MMIO_BASE, PARK_POLICY_CODE, PROFILE_CODE, SLOT_BASE,
                              SLOT_FIELDS, SLOT_STRIDE, HostCmd, MoveKind, Reason, Result,
                              SlotState, c_header)
from .firmware import FIRMWARE_DIR, REPO_ROOT, Firmware, build_firmware, elf_symbols
from .streams import MemoryModel, Schedule, Sink, Source, drained

__all__ = ["Fault", "parse_faults", "build_dsu_firmware", "DsuEnv", "DsuRunResult", "run_dsu",
           "DsuPlan", "plan_dsu", "run_plan", "execute", "make_spec", "compare", "firmware_words",
           "REQUEST_LIMITS", "MAX_REQUESTS", "MAX_ROUNDS", "CONFIG_LIMITS", "sim_rate",
           "CONTINUE_LIMITS", "SEQ_LEN_LIMIT", "check_session_fields",
           "CONFIG_FIELDS", "MEM_BYTES"]

MEM_BYTES = 0x8000
#: the words of the firmware's ``dsu_config`` block, in order (``regmap.CONFIG_STRUCT``)
CONFIG_FIELDS = tuple(f.name for f in CONFIG_STRUCT)
REASONS = {Reason.TOO_LARGE: "too large", Reason.ERROR: "error: retries exhausted",
           Reason.TIMEOUT: "timeout: retries exhausted"}
COCOTB_DIR = Path(__file__).resolve().parent / "benches"


# -- faults ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Fault:
    kind: str            # "error", "timeout" or "hang"
    slot: int = -1
    step: int = -1
    cycle: int = -1

    def __str__(self):
        return f"{self.kind}:cycle={self.cycle}" if self.kind in ("hang", "mmio") else \
            f"{self.kind}:slot={self.slot}:step={self.step}"


_FAULT_KEYS = {"error": ("slot", "step"), "timeout": ("slot", "step"), "hang": ("cycle",),
               "badcomp": ("slot", "step"), "mmio": ("cycle",)}
#: fault kinds aimed at one round's descriptor for one slot
STEP_KINDS = ("error", "timeout", "badcomp")


def parse_faults(text: str) -> list[Fault]:
    """Parse ``error:slot=3:step=5,timeout:slot=7:step=2,hang:cycle=20000``.

    ``error``/``timeout`` at (step, slot): that round's descriptor for the slot fails / is never
    completed (the watchdog fires). ``badcomp`` at (step, slot): right after that
    descriptor's completion the consumer sends a second one for the slot (no longer RUNNING:
    the arbiter must count it in BAD_COMPLETIONS and change nothing). ``hang`` at a cycle
    (counted from the cores' release): every core stops fetching. ``mmio`` at a cycle: the
    host makes :data:`BAD_HOST_ACCESSES` (each must be rejected with the expected
    ``CMD_STATUS`` and change nothing, while the firmware keeps scheduling). Raises
    :class:`ValueError` naming the bad part."""
    faults, seen = [], set()
    if not isinstance(text, str):
        raise ValueError(f"faults must be a string, not {text!r}")
    for part in (p.strip() for p in text.split(",")):
        if not part:
            if text.strip():
                raise ValueError(f"bad fault spec {text!r}: empty item")
            continue
        kind, *kvs = part.split(":")
        if kind not in _FAULT_KEYS:
            raise ValueError(f"bad fault {part!r}: kind must be "
                             f"{', '.join(list(_FAULT_KEYS)[:-1])} or {list(_FAULT_KEYS)[-1]}")
        values = {}
        for kv in kvs:
            m = re.fullmatch(r"([a-z]+)=([0-9]+)", kv)
            if not m:
                raise ValueError(f"bad fault {part!r}: {kv!r} is not key=non-negative-integer")
            if len(m[2]) > 18:
                raise ValueError(f"bad fault {part!r}: {m[1]} has more than 18 digits")
            if m[1] not in _FAULT_KEYS[kind]:
                raise ValueError(f"bad fault {part!r}: {kind} takes "
                                 f"{' and '.join(_FAULT_KEYS[kind])}, not {m[1]!r}")
            if m[1] in values:
                raise ValueError(f"bad fault {part!r}: {m[1]} given twice")
            values[m[1]] = int(m[2])
        missing = [k for k in _FAULT_KEYS[kind] if k not in values]
        if missing:
            raise ValueError(f"bad fault {part!r}: missing {', '.join(missing)}")
        f = Fault(kind, **values)
        key = ("hang",) if kind == "hang" else ("mmio", f.cycle) if kind == "mmio" else \
            (f.step, f.slot)
        if key in seen:
            what = {"hang": "hang", "mmio": "cycle"}.get(kind, "step and slot")
            raise ValueError(f"bad fault {part!r}: a fault for the same {what} is already given")
        seen.add(key)
        faults.append(f)
    return faults


def _split_faults(faults):
    if faults is None:
        return {}, None
    if isinstance(faults, str):
        faults = parse_faults(faults)
    step_faults, hang = {}, None
    for f in faults:
        if f.kind == "hang":
            hang = f.cycle
        elif f.kind in ("error", "timeout"):
            step_faults[(f.step, f.slot)] = ERROR if f.kind == "error" else TIMEOUT
    return step_faults, hang


#: the host's bad MMIO accesses of an ``mmio`` fault: (register offset, value to write or
#: None to read, the CMD_STATUS values that are right: some depend on a round in flight).
#: Every one is rejected and changes nothing; none is ISSUE (a valid ISSUE would start a
#: round) or a valid value. ``{n}`` stands for N_SLOTS.
BAD_HOST_ACCESSES = (
    (0x1F0, 1, ("BAD_ADDR",)), (0x1F4, None, ("BAD_ADDR",)), ("ID", 0, ("READ_ONLY",)),
    ("PROFILE", 3, ("BAD_PROFILE",)), ("MAX_RETRIES", 16, ("BAD_VALUE",)),
    ("WATCHDOG_LIMIT", 0, ("BAD_VALUE",)), ("ADMIT", 511, ("BUSY", "BAD_SLOT")),
    ("SLOT{n}", None, ("BAD_SLOT",)), ("SLOT0_SEQ_LEN", 5, ("READ_ONLY",)),
    ("REJECT", 0, ("BUSY", "BAD_VALUE")),
)


# -- payload packing ---------------------------------------------------------------------------
def _pack(layout, **values):
    word = 0
    for name, f in layout:
        word |= (values[name] & ((1 << f.width) - 1)) << f.offset
    return word


def _unpack(layout, word):
    return {name: (word >> f.offset) & ((1 << f.width) - 1) for name, f in layout}


# -- firmware ----------------------------------------------------------------------------------
def build_dsu_firmware(program="scheduler", out_dir=None, max_slots=64) -> Firmware:
    """Build ``rtl/dsu/firmware/<program>.c`` with the register header generated from
    :mod:`tricut.rtl.dsu.regmap` into the build directory (``-DMAX_SLOTS=max_slots``: the
    firmware's tables; it refuses a cluster with more slots). Cached by content hash."""
    src = FIRMWARE_DIR / f"{program}.c"
    header = c_header()
    h = hashlib.sha256()
    for p in (src, FIRMWARE_DIR / "crt0.S", FIRMWARE_DIR / "runtime.c",
              FIRMWARE_DIR / "link.ld.in"):
        h.update(p.read_bytes())
    h.update(header.encode())
    h.update(str(max_slots).encode())
    out = Path(out_dir) if out_dir else REPO_ROOT / ".build" / "firmware" / \
        f"dsu_{program}-{max_slots}-{h.hexdigest()[:12]}"
    elf, binary = out / f"{program}.elf", out / f"{program}.bin"
    if elf.exists() and binary.exists():
        return Firmware(image=binary.read_bytes(), origin=0, length=MEM_BYTES,
                        symbols=elf_symbols(elf), elf=elf, bin=binary)
    out.mkdir(parents=True, exist_ok=True)
    (out / "dsu_regs.h").write_text(header)
    return build_firmware([src], out, origin=0, length=MEM_BYTES, stack_size=0x800,
                          name=program, extra_cflags=["-I", str(out), f"-DMAX_SLOTS={max_slots}u"])


def firmware_words(fw: Firmware, config: dict | None = None) -> list[int]:
    """The image as words, with ``dsu_config`` patched from ``config`` (CONFIG_FIELDS)."""
    words = fw.words()
    if config is not None:
        base = fw.symbols["dsu_config"] // 4
        for i, name in enumerate(CONFIG_FIELDS):
            words[base + i] = config[name] & 0xFFFFFFFF
    return words


# -- the environment ---------------------------------------------------------------------------
STREAMS = ("intake", "descriptors", "completions", "outcomes", "moves")
MOVE_KINDS = {int(k): k.name.lower() for k in MoveKind}


def stream_schedules(idle=None, backpressure=True) -> dict:
    """The schedules (JSON) of a run's four streams. ``idle``: the request source (intake)
    and the completions; ``backpressure``: the descriptor and outcome sinks. ``True`` (the
    default of :func:`run_dsu`): random ready on descriptors (p 0.75) and random valid on
    completions (p 0.8); ``False``: none; else a schedule or mode name
    (:class:`~tricut.sim.harness.streams.Schedule`). A given ``idle`` overrides the
    completions' part of ``True``."""
    s = dict.fromkeys(STREAMS, Schedule())
    if backpressure is True:
        s.update(descriptors=Schedule("random", p=0.75), completions=Schedule("random", p=0.8))
    elif backpressure is not False:
        s["descriptors"] = s["outcomes"] = s["moves"] = Schedule.of(backpressure)
    if idle is not None:
        s["intake"] = s["completions"] = Schedule.of(idle)
    return {k: v.to_json() for k, v in s.items()}


@dataclass
class DsuRunResult:
    batches: list            # per round: list of Descriptor (RTL, then host after a takeover)
    outcomes: dict           # request id -> Outcome
    latencies: list          # dicts: round, cycles, batch, active, admitted, retired, blocked
    golden_batches: list
    golden_outcomes: dict
    differences: list        # strings; empty when RTL == golden
    cycles: int = 0
    rounds_rtl: int = 0      # rounds scheduled by the firmware (the rest by the host)
    degraded_cycle: int | None = None
    counters: dict = field(default_factory=dict)
    firmware_bytes: int = 0
    exit_code: int | None = None
    fw_error: int = 0
    wall_s: float = 0.0
    sim: str = ""
    boot_cycles: int = 0     # the firmware's fw_boot_cycles: release to HEARTBEAT_LIMIT write
    hang_cycle: int | None = None      # cycle (from release) an injected hang was applied
    faults_fired: list = field(default_factory=list)       # fault specs that fired
    faults_not_fired: list = field(default_factory=list)   # [(fault spec, why)]
    budget_exhausted: bool = False     # stopped at max_cycles (not compared meaningfully)
    max_cycles: int = 0
    estimate_cycles: int = 0
    wave: str | None = None
    moves: list = field(default_factory=list)          # Move, in stream order (sessions)
    golden_moves: list = field(default_factory=list)
    ended: list = field(default_factory=list)          # every Outcome in stream order
    golden_ended: list = field(default_factory=list)   # run_sessions' outcomes, in order

    def to_json(self):
        return {
            "batches": [[asdict(d) for d in b] for b in self.batches],
            "outcomes": {str(k): asdict(v) for k, v in sorted(self.outcomes.items())},
            "latencies": self.latencies, "differences": self.differences,
            "cycles": self.cycles, "rounds_rtl": self.rounds_rtl,
            "degraded_cycle": self.degraded_cycle, "counters": self.counters,
            "firmware_bytes": self.firmware_bytes, "exit_code": self.exit_code,
            "fw_error": self.fw_error, "wall_s": self.wall_s, "sim": self.sim,
            "boot_cycles": self.boot_cycles, "hang_cycle": self.hang_cycle,
            "faults_fired": self.faults_fired,
            "faults_not_fired": [{"fault": f, "why": why} for f, why in self.faults_not_fired],
            "budget_exhausted": self.budget_exhausted, "max_cycles": self.max_cycles,
            "estimate_cycles": self.estimate_cycles, "wave": self.wave,
            "moves": [asdict(m) for m in self.moves],
            "ended": [asdict(o) for o in self.ended],
        }


class DsuEnv:
    """Cycle-level environment of :class:`~tricut.rtl.dsu.cluster.DsuCluster` (see module doc).

    Per cycle: ``drive()`` returns the input values (a dict, names as in :data:`INPUTS`),
    then ``commit(obs)`` takes the sampled outputs (:data:`OUTPUTS`) after those inputs settled.
    """

    INPUTS = ("run", "stall", "intake_valid", "intake_payload", "intake_end",
              "descriptors_ready", "completions_valid", "completions_payload", "outcomes_ready",
              "host_addr", "host_wdata", "host_mask", "host_we", "host_valid", "moves_ready")
    OUTPUTS = ("intake_ready", "descriptors_valid", "descriptors_payload", "completions_ready",
               "outcomes_valid", "outcomes_payload", "degraded", "round_busy", "round", "trap",
               "host_ready", "host_rdata", "host_err", "moves_valid", "moves_payload")

    def __init__(self, spec: dict):
        self.spec = spec
        self.n_cores = spec["cores"]
        self.n_slots = spec["n_slots"]
        self.params = DsuParams(**spec["params"])
        self.requests = [RequestSpec(**r) for r in spec["requests"]]
        # sessions: the requests come in the model's intake order (a drop policy's resubmits
        # before the round's arrivals); otherwise in (arrival, id) order
        self.sessions = spec.get("sessions")
        self.todo = list(self.requests) if self.sessions else \
            sorted(self.requests, key=lambda r: (r.arrival_step, r.id))
        self.step_faults = {(s, sl): r for s, sl, r in spec["step_faults"]}
        self.hang = spec["hang"]
        self.badcomp = {(s, sl) for s, sl in spec.get("badcomp", [])}
        self.mmio_todo = sorted(spec.get("mmio", []))
        self.badcomp_fired, self.mmio_fired = [], []
        self.max_cycles = spec["max_cycles"]
        self.rng = random.Random(spec["seed"])     # completion latencies
        sched = spec.get("streams") or stream_schedules(backpressure=spec["backpressure"])
        seed = spec["seed"]
        self.intake = Source("intake", [
            _pack(INTAKE_LAYOUT, request=r.id, prompt=r.prompt_tokens, max_new=r.max_new_tokens,
                  priority=r.priority, arrival=r.arrival_step, continues=int(r.continues))
            for r in self.todo],
            sched["intake"], seed)
        self.desc_sink = Sink("descriptors", sched["descriptors"], seed)
        self.comp = MemoryModel(self.rng, 6, lambda tag, a: self.step_faults.get(tag) == ERROR,
                                sched["completions"], name="completions", seed=seed,
                                order="due")
        self.out_sink = Sink("outcomes", sched["outcomes"], seed)
        self.move_sink = Sink("moves", sched.get("moves", sched["outcomes"]), seed)
        self.moves = []                # Move, in stream order
        self.ended = []                # Outcome, in stream order
        # the host's session commands: round -> [(kind, args)], pushed when ROUND reaches
        # that round, then HOST_ROUND = round + 1 (HOST_ROUND_END after the last)
        self.host_cmds, self.host_next, self.host_last = {}, None, -1
        if self.sessions:
            for rnd, kind, args in self.sessions["host"]:
                self.host_cmds.setdefault(rnd, []).append((kind, args))
            self.host_next = 0
            self.host_last = max(self.host_cmds, default=-1)
        self.comp_cur = None
        self.symbols = spec["symbols"]
        self.cycle = 0
        self.run_cycle = None          # cycle the cores were released
        self.run = 0
        self.stall = 0
        self.host_ops = []             # (addr, wdata or None, callback)
        self.host_cur = None
        self.rtl = {}                  # step -> [Descriptor]
        self.outcomes = {}
        self.round = 0
        self.round_end = {}            # round -> cycle ROUND moved past it
        self.first_desc = {}           # step -> first cycle a descriptor was valid
        self.degraded_cycle = None
        self.takeover = None           # None, "wait", "reading", "done"
        self.finishing = False
        self.done = False
        self.exit_code = None
        self.fw_error = 0
        self.counters = {}
        self.boot_cycles = 0           # the firmware's fw_boot_cycles (0: never got there)
        self.host_batches = []
        self.rounds_rtl = None
        self.errors = []
        self.dump = {}
        self.hang_cycle = None         # cycle (from the cores' release) the hang was applied
        self.budget_exhausted = False
        self.progress = None           # callable(dict), or spec["progress_file"] (Verilator)
        self._progress_file = spec.get("progress_file")
        self._progress_t = time.monotonic()
        words = spec["image"]
        for h in range(self.n_cores):
            for i, w in enumerate(words):
                if w or spec.get("load_zeros"):   # a rerun: memory holds the last run's data
                    self.host_ops.append((HOST_LOCAL_BASE + (h << 20) + 4 * i, w, None))
        self.host_ops.append(("run", None, None))

    # -- helpers ------------------------------------------------------------------------
    def _read(self, addr, cb):
        self.host_ops.append((addr, None, cb))

    def _reg(self, name):
        return MMIO_BASE + BY_NAME[name].offset

    def drive(self):
        d = dict.fromkeys(self.INPUTS, 0)
        d["run"], d["stall"] = self.run, self.stall
        # host port
        if self.host_cur is None:
            while self.host_ops and self.host_ops[0][0] == "run":
                self.host_ops.pop(0)
                self.run = d["run"] = 1
                self.run_cycle = self.cycle
            if self.host_ops:
                self.host_cur = self.host_ops.pop(0)
        # faults timed from the release (cycle 0 = the cycle run rises: a hang at 0 stalls
        # the cores before their first fetch)
        if self.run and self.hang is not None and self.cycle - self.run_cycle >= self.hang:
            self.stall = d["stall"] = (1 << self.n_cores) - 1
            if self.hang_cycle is None:
                self.hang_cycle = self.cycle - self.run_cycle
        while self.run and self.mmio_todo and self.cycle - self.run_cycle >= self.mmio_todo[0]:
            self.mmio_fired.append(self.mmio_todo.pop(0))
            self._bad_host_accesses()
        if self.host_cur is None and self.host_ops and self.host_ops[0][0] != "run":
            self.host_cur = self.host_ops.pop(0)
        if self.host_cur is not None:
            addr, wdata, _cb = self.host_cur
            d.update(host_addr=addr, host_valid=1, host_mask=0xF, host_we=int(wdata is not None),
                     host_wdata=wdata or 0)
        # intake (the request source starts with the cores)
        if self.run:
            valid, payload = self.intake.drive()
            d["intake_valid"] = valid
            d["intake_payload"] = payload if payload is not None else 0
        d["intake_end"] = int(self.intake.done)
        # descriptor consumer, completions (the CDU/TE), outcome consumer
        d["descriptors_ready"] = self.desc_sink.drive()
        self.comp_cur = self.comp.drive(self.cycle)
        if self.comp_cur is not None:
            slot, err = self.comp_cur
            d["completions_valid"] = 1
            d["completions_payload"] = _pack(COMPLETION_LAYOUT, slot=slot,
                                             result=int(Result.ERROR if err else Result.OK))
        d["outcomes_ready"] = self.out_sink.drive()
        d["moves_ready"] = self.move_sink.drive()
        return d

    def commit(self, o):
        c = self.cycle
        if o["trap"]:
            self.errors.append(f"cycle {c}: core trap (mask {o['trap']:#x})")
            self.done = True
        if o["round"] != self.round:
            self.round_end[self.round] = c
            self.round = o["round"]
        if o["degraded"] and self.degraded_cycle is None:
            self.degraded_cycle = c
            if self.hang is None:
                self.errors.append(f"cycle {c}: degraded without an injected hang")
                self.host_ops.clear()
                self.takeover = "failed"
                self._read_final()
            else:
                self.takeover = "wait"
        if self.run:
            self.intake.sample(o["intake_ready"])
        if o["descriptors_valid"]:
            p = _unpack(DESCRIPTOR_LAYOUT, o["descriptors_payload"])
            self.first_desc.setdefault(p["step"], c)
        if self.desc_sink.sample(o["descriptors_valid"], lambda: p):
            desc = Descriptor(p["step"], p["slot"], p["request"], p["seq_len"], p["priority"],
                              p["residency"])
            self.rtl.setdefault(p["step"], []).append(desc)
            if self.step_faults.get((p["step"], p["slot"]), OK) != TIMEOUT:
                self.comp.request(c, p["slot"], (p["step"], p["slot"]))
                if (p["step"], p["slot"]) in self.badcomp:    # a second completion, right after
                    self.comp.pending.append([self.comp.pending[-1][0] + 1, p["slot"],
                                              ("dup", p["step"], p["slot"]), 0])
                    self.badcomp_fired.append([p["step"], p["slot"]])
        self.comp.sample(o["completions_ready"])
        if self.out_sink.sample(o["outcomes_valid"], lambda: _unpack(OUTCOME_LAYOUT,
                                                                   o["outcomes_payload"])):
            p = self.out_sink.beats[-1]
            status = "completed" if p["status"] == 0 else "failed"
            reason = REASONS.get(p["reason"], "") if status == "failed" else ""
            if p["request"] in self.outcomes and not self.sessions:
                self.errors.append(f"request {p['request']}: second outcome")
            self.outcomes[p["request"]] = Outcome(p["request"], status, p["tokens"], reason,
                                                  p["step"])
            self.ended.append(self.outcomes[p["request"]])
        if self.move_sink.sample(o["moves_valid"], lambda: _unpack(MOVE_LAYOUT,
                                                                  o["moves_payload"])):
            p = self.move_sink.beats[-1]
            self.moves.append(Move(p["step"], p["request"], MOVE_KINDS.get(p["kind"], p["kind"]),
                                   p["tokens"], p["slot"]))
        if self.host_cur is not None and o["host_ready"]:
            addr, wdata, cb = self.host_cur
            if o["host_err"]:
                self.errors.append(f"host access {addr:#x} answered with err")
            if cb:
                cb(o["host_rdata"])
            self.host_cur = None
        # the host's session commands for the next round, once the previous one has ended
        if self.host_next is not None and self.run and self.takeover is None \
                and o["round"] >= self.host_next and not self.host_ops and self.host_cur is None:
            self._push_host_round()
        # end of run / takeover
        if self.takeover == "wait" and not o["round_busy"] and self.comp.idle \
                and not self.host_ops and self.host_cur is None \
                and not o["outcomes_valid"] and not o["moves_valid"]:
            self.takeover = "reading"
            self._start_takeover()
        if self.takeover is None and not self.finishing and self.run and self._all_ended() \
                and not o["round_busy"]:
            self.finishing = True
            self._poll_exit()
        self.cycle += 1
        if self.cycle >= self.max_cycles and not self.done:
            self.errors.append(f"no end within {self.max_cycles} cycles "
                               f"({len(self.outcomes)} of {len(self.requests)} outcomes)")
            self.budget_exhausted = True
            self.done = True
        if not self.cycle & 1023 and (self.progress or self._progress_file):
            self._report_progress()

    def _all_ended(self):
        if not self.sessions:
            return len(self.outcomes) == len(self.requests)
        return self.host_next is None and len(self.ended) == self.sessions["outcomes"] \
            and len(self.moves) == self.sessions["moves"]

    def _push_host_round(self):
        """Push round ``host_next``'s commands (HCMD_ARG0..2, HCMD_PUSH, each checked in
        CMD_STATUS), then write HOST_ROUND."""
        from ...rtl.dsu.regmap import Status
        rnd = self.host_next
        for kind, args in self.host_cmds.get(rnd, []):
            if kind == "restore":
                words = (args[0], 0, 0)
            else:
                rid, new, max_new, more = args
                words = (rid | int(HostCmd.CONTINUE) << 16 | int(bool(more)) << 17, new, max_new)
            for i, w in enumerate(words):
                self.host_ops.append((self._reg(f"HCMD_ARG{i}"), w, None))
            self.host_ops.append((self._reg("HCMD_PUSH"), 1, None))

            def check(v, rnd=rnd, kind=kind, args=args):
                if v != Status.OK:
                    self.errors.append(f"host command {kind}{tuple(args)} of round {rnd}: "
                                       f"CMD_STATUS {v}")
            self._read(self._reg("CMD_STATUS"), check)
        last = rnd >= self.host_last
        self.host_ops.append((self._reg("HOST_ROUND"), HOST_ROUND_END if last else rnd + 1, None))
        self.host_next = None if last else rnd + 1

    def progress_state(self):
        return {"cycle": self.cycle, "round": self.round, "outcomes": len(self.outcomes),
                "requests": len(self.requests), "degraded": self.degraded_cycle is not None}

    def _report_progress(self, force=False):
        now = time.monotonic()
        if not force and now - self._progress_t < 0.5:
            return
        self._progress_t = now
        state = self.progress_state()
        if self.progress:
            self.progress(state)
        if self._progress_file:
            tmp = self._progress_file + ".tmp"
            Path(tmp).write_text(json.dumps(state))
            Path(tmp).replace(self._progress_file)

    def _bad_host_accesses(self):
        """Queue the host's bad MMIO accesses (an ``mmio`` fault), each followed by a read of
        CMD_STATUS that must show that access's rejection."""
        from ...rtl.dsu.regmap import Status
        for off, wdata, want in BAD_HOST_ACCESSES:
            if isinstance(off, str):
                off = (SLOT_BASE + self.n_slots * SLOT_STRIDE if off == "SLOT{n}" else
                       SLOT_BASE + 4 * [n for n, _ in SLOT_FIELDS].index("SEQ_LEN")
                       if off == "SLOT0_SEQ_LEN" else BY_NAME[off].offset)
            self.host_ops.append((MMIO_BASE + off, wdata, None))

            def check(v, off=off, want=want, wdata=wdata):
                if v not in [int(Status[w]) for w in want]:
                    name = Status(v).name if v in Status._value2member_map_ else v
                    self.errors.append(f"host {'write' if wdata is not None else 'read'} "
                                       f"{off:#x}: CMD_STATUS {name}, expected "
                                       f"{' or '.join(want)}")
            self._read(self._reg("CMD_STATUS"), check)

    def _poll_exit(self):
        def got(v):
            if v == 0xDEADBEEF and self.takeover == "wait":
                return             # it stopped after the last outcome, before its exit: the
                                   # takeover reads the state (and finds nothing left to do)
            if v == 0xDEADBEEF:
                for _ in range(32):
                    self._read(self._reg("ID"), None)    # ~64 cycles later
                self._poll_exit()
            else:
                self.exit_code = v
                self._read_final()
        self._read(HOST_LOCAL_BASE + self.symbols["_exit_code"], got)

    def _read_final(self, then_done=True):
        names = ("DESCRIPTORS", "ROLLBACKS", "TIMEOUTS", "BAD_COMPLETIONS", "BAD_ACCESSES",
                 "OUTCOMES", "ROUND", "HEARTBEAT_LIMIT")
        for name in names:
            self._read(self._reg(name), lambda v, n=name: self.counters.__setitem__(n.lower(), v))
        for h in range(self.n_cores):
            self._read(self._reg("BUSY_CYCLES") + 4 * h,
                       lambda v, h=h: self.counters.setdefault("busy_cycles", []).append(v))
        if "fw_error" in self.symbols:
            self._read(HOST_LOCAL_BASE + self.symbols["fw_error"],
                       lambda v: setattr(self, "fw_error", v))
        if "fw_boot_cycles" in self.symbols:
            self._read(HOST_LOCAL_BASE + self.symbols["fw_boot_cycles"],
                       lambda v: setattr(self, "boot_cycles", v))
        for name, count in self.spec.get("dump", {}).items():
            for i in range(count):
                self._read(HOST_LOCAL_BASE + self.symbols[name] + 4 * i,
                           lambda v, name=name: self.dump.setdefault(name, []).append(v))
        if then_done:
            self._read(self._reg("ID"), lambda v: setattr(self, "done", True))

    # -- degraded: the host takes over from the slot records ------------------------------
    def _start_takeover(self):
        recs = {}

        def rd(slot, fi):
            return lambda v: recs.setdefault(slot, {}).__setitem__(SLOT_FIELDS[fi][0], v)
        self._read(self._reg("ROUND"), lambda v: setattr(self, "rounds_rtl", v))
        for s in range(self.n_slots):
            for fi in range(len(SLOT_FIELDS)):
                self._read(MMIO_BASE + SLOT_BASE + s * SLOT_STRIDE + 4 * fi, rd(s, fi))
        self._read_final(then_done=False)
        self._read(self._reg("ID"), lambda v: self._host_schedule(recs))

    def _host_schedule(self, recs):
        if self.sessions:
            try:
                self._host_schedule_sessions(recs)
            except ValueError as e:
                self.errors.append(f"takeover: {e}")
            self.takeover = "done"
            self.done = True
            return
        slots, consumed = {}, set(self.outcomes)
        for s, r in recs.items():
            if r["STATE"] == SlotState.FREE:
                continue
            if r["STATE"] != SlotState.ACTIVE:
                self.errors.append(f"takeover: slot {s} in state {r['STATE']}")
            slots[s] = Slot(r["REQUEST"], r["SEQ_LEN"], r["TOKENS_LEFT"], r["PRIORITY"],
                            r["ARRIVAL_SEQ"], r["CHECKPOINT"], r["SEQ_LEN"] + r["TOKENS_LEFT"],
                            r["GENERATED"], r["RETRIES"], r["WAIT"])
            consumed.add(r["REQUEST"])
        try:
            model = DsuModel.resume(self.params, self.rounds_rtl, slots, self.outcomes)
        except ValueError as e:
            self.errors.append(f"takeover: {e}")
            self.takeover = "done"
            self.done = True
            return
        todo = [r for r in self.todo if r.id not in consumed]
        k = 0
        while k < len(todo) or not model.idle:
            if model.round > 1_000_000:
                raise RuntimeError("host scheduling did not finish")
            while k < len(todo) and todo[k].arrival_step <= model.round:
                model.submit(todo[k])
                k += 1
            batch = model.step().batch
            self.host_batches.append(batch)
            model.complete({d.slot: self.step_faults[(model.round, d.slot)] for d in batch
                            if (model.round, d.slot) in self.step_faults})
        self.outcomes = dict(model.outcomes)
        self.takeover = "done"
        self.done = True

    def _host_schedule_sessions(self, recs):
        """The takeover of a session run (docs/dsu.md, "Degraded mode"). The host rebuilds
        the model's state between rounds from the slot records (``PARKED`` included), the
        outcomes and moves it has taken from the streams and the commands it has pushed:

        * what the firmware left half done when it stopped, the host finishes as the model
          would: a turn that ended in the last round without its ``park`` (``drop``) move
          gets the move (under ``drop`` the slot is then free); a continue that can never
          fit whose ``drop`` move is out but whose ``FREE`` is not gets its failed outcome;
        * a parked KV is in G2 when its last park/restore move is a park (park policies),
          its reservation 0 there and ``seq_len`` in HBM; an active slot reserves
          ``seq_len + tokens_left``;
        * the admission counter is the turns started: per admitted request its outcomes
          other than "too large" plus one when it is active;
        * the pushed commands not yet served (a restore: no restore move for it; a continue:
          fewer turns started than pushed) stay queued in push order, the commands of later
          rounds are issued at their rounds, as ``run_sessions`` does.
        """
        from collections import Counter
        policy, rnd0 = self.params.park_policy, self.rounds_rtl
        by_req, moves_of = {}, {}
        for o in self.ended:
            by_req.setdefault(o.request, []).append(o)
        for m in self.moves:
            moves_of.setdefault(m.request, []).append(m.kind)
        slots, extra_moves, extra_ended = {}, [], []
        for s, r in sorted(recs.items()):
            state, rid = r["STATE"], r["REQUEST"]
            if state == SlotState.FREE:
                continue
            if state not in (SlotState.ACTIVE, SlotState.PARKED):
                raise ValueError(f"slot {s} in state {state}")
            if state == SlotState.ACTIVE:
                slots[s] = Slot(rid, r["SEQ_LEN"], r["TOKENS_LEFT"], r["PRIORITY"],
                                r["ARRIVAL_SEQ"], r["CHECKPOINT"],
                                r["SEQ_LEN"] + r["TOKENS_LEFT"], r["GENERATED"], r["RETRIES"],
                                r["WAIT"], bool(r["CONTINUES"]))
                continue
            kinds = moves_of.setdefault(rid, [])
            done = [o for o in by_req.get(rid, []) if o.status == "completed"]
            if not done:
                raise ValueError(f"slot {s} parked, request {rid} has no completed turn")
            if policy != "drop" and kinds and kinds[-1] == "drop":
                extra_ended.append(Outcome(rid, "failed", 0, "too large", rnd0))
                continue                           # its continue could never fit: FREE
            if policy == "drop":
                if "drop" not in kinds:
                    extra_moves.append(Move(done[-1].step, rid, "drop", r["SEQ_LEN"], s))
                continue                           # dropped: the slot is free
            if policy != "keep" and kinds.count("park") < len(done):
                extra_moves.append(Move(done[-1].step, rid, "park", r["SEQ_LEN"], s))
                kinds.append("park")
            tier = [k for k in kinds if k in ("park", "restore")]
            in_g2 = policy != "keep" and tier[-1] == "park"
            slots[s] = Slot(rid, r["SEQ_LEN"], r["TOKENS_LEFT"], r["PRIORITY"],
                            r["ARRIVAL_SEQ"], r["CHECKPOINT"], 0 if in_g2 else r["SEQ_LEN"],
                            r["GENERATED"], r["RETRIES"], r["WAIT"], True, "parked",
                            "g2" if in_g2 else "hbm")
        ended = self.ended + extra_ended
        by_req = {}
        for o in ended:
            by_req.setdefault(o.request, []).append(o)
        active = {sl.request for sl in slots.values() if sl.state == "active"}
        started, too_large = Counter(), Counter()
        for rid in set(by_req) | {sl.request for sl in slots.values()}:
            outs = by_req.get(rid, [])
            if outs and outs[0].status == "failed" and outs[0].reason == "too large":
                continue                           # refused at the intake: never admitted
            too_large[rid] = sum(o.reason == "too large" for o in outs)
            started[rid] = len(outs) - too_large[rid] + (rid in active)
        restored = Counter(m.request for m in self.moves + extra_moves if m.kind == "restore")
        pushed_r, pushed_c, restores, continues, later = Counter(), Counter(), [], [], {}
        for rnd, kind, args in self.sessions["host"]:
            if self.host_next is not None and rnd >= self.host_next:
                later.setdefault(rnd, []).append((kind, args))
            elif kind == "restore":
                pushed_r[args[0]] += 1
                if pushed_r[args[0]] > restored[args[0]]:
                    restores.append(args[0])
            else:
                rid = args[0]
                pushed_c[rid] += 1
                if pushed_c[rid] > started[rid] - 1 + too_large[rid]:
                    continues.append(Continue(rid, args[1], args[2], bool(args[3])))
        outcomes = {}
        for o in ended:
            if o.request not in active:            # an active turn's request is live
                outcomes[o.request] = o
        model = DsuModel.resume(self.params, rnd0, slots, outcomes, sum(started.values()),
                                restores=restores, continues=continues)
        self.ended, self.moves = ended, self.moves + extra_moves
        consumed = set(by_req) | {sl.request for sl in slots.values()}
        todo = [r for r in self.todo if r.id not in consumed]
        # the firmware's part of round rnd0 (a restore, a continue that can never fit, a
        # refused request) means the golden run has that round even if nothing is left
        force = any(o.step == rnd0 for o in ended) or any(m.round == rnd0 for m in self.moves)
        k = 0
        while force or k < len(todo) or not model.idle or later:
            force = False
            if model.round > MAX_ROUNDS:
                raise ValueError("host scheduling did not finish")
            for kind, args in later.pop(model.round, []):
                if kind == "restore":
                    model.restore(args[0])
                else:
                    model.continue_turn(*args)
            while k < len(todo) and todo[k].arrival_step <= model.round:
                model.submit(todo[k])
                k += 1
            step = model.step()
            self.host_batches.append(step.batch)
            self.ended.extend(step.ended)
            out = model.complete({d.slot: self.step_faults[(model.round, d.slot)]
                                  for d in step.batch if (model.round, d.slot) in self.step_faults})
            self.ended.extend(out)
            moves = model.drain_moves()
            self.moves.extend(moves)
            if not (model.idle or step.batch or step.ended or out or moves or later
                    or k < len(todo) or step.restored or step.continued or step.admitted):
                raise ValueError(f"round {step.number}: nothing can change any more "
                                 f"({model.parked_slots} parked slots, {len(model.restores)} "
                                 f"restores and {len(model.continues)} continues queued)")
        self.outcomes = {o.request: o for o in self.ended}

    # -- results ------------------------------------------------------------------------
    def result(self):
        n_rtl = self.rounds_rtl if self.rounds_rtl is not None else self.counters.get("round", 0)
        bad_steps = sorted(s for s in self.rtl if s >= n_rtl)
        batches = [self.rtl.get(r, []) for r in range(n_rtl)] + self.host_batches
        lat = []
        for s in range(1, n_rtl):
            if s in self.first_desc and (s - 1) in self.round_end:
                lat.append({"round": s, "cycles": self.first_desc[s] - self.round_end[s - 1],
                            "batch": len(self.rtl.get(s, []))})
        errors = list(self.errors) + [f"descriptor for step {s} beyond the last round {n_rtl}"
                                      for s in bad_steps]
        errors += self.drained_problems()
        return batches, lat, errors, n_rtl

    def drained_problems(self):
        """The drained check at the end of a run: no descriptor or outcome left valid and not
        taken, every completion given; without a takeover also every request pushed and one
        outcome per request (a takeover leaves the rest to the host)."""
        if self.takeover == "failed":
            return []                  # already an error: degraded without an injected hang
        if self.takeover is None:
            self.out_sink.expect = self.sessions["outcomes"] if self.sessions else \
                len(self.requests)
            self.move_sink.expect = self.sessions["moves"] if self.sessions else 0
            return drained(self.intake, self.desc_sink, self.comp, self.out_sink,
                           self.move_sink)
        return drained(self.desc_sink, self.comp)


# -- drivers -----------------------------------------------------------------------------------
def _sim_amaranth(spec, cluster, progress=None, wave=None):
    from .shared_simulator import design, own
    env = DsuEnv(spec)
    env.progress = progress
    if isinstance(cluster, functools.partial):      # a cluster by its parameters: shared
        shared = design(cluster.func, share=wave is None, **cluster.keywords)
    else:
        shared = own(cluster)
    dut = shared.dut
    ins = {"run": dut.run, "stall": dut.stall, "intake_valid": dut.intake.valid,
           "intake_payload": dut.intake.payload.as_value(), "intake_end": dut.intake_end,
           "descriptors_ready": dut.descriptors.ready, "completions_valid": dut.completions.valid,
           "completions_payload": dut.completions.payload.as_value(),
           "outcomes_ready": dut.outcomes.ready, "host_addr": dut.host.addr,
           "host_wdata": dut.host.wdata, "host_mask": dut.host.mask, "host_we": dut.host.we,
           "host_valid": dut.host.valid, "moves_ready": dut.moves.ready}
    outs = {"intake_ready": dut.intake.ready, "descriptors_valid": dut.descriptors.valid,
            "descriptors_payload": dut.descriptors.payload.as_value(),
            "completions_ready": dut.completions.ready, "outcomes_valid": dut.outcomes.valid,
            "outcomes_payload": dut.outcomes.payload.as_value(), "degraded": dut.degraded,
            "round_busy": dut.round_busy, "round": dut.round, "trap": dut.trap,
            "host_ready": dut.host.ready, "host_rdata": dut.host.rdata, "host_err": dut.host.err,
            "moves_valid": dut.moves.valid, "moves_payload": dut.moves.payload.as_value()}

    async def bench(ctx):
        while not env.done:
            for name, value in env.drive().items():
                ctx.set(ins[name], value)
            env.commit({name: ctx.get(sig) for name, sig in outs.items()})
            await ctx.tick()

    if wave is None:
        shared.run(bench)
        return env
    from .waves import amaranth_waves, check_window
    with amaranth_waves(shared.sim, wave, period=1e-9, skip_cycles=0):
        shared.run(bench)
        check_window(wave, env.cycle)
    return env


def cocotb_bench_main(spec_path, result_path):
    """Body of the cocotb test (``sim/harness/benches/dsu_sched.py``): returns a coroutine function."""
    async def run(dut):
        import cocotb
        from cocotb.clock import Clock
        from cocotb.simtime import get_sim_time
        from cocotb.triggers import FallingEdge, ReadOnly, RisingEdge
        spec = json.loads(Path(spec_path).read_text())
        cocotb.start_soon(Clock(dut.clk, 1, unit="ns").start())
        sig = lambda n: getattr(dut, n.replace("_", "__", 1) if n not in  # noqa: E731
                                ("run", "stall", "intake_end", "degraded", "round_busy",
                                 "round", "trap") else n)
        ins = {n: sig(n) for n in DsuEnv.INPUTS}
        outs = {n: sig(n) for n in DsuEnv.OUTPUTS}
        states = []
        for one in (spec if isinstance(spec, list) else [spec]):   # a list: reset between
            env = DsuEnv(one)
            await FallingEdge(dut.clk)
            dut.rst.value = 1
            for s in ins.values():
                s.value = 0
            await RisingEdge(dut.clk)
            await RisingEdge(dut.clk)
            dut.rst.value = 0
            t0 = None
            last = dict.fromkeys(ins, 0)
            while not env.done:
                await FallingEdge(dut.clk)
                if t0 is None:       # cycle 0 starts half a period before this falling edge
                    t0 = get_sim_time("sec") - 0.5e-9
                for n, v in env.drive().items():
                    if last[n] != v:             # an input holds its value until written
                        ins[n].value = last[n] = v
                await ReadOnly()
                env.commit(_OutputsRead(outs))
            state = _env_state(env)
            state.update(t0=t0, period=1e-9)
            states.append(state)
        Path(result_path).write_text(json.dumps(states if isinstance(spec, list) else states[0]))
    return run


class _OutputsRead(dict):
    """The cluster's outputs of one cycle, each read from the simulator the first time
    :meth:`DsuEnv.commit` asks for it (a payload only when its valid is high): the cocotb
    bench spends its time in these reads."""
    def __init__(self, signals):
        super().__init__()
        self.signals = signals

    def __missing__(self, name):
        value = self[name] = int(self.signals[name].value)
        return value


def _env_state(env):
    batches, lat, errors, n_rtl = env.result()
    return {"batches": [[asdict(d) for d in b] for b in batches],
            "outcomes": [asdict(o) for o in env.outcomes.values()], "latencies": lat,
            "ended": [asdict(o) for o in env.ended], "moves": [asdict(m) for m in env.moves],
            "errors": errors, "rounds_rtl": n_rtl, "cycles": env.cycle,
            "degraded_cycle": env.degraded_cycle, "counters": env.counters,
            "exit_code": env.exit_code, "fw_error": env.fw_error, "dump": env.dump,
            "boot_cycles": env.boot_cycles, "hang_cycle": env.hang_cycle,
            "budget_exhausted": env.budget_exhausted,
            "badcomp_fired": env.badcomp_fired, "mmio_fired": env.mmio_fired,
            "round_ends": [env.round_end[r] for r in sorted(env.round_end)]}


def execute(spec, cluster, sim, progress=None):
    """Run ``spec`` (see :func:`run_dsu`) on ``cluster`` (a :class:`DsuCluster`, or a
    ``functools.partial`` of one, whose Amaranth runs then share a simulator:
    :mod:`.shared_simulator`); returns the environment's state
    (batches, outcomes, latencies, errors, counters, exit code, dumped words). A list of
    specs runs them one after another (on Verilator in one simulation, the cluster reset
    between them) and returns the list of states. ``progress``: called about twice a second
    with ``{"cycle", "round", "outcomes", "requests", "degraded"}`` of the run in progress."""
    if sim == "amaranth":
        if isinstance(spec, list):
            return [_env_state(_sim_amaranth(one, cluster, progress)) for one in spec]
        return _env_state(_sim_amaranth(spec, cluster, progress))
    return _execute_verilator(spec, cluster, progress)


def _execute_verilator(spec, cluster, progress=None, waves=None):
    from .cocotb_run import run_cocotb
    with tempfile.TemporaryDirectory() as tmp:
        spec_path, result_path = Path(tmp) / "spec.json", Path(tmp) / "result.json"
        progress_path = Path(tmp) / "progress.json"
        if progress is not None:
            for one in (spec if isinstance(spec, list) else [spec]):
                one["progress_file"] = str(progress_path)
        spec_path.write_text(json.dumps(spec))
        stop = _poll_progress(progress_path, progress) if progress is not None else None
        extra = {"waves": waves} if waves is not None else {}
        try:
            run_cocotb(cluster, "dsu_cluster", "dsu_sched", COCOTB_DIR,
                       extra_env={"DSU_SPEC": str(spec_path), "DSU_RESULT": str(result_path)},
                       **extra)
        finally:
            if stop is not None:
                stop()
        return json.loads(result_path.read_text())


def verilator_waves_supported() -> bool:
    """Whether ``run_cocotb`` can record waves (``waves=PATH``: a ``--trace`` build)."""
    import inspect

    from .cocotb_run import run_cocotb
    return "waves" in inspect.signature(run_cocotb).parameters


def _execute_with_wave(spec, cluster, sim, progress, wave):
    """:func:`execute` of one spec, recording ``wave`` (a ``waves.WaveSpec``)."""
    from .waves import check_window, finish, recording
    if sim == "amaranth":
        return _env_state(_sim_amaranth(spec, cluster, progress, wave=wave))
    with recording(wave) as raw:
        state = _execute_verilator(spec, cluster, progress, waves=raw)
        check_window(wave, state["cycles"])
        finish(wave, raw, t0=state["t0"], period=state["period"])
    return state


def _poll_progress(path, progress):
    """A thread that passes the cocotb process's progress file to ``progress``; returns the
    function that stops it."""
    import threading
    done = threading.Event()

    def loop():
        last = None
        while not done.wait(0.5):
            try:
                state = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            if state != last:
                last = state
                progress(state)
    t = threading.Thread(target=loop, name="dsu-progress", daemon=True)
    t.start()

    def stop():
        done.set()
        t.join()
    return stop


def make_spec(fw, *, cores, n_slots, params=None, requests=(), step_faults=None, hang=None,
              config=None, seed=0, backpressure=True, max_cycles=2_000_000, dump=None,
              idle=None, load_zeros=False, badcomp=(), mmio=(), sessions=None):
    """The JSON-able description of one run that :class:`DsuEnv` executes (``idle`` and
    ``backpressure``: :func:`stream_schedules`; ``load_zeros``: load the image's zero words
    too, for a run after another in the same simulation; ``sessions``: ``{"host": [(round,
    kind, args)], "outcomes": n, "moves": n}``, the host's commands (``run_sessions``) and
    the counts to expect, with ``requests`` in the intake's order)."""
    params = params or DsuParams(n_slots=n_slots)
    symbols = {k: fw.symbols[k] for k in ("_exit_code", "fw_error", "fw_boot_cycles",
                                          "dsu_config", *(dump or {}))
               if k in fw.symbols}
    return {"cores": cores, "n_slots": n_slots, "params": asdict(params),
            "requests": [asdict(r) for r in requests],
            "step_faults": [[s, sl, r] for (s, sl), r in (step_faults or {}).items()],
            "hang": hang, "max_cycles": max_cycles, "seed": seed,
            "badcomp": [list(x) for x in badcomp], "mmio": list(mmio),
            "backpressure": backpressure if isinstance(backpressure, bool)
            else Schedule.of(backpressure).to_json(),
            "streams": stream_schedules(idle, backpressure), "load_zeros": load_zeros,
            "symbols": symbols, "image": firmware_words(fw, config), "dump": dict(dump or {}),
            "sessions": sessions}


#: hardware field ranges of a request (intake payload, ``layouts.INTAKE_LAYOUT``): exclusive
#: upper bounds, and the lower bounds
REQUEST_LIMITS = {"id": (0, 1 << 16), "prompt_tokens": (1, 1 << 23),
                  "max_new_tokens": (1, 1 << 16), "priority": (0, 4), "arrival_step": (0, 1 << 24)}
#: request ids are 16 bits: at most this many requests in one run
MAX_REQUESTS = REQUEST_LIMITS["id"][1]
#: hardware field ranges of a session's later turn (the host's continue command,
#: ``layouts.HCMD_LAYOUT``): exclusive upper bounds, and the lower bounds
CONTINUE_LIMITS = {"new_tokens": (0, 1 << 24), "max_new_tokens": (1, 1 << 16)}
#: a slot's ``seq_len`` (slot record, descriptor, move): a session's context stays below this
SEQ_LEN_LIMIT = 1 << 24
#: the golden model and the host give up past this many rounds (and so does the plan)
MAX_ROUNDS = 1_000_000
#: configuration ranges (the registers' and the firmware's): name -> (low, high) inclusive
CONFIG_LIMITS = {"n_slots": (1, 256), "cores": (1, 4), "max_retries": (0, 15),
                 "watchdog_limit": (1, (1 << 24) - 1), "heartbeat_limit": (1, (1 << 24) - 1),
                 "long_context_tokens": (1, (1 << 24) - 1),
                 "kv_capacity_tokens": (1, (1 << 32) - 1), "seed": (0, (1 << 32) - 1),
                 "intake_depth": (1, 1024)}

# -- cost model of a run (for budgets, estimates and refusals; docs/dsu.md "Run time") -------
#: boot: cores' release to the firmware's first HEARTBEAT_LIMIT write (``fw_boot_cycles``)
BOOT_CYCLES = {64: 4_866, 256: 18_258}
#: cycles of one round (its end to the next one's end), least-squares fits over 545 rounds of
#: five 40-60 request workloads (8 slots, 1 core, default backpressure; median error 3-5 %,
#: max 29 %): ``base + a * active + b * batch + c * admitted``, one fit while every active slot
#: fits the batch (no selection) and one per profile above the cap; the arbiter's scan and
#: the firmware's bitmap words add about 1.5 cycles per slot beyond 8
ROUND_FIT_ALL = (390, 108, 0, 255)
ROUND_FIT = {"latency-opt": (95, 102, 189, 405), "throughput-opt": (180, 245, 175, 297),
             "fairness-opt": (76, 111, 228, 361)}
ROUND_PER_EXTRA_SLOT = 1.5
#: a certain lower bound of one round's cycles (an empty round, no backpressure)
ROUND_MIN = 150
#: simulation speed, cycles per second of wall time (this machine, one process):
#: Verilator + cocotb is bound by the Python testbench; pysim slows with cores and slots
VERILATOR_RATE = 8_000


def amaranth_rate(cores: int, n_slots: int) -> float:
    """Amaranth pysim cycles per second for the cluster (measured, docs/dsu.md)."""
    return 1.0 / (1 / 2_600 + cores / 4_000 + n_slots / 400_000)


def sim_rate(sim: str, cores: int, n_slots: int) -> float:
    return VERILATOR_RATE if sim == "verilator" else amaranth_rate(cores, n_slots)


def _check_range(name, value, lo, hi):
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise ValueError(f"{name} must be an integer in {lo}..{hi:,}, not {value!r}")


def check_session_fields(sessions, park_policy="keep"):
    """Every turn of every session against the hardware's fields, before any golden model;
    a :class:`ValueError` naming ``session S turn K`` (S: the first turn's request id) and
    the field. Turn 0 is a request (:data:`REQUEST_LIMITS`); a later turn is a continue
    command (:data:`CONTINUE_LIMITS`, its ``gap`` an integer >= 1); the context after every
    turn (prompt + output) must stay below :data:`SEQ_LEN_LIMIT` (a slot's ``seq_len``);
    under ``drop`` a later turn is resubmitted with the whole context as its prompt, so that
    must fit the intake's prompt field too."""
    for x in sessions:
        sid = x.first.id
        for name, (lo, hi) in REQUEST_LIMITS.items():
            value = getattr(x.first, name)
            if isinstance(value, bool) or not isinstance(value, int) or not lo <= value < hi:
                raise ValueError(f"session {sid} turn 0: {name} must be an integer in "
                                 f"{lo}..{hi - 1:,} (the hardware's field), not {value!r}")
        context = x.first.prompt_tokens + x.first.max_new_tokens
        for k, t in enumerate(x.turns, 1):
            for name, (lo, hi) in (("gap", (1, MAX_ROUNDS + 1)), *CONTINUE_LIMITS.items()):
                value = getattr(t, name)
                if isinstance(value, bool) or not isinstance(value, int) or not lo <= value < hi:
                    what = "rounds" if name == "gap" else "the host command's field"
                    raise ValueError(f"session {sid} turn {k}: {name} must be an integer in "
                                     f"{lo}..{hi - 1:,} ({what}), not {value!r}")
            prompt = context + t.new_tokens
            limit = REQUEST_LIMITS["prompt_tokens"][1]
            if park_policy == "drop" and prompt >= limit:
                raise ValueError(f"session {sid} turn {k}: its whole prompt of {prompt:,} tokens "
                                 f"(resubmitted under park policy drop) must be below "
                                 f"{limit:,} (the intake's prompt field)")
            context = prompt + t.max_new_tokens
            if context >= SEQ_LEN_LIMIT:
                raise ValueError(f"session {sid} turn {k}: the context reaches {context:,} "
                                 f"tokens, a slot's seq_len must stay below {SEQ_LEN_LIMIT:,} "
                                 f"(24 bits)")


def _sessions_lower_bound(sessions, params):
    """A certain lower bound of the rounds a fault-free session run takes: each session's
    turns run one after another, a turn of ``max_new`` tokens takes at least that many
    rounds and the next one starts ``gap`` rounds after it ends; a session stops at its
    first turn that can never fit the KV budget ("too large")."""
    rounds = 0
    for x in sessions:
        context = x.first.prompt_tokens + x.first.max_new_tokens
        if context > params.kv_capacity_tokens:
            continue
        end = x.first.arrival_step + x.first.max_new_tokens
        for t in x.turns:
            context += t.new_tokens + t.max_new_tokens
            if context > params.kv_capacity_tokens:
                break
            end += max(1, t.gap) - 1 + t.max_new_tokens
        rounds = max(rounds, end)
    return rounds


@dataclass
class DsuPlan:
    """A validated run, before any simulation: the golden schedule, the faults that cannot
    fire (known from it), the cost estimate and the cycle budget. :func:`plan_dsu` makes
    it, :func:`run_plan` runs it."""
    requests: list
    profile: str
    cores: int
    n_slots: int
    sim: str
    params: DsuParams
    faults: list             # [Fault]
    step_faults: dict
    hang: int | None
    golden_batches: list
    golden_outcomes: dict
    faults_not_fired: list   # step faults the golden schedule never reaches: [(Fault, why)]
    estimate_cycles: int
    max_cycles: int
    firmware_slots: int
    counts: list             # per golden round: active, admitted, retired, blocked
    run_args: dict
    #: sessions (``run_sessions``): the host's commands, every outcome and move in order
    sessions: dict | None = None

    @property
    def rounds(self) -> int:
        return len(self.golden_batches)

    def estimate_seconds(self) -> float:
        return self.estimate_cycles / sim_rate(self.sim, self.cores, self.n_slots)


def _cycles_lower_bound(requests, params, n_faults, boot):
    """A certain lower bound of a run's cycles, without running the golden model: every
    round up to the last arrival runs, and every kept token takes a descriptor in some round
    of at most ``cap`` descriptors (each step fault can end at most one request early)."""
    fit = [r for r in requests if r.prompt_tokens + r.max_new_tokens <= params.kv_capacity_tokens]
    if not fit:
        return boot, 0
    tokens = sorted((r.max_new_tokens for r in fit), reverse=True)
    tokens = tokens[min(n_faults, len(tokens)):]         # the faulted ones may end early
    cap = min(params.cap, params.n_slots)
    rounds = max(max(r.arrival_step for r in fit) + 1, -(-sum(tokens) // cap),
                 max(tokens, default=0))
    return boot + rounds * ROUND_MIN, rounds


def _estimate(golden_batches, counts, params, step_faults, hang, watchdog_limit,
              heartbeat_limit, boot):
    """Estimated cycles of a run from its golden schedule and its per-round counts (the fits
    above)."""
    cycles = boot
    extra = ROUND_PER_EXTRA_SLOT * max(0, params.n_slots - 8)
    for c, batch in zip(counts, golden_batches):
        base, a, b, adm = ROUND_FIT_ALL if c["active"] <= params.cap else \
            ROUND_FIT[params.profile]
        cycles += base + a * c["active"] + b * len(batch) + adm * c["admitted"] + extra
    cycles += watchdog_limit * sum(1 for r in step_faults.values() if r == TIMEOUT)
    if hang is not None:                  # the watchdog's wait, then the host reads the slots
        cycles = min(cycles, hang + max(heartbeat_limit, HEARTBEAT_LIMIT_RESET)
                     + 40 * params.n_slots + 1_000)
    return int(cycles)


def _check_requests(requests):
    """At most :data:`MAX_REQUESTS`, every field in its hardware range, ids unique."""
    if len(requests) > MAX_REQUESTS:
        raise ValueError(f"{len(requests):,} requests: at most {MAX_REQUESTS:,} (request ids "
                         f"are 16 bits)")
    for r in requests:
        for name, (lo, hi) in REQUEST_LIMITS.items():
            value = getattr(r, name)
            if isinstance(value, bool) or not isinstance(value, int) or not lo <= value < hi:
                raise ValueError(f"request {r.id}: {name} must be an integer in {lo}..{hi - 1:,} "
                                 f"(the hardware's field), not {value!r}")
    ids = set()
    for r in requests:
        if r.id in ids:
            raise ValueError(f"request id {r.id} appears twice: request ids must be unique")
        ids.add(r.id)


def plan_dsu(requests, profile="throughput-opt", cores=1, faults=None, sim="verilator",
             n_slots=8, max_batch=None, latency_batch=None, kv_capacity_tokens=1 << 20,
             long_context_tokens=4096, max_retries=2, watchdog_limit=200,
             heartbeat_limit=50_000, seed=0, backpressure=True, max_cycles=None,
             intake_depth=4, firmware="scheduler", config_overrides=None, idle=None,
             faults_strict=False, max_seconds=None, sessions=None, park_policy="keep",
             lead=0) -> DsuPlan:
    """Validate a run and compute everything that needs no simulation (see :func:`run_dsu`
    for the arguments). Raises :class:`ValueError` (one line naming the bad argument) for
    anything the hardware or the firmware cannot take, and also when:

    * ``faults_strict`` and a step fault aims at a (step, slot) the golden schedule never
      issues (it could not fire);
    * ``max_cycles`` is given and the run certainly needs more (a lower bound computed
      without the golden model, then the estimate from it);
    * ``max_seconds`` is given and the run's estimated simulation time exceeds it (again
      the lower bound first: a run that is obviously too long is refused before the golden
      model spends time on it);
    * the schedule would take more than :data:`MAX_ROUNDS` rounds.

    ``max_cycles=None``: the budget is twice the estimate plus 200,000 cycles.

    ``sessions`` (a list of :class:`~tricut.models.dsu.Session`), ``park_policy`` and ``lead``:
    the golden run is :func:`~tricut.models.dsu.run_sessions`; the host pushes its commands
    round by round, and every batch, outcome (in order of the outcome stream: per round, as a
    multiset) and move (in order) is compared."""
    if sim not in ("verilator", "amaranth"):
        raise ValueError(f"sim must be 'verilator' or 'amaranth', not {sim!r}")
    if profile not in PROFILES:
        raise ValueError(f"profile must be one of {', '.join(PROFILES)}, not {profile!r}")
    for name, value in (("cores", cores), ("n_slots", n_slots), ("max_retries", max_retries),
                        ("watchdog_limit", watchdog_limit), ("heartbeat_limit", heartbeat_limit),
                        ("long_context_tokens", long_context_tokens),
                        ("kv_capacity_tokens", kv_capacity_tokens), ("seed", seed),
                        ("intake_depth", intake_depth)):
        _check_range(name, value, *CONFIG_LIMITS[name])
    if max_cycles is not None:
        _check_range("max_cycles", max_cycles, 1, 1 << 62)
    for name, value in (("max_batch", max_batch), ("latency_batch", latency_batch)):
        if value is not None:
            _check_range(name, value, 1, (1 << 32) - 1)
    requests = list(requests)
    if park_policy not in PARK_POLICIES:
        raise ValueError(f"park_policy must be one of {', '.join(PARK_POLICIES)}, "
                         f"not {park_policy!r}")
    _check_range("lead", lead, 0, MAX_ROUNDS)
    sessions = None if sessions is None else list(sessions)
    if sessions is not None:
        if not all(isinstance(x, Session) for x in sessions):
            raise ValueError("sessions must be a list of models.dsu.Session")
        check_session_fields(sessions, park_policy)
        requests = requests + [x.first for x in sessions]
    _check_requests(requests)
    params = DsuParams(profile=profile, n_slots=n_slots,
                       max_batch=max_batch or n_slots,
                       latency_batch=latency_batch or max(1, n_slots // 4),
                       kv_capacity_tokens=kv_capacity_tokens,
                       long_context_tokens=long_context_tokens, max_retries=max_retries,
                       park_policy=park_policy)
    fault_list = parse_faults(faults) if isinstance(faults, str) else list(faults or [])
    step_faults, hang = _split_faults(fault_list)
    for f in fault_list:
        if f.kind in STEP_KINDS and f.slot >= n_slots:
            raise ValueError(f"fault {f}: slot {f.slot} >= n_slots {n_slots}")
    fw_slots = 64 if n_slots <= 64 else 256
    boot = BOOT_CYCLES[fw_slots]
    rate = sim_rate(sim, cores, n_slots)
    # refuse the obviously impossible before the golden model spends time on it
    low, low_rounds = _cycles_lower_bound(requests, params, len(step_faults), boot)
    if sessions and not step_faults:
        sess_rounds = _sessions_lower_bound(sessions, params)
        if sess_rounds > low_rounds:
            low, low_rounds = low + (sess_rounds - low_rounds) * ROUND_MIN, sess_rounds
    if hang is not None:
        low = min(low, hang + HEARTBEAT_LIMIT_RESET)
    if low_rounds > MAX_ROUNDS:
        raise ValueError(f"the schedule needs at least {low_rounds:,} rounds (latest arrival or "
                         f"tokens / batch cap); at most {MAX_ROUNDS:,} are simulated")
    if max_cycles is not None and low > max_cycles:
        raise ValueError(f"the run needs at least {low:,} cycles (boot + {low_rounds:,} rounds), "
                         f"more than --max-cycles {max_cycles:,}")
    if max_seconds is not None and low / rate > max_seconds:
        raise ValueError(f"the run needs at least {low:,} cycles, at least {_dur(low / rate)} on "
                         f"{sim} (≈{rate:,.0f} cycles/s), more than the {_dur(max_seconds)} "
                         f"allowed")
    sess = None
    try:
        if sessions is None:
            golden_batches, golden_outcomes, counts = _golden(requests, params, step_faults)
        else:
            plain = requests[:len(requests) - len(sessions)]
            golden_batches, golden_outcomes, counts, sess = _golden_sessions(
                plain, sessions, params, step_faults, lead)
            requests = sess.pop("intake")
    except (RuntimeError, ValueError) as e:
        raise ValueError(f"golden model: {e}") from None
    if sess is not None:
        for r in requests:          # resubmitted turns (drop): the intake's fields too
            for name, (lo, hi) in REQUEST_LIMITS.items():
                if not lo <= getattr(r, name) < hi:
                    raise ValueError(f"request {r.id} (a resubmitted turn): {name} "
                                     f"{getattr(r, name):,} outside the hardware's field")
        for rnd, kind, args in sess["host"]:
            if kind == "continue" and not (args[1] < 1 << 24 and args[2] < 1 << 16):
                raise ValueError(f"continue {args[0]} in round {rnd}: new_tokens < 2^24 and "
                                 f"max_new_tokens < 2^16 (the host command's fields)")
    unfired = []
    for f in fault_list:
        if f.kind not in STEP_KINDS:
            continue
        if f.step >= len(golden_batches):
            unfired.append((f, f"the schedule has {len(golden_batches)} rounds"))
        elif all(d.slot != f.slot for d in golden_batches[f.step]):
            unfired.append((f, f"round {f.step} has no descriptor for slot {f.slot}"))
    if faults_strict and unfired:
        f, why = unfired[0]
        raise ValueError(f"fault {f} cannot fire: {why}"
                         + (f" (+{len(unfired) - 1} more: "
                            + ", ".join(str(g) for g, _ in unfired[1:4])
                            + (", ..." if len(unfired) > 4 else "") + ")"
                            if len(unfired) > 1 else "")
                         + " [--faults-strict]")
    est = _estimate(golden_batches, counts, params, step_faults, hang, watchdog_limit,
                    heartbeat_limit, boot)
    if sess is not None:   # the host's HOST_ROUND write per round, 6 accesses per command
        est += 60 * len(golden_batches) + 40 * len(sess["host"])
    if max_cycles is not None and est > 2 * max_cycles:
        raise ValueError(f"the run needs about {est:,} cycles ({len(golden_batches):,} rounds), "
                         f"far more than --max-cycles {max_cycles:,}")
    if max_seconds is not None and est / rate > max_seconds:
        raise ValueError(f"the run needs about {est:,} cycles ({len(golden_batches):,} rounds), "
                         f"about {_dur(est / rate)} on {sim} (≈{rate:,.0f} cycles/s), more than "
                         f"the {_dur(max_seconds)} allowed")
    budget = max_cycles if max_cycles is not None else 2 * est + 200_000
    return DsuPlan(requests=requests, profile=profile, cores=cores, n_slots=n_slots, sim=sim,
                   params=params, faults=fault_list, step_faults=step_faults, hang=hang,
                   golden_batches=golden_batches, golden_outcomes=golden_outcomes,
                   faults_not_fired=unfired, estimate_cycles=est, max_cycles=budget,
                   firmware_slots=fw_slots, counts=counts, sessions=sess,
                   run_args=dict(kv_capacity_tokens=kv_capacity_tokens,
                                 long_context_tokens=long_context_tokens,
                                 max_retries=max_retries, watchdog_limit=watchdog_limit,
                                 heartbeat_limit=heartbeat_limit, seed=seed,
                                 backpressure=backpressure, intake_depth=intake_depth,
                                 firmware=firmware, config_overrides=config_overrides,
                                 idle=idle))


def _dur(seconds):
    seconds = int(round(seconds))
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 7200:
        return f"{seconds // 60} min"
    return f"{seconds / 3600:.1f} h"


def run_dsu(requests, profile="throughput-opt", cores=1, faults=None, sim="verilator",
            n_slots=8, max_batch=None, latency_batch=None, kv_capacity_tokens=1 << 20,
            long_context_tokens=4096, max_retries=2, watchdog_limit=200,
            heartbeat_limit=50_000, seed=0, backpressure=True, max_cycles=None,
            intake_depth=4, firmware="scheduler", config_overrides=None, idle=None,
            matrix=None, progress=None, wave=None, wave_window=None, sessions=None,
            park_policy="keep", lead=0) -> DsuRunResult:
    """Run the cluster (``cores`` cores, ``n_slots`` slots) with the scheduler firmware on
    ``requests`` (:class:`~tricut.models.dsu.RequestSpec` list) and compare with
    :func:`tricut.models.dsu.run_schedule`.

    ``faults``: a spec string (:func:`parse_faults`) or a list of :class:`Fault`.
    ``sim``: ``"verilator"`` (cocotb on the generated Verilog) or ``"amaranth"``.
    ``max_batch`` defaults to ``n_slots``, ``latency_batch`` to ``max(1, n_slots // 4)``.
    ``config_overrides`` patches the firmware's configuration block (e.g. ``{"profile": 3}``)
    without changing the golden model's parameters: for testing the checks themselves.
    ``idle`` (request source, completions) and ``backpressure`` (descriptor and outcome
    sinks): the streams' schedules, see :func:`stream_schedules`. ``max_cycles``: the cycle
    budget (default: twice the estimate + 200,000, :func:`plan_dsu`). ``progress``: see
    :func:`execute`. ``wave``/``wave_window``: a waveform file (``.vcd``; ``.fst`` on
    Verilator) of the cycles ``(start, end)`` (default: the whole run). Returns a
    :class:`DsuRunResult`; ``differences`` is empty when every round's batch and every
    outcome equal the golden model's, the run itself had no error and every stream drained.
    ``matrix``: a list of ``(idle, backpressure)`` pairs (e.g.
    :data:`~tricut.sim.harness.streams.IDLE_BACKPRESSURE`) run one after another in one
    simulation; returns ``{pair: DsuRunResult}`` (``wall_s`` is the run's share).
    """
    plan = plan_dsu(requests, profile, cores, faults, sim, n_slots, max_batch, latency_batch,
                    kv_capacity_tokens, long_context_tokens, max_retries, watchdog_limit,
                    heartbeat_limit, seed, backpressure, max_cycles, intake_depth, firmware,
                    config_overrides, idle, sessions=sessions, park_policy=park_policy,
                    lead=lead)
    if wave is not None and not hasattr(wave, "fmt"):
        from .waves import parse_wave_args
        wave = parse_wave_args(wave, wave_window)
    return run_plan(plan, matrix=matrix, progress=progress, wave=wave)


def run_plan(plan: DsuPlan, matrix=None, progress=None, wave=None):
    """Simulate a :class:`DsuPlan` (see :func:`run_dsu`); ``wave``: a
    :class:`~tricut.sim.harness.waves.WaveSpec` (not with ``matrix``)."""
    from ...rtl.dsu.cluster import DsuCluster
    if wave is not None and matrix is not None:
        raise ValueError("wave: one run at a time, not a matrix")
    if wave is not None and plan.sim == "verilator" and not verilator_waves_supported():
        raise ValueError("--wave on --sim verilator: this checkout's run_cocotb cannot record "
                         "waves yet (sim/harness/cocotb_run.py); use --sim amaranth")
    a = plan.run_args
    params = plan.params
    fw = build_dsu_firmware(a["firmware"], max_slots=plan.firmware_slots)
    config = {"magic": CONFIG_MAGIC, "profile": PROFILE_CODE[plan.profile],
              "max_batch": params.max_batch, "latency_batch": params.latency_batch,
              "kv_capacity": a["kv_capacity_tokens"], "long_ctx": a["long_context_tokens"],
              "max_retries": a["max_retries"], "watchdog_limit": a["watchdog_limit"],
              "heartbeat_limit": a["heartbeat_limit"],
              "park_policy": PARK_POLICY_CODE[params.park_policy],
              "sessions": int(plan.sessions is not None)}
    config.update(a["config_overrides"] or {})
    sess = None if plan.sessions is None else {
        "host": [[rnd, kind, list(args)] for rnd, kind, args in plan.sessions["host"]],
        "outcomes": len(plan.sessions["ended"]), "moves": len(plan.sessions["moves"])}
    pairs = [(a["idle"], a["backpressure"])] if matrix is None else list(matrix)
    specs = [make_spec(fw, cores=plan.cores, n_slots=plan.n_slots, params=params,
                       requests=plan.requests, step_faults=plan.step_faults, hang=plan.hang,
                       config=config, seed=a["seed"], backpressure=b, idle=i,
                       max_cycles=plan.max_cycles, load_zeros=n > 0,
                       badcomp=[(f.step, f.slot) for f in plan.faults if f.kind == "badcomp"],
                       mmio=[f.cycle for f in plan.faults if f.kind == "mmio"], sessions=sess)
             for n, (i, b) in enumerate(pairs)]
    cluster = functools.partial(DsuCluster, n_cores=plan.cores, n_slots=plan.n_slots,
                                intake_depth=a["intake_depth"], mem_bytes=MEM_BYTES)
    t0 = time.time()
    if wave is not None:
        states = [_execute_with_wave(specs[0], cluster, plan.sim, progress, wave)]
    else:
        states = execute(specs, cluster, plan.sim, progress) if matrix is not None else \
            [execute(specs[0], cluster, plan.sim, progress)]
    wall = (time.time() - t0) / len(states)
    results = [_run_result(state, plan, fw, wall) for state in states]
    if wave is not None:
        results[0].wave = str(wave.path)
    return results[0] if matrix is None else dict(zip(pairs, results))


def _run_result(state, plan, fw, wall):
    golden_batches, golden_outcomes = plan.golden_batches, plan.golden_outcomes
    batches = [[Descriptor(**d) for d in b] for b in state["batches"]]
    outcomes = {o["request"]: Outcome(**o) for o in state["outcomes"]}
    diffs = list(state["errors"])
    if state["fw_error"]:
        diffs.append(f"firmware error {state['fw_error']:#x}")
    if plan.hang is None and state["exit_code"] != 0:
        diffs.append(f"firmware exit code {state['exit_code']!r}")
    diffs += compare(batches, outcomes, golden_batches, golden_outcomes)
    ended = [Outcome(**o) for o in state.get("ended", [])]
    moves = [Move(**m) for m in state.get("moves", [])]
    golden_ended = plan.sessions["ended"] if plan.sessions else []
    golden_moves = plan.sessions["moves"] if plan.sessions else []
    if plan.sessions:
        diffs += compare_sessions(ended, moves, golden_ended, golden_moves)
    # per-round counts from the golden model (admission happens before selection): active
    # slots, admissions, retirements and a blocked intake head (the fast model's inputs)
    counts = plan.counts
    lat = state["latencies"]
    for entry in lat:
        known = entry["round"] < len(counts)
        entry["active"] = counts[entry["round"]]["active"] if known else None
        for name in ("admitted", "retired", "blocked"):
            entry[name] = counts[entry["round"]][name] if known else None
    not_fired = [(str(f), why) for f, why in plan.faults_not_fired]
    hang_cycle = state.get("hang_cycle")
    if plan.hang is not None and hang_cycle is None:
        not_fired.append((f"hang:cycle={plan.hang}",
                          f"the run ended at cycle {state['cycles']:,}, before it"))
    fired_mmio = state.get("mmio_fired", [])
    for f in plan.faults:
        if f.kind == "mmio" and f.cycle not in fired_mmio:
            not_fired.append((str(f), f"the run ended at cycle {state['cycles']:,}, before it"))
    counters = state["counters"]
    n_bad = len(state.get("badcomp_fired", []))
    if "bad_completions" in counters and counters["bad_completions"] != n_bad:
        diffs.append(f"BAD_COMPLETIONS {counters['bad_completions']}, {n_bad} injected")
    n_mmio = len(fired_mmio) * len(BAD_HOST_ACCESSES)
    if "bad_accesses" in counters and not state["fw_error"] and counters["bad_accesses"] != n_mmio:
        diffs.append(f"BAD_ACCESSES {counters['bad_accesses']}, {n_mmio} injected by the host")
    fired = [str(f) for f in plan.faults if str(f) not in {n for n, _ in not_fired}]
    return DsuRunResult(batches=batches, outcomes=outcomes, latencies=lat,
                        golden_batches=golden_batches, golden_outcomes=golden_outcomes,
                        differences=diffs, cycles=state["cycles"], rounds_rtl=state["rounds_rtl"],
                        degraded_cycle=state["degraded_cycle"], counters=state["counters"],
                        firmware_bytes=len(fw.image), exit_code=state["exit_code"],
                        fw_error=state["fw_error"], wall_s=wall, sim=plan.sim,
                        boot_cycles=state.get("boot_cycles", 0), hang_cycle=hang_cycle,
                        faults_fired=fired, faults_not_fired=not_fired,
                        budget_exhausted=state.get("budget_exhausted", False),
                        max_cycles=plan.max_cycles, estimate_cycles=plan.estimate_cycles,
                        moves=moves, golden_moves=golden_moves, ended=ended,
                        golden_ended=golden_ended)


def compare(batches, outcomes, golden_batches, golden_outcomes):
    """Differences (strings) between an observed schedule and the golden one: every round's
    batch (descriptor by descriptor) and every request's outcome."""
    diffs = []
    for r in range(max(len(batches), len(golden_batches))):
        got = batches[r] if r < len(batches) else None
        want = golden_batches[r] if r < len(golden_batches) else None
        if got != want:
            diffs.append(f"round {r}: got {_fmt(got)}, golden {_fmt(want)}")
    for rid in sorted(set(outcomes) | set(golden_outcomes)):
        if outcomes.get(rid) != golden_outcomes.get(rid):
            diffs.append(f"request {rid}: got {outcomes.get(rid)}, "
                         f"golden {golden_outcomes.get(rid)}")
    return diffs


def compare_sessions(ended, moves, golden_ended, golden_moves):
    """Differences between the observed outcomes (every one, turns included: per round as a
    multiset, since completions come back in any order) and moves (in order) and
    :func:`~tricut.models.dsu.run_sessions`'."""
    diffs = []
    key = lambda o: (o.step, o.request, o.status, o.tokens, o.reason)  # noqa: E731
    got, want = sorted(ended, key=key), sorted(golden_ended, key=key)
    diffs += _first_difference("outcome", " (by round)", got, want)
    diffs += _first_difference("move", "", moves, golden_moves)
    return diffs


def _first_difference(what: str, order: str, got: list, want: list) -> list[str]:
    """The first position where two lists differ, and a count mismatch, as messages."""
    out = []
    for k in range(max(len(got), len(want))):
        g = got[k] if k < len(got) else None
        w = want[k] if k < len(want) else None
        if g != w:
            out.append(f"{what} {k}{order}: got {g}, golden {w}")
            break
    if len(got) != len(want):
        out.append(f"{len(got)} {what}s, golden {len(want)}")
    return out


def _golden_sessions(requests, sessions, params, faults, lead, max_rounds=MAX_ROUNDS):
    """:func:`~tricut.models.dsu.run_sessions` and what the harness needs from it: every
    batch, the last outcome per request, the per-round counts (as :func:`_golden`) and
    ``{"host", "ended", "moves", "intake"}``: the host's commands, every outcome and move in
    order, and every request the intake takes in the model's order (per round a drop
    policy's resubmits, then that round's arrivals by id)."""
    counts, state = [], {"retired": 0, "ended": 0}

    def on_round(model, r):
        n = sum(1 for o in model.outcomes.values() if o.step == r.number)
        counts.append({"active": r.active, "admitted": r.admitted,
                       "retired": state["retired"], "blocked": int(r.blocked)})
        state["retired"] = n
    batches, ended, moves, host = run_sessions(requests, sessions, params, faults, lead,
                                               max_rounds, on_round)
    firsts = [RequestSpec(x.first.id, x.first.prompt_tokens, x.first.max_new_tokens,
                          x.first.arrival_step, x.first.priority, bool(x.turns))
              for x in sessions]
    originals = sorted(list(requests) + firsts, key=lambda r: (r.arrival_step, r.id))
    intake, k = [], 0
    by_round = {}
    for rnd, kind, args in host:
        if kind == "submit":
            by_round.setdefault(rnd, []).append(args[0])
    for rnd in sorted(set(by_round) | {r.arrival_step for r in originals}):
        intake += by_round.get(rnd, [])
        while k < len(originals) and originals[k].arrival_step <= rnd:
            intake.append(originals[k])
            k += 1
    last = {}
    for o in ended:
        last[o.request] = o
    host_cmds = [(rnd, kind, args) for rnd, kind, args in host if kind != "submit"]
    return batches, last, counts, {"host": host_cmds, "ended": ended, "moves": moves,
                                   "intake": intake}


def _fmt(batch):
    if batch is None:
        return "(no round)"
    return "[" + ", ".join(f"s{d.slot}:r{d.request}@{d.seq_len}p{d.priority}"
                           f"{'L' if d.residency else ''}" for d in batch) + "]"


def _golden(requests, params, faults, max_rounds=MAX_ROUNDS):
    """The golden schedule (as :func:`tricut.models.dsu.run_schedule`: every round's batch and
    every outcome) and, per round, ``active`` slots after this round's admissions,
    ``admitted`` requests, ``retired`` requests (their slots freed by the previous round's
    completions: completed, or failed with retries exhausted) and ``blocked`` (1 when an
    arrived intake head did not fit: no free slot or KV budget)."""
    model = DsuModel(params)
    todo = sorted(requests, key=lambda r: (r.arrival_step, r.id))
    k, batches, out, retired = 0, [], [], 0
    while k < len(todo) or not model.idle:
        if model.round >= max_rounds:
            raise RuntimeError(f"schedule did not finish in {max_rounds} rounds")
        while k < len(todo) and todo[k].arrival_step <= model.round:
            model.submit(todo[k])
            k += 1
        rnd = model.step()
        out.append({"active": rnd.active, "admitted": rnd.admitted, "retired": retired,
                    "blocked": int(rnd.blocked)})
        batch = rnd.batch
        batches.append(batch)
        retired = len(model.complete({d.slot: faults[(model.round, d.slot)] for d in batch
                                      if (model.round, d.slot) in faults}))
    return batches, model.outcomes, out


def _round_counts(requests, params, faults):
    """Per round of the golden schedule: the counts of :func:`_golden`."""
    return _golden(requests, params, faults)[2]
