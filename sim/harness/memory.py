"""The behavioural memory models (``rtl/tile/behavioural/``) against a cycle-level Python
reference.

:class:`HbmRef` and :class:`L2Ref` predict, cycle by cycle, exactly what
:class:`~tricut.rtl.tile.behavioural.hbm.HbmModel` and
:class:`~tricut.rtl.tile.behavioural.l2.L2Data` drive (``ready`` of the request stream, every
response beat's payload and cycle) for the inputs a bench gives them (request and write beats
offered, response ready), from the documented rules alone: request slots, ``latency``, the
in-order or LFSR pick, one beat per cycle, the fault table, writes seen from the next cycle.

:func:`plan_json` makes a stimulus plan (the request and write beats, the idle and
backpressure schedules of :mod:`tricut.sim.harness.streams`, the seed); :class:`Driver`
applies it with the stream drivers and checks the design against the reference on every
cycle; :func:`simulate_amaranth` runs it in Amaranth's simulator and ends with the drained
check and :data:`TAIL_CYCLES` idle cycles (so an extra beat fails). :func:`bursts` and
:func:`expected_bursts` give the independent transaction check: every request's beats equal
to the memory image, whatever the order and timing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tricut.rtl.tile.behavioural import layouts as LY
from tricut.rtl.tile.behavioural.hbm import ALWAYS, HbmModel, lfsr_next
from tricut.rtl.tile.behavioural.l2 import L2Data
from tricut.sim.harness.streams import NotDrained, Schedule, Sink, Source, drained

__all__ = ["BurstRef", "HbmRef", "L2Ref", "plan_json", "Driver", "run_plan_amaranth",
           "simulate_amaranth", "make_dut", "make_ref", "bursts", "expected_bursts",
           "random_requests", "Mismatch", "RunResult", "simulate_verilator_matrix",
           "TAIL_CYCLES", "KINDS"]

#: cycles every run continues after the reference has nothing left to answer
TAIL_CYCLES = 8
#: the units a plan can drive: kind -> (request stream, response stream, its id field)
KINDS = {"hbm": ("req", "resp", "id"), "l2": ("read", "data", "tag")}


class Mismatch(AssertionError):
    """The design differed from the reference on some cycle; the message names the first."""


class BurstRef:
    """The request slots and response sequencer of
    :func:`tricut.rtl.tile.behavioural.hbm.burst_responder`, cycle by cycle.

    Subclasses give ``_accept(req) -> dict(tag, base, n, good, err)``, ``_word(addr)`` and
    ``_write(w)``. :meth:`step` takes one cycle's inputs and returns the design's outputs on
    that cycle, then applies the clock edge."""

    #: the response payload's name for the request's id
    id_field = "tag"

    def __init__(self, slots, latency, reorder=False, seed=1, rate=(1, 1)):
        self.S, self.latency, self.reorder = slots, latency, reorder
        self.num, self.den = rate
        self.credit = self.den
        self.slots = [None] * slots
        self.busy, self.cur, self.beat = False, 0, 0
        self.lfsr = seed
        self.wp = self.rp = self.count = 0
        self.kb = (slots - 1).bit_length()

    # -------------------------------------------------------------- combinational view
    def _due(self, i):
        s = self.slots[i]
        return s is not None and s["t"] == 0

    def _free_alloc(self):
        if self.reorder:
            free = [i for i in range(self.S) if self.slots[i] is None]
            return bool(free), (free[0] if free else 0)
        return self.count < self.S, self.wp

    def _pick(self):
        if not self.reorder:
            return self._due(self.rp), self.rp
        due = [i for i in range(self.S) if self._due(i)]
        if not due:
            return False, 0
        start = self.lfsr & ((1 << self.kb) - 1)
        later = [i for i in due if i >= start]
        return True, (later[0] if later else due[0])

    def outputs(self):
        """``(req_ready, beat)`` on this cycle; ``beat`` a dict (``tag``, ``data``, ``last``,
        ``err``) or None."""
        free, _ = self._free_alloc()
        any_due, pick = self._pick()
        if not (self.busy or any_due) or self.credit < self.den:
            return free, None
        s = self.slots[self.cur if self.busy else pick]
        oob = self.beat >= s["good"]
        data = 0 if oob else self._word(s["base"] + self.beat)
        return free, {self.id_field: s["tag"], "data": data,
                      "last": int(self.beat == s["n"] - 1), "err": int(s["err"] or oob)}

    @property
    def idle(self):
        return not self.busy and all(s is None for s in self.slots)

    # -------------------------------------------------------------- one cycle
    def step(self, req, resp_ready, write=None):
        """One cycle: ``req`` the request fields offered (None: not valid), ``resp_ready``,
        ``write`` the write fields offered (None: not valid; always taken). Returns
        :meth:`outputs` of this cycle, then applies the edge."""
        free, beat = self.outputs()
        _, alloc = self._free_alloc()
        any_due, pick = self._pick()
        present = self.busy or any_due
        if beat is not None and resp_ready:
            self.credit += self.num - self.den
        elif self.credit < self.den:
            self.credit += self.num
        for s in self.slots:
            if s is not None and s["t"] > 0:
                s["t"] -= 1
        take = req is not None and free
        if take:
            s = self._accept(req)
            s["t"] = self.latency - 1
            self.slots[alloc] = s
        done = False
        if present:
            sel = self.cur if self.busy else pick
            if not self.busy:
                self.busy, self.cur = True, pick
                if self.reorder:
                    self.lfsr = lfsr_next(self.lfsr)
            if beat is not None and resp_ready:
                self.beat += 1
                if beat["last"]:
                    self.beat, self.busy, self.slots[sel], done = 0, False, None, True
        if not self.reorder:
            if take:
                self.wp = 0 if self.wp == self.S - 1 else self.wp + 1
            if done:
                self.rp = 0 if self.rp == self.S - 1 else self.rp + 1
            self.count += int(take) - int(done)
        if write is not None:
            self._write(write)
        return free, beat


class HbmRef(BurstRef):
    """Reference of :class:`~tricut.rtl.tile.behavioural.hbm.HbmModel` (same parameters)."""
    id_field = "id"

    def __init__(self, words, data_bits=256, latency=100, max_outstanding=8, max_beats=16,
                 id_bits=4, reorder=False, seed=1, faults=(), rate=(1, 1)):
        image, table = HbmModel.check(words, data_bits, latency, max_outstanding, max_beats,
                                      id_bits, reorder, seed, faults, rate)
        super().__init__(max_outstanding, latency, reorder, seed, tuple(rate))
        self.mem = list(image)
        self.fails = {a: f for a, f in table}
        self.nmax = (1 << LY.count_bits(max_beats)) - 1

    def _word(self, addr):
        return self.mem[addr]

    def _accept(self, r):
        a, f = r["addr"], self.fails.get(r["addr"])
        err = f == ALWAYS or (f is not None and f > 0)
        if f is not None and f != ALWAYS and f > 0:
            self.fails[a] = f - 1
        room = 0 if a >= len(self.mem) else min(len(self.mem) - a, self.nmax)
        return {"tag": r["id"], "base": a, "n": max(1, r["beats"]),
                "good": room if r["beats"] else 0, "err": err}

    def _write(self, w):
        if w["addr"] < len(self.mem):
            self.mem[w["addr"]] = w["data"]


class L2Ref(BurstRef):
    """Reference of :class:`~tricut.rtl.tile.behavioural.l2.L2Data` (same parameters)."""

    def __init__(self, frames, block_beats, data_bits=256, latency=2, max_outstanding=4,
                 tag_bits=4):
        L2Data.check(frames, block_beats, data_bits, latency, max_outstanding, tag_bits)
        super().__init__(max_outstanding, latency)
        self.F, self.B = frames, block_beats
        self.mem = [0] * (frames * block_beats)

    def _word(self, addr):
        return self.mem[addr]

    def _accept(self, r):
        ok = r["frame"] < self.F
        return {"tag": r["tag"], "base": r["frame"] * self.B if ok else 0,
                "n": max(1, r["beats"]), "good": self.B if ok and r["beats"] else 0,
                "err": False}

    def _write(self, w):
        if w["frame"] < self.F and w["beat"] < self.B:
            self.mem[w["frame"] * self.B + w["beat"]] = w["data"]


# ------------------------------------------------------------------------------ layouts
def _layouts(kind, p):
    """(request, response, write) layouts of a unit with parameters ``p``."""
    if kind == "hbm":
        depth = p["words"] if isinstance(p["words"], int) else len(p["words"])
        ab = LY.index_bits(depth)
        return (LY.hbm_req_layout(p.get("id_bits", 4), ab, p.get("max_beats", 16)),
                LY.hbm_resp_layout(p.get("id_bits", 4), p.get("data_bits", 256)),
                LY.hbm_write_layout(ab, p.get("data_bits", 256)))
    tb, db = p.get("tag_bits", 4), p.get("data_bits", 256)
    return (LY.l2_read_layout(p["frames"], p["block_beats"], tb), LY.l2_data_layout(tb, db),
            LY.l2_write_layout(p["frames"], p["block_beats"], db))


def make_dut(kind, params):
    return HbmModel(**params) if kind == "hbm" else L2Data(**params)


def make_ref(kind, params):
    return HbmRef(**params) if kind == "hbm" else L2Ref(**params)


# ------------------------------------------------------------------------------ plans
def random_requests(rng, n, depth, max_beats, id_bits=4, oob=False):
    """``n`` random HBM requests (field dicts) inside an image of ``depth`` words, ids
    ``0..n-1`` modulo ``2**id_bits``; ``oob``: some run past the end or start beyond it."""
    out = []
    for i in range(n):
        beats = rng.randint(1, max_beats)
        addr = rng.randrange(0, max(1, depth - beats + 1))
        lo, hi = max(0, depth - beats + 1), min(depth + 4, 1 << LY.index_bits(depth))
        if oob and hi > lo and rng.random() < 0.2:
            addr = rng.randrange(lo, hi)
        out.append({"id": i % (1 << id_bits), "addr": addr, "beats": beats})
    return out


def plan_json(kind, params, requests, writes=(), idle=None, backpressure=None, seed=0,
              writes_first=False, max_cycles=None):
    """The stimulus plan: ``requests`` and ``writes`` as field dicts (packed here with the
    unit's layouts), offered under the ``idle`` schedule, the response stream taken under
    ``backpressure``. ``writes_first``: no request is offered before every write has
    transferred."""
    idle, backpressure = Schedule.of(idle), Schedule.of(backpressure)
    rl, _, wl = _layouts(kind, params)
    nbeats = sum(max(1, r["beats"]) for r in requests)
    lat = params.get("latency", 100 if kind == "hbm" else 2)
    num, den = params.get("rate", (1, 1))
    nbeats_time = -(-nbeats * den // num)           # the beats at the HBM's rate
    stall = 1 - min(idle.duty, backpressure.duty)
    return {
        "kind": kind, "params": params,
        "req": [LY.pack(rl, **r) for r in requests],
        "write": [LY.pack(wl, **w) for w in writes],
        "n_beats": nbeats, "writes_first": writes_first,
        "idle": idle.to_json(), "backpressure": backpressure.to_json(), "seed": seed,
        "max_cycles": max_cycles or int((2 * nbeats_time + len(writes) + lat * (len(requests) + 2)
                                         + 50) * (1 + 6 * stall)),
    }


class Driver:
    """Cycle-by-cycle stimulus, monitor and reference check of one plan: a Source on the
    request stream and one on ``write`` (the idle schedule), a Sink on the response stream
    (the backpressure schedule, expecting the plan's beat count), and the reference stepped
    with the same inputs. Per cycle ``drive()`` -> ``(req, write, resp_ready)`` (each
    ``(valid, payload)``), then ``sampled(req_ready, resp_valid, resp_payload)`` with what
    the clock edge sees; any difference from the reference is recorded in ``mismatches``."""

    def __init__(self, plan, ref=None):
        self.plan = plan
        kind, seed = plan["kind"], plan["seed"]
        self.req_name, self.resp_name, self.id_field = KINDS[kind]
        self.rl, self.pl, self.wl = _layouts(kind, plan["params"])
        self.ref = ref if ref is not None else make_ref(kind, plan["params"])
        self.req = Source(self.req_name, plan["req"], plan["idle"], seed)
        self.write = Source("write", plan["write"], plan["idle"], seed)
        self.resp = Sink(self.resp_name, plan["backpressure"], seed, expect=plan["n_beats"])
        self.cycle, self.tail = 0, 0
        self.accepts, self.beats, self.mismatches = [], [], []
        self._d = None

    def drive(self):
        gated = self.plan["writes_first"] and not self.write.done
        req = (0, None) if gated else self.req.drive()
        write = self.write.drive()
        ready = self.resp.drive()
        self._d = (req, write, ready, gated)
        return req, write, ready

    def sampled(self, req_ready, resp_valid, resp_payload):
        (rv, rp), (wv, wp), ready, gated = self._d
        ref_ready, ref_beat = self.ref.step(
            LY.unpack(self.rl, rp) if rv else None, ready, LY.unpack(self.wl, wp) if wv else None)
        got = LY.unpack(self.pl, resp_payload) if resp_valid else None
        if int(req_ready) != int(ref_ready) or got != ref_beat:
            if len(self.mismatches) < 10:
                self.mismatches.append(
                    f"cycle {self.cycle}: design {self.req_name}.ready={int(req_ready)} "
                    f"{self.resp_name}={got}, reference ready={int(ref_ready)} beat={ref_beat}")
        if rv and req_ready:
            self.accepts.append((self.cycle, LY.unpack(self.rl, rp)))
        if not gated:
            self.req.sample(req_ready)
        self.write.sample(1)
        if self.resp.sample(resp_valid, resp_payload):
            self.beats.append((self.cycle, got))
        self.cycle += 1
        if self.req.done and self.write.done and self.ref.idle:
            self.tail += 1

    @property
    def finished(self):
        return self.tail >= TAIL_CYCLES

    def problems(self):
        out = drained(self.req, self.write, self.resp)
        if not self.ref.idle:
            out.append("reference: requests still outstanding")
        return out


@dataclass
class RunResult:
    """``accepts``: ``(cycle, request fields)``; ``beats``: ``(cycle, beat fields)``."""
    accepts: list
    beats: list
    cycles: int
    mismatches: list = field(default_factory=list)


def run_plan_amaranth(plan, dut, ref=None):
    """One plan on ``dut`` in the Amaranth simulator; returns the :class:`Driver` after the
    run (``ref`` overrides the reference, e.g. to corrupt it)."""
    from amaranth.sim import Simulator

    drv = Driver(plan, ref)
    req, resp = getattr(dut, drv.req_name), getattr(dut, drv.resp_name)

    async def bench(ctx):
        while not drv.finished:
            if drv.cycle > plan["max_cycles"]:
                raise TimeoutError(f"memory model hung: {drv.cycle} cycles, "
                                   f"{len(drv.beats)}/{plan['n_beats']} beats")
            (rv, rp), (wv, wp), ready = drv.drive()
            ctx.set(req.valid, rv)
            if rp is not None:
                ctx.set(req.payload.as_value(), rp)
            ctx.set(dut.write.valid, wv)
            if wp is not None:
                ctx.set(dut.write.payload.as_value(), wp)
            ctx.set(resp.ready, ready)
            _, _, rr, ov, op = await ctx.tick().sample(req.ready, resp.valid,
                                                       resp.payload.as_value())
            drv.sampled(rr, ov, op)

    sim = Simulator(dut)
    sim.add_clock(1e-9)
    sim.add_testbench(bench)
    sim.run()
    return drv


def simulate_amaranth(kind, params, requests, writes=(), idle=None, backpressure=None, seed=0,
                      writes_first=False, plan=None, ref=None, dut=None):
    """Run requests (and writes) on a fresh unit (``kind`` ``"hbm"`` or ``"l2"``, constructor
    ``params``) under the ``idle`` and ``backpressure`` schedules; raise :class:`NotDrained`
    if anything was left behind and :class:`Mismatch` if the design differed from the
    reference on any cycle; return a :class:`RunResult`."""
    plan = plan or plan_json(kind, params, requests, writes, idle, backpressure, seed,
                             writes_first)
    drv = run_plan_amaranth(plan, dut if dut is not None else make_dut(kind, params), ref)
    if drv.problems():
        raise NotDrained(f"{kind} bench not drained: " + "; ".join(drv.problems()))
    if drv.mismatches:
        raise Mismatch(f"{kind} differs from the reference: " + "; ".join(drv.mismatches))
    return RunResult(drv.accepts, drv.beats, drv.cycle)


# ------------------------------------------------------------------------------ checks
def bursts(result, id_field="id"):
    """The response beats grouped into bursts (consecutive beats up to ``last``):
    ``[(first beat's cycle, id, [(data, err), ...], [cycles])]``, in completion order."""
    out, cur = [], []
    for cyc, b in result.beats:
        cur.append((cyc, b))
        if b["last"]:
            out.append((cur[0][0], b[id_field], [(x["data"], x["err"]) for _, x in cur],
                        [c for c, _ in cur]))
            cur = []
    assert not cur, "response beats after the last burst's last beat"
    return out


def expected_bursts(image, requests, fails=None, depth=None):
    """What each HBM request must return, from the image alone (independent of the
    reference's cycle model): ``[(id, [(data, err), ...])]`` in request order; ``fails``
    ``{addr: n or ALWAYS}`` counted in request order (the order the model accepts them)."""
    fails = dict(fails or {})
    depth = len(image) if depth is None else depth
    out = []
    for r in requests:
        f = fails.get(r["addr"])
        bad = f == ALWAYS or (f is not None and f > 0)
        if f is not None and f != ALWAYS and f > 0:
            fails[r["addr"]] = f - 1
        if r["beats"] == 0:
            out.append((r["id"], [(0, 1)]))
            continue
        beats = []
        for i in range(r["beats"]):
            a = r["addr"] + i
            beats.append((image[a], int(bad)) if a < depth else (0, 1))
        out.append((r["id"], beats))
    return out


def simulate_verilator_matrix(kind, params, requests, writes=(), pairs=None, seed=0,
                              writes_first=True):
    """The same requests (and writes) under every ``(idle, backpressure)`` pair in one
    Verilator build and one cocotb test (``sim/harness/benches/tile_memory.py``; the unit
    reset between plans); returns ``{pair: RunResult}``, each drained and checked against the
    reference on every cycle. A reset does not clear the memory array, so the writes (if
    any) must be the same in every plan and come first (``writes_first``), as here."""
    from tricut.sim.harness.cocotb_run import run_plans
    from tricut.sim.harness.streams import IDLE_BACKPRESSURE

    pairs = list(pairs or IDLE_BACKPRESSURE)
    if writes and not writes_first:
        raise ValueError("writes in a multi-plan Verilator run must come first")
    plans = [plan_json(kind, params, requests, writes, i, b, seed, writes_first)
             for i, b in pairs]
    dut = make_dut(kind, params)
    runs = run_plans(dut, f"tile_mem_{kind}", "tile_memory", plans)
    out = {}
    for pair, run in zip(pairs, runs):
        if run["problems"]:
            raise NotDrained(f"{kind} bench not drained ({pair}): " + "; ".join(run["problems"]))
        if run["mismatches"]:
            raise Mismatch(f"{kind} differs from the reference ({pair}): "
                           + "; ".join(run["mismatches"]))
        out[pair] = RunResult([tuple(a) for a in run["accepts"]],
                              [tuple(b) for b in run["beats"]], run["cycles"])
    return out
