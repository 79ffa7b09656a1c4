"""The DSU slot arbiter's MMIO register map: the one source of truth.

The RTL (:mod:`tricut.rtl.dsu.arbiter`) decodes addresses from this table, the firmware's C
header is generated from it (``python -m tricut.rtl.dsu.regmap --header OUT.h``, run by the
firmware build into the build directory) and so is the register table in ``docs/dsu.md``
(``--markdown``; ``tests/test_dsu_sched.py`` checks the committed table is current).

The firmware's configuration block ``struct dsu_config`` (:data:`CONFIG_STRUCT`: fields, C
types, defaults; :data:`CONFIG_MAGIC`) is declared here too: the header defines the struct,
its magic and its defaults (``DSU_CONFIG_DEFAULTS``), the host loader
(``sim/harness/dsu.py``) patches the fields in this order, and ``docs/dsu.md`` has its table
(``--config-markdown``). The profile codes are the positions in ``models/dsu.PROFILES``.

Access rules (enforced by the arbiter, reported in ``CMD_STATUS``):

* every **write** sets the writer's ``CMD_STATUS`` (``OK`` or the reason it was rejected; a
  rejected write changes nothing); each initiator (hart 0..3, the host) has its own;
* a **read** of an unknown offset or of a slot ``>= N_SLOTS`` returns 0 and sets
  ``CMD_STATUS`` to ``BAD_ADDR`` / ``BAD_SLOT``; other reads have no side effect;
* every rejected access also increments ``BAD_ACCESSES``.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from enum import IntEnum
from pathlib import Path

from tricut.models.dsu import PARK_POLICIES, PROFILES

__all__ = ["MMIO_BASE", "MMIO_SIZE", "SLOT_BASE", "SLOT_STRIDE", "Status", "Profile",
           "PROFILE_CODE", "SlotState", "MoveKind", "HostCmd", "PARK_POLICY_CODE",
           "HOST_ROUND_END", "Result", "Reason", "Field", "Register", "REGISTERS",
           "SLOT_FIELDS", "BY_NAME", "SLOT_FIELD", "MAX_HARTS", "HEARTBEAT_LIMIT_RESET", "ConfigField", "CONFIG_MAGIC",
           "CONFIG_STRUCT", "c_header", "markdown_table", "config_markdown_table", "DOC_TABLES"]

#: where the cores (and the host port) see the arbiter
MMIO_BASE = 0x8000_0000
MMIO_SIZE = 0x1_0000
#: the per-slot record window: slot ``i`` field ``f`` at ``SLOT_BASE + i*SLOT_STRIDE + 4*f``
SLOT_BASE = 0x1000
SLOT_STRIDE = 0x40
#: busy-cycle counters exist for harts 0 .. MAX_HARTS-1 (hart MAX_HARTS is the host port)
MAX_HARTS = 4
#: HEARTBEAT_LIMIT after reset: the heartbeat watchdog is armed from the cores' release, so a
#: firmware that never starts (or stops before it writes its own limit) is caught too. The
#: scheduler firmware writes HEARTBEAT_LIMIT first thing after crt0; measured boot (cores'
#: release to that write, ``fw_boot_cycles``): 4,866 cycles for the MAX_SLOTS=64 build, 18,258
#: for MAX_SLOTS=256 (crt0 clears .bss at 9 cycles a word; the session command queues are in
#: .noinit). 2^16 is 13.5x the first, 3.59x the second.
HEARTBEAT_LIMIT_RESET = 1 << 16


class Status(IntEnum):
    """``CMD_STATUS`` codes."""
    OK = 0            #: accepted
    BAD_ADDR = 1      #: no register at this offset
    BAD_SLOT = 2      #: slot number >= N_SLOTS
    SLOT_BUSY = 3     #: ADMIT into a slot that is not FREE
    BAD_PROFILE = 4   #: PROFILE not one of Profile
    BAD_VALUE = 5     #: value out of the register's range
    BUSY = 6          #: a round is in flight (ADMIT/REJECT/ISSUE/BATCH/config refused)
    INTAKE_EMPTY = 7  #: ADMIT/REJECT with nothing in the intake FIFO
    BAD_BATCH = 8     #: ISSUE with a batch bit on a slot that is not ACTIVE
    READ_ONLY = 9     #: write to a read-only register
    OUTCOME_FULL = 10  #: REJECT while the outcome FIFO is full (retry)
    NOT_PARKED = 11   #: RESUME/FREE/MOVE on a slot that is not PARKED
    FIFO_FULL = 12    #: MOVE (move FIFO) or HCMD_PUSH (host command FIFO) while full (retry)
    FIFO_EMPTY = 13   #: HCMD_POP with an empty host command FIFO


def _profile_member(name: str) -> str:
    return name.upper().replace("-", "_")


#: ``PROFILE`` register codes: the position of the profile in ``models/dsu.PROFILES``
#: (LATENCY_OPT 0, THROUGHPUT_OPT 1, FAIRNESS_OPT 2; ``tests/test_dsu_sched.py`` pins them)
Profile = IntEnum("Profile", [(_profile_member(p), i) for i, p in enumerate(PROFILES)],
                  module=__name__)
#: profile name (``models/dsu.PROFILES``) -> ``PROFILE`` code
PROFILE_CODE = {p: int(Profile[_profile_member(p)]) for p in PROFILES}


class SlotState(IntEnum):
    FREE = 0
    ACTIVE = 1    #: holds a request, not in the round in flight
    RUNNING = 2   #: its descriptor was issued, completion outstanding
    PARKED = 3    #: a session's turn ended (``continues``): waits on a tool, never selected


class MoveKind(IntEnum):
    """Move stream ``kind``: the names of ``models/dsu.Move.kind``."""
    PARK = 0      #: HBM -> G2
    RESTORE = 1   #: G2 -> HBM
    DROP = 2      #: discarded


class HostCmd(IntEnum):
    """Host command FIFO ``kind`` (``HCMD_ARG0`` bit 16)."""
    RESTORE = 0   #: ``DsuModel.restore(request)``
    CONTINUE = 1  #: ``DsuModel.continue_turn(request, new, max_new, cont)``


#: park policy name (``models/dsu.PARK_POLICIES``) -> ``dsu_config.park_policy`` code
PARK_POLICY_CODE = {p: i for i, p in enumerate(PARK_POLICIES)}
#: ``HOST_ROUND`` value that says the host will push no more commands
HOST_ROUND_END = (1 << 24) - 1


class Result(IntEnum):
    """Completion stream ``result``."""
    OK = 0
    ERROR = 1
    TIMEOUT = 2   #: reported by the consumer; the slot watchdog produces the same
    INVALID = 3   #: not a result: counted in BAD_COMPLETIONS and treated as ERROR


class Reason(IntEnum):
    """Outcome stream ``reason``."""
    NONE = 0       #: completed
    TOO_LARGE = 1  #: prompt + max_new > KV capacity (decided by firmware, REJECT)
    ERROR = 2      #: error: retries exhausted
    TIMEOUT = 3    #: timeout: retries exhausted


@dataclass(frozen=True)
class Field:
    name: str
    lsb: int
    width: int
    doc: str

    @property
    def mask(self):
        return ((1 << self.width) - 1) << self.lsb


@dataclass(frozen=True)
class Register:
    name: str
    offset: int
    access: str          #: "RO", "RW", "WO"
    doc: str
    fields: tuple = field(default_factory=tuple)
    count: int = 1       #: > 1: an array of ``count`` registers, 4 bytes apart
    reset: int | None = None   #: value after reset (RW configuration registers)

    def __post_init__(self):
        if self.access not in ("RO", "RW", "WO"):
            raise ValueError(f"register {self.name}: access must be RO, RW or WO, "
                             f"not {self.access!r}")
        if self.offset % 4:
            raise ValueError(f"register {self.name}: offset {self.offset:#x} not word aligned")


REGISTERS: tuple[Register, ...] = (
    Register("ID", 0x000, "RO", "Magic 0x44535531 ('DSU1')."),
    Register("STATUS", 0x004, "RO", "Unit status.", (
        Field("ROUND_BUSY", 0, 1, "a round is in flight (ISSUE accepted, completions outstanding)"),
        Field("DEGRADED", 1, 1, "the heartbeat watchdog expired: host scheduling has taken over "
                                "(sticky until reset; slot records are kept)"),
        Field("INTAKE_VALID", 2, 1, "the intake FIFO has a head (INTAKE_* are valid)"),
        Field("INTAKE_END", 3, 1, "the request source will push nothing more"),
        Field("OUTCOME_FULL", 4, 1, "the outcome FIFO is full"),
        Field("HCMD_VALID", 5, 1, "the host command FIFO has a head (HCMD_HEAD* are valid)"),
    )),
    Register("CMD_STATUS", 0x008, "RO", "Result of the reader's own last write (and of its "
             "last rejected read): a Status code. One per initiator (each hart, the host), so "
             "another initiator's access in between cannot change it."),
    Register("N_SLOTS", 0x00C, "RO", "Number of decode slots (constructor parameter)."),
    Register("ROUND", 0x010, "RO", "Scheduling rounds completed; the round in flight or being "
             "prepared has this number. Descriptors carry it as `step`."),
    Register("HEARTBEAT", 0x014, "WO", "Any write restarts the firmware heartbeat watchdog."),
    Register("CORE_IDLE", 0x018, "WO", "Bit 0 = 1: the writing hart is idle/polling (its "
             "BUSY_CYCLES counter stops), 0: working."),
    Register("PROFILE", 0x020, "RW", "Scheduling profile (Profile: "
             + ", ".join(f"{code} {name}" for name, code in PROFILE_CODE.items())
             + "), published for the host and CDU; other values: BAD_PROFILE.", reset=0),
    Register("MAX_RETRIES", 0x024, "RW", "Failed attempts of one step allowed before the request "
             "fails (0..15, else BAD_VALUE).", reset=2),
    Register("WATCHDOG_LIMIT", 0x028, "RW", "Cycles a RUNNING slot may wait for its completion "
             "before the watchdog completes it as `timeout` (1..2^24-1, else BAD_VALUE).",
             reset=(1 << 24) - 1),
    Register("LONG_CTX", 0x02C, "RW", "Residency threshold: a descriptor's `residency` is 1 when "
             "its seq_len >= LONG_CTX (1..2^24-1).", reset=4096),
    Register("HEARTBEAT_LIMIT", 0x030, "RW", "Cycles without a HEARTBEAT write after which "
             "STATUS.DEGRADED is set (1..2^24-1); a write also restarts the count. The watchdog "
             "counts from the cores' release with the reset value, so a firmware that never "
             "starts, or stops before writing its own limit, degrades the unit too.",
             reset=HEARTBEAT_LIMIT_RESET),
    Register("INTAKE_REQUEST", 0x040, "RO", "Intake FIFO head: request id."),
    Register("INTAKE_PROMPT", 0x044, "RO", "Intake FIFO head: prompt tokens."),
    Register("INTAKE_MAX_NEW", 0x048, "RO", "Intake FIFO head: max_new_tokens."),
    Register("INTAKE_PRIORITY", 0x04C, "RO", "Intake FIFO head: priority 0..3."),
    Register("INTAKE_ARRIVAL", 0x050, "RO", "Intake FIFO head: arrival round (the request is "
             "visible to the scheduler from that round on)."),
    Register("ADMIT_SEQ", 0x060, "RW", "Argument of ADMIT: the request's arrival sequence "
             "number (admission order, the profiles' tie-breaker).", reset=0),
    Register("ADMIT", 0x064, "WO", "Write a slot number: the intake head moves into that slot "
             "(ACTIVE, seq_len = checkpoint = prompt, tokens_left = max_new, wait = retries = "
             "generated = 0) and is popped. BAD_SLOT, SLOT_BUSY, INTAKE_EMPTY, BUSY."),
    Register("REJECT", 0x068, "WO", "Write a Reason (1..3): the intake head is popped and "
             "reported failed on the outcome stream with 0 tokens. BAD_VALUE, INTAKE_EMPTY, "
             "OUTCOME_FULL, BUSY."),
    Register("ISSUE", 0x06C, "WO", "Any value: start the round with the batch in BATCH[]: "
             "descriptors for the chosen slots in slot order, every other ACTIVE slot gets "
             "wait += 1. BAD_BATCH, BUSY."),
    Register("BATCH", 0x080, "RW", "Batch mask, slot i = bit i%32 of BATCH[i/32]. "
             "Bits >= N_SLOTS: BAD_VALUE.", count=8),
    Register("DESCRIPTORS", 0x0A0, "RO", "Counter: descriptors issued."),
    Register("ROLLBACKS", 0x0A4, "RO", "Counter: steps rolled back (error or timeout)."),
    Register("TIMEOUTS", 0x0A8, "RO", "Counter: steps completed as timeout (watchdog or "
             "consumer)."),
    Register("BAD_COMPLETIONS", 0x0AC, "RO", "Counter: completions for a slot not RUNNING or "
             "with result INVALID."),
    Register("BAD_ACCESSES", 0x0B0, "RO", "Counter: rejected MMIO accesses."),
    Register("OUTCOMES", 0x0B4, "RO", "Counter: outcomes emitted."),
    Register("BUSY_CYCLES", 0x0C0, "RO", "Counter per hart: cycles not marked idle "
             "(CORE_IDLE) since reset.", count=MAX_HARTS),
    Register("ENDED", 0x100, "RO", "Slots (bit i%32 of word i/32) whose request ended "
             "(completed or failed; the slot is FREE again, or PARKED: a completed turn of a "
             "request admitted or resumed with `continues`) in the last round; cleared by ISSUE.",
             count=8),
    Register("ROLLED_BACK", 0x120, "RO", "Slots whose step in the last round came back error or "
             "timeout and was rolled back (ended ones included); cleared by ISSUE.", count=8),
    # -- parked slots (sessions): docs/dsu.md "Parked slots" -------------------------------
    Register("RESUME_NEW", 0x140, "RW", "Argument of RESUME: input tokens prefilled onto the "
             "KV (0..2^24-1).", reset=0),
    Register("RESUME_MAX_NEW", 0x144, "RW", "Argument of RESUME: tokens to decode "
             "(1..65535, else BAD_VALUE).", reset=1),
    Register("RESUME_CONT", 0x148, "RW", "Argument of RESUME: 1 = more turns follow (the slot "
             "parks again when its tokens run out), 0 = the last turn (0..1).", reset=0),
    Register("RESUME", 0x14C, "WO", "Write a PARKED slot number: the next turn starts (ACTIVE, "
             "seq_len = checkpoint = seq_len + RESUME_NEW, tokens_left = RESUME_MAX_NEW, "
             "continues = RESUME_CONT, arrival_seq = ADMIT_SEQ, wait = retries = generated = "
             "0). BAD_SLOT, NOT_PARKED, BAD_VALUE (seq_len would exceed 2^24-1), BUSY."),
    Register("FREE", 0x150, "WO", "Write `reason << 8 | slot`: a PARKED slot is freed; "
             "reason 0: nothing reported (its last outcome stands), a Reason 1..3: the request "
             "is reported failed with 0 tokens (a continue that can never fit: TOO_LARGE). "
             "BAD_SLOT, NOT_PARKED, BAD_VALUE, OUTCOME_FULL, BUSY."),
    Register("MOVE", 0x154, "WO", "Write `last << 12 | kind << 8 | slot` (kind: MoveKind "
             "0 park, 1 restore, 2 drop): a move {step, request, kind, tokens = seq_len, slot} "
             "of a PARKED slot goes out on the move stream; step = ROUND, or ROUND - 1 with "
             "`last` = 1 (a turn that ended in the round just completed). BAD_SLOT, "
             "NOT_PARKED, BAD_VALUE, FIFO_FULL, BUSY."),
    Register("MOVES", 0x158, "RO", "Counter: moves emitted."),
    Register("HCMD_ARG0", 0x160, "RW", "Host command being built: bits 15:0 request, bit 16 "
             "kind (HostCmd: 0 restore, 1 continue), bit 17 continues (bits above: BAD_VALUE).",
             reset=0),
    Register("HCMD_ARG1", 0x164, "RW", "Host command being built: new input tokens "
             "(0..2^24-1).", reset=0),
    Register("HCMD_ARG2", 0x168, "RW", "Host command being built: max_new_tokens "
             "(0..65535).", reset=0),
    Register("HCMD_PUSH", 0x16C, "WO", "Any value: push HCMD_ARG0..2 into the host command "
             "FIFO (2 * N_SLOTS + 2 entries). FIFO_FULL."),
    Register("HCMD_HEAD0", 0x170, "RO", "Host command FIFO head, as HCMD_ARG0 (0 when empty)."),
    Register("HCMD_HEAD1", 0x174, "RO", "Host command FIFO head, as HCMD_ARG1."),
    Register("HCMD_HEAD2", 0x178, "RO", "Host command FIFO head, as HCMD_ARG2."),
    Register("HCMD_POP", 0x17C, "WO", "Any value: pop the host command FIFO head. FIFO_EMPTY."),
    Register("HOST_ROUND", 0x180, "RW", "Written by the host: every command for the rounds "
             "before this one has been pushed (firmware with `sessions` set waits for "
             "HOST_ROUND > r before round r); 2^24-1: the host pushes nothing more.", reset=0),
)

#: the per-slot window (read only): field name, doc; offset = SLOT_BASE + slot*SLOT_STRIDE + 4*i
SLOT_FIELDS: tuple[tuple[str, str], ...] = (
    ("STATE", "SlotState"),
    ("REQUEST", "request id"),
    ("SEQ_LEN", "KV tokens held (before the next step)"),
    ("TOKENS_LEFT", "decode steps still to run"),
    ("PRIORITY", "0..3"),
    ("RESIDENCY", "residency hint of the last descriptor (1 = the CDU may keep its blocks in L2, 0 = streamed)"),
    ("WAIT", "rounds since the slot last ran"),
    ("ARRIVAL_SEQ", "admission order"),
    ("CHECKPOINT", "last stable seq_len (rollback target)"),
    ("RETRIES", "failed attempts of the current step"),
    ("WATCHDOG", "cycles since the descriptor was accepted (RUNNING)"),
    ("GENERATED", "tokens kept"),
    ("CONTINUES", "1: a session turn with more to come (parks at its end)"),
)
SLOT_FIELD = {name: i for i, (name, _doc) in enumerate(SLOT_FIELDS)}
assert len(SLOT_FIELDS) * 4 <= SLOT_STRIDE

BY_NAME = {r.name: r for r in REGISTERS}


def _check_map():
    spans = sorted((r.offset, r.offset + 4 * r.count, r.name) for r in REGISTERS)
    for (a0, a1, an), (b0, _b1, bn) in zip(spans, spans[1:]):
        if b0 < a1:
            raise ValueError(f"registers {an} and {bn} overlap")
    if spans[-1][1] > SLOT_BASE:
        raise ValueError("registers overlap the slot window")


_check_map()


@dataclass(frozen=True)
class ConfigField:
    """One field of the firmware's ``struct dsu_config``: one 32-bit word."""
    name: str
    ctype: str           #: "uint32_t" or "int32_t"
    default: int         #: value in the image before the host patches it
    doc: str

    def __post_init__(self):
        if self.ctype not in ("uint32_t", "int32_t"):
            raise ValueError(f"config field {self.name}: the host patches 32-bit words; "
                             f"C type must be uint32_t or int32_t, not {self.ctype!r}")


#: ``dsu_config.magic`` ('DSUC'): the firmware stops (``E_CONFIG``) on anything else
CONFIG_MAGIC = 0x44535543
#: the firmware's configuration block, in memory order
CONFIG_STRUCT: tuple[ConfigField, ...] = (
    ConfigField("magic", "uint32_t", CONFIG_MAGIC, "must be CONFIG_MAGIC ('DSUC'); anything "
                "else stops the firmware"),
    ConfigField("profile", "uint32_t", Profile.THROUGHPUT_OPT, "scheduling profile (a "
                "Profile code), written to PROFILE"),
    ConfigField("max_batch", "uint32_t", 64, "batch cap of throughput-opt and fairness-opt"),
    ConfigField("latency_batch", "uint32_t", 16, "batch cap of latency-opt"),
    ConfigField("kv_capacity", "uint32_t", 1 << 20, "KV budget in tokens: a request reserves "
                "prompt + max_new; one that could never fit is rejected (too large)"),
    ConfigField("long_ctx", "uint32_t", 4096, "residency threshold, written to LONG_CTX"),
    ConfigField("max_retries", "uint32_t", 2, "written to MAX_RETRIES"),
    ConfigField("watchdog_limit", "uint32_t", 100000, "written to WATCHDOG_LIMIT"),
    ConfigField("heartbeat_limit", "uint32_t", 200000, "written to HEARTBEAT_LIMIT (first)"),
    ConfigField("park_policy", "uint32_t", 0, "what a turn end with more to come does: "
                + ", ".join(f"{i} {p}" for i, p in enumerate(PARK_POLICIES))),
    ConfigField("sessions", "uint32_t", 0, "1: serve the host command FIFO each round (wait "
                "for HOST_ROUND > r before round r); 0: no sessions, HOST_ROUND not read"),
)
assert CONFIG_STRUCT[0].name == "magic"


def _c_config_default(f: ConfigField) -> str:
    if f.name == "magic":
        return "DSU_CONFIG_MAGIC"
    if isinstance(f.default, Profile):
        return f"DSU_PROFILE_{f.default.name}"
    return f"{int(f.default)}" + ("u" if f.ctype == "uint32_t" else "")


def c_header() -> str:
    out = ["/* Generated by `python -m tricut.rtl.dsu.regmap --header` from rtl/dsu/regmap.py.",
           " * Do not edit. */", "#ifndef DSU_REGS_H", "#define DSU_REGS_H", "#include <stdint.h>",
           "", f"#define DSU_MMIO_BASE 0x{MMIO_BASE:08x}u",
           "#define DSU_REG(off) (*(volatile uint32_t *)(DSU_MMIO_BASE + (off)))", ""]
    for r in REGISTERS:
        out.append(f"/* {r.name} ({r.access}): {r.doc} */")
        out.append(f"#define DSU_{r.name}_OFF 0x{r.offset:03x}u")
        if r.count > 1:
            out.append(f"#define DSU_{r.name}_COUNT {r.count}u")
            out.append(f"#define DSU_{r.name}(i) DSU_REG(0x{r.offset:03x}u + 4u * (i))")
        else:
            out.append(f"#define DSU_{r.name} DSU_REG(0x{r.offset:03x}u)")
        if r.reset is not None:
            out.append(f"#define DSU_{r.name}_RESET {r.reset}u")
        for f in r.fields:
            out.append(f"#define DSU_{r.name}_{f.name} 0x{f.mask:08x}u /* {f.doc} */")
    out += ["", f"#define DSU_SLOT_BASE 0x{SLOT_BASE:04x}u",
            f"#define DSU_SLOT_STRIDE 0x{SLOT_STRIDE:02x}u",
            "#define DSU_SLOT(s, f) DSU_REG(DSU_SLOT_BASE + (s) * DSU_SLOT_STRIDE + 4u * (f))"]
    for i, (name, doc) in enumerate(SLOT_FIELDS):
        out.append(f"#define DSU_SLOT_{name} {i}u /* {doc} */")
    for enum in (Status, Profile, SlotState, Result, Reason, MoveKind, HostCmd):
        out.append("")
        prefix = {"Status": "DSU_ST", "Profile": "DSU_PROFILE", "SlotState": "DSU_SLOT_ST",
                  "Result": "DSU_RESULT", "Reason": "DSU_REASON", "MoveKind": "DSU_MOVE",
                  "HostCmd": "DSU_HCMD"}[enum.__name__]
        for v in enum:
            out.append(f"#define {prefix}_{v.name} {int(v)}u")
    out.append("")
    for i, p in enumerate(PARK_POLICIES):
        out.append(f"#define DSU_PARK_{p.upper().replace('-', '_')} {i}u")
    out.append(f"#define DSU_HOST_ROUND_END 0x{HOST_ROUND_END:06x}u")
    out += ["", "/* The firmware's configuration block, one 32-bit word per field in this order; "
            "the host", " * patches it in the image before loading (sim/harness/dsu.py). "
            "The firmware defines", " * `volatile struct dsu_config dsu_config = "
            "DSU_CONFIG_DEFAULTS;`. */",
            f"#define DSU_CONFIG_MAGIC 0x{CONFIG_MAGIC:08x}u", "struct dsu_config {"]
    out += [f"    {f.ctype} {f.name}; /* {f.doc} */" for f in CONFIG_STRUCT]
    out += ["};", "#define DSU_CONFIG_DEFAULTS { \\"]
    out += [f"    .{f.name} = {_c_config_default(f)}, \\" for f in CONFIG_STRUCT]
    out += ["}", "", "#endif", ""]
    return "\n".join(out)


def markdown_table() -> str:
    rows = ["| offset | register | access | description |", "|---|---|---|---|"]
    for r in REGISTERS:
        off = f"0x{r.offset:03x}" if r.count == 1 else \
            f"0x{r.offset:03x}–0x{r.offset + 4 * r.count - 1:03x}"
        name = r.name if r.count == 1 else f"{r.name}[{r.count}]"
        doc = r.doc.replace("|", "\\|")
        if r.fields:
            doc += " " + "; ".join(f"bit {f.lsb} `{f.name}`: {f.doc}" for f in r.fields)
        if r.reset is not None:
            doc += f" Reset: {r.reset:,}."
        rows.append(f"| {off} | `{name}` | {r.access} | {doc} |")
    end = SLOT_BASE + 256 * SLOT_STRIDE - 1
    rows.append(f"| 0x{SLOT_BASE:04x}–0x{end:04x} | `SLOT[s].*` | RO | per-slot record, "
                f"`0x{SLOT_BASE:x} + s*0x{SLOT_STRIDE:x} + 4*field` (s < N_SLOTS, else BAD_SLOT); "
                "fields below |")
    rows += ["", "| field | index | meaning |", "|---|---|---|"]
    for i, (name, doc) in enumerate(SLOT_FIELDS):
        rows.append(f"| `{name}` | {i} | {doc} |")
    rows += ["", "| CMD_STATUS | code | meaning |", "|---|---|---|"]
    for s in Status:
        rows.append(f"| `{s.name}` | {int(s)} | {_STATUS_DOC[s]} |")
    return "\n".join(rows) + "\n"


def config_markdown_table() -> str:
    rows = ["| word | `dsu_config` field | C type | default | meaning |", "|---|---|---|---|---|"]
    for i, f in enumerate(CONFIG_STRUCT):
        default = f"{int(f.default)} ({f.default.name})" if isinstance(f.default, Profile) \
            else f"0x{f.default:08x}" if f.name == "magic" else f"{int(f.default)}"
        doc = f.doc.replace("|", "\\|")
        rows.append(f"| {i} | `{f.name}` | `{f.ctype}` | {default} | {doc} |")
    return "\n".join(rows) + "\n"


#: generated tables of ``docs/dsu.md``: (begin marker, end marker, generator)
DOC_TABLES = (("<!-- regmap:begin -->\n", "<!-- regmap:end -->", markdown_table),
              ("<!-- dsu-config:begin -->\n", "<!-- dsu-config:end -->", config_markdown_table))


_STATUS_DOC = {
    Status.OK: "accepted",
    Status.BAD_ADDR: "no register at this offset",
    Status.BAD_SLOT: "slot number >= N_SLOTS",
    Status.SLOT_BUSY: "ADMIT into a slot that is not FREE",
    Status.BAD_PROFILE: f"PROFILE value not 0..{len(Profile) - 1}",
    Status.BAD_VALUE: "value out of the register's range",
    Status.BUSY: "a round is in flight",
    Status.INTAKE_EMPTY: "ADMIT/REJECT with an empty intake FIFO",
    Status.BAD_BATCH: "ISSUE with a batch bit on a slot that is not ACTIVE",
    Status.READ_ONLY: "write to a read-only register",
    Status.OUTCOME_FULL: "REJECT or FREE (with a reason) while the outcome FIFO is full",
    Status.NOT_PARKED: "RESUME, FREE or MOVE on a slot that is not PARKED",
    Status.FIFO_FULL: "MOVE or HCMD_PUSH while its FIFO is full",
    Status.FIFO_EMPTY: "HCMD_POP with an empty host command FIFO",
}


def main(argv=None):
    p = argparse.ArgumentParser(description="Generate the DSU register map C header / docs tables")
    p.add_argument("--header", help="write the C header here")
    p.add_argument("--markdown", help="write the Markdown register table here ('-' = stdout)")
    p.add_argument("--config-markdown", help="write the Markdown dsu_config table here "
                   "('-' = stdout)")
    p.add_argument("--update-doc", metavar="MD", help="replace the tables between "
                   "'<!-- regmap:begin -->' and '<!-- regmap:end -->' and between "
                   "'<!-- dsu-config:begin -->' and '<!-- dsu-config:end -->' in this file")
    a = p.parse_args(argv)
    if not (a.header or a.markdown or a.config_markdown or a.update_doc):
        p.error("give --header, --markdown, --config-markdown and/or --update-doc")
    if a.update_doc:
        text = Path(a.update_doc).read_text()
        for begin, end, table in DOC_TABLES:
            if begin not in text or end not in text:
                p.error(f"{a.update_doc} has no {begin.strip()} ... {end} markers")
            i, j = text.index(begin) + len(begin), text.index(end)
            text = text[:i] + table() + text[j:]
        Path(a.update_doc).write_text(text)
    if a.header:
        Path(a.header).parent.mkdir(parents=True, exist_ok=True)
        Path(a.header).write_text(c_header())
    for dest, table in ((a.markdown, markdown_table), (a.config_markdown, config_markdown_table)):
        if dest == "-":
            sys.stdout.write(table())
        elif dest:
            Path(dest).write_text(table())
    return 0


if __name__ == "__main__":
    sys.exit(main())
