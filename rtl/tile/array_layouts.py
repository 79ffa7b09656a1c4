"""Payload layouts of the TE array's streams (:mod:`.te_array`), declared once for RTL,
harnesses and tests.

Every tagged payload is the TE engine's own payload (:mod:`tricut.rtl.te.layouts`) in the low
bits with the job ``tag`` on top, so ``word & ((1 << te_bits) - 1)`` is exactly what a TE
engine takes or emits:

* ``job`` (one beat per job): ``desc`` (the TE ``desc`` layout: ``n``, ``scale``,
  ``tensor_scale``, ``partial``) then ``tag`` (``tag_bits`` bits: the tile's name for the
  (slot, layer, KV head, split part) of the job; the array only carries it);
* ``q``, ``kv``: the TE ``q`` and ``kv`` layouts unchanged (no tag: they follow their job);
* routed ``kv`` (the array built with ``routed_kv=True``): ``kv`` (the TE ``kv`` layout) then
  ``engine`` (``index_bits(engines)`` bits: the engine the beat goes to),
  :func:`routed_kv_layout`;
* ``out``: the TE ``out`` layout (``data`` = ``lanes`` fp32, ``last``) then ``tag``;
* ``status`` (one beat per job): the TE status word (``STATUS_BITS``, LSB first) then ``tag``.

Packers: :func:`pack_job`, :func:`tag_word` (put a tag above a TE payload word),
:func:`split_tag` (the inverse) and :func:`pack_routed_kv` (an engine above a TE ``kv`` word).
"""

from __future__ import annotations

from amaranth.hdl import unsigned
from amaranth.lib import data

from tricut.rtl.te.layouts import desc_layout, kv_layout, out_layout, status_layout

__all__ = ["MAX_TAG_BITS", "array_job_layout", "tagged_out_layout", "tagged_status_layout",
           "routed_kv_layout", "engine_bits", "pack_job", "tag_word", "split_tag",
           "pack_routed_kv"]

#: the widest job tag the array carries
MAX_TAG_BITS = 32


def array_job_layout(tag_bits):
    return data.StructLayout({"desc": desc_layout(), "tag": unsigned(tag_bits)})


def tagged_out_layout(lanes, tag_bits):
    return data.StructLayout({"data": out_layout(lanes).members["data"],
                              "last": unsigned(1), "tag": unsigned(tag_bits)})


def tagged_status_layout(tag_bits):
    return data.StructLayout({"status": status_layout(), "tag": unsigned(tag_bits)})


def engine_bits(engines):
    """Width of an engine index (at least 1 bit)."""
    return max(1, (int(engines) - 1).bit_length())


def routed_kv_layout(lanes, kv_dtype, engines):
    """The ``kv`` payload of a routed-K/V array: the TE ``kv`` payload, then the engine."""
    return data.StructLayout({"kv": kv_layout(lanes, kv_dtype),
                              "engine": unsigned(engine_bits(engines))})


def tag_word(word, tag, low_bits, tag_bits):
    """A TE payload ``word`` of ``low_bits`` bits with ``tag`` (``tag_bits`` bits) on top."""
    if not 0 <= tag < (1 << tag_bits):
        raise ValueError(f"tag must fit in {tag_bits} bits, got {tag}")
    if not 0 <= word < (1 << low_bits):
        raise ValueError(f"payload word must fit in {low_bits} bits, got {word:#x}")
    return int(word) | int(tag) << low_bits


def split_tag(word, low_bits):
    """``(TE payload word, tag)`` of a tagged payload int."""
    return word & ((1 << low_bits) - 1), word >> low_bits


def pack_job(desc_word, tag, tag_bits):
    """A ``job`` payload int: a TE ``desc`` word (:func:`tricut.rtl.te.layouts.pack_desc`)
    and the job's tag."""
    return tag_word(desc_word, tag, desc_layout().size, tag_bits)


def pack_routed_kv(kv_word, engine, lanes, kv_dtype, engines):
    """A routed ``kv`` payload int: a TE ``kv`` word
    (:func:`tricut.rtl.te.layouts.pack_kv_beats`) and the engine it goes to."""
    if not 0 <= engine < engines:
        raise ValueError(f"engine must be in 0..{engines - 1}, got {engine}")
    return tag_word(kv_word, engine, kv_layout(lanes, kv_dtype).size, engine_bits(engines))
