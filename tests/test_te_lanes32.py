# amaranth: UnusedElaboratable=no
"""TE decode engine at 32 lanes: a K/V beat spans two NVFP4 micro-blocks, so its ``scale`` field
carries two E4M3 codes (``rtl.te.layouts.kv_scale_bits``), code ``j`` for lanes ``16j..16j+15``.

KVDequant at 32 lanes against the model with two different block scales per beat; the
unchanged TEEngine at 32 lanes bit for bit against the golden model for every kv dtype (also
under input idles and output backpressure); ``pack_kv_beats`` puts both codes and ``last``
where the layout says; layouts at ``lanes <= 16`` keep the 8-bit scale field."""

from __future__ import annotations

import numpy as np
import pytest


from tricut.models import te as M
from tricut.models.config import KV_DTYPES
from tricut.rtl.te.dequant import KVDequant
from tricut.rtl.te.engine import TEEngine
from tricut.rtl.te.layouts import kv_layout, kv_scale_bits, pack_kv_beats
from tricut.sim.harness.te import make_vector, simulate_amaranth
from tricut.sim.harness.te_stimulus import comb_run

F32 = np.float32


def _word(values, bits):
    return sum((int(x) & ((1 << bits) - 1)) << (bits * i) for i, x in enumerate(values))


# ----------------------------------------------------------------------------------------------
# layouts
# ----------------------------------------------------------------------------------------------
def test_32_in_lanes():
    assert 32 in M.LANES
    M.validate_params(64, 2, 32, "nvfp4")


@pytest.mark.parametrize("kv_dtype", KV_DTYPES)
def test_layouts_up_to_16_lanes_unchanged(kv_dtype):
    bits = M.KV_CODE_BITS[kv_dtype]
    for lanes in (2, 4, 8, 16):
        lay = kv_layout(lanes, kv_dtype)
        assert kv_scale_bits(lanes) == 8
        assert lay.members["scale"].width == 8
        assert lay.size == bits * lanes + 8 + 1
        assert lay["scale"].offset == bits * lanes and lay["last"].offset == bits * lanes + 8
        assert KVDequant(lanes, kv_dtype).scale.shape().width == 8


@pytest.mark.parametrize("kv_dtype", KV_DTYPES)
def test_layout_at_32_lanes_has_two_scale_codes(kv_dtype):
    bits = M.KV_CODE_BITS[kv_dtype]
    lay = kv_layout(32, kv_dtype)
    assert kv_scale_bits(32) == 16
    assert lay.members["scale"].width == 16
    assert lay["scale"].offset == 32 * bits and lay["last"].offset == 32 * bits + 16
    assert lay.size == 32 * bits + 17
    assert KVDequant(32, kv_dtype).scale.shape().width == 16
    assert TEEngine(head_dim=64, G=2, lanes=32, kv_dtype=kv_dtype).kv.payload.shape() == lay


def test_pack_kv_beats_32_lanes_scale_codes_and_last():
    rng = np.random.default_rng(3200)
    n, d, lanes, bits = 3, 128, 32, 4
    k = rng.integers(0, 16, (n, d))
    v = rng.integers(0, 16, (n, d))
    ks = rng.integers(0, 256, (n, d // 16))
    vs = rng.integers(0, 256, (n, d // 16))
    beats = pack_kv_beats(k, v, "nvfp4", lanes, ks, vs)
    dk = d // lanes
    assert len(beats) == n * 2 * dk
    sc_at, last_at = bits * lanes, bits * lanes + 16
    for t in range(n):
        for kind, (codes, scales) in enumerate(((k, ks), (v, vs))):
            for b in range(dk):
                w = beats[(2 * t + kind) * dk + b]
                assert w & ((1 << sc_at) - 1) == _word(codes[t, 32 * b:32 * b + 32], bits)
                assert (w >> sc_at) & 0xFF == scales[t, 2 * b]            # lanes 0..15
                assert (w >> (sc_at + 8)) & 0xFF == scales[t, 2 * b + 1]  # lanes 16..31
                assert (w >> last_at) == int(t == n - 1 and kind == 1 and b == dk - 1)
    # the packed word decodes through the layout view the RTL uses
    lay = kv_layout(lanes, "nvfp4")
    assert beats[-1] < (1 << lay.size) and beats[-1] >> last_at == 1
    # empty stream with terminator: one zero beat with last
    assert pack_kv_beats(np.zeros((0, d)), np.zeros((0, d)), "nvfp4", lanes,
                         terminator=True) == [1 << last_at]


@pytest.mark.parametrize("lanes", [2, 4, 8, 16])
def test_pack_kv_beats_up_to_16_lanes_unchanged(lanes):
    """The old layout: one 8-bit code (of micro-block ``b // 16``), ``last`` 8 bits above."""
    rng = np.random.default_rng(3300 + lanes)
    n, d, bits = 2, 64, 4
    k = rng.integers(0, 16, (n, d))
    v = rng.integers(0, 16, (n, d))
    ks = rng.integers(0, 256, (n, d // 16))
    vs = rng.integers(0, 256, (n, d // 16))
    exp = []
    for t in range(n):
        for codes, scales in ((k[t], ks[t]), (v[t], vs[t])):
            for b in range(0, d, lanes):
                exp.append(_word(codes[b:b + lanes], bits) | int(scales[b // 16]) << (bits * lanes))
    exp[-1] |= 1 << (bits * lanes + 8)
    assert pack_kv_beats(k, v, "nvfp4", lanes, ks, vs) == exp


# ----------------------------------------------------------------------------------------------
# KVDequant at 32 lanes
# ----------------------------------------------------------------------------------------------
def test_dequant_nvfp4_32_lanes_two_block_scales():
    rng = np.random.default_rng(3201)
    L, nb = 32, 300
    codes = rng.integers(0, 16, (nb, L))
    scales = rng.integers(0, 0x7F, (nb, 2))                 # finite E4M3 codes, both signs
    scales |= rng.integers(0, 2, (nb, 2)) << 7
    scales[:, 1] = np.where(scales[:, 1] == scales[:, 0], scales[:, 0] ^ 0x08, scales[:, 1])
    scales[:4] = [[0x7F, 0x38], [0x38, 0xFF], [0, 1], [0x7E, 0x80]]   # NaN in one block, zeros
    tss = M.f2b((F32(2.0) ** rng.uniform(-20, 5, nb)).astype(F32))
    assert np.all(scales[:, 0] != scales[:, 1])
    dut = KVDequant(L, "nvfp4")
    words = [_word(row, 4) for row in codes]
    swords = [int(s0) | int(s1) << 8 for s0, s1 in scales]
    got = comb_run(dut, [dut.codes.as_value(), dut.scale, dut.tensor_scale],
                   [dut.values.as_value(), dut.nonfinite], [words, swords, tss])
    for row, sc, ts, (vals, nf) in zip(codes, scales, tss, got):
        exp = M.dequant_nvfp4(row, sc, ts)
        gotv = [(vals >> (32 * i)) & 0xFFFFFFFF for i in range(L)]
        assert gotv == [int(x) for x in exp], (row, sc, [hex(x) for x in gotv])
        assert nf == int(any(((int(x) >> 23) & 0xFF) == 255 for x in exp))


@pytest.mark.parametrize("kv_dtype", ["bf16", "fp8"])
def test_dequant_32_lanes_ignores_scale(kv_dtype):
    rng = np.random.default_rng(3202)
    L, nb, bits = 32, 40, M.KV_CODE_BITS[kv_dtype]
    codes = rng.integers(0, 1 << bits, (nb, L))
    dut = KVDequant(L, kv_dtype)
    got = comb_run(dut, [dut.codes.as_value(), dut.scale, dut.tensor_scale],
                   [dut.values.as_value()],
                   [[_word(r, bits) for r in codes], rng.integers(0, 1 << 16, nb),
                    rng.integers(0, 1 << 32, nb)])
    for row, (vals,) in zip(codes, got):
        exp = M.dequant_kv(row, kv_dtype)
        assert [(vals >> (32 * i)) & 0xFFFFFFFF for i in range(L)] == [int(x) for x in exp]


# ----------------------------------------------------------------------------------------------
# TEEngine at 32 lanes, bit for bit against the golden model
# ----------------------------------------------------------------------------------------------
def _vector(rng, kv_dtype, n, G=2, d=64, partial=False):
    q = rng.standard_normal((G, d)).astype(F32)
    k = rng.standard_normal((n, d)).astype(F32)
    v = rng.standard_normal((n, d)).astype(F32)
    for hi in range(16, d, 32):    # NVFP4: the two micro-blocks of a beat get different scales
        k[:, hi:hi + 16] *= 50.0
        v[:, hi:hi + 16] *= 0.02
    return make_vector(q, k, v, kv_dtype, lanes=32, partial=partial)


def _check(vecs, res):
    assert len(res) == len(vecs)
    for i, (vec, r) in enumerate(zip(vecs, res)):
        gold = vec.golden()
        assert r.out_beats == vec.expected_out_beats(gold), f"step {i}: out beats differ"
        assert r.status == gold.status, f"step {i}: status {r.status} != {gold.status}"


@pytest.mark.parametrize("kv_dtype", KV_DTYPES)
def test_engine_32_lanes_matches_model(kv_dtype):
    rng = np.random.default_rng(3210 + M.KV_CODE_BITS[kv_dtype])
    vecs = [_vector(rng, kv_dtype, 4)]
    if kv_dtype == "nvfp4":
        for sc in (vecs[0].k_scales, vecs[0].v_scales):
            sc = sc.reshape(4, 2, 2)                # [token, beat, micro-block]
            assert np.all(sc[..., 0] != sc[..., 1])
    res = simulate_amaranth(vecs, seed=1)
    _check(vecs, res)
    assert res[0].cycles == M.te_cycles(4, 64, 2, 32)
    assert res[0].status == {k: False for k in M.STATUS_BITS}


@pytest.mark.parametrize("kv_dtype", KV_DTYPES)
def test_engine_32_lanes_idle_backpressure(kv_dtype):
    rng = np.random.default_rng(3220 + M.KV_CODE_BITS[kv_dtype])
    vecs = [_vector(rng, kv_dtype, 3), _vector(rng, kv_dtype, 3, partial=True)]
    res = simulate_amaranth(vecs, idle=0.3, backpressure=0.3, seed=5)
    _check(vecs, res)
