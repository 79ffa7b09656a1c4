"""Run the decode tile's attention path (``rtl/tile/attention_tile.py``) over whole decode-step
layers against the golden TE model, bit for bit.

The simulation top is :class:`~.tops.AttentionTop`: a
:class:`~tricut.rtl.tile.sequencer.StepSequencer` whose ``job`` stream drives an
:class:`~tricut.rtl.tile.attention_tile.AttentionTile`, whose HBM port is the behavioural
:class:`~tricut.rtl.tile.behavioural.hbm.HbmModel` holding the KV image.

:func:`~.hbm_image.make_kv` draws the K/V codes of every (request, layer, kv_head) region,
:func:`~.hbm_image.kv_image` lays them out as HBM words
(:func:`tricut.rtl.tile.attention_layouts.kv_addr`), :func:`run` drives rounds
(:class:`~tricut.sim.harness.sequencer.SeqRound`) through the top in Amaranth's simulator: per
round the ``round`` beat and descriptors, then per layer the q of every (slot, kv_head) into the
Q buffer, a ``go`` pulse, a wait for ``done`` (cycles counted from ``go`` to ``done``) and a
read of the output buffer. :func:`expected` is the golden output and :func:`check` compares;
:func:`simulate` does both.

Golden, per (slot, layer, kv_head) of a round: ``models.te.te_decode`` over tokens
``[0, seq_len)`` without a split, ``models.te.combine_partials`` of ``te_decode(...,
partial=True)`` of each split part with one (``models.tile.split_parts``).

:func:`run_block_reads` drives the block-read interface alone (``HbmBlockReader`` over the
behavioural HBM, :class:`~.tops.BlockReaderTop`) and :func:`expected_block_words` is what it
must answer.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from tricut.models import formats as F
from tricut.models import te as M
from tricut.models.tile import split_parts
from tricut.rtl.te.layouts import pack_q_beats, unpack_out_beat
from tricut.rtl.tile.attention_layouts import index_bits, kv_addr, q_write_layout
from tricut.rtl.tile.sequencer_layouts import DESCRIPTOR_LAYOUT, pack, round_layout

from .hbm_image import KV, kv_image, make_kv
from .params import with_defaults
from .tops import AttentionTop, BlockReaderTop

__all__ = ["make_q", "make_qs", "expected", "run", "check", "simulate", "LayerResult",
           "BlockRead", "expected_block_words", "run_block_reads"]


def make_q(rng, params=None):
    """One layer's q of one (slot, kv_head): ``[G, d]`` bf16 codes of N(0, 1) values."""
    p = with_defaults(params)
    return F.bf16_encode(rng.standard_normal((p["G"], p["head_dim"])).astype(np.float32))


def expected(q, kv: KV, request, layer, head, seq_len, params=None, scale_bits=None):
    """The golden output ``[G, d]`` (fp32 bit patterns) of one (slot, layer, kv_head)."""
    from tricut.rtl.tile.kv_streamer import default_scale_bits
    p = with_defaults(params)
    sb = default_scale_bits(p["head_dim"]) if scale_bits is None else scale_bits

    def te(lo, hi, partial):
        sl = slice(lo, hi)
        return M.te_decode(q, kv.k[request, layer, head, sl], kv.v[request, layer, head, sl],
                           p["kv_dtype"], sb, lanes=p["lanes"], partial=partial,
                           k_scales=None if kv.ks is None else kv.ks[request, layer, head, sl],
                           v_scales=None if kv.vs is None else kv.vs[request, layer, head, sl],
                           tensor_scale_bits=kv.ts_bits)
    split = p["split_tokens"]
    parts = split_parts(seq_len, split)
    if parts == 1:
        return te(0, seq_len, False).out
    rs = [te(i * split, min(seq_len, (i + 1) * split), True) for i in range(parts)]
    return M.combine_partials([(r.out, r.m, r.l) for r in rs])


@dataclass
class LayerResult:
    """One layer of one round: cycles from the ``go`` cycle to the first cycle ``done`` is
    seen (inclusive of ``go``), the outputs ``{(slot, kv_head): [G, d] fp32 bits}``, the
    tile's ``err`` and ``te_status`` at ``done``, the HBM bursts of the layer and how many
    of them were answered out of issue order (the k-th burst answered is not the k-th
    issued), and the wall time (s) the simulator took from ``go`` to ``done``."""
    round: int
    layer: int
    cycles: int
    out: dict = field(default_factory=dict)
    err: int = 0
    te_status: int = 0
    bursts: int = 0
    reordered: int = 0
    run_s: float = 0.0


async def _send(ctx, s, word):
    """One beat on stream ``s``: offered until it transfers."""
    ctx.set(s.valid, 1)
    ctx.set(s.payload.as_value(), word)
    await ctx.tick().until(s.ready)
    ctx.set(s.valid, 0)


def run(rounds, qs, image, params=None, ts_bits=0, max_layer_cycles=200_000):
    """Drive ``rounds`` through an :class:`AttentionTop` holding ``image`` in the Amaranth
    simulator. ``qs[(round index, layer, slot, kv_head)]`` is the q ``[G, d]`` written before
    that layer's ``go``; ``ts_bits`` the NVFP4 tensor scale on the tile's ``tensor_scale``.
    Returns a :class:`LayerResult` per (round, layer) with at least one descriptor (rounds
    without one have no jobs and are only sent to the sequencer). A background process logs
    the HBM bursts' ids in issue and in answer order (``LayerResult.reordered``)."""
    from amaranth.sim import Simulator

    p = with_defaults(params)
    top = AttentionTop(image, p)
    tile, seq = top.tile, top.seq
    H, L, lanes = p["num_kv_heads"], p["num_layers"], p["lanes"]
    qb = tile.qbeats
    rl = round_layout(p["max_slots"])
    results = []
    issued, answered = [], []          # HBM burst ids, in issue and in answer order

    async def watch(ctx):
        hbm = top.hbm
        async for _, _, qv, qr, qid, rv, rr, rid, rl in ctx.tick().sample(
                hbm.req.valid, hbm.req.ready, hbm.req.payload.id, hbm.resp.valid,
                hbm.resp.ready, hbm.resp.payload.id, hbm.resp.payload.last):
            if qv and qr:
                issued.append(qid)
            if rv and rr and rl:
                answered.append(rid)

    async def bench(ctx):
        ctx.set(tile.tensor_scale, ts_bits)
        for ri, rnd in enumerate(rounds):
            await _send(ctx, seq.round, pack(rl, dict(step=rnd.step,
                                                      count=len(rnd.descriptors),
                                                      end=int(rnd.end))))
            for d in rnd.descriptors:
                await _send(ctx, seq.descriptor, pack(DESCRIPTOR_LAYOUT, d.__dict__))
            if not rnd.descriptors:
                continue
            for layer in range(L):
                for d in rnd.descriptors:
                    for h in range(H):
                        for i, w in enumerate(pack_q_beats(qs[(ri, layer, d.slot, h)], lanes)):
                            await _send(ctx, tile.q_write,
                                        _q_word(tile, d.slot, h, i, w))
                b0 = len(issued)
                t0 = time.perf_counter()
                ctx.set(tile.go, 1)
                await ctx.tick()
                ctx.set(tile.go, 0)
                cycles = 1
                while not ctx.get(tile.done):
                    await ctx.tick()
                    cycles += 1
                    if cycles > max_layer_cycles:
                        raise TimeoutError(f"attention tile hung: round {ri} layer {layer} not "
                                           f"done after {cycles} cycles")
                run_s = time.perf_counter() - t0
                res = LayerResult(ri, layer, cycles, err=ctx.get(tile.err),
                                  te_status=ctx.get(tile.te_status), bursts=len(issued) - b0,
                                  reordered=sum(a != b for a, b in zip(issued[b0:],
                                                                       answered[b0:])),
                                  run_s=run_s)
                for d in rnd.descriptors:
                    for h in range(H):
                        rows = []
                        for b in range(qb):
                            ctx.set(tile.out_addr, tile.streamer.qbuf_addr(d.slot, h, b))
                            await ctx.tick()
                            rows.append(unpack_out_beat(ctx.get(tile.out_data), lanes)[0])
                        res.out[(d.slot, h)] = np.array(rows, dtype=np.int64).reshape(
                            p["G"], p["head_dim"])
                results.append(res)

    sim = Simulator(top)
    sim.add_clock(1e-9)
    sim.add_testbench(bench)
    sim.add_testbench(watch, background=True)
    sim.run()
    return results


def _q_word(tile, slot, head, beat, data):
    lay = q_write_layout(tile.streamer.slot_bits, tile.streamer.hb, index_bits(tile.qbeats),
                         tile.lanes)
    return pack(lay, dict(slot=slot, kv_head=head, beat=beat, data=data))


def check(rounds, qs, kv: KV, results, params=None):
    """Every output of every (round, layer, slot, kv_head) equal to :func:`expected`, bit for
    bit, and no HBM ``err`` and no TE status flag; raises ``AssertionError`` naming the first
    difference."""
    p = with_defaults(params)
    busy = [ri for ri, r in enumerate(rounds) if r.descriptors]
    want = [(ri, layer) for ri in busy for layer in range(p["num_layers"])]
    got = [(r.round, r.layer) for r in results]
    assert got == want, f"layers run {got}, expected {want}"
    for res in results:
        assert not res.err, f"round {res.round} layer {res.layer}: HBM err"
        assert not res.te_status, f"round {res.round} layer {res.layer}: TE status " \
                                  f"{res.te_status:#x}"
        for d in rounds[res.round].descriptors:
            for h in range(p["num_kv_heads"]):
                exp = expected(qs[(res.round, res.layer, d.slot, h)], kv, d.request, res.layer,
                               h, d.seq_len, p)
                out = res.out[(d.slot, h)]
                if not np.array_equal(out, exp):
                    g, i = map(int, np.argwhere(out != exp)[0])
                    raise AssertionError(
                        f"round {res.round} layer {res.layer} slot {d.slot} kv_head {h} "
                        f"(request {d.request}, seq_len {d.seq_len}): out[{g}][{i}] = "
                        f"{int(out[g, i]):#010x}, golden {int(exp[g, i]):#010x}")


def make_qs(rng, rounds, params=None):
    """Random q for every (round, layer, slot, kv_head) of ``rounds``."""
    p = with_defaults(params)
    return {(ri, layer, d.slot, h): make_q(rng, p) for ri, r in enumerate(rounds)
            for layer in range(p["num_layers"]) for d in r.descriptors
            for h in range(p["num_kv_heads"])}


def simulate(rounds, params=None, seed=0, corrupt=None):
    """Random K/V and q, ``rounds`` through the tile, checked against the golden. ``corrupt``
    ``(addr, bit)`` flips one bit of that HBM word in the simulated image only (the golden
    keeps the original). Returns the :class:`LayerResult` list."""
    p = with_defaults(params)
    rng = np.random.default_rng(seed)
    kv = make_kv(rng, p)
    qs = make_qs(rng, rounds, p)
    image = kv_image(kv, p)
    if corrupt is not None:
        addr, bit = corrupt
        image[addr] ^= 1 << bit
    results = run(rounds, qs, image, p, ts_bits=kv.ts_bits)
    check(rounds, qs, kv, results, p)
    return results


# ----------------------------------------------------------------------------------------------
# the block-read interface alone: HbmBlockReader <-> HbmModel
# ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class BlockRead:
    """One block read: tokens ``[block*16 + t0, + ntok)`` of region (request, layer, kv_head)."""
    request: int
    layer: int
    kv_head: int
    block: int
    t0: int
    ntok: int


def expected_block_words(reads, image, params=None):
    """The ``(data, last)`` beats the block reads must answer: the image's words from
    ``kv_addr``, ``last`` on each read's final word."""
    p = with_defaults(params)
    dk = p["head_dim"] // p["lanes"]
    out = []
    for r in reads:
        a = kv_addr(r.request, r.layer, r.kv_head, r.block * 16 + r.t0,
                    num_layers=p["num_layers"], num_kv_heads=p["num_kv_heads"],
                    max_ctx=p["max_ctx"], head_dim=p["head_dim"], lanes=p["lanes"])
        n = r.ntok * 2 * dk
        out += [(image[a + i], int(i == n - 1)) for i in range(n)]
    return out


def run_block_reads(reads, image, params=None, ready=0.7, seed=0, max_cycles=100_000):
    """``reads`` (:class:`BlockRead`) offered back to back to an ``HbmBlockReader`` over the
    behavioural HBM holding ``image``, ``rd_data`` ready with probability ``ready`` per cycle
    (seeded); returns ``(beats, answered, issued)``: the ``(data, last, err)`` beats received,
    and the HBM burst ids in answer and in issue order."""
    import random

    from amaranth.sim import Simulator

    from tricut.rtl.tile.attention_layouts import block_req_layout
    from tricut.rtl.tile.behavioural.layouts import unpack
    from tricut.rtl.tile.sequencer_layouts import head_bits

    p = with_defaults(params)
    top = BlockReaderTop(image, p)
    rd = top.reader
    lay = block_req_layout(rd.w.req, rd.w.layer, head_bits(p["num_kv_heads"]), rd.w.block)
    want = sum(r.ntok * 2 * (p["head_dim"] // p["lanes"]) for r in reads)
    beats, answered, issued = [], [], []
    rng = random.Random(seed)

    async def source(ctx):
        for r in reads:
            await _send(ctx, rd.rd_req, pack(lay, r.__dict__))

    async def sink(ctx):
        cycles = 0
        while len(beats) < want:
            ctx.set(rd.rd_data.ready, int(rng.random() < ready))
            _, _, v, rdy, word, qv, qr, qid, rv, rl, rid = await ctx.tick().sample(
                rd.rd_data.valid, rd.rd_data.ready, rd.rd_data.payload.as_value(),
                rd.hbm_req.valid, rd.hbm_req.ready, rd.hbm_req.payload.id,
                rd.hbm_resp.valid, rd.hbm_resp.payload.last, rd.hbm_resp.payload.id)
            if v and rdy:
                beats.append(tuple(unpack(rd.rd_data.payload.shape(), word).values()))
            if qv and qr:
                issued.append(qid)
            if rv and rl:
                answered.append(rid)
            cycles += 1
            if cycles > max_cycles:
                raise TimeoutError(f"block reader hung: {len(beats)}/{want} beats")
        for _ in range(8):                      # nothing more may come
            ctx.set(rd.rd_data.ready, 1)
            await ctx.tick()
            assert not ctx.get(rd.rd_data.valid), "block reader: a beat after the last"

    sim = Simulator(top)
    sim.add_clock(1e-9)
    sim.add_testbench(source, background=True)
    sim.add_testbench(sink)
    sim.run()
    return beats, answered, issued
