"""The tile side of a co-simulation in Amaranth's simulator (``docs/tile/cosim.md``,
"Co-simulation with the golden decode step"): :func:`cosim_run`.

The golden DSU model's schedule (:func:`~.setup.dsu_schedule`: every completion ``ok``, so it
does not depend on the tokens) decides each round's batch, and its descriptors go to the tile's
step sequencer as they are. Per round and layer the testbench (async, one simulator for the
whole run):

1. takes the layer from the decode-step generator
   (:func:`tricut.models.llama.decode_step_layers`; its new K/V already in the paged cache);
2. writes each batch request's new K/V token into the behavioural HBM through its ``write``
   port (the words :func:`~.hbm_image.kv_image` would hold, at
   :func:`~tricut.rtl.tile.attention_layouts.kv_addr`), or, with a CDU policy, into the
   tile's new-K/V buffer;
3. writes every (slot, kv_head)'s q, rounded to bf16, into the Q buffer (``q_write``);
4. pulses ``go``, waits for ``done`` (polled each cycle, with a hang limit), checks ``err``
   and ``te_status``, reads the output buffer and sends the fp32 outputs back as the step's
   attention ``[B, num_heads, head_dim]``.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from tricut.models import formats as F
from tricut.models import te as M
from tricut.models.llama import decode_step_layers
from tricut.rtl.te.layouts import pack_q_beats, unpack_out_beat
from tricut.rtl.tile.attention_layouts import index_bits, q_write_layout
from tricut.rtl.tile.behavioural.layouts import hbm_write_layout
from tricut.rtl.tile.sequencer_layouts import DESCRIPTOR_LAYOUT, pack, round_layout
from tricut.sim.harness.cdu import fe_config

from .compare import payload_fields, txn_fields
from .golden import RunInputs, RunResult
from .setup import Setup
from .tops import CosimTop

__all__ = ["cosim_run"]


def cosim_run(s: Setup, corrupt=None, golden: RunResult | None = None,
              max_layer_cycles=500_000) -> RunResult:
    """The tile side (see the module docs). ``corrupt=(addr, bit)`` flips one bit of the
    initial HBM image (the golden keeps it) to show that a difference is caught. With
    ``golden`` (its :func:`golden_run`) the run stops after the first layer whose outputs
    (or HBM ``err`` / TE status) differ from it."""
    from amaranth.sim import Simulator

    run = RunInputs(s)
    p = run.params()
    image, ts_bits = run.image()
    if corrupt is not None:
        image[corrupt[0]] ^= 1 << corrupt[1]
    cached = s.policy is not None
    top = CosimTop(image, p)
    tile, hbm = top.tile, top.hbm
    dut = rounds_in = top.dut       # the design whose ports the bench drives
    cfg, G, H = run.cfg, run.cfg.group_size, run.cfg.num_kv_heads
    rl, wl = round_layout(p["max_slots"]), hbm_write_layout(hbm.addr_bits, hbm.data_bits)
    ql = q_write_layout(tile.streamer.slot_bits, tile.streamer.hb, index_bits(tile.qbeats),
                        s.lanes)
    nl = tile.newkv_write.payload.shape() if cached else None
    res = RunResult(run.tokens)
    clock = [0]

    async def watch_txns(ctx):
        """The CDU's decisions as the new-token writer takes them."""
        t = tile.cdu.txn
        async for _, _, v, r, word in ctx.tick().sample(t.valid, t.ready, t.payload.as_value()):
            if v and r:
                res.txns.append(txn_fields(t.payload.shape(), word))

    async def new_kv(ctx, descs, lay):
        """The new token's K/V: into HBM directly (no CDU), or into the tile's new-K/V buffer
        (the CDU's W operations write it through to HBM, and into L2)."""
        for i, d in enumerate(descs):
            pos = int(lay.positions[i])
            if not cached:
                for a, w in run.token_words(lay.layer, d.request, pos).items():
                    await send(ctx, hbm.write, pack(wl, dict(addr=a, data=w)))
                continue
            for h, beats in enumerate(run.token_beats(lay.layer, d.request, pos)):
                for b, w in enumerate(beats):
                    await send(ctx, dut.newkv_write,
                               pack(nl, dict(request=d.request, kv_head=h, beat=b, data=w,
                                             pos=pos)))
        if cached:
            ctx.set(dut.layer, lay.layer)

    async def tick(ctx):
        await ctx.tick()
        clock[0] += 1

    async def send(ctx, stream, word):
        ctx.set(stream.valid, 1)
        ctx.set(stream.payload.as_value(), word)
        while True:                             # ready as sampled at the clock edge
            _, _, ready = await ctx.tick().sample(stream.ready)
            clock[0] += 1
            if ready:
                break
        ctx.set(stream.valid, 0)

    async def layer(ctx, ri, descs, lay):
        await new_kv(ctx, descs, lay)
        for i, d in enumerate(descs):                           # q of every (slot, kv_head)
            for h in range(H):
                qc = F.bf16_encode(lay.q[i, h * G:(h + 1) * G])
                for b, w in enumerate(pack_q_beats(qc, s.lanes)):
                    await send(ctx, dut.q_write, pack(ql, dict(slot=d.slot, kv_head=h, beat=b,
                                                                data=w)))
        ctx.set(dut.go, 1)
        t_go = clock[0]
        await tick(ctx)
        ctx.set(dut.go, 0)
        while not ctx.get(dut.done):
            await tick(ctx)
            if clock[0] - t_go > max_layer_cycles:
                raise TimeoutError(f"round {ri} layer {lay.layer}: tile not done after "
                                   f"{max_layer_cycles} cycles")
        res.layer_cycles[(ri, lay.layer)] = clock[0] - t_go
        if ctx.get(dut.err) or ctx.get(dut.te_status):
            res.problems.append(f"round {ri} layer {lay.layer}: HBM err {ctx.get(dut.err)}, "
                                f"TE status {ctx.get(dut.te_status):#x}")
        if cached and ctx.get(dut.misorder):
            res.problems.append(f"round {ri} layer {lay.layer}: misorder (a CDU ready entry or "
                                f"a job not the one expected)")
        attn = np.zeros(lay.q.shape, dtype=np.int64)
        for i, d in enumerate(descs):
            for h in range(H):
                for b in range(tile.qbeats):
                    ctx.set(dut.out_addr, tile.streamer.qbuf_addr(d.slot, h, b))
                    await tick(ctx)
                    row = unpack_out_beat(ctx.get(dut.out_data), s.lanes)[0]
                    g, c = divmod(b * s.lanes, cfg.head_dim)
                    attn[i, h * G + g, c:c + s.lanes] = row
            key = (ri, lay.layer, d.request)
            res.attn[key] = attn[i].copy()
            if golden is not None and not np.array_equal(golden.attn[key], attn[i]):
                res.stopped = True
        res.stopped |= golden is not None and bool(res.problems)
        return t_go, M.b2f(attn)

    async def bench(ctx):
        ctx.set(dut.tensor_scale, ts_bits)
        if cached:
            ctx.set(dut.config, fe_config(s.policy, "full", s.distance))
        for ri, descs in enumerate(run.rounds):
            # with a CDU every round is sent as the last one known ("end"): the DSU issues a
            # round only after the previous one completed, so the CDU's prefetch walk must
            # not wait for the next step's descriptor (it would wait forever)
            last = cached or ri == len(run.rounds) - 1
            await send(ctx, rounds_in.round, pack(rl, dict(step=descs[0].step, count=len(descs),
                                                     end=int(last))))
            for d in descs:
                await send(ctx, rounds_in.descriptor, pack(DESCRIPTOR_LAYOUT, dataclasses.asdict(d)))
            steps = decode_step_layers(run.weights, run.cache, run.batch(descs))
            lay, first = next(steps), None
            while True:
                t_go, attn = await layer(ctx, ri, descs, lay)
                first = t_go if first is None else first
                res.step_cycles[ri] = clock[0] - first
                if res.stopped:
                    if cached:
                        res.cdu_counters = payload_fields(dut.cdu_counters.shape(),
                                                   ctx.get(dut.cdu_counters.as_value()))
                    return
                try:
                    lay = steps.send(attn)
                except StopIteration as stop:
                    run.sampled(descs, stop.value)
                    break
        if cached:                      # the CDU's trailing decisions, then its counters
            for _ in range(max_layer_cycles):
                if ctx.get(dut.cdu_idle):
                    break
                await tick(ctx)
            res.cdu_counters = payload_fields(dut.cdu_counters.shape(),
                                       ctx.get(dut.cdu_counters.as_value()))

    sim = Simulator(top)
    sim.add_clock(1e-9)
    sim.add_testbench(bench)
    if cached:
        sim.add_testbench(watch_txns, background=True)
    sim.run()
    return res
