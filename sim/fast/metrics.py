"""Serving metrics, defined once (docs/metrics.md), following vLLM's benchmark definitions.

Input: for every finished request its arrival time and the time each output token was
emitted. Everything else is derived here and nowhere else.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["RequestTimes", "LatencySummary", "summarise", "percentile"]

PERCENTILES = (50, 90, 99)


@dataclass(frozen=True)
class RequestTimes:
    arrival_s: float
    token_times_s: tuple[float, ...]   # emission time of each output token, first one included
    admitted_s: float | None = None    # admission into a decode slot (None: one token, or unknown)
    admission_wait_s: float = 0.0      # arrival -> admitted to be prefilled: the wait for a decode
    #                                    slot and KV before prefill (admission control)

    def __post_init__(self):
        if not self.token_times_s:
            raise ValueError("a finished request has at least one output token")
        if self.token_times_s[0] < self.arrival_s or any(
                b < a for a, b in zip(self.token_times_s, self.token_times_s[1:])):
            raise ValueError("token times must not precede the arrival or each other")
        if self.admitted_s is not None:
            t = self.token_times_s
            if len(t) < 2 or not t[0] <= self.admitted_s <= t[1]:
                raise ValueError("a request is admitted into a decode slot after its first token "
                                 "and before its second (a one-token request never is)")
        if not 0.0 <= self.admission_wait_s <= self.ttft_s:
            raise ValueError("a request's wait for admission before its prefill is within its TTFT")

    @property
    def decode_queue_s(self) -> float | None:
        """The wait for a decode slot (and KV budget): before the prefill (admission control,
        part of the TTFT) plus first token emitted → admission into a slot (which otherwise
        hides in the first inter-token gap); None when not admitted."""
        return None if self.admitted_s is None else \
            self.admission_wait_s + self.admitted_s - self.token_times_s[0]

    @property
    def ttft_s(self) -> float:
        """Time to first token: first token emitted − arrival (queueing and prefill included)."""
        return self.token_times_s[0] - self.arrival_s

    @property
    def e2e_s(self) -> float:
        """End-to-end latency: last token emitted − arrival."""
        return self.token_times_s[-1] - self.arrival_s

    @property
    def tpot_s(self) -> float | None:
        """Time per output token after the first: (e2e − ttft) / (tokens − 1); None for one token."""
        n = len(self.token_times_s)
        return None if n < 2 else (self.token_times_s[-1] - self.token_times_s[0]) / (n - 1)

    @property
    def itls_s(self) -> list[float]:
        """Inter-token latencies: every gap between consecutive tokens of this request."""
        t = self.token_times_s
        return [b - a for a, b in zip(t, t[1:])]


def percentile(values, p: float) -> float:
    """Linear-interpolated percentile (numpy's default, as vLLM uses); NaN for no values."""
    return float(np.percentile(values, p)) if len(values) else float("nan")


@dataclass(frozen=True)
class LatencySummary:
    requests: int
    output_tokens: int
    duration_s: float          # first arrival to last token emitted
    tokens_per_s: float        # output tokens / duration
    requests_per_s: float      # finished requests / duration
    goodput_rps: float         # requests meeting every SLO given / duration
    ttft_mean_s: float
    tpot_mean_s: float
    itl_mean_s: float
    e2e_mean_s: float
    decode_queue_mean_s: float  # the wait for a decode slot: before prefill + first token -> slot
    pct: dict                  # {"ttft_p50_s": ..., "tpot_p99_s": ..., "itl_p90_s": ..., "e2e_p99_s": ...,
                               #  "decode_queue_p99_s": ...}

    def as_dict(self) -> dict:
        out = {k: v for k, v in self.__dict__.items() if k != "pct"}
        out.update(self.pct)
        return out


def summarise(reqs: list[RequestTimes], ttft_slo_s: float | None = None,
              tpot_slo_s: float | None = None) -> LatencySummary:
    """Aggregate metrics over finished requests. TPOT statistics are over requests with at least
    two tokens; ITL statistics over all gaps of all requests; decode-queue statistics over the
    requests with an admission time; goodput counts a request when it
    meets every SLO given (TTFT ≤ ``ttft_slo_s``, TPOT ≤ ``tpot_slo_s``; a one-token request
    meets any TPOT SLO)."""
    if not reqs:
        raise ValueError("no finished requests to summarise")
    start = min(r.arrival_s for r in reqs)
    end = max(r.token_times_s[-1] for r in reqs)
    duration = end - start
    ttft = [r.ttft_s for r in reqs]
    tpot = [r.tpot_s for r in reqs if r.tpot_s is not None]
    itl = [g for r in reqs for g in r.itls_s]
    e2e = [r.e2e_s for r in reqs]
    queue = [r.decode_queue_s for r in reqs if r.decode_queue_s is not None]
    good = sum(1 for r in reqs
               if (ttft_slo_s is None or r.ttft_s <= ttft_slo_s)
               and (tpot_slo_s is None or r.tpot_s is None or r.tpot_s <= tpot_slo_s))
    tokens = sum(len(r.token_times_s) for r in reqs)
    rate = (lambda x: x / duration) if duration > 0 else (lambda x: float("inf"))
    pct = {}
    for name, values in (("ttft", ttft), ("tpot", tpot), ("itl", itl), ("e2e", e2e),
                         ("decode_queue", queue)):
        for p in PERCENTILES:
            pct[f"{name}_p{p}_s"] = percentile(values, p)
    mean = lambda v: float(np.mean(v)) if v else float("nan")  # noqa: E731
    return LatencySummary(
        requests=len(reqs), output_tokens=tokens, duration_s=duration,
        tokens_per_s=rate(tokens), requests_per_s=rate(len(reqs)), goodput_rps=rate(good),
        ttft_mean_s=mean(ttft), tpot_mean_s=mean(tpot), itl_mean_s=mean(itl), e2e_mean_s=mean(e2e),
        decode_queue_mean_s=mean(queue), pct=pct)
