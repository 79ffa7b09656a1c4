"""One serving configuration of the system model: the model, GPU and KV format, the DSU's
slots and batching, the modelling assumptions, the software stack, how prefill shares the GPUs
and how requests arrive. It builds the :class:`StepModel` for a set of cuts and the
:class:`DsuParams`, and runs a workload; the CLI and the benchmarks share it."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from tricut.models.config import GPU_LIMITS, ConfigError, GpuConfig, ModelConfig
from tricut.models.dsu import DsuParams
from tricut.models.roofline import roofline

from .stacks import DEFAULT_STACK, StackProfile, get_stack
from .system import SimResult, check_horizon, check_run_options, simulate
from tricut.models.te import LANES as TE_LANES

from .timing import Assumptions, StepModel, UnitTiming
from .workload import Request, TraceError

__all__ = ["ServingSetup"]


@dataclass(frozen=True)
class ServingSetup:
    model: ModelConfig
    gpu: GpuConfig
    kv_dtype: str = "bf16"
    tp: int = 1
    policy: str = "adaptive"              # CDU policy when the cdu cut is on
    profile: str = "throughput-opt"       # DSU batching profile
    n_slots: int = 64
    max_batch: int = 64
    latency_batch: int | None = None      # latency-opt's batch cap; None: min(16, max_batch)
    kv_capacity_tokens: int | None = None  # the DSU's KV budget; None: what fits in HBM
    assumptions: Assumptions = field(default_factory=Assumptions)
    stack: StackProfile = field(default_factory=lambda: get_stack(DEFAULT_STACK))
    prefill: str | None = None            # PREFILL_MODES; None: the stack's own mode
    concurrency: int | None = None        # closed-loop clients; None: open loop (arrival times)
    think_s: float = 0.0                  # closed loop: a client's pause between its requests
    #: admission control: a request is prefilled only when the DSU could admit it (a slot and
    #: its KV free); False: every arrival is prefilled and waits for the DSU afterwards
    admission: bool = True
    #: closed loop: the clients' first sends at seeded random times within one request's time
    #: alone; False: all at t = 0 (they then move in lock-step with fixed lengths)
    client_jitter: bool = True
    #: another copy of the energy coefficients (sim/fast/energy.json's format); None: shipped
    energy_file: str | None = None
    #: decode-unit sizes over the GPU config's (``--unit``): te_engines_per_sm, dsu_cores (they
    #: replace the GPU's fields) and te_lanes (the TE RTL parameter, one of models.te.LANES;
    #: default timing.DEFAULT_TE_LANES, the calibrated width)
    units: dict = field(default_factory=dict)

    UNIT_NAMES = ("te_engines_per_sm", "te_lanes", "dsu_cores")

    @classmethod
    def check_units(cls, units: dict) -> None:
        """A one-line ``ValueError`` for an unknown unit name or a size out of range."""
        for name, value in units.items():
            if name not in cls.UNIT_NAMES:
                raise ValueError(f"unknown unit size {name!r}; choose from {', '.join(cls.UNIT_NAMES)}")
            if not isinstance(value, int) or isinstance(value, bool):
                raise ValueError(f"{name} must be an integer, got {value!r}")
            if name == "te_lanes":
                if value not in TE_LANES:
                    raise ValueError(f"te_lanes must be one of {', '.join(map(str, TE_LANES))}, got {value}")
            else:
                lo, hi = GPU_LIMITS[name]
                if not lo <= value <= hi:
                    raise ValueError(f"{name} must be in {lo}..{hi}, got {value}")

    def __post_init__(self):
        self.check_units(self.units)
        gpu_fields = {k: v for k, v in self.units.items() if k != "te_lanes"}
        if gpu_fields:       # the GPU this setup runs on has these unit sizes
            object.__setattr__(self, "gpu", replace(self.gpu, **gpu_fields))
        if not isinstance(self.stack, StackProfile):
            raise ValueError(f"stack must be a StackProfile (stacks.get_stack(name)), got {self.stack!r}")
        check_run_options(self.prefill, self.concurrency, self.think_s)
        # tp against the heads, the KV format (a ConfigError naming them)
        roofline(self.model, self.gpu, self.kv_dtype, 1, 1, tp=self.tp)

    def step_model(self, cuts=()) -> StepModel:
        units = UnitTiming.from_gpu(self.gpu)
        if "te_lanes" in self.units:
            units = replace(units, te_lanes=self.units["te_lanes"])
        return StepModel(self.model, self.gpu, self.kv_dtype, self.tp, frozenset(cuts), self.policy,
                         self.assumptions, units=units, stack=self.stack)

    def kv_tokens_fit(self) -> int:
        """KV tokens that fit in HBM beside the weights (``tricut roofline``); a
        :class:`ConfigError` when the weights alone do not fit."""
        fit = roofline(self.model, self.gpu, self.kv_dtype, 1, 1, tp=self.tp).kv_tokens_fit
        if fit < 1:
            raise ConfigError(f"{self.model.name} weights do not fit in {self.gpu.name} HBM at "
                              f"tp={self.tp}; raise --tp")
        return fit

    def dsu_params(self) -> DsuParams:
        latency_batch = min(16, self.max_batch) if self.latency_batch is None else self.latency_batch
        kv = self.kv_tokens_fit() if self.kv_capacity_tokens is None else self.kv_capacity_tokens
        return DsuParams(self.profile, n_slots=self.n_slots, max_batch=self.max_batch,
                         latency_batch=latency_batch, kv_capacity_tokens=kv)

    def check_requests(self, requests: list[Request]) -> None:
        """A :class:`TraceError` naming the first request longer than the model's context."""
        for r in requests:
            if r.prompt_tokens + r.output_tokens > self.model.max_context:
                raise TraceError(f"request {r.id}: prompt {r.prompt_tokens} + output {r.output_tokens} "
                                 f"exceeds {self.model.name}'s max_context {self.model.max_context}")

    def check(self, requests: list[Request], cuts=()) -> None:
        """Everything about a run's input that can be known before it runs, each a one-line
        ``ValueError`` (:class:`ConfigError`, :class:`TraceError`): the requests against the
        model's context (:meth:`check_requests`), the simulated-time horizon
        (:func:`check_horizon`), the step model of these cuts (a cdu cut without a CDU, a CDU
        sizing it refuses), the DSU's KV budget (the weights must fit) and that at least one
        request can finish: one whose prompt + output tokens exceed the KV budget is refused
        by the DSU ("too large"), so a workload of only those would end with nothing to
        report."""
        if not requests:
            raise TraceError("no requests to simulate")
        self.check_requests(requests)
        check_horizon(requests, self.concurrency, self.think_s)
        try:
            self.step_model(cuts)
        except ValueError as e:
            if "cdu" not in cuts or not self.gpu.has_cdu or not any(
                    what in str(e) for what in ("CDU reduction", "L2 share")):
                raise
            raise ValueError(f"cdu cut with cdu_l2_share {self.assumptions.cdu_l2_share:g} of "
                             f"{self.gpu.name}'s L2: {e}") from None
        kv = self.dsu_params().kv_capacity_tokens
        margin = self.stack.watermark_tokens(kv) if self.stack.schedules_kv(cuts) else 0
        if all(r.output_tokens > 1 and r.prompt_tokens + r.output_tokens + margin > kv for r in requests):
            small = min(requests, key=lambda r: r.prompt_tokens + r.output_tokens)
            where = (f"what fits in {self.gpu.name} HBM beside {self.model.name}'s weights at tp={self.tp} "
                     f"with {self.kv_dtype} KV" if self.kv_capacity_tokens is None else "as set")
            less = f" less the stack's KV watermark of {margin:,}" if margin else ""
            raise TraceError(f"every request is too large for the DSU's KV budget of {kv:,} tokens ({where}){less}: "
                             f"the smallest, request {small.id}, needs prompt {small.prompt_tokens:,} + "
                             f"output {small.output_tokens:,} tokens; nothing would finish")

    def run(self, requests: list[Request], cuts=(), **options) -> SimResult:
        """:func:`simulate` the workload with these cuts on, this setup's prefill mode and
        arrivals; ``options`` go to it (seed, degraded_at_s, faults, progress, SLOs). The
        input is checked first (:meth:`check`)."""
        self.check(requests, cuts)
        return simulate(requests, self.step_model(cuts), self.dsu_params(), prefill=self.prefill,
                        concurrency=self.concurrency, think_s=self.think_s, admission=self.admission,
                        client_jitter=self.client_jitter, energy_file=self.energy_file, **options)
