"""A measurement aid for the benchmarks: :class:`CallTimer` adds up the wall time of the calls
of a module function while it is installed (e.g. the golden run's phases, ``prefill`` and
``te_golden_attention`` of :mod:`tricut.sim.harness.tile.golden`)."""

from __future__ import annotations

import time

__all__ = ["CallTimer"]


class CallTimer:
    """Adds up the wall time of the calls of a module function while it is installed (a
    measurement aid: the golden run's phases)."""

    def __init__(self, module, name, inner=False):
        self.module, self.name, self.inner, self.s = module, name, inner, 0.0

    def __enter__(self):
        self.orig = orig = getattr(self.module, self.name)

        def timed(fn):
            def call(*a, **k):
                t0 = time.perf_counter()
                try:
                    return fn(*a, **k)
                finally:
                    self.s += time.perf_counter() - t0
            return call

        # inner: the function returns a function (te_golden_attention): time the calls of that
        setattr(self.module, self.name,
                (lambda *a, **k: timed(orig(*a, **k))) if self.inner else timed(orig))
        return self

    def __exit__(self, *exc):
        setattr(self.module, self.name, self.orig)
