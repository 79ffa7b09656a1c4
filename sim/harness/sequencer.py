"""Run the step sequencer RTL (``rtl/tile/sequencer.py``) against the golden
:func:`tricut.models.tile.sequence`, transaction for transaction.

A :class:`SeqRound` is one DSU round: its step number, its descriptors (in the arbiter's slot
order) and ``end``. :func:`expected` packs the golden step beats and jobs of a list of rounds
into payload ints; :func:`plan_json` turns rounds into the stimulus plan (the beats of
``round`` and ``descriptor``, the expected ``step`` and ``job`` beats, the idle and
backpressure schedules, the seed); :class:`Driver` applies a plan cycle by cycle with the
stream drivers of :mod:`tricut.sim.harness.streams`, independent of the simulator:
:func:`run_plan_amaranth` uses it in Amaranth's simulator and
``sim/harness/benches/tile_sequencer.py`` on Verilator (:func:`simulate_verilator_matrix`).
Every run ends with the drained check (the sinks expect exactly the golden beats) after
:data:`TAIL_CYCLES` idle cycles, so an extra output beat fails.

Descriptors the RTL drops (:func:`is_good` false: wrong step, slot or request or seq_len too
wide for the output fields, seq_len 0; or ``max_slots`` good ones came before) are sent like
the others but left out of the golden round, and the RTL must raise ``bad_desc`` for that
round.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tricut.models.dsu import Descriptor
from tricut.models.tile import sequence
from tricut.rtl.cdu.layouts import HINT, STEP_KIND, Widths, seq_bits, step_bits
from tricut.rtl.tile.sequencer import sequencer_cycles
from tricut.rtl.tile.sequencer_layouts import (DESCRIPTOR_LAYOUT, attn_job_layout, pack,
                                               round_layout, step_layout, unpack)
from tricut.sim.harness.streams import (IDLE_BACKPRESSURE, NotDrained, Schedule, Sink, Source,
                                        drained)

__all__ = ["SeqRound", "DEFAULTS", "build", "is_good", "expected", "random_rounds",
           "plan_json", "Driver", "run_plan_amaranth", "simulate_amaranth",
           "simulate_verilator_matrix", "SeqResult", "STREAMS", "TAIL_CYCLES"]

#: the input streams a plan drives
STREAMS = ("round", "descriptor")
#: cycles every run continues after the last expected output beat
TAIL_CYCLES = 8
#: unit parameters of a plan (``widths`` as the three CDU field widths)
DEFAULTS = dict(num_layers=2, num_kv_heads=2, max_slots=4, split_tokens=0, slot_bits=2,
                req_bits=4, layer_bits=3, block_bits=10)


@dataclass
class SeqRound:
    step: int
    descriptors: list = field(default_factory=list)
    end: bool = False


def _params(p):
    out = dict(DEFAULTS)
    out.update(p or {})
    return out


def _widths(p):
    return Widths(req_bits=p["req_bits"], layer_bits=p["layer_bits"], block_bits=p["block_bits"])


def build(params=None):
    """The :class:`~tricut.rtl.tile.sequencer.StepSequencer` of a plan's parameters."""
    from tricut.rtl.tile.sequencer import StepSequencer
    p = _params(params)
    return StepSequencer(p["num_layers"], p["num_kv_heads"], p["max_slots"], p["split_tokens"],
                         _widths(p), p["slot_bits"])


def is_good(d, step, params=None):
    """Would the RTL pass descriptor ``d`` of round ``step`` on (else it drops it)?"""
    p = _params(params)
    w = _widths(p)
    return (d.step == step and d.slot < (1 << p["slot_bits"]) and d.request < (1 << w.req)
            and 1 <= d.seq_len < (1 << seq_bits(w)))


def expected(rounds, params=None):
    """Golden ``(step_ints, job_ints, per_round)`` of ``rounds``: ``per_round`` lists
    ``(step beats, jobs, good seq_lens, dropped)`` of each round."""
    p = _params(params)
    w = _widths(p)
    sl = step_layout(w, p["slot_bits"])
    jl = attn_job_layout(w, p["slot_bits"], p["num_kv_heads"], p["split_tokens"])
    steps, jobs, per = [], [], []
    for r in rounds:
        good = []
        for d in r.descriptors:         # the RTL also drops what comes after max_slots good
            if is_good(d, r.step, p) and len(good) < p["max_slots"]:
                good.append(d)
        beats, js = sequence(good, p["num_layers"], p["num_kv_heads"], p["split_tokens"],
                             step=r.step, end=r.end)
        for b in beats:
            b = dict(b, kind=STEP_KIND[b["kind"]])
            if "hint" in b:
                b["hint"] = HINT[b["hint"]]
            if "step" in b:
                b["step"] %= 1 << step_bits()     # the CDU's step field: the low 16 bits
            steps.append(pack(sl, b))
        jobs += [pack(jl, j.__dict__) for j in js]
        per.append((len(beats), len(js), [d.seq_len for d in good],
                    len(r.descriptors) - len(good)))
    return steps, jobs, per


def random_rounds(rng, n_rounds, params=None, step0=0, max_seq=None, empty=False):
    """``n_rounds`` random rounds: 1..max_slots descriptors (0 allowed if ``empty``) on
    distinct random slots in slot order, random requests and residency bits, seq_len from
    the split boundaries (``split_tokens`` - 1, itself, + 1, twice it, + 1) or uniform in
    ``1..max_seq``; the last round has ``end``."""
    p = _params(params)
    w = _widths(p)
    split = p["split_tokens"]
    max_seq = max_seq or (3 * split + 2 if split else 64)
    out = []
    for k in range(n_rounds):
        n = rng.randint(0 if empty else 1, p["max_slots"])
        slots = sorted(rng.sample(range(1 << p["slot_bits"]), n))
        ds = []
        for s in slots:
            cands = [x for x in (split - 1, split, split + 1, 2 * split, 2 * split + 1)
                     if split and 1 <= x < (1 << seq_bits(w))]
            n_tok = rng.choice(cands) if cands and rng.random() < 0.5 else \
                rng.randint(1, max_seq)
            ds.append(Descriptor(step0 + k, s, rng.randrange(1 << w.req), n_tok,
                                 rng.randrange(4), rng.randrange(2)))
        out.append(SeqRound(step0 + k, ds, end=k == n_rounds - 1))
    return out


def plan_json(rounds, params=None, idle=None, backpressure=None, seed=0):
    """The stimulus plan shared by the Amaranth and cocotb benches."""
    p = _params(params)
    idle, backpressure = Schedule.of(idle), Schedule.of(backpressure)
    stall = 1 - min(idle.duty, backpressure.duty)
    steps, jobs, per = expected(rounds, p)
    rl = round_layout(p["max_slots"])
    formula = [sequencer_cycles(sl, p["num_layers"], p["num_kv_heads"], p["split_tokens"], dr)
               for _, _, sl, dr in per]
    return {
        "params": p,
        "round": [pack(rl, dict(step=r.step, count=len(r.descriptors), end=int(r.end)))
                  for r in rounds],
        "descriptor": [pack(DESCRIPTOR_LAYOUT, d.__dict__) for r in rounds
                       for d in r.descriptors],
        "step": steps, "job": jobs,
        "per_round": [[nb, nj] for nb, nj, _, _ in per], "formula": formula,
        "step_last_bit": step_layout(_widths(p), p["slot_bits"])["last"].offset,
        "idle": idle.to_json(), "backpressure": backpressure.to_json(), "seed": seed,
        "max_cycles": int((sum(formula) * 3 + 50) * (1 + 8 * stall)),
    }


class Driver:
    """Cycle-by-cycle stimulus and monitor of one plan: a Source per input stream (``round``,
    ``descriptor``; the idle schedule) and a Sink on ``step`` and on ``job`` (the backpressure
    schedule; each expects exactly the golden beats). Per cycle ``drive()`` ->
    ``({stream: (valid, payload)}, {sink: ready})``, then ``sampled(readies, outs,
    bad_desc)`` with what the clock edge sees (``outs``: ``{sink: (valid, payload)}``). A
    round's cycles run from its ``round`` transfer to its last output beat, inclusive."""

    def __init__(self, plan):
        self.plan = plan
        seed = plan["seed"]
        self.sources = {k: Source(k, plan[k], plan["idle"], seed) for k in STREAMS}
        self.sinks = {k: Sink(k, plan["backpressure"], seed, expect=plan[k])
                      for k in ("step", "job")}
        self.per = plan["per_round"]
        self.starts, self.step_done, self.job_done = [], [], {}
        self.cycle, self.tail = 0, 0
        # the cumulative job count at which each round's jobs are all out
        acc, self.job_marks = 0, []
        for _, nj in self.per:
            acc += nj
            self.job_marks.append(acc if nj else None)
        self.rounds = []           # per round: {"cycles", "bad_desc"}

    def drive(self):
        return ({k: s.drive() for k, s in self.sources.items()},
                {k: s.drive() for k, s in self.sinks.items()})

    def sampled(self, readies, outs, bad_desc):
        c = self.cycle
        if self.sources["round"].sample(readies["round"]):
            self.starts.append(c)
        self.sources["descriptor"].sample(readies["descriptor"])
        sv, sp = outs["step"]
        if self.sinks["step"].sample(sv, sp) and (sp >> self.plan["step_last_bit"]) & 1:
            self.step_done.append(c)
        jv, jp = outs["job"]
        if self.sinks["job"].sample(jv, jp):
            n = len(self.sinks["job"].beats)
            self.job_done.update({k: c for k, mark in enumerate(self.job_marks) if mark == n})
        k = len(self.rounds)
        if k < len(self.per) and k < len(self.starts) and k < len(self.step_done) and \
                (self.per[k][1] == 0 or k in self.job_done):
            end = max(self.step_done[k], self.job_done.get(k, 0))
            self.rounds.append({"cycles": end - self.starts[k] + 1, "bad_desc": int(bad_desc)})
        if len(self.rounds) >= len(self.per):
            self.tail += 1
        self.cycle += 1

    @property
    def finished(self):
        return len(self.rounds) >= len(self.per) and self.tail >= TAIL_CYCLES

    def problems(self):
        return drained(self.sources, self.sinks)

    def result(self):
        return {"rounds": self.rounds, "step": self.sinks["step"].beats,
                "job": self.sinks["job"].beats, "problems": self.problems()}


def run_plan_amaranth(plan, dut):
    """One plan on ``dut`` in the Amaranth simulator; returns :meth:`Driver.result`."""
    from amaranth.sim import Simulator

    drv = Driver(plan)
    ins = {"round": dut.round, "descriptor": dut.descriptor}
    outs = {"step": dut.step, "job": dut.job}

    async def bench(ctx):
        while not drv.finished:
            if drv.cycle > plan["max_cycles"]:
                raise TimeoutError(f"step sequencer hung: {drv.cycle} cycles, "
                                   f"{len(drv.rounds)}/{len(drv.per)} rounds done")
            d, ready = drv.drive()
            for k, s in ins.items():
                valid, payload = d[k]
                ctx.set(s.valid, valid)
                if payload is not None:
                    ctx.set(s.payload.as_value(), payload)
            for k, s in outs.items():
                ctx.set(s.ready, ready[k])
            _, _, rr, dr, sv, sp, jv, jp, bd = await ctx.tick().sample(
                dut.round.ready, dut.descriptor.ready, dut.step.valid,
                dut.step.payload.as_value(), dut.job.valid, dut.job.payload.as_value(),
                dut.bad_desc)
            drv.sampled({"round": rr, "descriptor": dr}, {"step": (sv, sp), "job": (jv, jp)},
                        bd)

    sim = Simulator(dut)
    sim.add_clock(1e-9)
    sim.add_testbench(bench)
    sim.run()
    return drv.result()


@dataclass
class SeqResult:
    """One run: the ``step`` and ``job`` beats received (dicts of their layouts) and per
    round ``cycles`` and ``bad_desc`` (sampled on the round's last output cycle)."""
    step: list
    job: list
    cycles: list
    bad_desc: list
    formula: list


def _result(plan, run):
    if run["problems"]:
        raise NotDrained("step sequencer bench not drained: " + "; ".join(run["problems"]))
    p = plan["params"]
    w = _widths(p)
    sl = step_layout(w, p["slot_bits"])
    jl = attn_job_layout(w, p["slot_bits"], p["num_kv_heads"], p["split_tokens"])
    return SeqResult([unpack(sl, x) for x in run["step"]], [unpack(jl, x) for x in run["job"]],
                     [r["cycles"] for r in run["rounds"]],
                     [r["bad_desc"] for r in run["rounds"]], plan["formula"])


def simulate_amaranth(rounds, params=None, idle=None, backpressure=None, seed=0, plan=None):
    """``rounds`` back to back in the Amaranth simulator under the ``idle`` (inputs) and
    ``backpressure`` (outputs) schedules; the sinks expect exactly the golden beats (the
    drained check raises :class:`NotDrained` otherwise). ``plan`` overrides the stimulus
    (e.g. to corrupt the expectation)."""
    plan = plan or plan_json(rounds, params, idle, backpressure, seed)
    return _result(plan, run_plan_amaranth(plan, build(plan["params"])))


def simulate_verilator_matrix(rounds, params=None, pairs=IDLE_BACKPRESSURE, seed=0):
    """``rounds`` under every ``(idle, backpressure)`` pair in one Verilator build and one
    cocotb test (the unit reset between plans); returns ``{pair: SeqResult}``."""
    from tricut.sim.harness.cocotb_run import run_plans

    p = _params(params)
    dut = build(p)
    plans = [plan_json(rounds, p, i, b, seed) for i, b in pairs]
    toplevel = "tile_sequencer_" + "_".join(str(p[k]) for k in DEFAULTS)
    runs = run_plans(dut, toplevel, "tile_sequencer", plans)
    return {pair: _result(plan, run) for pair, plan, run in zip(pairs, plans, runs)}
