"""The cocotb side of ``tricut tile run --sim verilator``: :class:`CosimBench`, the port of the
co-simulation loop (:mod:`.loop`, the same loop as Amaranth's) on the Verilator top
(:class:`~.verilator_top.CosimVerilatorTop`), in phases:

* set-up (:meth:`CosimBench.__init__`, :meth:`CosimBench.start`): the plan, the run's golden
  side, the loop, the inputs' first values, the clock and the CDU decision tap;
* the port: stream beats (:meth:`~CosimBench.send`, one per cycle), host traffic
  (:meth:`~CosimBench.put`/:meth:`~CosimBench.read_out` through the HDL players and the
  output reader, one Python wake-up per piece), ``go`` to ``done`` awaited as an edge;
* the rounds: the golden DSU model's (the loop's) or the DSU cluster's
  (:meth:`~CosimBench.dsu_rounds`, taps on its transfers, aborts and rollbacks);
* the end (:meth:`~CosimBench.main`): the CDU's trailing decisions and counters, the pickled
  result.

Imported only in the simulator's Python (it imports cocotb's triggers).
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import time
from pathlib import Path

import cocotb
from cocotb import start_soon
from cocotb.triggers import Event, FallingEdge, First, ReadOnly, RisingEdge, Timer
from cocotb.utils import get_sim_time

from tricut.models import te as M
from tricut.models.dsu import Descriptor, Outcome
from tricut.rtl.dsu.layouts import INTAKE_LAYOUT, OUTCOME_LAYOUT
from tricut.rtl.dsu.regmap import Reason
from tricut.rtl.tile.sequencer_layouts import DESCRIPTOR_LAYOUT, pack
from tricut.sim.harness.cdu import fe_config
from tricut.sim.harness.dsu import REASONS

from .compare import payload_fields, txn_fields
from .golden import RunInputs
from .loop import Aborted, Hang, TileLoop
from .setup import Setup
from .stimulus import Recorder
from .verilator_top import CLOCK_NS, CosimVerilatorTop

__all__ = ["CosimBench"]


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
        self.max_layer_cycles = plan["max_layer_cycles"]
        self.run = run = RunInputs(s, plan["prefilled"])     # the parent's prefill
        self.cached = s.policy is not None
        self.top = top = CosimVerilatorTop(run.params())      # the layouts (not elaborated)
        self.tile = top.tile
        # with the DSU the rounds differ from the golden's after a rollback: no early stop
        self.loop = TileLoop(run, self, top.tile, top.hbm, None if s.dsu else plan["golden"],
                             self.max_layer_cycles)
        self.res = self.loop.res
        self.info = dict(self.loop.info, setup_s=time.perf_counter() - self.t_start, cycles=0)
        self.dut, self.clk, self.period = dut, dut.clk, CLOCK_NS
        self.clock = 0                  # falling edges counted by the bench
        self.played = {k: 0 for k in top.stage_depth}   # per player: its transfers so far
        self.stage_mem = {"kv": dut.kv_stage.mem, "q": dut.q_stage.mem,
                          "rd": dut.rd_stage.mem, "cap": dut.rd_capture.mem}
        self.handles = {k: [] for k in self.stage_mem}
        #: the native replay's stimulus (:mod:`.stimulus`) when ``$TRICUT_STIMULUS`` names a file
        self.rec = Recorder(self.period) if os.environ.get("TRICUT_STIMULUS") else None

    def _put(self, handle, value):
        """Write an input of the top (recorded for the native replay)."""
        handle.value = value
        if self.rec:
            self.rec.write(handle, value)

    def _read(self, handle):
        """Read an output of the top (recorded for the native replay to check)."""
        value = int(handle.value)
        if self.rec:
            self.rec.read(handle, value)
        return value

    # ---- set-up ----------------------------------------------------------------------------
    async def start(self):
        """The inputs' first values, the clock, the CDU decision tap; back on a falling edge."""
        dut, s, top, run = self.dut, self.s, self.top, self.run
        for k in ("intake",) if s.dsu else ("round", "descriptor"):
            self._put(getattr(dut, f"{k}__valid"), 0)
        if s.dsu:
            self._put(dut.intake_end, 0)
            entry = top.hbm.addr_bits + 8
            for port, table in ((dut.hbm_faults, run.hbm_faults()),
                                (dut.hbm_lost, run.hbm_lost())):
                self._put(port, sum((addr | n << top.hbm.addr_bits) << (k * entry)
                                    for k, (addr, n) in enumerate(table)))
        for k in top.stage_depth:
            self._put(getattr(dut, f"{k}_base"), 0)
            self._put(getattr(dut, f"{k}_target"), 0)
        self._put(dut.go, 0)
        self._put(dut.tensor_scale, int(M.f2b(run.ts)) if run.ts is not None else 0)
        if self.cached:
            self._put(dut.layer, 0)
            self._put(dut.config, pack(self.tile.config.shape(),
                                       fe_config(s.policy, "full", s.distance)))
        # the clock runs in the build's main (cosim_main.cpp), from this 1 on, as cocotb's
        # Clock would start it (high at time 0) but with no VPI callback per half period
        if cocotb.plusargs.get("tricut_clock_ns") != str(self.period):
            raise RuntimeError(f"the simulator's clock period is "
                               f"{cocotb.plusargs.get('tricut_clock_ns')} ns, the bench's "
                               f"{self.period} ns: not a tricut tile build and run")
        self.clk.value = 1
        await FallingEdge(self.clk)
        if self.cached:
            start_soon(self._watch_txns())

    async def _watch_txns(self):
        """The CDU's decisions, one wake-up per change of the top's ``txn_count``."""
        cnt, last, shape = self.dut.txn_count, self.dut.txn_last, self.top.txn_payload
        while True:
            await cnt.value_change
            if self.rec:                # the replay checks each decision's cycle too
                self._read(cnt)
            self.res.txns.append(txn_fields(shape, self._read(last)))

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
        self._put(valid, 1)
        for w in words:
            self._put(payload, w)
            while True:
                await ReadOnly()
                taken = self._read(ready)
                await self.tick()
                if taken:
                    break
        self._put(valid, 0)

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
                self._put(self._cell(name, i), w)
            base = self.played[name]
            self.played[name] = (base + len(piece)) & 0xFFFF_FFFF
            self._put(getattr(dut, f"{name}_base"), base)
            self._put(getattr(dut, f"{name}_target"), self.played[name])
            t_set = get_sim_time("ns")
            await First(RisingEdge(idle), Timer(self.max_layer_cycles * self.period, unit="ns"))
            if not self._read(idle):
                raise Hang(f"{name}: {len(piece)} words not taken within "
                           f"{self.max_layer_cycles} cycles")
            await FallingEdge(self.clk)
            self.clock += round((get_sim_time("ns") - t_set) / self.period)
            if name == "rd":
                out += [self._read(self._cell("cap", i)) for i in range(len(piece) - 1)]
                out.append(self._read(dut.out_data))
        return out

    async def put(self, name, words):
        """Host traffic ``kv``/``q`` through its HDL player."""
        await self.play(name, words)

    async def read_out(self, addrs):
        """Output buffer words through the output reader."""
        return await self.play("rd", addrs)

    async def go_to_done(self, limit):
        """``go`` for one cycle, then ``done`` awaited as an edge (no Python per cycle):
        ``done``, ``aborted`` (the DSU timed the round out) or ``hang``."""
        dut, period = self.dut, self.period
        self._put(dut.go, 1)
        await self.tick()
        self._put(dut.go, 0)
        if self._read(dut.done):
            return "done"
        t_edge = get_sim_time("ns") - period / 2        # the rising edge ending go's cycle
        await First(RisingEdge(dut.done), Timer((limit - 1) * period, unit="ns"))
        if self.s.dsu and self._read(dut.aborts) != self.loop.aborts:
            await FallingEdge(self.clk)
            return "aborted"
        if not self._read(dut.done):
            return "hang"
        k = round((get_sim_time("ns") - t_edge) / period)
        await FallingEdge(self.clk)
        self.clock += k
        return "done"

    async def cdu_settled(self, limit):
        if not int(self.dut.cdu_idle.value):
            await First(RisingEdge(self.dut.cdu_idle), Timer(limit * self.period, unit="ns"))
            await ReadOnly()

    def get(self, name):
        return self._read(getattr(self.dut, name))

    def set(self, name, value):
        self._put(getattr(self.dut, name), value)

    # ---- rounds of the DSU cluster ---------------------------------------------------------
    def _dsu_taps(self):
        """Taps on the DSU top's transfer counters: ``(seen, wake)``, ``seen[name]`` the
        payloads in order, ``wake`` set on each."""
        dut, rl = self.dut, self.loop.rl
        seen = {"round": [], "desc": [], "comp": [], "outcome": []}
        wake = Event()

        def tap(name, count, read):
            async def watch():
                while True:
                    await count.value_change
                    seen[name].append(read())
                    wake.set()
            start_soon(watch())
        tap("round", dut.round_count, lambda: payload_fields(rl, self._read(dut.round_last)))
        tap("desc", dut.desc_count, lambda: (Descriptor(**payload_fields(
            DESCRIPTOR_LAYOUT, self._read(dut.desc_last))), self._read(dut.desc_cycle)))
        tap("comp", dut.comp_rounds, lambda: (self._read(dut.failed), self._read(dut.comp_cycle)))
        tap("outcome", dut.outcome_count,
            lambda: payload_fields(OUTCOME_LAYOUT, self._read(dut.outcome_last)))
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
        self._put(dut.intake_end, 1)
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
        res, dut, loop = self.res, self.dut, self.loop
        loop.aborts = self._read(dut.aborts)
        steps, lay = loop.golden_first(descs)
        try:
            while lay is not None:
                _, attn = await loop.layer(ri, descs, lay)
                lay = loop.golden_next(steps, descs, attn)
        except Aborted:
            res.step_cycles[ri] = self._read(dut.abort_cycle) - first_cycle + 1
            res.round_spans[ri] = (first_cycle, self._read(dut.abort_cycle))
            res.aborted.append(ri)
            res.failed += sorted((ri, d.request) for d in descs)
            for d in descs:
                self.run.cache.truncate(d.request, d.seq_len - 1)
            return False
        return True

    # ---- the end ---------------------------------------------------------------------------
    async def main(self):
        """The whole run: set-up, the rounds, the end; writes the pickled result."""
        await self.start()
        out, dut, res = {}, self.dut, self.res
        try:
            await (self.dsu_rounds() if self.s.dsu else self.loop.rounds())
            await self.loop.finish()
        except Hang as e:
            out["timeout"] = str(e)
        if self.cached:
            await Timer(1, unit="ns")   # let the decision watcher take the last edge's
            n = self._read(dut.txn_count)
            assert n == len(res.txns), f"recorded {len(res.txns)} CDU decisions of {n}"
        res.hbm_beats = (self._read(dut.hbm_read_beats), self._read(dut.hbm_write_beats))
        if self.rec:
            self.rec.save(os.environ["TRICUT_STIMULUS"])
        self.info.update(self.loop.info, cycles=self.clock)
        self.info["bench_s"] = time.perf_counter() - self.t_start
        out.update(result=res, info=self.info)
        Path(os.environ["TRICUT_RESULTS"]).write_bytes(pickle.dumps(out))
