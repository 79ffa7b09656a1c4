"""Fast reduction of the CDU policy model (``models/cdu.py``) for the system model.

The system model cannot replay every KV block of every step (Llama-3-70B at batch 64 and
10K tokens is ~5 M block operations per step), so it uses this closed form of the policy
model's steady state for the ``full`` access pattern (decode attention reads every block of
every request every step), in the policy model's own units and definitions:

* A request's DSU residency bit chooses its hint (``models.cdu.dsu_hints``): 0 -> ``stream``
  (never allocated: every read misses), 1 -> ``auto`` (the policy decides).
* ``static`` and ``adaptive`` both predict every block of a cached request (``static``
  always; ``adaptive`` because its prefix run is the whole context) and prefetch it
  ``distance`` blocks ahead of the TE into normal frames that the keep class cannot take
  (``CDUCore.effective_class``: each set keeps ``reserve`` ways from it), so every read of
  a cached request **hits** (allocation state: a prefetch hit) and every read of a streamed
  one misses.
* Only a block still resident from the previous step saves its HBM read (**reuse**): the
  keep-class blocks. ``static`` keeps each cached request's sink block and last 128 tokens
  (``1 + 8`` blocks per layer); ``adaptive`` marks every block a candidate and keeps a
  hashed ``budget / candidates`` fraction (``budget = frames − frames/8 − 2·distance``). The
  kept blocks spread over the sets (binomially: ``static`` one Bernoulli(9/sets) draw per
  unit and set, ``adaptive`` the candidates mapped to a set each kept with the hash's share),
  and a set holds at most ``keep_cap = ways − reserve`` of them, so
  ``reuse = sets × E[min(Binomial(n, p), keep_cap)]``.
* A working set no larger than the frames stays resident whole: every read is a reuse hit.
* ``disabled``: nothing is allocated; every read misses.

Valid while the prefetches in flight per set (``ceil(distance / sets)``; about 0.7 for any
H100-class sizing) stay below the ``reserve`` ways (else prefetched blocks evict each other
before use: the constructor refuses such a configuration). :meth:`CduReduction.sized` therefore
reserves ``max(ways // 8, ceil(distance / sets) + 1)`` ways (the block model's default,
``ways // 8``, unless the prefetch stream needs more; h200's 40 sets at distance 41 need 3 of
16), and refuses only a sizing where that leaves no way for the keep class. Warm-up (a request's first two
steps, before its keep blocks are resident) is not modelled.
``tests/test_cdu_reduction.py`` checks hit rate and reuse against the block-level model in
its steady state.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tricut.models.cdu import (KV_BLOCK_TOKENS, POLICIES, STATIC_RECENT_TOKENS, default_reserve,
                               geometry, keep_budget)

__all__ = ["CduStep", "CduReduction", "against_block_model"]


@dataclass(frozen=True)
class CduStep:
    """Block reads of one step over all layers: demand ``accesses``, ``hits`` (allocation
    state, as the CDU counts them), ``reuse`` (hits on blocks resident from the previous
    step: the only ones that save an HBM read) and ``prefetches`` (prefetch operations the
    front end sends to the core, issued or redundant: every predicted block)."""
    accesses: float
    hits: float
    reuse: float
    prefetches: float = 0.0


def _mean_min_binomial(n: int, p: float, cap: int) -> float:
    """E[min(X, cap)] for X ~ Binomial(n, p) = sum over k < cap of P(X > k)."""
    if n <= 0 or p <= 0 or cap <= 0:
        return 0.0
    if p >= 1:
        return float(min(n, cap))
    pmf = (1 - p) ** n
    odds = p / (1 - p)
    cdf, total = 0.0, 0.0
    for k in range(min(cap, n)):
        cdf += pmf
        total += max(0.0, 1.0 - cdf)
        pmf *= (n - k) / (k + 1) * odds
    return total


@dataclass(frozen=True)
class CduReduction:
    policy: str
    sets: int
    ways: int
    distance: int            # prefetch distance, blocks
    layers: int
    reserve: int | None = None

    def __post_init__(self):
        if self.policy not in POLICIES:
            raise ValueError(f"unknown CDU policy {self.policy!r}; choose one of {', '.join(POLICIES)}")
        if self.sets < 1:
            raise ValueError("the CDU's L2 share holds no KV block frame")
        reserve = self.ways - self.keep_cap
        if self.policy != "disabled" and -(-self.distance // self.sets) >= reserve:
            raise ValueError(
                f"the CDU reduction needs fewer prefetches in flight per set "
                f"(ceil(distance {self.distance} / sets {self.sets})) than the ways each set "
                f"keeps for them (reserve {reserve}, of {self.ways} ways); replay this configuration "
                f"block by block with `tricut cdu replay --reserve N`")

    @classmethod
    def sized(cls, policy, l2_share_bytes, block_bytes, hbm_latency_s, hbm_bandwidth, layers,
              ways=16):
        """Sets, ways and prefetch distance as ``tricut cdu replay`` sizes them
        (``models.cdu.geometry``), and the ways each set reserves for the prefetch stream:
        ``max(ways // 8, ceil(distance / sets) + 1)`` when that is below ``ways`` (else the
        default, which the constructor refuses). The block-level replay of the same CDU is
        ``tricut cdu replay --l2-mb L2_SHARE_MIB --reserve N`` (N = :attr:`reserve`, or
        ``ways // 8`` when it is None)."""
        sets, ways, _, distance = geometry(l2_share_bytes, block_bytes, hbm_latency_s,
                                           hbm_bandwidth, ways)
        ways = max(ways, 1)
        reserve = max(default_reserve(ways), -(-distance // sets) + 1) if sets else default_reserve(ways)
        return cls(policy, sets, ways, distance, layers,
                   reserve if default_reserve(ways) < reserve < ways else None)

    @property
    def frames(self) -> int:
        return self.sets * self.ways

    @property
    def keep_cap(self) -> int:
        return self.ways - (default_reserve(self.ways) if self.reserve is None else self.reserve)

    @property
    def keep_budget(self) -> int:
        return keep_budget(self.frames, self.distance)

    def step(self, seq_lens, residency) -> CduStep:
        """``seq_lens`` include this step's token (the blocks the TE reads); ``residency`` is
        each request's DSU residency bit."""
        blocks = [-(-n // KV_BLOCK_TOKENS) for n in seq_lens]
        accesses = float(sum(blocks) * self.layers)
        if self.policy == "disabled":
            return CduStep(accesses, 0.0, 0.0)
        cached = [b for b, r in zip(blocks, residency) if r]
        hits = float(sum(cached) * self.layers)
        if not cached:
            return CduStep(accesses, 0.0, 0.0)
        if hits <= self.frames:
            return CduStep(accesses, hits, hits, hits)   # the working set fits: nothing is evicted
        if self.policy == "static":
            # each unit (request, layer) keeps 1 + 8 blocks in as many sets: per set, one
            # Bernoulli(9 / sets) draw per unit
            rb = -(-STATIC_RECENT_TOKENS // KV_BLOCK_TOKENS)
            units = len(cached) * self.layers
            kept = float(sum(min(b, 1 + rb) for b in cached) * self.layers)
            n, p = units, min(1.0, kept / units / self.sets)
        else:
            # every block is a candidate; the predictor keeps those whose 10-bit hash h has
            # h·candidates < 1024·budget: per set, the candidates mapped there, each kept
            # with that share
            share = 1.0 if hits <= self.keep_budget else \
                math.ceil(1024 * self.keep_budget / hits) / 1024
            n, p = round(hits / self.sets), share
        reuse = min(n * p * self.sets, self.sets * _mean_min_binomial(n, p, self.keep_cap))
        return CduStep(accesses, hits, reuse, hits)


def against_block_model(contexts, red: CduReduction, engine="fast", steps=5, warm=3, reserve=None):
    """Steady state of the block-level policy model (``golden``: ``models/cdu.py``; ``fast``:
    its exact twin ``sim/fast/cdu_twin.py``) against this reduction, for requests of
    ``contexts[i] + t + 1`` tokens at step t with the DSU's hints, reading every block: the
    counters of steps ``warm .. steps-1``; the block model reserves ``reserve`` ways (default:
    the reduction's). Returns (hit rate, reduced hit rate, HBM block reads
    per access, reduced HBM block reads per access); raises AssertionError if the demand reads
    differ or the prefetch operations (the CDU's work) differ by more than 1 % of them."""
    from tricut.models.cdu import Pattern, SlotDesc, StepDesc, dsu_hints, run
    from tricut.sim.fast.cdu_twin import run_fast

    hints = dsu_hints([c + 1 for c in contexts])
    pattern = Pattern("full")

    def demand(st, sd, layer):
        return pattern.blocks(st.step, sd.request, layer, sd.seq_len)

    def counters(n):
        descs = [StepDesc(t, tuple(SlotDesc(i, i, c + t + 1, h)
                                   for i, (c, h) in enumerate(zip(contexts, hints))),
                          tuple(range(red.layers))) for t in range(n)]
        kw = dict(distance=red.distance, latency=red.distance - 4,
                  reserve=red.reserve if reserve is None else reserve)
        if engine == "golden":
            return run(descs, demand, red.policy, red.sets, red.ways, keep_txns=False, **kw).counters()
        return run_fast(descs, demand, red.policy, red.sets, red.ways, pattern=pattern, **kw)

    end, start = counters(steps), counters(warm)
    got = {k: end[k] - start[k] for k in ("accesses", "hits", "misses", "prefetch_issued",
                                           "prefetch_requests")}
    want = [red.step([c + t + 1 for c in contexts], [h == "auto" for h in hints])
            for t in range(warm, steps)]
    acc = got["accesses"]
    if acc != sum(x.accesses for x in want):
        raise AssertionError("the reduction counts different demand reads than the block model")
    if abs(got["prefetch_requests"] - sum(x.prefetches for x in want)) > 0.01 * acc:
        raise AssertionError(f"prefetch operations: block model {got['prefetch_requests']}, "
                             f"reduction {sum(x.prefetches for x in want)}")
    return (got["hits"] / acc, sum(x.hits for x in want) / acc,
            (got["misses"] + got["prefetch_issued"]) / acc, 1 - sum(x.reuse for x in want) / acc)
