"""Round-robin MMIO interconnect: several bus initiators (the cores' data ports, the host
port) share one MMIO target (the slot arbiter).

Timing: an idle interconnect grants the next requesting initiator after the last one served
(round robin, so no initiator starves); the grant is registered, and from the next cycle the
initiator's request is presented to the target, tagged with its ``hart``. The target's
``ready``/``rdata``/``err`` go back to that initiator only. With a zero-wait target every
access takes 2 cycles (one wait state for the core); a core waits at most one access of every
other initiator.
"""

from amaranth import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .layouts import BusSignature, MmioSignature

__all__ = ["MmioInterconnect"]


class MmioInterconnect(wiring.Component):
    """Parameters
    ----------
    harts : list of int
        The ``hart`` tag of each initiator port, in port order (at most 8 ports).

    Members
    -------
    initiators : In(BusSignature).array(len(harts))
        Initiator ports (the interconnect is their target).
    target : Out(MmioSignature)
        The shared target.
    """

    def __init__(self, harts):
        harts = list(harts)
        if not 1 <= len(harts) <= 8 or any(not isinstance(h, int) or not 0 <= h < 8
                                          for h in harts):
            raise ValueError(f"harts must be 1..8 tags in 0..7, not {harts!r}")
        self.harts = harts
        super().__init__({"initiators": In(BusSignature()).array(len(harts)),
                          "target": Out(MmioSignature())})

    def elaborate(self, platform):
        m = Module()
        n = len(self.harts)
        granted = Signal()
        owner = Signal(range(n))
        last = Signal(range(n), init=n - 1)
        t = self.target
        with m.If(~granted):
            # round robin: the first requester after `last`
            cand = Signal(range(n))
            found = Signal()
            with m.Switch(last):
                for l in range(n):
                    with m.Case(l):
                        for k in range(n):      # priority order rotated by `last`
                            idx = (l + 1 + k) % n
                            with (m.If if k == 0 else m.Elif)(self.initiators[idx].valid):
                                m.d.comb += [cand.eq(idx), found.eq(1)]
            with m.If(found):
                m.d.sync += [granted.eq(1), owner.eq(cand)]
        with m.Else():
            with m.Switch(owner):
                for i, port in enumerate(self.initiators):
                    with m.Case(i):
                        m.d.comb += [t.addr.eq(port.addr), t.wdata.eq(port.wdata),
                                     t.mask.eq(port.mask), t.we.eq(port.we),
                                     t.valid.eq(port.valid), t.hart.eq(self.harts[i]),
                                     port.rdata.eq(t.rdata), port.ready.eq(t.ready),
                                     port.err.eq(t.err)]
            with m.If(t.valid & t.ready):
                m.d.sync += [granted.eq(0), last.eq(owner)]
        return m
