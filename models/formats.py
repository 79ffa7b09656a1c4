"""Bit-exact number formats for KV caches: bf16, FP8 E4M3 (E4M3FN), E2M1 (FP4), UE4M3, NVFP4.

Everything here is pure numpy and vectorised (whole arrays at once). Encoders take float32
arrays (float16 and ``ml_dtypes.bfloat16`` are accepted too, because they widen to float32
exactly; float64 is refused because narrowing it first would round twice). Decoders take
integer code arrays of exactly the documented unsigned dtype and return float32.

All conversions round to nearest, ties to even (RNE). The bit layouts, NaN/saturation rules
and the NVFP4 recipe (with the exact order of float32 operations) are documented in
``docs/formats.md``.
"""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np

from .config import KV_DTYPES

__all__ = [
    "BF16_MAX",
    "E4M3_MAX",
    "E4M3_MIN_NORMAL",
    "E2M1_MAX",
    "NVFP4_BLOCK",
    "KV_DTYPES",
    "bf16_encode",
    "bf16_decode",
    "fp8_e4m3_encode",
    "fp8_e4m3_decode",
    "ue4m3_encode",
    "ue4m3_decode",
    "e2m1_encode",
    "e2m1_decode",
    "pack_fp4",
    "unpack_fp4",
    "NVFP4Tensor",
    "nvfp4_quantize",
    "nvfp4_dequantize",
    "quantize_dequantize",
]

BF16_MAX = float(np.float32(3.3895313892515355e38))  # 0x7F7F
E4M3_MAX = 448.0  # S.1111.110
E4M3_MIN_NORMAL = 2.0**-6  # torch.finfo(torch.float8_e4m3fn).tiny; torchao's E4M3_EPS
E2M1_MAX = 6.0
NVFP4_BLOCK = 16

_F32 = np.float32
_E4M3_NAN = 0x7F  # S.1111.111 (sign bit ORed in)
_E4M3_MAX_CODE = 0x7E
_E2M1_MAX_CODE = 0x7
# float32 constants used by the NVFP4 recipe, kept as float32 so every operation is float32.
_F32_E4M3_MAX = _F32(E4M3_MAX)
_F32_E4M3_EPS = _F32(E4M3_MIN_NORMAL)
_F32_E2M1_MAX = _F32(E2M1_MAX)
_F32_TENSOR_DIV = _F32(E4M3_MAX * E2M1_MAX)  # 2688.0, exact in float32

_LOSSLESS_TO_F32 = (np.dtype(np.float32), np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16))


# ----------------------------------------------------------------------------------------------
# input validation helpers
# ----------------------------------------------------------------------------------------------
def _as_f32(x, name: str = "x") -> np.ndarray:
    arr = np.asarray(x)
    if arr.dtype not in _LOSSLESS_TO_F32:
        raise ValueError(
            f"{name} must be a float32 array (float16/bfloat16 also accepted), "
            f"got dtype {arr.dtype}"
        )
    return arr.astype(np.float32, copy=False)


def _as_codes(codes, dtype, name: str) -> np.ndarray:
    arr = np.asarray(codes)
    if arr.dtype != np.dtype(dtype):
        raise ValueError(f"{name} must have dtype {np.dtype(dtype)}, got {arr.dtype}")
    return arr


# ----------------------------------------------------------------------------------------------
# generic RNE minifloat encoder (no inf; used for E4M3FN and E2M1)
# ----------------------------------------------------------------------------------------------
def _minifloat_magnitude_codes(a: np.ndarray, ebits: int, mbits: int, bias: int) -> np.ndarray:
    """Unsaturated RNE code (exponent|mantissa bits, no sign) for finite-or-inf magnitudes.

    ``a`` is a non-negative float32 array without NaN. The result is an int64 array; values above
    the format's largest finite code mean "overflowed" and are handled by the caller.
    """
    del ebits  # the exponent width only matters for the caller's overflow limit
    min_normal_exp = 1 - bias
    # Subnormal range: quantum q = 2**(min_normal_exp - mbits); a/q is an exact float32 scaling
    # (power of two, no overflow because a < 2**min_normal_exp), and np.rint is RNE. The result
    # can be 2**mbits, which is exactly the code of the smallest normal.
    is_sub = a < _F32(2.0**min_normal_exp)
    a_sub = np.where(is_sub, a, _F32(0.0))
    sub = np.rint(a_sub * _F32(2.0 ** (mbits - min_normal_exp))).astype(np.int64)
    # Normal range: RNE on the float32 bit pattern, dropping 23 - mbits mantissa bits. Carries
    # propagate into the exponent field; then re-bias the exponent from 127 to ``bias``.
    u = a.view(np.uint32).astype(np.int64)
    shift = 23 - mbits
    rounded = (u + ((1 << (shift - 1)) - 1) + ((u >> shift) & 1)) >> shift
    norm = rounded - ((127 - bias) << mbits)
    return np.where(is_sub, sub, norm)


def _split_sign(x: np.ndarray):
    bits = x.view(np.uint32)
    sign = (bits >> 31).astype(np.uint8)
    mag = (bits & np.uint32(0x7FFFFFFF)).view(np.float32)
    return sign, mag


# ----------------------------------------------------------------------------------------------
# bf16
# ----------------------------------------------------------------------------------------------
def bf16_encode(x) -> np.ndarray:
    """Encode float32 values as bfloat16 bit patterns with round-to-nearest-even.

    Parameters
    ----------
    x : array_like of float32
        Values to encode (float16/bfloat16 accepted; float64 refused).

    Returns
    -------
    numpy.ndarray of uint16
        bf16 codes, same shape. ±inf stays ±inf, finite overflow rounds to ±inf (IEEE RNE),
        every NaN becomes the canonical quiet NaN ``sign|0x7FC0`` (sign kept).
    """
    x = _as_f32(x)
    u = x.view(np.uint32).astype(np.uint64)
    rounded = ((u + np.uint64(0x7FFF) + ((u >> np.uint64(16)) & np.uint64(1))) >> np.uint64(16))
    codes = rounded.astype(np.uint16)
    nan_codes = ((u >> np.uint64(16)) & np.uint64(0x8000)).astype(np.uint16) | np.uint16(0x7FC0)
    return np.where(np.isnan(x), nan_codes, codes).astype(np.uint16)


def bf16_decode(codes) -> np.ndarray:
    """Decode bfloat16 bit patterns to float32 (exact).

    Parameters
    ----------
    codes : numpy.ndarray of uint16
        bf16 bit patterns.

    Returns
    -------
    numpy.ndarray of float32
        The values, bit pattern ``code << 16`` (NaN payloads preserved).
    """
    c = _as_codes(codes, np.uint16, "bf16 codes")
    return (c.astype(np.uint32) << np.uint32(16)).view(np.float32)


# ----------------------------------------------------------------------------------------------
# FP8 E4M3 (E4M3FN) and UE4M3
# ----------------------------------------------------------------------------------------------
def _e4m3_lut() -> np.ndarray:
    c = np.arange(256)
    e = (c >> 3) & 0xF
    m = c & 0x7
    mag = np.where(e == 0, m * 2.0**-9, (8 + m) * np.exp2(e - 10.0))
    val = np.where(c >= 128, -mag, mag)
    val = np.where((c & 0x7F) == 0x7F, np.nan, val)
    return val.astype(np.float32)


def _e2m1_lut() -> np.ndarray:
    mag = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])
    return np.concatenate([mag, -mag]).astype(np.float32)


_E4M3_LUT = _e4m3_lut()
_E2M1_LUT = _e2m1_lut()


def fp8_e4m3_encode(x, saturate: bool) -> np.ndarray:
    """Encode float32 values as OCP FP8 E4M3FN codes with round-to-nearest-even.

    Parameters
    ----------
    x : array_like of float32
        Values to encode (float16/bfloat16 accepted; float64 refused).
    saturate : bool
        True: results beyond ±448 (including ±inf) clamp to ±448 (code 0x7E/0xFE).
        False: values whose RNE result exceeds 448 (``|x| > 464``; 464 itself ties to the even
        448) and ±inf become NaN (0x7F/0xFF), as ``ml_dtypes.float8_e4m3fn`` does.
        NaN always encodes to 0x7F/0xFF, keeping the sign bit.

    Returns
    -------
    numpy.ndarray of uint8
        E4M3 codes, same shape as ``x``.
    """
    if not isinstance(saturate, (bool, np.bool_)):
        raise ValueError(f"saturate must be a bool, got {type(saturate).__name__}")
    x = _as_f32(x)
    sign, mag = _split_sign(x)
    nan = np.isnan(mag)
    mag = np.where(nan, _F32(0.0), mag)
    code = _minifloat_magnitude_codes(mag, ebits=4, mbits=3, bias=7)
    over = code > _E4M3_MAX_CODE
    code = np.where(over, _E4M3_MAX_CODE if saturate else _E4M3_NAN, code)
    code = np.where(nan, _E4M3_NAN, code).astype(np.uint8)
    return code | (sign << np.uint8(7))


def fp8_e4m3_decode(codes) -> np.ndarray:
    """Decode OCP FP8 E4M3FN codes to float32 (exact).

    Parameters
    ----------
    codes : numpy.ndarray of uint8
        E4M3FN codes; 0x7F and 0xFF are NaN, there is no infinity.

    Returns
    -------
    numpy.ndarray of float32
        The values, same shape.
    """
    c = _as_codes(codes, np.uint8, "e4m3 codes")
    return _E4M3_LUT[c]


def ue4m3_encode(x, saturate: bool = True) -> np.ndarray:
    """Encode non-negative float32 values as UE4M3 (E4M3FN with sign bit 0), RNE.

    Parameters
    ----------
    x : array_like of float32
        Non-negative values (``-0.0`` is taken as ``+0.0``); NaN encodes to 0x7F.
    saturate : bool, default True
        Overflow rule, as in :func:`fp8_e4m3_encode`.

    Returns
    -------
    numpy.ndarray of uint8
        Codes in 0..0x7F.

    Raises
    ------
    ValueError
        If any value is negative (< 0).
    """
    x = _as_f32(x)
    if np.any(x < 0):
        raise ValueError(f"ue4m3_encode: {int(np.count_nonzero(x < 0))} negative value(s) in x")
    return fp8_e4m3_encode(x, saturate) & np.uint8(0x7F)


def ue4m3_decode(codes) -> np.ndarray:
    """Decode UE4M3 codes (sign bit must be 0) to float32.

    Parameters
    ----------
    codes : numpy.ndarray of uint8
        Codes in 0..0x7F (0x7F is NaN).

    Returns
    -------
    numpy.ndarray of float32
        The values.

    Raises
    ------
    ValueError
        If a code has its sign bit set.
    """
    c = _as_codes(codes, np.uint8, "ue4m3 codes")
    if np.any(c & np.uint8(0x80)):
        raise ValueError("ue4m3 codes must have the sign bit (0x80) clear")
    return _E4M3_LUT[c]


# ----------------------------------------------------------------------------------------------
# E2M1 (FP4)
# ----------------------------------------------------------------------------------------------
def e2m1_encode(x) -> np.ndarray:
    """Encode float32 values as OCP MX E2M1 (FP4) codes, RNE, saturating to ±6.

    Parameters
    ----------
    x : array_like of float32
        Values to encode (float16/bfloat16 accepted). ±inf saturate to ±6 (as ml_dtypes does).
        ``-0.0`` and negative values that round to zero encode as ``-0`` (code 8).

    Returns
    -------
    numpy.ndarray of uint8
        Codes in 0..15, bit 3 = sign, bits 2..1 = exponent, bit 0 = mantissa.

    Raises
    ------
    ValueError
        If ``x`` contains NaN: E2M1 has no NaN encoding (the NVFP4 quantiser refuses non-finite
        input before it gets here).
    """
    x = _as_f32(x)
    if np.any(np.isnan(x)):
        raise ValueError(
            f"e2m1_encode: x contains {int(np.count_nonzero(np.isnan(x)))} NaN value(s); "
            "E2M1 has no NaN encoding"
        )
    sign, mag = _split_sign(x)
    code = _minifloat_magnitude_codes(mag, ebits=2, mbits=1, bias=1)
    code = np.minimum(code, _E2M1_MAX_CODE).astype(np.uint8)
    return code | (sign << np.uint8(3))


def e2m1_decode(codes) -> np.ndarray:
    """Decode E2M1 (FP4) codes to float32.

    Parameters
    ----------
    codes : numpy.ndarray of uint8
        One code per element, values 0..15 (unpacked; see :func:`unpack_fp4`).

    Returns
    -------
    numpy.ndarray of float32
        Values in ±{0, 0.5, 1, 1.5, 2, 3, 4, 6}.

    Raises
    ------
    ValueError
        If dtype is not uint8 or a code is above 15.
    """
    c = _as_codes(codes, np.uint8, "e2m1 codes")
    if c.size and int(c.max()) > 15:
        raise ValueError(f"e2m1 codes must be in 0..15, got max {int(c.max())}")
    return _E2M1_LUT[c]


def pack_fp4(codes) -> np.ndarray:
    """Pack pairs of 4-bit codes into bytes along the last axis (even index -> low nibble).

    Parameters
    ----------
    codes : numpy.ndarray of uint8, shape (..., n)
        Codes 0..15; ``n`` must be even.

    Returns
    -------
    numpy.ndarray of uint8, shape (..., n // 2)
        ``packed[..., i] = codes[..., 2*i] | codes[..., 2*i + 1] << 4``.
    """
    c = _as_codes(codes, np.uint8, "fp4 codes")
    if c.ndim == 0 or c.shape[-1] % 2:
        raise ValueError(f"pack_fp4: last axis must be even, got shape {c.shape}")
    if c.size and int(c.max()) > 15:
        raise ValueError(f"pack_fp4: codes must be in 0..15, got max {int(c.max())}")
    return (c[..., 0::2] | (c[..., 1::2] << np.uint8(4))).astype(np.uint8)


def unpack_fp4(packed) -> np.ndarray:
    """Unpack bytes into pairs of 4-bit codes along the last axis (low nibble first).

    Parameters
    ----------
    packed : numpy.ndarray of uint8, shape (..., m)
        Packed codes as produced by :func:`pack_fp4`.

    Returns
    -------
    numpy.ndarray of uint8, shape (..., 2 * m)
        ``codes[..., 2*i] = packed[..., i] & 0xF``,
        ``codes[..., 2*i + 1] = packed[..., i] >> 4``.
    """
    p = _as_codes(packed, np.uint8, "packed fp4")
    if p.ndim == 0:
        raise ValueError("unpack_fp4: packed must have at least one axis, got a 0-d array")
    out = np.stack([p & np.uint8(0xF), p >> np.uint8(4)], axis=-1)
    return out.reshape(*p.shape[:-1], 2 * p.shape[-1])


# ----------------------------------------------------------------------------------------------
# NVFP4
# ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class NVFP4Tensor:
    """An NVFP4-quantised tensor: packed E2M1 data, E4M3 block scales, FP32 tensor scale.

    Attributes
    ----------
    packed : numpy.ndarray of uint8, shape (..., n // 2)
        E2M1 codes, two per byte, even element in the low nibble.
    block_scales : numpy.ndarray of uint8, shape (..., n // 16)
        E4M3 codes (sign bit 0, i.e. UE4M3) of the per-16-element block scales.
    tensor_scale : numpy.float32
        Per-tensor FP32 scale.
    shape : tuple of int
        Shape of the original tensor ``(..., n)``.
    """

    packed: np.ndarray
    block_scales: np.ndarray
    tensor_scale: np.float32
    shape: tuple


def _check_nvfp4_shape(shape, what: str) -> None:
    if len(shape) == 0 or shape[-1] % NVFP4_BLOCK:
        raise ValueError(
            f"{what}: last axis must be a multiple of {NVFP4_BLOCK}, got shape {tuple(shape)}"
        )


def nvfp4_quantize(x, tensor_scale=None) -> NVFP4Tensor:
    """Quantise to NVFP4 following torchao's two-level ``_nvfp4_quantize`` recipe.

    Parameters
    ----------
    x : array_like of float32, shape (..., n)
        Finite values; ``n`` must be a multiple of 16. Blocks are 16 consecutive elements of the
        last axis.
    tensor_scale : float, optional
        Per-tensor scale (converted to float32; must be finite and > 0). If None it is computed
        as ``float32(amax(|x|)) / float32(2688)`` (2688 = 448 * 6). ``tensor_scale=1.0``
        reproduces torchao's single-level path (``per_tensor_scale=None``) bit for bit.

    Returns
    -------
    NVFP4Tensor
        Packed codes, block-scale codes, tensor scale and shape.

    Raises
    ------
    ValueError
        On a bad shape, dtype, non-finite input, or a bad ``tensor_scale``.

    Notes
    -----
    Per block (all float32): ``bs = amax_block / 6``; ``s = bs / tensor_scale``;
    ``s = clip(s, 2**-6, 448)``; ``code = e4m3_rne(s)``; ``total = tensor_scale * e4m3(code)``;
    ``q = clip(x / total, -6, 6)``; ``e2m1_rne(q)``. Where torchao would compute 0/0 (an
    all-zero tensor, or a zero element whose total scale underflowed to 0) this yields 0
    instead of NaN. See ``docs/formats.md``.
    """
    x = _as_f32(x)
    _check_nvfp4_shape(x.shape, "nvfp4_quantize")
    if not np.all(np.isfinite(x)):
        raise ValueError(
            f"nvfp4_quantize: x contains {int(np.count_nonzero(~np.isfinite(x)))} non-finite "
            "value(s); NVFP4 has no inf/NaN encoding"
        )
    if tensor_scale is None:
        amax = np.max(np.abs(x)) if x.size else _F32(0.0)
        ts = _F32(amax) / _F32_TENSOR_DIV
    else:
        try:
            ts = _F32(tensor_scale)
        except (TypeError, ValueError):
            raise ValueError(f"tensor_scale must be a real number, got {tensor_scale!r}") from None
        if np.ndim(ts) != 0 or not np.isfinite(ts) or not ts > 0:
            raise ValueError(f"tensor_scale must be a finite float32 > 0, got {tensor_scale!r}")
    ts = _F32(ts)

    blocks = x.reshape(*x.shape[:-1], x.shape[-1] // NVFP4_BLOCK, NVFP4_BLOCK)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore", under="ignore"):
        block_amax = np.max(np.abs(blocks), axis=-1, initial=_F32(0.0))
        block_scale = block_amax / _F32_E2M1_MAX
        scaled = block_scale / ts
        scaled = np.where(np.isnan(scaled), _F32(0.0), scaled)  # 0/0 (ts == 0) -> 0
        scaled = np.clip(scaled, _F32_E4M3_EPS, _F32_E4M3_MAX).astype(np.float32)
        bs_codes = fp8_e4m3_encode(scaled, saturate=True)
        total = ts * fp8_e4m3_decode(bs_codes)
        data = blocks / total[..., None]
        data = np.where(np.isnan(data), blocks, data)  # 0/0 -> ±0 (keeps the sign of x)
        data = np.clip(data, -_F32_E2M1_MAX, _F32_E2M1_MAX).astype(np.float32)
    codes = e2m1_encode(data.reshape(x.shape))
    return NVFP4Tensor(
        packed=pack_fp4(codes), block_scales=bs_codes, tensor_scale=ts, shape=tuple(x.shape)
    )


def nvfp4_dequantize(t: NVFP4Tensor) -> np.ndarray:
    """Dequantise an :class:`NVFP4Tensor` to float32.

    Parameters
    ----------
    t : NVFP4Tensor
        As produced by :func:`nvfp4_quantize`.

    Returns
    -------
    numpy.ndarray of float32, shape ``t.shape``
        ``e2m1(code) * (tensor_scale * e4m3(block_scale))``: the product in parentheses is
        rounded to float32 first (torchao's ``get_hp_scales`` order), then multiplied in.

    Raises
    ------
    ValueError
        If the fields' dtypes or shapes are inconsistent with ``t.shape``.
    """
    if not isinstance(t, NVFP4Tensor):
        raise ValueError(f"nvfp4_dequantize expects an NVFP4Tensor, got {type(t).__name__}")
    shape = tuple(int(s) for s in t.shape)
    _check_nvfp4_shape(shape, "nvfp4_dequantize")
    packed = _as_codes(t.packed, np.uint8, "NVFP4Tensor.packed")
    bs = _as_codes(t.block_scales, np.uint8, "NVFP4Tensor.block_scales")
    want_p = (*shape[:-1], shape[-1] // 2)
    want_s = (*shape[:-1], shape[-1] // NVFP4_BLOCK)
    if packed.shape != want_p:
        raise ValueError(f"NVFP4Tensor.packed has shape {packed.shape}, expected {want_p}")
    if bs.shape != want_s:
        raise ValueError(f"NVFP4Tensor.block_scales has shape {bs.shape}, expected {want_s}")
    ts = np.asarray(t.tensor_scale)
    if ts.dtype != np.float32 or ts.ndim != 0:
        raise ValueError(
            f"NVFP4Tensor.tensor_scale must be a float32 scalar, got {ts.dtype} shape {ts.shape}"
        )
    vals = e2m1_decode(unpack_fp4(packed))
    scale = _F32(ts) * ue4m3_decode(bs)
    out = vals.reshape(*want_s, NVFP4_BLOCK) * scale[..., None]
    return out.reshape(shape).astype(np.float32, copy=False)


# ----------------------------------------------------------------------------------------------
# convenience
# ----------------------------------------------------------------------------------------------
def quantize_dequantize(x, kv_dtype: str, *, tensor_scale=None) -> np.ndarray:
    """Return the float32 values the hardware sees after storing ``x`` in a KV cache format.

    Parameters
    ----------
    x : array_like of float32
        Values to store.
    kv_dtype : {"bf16", "fp8", "nvfp4"}
        Storage format. "fp8" is E4M3FN with *saturating* encode (how a KV cache is written);
        "nvfp4" needs the last axis to be a multiple of 16.
    tensor_scale : float, optional
        NVFP4 only: per-tensor scale passed to :func:`nvfp4_quantize` (None = from amax).

    Returns
    -------
    numpy.ndarray of float32
        Dequantised values, same shape as ``x``.

    Raises
    ------
    ValueError
        For an unknown ``kv_dtype`` or invalid ``x``.
    """
    if kv_dtype not in KV_DTYPES:
        raise ValueError(f"unknown kv_dtype {kv_dtype!r}; expected one of {KV_DTYPES}")
    if tensor_scale is not None and kv_dtype != "nvfp4":
        raise ValueError(f"tensor_scale only applies to kv_dtype 'nvfp4', not {kv_dtype!r}")
    if kv_dtype == "bf16":
        return bf16_decode(bf16_encode(x))
    if kv_dtype == "fp8":
        return fp8_e4m3_decode(fp8_e4m3_encode(x, saturate=True))
    return nvfp4_dequantize(nvfp4_quantize(x, tensor_scale=tensor_scale))
