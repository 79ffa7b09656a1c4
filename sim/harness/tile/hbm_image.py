"""The K/V codes of a tile run and their HBM image: :class:`KV` holds the codes of every
(request, layer, kv_head) region, :func:`make_kv` draws random ones, :func:`kv_image` lays them
out as the behavioural HBM's words (:func:`tricut.rtl.tile.attention_layouts.kv_addr`), each
token's words packed by :func:`kv_words` (the TE's ``kv`` beats of
:func:`tricut.rtl.te.layouts.pack_kv_beats`, in numpy)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tricut.models import formats as F
from tricut.models import te as M
from tricut.models.te import KV_CODE_BITS
from tricut.rtl.te.layouts import kv_scale_bits
from tricut.rtl.tile.attention_layouts import kv_addr, kv_image_words

from .params import with_defaults

__all__ = ["KV", "make_kv", "kv_image", "kv_words"]


@dataclass
class KV:
    """K/V codes of the image: ``k[req][layer][head]`` is ``[max_ctx, d]`` codes (and
    ``ks``/``vs`` the NVFP4 block scales, ``ts_bits`` the tensor scale)."""
    k: np.ndarray            # [R, L, H, max_ctx, d]
    v: np.ndarray
    ks: np.ndarray | None = None     # [R, L, H, max_ctx, d/16]
    vs: np.ndarray | None = None
    ts_bits: int = 0


def make_kv(rng, params=None):
    """Random N(0, 1) K/V, quantised to the tile's format (NVFP4: one tensor scale, 1/2688 of
    the image's amax)."""
    p = with_defaults(params)
    shape = (p["num_requests"], p["num_layers"], p["num_kv_heads"], p["max_ctx"], p["head_dim"])
    k = rng.standard_normal(shape).astype(np.float32)
    v = rng.standard_normal(shape).astype(np.float32)
    dt = p["kv_dtype"]
    if dt == "bf16":
        return KV(F.bf16_encode(k), F.bf16_encode(v))
    if dt == "fp8":
        return KV(F.fp8_e4m3_encode(k, saturate=True), F.fp8_e4m3_encode(v, saturate=True))
    ts = np.float32(max(np.abs(k).max(), np.abs(v).max())) / np.float32(2688.0)
    d = p["head_dim"]
    tk = F.nvfp4_quantize(k.reshape(-1, d), tensor_scale=ts)
    tv = F.nvfp4_quantize(v.reshape(-1, d), tensor_scale=ts)
    return KV(F.unpack_fp4(tk.packed).reshape(shape), F.unpack_fp4(tv.packed).reshape(shape),
              np.asarray(tk.block_scales).reshape(shape[:-1] + (d // 16,)),
              np.asarray(tv.block_scales).reshape(shape[:-1] + (d // 16,)),
              int(M.f2b(tk.tensor_scale)))


def _lane_bytes(codes, bits, lanes):
    """``[n, d]`` codes -> ``[n, d/lanes, bits*lanes/8]`` bytes, lane 0 in the low bits."""
    n, d = codes.shape
    c = np.asarray(codes, dtype=np.int64) & ((1 << bits) - 1)
    if bits == 16:
        return c.astype("<u2").view(np.uint8).reshape(n, d // lanes, 2 * lanes)
    if bits == 8:
        return c.astype(np.uint8).reshape(n, d // lanes, lanes)
    pairs = c.reshape(n, d // 2, 2)
    return (pairs[..., 0] | pairs[..., 1] << 4).astype(np.uint8).reshape(n, d // lanes, lanes // 2)


def _scale_bytes(scales, n, d, lanes):
    """The ``scale`` field of each beat (``[n, d/lanes, blocks]`` bytes): the E4M3 codes of
    the NVFP4 micro-blocks from the beat's first one (zeros past the last; none: zeros)."""
    blocks = kv_scale_bits(lanes) // 8
    if scales is None:
        return np.zeros((n, d // lanes, blocks), np.uint8)
    sc = np.asarray(scales, dtype=np.int64) & 0xFF
    idx = (np.arange(d // lanes) * lanes // 16)[:, None] + np.arange(blocks)[None, :]
    picked = sc[:, np.minimum(idx, sc.shape[1] - 1)]
    return np.where(idx < sc.shape[1], picked, 0).astype(np.uint8)


def kv_words(k_codes, v_codes, kv_dtype, lanes, k_scales=None, v_scales=None):
    """Tokens ``[n, d]`` -> their HBM words: per token ``d/lanes`` K beats then as many V
    beats, each :func:`~tricut.rtl.te.layouts.pack_kv_beats`'s beat without ``last``."""
    bits = KV_CODE_BITS[kv_dtype]
    k_codes, v_codes = np.asarray(k_codes), np.asarray(v_codes)
    n, d = k_codes.shape
    if n == 0:
        return []
    beats = np.stack([np.concatenate([_lane_bytes(c, bits, lanes), _scale_bytes(sc, n, d, lanes)],
                                     axis=2)
                      for c, sc in ((k_codes, k_scales), (v_codes, v_scales))], axis=1)
    width = beats.shape[-1]
    buf = np.ascontiguousarray(beats).tobytes()
    return [int.from_bytes(buf[i:i + width], "little") for i in range(0, len(buf), width)]


def kv_image(kv: KV, params=None):
    """The HBM words of ``kv``: per region, per token its ``Dk`` K beats then ``Dk`` V beats,
    each a TE ``kv`` payload without ``last``, at :func:`kv_addr`."""
    p = with_defaults(params)
    geo = dict(num_layers=p["num_layers"], num_kv_heads=p["num_kv_heads"], max_ctx=p["max_ctx"],
               head_dim=p["head_dim"], lanes=p["lanes"])
    words = [0] * kv_image_words(p["num_requests"], p["num_layers"], p["num_kv_heads"],
                                 p["max_ctx"], p["head_dim"], p["lanes"])
    for r in range(p["num_requests"]):
        for layer in range(p["num_layers"]):
            for h in range(p["num_kv_heads"]):
                sc = (lambda a: None) if kv.ks is None else (lambda a: a[r, layer, h])
                beats = kv_words(kv.k[r, layer, h], kv.v[r, layer, h], p["kv_dtype"],
                                 p["lanes"], sc(kv.ks), sc(kv.vs))
                a = kv_addr(r, layer, h, 0, **geo)
                words[a:a + len(beats)] = beats
    return words
