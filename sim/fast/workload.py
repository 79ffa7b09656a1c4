"""Workloads: request arrivals with prompt and output lengths.

Readers for the public serving traces (Mooncake JSONL, Azure LLM inference CSV, Vidur's
processed CSV) and synthetic generators. A malformed line raises :class:`TraceError` whose
message names the file and the line; the CLI prints it as one line.
"""

from __future__ import annotations

import csv
import math
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from tricut.models.jsonl import TraceError, iter_jsonl_objects

__all__ = ["Request", "TraceError", "read_trace", "read_mooncake", "read_azure", "read_vidur",
           "synthetic", "scale_rate", "check_lengths", "arrival_span_s", "TRACE_FORMATS", "MAX_LENGTH",
           "MAX_SIGMA", "TIME_HORIZON_S"]


#: Simulated time is a float64 of seconds from the first arrival. Up to this horizon (about
#: 3.2 years) it resolves 15 ns; far beyond it a millisecond step is lost in rounding (at 1e16 s
#: one unit in the last place is 2 s). Workloads whose arrivals span more are refused.
TIME_HORIZON_S = 1e8


@dataclass(frozen=True)
class Request:
    id: int
    arrival_s: float          # seconds from the start of the workload
    prompt_tokens: int
    output_tokens: int        # tokens to generate, the first one included
    prefix_hashes: tuple[int, ...] = ()   # Mooncake: ids of 512-token prefix blocks


def _short(value) -> str:
    """``repr`` of a value read from a file, short enough for a one-line message."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 10**18:
        return f"an integer of about {int(value.bit_length() * 0.30103) + 1} digits"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _positive_int(value, label: str, field: str, minimum: int = 1) -> int:
    if isinstance(value, bool):
        raise TraceError(f"{label}: {field} must be an integer, got {value!r}")
    if isinstance(value, str):
        try:
            value = int(value.strip())
        except ValueError:
            raise TraceError(f"{label}: {field} must be an integer, got {_short(value)}") from None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int):
        raise TraceError(f"{label}: {field} must be an integer, got {_short(value)}")
    if value < minimum:
        raise TraceError(f"{label}: {field} must be >= {minimum}, got {_short(value)}")
    if value > MAX_LENGTH:
        raise TraceError(f"{label}: {field} must be <= {MAX_LENGTH:,}, got {_short(value)}")
    return value


def _time(value, label: str, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise TraceError(f"{label}: {field} must be a number, got {_short(value)}")
    try:
        t = float(value)
    except OverflowError:
        t = math.inf            # refused below
    except ValueError:
        raise TraceError(f"{label}: {field} must be a number, got {_short(value)}") from None
    if not math.isfinite(t) or t < 0:
        raise TraceError(f"{label}: {field} must be a finite number >= 0, got {_short(value)}")
    return t


def _finish(requests: list[Request], path: Path) -> list[Request]:
    if not requests:
        raise TraceError(f"{path}: no requests in the file")
    requests.sort(key=lambda r: (r.arrival_s, r.id))
    t0 = requests[0].arrival_s
    return [_arriving_at(r, r.arrival_s - t0) for r in requests]


def _arriving_at(r: Request, arrival_s: float) -> Request:
    """``r`` arriving at ``arrival_s``; half the cost of ``dataclasses.replace``, once per
    request of a trace."""
    return Request(r.id, arrival_s, r.prompt_tokens, r.output_tokens, r.prefix_hashes)


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


_AZURE_TIME = re.compile(r"(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2})(?:\.([0-9]{1,9}))?")


def _azure_time(value: str, label: str, field: str) -> float:
    # "2023-11-16 18:17:03.9799600": 7 fractional digits, more than datetime parses. The
    # fraction is digits only (float("0.5e5") would read "03.5e5" as 50,003 s).
    m = _AZURE_TIME.fullmatch(value.strip())
    try:
        if m is None:
            raise ValueError
        t = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S").replace(tzinfo=timezone.utc).timestamp()
        return t + (int(m.group(2)) / 10 ** len(m.group(2)) if m.group(2) else 0.0)
    except ValueError:
        raise TraceError(f"{label}: {field} must be 'YYYY-MM-DD HH:MM:SS[.fffffff]' (a fraction of "
                         f"1 to 9 digits), got {value[:60]!r}") from None


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


#: the longest synthetic length (tokens) and the widest lognormal a generator accepts; every
#: model's max_context is far below (requests beyond it are refused by the setup)
MAX_LENGTH = 10**9
MAX_SIGMA = 10.0


def check_lengths(spec, what: str = "prompt") -> None:
    """A :class:`TraceError` unless ``spec`` is a length form :func:`synthetic` accepts: an int
    in [1, MAX_LENGTH], ``("uniform", lo, hi)`` with ``1 <= lo <= hi <= MAX_LENGTH`` or
    ``("lognormal", median, sigma)`` with a finite median in [1, MAX_LENGTH] and a finite sigma
    in [0, MAX_SIGMA]."""
    if isinstance(spec, (int, np.integer)) and not isinstance(spec, bool):
        if not 1 <= spec <= MAX_LENGTH:
            raise TraceError(f"synthetic {what} length must be >= 1 and <= {MAX_LENGTH:,}, got {spec}")
        return
    if isinstance(spec, tuple) and len(spec) == 3 and spec[0] == "uniform":
        lo, hi = spec[1], spec[2]
        if not all(isinstance(x, (int, np.integer)) and not isinstance(x, bool) for x in (lo, hi)) \
                or not 1 <= lo <= hi <= MAX_LENGTH:
            raise TraceError(f"synthetic {what} uniform bounds need integers 1 <= lo <= hi <= "
                             f"{MAX_LENGTH:,}, got {lo!r}, {hi!r}")
        return
    if isinstance(spec, tuple) and len(spec) == 3 and spec[0] == "lognormal":
        median, sigma = spec[1], spec[2]
        if not all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
                   for x in (median, sigma)) or not 1 <= median <= MAX_LENGTH \
                or not 0 <= sigma <= MAX_SIGMA:
            raise TraceError(f"synthetic {what} lognormal needs a finite median in [1, {MAX_LENGTH:,}] "
                             f"and a finite sigma in [0, {MAX_SIGMA:g}], got {median!r}, {sigma!r}")
        return
    raise TraceError(f"synthetic {what} length: expected an int, ('uniform', lo, hi) or "
                     f"('lognormal', median, sigma), got {spec!r}")


def _lengths(spec, n: int, rng: np.random.Generator, what: str) -> np.ndarray:
    """``spec``: an int (fixed), ``("uniform", lo, hi)``, or ``("lognormal", median, sigma)``."""
    check_lengths(spec, what)
    if not isinstance(spec, tuple):
        return np.full(n, int(spec))
    if spec[0] == "uniform":
        return rng.integers(int(spec[1]), int(spec[2]) + 1, size=n)
    # a wide lognormal's tail is cut at MAX_LENGTH before the cast (no overflow)
    draws = rng.lognormal(math.log(spec[1]), spec[2], size=n)
    return np.clip(np.rint(draws), 1, MAX_LENGTH).astype(int)


def arrival_span_s(requests: list[Request]) -> float:
    """Last arrival − first arrival (0 for no requests)."""
    if not requests:
        return 0.0
    times = [r.arrival_s for r in requests]
    return max(times) - min(times)


def synthetic(n: int, rate: float, prompt=1024, output=128, seed: int = 0) -> list[Request]:
    """``n`` requests with Poisson arrivals at ``rate`` requests/s (``math.inf``: all at t=0).
    A rate whose ``n`` arrivals would span more than :data:`TIME_HORIZON_S` is refused."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise TraceError(f"synthetic request count must be a positive integer, got {n!r}")
    if not (rate > 0):
        raise TraceError(f"synthetic rate must be > 0 requests/s, got {rate!r}")
    if not math.isinf(rate) and (n - 1) / rate > TIME_HORIZON_S:
        raise TraceError(f"synthetic rate {rate:g} requests/s: {n} arrivals would span about "
                         f"{(n - 1) / rate:.3g} s, beyond the simulator's {TIME_HORIZON_S:g} s horizon "
                         f"(float64 time loses its sub-microsecond resolution); raise the rate (--rate)")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise TraceError(f"seed must be an integer >= 0, got {seed!r}")
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
    return [_arriving_at(r, r.arrival_s / factor) for r in requests]
