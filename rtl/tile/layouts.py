"""Payload layouts of the decode tile's streams, declared once for RTL, harnesses and tests.

The split-K combine unit (:mod:`.combine`) reads and writes the TE engine's ``out`` beats
(:func:`tricut.rtl.te.layouts.out_layout`: ``lanes`` fp32 values and ``last``), so a TE
engine's ``out`` feeds its ``partial`` input directly; only its job descriptor is new:

* ``job`` (one beat per combine job): ``parts``, the number K of partial results that follow
  on ``partial`` (``parts_bits(max_parts)`` bits).

Packers: :func:`pack_job`, :func:`pack_out_beats` (lane rows -> ``out`` payload ints, ``last``
on the final row), :func:`partial_beats` (one TE partial-mode result ``(o, m, l)`` as the
engine emits it: per head ``head_dim / lanes`` beats of ``o`` then ``[m, l, 0, ...]``) and
:func:`combined_beats` (a ``[G, head_dim]`` result as the normalised ``out`` beats).
"""

from __future__ import annotations

import numpy as np
from amaranth.hdl import unsigned
from amaranth.lib import data

from tricut.rtl.te.layouts import out_layout, unpack_out_beat

__all__ = ["MAX_PARTS_LIMIT", "parts_bits", "job_layout", "out_layout", "pack_job",
           "pack_out_beats", "partial_beats", "combined_beats", "unpack_out_beat"]

#: the largest ``max_parts`` a combine unit accepts
MAX_PARTS_LIMIT = 4096


def parts_bits(max_parts):
    """Width of the ``parts`` field: enough for ``max_parts``."""
    return max(1, int(max_parts).bit_length())


def job_layout(max_parts):
    return data.StructLayout({"parts": unsigned(parts_bits(max_parts))})


def pack_job(parts, max_parts):
    if not 0 <= parts < (1 << parts_bits(max_parts)):
        raise ValueError(f"parts must fit in {parts_bits(max_parts)} bits, got {parts}")
    return int(parts)


def pack_out_beats(rows, lanes):
    """Rows of ``lanes`` fp32 bit patterns -> ``out`` payload ints; ``last`` on the final row."""
    words = []
    for i, row in enumerate(rows):
        row = [int(x) for x in row]
        if len(row) != lanes:
            raise ValueError(f"an out beat carries {lanes} lanes, got {len(row)}")
        w = 0
        for j, x in enumerate(row):
            w |= (x & 0xFFFFFFFF) << (32 * j)
        if i == len(rows) - 1:
            w |= 1 << (32 * lanes)
        words.append(w)
    return words


def partial_beats(o, m, l, lanes):
    """One partial result (``o`` [G, d], ``m`` [G], ``l`` [G] bit patterns) as the TE engine's
    partial-mode ``out`` beats."""
    o = np.asarray(o)
    G, d = o.shape
    rows = []
    for g in range(G):
        rows += [o[g, b:b + lanes] for b in range(0, d, lanes)]
        rows.append([int(m[g]), int(l[g])] + [0] * (lanes - 2))
    return pack_out_beats(rows, lanes)


def combined_beats(out, lanes):
    """A ``[G, d]`` result as the normalised ``out`` beats (head-major, ``last`` at the end)."""
    out = np.asarray(out)
    G, d = out.shape
    return pack_out_beats([out[g, b:b + lanes] for g in range(G) for b in range(0, d, lanes)],
                          lanes)
