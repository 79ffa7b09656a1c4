"""Software-stack profiles: what a serving stack adds to the GPU's physics.

A :class:`StackProfile` is the named parameter set of one serving stack (vLLM V0, vLLM V1,
TensorRT-LLM, or the ``ideal`` physics-facing reference): host time per step and per request,
whether that host work overlaps the GPU, launch and sync gaps with and without CUDA graphs,
the decode-attention kernel's cost curve, the all-reduce latency and how prefill shares the
GPUs. The shipped profiles live in :data:`STACKS_FILE` (this package), each value with its
source: a citation of ``../shared/calibration/published-h100-decode.md`` or another public
source, or the fit that wrote it (``benchmarks/fidelity.py --write``). docs/fidelity.md
lists them; docs/system-model.md says where each enters the step time.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, fields, replace
from pathlib import Path


from .datafile import parse_sourced_table, read_data_json

__all__ = ["PREFILL_MODES", "SCHEDULERS", "KV_RESERVES", "STACKS_FILE", "DEFAULT_STACK", "StackProfile",
           "StackTable", "load_stacks", "stack_names", "get_stack"]

#: how prefill shares the GPUs: a separate pool, whole prefill batches pre-empting decode, or
#: chunks riding along in decode steps
PREFILL_MODES = ("disaggregated", "colocated", "chunked")
#: a stack's scheduler -> the prefill mode it runs (docs/system-model.md, "Prefill modes"):
#: ``prefill-first`` (vLLM V0: whole prefill batches before decode), ``chunked`` (vLLM V1:
#: decode tokens first, then prompt chunks, under one token budget), ``inflight``
#: (TensorRT-LLM's in-flight batching: context and generation tokens in one iteration under
#: ``max_num_tokens``), ``disaggregated`` (a separate prefill pool)
SCHEDULERS = {"prefill-first": "colocated", "chunked": "chunked", "inflight": "chunked",
              "disaggregated": "disaggregated"}
#: what a stack's scheduler reserves of a request's KV when it admits it (docs/system-model.md,
#: "Admission and pre-emption"): ``output`` its prompt and every token it may decode (the DSU;
#: TensorRT-LLM's ``GUARANTEED_NO_EVICT``), so KV never runs out mid-decode; ``prompt`` its
#: prompt with ``kv_watermark`` of the KV budget left free, taking KV as it decodes and
#: pre-empting (recompute) when KV runs out (vLLM)
KV_RESERVES = ("output", "prompt")
STACKS_FILE = "stacks.json"
#: the stack a run stands for unless told otherwise (docs/fidelity.md says why)
DEFAULT_STACK = "vllm-v0"
#: weight GEMM calls per decoder layer: fused QKV, attention output, fused gate-up, down
FP8_GEMV_CALLS_PER_LAYER = 4


@dataclass(frozen=True)
class StackProfile:
    """One software stack's parameters (seconds unless stated). docs/fidelity.md gives each
    shipped value and its source."""

    name: str
    host_step_s: float            # host work per step: scheduling, input prep, output processing
    host_per_request_s: float     # host work per scheduled request per step
    host_jitter_s: float          # mean of an exponential extra host delay per step
    sched_overlap: float          # 0: host work is serial with the GPU; 1: it overlaps the
                                  # previous step's GPU work (only what exceeds it shows)
    cuda_graphs: bool             # decode steps replay CUDA graphs (up to graph_max_batch)
    graph_max_batch: int          # largest batch with a captured graph; larger runs eager
    graph_layer_gap_s: float      # launch/sync gap per layer when a graph is replayed
    eager_extra_gap_s: float      # extra launch/sync gap per layer in eager mode (no graph)
    attn_call_s: float            # decode attention: fixed cost per call (one call per layer)
    attn_bw_efficiency: float     # decode attention: fraction of HBM bandwidth on its KV bytes
    gqa_shared_kv: bool           # the kernel reads each K/V head once for its whole query
                                  # group; False: once per query head (K/V bytes x G)
    allreduce_latency_s: float    # per all-reduce and per doubling of TP (x log2 tp)
    fp8_gemv_efficiency_ratio: float  # fp8 weight GEMVs: their HBM bandwidth efficiency over the
                                  # bf16 GEMVs' (Assumptions.gemv_bw_efficiency), in (0, 1]
    fp8_gemv_call_extra_s: float  # fp8 weight GEMVs: extra fixed time per call over a bf16 one
                                  # (FP8_GEMV_CALLS_PER_LAYER calls per layer)
    scheduler: str                # how it shares the GPUs between prefill and decode (SCHEDULERS)
    prefill_batch_tokens: int     # colocated: the most prompt tokens in one prefill batch
    prefill_chunk_tokens: int     # chunked: the token budget of a step (decode + prompt tokens)
    kv_reserve: str               # what admission reserves of a request's KV (KV_RESERVES)
    kv_watermark: float           # kv_reserve "prompt": share of the KV budget admission leaves free

    def __post_init__(self):
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name == "name":
                if not isinstance(v, str) or not v:
                    raise ValueError("stack name must be a non-empty string")
            elif f.name == "scheduler":
                if v not in SCHEDULERS:
                    raise ValueError(f"stack {self.name}: scheduler must be one of "
                                     f"{', '.join(SCHEDULERS)}, got {v!r}")
            elif f.name == "kv_reserve":
                if v not in KV_RESERVES:
                    raise ValueError(f"stack {self.name}: kv_reserve must be one of "
                                     f"{', '.join(KV_RESERVES)}, got {v!r}")
            elif f.name in ("cuda_graphs", "gqa_shared_kv"):
                if not isinstance(v, bool):
                    raise ValueError(f"stack {self.name}: {f.name} must be true or false, got {v!r}")
            elif f.name in ("graph_max_batch", "prefill_batch_tokens", "prefill_chunk_tokens"):
                if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                    raise ValueError(f"stack {self.name}: {f.name} must be an integer >= 1, got {v!r}")
            else:
                if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or v < 0:
                    raise ValueError(f"stack {self.name}: {f.name} must be a finite number >= 0, got {v!r}")
        if not self.kv_watermark < 1:
            raise ValueError(f"stack {self.name}: kv_watermark must be in [0, 1), got {self.kv_watermark!r}")
        # fractions: [0, 1] for the overlap, (0, 1] for the efficiencies (a zero would divide)
        for name, zero_ok in (("sched_overlap", True), ("attn_bw_efficiency", False),
                              ("fp8_gemv_efficiency_ratio", False)):
            v = getattr(self, name)
            if not ((v >= 0 if zero_ok else v > 0) and v <= 1):
                raise ValueError(f"stack {self.name}: {name} must be in {'[0, 1]' if zero_ok else '(0, 1]'}, "
                                 f"got {v!r}")

    #: the parameters a user may override one by one (``--assume NAME=VALUE``)
    @classmethod
    def numeric_fields(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls)
                     if f.name not in ("name", "scheduler", "cuda_graphs", "gqa_shared_kv", "kv_reserve"))

    def schedules_kv(self, cuts) -> bool:
        """Whether the stack's own KV policy (prompts reserved, pre-emption) schedules a run
        with these cuts: not under whole-output reservation, nor with the dsu cut (the DSU
        reserves whole outputs; docs/system-model.md, "Admission and pre-emption")."""
        return self.kv_reserve == "prompt" and "dsu" not in cuts

    def watermark_tokens(self, kv_capacity_tokens: int) -> int:
        """The KV tokens admission leaves free beside a new request (``kv_watermark`` of the
        budget)."""
        return int(self.kv_watermark * kv_capacity_tokens)

    @property
    def prefill(self) -> str:
        """The prefill mode of the stack's scheduler (a run's default; ``--prefill`` overrides)."""
        return SCHEDULERS[self.scheduler]

    def with_values(self, **changes) -> StackProfile:
        """A copy with some parameters changed (checked like the shipped ones)."""
        cast = {}
        for k, v in changes.items():
            if k in ("graph_max_batch", "prefill_batch_tokens", "prefill_chunk_tokens"):
                if not math.isfinite(float(v)) or float(v) != int(v):
                    raise ValueError(f"stack {self.name}: {k} must be an integer >= 1, got {v!r}")
                v = int(v)
            cast[k] = v
        return replace(self, **cast)

    def layer_gap_s(self, batch: int) -> float:
        """Launch/sync gap per layer of a decode step of ``batch`` requests."""
        graphed = self.cuda_graphs and batch <= self.graph_max_batch
        return self.graph_layer_gap_s + (0.0 if graphed else self.eager_extra_gap_s)

    def allreduce_s(self, tp: int) -> float:
        """Latency of one all-reduce across ``tp`` GPUs (0 for one GPU)."""
        return self.allreduce_latency_s * math.log2(tp) if tp > 1 else 0.0

    def attention_s(self, kv_bytes: float, calls: int, hbm_bandwidth: float, group: int = 1) -> float:
        """Decode attention of one step: ``calls`` kernel calls over ``kv_bytes`` of K/V in all,
        for query groups of ``group`` heads per KV head (a kernel without ``gqa_shared_kv``
        reads the K/V once per query head)."""
        moved = kv_bytes * (1 if self.gqa_shared_kv else group)
        return calls * self.attn_call_s + moved / (hbm_bandwidth * self.attn_bw_efficiency)


@dataclass(frozen=True)
class StackTable:
    """The shipped profiles with each value's source, as stored in :data:`STACKS_FILE`."""

    profiles: dict            # name -> StackProfile
    sources: dict             # name -> {field: source text}
    about: str

    def to_json(self) -> str:
        out = {"about": self.about, "stacks": {}}
        for name, p in self.profiles.items():
            out["stacks"][name] = {f.name: {"value": getattr(p, f.name),
                                            "source": self.sources[name][f.name]}
                                   for f in fields(StackProfile) if f.name != "name"}
        _parse(json.loads(json.dumps(out)), "the table to write")    # never write a bad file
        text = json.dumps(out, indent=2)
        return re.sub(r"\{\s+\"value\": ([^,]+),\s+\"source\": (\"(?:[^\"\\]|\\.)*\")\s+\}",
                      r'{"value": \1, "source": \2}', text) + "\n"

    def save(self, path: str | Path) -> None:
        Path(path).write_text(self.to_json(), encoding="utf-8")


def _parse(raw, label: str) -> StackTable:
    names = [f.name for f in fields(StackProfile) if f.name != "name"]
    profiles, sources = parse_sourced_table(raw, label, "stacks", "stack", names,
                                            lambda name, values: StackProfile(name=name, **values))
    return StackTable(profiles, sources, raw["about"])


def load_stacks(path: str | Path | None = None) -> StackTable:
    """The shipped table (``path=None``) or another copy of the file; a missing or malformed
    file raises :class:`ConfigError` naming the file and the entry."""
    raw, label = read_data_json(STACKS_FILE, path)
    return _parse(raw, label)


def stack_names() -> list[str]:
    return list(load_stacks().profiles)


def get_stack(name: str) -> StackProfile:
    """The shipped profile ``name``; an unknown name raises ``ValueError`` listing the known."""
    table = load_stacks()
    if name not in table.profiles:
        raise ValueError(f"unknown stack {name!r}; choose one of {', '.join(table.profiles)}")
    return table.profiles[name]
