"""CDU descriptor intake and block address generation."""

from amaranth.hdl import Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from .layouts import KIND, Widths, desc_layout, op_layout

__all__ = ["Intake"]


class Intake(wiring.Component):
    """Expand each ``desc`` (a run of ``count`` consecutive blocks) into ``count`` ``op`` beats.

    ``op`` is registered: the first op of a descriptor is valid on the cycle after the
    descriptor's transfer, then one op per cycle while ``op.ready`` is high. ``desc.ready``
    is high when no run is being expanded (or its last op transfers on this cycle).
    A descriptor with ``count == 0`` or an undefined ``kind`` (``>= len(KIND)``, i.e. 4..7) is
    consumed without any op and sets the sticky ``bad_desc`` output.
    """

    def __init__(self, widths: Widths = None):
        self.widths = widths or Widths()
        super().__init__({
            "desc": In(stream.Signature(desc_layout(self.widths))),
            "op": Out(stream.Signature(op_layout(self.widths))),
            "bad_desc": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        left = Signal(self.widths.count)          # ops still to emit after the one in op
        free = ~self.op.valid | (self.op.ready & (left == 0))
        m.d.comb += self.desc.ready.eq(free)

        with m.If(self.op.valid & self.op.ready):
            with m.If(left != 0):
                m.d.sync += [self.op.p.block.eq(self.op.p.block + 1), left.eq(left - 1)]
            with m.Else():
                m.d.sync += self.op.valid.eq(0)

        with m.If(self.desc.valid & free):
            d = self.desc.p
            with m.If((d.count == 0) | (d.kind >= len(KIND))):
                m.d.sync += self.bad_desc.eq(1)
            with m.Else():
                m.d.sync += [
                    self.op.valid.eq(1), left.eq(d.count - 1),
                    self.op.p.kind.eq(d.kind), self.op.p.req.eq(d.req),
                    self.op.p.layer.eq(d.layer), self.op.p.block.eq(d.block),
                    self.op.p.cls.eq(d.cls), self.op.p.fresh.eq(d.fresh),
                ]
        return m
