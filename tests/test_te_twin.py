"""The compiled twin (sim/fast/te_twin.py) equals the golden ``models.te.te_decode`` bit for
bit: ``out``, ``m``, ``l``, status flags and cycles, on seeded random inputs (every KV dtype x
engine x partial, several shapes), rising-maximum inputs (every token rescales), the engine's
edge cases (empty, early end, too long, n = 1, NaN/inf in, huge and tiny scores, masks) and
bad parameters (the same error). Its compiled fp32 primitives equal the numpy helpers on
random and special bit patterns. The golden stays the oracle."""

from __future__ import annotations

import numpy as np
import pytest

from tricut.models import te as M
from tricut.models.config import KV_DTYPES
from tricut.sim.fast.te_twin import PRIMITIVES, primitives, te_decode_fast
from tricut.sim.harness.te import TEVector, make_vector, rising_max_inputs
from tricut.sim.harness.te_stimulus import EDGE_NAMES, edge_steps, random_vector, with_fields

#: (G, head_dim, lanes): the narrowest and widest lanes, one beat per head and many
SHAPES = [(1, 64, 2), (4, 128, 32), (7, 256, 16), (16, 64, 8)]


def _args(vec: TEVector):
    return ((vec.q_codes, vec.k_codes, vec.v_codes, vec.kv_dtype, vec.scale_bits),
            dict(lanes=vec.lanes, n=vec.n, k_scales=vec.k_scales, v_scales=vec.v_scales,
                 tensor_scale_bits=vec.ts_bits, partial=vec.partial, engine=vec.engine))


def assert_same(got: M.TEResult, want: M.TEResult, what=""):
    for name in ("out", "m", "l"):
        g, w = getattr(got, name), getattr(want, name)
        assert g.dtype == w.dtype and g.shape == w.shape, (what, name, g.dtype, g.shape, w.shape)
        bad = np.flatnonzero(g != w)
        assert bad.size == 0, (f"{what}: {name} differs in {bad.size} of {g.size} words, first "
                               f"at {bad[0]}: {int(g.flat[bad[0]]):#010x} != "
                               f"{int(w.flat[bad[0]]):#010x}")
    assert got.status == want.status, (what, got.status, want.status)
    assert got.cycles == want.cycles, (what, got.cycles, want.cycles)


def check(vec: TEVector, what=""):
    args, kw = _args(vec)
    want = M.te_decode(*args, **kw)
    assert_same(te_decode_fast(*args, **kw), want, what)
    return want


# ------------------------------------------------------------------------------ primitives
def _bits(rng, n):
    """Random fp32 bit patterns: uniform words, uniform exponents, and specials."""
    b = rng.integers(0, 1 << 32, n, dtype=np.int64)
    e = rng.integers(0, 256, n)
    b = np.where(rng.random(n) < 0.5, (b & 0x807FFFFF) | (e << 23), b)
    special = np.array([0, M.SIGN, M.POS_INF, M.NEG_INF, M.QNAN, 0x7F800001, 0xFFC00001, 1,
                        0x807FFFFF, M.ONE, 0xBF800000, 0x3F7FFFFF, 0x4B000000, 0xCB000001,
                        0xBF000000, 0x3F000001, 0x00800000, 0x80800000, 0x7F7FFFFF,
                        0xFF7FFFFF, 0xC2FC0000, 0xC2FBFFFF, 0xC3000000], dtype=np.int64)
    pick = rng.random(n) < 0.1
    b[pick] = rng.choice(special, int(pick.sum()))
    return b


def test_primitives_equal_numpy_helpers():
    rng = np.random.default_rng(7)
    n = 400_000
    a, b = _bits(rng, n), _bits(rng, n)
    # operands close in exponent and magnitude (cancellation, small alignment shifts)
    near = rng.random(n) < 0.3
    b[near] = (a[near] ^ (rng.integers(0, 2, int(near.sum())) << 31)) \
        + rng.integers(-(1 << 24), 1 << 24, int(near.sum()))
    b &= 0xFFFFFFFF
    # exp2's domain: x <= 0 down past -126 and tiny magnitudes
    neg = np.concatenate([M.f2b(-rng.uniform(0, 130, n // 2).astype(np.float32)),
                          M.f2b(-(2.0 ** rng.uniform(-40, 8, n // 2)).astype(np.float32))])
    for x, y in ((a, b), (neg, a), (a, neg)):
        got = primitives(x, y)
        want = {"fmul": M.fmul(x, y), "fadd": M.fadd(x, y), "fmax": M.fmax(x, y),
                "ceil_int": M.ceil_int(x), "exp2": M.exp2(x), "exp2_diff": M.exp2_diff(x, y)}
        for row, name in zip(got, PRIMITIVES):
            bad = np.flatnonzero(row != want[name])
            assert bad.size == 0, (f"{name}({int(x[bad[0]]):#010x}, {int(y[bad[0]]):#010x}) "
                                   f"= {int(row[bad[0]]):#010x}, numpy "
                                   f"{int(want[name][bad[0]]):#010x} ({bad.size} differ)")


# ------------------------------------------------------------------------------ random inputs
@pytest.mark.parametrize("kv_dtype", KV_DTYPES)
@pytest.mark.parametrize("engine", M.ENGINES)
def test_random_inputs_every_dtype_engine_shape(kv_dtype, engine):
    rng = np.random.default_rng(KV_DTYPES.index(kv_dtype) * 10 + M.ENGINES.index(engine))
    for G, d, lanes in SHAPES:
        for partial in (False, True):
            n = int(rng.integers(9, 24))
            vec = with_fields(random_vector(rng, kv_dtype, G, d, lanes, n, partial=partial,
                                            q_mult=3.0), engine=engine)
            if kv_dtype == "nvfp4":
                assert vec.k_scales is not None and vec.ts_bits != 0
            want = check(vec, f"{kv_dtype} {engine} G={G} d={d} L={lanes} partial={partial}")
            assert not any(want.status.values())


@pytest.mark.parametrize("kv_dtype,n", [("bf16", 60), ("fp8", 8), ("nvfp4", 8)])
def test_rising_maximum_rescales_every_token(kv_dtype, n):
    rng = np.random.default_rng(11)
    G, d, lanes = 4, 64, 16
    q, k, v = rising_max_inputs(rng, G, d, n)
    for engine in M.ENGINES:
        for partial in (False, True):
            vec = make_vector(q, k, v, kv_dtype, lanes=lanes, engine=engine, partial=partial)
            events, _ = M.rescale_events(vec.q_codes, vec.k_codes, kv_dtype, vec.scale_bits,
                                         lanes=lanes, engine=engine, k_scales=vec.k_scales,
                                         tensor_scale_bits=vec.ts_bits)
            assert events == G * (n - 1), (kv_dtype, engine, events)
            check(vec, f"rising {kv_dtype} {engine} partial={partial}")


# ------------------------------------------------------------------------------ edge cases
@pytest.mark.parametrize("kv_dtype", KV_DTYPES)
@pytest.mark.parametrize("engine", M.ENGINES)
def test_edge_cases(kv_dtype, engine):
    """tests/test_te.py's edge steps (huge and tiny scores, equal keys, masks, NaN q, a
    non-finite K/V element, empty, early end, too long, partial variants), plus n = 1 and
    infinities in q and K."""
    rng = np.random.default_rng(50 + KV_DTYPES.index(kv_dtype))
    G, d, lanes = 4, 64, 8
    flags = {}
    for name, vec in zip(EDGE_NAMES, edge_steps(rng, kv_dtype, G, d, lanes)):
        flags[name] = check(with_fields(vec, engine=engine),
                            f"{name} {kv_dtype} {engine}").status
    assert flags["empty"]["empty"] and flags["empty_p"]["empty"]
    assert flags["early"]["early_end"] and flags["early_k"]["early_end"]
    assert flags["toolong"]["too_long"]
    assert flags["nan_q"]["nonfinite_in"] and flags["bad_kv"]["nonfinite_in"]
    assert flags["nan_q"]["nonfinite_out"]
    for partial in (False, True):
        one = with_fields(random_vector(rng, kv_dtype, G, d, lanes, 1, partial=partial),
                          engine=engine)
        check(one, f"n=1 {kv_dtype} {engine} partial={partial}")
        check(with_fields(one, n=1, k_codes=np.concatenate([one.k_codes] * 3),
                          v_codes=np.concatenate([one.v_codes] * 3),
                          k_scales=None if one.k_scales is None
                          else np.concatenate([one.k_scales] * 3),
                          v_scales=None if one.v_scales is None
                          else np.concatenate([one.v_scales] * 3)),
              f"n=1 of 3 {kv_dtype} {engine}")
    base = with_fields(random_vector(rng, kv_dtype, G, d, lanes, 5), engine=engine)
    qc = base.q_codes.copy()
    qc[1, 7] = 0x7F80                                   # +inf in q, head 1
    st = check(with_fields(base, q_codes=qc), f"inf q {kv_dtype} {engine}").status
    assert st["nonfinite_in"] and st["nonfinite_out"]
    if kv_dtype == "bf16":
        kc = base.k_codes.copy()
        kc[2, 3] = 0xFF80                               # -inf in K, token 2
        st = check(with_fields(base, k_codes=kc), f"-inf k {kv_dtype} {engine}").status
        assert st["nonfinite_in"]


@pytest.mark.parametrize("kw", [
    {"head_dim": 96}, {"G": 0}, {"G": 17}, {"lanes": 3}, {"lanes": 64},
    {"kv_dtype": "int8"}, {"engine": "fast"}, {"head_dim": None},
])
def test_bad_parameters_raise_the_golden_error(kw):
    p = {"G": 4, "head_dim": 64, "lanes": 8, "kv_dtype": "bf16", "engine": "serial"}
    p.update(kw)
    q = np.zeros(64, np.int64) if p["head_dim"] is None else \
        np.zeros((p["G"], p["head_dim"]), np.int64)
    kv = np.zeros((3, 64), np.int64)
    errors = []
    for fn in (M.te_decode, te_decode_fast):
        with pytest.raises(Exception) as e:
            fn(q, kv, kv, p["kv_dtype"], 0x3E000000, lanes=p["lanes"], engine=p["engine"])
        errors.append((type(e.value), str(e.value)))
    assert errors[0] == errors[1]
    assert errors[0][0] is ValueError


def test_odd_inputs_behave_as_the_golden():
    """V shorter than K, NVFP4 without block scales: the same error; n < 0, a scale per
    head: the same result."""
    rng = np.random.default_rng(5)
    vec = random_vector(rng, "bf16", 2, 64, 8, 4)
    nv = random_vector(rng, "nvfp4", 2, 64, 8, 4)
    for odd in (with_fields(vec, v_codes=vec.v_codes[:2]), with_fields(nv, k_scales=None)):
        args, kw = _args(odd)
        errors = []
        for fn in (M.te_decode, te_decode_fast):
            with pytest.raises(Exception) as e:
                fn(*args, **kw)
            errors.append((type(e.value), str(e.value)))
        assert errors[0] == errors[1]
    check(with_fields(vec, n=-1), "n=-1")
    check(with_fields(vec, scale_bits=M.f2b(np.array([0.125, 0.25], np.float32))),
          "scale per head")


def test_random_codes_over_the_whole_code_space():
    """Codes drawn uniformly (NaN, inf, subnormal and zero elements, any scale bits, any
    NVFP4 block and tensor scales), random n around the stream's length."""
    rng = np.random.default_rng(21)
    for i in range(90):
        kv_dtype, engine = KV_DTYPES[i % 3], M.ENGINES[(i // 3) % 3]
        G, d, lanes = SHAPES[i % len(SHAPES)]
        ns = int(rng.integers(0, 6))
        width = M.KV_CODE_BITS[kv_dtype]
        nv = kv_dtype == "nvfp4"
        vec = TEVector(rng.integers(0, 1 << 16, (G, d)), rng.integers(0, 1 << width, (ns, d)),
                       rng.integers(0, 1 << width, (ns, d)), kv_dtype,
                       int(rng.integers(0, 1 << 32)), lanes,
                       n=int(rng.choice([ns, ns, max(ns - 1, 0), ns + 1])),
                       k_scales=rng.integers(0, 256, (ns, d // 16)) if nv else None,
                       v_scales=rng.integers(0, 256, (ns, d // 16)) if nv else None,
                       ts_bits=int(rng.integers(0, 1 << 32)) if nv else 0,
                       partial=bool(i % 2), engine=engine)
        check(vec, f"random codes {i}: {kv_dtype} {engine} G={G} d={d} L={lanes} ns={ns}")
