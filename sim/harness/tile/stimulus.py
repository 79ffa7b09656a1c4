"""The stimulus file of a co-simulation (``docs/tile/cosim.md``, "Native replay"): what the
cocotb bench (:class:`~.bench.CosimBench`) wrote into the Verilator top and what it read
back, each at the half clock period it happened, for the native replay
(``native_replay.cpp``, :mod:`.native`) to play without Python and check.

The format, version 1, one record per line::

    tricut-stimulus 1
    handle <id> <path> <index>      a signal (cocotb's path; index -1, or a memory's element)
    w <half> <id> <hex>             the bench wrote <hex> into signal <id>
    c <half> <id> <hex>             the bench read <hex> from signal <id>
    end <half>                      the run's last half period

``<half>`` counts half clock periods from time 0 (even: the clock rises, as cocotb's
``Clock`` starts high); ``<hex>`` is lower case without leading zeros. The replay applies a
half period's writes after the clock edge's evaluation and checks its reads after the writes
(the bench's reads of the top's outputs do not depend on the inputs it writes in the same
half period, except the ``ready`` it samples in ``ReadOnly``, after its writes).
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["MAGIC", "Recorder"]

MAGIC = "tricut-stimulus 1"


class Recorder:
    """The bench's writes and reads, in order (see the module docs); ``period_ns`` the bench's
    clock period."""

    def __init__(self, period_ns):
        from cocotb.utils import get_sim_time
        self._now = get_sim_time
        self.half_ns = period_ns / 2
        self.ids: dict[tuple[str, int], int] = {}
        self.lines: list[str] = []

    def half(self, on_edge=True):
        """The current half clock period: the bench writes only at clock edges; a read
        between edges sees the values of the last edge (nothing changes in between)."""
        t = self._now("ns")
        h = int((t + 1e-6) // self.half_ns)
        if on_edge and abs(h * self.half_ns - t) > 1e-6:
            raise ValueError(f"the bench wrote at {t} ns, between clock edges: the native "
                             f"replay plays half periods of {self.half_ns} ns")
        return h

    def _id(self, handle):
        path, index = handle._path, -1
        if path.endswith("]"):
            path, _, i = path[:-1].rpartition("[")
            index = int(i)
        key = (path, index)
        if key not in self.ids:
            self.ids[key] = len(self.ids)
            self.lines.append(f"handle {self.ids[key]} {path} {index}")
        return self.ids[key]

    def write(self, handle, value):
        self.lines.append(f"w {self.half()} {self._id(handle)} {int(value):x}")

    def read(self, handle, value):
        self.lines.append(f"c {self.half(False)} {self._id(handle)} {int(value):x}")

    def save(self, path):
        """The file, ending at the current half period."""
        Path(path).write_text("\n".join([MAGIC, *self.lines, f"end {self.half(False)}"]) + "\n")
