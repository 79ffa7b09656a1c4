"""Interfaces and constants of the DSU's RV32IM core, shared by RTL, models and tests.

Everything a testbench or firmware needs to know about the core's ports lives here: the
memory bus signature, the retire-trace and trap-report signatures, the opcode map, the
trap cause codes and the CSR addresses.
"""

from enum import IntEnum

from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

__all__ = [
    "BusSignature", "TraceSignature", "TrapSignature",
    "Opcode", "Cause", "CSR", "CSR_READ_ONLY", "MSTATUS_MIE", "MSTATUS_MPIE", "MSTATUS_MPP",
    "MISA_RV32IM",
]


class BusSignature(wiring.Signature):
    """Simple memory bus, seen from the initiator (the core drives ``Out`` members).

    Members
    -------
    addr : Out(32)
        Byte address, always word aligned (bits 1:0 are zero).
    wdata : Out(32)
        Write data, already placed in its byte lanes (byte ``i`` of the word in bits
        ``8*i+7 : 8*i``).
    mask : Out(4)
        Byte lanes taking part: the lanes written on a store, the lanes the core uses on a
        load (the target may return the whole word regardless).
    we : Out(1)
        1 for a write, 0 for a read.
    valid : Out(1)
        A request is presented. Once asserted, ``valid``, ``addr``, ``wdata``, ``mask`` and
        ``we`` stay constant until the cycle on which ``ready`` is 1 (the transfer cycle).
        ``valid`` never waits for ``ready``.
    rdata : In(32)
        Read data, sampled on the transfer cycle of a read.
    ready : In(1)
        The target completes the request on this cycle. It may stay low for any number of
        cycles (wait states).
    err : In(1)
        Sampled on the transfer cycle only: the access failed (no such address, read-only
        target, ...). The core takes an access-fault trap; a failed write must not have
        changed the target.
    """

    def __init__(self):
        super().__init__({
            "addr": Out(32), "wdata": Out(32), "mask": Out(4), "we": Out(1), "valid": Out(1),
            "rdata": In(32), "ready": In(1), "err": In(1),
        })


class TraceSignature(wiring.Signature):
    """Retire trace: one cycle of ``valid`` per retired instruction.

    The register write (``rd``, ``rd_data``) takes effect at the end of the cycle on which
    ``valid`` is 1. Instructions that trap do not retire (they appear on the trap port).

    Members
    -------
    valid : Out(1)
    pc : Out(32)
        Address of the retired instruction.
    insn : Out(32)
        The instruction word.
    rd : Out(5)
        Destination register written, 0 when the instruction writes none (or writes x0).
    rd_data : Out(32)
        Value written to ``rd`` (0 when ``rd`` is 0).
    store_addr : Out(32)
        Word address of the store (bits 1:0 zero); meaningful when ``store_mask`` != 0.
    store_data : Out(32)
        Store data in its byte lanes, as it went out on the bus.
    store_mask : Out(4)
        Bytes written by this instruction; 0 for every non-store.
    """

    def __init__(self):
        super().__init__({
            "valid": Out(1), "pc": Out(32), "insn": Out(32), "rd": Out(5), "rd_data": Out(32),
            "store_addr": Out(32), "store_data": Out(32), "store_mask": Out(4),
        })


class TrapSignature(wiring.Signature):
    """Trap report: one cycle of ``valid`` per trap taken (the same cycle ``mepc``,
    ``mcause`` and ``mtval`` are written and the pc moves to ``mtvec``).

    Members
    -------
    valid : Out(1)
    cause : Out(5)
        The exception code (:class:`Cause`), as written to ``mcause``.
    pc : Out(32)
        Address of the faulting instruction (written to ``mepc``).
    tval : Out(32)
        Value written to ``mtval`` (see :class:`Cause`).
    """

    def __init__(self):
        super().__init__({"valid": Out(1), "cause": Out(5), "pc": Out(32), "tval": Out(32)})


class Opcode(IntEnum):
    """``insn[6:0]`` of the 32-bit RV32IM encodings the core implements."""
    LOAD = 0b0000011
    MISC_MEM = 0b0001111
    OP_IMM = 0b0010011
    AUIPC = 0b0010111
    STORE = 0b0100011
    OP = 0b0110011
    LUI = 0b0110111
    BRANCH = 0b1100011
    JALR = 0b1100111
    JAL = 0b1101111
    SYSTEM = 0b1110011


class Cause(IntEnum):
    """Exception codes (``mcause``, interrupt bit 0) and what goes to ``mtval``."""
    INSN_MISALIGNED = 0   #: jump/branch target not word aligned; mtval = target
    INSN_ACCESS_FAULT = 1  #: fetch answered with ``err``; mtval = pc
    ILLEGAL_INSN = 2      #: unknown encoding, unknown CSR, write to read-only CSR; mtval = insn
    BREAKPOINT = 3        #: ebreak; mtval = pc
    LOAD_MISALIGNED = 4   #: mtval = effective address
    LOAD_ACCESS_FAULT = 5  #: load answered with ``err``; mtval = effective address
    STORE_MISALIGNED = 6  #: mtval = effective address
    STORE_ACCESS_FAULT = 7  #: store answered with ``err``; mtval = effective address
    ECALL_M = 11          #: ecall from machine mode; mtval = 0


class CSR(IntEnum):
    """CSR addresses the core implements. Any other address is an illegal instruction."""
    MSTATUS = 0x300
    MISA = 0x301
    MTVEC = 0x305
    MSCRATCH = 0x340
    MEPC = 0x341
    MCAUSE = 0x342
    MTVAL = 0x343
    MCYCLE = 0xB00
    MINSTRET = 0xB02
    MCYCLEH = 0xB80
    MINSTRETH = 0xB82
    CYCLE = 0xC00
    INSTRET = 0xC02
    CYCLEH = 0xC80
    INSTRETH = 0xC82
    MVENDORID = 0xF11
    MARCHID = 0xF12
    MIMPID = 0xF13
    MHARTID = 0xF14


#: CSRs whose address says read-only (bits 11:10 == 0b11): writing them is illegal.
CSR_READ_ONLY = frozenset(c for c in CSR if (c >> 10) == 0b11)

MSTATUS_MIE = 1 << 3
MSTATUS_MPIE = 1 << 7
MSTATUS_MPP = 0b11 << 11  # hardwired to M mode: the core has no other privilege level

#: misa: MXL=1 (32-bit), extensions I and M. Writes are ignored (WARL).
MISA_RV32IM = (1 << 30) | (1 << (ord("I") - ord("A"))) | (1 << (ord("M") - ord("A")))


# -- slot arbiter streams and the shared MMIO bus ------------------------------------------
from amaranth.lib import data as _data  # noqa: E402

#: intake FIFO entry: one request's metadata, pushed by the request source in arrival order
INTAKE_LAYOUT = _data.StructLayout({
    "request": 16, "prompt": 24, "max_new": 16, "priority": 2, "arrival": 24, "continues": 1})
#: step descriptor for the CDU/TE: one per chosen slot per round, in slot order
DESCRIPTOR_LAYOUT = _data.StructLayout({
    "step": 24, "slot": 8, "request": 16, "seq_len": 24, "priority": 2, "residency": 1})
#: completion of one descriptor (result: regmap.Result)
COMPLETION_LAYOUT = _data.StructLayout({"slot": 8, "result": 2})
#: a request that ended: status 0 completed / 1 failed, reason: regmap.Reason
OUTCOME_LAYOUT = _data.StructLayout({
    "request": 16, "status": 1, "tokens": 16, "reason": 2, "step": 24})
#: a KV movement the firmware decided (MOVE command; kind: regmap.MoveKind): the slot's
#: request and seq_len (``tokens``) when it was decided, the round it belongs to (``step``)
MOVE_LAYOUT = _data.StructLayout({
    "step": 24, "request": 16, "kind": 2, "tokens": 24, "slot": 8})
#: host command FIFO entry (HCMD_*; kind: regmap.HostCmd): a restore or the next turn of a
#: parked session (``new`` input tokens prefilled, ``max_new`` to decode, ``cont`` more turns)
HCMD_LAYOUT = _data.StructLayout({
    "request": 16, "kind": 1, "cont": 1, "new": 24, "max_new": 16})


class MmioSignature(wiring.Signature):
    """:class:`BusSignature` plus ``hart``: which initiator (hart id; the host port is
    ``MAX_HARTS``) the granted request comes from. Seen from the initiator side."""

    def __init__(self):
        super().__init__({
            "addr": Out(32), "wdata": Out(32), "mask": Out(4), "we": Out(1), "valid": Out(1),
            "hart": Out(3), "rdata": In(32), "ready": In(1), "err": In(1),
        })


__all__ += ["INTAKE_LAYOUT", "DESCRIPTOR_LAYOUT", "COMPLETION_LAYOUT", "OUTCOME_LAYOUT",
            "MOVE_LAYOUT", "HCMD_LAYOUT", "MmioSignature"]
