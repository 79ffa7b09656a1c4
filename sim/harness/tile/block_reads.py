"""The decode tile's block-read interface alone (``HbmBlockReader`` over the behavioural HBM,
:class:`~.tops.BlockReaderTop`) in Amaranth's simulator: :func:`run_block_reads` drives it and
:func:`expected_block_words` is what it must answer."""

from __future__ import annotations

from dataclasses import dataclass

from tricut.rtl.tile.attention_layouts import kv_addr
from tricut.rtl.tile.sequencer_layouts import pack

from .params import with_defaults
from .tops import BlockReaderTop

__all__ = ["BlockRead", "expected_block_words", "run_block_reads"]


async def _send(ctx, s, word):
    """One beat on stream ``s``: offered until it transfers."""
    ctx.set(s.valid, 1)
    ctx.set(s.payload.as_value(), word)
    await ctx.tick().until(s.ready)
    ctx.set(s.valid, 0)


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
