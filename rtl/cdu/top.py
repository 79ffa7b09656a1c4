"""CDU top level: front end (address generation / prediction) -> intake -> decision core.

:class:`CDU` takes DSU step descriptors (and, for query-dependent patterns, demand lists);
:class:`CDUBackEnd` is intake -> core alone, taking an operation-run stream (``desc``)."""

from amaranth.hdl import Module
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from .checked import CheckedComponent
from .core import CDUCoreRTL, check_params, memory_side_ports
from .frontend import FrontEndRTL
from .intake import Intake
from .layouts import Widths, demand_layout, desc_layout, fe_config_layout, step_layout

__all__ = ["CDU", "CDUBackEnd"]


class CDUBackEnd(CheckedComponent):
    """Operation runs in: :class:`~.intake.Intake` followed by :class:`~.core.CDUCoreRTL`.

    Parameters are those of :class:`~.core.CDUCoreRTL` (``reserve``: ways per set kept
    from the keep class, default ``ways // 8``; ``params`` holds it resolved). Ports: ``desc`` in; ``txn``,
    ``hbm_req``, ``ready``, ``status`` out; ``hbm_resp`` in; ``counters`` and the register
    read port ``reg_addr``/``reg_data`` (see ``docs/cdu.md``); sticky ``bad_desc`` and
    ``bad_resp``; ``idle`` (nothing in flight, all queues empty).

    A bad parameter raises ``ValueError`` (as for :class:`~.core.CDUCoreRTL`) before the
    component exists.
    """

    _check = staticmethod(CDUCoreRTL._check)

    def __init__(self, sets=4, ways=2, mshrs=4, rq_depth=4, max_retries=2, widths=None,
                 reserve=None):
        self.widths = widths or Widths()
        reserve = check_params(sets, ways, mshrs, rq_depth, max_retries, self.widths, reserve)
        self.params = dict(sets=sets, ways=ways, mshrs=mshrs, rq_depth=rq_depth,
                           max_retries=max_retries, reserve=reserve)
        w = self.widths
        super().__init__({
            "desc": In(stream.Signature(desc_layout(w))),
            **memory_side_ports(w),
            "bad_desc": Out(1),
            "bad_resp": Out(1),
            "idle": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.intake = intake = Intake(self.widths)
        m.submodules.core = core = CDUCoreRTL(widths=self.widths, **self.params)
        wiring.connect(m, wiring.flipped(self.desc), intake.desc)
        wiring.connect(m, intake.op, core.op)
        for name in ("txn", "hbm_req", "ready", "status"):
            wiring.connect(m, getattr(core, name), wiring.flipped(getattr(self, name)))
        wiring.connect(m, wiring.flipped(self.hbm_resp), core.hbm_resp)
        m.d.comb += [self.counters.eq(core.counters), core.reg_addr.eq(self.reg_addr),
                     self.reg_data.eq(core.reg_data), self.bad_desc.eq(intake.bad_desc),
                     self.bad_resp.eq(core.bad_resp),
                     self.idle.eq(core.idle & ~intake.op.valid)]
        return m


class CDU(CheckedComponent):
    """The CDU: :class:`~.frontend.FrontEndRTL` -> :class:`~.intake.Intake` ->
    :class:`~.core.CDUCoreRTL`.

    Parameters: those of :class:`~.core.CDUCoreRTL` and, in ``front``, of
    :class:`~.frontend.FrontEndRTL` (``frames`` is ``sets * ways``). Ports: ``step``,
    ``demand`` and ``config`` in (front end); ``txn``, ``hbm_req``, ``ready``, ``status``
    out; ``hbm_resp`` in; ``counters``, ``reg_addr``/``reg_data``; sticky ``bad_step``,
    ``bad_demand``, ``overflow`` (front end) and ``bad_resp``; ``idle`` (waiting for a step
    descriptor, nothing planned, in flight or queued).

    A bad parameter raises ``ValueError`` (an unknown one ``TypeError``) before the component
    or any of its parts exists.
    """

    @staticmethod
    def _check(sets, ways, mshrs, rq_depth, max_retries, widths, reserve, front):
        CDUCoreRTL.check(sets, ways, mshrs, rq_depth, max_retries, widths, reserve)
        FrontEndRTL.check(widths, frames=sets * ways, **front)

    def __init__(self, sets=4, ways=2, mshrs=4, rq_depth=4, max_retries=2, widths=None,
                 reserve=None, **front):
        self.widths = widths or Widths()
        reserve = check_params(sets, ways, mshrs, rq_depth, max_retries, self.widths, reserve)
        self._back = CDUBackEnd(sets, ways, mshrs, rq_depth, max_retries, self.widths, reserve)
        self._front = FrontEndRTL(self.widths, frames=sets * ways, **front)
        self.params = dict(sets=sets, ways=ways, mshrs=mshrs, rq_depth=rq_depth,
                           max_retries=max_retries, reserve=reserve)
        self.front = self._front
        w = self.widths
        super().__init__({
            "step": In(stream.Signature(step_layout(w, self._front.slot_bits))),
            "demand": In(stream.Signature(demand_layout(w))),
            "config": In(fe_config_layout(w)),
            **memory_side_ports(w),
            "bad_step": Out(1), "bad_demand": Out(1), "overflow": Out(1),
            "bad_resp": Out(1),
            "idle": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.front = fe = self._front
        m.submodules.back = be = self._back
        wiring.connect(m, wiring.flipped(self.step), fe.step)
        wiring.connect(m, wiring.flipped(self.demand), fe.demand)
        wiring.connect(m, fe.ops, be.desc)
        for name in ("txn", "hbm_req", "ready", "status"):
            wiring.connect(m, getattr(be, name), wiring.flipped(getattr(self, name)))
        wiring.connect(m, wiring.flipped(self.hbm_resp), be.hbm_resp)
        m.d.comb += [fe.config.eq(self.config), self.counters.eq(be.counters),
                     be.reg_addr.eq(self.reg_addr), self.reg_data.eq(be.reg_data),
                     self.bad_step.eq(fe.bad_step), self.bad_demand.eq(fe.bad_demand),
                     self.overflow.eq(fe.overflow), self.bad_resp.eq(be.bad_resp),
                     self.idle.eq(fe.idle & be.idle)]
        return m
