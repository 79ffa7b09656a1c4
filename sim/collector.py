"""Python's cyclic garbage collector set for tricut's allocation pattern.

Building an Amaranth design (its netlist, RTLIL and Verilog) allocates millions of short-lived
objects; at Python's default thresholds (700, 10, 10) the collector runs thousands of times
during one conversion of the decode tile and every third-generation pass walks the whole heap.
:data:`THRESHOLDS` collect far less often (``benchmarks/collector.py``
measures the conversion's time and peak memory under both; docs/toolchain.md). The collector
only decides when unreachable cycles are freed, never what a computation returns.
"""

from __future__ import annotations

import gc

__all__ = ["THRESHOLDS", "tune"]

#: the collector's (generation 0, 1, 2) thresholds in tricut's processes
THRESHOLDS = (50_000, 20, 10)


def tune() -> None:
    """Set the collector's thresholds to :data:`THRESHOLDS` (the command line and the test
    suite call this once at start)."""
    gc.set_threshold(*THRESHOLDS)
