"""Run the TE decode engine RTL (Amaranth simulator or Verilator/cocotb) against its model.

:func:`run_te` is the user-facing entry point: it quantises float32 ``q``, ``k``, ``v`` with
:mod:`tricut.models.formats`, runs the RTL and returns its output with the bit-exact golden
result. :class:`TEVector` holds one decode step as stream beats; :func:`simulate_amaranth`
drives any number of steps back to back through one engine under an input idle and an output
backpressure schedule (:mod:`tricut.sim.harness.streams`; the cocotb bench in
``sim/harness/benches/te_engine.py`` replays the same plan: the same beats, the same idle and
backpressure sequences) and ends with the drained check.
"""

from __future__ import annotations

import math
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tricut.models import formats as F
from tricut.models import te as M
from tricut.rtl.te.layouts import (pack_desc, pack_kv_beats, pack_q_beats, unpack_out_beat,
                                    unpack_status)
from tricut.sim.harness.shared_simulator import design, own
from tricut.sim.harness.streams import (IDLE_BACKPRESSURE, NotDrained, Schedule, Sink, Source,
                                        drained)
from tricut.sim.harness.waves import WaveSpec, amaranth_waves, finish, recording

__all__ = ["TEVector", "make_vector", "simulate_amaranth", "simulate_verilator",
           "simulate_verilator_matrix", "run_plan_amaranth", "run_te", "TEStepResult",
           "plan_json", "te_schedule", "Driver", "CycleBudgetExceeded", "sim_rate",
           "estimate_run", "run_cycles", "AMARANTH_LANE_CYCLES_PER_S", "VERILATOR_CYCLES_PER_S",
           "AMARANTH_PERIOD"]

#: Simulation speed the estimates use (docs/te.md, "Command line"): the Amaranth simulator
#: runs ~1,400 lane operations per CPU second whatever the lane count (the combinational fp32
#: units dominate), i.e. ~AMARANTH_LANE_CYCLES_PER_S / lanes cycles/s; Verilator through cocotb
#: is bound by the Python driver, ~VERILATOR_CYCLES_PER_S cycles/s, plus ~VERILATOR_BUILD_S to
#: build a configuration the first time.
AMARANTH_LANE_CYCLES_PER_S = 1400
VERILATOR_CYCLES_PER_S = 5000
VERILATOR_BUILD_S = 35
#: the Amaranth bench's clock period (s); the cocotb bench's clock is 10 ns
AMARANTH_PERIOD = 1e-9
_REPO_BUILD = Path(__file__).resolve().parents[2] / ".build"


def sim_rate(sim: str, lanes: int) -> float:
    """Estimated simulated cycles per second of the TE on ``sim`` (see the constants)."""
    if sim == "amaranth":
        return AMARANTH_LANE_CYCLES_PER_S / lanes
    return float(VERILATOR_CYCLES_PER_S)


def run_cycles(n, head_dim, G, lanes, partial=False, engine="serial", kv_dtype="bf16") -> int:
    """Bench cycles of one unstalled step (:func:`run_te`): the step's exact
    :func:`models.te.te_cycles` plus the bench's tail."""
    return M.te_cycles(n, head_dim, G, lanes, partial, engine, kv_dtype=kv_dtype) + TAIL_CYCLES


def estimate_run(n, head_dim, G, lanes, sim, partial=False, engine="serial",
                 kv_dtype="bf16") -> tuple[int, float]:
    """``(cycles, seconds)`` of one unstalled :func:`run_te` step on ``sim`` (seconds: the
    simulation at :func:`sim_rate`, plus the build on Verilator)."""
    cycles = run_cycles(n, head_dim, G, lanes, partial, engine, kv_dtype)
    secs = cycles / sim_rate(sim, lanes) + (VERILATOR_BUILD_S if sim == "verilator" else 0)
    return cycles, secs


class CycleBudgetExceeded(RuntimeError):
    """The run reached its cycle budget (``max_cycles``) before the last step's output."""

    def __init__(self, budget, cycles, steps_done, n_steps):
        super().__init__(f"stopped after {cycles:,} cycles (budget {budget:,}); "
                         f"{steps_done} of {n_steps} steps done")
        self.budget, self.cycles = budget, cycles
        self.steps_done, self.n_steps = steps_done, n_steps


@dataclass
class TEVector:
    """One decode step as codes (what the engine's streams carry)."""
    q_codes: np.ndarray                 # [G, d] bf16 codes
    k_codes: np.ndarray                 # [n_stream, d]
    v_codes: np.ndarray
    kv_dtype: str
    scale_bits: int
    lanes: int
    n: int | None = None                # announced length (None: n_stream)
    k_scales: np.ndarray | None = None  # [n_stream, d/16] E4M3 codes (nvfp4)
    v_scales: np.ndarray | None = None
    ts_bits: int = 0
    partial: bool = False
    engine: str = "serial"              # models.te.ENGINES

    @property
    def G(self):
        return self.q_codes.shape[0]

    @property
    def d(self):
        return self.q_codes.shape[1]

    @property
    def n_announced(self):
        return self.k_codes.shape[0] if self.n is None else self.n

    def golden(self) -> M.TEResult:
        return M.te_decode(self.q_codes, self.k_codes, self.v_codes, self.kv_dtype,
                           self.scale_bits, lanes=self.lanes, n=self.n_announced,
                           k_scales=self.k_scales, v_scales=self.v_scales,
                           tensor_scale_bits=self.ts_bits, partial=self.partial,
                           engine=self.engine)

    def desc_beats(self):
        return [pack_desc(self.n_announced, self.scale_bits, self.ts_bits, self.partial)]

    def q_beats(self):
        return pack_q_beats(self.q_codes, self.lanes)

    def kv_beats(self):
        if self.n_announced == 0:
            return []           # an empty step carries no K/V beats
        return pack_kv_beats(self.k_codes, self.v_codes, self.kv_dtype, self.lanes,
                             self.k_scales, self.v_scales, terminator=True)

    def expected_out_beats(self, golden=None):
        r = golden or self.golden()
        L = self.lanes
        beats = []
        for g in range(self.G):
            for b in range(0, self.d, L):
                beats.append([int(x) for x in r.out[g, b:b + L]])
            if self.partial:
                beats.append([int(r.m[g]), int(r.l[g])] + [0] * (L - 2))
        words = []
        for i, lanes in enumerate(beats):
            w = 0
            for j, x in enumerate(lanes):
                w |= (x & 0xFFFFFFFF) << (32 * j)
            if i == len(beats) - 1:
                w |= 1 << (32 * L)
            words.append(w)
        return words

    def used(self):
        """(q_used, k_used, v_used) float32: the dequantised values the datapath sees."""
        q = M.b2f(M.dequant_bf16(self.q_codes))
        k = M.b2f(M.dequant_kv(self.k_codes, self.kv_dtype, self.k_scales, self.ts_bits))
        v = M.b2f(M.dequant_kv(self.v_codes, self.kv_dtype, self.v_scales, self.ts_bits))
        return q, k.reshape(-1, self.d), v.reshape(-1, self.d)


def rising_max_inputs(rng, G, d, n, rise=2.5):
    """Adversarial float32 ``(q [G, d], k [n, d], v [n, d])``: every head's score rises by about
    ``rise`` (log2 units, with the default scale ``1/sqrt(d)``) on every token, so the running
    maximum -- and its integer ceiling, for ``rise > 1`` -- rises on every token (the worst
    case for a rescale: ``G*(n-1)`` events). Keys are ``u * a_t`` for one ±1 vector ``u``
    shared with the queries (``u`` plus a little noise), with ``a_t`` growing linearly.
    Quantisation must keep consecutive ``a_t`` apart: bf16 does for ``n`` up to about 100,
    fp8 and NVFP4 (3 and 1 mantissa bits, E4M3 block scales) for about 8 tokens; callers
    check with :func:`tricut.models.te.rescale_events`."""
    u = rng.choice(np.array([-1.0, 1.0], dtype=np.float32), size=d)
    q = (u[None, :] + 0.05 * rng.standard_normal((G, d))).astype(np.float32)
    step = rise / (math.sqrt(d) * math.log2(math.e))
    k = (u[None, :] * (step * np.arange(1, n + 1, dtype=np.float32))[:, None]).astype(np.float32)
    v = rng.standard_normal((n, d)).astype(np.float32)
    return q, k, v


def make_vector(q, k, v, kv_dtype, scale=None, lanes=8, n=None, partial=False,
                tensor_scale=None, engine="serial") -> TEVector:
    """Quantise float32 ``q`` [G,d], ``k``/``v`` [n,d] with :mod:`tricut.models.formats`.

    NVFP4: one tensor scale shared by K and V (``amax(|k|,|v|) / 2688`` unless given)."""
    q = np.asarray(q, dtype=np.float32)
    k = np.asarray(k, dtype=np.float32)
    v = np.asarray(v, dtype=np.float32)
    if q.ndim != 2:
        raise ValueError(f"q must be [G, head_dim], got shape {q.shape}")
    G, d = q.shape
    if k.ndim != 2 or k.shape[1] != d or v.shape != k.shape:
        raise ValueError(f"k and v must be [n, {d}] of equal shape, got {k.shape} and {v.shape}")
    if kv_dtype not in F.KV_DTYPES:
        raise ValueError(f"kv_dtype must be one of {F.KV_DTYPES}, got {kv_dtype!r}")
    M.validate_params(d, G, lanes, kv_dtype, engine)
    if scale is None:
        scale = 1.0 / math.sqrt(d)
    scale_bits = int(M.f2b(np.float32(scale)))
    qc = F.bf16_encode(q)
    ks = vs = None
    ts_bits = 0
    if kv_dtype == "bf16":
        kc, vc = F.bf16_encode(k), F.bf16_encode(v)
    elif kv_dtype == "fp8":
        kc, vc = F.fp8_e4m3_encode(k, saturate=True), F.fp8_e4m3_encode(v, saturate=True)
    else:
        if tensor_scale is None:
            amax = max(float(np.max(np.abs(k), initial=0)), float(np.max(np.abs(v), initial=0)))
            tensor_scale = np.float32(amax) / np.float32(2688.0) if amax > 0 else 1.0
        tk = F.nvfp4_quantize(k.reshape(-1, d), tensor_scale=tensor_scale)
        tv = F.nvfp4_quantize(v.reshape(-1, d), tensor_scale=tensor_scale)
        kc, vc = F.unpack_fp4(tk.packed), F.unpack_fp4(tv.packed)
        ks, vs = tk.block_scales, tv.block_scales
        ts_bits = int(M.f2b(tk.tensor_scale))
    return TEVector(qc, kc, vc, kv_dtype, scale_bits, lanes, n=n, k_scales=ks, v_scales=vs,
                    ts_bits=ts_bits, partial=partial, engine=engine)


@dataclass
class TEStepResult:
    out_beats: list
    status: dict
    cycles: int
    mac_busy: int
    k_busy: int = 0                         # split engine: K / V array ops, rescaling V ops
    v_busy: int = 0
    v_rescale: int = 0
    out: np.ndarray = field(default=None)   # [G, d] fp32 bits (o in partial mode)
    m: np.ndarray = field(default=None)
    l: np.ndarray = field(default=None)


def _decode_out(vec: TEVector, beats):
    L = vec.lanes
    lanes = [unpack_out_beat(w, L)[0] for w in beats]
    out = np.zeros((vec.G, vec.d), dtype=np.int64)
    m = np.zeros(vec.G, dtype=np.int64)
    l = np.zeros(vec.G, dtype=np.int64)
    per_head = vec.d // L + (1 if vec.partial else 0)
    for g in range(vec.G):
        hb = lanes[g * per_head:(g + 1) * per_head]
        for b in range(vec.d // L):
            out[g, b * L:(b + 1) * L] = hb[b]
        if vec.partial:
            m[g], l[g] = hb[-1][0], hb[-1][1]
    return out, m, l


def te_schedule(x) -> Schedule:
    """The TE benches' ``idle``/``backpressure`` argument as a :class:`Schedule`: a number is
    the probability of an idle (not valid / not ready) cycle (0: ``none``, else ``random``
    with ``p = 1 - x``); a mode name, Schedule or its JSON dict as in :meth:`Schedule.of`."""
    if isinstance(x, (int, float)) and not isinstance(x, bool):
        if not 0 <= x < 1:
            raise ValueError(f"idle/backpressure probability must be in [0, 1), got {x!r}")
        return Schedule() if x == 0 else Schedule("random", p=1 - x)
    return Schedule.of(x)


def plan_json(vectors, idle=0.0, backpressure=0.0, seed=0):
    """The stimulus plan shared by the Amaranth and cocotb benches: the beats of every stream,
    the idle (desc, q, kv) and backpressure (out) schedules and the seed of their RNGs."""
    idle, backpressure = te_schedule(idle), te_schedule(backpressure)
    stall = 1 - min(idle.duty, backpressure.duty)
    return {
        "lanes": vectors[0].lanes,
        "desc": [w for v in vectors for w in v.desc_beats()],
        "q": [w for v in vectors for w in v.q_beats()],
        "kv": [w for v in vectors for w in v.kv_beats()],
        "n_out": [len(v.expected_out_beats()) for v in vectors],
        "idle": idle.to_json(), "backpressure": backpressure.to_json(), "seed": seed,
        "max_cycles": int(sum(20 * M.te_cycles(v.n_announced, v.d, v.G, v.lanes, v.partial)
                              + 2 * len(v.kv_beats()) + 200 for v in vectors)
                          * (1 + 4 * stall)),
    }


STREAMS = ("desc", "q", "kv")
#: cycles every bench runs after the last step's last output beat: any further output beat
#: (or a status still pending) is caught by the drained check
TAIL_CYCLES = 8


class Driver:
    """Cycle-by-cycle stimulus/monitor of one plan, independent of the simulator: a
    :class:`~tricut.sim.harness.streams.Source` per input stream (``desc``, ``q``, ``kv``;
    the plan's idle schedule) and a :class:`~tricut.sim.harness.streams.Sink` on ``out``
    (its backpressure schedule, expecting exactly the plan's output beats).

    Per cycle: ``drive()`` -> ``({stream: (valid, payload)}, out_ready)`` (payload ``None``:
    leave the port as it is); ``sampled(readies, out_valid, out_payload, mac_busy)`` with the
    values the clock edge sees (``mac_busy``: :func:`activity` bits) -> True when a step's last
    output beat transferred, then
    ``finish_step(status_word)`` with the status registered at that edge. The run ends when
    ``finished`` (every step out, ``TAIL_CYCLES`` more cycles run); :meth:`problems` is the
    drained check."""

    def __init__(self, plan):
        self.plan = plan
        seed = plan["seed"]
        self.sources = {k: Source(k, plan[k], plan["idle"], seed) for k in STREAMS}
        self.out = Sink("out", plan["backpressure"], seed, expect=sum(plan["n_out"]))
        self.n_steps = len(plan["n_out"])
        self.steps = []
        self.cur = []
        self.cycle = 0
        self.start = None
        self.mac = [0, 0, 0, 0]
        self.tail = 0
        self.status_missing = 0

    def drive(self):
        drv = {k: s.drive() for k, s in self.sources.items()}
        return drv, self.out.drive()

    def sampled(self, readies, out_valid, out_payload, mac_busy):
        """Update after an edge; returns True when a step's last out beat just transferred."""
        if len(self.steps) >= self.n_steps:
            self.tail += 1
        for k, s in self.sources.items():
            if s.sample(readies[k]) and k == "desc":
                self.start = self.cycle
                self.mac = [0, 0, 0, 0]
        if self.start is not None:
            for i in range(4):
                self.mac[i] += (mac_busy >> i) & 1
        self.cycle += 1
        done = False
        if self.out.sample(out_valid, out_payload):
            self.cur.append(out_payload)
            if (out_payload >> (32 * self.plan["lanes"])) & 1:
                done = True
                start = self.start if self.start is not None else self.cycle
                self.steps.append({"out": self.cur, "status": None,
                                   "cycles": self.cycle - start, "mac_busy": self.mac[0],
                                   "k_busy": self.mac[1], "v_busy": self.mac[2],
                                   "v_rescale": self.mac[3]})
                self.cur = []
                self.start = None
                self.status_missing += 1
        return done

    def finish_step(self, status_word):
        self.steps[-1]["status"] = status_word
        self.status_missing -= 1

    @property
    def finished(self):
        return len(self.steps) >= self.n_steps and self.tail >= TAIL_CYCLES

    def problems(self):
        """The drained check: every input beat taken, no beat in flight, exactly the plan's
        output beats, every step's status read."""
        out = drained(self.sources, self.out)
        if self.cur:
            out.append(f"out: {len(self.cur)} beats after the last step's last beat")
        if self.status_missing:
            out.append(f"{self.status_missing} step status words not read")
        return out


ACTIVITY_PORTS = ("mac_busy", "k_busy", "v_busy", "v_rescale")


def activity(get):
    """The activity bits the benches pass to :meth:`Driver.sampled`: ``mac_busy`` at bit 0,
    then the split engine's ``k_busy``, ``v_busy``, ``v_rescale`` (0 for an engine without
    them); ``get(name)`` reads a port or returns None when the engine has none."""
    bits = 0
    for i, name in enumerate(ACTIVITY_PORTS):
        v = get(name)
        bits |= (int(v) & 1) << i if v is not None else 0
    return bits


def engine_class(engine: str):
    """The RTL class of an engine design (``models.te.ENGINES``): ``TEEngine`` (serial),
    ``TESplitEngine`` (split) or ``TEPipelinedEngine`` (pipelined)."""
    if engine == "split":
        from tricut.rtl.te.split_engine import TESplitEngine
        return TESplitEngine
    if engine == "pipelined":
        from tricut.rtl.te.pipelined_engine import TEPipelinedEngine
        return TEPipelinedEngine
    from tricut.rtl.te.engine import TEEngine
    return TEEngine


def engine_params(v0) -> dict:
    """The RTL engine's parameters for vectors like ``v0`` (its ``engine`` picks the class)."""
    return dict(head_dim=v0.d, G=v0.G, lanes=v0.lanes, kv_dtype=v0.kv_dtype)


def engine_for(v0):
    """The RTL engine for vectors like ``v0`` (its ``engine`` picks the class)."""
    return engine_class(v0.engine)(**engine_params(v0))


def _with_budget(plan, max_cycles):
    if max_cycles is not None:
        plan["budget"] = int(max_cycles)
    return plan


def simulate_amaranth(vectors, idle=0.0, backpressure=0.0, seed=0, dut=None, *,
                      max_cycles=None, progress=None, wave: WaveSpec | None = None):
    """Run ``vectors`` (one engine configuration) back to back in the Amaranth simulator.

    ``idle`` (input streams) and ``backpressure`` (``out``): see :func:`te_schedule`.
    ``max_cycles``: stop after that many cycles if the last step is not out yet
    (:class:`CycleBudgetExceeded`); ``progress(cycles)`` is called about every 256 cycles;
    ``wave``: record the run (:mod:`tricut.sim.harness.waves`; kept when the budget stops it)."""
    plan = _with_budget(plan_json(vectors, idle, backpressure, seed), max_cycles)
    return _results(vectors, run_plan_amaranth(plan, vectors[0], dut, progress=progress,
                                               wave=wave))


def run_plan_amaranth(plan, v0, dut=None, *, progress=None, wave: WaveSpec | None = None):
    """Run one plan on a TE engine (configured like the vector ``v0``) in the Amaranth
    simulator; returns ``{"steps": [...], "problems": [...]}`` like the cocotb bench (and
    ``"stopped_at"`` when the plan's ``budget`` of cycles stopped it)."""
    shared = own(dut, AMARANTH_PERIOD) if dut is not None else \
        design(engine_class(v0.engine), period=AMARANTH_PERIOD, share=wave is None,
               **engine_params(v0))
    dut = shared.dut
    ports = [getattr(dut, p) for p in ACTIVITY_PORTS if hasattr(dut, p)]
    drv = Driver(plan)
    streams = {"desc": dut.desc, "q": dut.q, "kv": dut.kv}
    budget = plan.get("budget")
    stopped = []

    async def bench(ctx):
        while not drv.finished:
            if drv.cycle > plan["max_cycles"]:
                raise TimeoutError(f"TE engine hung: {drv.cycle} cycles, "
                                   f"{len(drv.steps)}/{drv.n_steps} steps done")
            if budget is not None and drv.cycle >= budget and len(drv.steps) < drv.n_steps:
                stopped.append(drv.cycle)
                return
            if progress is not None and not drv.cycle & 255:
                progress(drv.cycle)
            d, ready = drv.drive()
            for k, s in streams.items():
                valid, payload = d[k]
                ctx.set(s.valid, valid)
                if payload is not None:
                    ctx.set(s.payload.as_value(), payload)
            ctx.set(dut.out.ready, ready)
            _, _, dr, qr, kr, ov, op, *act = await ctx.tick().sample(
                dut.desc.ready, dut.q.ready, dut.kv.ready, dut.out.valid,
                dut.out.payload.as_value(), *ports)
            mb = activity(dict(zip(ACTIVITY_PORTS, act)).get)
            if drv.sampled({"desc": dr, "q": qr, "kv": kr}, ov, op, mb):
                drv.finish_step(ctx.get(dut.status.as_value()))

    with amaranth_waves(shared.sim, wave, period=AMARANTH_PERIOD):
        shared.run(bench)
    run = {"steps": drv.steps, "problems": drv.problems()}
    if stopped:
        run["stopped_at"], run["budget"] = stopped[0], budget
    return run


def _results(vectors, run):
    """Step results of one plan's run, after its drained check (:class:`NotDrained`)."""
    if run.get("stopped_at") is not None:
        raise CycleBudgetExceeded(run.get("budget", run["stopped_at"]), run["stopped_at"],
                                  len(run["steps"]), len(vectors))
    if run["problems"]:
        raise NotDrained("TE bench not drained: " + "; ".join(run["problems"]))
    res = []
    for v, s in zip(vectors, run["steps"]):
        out, m, l = _decode_out(v, s["out"])
        res.append(TEStepResult(out_beats=s["out"], status=unpack_status(s["status"]),
                                cycles=s["cycles"], mac_busy=s["mac_busy"],
                                k_busy=s.get("k_busy", 0), v_busy=s.get("v_busy", 0),
                                v_rescale=s.get("v_rescale", 0), out=out, m=m, l=l))
    return res


class _ProgressFile:
    """The cocotb bench writes its cycle count to a file (``$TRICUT_PROGRESS``) about twice a
    second; a thread here reads it and calls ``progress(cycles)``."""

    def __init__(self, progress, workdir):
        self.progress = progress
        self.path = None
        if progress is not None:
            d = Path(workdir or (_REPO_BUILD / "plans"))
            d.mkdir(parents=True, exist_ok=True)
            self.path = d / f"progress-{os.getpid()}-{threading.get_ident()}.txt"
        self._stop = threading.Event()
        self._thread = None

    def env(self):
        return {"TRICUT_PROGRESS": str(self.path)} if self.path else {}

    def _poll(self):
        while not self._stop.wait(0.5):
            try:
                self.progress(int(self.path.read_text()))
            except (OSError, ValueError):
                pass

    def __enter__(self):
        if self.path:
            self._thread = threading.Thread(target=self._poll, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc):
        if self._thread:
            self._stop.set()
            self._thread.join()
        if self.path:
            try:
                self.path.unlink()
            except FileNotFoundError:
                pass


def _run_plans_verilator(v0, plans, workdir=None, *, progress=None, wave: WaveSpec | None = None):
    """Every plan through one Verilator build of the engine (one cocotb test, reset between
    plans); returns the runs (``{"steps", "problems"}``) in plan order. ``wave``: record the
    whole run (cycle 0 = the first plan's first cycle after reset)."""
    from tricut.sim.harness.cocotb_run import run_plans

    dut = engine_for(v0)
    prefix = "te" if v0.engine == "serial" else f"te_{v0.engine}"
    toplevel = f"{prefix}_{v0.kv_dtype}_d{v0.d}_g{v0.G}_l{v0.lanes}"
    with recording(wave) as raw, _ProgressFile(progress, workdir) as prog:
        runs = run_plans(dut, toplevel, "te_engine", plans, workdir, waves=raw,
                         extra_env=prog.env())
        if wave is not None:
            r0 = runs[0]
            finish(wave, raw, t0=r0["t0_fs"] * 1e-15, period=r0["period_fs"] * 1e-15)
    return runs


def simulate_verilator(vectors, idle=0.0, backpressure=0.0, seed=0, workdir=None, *,
                       max_cycles=None, progress=None, wave: WaveSpec | None = None):
    """The same plan on the generated Verilog (Verilator + cocotb); ``max_cycles``,
    ``progress`` and ``wave`` as in :func:`simulate_amaranth` (a traced run has its own
    Verilator build)."""
    plan = _with_budget(plan_json(vectors, idle, backpressure, seed), max_cycles)
    (run,) = _run_plans_verilator(vectors[0], [plan], workdir, progress=progress, wave=wave)
    return _results(vectors, run)


def simulate_verilator_matrix(vectors, pairs=IDLE_BACKPRESSURE, seed=0, workdir=None):
    """``vectors`` under every ``(idle, backpressure)`` pair of schedules (default: the whole
    :data:`~tricut.sim.harness.streams.IDLE_BACKPRESSURE` matrix) in one Verilator build and
    one cocotb test; returns ``{pair: step results}``, each run drained-checked."""
    plans = [plan_json(vectors, i, b, seed) for i, b in pairs]
    runs = _run_plans_verilator(vectors[0], plans, workdir)
    return {pair: _results(vectors, run) for pair, run in zip(pairs, runs)}


def run_te(q, k, v, kv_dtype, scale=None, sim="amaranth", lanes=8, partial=False,
           idle=0.0, backpressure=0.0, seed=0, *, max_cycles=None, progress=None,
           wave: WaveSpec | None = None, engine="serial"):
    """Quantise, run the RTL and return
    ``(out, golden, q_used, k_used, v_used, cycles, status)``.

    ``q`` float32 [G, d]; ``k``, ``v`` float32 [n, d]; ``scale`` defaults to 1/sqrt(d).
    ``out`` and ``golden`` are float32 [G, d] (``o`` unnormalised in partial mode);
    ``status`` is a dict of the engine's flags. ``idle``/``backpressure``: the input and
    output schedules (:func:`te_schedule`; default none). Raises AssertionError if RTL !=
    model (or the bench did not drain: :class:`~tricut.sim.harness.streams.NotDrained`).
    ``max_cycles`` (:class:`CycleBudgetExceeded` when reached), ``progress(cycles)`` and
    ``wave`` (a :class:`~tricut.sim.harness.waves.WaveSpec`): see :func:`simulate_amaranth`."""
    if sim not in ("amaranth", "verilator"):
        raise ValueError(f"sim must be 'amaranth' or 'verilator', got {sim!r}")
    vec = make_vector(q, k, v, kv_dtype, scale=scale, lanes=lanes, partial=partial,
                      engine=engine)
    run = simulate_amaranth if sim == "amaranth" else simulate_verilator
    (r,) = run([vec], idle=idle, backpressure=backpressure, seed=seed, max_cycles=max_cycles,
               progress=progress, wave=wave)
    gold = vec.golden()
    qu, ku, vu = vec.used()
    if r.out_beats != vec.expected_out_beats(gold):
        raise AssertionError("TE RTL output differs from the bit-exact model")
    return (M.b2f(r.out), gold.out_f32(), qu, ku, vu, r.cycles, r.status)
