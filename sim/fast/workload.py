"""Workloads: request arrivals with prompt and output lengths.

Readers for the public serving traces (Mooncake JSONL, Azure LLM inference CSV, Vidur's
processed CSV) and synthetic generators. A malformed line raises :class:`TraceError` whose
message names the file and the line; the CLI prints it as one line.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from tricut.models.jsonl import TraceError, iter_jsonl_objects

__all__ = ["Request", "TraceError", "read_trace", "read_mooncake", "read_azure", "read_vidur",
           "synthetic", "scale_rate", "TRACE_FORMATS"]


@dataclass(frozen=True)
class Request:
    id: int
    arrival_s: float          # seconds from the start of the workload
    prompt_tokens: int
    output_tokens: int        # tokens to generate, the first one included
    prefix_hashes: tuple[int, ...] = ()   # Mooncake: ids of 512-token prefix blocks


def _positive_int(value, label: str, field: str, minimum: int = 1) -> int:
    if isinstance(value, bool):
        raise TraceError(f"{label}: {field} must be an integer, got {value!r}")
    if isinstance(value, str):
        try:
            value = int(value.strip())
        except ValueError:
            raise TraceError(f"{label}: {field} must be an integer, got {value!r}") from None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int):
        raise TraceError(f"{label}: {field} must be an integer, got {value!r}")
    if value < minimum:
        raise TraceError(f"{label}: {field} must be >= {minimum}, got {value}")
    return value


def _time(value, label: str, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise TraceError(f"{label}: {field} must be a number, got {value!r}")
    try:
        t = float(value)
    except ValueError:
        raise TraceError(f"{label}: {field} must be a number, got {value!r}") from None
    if not math.isfinite(t) or t < 0:
        raise TraceError(f"{label}: {field} must be a finite number >= 0, got {value!r}")
    return t


def _finish(requests: list[Request], path: Path) -> list[Request]:
    if not requests:
        raise TraceError(f"{path}: no requests in the file")
    requests.sort(key=lambda r: (r.arrival_s, r.id))
    t0 = requests[0].arrival_s
    return [replace(r, arrival_s=r.arrival_s - t0) for r in requests]


def _open(path: Path):
    try:
        return path.open("r", encoding="utf-8", newline="")
    except FileNotFoundError:
        raise TraceError(f"{path}: file not found") from None
    except OSError as e:
        raise TraceError(f"{path}: cannot read: {e.strerror}") from None


def read_mooncake(path: str | Path) -> list[Request]:
    """Mooncake JSONL: ``timestamp`` (ms), ``input_length``, ``output_length``, ``hash_ids``."""
    path = Path(path)
    out = []
    for label, row in iter_jsonl_objects(path, TraceError):
        for key in ("timestamp", "input_length", "output_length"):
            if key not in row:
                raise TraceError(f"{label}: missing field {key!r}")
        hashes = row.get("hash_ids", [])
        if not isinstance(hashes, list) or not all(
                isinstance(h, int) and not isinstance(h, bool) for h in hashes):
            raise TraceError(f"{label}: hash_ids must be a list of integers")
        out.append(Request(
            id=len(out), arrival_s=_time(row["timestamp"], label, "timestamp") / 1e3,
            prompt_tokens=_positive_int(row["input_length"], label, "input_length"),
            output_tokens=_positive_int(row["output_length"], label, "output_length"),
            prefix_hashes=tuple(hashes)))
    return _finish(out, path)


def _read_csv(path: Path, columns: tuple[str, str, str], parse_time) -> list[Request]:
    out = []
    with _open(path) as f:
        try:
            reader = csv.DictReader(f)
            header = reader.fieldnames or []
            missing = [c for c in columns if c not in header]
            if missing:
                raise TraceError(f"{path}:1: header lacks column {missing[0]!r} "
                                 f"(expected {', '.join(columns)})")
            t_col, p_col, o_col = columns
            for row in reader:
                label = f"{path}:{reader.line_num}"
                if None in row or any(row[c] is None for c in columns):
                    raise TraceError(f"{label}: expected {len(header)} columns")
                out.append(Request(
                    id=len(out), arrival_s=parse_time(row[t_col], label, t_col),
                    prompt_tokens=_positive_int(row[p_col], label, p_col),
                    output_tokens=_positive_int(row[o_col], label, o_col)))
        except UnicodeDecodeError:
            raise TraceError(f"{path}: not UTF-8 text") from None
        except csv.Error as e:
            raise TraceError(f"{path}: not valid CSV ({e})") from None
    return _finish(out, path)


def _azure_time(value: str, label: str, field: str) -> float:
    # "2023-11-16 18:17:03.9799600": 7 fractional digits, more than datetime parses.
    whole, _, frac = value.strip().partition(".")
    try:
        t = datetime.strptime(whole, "%Y-%m-%d %H:%M:%S").replace(tzinfo=timezone.utc).timestamp()
        return t + (float("0." + frac) if frac else 0.0)
    except ValueError:
        raise TraceError(f"{label}: {field} must be 'YYYY-MM-DD HH:MM:SS[.fff]', got {value!r}") from None


def read_azure(path: str | Path) -> list[Request]:
    """Azure LLM inference trace CSV: ``TIMESTAMP``, ``ContextTokens``, ``GeneratedTokens``."""
    return _read_csv(Path(path), ("TIMESTAMP", "ContextTokens", "GeneratedTokens"), _azure_time)


def read_vidur(path: str | Path) -> list[Request]:
    """Vidur's processed trace CSV: ``arrived_at`` (s), ``num_prefill_tokens``, ``num_decode_tokens``."""
    return _read_csv(Path(path), ("arrived_at", "num_prefill_tokens", "num_decode_tokens"), _time)


TRACE_FORMATS = {"mooncake": read_mooncake, "azure": read_azure, "vidur": read_vidur}


def read_trace(path: str | Path, fmt: str | None = None) -> list[Request]:
    """Read a trace; the format is taken from ``fmt`` or guessed from the file (``.jsonl`` is
    Mooncake; a CSV by its header)."""
    path = Path(path)
    if fmt is None:
        if path.suffix == ".jsonl":
            fmt = "mooncake"
        else:
            with _open(path) as f:
                try:
                    head = f.readline()
                except UnicodeDecodeError:
                    raise TraceError(f"{path}: not UTF-8 text") from None
            fmt = "azure" if "ContextTokens" in head else "vidur" if "arrived_at" in head else None
            if fmt is None:
                raise TraceError(f"{path}: unknown trace format (expected Mooncake .jsonl, or a CSV "
                                 "with an Azure or Vidur header)")
    if fmt not in TRACE_FORMATS:
        raise TraceError(f"unknown trace format {fmt!r}; choose one of {', '.join(TRACE_FORMATS)}")
    return TRACE_FORMATS[fmt](path)


def _lengths(spec, n: int, rng: np.random.Generator, what: str) -> np.ndarray:
    """``spec``: an int (fixed), ``("uniform", lo, hi)``, or ``("lognormal", median, sigma)``."""
    if isinstance(spec, (int, np.integer)) and not isinstance(spec, bool):
        if spec < 1:
            raise TraceError(f"synthetic {what} length must be >= 1, got {spec}")
        return np.full(n, int(spec))
    if isinstance(spec, tuple) and len(spec) == 3 and spec[0] == "uniform":
        lo, hi = int(spec[1]), int(spec[2])
        if not 1 <= lo <= hi:
            raise TraceError(f"synthetic {what} uniform bounds need 1 <= lo <= hi, got {lo}, {hi}")
        return rng.integers(lo, hi + 1, size=n)
    if isinstance(spec, tuple) and len(spec) == 3 and spec[0] == "lognormal":
        median, sigma = float(spec[1]), float(spec[2])
        if median < 1 or sigma < 0:
            raise TraceError(f"synthetic {what} lognormal needs median >= 1, sigma >= 0")
        return np.maximum(1, np.rint(rng.lognormal(math.log(median), sigma, size=n))).astype(int)
    raise TraceError(f"synthetic {what} length: expected an int, ('uniform', lo, hi) or "
                     f"('lognormal', median, sigma), got {spec!r}")


def synthetic(n: int, rate: float, prompt=1024, output=128, seed: int = 0) -> list[Request]:
    """``n`` requests with Poisson arrivals at ``rate`` requests/s (``math.inf``: all at t=0)."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise TraceError(f"synthetic request count must be a positive integer, got {n!r}")
    if not (rate > 0):
        raise TraceError(f"synthetic rate must be > 0 requests/s, got {rate!r}")
    rng = np.random.default_rng(seed)
    arrivals = (np.zeros(n) if math.isinf(rate)
                else np.concatenate([[0.0], np.cumsum(rng.exponential(1.0 / rate, size=n - 1))]))
    prompts = _lengths(prompt, n, rng, "prompt")
    outputs = _lengths(output, n, rng, "output")
    return [Request(i, float(arrivals[i]), int(prompts[i]), int(outputs[i])) for i in range(n)]


def scale_rate(requests: list[Request], factor: float) -> list[Request]:
    """Arrivals ``factor`` times as fast (inter-arrival gaps divided by ``factor``)."""
    if not (factor > 0) or math.isinf(factor):
        raise TraceError(f"rate scale must be a finite number > 0, got {factor!r}")
    return [replace(r, arrival_s=r.arrival_s / factor) for r in requests]
