"""A first-order energy model of decode serving: joules per step from the bytes and operations
the step model already counts, and the power they imply.

Per GPU, over a run: ``static_w × duration`` (the power of a GPU that runs kernels: leakage,
clocks, HBM refresh, the SMs' activity that no byte or operation below accounts for; fitted)
plus, per step and per prefill, HBM bytes × ``hbm_pj_per_byte``, L2-served K/V bytes ×
``l2_pj_per_byte``, arithmetic FLOPs × ``sm_pj_per_flop`` (by the weights' format: fp8 and
NVFP4 weights at ``fp8_flop_ratio`` of it) and link bytes (all-reduces, KV tier moves) × ``link_pj_per_byte``; the
host CPU's ``host_w`` beside it (0 unless given: no measurement of it was found). With the
cuts, the decode units' own logic: TE engine-busy cycles × ``te_pj_per_cycle`` plus the K/V
bytes through the TE's FIFOs (written and read: two SRAM accesses, ``sram_pj_per_byte`` each),
CDU cycles × ``cdu_pj_per_cycle`` and DSU cycles × ``dsu_pj_per_cycle``: per-cycle energies
derived from the units' Yosys cells (``benchmarks/unit_energy.py --write``). The coefficients
live in :data:`ENERGY_FILE` (this package), each with its source, the fit that wrote it
(``benchmarks/energy.py --write``) or its derivation. What is first-order about it:
docs/energy.md.
"""

from __future__ import annotations

import math
from dataclasses import astuple, dataclass, fields


from .datafile import parse_sourced_table, read_data_json

__all__ = ["ENERGY_FILE", "COMPONENTS", "GPU_COMPONENTS", "EnergyCoefficients", "EnergyTable", "GpuWork",
           "EnergyLedger", "load_energy", "energy_of"]

ENERGY_FILE = "energy.json"
#: the parts of a run's energy, in the order they are reported: the decode GPUs' (static power,
#: HBM, L2, the SMs' arithmetic, the TE, CDU and DSU logic, NVLink), the host's, and a
#: disaggregated prefill pool's bytes and FLOPs
COMPONENTS = ("static", "hbm", "l2", "sm", "te", "cdu", "dsu", "links", "host", "pool")
#: the components that are the decode GPUs' own power
GPU_COMPONENTS = ("static", "hbm", "l2", "sm", "te", "cdu", "dsu", "links")


@dataclass(frozen=True)
class EnergyCoefficients:
    """One GPU's energy coefficients (docs/energy.md gives each value and its source)."""

    gpu: str
    board_w: float            # the board power limit
    static_w: float           # power of a GPU running kernels, beyond the terms below
    hbm_pj_per_byte: float    # HBM read or write, the whole GPU's incremental energy
    l2_pj_per_byte: float     # a K/V byte read from L2 instead of HBM (resident, not prefetched)
    sm_pj_per_flop: float     # tensor-core arithmetic of bf16 weights, instruction overhead in
    fp8_flop_ratio: float     # fp8 / NVFP4 weights: energy per FLOP relative to bf16
    link_pj_per_byte: float   # link bytes: the all-reduces' NVLink, the KV tier moves' links
    host_w: float             # host CPU power per GPU (reported beside the GPU's)
    te_pj_per_cycle: float    # one TE engine's logic per busy cycle
    cdu_pj_per_cycle: float   # the CDU's logic and one tag access per cycle
    dsu_pj_per_cycle: float   # a DSU core, the slot arbiter and one local-memory access per cycle
    sram_pj_per_byte: float   # a byte written to or read from a unit's SRAM (the TE's K/V FIFOs)

    def __post_init__(self):
        for f in fields(self):
            if f.name == "gpu":
                continue
            v = getattr(self, f.name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise ValueError(f"energy of {self.gpu}: {f.name} must be a finite number >= 0, got {v!r}")
        if self.board_w <= 0 or self.static_w >= self.board_w:
            raise ValueError(f"energy of {self.gpu}: static_w {self.static_w!r} must be below "
                             f"board_w {self.board_w!r} (> 0)")
        if not 0 < self.fp8_flop_ratio <= 1:
            raise ValueError(f"energy of {self.gpu}: fp8_flop_ratio must be in (0, 1], got {self.fp8_flop_ratio!r}")

    def flop_pj(self, weight_dtype: str) -> float:
        return self.sm_pj_per_flop * (self.fp8_flop_ratio if weight_dtype in ("fp8", "nvfp4") else 1.0)


@dataclass(frozen=True)
class EnergyTable:
    """The shipped coefficients by GPU with each value's source, as stored in :data:`ENERGY_FILE`."""

    gpus: dict                # gpu name -> EnergyCoefficients
    sources: dict             # gpu name -> {field: source text}
    about: str

    def to_json(self) -> str:
        import json
        out = {"about": self.about, "gpus": {}}
        for name, c in self.gpus.items():
            out["gpus"][name] = {f.name: {"value": getattr(c, f.name), "source": self.sources[name][f.name]}
                                 for f in fields(EnergyCoefficients) if f.name != "gpu"}
        _parse(json.loads(json.dumps(out)), "the table to write")     # never write a bad file
        return json.dumps(out, indent=2) + "\n"


def _parse(raw, label: str) -> EnergyTable:
    names = [f.name for f in fields(EnergyCoefficients) if f.name != "gpu"]
    gpus, sources = parse_sourced_table(raw, label, "gpus", "gpu", names,
                                        lambda gpu, values: EnergyCoefficients(gpu=gpu, **values))
    return EnergyTable(gpus, sources, raw["about"])


def load_energy(path=None) -> EnergyTable:
    """The shipped table (``path=None``) or another copy of the file; a missing or malformed
    file, or a bad coefficient, raises :class:`ConfigError` naming the file and the entry."""
    raw, label = read_data_json(ENERGY_FILE, path)
    return _parse(raw, label)


def energy_of(gpu: str, path=None) -> EnergyCoefficients | None:
    """The coefficients of ``gpu``, or None when the table has none for it."""
    return load_energy(path).gpus.get(gpu)


@dataclass(frozen=True)
class GpuWork:
    """What one GPU moved and computed in a piece of work: the energy model's inputs."""

    hbm_bytes: float = 0.0     # HBM reads and writes
    l2_bytes: float = 0.0      # K/V read from L2 instead of HBM (resident from the previous step)
    flops: float = 0.0         # the SMs' arithmetic
    link_bytes: float = 0.0    # bytes sent over links: the all-reduces' NVLink, KV tier moves
    te_cycles: float = 0.0     # TE engine-busy cycles, summed over the engines
    te_kv_bytes: float = 0.0   # K/V bytes the TE engines streamed
    cdu_cycles: float = 0.0    # CDU pipeline cycles
    dsu_cycles: float = 0.0    # DSU cycles of the scheduling rounds

    def __add__(self, other: "GpuWork") -> "GpuWork":
        return GpuWork(*(a + b for a, b in zip(astuple(self), astuple(other))))

    @classmethod
    def of_step(cls, st) -> "GpuWork":
        """A decode step's work (a :class:`~tricut.sim.fast.timing.StepTiming`): a prefetch hit
        came from HBM through the L2 like a miss (in its HBM bytes); only a block resident from
        the previous step is an L2 read instead of an HBM one."""
        return cls(st.hbm_read_bytes + st.hbm_write_bytes, st.l2_reuse_bytes, st.flops, st.link_bytes,
                   st.te_cycles, st.te_kv_bytes, st.cdu_cycles, st.dsu_cycles)


@dataclass
class EnergyLedger:
    """A run's energy per GPU of its tensor-parallel group, by component (joules), and each
    timed piece of work (decode steps, colocated prefill batches: ``(end_s, time_s,
    GpuWork)``), from which a window's energy or the peak power follow."""

    coeffs: EnergyCoefficients
    weight_dtype: str
    joules: dict = None
    records: list = None

    def __post_init__(self):
        self.joules = dict.fromkeys(COMPONENTS, 0.0)
        self.records = []

    def dynamic_j(self, w: GpuWork) -> dict:
        c = self.coeffs
        # each K/V byte the TE streams is written into its FIFO and read by the lanes
        te = w.te_cycles * c.te_pj_per_cycle + 2 * w.te_kv_bytes * c.sram_pj_per_byte
        return {"hbm": w.hbm_bytes * c.hbm_pj_per_byte * 1e-12, "l2": w.l2_bytes * c.l2_pj_per_byte * 1e-12,
                "sm": w.flops * c.flop_pj(self.weight_dtype) * 1e-12, "te": te * 1e-12,
                "cdu": w.cdu_cycles * c.cdu_pj_per_cycle * 1e-12,
                "dsu": w.dsu_cycles * c.dsu_pj_per_cycle * 1e-12,
                "links": w.link_bytes * c.link_pj_per_byte * 1e-12}

    def work(self, w: GpuWork, time_s: float | None = None, end_s: float | None = None,
             pool: bool = False) -> None:
        """Add one piece of GPU work; a timed one (``time_s``, ``end_s``: a decode step, a
        colocated prefill batch) is kept in :attr:`records`; ``pool``: a disaggregated prefill
        pool's work (its own component, not the decode GPUs' power)."""
        for k, j in self.dynamic_j(w).items():
            self.joules["pool" if pool else k] += j
        if time_s is not None:
            self.records.append((end_s, time_s, w))

    def step_j(self, w: GpuWork, time_s: float) -> float:
        """The joules of ``w`` done in ``time_s``, static power included."""
        return sum(self.dynamic_j(w).values()) + self.coeffs.static_w * time_s

    def peak_w(self) -> float:
        """The highest power of any timed piece of work of the decode GPUs (static included)."""
        best = float("nan")
        for _, t, w in self.records:
            if t > 0:
                p = self.step_j(w, t) / t
                best = p if not best >= p else best
        return best

    def close(self, duration_s: float) -> None:
        """The run lasted ``duration_s``: static and host power over all of it."""
        self.joules["static"] = self.coeffs.static_w * duration_s
        self.joules["host"] = self.coeffs.host_w * duration_s

    def floor_j(self, hbm_bytes: float, duration_s: float) -> float:
        """No run uses less: static power over its duration plus its HBM bytes."""
        return self.coeffs.static_w * duration_s + hbm_bytes * self.coeffs.hbm_pj_per_byte * 1e-12
