"""Bit-exact golden model of the TE decode engine (single-query GQA attention).

Everything here works on float32 *bit patterns* held in ``numpy.int64`` arrays and uses only
integer arithmetic, so the RTL in ``rtl/te/`` can match it bit for bit. The arithmetic is
specified in ``docs/te.md``; in short:

* **fp32 multiply / add** (:func:`fmul`, :func:`fadd`): IEEE binary32 operands, round to
  nearest even. *Flush to zero*: a subnormal input is taken as a zero of the same sign; a
  result is first rounded to a 24-bit significand with an unbounded exponent, and if that
  rounded magnitude is below ``2**-126`` it becomes a zero of the result's sign. Overflow
  gives ±inf. Any NaN input, ``inf - inf`` and ``0 * inf`` give the canonical NaN
  ``0x7FC00000``. Exact cancellation gives ``+0``; ``(-0) + (-0) = -0``.
* **exp2** (:func:`exp2`): for ``x <= 0``: ``u = -x`` truncated to fixed point with 24
  fractional bits, ``u = I + f``; ``2**-f`` from a 1025-entry table ``T[j] = round(2**(30 -
  j/1024))`` with linear interpolation (floor) on the low 14 bits of ``f``; the 30-bit result
  is rounded RNE to 24 bits. ``I >= 126`` gives +0, ``-inf`` gives +0, ±0 gives 1, NaN gives
  NaN; positive inputs are clamped to 0 (never produced by the datapath).
* **reciprocal** (:func:`frecip`): correctly rounded (RNE) ``1/x`` with the same FTZ rule.
* Scores are kept in **log2 units**: ``s2 = (q . k) * c`` with ``c = fmul(scale, log2(e))``,
  so the softmax needs only ``exp2``. The partial ``m`` is therefore in log2 units.
* **ceil_int** (:func:`ceil_int`): the smallest integer ``>= x`` as fp32; ``(-1, 0]`` and
  subnormals give ``+0``; NaN and ±inf pass.

Two engines share this arithmetic (``ENGINES``). ``"serial"`` (``rtl/te/engine.py``) keeps
the running maximum exact. ``"split"`` (``rtl/te/split_engine.py``) keeps an *integer*
running maximum, ``m' = fmax(m, ceil_int(s2))``: then ``alpha = exp2_diff(m, m')`` is
exactly a power of two (or 0, 1, NaN), ``fmul(o, alpha)`` is an exponent subtraction, and the
rescale fuses into the V operation at no cycle cost; and it sums each K beat's products by a
tree first, then the beats in order (one accumulator per head, the tree inside the K lane
array). Nothing else differs.

The engine's per-token order (for every head ``g`` of the GQA group, vectorised here):

1. lane partial sums: ``acc[i] = prod[0*L+i]``, then ``acc[i] = fadd(acc[i], prod[b*L+i])``
   for beats ``b = 1..d/L-1`` where ``prod = fmul(q[g], k)`` elementwise;
2. a fixed pairwise adder tree over the ``L`` lanes: ``((a0+a1)+(a2+a3))+...``
   (split: the tree over each beat's ``L`` products first, then ``s = fadd(s, tree_b)`` over
   the beats in order: one accumulator per head instead of one per lane);
3. ``s2 = fmul(s, c)``; ``m' = fmax(m, s2)`` (split: ``fmax(m, ceil_int(s2))``);
   ``alpha = exp2_diff(m, m')``; ``p = exp2_diff(s2, m')``; ``l = fadd(fmul(l, alpha), p)``;
4. ``o[i] = fadd(fmul(o[i], alpha), fmul(p, v[i]))``.

At the end ``out[i] = fmul(o[i], frecip(l))`` (normalised mode) or ``(o, m, l)`` (partial).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = [
    "QNAN", "POS_INF", "NEG_INF", "ONE", "LOG2E_BITS", "EXP2_TABLE", "EXP2_SEG_BITS",
    "STATUS_BITS", "KV_CODE_BITS", "KV_SIGNIFICAND_BITS", "ENGINES",
    "f2b", "b2f", "fmul", "fadd", "fsub", "fmax", "ceil_int", "exp2", "exp2_diff", "frecip", "ftz",
    "tree_sum", "dequant_bf16", "dequant_e4m3", "dequant_e2m1", "dequant_nvfp4",
    "dequant_kv", "TEResult", "te_decode", "softmax_recurrence", "te_cycles", "te_token_cycles", "te_serial_phases", "te_out_passes", "rescale_events",
    "PIPE_STAGES", "PipeTiming", "te_pipe_timing",
    "expected_rescale_events",
    "reference_f64",
    "combine_partials", "combine_partials_f64", "exp2_max_rel_error", "validate_params",
]

M32 = 0xFFFFFFFF
QNAN = 0x7FC00000
POS_INF = 0x7F800000
NEG_INF = 0xFF800000
ONE = 0x3F800000
SIGN = 0x80000000
#: float32(log2(e)) = 1.44269502162933349609375 (RNE of 1.4426950408889634)
LOG2E_BITS = 0x3FB8AA3B

EXP2_SEG_BITS = 10          # table index bits of the fraction
EXP2_FRAC_BITS = 24         # fixed-point fraction bits of u = -x
EXP2_INTERP_BITS = EXP2_FRAC_BITS - EXP2_SEG_BITS   # 14
EXP2_TABLE = tuple(int(round(2.0 ** (30 - j / (1 << EXP2_SEG_BITS))))
                   for j in range((1 << EXP2_SEG_BITS) + 1))

#: status word bit positions (also the RTL status layout order)
STATUS_BITS = ("nonfinite_in", "nonfinite_out", "empty", "early_end", "too_long")
#: bits per K/V element code on the stream
KV_CODE_BITS = {"bf16": 16, "fp8": 8, "nvfp4": 4}
#: significant bits (hidden one included) of a dequantised K/V element, at most: bf16 8, E4M3
#: 4 (subnormals 3), NVFP4 24 (``e2m1 * tensor_scale * block_scale``); q is bf16: 8
KV_SIGNIFICAND_BITS = {"bf16": 8, "fp8": 4, "nvfp4": 24}

HEAD_DIMS = (64, 128, 256)
LANES = (2, 4, 8, 16, 32)
MAX_G = 16
#: the engine designs (see the module docstring)
ENGINES = ("serial", "split", "pipelined")


def validate_params(head_dim, G, lanes, kv_dtype, engine="serial"):
    """Raise ValueError naming the bad parameter and its value."""
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {ENGINES}, got {engine!r}")
    if head_dim not in HEAD_DIMS:
        raise ValueError(f"head_dim must be one of {HEAD_DIMS}, got {head_dim!r}")
    if not isinstance(G, int) or isinstance(G, bool) or not 1 <= G <= MAX_G:
        raise ValueError(f"G must be an int in 1..{MAX_G}, got {G!r}")
    if lanes not in LANES:
        raise ValueError(f"lanes must be one of {LANES}, got {lanes!r}")
    if kv_dtype not in KV_CODE_BITS:
        raise ValueError(f"kv_dtype must be one of {tuple(KV_CODE_BITS)}, got {kv_dtype!r}")


# ----------------------------------------------------------------------------------------------
# bit-pattern helpers
# ----------------------------------------------------------------------------------------------
def f2b(x) -> np.ndarray:
    """float32 values -> int64 bit patterns."""
    return np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.int64)


def b2f(b) -> np.ndarray:
    """int bit patterns -> float32 values."""
    return (np.asarray(b, dtype=np.int64) & M32).astype(np.uint32).view(np.float32)


def _i64(x):
    return np.asarray(x, dtype=np.int64) & M32


def _fields(a):
    return (a >> 31) & 1, (a >> 23) & 0xFF, a & 0x7FFFFF


def ftz(a):
    """Flush subnormal bit patterns to a zero of the same sign."""
    a = _i64(a)
    return np.where(((a >> 23) & 0xFF) == 0, a & SIGN, a)


def _round_pack(sign, E, M, X):
    """Round ``M * 2**(E - 127 - 23 - X)`` (leading one of M at bit 23+X) to fp32, RNE.

    Unbounded-exponent rounding first, then: ``E >= 255`` -> inf, ``E < 1`` -> signed zero."""
    q = M >> X
    rem = M & ((1 << X) - 1)
    half = 1 << (X - 1)
    up = (rem > half) | ((rem == half) & ((q & 1) == 1))
    q = q + up
    carry = q >> 24
    q = np.where(carry == 1, q >> 1, q)
    E = E + carry
    s = sign << 31
    return np.where(E >= 255, s | POS_INF, np.where(E < 1, s, s | (E << 23) | (q & 0x7FFFFF)))


# ----------------------------------------------------------------------------------------------
# arithmetic primitives (vectorised, int64 bit patterns in and out)
# ----------------------------------------------------------------------------------------------
def fmul(a, b):
    """fp32 multiply, RNE, FTZ (see module docstring)."""
    a, b = np.broadcast_arrays(_i64(a), _i64(b))
    sa, ea, fa = _fields(a)
    sb, eb, fb = _fields(b)
    s = sa ^ sb
    nan_a = (ea == 255) & (fa != 0)
    nan_b = (eb == 255) & (fb != 0)
    inf_a = (ea == 255) & (fa == 0)
    inf_b = (eb == 255) & (fb == 0)
    zero_a = ea == 0
    zero_b = eb == 0
    ma = fa | (1 << 23)
    mb = fb | (1 << 23)
    P = ma * mb                                   # [2**46, 2**48)
    top = (P >> 47) & 1
    P = np.where(top == 1, P, P << 1)             # leading one at bit 47
    E = ea + eb - 127 + top
    r = _round_pack(s, E, P, 24)
    r = np.where(zero_a | zero_b, s << 31, r)
    r = np.where(inf_a | inf_b, (s << 31) | POS_INF, r)
    bad = nan_a | nan_b | (inf_a & zero_b) | (inf_b & zero_a)
    return np.where(bad, QNAN, r)


def _bit_length(x):
    """bit_length of non-negative int64 values below 2**53."""
    _, e = np.frexp(x.astype(np.float64))
    return np.where(x == 0, 0, e).astype(np.int64)


def fadd(a, b):
    """fp32 add, RNE, FTZ (see module docstring). Align with guard/round/sticky bits."""
    a, b = np.broadcast_arrays(_i64(a), _i64(b))
    sa, ea, fa = _fields(a)
    sb, eb, fb = _fields(b)
    nan_a = (ea == 255) & (fa != 0)
    nan_b = (eb == 255) & (fb != 0)
    inf_a = (ea == 255) & (fa == 0)
    inf_b = (eb == 255) & (fb == 0)
    zero_a = ea == 0
    zero_b = eb == 0
    mag_a = np.where(zero_a, 0, a & 0x7FFFFFFF)
    mag_b = np.where(zero_b, 0, b & 0x7FFFFFFF)
    swap = mag_b > mag_a
    sL = np.where(swap, sb, sa)
    eL = np.where(swap, eb, ea)
    fL = np.where(swap, fb, fa)
    sS = np.where(swap, sa, sb)
    eS = np.where(swap, ea, eb)
    fS = np.where(swap, fa, fb)
    ML = (fL | (1 << 23)) << 3                    # 27 bits, leading one at bit 26
    MS = (fS | (1 << 23)) << 3
    d = np.minimum(eL - eS, 27)
    shifted = MS >> d
    sticky = (MS & ((np.int64(1) << d) - 1)) != 0
    MSs = shifted | sticky
    sub = sL != sS
    R = np.where(sub, ML - MSs, ML + MSs)         # < 2**28
    # normalise so that the leading one is at bit 26
    carry = (R >> 27) & 1
    R1 = np.where(carry == 1, (R >> 1) | (R & 1), R)
    bl = _bit_length(R1)
    lsh = np.where(R1 == 0, 0, 27 - bl)           # >= 0 here
    R2 = R1 << lsh
    E = eL + carry - lsh
    r = _round_pack(sL, E, R2, 3)
    r = np.where(R == 0, 0, r)                    # exact cancellation -> +0
    # zeros
    r = np.where(zero_b & ~zero_a, a, r)
    r = np.where(zero_a & ~zero_b, b, r)
    r = np.where(zero_a & zero_b, (sa & sb) << 31, r)
    # specials
    r = np.where(inf_a, a, r)
    r = np.where(inf_b, b, r)
    bad = nan_a | nan_b | (inf_a & inf_b & (sa != sb))
    return np.where(bad, QNAN, r)


def fsub(a, b):
    """``fadd(a, -b)``."""
    return fadd(a, _i64(b) ^ SIGN)


def _key(a):
    """Signed ordering key (zeros and subnormals equal 0)."""
    s, e, _ = _fields(a)
    mag = np.where(e == 0, 0, a & 0x7FFFFFFF)
    return np.where(s == 1, -mag, mag)


def fmax(a, b):
    """``b if b > a else a`` numerically (±0 equal); any NaN -> canonical NaN."""
    a, b = np.broadcast_arrays(_i64(a), _i64(b))
    _, ea, fa = _fields(a)
    _, eb, fb = _fields(b)
    nan = ((ea == 255) & (fa != 0)) | ((eb == 255) & (fb != 0))
    r = np.where(_key(b) > _key(a), b, a)
    return np.where(nan, QNAN, r)


def ceil_int(x):
    """Smallest integer ``>= x`` as fp32 bits. ``(-1, 0]``, ±0 and subnormals give ``+0``; a
    positive value below 1 gives 1; ``|x| >= 2**23`` (already an integer), ±inf and NaN pass."""
    x = _i64(x)
    s, e, _ = _fields(x)
    frac_bits = np.clip(150 - e, 0, 23)
    mask = (np.int64(1) << frac_bits) - 1
    trunc = x & ~mask
    up = (s == 0) & ((x & mask) != 0)
    mid = np.where(up, trunc + (np.int64(1) << frac_bits), trunc)   # a carry bumps E: right
    small = np.where((s == 0) & (e != 0), ONE, 0)
    return np.where(e < 127, small, np.where(e < 150, mid, x))


_T = np.array(EXP2_TABLE, dtype=np.int64)
_D = _T[:-1] - _T[1:]


def exp2(x):
    """2**x for x <= 0 by table + linear interpolation (see module docstring)."""
    x = _i64(x)
    s, e, f = _fields(x)
    nan = (e == 255) & (f != 0)
    mant = f | (1 << 23)
    sh = e - 127 + 1                              # U = |x| * 2**24 = mant * 2**sh
    U = np.where(sh >= 0, mant << np.clip(sh, 0, 7), mant >> np.clip(-sh, 0, 63))
    I = U >> EXP2_FRAC_BITS
    phi = U & ((1 << EXP2_FRAC_BITS) - 1)
    j = phi >> EXP2_INTERP_BITS
    rr = phi & ((1 << EXP2_INTERP_BITS) - 1)
    p = _T[j] - ((_D[np.minimum(j, len(_D) - 1)] * rr) >> EXP2_INTERP_BITS)
    exact = p >= (1 << 30)                        # only when phi == 0
    E = np.where(exact, 127 - I, 126 - I)
    M = np.where(exact, p >> 1, p)                # leading one at bit 29
    r = _round_pack(np.zeros_like(x), E, M, 6)
    big = (e >= 127 + 7) | (I >= 126)             # |x| >= 126 (and -inf) -> +0
    r = np.where(big, 0, r)
    r = np.where(e == 0, ONE, r)                  # ±0 / subnormal
    r = np.where(s == 0, ONE, r)                  # positive: clamped to 0
    return np.where(nan, QNAN, r)


def exp2_diff(x, y):
    """``exp2(fsub(x, y))``, except ``1.0`` when both are -inf (so -inf - -inf is not NaN)."""
    x, y = np.broadcast_arrays(_i64(x), _i64(y))
    return np.where((x == NEG_INF) & (y == NEG_INF), ONE, exp2(fsub(x, y)))


def frecip(x):
    """Correctly rounded (RNE) 1/x with FTZ: ±0 -> ±inf, ±inf -> ±0, NaN -> NaN."""
    x = _i64(x)
    s, e, f = _fields(x)
    m = f | (1 << 23)
    Q = (1 << 48) // m
    R = (1 << 48) % m
    M = (Q << 1) | (R != 0)                       # leading one at bit 25 (f != 0)
    r = _round_pack(s, 253 - e, M, 2)
    exact_E = 254 - e
    r_exact = np.where(exact_E < 1, s << 31, (s << 31) | (exact_E << 23))
    r = np.where(f == 0, r_exact, r)
    r = np.where(e == 0, (s << 31) | POS_INF, r)
    r = np.where((e == 255) & (f == 0), s << 31, r)
    return np.where((e == 255) & (f != 0), QNAN, r)


def tree_sum(acc):
    """Pairwise adder tree over the last axis (length a power of two)."""
    acc = _i64(acc)
    while acc.shape[-1] > 1:
        acc = fadd(acc[..., 0::2], acc[..., 1::2])
    return acc[..., 0]


# ----------------------------------------------------------------------------------------------
# dequantisation (what the datapath's decoders produce)
# ----------------------------------------------------------------------------------------------
def dequant_bf16(codes):
    """bf16 codes -> fp32 bits (``code << 16``), subnormals flushed to signed zero."""
    return ftz(np.asarray(codes, dtype=np.int64) << 16)


def dequant_e4m3(codes):
    """E4M3FN codes -> fp32 bits (exact; 0x7F/0xFF -> canonical NaN)."""
    c = np.asarray(codes, dtype=np.int64) & 0xFF
    s = c >> 7
    e = (c >> 3) & 0xF
    mm = c & 7
    normal = (s << 31) | ((e + 120) << 23) | (mm << 20)
    # subnormal m * 2**-9: m=1 -> 2**-9; m=2,3 -> 2**-8 * 1.x; m=4..7 -> 2**-7 * 1.xx
    sub = np.where(mm >= 4, (120 << 23) | ((mm & 3) << 21),
                   np.where(mm >= 2, (119 << 23) | ((mm & 1) << 22), 118 << 23))
    sub = np.where(mm == 0, 0, sub) | (s << 31)
    r = np.where(e == 0, sub, normal)
    return np.where((c & 0x7F) == 0x7F, QNAN, r)


def dequant_e2m1(codes):
    """E2M1 codes (0..15) -> fp32 bits (exact)."""
    c = np.asarray(codes, dtype=np.int64) & 0xF
    s = c >> 3
    e = (c >> 1) & 3
    mb = c & 1
    r = np.where(e == 0, np.where(mb == 1, 0x3F000000, 0), ((e + 126) << 23) | (mb << 22))
    return r | (s << 31)


def dequant_nvfp4(codes, block_scales, tensor_scale_bits):
    """NVFP4: ``fmul(e2m1(code), fmul(tensor_scale, e4m3(block_scale)))``.

    ``codes`` [..., d] (unpacked 0..15), ``block_scales`` [..., d/16] E4M3 codes."""
    codes = np.asarray(codes)
    bs = dequant_e4m3(block_scales)
    scale = fmul(_i64(tensor_scale_bits), bs)
    scale = np.repeat(scale, 16, axis=-1)
    return fmul(dequant_e2m1(codes), scale)


def dequant_kv(codes, kv_dtype, block_scales=None, tensor_scale_bits=0):
    if kv_dtype == "bf16":
        return dequant_bf16(codes)
    if kv_dtype == "fp8":
        return dequant_e4m3(codes)
    if kv_dtype == "nvfp4":
        return dequant_nvfp4(codes, block_scales, tensor_scale_bits)
    raise ValueError(f"kv_dtype must be one of {tuple(KV_CODE_BITS)}, got {kv_dtype!r}")


def _nonfinite(bits):
    return bool(np.any(((np.asarray(bits) >> 23) & 0xFF) == 255))


# ----------------------------------------------------------------------------------------------
# the engine
# ----------------------------------------------------------------------------------------------
@dataclass
class TEResult:
    """Bit patterns (int64) of the engine's results plus its status flags.

    ``out`` [G, d]: normalised output, or the unnormalised ``o`` in partial mode.
    ``m`` [G] (log2 units) and ``l`` [G]: softmax state (as emitted in partial mode).
    """
    out: np.ndarray
    m: np.ndarray
    l: np.ndarray
    status: dict = field(default_factory=dict)
    cycles: int = 0

    @property
    def status_word(self) -> int:
        return sum(1 << i for i, k in enumerate(STATUS_BITS) if self.status.get(k))

    def out_f32(self):
        return b2f(self.out)


def te_token_cycles(head_dim, G, lanes, engine="serial"):
    """Cycles per token of an unstalled K/V stream: serial ``3*G*Dk`` (K, rescale and V on one
    lane array); split ``(G+1)*Dk`` (each K beat held ``G`` cycles by the K array, each V beat
    taken in one cycle into the V buffer, the V array working behind), ``Dk = head_dim/lanes``.
    Neither depends on the data: the split engine's rescale is fused into its V operation."""
    dk = head_dim // lanes
    return 3 * G * dk if engine == "serial" else (G + 1) * dk


def te_serial_phases(n, head_dim, G, lanes, partial=False):
    """``(I, O)`` of one serial-engine job, unstalled: ``I`` cycles from the descriptor to
    the last K/V beat inclusive (``1 + G*Dk`` for the descriptor and q, then ``n`` tokens of
    :func:`te_token_cycles`), ``O`` output beats (``G*Dk``, ``+ G`` in partial mode);
    :func:`te_cycles` is ``I + O``. The tile's array and timing models build on these."""
    dk = head_dim // lanes
    return 1 + G * dk + n * te_token_cycles(head_dim, G, lanes, "serial"), \
        G * dk + (G if partial else 0)


def te_out_passes(kv_dtype, engine="serial"):
    """Cycles per normalised output beat: 3 for the split engine with bf16 or fp8 K/V (its V
    lanes multiply 24 x 8 bits; ``o * (1/l)`` takes three passes over ``1/l``'s 8-bit
    slices), else 1 (the serial engine's and NVFP4's lanes are full fp32 multipliers)."""
    narrow = KV_SIGNIFICAND_BITS[kv_dtype] <= 8
    return 3 if engine != "serial" and narrow else 1


#: Registered stages (= latency in cycles) of the pipelined engine's arithmetic units: the K
#: lane multipliers (8 x 8 / 8 x 4 for bf16 / E4M3 keys, 8 x 24 for NVFP4), each level of the
#: K adder tree, the scalar ``s * c`` multiplier, the scalar subtractions, ``exp2``, the
#: reciprocal, and the V lane multipliers (24 x 8 / fp32 for NVFP4). The adders that close a
#: loop (the K accumulator, ``l``, ``o``) stay combinational: one fp32 add per cycle.
PIPE_STAGES = {"k_mul": 1, "k_mul_wide": 2, "tree_add": 1, "c_mul": 2, "sub": 1, "exp2": 3,
               "recip": 5, "v_mul": 1, "v_mul_wide": 2}


@dataclass(frozen=True)
class PipeTiming:
    """Latencies of the pipelined engine (``engine="pipelined"``) for one shape, in cycles.

    ``k_mul``/``v_mul``: the lane multipliers' stages; ``tree``: the K tree's levels times its
    adders' stages; ``score_to_v``: from the K op that ends a head's token to the first cycle
    a V op of that head may use its ``p`` and ``alpha`` (multiplier, tree,
    accumulator, then the scalar unit: ``s*c``, max, subtractions, ``exp2``, ``l``);
    ``v_start``: from a token's K op ``(Dk-1, 0)`` to its first V op, ``max(G + 1,
    score_to_v)`` when unstalled; ``slots``: tokens the V buffer and the ``p``/``alpha``
    registers hold, the smallest power of two with ``slots * (G+1)*Dk >= v_start + G*Dk`` (so
    the K array never waits in an unstalled stream); ``v_update``: from a V op's issue to its
    ``o`` update; ``out_beat``: cycles per normalised output beat (passes plus the
    multiplier's latency); ``recip``: the wait for ``1/l`` before each head's output."""
    k_mul: int
    v_mul: int
    tree: int
    score_to_v: int
    v_start: int
    slots: int
    v_update: int
    out_beat: int
    recip: int


def te_pipe_timing(head_dim, G, lanes, kv_dtype="bf16") -> PipeTiming:
    """The pipelined engine's latencies (:class:`PipeTiming`) for one shape."""
    validate_params(head_dim, G, lanes, kv_dtype, "pipelined")
    S = PIPE_STAGES
    dk = head_dim // lanes
    wide = KV_SIGNIFICAND_BITS[kv_dtype] > 8
    k_mul = S["k_mul_wide"] if wide else S["k_mul"]
    v_mul = S["v_mul_wide"] if wide else S["v_mul"]
    tree = (lanes.bit_length() - 1) * S["tree_add"]
    score_to_v = k_mul + tree + 1 + S["c_mul"] + 1 + S["sub"] + S["exp2"] + 1
    v_start = max(G + 1, score_to_v)
    per_tok = te_token_cycles(head_dim, G, lanes, "pipelined")
    slots = 1
    while slots * per_tok < v_start + G * dk:
        slots *= 2
    passes = te_out_passes(kv_dtype, "pipelined")
    return PipeTiming(k_mul=k_mul, v_mul=v_mul, tree=tree, score_to_v=score_to_v,
                      v_start=v_start, slots=slots, v_update=1 + v_mul,
                      out_beat=passes + v_mul, recip=S["recip"])


def te_cycles(n, head_dim, G, lanes, partial=False, engine="serial", early_end=False,
              kv_dtype="bf16"):
    """Cycles from the descriptor transfer to the last output transfer, inclusive, with an
    unstalled K/V stream and an always-ready output, ``Dk = head_dim / lanes``:

    * serial: ``1 + G*Dk + n*3*G*Dk + G*Dk (+ G in partial mode)``;
    * split, ``n >= 1``: ``1 + G*Dk + n*(G+1)*Dk + (G-1)*Dk + 1 + P*G*Dk (+ G)`` -- after
      the last V beat the V array still has ``(G-1)*Dk + 1`` operations of the last token to
      finish before the output, whose beats take ``P`` = :func:`te_out_passes` cycles each
      when normalised (bf16/fp8: 3); with ``early_end`` (the context ended after ``n`` tokens, the
      output is zeros) the engine goes straight to the output: ``1 + G*Dk + n*(G+1)*Dk +
      G*Dk (+ G)``; ``n = 0``: ``1 + 2*G*Dk (+ G)``.

    Both engines: a stream that ends before its first token (``n = 0`` with ``early_end``: a
    lone terminator beat with ``last``) lands on a K beat, which the K array holds ``G``
    cycles: ``+ G``."""
    dk = head_dim // lanes
    tail = G if partial else 0
    per_tok = te_token_cycles(head_dim, G, lanes, engine)
    computed = n > 0 and not early_end
    if engine == "pipelined" and computed:
        pt = te_pipe_timing(head_dim, G, lanes, kv_dtype)
        # the last token's first K op -> its last V op's o update -> the pipelines empty
        tail_v = (dk - 1) * G + pt.v_start + G * dk - 1 + pt.v_update + 2
        out = G * dk + G if partial else G * (pt.recip + dk * pt.out_beat)
        return 1 + G * dk + (n - 1) * per_tok + tail_v + out
    drain = (G - 1) * dk + 1 if engine == "split" and computed else 0
    terminator = G if early_end and n == 0 else 0
    passes = te_out_passes(kv_dtype, engine) if computed and not partial else 1
    return 1 + G * dk + n * per_tok + drain + terminator + passes * G * dk + tail


def rescale_events(q_codes, k_codes, kv_dtype, scale_bits, *, lanes, engine="serial",
                   k_scales=None, tensor_scale_bits=0):
    """``(events, per_head)``: how many (token >= 1, head) pairs have ``alpha != 1``, i.e. the
    running maximum rose (for the split engine: its integer ceiling rose). Today's serial
    engine rescales every token regardless; the split engine's cycles do not depend on it
    either (the rescale is an exponent shift fused into the V operation), but its V array
    counts them on ``v_rescale``. For i.i.d. scores the expectation is about
    ``G * (ln n + 0.577 - 1)``; the worst case (the maximum rising every token) ``G*(n-1)``."""
    q_codes = np.asarray(q_codes)
    G, d = q_codes.shape
    validate_params(d, G, lanes, kv_dtype, engine)
    k = dequant_kv(np.asarray(k_codes).reshape(-1, d), kv_dtype,
                   None if k_scales is None else np.asarray(k_scales), tensor_scale_bits)
    s2 = _scores(dequant_bf16(q_codes), k, lanes, fmul(_i64(scale_bits), LOG2E_BITS), engine)
    m = np.full(G, NEG_INF, dtype=np.int64)
    events = np.zeros(G, dtype=np.int64)
    for t in range(s2.shape[0]):
        mn = fmax(m, ceil_int(s2[t]) if engine != "serial" else s2[t])
        if t:
            events += exp2_diff(m, mn) != ONE
        m = mn
    return int(events.sum()), events


def expected_rescale_events(n, G):
    """``(expected, worst)`` rescale events over ``n`` tokens: for i.i.d. continuous scores
    token ``t`` is a new maximum with probability ``1/(t+1)``, so ``G*(H_n - 1)`` (``H_n``
    the harmonic number, about ``ln n + 0.577``) -- an upper bound for the split engine,
    whose integer ceiling rises less often; the worst case, a maximum rising on every token,
    ``G*(n - 1)``."""
    harmonic = sum(1.0 / i for i in range(1, n + 1))
    return G * (harmonic - 1), G * max(n - 1, 0)


def _scores(q, k, lanes, c, engine):
    """``s2 [n, G]`` in the engine's order, times ``c``. Serial: lane partial sums over the
    beats, then a pairwise tree over the lanes. Split: a pairwise tree over each beat's lanes,
    then the beats' sums accumulated in order (one accumulator per head, none per lane)."""
    L = lanes
    prod = fmul(q[None, :, :], k[:, None, :])
    beats = range(1, q.shape[-1] // L)
    if engine != "serial":
        acc = tree_sum(prod[:, :, 0:L])
        for b in beats:
            acc = fadd(acc, tree_sum(prod[:, :, b * L:(b + 1) * L]))
        return fmul(acc, c)
    acc = prod[:, :, 0:L]
    for b in beats:
        acc = fadd(acc, prod[:, :, b * L:(b + 1) * L])
    return fmul(tree_sum(acc), c)


def softmax_recurrence(q, k, v, c, lanes, engine, n):
    """The engine's scores and online softmax over the first ``n`` tokens: ``q`` ``[G, d]``,
    ``k``/``v`` ``[n, d]`` dequantised fp32 bits, ``c`` the scale times log2(e) ->
    ``(m [G], l [G], o [G, d])``."""
    G, d = q.shape
    m = np.full(G, NEG_INF, dtype=np.int64)
    l = np.zeros(G, dtype=np.int64)
    o = np.zeros((G, d), dtype=np.int64)
    # scores do not depend on the softmax state: all tokens at once ([n, G])
    s2_all = _scores(q, k, lanes, c, engine)
    for t in range(n):
        s2 = s2_all[t]
        mn = fmax(m, ceil_int(s2) if engine != "serial" else s2)
        alpha = exp2_diff(m, mn)
        p = exp2_diff(s2, mn)
        l = fadd(fmul(l, alpha), p)
        m = mn
        o = fadd(fmul(o, alpha[:, None]), fmul(p[:, None], v[t][None, :]))
    return m, l, o


def te_decode(q_codes, k_codes, v_codes, kv_dtype, scale_bits, *, lanes, n=None,
              k_scales=None, v_scales=None, tensor_scale_bits=0, partial=False,
              engine="serial", recurrence=None):
    """Run the engine's arithmetic on one (request, layer, KV head).

    Parameters
    ----------
    q_codes : [G, d] bf16 codes.
    k_codes, v_codes : [n_stream, d] element codes (bf16 uint16, E4M3 uint8 or E2M1 0..15).
    kv_dtype : "bf16" | "fp8" | "nvfp4".
    scale_bits : fp32 bits of the softmax scale (usually 1/sqrt(d)).
    lanes : multiplier lanes (fixes the accumulation order).
    n : announced context length (default: n_stream). ``n_stream < n`` is an early end,
        ``n_stream > n`` is a too-long stream (first ``n`` tokens used).
    k_scales, v_scales : [n_stream, d/16] E4M3 block-scale codes (nvfp4).
    tensor_scale_bits : fp32 bits of the NVFP4 tensor scale.
    partial : return unnormalised ``(o, m, l)``.
    engine : "serial" (exact running maximum) or "split" (integer running maximum).
    recurrence : :func:`softmax_recurrence` (None) or a function equal to it bit for bit
        (``sim/fast/te_twin.py``'s compiled one).
    """
    q_codes = np.asarray(q_codes)
    G, d = q_codes.shape
    validate_params(d, G, lanes, kv_dtype, engine)
    k_codes = np.asarray(k_codes).reshape(-1, d)
    v_codes = np.asarray(v_codes).reshape(-1, d)
    n_stream = k_codes.shape[0]
    if n is None:
        n = n_stream
    n_proc = min(n, n_stream)
    L = lanes
    st = {k: False for k in STATUS_BITS}
    q = dequant_bf16(q_codes)
    st["nonfinite_in"] = _nonfinite(q)
    c = fmul(_i64(scale_bits), LOG2E_BITS)
    ks = None if k_scales is None else np.asarray(k_scales)[:n_proc]
    vs = None if v_scales is None else np.asarray(v_scales)[:n_proc]
    k = dequant_kv(k_codes[:n_proc], kv_dtype, ks, tensor_scale_bits)      # [n, d]
    v = dequant_kv(v_codes[:n_proc], kv_dtype, vs, tensor_scale_bits)
    st["nonfinite_in"] |= _nonfinite(k) | _nonfinite(v)
    m, l, o = (recurrence or softmax_recurrence)(q, k, v, c, L, engine, n_proc)
    st["empty"] = n == 0
    st["early_end"] = n_stream < n
    st["too_long"] = n_stream > n
    zero_out = st["empty"] or st["early_end"]
    if zero_out:
        o = np.zeros((G, d), dtype=np.int64)
        m = np.full(G, NEG_INF, dtype=np.int64)
        l = np.zeros(G, dtype=np.int64)
        out = o
    elif partial:
        out = o
    else:
        out = fmul(o, frecip(l)[:, None])
    st["nonfinite_out"] = _nonfinite(out)
    return TEResult(out=out, m=m, l=l, status=st,
                    cycles=te_cycles(n if not st["early_end"] else n_proc, d, G, L, partial,
                                     engine, st["early_end"], kv_dtype))


# ----------------------------------------------------------------------------------------------
# references (float64) and Flash-Decoding combine
# ----------------------------------------------------------------------------------------------
def reference_f64(q, k, v, scale):
    """Float64 single-query attention over the given (dequantised) values.

    q [G, d], k/v [n, d] -> [G, d] float64."""
    q = np.asarray(q, dtype=np.float64)
    k = np.asarray(k, dtype=np.float64)
    v = np.asarray(v, dtype=np.float64)
    s = (q @ k.T) * float(scale)
    s = s - s.max(axis=1, keepdims=True)
    p = np.exp(s)
    return (p @ v) / p.sum(axis=1, keepdims=True)


def combine_partials(parts):
    """Bit-exact Flash-Decoding combine of partial results, in list order.

    ``parts``: sequence of ``(o [G,d], m [G], l [G])`` fp32 bit patterns as emitted by the
    engine in partial mode (``m`` in log2 units). Left fold with the engine's primitives:
    ``M = fmax(M, m_i)``; ``a = exp2_diff(M_old, M)``, ``b = exp2_diff(m_i, M)``;
    ``O = fadd(fmul(O, a), fmul(o_i, b))``; ``L = fadd(fmul(L, a), fmul(l_i, b))``; finally
    ``out = fmul(O, frecip(L))``. Empty partials (``m = -inf``, ``l = 0``) contribute nothing
    unless every part is empty (then the result is NaN-free zeros: ``0 * inf`` is avoided by
    returning zeros)."""
    parts = list(parts)
    o0, m0, l0 = (_i64(x) for x in parts[0])
    O, M, L = o0.copy(), m0.copy(), l0.copy()
    for o, m, l in parts[1:]:
        o, m, l = _i64(o), _i64(m), _i64(l)
        Mn = fmax(M, m)
        a = exp2_diff(M, Mn)
        b = exp2_diff(m, Mn)
        # an empty side (l == 0) must not contribute even when both maxima are -inf
        b = np.where(l == 0, 0, b)
        a = np.where(L == 0, 0, a)
        O = fadd(fmul(O, a[:, None]), fmul(o, b[:, None]))
        L = fadd(fmul(L, a), fmul(l, b))
        M = Mn
    out = fmul(O, frecip(L)[:, None])
    return np.where((L == 0)[:, None], 0, out)


def combine_partials_f64(parts):
    """Float64 Flash-Decoding combine (for the fast model): ``sum 2**(m_i-M) o_i /
    sum 2**(m_i-M) l_i`` with ``m`` in log2 units. Inputs may be bit patterns (int) or floats."""
    def f(x):
        x = np.asarray(x)
        return b2f(x).astype(np.float64) if x.dtype.kind in "iu" else x.astype(np.float64)
    os_ = [f(p[0]) for p in parts]
    ms = [f(p[1]) for p in parts]
    ls = [f(p[2]) for p in parts]
    M = np.max(np.stack(ms), axis=0)
    w = [np.where(np.isneginf(m), 0.0, np.exp2(np.where(np.isneginf(m), 0.0, m - M)))
         for m in ms]
    num = sum(wi[:, None] * oi for wi, oi in zip(w, os_))
    den = sum(wi * li for wi, li in zip(w, ls))
    return num / den[:, None]


def exp2_max_rel_error(samples=1 << 20, lo=-126.0, seed=0):
    """Max relative error of :func:`exp2` vs float64 over random fp32 x in [lo, 0] plus the
    natural-exp path (``exp2(fmul(x, log2e))`` vs ``exp(x)``) over [-87, 0]. Returns a dict."""
    rng = np.random.default_rng(seed)
    x = -rng.uniform(0, -lo, samples).astype(np.float32)
    x = np.concatenate([x, -np.float32(2.0) ** rng.uniform(-30, 0, 1 << 14).astype(np.float32)])
    got = b2f(exp2(f2b(x))).astype(np.float64)
    want = np.exp2(x.astype(np.float64))
    ok = want >= 2.0 ** -125
    e2 = float(np.max(np.abs(got[ok] - want[ok]) / want[ok]))
    xe = -rng.uniform(0, 87, samples).astype(np.float32)
    gote = b2f(exp2(fmul(f2b(xe), LOG2E_BITS))).astype(np.float64)
    wante = np.exp(xe.astype(np.float64))
    erel = np.abs(gote - wante) / wante
    small = xe > -10
    return {"exp2": e2, "exp_via_log2e": float(erel.max()),
            "exp_via_log2e_x_gt_-10": float(erel[small].max())}
