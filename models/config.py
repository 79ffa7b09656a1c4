"""GPU and model configurations: typed records, loaded from TOML files shipped in the package.

A config is named either by its id (``llama-3-8b``, ``h100-sxm5``: a file in
``models/configs/{models,gpus}/``) or by a path to a user's own TOML file. Every field is
checked on load; anything wrong raises :class:`ConfigError` whose message names the file
and the field, and the CLI prints it as one line.
"""

from __future__ import annotations

import dataclasses
import math
import tomllib
from dataclasses import dataclass, fields
from importlib import resources
from pathlib import Path

__all__ = [
    "ConfigError", "ModelConfig", "GpuConfig", "KV_DTYPES", "KV_DTYPE_BITS",
    "load_model", "load_gpu", "model_ids", "gpu_ids", "GPU_LIMITS",
]


class ConfigError(ValueError):
    """A config (or a name of one) is wrong. ``str()`` is a one-line message for the user."""


#: KV-cache element formats and their storage cost in bits per element. NVFP4 stores a
#: 4-bit E2M1 code per element plus one 8-bit E4M3 scale per 16-element micro-block
#: (the FP32 per-tensor scale is negligible): 4 + 8/16 = 4.5 bits.
KV_DTYPE_BITS = {"bf16": 16.0, "fp8": 8.0, "nvfp4": 4.5}
#: the K/V dtypes, declared here only (``models/formats.py`` re-exports them; this module
#: imports no numpy, so the CLI's flag choices cost nothing to load)
KV_DTYPES = tuple(KV_DTYPE_BITS)
WEIGHT_DTYPE_BITS = {"bf16": 16.0, "fp8": 8.0, "nvfp4": 4.5}


@dataclass(frozen=True)
class ModelConfig:
    """A Llama-family decoder (Llama-3, Qwen2): GQA, RoPE, RMSNorm, SwiGLU."""

    name: str
    family: str               # "llama" or "qwen2" (qwen2 = llama + bias on q/k/v projections)
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    ffn_size: int
    vocab_size: int
    rope_theta: float
    rms_norm_eps: float
    qkv_bias: bool
    tie_embeddings: bool
    max_context: int
    weight_dtype: str = "bf16"

    @property
    def group_size(self) -> int:
        """Query heads per KV head (G in the TE docs)."""
        return self.num_heads // self.num_kv_heads

    def param_count(self) -> int:
        """All parameters, the embedding table counted once when tied."""
        h, d = self.hidden_size, self.head_dim
        q, kv = self.num_heads * d, self.num_kv_heads * d
        per_layer = h * q + 2 * h * kv + q * h + 3 * h * self.ffn_size + 2 * h
        if self.qkv_bias:
            per_layer += q + 2 * kv
        embed = self.vocab_size * h
        head = 0 if self.tie_embeddings else self.vocab_size * h
        return self.num_layers * per_layer + embed + head + h

    def weight_bytes_resident(self) -> float:
        return self.param_count() * WEIGHT_DTYPE_BITS[self.weight_dtype] / 8

    def weight_bytes_per_step(self) -> float:
        """Weight bytes streamed from HBM by one decode step: every projection, norm and the
        LM head. The input embedding is a gather of one row per request and is left out
        (unless it is tied to the LM head, which reads all of it)."""
        params = self.param_count()
        if not self.tie_embeddings:
            params -= self.vocab_size * self.hidden_size
        return params * WEIGHT_DTYPE_BITS[self.weight_dtype] / 8

    def kv_bytes_per_token(self, kv_dtype: str) -> float:
        """``2 × layers × kv_heads × head_dim × bytes`` (K and V, every layer)."""
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * kv_dtype_bytes(kv_dtype)


@dataclass(frozen=True)
class GpuConfig:
    """One GPU. Sizes in bytes, bandwidths in bytes/s, clocks in Hz, latencies in seconds."""

    name: str
    sm_count: int
    sm_clock_hz: float
    l1_bytes_per_sm: int
    l2_bytes: int
    hbm_bytes: int
    hbm_bandwidth: float
    l1_latency_s: float
    l2_latency_s: float
    hbm_latency_s: float
    bf16_flops: float         # dense tensor-core peak
    fp8_flops: float
    nvlink_bandwidth: float   # per GPU, one direction
    has_cdu: bool
    # The decode units (our design, not a datasheet's; each toml says why it chose its numbers):
    te_engines_per_sm: int    # TE decode engines per SM
    te_clock_hz: float
    cdu_clock_hz: float       # read only when has_cdu
    dsu_cores: int
    dsu_clock_hz: float


# File keys carry their unit; the loader converts to the SI fields above.
_UNITS = {
    "GiB": 2**30, "MiB": 2**20, "KiB": 2**10, "GB/s": 1e9, "TB/s": 1e12,
    "GHz": 1e9, "ns": 1e-9, "TFLOPS": 1e12,
}
_GPU_KEYS = {  # file key -> (field, type, unit or None)
    "name": ("name", str, None),
    "sm_count": ("sm_count", int, None),
    "sm_clock_ghz": ("sm_clock_hz", float, "GHz"),
    "l1_kib_per_sm": ("l1_bytes_per_sm", int, "KiB"),
    "l2_mib": ("l2_bytes", int, "MiB"),
    "hbm_gib": ("hbm_bytes", int, "GiB"),
    "hbm_bandwidth_tb_s": ("hbm_bandwidth", float, "TB/s"),
    "l1_latency_ns": ("l1_latency_s", float, "ns"),
    "l2_latency_ns": ("l2_latency_s", float, "ns"),
    "hbm_latency_ns": ("hbm_latency_s", float, "ns"),
    "bf16_tflops": ("bf16_flops", float, "TFLOPS"),
    "fp8_tflops": ("fp8_flops", float, "TFLOPS"),
    "nvlink_gb_s": ("nvlink_bandwidth", float, "GB/s"),
    "has_cdu": ("has_cdu", bool, None),
    "te_engines_per_sm": ("te_engines_per_sm", int, None),
    "te_clock_ghz": ("te_clock_hz", float, "GHz"),
    "cdu_clock_ghz": ("cdu_clock_hz", float, "GHz"),
    "dsu_cores": ("dsu_cores", int, None),
    "dsu_clock_ghz": ("dsu_clock_hz", float, "GHz"),
}
_MODEL_KEYS = {f.name: (f.name, f.type, None) for f in fields(ModelConfig)}

#: The range every numeric field must lie in, in the file's own units (inclusive). Beyond it a
#: number is a typo or a unit slip (GB/s typed as TB/s), and the arithmetic downstream would
#: overflow or underflow (a 1e300 TB/s HBM, a 1e-300 GHz clock). docs/system-model.md
#: ("Bad input") lists them.
_GPU_LIMITS = {
    "sm_count": (1, 100_000),
    "sm_clock_ghz": (0.01, 100.0),
    "l1_kib_per_sm": (1, 1 << 20),
    "l2_mib": (1, 1 << 20),
    "hbm_gib": (1, 1 << 20),
    "hbm_bandwidth_tb_s": (0.001, 1000.0),
    "l1_latency_ns": (0.001, 1e6),
    "l2_latency_ns": (0.001, 1e6),
    "hbm_latency_ns": (0.001, 1e6),
    "bf16_tflops": (0.001, 1e6),
    "fp8_tflops": (0.001, 1e6),
    "nvlink_gb_s": (0.001, 1e6),
    "te_engines_per_sm": (1, 1024),
    "te_clock_ghz": (0.01, 100.0),
    "cdu_clock_ghz": (0.01, 100.0),
    "dsu_cores": (1, 1024),
    "dsu_clock_ghz": (0.01, 100.0),
}
#: the public name of the GPU fields' ranges (``--unit`` checks te_engines_per_sm and dsu_cores)
GPU_LIMITS = _GPU_LIMITS
_MODEL_LIMITS = {
    "num_layers": (1, 10_000),
    "hidden_size": (1, 1 << 20),
    "num_heads": (1, 1 << 16),
    "num_kv_heads": (1, 1 << 16),
    "head_dim": (1, 1 << 16),
    "ffn_size": (1, 1 << 22),
    "vocab_size": (1, 1 << 24),
    "rope_theta": (1.0, 1e12),
    "rms_norm_eps": (1e-12, 1.0),
    "max_context": (1, 1 << 24),
}
#: a config's ``name`` is printed in tables and one-line messages
_NAME_MAX = 64
_TYPES = {"str": str, "int": int, "float": float, "bool": bool}
_MODEL_FAMILIES = ("llama", "qwen2")


def kv_dtype_bytes(kv_dtype: str) -> float:
    if kv_dtype not in KV_DTYPE_BITS:
        raise ConfigError(f"unknown KV dtype {kv_dtype!r}; choose one of {', '.join(KV_DTYPES)}")
    return KV_DTYPE_BITS[kv_dtype] / 8


def _config_dir(kind: str):
    return resources.files("tricut.models.configs").joinpath(kind)


def model_ids() -> list[str]:
    return sorted(p.name[:-5] for p in _config_dir("models").iterdir() if p.name.endswith(".toml"))


def gpu_ids() -> list[str]:
    return sorted(p.name[:-5] for p in _config_dir("gpus").iterdir() if p.name.endswith(".toml"))


def _read(kind: str, name_or_path: str | Path, ids: list[str]) -> tuple[str, dict]:
    text_name = str(name_or_path)
    if text_name in ids:
        res = _config_dir(kind).joinpath(text_name + ".toml")
        label = f"{kind}/{text_name}.toml"
        data = res.read_text(encoding="utf-8")
    else:
        path = Path(text_name)
        if path.suffix != ".toml":
            raise ConfigError(
                f"unknown {kind[:-1]} {text_name!r}: not one of {', '.join(ids)}, nor a .toml file")
        label = str(path)
        try:
            data = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise ConfigError(f"{label}: file not found") from None
        except (OSError, UnicodeDecodeError) as e:
            raise ConfigError(f"{label}: cannot read: {e}") from None
    try:
        return label, tomllib.loads(data)
    except ValueError as e:     # TOMLDecodeError, or an integer too long to convert
        raise ConfigError(f"{label}: not valid TOML: {e}") from None


def _show(value) -> str:
    """``repr`` of a value from a file, short: a huge integer by its size (Python refuses to
    print integers of more than 4300 digits), a long string cut."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 10**18:
        return f"an integer of about {int(value.bit_length() * 0.30103) + 1} digits"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _check(label: str, raw: dict, keys: dict, limits: dict) -> dict:
    unknown = sorted(set(raw) - set(keys))
    if unknown:
        raise ConfigError(f"{label}: unknown field {_show(unknown[0])}")
    out = {}
    for key, (field, typ, unit) in keys.items():
        if isinstance(typ, str):
            typ = _TYPES[typ]
        if key not in raw:
            if key == "weight_dtype":
                continue
            raise ConfigError(f"{label}: missing field {key!r}")
        value = raw[key]
        # TOML distinguishes 3 from 3.0; accept an integer where a float is wanted, never a
        # bool where a number is wanted (bool is an int subclass in Python).
        if typ is float and isinstance(value, int) and not isinstance(value, bool):
            try:
                value = float(value)
            except OverflowError:
                value = math.inf        # refused below as out of range
        if not isinstance(value, typ) or (typ is not bool and isinstance(value, bool)):
            raise ConfigError(
                f"{label}: field {key!r}: expected {typ.__name__}, got {type(value).__name__} {_show(value)}")
        if typ in (int, float):
            if not math.isfinite(value) or value <= 0:
                raise ConfigError(f"{label}: field {key!r}: must be a positive number, got {_show(value)}")
            lo, hi = limits[key]
            if not lo <= value <= hi:
                raise ConfigError(f"{label}: field {key!r}: must be between {lo:g} and {hi:g}"
                                  f"{' ' + unit if unit else ''}, got {_show(value)}")
        if typ is str and key == "name" and not (0 < len(value) <= _NAME_MAX and value.isprintable()):
            raise ConfigError(f"{label}: field 'name': expected 1 to {_NAME_MAX} printable characters "
                              f"on one line, got {value[:80]!r}")
        if unit is not None:
            value = value * _UNITS[unit]
            if typ is int:
                value = int(value)
        out[field] = value
    return out


def load_model(name_or_path: str | Path) -> ModelConfig:
    """Load a model config by id (see :func:`model_ids`) or from a TOML file."""
    label, raw = _read("models", name_or_path, model_ids())
    values = _check(label, raw, _MODEL_KEYS, _MODEL_LIMITS)
    if values["family"] not in _MODEL_FAMILIES:
        raise ConfigError(f"{label}: field 'family': expected one of {', '.join(_MODEL_FAMILIES)}, "
                          f"got {_show(values['family'])}")
    if values["num_heads"] % values["num_kv_heads"]:
        raise ConfigError(f"{label}: field 'num_kv_heads': {values['num_kv_heads']} does not divide "
                          f"num_heads = {values['num_heads']}")
    if values["head_dim"] % 2:
        raise ConfigError(f"{label}: field 'head_dim': RoPE needs an even head_dim, got {values['head_dim']}")
    if values.get("weight_dtype", "bf16") not in WEIGHT_DTYPE_BITS:
        raise ConfigError(f"{label}: field 'weight_dtype': expected one of "
                          f"{', '.join(WEIGHT_DTYPE_BITS)}, got {_show(values['weight_dtype'])}")
    return ModelConfig(**values)


def load_gpu(name_or_path: str | Path) -> GpuConfig:
    """Load a GPU config by id (see :func:`gpu_ids`) or from a TOML file."""
    label, raw = _read("gpus", name_or_path, gpu_ids())
    return GpuConfig(**_check(label, raw, _GPU_KEYS, _GPU_LIMITS))


def replace(cfg, **changes):
    """A copy of a config with some fields changed (tests and sweeps)."""
    return dataclasses.replace(cfg, **changes)
