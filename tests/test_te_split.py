"""The two-array TE engines, split (``rtl/te/split_engine.py``) and pipelined
(``rtl/te/pipelined_engine.py``), ``engine="split"`` / ``"pipelined"`` of ``models.te``: their
new units against the model, the model against float64, and each engine against the model bit
for bit (Amaranth simulator) on random and rising-maximum (adversarial) inputs, every KV
dtype, lanes 4..32, edge cases back to back, every (idle, backpressure) pair; the cycle
formula exact on both kinds of input, the rescale count exact, lane utilisation; the
pipelined engine's unit stages and token slots."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tricut.models import te as M
from tricut.models.config import KV_DTYPES
from tricut.rtl.te.ceil_int import CeilInt
from tricut.rtl.te.pow2scale import Pow2Scale
from tricut.rtl.te.pipelined_engine import TEPipelinedEngine
from tricut.rtl.te.split_engine import TESplitEngine
from tricut.sim.harness.te import make_vector, rising_max_inputs
from tricut.sim.harness.te_stimulus import (FP32_EDGE, binary_operands, comb_run, mismatches,
                                            random_fp32_bits, random_vector, rel_l2, stream)
from tricut.sim.harness.unit_matrices import MATRICES, SPLIT_SHAPES

F32 = np.float32


# ------------------------------------------------------------------------------ units
def test_ceil_int_model_equals_float64_ceiling():
    rng = np.random.default_rng(1)
    x = np.concatenate([(rng.standard_normal(50_000) * 40).astype(F32),
                        (rng.standard_normal(5_000) * 1e7).astype(F32),
                        F32([0.5, -0.5, 1.0, -1.0, 8388607.5, -8388607.5, 2.0 ** 23 + 2])])
    got = M.b2f(M.ceil_int(M.f2b(x))).astype(np.float64)
    want = np.ceil(x.astype(np.float64)) + 0.0          # -0.0 -> +0.0
    assert np.array_equal(got, want)
    assert not np.signbit(got[got == 0]).any()
    sp = M.f2b(F32([np.inf, -np.inf, 1e-40, -1e-40, -0.0]))
    assert list(M.ceil_int(sp)) == [M.POS_INF, M.NEG_INF, 0, 0, 0]
    assert M.ceil_int(M.QNAN) == M.QNAN


def test_ceil_int_rtl_matches_model():
    rng = np.random.default_rng(2)
    xs = np.concatenate([M.f2b((rng.standard_normal(1500) * 30).astype(F32)),
                         random_fp32_bits(rng, 1500, emin=110, emax=160), np.array(FP32_EDGE)])
    dut = CeilInt()
    got = [g for (g,) in comb_run(dut, [dut.x], [dut.y], [xs])]
    want = M.ceil_int(xs)
    bad = [(hex(int(x)), hex(g), hex(int(w))) for x, g, w in zip(xs, got, want) if g != w]
    assert not bad, bad[:5]


def test_pow2scale_rtl_equals_fmul_on_every_alpha_the_engine_makes():
    """alpha = exp2_diff(m, m') of integer maxima: 2**-k (k 0..125), +0, 1, NaN; against
    ``fmul`` on random, edge and near-flush operands."""
    rng = np.random.default_rng(3)
    alphas = [int(M.exp2(M.f2b(F32(-k)))) for k in range(0, 130)] + [0, M.ONE, M.QNAN]
    assert all((a & 0x7FFFFF) == 0 or a == M.QNAN for a in alphas)
    a_vals = np.concatenate([random_fp32_bits(rng, 60, emin=1, emax=254), np.array(FP32_EDGE),
                             M.f2b(F32([1e-37, -3e-38, 2.0 ** -100, np.inf, -np.inf]))])
    aa, pp = np.meshgrid(a_vals, np.array(alphas, dtype=np.int64))
    aa, pp = aa.ravel(), pp.ravel()
    dut = Pow2Scale()
    got = [g for (g,) in comb_run(dut, [dut.a, dut.p], [dut.y], [aa, pp])]
    want = M.fmul(aa, pp)
    bad = [(hex(int(a)), hex(int(p)), hex(g), hex(int(w)))
           for a, p, g, w in zip(aa, pp, got, want) if g != w]
    assert not bad, bad[:5]


@pytest.mark.parametrize("a_bits,b_bits,stages", [(8, 8, 0), (8, 4, 0), (8, 8, 3), (8, 4, 2),
                                                  (24, 8, 3)])
def test_narrow_fmul_equals_fmul_on_operands_it_accepts(a_bits, b_bits, stages):
    """``FP32Mul(a_bits, b_bits)`` == ``fmul`` when the dropped significand bits are zero (a
    bf16 q times a bf16 / E4M3 key), combinational and pipelined; and it does ignore them:
    an operand with a dropped bit set is multiplied as if that bit were zero."""
    from tricut.rtl.te.fmul import FP32Mul
    rng = np.random.default_rng(a_bits * 100 + b_bits + stages)
    a, b = binary_operands(rng, 500)
    keep = [np.int64(~((1 << (24 - bits)) - 1) | ~0x7FFFFF) for bits in (a_bits, b_bits)]
    nan = [(x >> 23 & 0xFF) == 0xFF for x in (a, b)]          # keep NaNs NaN (payload bits)
    a = np.where(nan[0], a, a & keep[0])
    b = np.where(nan[1], b, b & keep[1])
    dut = FP32Mul(stages, a_bits=a_bits, b_bits=b_bits)
    got = stream(dut, (a, b))
    bad = mismatches(got, (a, b), M.fmul, stages)
    assert bad.size == 0, [(hex(int(a[i])), hex(int(b[i]))) for i in bad[:5]]
    if a_bits < 24 and stages == 0:
        dirty = np.where(nan[0] | ((a >> 23 & 0xFF) == 0xFF), a,
                         a | (1 << (23 - a_bits)))              # a dropped bit set (finite a)
        got = stream(FP32Mul(0, a_bits=a_bits, b_bits=b_bits), (dirty, b))
        assert [g for g, _ in got] == list(M.fmul(a, b))


@pytest.mark.parametrize("stages", [0, 1])
def test_v_lane_multiplier_one_pass_and_three_passes_equal_fmul(stages):
    """``VLaneMul``: one pass == ``fmul`` for ``b`` with an 8-bit significand (``p * v``);
    three passes (high slice first, held inputs, a random wait at pass 2 as under output
    backpressure) == ``fmul`` for any operands (``o * (1/l)``). ``stages=1`` (the pipelined
    engine's): the same results one cycle later."""
    from amaranth.sim import Simulator

    from tricut.rtl.te.vmul import VLaneMul
    rng = np.random.default_rng(11)
    a, b = binary_operands(rng, 400)
    narrow = np.where((b >> 23 & 0xFF) == 0xFF, b, b & ~np.int64(0xFFFF))
    waits = rng.integers(0, 3, a.size) + stages
    dut = VLaneMul(stages=stages)
    one, three = [], []

    async def tb(ctx):
        for x, y in zip(a, narrow):
            ctx.set(dut.three, 0)
            ctx.set(dut.en, 0)
            ctx.set(dut.a, int(x))
            ctx.set(dut.b, int(y))
            if stages:
                await ctx.tick()
            else:
                await ctx.delay(1e-9)
            one.append(ctx.get(dut.y))
        for x, y, w in zip(a, b, waits):
            ctx.set(dut.a, int(x))
            ctx.set(dut.b, int(y))
            ctx.set(dut.three, 1)
            for p in (0, 1):
                ctx.set(dut.pass_, p)
                ctx.set(dut.en, 1)
                await ctx.tick()
            ctx.set(dut.pass_, 2)
            ctx.set(dut.en, 0)
            for _ in range(w):
                await ctx.tick()
            three.append(ctx.get(dut.y))

    sim = Simulator(dut)
    sim.add_clock(1e-9)
    sim.add_testbench(tb)
    sim.run()
    assert one == list(M.fmul(a, narrow))
    assert three == list(M.fmul(a, b))


def test_narrow_fmul_rejects_bad_widths():
    from tricut.rtl.te.fmul import FP32Mul
    for bad in (0, 25, 8.0, True):
        with pytest.raises(ValueError, match=f"b_bits must be an int in 1..24, got {bad!r}"):
            FP32Mul(b_bits=bad)


# ------------------------------------------------------------------------------ model
@pytest.mark.parametrize("kv_dtype", KV_DTYPES)
def test_split_model_vs_float64_within_the_serial_bounds(kv_dtype):
    """The integer running maximum changes no accuracy bound: the same 2e-6 datapath bound as
    the serial engine (tests/test_te.py), on random and on rising-maximum inputs."""
    rng = np.random.default_rng(31)
    G, d, n = 4, 128, 300
    for q, k, v in ((rng.standard_normal((G, d)), rng.standard_normal((n, d)),
                     rng.standard_normal((n, d))), rising_max_inputs(rng, G, d, 60)):
        errs = {}
        for engine in M.ENGINES:
            vec = make_vector(q, k, v, kv_dtype, lanes=8, engine=engine)
            qu, ku, vu = vec.used()
            ref = M.reference_f64(qu, ku, vu, 1 / math.sqrt(d))
            errs[engine] = rel_l2(vec.golden().out_f32(), ref)
        assert errs["split"] <= 2e-6, (kv_dtype, errs)
        print(f"{kv_dtype}: datapath rel L2 serial {errs['serial']:.2e} split {errs['split']:.2e}")


def test_rescale_events_random_and_rising():
    rng = np.random.default_rng(4)
    G, d, n = 4, 64, 80
    q, k, v = rising_max_inputs(rng, G, d, n)
    vec = make_vector(q, k, v, "bf16", lanes=16, engine="split")
    ev, per_head = M.rescale_events(vec.q_codes, vec.k_codes, "bf16", vec.scale_bits,
                                    lanes=16, engine="split")
    assert ev == G * (n - 1) and list(per_head) == [n - 1] * G
    vec = random_vector(rng, "bf16", G, d, 16, n)
    ev_serial, _ = M.rescale_events(vec.q_codes, vec.k_codes, "bf16", vec.scale_bits, lanes=16)
    ev_split, _ = M.rescale_events(vec.q_codes, vec.k_codes, "bf16", vec.scale_bits, lanes=16,
                                   engine="split")
    iid, worst = M.expected_rescale_events(n, G)
    assert ev_split <= ev_serial < 3 * iid < worst, (ev_split, ev_serial, iid)


# ------------------------------------------------------------------------------ engine
# The engines' matrices (sim/harness/unit_matrices.py): the suite runs the small cases of
# each; benchmarks/unit_matrices.py runs every case (docs/unit-matrices.md).
RANDOM, EDGES = MATRICES["te_split_random"], MATRICES["te_split_edges"]
PAIRS, LANES = MATRICES["te_split_idle_backpressure"], MATRICES["te_split_lane_utilisation"]


@pytest.mark.parametrize("engine,shape", RANDOM.in_tests, ids=RANDOM.ids())
def test_split_engine_random_and_rising_inputs_bit_exact_and_cycle_exact(engine, shape):
    RANDOM.check(engine, shape)


@pytest.mark.parametrize("kv_dtype,engine", EDGES.in_tests, ids=EDGES.ids())
def test_split_engine_edge_cases_back_to_back(kv_dtype, engine):
    EDGES.check(kv_dtype, engine)


@pytest.mark.parametrize("engine,idle,backpressure", PAIRS.in_tests, ids=PAIRS.ids())
def test_split_engine_idle_backpressure_matrix(engine, idle, backpressure):
    PAIRS.check(engine, idle, backpressure)


@pytest.mark.parametrize("engine,G,d,lanes", LANES.in_tests, ids=LANES.ids())
def test_split_engine_lane_utilisation(engine, G, d, lanes):
    LANES.check(engine, G, d, lanes)


def test_split_engine_rejects_bad_parameters():
    for cls in (TESplitEngine, TEPipelinedEngine):
        with pytest.raises(ValueError, match="lanes must be one of"):
            cls(64, 2, 64, "bf16")
        with pytest.raises(ValueError, match="G must be an int"):
            cls(64, 0, 16, "bf16")
    with pytest.raises(ValueError, match="VLaneMul: stages must be an int in 0..1"):
        from tricut.rtl.te.vmul import VLaneMul
        VLaneMul(stages=2)
    with pytest.raises(ValueError, match="engine must be one of"):
        M.te_decode(np.zeros((1, 64), np.int64), np.zeros((1, 64), np.int64),
                    np.zeros((1, 64), np.int64), "bf16", 0, lanes=8, engine="fast")


# ------------------------------------------------------------------------------ pipelined
@pytest.mark.parametrize("kv_dtype,G,d,lanes", SPLIT_SHAPES,
                         ids=[f"{s[0]}-g{s[1]}-d{s[2]}-l{s[3]}" for s in SPLIT_SHAPES])
def test_pipelined_timing_slots_keep_the_k_array_busy(kv_dtype, G, d, lanes):
    """``te_pipe_timing``: the score-to-V latency is the sum of the stated unit stages; the
    token slots are the fewest (a power of two) that cover the V array's lag, so in an unstalled
    stream the K array never waits; the pipelined engine's steady state is the split engine's."""
    tm = M.te_pipe_timing(d, G, lanes, kv_dtype)
    S, dk = M.PIPE_STAGES, d // lanes
    wide = M.KV_SIGNIFICAND_BITS[kv_dtype] > 8
    assert tm.k_mul == S["k_mul_wide" if wide else "k_mul"] and tm.tree == int(math.log2(lanes))
    assert tm.score_to_v == 3 + tm.k_mul + tm.tree + S["c_mul"] + S["sub"] + S["exp2"]
    per_tok = (G + 1) * dk
    assert tm.slots * per_tok >= tm.v_start + G * dk > tm.slots // 2 * per_tok
    assert tm.slots & (tm.slots - 1) == 0
    for n in (1, 2, 9):
        fill = M.te_cycles(n, d, G, lanes, engine="pipelined", kv_dtype=kv_dtype) - \
            n * per_tok
        assert fill == M.te_cycles(1, d, G, lanes, engine="pipelined", kv_dtype=kv_dtype) - \
            per_tok


def test_pipelined_engine_units_are_registered():
    """The engine instantiates its arithmetic units with the stages ``PIPE_STAGES`` states
    (the loop adders -- K accumulator, ``l``, ``o`` -- stay combinational)."""
    from tricut.rtl.te.exp2 import Exp2
    from tricut.rtl.te.fadd import FP32Add
    from tricut.rtl.te.fmul import FP32Mul
    from tricut.rtl.te.recip import FP32Recip
    from tricut.rtl.te.vmul import VLaneMul
    m = TEPipelinedEngine(64, 2, 8, "bf16").elaborate(None)
    mods = m._named_submodules
    S = M.PIPE_STAGES
    want = {"k_mul0": (FP32Mul, S["k_mul"]), "tree0": (FP32Add, S["tree_add"]),
            "mul_c": (FP32Mul, S["c_mul"]), "sub_a": (FP32Add, S["sub"]),
            "exp_a": (Exp2, S["exp2"]), "recip": (FP32Recip, S["recip"]),
            "v_mul0": (VLaneMul, S["v_mul"]), "k_acc": (FP32Add, 0), "add_l": (FP32Add, 0),
            "v_add0": (FP32Add, 0)}
    for name, (cls, stages) in want.items():
        unit = mods[name][0]      # (submodule, source location)
        assert isinstance(unit, cls) and unit.stages == stages, name


def test_pipelined_docs_figures():
    """The figures docs/te.md quotes for the pipelined engine (the TE: its block diagram to
    its cycles, the page's opening sections), from ``models.te``."""
    import re
    from pathlib import Path
    doc = (Path(__file__).resolve().parent.parent / "docs" / "te.md").read_text()
    sec = doc[doc.index("## Block diagram"):doc.index("## Verification")]
    assert f"({M.te_pipe_timing(128, 8, 32).score_to_v} at 32 lanes, bf16)" in sec
    slots = {M.te_pipe_timing(128, G, 32).slots for G in range(4, 9)}
    assert len(slots) == 1 and f"({slots.pop()} at head_dim 128, 32 lanes, G 4..8)" in sec
    extra = [M.te_cycles(8192, 128, G, 32, engine="pipelined")
             - M.te_cycles(8192, 128, G, 32, engine="split") for G in (4, 7, 8)]
    assert " / ".join(map(str, extra)) + " cycles more than the split engine" in sec
    worst = max(x / M.te_cycles(8192, 128, G, 32, engine="split")
                for x, G in zip(extra, (4, 7, 8)))
    quoted = float(re.search(r"under ([\d.]+) % of a job of 8,192 tokens", sec).group(1))
    assert worst * 100 < quoted
    # the stage table: "| N (`key`) |" for every key of PIPE_STAGES
    for key, stages in M.PIPE_STAGES.items():
        assert f"| {stages} (`{key}`) |" in sec, key
