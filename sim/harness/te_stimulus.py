"""Stimulus and checks the TE's tests share: fp32 operands for the arithmetic units with the
drivers that stream them through a unit, and decode steps for the engines (seeded random
steps, the named edge cases, the idle x backpressure matrix's steps) with the check of an
engine's results against the model (:mod:`tricut.models.te`).

The steps are :class:`~tricut.sim.harness.te.TEVector` s: the Amaranth bench
(:func:`~tricut.sim.harness.te.simulate_amaranth`), the cocotb bench on Verilator
(:func:`~tricut.sim.harness.te.simulate_verilator`) and the compiled twin
(``sim/fast/te_twin.py``) run the same ones.
"""

from __future__ import annotations

import numpy as np
from amaranth.sim import Simulator

from tricut.models import te as M
from tricut.sim.harness.te import TEVector, make_vector

__all__ = ["FP32_EDGE", "NAMED_PAIRS", "random_fp32_bits", "binary_operands", "unary_operands",
           "comb_run", "stream", "mismatches", "rel_l2", "random_vector", "with_fields",
           "EDGE_NAMES", "EDGE_SUBSET", "edge_steps", "matrix_steps", "mac_ops", "check_steps",
           "on_engine", "check_split"]

F32 = np.float32


# ----------------------------------------------------------------------------------------------
# fp32 operands and the drivers of the arithmetic units
# ----------------------------------------------------------------------------------------------
#: named edge operands: ±0, denormals (flushed), min normal, max finite, ±inf, NaNs, 1 and
#: its neighbours, 2**-126 +- ulp, log2(e), 2
FP32_EDGE = [0, 0x80000000, 0x00000001, 0x807FFFFF, 0x00800000, 0x80800000, 0x7F7FFFFF,
             0xFF7FFFFF, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00001, 0x3F800000, 0xBF800000,
             0x3F7FFFFF, 0x3F800001, 0x00FFFFFF, 0x01000000, 0x7F000000, 0x3FB8AA3B, 0x40000000]
#: (a, b) pairs whose exact result is a rounding tie or overflows / underflows
NAMED_PAIRS = {
    "tie_add_even": (0x3F800000, 0x33800000),    # 1 + 2**-24: tie, rounds to 1.0
    "tie_add_odd": (0x3F800001, 0x33800000),     # tie, rounds up to even
    "tie_mul": (0x3FC00001, 0x3FC00000),         # (1.5 + ulp) * 1.5
    "overflow": (0x7F7FFFFF, 0x7F7FFFFF),
    "underflow": (0x00800000, 0x3F000000),       # 2**-127 flushes to +0
    "cancel": (0x3F800000, 0xBF800000),
    "inf_minus_inf": (0x7F800000, 0xFF800000),
    "inf_times_zero": (0x7F800000, 0x00000000),
    "neg_zeros": (0x80000000, 0x80000000),
}


def random_fp32_bits(rng, n, emin=100, emax=160, wild=0.1):
    """``n`` random fp32 bit patterns: a random sign, the exponent in ``[emin, emax)`` (any
    exponent with probability ``wild``), a random fraction (zero with probability 0.05)."""
    s = rng.integers(0, 2, n)
    e = rng.integers(emin, emax, n)
    e = np.where(rng.random(n) < wild, rng.integers(0, 256, n), e)
    f = rng.integers(0, 1 << 23, n)
    f = np.where(rng.random(n) < 0.05, 0, f)
    return (s << 31) | (e << 23) | f


def _unit_fp32_bits(rng, n, emin=100, emax=160, wild=0.1):
    """:func:`random_fp32_bits`' distribution, drawn in another order (the operands of
    :func:`binary_operands` and :func:`unary_operands`), as int64."""
    s = rng.integers(0, 2, n)
    e = np.where(rng.random(n) < wild, rng.integers(0, 256, n), rng.integers(emin, emax, n))
    f = np.where(rng.random(n) < 0.05, 0, rng.integers(0, 1 << 23, n))
    return ((s << 31) | (e << 23) | f).astype(np.int64)


def binary_operands(rng, n):
    """``(a, b)`` int64 for a two-operand unit: ``n`` random pairs (a third of them near
    cancellation, for the adder), every pair of :data:`FP32_EDGE` and :data:`NAMED_PAIRS` both
    ways round."""
    a, b = _unit_fp32_bits(rng, n), _unit_fp32_bits(rng, n)
    k = n // 3                      # near-cancellation for the adder
    b[:k] = ((a[:k] ^ (1 << 31)) + rng.integers(-40, 40, k)) & 0xFFFFFFFF
    ea, eb = np.meshgrid(np.array(FP32_EDGE), np.array(FP32_EDGE))
    na, nb = zip(*NAMED_PAIRS.values())
    return (np.concatenate([a, ea.ravel(), na, nb]).astype(np.int64),
            np.concatenate([b, eb.ravel(), nb, na]).astype(np.int64))


def unary_operands(unit, rng, n):
    """Operands of a one-operand unit: for ``exp2`` mostly its range (``x <= 0``), for
    ``recip`` random values and huge ones; :data:`FP32_EDGE` for both."""
    if unit == "exp2":
        return np.concatenate([M.f2b(-rng.uniform(0, 130, n).astype(F32)),
                               M.f2b(-(F32(2.0) ** rng.uniform(-40, 0, n // 4).astype(F32))),
                               _unit_fp32_bits(rng, n // 4), np.array(FP32_EDGE)]).astype(np.int64)
    return np.concatenate([_unit_fp32_bits(rng, n), np.array(FP32_EDGE),
                           (rng.integers(250, 256, 40) << 23) | rng.integers(0, 1 << 23, 40)])


def comb_run(dut, ins, outs, vectors):
    """The combinational ``dut``'s ``outs`` (a tuple per input set) for the input sets
    ``zip(*vectors)`` applied to the ports ``ins`` one after another."""
    got = []

    async def tb(ctx):
        for vals in zip(*vectors):
            for port, v in zip(ins, vals):
                ctx.set(port, int(v))
            got.append(tuple(ctx.get(o) for o in outs))

    sim = Simulator(dut)
    sim.add_testbench(tb)
    sim.run()
    return got


def stream(dut, operands, valid=None):
    """Drive one operand set per cycle (back to back) and return, per cycle, (y, y_valid):
    ``len(operands[0]) + dut.stages`` cycles, so output ``i`` is at cycle ``i + stages``."""
    ins = [dut.a, dut.b] if len(operands) == 2 else [dut.x]
    n = len(operands[0])
    got = []

    async def tb(ctx):
        for t in range(n + dut.stages):
            if t < n:
                for port, v in zip(ins, operands):
                    ctx.set(port, int(v[t]))
            if dut.stages:
                ctx.set(dut.valid, int(valid[t]) if valid is not None and t < n else int(t < n))
            got.append((ctx.get(dut.y), ctx.get(dut.y_valid) if dut.stages else 1))
            await (ctx.tick() if dut.stages else ctx.delay(1e-9))

    sim = Simulator(dut)
    if dut.stages:
        sim.add_clock(1e-9)
    sim.add_testbench(tb)
    sim.run()
    return got


def mismatches(got, operands, fn, latency):
    """Indices ``i`` where the output read ``latency`` cycles after input ``i`` is not the model's."""
    exp = fn(*operands)
    ys = np.array([g[0] for g in got[latency:latency + len(exp)]])
    if ys.size < len(exp):
        ys = np.concatenate([ys, np.full(len(exp) - ys.size, -1)])
    return np.nonzero(ys != exp)[0]


def rel_l2(a, b):
    """``|a - b| / |b|`` (L2 norms, float64)."""
    return float(np.linalg.norm(np.asarray(a, np.float64) - b) / np.linalg.norm(b))


# ----------------------------------------------------------------------------------------------
# decode steps and the check of an engine's results
# ----------------------------------------------------------------------------------------------
def random_vector(rng, kv_dtype, G, d, lanes, n, partial=False, q_mult=1.0, kv_mult=1.0):
    """One step of standard normal ``q`` (times ``q_mult``), ``k`` and ``v`` (times
    ``kv_mult``) over ``n`` tokens."""
    q = (rng.standard_normal((G, d)) * q_mult).astype(F32)
    k = (rng.standard_normal((n, d)) * kv_mult).astype(F32)
    v = (rng.standard_normal((n, d)) * kv_mult).astype(F32)
    return make_vector(q, k, v, kv_dtype, lanes=lanes, partial=partial)


def with_fields(vec: TEVector, **kw):
    """``vec`` with the fields ``kw`` changed."""
    d = dict(vec.__dict__)
    d.update(kw)
    return TEVector(**d)


EDGE_NAMES = ["huge", "tiny", "equal", "mask", "allmask", "nan_q", "bad_kv", "empty", "early",
              "early_k", "toolong", "partial", "empty_p", "early_p", "normal"]
#: the edge cases whose arithmetic depends on the KV dtype (bf16 runs them all)
EDGE_SUBSET = ["mask", "allmask", "bad_kv", "toolong", "early_p", "normal"]


def edge_steps(rng, kv_dtype, G, d, lanes, only=None):
    """Edge-case and bad-input steps (named as in ``EDGE_NAMES``), meant to run back to back
    on one engine; ``only`` selects a subset (in that order)."""
    steps = []
    # huge scores: the softmax is one-hot, exp2 underflows to 0 for all but the max
    steps.append(random_vector(rng, kv_dtype, G, d, lanes, 4, q_mult=40.0, kv_mult=4.0))
    # tiny scores: products flush to zero, all scores equal
    steps.append(random_vector(rng, kv_dtype, G, d, lanes, 3, q_mult=1e-25))
    # all-equal keys
    base = random_vector(rng, kv_dtype, G, d, lanes, 3)
    steps.append(with_fields(base, k_codes=np.repeat(base.k_codes[:1], 3, axis=0),
                             k_scales=None if base.k_scales is None
                             else np.repeat(base.k_scales[:1], 3, axis=0)))
    # -inf-like masks: q >= 0 and key rows of huge negative values -> score -inf (overflow)
    q = np.abs(rng.standard_normal((G, d))).astype(F32) + F32(0.1)
    k = rng.standard_normal((5, d)).astype(F32)
    big = {"bf16": -3e38, "fp8": -448.0, "nvfp4": -6.0}[kv_dtype]
    k[[0, 2]] = big
    v = rng.standard_normal((5, d)).astype(F32)
    scale = 1e36 if kv_dtype != "bf16" else None   # make fp8/nvfp4 masks overflow too
    steps.append(make_vector(q, k, v, kv_dtype, lanes=lanes, scale=scale))
    # fully masked context: every score -inf -> defined output (mean of v)
    k2 = np.full((3, d), big, dtype=F32)
    steps.append(make_vector(q, k2, v[:3], kv_dtype, lanes=lanes, scale=scale))
    # NaN in q (head 0 only)
    nanq = random_vector(rng, kv_dtype, G, d, lanes, 2)
    qc = nanq.q_codes.copy()
    qc[0, 3] = 0x7FC0
    steps.append(with_fields(nanq, q_codes=qc))
    # non-finite K/V element
    bad = random_vector(rng, kv_dtype, G, d, lanes, 2)
    if kv_dtype == "bf16":
        vc = bad.v_codes.copy()
        vc[1, 5] = 0x7F80          # +inf
        steps.append(with_fields(bad, v_codes=vc))
    elif kv_dtype == "fp8":
        vc = bad.v_codes.copy()
        vc[1, 5] = 0x7F            # NaN
        steps.append(with_fields(bad, v_codes=vc))
    else:
        vs = bad.v_scales.copy()
        vs[1, 0] = 0x7F            # NaN block scale
        steps.append(with_fields(bad, v_scales=vs))
    # empty context
    e = random_vector(rng, kv_dtype, G, d, lanes, 0)
    steps.append(e)
    # stream ends early (5 announced, 2 sent)
    steps.append(with_fields(random_vector(rng, kv_dtype, G, d, lanes, 2), n=5))
    # stream ends before its first token: 3 announced, a single terminator beat with `last`
    # (lands on a K beat)
    steps.append(with_fields(random_vector(rng, kv_dtype, G, d, lanes, 0), n=3))
    # stream longer than announced (2 announced, 4 sent)
    steps.append(with_fields(random_vector(rng, kv_dtype, G, d, lanes, 4), n=2))
    # partial (Flash-Decoding) output, then a normal step: nothing left over from the above
    steps.append(random_vector(rng, kv_dtype, G, d, lanes, 3, partial=True))
    # partial mode with an empty context / an early end: o = 0, m = -inf, l = 0
    steps.append(random_vector(rng, kv_dtype, G, d, lanes, 0, partial=True))
    steps.append(with_fields(random_vector(rng, kv_dtype, G, d, lanes, 1, partial=True), n=2))
    steps.append(random_vector(rng, kv_dtype, G, d, lanes, 3))
    named = dict(zip(EDGE_NAMES, steps))
    return [named[k] for k in (only or EDGE_NAMES)]


def matrix_steps(rng, kv_dtype="bf16", G=1, d=64, lanes=16):
    """A short step sequence for the idle x backpressure matrix: a random step, a partial
    step, a stream longer than announced (drained by the engine) and an early end."""
    return ([random_vector(rng, kv_dtype, G, d, lanes, 2),
             random_vector(rng, kv_dtype, G, d, lanes, 1, partial=True)]
            + edge_steps(rng, kv_dtype, G, d, lanes, only=["toolong", "early"]))


def mac_ops(vec: TEVector, gold):
    """The serial engine's lane operations of step ``vec`` (``None`` for an empty step or an
    early end)."""
    dk = vec.d // vec.lanes
    n = vec.n_announced
    if gold.status["early_end"] or gold.status["empty"]:
        return None
    return vec.G * dk * (3 * n + (0 if vec.partial else 1))


def check_steps(vecs, res, check_cycles=False):
    """RTL == model: every step's output beats and status; with ``check_cycles`` (unstalled
    runs of the serial engine) the cycle formula and ``mac_busy``."""
    assert len(res) == len(vecs)
    for i, (vec, r) in enumerate(zip(vecs, res)):
        gold = vec.golden()
        exp = vec.expected_out_beats(gold)
        if r.out_beats != exp:
            bad = [j for j, (a, b) in enumerate(zip(r.out_beats, exp)) if a != b]
            raise AssertionError(
                f"step {i}: {len(bad)} of {len(exp)} output beats differ from the model "
                f"(first at beat {bad[:1]}; got {len(r.out_beats)} beats)")
        assert r.status == gold.status, f"step {i}: status {r.status} != model {gold.status}"
        if check_cycles:
            assert r.cycles == M.te_cycles(vec.n_announced, vec.d, vec.G, vec.lanes,
                                           vec.partial), f"step {i}: {r.cycles} cycles"
            ops = mac_ops(vec, gold)
            assert ops is None or r.mac_busy == ops, f"step {i}: mac_busy {r.mac_busy} != {ops}"


def on_engine(vecs, engine="split"):
    """The steps ``vecs`` for the TE design ``engine`` (``models.te.ENGINES``)."""
    return [with_fields(v, engine=engine) for v in vecs]


def check_split(vecs, res, check_cycles=False):
    """RTL == model (out beats, status) for an engine with two lane arrays; with
    ``check_cycles`` the unstalled cycle formula and the per-array op counts (``G*Dk`` per
    token each, ``Dk`` V ops per rescale event)."""
    check_steps(vecs, res)
    for i, (vec, r) in enumerate(zip(vecs, res)):
        gold = vec.golden()
        if check_cycles:
            assert r.cycles == gold.cycles, f"step {i}: {r.cycles} != {gold.cycles} cycles"
            if not (gold.status["early_end"] or gold.status["empty"]):
                dk, n = vec.d // vec.lanes, vec.n_announced
                assert r.k_busy == r.v_busy == vec.G * dk * n, (i, r.k_busy, r.v_busy)
                ev, _ = M.rescale_events(vec.q_codes, vec.k_codes[:n], vec.kv_dtype,
                                         vec.scale_bits, lanes=vec.lanes, engine=vec.engine,
                                         k_scales=None if vec.k_scales is None
                                         else vec.k_scales[:n], tensor_scale_bits=vec.ts_bits)
                assert r.v_rescale == ev * dk, (i, r.v_rescale, ev)
