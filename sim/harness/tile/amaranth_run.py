"""The tile side of a co-simulation in Amaranth's simulator (``docs/tile/cosim.md``,
"Co-simulation with the golden decode step"): :func:`cosim_run`, the loop of :mod:`.loop` on
:class:`AmaranthPort` (one Python step per cycle) and the simulation top
:class:`~.tops.CosimTop`.
"""

from __future__ import annotations

from tricut.sim.harness.cdu import fe_config

from .compare import txn_fields
from .golden import RunInputs, RunResult
from .loop import Hang, TileLoop
from .setup import Setup, layer_cycle_limit
from .tops import CosimTop

__all__ = ["cosim_run", "AmaranthPort"]


class AmaranthPort:
    """The loop's port (:mod:`.loop`) on a :class:`~.tops.CosimTop` in Amaranth's simulator:
    every beat a ``valid``/``ready`` transfer of one cycle, ``ready`` as sampled at the
    clock edge; ``done`` polled each cycle."""

    def __init__(self, ctx, top: CosimTop):
        self.ctx, self.top, self.dut = ctx, top, top.dut
        self.clock = 0
        cached = top.tile.cdu is not None
        self.streams = {"round": self.dut.round, "descriptor": self.dut.descriptor,
                        "kv": self.dut.newkv_write if cached else top.hbm.write,
                        "q": self.dut.q_write}

    async def tick(self):
        await self.ctx.tick()
        self.clock += 1

    async def send(self, name, words):
        ctx, stream = self.ctx, self.streams[name]
        for w in words:
            ctx.set(stream.valid, 1)
            ctx.set(stream.payload.as_value(), w)
            while True:
                _, _, ready = await ctx.tick().sample(stream.ready)
                self.clock += 1
                if ready:
                    break
            ctx.set(stream.valid, 0)

    put = send

    async def read_out(self, addrs):
        out = []
        for a in addrs:
            self.ctx.set(self.dut.out_addr, a)
            await self.tick()
            out.append(self.ctx.get(self.dut.out_data))
        return out

    async def go_to_done(self, limit):
        ctx, dut = self.ctx, self.dut
        ctx.set(dut.go, 1)
        t_go = self.clock
        await self.tick()
        ctx.set(dut.go, 0)
        while not ctx.get(dut.done):
            await self.tick()
            if self.clock - t_go > limit:
                return "hang"
        return "done"

    async def cdu_settled(self, limit):
        for _ in range(limit):
            if self.ctx.get(self.dut.cdu_idle):
                return
            await self.tick()

    def get(self, name):
        sig = getattr(self.dut, name)
        return self.ctx.get(sig.as_value() if name == "cdu_counters" else sig)

    def set(self, name, value):
        self.ctx.set(getattr(self.dut, name), value)


def cosim_run(s: Setup, corrupt=None, golden: RunResult | None = None,
              max_layer_cycles=None, activity: dict | None = None) -> RunResult:
    """The tile side in Amaranth's simulator. ``corrupt=(addr, bit)`` flips one bit of the
    initial HBM image (the golden keeps it) to show that a difference is caught. With
    ``golden`` (its :func:`golden_run`) the run stops after the first layer whose outputs
    (or HBM ``err`` / TE status) differ from it. A hang raises ``TimeoutError``
    (``max_layer_cycles``: the hang guard, default :func:`~.setup.layer_cycle_limit`).
    ``activity``: a dict that gets the TE engines' activity, counted every cycle: ``busy``
    (a job from its descriptor to its output) and ``mac_busy`` (a multiply-accumulate
    issued) cycles, summed over the engines, and ``cycles``."""
    from amaranth.sim import Simulator

    run = RunInputs(s)
    image, ts_bits = run.image()
    if corrupt is not None:
        image[corrupt[0]] ^= 1 << corrupt[1]
    top = CosimTop(image, run.params())
    tile = top.tile
    loop = TileLoop(run, None, tile, top.hbm, golden,
                    max_layer_cycles or layer_cycle_limit(s))   # port: the bench's

    async def watch_txns(ctx):
        """The CDU's decisions as the new-token writer takes them."""
        t = tile.cdu.txn
        async for _, _, v, r, word in ctx.tick().sample(t.valid, t.ready, t.payload.as_value()):
            if v and r:
                loop.res.txns.append(txn_fields(t.payload.shape(), word))

    async def bench(ctx):
        ctx.set(top.dut.tensor_scale, ts_bits)
        if loop.cached:
            ctx.set(top.dut.config, fe_config(s.policy, "full", s.distance))
        loop.port = AmaranthPort(ctx, top)
        await loop.rounds()
        await loop.finish()

    async def count_activity(ctx):
        engines = tile.array.engine_units
        activity.update(busy=0, mac_busy=0, cycles=0)
        flags = [e.busy for e in engines] + [e.mac_busy for e in engines]
        async for _, _, *v in ctx.tick().sample(*flags):
            activity["cycles"] += 1
            activity["busy"] += sum(v[:len(engines)])
            activity["mac_busy"] += sum(v[len(engines):])

    sim = Simulator(top)
    sim.add_clock(1e-9)
    sim.add_testbench(bench)
    if tile.cdu is not None:
        sim.add_testbench(watch_txns, background=True)
    if activity is not None:
        sim.add_testbench(count_activity, background=True)
    try:
        sim.run()
    except Hang as e:
        raise TimeoutError(str(e)) from None
    return loop.res
