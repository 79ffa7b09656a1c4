"""The cocotb side of ``tricut tile run --sim verilator``: :class:`CosimBench`, the
co-simulation loop of :func:`~.amaranth_run.cosim_run` on the Verilator top
(:class:`~.verilator_top.CosimVerilatorTop`), in phases:

* set-up (:meth:`CosimBench.__init__`, :meth:`CosimBench.start`): the plan, the run's golden
  side, the top's layouts, the inputs' first values, the clock and the CDU decision tap;
* host traffic (:meth:`~CosimBench.send` one beat per cycle, :meth:`~CosimBench.play` through
  the HDL players and the output reader, one Python wake-up per piece);
* one layer (:meth:`~CosimBench.layer`: new K/V and q in, ``go``, ``done`` awaited as an edge,
  outputs read and compared);
* the rounds: the golden DSU model's (:meth:`~CosimBench.rounds`) or the DSU cluster's
  (:meth:`~CosimBench.dsu_rounds`, taps on its transfers, aborts and rollbacks);
* the end (:meth:`~CosimBench.finish`): the CDU's trailing decisions and counters, the pickled
  result.

Imported only in the simulator's Python (it imports cocotb's triggers).
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import time
from pathlib import Path

import numpy as np
from cocotb import start_soon
from cocotb.clock import Clock
from cocotb.triggers import Event, FallingEdge, First, ReadOnly, RisingEdge, Timer
from cocotb.utils import get_sim_time

from tricut.models import formats as F
from tricut.models import te as M
from tricut.models.dsu import Descriptor, Outcome
from tricut.models.llama import decode_step_layers
from tricut.rtl.dsu.layouts import INTAKE_LAYOUT, OUTCOME_LAYOUT
from tricut.rtl.dsu.regmap import Reason
from tricut.rtl.te.layouts import pack_q_beats, unpack_out_beat
from tricut.rtl.tile.attention_layouts import index_bits, q_write_layout
from tricut.rtl.tile.behavioural.layouts import hbm_write_layout
from tricut.rtl.tile.sequencer_layouts import DESCRIPTOR_LAYOUT, pack, round_layout
from tricut.sim.harness.cdu import fe_config
from tricut.sim.harness.dsu import REASONS

from .compare import payload_fields, txn_fields
from .golden import RunInputs, RunResult
from .setup import Setup
from .verilator_top import CLOCK_NS, CosimVerilatorTop

__all__ = ["CosimBench", "Hang", "Aborted"]


class Hang(Exception):
    """Nothing happened within the run's cycle limit (reported as the run's ``timeout``)."""


class Aborted(Exception):
    """The DSU timed the round out and the tile aborted it (DSU mode)."""


def _load_setup(plan):
    sd = dict(plan["setup"])
    if sd.get("prompt_lens") is not None:
        sd["prompt_lens"] = tuple(sd["prompt_lens"])
    return Setup(**sd)


class CosimBench:
    """One co-simulation on the Verilator top ``dut`` (see the module docs): the plan of
    :func:`~.verilator.run` from ``$TRICUT_PLANS``, the pickled
    result to ``$TRICUT_RESULTS``."""

    def __init__(self, dut):
        self.t_start = time.perf_counter()
        plan = pickle.loads(Path(os.environ["TRICUT_PLANS"]).read_bytes())
        self.s = s = _load_setup(plan)
        # with the DSU the rounds differ from the golden's after a rollback: no early stop
        self.golden = None if s.dsu else plan["golden"]
        self.max_layer_cycles = plan["max_layer_cycles"]
        self.run = run = RunInputs(s)
        p = run.params()
        self.cached = s.policy is not None
        self.top = top = CosimVerilatorTop(p)      # the layouts (not elaborated)
        self.tile = tile = top.tile
        self.cfg, self.G, self.H = run.cfg, run.cfg.group_size, run.cfg.num_kv_heads
        self.rl = round_layout(p["max_slots"])
        self.wl = hbm_write_layout(top.hbm.addr_bits, top.hbm.data_bits)
        self.ql = q_write_layout(tile.streamer.slot_bits, tile.streamer.hb,
                                 index_bits(tile.qbeats), s.lanes)
        self.nl = tile.newkv_write.payload.shape() if self.cached else None
        self.res = RunResult(run.tokens)
        self.info = dict(setup_s=time.perf_counter() - self.t_start, golden_s=0.0, host_s=0.0,
                         tile_s=0.0, cycles=0, tile_cycles=0, host_cycles=0)
        self.dut, self.clk, self.period = dut, dut.clk, CLOCK_NS
        self.clock = 0                  # falling edges counted by the bench
        self.aborts = 0                 # the DSU link's abort count at the round's start
        self.played = {k: 0 for k in top.stage_depth}   # per player: its transfers so far
        self.stage_mem = {"kv": dut.kv_stage.mem, "q": dut.q_stage.mem,
                          "rd": dut.rd_stage.mem, "cap": dut.rd_capture.mem}
        self.handles = {k: [] for k in self.stage_mem}

    # ---- set-up ----------------------------------------------------------------------------
    async def start(self):
        """The inputs' first values, the clock, the CDU decision tap; back on a falling edge."""
        dut, s, top, run = self.dut, self.s, self.top, self.run
        for k in ("intake",) if s.dsu else ("round", "descriptor"):
            getattr(dut, f"{k}__valid").value = 0
        if s.dsu:
            dut.intake_end.value = 0
            entry = top.hbm.addr_bits + 8
            for port, table in ((dut.hbm_faults, run.hbm_faults()),
                                (dut.hbm_lost, run.hbm_lost())):
                port.value = sum((addr | n << top.hbm.addr_bits) << (k * entry)
                                 for k, (addr, n) in enumerate(table))
        for k in top.stage_depth:
            getattr(dut, f"{k}_base").value = 0
            getattr(dut, f"{k}_target").value = 0
        dut.go.value = 0
        dut.tensor_scale.value = int(M.f2b(run.ts)) if run.ts is not None else 0
        if self.cached:
            dut.layer.value = 0
            dut.config.value = pack(self.tile.config.shape(),
                                    fe_config(s.policy, "full", s.distance))
        start_soon(Clock(self.clk, self.period, unit="ns").start())
        await FallingEdge(self.clk)
        if self.cached:
            start_soon(self._watch_txns())

    async def _watch_txns(self):
        """The CDU's decisions, one wake-up per change of the top's ``txn_count``."""
        cnt, last, shape = self.dut.txn_count, self.dut.txn_last, self.top.txn_payload
        while True:
            await cnt.value_change
            self.res.txns.append(txn_fields(shape, int(last.value)))

    # ---- host traffic ----------------------------------------------------------------------
    def _cell(self, k, i):
        """The handle of entry ``i`` of staging memory ``k`` (made on first use)."""
        h = self.handles[k]
        while len(h) <= i:
            h.append(self.stage_mem[k][len(h)])
        return h[i]

    async def tick(self):
        await FallingEdge(self.clk)
        self.clock += 1

    async def send(self, name, words):
        """Beats on stream ``name``, one per cycle while ``ready`` (as the Amaranth
        testbench's ``send``, beat after beat)."""
        valid, payload, ready = (getattr(self.dut, f"{name}__{x}")
                                 for x in ("valid", "payload", "ready"))
        valid.value = 1
        for w in words:
            payload.value = w
            while True:
                await ReadOnly()
                taken = int(ready.value)
                await self.tick()
                if taken:
                    break
        valid.value = 0

    async def play(self, name, words):
        """Words through the HDL player ``name`` (``kv``, ``q``) or addresses through the
        output reader (``rd``: returns the words read), in pieces of the staging depth: the
        same cycles as ``send`` (or ``out_addr`` set per word, one tick each), Python
        waking once per piece."""
        dut = self.dut
        depth, idle, out = self.top.stage_depth[name], getattr(dut, f"{name}_idle"), []
        for c in range(0, len(words), depth):
            piece = words[c:c + depth]
            for i, w in enumerate(piece):
                self._cell(name, i).value = w
            base = self.played[name]
            self.played[name] = (base + len(piece)) & 0xFFFF_FFFF
            getattr(dut, f"{name}_base").value = base
            getattr(dut, f"{name}_target").value = self.played[name]
            t_set = get_sim_time("ns")
            await First(RisingEdge(idle), Timer(self.max_layer_cycles * self.period, unit="ns"))
            if not int(idle.value):
                raise Hang(f"{name}: {len(piece)} words not taken within "
                           f"{self.max_layer_cycles} cycles")
            await FallingEdge(self.clk)
            self.clock += round((get_sim_time("ns") - t_set) / self.period)
            if name == "rd":
                out += [int(self._cell("cap", i).value) for i in range(len(piece) - 1)]
                out.append(int(dut.out_data.value))
        return out

    def _timed(self, key, t0, c0=None):
        self.info[f"{key}_s"] += time.perf_counter() - t0
        if c0 is not None:
            self.info[f"{key}_cycles"] += self.clock - c0

    # ---- one layer -------------------------------------------------------------------------
    async def layer(self, ri, descs, lay):
        """One layer of round ``ri``: inputs, ``go`` to ``done``, outputs; returns ``(go
        cycle, attention output as float32)``."""
        t0, c0 = time.perf_counter(), self.clock
        await self._layer_inputs(descs, lay)
        if self.s.dsu and int(self.dut.aborts.value) != self.aborts:
            raise Aborted()
        t_go = self.clock
        self._timed("host", t0, c0)
        t0 = time.perf_counter()
        await self._go_to_done(ri, lay)
        self.res.layer_cycles[(ri, lay.layer)] = self.clock - t_go
        self._timed("tile", t0)
        self.info["tile_cycles"] += self.clock - t_go
        t0, c0 = time.perf_counter(), self.clock
        attn = await self._layer_outputs(ri, descs, lay)
        self._timed("host", t0, c0)
        return t_go, M.b2f(attn)

    async def _layer_inputs(self, descs, lay):
        """The new tokens' K/V (into HBM, or the cached tile's new-K/V port) and the q of
        every (slot, KV head)."""
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
        await self.play("kv", words)
        if self.cached:
            self.dut.layer.value = lay.layer
        qw = []
        for i, d in enumerate(descs):
            for h in range(self.H):
                qc = F.bf16_encode(lay.q[i, h * G:(h + 1) * G])
                qw += [pack(self.ql, dict(slot=d.slot, kv_head=h, beat=b, data=w))
                       for b, w in enumerate(pack_q_beats(qc, s.lanes))]
        await self.play("q", qw)

    async def _go_to_done(self, ri, lay):
        """``go`` for one cycle, then ``done`` awaited as an edge (no Python per cycle)."""
        dut, period = self.dut, self.period
        dut.go.value = 1
        await self.tick()
        dut.go.value = 0
        if int(dut.done.value):
            return
        t_edge = get_sim_time("ns") - period / 2        # the rising edge ending go's cycle
        limit = self.max_layer_cycles - 1
        await First(RisingEdge(dut.done), Timer(limit * period, unit="ns"))
        if self.s.dsu and int(dut.aborts.value) != self.aborts:
            await FallingEdge(self.clk)
            raise Aborted()
        if not int(dut.done.value):
            raise Hang(f"round {ri} layer {lay.layer}: tile not done after "
                       f"{self.max_layer_cycles} cycles")
        k = round((get_sim_time("ns") - t_edge) / period)
        await FallingEdge(self.clk)
        self.clock += k

    async def _layer_outputs(self, ri, descs, lay):
        """The tile's flags and output buffer after ``done``, compared with the golden."""
        dut, res, s, tile = self.dut, self.res, self.s, self.tile
        err, te_status = int(dut.err.value), int(dut.te_status.value)
        if (err or te_status) and not s.dsu:
            res.problems.append(f"round {ri} layer {lay.layer}: HBM err {err}, "
                                f"TE status {te_status:#x}")
        if self.cached and int(dut.misorder.value):
            res.problems.append(f"round {ri} layer {lay.layer}: misorder (a CDU ready entry or "
                                f"a job not the one expected)")
        attn = np.zeros(lay.q.shape, dtype=np.int64)
        read = iter(await self.play("rd", [tile.streamer.qbuf_addr(d.slot, h, b) for d in descs
                                           for h in range(self.H) for b in range(tile.qbeats)]))
        for i, d in enumerate(descs):
            for h in range(self.H):
                for b in range(tile.qbeats):
                    row = unpack_out_beat(next(read), s.lanes)[0]
                    g, c = divmod(b * s.lanes, self.cfg.head_dim)
                    attn[i, h * self.G + g, c:c + s.lanes] = row
        golden = self.golden
        for i, d in enumerate(descs):
            key = (ri, lay.layer, d.request)
            res.attn[key] = attn[i].copy()
            if golden is not None and not np.array_equal(golden.attn[key], attn[i]):
                res.stopped = True
        res.stopped |= golden is not None and bool(res.problems)
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
        """The golden DSU model's rounds: each round's beats, then its layers."""
        run, res = self.run, self.res
        for ri, descs in enumerate(run.rounds):
            t0, c0 = time.perf_counter(), self.clock
            last = self.cached or ri == len(run.rounds) - 1
            await self.send("round", [pack(self.rl, dict(step=descs[0].step, count=len(descs),
                                                         end=int(last)))])
            await self.send("descriptor", [pack(DESCRIPTOR_LAYOUT, dataclasses.asdict(d))
                                           for d in descs])
            self._timed("host", t0, c0)
            steps, lay = self.golden_first(descs)
            first = None
            while lay is not None:
                t_go, attn = await self.layer(ri, descs, lay)
                first = t_go if first is None else first
                res.step_cycles[ri] = self.clock - first
                if res.stopped:
                    return
                lay = self.golden_next(steps, descs, attn)

    def _dsu_taps(self):
        """Taps on the DSU top's transfer counters: ``(seen, wake)``, ``seen[name]`` the
        payloads in order, ``wake`` set on each."""
        dut, rl = self.dut, self.rl
        seen = {"round": [], "desc": [], "comp": [], "outcome": []}
        wake = Event()

        def tap(name, count, read):
            async def watch():
                while True:
                    await count.value_change
                    seen[name].append(read())
                    wake.set()
            start_soon(watch())
        tap("round", dut.round_count, lambda: payload_fields(rl, int(dut.round_last.value)))
        tap("desc", dut.desc_count, lambda: (Descriptor(**payload_fields(
            DESCRIPTOR_LAYOUT, int(dut.desc_last.value))), int(dut.desc_cycle.value)))
        tap("comp", dut.comp_rounds, lambda: (int(dut.failed.value), int(dut.comp_cycle.value)))
        tap("outcome", dut.outcome_count,
            lambda: payload_fields(OUTCOME_LAYOUT, int(dut.outcome_last.value)))
        return seen, wake

    async def _until(self, wake, cond, what):
        """Wait for ``cond`` (a tap's event); back on a falling edge after waiting (the
        inputs change between clock edges)."""
        waited = False
        while not cond():
            waited = True
            wake.clear()
            await First(wake.wait(), Timer(self.max_layer_cycles * self.period, unit="ns"))
            if not cond() and not wake.is_set():
                raise Hang(f"DSU: no {what} within {self.max_layer_cycles} cycles "
                           f"(trap {int(self.dut.trap.value):#x}, degraded "
                           f"{int(self.dut.degraded.value)})")
        if waited:
            await FallingEdge(self.clk)

    async def dsu_rounds(self):
        """DSU mode: the requests into the intake, then each round the DSU cluster issues
        (round beat, descriptors), its layers, and its completions."""
        s, run, res, dut = self.s, self.run, self.res, self.dut
        seen, wake = self._dsu_taps()
        await self.send("intake", [pack(INTAKE_LAYOUT, dict(
            request=r, prompt=n, max_new=s.steps, priority=0, arrival=0, continues=0))
            for r, n in enumerate(run.lens)])
        dut.intake_end.value = 1
        ri, nd, nc = 0, 0, 0             # rounds, descriptors, completed rounds seen
        while True:
            await self._until(wake, lambda: len(seen["round"]) > ri or
                              len(seen["outcome"]) == s.requests, "round or outcome")
            if len(seen["round"]) == ri:
                break
            count = seen["round"][ri]["count"]
            await self._until(wake, lambda: len(seen["desc"]) >= nd + count, "descriptor")
            descs = [d for d, _ in seen["desc"][nd:nd + count]]
            first_cycle = seen["desc"][nd][1]
            nd += count
            res.rounds.append([dataclasses.asdict(d) for d in descs])
            if await self._dsu_round(ri, descs, first_cycle):
                await self._until(wake, lambda: len(seen["comp"]) > nc, "completions")
                failed, last_cycle = seen["comp"][nc]
                nc += 1
                res.step_cycles[ri] = last_cycle - first_cycle + 1
                res.round_spans[ri] = (first_cycle, last_cycle)
                bad = {d.request for d in descs if failed >> d.slot & 1}
                res.failed += sorted((ri, r) for r in bad)
                run.roll_back(ri, descs, bad)
            ri += 1
        for o in seen["outcome"]:
            res.outcomes[o["request"]] = Outcome(
                o["request"], "failed" if o["status"] else "completed", o["tokens"],
                REASONS.get(Reason(o["reason"]), ""), o["step"])

    async def _dsu_round(self, ri, descs, first_cycle):
        """The layers of one DSU round; False if the DSU aborted it (every step timed out:
        no token, its K/V dropped)."""
        res, dut = self.res, self.dut
        self.aborts = int(dut.aborts.value)
        steps, lay = self.golden_first(descs)
        try:
            while lay is not None:
                _, attn = await self.layer(ri, descs, lay)
                lay = self.golden_next(steps, descs, attn)
        except Aborted:
            res.step_cycles[ri] = int(dut.abort_cycle.value) - first_cycle + 1
            res.round_spans[ri] = (first_cycle, int(dut.abort_cycle.value))
            res.aborted.append(ri)
            res.failed += sorted((ri, d.request) for d in descs)
            for d in descs:
                self.run.cache.truncate(d.request, d.seq_len - 1)
            return False
        return True

    # ---- the end ---------------------------------------------------------------------------
    async def _cdu_settled(self):
        """The CDU's trailing decisions, then its counters (cached tile)."""
        dut = self.dut
        if not self.res.stopped and not int(dut.cdu_idle.value):
            await First(RisingEdge(dut.cdu_idle), Timer(self.max_layer_cycles * self.period,
                                                        unit="ns"))
            await ReadOnly()
        self.res.cdu_counters = payload_fields(self.tile.cdu_counters.shape(),
                                        int(dut.cdu_counters.value))

    async def main(self):
        """The whole run: set-up, the rounds, the end; writes the pickled result."""
        await self.start()
        out, dut, res = {}, self.dut, self.res
        try:
            await (self.dsu_rounds() if self.s.dsu else self.rounds())
            if self.cached:
                await self._cdu_settled()
        except Hang as e:
            out["timeout"] = str(e)
        if self.cached:
            await Timer(1, unit="ns")   # let the decision watcher take the last edge's
            n = int(dut.txn_count.value)
            assert n == len(res.txns), f"recorded {len(res.txns)} CDU decisions of {n}"
        res.hbm_beats = (int(dut.hbm_read_beats.value), int(dut.hbm_write_beats.value))
        self.info["cycles"] = self.clock
        self.info["bench_s"] = time.perf_counter() - self.t_start
        out.update(result=res, info=self.info)
        Path(os.environ["TRICUT_RESULTS"]).write_bytes(pickle.dumps(out))
