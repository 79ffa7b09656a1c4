"""Decode roofline: the bandwidth floor of one decode step and what it implies.

Decode reads every weight once per step and every cached K/V byte of every request in the
batch once per step, so no step can be faster than ``(weight bytes + KV bytes read) / HBM
bandwidth``. With tensor parallelism over ``tp`` GPUs each GPU reads ``1/tp`` of both.
``tp`` must divide the query heads; with more GPUs than KV heads the KV heads are replicated
(``tp`` a multiple of them), else ``tp`` must divide them. A batch whose KV does not fit beside
the weights is reported (``batch_fits``): its ceiling cannot be reached.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from .config import ConfigError, GpuConfig, ModelConfig

__all__ = ["Roofline", "roofline"]


@dataclass(frozen=True)
class Roofline:
    model: str
    gpu: str
    kv_dtype: str
    context: int
    batch: int
    tp: int
    weight_bytes: float         # weights streamed per decode step, per GPU
    kv_bytes_per_token: float   # 2 x layers x kv_heads x head_dim x bytes (whole model)
    kv_bytes_per_step: float    # KV read by one step, per GPU: batch x context x per-token / tp
    step_floor_s: float         # (weight_bytes + kv_bytes_per_step) / HBM bandwidth
    tokens_per_s_ceiling: float         # batch / step_floor_s: all requests of the batch
    request_tokens_per_s_ceiling: float  # 1 / step_floor_s: what one request sees
    kv_tokens_fit: int          # tokens of KV that fit beside the resident weights, all GPUs
    weights_fit: bool
    kv_tokens_needed: int       # batch x context: the KV this batch holds, all GPUs
    batch_fits: bool            # kv_tokens_needed <= kv_tokens_fit: else the ceiling is not reachable
    max_batch_fit: int          # floor(kv_tokens_fit / context): requests of this context that fit

    def as_dict(self) -> dict:
        return asdict(self)


def roofline(model: ModelConfig, gpu: GpuConfig, kv_dtype: str, context: int, batch: int,
             tp: int = 1) -> Roofline:
    """The decode roofline for ``batch`` requests each holding ``context`` tokens of KV."""
    for name, value in (("context", context), ("batch", batch), ("tp", tp)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"{name} must be a positive integer, got {value!r}")
    if context > model.max_context:
        raise ConfigError(f"context {context} exceeds {model.name}'s max_context {model.max_context}")
    if model.num_heads % tp:
        raise ConfigError(f"tp {tp} must divide {model.name}'s num_heads {model.num_heads} "
                          "(each GPU computes whole query heads)")
    if model.num_kv_heads % tp and tp % model.num_kv_heads:
        raise ConfigError(f"tp {tp} must divide or be a multiple of {model.name}'s "
                          f"num_kv_heads {model.num_kv_heads}")
    kv_per_token = model.kv_bytes_per_token(kv_dtype)
    # With tp > kv_heads, KV heads are replicated: each GPU still holds at least one head.
    kv_share = max(1.0 / tp, 1.0 / model.num_kv_heads)
    weight_bytes = model.weight_bytes_per_step() / tp
    kv_step = batch * context * kv_per_token * kv_share
    floor = (weight_bytes + kv_step) / gpu.hbm_bandwidth
    free = gpu.hbm_bytes - model.weight_bytes_resident() / tp
    fit = max(0, math.floor(free / (kv_per_token * kv_share)))
    return Roofline(
        model=model.name, gpu=gpu.name, kv_dtype=kv_dtype, context=context, batch=batch, tp=tp,
        weight_bytes=weight_bytes, kv_bytes_per_token=kv_per_token, kv_bytes_per_step=kv_step,
        step_floor_s=floor, tokens_per_s_ceiling=batch / floor,
        request_tokens_per_s_ceiling=1.0 / floor, kv_tokens_fit=fit, weights_fit=free > 0,
        kv_tokens_needed=batch * context, batch_fits=batch * context <= fit,
        max_batch_fit=fit // context,
    )
