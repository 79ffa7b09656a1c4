"""The K/V codes of a tile run and their HBM image: :class:`KV` holds the codes of every
(request, layer, kv_head) region, :func:`make_kv` draws random ones, :func:`kv_image` lays them
out as the behavioural HBM's words (:func:`tricut.rtl.tile.attention_layouts.kv_addr`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tricut.models import formats as F
from tricut.models import te as M
from tricut.rtl.te.layouts import pack_kv_beats
from tricut.rtl.tile.attention_layouts import kv_addr, kv_image_words, kv_word_bits

from .params import with_defaults

__all__ = ["KV", "make_kv", "kv_image"]


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


def kv_image(kv: KV, params=None):
    """The HBM words of ``kv``: per region, per token its ``Dk`` K beats then ``Dk`` V beats,
    each a TE ``kv`` payload without ``last``, at :func:`kv_addr`."""
    p = with_defaults(params)
    geo = dict(num_layers=p["num_layers"], num_kv_heads=p["num_kv_heads"], max_ctx=p["max_ctx"],
               head_dim=p["head_dim"], lanes=p["lanes"])
    mask = (1 << kv_word_bits(p["lanes"], p["kv_dtype"])) - 1
    words = [0] * kv_image_words(p["num_requests"], p["num_layers"], p["num_kv_heads"],
                                 p["max_ctx"], p["head_dim"], p["lanes"])
    for r in range(p["num_requests"]):
        for layer in range(p["num_layers"]):
            for h in range(p["num_kv_heads"]):
                sc = (lambda a: None) if kv.ks is None else (lambda a: a[r, layer, h])
                beats = pack_kv_beats(kv.k[r, layer, h], kv.v[r, layer, h], p["kv_dtype"],
                                      p["lanes"], sc(kv.ks), sc(kv.vs))
                a = kv_addr(r, layer, h, 0, **geo)
                words[a:a + len(beats)] = [b & mask for b in beats]
    return words
