"""Payload layouts of the step sequencer's streams (``rtl/tile/sequencer.py``), declared once
for RTL, harnesses and tests.

* ``round`` in (:func:`round_layout`): one beat per DSU round, before its descriptors:
  ``step`` (the round number, the arbiter's ``ROUND``: the width of the descriptor's
  ``step``), ``count`` (descriptors that follow on ``descriptor``, 0..``max_slots``) and
  ``end`` (no round follows: sets ``end`` on the step's final beat for the CDU front end).
* ``descriptor`` in: the DSU arbiter's stream as it is,
  :data:`tricut.rtl.dsu.layouts.DESCRIPTOR_LAYOUT`.
* ``step`` out: the CDU front end's input, :func:`tricut.rtl.cdu.layouts.step_layout`.
* ``job`` out (:func:`attn_job_layout`): one attention job of the TE array: ``slot``,
  ``request``, ``layer``, ``kv_head``, ``part`` of ``parts`` (Flash-Decoding split-K), the
  token range ``[start, end)`` and ``last`` on the step's final job. ``request``, ``layer``,
  ``start``/``end`` have the CDU's tag widths (``Widths.req``, ``Widths.layer``,
  ``seq_bits``), so a KV streamer can pair jobs with the CDU's ``ready`` entries.

Packers: :func:`pack`, :func:`unpack` (a dict of field values <-> the payload int of a
layout; a value that does not fit raises ``ValueError``).
"""

from __future__ import annotations

from amaranth.hdl import Shape, unsigned
from amaranth.lib import data

from tricut.rtl.cdu.layouts import Widths, seq_bits, step_layout
from tricut.rtl.dsu.layouts import DESCRIPTOR_LAYOUT

__all__ = ["ROUND_STEP_BITS", "DESCRIPTOR_LAYOUT", "step_layout", "round_layout", "attn_job_layout",
           "max_parts", "part_bits", "parts_bits", "head_bits", "pack", "unpack", "Widths"]

#: width of the ``step`` field of a DSU descriptor (and of ``round.step``)
ROUND_STEP_BITS = Shape.cast(DESCRIPTOR_LAYOUT["step"].shape).width


def round_layout(max_slots):
    return data.StructLayout({"step": unsigned(ROUND_STEP_BITS),
                              "count": unsigned(max(1, int(max_slots).bit_length())),
                              "end": unsigned(1)})


def max_parts(split_tokens, w: Widths):
    """The most split parts of one context: ``ceil((2**seq_bits - 1) / split_tokens)``, 1
    when ``split_tokens`` is 0."""
    if split_tokens == 0:
        return 1
    return -(-((1 << seq_bits(w)) - 1) // split_tokens)


def part_bits(split_tokens, w: Widths):
    return max(1, (max_parts(split_tokens, w) - 1).bit_length())


def parts_bits(split_tokens, w: Widths):
    return max(1, max_parts(split_tokens, w).bit_length())


def head_bits(num_kv_heads):
    return max(1, (num_kv_heads - 1).bit_length())


def attn_job_layout(w: Widths, slot_bits, num_kv_heads, split_tokens):
    sb = seq_bits(w)
    return data.StructLayout({
        "slot": unsigned(slot_bits), "request": unsigned(w.req), "layer": unsigned(w.layer),
        "kv_head": unsigned(head_bits(num_kv_heads)),
        "part": unsigned(part_bits(split_tokens, w)),
        "parts": unsigned(parts_bits(split_tokens, w)),
        "start": unsigned(sb), "end": unsigned(sb), "last": unsigned(1)})


def pack(layout, fields):
    """``{field: value}`` -> the payload int (missing fields are 0)."""
    names = {name for name, _ in layout}
    extra = set(fields) - names
    if extra:
        raise ValueError(f"no such field(s) {sorted(extra)} in {sorted(names)}")
    word = 0
    for name, f in layout:
        v = int(fields.get(name, 0))
        width = Shape.cast(f.shape).width
        if not 0 <= v < (1 << width):
            raise ValueError(f"{name} = {v} does not fit in {width} bits")
        word |= v << f.offset
    return word


def unpack(layout, word):
    """The payload int -> ``{field: value}``."""
    return {name: (int(word) >> f.offset) & ((1 << Shape.cast(f.shape).width) - 1)
            for name, f in layout}
