"""L2 fill engine and new-token writer of the decode tile (``rtl/tile/l2_fill.py``; docs/tile/l2-fill.md,
"L2 fill engine and new-token writer") in Amaranth's simulator with the behavioural HBM and L2
data array, driven as the CDU drives them (``sim/harness/l2_fill.py``).

Random CDU decision streams (fills into random frames with alloc 1/0, retries and orphaned
retries, W txns of all three results, other txns) under random idle/backpressure and an HBM
answering in or out of order; at every checkpoint every allocated L2 frame and the whole HBM
image equal the reference built from the KV image bit for bit, responses come in order with
the right err (a persistent HBM fault: err = 1 on that block's fills only). A W hit on a
frame with a fill in flight waits for it and the frame ends with the new token (with the
writer's wait removed the same runs fail); fills into one frame land in request order; a
corrupted reference fails; fill timing pinned; Verilog lint clean.
"""

from __future__ import annotations

import gc
import random
import warnings

import pytest
from amaranth.hdl import Fragment, Module
from amaranth.lib import wiring

from tricut.rtl.cdu import layouts as CL
from tricut.rtl.tile import attention_layouts as AL
from tricut.rtl.tile.behavioural import layouts as BL
from tricut.rtl.tile.behavioural.hbm import ALWAYS
from tricut.rtl.tile.l2_fill import L2Filler, L2WriteArbiter, NewTokenWriter, frame_of
from tricut.sim.harness.l2_fill import (DEFAULTS, Mismatch, Op, Reference, fill_ops, kv_image,
                                        random_ops, simulate)

#: back-to-back fills of 256 words (H 2, 2*Dk 8), HBM latency 20, 16-beat bursts, no idle:
#: cycle each hbm_resp is taken (hbm_req accepted on cycles 0, 104, 360, ...); docs/tile/l2-fill.md
#: quotes them: latency + max_beats + 2 + 256 to the first, then one fill per 256 cycles
FILL_RESP_CYCLES = [294, 550, 806, 1062]


# ----------------------------------------------------------------------------------------------
# parameters and layouts
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("cls", [L2Filler, NewTokenWriter])
@pytest.mark.parametrize("kw,needle", [
    (dict(max_ctx=40), "max_ctx must be a multiple of 16 (whole KV blocks: an L2 frame holds "
                       "a whole block), got 40"),
    (dict(sets=3), "sets must be a power of 2 in 1..1024, got 3"),
    (dict(ways=17), "ways must be an integer in 1..16, got 17"),
    (dict(head_dim=96), "head_dim must be one of (64, 128, 256), got 96"),
    (dict(num_requests=17), "num_requests must be an integer in 1..16, got 17"),
])
def test_bad_parameters_rejected_before_construction(cls, kw, needle):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError) as e:
            cls(**kw)
        gc.collect()
    assert needle in str(e.value)


def test_filler_depth_checked():
    with pytest.raises(ValueError, match="depth must be an integer in 1..64, got 0"):
        L2Filler(depth=0)


def test_layouts_are_the_cdu_streams_and_the_models_ports():
    """The filler and the writer take the CDU's own streams (declared once, in
    rtl/cdu/layouts.py), so the CDU connects to them as it is; the models' write ports are
    the tile's layouts."""
    w = CL.Widths()
    f, wr = L2Filler(), NewTokenWriter()
    assert f.hbm_req.payload.shape() == CL.hbm_req_layout(w)
    assert f.hbm_resp.payload.shape() == CL.hbm_resp_layout(w)
    assert wr.txn.payload.shape() == CL.txn_layout(w)
    assert BL.l2_write_layout is AL.l2_write_layout and BL.hbm_write_layout is AL.hbm_write_layout
    assert BL.l2_read_layout is AL.l2_read_layout and BL.l2_data_layout is AL.l2_data_layout
    assert f.l2_write.payload.shape() == AL.l2_write_layout(8, 256, 264)
    from tricut.rtl.cdu.top import CDUBackEnd
    be = CDUBackEnd(sets=4, ways=2, widths=w)
    m = Module()
    m.submodules += [be, f, wr]
    wiring.connect(m, be.txn, wr.txn)
    wiring.connect(m, be.hbm_req, f.hbm_req)
    wiring.connect(m, f.hbm_resp, be.hbm_resp)
    Fragment.get(m, None)                   # used (no UnusedElaboratable)


# ----------------------------------------------------------------------------------------------
# random CDU streams, checked at checkpoints
# ----------------------------------------------------------------------------------------------
RANDOM_CASES = [
    # (unit params, hbm params, idle, backpressure, seed)
    ({}, {}, "none", "none", 1),
    ({}, dict(reorder=True, latency=9, seed=77), "random", "random", 2),
    (dict(num_kv_heads=1, sets=2, ways=4, max_beats=12, max_outstanding=2, depth=2),
     dict(latency=30), "periodic", "random", 3),
    (dict(kv_dtype="fp8", sets=1, ways=4, num_layers=3, max_ctx=48, depth=6),
     dict(reorder=True, latency=4, max_outstanding=3, seed=5), "random", "periodic", 4),
]


def _random_run(params, hbm, idle, bp, seed, phases=3, n=24, faults=()):
    p = dict(DEFAULTS)
    p.update(params)
    img = kv_image(p, seed)
    ref = Reference(img, p, faults)
    rng = random.Random(seed)
    db = AL.kv_data_bits(p["lanes"], p["kv_dtype"])
    plan = []
    for _ in range(phases):
        ops = random_ops(ref, rng, n, data_bits=db)
        plan.append((ops, ref.snapshot()))
    res = simulate(img, plan, p, dict(hbm, faults=faults), idle=idle, backpressure=bp,
                   seed=seed)
    return plan, res


@pytest.mark.parametrize("params,hbm,idle,bp,seed", RANDOM_CASES)
def test_random_cdu_streams_bit_exact_at_checkpoints(params, hbm, idle, bp, seed):
    plan, res = _random_run(params, hbm, idle, bp, seed)
    ops = [op for ph, _ in plan for op in ph]
    kinds = {(op.kind, op.result, op.alloc) for op in ops}
    assert res.checkpoints == 3 and res.cycles < 100_000
    assert len(res.resps) == sum(op.kind in ("fill", "retry") for op in ops)
    # every W result, fills with and without alloc, orphaned retries were exercised
    assert {r for k, r, _ in kinds if k == "W"} == {"w_hit", "w_alloc", "w_bypass"}
    assert ("fill", "miss_bypass", 0) in kinds and any(k == "fill" and a for k, _, a in kinds)
    assert any(op.kind == "retry" for op in ops)


def test_persistent_hbm_error_answers_err_on_that_block_only():
    p = dict(DEFAULTS)
    img = kv_image(p, 9)
    probe = Reference(img, p)
    bad = probe.addr(2, 1, 1, 3 * 16) + 16            # head 1's second burst of block 3
    faults = ((bad, ALWAYS),)
    ref = Reference(img, p, faults)
    tags = [(0, 0, 0), (2, 1, 3), (1, 0, 2), (3, 1, 1)]
    ops = fill_ops(ref, tags, way=1)
    ops.append(Op("retry", 2, 1, 3, way=1, alloc=1, id=ops[1].id, retry=1))
    ref.apply(ops[-1])
    ops += fill_ops(ref, [(2, 1, 3)], alloc=0)       # a bypass read: nothing read here, err 0
    snap = ref.snapshot()
    assert [e for _, e in snap["resps"]] == [0, 1, 0, 0, 1, 0]
    res = simulate(img, [(ops, snap)], p, dict(faults=faults, reorder=True, seed=3),
                   idle="random", backpressure="random", seed=9)
    assert [e for _, _, e in res.resps] == [0, 1, 0, 0, 1, 0]
    # the random streams with the fault too
    _random_run({}, dict(reorder=True), "random", "random", 11, phases=2, n=20, faults=faults)


def _inflight_case(img, p, delay, wait_idle, t=3):
    """A fill of (1, 1, 2) into way 0, then a W hit on it (token ``t``) whose layer opens
    ``delay`` cycles after its words are loaded: the W arrives while the fill is in flight."""
    ref = Reference(img, p)
    ops = fill_ops(ref, [(1, 1, 2)], way=0)
    rng = random.Random(delay)
    w = Op("W", 1, 1, 2, way=0, txn_kind="W", result="w_hit", pos=2 * 16 + t,
           words=[rng.getrandbits(264) for _ in range(16)])
    ref.apply(w)
    ops.append(w)
    return simulate(img, [(ops, ref.snapshot())], p, seed=1, open_delay=(delay, delay),
                    wait_idle=wait_idle)


def test_w_hit_waits_for_the_fill_in_flight_and_the_check_can_fail():
    p = dict(DEFAULTS)
    img = kv_image(p, 1)
    delays = [0, 30, 60, 90, 120, 150, 155, 160, 190]
    for d in delays:
        res = _inflight_case(img, p, d, True)
        assert res.txn_cycles[-1] > res.resps[0][0]   # the W finished after the fill
    # the same runs with the writer's wait removed (fills_idle tied to 1): some fail
    failed = []
    for d in delays:
        try:
            _inflight_case(img, p, d, False)
        except Mismatch as e:
            assert "L2 frame" in str(e)
            failed.append(d)
    assert failed, "no run failed without the fills_idle wait"


def test_fills_into_one_frame_land_in_request_order():
    p = dict(DEFAULTS)
    img = kv_image(p, 4)
    sets, ways = p["sets"], p["ways"]
    same = [(r, l, b) for r in range(4) for l in range(2) for b in range(4)
            if frame_of(r, l, b, 1, sets, ways) == frame_of(0, 0, 0, 1, sets, ways)]
    ref = Reference(img, p)
    ops = fill_ops(ref, same[:5], way=1)
    # a retry of the first fill after the frame was reused: orphaned (alloc 0), goes nowhere
    ops.append(Op("retry", *same[0], way=1, alloc=0, id=ops[0].id, retry=1))
    ref.apply(ops[-1])
    snap = ref.snapshot()
    assert list(snap["frames"]) == [frame_of(0, 0, 0, 1, sets, ways)]
    assert ref.tags[frame_of(0, 0, 0, 1, sets, ways)] == same[4]
    res = simulate(img, [(ops, snap)], p, dict(reorder=True, latency=6, seed=99),
                   idle="random", backpressure="random", seed=4)
    assert [i for _, i, _ in res.resps] == [op.id for op in ops]


def test_fill_timing_back_to_back():
    p = dict(DEFAULTS)
    img = kv_image(p, 2)
    ref = Reference(img, p)
    ops = fill_ops(ref, [(0, 0, 0), (1, 0, 1), (2, 1, 2), (3, 1, 3)], way=0)
    res = simulate(img, [(ops, ref.snapshot())], p, seed=1)
    assert [c for c, _, _ in res.resps] == FILL_RESP_CYCLES


@pytest.mark.parametrize("result,after_open", [("w_bypass", 16), ("w_alloc", 33),
                                               ("w_hit", None)])
def test_w_timing(result, after_open):
    """A W is taken H*2*Dk cycles after its layer opens (HBM words), 2*H*2*Dk + 1 with its
    L2 words (one cycle for the idle check); a W hit behind a fill in flight H*2*Dk cycles
    after the fill's response (its L2 words start the cycle after the fill's last word)."""
    p = dict(DEFAULTS)
    img = kv_image(p, 1)
    ref = Reference(img, p)
    ops = fill_ops(ref, [(0, 0, 1)], way=1) if result == "w_hit" else []
    w = Op("W", 0, 0, 1, way=1, txn_kind="W", result=result, pos=16, words=list(range(16)))
    ref.apply(w)
    ops.append(w)
    res = simulate(img, [(ops, ref.snapshot())], p, seed=1, open_delay=(0, 0))
    if after_open is None:
        assert res.txn_cycles[-1] == res.resps[0][0] + 16 and res.open_cycles[0] < 100
    else:
        assert res.txn_cycles[-1] == res.open_cycles[0] + after_open


def test_corrupted_reference_fails():
    p = dict(DEFAULTS)
    img = kv_image(p, 5)
    ref = Reference(img, p)
    ops = fill_ops(ref, [(0, 1, 1)], way=0)
    snap = ref.snapshot()
    f = next(iter(snap["frames"]))
    snap["frames"][f][17] ^= 1 << 100
    with pytest.raises(Mismatch, match=f"L2 frame {f} beat 17"):
        simulate(img, [(ops, snap)], p, seed=1)
    snap = ref.snapshot()
    snap["hbm"][3] ^= 1
    with pytest.raises(Mismatch, match="HBM word 3 "):
        simulate(img, [(ops, snap)], p, seed=1)


# ----------------------------------------------------------------------------------------------
# Verilog
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("unit", ["tile-l2-filler", "tile-newtoken-writer"])
def test_verilog_lint_clean(tmp_path, unit):
    from tricut.sim.harness.verilog_out import build_unit, lint, write_verilog

    top = unit.replace("-", "_")
    path = write_verilog(build_unit(unit, [])[0], top, tmp_path)
    clean, messages = lint(path, top)
    assert clean, messages


def test_arbiter_lint_clean(tmp_path):
    from tricut.sim.harness.verilog_out import lint, write_verilog

    path = write_verilog(L2WriteArbiter(8, 256, 264), "l2_write_arbiter", tmp_path)
    clean, messages = lint(path, "l2_write_arbiter")
    assert clean, messages
