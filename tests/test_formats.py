"""Bit-exactness tests for tricut.models.formats (bf16, FP8 E4M3FN, E2M1, UE4M3, NVFP4).

References: ml_dtypes (RNE casts) for the element formats, torch's CPU casts as a second
opinion, and an independent torch transcription of the NVFP4 recipe described in
docs/formats.md. Print the NVFP4 error figures quoted in the docs with

    .venv/bin/pytest tests/test_formats.py -q -s -k error_figures
"""

from __future__ import annotations

import re
import warnings

import ml_dtypes
import numpy as np
import pytest
import torch

from tricut.models import formats as F

BF16 = ml_dtypes.bfloat16
E4M3 = ml_dtypes.float8_e4m3fn
E2M1 = ml_dtypes.float4_e2m1fn


# ----------------------------------------------------------------------------------------------
# helpers
# ----------------------------------------------------------------------------------------------
def _same_f32(a: np.ndarray, b: np.ndarray) -> bool:
    """Bit-identical float32 arrays, except that any NaN matches any NaN."""
    a = np.asarray(a)
    b = np.asarray(b)
    assert a.dtype == np.float32 and b.dtype == np.float32, (a.dtype, b.dtype)
    assert a.shape == b.shape
    nan_a, nan_b = np.isnan(a), np.isnan(b)
    if not np.array_equal(nan_a, nan_b):
        return False
    return np.array_equal(a.view(np.uint32)[~nan_a], b.view(np.uint32)[~nan_b])


def _ref_codes(x: np.ndarray, dtype) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # ml_dtypes warns on NaN/overflow casts
        y = np.asarray(x, dtype=np.float32).astype(dtype)
    return y.view(np.uint16 if dtype is BF16 else np.uint8)


def _random_f32(rng: np.random.Generator, n: int, lo_exp: float, hi_exp: float) -> np.ndarray:
    """Random float32 with log-uniform magnitudes in [2**lo_exp, 2**hi_exp) and random signs."""
    mag = np.exp2(rng.uniform(lo_exp, hi_exp, n)) * rng.uniform(1.0, 2.0, n)
    sign = np.where(rng.random(n) < 0.5, -1.0, 1.0)
    with np.errstate(over="ignore"):  # the top binade may round to ±inf: fine, also a test input
        return (sign * mag).astype(np.float32)


def _specials() -> np.ndarray:
    return np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan], dtype=np.float32)


def _tie_cases(pos_values: np.ndarray, overflow_mid: float | None) -> np.ndarray:
    """Midpoints between adjacent representable values, ±1 float32 ulp around them, both signs."""
    v = np.unique(np.asarray(pos_values, dtype=np.float64))
    mids = (v[:-1] + v[1:]) / 2.0
    if overflow_mid is not None:
        mids = np.append(mids, overflow_mid)
    m32 = mids.astype(np.float32)
    assert np.array_equal(m32.astype(np.float64), mids), "midpoint not exact in float32"
    pts = np.concatenate(
        [
            m32,
            np.nextafter(m32, np.float32(np.inf)),
            np.nextafter(m32, np.float32(0)),
            v.astype(np.float32),
        ]
    )
    return np.concatenate([pts, -pts, _specials()]).astype(np.float32)


def _random_encode_inputs(seed: int, lo_exp: float, hi_exp: float) -> np.ndarray:
    rng = np.random.default_rng(seed)
    parts = [
        # the target format's own range, including its subnormals
        _random_f32(rng, 600_000, lo_exp, hi_exp),
        _random_f32(rng, 200_000, -150.0, 128.0),  # every float32 binade incl. float32 subnormals
        rng.integers(0, 2**32, 200_000, dtype=np.uint64).astype(np.uint32).view(np.float32),
        _specials(),
    ]
    return np.concatenate(parts)


# ----------------------------------------------------------------------------------------------
# exhaustive decode
# ----------------------------------------------------------------------------------------------
def test_bf16_decode_exhaustive():
    codes = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    got = F.bf16_decode(codes)
    ref = codes.view(BF16).astype(np.float32)
    assert got.dtype == np.float32 and got.shape == (65536,)
    assert _same_f32(got, ref)
    # NaN payloads survive decode bit for bit (decode is just a shift)
    assert np.array_equal(got.view(np.uint32), codes.astype(np.uint32) << 16)


def test_e4m3_decode_exhaustive():
    codes = np.arange(256, dtype=np.uint8)
    got = F.fp8_e4m3_decode(codes)
    assert _same_f32(got, codes.view(E4M3).astype(np.float32))
    assert np.isnan(got[0x7F]) and np.isnan(got[0xFF]) and np.isnan(got).sum() == 2
    assert got[0x7E] == 448.0 and got[0x01] == 2.0**-9 and got[0x08] == 2.0**-6


def test_e2m1_decode_exhaustive():
    codes = np.arange(16, dtype=np.uint8)
    got = F.e2m1_decode(codes)
    assert _same_f32(got, codes.view(E2M1).astype(np.float32))
    assert got.tolist() == [0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6]
    assert np.signbit(got[8])


def test_ue4m3_decode_and_sign_rule():
    codes = np.arange(128, dtype=np.uint8)
    assert _same_f32(F.ue4m3_decode(codes), F.fp8_e4m3_decode(codes))
    with pytest.raises(ValueError, match="sign bit"):
        F.ue4m3_decode(np.array([0x80], dtype=np.uint8))


# ----------------------------------------------------------------------------------------------
# encode vs ml_dtypes: random inputs
# ----------------------------------------------------------------------------------------------
def test_bf16_encode_random_matches_ml_dtypes():
    x = _random_encode_inputs(1, -140.0, 128.0)
    assert np.array_equal(F.bf16_encode(x), _ref_codes(x, BF16))


def test_e4m3_encode_random_matches_ml_dtypes():
    x = _random_encode_inputs(2, -12.0, 10.0)  # subnormals start below 2**-6; max 448 < 2**9
    # non-saturating == ml_dtypes' plain RNE cast (overflow and inf -> NaN, NaN keeps its sign)
    assert np.array_equal(F.fp8_e4m3_encode(x, saturate=False), _ref_codes(x, E4M3))
    # saturating == clip to ±448 first, then the cast (NaN passes np.clip as NaN)
    assert np.array_equal(
        F.fp8_e4m3_encode(x, saturate=True), _ref_codes(np.clip(x, -448.0, 448.0), E4M3)
    )


def test_e4m3_saturating_matches_torch_cpu_cast():
    # torch's CPU float32 -> float8_e4m3fn cast saturates (inf -> ±448) and keeps NaN's sign.
    x = _random_encode_inputs(3, -12.0, 10.0)
    ref = torch.from_numpy(x).to(torch.float8_e4m3fn).view(torch.uint8).numpy()
    assert np.array_equal(F.fp8_e4m3_encode(x, saturate=True), ref)


def test_bf16_encode_matches_torch_on_non_nan():
    x = _random_encode_inputs(4, -140.0, 128.0)
    x = x[~np.isnan(x)]
    ref = torch.from_numpy(x).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    assert np.array_equal(F.bf16_encode(x), ref)


def test_e2m1_encode_random_matches_ml_dtypes():
    x = _random_encode_inputs(5, -4.0, 4.0)
    x = x[~np.isnan(x)]  # our encoder refuses NaN (tested below); ml_dtypes maps it to ∓0
    assert np.array_equal(F.e2m1_encode(x), _ref_codes(x, E2M1))


def test_ue4m3_encode_matches_e4m3_for_non_negative():
    x = np.abs(_random_encode_inputs(6, -12.0, 10.0))
    x = x[~np.isnan(x)]
    assert np.array_equal(F.ue4m3_encode(x), F.fp8_e4m3_encode(x, saturate=True))
    assert F.ue4m3_encode(np.float32([-0.0]))[0] == 0
    with pytest.raises(ValueError, match="negative"):
        F.ue4m3_encode(np.float32([1.0, -2.0]))


# ----------------------------------------------------------------------------------------------
# encode vs ml_dtypes: exact ties (+-1 ulp), boundaries, specials
# ----------------------------------------------------------------------------------------------
def test_bf16_encode_ties():
    codes = np.arange(0x7F80, dtype=np.uint16)  # +0 .. max finite
    vals = codes.view(BF16).astype(np.float64)
    x = _tie_cases(vals, overflow_mid=float(vals[-1]) + 2.0**119)
    assert x.size > 190_000
    assert np.array_equal(F.bf16_encode(x), _ref_codes(x, BF16))


def test_e4m3_encode_ties():
    vals = np.arange(0x7F, dtype=np.uint8).view(E4M3).astype(np.float64)  # +0 .. 448
    x = _tie_cases(vals, overflow_mid=464.0)
    x = np.concatenate([x, np.float32([480.0, -480.0, 1e30, -1e30, 3.4e38])])
    assert np.array_equal(F.fp8_e4m3_encode(x, saturate=False), _ref_codes(x, E4M3))
    assert np.array_equal(
        F.fp8_e4m3_encode(x, saturate=True), _ref_codes(np.clip(x, -448.0, 448.0), E4M3)
    )


def test_e2m1_encode_ties():
    vals = np.arange(8, dtype=np.uint8).view(E2M1).astype(np.float64)  # 0 .. 6
    x = _tie_cases(vals, overflow_mid=7.0)
    x = x[~np.isnan(x)]
    assert np.array_equal(F.e2m1_encode(x), _ref_codes(x, E2M1))


def test_hand_checked_ties_and_specials():
    # bf16: 1 + 2**-8 ties down to even 1.0; 1 + 3*2**-8 ties up to even 1 + 2**-6
    b = F.bf16_encode(np.float32([1 + 2**-8, 1 + 3 * 2**-8, np.inf, -np.inf, np.nan, -np.nan]))
    assert b.tolist() == [0x3F80, 0x3F82, 0x7F80, 0xFF80, 0x7FC0, 0xFFC0]
    assert F.bf16_encode(np.float32([3.4028235e38]))[0] == 0x7F80  # rounds up to inf
    # e4m3: 464 is the tie between 448 (mantissa 110, even) and 480 -> 448, not NaN
    x = np.float32([464.0, np.nextafter(np.float32(464), np.float32(1e9)), -np.inf, np.nan])
    assert F.fp8_e4m3_encode(x, saturate=False).tolist() == [0x7E, 0x7F, 0xFF, 0x7F]
    assert F.fp8_e4m3_encode(x, saturate=True).tolist() == [0x7E, 0x7E, 0xFE, 0x7F]
    # e4m3 subnormals: 2**-10 ties to 0, 3*2**-10 ties to 2*2**-9
    assert F.fp8_e4m3_encode(np.float32([2**-10, 3 * 2**-10, -0.0]), True).tolist() == [0, 2, 0x80]
    # e2m1: 0.25 -> 0, 0.75 -> 1.0, 2.5 -> 2, 3.5 -> 4, 5 -> 4, 7 -> 6 (saturate), inf -> 6
    x = np.float32([0.25, 0.75, 1.25, 2.5, 3.5, 5.0, 7.0, 100.0, np.inf, -np.inf, -0.0, -0.1])
    assert F.e2m1_encode(x).tolist() == [0, 2, 2, 4, 6, 6, 7, 7, 7, 15, 8, 8]


def test_e2m1_encode_rejects_nan():
    with pytest.raises(ValueError, match="NaN"):
        F.e2m1_encode(np.float32([1.0, np.nan]))


def test_encoders_emit_no_warnings():
    x = _random_encode_inputs(7, -150.0, 128.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        F.bf16_encode(x)
        F.fp8_e4m3_encode(x, saturate=True)
        F.fp8_e4m3_encode(x, saturate=False)
        F.e2m1_encode(x[~np.isnan(x)])


# ----------------------------------------------------------------------------------------------
# input validation
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "fn",
    [F.bf16_encode, F.e2m1_encode, lambda x: F.fp8_e4m3_encode(x, True), F.nvfp4_quantize],
)
def test_encoders_reject_non_float32(fn):
    with pytest.raises(ValueError, match="float64"):
        fn(np.zeros(16, dtype=np.float64))
    with pytest.raises(ValueError, match="int32"):
        fn(np.zeros(16, dtype=np.int32))


def test_encoders_accept_lossless_float_inputs():
    x16 = np.array([1.5, -3.0, 1e-5], dtype=np.float16)
    assert np.array_equal(F.bf16_encode(x16), F.bf16_encode(x16.astype(np.float32)))
    xb = np.array([1.5, -3.0], dtype=BF16)
    assert np.array_equal(F.bf16_encode(xb), xb.view(np.uint16))


def test_fp8_saturate_must_be_bool():
    with pytest.raises(ValueError, match="saturate"):
        F.fp8_e4m3_encode(np.float32([1.0]), saturate="yes")


@pytest.mark.parametrize(
    "fn, good",
    [
        (F.bf16_decode, np.uint16),
        (F.fp8_e4m3_decode, np.uint8),
        (F.ue4m3_decode, np.uint8),
        (F.e2m1_decode, np.uint8),
        (F.unpack_fp4, np.uint8),
        (F.pack_fp4, np.uint8),
    ],
)
def test_decoders_reject_wrong_code_dtype(fn, good):
    assert fn(np.zeros(4, dtype=good)) is not None
    bad = np.int64 if good == np.uint8 else np.uint8
    with pytest.raises(ValueError, match=np.dtype(bad).name):
        fn(np.zeros(4, dtype=bad))


def test_e2m1_decode_and_pack_reject_out_of_range_codes():
    with pytest.raises(ValueError, match="0..15"):
        F.e2m1_decode(np.array([3, 16], dtype=np.uint8))
    with pytest.raises(ValueError, match="0..15"):
        F.pack_fp4(np.array([3, 16], dtype=np.uint8))
    with pytest.raises(ValueError, match=r"\(3,\)"):
        F.pack_fp4(np.array([1, 2, 3], dtype=np.uint8))


# ----------------------------------------------------------------------------------------------
# FP4 packing
# ----------------------------------------------------------------------------------------------
def test_pack_fp4_low_nibble_first_hand_example():
    codes = np.array([[0x1, 0x2, 0x3, 0x4], [0xF, 0x0, 0x0, 0xA]], dtype=np.uint8)
    packed = F.pack_fp4(codes)
    assert packed.dtype == np.uint8
    assert packed.tolist() == [[0x21, 0x43], [0x0F, 0xA0]]
    assert np.array_equal(F.unpack_fp4(packed), codes)


def test_pack_unpack_round_trip_random():
    rng = np.random.default_rng(8)
    codes = rng.integers(0, 16, size=(3, 5, 64), dtype=np.uint8)
    packed = F.pack_fp4(codes)
    assert packed.shape == (3, 5, 32)
    assert np.array_equal(F.unpack_fp4(packed), codes)
    p = rng.integers(0, 256, size=(7, 10), dtype=np.uint8)
    assert np.array_equal(F.pack_fp4(F.unpack_fp4(p)), p)


# ----------------------------------------------------------------------------------------------
# NVFP4
# ----------------------------------------------------------------------------------------------
def _ref_nvfp4(x: np.ndarray, tensor_scale=None):
    """Independent torch transcription of the recipe in docs/formats.md (no 0/0 cases)."""
    xt = torch.from_numpy(x).to(torch.float32)
    blocks = xt.reshape(*xt.shape[:-1], -1, 16)
    if tensor_scale is None:
        ts = torch.amax(torch.abs(xt)).to(torch.float32) / (448.0 * 6.0)
    else:
        ts = torch.tensor(tensor_scale, dtype=torch.float32)
    block_scale = torch.amax(torch.abs(blocks), dim=-1) / 6.0
    scaled = torch.clamp(block_scale / ts, min=torch.finfo(torch.float8_e4m3fn).tiny, max=448.0)
    scaled_fp8 = scaled.to(torch.float8_e4m3fn)
    total = ts * scaled_fp8.to(torch.float32)
    data = torch.clamp(blocks / total.unsqueeze(-1), -6.0, 6.0).reshape(xt.shape)
    codes = data.numpy().astype(E2M1).view(np.uint8)
    deq = codes.view(E2M1).astype(np.float32).reshape(blocks.shape) * (
        ts * scaled_fp8.to(torch.float32)
    ).unsqueeze(-1).numpy()
    return scaled_fp8.view(torch.uint8).numpy(), codes, np.float32(ts.item()), deq.reshape(x.shape)


def _half_ulp_e2m1(a: np.ndarray) -> np.ndarray:
    return np.where(a < 2.0, 0.25, np.where(a < 4.0, 0.5, 1.0))


def _check_elementwise_bound(x: np.ndarray, t: F.NVFP4Tensor, deq: np.ndarray) -> None:
    """|x - deq| <= (half e2m1 ulp at q + clip excess) * total scale, plus float32 slack."""
    total = (t.tensor_scale * F.fp8_e4m3_decode(t.block_scales)).astype(np.float64)
    total = np.repeat(total, 16, axis=-1)
    x64 = x.astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.abs(np.where(total > 0, x64 / total, 0.0))
    bound = (_half_ulp_e2m1(np.minimum(q, 6.0)) + np.maximum(q - 6.0, 0.0)) * total
    slack = 2.0**-22 * (np.abs(x64) + np.abs(deq.astype(np.float64))) + 1e-44
    err = np.abs(x64 - deq.astype(np.float64))
    assert np.all(err <= bound + slack), float(np.max(err - bound - slack))


def _nvfp4_round_trip(x: np.ndarray, tensor_scale=None):
    t = F.nvfp4_quantize(x, tensor_scale=tensor_scale)
    deq = F.nvfp4_dequantize(t)
    return t, deq


def _rel_l2(x, deq) -> float:
    x64 = x.astype(np.float64)
    return float(np.linalg.norm(x64 - deq) / np.linalg.norm(x64))


def _kv_like(rng: np.random.Generator, shape) -> np.ndarray:
    """Gaussian with a few outlier channels (x20), the usual shape of K-cache activations."""
    x = rng.standard_normal(shape)
    x[..., rng.choice(shape[-1], 4, replace=False)] *= 20.0
    return x.astype(np.float32)


def _error_figures():
    rng = np.random.default_rng(9)
    cases = {
        "gaussian (256, 1024)": rng.standard_normal((256, 1024)).astype(np.float32),
        "gaussian+outlier channels (256, 1024)": _kv_like(rng, (256, 1024)),
        "uniform[-1,1] (256, 1024)": rng.uniform(-1, 1, (256, 1024)).astype(np.float32),
    }
    out = {}
    for name, x in cases.items():
        t, deq = _nvfp4_round_trip(x)
        blocks = np.abs(x).reshape(*x.shape[:-1], -1, 16)
        bmax = np.repeat(blocks.max(axis=-1), 16, axis=-1)
        out[name] = {
            "rel_l2": _rel_l2(x, deq),
            "max_abs_err_over_block_amax": float(np.max(np.abs(x - deq) / bmax)),
            "mean_abs_err_over_block_amax": float(np.mean(np.abs(x - deq) / bmax)),
        }
    return out


def test_nvfp4_error_figures():
    figs = _error_figures()
    for name, f in figs.items():
        print(f"NVFP4 {name}: " + ", ".join(f"{k}={v:.5f}" for k, v in f.items()))
    # measured (docs/formats.md): rel L2 0.0951, 0.0916, 0.1015; asserted with ~5 % margin
    assert 0.090 < figs["gaussian (256, 1024)"]["rel_l2"] < 0.100
    assert 0.087 < figs["gaussian+outlier channels (256, 1024)"]["rel_l2"] < 0.097
    assert 0.096 < figs["uniform[-1,1] (256, 1024)"]["rel_l2"] < 0.107
    for f in figs.values():
        # worst case: q in [4, 6) (half ulp 1) with the block scale rounded up by e4m3's
        # 2**-4 relative half ulp: err <= total = (amax / 6) * (1 + 2**-4) = 0.17708 * amax
        assert 0.15 < f["max_abs_err_over_block_amax"] <= (1 + 2**-4) / 6 + 1e-6


def test_nvfp4_hand_example_exact_values():
    mags = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6], dtype=np.float32)
    x = np.concatenate([mags, -mags])[None, :]  # one block, codes 0..15 with tensor_scale 1
    x[0, 8] = -0.0
    t = F.nvfp4_quantize(x, tensor_scale=1.0)
    assert t.tensor_scale == np.float32(1.0) and t.tensor_scale.dtype == np.float32
    assert t.block_scales.tolist() == [[0x38]]  # amax 6 / 6 = 1.0 = 0.0111.000
    assert t.packed.tolist() == [[0x10, 0x32, 0x54, 0x76, 0x98, 0xBA, 0xDC, 0xFE]]
    assert t.shape == (1, 16)
    assert _same_f32(F.nvfp4_dequantize(t), x)


@pytest.mark.parametrize("seed", [10, 11])
@pytest.mark.parametrize("tensor_scale", [None, 1.0, 1e-3])
def test_nvfp4_matches_independent_torch_recipe(seed, tensor_scale):
    rng = np.random.default_rng(seed)
    x = _kv_like(rng, (8, 4, 256))
    x[0, 0, :16] = 0.0  # a zero block
    x[1, 1, 16:32] *= 1e-6  # a block whose scaled scale hits the 2**-6 clamp
    t, deq = _nvfp4_round_trip(x, tensor_scale)
    scales, codes, ts, ref_deq = _ref_nvfp4(x, tensor_scale)
    assert t.tensor_scale == ts
    assert np.array_equal(t.block_scales, scales)
    assert np.array_equal(F.unpack_fp4(t.packed), codes)
    assert _same_f32(deq, ref_deq)


def test_nvfp4_tensor_scale_one_is_torchao_single_level():
    # torchao's per_tensor_scale=None path: s = clamp(amax/6, 2**-6, 448); data = x / e4m3(s)
    x = np.random.default_rng(12).standard_normal((4, 64)).astype(np.float32)
    t = F.nvfp4_quantize(x, tensor_scale=1.0)
    bt = torch.from_numpy(x).reshape(4, 4, 16)
    s = torch.clamp(bt.abs().amax(-1) / 6.0, min=2.0**-6, max=448.0).to(torch.float8_e4m3fn)
    data = torch.clamp(bt / s.to(torch.float32).unsqueeze(-1), -6.0, 6.0)
    assert np.array_equal(t.block_scales, s.view(torch.uint8).numpy())
    ref_codes = data.reshape(4, 64).numpy().astype(E2M1).view(np.uint8)
    assert np.array_equal(F.unpack_fp4(t.packed), ref_codes)


@pytest.mark.parametrize("shape", [(64, 512), (2, 3, 4, 128)])
def test_nvfp4_gaussian_elementwise_error_bound(shape):
    x = np.random.default_rng(13).standard_normal(shape).astype(np.float32)
    t, deq = _nvfp4_round_trip(x)
    assert deq.dtype == np.float32 and deq.shape == x.shape
    assert t.packed.shape == (*shape[:-1], shape[-1] // 2)
    assert t.block_scales.shape == (*shape[:-1], shape[-1] // 16)
    assert np.all(t.block_scales < 0x7F)  # UE4M3: sign clear, never NaN
    # dynamic per-tensor scale puts the largest block's scale at (about) 448
    assert t.block_scales.max() == 0x7E
    assert np.float32(np.max(np.abs(x))) / np.float32(2688.0) == t.tensor_scale
    _check_elementwise_bound(x, t, deq)


def test_nvfp4_dequantize_order_of_operations():
    # deq = e2m1 * float32(tensor_scale * e4m3(block)); the other association differs somewhere
    rng = np.random.default_rng(14)
    codes = rng.integers(0, 16, size=(32, 64), dtype=np.uint8)
    bs = rng.integers(1, 0x7F, size=(32, 4), dtype=np.uint8)
    ts = np.float32(0.3)
    t = F.NVFP4Tensor(packed=F.pack_fp4(codes), block_scales=bs, tensor_scale=ts, shape=(32, 64))
    vals = F.e2m1_decode(codes).reshape(32, 4, 16)
    bsf = F.fp8_e4m3_decode(bs)[..., None]
    documented = (vals * (ts * bsf)).reshape(32, 64)
    other = ((vals * bsf) * ts).reshape(32, 64)
    got = F.nvfp4_dequantize(t)
    assert _same_f32(got, documented)
    assert not _same_f32(got, other)


def test_nvfp4_zero_blocks_and_all_zero_tensor():
    x = np.random.default_rng(15).standard_normal((4, 64)).astype(np.float32)
    x[2, 16:32] = 0.0
    x[3, :16] = -0.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        t, deq = _nvfp4_round_trip(x)
        assert t.block_scales[2, 1] == 0x08 and t.block_scales[3, 0] == 0x08  # clamp at 2**-6
        assert np.all(deq[2, 16:32] == 0) and np.all(deq[3, :16] == 0)
        assert np.all(F.unpack_fp4(t.packed)[3, :16] == 8)  # -0 keeps its sign
        z = np.zeros((3, 32), dtype=np.float32)
        tz, dz = _nvfp4_round_trip(z)
    assert tz.tensor_scale == 0.0
    assert np.all(tz.block_scales == 0x08) and np.all(tz.packed == 0)
    assert _same_f32(dz, z)


def _check_against_reference(x, t, deq):
    scales, codes, ts, ref_deq = _ref_nvfp4(x)
    assert t.tensor_scale == ts
    assert np.array_equal(t.block_scales, scales)
    assert np.array_equal(F.unpack_fp4(t.packed), codes)
    assert _same_f32(deq, ref_deq)


def test_nvfp4_huge_dynamic_range():
    # within one block: 1e30 next to 1e-30 (flushes to 0) and moderate values
    a = np.zeros((1, 32), dtype=np.float32)
    a[0, :4] = [1e30, 1e-30, -2.5e29, 3e28]
    ta, da = _nvfp4_round_trip(a)
    _check_elementwise_bound(a, ta, da)
    _check_against_reference(a, ta, da)
    assert ta.block_scales[0, 0] == 0x7E and da[0, 1] == 0.0
    assert abs(da[0, 0] - 1e30) <= 1e30 / 16 and da[0, 2] < 0

    # across blocks: block amax ratio 1e-7 puts the small block's scale on the 2**-6 clamp,
    # and its data (|x| / total < 0.25) then flushes to zero
    b = np.zeros((1, 32), dtype=np.float32)
    b[0, :16] = 1e4
    b[0, 16:32] = np.linspace(-1e-3, 1e-3, 16, dtype=np.float32)
    tb, db = _nvfp4_round_trip(b)
    _check_elementwise_bound(b, tb, db)
    _check_against_reference(b, tb, db)
    assert tb.block_scales.tolist() == [[0x7E, 0x08]] and np.all(db[0, 16:32] == 0.0)

    # the top of the float32 range next to float32 subnormals
    c = np.zeros((1, 32), dtype=np.float32)
    c[0, :16] = 3.0e38
    c[0, 16:20] = [1e-45, -1e-40, 1e-38, 0.0]
    tc, dc = _nvfp4_round_trip(c)
    assert np.all(np.isfinite(dc))
    _check_elementwise_bound(c, tc, dc)
    _check_against_reference(c, tc, dc)
    assert np.all(dc[0, 16:20] == 0.0) and np.allclose(dc[0, :16], 3.0e38, rtol=1 / 16)

    # a tensor made only of tiny (subnormal-range) values still uses the full block-scale range
    d = (np.random.default_rng(17).standard_normal((2, 32)) * 1e-38).astype(np.float32)
    td, dd = _nvfp4_round_trip(d)
    _check_elementwise_bound(d, td, dd)
    _check_against_reference(d, td, dd)


def test_nvfp4_explicit_tensor_scale_saturates_block_scale():
    # tensor_scale too small for the data: block scale clamps at 448, data clamps at ±6
    x = np.full((1, 16), 100.0, dtype=np.float32)
    t, deq = _nvfp4_round_trip(x, tensor_scale=1e-3)
    assert t.block_scales.tolist() == [[0x7E]]
    assert np.all(F.unpack_fp4(t.packed) == 7)
    assert np.allclose(deq, np.float32(6.0) * np.float32(np.float32(1e-3) * np.float32(448.0)))


@pytest.mark.parametrize("shape", [(15,), (4, 17), (2, 8), ()])
def test_nvfp4_shape_errors_name_the_shape(shape):
    with pytest.raises(ValueError, match=r"multiple of 16.*" + re.escape(str(tuple(shape)))):
        F.nvfp4_quantize(np.zeros(shape, dtype=np.float32))


@pytest.mark.parametrize("bad", [np.inf, -np.inf, np.nan])
def test_nvfp4_rejects_non_finite(bad):
    x = np.ones((1, 16), dtype=np.float32)
    x[0, 3] = bad
    with pytest.raises(ValueError, match="non-finite"):
        F.nvfp4_quantize(x)


@pytest.mark.parametrize("ts", [0.0, -1.0, np.nan, np.inf, 1e-50, "x", [1.0, 2.0]])
def test_nvfp4_rejects_bad_tensor_scale(ts):
    with pytest.raises(ValueError, match="tensor_scale"):
        F.nvfp4_quantize(np.ones((1, 16), dtype=np.float32), tensor_scale=ts)


def test_nvfp4_dequantize_validates_fields():
    t = F.nvfp4_quantize(np.ones((2, 32), dtype=np.float32))
    with pytest.raises(ValueError, match="packed has shape"):
        F.nvfp4_dequantize(F.NVFP4Tensor(t.packed[:, :8], t.block_scales, t.tensor_scale, t.shape))
    with pytest.raises(ValueError, match="block_scales has shape"):
        F.nvfp4_dequantize(F.NVFP4Tensor(t.packed, t.block_scales[:, :1], t.tensor_scale, t.shape))
    with pytest.raises(ValueError, match="block_scales must have dtype uint8"):
        F.nvfp4_dequantize(
            F.NVFP4Tensor(t.packed, t.block_scales.astype(np.int16), t.tensor_scale, t.shape)
        )
    with pytest.raises(ValueError, match="tensor_scale must be a float32"):
        F.nvfp4_dequantize(F.NVFP4Tensor(t.packed, t.block_scales, 1.0, t.shape))
    with pytest.raises(ValueError, match=r"multiple of 16.*\(2, 30\)"):
        F.nvfp4_dequantize(F.NVFP4Tensor(t.packed, t.block_scales, t.tensor_scale, (2, 30)))
    with pytest.raises(ValueError, match="NVFP4Tensor"):
        F.nvfp4_dequantize(t.packed)


# ----------------------------------------------------------------------------------------------
# quantize_dequantize
# ----------------------------------------------------------------------------------------------
def test_quantize_dequantize_paths():
    rng = np.random.default_rng(16)
    x = (rng.standard_normal((4, 64)) * 200).astype(np.float32)
    x[0, 0] = 1000.0  # beyond e4m3 max: the KV-cache write saturates
    bf = F.quantize_dequantize(x, "bf16")
    assert _same_f32(bf, x.astype(BF16).astype(np.float32))
    f8 = F.quantize_dequantize(x, "fp8")
    assert _same_f32(f8, np.clip(x, -448, 448).astype(E4M3).astype(np.float32))
    assert f8[0, 0] == 448.0
    nv = F.quantize_dequantize(x, "nvfp4")
    assert _same_f32(nv, F.nvfp4_dequantize(F.nvfp4_quantize(x)))
    nv1 = F.quantize_dequantize(x, "nvfp4", tensor_scale=1.0)
    assert _same_f32(nv1, F.nvfp4_dequantize(F.nvfp4_quantize(x, tensor_scale=1.0)))
    for out in (bf, f8, nv, nv1):
        assert out.dtype == np.float32 and out.shape == x.shape


@pytest.mark.parametrize("bad", ["fp4", "BF16", "int8", None])
def test_quantize_dequantize_bad_dtype(bad):
    with pytest.raises(ValueError, match="kv_dtype"):
        F.quantize_dequantize(np.zeros((1, 16), dtype=np.float32), bad)


def test_quantize_dequantize_tensor_scale_only_for_nvfp4():
    with pytest.raises(ValueError, match="tensor_scale"):
        F.quantize_dequantize(np.zeros((1, 16), dtype=np.float32), "fp8", tensor_scale=1.0)
