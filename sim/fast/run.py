"""One run of the system model from its options, below the command line: :class:`RunOptions`
(what ``tricut simulate`` takes, typed, each field declared with its flag and the parser of
its text), :func:`prepare` (every check of the input before anything runs, as
:class:`PreparedRun`) and :func:`run` (the summary ``tricut simulate --json`` prints).
``tricut simulate``, ``compare`` and ``bench`` (``sim/cli/simulate.py``) and the sweep's
``simulate`` task (``sim/sweep/tasks.py``) both build a :class:`RunOptions` and call these, so
a value, a combination or a workload is refused with the same one-line :class:`InputError`
(or :class:`ConfigError`, :class:`TraceError`) either way. A message names an option by its
flag."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from tricut.models.cdu import POLICIES
from tricut.models.config import KV_DTYPES, ConfigError, load_gpu, load_model
from tricut.models.dsu import PARK_POLICIES, PROFILES
from tricut.models.te import LANES as TE_LANES

from ..options import (InputError, Needs, checked_fields, given_fields, option, options_of, refuse_inapplicable,
                       values_of)
from .energy import load_energy
from .setup import ServingSetup
from .stacks import DEFAULT_STACK, PREFILL_MODES, StackProfile, get_stack, stack_names
from .timing import CUTS, DEFAULT_TE_LANES, Assumptions
from .workload import TRACE_FORMATS, Request, TraceError, check_lengths, read_trace, scale_rate, synthetic

__all__ = ["RunOptions", "PreparedRun", "prepare", "run", "OPTIONS", "EXCLUSIVE", "APPLIES", "UNIT_FIELDS",
           "workload_of", "setup_of", "session_mode", "prepare_sessions", "session_results",
           "cuts_label", "defined", "WORKLOAD_FIELDS", "parse_cuts", "parse_lengths", "parse_positive", "parse_seed",
           "parse_non_negative", "parse_assumption", "parse_unit", "refuse_watermark_with_the_dsu",
           "MAX_SYNTHETIC", "ADMISSION", "MAX_SLOTS", "MAX_STACK_SECONDS", "MAX_STACK_INT"]

#: Upper limits of the size options (docs/system-model.md, "Bad input"): beyond them a run needs
#: more memory than a workstation has (every token time is kept) or is a typo.
MAX_SYNTHETIC = 1_000_000
#: --admission: on, a request is prefilled only when a decode slot and its KV are free
#: (docs/system-model.md, "Admission and pre-emption"); off, every arrival is prefilled at once. Also the
#: values of --client-jitter
ADMISSION = ("on", "off")
MAX_SLOTS = 65_536
#: --assume on a stack parameter: seconds at most this, token budgets and batch sizes at most that
MAX_STACK_SECONDS = 10.0
MAX_STACK_INT = 10**9

#: --unit NAME=VALUE: the decode units' sizes, beside the GPU config's (docs/system-model.md)
UNIT_FIELDS = {"te_engines_per_sm": "TE decode engines per SM (the GPU config's; needs the te cut)",
               "te_lanes": f"multiplier lanes per lane array of the pipelined TE engine ({', '.join(map(str, TE_LANES[:-1]))} or "
                           f"{TE_LANES[-1]}; default {DEFAULT_TE_LANES}; needs the te cut)",
               "dsu_cores": "DSU RISC-V cores: refused, the fast model's DSU round runs on one core whatever the "
                            "count (the RTL cluster's: dsu run --cores)"}


# ---- the parsers of the options' text (the command line's argparse types)

def parse_cuts(text: str) -> tuple[str, ...]:
    if text in ("none", ""):
        return ()
    if text == "all":
        return CUTS
    parts = tuple(text.split(","))
    for p in parts:
        if p not in CUTS:
            raise InputError(f"{p!r} is not a cut; use none, all, or a list of {', '.join(CUTS)}")
    return parts


def _cuts_text(cuts) -> str:
    return ",".join(cuts) if cuts else "none"


def parse_lengths(what: str):
    """A parser of ``1024``, ``uniform:LO:HI`` or ``lognormal:MEDIAN:SIGMA``, checked at once
    (:func:`check_lengths`: finite, in range) so that the message names the option."""
    def parse(text: str):
        spec = None
        try:
            if ":" not in text:
                spec = int(text)
            else:
                kind, a, b = text.split(":")
                if kind == "uniform":
                    spec = ("uniform", int(a), int(b))
                elif kind == "lognormal":
                    spec = ("lognormal", float(a), float(b))
        except ValueError:
            pass
        if spec is None:
            raise InputError(f"{text!r}: expected N, uniform:LO:HI or lognormal:MEDIAN:SIGMA")
        try:
            check_lengths(spec, what)
        except TraceError as e:
            raise InputError(f"{text!r}: {e}") from None
        return spec
    return parse


def _lengths_text(spec) -> str:
    return ":".join(map(str, spec)) if isinstance(spec, (tuple, list)) else str(spec)


def parse_positive(kind, maximum=None, allow_inf: bool = False):
    """A parser of a number > 0 (and <= ``maximum``); a float must be finite unless
    ``allow_inf`` (then ``inf`` is accepted)."""
    def parse(text):
        try:
            value = kind(text)
        except ValueError:
            raise InputError(f"{text!r} is not {'an integer' if kind is int else 'a number'}") from None
        if not value > 0:
            raise InputError(f"{text} must be > 0")
        if kind is float and not math.isfinite(value) and not allow_inf:
            raise InputError(f"{text} must be a finite number > 0")
        if maximum is not None and value > maximum:
            raise InputError(f"{text} must be at most {maximum:,}")
        return value
    return parse


def parse_seed(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise InputError(f"{text!r} is not an integer") from None
    if value < 0:
        raise InputError(f"{text} must be an integer >= 0")
    return value


def parse_non_negative(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise InputError(f"{text!r} is not a number") from None
    if not math.isfinite(value) or value < 0:
        raise InputError(f"{text} must be a finite number >= 0")
    return value


def parse_assumption(text: str) -> tuple[str, float]:
    """``NAME=VALUE`` for one field of :class:`Assumptions` or one numeric parameter of the
    stack (:meth:`StackProfile.numeric_fields`); checked here against the default stack, applied
    to the chosen one in :func:`setup_of`."""
    name, sep, value = text.partition("=")
    assumed, stacked = list(Assumptions.__dataclass_fields__), list(StackProfile.numeric_fields())
    if not sep or name not in assumed + stacked:
        raise InputError(f"{text!r}: expected NAME=VALUE with NAME one of {', '.join(assumed)} "
                         f"(assumptions) or {', '.join(stacked)} (stack)")
    try:
        number = float(value)
    except ValueError:
        raise InputError(f"{text!r}: {value!r} is not a number") from None
    try:
        if name in assumed:
            Assumptions(**{name: number})
        else:
            get_stack(DEFAULT_STACK).with_values(**{name: number})
    except (ValueError, OverflowError) as e:
        raise InputError(f"{text!r}: {e}") from None
    if name not in assumed:
        # the stack's own check wants finite numbers >= 0; here also a sane upper limit
        if name.endswith("_s") and number > MAX_STACK_SECONDS:
            raise InputError(f"{text!r}: {name} must be at most {MAX_STACK_SECONDS:g} s")
        if name in ("graph_max_batch", "prefill_batch_tokens", "prefill_chunk_tokens") \
                and number > MAX_STACK_INT:
            raise InputError(f"{text!r}: {name} must be at most {MAX_STACK_INT:,}")
        if name in ("attn_bw_efficiency", "fp8_gemv_efficiency_ratio") and number < 0.01:
            raise InputError(f"{text!r}: {name} must be at least 0.01")
    return name, number


def parse_unit(text: str) -> tuple[str, int]:
    """``NAME=VALUE`` for one decode-unit size (:data:`UNIT_FIELDS`), an integer, range-checked
    by :meth:`ServingSetup.with_units` when the GPU is known."""
    name, sep, value = text.partition("=")
    if not sep or name not in UNIT_FIELDS:
        raise InputError(f"{text!r}: expected NAME=VALUE with NAME one of {', '.join(UNIT_FIELDS)}")
    try:
        number = int(value)
    except ValueError:
        raise InputError(f"{text!r}: {value!r} is not an integer") from None
    try:
        ServingSetup.check_units({name: number})
    except ValueError as e:
        raise InputError(f"{text!r}: {e}") from None
    return name, number


def _pair_text(pair) -> str:
    return f"{pair[0]}={pair[1]}"


# ---- the options

#: options of which at most one is given: where the requests come from
EXCLUSIVE = (("trace", "synthetic", "sessions", "agentic"),)


@dataclass(frozen=True)
class RunOptions:
    """The options of one run of ``tricut simulate``, typed: a field is the flag's value (its
    name the flag's without ``--``, hyphens as underscores). Constructing one checks each field
    that is not None or its default as its flag's parser does and stores what it parses to
    (:func:`~tricut.sim.options.checked_fields`): a bad value is an :class:`InputError` naming
    the flag. :meth:`from_texts` parses the flags' texts in a given order (a sweep's grid).
    ``assume`` and ``unit`` are ``(NAME, VALUE)`` pairs, later ones winning."""
    model: str = option("--model", "llama-3-8b")
    gpu: str = option("--gpu", "h100-sxm5")
    tp: int = option("--tp", 1, parse_positive(int))
    kv_dtype: str = option("--kv-dtype", "bf16", choices=KV_DTYPES)
    trace: Path | None = option("--trace", None, Path)
    synthetic: int | None = option("--synthetic", None, parse_positive(int, MAX_SYNTHETIC))
    sessions: Path | None = option("--sessions", None, Path)
    agentic: str | None = option("--agentic")
    trace_format: str | None = option("--trace-format", None, choices=tuple(TRACE_FORMATS))
    limit: int | None = option("--limit", None, parse_positive(int))
    rate: float = option("--rate", 10.0, parse_positive(float, allow_inf=True))
    rate_scale: float = option("--rate-scale", 1.0, parse_positive(float))
    prompt_tokens: int | tuple = option("--prompt-tokens", 1024, parse_lengths("prompt"), text=_lengths_text)
    output_tokens: int | tuple = option("--output-tokens", 128, parse_lengths("output"), text=_lengths_text)
    cuts: tuple[str, ...] = option("--cuts", CUTS, parse_cuts, text=_cuts_text)
    # choices listed adaptive (the default) first, as the command line does
    policy: str = option("--policy", "adaptive", choices=POLICIES[::-1])
    profile: str = option("--profile", "throughput-opt", choices=PROFILES)
    slots: int = option("--slots", 64, parse_positive(int, MAX_SLOTS))
    max_batch: int = option("--max-batch", 64, parse_positive(int, MAX_SLOTS))
    ttft_slo: float | None = option("--ttft-slo", None, parse_positive(float, allow_inf=True))
    tpot_slo: float | None = option("--tpot-slo", None, parse_positive(float, allow_inf=True))
    degraded_at: float | None = option("--degraded-at", None, parse_non_negative)
    stack: str = option("--stack", DEFAULT_STACK, choices=stack_names)
    prefill: str | None = option("--prefill", None, choices=PREFILL_MODES)
    concurrency: int | None = option("--concurrency", None, parse_positive(int))
    think_time: float = option("--think-time", 0.0, parse_non_negative)
    admission: str = option("--admission", "on", choices=ADMISSION)
    client_jitter: str = option("--client-jitter", "on", choices=ADMISSION)
    energy: Path | None = option("--energy", None, Path)
    assume: tuple = option("--assume", (), parse_assumption, text=_pair_text, repeat=True)
    tiers: str = option("--tiers", "none")
    park_policy: str | None = option("--park-policy", None, choices=PARK_POLICIES)
    restore_lead: float | None = option("--restore-lead", None, parse_non_negative)
    prefix_cache_tokens: int = option("--prefix-cache-tokens", 0, parse_seed)
    prefix_spill: str | None = option("--prefix-spill", None, choices=("G3", "G3.5"))
    unit: tuple = option("--unit", (), parse_unit, text=_pair_text, repeat=True)
    seed: int = option("--seed", 0, parse_seed)
    #: the options given (on the command line, in a grid point), whatever their values; those
    #: not at their default count as given too
    given: frozenset = field(default=frozenset(), compare=False, repr=False)
    #: the cuts the default ``--cuts`` left out because the GPU lacks their unit (set by the
    #: constructor; :attr:`notes` says so)
    cuts_dropped: tuple = field(default=(), init=False, compare=False, repr=False)

    def __post_init__(self):
        checked_fields(self, EXCLUSIVE)
        if "cuts" not in self.given and self.cuts == CUTS:
            self._gpu_cuts()
        refuse_inapplicable(self, APPLIES, self.given | given_fields(self))
        for name, _ in self.unit:
            self._refuse_idle_unit(name)
        if any(name == "kv_watermark" for name, _ in self.assume):
            self._refuse_idle_watermark()
        for name, _ in self.assume:
            if name.startswith("fp8_gemv_"):
                self._refuse_idle_fp8_gemv(name)

    def _refuse_idle_fp8_gemv(self, name: str) -> None:
        """``--assume fp8_gemv_efficiency_ratio`` or ``fp8_gemv_call_extra_s`` times the GEMVs
        of fp8 weights: for a model whose weights are in another format it changes nothing."""
        try:
            weights = load_model(self.model).weight_dtype
        except ConfigError:
            return                      # refused where the configuration is loaded
        if weights != "fp8":
            raise InputError(f"--assume {name} changes nothing for --model {self.model}: its weights are "
                             f"{weights}; it times the GEMVs of a model with fp8 weights")

    def _refuse_idle_watermark(self) -> None:
        """``--assume kv_watermark`` acts only where a stack's scheduler reserves prompts and
        admission control holds requests: not under a stack that reserves whole outputs, nor
        with ``--admission off`` (every arrival is prefilled at once), nor for sessions (the DSU
        model schedules them, docs/system-model.md "Admission and pre-emption"). The dsu cut:
        :func:`refuse_watermark_with_the_dsu`."""
        stack = get_stack(self.stack)
        if stack.kv_reserve != "prompt":
            raise InputError(f"--assume kv_watermark changes nothing under --stack {self.stack}: it reserves "
                             f"whole outputs (kv_reserve {stack.kv_reserve}); the watermark is the admission "
                             "margin of a stack that reserves prompts (vllm-v0, vllm-v0.6, vllm-v1)")
        if _session_mode_on(self):
            raise InputError("--assume kv_watermark does not apply to sessions (--sessions, --agentic or a "
                             "prefix cache): the DSU model schedules them, reserving whole outputs")
        if self.admission == "off":
            raise InputError("--assume kv_watermark changes nothing with --admission off: the watermark is "
                             "the margin admission control leaves free before a prefill")

    def _refuse_idle_unit(self, name: str) -> None:
        """A ``--unit`` size that would change nothing is refused: the TE's sizes without the
        te cut, the DSU's cores always (the fast model's DSU round runs on hart 0 alone)."""
        if name.startswith("te_") and "te" not in self.cuts:
            raise InputError(f"--unit {name} needs the te cut (--cuts with te): it sizes the TE "
                             "engines, which only that cut times")
        if name == "dsu_cores":
            raise InputError("--unit dsu_cores changes nothing in the fast model (hart 0 runs the "
                             "DSU's scheduling round alone; docs/system-model.md); the RTL "
                             "cluster's cores: tricut dsu run --cores, tricut tile run --dsu-cores")

    def _gpu_cuts(self) -> None:
        """The default --cuts: every cut the GPU has (without a CDU, no cdu cut)."""
        try:
            gpu = load_gpu(self.gpu)
        except ConfigError:
            return                      # refused where the configuration is loaded
        if not gpu.has_cdu:
            object.__setattr__(self, "cuts", tuple(c for c in self.cuts if c != "cdu"))
            object.__setattr__(self, "cuts_dropped", ("cdu",))

    @property
    def notes(self) -> tuple[str, ...]:
        """What the options chose for the user, for ``tricut: note:`` lines."""
        if not self.cuts_dropped:
            return ()
        return (f"{self.gpu} has no CDU: the cdu cut is off (by default every cut the GPU has is on)",)

    @classmethod
    def from_texts(cls, items) -> RunOptions:
        """The options of ``(field name, text)`` pairs, parsed in their order as the command
        line parses ``FLAG TEXT ...`` (so a refusal reads as the command's); each one named
        counts as given."""
        items = list(items)
        return cls(**values_of(cls, items, EXCLUSIVE), given=frozenset(name for name, _ in items))


#: ``{field name: Option}`` of :class:`RunOptions`, in the command line's order
OPTIONS = options_of(RunOptions)


def _session_mode_on(o) -> bool:
    return o.sessions is not None or o.agentic is not None or o.prefix_cache_tokens > 0


_SYNTHETIC = Needs("needs synthetic requests (no --trace, --sessions or --agentic, which bring their own)",
                   lambda o: o.trace is None and o.sessions is None and o.agentic is None)
_OPEN_LOOP = Needs("needs open loop (no --concurrency): closed-loop clients send a request when their "
                   "previous one has finished", lambda o: o.concurrency is None)
_NOT_SESSIONS = Needs("does not apply to sessions (--sessions, --agentic)",
                      lambda o: o.sessions is None and o.agentic is None)
_NO_SESSIONS = Needs("does not apply to sessions (--sessions, --agentic or a prefix cache)",
                     lambda o: not _session_mode_on(o))
_TRACE = Needs("applies to a --trace, and there is none", lambda o: o.trace is not None)
_SESSIONS = Needs("applies to agentic sessions (--sessions or --agentic), and there are none",
                  lambda o: o.sessions is not None or o.agentic is not None)

#: Where each option acts (the rest act in every mode): ``{field name: (Needs, ...)}``; a
#: given option whose needs do not hold is refused, naming the first
#: (:func:`~tricut.sim.options.refuse_inapplicable`). ``tests/test_flag_applicability.py``
#: walks it.
APPLIES = {
    "trace_format": (_NOT_SESSIONS, _TRACE),
    "limit": (_NOT_SESSIONS, _TRACE),
    "rate": (_SYNTHETIC, _OPEN_LOOP),
    "rate_scale": (_NOT_SESSIONS, _OPEN_LOOP),
    "prompt_tokens": (_SYNTHETIC,),
    "output_tokens": (_SYNTHETIC,),
    "policy": (Needs("needs the cdu cut (--cuts with cdu, on a GPU with a CDU): it is the CDU's policy",
                     lambda o: "cdu" in o.cuts),),
    "degraded_at": (_NO_SESSIONS, Needs("needs the dsu cut (--cuts with dsu): it is when the DSU degrades",
                                        lambda o: "dsu" in o.cuts)),
    "concurrency": (_NO_SESSIONS,),
    "admission": (_NO_SESSIONS,),
    "client_jitter": (Needs("needs --concurrency: it is when the closed-loop clients send their first requests",
                            lambda o: o.concurrency is not None),),
    "think_time": (Needs("needs --concurrency: it is a closed-loop client's pause between its requests",
                         lambda o: o.concurrency is not None),),
    "tiers": (Needs("applies to agentic sessions (--sessions, --agentic) or a prefix cache "
                    "(--prefix-cache-tokens N > 0)", _session_mode_on),),
    "park_policy": (_SESSIONS,),
    "restore_lead": (_SESSIONS, Needs("applies to --park-policy park-early",
                                      lambda o: o.park_policy == "park-early")),
    "prefix_spill": (Needs("applies to a prefix cache (--prefix-cache-tokens N > 0)",
                           lambda o: o.prefix_cache_tokens > 0),),
}

#: the options that make the workload of a run without sessions
WORKLOAD_FIELDS = ("trace", "trace_format", "limit", "synthetic", "rate", "rate_scale", "prompt_tokens",
                   "output_tokens", "seed")


def cuts_label(cuts) -> str:
    """A run's label: its cuts joined with ``+``, or ``baseline``."""
    return "+".join(cuts) if cuts else "baseline"


def workload_of(options: RunOptions) -> list[Request]:
    """The requests of a run without sessions: the trace's (its first ``limit``) or synthetic
    ones, their arrivals sped up by ``rate_scale``."""
    if options.trace is not None:
        reqs = read_trace(options.trace, options.trace_format)
        if options.limit:
            reqs = reqs[: options.limit]
    else:
        reqs = synthetic(options.synthetic or 200, options.rate, options.prompt_tokens, options.output_tokens,
                         options.seed)
    return scale_rate(reqs, options.rate_scale) if options.rate_scale != 1.0 else reqs


def setup_of(options: RunOptions) -> ServingSetup:
    """The serving configuration: configs loaded, assumptions and the stack's overrides applied."""
    assumed = {k: v for k, v in options.assume if k in Assumptions.__dataclass_fields__}
    stacked = {k: v for k, v in options.assume if k not in assumed}
    return ServingSetup(load_model(options.model), load_gpu(options.gpu), options.kv_dtype, options.tp,
                        options.policy, options.profile, options.slots, options.max_batch,
                        assumptions=Assumptions(**assumed),
                        stack=get_stack(options.stack).with_values(**stacked),
                        prefill=options.prefill, concurrency=options.concurrency, think_s=options.think_time,
                        admission=options.admission == "on",
                        client_jitter=options.client_jitter == "on",
                        energy_file=None if options.energy is None else str(options.energy), units=dict(options.unit))


def session_mode(options: RunOptions) -> bool:
    """Sessions run through sim/fast/agentic.py: --sessions, --agentic, or a trace with a
    prefix cache (each request a one-turn session). (An option that does not apply to the
    mode was refused when the options were made: :data:`APPLIES`.)"""
    if not _session_mode_on(options):
        return False
    if options.prefill == "chunked":
        raise InputError("sessions run with --prefill disaggregated or colocated, not chunked")
    return True


def _sessions_of(options: RunOptions, model):
    from .sessions import agentic, check_sessions, parse_agentic_spec, read_sessions, sessions_from_requests
    if options.sessions is not None:
        sessions = read_sessions(options.sessions)
    elif options.agentic is not None:
        spec = parse_agentic_spec(options.agentic)
        if spec.get("max_context") is None:
            spec["max_context"] = model.max_context
        sessions = agentic(**spec)
    else:
        sessions = sessions_from_requests(workload_of(options))
    check_sessions(sessions, model.max_context)
    return sessions


def _agentic_options(options: RunOptions, policy):
    from tricut.models.tiers import load_tiers

    from .agentic import AgenticOptions
    tiers = load_tiers(options.tiers)
    spill = None
    if options.prefix_spill is not None:
        spill = tiers.tier(options.prefix_spill)
        if spill is None:
            raise InputError(f"--prefix-spill {options.prefix_spill}: the tier config {options.tiers!r} has no "
                             f"{options.prefix_spill} tier")
    return AgenticOptions(policy, g2=tiers.g2, g3=tiers.g3, restore_lead_s=options.restore_lead,
                          prefix_cache_tokens=options.prefix_cache_tokens, prefix_spill=spill)


def prepare_sessions(options: RunOptions, policies):
    """Every check of a session run before it runs: ``(setup, sessions, {policy: options})``."""
    setup = setup_of(options)
    if options.energy is not None:
        load_energy(options.energy)         # a bad coefficients file: one ConfigError, before the run
    sessions = _sessions_of(options, setup.model)
    agentic = {p: _agentic_options(options, p) for p in policies}
    setup.step_model(options.cuts)
    setup.dsu_params()
    return setup, sessions, agentic


def session_results(options: RunOptions, setup, sessions, agentic) -> dict:
    """``{park policy: AgenticResult}`` of the sessions under each policy's options."""
    from .agentic import simulate_sessions
    sm, dsu = setup.step_model(options.cuts), setup.dsu_params()
    return {p: simulate_sessions(sessions, sm, dsu, o, seed=options.seed, prefill=options.prefill,
                                 ttft_slo_s=options.ttft_slo, tpot_slo_s=options.tpot_slo,
                                 energy_file=None if options.energy is None else str(options.energy))
            for p, o in agentic.items()}


@dataclass(frozen=True)
class PreparedRun:
    """A run whose input passed every check (:func:`prepare`): the setup and either the
    requests or the sessions with each park policy's options."""
    options: RunOptions
    setup: ServingSetup
    requests: list | None = None
    sessions: list | None = None
    agentic: dict | None = None

    def run(self, progress=None) -> dict:
        """``{label: result}``: one :class:`~tricut.sim.fast.system.SimResult` labelled by
        the cuts (:func:`cuts_label`; ``progress(done, total)`` is called as requests
        finish), or one :class:`~tricut.sim.fast.agentic.AgenticResult` per park policy."""
        o = self.options
        if self.sessions is not None:
            return session_results(o, self.setup, self.sessions, self.agentic)
        return {cuts_label(o.cuts): self.setup.run(self.requests, o.cuts, seed=o.seed, degraded_at_s=o.degraded_at,
                                                   progress=progress, ttft_slo_s=o.ttft_slo,
                                                   tpot_slo_s=o.tpot_slo)}


def refuse_watermark_with_the_dsu(options: RunOptions) -> None:
    """``--assume kv_watermark`` on a run with the dsu cut: the DSU schedules it, reserving
    whole outputs, so the watermark would change nothing (``compare`` takes it: its runs
    without the dsu cut use it)."""
    if "dsu" in options.cuts and any(name == "kv_watermark" for name, _ in options.assume):
        raise InputError("--assume kv_watermark changes nothing with the dsu cut (the DSU reserves whole "
                         "outputs): it acts on runs without it, e.g. --cuts none, or compare's baseline")


def prepare(options: RunOptions, policies=None) -> PreparedRun:
    """Every check of the input before any simulation runs (docs/system-model.md, "Bad
    input"): the options' combination, the configs, the stack and its overrides, the workload
    or the sessions, the step model and the DSU's KV budget against the requests. Sessions run
    under ``policies`` (default: ``park_policy``, or keep)."""
    if session_mode(options):
        policies = policies or [options.park_policy or "keep"]
        setup, sessions, agentic = prepare_sessions(options, policies)
        return PreparedRun(options, setup, sessions=sessions, agentic=agentic)
    refuse_watermark_with_the_dsu(options)
    setup = setup_of(options)
    if options.energy is not None:
        load_energy(options.energy)         # a bad coefficients file: one ConfigError, before the run
    reqs = workload_of(options)
    setup.check(reqs, options.cuts)
    return PreparedRun(options, setup, requests=reqs)


def defined(value):
    """An undefined metric (NaN: TPOT of one-token requests; inf: a rate over no time) is
    None: null in JSON, an empty cell in CSV, '-' in the table (docs/metrics.md)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: defined(v) for k, v in value.items()}
    if isinstance(value, list):
        return [defined(v) for v in value]
    return value


def run(options: RunOptions) -> dict:
    """The run's summary exactly as ``tricut simulate --json`` prints it (undefined metrics
    None), after every check of :func:`prepare`."""
    results = prepare(options).run()
    return defined(next(iter(results.values())).summary)

