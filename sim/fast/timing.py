"""Per-step time of one decode step on one GPU of a tensor-parallel group.

The model and every constant are described in docs/system-model.md. Each returned step also
carries its physical floor, ``(weight bytes + KV bytes read from HBM + KV bytes written) /
peak HBM bandwidth`` (and the L2 analogue), and :func:`step_time` refuses to return a step
faster than that floor.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from tricut.models.cdu import BLOCK_TOKENS
from tricut.models.config import GpuConfig, ModelConfig

from .cdu_reduction import CduReduction, CduStep

__all__ = ["CUTS", "Assumptions", "UnitTiming", "StepTiming", "PhysicsViolation", "StepModel"]

CUTS = ("te", "cdu", "dsu")


class PhysicsViolation(AssertionError):
    """A step came out faster than the bandwidth floor: a bug in the model, never a result."""


@dataclass(frozen=True)
class Assumptions:
    """Efficiencies and overheads that are not in the GPU datasheet. Each is an assumption
    documented (with its reason) in docs/system-model.md; sweep them to see what a result
    depends on."""

    gemv_bw_efficiency: float = 0.85      # fraction of peak HBM bandwidth a weight GEMV reaches
    sm_attention_bw_efficiency: float = 0.70   # FlashDecoding-style attention on the SMs
    te_bw_efficiency: float = 0.90        # the TE's single-pass K/V stream
    compute_efficiency: float = 0.60      # of dense tensor peak, for GEMMs in decode and prefill
    l2_bandwidth: float = 5.5e12          # bytes/s, H100-class L2 read bandwidth
    kernel_overhead_s: float = 4e-6       # per layer, launch + sync gaps on the SM path
    allreduce_latency_s: float = 5e-6     # per all-reduce (2 per layer) with TP > 1
    host_sched_s: float = 250e-6          # host CPU scheduler work per step
    host_sched_per_request_s: float = 2e-6
    host_jitter_s: float = 150e-6         # mean of an exponential extra delay per step
    degraded_extra_s: float = 100e-6      # DSU degraded: host path plus the hand-over check
    cdu_l2_share: float = 0.8             # fraction of L2 the CDU owns as KV block frames
    prefill_link_bandwidth: float = 50e9  # bytes/s, KV from the prefill pool (RDMA-class)

    def __post_init__(self):
        for name in self.__dataclass_fields__:
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) \
                    or value < 0:
                raise ValueError(f"assumption {name} must be a finite number >= 0, got {value!r}")
        for name in ("gemv_bw_efficiency", "sm_attention_bw_efficiency", "te_bw_efficiency",
                     "compute_efficiency", "cdu_l2_share"):
            if not 0 < getattr(self, name) <= 1:
                raise ValueError(f"assumption {name} must be in (0, 1], got {getattr(self, name)!r}")


@dataclass(frozen=True)
class UnitTiming:
    """Per-unit cycle costs, taken from the RTL's cycle formulas (checked against RTL runs in
    tests/test_calibration.py)."""

    te_engines: int = 528                 # 4 TE decode engines per SM (one per SM sub-partition)
    te_clock_hz: float = 1.98e9
    te_lanes: int = 16                    # multiplier lanes per engine (the RTL's maximum)
    dsu_clock_hz: float = 1.2e9

    #: DSU cycles per scheduling round (docs/system-model.md), per profile and regime:
    #: ``base + per_active·A + per_admitted·adm + per_retired·ret + per_compact·A_prev·[ret > 0]
    #: + per_blocked·blocked + per_scan·scan + per_blocked_scan·blocked·A + per_cap·cap·[A > cap]
    #: + per_word·(words - 1)`` with ``A_prev = A - adm + ret`` (the firmware's active list it
    #: compacts after freeing slots), ``scan = adm·A_prev + adm·(adm - 1)/2`` (each admission's
    #: free-slot search plus its insertion into the slot-ordered active list walks every slot
    #: occupied at that moment), ``blocked·A`` (a blocked intake head's free-slot search) and
    #: ``words = ceil(n_slots / 32)`` (the BATCH / ENDED / ROLLED_BACK mask words). Least-squares
    #: fits of the scheduler firmware on the DSU RTL cluster (8, 16, 32 and 64 slots; caps
    #: n_slots and below): ``.venv/bin/python benchmarks/dsu_fit.py``. "all fit" when every
    #: active slot fits the batch (A <= cap), "select" when the profile must choose.
    #: Columns: profile, then :attr:`DSU_COLUMNS`.
    dsu_fit_all_fit: tuple = (
        ("throughput-opt", 393.9, 76.24, 116.95, 29.01, 25.0, 8.76, 11.77, 14.21, 0.0, 45.84),
        ("latency-opt", 393.77, 55.17, 138.2, 30.35, 24.86, 10.55, 11.78, 14.05, 0.0, 44.0),
        ("fairness-opt", 411.9, 90.4, 101.35, 64.87, 24.79, 8.47, 11.8, 14.21, 0.0, 18.67))
    dsu_fit_select: tuple = (
        ("throughput-opt", 291.79, 241.22, 132.93, -18.63, 29.35, -72.6, 13.08, 20.17, 89.54, 0.0),
        ("latency-opt", 214.9, 102.5, 148.66, -43.93, 35.27, -315.36, 13.27, 53.35, 107.75, 0.0),
        ("fairness-opt", 208.11, 155.19, 99.41, 69.32, 24.53, -153.89, 13.91, 28.26, 65.31, 0.0))

    DSU_COLUMNS = ("base", "per_active", "per_admitted", "per_retired", "per_compact",
                   "per_blocked", "per_scan", "per_blocked_scan", "per_cap", "per_word")

    @staticmethod
    def dsu_round_terms(active: int, admitted: int = 0, retired: int = 0,
                        blocked: bool | int = False, cap: int | None = None,
                        n_slots: int = 8) -> tuple:
        """The regressors of :meth:`dsu_round_cycles`, in the order of :attr:`DSU_COLUMNS`."""
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
        table = self.dsu_fit_all_fit if active <= cap else self.dsu_fit_select
        coefs = next(row[1:] for row in table if row[0] == profile)
        terms = self.dsu_round_terms(active, admitted, retired, blocked, cap, n_slots)
        return sum(c * t for c, t in zip(coefs, terms))

    cdu_clock_hz: float = 1.98e9
    #: CDU front-end cycles beyond one per operation (R, P, W): per (slot, layer) unit and per
    #: step-descriptor beat, least-squares fits to the RTL front end (``full`` pattern, no
    #: stalls): ``.venv/bin/python benchmarks/cdu_cycles_fit.py``. Columns: policy,
    #: per_unit, per_beat.
    cdu_fit: tuple = (("disabled", 4.55, 1.79), ("static", 4.55, 1.79), ("adaptive", 9.55, 1.79))

    def cdu_step_cycles(self, reads: float, prefetches: float, units: int, beats: int,
                        policy: str) -> float:
        """CDU front-end cycles of one step: one per demand read, prefetch and new-token
        write (one write per unit), plus the fitted per-unit and per-beat costs. The core
        decides one operation per cycle behind it, so this is the CDU's time per step."""
        per_unit, per_beat = next(row[1:] for row in self.cdu_fit if row[0] == policy)
        return reads + prefetches + units * (1 + per_unit) + beats * per_beat

    def te_job_cycles(self, n: float, head_dim: int, group: int, jobs: float = 1.0) -> float:
        """Cycles of ``jobs`` TE jobs (one request, layer and KV head each) streaming ``n``
        tokens in all: ``models.te.te_cycles`` is ``fill + n × per_token`` with
        ``per_token = 3·G·head_dim/lanes`` (K dot products, rescale, V accumulation) and
        ``fill = 1 + 2·G·head_dim/lanes`` (q load, normalisation)."""
        from tricut.models.te import te_cycles

        fill = te_cycles(0, head_dim, group, self.te_lanes)
        per_token = te_cycles(1, head_dim, group, self.te_lanes) - fill
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


@dataclass
class StepModel:
    model: ModelConfig
    gpu: GpuConfig
    kv_dtype: str = "bf16"
    tp: int = 1
    cuts: frozenset = frozenset()
    policy: str = "adaptive"              # CDU policy when the cdu cut is on
    assumptions: Assumptions = field(default_factory=Assumptions)
    units: UnitTiming = field(default_factory=UnitTiming)

    def __post_init__(self):
        unknown = set(self.cuts) - set(CUTS)
        if unknown:
            raise ValueError(f"unknown cut {sorted(unknown)[0]!r}; choose from {', '.join(CUTS)}")
        if "cdu" in self.cuts and not self.gpu.has_cdu:
            raise ValueError(f"GPU {self.gpu.name} has no CDU; drop 'cdu' from --cuts")
        m, a = self.model, self.assumptions
        self.share = max(1.0 / self.tp, 1.0 / m.num_kv_heads)
        self.kv_token_bytes = m.kv_bytes_per_token(self.kv_dtype) * self.share
        self.weight_bytes = m.weight_bytes_per_step() / self.tp
        self.gemv_flops_per_request = 2 * (m.param_count() - (0 if m.tie_embeddings else
                                                              m.vocab_size * m.hidden_size)) / self.tp
        self.kv_heads_here = max(1, m.num_kv_heads // self.tp)
        self.cdu = None
        if "cdu" in self.cuts:
            block_bytes = self.kv_token_bytes / m.num_layers * BLOCK_TOKENS   # one layer, this GPU
            self.cdu = CduReduction.sized(self.policy, a.cdu_l2_share * self.gpu.l2_bytes, block_bytes,
                                          self.gpu.hbm_latency_s, self.gpu.hbm_bandwidth, m.num_layers)

    # -- pieces ------------------------------------------------------------------------------
    def cdu_step(self, seq_lens: list[int], residency: list[int]) -> CduStep | None:
        """The CDU's block reads of this step (``sim/fast/cdu_reduction.py``), or None without
        the cdu cut."""
        return self.cdu.step(seq_lens, residency) if self.cdu is not None else None

    def sched_time(self, batch: int, degraded: bool, rng, active: int | None = None,
                   cap: int | None = None, profile: str = "throughput-opt", admitted: int = 0,
                   retired: int = 0, blocked: bool = False, n_slots: int = 8) -> float:
        """Scheduling time of one round: the DSU's cycles (``UnitTiming.dsu_round_cycles``
        with this round's admissions, retirements and blocked intake head, on a DSU of
        ``n_slots`` slots) or, without the dsu cut or when degraded, the host's."""
        a, u = self.assumptions, self.units
        if "dsu" in self.cuts and not degraded:
            active = batch if active is None else active
            return u.dsu_round_cycles(active, cap or batch, profile, admitted, retired,
                                      blocked, n_slots) / u.dsu_clock_hz
        host = a.host_sched_s + a.host_sched_per_request_s * batch
        if a.host_jitter_s > 0:
            host += rng.exponential(a.host_jitter_s)
        return host + (a.degraded_extra_s if degraded else 0.0)

    def step_time(self, seq_lens: list[int], residency: list[int], rng, degraded: bool = False,
                  active: int | None = None, cap: int | None = None, profile: str = "throughput-opt",
                  admitted: int = 0, retired: int = 0, blocked: bool = False,
                  n_slots: int = 8) -> StepTiming:
        """One decode step for a batch; ``seq_lens`` include the token this step appends.
        ``active``, ``cap``, ``profile``, ``admitted``, ``retired``, ``blocked``, ``n_slots``:
        the scheduling round's counts and the DSU's slots (see :meth:`sched_time`)."""
        m, g, a, u = self.model, self.gpu, self.assumptions, self.units
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
        kv_write = batch * self.kv_token_bytes
        hbm_read = self.weight_bytes + hbm_kv
        bw = g.hbm_bandwidth
        flops = self.gemv_flops_per_request * batch
        peak = g.fp8_flops if m.weight_dtype in ("fp8", "nvfp4") else g.bf16_flops
        gemv_t = max(self.weight_bytes / (bw * a.gemv_bw_efficiency), flops / (peak * a.compute_efficiency))
        comm_t = 0.0
        if self.tp > 1:
            msg = batch * m.hidden_size * 2
            per = a.allreduce_latency_s + 2 * (self.tp - 1) / self.tp * msg / g.nvlink_bandwidth
            comm_t = 2 * m.num_layers * per
        if "te" in self.cuts:
            # TE engines stream K/V while the SMs run the GEMVs of the other micro-batch: both
            # share HBM, so the step is bound by total traffic, by the TE's compute, or by the
            # GEMVs, whichever is longest.
            jobs = batch * m.num_layers * self.kv_heads_here
            tokens = (kv_read_tokens + batch) * m.num_layers * self.kv_heads_here
            te_cycles = u.te_job_cycles(tokens, m.head_dim, m.group_size, jobs) / u.te_engines
            te_t = te_cycles / u.te_clock_hz
            mem_t = (hbm_read + kv_write) / (bw * a.te_bw_efficiency)
            l2_t = l2_kv / a.l2_bandwidth
            busy = max(gemv_t, te_t, mem_t, l2_t, cdu_t)
            sm_busy, te_busy = gemv_t, te_t
            core_t = busy + comm_t
        else:
            attn_t = max((hbm_kv + kv_write) / (bw * a.sm_attention_bw_efficiency), l2_kv / a.l2_bandwidth,
                         cdu_t)
            core_t = gemv_t + attn_t + m.num_layers * a.kernel_overhead_s + comm_t
            sm_busy, te_busy = gemv_t + attn_t, 0.0
        sched = self.sched_time(batch, degraded, rng, active, cap, profile, admitted, retired,
                                blocked, n_slots)
        floor = max((hbm_read + kv_write) / bw, l2_kv / a.l2_bandwidth)
        total = core_t + sched
        if total < floor * (1 - 1e-12):
            raise PhysicsViolation(f"step of {total:.3e} s beats the bandwidth floor {floor:.3e} s")
        return StepTiming(total, floor, hbm_read, kv_write, l2_kv, l2_reuse, kv_read, sm_busy, te_busy,
                          sched, cdu_t)

    def prefill_time(self, prompt: int) -> float:
        """Disaggregated prefill pool (one TP group like this one, uncontended): GEMM compute
        at ``compute_efficiency`` (weights read once), causal attention FLOPs, then the prompt's
        KV sent over the prefill link."""
        m, g, a = self.model, self.gpu, self.assumptions
        gemm = 2 * m.param_count() * prompt
        attn = 2 * m.num_layers * m.num_heads * m.head_dim * prompt * prompt  # QK^T + PV, causal half
        compute = (gemm + attn) / self.tp / (g.bf16_flops * a.compute_efficiency)
        weights = m.weight_bytes_per_step() / self.tp / g.hbm_bandwidth
        transfer = prompt * m.kv_bytes_per_token(self.kv_dtype) / a.prefill_link_bandwidth
        return max(compute, weights) + transfer
