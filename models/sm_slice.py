"""A GPU as a grid of decode tiles: one SM's slice of a GPU as a tile configuration, the
expected-value (memoised) version of the tile timing model for it, and the rule that places a
decode step's attention jobs on the SMs (docs/system-model.md, "The TE term: a grid of
tiles").

**The slice.** Each SM holds one tile: the GPU's ``te_engines_per_sm`` engines of ``lanes``
lanes, the TE design, the K/V format. Its HBM is the SM's share of the GPU's:
``hbm_bandwidth × efficiency / sm_count`` bytes per second, as K/V words per TE cycle
(``HbmModel(rate=)``, a fraction with a denominator of at most 4096), behind the GPU's HBM
latency in TE cycles. The tile's block reader gets enough burst slots to cover that latency
at that rate (Little's law, :func:`slice_outstanding`). Without the ``cdu`` cut the tile has
no CDU (``DecodeTile(cdu=None)``); with it, a CDU owning the SM's share of the L2 the CDU
owns (:func:`slice_cdu`).

**The placement rule.** A step's jobs on one GPU are its requests × the KV heads the GPU
holds, each ``seq_len`` tokens long, the same in every layer. A layer's jobs are cut into
parts of ``S`` tokens, ``S`` the smallest multiple of 16 with ``S × sm_count × m`` at least
the layer's tokens, for ``m`` = 1 to 4 parts per SM (FlashDecoding's split: enough parts to
fill the SMs, none shorter than a KV block); each part is a one-job unit of its SM's tile
(the tile takes a unit's jobs in order). The full parts (with the CDU: the cached
requests' first), then the tails longest first, are dealt to the SMs in snake order (0, 1,
…, n-1, n-1, …, 0, …); of the four ``m``, the one whose slowest SM ends first is used (the
smaller ``m`` on a tie). A layer ends when its slowest SM ends; the imbalance is slowest over
mean. The partial results of a split job are combined outside the tiles (``G × head_dim``
values and ``G`` log-sum-exps per part): not timed.

**The expected-value model** (:class:`SliceTiming`): a unit's cycles ``U(n)`` (one job of
``n`` tokens, ``go`` to ``done`` alone on the tile) are the cycle-stepped model's
(:func:`~.tile_timing.predict_run`), probed once per configuration: every ``n`` up to a
block or two, then (no split) the mean cycles of a further block, ``U`` growing by that much
every block beyond; (split) every part start and the block after it over two passes, ``U``
linear in between and repeating by a pass beyond (with the CDU, linear in whole blocks, a
last partial block costing what the second block costs for as many tokens). A unit after
another on the same tile starts under its tail by an overlap probed on pairs: per tokens in
the previous unit's last block and, where a cached unit follows a streamed one (its first
blocks prefetched under it), per blocks of the next unit. An SM's cycles are ``Σ U(n_i) −
Σ overlaps``. With the CDU (:class:`CduSliceTiming`) each residency hint has its curve, and
a cached unit's blocks still resident from the step before save their HBM time.
tests/test_sm_slice.py checks it against the cycle-stepped model on the slices the tests
run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache

import numpy as np

from .cdu import HINT_OF_RESIDENCY, KV_BLOCK_TOKENS, POLICIES, SlotDesc, StepDesc, default_reserve
from .config import GpuConfig, ModelConfig
from .te import KV_CODE_BITS, te_token_cycles
from .tile_timing import CDU_FE_ENTRIES, TileConfig, cdu_decisions, predict_run

__all__ = ["PARTS_PER_SM", "grid_loads", "grid_layer_cycles", "MAX_RATE_DEN",
           "SLICE_SPLIT_TOKENS", "SLICE_CDU_WAYS", "kv_word_bytes", "slice_rate",
           "slice_outstanding", "slice_split_tokens", "slice_config", "SliceCdu", "slice_cdu",
           "SliceTiming", "CduSliceTiming", "place_parts", "split_length", "slice_timing",
           "cdu_slice_timing", "layer_cycles_stepped"]

#: the HBM model's largest rate denominator (``rtl/tile/behavioural/hbm.py``)
MAX_RATE_DEN = 4096
#: the NVFP4 micro-block: one E4M3 scale byte per 16 codes
NVFP4_BLOCK = 16
#: most burst slots of the block reader (``rtl/tile/block_reader.py``)
MAX_OUTSTANDING = 64
#: the slice's split-K part when one engine cannot keep up with the SM's HBM share: 16
#: blocks, so that a pass of 4 parts (about 1,000 tokens) pays its one HBM latency and its
#: dispatch against some 20,000 cycles of streaming (benchmarks/tile_grid_steps.py)
SLICE_SPLIT_TOKENS = 256


def kv_word_bytes(lanes: int, kv_dtype: str) -> float:
    """HBM bytes of one tile K/V word: ``lanes`` codes (and NVFP4's block scales)."""
    if kv_dtype not in KV_CODE_BITS:
        raise ValueError(f"kv_dtype must be one of {', '.join(KV_CODE_BITS)}, got {kv_dtype!r}")
    scales = lanes / NVFP4_BLOCK if kv_dtype == "nvfp4" else 0
    return lanes * KV_CODE_BITS[kv_dtype] / 8 + scales


def slice_rate(gpu: GpuConfig, lanes: int, kv_dtype: str, efficiency: float) -> tuple:
    """One SM's share of the GPU's HBM bandwidth (× ``efficiency``) in K/V words per TE
    cycle, as ``(beats, cycles)`` with ``cycles <= 4096`` (rounded down: never faster than
    the share). At most one word per cycle (the tile's HBM port)."""
    words = gpu.hbm_bandwidth * efficiency / gpu.sm_count / gpu.te_clock_hz \
        / kv_word_bytes(lanes, kv_dtype)
    if words >= 1:
        return (1, 1)
    f = Fraction(words).limit_denominator(MAX_RATE_DEN)
    if f > words:                                   # round down
        f = Fraction(math.floor(words * MAX_RATE_DEN), MAX_RATE_DEN)
    f = max(f, Fraction(1, MAX_RATE_DEN))
    return (f.numerator, f.denominator)


def slice_outstanding(latency: int, rate: tuple, words_per_read: int) -> int:
    """Burst slots that keep the slice's HBM busy: the reads in flight over the latency at the
    rate (Little's law) and two more, rounded up to a power of two, at most 64."""
    need = math.ceil(latency * rate[0] / rate[1] / words_per_read) + 2
    return min(MAX_OUTSTANDING, 1 << (need - 1).bit_length())


def slice_split_tokens(model: ModelConfig, lanes: int, engine: str, rate: tuple,
                       engines: int) -> int:
    """The slice's split-K: :data:`SLICE_SPLIT_TOKENS` when one engine cannot take K/V as
    fast as the SM's HBM share delivers it (``2·Dk`` words per token in
    ``te_token_cycles``), so that a pass feeds up to ``engines`` parts side by side; else 0
    (no split: one engine keeps up, and a split only adds passes)."""
    dk = model.head_dim // lanes
    one_engine = 2 * dk / te_token_cycles(model.head_dim, model.group_size, lanes, engine)
    return SLICE_SPLIT_TOKENS if engines > 1 and one_engine < rate[0] / rate[1] else 0


def slice_config(gpu: GpuConfig, model: ModelConfig, kv_dtype: str = "bf16",
                 efficiency: float = 1.0, lanes: int = 32, engine: str = "pipelined",
                 max_beats: int = 16, engines: int | None = None) -> TileConfig:
    """The tile of one SM of ``gpu`` running ``model``'s attention (one KV head per job:
    ``num_kv_heads = 1``, one layer), without the CDU, at the SM's HBM share, split-K by
    :func:`slice_split_tokens`; ``engines`` (default: the GPU's per SM) the TE engines, for
    a design that differs from the GPU's."""
    engines = gpu.te_engines_per_sm if engines is None else engines
    rate = slice_rate(gpu, lanes, kv_dtype, efficiency)
    latency = max(1, round(gpu.hbm_latency_s * gpu.te_clock_hz))
    dk = model.head_dim // lanes
    slots = slice_outstanding(latency, rate, 2 * dk)
    split = slice_split_tokens(model, lanes, engine, rate, engines)
    return TileConfig(engines=engines, head_dim=model.head_dim,
                      G=model.group_size, lanes=lanes, num_kv_heads=1, num_layers=1,
                      split_tokens=split, latency=latency, max_beats=max_beats,
                      max_outstanding=slots, hbm_outstanding=slots, hbm_rate=rate,
                      engine=engine, kv_dtype=kv_dtype, l2=False)


#: ways of the slice's CDU (as ``tricut cdu replay`` sizes a CDU)
SLICE_CDU_WAYS = 16


@dataclass(frozen=True)
class SliceCdu:
    """The CDU of one SM's slice: its policy and geometry (:func:`slice_cdu`)."""
    policy: str
    sets: int
    ways: int
    distance: int


def slice_cdu(gpu: GpuConfig, cfg: TileConfig, policy: str, l2_share: float) -> SliceCdu:
    """The CDU of the tile ``cfg`` (:func:`slice_config`) on one SM of ``gpu``: the SM's share
    of the L2 the CDU owns (``l2_share × l2_bytes / sm_count``) in frames of one 16-token
    block of one KV head and layer; :data:`SLICE_CDU_WAYS` ways (fewer if fewer frames fit)
    and the largest power of two of sets that fits; the prefetch distance ``tricut cdu
    replay``'s (the HBM latency in blocks at the slice's rate, + 4), but fewer than the ways
    each set reserves for prefetches per set in flight (``ceil(distance / sets) <
    ways // 8``: beyond, the keep class starves the prefetch stream and every block pays
    the HBM latency), and at least 1."""
    if policy not in POLICIES:
        raise ValueError(f"unknown CDU policy {policy!r}; choose one of {', '.join(POLICIES)}")
    block_bytes = KV_BLOCK_TOKENS * 2 * cfg.dk * kv_word_bytes(cfg.lanes, cfg.kv_dtype)
    frames = int(l2_share * gpu.l2_bytes / gpu.sm_count / block_bytes)
    ways = min(SLICE_CDU_WAYS, frames)
    if ways < 1:
        raise ValueError(f"{gpu.name}: one SM's L2 share holds no KV block of "
                         f"{block_bytes:.0f} bytes")
    sets = 1 << ((frames // ways).bit_length() - 1)
    block_cycles = KV_BLOCK_TOKENS * 2 * cfg.dk * cfg.hbm_rate[1] / cfg.hbm_rate[0]
    want = math.ceil(cfg.latency / block_cycles) + 4
    distance = max(1, min(want, (default_reserve(ways) - 1) * sets))
    return SliceCdu(policy, sets, ways, distance)


def layer_cycles_stepped(cfg: TileConfig, lengths, cdu: SliceCdu | None = None,
                         hint="auto") -> int:
    """The cycle-stepped model's cycles of one layer (the first of one round) whose units (one
    per request, in order) are ``lengths`` tokens long, with the DSU's residency ``hint`` to
    ``cdu`` (the tile with the CDU; ``cfg.l2`` must say so), one for all units or one per
    unit: the reference :class:`SliceTiming` is checked against."""
    if (cdu is not None) != cfg.l2:
        raise ValueError("a tile with the CDU (l2=True) needs its SliceCdu, and only it")
    rounds = [[(i, i, int(n)) for i, n in enumerate(lengths)]]
    decisions = []
    if cdu is not None:
        hints = [hint] * len(lengths) if isinstance(hint, str) else list(hint)
        step = StepDesc(0, tuple(SlotDesc(i, i, int(n), h)
                                 for i, (n, h) in enumerate(zip(lengths, hints))),
                        tuple(range(cfg.num_layers)))
        decisions = cdu_decisions(cdu.policy, cdu.sets, cdu.ways, cdu.distance, [step],
                                  CDU_FE_ENTRIES)
    return predict_run(cfg, rounds, decisions)[(0, 0)]


@lru_cache(maxsize=4096)
def _unit_stepped(cfg: TileConfig, n: int, cdu: SliceCdu | None, hint: str) -> int:
    """One unit alone (:func:`layer_cycles_stepped`), memoised: the curves and the pairs of
    curves probe the same units."""
    return layer_cycles_stepped(cfg, [n], cdu, hint)


#: next-unit lengths (in blocks) the overlap of a streamed unit and a cached one after it is
#: probed for (beyond: the same)
_NEXT_BLOCKS = 16


def _pair_overlaps(cfg: TileConfig, cdu: SliceCdu | None, first: str, then: str,
                   lead: int, next_blocks: int = 1) -> tuple:
    """How much a unit (hint ``then``) starts under the tail of the unit before it (hint
    ``first``), as the cycle-stepped model runs the pair: ``(by_tail, by_next)``,
    ``by_tail[r - 1]`` the overlap after a unit whose last block holds ``r`` tokens (the next
    unit ``lead`` tokens long), ``by_next[k - 1]`` what a next unit of ``k`` blocks changes,
    probed up to ``next_blocks`` (1: not probed; it matters where a cached unit follows a
    streamed one, whose blocks the CDU prefetches under it)."""
    B = KV_BLOCK_TOKENS
    one = lambda n, h: _unit_stepped(cfg, n, cdu, h)                    # noqa: E731
    pair = lambda a, b: layer_cycles_stepped(cfg, [a, b], cdu, [first, then])   # noqa: E731
    tail = one(lead, then)
    by_tail = np.array([one(lead - B + r, first) + tail - pair(lead - B + r, lead)
                        for r in range(1, B + 1)], dtype=np.float64)
    head = one(lead, first) if next_blocks > 1 else 0
    by_next = np.zeros(next_blocks, dtype=np.float64)
    if next_blocks > 1:
        by_next[:] = [head + one(k * B, then) - pair(lead, k * B) - by_tail[-1]
                      for k in range(1, next_blocks + 1)]
    return by_tail, by_next


#: blocks probed before the steady part starts (no split), and the blocks its average is
#: taken over
_LEAD_BLOCKS = 1
_AVERAGE_BLOCKS = 16


def _overlap(by_tail, by_next, prev, n):
    """:func:`_pair_overlaps`' tables (one pair of curves, or one row per pair) at previous
    units of ``prev`` and next units of ``n`` tokens."""
    prev, n = np.asarray(prev, dtype=np.int64), np.asarray(n, dtype=np.int64)
    r = (prev - 1) % KV_BLOCK_TOKENS
    k = np.minimum(-(-n // KV_BLOCK_TOKENS), by_next.shape[-1]) - 1
    if by_tail.ndim == 1:
        return by_tail[r] + by_next[k]
    rows = np.arange(by_tail.shape[0])
    return by_tail[rows, r] + by_next[rows, k]


class SliceTiming:
    """The expected-value tile model of one configuration (module docs): :meth:`unit` and
    :meth:`sm_cycles` from memoised probes of the cycle-stepped model."""

    def __init__(self, cfg: TileConfig, cdu: SliceCdu | None = None, hint: str = "auto"):
        self.cfg, self.cdu, self.hint = cfg, cdu, hint
        self.shape = None
        B = KV_BLOCK_TOKENS
        probe = lambda n: _unit_stepped(cfg, n, cdu, hint)                 # noqa: E731
        if cfg.split_tokens == 0:
            # one job per pass: U grows by the same cycles every block
            self.period = B
            points = list(range(1, (_LEAD_BLOCKS + 1) * B + 1))
            values = [probe(n) for n in points]
            far = probe(points[-1] + _AVERAGE_BLOCKS * B)
            self.per_period = (far - values[-1]) / _AVERAGE_BLOCKS
        else:
            # split parts: U is linear between the first block after each part's start and
            # the next part's start (the parts of a pass are fed side by side; a new pass pays
            # one HBM latency); the first pass is a little cheaper than the later ones, so
            # the probes cover two passes and the start of a third
            P, B16 = cfg.split_tokens, KV_BLOCK_TOKENS
            self.period = cfg.engines * P
            points = list(range(1, B16 + 1))
            for k in range(1, 2 * cfg.engines + 1):
                points += [k * P, k * P + B16]
            if cfg.l2:
                # with the CDU the streamer walks the parts block by block, each block on
                # one engine: U is linear in whole blocks, and a last partial block costs
                # what the second block costs for as many tokens (a staircase where a
                # block's HBM latency shows)
                points += range(B16 + 1, 2 * B16 + 1)
            points = sorted(set(points))
            values = [probe(n) for n in points]
            self.per_period = values[-1] - values[points.index(self.period + B16)]
            if cfg.l2:
                second = np.array(values[B16:2 * B16], dtype=np.float64)
                self.shape = second - second[-1]
        self.points = np.array(points, dtype=np.int64)
        self.values = np.array(values, dtype=np.float64)
        self.window = int(self.points[-1])
        # units on one tile: the next unit's dispatch under the previous one's tail (with the
        # CDU also its first blocks prefetched then: the lead covers the prefetch distance)
        # how much depends on the tokens of the previous unit's last block (its engine time
        # hides the next unit's start): probed for each, the previous unit ``lead - 16 + r``
        self.lead = (_LEAD_BLOCKS if cdu is None else cdu.distance + 2) * B
        self.by_tail, self.by_next = _pair_overlaps(cfg, cdu, hint, hint, self.lead)

    def overlap(self, prev, n):
        """Cycles a unit of ``n`` tokens starts under the tail of one of ``prev`` tokens."""
        return _overlap(self.by_tail, self.by_next, prev, n)

    def unit(self, n):
        """``U(n)``: cycles of one job of ``n`` tokens alone (a float, or an array of them)."""
        n = np.asarray(n, dtype=np.int64)
        if np.any(n < 1):
            raise ValueError("a job has at least one token")
        return self._unit(n)

    def _unit(self, n):
        if self.shape is None:
            return self._interp(n)
        whole = -(-n // KV_BLOCK_TOKENS) * KV_BLOCK_TOKENS
        return self._interp(whole) + self.shape[n - whole + KV_BLOCK_TOKENS - 1]

    def _interp(self, n):
        k = np.maximum(0, -(-(n - self.window) // self.period))   # periods beyond the window
        return np.interp(n - k * self.period, self.points, self.values) + k * self.per_period

    def sm_cycles(self, lengths) -> float:
        """Cycles of one SM whose tile runs one-job units of ``lengths`` tokens in order."""
        lengths = np.asarray(lengths, dtype=np.int64)
        if lengths.size == 0:
            return 0.0
        return float(self.unit(lengths).sum() - self.overlap(lengths[:-1], lengths[1:]).sum())


#: the residency hints by the DSU's bit (``models.cdu.HINT_OF_RESIDENCY``)
_HINTS = HINT_OF_RESIDENCY


class CduSliceTiming:
    """The expected-value model of the tile with the CDU on one SM's slice (module docs): a
    :class:`SliceTiming` per DSU residency hint (``auto``: the CDU prefetches the blocks
    ``distance`` ahead and its policy may keep them; ``stream``: it neither allocates nor
    prefetches, so the streamer waits for each block's HBM read), and the cycles a block
    still resident from the previous step saves: per token, its K/V words at the slice's
    HBM rate less what serving them from L2 takes (one engine's cycles per token, at least
    the L2's word per cycle): :attr:`token_cycles`."""

    def __init__(self, cfg: TileConfig, cdu: SliceCdu):
        if not cfg.l2:
            raise ValueError("CduSliceTiming times the tile with the CDU (l2=True)")
        self.cfg, self.cdu = cfg, cdu
        self.auto = SliceTiming(cfg, cdu, "auto")
        self.stream = SliceTiming(cfg, cdu, "stream")
        served = max(2 * cfg.dk, te_token_cycles(cfg.head_dim, cfg.G, cfg.lanes, cfg.engine))
        self.token_cycles = max(0.0, 2 * cfg.dk * cfg.hbm_rate[1] / cfg.hbm_rate[0] - served)
        # the overlaps of every pair of curves, [previous][next]: 0 streamed, 1 cached (a
        # cached unit after a streamed one has its first blocks prefetched under it)
        B = KV_BLOCK_TOKENS
        lead = (cdu.distance + 2) * B
        self.by_tail = np.empty((2, 2, B), dtype=np.float64)
        self.by_next = np.empty((2, 2, _NEXT_BLOCKS), dtype=np.float64)
        for p in (0, 1):
            for q in (0, 1):
                same = self.auto if p == q == 1 else self.stream if p == q == 0 else None
                if same is not None:
                    self.by_tail[p, q], self.by_next[p, q] = same.by_tail, same.by_next[0]
                else:
                    self.by_tail[p, q], self.by_next[p, q] = _pair_overlaps(
                        cfg, cdu, _HINTS[p], _HINTS[q], lead, _NEXT_BLOCKS if p == 0 else 1)

    def sm_cycles(self, lengths, cached, reuse: float = 0.0) -> float:
        """Cycles of one SM whose tile runs one-job units of ``lengths`` tokens in order,
        ``cached`` per unit (the residency bit), ``reuse`` the share of a cached unit's blocks
        resident from the previous step."""
        lengths = np.asarray(lengths, dtype=np.int64)
        cached = np.asarray(cached, dtype=bool)
        if lengths.size == 0:
            return 0.0
        u = np.where(cached, self.auto.unit(lengths) - reuse * self.token_cycles * lengths,
                     self.stream.unit(lengths))
        c = cached.astype(np.int64)
        ov = _overlap(self.by_tail[c[:-1], c[1:]], self.by_next[c[:-1], c[1:]],
                      lengths[:-1], lengths[1:])
        return float(u.sum() - ov.sum())


#: the placement rule's candidate parts per SM (module docs)
PARTS_PER_SM = (1, 2, 3, 4)
_PARTS = np.array(PARTS_PER_SM, dtype=np.int64)


def split_length(total_tokens: int, sms: int, per_sm: int = 1) -> int:
    """A part length ``S`` of the placement rule: the smallest multiple of 16 with ``S × sms ×
    per_sm >= total_tokens`` (at least 16)."""
    per = -(-int(total_tokens) // (sms * per_sm))
    return max(KV_BLOCK_TOKENS, -(-per // KV_BLOCK_TOKENS) * KV_BLOCK_TOKENS)


def place_parts(lengths, sms: int, S: int | None = None):
    """The parts of jobs of ``lengths`` tokens cut at ``S`` tokens (default
    :func:`split_length`'s one part per SM) and dealt to ``sms`` SMs: ``(S, parts, sm)``,
    every part's tokens (longest first) and its SM (snake order)."""
    lengths = np.asarray(lengths, dtype=np.int64)
    if S is None:
        S = split_length(int(lengths.sum()), sms)
    full = int((lengths // S).sum())
    rest = lengths % S
    parts = np.concatenate([np.full(full, S, dtype=np.int64), np.sort(rest[rest > 0])[::-1]])
    i = np.arange(parts.size)
    rnd, pos = np.divmod(i, sms)
    sm = np.where(rnd % 2 == 0, pos, sms - 1 - pos)
    return S, parts, sm


@lru_cache(maxsize=16)
def slice_timing(cfg: TileConfig) -> SliceTiming:
    """:class:`SliceTiming` of ``cfg``, built once per process."""
    return SliceTiming(cfg)


@lru_cache(maxsize=16)
def cdu_slice_timing(cfg: TileConfig, cdu: SliceCdu) -> CduSliceTiming:
    """:class:`CduSliceTiming` of ``cfg`` with ``cdu``, built once per process."""
    return CduSliceTiming(cfg, cdu)


def _snake_counts(x, sms: int):
    """Per row of ``x``: how many of the units ``0 .. x-1`` each of ``sms`` SMs gets when
    they are dealt in snake order (0, 1, …, n-1, n-1, …, 0, …)."""
    rounds, left = np.divmod(x, sms)
    col = np.arange(sms)[None, :]
    last = np.where(rounds[:, None] % 2 == 0, col < left[:, None], col >= sms - left[:, None])
    return rounds[:, None] + last


def grid_loads(timing, lengths, sms: int, cached=None, reuse: float = 0.0):
    """Every SM's cycles for each part length of :data:`PARTS_PER_SM` (one row each), the
    parts dealt as :func:`place_parts` deals them (full parts first, round by round, then the
    tails longest first), all candidates in one pass of array operations. With a
    :class:`CduSliceTiming`, ``cached`` (per job: the DSU's residency bit) picks each job's
    curve, the cached jobs' full parts are dealt before the streamed ones', and a cached
    job's tokens are cheaper by ``reuse`` (the share of its blocks still resident from the
    previous step) × :attr:`CduSliceTiming.token_cycles`."""
    lengths = np.asarray(lengths, dtype=np.int64)
    n = lengths.size
    if isinstance(timing, CduSliceTiming):
        curves, saving = (timing.stream, timing.auto), reuse * timing.token_cycles
        flag = np.zeros(n, dtype=bool) if cached is None else np.asarray(cached, dtype=bool)
    else:
        curves, saving, flag = (timing, timing), 0.0, np.zeros(n, dtype=bool)
    total = int(lengths.sum())
    per = -(-total // (sms * _PARTS))                         # split_length, vectorised
    S = np.maximum(KV_BLOCK_TOKENS, -(-per // KV_BLOCK_TOKENS) * KV_BLOCK_TOKENS)
    M = S.size
    whole = lengths[None, :] // S[:, None]
    full_cached = (whole * flag[None, :]).sum(axis=1)
    full = whole.sum(axis=1)
    rest = lengths[None, :] % S[:, None]
    order = np.argsort(-rest, axis=1, kind="stable")            # longest first
    tails = np.take_along_axis(rest, order, axis=1)
    tail_cached = flag[order]
    real = tails > 0
    i = full[:, None] + np.arange(n)[None, :]
    rnd, pos = np.divmod(i, sms)
    sm = (np.where(rnd % 2 == 0, pos, sms - 1 - pos) + (np.arange(M) * sms)[:, None])[real]
    t, c = tails[real], tail_cached[real]
    one = curves[0] is curves[1]
    u_s = curves[0]._unit(t)
    u = u_s if one else np.where(c, curves[1]._unit(t) - saving * t, u_s)
    load = np.bincount(sm, weights=u, minlength=M * sms).reshape(M, sms)
    tail_c = np.bincount(sm, weights=c, minlength=M * sms).reshape(M, sms)
    tail_s = np.bincount(sm, minlength=M * sms).reshape(M, sms) - tail_c
    full_c = _snake_counts(full_cached, sms)
    full_s = _snake_counts(full, sms) - full_c
    u_S = curves[0]._unit(S)
    load = load + full_c * ((u_S if one else curves[1]._unit(S)) - saving * S)[:, None] \
        + full_s * u_S[:, None]
    # each unit after the first on an SM starts under its predecessor's tail (the pair's
    # curves, the predecessor's last block, the unit's first blocks); an SM runs its cached
    # full parts, its streamed full parts, then its tails in the order dealt
    if isinstance(timing, CduSliceTiming):
        bt, bn = timing.by_tail, timing.by_next
    else:
        bt = np.broadcast_to(timing.by_tail, (2, 2) + timing.by_tail.shape)
        bn = np.broadcast_to(timing.by_next, (2, 2) + timing.by_next.shape)
    F = KV_BLOCK_TOKENS - 1                                          # a full last block
    kS = np.minimum(-(-S // KV_BLOCK_TOKENS), bn.shape[-1]) - 1       # a full part's blocks
    full_ov = bt[:, :, F][:, :, None] + bn[:, :, kS]              # [prev, next, candidate]
    ov = np.maximum(full_c - 1, 0) * full_ov[1, 1][:, None] \
        + np.maximum(full_s - 1, 0) * full_ov[0, 0][:, None] \
        + ((full_c > 0) & (full_s > 0)) * full_ov[1, 0][:, None]
    order = np.argsort(sm, kind="stable")                         # by SM, as dealt
    sm_o, c_o, t_o = sm[order], c[order].astype(np.int64), t[order]
    after = sm_o[1:] == sm_o[:-1]
    k_o = np.minimum(-(-t_o // KV_BLOCK_TOKENS), bn.shape[-1]) - 1
    pair = bt[c_o[:-1], c_o[1:], (t_o[:-1] - 1) % KV_BLOCK_TOKENS] + bn[c_o[:-1], c_o[1:], k_o[1:]]
    ov_t = np.bincount(sm_o[1:][after], weights=pair[after], minlength=M * sms)
    first = np.ones(sm_o.size, dtype=bool)
    first[1:] = ~after
    sm_f, c_f, k_f = sm_o[first], c_o[first], k_o[first]
    fs, fc = full_s.reshape(-1)[sm_f], full_c.reshape(-1)[sm_f]
    before = np.where(fs > 0, 0, 1)                               # the last full part's curve
    ov_f = np.where(fs + fc > 0, bt[before, c_f, F] + bn[before, c_f, k_f], 0.0)
    ov_t = ov_t + np.bincount(sm_f, weights=ov_f, minlength=M * sms)
    return load - ov - ov_t.reshape(M, sms)


def grid_layer_cycles(timing, lengths, sms: int, cached=None, reuse: float = 0.0) -> tuple:
    """One layer of a step on a grid of ``sms`` tiles: ``(slowest, mean)`` SM cycles, for jobs
    of ``lengths`` tokens placed by the rule (module docs): of the part lengths
    :func:`split_length` gives for :data:`PARTS_PER_SM`, the one whose slowest SM ends first
    (the fewer parts per SM on a tie). ``cached``, ``reuse``: with the CDU
    (:func:`grid_loads`)."""
    lengths = np.asarray(lengths, dtype=np.int64)
    if lengths.size == 0:
        return 0.0, 0.0
    loads = grid_loads(timing, lengths, sms, cached, reuse)
    best = loads[int(np.argmin(loads.max(axis=1)))]
    return float(best.max()), float(best.mean())
