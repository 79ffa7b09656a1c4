"""The DSU cluster: 1..4 RV32IM cores, each with its own local memory, sharing the slot
arbiter's MMIO registers through a round-robin interconnect; a host port loads the firmware
and reads/writes the MMIO registers like a core.

Address map seen by core ``h`` (its ``mhartid`` is ``h``)::

    0x0000_0000 .. mem_bytes-1      local memory (firmware code, data, stack), zero wait states
    0x8000_0000 .. 0x8000_ffff      slot arbiter MMIO (shared; 1 wait state + arbitration)
    anything else                   bus error -> access-fault trap

Host port (``host``, the cluster is its target)::

    0x4000_0000 + (h << 20) + a     core h's local memory (while ``run`` = 0: load firmware;
                                    reads any time)
    0x8000_0000 .. 0x8000_ffff      slot arbiter MMIO (hart tag 4)

``run`` = 0 holds every core in reset (the arbiter keeps running); ``stall[h]`` = 1 blocks
core h's instruction fetches, freezing it after its current instruction (the testbenches use
it to hang the firmware).
"""

from amaranth import Module, Signal
from amaranth.hdl import ResetInserter
from amaranth.lib import stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from .arbiter import SlotArbiter
from .core import Core
from .layouts import (COMPLETION_LAYOUT, DESCRIPTOR_LAYOUT, INTAKE_LAYOUT, MOVE_LAYOUT,
                      OUTCOME_LAYOUT, BusSignature)
from .mmio import MmioInterconnect
from .regmap import MAX_HARTS, MMIO_BASE

__all__ = ["DsuCluster", "HOST_LOCAL_BASE"]

HOST_LOCAL_BASE = 0x4000_0000


class DsuCluster(wiring.Component):
    """Parameters
    ----------
    n_cores : int
        1..4 cores; hart ``h`` has ``mhartid`` = h.
    n_slots, intake_depth : int
        Passed to :class:`SlotArbiter`.
    mem_bytes : int
        Local memory per core (power of two, 4 KiB .. 1 MiB).
    firmware : sequence of int, optional
        Initial words of every core's local memory (the firmware image, in place at time 0,
        for simulation tops that do not load it through ``host``); at most ``mem_bytes/4``.

    Members
    -------
    host : In(BusSignature)
        Host port (zero wait states to local memory, arbitration + 1 to MMIO).
    run : In(1); stall : In(n_cores)
    intake, intake_end, descriptors, completions, outcomes, moves, degraded, round, round_busy,
    issued, issued_count
        The slot arbiter's ports.
    trap : Out(n_cores)
        Core h took a trap this cycle (the firmware installs no handler: a trap is a bug).
    """

    def __init__(self, *, n_cores=1, n_slots=64, intake_depth=4, mem_bytes=0x8000, firmware=()):
        if isinstance(n_cores, bool) or not isinstance(n_cores, int) \
                or not 1 <= n_cores <= MAX_HARTS:
            raise ValueError(f"n_cores must be an integer in 1..{MAX_HARTS}, not {n_cores!r}")
        if not isinstance(mem_bytes, int) or mem_bytes & (mem_bytes - 1) or \
                not 0x1000 <= mem_bytes <= 0x10_0000:
            raise ValueError(f"mem_bytes must be a power of two in 4 KiB..1 MiB, not {mem_bytes!r}")
        self.firmware = [int(w) & 0xFFFF_FFFF for w in firmware]
        if len(self.firmware) > mem_bytes // 4:
            raise ValueError(f"firmware has {len(self.firmware)} words, the local memory "
                             f"{mem_bytes // 4}")
        self.n_cores = n_cores
        self.mem_bytes = mem_bytes
        self.arbiter = SlotArbiter(n_slots=n_slots, intake_depth=intake_depth, n_harts=n_cores)
        self.n_slots = n_slots
        super().__init__({
            "host": In(BusSignature()),
            "run": In(1),
            "stall": In(n_cores),
            "intake": In(stream.Signature(INTAKE_LAYOUT)),
            "intake_end": In(1),
            "descriptors": Out(stream.Signature(DESCRIPTOR_LAYOUT)),
            "completions": In(stream.Signature(COMPLETION_LAYOUT)),
            "outcomes": Out(stream.Signature(OUTCOME_LAYOUT)),
            "moves": Out(stream.Signature(MOVE_LAYOUT)),
            "degraded": Out(1),
            "round_busy": Out(1),
            "round": Out(24),
            "issued": Out(1),
            "issued_count": Out(range(n_slots + 1)),
            "trap": Out(n_cores),
        })

    def elaborate(self, platform):
        m = Module()
        arb = m.submodules.arbiter = self.arbiter
        ic = m.submodules.interconnect = MmioInterconnect(list(range(self.n_cores)) + [MAX_HARTS])
        wiring.connect(m, ic.target, arb.bus)
        for name in ("intake", "descriptors", "completions", "outcomes", "moves"):
            wiring.connect(m, wiring.flipped(getattr(self, name)), getattr(arb, name))
        m.d.comb += [arb.intake_end.eq(self.intake_end), arb.count_en.eq(self.run),
                     self.degraded.eq(arb.degraded), self.round_busy.eq(arb.round_busy),
                     self.round.eq(arb.round), self.issued.eq(arb.issued),
                     self.issued_count.eq(arb.issued_count)]

        words = self.mem_bytes // 4
        aw = words.bit_length() - 1
        host = self.host
        host_mmio = host.addr[16:] == (MMIO_BASE >> 16)
        host_core = host.addr[20:23]
        host_is_local = (host.addr[28:] == HOST_LOCAL_BASE >> 28) & (host.addr[aw + 2:20] == 0) \
            & (host.addr[23:28] == 0)
        hport = ic.initiators[self.n_cores]
        m.d.comb += [hport.addr.eq(host.addr), hport.wdata.eq(host.wdata),
                     hport.mask.eq(host.mask), hport.we.eq(host.we),
                     hport.valid.eq(host.valid & host_mmio)]
        host_mem_rdata = Signal(32)
        host_local_ok = Signal()
        with m.If(host.valid & host_mmio):
            m.d.comb += [host.ready.eq(hport.ready), host.rdata.eq(hport.rdata),
                         host.err.eq(hport.err)]
        with m.Elif(host.valid & host_is_local & (host_core < self.n_cores)
                    & (~host.we | ~self.run)):
            m.d.comb += [host.ready.eq(1), host.rdata.eq(host_mem_rdata), host_local_ok.eq(1)]
        with m.Elif(host.valid):
            m.d.comb += [host.ready.eq(1), host.err.eq(1)]

        self.cores = []
        for h in range(self.n_cores):
            core = ResetInserter({"sync": ~self.run})(Core(hart_id=h))
            m.submodules[f"core{h}"] = core
            self.cores.append(core)
            mem = Memory(shape=32, depth=words, init=self.firmware)
            m.submodules[f"mem{h}"] = mem
            irp = mem.read_port(domain="comb")
            drp = mem.read_port(domain="comb")
            hrp = mem.read_port(domain="comb")
            wp = mem.write_port(granularity=8)
            m.d.comb += hrp.addr.eq(host.addr[2:aw + 2])
            with m.If(host_core == h):
                m.d.comb += host_mem_rdata.eq(hrp.data)

            # instruction fetch: local memory only
            ib = core.ibus
            i_local = ib.addr[aw + 2:] == 0
            m.d.comb += [irp.addr.eq(ib.addr[2:aw + 2]), ib.rdata.eq(irp.data)]
            with m.If(ib.valid & ~self.stall[h]):
                m.d.comb += [ib.ready.eq(1), ib.err.eq(~i_local)]

            # data: local memory, MMIO, or error
            db = core.dbus
            d_local = db.addr[aw + 2:] == 0
            d_mmio = db.addr[16:] == (MMIO_BASE >> 16)
            port = ic.initiators[h]
            m.d.comb += [drp.addr.eq(db.addr[2:aw + 2]),
                         port.addr.eq(db.addr), port.wdata.eq(db.wdata), port.mask.eq(db.mask),
                         port.we.eq(db.we), port.valid.eq(db.valid & d_mmio)]
            with m.If(db.valid & d_local):
                m.d.comb += [db.ready.eq(1), db.rdata.eq(drp.data)]
                with m.If(db.we):
                    m.d.comb += [wp.addr.eq(db.addr[2:aw + 2]), wp.data.eq(db.wdata),
                                 wp.en.eq(db.mask)]
            with m.Elif(db.valid & d_mmio):
                m.d.comb += [db.ready.eq(port.ready), db.rdata.eq(port.rdata),
                             db.err.eq(port.err)]
            with m.Elif(db.valid):
                m.d.comb += [db.ready.eq(1), db.err.eq(1)]
            # host loads while the cores are held in reset
            with m.If(~self.run & host_local_ok & host.we & (host_core == h)):
                m.d.comb += [wp.addr.eq(host.addr[2:aw + 2]), wp.data.eq(host.wdata),
                             wp.en.eq(host.mask)]
            m.d.comb += self.trap[h].eq(core.trap.valid)
        return m
