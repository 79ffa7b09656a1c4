"""Payload layouts of the TE decode engine's streams, shared by RTL, model glue and tests.

Every stream is an ``amaranth.lib.stream`` with these payloads (LSB first):

* ``desc`` (one beat per decode step): ``n`` (announced context length), ``scale`` (fp32
  bits of the softmax scale), ``tensor_scale`` (fp32 bits, NVFP4 only), ``partial`` (1: emit
  the unnormalised ``(o, m, l)``).
* ``q``: ``G * head_dim / lanes`` beats, head-major, each ``lanes`` bf16 codes.
* ``kv``: per token ``head_dim / lanes`` K beats then as many V beats, each ``lanes`` element
  codes (16/8/4 bits), ``scale`` (:func:`kv_scale_bits` bits: the E4M3 block-scale codes of
  the 16-element NVFP4 micro-blocks the beat covers, code ``j`` in bits ``8j..8j+7`` for
  lanes ``16j..16j+15``; 8 bits, one code, for ``lanes <= 16``; ignored for bf16/fp8) and
  ``last`` (set on the final beat of the context, right above ``scale``).
* ``out``: ``G * head_dim / lanes`` beats of ``lanes`` fp32 values (head-major), plus in
  partial mode one beat per head after its ``o`` beats carrying ``[m, l, 0, ...]``;
  ``last`` marks the final beat of the step.
* ``status`` (a plain output, not a stream): sticky flags of the current/last step.
"""

from __future__ import annotations

import numpy as np
from amaranth.hdl import unsigned
from amaranth.lib import data

from tricut.models.te import KV_CODE_BITS, STATUS_BITS

__all__ = ["N_BITS", "NVFP4_BLOCK", "kv_scale_bits", "desc_layout", "q_layout", "kv_layout",
           "out_layout", "status_layout", "pack_desc", "pack_q_beats", "pack_kv_beats",
           "unpack_out_beat", "unpack_status"]

#: width of the announced context length
N_BITS = 20
#: elements per NVFP4 micro-block (one E4M3 block-scale code each)
NVFP4_BLOCK = 16


def kv_scale_bits(lanes):
    """Width of the ``kv`` beat's ``scale`` field: one 8-bit E4M3 code per NVFP4 micro-block
    the beat covers (8 bits for ``lanes <= 16``, 16 for 32 lanes)."""
    return 8 * max(1, lanes // NVFP4_BLOCK)


def desc_layout():
    return data.StructLayout({"n": unsigned(N_BITS), "scale": unsigned(32),
                              "tensor_scale": unsigned(32), "partial": unsigned(1)})


def q_layout(lanes):
    return data.StructLayout({"data": data.ArrayLayout(unsigned(16), lanes)})


def kv_layout(lanes, kv_dtype):
    return data.StructLayout({"data": data.ArrayLayout(unsigned(KV_CODE_BITS[kv_dtype]), lanes),
                              "scale": unsigned(kv_scale_bits(lanes)), "last": unsigned(1)})


def out_layout(lanes):
    return data.StructLayout({"data": data.ArrayLayout(unsigned(32), lanes),
                              "last": unsigned(1)})


def status_layout():
    return data.StructLayout({k: unsigned(1) for k in STATUS_BITS})


def _pack_lanes(values, bits):
    r = 0
    for i, x in enumerate(values):
        r |= (int(x) & ((1 << bits) - 1)) << (i * bits)
    return r


def pack_desc(n, scale_bits, tensor_scale_bits=0, partial=False):
    if not 0 <= n < (1 << N_BITS):
        raise ValueError(f"n must be in 0..{(1 << N_BITS) - 1}, got {n}")
    return (n | (int(scale_bits) & 0xFFFFFFFF) << N_BITS
            | (int(tensor_scale_bits) & 0xFFFFFFFF) << (N_BITS + 32)
            | int(bool(partial)) << (N_BITS + 64))


def pack_q_beats(q_codes, lanes):
    """[G, d] bf16 codes -> list of q payload ints (head-major)."""
    flat = np.asarray(q_codes).reshape(-1)
    return [_pack_lanes(flat[i:i + lanes], 16) for i in range(0, flat.size, lanes)]


def pack_kv_beats(k_codes, v_codes, kv_dtype, lanes, k_scales=None, v_scales=None,
                  terminator=False):
    """Token arrays [n, d] -> list of kv payload ints (K beats then V beats per token);
    ``k_scales``/``v_scales`` [n, d/16] E4M3 codes (nvfp4; None: zero scale fields), each
    beat carrying the codes of the micro-blocks it covers; ``last`` is set on the final beat.
    With no tokens and ``terminator`` a single zero beat with ``last`` is produced (how a
    producer signals an empty stream)."""
    bits = KV_CODE_BITS[kv_dtype]
    scale_at = bits * lanes
    last_at = scale_at + kv_scale_bits(lanes)
    blocks = kv_scale_bits(lanes) // 8
    k_codes = np.asarray(k_codes)
    v_codes = np.asarray(v_codes)
    n, d = k_codes.shape if k_codes.ndim == 2 else (0, 0)
    beats = []
    for t in range(n):
        for codes, scales in ((k_codes[t], k_scales), (v_codes[t], v_scales)):
            for b in range(0, d, lanes):
                sc = 0 if scales is None else _pack_lanes(
                    np.asarray(scales)[t][b // NVFP4_BLOCK:][:blocks], 8)
                beats.append(_pack_lanes(codes[b:b + lanes], bits) | sc << scale_at)
    if not beats and terminator:
        beats.append(0)
    if beats:
        beats[-1] |= 1 << last_at
    return beats


def unpack_out_beat(word, lanes):
    """out payload int -> (list of fp32 bit patterns, last)."""
    return [(word >> (32 * i)) & 0xFFFFFFFF for i in range(lanes)], (word >> (32 * lanes)) & 1


def unpack_status(word):
    return {k: bool((word >> i) & 1) for i, k in enumerate(STATUS_BITS)}
