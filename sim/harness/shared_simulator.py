"""Amaranth simulators shared by the runs of one design.

Building an Amaranth ``Simulator`` elaborates the design, prepares it and compiles it to
Python; for the units here that costs more than most runs on them (a CDU front end: about a
second to build, a few hundred cycles to run). ``Simulator.reset`` returns a simulator to its
initial state -- every signal and memory at its initial value, the clock, every process and
testbench restarted -- and is Amaranth's documented way to amortise a design's start-up. So
a harness asks :func:`design` for a design by its class and constructor arguments (equal
class and arguments, equal design), and :meth:`SharedDesign.run` resets its simulator and
runs one testbench on it from cycle 0. ``tests/test_shared_simulator.py`` checks that a
reused simulator gives the fresh one's results, cycle for cycle.

A process keeps the :data:`KEEP` most recently used simulators. A run that raises drops its
simulator (the next run of the key builds a new one); runs that record waves build their own
(``share=False``), and a design object the caller built runs alone (:func:`own`).
"""

from __future__ import annotations

from collections import OrderedDict

__all__ = ["KEEP", "SharedDesign", "design", "own", "forget", "forget_all"]

#: simulators kept per process, most recently used first
KEEP = 8                 # a TE engine's or array's simulator takes tens of MB

_kept: OrderedDict = OrderedDict()


class SharedDesign:
    """A design and its simulator (clock of ``period`` seconds, one testbench slot)."""

    def __init__(self, key, dut, period):
        from amaranth.sim import Simulator

        self.key, self.dut = key, dut
        self.sim = Simulator(dut)
        self.sim.add_clock(period)
        self._bench = None
        self._ran = False

    def run(self, bench):
        """Run the async testbench ``bench(ctx)`` from the design's initial state."""
        self._bench = bench
        if self._ran:
            self.sim.reset()
        else:
            async def testbench(ctx):
                await self._bench(ctx)

            self.sim.add_testbench(testbench)
            self._ran = True
        try:
            self.sim.run()
        except BaseException:
            forget(self)
            raise
        finally:
            self._bench = None


def design(unit, *, period=1e-9, share=True, **params) -> SharedDesign:
    """The design ``unit(**params)`` with its simulator, shared with every earlier run of the
    same class and parameters that is still kept (``share=False``: a design of its own)."""
    if not share:
        return own(unit(**params), period)
    key = (unit, repr(sorted(params.items())), period)
    shared = _kept.get(key)
    if shared is None:
        shared = _kept[key] = SharedDesign(key, unit(**params), period)
        while len(_kept) > KEEP:
            _kept.popitem(last=False)
    _kept.move_to_end(key)
    return shared


def own(dut, period=1e-9) -> SharedDesign:
    """A design object the caller built (never shared) with its simulator."""
    return SharedDesign(None, dut, period)


def forget(shared: SharedDesign) -> None:
    """Stop sharing ``shared`` (the next :func:`design` of its key builds anew)."""
    if shared.key is not None and _kept.get(shared.key) is shared:
        del _kept[shared.key]


def forget_all() -> None:
    """Stop sharing every kept simulator."""
    _kept.clear()
