"""Layouts of the decode tile's attention path (:mod:`.unit_streamer`, :mod:`.block_reader`, :mod:`.attention_path`),
declared once for RTL, harnesses and tests: the KV image in HBM, the job tag, the internal
block-read interface and the HBM port payloads.

**KV image in HBM** (one word = one TE ``kv`` beat without ``last``: ``lanes`` element codes
then the E4M3 block scales of the 16-element micro-blocks it covers, 8 bits each and at least
one, :func:`kv_word_bits` bits). The K/V of one
``(request, layer, kv_head)`` are contiguous, ``max_ctx`` tokens of ``2*Dk`` words each, in
the TE's order: token ``t``'s ``Dk`` K beats then its ``Dk`` V beats::

    addr(request, layer, kv_head, t) = ((request * L + layer) * H + kv_head) * max_ctx * 2 * Dk
                                       + t * 2 * Dk                     (Dk = head_dim / lanes)

(:func:`kv_addr`; :func:`kv_image_words` is the image depth for ``num_requests`` requests).
The RTL computes the same expression with constant multiplies.

**Job tag** (:func:`tag_layout`), carried by the TE array from a job to its ``out`` beats:
``slot``, ``kv_head``, ``final`` (the job is the last part of its (slot, layer, kv_head):
after its output the result is complete) and ``parts`` (the job's split count, in the
combine unit's ``parts`` width; ``parts != 1``: the job is a split part and its ``out`` beats
go to the combine unit).

**Block read** (:func:`block_req_layout`, :func:`block_data_layout`): the streamer's only way
to K/V. One request reads the tokens ``[t0, t0 + ntok)`` of one 16-token KV block
(``request``, ``layer``, ``kv_head``, ``block``; ``t0`` the first token's offset in the
block, ``ntok`` 1..16); the answer is its ``ntok * 2 * Dk`` words in token order, ``last``
on the final one, ``err`` where the memory said so. Today an HBM reader answers it
(:class:`~.block_reader.HbmBlockReader`); the CDU's L2 hit path can answer the same requests.

**HBM ports**: the payloads of the tile's ``hbm_req``, ``hbm_resp`` and ``hbm_write``, and
of the L2 data array's ``l2_write`` (frame, beat, data), declared here once; the behavioural
models (:mod:`tricut.rtl.tile.behavioural.layouts`) import them, so the synthesizable tile
imports nothing behavioural.

**L2 data array** (read side, :func:`l2_read_layout`, :func:`l2_data_layout`): a read of
``beats`` words from beat 0 of ``frame``, answered with ``tag``, ``data``, ``last``, ``err``.

**L2 fill and new-token writes** (:mod:`.l2_fill`): the filler takes the CDU's ``hbm_req`` and
answers its ``hbm_resp``, the new-token writer takes the CDU's ``txn`` (the CDU's layouts,
:mod:`tricut.rtl.cdu.layouts`, with their ``way`` and ``alloc`` fields), and the tile's new K/V
through :func:`newkv_write_layout` (``request``, ``kv_head``, ``beat``, ``data``, ``pos``).
"""

from __future__ import annotations

from amaranth.hdl import unsigned
from amaranth.lib import data

from tricut.models.te import KV_CODE_BITS
from tricut.rtl.te.layouts import kv_scale_bits

__all__ = ["kv_word_bits", "kv_data_bits", "kv_addr", "kv_region_words",
           "kv_image_words", "index_bits", "count_bits", "tag_layout", "block_req_layout",
           "block_data_layout", "hbm_req_layout", "hbm_resp_layout", "hbm_write_layout",
           "l2_write_layout", "l2_read_layout", "l2_data_layout", "q_write_layout",
           "newkv_write_layout"]


def index_bits(n):
    """Width of an index into ``n`` things (at least 1 bit)."""
    return max(1, (int(n) - 1).bit_length())


def count_bits(n):
    """Width of a count 0..``n``."""
    return max(1, int(n).bit_length())


def kv_word_bits(lanes, kv_dtype):
    """Bits of one TE ``kv`` beat without ``last``: ``lanes`` codes and the block scales
    (:func:`tricut.rtl.te.layouts.kv_scale_bits`)."""
    return lanes * KV_CODE_BITS[kv_dtype] + kv_scale_bits(lanes)


def kv_data_bits(lanes, kv_dtype):
    """The HBM ``data_bits`` of the KV image: :func:`kv_word_bits` rounded up to bytes."""
    return -(-kv_word_bits(lanes, kv_dtype) // 8) * 8


def kv_region_words(max_ctx, head_dim, lanes):
    """Words of one (request, layer, kv_head) region: ``max_ctx * 2 * Dk``."""
    return max_ctx * 2 * (head_dim // lanes)


def kv_addr(request, layer, kv_head, t, *, num_layers, num_kv_heads, max_ctx, head_dim, lanes):
    """Word address of token ``t``'s first K beat (see the module docstring)."""
    dk = head_dim // lanes
    return (((request * num_layers + layer) * num_kv_heads + kv_head)
            * kv_region_words(max_ctx, head_dim, lanes) + t * 2 * dk)


def kv_image_words(num_requests, num_layers, num_kv_heads, max_ctx, head_dim, lanes):
    """Depth of the KV image holding requests ``0 .. num_requests-1``."""
    return num_requests * num_layers * num_kv_heads * kv_region_words(max_ctx, head_dim, lanes)


def tag_layout(slot_bits, head_bits, parts_bits):
    return data.StructLayout({"slot": unsigned(slot_bits), "kv_head": unsigned(head_bits),
                              "final": unsigned(1), "parts": unsigned(parts_bits)})


def block_req_layout(req_bits, layer_bits, head_bits, block_bits):
    return data.StructLayout({"request": unsigned(req_bits), "layer": unsigned(layer_bits),
                              "kv_head": unsigned(head_bits), "block": unsigned(block_bits),
                              "t0": unsigned(4), "ntok": unsigned(5)})


def block_data_layout(data_bits):
    return data.StructLayout({"data": unsigned(data_bits), "last": unsigned(1),
                              "err": unsigned(1)})


def hbm_req_layout(id_bits, addr_bits, max_beats):
    return data.StructLayout({"id": unsigned(id_bits), "addr": unsigned(addr_bits),
                              "beats": unsigned(count_bits(max_beats))})


def hbm_resp_layout(id_bits, data_bits):
    return data.StructLayout({"id": unsigned(id_bits), "data": unsigned(data_bits),
                              "last": unsigned(1), "err": unsigned(1)})


def hbm_write_layout(addr_bits, data_bits):
    return data.StructLayout({"addr": unsigned(addr_bits), "data": unsigned(data_bits)})


def l2_write_layout(frames, block_beats, data_bits):
    """The L2 data array's write port: word ``beat`` of frame ``frame``."""
    return data.StructLayout({"frame": unsigned(index_bits(frames)),
                              "beat": unsigned(index_bits(block_beats)),
                              "data": unsigned(data_bits)})


def l2_read_layout(frames, block_beats, tag_bits):
    return data.StructLayout({"frame": unsigned(index_bits(frames)),
                              "beats": unsigned(count_bits(block_beats)),
                              "tag": unsigned(tag_bits)})


def l2_data_layout(tag_bits, data_bits):
    return data.StructLayout({"tag": unsigned(tag_bits), "data": unsigned(data_bits),
                              "last": unsigned(1), "err": unsigned(1)})


def newkv_write_layout(req_bits, head_bits, beat_bits, data_bits, pos_bits):
    """The new-K/V buffer's write port: word ``beat`` (0..2*Dk-1: Dk K words, Dk V words) of
    ``(request, kv_head)``, and ``pos``, the new token's index (kept per request)."""
    return data.StructLayout({"request": unsigned(req_bits), "kv_head": unsigned(head_bits),
                              "beat": unsigned(beat_bits), "data": unsigned(data_bits),
                              "pos": unsigned(pos_bits)})


def q_write_layout(slot_bits, head_bits, beat_bits, lanes):
    """The Q buffer's write port: word ``(slot, kv_head, beat)`` = ``lanes`` bf16 codes."""
    return data.StructLayout({"slot": unsigned(slot_bits), "kv_head": unsigned(head_bits),
                              "beat": unsigned(beat_bits),
                              "data": data.ArrayLayout(unsigned(16), lanes)})
