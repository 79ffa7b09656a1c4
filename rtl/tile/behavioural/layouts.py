"""Payload layouts of the behavioural memory models, declared once for RTL, harness and tests.

HBM (:class:`~.hbm.HbmModel`), addresses and bursts in beats of ``data_bits`` bits:

* ``req`` (in): ``id`` (``id_bits``), ``addr`` (first beat's word address, ``addr_bits``),
  ``beats`` (burst length, ``count_bits(max_beats)`` bits; 0 is malformed: answered with one
  beat, ``err = 1``);
* ``resp`` (out): ``id``, ``data`` (``data_bits``), ``last``, ``err``;
* ``write`` (in): ``addr``, ``data``.

L2 data array (:class:`~.l2.L2Data`), ``frames`` frames of ``block_beats`` beats:

* ``read`` (in): ``frame``, ``beats`` (from beat 0 of the frame), ``tag`` (``tag_bits``);
* ``data`` (out): ``tag``, ``data``, ``last``, ``err``;
* ``write`` (in): ``frame``, ``beat``, ``data``.

:func:`pack` / :func:`unpack` convert between a field dict and the payload integer of any of
these layouts (the bit positions Amaranth gives them).
"""

from __future__ import annotations

from amaranth.hdl import unsigned
from amaranth.lib import data

# the HBM port layouts and the L2 write port are the tile's (the synthesizable side declares
# them; the models serve them)
from ..attention_layouts import (count_bits, hbm_req_layout, hbm_resp_layout, hbm_write_layout,
                                 index_bits, l2_data_layout, l2_read_layout, l2_write_layout)

__all__ = ["index_bits", "count_bits", "hbm_req_layout", "hbm_resp_layout", "hbm_write_layout",
           "l2_read_layout", "l2_data_layout", "l2_write_layout", "pack", "unpack"]


def pack(layout, **fields):
    """``fields`` -> the payload integer of ``layout``; every field must be given and fit."""
    names = [name for name, _ in layout]
    if set(fields) != set(names):
        raise ValueError(f"payload fields must be {names}, got {sorted(fields)}")
    word = 0
    for name, f in layout:
        v = int(fields[name])
        if not 0 <= v < (1 << f.shape.width):
            raise ValueError(f"field {name} must fit in {f.shape.width} bits, got {v}")
        word |= v << f.offset
    return word


def unpack(layout, word):
    """The payload integer of ``layout`` -> a field dict."""
    word = int(word)
    return {name: (word >> f.offset) & ((1 << f.shape.width) - 1) for name, f in layout}
