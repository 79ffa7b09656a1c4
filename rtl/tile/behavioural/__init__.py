"""Behavioural memory models of the decode tile: HBM (:mod:`.hbm`) and the L2 data array
(:mod:`.l2`).

**Behavioural, not for synthesis.** They are Amaranth so that a tile simulation (Amaranth's
simulator or Verilator) needs no Python per cycle, but they model a memory's timing and
contents, not a memory controller: the whole HBM image is one ``Memory`` initialised from a
Python list, latency is a counter per outstanding request. They are kept apart from the
synthesizable tile (``rtl/tile/*.py``); nothing synthesizable imports them. Payload layouts:
:mod:`.layouts`; the Python reference that predicts their outputs cycle by cycle and the
bench: :mod:`tricut.sim.harness.memory`.
"""
