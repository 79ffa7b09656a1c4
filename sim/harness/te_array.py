"""Run the TE array RTL (``rtl/tile/te_array.py``) against the golden TE model, job by job.

An :class:`ArrayJob` is one tagged TE job: a :class:`~tricut.sim.harness.te.TEVector` (its
codes, announced ``n``, partial mode) and the ``tag`` the tile gives it. :func:`plan_json`
turns a job list into the stimulus plan (the beats of ``job``, ``q`` and ``kv``, serialised
job by job, or for a routed-K/V array token by token across the engines,
:func:`routed_kv_beats`; the idle and backpressure schedules; the seed); :class:`Driver`
applies it cycle
by cycle with the stream drivers of :mod:`tricut.sim.harness.streams` (Sources on the three
inputs, Sinks on ``out`` and ``status``), independent of the simulator, and
:func:`run_plan_amaranth` runs it in Amaranth's simulator. Every run ends with the drained
check after :data:`TAIL_CYCLES` more cycles, so an extra ``out`` or ``status`` beat fails.

:func:`check_results` is the golden comparison: the k-th job out of the array must be the
k-th job in (the array's order rule: job order), with its tag, every ``out`` beat equal to
``models.te.te_decode`` on that job's inputs (bit for bit, tag on top) and its status word
equal to the model's.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np

from tricut.models import te as M
from tricut.rtl.te.layouts import out_layout, status_layout
from tricut.rtl.tile.te_array import TEArray
from tricut.rtl.tile.array_layouts import pack_job, pack_routed_kv, split_tag, tag_word
from tricut.models.te_array_timing import te_array_routed_schedule, te_array_schedule
from tricut.sim.harness.shared_simulator import design
from tricut.sim.harness.streams import (IDLE_BACKPRESSURE, NotDrained, Schedule, Sink, Source,
                                        drained)
from tricut.sim.harness.te import TEVector, make_vector

__all__ = ["ArrayJob", "JobOut", "random_job", "plan_json", "Driver", "run_plan_amaranth",
           "simulate_amaranth", "simulate_verilator_matrix", "check_results", "array_params",
           "unstalled_schedule", "unstalled_routed_schedule", "routed_kv_beats", "KV_ORDERS",
           "STREAMS", "TAIL_CYCLES"]

#: the input streams a plan drives
STREAMS = ("job", "q", "kv")
#: cycles every run continues after the last job's last ``out`` beat
TAIL_CYCLES = 8
#: orders of a routed ``kv`` stream (:func:`routed_kv_beats`)
KV_ORDERS = ("round_robin", "reverse", "random", "serial")


@dataclass
class ArrayJob:
    tag: int
    vec: TEVector

    def golden(self) -> M.TEResult:
        return self.vec.golden()

    def expected_out(self, tag_bits):
        """The job's ``out`` beats as the array emits them (TE beats with the tag on top)."""
        low = out_layout(self.vec.lanes).size
        return [tag_word(w, self.tag, low, tag_bits) for w in self.vec.expected_out_beats()]

    def expected_status(self, tag_bits):
        return tag_word(self.golden().status_word, self.tag, status_layout().size, tag_bits)


@dataclass
class JobOut:
    """One job as it came out of the array (the k-th job to finish)."""
    tag: int
    beats: list             # tagged out payload ints
    status: int             # tagged status payload int (None if none came)
    start: int              # cycle the k-th job beat transferred (first job beat = 0)
    end: int                # cycle the k-th job's last out beat transferred


def random_job(rng, tag, G, d, lanes, kv_dtype, n, partial=False, n_announced=None):
    """A job of ``n`` random tokens (normal q, K, V; the announced length ``n_announced``,
    default ``n``: less is a too-long stream, more an early end)."""
    q = rng.standard_normal((G, d)).astype(np.float32)
    k = rng.standard_normal((n, d)).astype(np.float32)
    v = rng.standard_normal((n, d)).astype(np.float32)
    return ArrayJob(tag, make_vector(q, k, v, kv_dtype, lanes=lanes, n=n_announced,
                                     partial=partial))


def routed_kv_beats(jobs, engines, order="round_robin", seed=0):
    """The ``kv`` stream of a routed-K/V array (``TEArray(routed_kv=True)``): job ``j``'s
    beats (``vec.kv_beats()``, framed by ``last``; none if ``n = 0``) with its engine
    ``j mod engines`` on top (:func:`~tricut.rtl.tile.array_layouts.pack_routed_kv`), cut
    into tokens of ``2*Dk`` beats (a stream that is not whole tokens ends with a shorter
    piece) and interleaved token by token over the jobs *in flight*: the jobs with beats left
    among ``u .. u+engines-1``, ``u`` the oldest job with beats left (so the array's rule R1
    holds: no beat of job ``j`` before the last of every job ``<= j - engines``).

    ``order``: ``round_robin`` (the next job in flight after the last one served, by job
    index, cyclically: a token per engine in turn, as a KV streamer would), ``reverse`` (the
    same, descending), ``random`` (any job in flight, seeded), ``serial`` (job by job)."""
    if order not in KV_ORDERS:
        raise ValueError(f"kv order must be one of {KV_ORDERS}, got {order!r}")
    v0 = jobs[0].vec
    tok = 2 * (v0.d // v0.lanes)
    chunks = []
    for k, j in enumerate(jobs):
        words = [pack_routed_kv(w, k % engines, v0.lanes, v0.kv_dtype, engines)
                 for w in j.vec.kv_beats()]
        chunks.append([words[i:i + tok] for i in range(0, len(words), tok)])
    ptr = [0] * len(jobs)
    rng = random.Random(f"{seed}/kv_order")
    out, last = [], -1
    while True:
        left = [k for k in range(len(jobs)) if ptr[k] < len(chunks[k])]
        if not left:
            return out
        if order == "serial":
            k = left[0]
        else:
            fly = [k for k in left if k < left[0] + engines]
            if order == "round_robin":
                k = next((x for x in fly if x > last), fly[0])
            elif order == "reverse":
                k = next((x for x in reversed(fly) if x < last), fly[-1])
            else:
                k = rng.choice(fly)
        out += chunks[k][ptr[k]]
        ptr[k] += 1
        last = k


def plan_json(jobs, tag_bits=16, idle=None, backpressure=None, seed=0, routed_engines=None,
              kv_order="round_robin"):
    """The stimulus plan: input beats, expected beat counts, schedules, seed. With
    ``routed_engines`` (the engines of a routed-K/V array) the ``kv`` beats carry their
    engine and are interleaved in ``kv_order`` (:func:`routed_kv_beats`)."""
    idle, backpressure = Schedule.of(idle), Schedule.of(backpressure)
    stall = 1 - min(idle.duty, backpressure.duty)
    v0 = jobs[0].vec
    kv = ([w for j in jobs for w in j.vec.kv_beats()] if routed_engines is None else
          routed_kv_beats(jobs, routed_engines, kv_order, seed))
    return {
        "lanes": v0.lanes, "tag_bits": tag_bits,
        "job": [pack_job(j.vec.desc_beats()[0], j.tag, tag_bits) for j in jobs],
        "q": [w for j in jobs for w in j.vec.q_beats()],
        "kv": kv,
        "n_out": [len(j.vec.expected_out_beats()) for j in jobs],
        "idle": idle.to_json(), "backpressure": backpressure.to_json(), "seed": seed,
        "max_cycles": int(sum(3 * M.te_cycles(max(j.vec.n_announced, j.vec.k_codes.shape[0]),
                                              v0.d, v0.G, v0.lanes, j.vec.partial)
                              + 2 * len(j.vec.kv_beats()) + 50 for j in jobs)
                          * (1 + 6 * stall)),
    }


class Driver:
    """Cycle-by-cycle stimulus and monitor of one plan: a Source per input stream (the idle
    schedule) and Sinks on ``out`` and ``status`` (the backpressure schedule, each with its
    own RNG; expecting exactly the plan's beat counts). Per cycle ``drive()`` ->
    ``({stream: (valid, payload)}, out_ready, status_ready)``, then ``sampled(readies,
    out_valid, out_payload, status_valid, status_payload)`` with what the clock edge sees."""

    def __init__(self, plan):
        self.plan = plan
        seed = plan["seed"]
        self.sources = {k: Source(k, plan[k], plan["idle"], seed) for k in STREAMS}
        self.out = Sink("out", plan["backpressure"], seed, expect=sum(plan["n_out"]))
        self.status = Sink("status", plan["backpressure"], seed, expect=len(plan["n_out"]))
        self.n_jobs = len(plan["n_out"])
        self.low = out_layout(plan["lanes"]).size
        self.jobs, self.cur, self.starts = [], [], []
        self.cycle, self.first, self.tail = 0, None, 0

    def drive(self):
        return ({k: s.drive() for k, s in self.sources.items()}, self.out.drive(),
                self.status.drive())

    def _rel(self):
        return self.cycle - (self.first if self.first is not None else self.cycle)

    def sampled(self, readies, ov, op, sv, sp):
        if len(self.jobs) >= self.n_jobs:
            self.tail += 1
        for k, s in self.sources.items():
            if s.sample(readies[k]) and k == "job":
                if self.first is None:
                    self.first = self.cycle
                self.starts.append(self._rel())
        if self.out.sample(ov, op):
            self.cur.append(op)
            word, tag = split_tag(op, self.low)
            if (word >> (self.low - 1)) & 1:
                k = len(self.jobs)
                self.jobs.append(JobOut(tag=tag, beats=self.cur, status=None,
                                        start=self.starts[k] if k < len(self.starts) else None,
                                        end=self._rel()))
                self.cur = []
        if self.status.sample(sv, sp):
            k = len(self.status.beats) - 1
            if k < len(self.jobs):
                self.jobs[k].status = sp
        self.cycle += 1

    @property
    def finished(self):
        return len(self.jobs) >= self.n_jobs and self.tail >= TAIL_CYCLES

    def problems(self):
        out = drained(self.sources, self.out, self.status)
        if self.cur:
            out.append(f"out: {len(self.cur)} beats after the last job's last beat")
        return out


def run_plan_amaranth(plan, shared):
    """One plan on a :class:`~tricut.rtl.tile.te_array.TEArray` (``shared``: its
    :class:`~tricut.sim.harness.shared_simulator.SharedDesign`) in the Amaranth simulator;
    returns ``{"jobs": [JobOut], "problems": [...], "cycles": n}``."""
    dut = shared.dut
    drv = Driver(plan)
    streams = {"job": dut.job, "q": dut.q, "kv": dut.kv}

    async def bench(ctx):
        while not drv.finished:
            if drv.cycle > plan["max_cycles"]:
                raise TimeoutError(f"TE array hung: {drv.cycle} cycles, "
                                   f"{len(drv.jobs)}/{drv.n_jobs} jobs out")
            d, oready, sready = drv.drive()
            for k, s in streams.items():
                valid, payload = d[k]
                ctx.set(s.valid, valid)
                if payload is not None:
                    ctx.set(s.payload.as_value(), payload)
            ctx.set(dut.out.ready, oready)
            ctx.set(dut.status.ready, sready)
            _, _, jr, qr, kr, ov, op, sv, sp = await ctx.tick().sample(
                dut.job.ready, dut.q.ready, dut.kv.ready, dut.out.valid,
                dut.out.payload.as_value(), dut.status.valid, dut.status.payload.as_value())
            drv.sampled({"job": jr, "q": qr, "kv": kr}, ov, op, sv, sp)

    shared.run(bench)
    return {"jobs": drv.jobs, "problems": drv.problems(), "cycles": drv.cycle}


def array_params(jobs, engines, tag_bits=16, routed_kv=False, kv_fifo_depth=None) -> dict:
    """The :class:`TEArray` parameters of a serial-engine array for ``jobs`` (their outputs
    are the serial engine's golden, their cycles
    :func:`~tricut.models.te_array_timing.te_array_schedule`'s); the pipelined engine is
    checked inside the tile (``tests/test_tile_cached.py``, ``tests/test_tile_timing.py``)."""
    v0 = jobs[0].vec
    return dict(engines=engines, head_dim=v0.d, G=v0.G, lanes=v0.lanes, kv_dtype=v0.kv_dtype,
                tag_bits=tag_bits, routed_kv=routed_kv, kv_fifo_depth=kv_fifo_depth,
                engine="serial")


def _jobs_of(run):
    if run["problems"]:
        raise NotDrained("TE array bench not drained: " + "; ".join(run["problems"]))
    return [j if isinstance(j, JobOut) else JobOut(**j) for j in run["jobs"]]


def simulate_amaranth(jobs, engines, tag_bits=16, idle=None, backpressure=None, seed=0,
                      plan=None, routed_kv=False, kv_order="round_robin", kv_fifo_depth=None):
    """``jobs`` (one configuration: the first job's ``G``, ``d``, ``lanes``, ``kv_dtype``)
    through a ``TEArray`` of ``engines`` engines in the Amaranth simulator under the ``idle``
    (inputs) and ``backpressure`` (``out`` and ``status``) schedules; returns the
    :class:`JobOut` list in output order after the drained check (:class:`NotDrained`).
    ``routed_kv``: a routed-K/V array (FIFOs of ``kv_fifo_depth``), its ``kv`` stream in
    ``kv_order`` (:func:`routed_kv_beats`). ``plan`` overrides the stimulus (e.g. to corrupt
    it)."""
    plan = plan or plan_json(jobs, tag_bits, idle, backpressure, seed,
                             engines if routed_kv else None, kv_order)
    shared = design(TEArray, **array_params(jobs, engines, tag_bits, routed_kv, kv_fifo_depth))
    return _jobs_of(run_plan_amaranth(plan, shared))


def simulate_verilator_matrix(jobs, engines, tag_bits=16, pairs=IDLE_BACKPRESSURE, seed=0):
    """``jobs`` under every ``(idle, backpressure)`` pair in one Verilator build and one
    cocotb test (``sim/harness/benches/tile_te_array.py``, the array reset between plans);
    returns ``{pair: [JobOut]}``, each drained-checked."""
    from tricut.sim.harness.cocotb_run import run_plans

    dut = TEArray(**array_params(jobs, engines, tag_bits))
    plans = [plan_json(jobs, tag_bits, i, b, seed) for i, b in pairs]
    v0 = jobs[0].vec
    toplevel = (f"tile_te_array_e{engines}_{v0.kv_dtype}_d{v0.d}_g{v0.G}_l{v0.lanes}"
                f"_t{tag_bits}")
    runs = run_plans(dut, toplevel, "tile_te_array", plans)
    return {pair: _jobs_of(run) for pair, run in zip(pairs, runs)}


def check_results(jobs, res, tag_bits=16):
    """The golden comparison (raises AssertionError naming the first difference): the k-th
    job out is the k-th job in (tag), each ``out`` beat equals the golden TE model's with the
    tag on top, and the status word equals the model's."""
    assert len(res) == len(jobs), f"{len(res)} jobs out, {len(jobs)} in"
    for k, (j, r) in enumerate(zip(jobs, res)):
        assert r.tag == j.tag, f"job {k}: out carries tag {r.tag:#x}, expected {j.tag:#x} " \
                               f"(jobs must leave in job order)"
        exp = j.expected_out(tag_bits)
        if r.beats != exp:
            if len(r.beats) != len(exp):
                raise AssertionError(f"job {k} (tag {j.tag:#x}): {len(r.beats)} out beats, "
                                     f"expected {len(exp)}")
            b = next(i for i, (x, y) in enumerate(zip(r.beats, exp)) if x != y)
            raise AssertionError(f"job {k} (tag {j.tag:#x}): out beat {b} differs from the "
                                 f"golden TE: RTL {r.beats[b]:#x} golden {exp[b]:#x}")
        st = j.expected_status(tag_bits)
        assert r.status == st, (f"job {k} (tag {j.tag:#x}): status {r.status} != model {st} "
                                f"({j.golden().status})")


def unstalled_schedule(jobs, engines):
    """:func:`~tricut.models.te_array_timing.te_array_schedule` of these jobs (exact K/V only)."""
    v0 = jobs[0].vec
    return te_array_schedule([(j.vec.n_announced, j.vec.partial) for j in jobs], v0.d, v0.G,
                             v0.lanes, engines)


def unstalled_routed_schedule(jobs, engines):
    """:func:`~tricut.models.te_array_timing.te_array_routed_schedule` of these jobs."""
    v0 = jobs[0].vec
    return te_array_routed_schedule([(j.vec.n_announced, j.vec.partial) for j in jobs], v0.d,
                                    v0.G, v0.lanes, engines)
