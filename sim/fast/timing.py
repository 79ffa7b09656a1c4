"""Per-step time of one decode step on one GPU of a tensor-parallel group.

The model and every constant are described in docs/system-model.md. Each returned step also
carries its physical floor, ``(weight bytes + KV bytes read from HBM + KV bytes written) /
peak HBM bandwidth`` (and the L2 analogue), and :func:`step_time` refuses to return a step
faster than that floor.
"""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import re
from dataclasses import dataclass, field
from pathlib import Path

from tricut.models.cdu import KV_BLOCK_TOKENS, POLICIES
from tricut.models.config import ConfigError, GpuConfig, ModelConfig
from tricut.models.dsu import PROFILES
from tricut.models.sm_slice import slice_cdu, slice_config
from tricut.models.te import ENGINES as TE_ENGINES
from tricut.models.te import te_cycles
from tricut.models.tile import TILE_ENGINES
from tricut.models.te import LANES as TE_LANES

from .cdu_reduction import CduReduction, CduStep
from .grid_twin import grid_layer_cycles_fast
from .slice_memo import memo_cdu_slice_timing, memo_slice_timing
from .datafile import read_data_json
from .stacks import DEFAULT_STACK, FP8_GEMV_CALLS_PER_LAYER, StackProfile, get_stack

__all__ = ["CUTS", "BOUNDS", "DEFAULT_TE_LANES", "DEFAULT_TE_ENGINE", "Assumptions", "UnitCosts", "UnitTiming", "StepTiming", "PhysicsViolation", "StepModel"]

CUTS = ("te", "cdu", "dsu")
#: what can bind a decode step (:attr:`StepTiming.bound`)
BOUNDS = ("gemv", "hbm", "te_feed", "cdu", "l2")
#: the TE the fast model times: the pipelined engine (``rtl/te/pipelined_engine.py``) at 32
#: lanes per lane array, the design that keeps up with HBM (docs/te.md);
#: tests/test_calibration.py checks its cycles against that RTL
DEFAULT_TE_ENGINE = "pipelined"
DEFAULT_TE_LANES = 32
if DEFAULT_TE_LANES not in TE_LANES or DEFAULT_TE_ENGINE not in TE_ENGINES:
    raise AssertionError(f"default TE {DEFAULT_TE_ENGINE}/{DEFAULT_TE_LANES} not in "
                         f"{TE_ENGINES}/{TE_LANES}")


class PhysicsViolation(AssertionError):
    """A step came out faster than the bandwidth floor: a bug in the model, never a result."""


@dataclass(frozen=True)
class Assumptions:
    """Efficiencies and overheads that are not in the GPU datasheet. Each is an assumption
    documented (with its reason) in docs/system-model.md; sweep them to see what a result
    depends on."""

    gemv_bw_efficiency: float = 0.85      # fraction of peak HBM bandwidth a weight GEMV reaches
    te_bw_efficiency: float = 0.90        # the TE's single-pass K/V stream
    compute_efficiency: float = 0.60      # of dense tensor peak, for GEMMs in decode and prefill
    l2_bandwidth: float = 5.5e12          # bytes/s, H100-class L2 read bandwidth
    degraded_extra_s: float = 100e-6      # DSU degraded: host path plus the hand-over check
    cdu_l2_share: float = 0.8             # fraction of L2 the CDU owns as KV block frames
    prefill_link_bandwidth: float = 50e9  # bytes/s, KV from the prefill pool (RDMA-class)

    #: fractions: in (0, 1], and at least 1 % (a smaller one is a typo and makes the step
    #: times overflow)
    FRACTIONS = ("gemv_bw_efficiency", "te_bw_efficiency", "compute_efficiency", "cdu_l2_share")
    #: bandwidths (bytes/s): > 0, within this range
    BANDWIDTHS = {"l2_bandwidth": (1e8, 1e16), "prefill_link_bandwidth": (1e8, 1e16)}
    #: times (s): >= 0, at most this
    TIMES = {"degraded_extra_s": 10.0}

    def __post_init__(self):
        for name in self.__dataclass_fields__:
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) \
                    or (value < 0 and name not in self.BANDWIDTHS):
                raise ValueError(f"assumption {name} must be a finite number >= 0, got {value!r}")
        for name in self.FRACTIONS:
            value = getattr(self, name)
            if not 0 < value <= 1:
                raise ValueError(f"assumption {name} must be in (0, 1], got {value!r}")
            if value < 0.01:
                raise ValueError(f"assumption {name} must be at least 0.01, got {value!r}")
        for name, (lo, hi) in self.BANDWIDTHS.items():
            value = getattr(self, name)
            if not value > 0:
                raise ValueError(f"assumption {name} is a bandwidth: it must be > 0 bytes/s, got {value!r}")
            if not lo <= value <= hi:
                raise ValueError(f"assumption {name} must be between {lo:g} and {hi:g} bytes/s, got {value!r}")
        for name, hi in self.TIMES.items():
            if getattr(self, name) > hi:
                raise ValueError(f"assumption {name} must be at most {hi:g} s, got {getattr(self, name)!r}")


#: Regressors of the DSU's cycles per scheduling round (:meth:`UnitTiming.dsu_round_terms`) and
#: of the CDU front end's cycles per step beyond one per operation: the columns of the tables
#: in :data:`COSTS_FILE`.
DSU_COLUMNS = ("base", "per_active", "per_admitted", "per_retired", "per_compact",
               "per_blocked", "per_scan", "per_blocked_scan", "per_cap", "per_word")
CDU_COLUMNS = ("per_unit", "per_beat")
#: The data file of fitted unit costs, in this package; the fit scripts write it
#: (``benchmarks/dsu_fit.py --write``, ``benchmarks/cdu_cycles_fit.py --write``).
COSTS_FILE = "unit_costs.json"
_COSTS_ABOUT = ("Fitted cycle coefficients of the fast model's DSU and CDU, read by sim/fast/timing.py "
                "(UnitCosts; docs/system-model.md, 'Unit timing'). Written by the fit scripts with "
                "--write, not by hand; each table records the command that produced it.")


@dataclass(frozen=True)
class UnitCosts:
    """The fitted cycle coefficients of the DSU and the CDU (docs/system-model.md), as stored
    in :data:`COSTS_FILE`, each table with the command that produced it.

    ``dsu_all_fit`` / ``dsu_select``: profile -> coefficients in :data:`DSU_COLUMNS` order, fits
    of the scheduler firmware on the DSU RTL cluster; "all fit" when every active slot fits the
    batch (A <= cap), "select" when the profile must choose. ``cdu``: policy -> (per_unit,
    per_beat), fits to the RTL front end (``full`` pattern, no stalls)."""

    dsu_all_fit: dict
    dsu_select: dict
    dsu_command: str
    cdu: dict
    cdu_command: str

    @classmethod
    def load(cls, path: str | Path | None = None) -> UnitCosts:
        """The shipped tables (``path=None``) or those of another copy of the file. A file that
        is missing, not JSON or not of this shape raises :class:`ConfigError` naming the file
        and the entry."""
        raw, label = read_data_json(COSTS_FILE, path)
        return cls._parse(raw, label)

    @classmethod
    def _parse(cls, raw, label: str) -> UnitCosts:
        def entry(obj, where: str, keys: tuple, texts: tuple = ()) -> dict:
            """``obj``, a JSON object with exactly ``keys``, of which ``texts`` are strings."""
            if not isinstance(obj, dict) or set(obj) != set(keys):
                found = sorted(obj) if isinstance(obj, dict) else type(obj).__name__
                raise ConfigError(f"{label}: entry {where!r}: expected the keys "
                                  f"{', '.join(keys)}, got {found}")
            for key in texts:
                if not isinstance(obj[key], str):
                    raise ConfigError(f"{label}: entry '{where}.{key}': expected a string, "
                                      f"got {obj[key]!r}")
            return obj

        def rows(obj, where: str, names: tuple, columns: tuple) -> dict:
            entry(obj, where, names)
            out = {}
            for name in names:
                row = obj[name]
                if not isinstance(row, list) or len(row) != len(columns) or not all(
                        isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
                        for x in row):
                    raise ConfigError(f"{label}: entry '{where}.{name}': expected {len(columns)} "
                                      f"finite numbers ({', '.join(columns)}), got {row!r}")
                out[name] = tuple(float(x) for x in row)
            return out

        top = entry(raw, "top level", ("about", "dsu", "cdu"), ("about",))
        dsu = entry(top["dsu"], "dsu", ("command", "columns", "all_fit", "select"), ("command",))
        cdu = entry(top["cdu"], "cdu", ("command", "columns", "policies"), ("command",))
        for where, section, columns in (("dsu", dsu, DSU_COLUMNS), ("cdu", cdu, CDU_COLUMNS)):
            if section["columns"] != list(columns):
                raise ConfigError(f"{label}: entry '{where}.columns': expected "
                                  f"{list(columns)} (sim/fast/timing.py), got {section['columns']!r}")
        return cls(rows(dsu["all_fit"], "dsu.all_fit", PROFILES, DSU_COLUMNS),
                   rows(dsu["select"], "dsu.select", PROFILES, DSU_COLUMNS), dsu["command"],
                   rows(cdu["policies"], "cdu.policies", POLICIES, CDU_COLUMNS), cdu["command"])

    def to_json(self) -> str:
        """The file's text: the JSON object :meth:`load` reads, one line per table row."""
        data = {
            "about": _COSTS_ABOUT,
            "dsu": {"command": self.dsu_command, "columns": list(DSU_COLUMNS),
                    "all_fit": {p: list(self.dsu_all_fit[p]) for p in PROFILES},
                    "select": {p: list(self.dsu_select[p]) for p in PROFILES}},
            "cdu": {"command": self.cdu_command, "columns": list(CDU_COLUMNS),
                    "policies": {p: list(self.cdu[p]) for p in POLICIES}},
        }
        self._parse(json.loads(json.dumps(data)), "the tables to write")   # never write a bad file
        text = json.dumps(data, indent=2)
        # a list of numbers or names on one line
        return re.sub(r"\[[^\[\]{}]*\]", lambda m: json.dumps(json.loads(m.group(0))), text) + "\n"

    def save(self, path: str | Path) -> None:
        Path(path).write_text(self.to_json(), encoding="utf-8")


@dataclass(frozen=True)
class UnitTiming:
    """Per-unit engines, clocks and cycle costs. The engines and clocks come from the GPU config
    (:meth:`from_gpu`); the cycle formulas are the RTL's, their fitted coefficients are read
    from :data:`COSTS_FILE` (:class:`UnitCosts`); tests/test_calibration.py checks them against
    RTL runs."""

    te_engines: int                       # te_engines_per_sm × sm_count
    te_clock_hz: float
    cdu_clock_hz: float
    dsu_clock_hz: float
    costs: UnitCosts = field(default_factory=UnitCosts.load)
    #: multiplier lanes per TE engine: an RTL parameter, not a GPU's (any of
    #: ``models.te.LANES``; default :data:`DEFAULT_TE_LANES`) and the engine design
    te_lanes: int = DEFAULT_TE_LANES
    te_engine: str = DEFAULT_TE_ENGINE

    DSU_COLUMNS = DSU_COLUMNS

    @classmethod
    def from_gpu(cls, gpu: GpuConfig, costs: UnitCosts | None = None) -> UnitTiming:
        """The units of ``gpu`` (``te_engines_per_sm``, the TE, CDU and DSU clocks of its
        config) with the shipped cycle costs or ``costs``."""
        return cls(gpu.te_engines_per_sm * gpu.sm_count, gpu.te_clock_hz, gpu.cdu_clock_hz,
                   gpu.dsu_clock_hz, costs if costs is not None else UnitCosts.load())

    @staticmethod
    def dsu_round_terms(active: int, admitted: int = 0, retired: int = 0,
                        blocked: bool | int = False, cap: int | None = None,
                        n_slots: int = 8) -> tuple:
        """The regressors of :meth:`dsu_round_cycles`, in the order of :data:`DSU_COLUMNS`:
        ``base + per_active·A + per_admitted·adm + per_retired·ret + per_compact·A_prev·[ret > 0]
        + per_blocked·blocked + per_scan·scan + per_blocked_scan·blocked·A + per_cap·cap·[A > cap]
        + per_word·(words - 1)`` with ``A_prev = A - adm + ret`` (the firmware's active list it
        compacts after freeing slots), ``scan = adm·A_prev + adm·(adm - 1)/2`` (each admission's
        free-slot search plus its insertion into the slot-ordered active list walks every slot
        occupied at that moment), ``blocked·A`` (a blocked intake head's free-slot search) and
        ``words = ceil(n_slots / 32)`` (the BATCH / ENDED / ROLLED_BACK mask words)."""
        a_prev = active - admitted + retired
        compact = a_prev if retired > 0 else 0
        scan = admitted * (active - admitted) + admitted * (admitted - 1) / 2
        blocked = float(bool(blocked))
        selecting = cap is not None and active > cap
        words = (n_slots + 31) // 32
        return (1.0, float(active), float(admitted), float(retired), float(compact), blocked,
                float(scan), blocked * active, float(cap) if selecting else 0.0,
                float(words - 1))

    def dsu_round_cycles(self, active: int, cap: int, profile: str, admitted: int = 0,
                         retired: int = 0, blocked: bool | int = False,
                         n_slots: int = 8) -> float:
        """DSU cycles of one scheduling round with ``active`` slots after admission (of
        ``n_slots``), ``admitted`` requests admitted this round, ``retired`` requests whose
        slots the previous round's completions freed, and ``blocked`` when an arrived request
        waits at the intake head (no free slot or KV budget). The defaults are a steady round
        of an 8-slot DSU."""
        table = self.costs.dsu_all_fit if active <= cap else self.costs.dsu_select
        coefs = table[profile]
        terms = self.dsu_round_terms(active, admitted, retired, blocked, cap, n_slots)
        return sum(c * t for c, t in zip(coefs, terms))

    def cdu_step_cycles(self, reads: float, prefetches: float, units: int, beats: int,
                        policy: str) -> float:
        """CDU front-end cycles of one step: one per demand read, prefetch and new-token
        write (one write per unit), plus the fitted per-unit and per-beat costs. The core
        decides one operation per cycle behind it, so this is the CDU's time per step."""
        per_unit, per_beat = self.costs.cdu[policy]
        return reads + prefetches + units * (1 + per_unit) + beats * per_beat

    def te_job_cycles(self, n: float, head_dim: int, group: int, jobs: float = 1.0,
                      kv_dtype: str = "bf16") -> float:
        """Cycles of ``jobs`` TE jobs (one request, layer and KV head each, at least one token
        each) streaming ``n`` tokens in all: ``models.te.te_cycles`` is ``fill + n ×
        per_token``. Split and pipelined engines: ``per_token = (G+1)·Dk`` (the K array's
        ``G`` cycles per K beat, one per V beat; the V array works behind); ``fill``: the q
        load, the V array's last token (pipelined: behind the pipelines' latency,
        ``models.te.te_pipe_timing``) and the normalised output; serial: ``3·G·Dk`` and ``1 +
        2·G·Dk``; ``Dk = head_dim/lanes``. None depends on the data."""
        from tricut.models.te import te_cycles, te_token_cycles

        per_token = te_token_cycles(head_dim, group, self.te_lanes, self.te_engine)
        fill = te_cycles(1, head_dim, group, self.te_lanes, engine=self.te_engine,
                         kv_dtype=kv_dtype) - per_token
        return jobs * fill + n * per_token

@dataclass(frozen=True)
class StepTiming:
    time_s: float
    floor_s: float
    hbm_read_bytes: float
    hbm_write_bytes: float
    l2_kv_bytes: float        # KV read from L2 (CDU hits: prefetched or resident)
    l2_reuse_bytes: float     # of which resident from the previous step (no HBM read)
    kv_read_bytes: float
    sm_busy_s: float
    te_busy_s: float
    sched_s: float
    cdu_busy_s: float = 0.0   # the CDU pipeline's time for this step's block operations
    #: what bound the step's decode work: ``gemv`` (the weight GEMVs), ``hbm`` (total HBM
    #: traffic, or the attention kernel's K/V stream without the TE), ``te_feed`` (the grid
    #: of tiles' attention: the TE array as its streamer feeds it), ``cdu``, ``l2``
    bound: str = ""
    attn_s: float = 0.0       # the attention phase's time (the TE grid's with the te cut)
    attn_hbm_bytes: float = 0.0   # K/V bytes the attention phase read from HBM
    te_imbalance: float = 1.0     # the grid's slowest SM over its mean (te cut)
    flops: float = 0.0            # the SMs' arithmetic on this GPU: GEMVs (and a chunk's
    #                               GEMMs), attention unless the TE runs it
    link_bytes: float = 0.0       # NVLink bytes this GPU sends in the step's all-reduces (and,
    #                               in a session run, its KV tier moves' link bytes)
    te_cycles: float = 0.0        # TE engine-busy cycles on this GPU, summed over engines (te cut)
    te_kv_bytes: float = 0.0      # K/V bytes the TE engines streamed (te cut)
    cdu_cycles: float = 0.0       # the CDU pipeline's cycles (cdu cut)
    dsu_cycles: float = 0.0       # the DSU's cycles of the step's round (dsu cut, not degraded)


@dataclass
class StepModel:
    model: ModelConfig
    gpu: GpuConfig
    kv_dtype: str = "bf16"
    tp: int = 1
    cuts: frozenset = frozenset()
    policy: str = "adaptive"              # CDU policy when the cdu cut is on
    assumptions: Assumptions = field(default_factory=Assumptions)
    units: UnitTiming | None = None       # default: UnitTiming.from_gpu(gpu)
    stack: StackProfile | None = None     # default: the shipped DEFAULT_STACK profile

    def __post_init__(self):
        if self.stack is None:
            self.stack = get_stack(DEFAULT_STACK)
        if self.units is None:
            self.units = UnitTiming.from_gpu(self.gpu)
        unknown = set(self.cuts) - set(CUTS)
        if unknown:
            raise ValueError(f"unknown cut {sorted(unknown)[0]!r}; choose from {', '.join(CUTS)}")
        if "cdu" in self.cuts and not self.gpu.has_cdu:
            raise ValueError(f"GPU {self.gpu.name} has no CDU; drop 'cdu' from --cuts")
        m, a = self.model, self.assumptions
        self.share = max(1.0 / self.tp, 1.0 / m.num_kv_heads)
        self.kv_token_bytes = m.kv_bytes_per_token(self.kv_dtype) * self.share
        self.weight_bytes = m.weight_bytes_per_step() / self.tp
        # fp8 weight GEMVs, measured per kernel library (the stack's fp8_gemv_*): a share of
        # peak HBM bandwidth below bf16's, and a longer fixed time per call
        fp8 = m.weight_dtype == "fp8"
        self.gemv_bw_efficiency = a.gemv_bw_efficiency * (self.stack.fp8_gemv_efficiency_ratio if fp8 else 1.0)
        self.gemv_calls_extra_s = (m.num_layers * FP8_GEMV_CALLS_PER_LAYER * self.stack.fp8_gemv_call_extra_s
                                   if fp8 else 0.0)
        self.gemv_flops_per_request = 2 * (m.param_count() - (0 if m.tie_embeddings else
                                                              m.vocab_size * m.hidden_size)) / self.tp
        self.kv_heads_here = max(1, m.num_kv_heads // self.tp)
        self.slice = self._grid = self.slice_cdu = None
        if "te" in self.cuts:
            # the TE term: a grid of tiles, one per SM (models/sm_slice.py); the tile model's
            # probes run on the first step (:attr:`grid`), the shape is checked here
            te_cycles(1, m.head_dim, m.group_size, self.units.te_lanes,
                      engine=self.units.te_engine, kv_dtype=self.kv_dtype)
            if self.units.te_engine not in TILE_ENGINES:
                raise ValueError(f"the te cut's grid of decode tiles runs the tile's engines "
                                 f"({', '.join(TILE_ENGINES)}), not {self.units.te_engine!r}")
            self.slice = slice_config(self.gpu, m, self.kv_dtype, a.te_bw_efficiency,
                                      self.units.te_lanes, self.units.te_engine)
            if "cdu" in self.cuts:
                # with the cdu cut each SM's tile has the CDU, at its share of the L2
                self.slice = dataclasses.replace(self.slice, l2=True)
                self.slice_cdu = slice_cdu(self.gpu, self.slice, self.policy, a.cdu_l2_share)
        self.cdu = None
        if "cdu" in self.cuts:
            block_bytes = self.kv_token_bytes / m.num_layers * KV_BLOCK_TOKENS   # one layer, this GPU
            self.cdu = CduReduction.sized(self.policy, a.cdu_l2_share * self.gpu.l2_bytes, block_bytes,
                                          self.gpu.hbm_latency_s, self.gpu.hbm_bandwidth, m.num_layers)

    @property
    def grid(self):
        """The expected-value model of one SM's tile (``te`` cut; None without it)."""
        if self._grid is None and self.slice is not None:
            self._grid = memo_slice_timing(self.slice) if self.slice_cdu is None else \
                memo_cdu_slice_timing(self.slice, self.slice_cdu)
        return self._grid

    # -- pieces ------------------------------------------------------------------------------
    def cdu_step(self, seq_lens: list[int], residency: list[int]) -> CduStep | None:
        """The CDU's block reads of this step (``sim/fast/cdu_reduction.py``), or None without
        the cdu cut."""
        return self.cdu.step(seq_lens, residency) if self.cdu is not None else None

    def host_time(self, batch: int, rng) -> float:
        """The stack's host work for one step of ``batch`` requests (scheduling, input
        preparation, output processing), before any overlap with the GPU."""
        st = self.stack
        host = st.host_step_s + st.host_per_request_s * batch
        if st.host_jitter_s > 0:
            host += rng.exponential(st.host_jitter_s)
        return host

    def sched_time(self, batch: int, degraded: bool, rng, active: int | None = None,
                   cap: int | None = None, profile: str = "throughput-opt", admitted: int = 0,
                   retired: int = 0, blocked: bool = False, n_slots: int = 8) -> float:
        """Scheduling time of one round: the DSU's cycles (``UnitTiming.dsu_round_cycles``
        with this round's admissions, retirements and blocked intake head, on a DSU of
        ``n_slots`` slots) or, without the dsu cut or when degraded, the stack's host time
        (:meth:`host_time`; how much of it shows depends on ``stack.sched_overlap``). Only a
        DSU degrades: without the dsu cut ``degraded`` changes nothing."""
        u = self.units
        degraded = degraded and "dsu" in self.cuts
        if "dsu" in self.cuts and not degraded:
            active = batch if active is None else active
            return u.dsu_round_cycles(active, cap or batch, profile, admitted, retired,
                                      blocked, n_slots) / u.dsu_clock_hz
        return self.host_time(batch, rng) + (self.assumptions.degraded_extra_s if degraded else 0.0)

    @property
    def peak_flops(self) -> float:
        """Dense tensor peak of the weights' format (fp8 and NVFP4 weights run at the fp8 peak)."""
        g = self.gpu
        return g.fp8_flops if self.model.weight_dtype in ("fp8", "nvfp4") else g.bf16_flops

    def _allreduces_s(self, tokens: float) -> float:
        """The step's ``2 × layers`` all-reduces of ``tokens × hidden × 2`` bytes."""
        if self.tp == 1:
            return 0.0
        msg = tokens * self.model.hidden_size * 2
        per = self.stack.allreduce_s(self.tp) + 2 * (self.tp - 1) / self.tp * msg / self.gpu.nvlink_bandwidth
        return 2 * self.model.num_layers * per

    def _allreduce_bytes(self, tokens: float) -> float:
        """NVLink bytes one GPU sends in the step's ``2 × layers`` ring all-reduces of
        ``tokens × hidden × 2`` bytes (``2 (tp − 1) / tp`` of each message)."""
        if self.tp == 1:
            return 0.0
        msg = tokens * self.model.hidden_size * 2
        return 2 * self.model.num_layers * 2 * (self.tp - 1) / self.tp * msg

    def _decode_attention_flops(self, kv_tokens: float) -> float:
        """Decode attention FLOPs (QK^T and PV) over ``kv_tokens`` cached tokens, every layer,
        this GPU's query heads."""
        m = self.model
        return 4 * m.num_layers * m.num_heads * m.head_dim * kv_tokens / self.tp

    def prefill_work(self, prompts: list[int], contexts: list[int] | None = None) -> tuple[float, float, float]:
        """``(HBM bytes, FLOPs, NVLink bytes)`` of prefilling whole ``prompts`` on this GPU:
        the weights read once, the prompts' K/V written; GEMMs and causal attention; the
        all-reduces of every prompt token (for the energy model)."""
        tokens = float(sum(prompts))
        contexts = contexts or [0] * len(prompts)
        flops = self.gemv_flops_per_request * tokens + sum(
            self._prefill_attention_flops(p, c) for p, c in zip(prompts, contexts))
        return self.weight_bytes + tokens * self.kv_token_bytes, flops, self._allreduce_bytes(tokens)

    def _prefill_attention_flops(self, tokens: float, context: float) -> float:
        """Causal attention FLOPs (QK^T and PV) of ``tokens`` new prompt tokens after
        ``context`` earlier ones, on this GPU."""
        m = self.model
        pairs = tokens * context + tokens * tokens / 2
        return 4 * m.num_layers * m.num_heads * m.head_dim * pairs / self.tp

    def step_time(self, seq_lens: list[int], residency: list[int], rng, degraded: bool = False,
                  active: int | None = None, cap: int | None = None, profile: str = "throughput-opt",
                  admitted: int = 0, retired: int = 0, blocked: bool = False,
                  n_slots: int = 8, prefill_tokens: int = 0, prefill_context: int = 0) -> StepTiming:
        """One decode step for a batch; ``seq_lens`` include the token this step appends.
        ``active``, ``cap``, ``profile``, ``admitted``, ``retired``, ``blocked``, ``n_slots``:
        the scheduling round's counts and the DSU's slots (see :meth:`sched_time`).
        ``prefill_tokens``: prompt tokens of a chunked prefill riding along in this step (after
        ``prefill_context`` tokens of the same prompts already prefilled)."""
        m, g, a, u, stk = self.model, self.gpu, self.assumptions, self.units, self.stack
        batch = len(seq_lens)
        history = [s - 1 for s in seq_lens]
        kv_read_tokens = float(sum(history))
        kv_read = kv_read_tokens * self.kv_token_bytes
        # the CDU serves its hits from L2 (prefetched or resident); only reuse hits (blocks
        # resident from the previous step) save HBM bytes
        cdu = self.cdu_step(seq_lens, residency)
        l2_kv = kv_read * cdu.hits / cdu.accesses if cdu and cdu.accesses else 0.0
        l2_reuse = kv_read * cdu.reuse / cdu.accesses if cdu and cdu.accesses else 0.0
        hbm_kv = kv_read - l2_reuse
        # the CDU's own pipeline: every block op of the step passes its front end and core
        cdu_t = 0.0
        if cdu is not None:
            cdu_t = u.cdu_step_cycles(cdu.accesses, cdu.prefetches, batch * m.num_layers,
                                      1 + batch + m.num_layers, self.policy) / u.cdu_clock_hz
        kv_write = (batch + prefill_tokens) * self.kv_token_bytes
        hbm_read = self.weight_bytes + hbm_kv
        bw = g.hbm_bandwidth
        flops = self.gemv_flops_per_request * (batch + prefill_tokens)
        flops += self._prefill_attention_flops(prefill_tokens, prefill_context)
        gemv_t = max(self.weight_bytes / (bw * self.gemv_bw_efficiency) + self.gemv_calls_extra_s,
                     flops / (self.peak_flops * a.compute_efficiency))
        comm_t = self._allreduces_s(batch + prefill_tokens)
        gaps = m.num_layers * stk.layer_gap_s(batch)
        if "te" in self.cuts:
            # TE engines stream K/V while the SMs run the GEMVs of the other micro-batch: both
            # share HBM, so the step is bound by total traffic, by the TE's compute, or by the
            # GEMVs, whichever is longest.
            te_t, imbalance = 0.0, 1.0
            if batch:
                lengths = np.repeat(np.asarray(seq_lens, dtype=np.int64), self.kv_heads_here)
                cached = reuse = None
                if cdu is not None:
                    # each job's curve by its residency hint; a cached job's blocks still
                    # resident from the previous step are read from L2
                    cached = np.repeat(np.asarray(residency, dtype=bool), self.kv_heads_here)
                    reuse = cdu.reuse / cdu.hits if cdu.hits else 0.0
                slowest, mean = grid_layer_cycles_fast(self.grid, lengths, g.sm_count, cached,
                                                       reuse or 0.0)
                te_t = m.num_layers * slowest / u.te_clock_hz
                imbalance = slowest / mean
            mem_t = (hbm_read + kv_write) / (bw * a.te_bw_efficiency)
            l2_t = l2_kv / a.l2_bandwidth
            terms = {"gemv": gemv_t, "te_feed": te_t, "hbm": mem_t, "l2": l2_t, "cdu": cdu_t}
            bound = max(terms, key=terms.get)
            busy = terms[bound]
            sm_busy, te_busy = gemv_t, te_t
            attn_t = te_t
            core_t = busy + gaps + comm_t
        else:
            # the kernel reads the KV from HBM (per query head without gqa_shared_kv) and writes
            # the new tokens' K/V once
            terms = {"hbm": stk.attention_s(hbm_kv, m.num_layers, bw, m.group_size)
                     + kv_write / (bw * stk.attn_bw_efficiency), "l2": l2_kv / a.l2_bandwidth,
                     "cdu": cdu_t}
            bound = max(terms, key=terms.get)
            attn_t = terms[bound]
            if gemv_t >= attn_t:
                bound = "gemv"
            imbalance = 1.0
            core_t = gemv_t + attn_t + gaps + comm_t
            sm_busy, te_busy = gemv_t + attn_t, 0.0
        sched = self.sched_time(batch, degraded, rng, active, cap, profile, admitted, retired,
                                blocked, n_slots)
        dsu_cycles = sched * u.dsu_clock_hz if "dsu" in self.cuts and not degraded else 0.0
        if "dsu" not in self.cuts or degraded:
            # an overlapping stack prepares step n+1 while the GPU runs step n: only the part
            # of its host work longer than the GPU's shows
            ov = stk.sched_overlap
            sched = (1 - ov) * sched + ov * max(0.0, sched - core_t)
        floor = max((hbm_read + kv_write) / bw, l2_kv / a.l2_bandwidth)
        total = core_t + sched
        te_cycles = te_kv_bytes = 0.0
        if "te" in self.cuts:
            # the TE engines run the attention: one job per (request, layer, KV head) here,
            # each streaming its request's whole context (the new token's K/V included)
            jobs = batch * self.kv_heads_here
            te_cycles = m.num_layers * u.te_job_cycles(float(sum(seq_lens)) * self.kv_heads_here,
                                                       m.head_dim, m.group_size, jobs, self.kv_dtype)
            te_kv_bytes = float(sum(seq_lens)) * self.kv_token_bytes
        else:
            flops += self._decode_attention_flops(kv_read_tokens)
        if total < floor * (1 - 1e-12):
            raise PhysicsViolation(f"step of {total:.3e} s beats the bandwidth floor {floor:.3e} s")
        return StepTiming(total, floor, hbm_read, kv_write, l2_kv, l2_reuse, kv_read, sm_busy, te_busy,
                          sched, cdu_t, bound, attn_t, hbm_kv, imbalance, flops,
                          self._allreduce_bytes(batch + prefill_tokens), te_cycles, te_kv_bytes,
                          cdu_t * u.cdu_clock_hz, dsu_cycles)

    def _prefill_compute_s(self, prompts: list[int], contexts: list[int] | None = None) -> float:
        """GEMMs (weights read once) and causal attention of whole prompts on this GPU, at the
        weights' format peak × ``compute_efficiency``; ``contexts``: tokens already in each
        prompt's KV cache, which its new tokens attend to (a session's next turn)."""
        g, a = self.gpu, self.assumptions
        tokens = float(sum(prompts))
        gemm = self.gemv_flops_per_request * tokens        # per token, on this GPU
        contexts = contexts or [0] * len(prompts)
        attn = sum(self._prefill_attention_flops(p, c) for p, c in zip(prompts, contexts))
        compute = (gemm + attn) / (self.peak_flops * a.compute_efficiency)
        return max(compute, self.weight_bytes / (g.hbm_bandwidth * self.gemv_bw_efficiency) + self.gemv_calls_extra_s)

    def prefill_time(self, prompt: int, context: int = 0) -> float:
        """Disaggregated prefill pool (one TP group like this one, uncontended): the prompt's
        GEMMs and causal attention (:meth:`_prefill_compute_s`), then its KV sent over the
        prefill link. ``context``: tokens of KV the prompt extends (a session's next turn), which
        the pool first receives over the same link."""
        m, a = self.model, self.assumptions
        transfer = (prompt + context) * m.kv_bytes_per_token(self.kv_dtype) / a.prefill_link_bandwidth
        return self._prefill_compute_s([prompt], [context]) + transfer

    def prefill_batch_time(self, prompts: list[int], rng=None, contexts: list[int] | None = None) -> float:
        """One prefill batch of whole ``prompts`` on these (decode) GPUs, as a colocated stack
        runs it between decode steps: compute (:meth:`_prefill_compute_s`), eager launch gaps
        per layer, the all-reduces of every prompt token, and the stack's host step."""
        if not prompts:
            return 0.0
        m, stk = self.model, self.stack
        host = stk.host_step_s + stk.host_per_request_s * len(prompts)
        if rng is not None and stk.host_jitter_s > 0:
            host += rng.exponential(stk.host_jitter_s)
        return (self._prefill_compute_s(prompts, contexts) + m.num_layers * (stk.graph_layer_gap_s + stk.eager_extra_gap_s)
                + self._allreduces_s(float(sum(prompts))) + host)
