"""The co-simulation loop of the decode tile, one for both simulators (``docs/tile/cosim.md``,
"Co-simulation with the golden decode step"): :class:`TileLoop`.

The golden DSU model's schedule (:func:`~.setup.dsu_schedule`: every completion ``ok``, so it
does not depend on the tokens) decides each round's batch, and its descriptors go to the tile's
step sequencer as they are. Per round and layer the loop:

1. takes the layer from the decode-step generator
   (:func:`tricut.models.llama.decode_step_layers`; its new K/V already in the paged cache);
2. writes each batch request's new K/V token into the behavioural HBM through its ``write``
   port (the words :func:`~.hbm_image.kv_image` would hold, at
   :func:`~tricut.rtl.tile.attention_layouts.kv_addr`), or, with a CDU, into the tile's
   new-K/V buffer;
3. writes every (slot, kv_head)'s q, rounded to bf16, into the Q buffer (``q_write``);
4. pulses ``go``, waits for ``done`` (with a hang limit), checks ``err`` and ``te_status``,
   reads the output buffer and sends the fp32 outputs back as the step's attention
   ``[B, num_heads, head_dim]``.

The simulator is behind a *port* (:class:`~.amaranth_run.AmaranthPort`, the Verilator bench
:class:`~.bench.CosimBench`): ``clock`` (the cycles counted), ``send(name, words)`` (the
``round``/``descriptor``/``intake`` streams, one beat per cycle while ready), ``put(name,
words)`` (host traffic: ``kv``, ``q``; the same cycles), ``read_out(addrs)`` (output buffer
words, one cycle each), ``go_to_done(limit)`` (``done``, ``aborted`` or ``hang``),
``cdu_settled(limit)``, ``get(name)`` and ``set(name, value)``. The DSU cluster's rounds are
the Verilator bench's (:meth:`~.bench.CosimBench.dsu_rounds`), on this loop's layers.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from tricut.models import formats as F
from tricut.models import te as M
from tricut.models.llama import decode_step_layers
from tricut.rtl.te.layouts import pack_q_beats, unpack_out_beat
from tricut.rtl.tile.attention_layouts import index_bits, q_write_layout
from tricut.rtl.tile.behavioural.layouts import hbm_write_layout
from tricut.rtl.tile.sequencer_layouts import DESCRIPTOR_LAYOUT, pack, round_layout

from .compare import payload_fields
from .golden import RunInputs, RunResult

__all__ = ["TileLoop", "Hang", "Aborted"]


class Hang(Exception):
    """Nothing happened within the run's cycle limit (reported as the run's ``timeout``)."""


class Aborted(Exception):
    """The DSU timed the round out and the tile aborted it (DSU mode)."""


class TileLoop:
    """One co-simulation's rounds on ``port`` (see the module docs): ``run`` its inputs,
    ``tile``/``hbm`` the attention path and HBM model of the top (their layouts), ``golden``
    (its :func:`~.golden.golden_run`, or None) to stop after the first layer that differs.
    ``res`` is the tile side's :class:`~.golden.RunResult`; ``info`` the wall time (s) and
    cycles of the golden step, the host traffic and ``go`` to ``done``."""

    def __init__(self, run: RunInputs, port, tile, hbm, golden: RunResult | None,
                 max_layer_cycles: int):
        self.run, self.s, self.port, self.tile = run, run.s, port, tile
        self.golden, self.max_layer_cycles = golden, max_layer_cycles
        self.cached = self.s.policy is not None
        self.cfg, self.G, self.H = run.cfg, run.cfg.group_size, run.cfg.num_kv_heads
        self.rl = round_layout(run.params()["max_slots"])
        self.wl = hbm_write_layout(hbm.addr_bits, hbm.data_bits)
        self.ql = q_write_layout(tile.streamer.slot_bits, tile.streamer.hb,
                                 index_bits(tile.qbeats), self.s.lanes)
        self.nl = tile.newkv_write.payload.shape() if self.cached else None
        self.res = RunResult(run.tokens)
        self.info = dict(golden_s=0.0, host_s=0.0, tile_s=0.0, tile_cycles=0, host_cycles=0)
        self.aborts = 0                 # the DSU link's abort count at the round's start

    def _timed(self, key, t0, c0=None):
        self.info[f"{key}_s"] += time.perf_counter() - t0
        if c0 is not None:
            self.info[f"{key}_cycles"] += self.port.clock - c0

    # ---- one layer -------------------------------------------------------------------------
    async def layer(self, ri, descs, lay):
        """One layer of round ``ri``: inputs, ``go`` to ``done``, outputs; returns ``(go
        cycle, attention output as float32)``."""
        port = self.port
        t0, c0 = time.perf_counter(), port.clock
        await self._layer_inputs(descs, lay)
        if self.s.dsu and port.get("aborts") != self.aborts:
            raise Aborted()
        t_go = port.clock
        self._timed("host", t0, c0)
        t0 = time.perf_counter()
        end = await port.go_to_done(self.max_layer_cycles)
        if end == "aborted":
            raise Aborted()
        if end == "hang":
            raise Hang(f"round {ri} layer {lay.layer}: tile not done after "
                       f"{self.max_layer_cycles} cycles")
        self.res.layer_cycles[(ri, lay.layer)] = port.clock - t_go
        self._timed("tile", t0)
        self.info["tile_cycles"] += port.clock - t_go
        t0, c0 = time.perf_counter(), port.clock
        attn = await self._layer_outputs(ri, descs, lay)
        self._timed("host", t0, c0)
        return t_go, M.b2f(attn)

    async def _layer_inputs(self, descs, lay):
        """The new tokens' K/V (into HBM, or the new-K/V port with a CDU) and the q of every
        (slot, KV head)."""
        run, G, s = self.run, self.G, self.s
        words = []
        for i, d in enumerate(descs):
            pos = int(lay.positions[i])
            if not self.cached:
                words += [pack(self.wl, dict(addr=a, data=w))
                          for a, w in run.token_words(lay.layer, d.request, pos).items()]
            else:
                words += [pack(self.nl, dict(request=d.request, kv_head=h, beat=b, data=w,
                                             pos=pos))
                          for h, beats in enumerate(run.token_beats(lay.layer, d.request, pos))
                          for b, w in enumerate(beats)]
        await self.port.put("kv", words)
        if self.cached:
            self.port.set("layer", lay.layer)
        qw = []
        for i, d in enumerate(descs):
            for h in range(self.H):
                qc = F.bf16_encode(lay.q[i, h * G:(h + 1) * G])
                qw += [pack(self.ql, dict(slot=d.slot, kv_head=h, beat=b, data=w))
                       for b, w in enumerate(pack_q_beats(qc, s.lanes))]
        await self.port.put("q", qw)

    async def _layer_outputs(self, ri, descs, lay):
        """The tile's flags and output buffer after ``done``, compared with the golden."""
        port, res, s, tile = self.port, self.res, self.s, self.tile
        err, te_status = port.get("err"), port.get("te_status")
        if (err or te_status) and not s.dsu:
            res.problems.append(f"round {ri} layer {lay.layer}: HBM err {err}, "
                                f"TE status {te_status:#x}")
        if self.cached and port.get("misorder"):
            res.problems.append(f"round {ri} layer {lay.layer}: misorder (a CDU ready entry or "
                                f"a job not the one expected)")
        attn = np.zeros(lay.q.shape, dtype=np.int64)
        read = iter(await port.read_out([tile.streamer.qbuf_addr(d.slot, h, b) for d in descs
                                         for h in range(self.H) for b in range(tile.qbeats)]))
        for i, d in enumerate(descs):
            for h in range(self.H):
                for b in range(tile.qbeats):
                    row = unpack_out_beat(next(read), s.lanes)[0]
                    g, c = divmod(b * s.lanes, self.cfg.head_dim)
                    attn[i, h * self.G + g, c:c + s.lanes] = row
        for i, d in enumerate(descs):
            key = (ri, lay.layer, d.request)
            res.attn[key] = attn[i].copy()
            if self.golden is not None and not np.array_equal(self.golden.attn[key], attn[i]):
                res.stopped = True
        res.stopped |= self.golden is not None and bool(res.problems)
        return attn

    # ---- rounds ----------------------------------------------------------------------------
    def golden_first(self, descs):
        t0 = time.perf_counter()
        steps = decode_step_layers(self.run.weights, self.run.cache, self.run.batch(descs))
        lay = next(steps)
        self._timed("golden", t0)
        return steps, lay

    def golden_next(self, steps, descs, attn):
        """The golden step's next layer given this layer's attention output, or None after
        the last layer (its tokens then sampled)."""
        t0 = time.perf_counter()
        try:
            return steps.send(attn)
        except StopIteration as stop:
            self.run.sampled(descs, stop.value)
            return None
        finally:
            self._timed("golden", t0)

    async def rounds(self):
        """The golden DSU model's rounds: each round's beats, then its layers; then the end
        (:meth:`finish`)."""
        run, res, port = self.run, self.res, self.port
        for ri, descs in enumerate(run.rounds):
            t0, c0 = time.perf_counter(), port.clock
            # with a CDU every round is sent as the last one known ("end"): the DSU issues a
            # round only after the previous one completed, so the CDU's prefetch walk must
            # not wait for the next step's descriptor (it would wait forever)
            last = self.cached or ri == len(run.rounds) - 1
            await port.send("round", [pack(self.rl, dict(step=descs[0].step, count=len(descs),
                                                         end=int(last)))])
            await port.send("descriptor", [pack(DESCRIPTOR_LAYOUT, dataclasses.asdict(d))
                                           for d in descs])
            self._timed("host", t0, c0)
            steps, lay = self.golden_first(descs)
            first = None
            while lay is not None:
                t_go, attn = await self.layer(ri, descs, lay)
                first = t_go if first is None else first
                res.step_cycles[ri] = port.clock - first
                if res.stopped:
                    return
                lay = self.golden_next(steps, descs, attn)

    async def finish(self):
        """With a CDU: its trailing decisions (unless the run stopped early), then its
        counters."""
        if not self.cached:
            return
        if not self.res.stopped:
            await self.port.cdu_settled(self.max_layer_cycles)
        self.res.cdu_counters = payload_fields(self.tile.cdu_counters.shape(),
                                               self.port.get("cdu_counters"))
