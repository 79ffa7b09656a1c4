"""Run the split-K combine unit RTL (``rtl/tile/combine.py``) against the golden combine.

A :class:`CombineJob` is one (request, layer, KV head) job: K partial results ``(o, m, l)``
(bit patterns, as a TE engine emits them in partial mode). :func:`split_k_parts` makes them
with the golden TE model itself, on K slices of one context. :func:`plan_json` turns jobs into
the stimulus plan (the beats of ``job`` and ``partial``, the idle and backpressure schedules,
the seed); :class:`Driver` applies a plan cycle by cycle with the stream drivers of
:mod:`tricut.sim.harness.streams`, independent of the simulator: :func:`run_plan_amaranth`
uses it in Amaranth's simulator and ``sim/harness/benches/tile_combine.py`` on Verilator
(:func:`simulate_verilator_matrix`: every plan through one build, one cocotb test). Every run
ends with the drained check and :data:`TAIL_CYCLES` idle cycles, so an extra output beat fails.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tricut.models import te as M
from tricut.rtl.tile.combine import CombineUnit, combine_cycles
from tricut.rtl.tile.layouts import combined_beats, pack_job, partial_beats, unpack_out_beat
from tricut.sim.harness.shared_simulator import design
from tricut.sim.harness.streams import (IDLE_BACKPRESSURE, NotDrained, Schedule, Sink, Source,
                                        drained)

__all__ = ["CombineJob", "JobResult", "split_k_parts", "golden_combine", "plan_json", "Driver",
           "run_plan_amaranth", "simulate_amaranth", "simulate_verilator_matrix", "STREAMS",
           "TAIL_CYCLES"]

#: the input streams a plan drives
STREAMS = ("job", "partial")
#: cycles every run continues after the last job's last output beat
TAIL_CYCLES = 8


def golden_combine(parts, G, d):
    """:func:`tricut.models.te.combine_partials`, and zeros for a job of no parts."""
    if not parts:
        return np.zeros((G, d), dtype=np.int64)
    return M.combine_partials(parts)


@dataclass
class CombineJob:
    """One job: ``parts`` is a list of ``(o [G, d], m [G], l [G])`` fp32 bit patterns."""
    G: int
    d: int
    parts: list

    @property
    def K(self):
        return len(self.parts)

    def golden(self):
        return golden_combine(self.parts, self.G, self.d)

    def partial_beats(self, lanes):
        return [w for o, m, l in self.parts for w in partial_beats(o, m, l, lanes)]

    def expected_beats(self, lanes):
        return combined_beats(self.golden(), lanes)


@dataclass
class JobResult:
    beats: list
    cycles: int
    misframed: int
    out: np.ndarray = field(default=None)   # [G, d] fp32 bit patterns


def split_k_parts(q_codes, k_codes, v_codes, scale_bits, lanes, bounds, kv_dtype="bf16"):
    """The golden TE engine's partial results of the context slices ``[bounds[i],
    bounds[i+1])`` (``te_decode(..., partial=True)``; an empty slice gives ``o = 0``,
    ``m = -inf``, ``l = 0``), as ``(o, m, l)`` bit patterns."""
    parts = []
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        r = M.te_decode(q_codes, k_codes[lo:hi], v_codes[lo:hi], kv_dtype, scale_bits,
                        lanes=lanes, partial=True)
        parts.append((r.out, r.m, r.l))
    return parts


def plan_json(jobs, lanes, max_parts=8, idle=None, backpressure=None, seed=0):
    """The stimulus plan shared by the Amaranth and cocotb benches."""
    idle, backpressure = Schedule.of(idle), Schedule.of(backpressure)
    stall = 1 - min(idle.duty, backpressure.duty)
    return {
        "lanes": lanes,
        "job": [pack_job(j.K, max_parts) for j in jobs],
        "partial": [w for j in jobs for w in j.partial_beats(lanes)],
        "n_out": [j.G * j.d // lanes for j in jobs],
        "idle": idle.to_json(), "backpressure": backpressure.to_json(), "seed": seed,
        "max_cycles": int(sum(4 * combine_cycles(j.K, j.d, j.G, lanes) + 50 for j in jobs)
                          * (1 + 6 * stall)),
    }


class Driver:
    """Cycle-by-cycle stimulus and monitor of one plan: a Source per input stream (``job``,
    ``partial``; the idle schedule) and a Sink on ``combined`` (the backpressure schedule,
    expecting exactly the plan's beat count). Per cycle ``drive()`` ->
    ``({stream: (valid, payload)}, combined_ready)``, then ``sampled(readies, valid,
    payload, misframed)`` with what the clock edge sees. A job's cycles run from its ``job``
    transfer to its last ``combined`` transfer, inclusive."""

    def __init__(self, plan):
        self.plan = plan
        seed = plan["seed"]
        self.sources = {k: Source(k, plan[k], plan["idle"], seed) for k in STREAMS}
        self.out = Sink("combined", plan["backpressure"], seed, expect=sum(plan["n_out"]))
        self.n_jobs = len(plan["n_out"])
        self.jobs, self.cur = [], []
        self.cycle, self.start, self.tail = 0, None, 0

    def drive(self):
        return {k: s.drive() for k, s in self.sources.items()}, self.out.drive()

    def sampled(self, readies, valid, payload, misframed):
        if len(self.jobs) >= self.n_jobs:
            self.tail += 1
        if self.sources["job"].sample(readies["job"]):
            self.start = self.cycle
        self.sources["partial"].sample(readies["partial"])
        self.cycle += 1
        if self.out.sample(valid, payload):
            self.cur.append(payload)
            if (payload >> (32 * self.plan["lanes"])) & 1:
                start = self.start if self.start is not None else self.cycle
                self.jobs.append({"beats": self.cur, "cycles": self.cycle - start,
                                  "misframed": int(misframed)})
                self.cur, self.start = [], None

    @property
    def finished(self):
        return len(self.jobs) >= self.n_jobs and self.tail >= TAIL_CYCLES

    def problems(self):
        out = drained(self.sources, self.out)
        if self.cur:
            out.append(f"combined: {len(self.cur)} beats after the last job's last beat")
        return out


def run_plan_amaranth(plan, shared):
    """One plan on a :class:`~tricut.rtl.tile.combine.CombineUnit` (``shared``: its
    :class:`~tricut.sim.harness.shared_simulator.SharedDesign`) in the Amaranth simulator;
    returns ``{"jobs": [...], "problems": [...]}`` like the cocotb bench."""
    dut = shared.dut
    drv = Driver(plan)
    streams = {"job": dut.job, "partial": dut.partial}

    async def bench(ctx):
        while not drv.finished:
            if drv.cycle > plan["max_cycles"]:
                raise TimeoutError(f"combine unit hung: {drv.cycle} cycles, "
                                   f"{len(drv.jobs)}/{drv.n_jobs} jobs done")
            d, ready = drv.drive()
            for k, s in streams.items():
                valid, payload = d[k]
                ctx.set(s.valid, valid)
                if payload is not None:
                    ctx.set(s.payload.as_value(), payload)
            ctx.set(dut.combined.ready, ready)
            _, _, jr, pr, ov, op, mf = await ctx.tick().sample(
                dut.job.ready, dut.partial.ready, dut.combined.valid,
                dut.combined.payload.as_value(), dut.misframed)
            drv.sampled({"job": jr, "partial": pr}, ov, op, mf)

    shared.run(bench)
    return {"jobs": drv.jobs, "problems": drv.problems()}


def _results(jobs, lanes, run):
    if run["problems"]:
        raise NotDrained("combine bench not drained: " + "; ".join(run["problems"]))
    res = []
    for j, r in zip(jobs, run["jobs"]):
        out = np.array([unpack_out_beat(w, lanes)[0] for w in r["beats"]],
                       dtype=np.int64).reshape(j.G, j.d)
        res.append(JobResult(beats=r["beats"], cycles=r["cycles"], misframed=r["misframed"],
                             out=out))
    return res


def _unit_params(jobs, lanes, max_parts):
    return dict(head_dim=jobs[0].d, G=jobs[0].G, lanes=lanes, max_parts=max_parts)


def simulate_amaranth(jobs, lanes, max_parts=8, idle=None, backpressure=None, seed=0,
                      plan=None):
    """``jobs`` (one unit configuration: the first job's ``G`` and ``d``) back to back in the
    Amaranth simulator under the ``idle`` (inputs) and ``backpressure`` (``combined``)
    schedules (:meth:`Schedule.of`); returns a :class:`JobResult` per job after the drained
    check (``plan`` overrides the stimulus, e.g. to corrupt it)."""
    plan = plan or plan_json(jobs, lanes, max_parts, idle, backpressure, seed)
    return _results(jobs, lanes, run_plan_amaranth(plan, design(CombineUnit, **_unit_params(jobs, lanes, max_parts))))


def simulate_verilator_matrix(jobs, lanes, max_parts=8, pairs=IDLE_BACKPRESSURE, seed=0):
    """``jobs`` under every ``(idle, backpressure)`` pair in one Verilator build and one cocotb
    test (the unit reset between plans); returns ``{pair: [JobResult]}``, each drained-checked."""
    from tricut.sim.harness.cocotb_run import run_plans

    dut = CombineUnit(**_unit_params(jobs, lanes, max_parts))
    plans = [plan_json(jobs, lanes, max_parts, i, b, seed) for i, b in pairs]
    toplevel = f"tile_combine_d{jobs[0].d}_g{jobs[0].G}_l{lanes}_p{max_parts}"
    runs = run_plans(dut, toplevel, "tile_combine", plans)
    return {pair: _results(jobs, lanes, run) for pair, run in zip(pairs, runs)}
