"""A GPU as a grid of decode tiles: one SM's slice of a GPU as a tile configuration, the
expected-value (memoised) version of the tile timing model for it, and the rule that places a
decode step's attention jobs on the SMs (docs/system-model.md, "The TE term: a grid of
tiles").

**The slice.** Each SM holds one tile without the CDU (``DecodeTile(cdu=None)``): the GPU's
``te_engines_per_sm`` engines of ``lanes`` lanes, the TE design, the K/V format. Its HBM is
the SM's share of the GPU's: ``hbm_bandwidth × efficiency / sm_count`` bytes per second, as
K/V words per TE cycle (``HbmModel(rate=)``, a fraction with a denominator of at most
4096), behind the GPU's HBM latency in TE cycles. The tile's block reader gets enough burst
slots to cover that latency at that rate (Little's law, :func:`slice_outstanding`).

**The placement rule.** A step's jobs on one GPU are its requests × the KV heads the GPU
holds, each ``seq_len`` tokens long, the same in every layer. A layer's jobs are cut into
parts of ``S`` tokens, ``S`` the smallest multiple of 16 with ``S × sm_count × m`` at least
the layer's tokens, for ``m`` = 1 to 4 parts per SM (FlashDecoding's split: enough parts to
fill the SMs, none shorter than a KV block); each part is a one-job unit of its SM's tile
(the tile takes a unit's jobs in order). The parts, longest first, are dealt to the SMs in
snake order (0, 1, …, n-1, n-1, …, 0, …); of the four ``m``, the one whose slowest SM ends
first is used (the smaller ``m`` on a tie). A layer ends when its slowest SM ends; the imbalance is slowest over mean. The
partial results of a split job are combined outside the tiles (``G × head_dim`` values and
``G`` log-sum-exps per part): not timed.

**The expected-value model** (:class:`SliceTiming`): a unit's cycles ``U(n)`` (one job of
``n`` tokens, ``go`` to ``done`` alone on the tile) are the cycle-stepped model's
(:func:`~.tile_timing.predict_run`), probed once per configuration for every ``n`` up to a
few blocks; beyond, ``U`` grows by the same cycles every block (the streamer reads each
16-token block and waits for its answers before the next, so each block starts from the same
state, up to the phase of the HBM's rate credit: the mean over 16 blocks is used). Units on
one tile follow each other with a constant overlap (the next unit's dispatch under the
previous one's tail), also probed. So an SM's cycles are ``sum U(n_i) - overlap × (units -
1)``: the cycle-stepped model's within a few cycles per SM (tests/test_sm_slice.py checks it
within 1e-4 on the slices the tests run, exactly where the rate is ``1/k``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache

import numpy as np

from .config import GpuConfig, ModelConfig
from .te import KV_CODE_BITS, te_token_cycles
from .tile_timing import BLOCK_TOKENS, TileConfig, predict_run

__all__ = ["PARTS_PER_SM", "grid_loads", "grid_layer_cycles", "MAX_RATE_DEN", "SLICE_SPLIT_TOKENS", "kv_word_bytes", "slice_rate", "slice_outstanding",
           "slice_split_tokens", "slice_config",
           "SliceTiming", "place_parts", "split_length"]

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
                 max_beats: int = 16) -> TileConfig:
    """The tile of one SM of ``gpu`` running ``model``'s attention (one KV head per job:
    ``num_kv_heads = 1``, one layer), without the CDU, at the SM's HBM share, split-K by
    :func:`slice_split_tokens`."""
    rate = slice_rate(gpu, lanes, kv_dtype, efficiency)
    latency = max(1, round(gpu.hbm_latency_s * gpu.te_clock_hz))
    dk = model.head_dim // lanes
    slots = slice_outstanding(latency, rate, 2 * dk)
    split = slice_split_tokens(model, lanes, engine, rate, gpu.te_engines_per_sm)
    return TileConfig(engines=gpu.te_engines_per_sm, head_dim=model.head_dim,
                      G=model.group_size, lanes=lanes, num_kv_heads=1, num_layers=1,
                      split_tokens=split, latency=latency, max_beats=max_beats,
                      max_outstanding=slots, hbm_outstanding=slots, hbm_rate=rate,
                      engine=engine, kv_dtype=kv_dtype, l2=False)


def layer_cycles_stepped(cfg: TileConfig, lengths) -> int:
    """The cycle-stepped model's cycles of one layer (the first of one round) whose units (one
    per request, in order) are ``lengths`` tokens long: the reference :class:`SliceTiming` is
    checked against."""
    rounds = [[(i, i, int(n)) for i, n in enumerate(lengths)]]
    return predict_run(cfg, rounds, [])[(0, 0)]


#: blocks probed before the steady part starts (no split), and the blocks its average is
#: taken over
_LEAD_BLOCKS = 1
_AVERAGE_BLOCKS = 16


class SliceTiming:
    """The expected-value tile model of one configuration (module docs): :meth:`unit` and
    :meth:`sm_cycles` from memoised probes of the cycle-stepped model."""

    def __init__(self, cfg: TileConfig):
        if cfg.l2:
            raise ValueError("SliceTiming times the tile without the CDU (l2=False)")
        self.cfg = cfg
        B = BLOCK_TOKENS
        probe = lambda n: layer_cycles_stepped(cfg, [n])        # noqa: E731
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
            P, B16 = cfg.split_tokens, BLOCK_TOKENS
            self.period = cfg.engines * P
            points = list(range(1, B16 + 1))
            for k in range(1, 2 * cfg.engines + 1):
                points += [k * P, k * P + B16]
            values = [probe(n) for n in points]
            self.per_period = values[-1] - values[points.index(self.period + B16)]
        self.points = np.array(points, dtype=np.int64)
        self.values = np.array(values, dtype=np.float64)
        self.window = int(self.points[-1])
        lead = _LEAD_BLOCKS * B
        self.overlap = 2 * probe(lead) - layer_cycles_stepped(cfg, [lead, lead])
        self._memo = {}

    def unit(self, n):
        """``U(n)``: cycles of one job of ``n`` tokens alone (a float, or an array of them)."""
        n = np.asarray(n, dtype=np.int64)
        if np.any(n < 1):
            raise ValueError("a job has at least one token")
        return self._unit(n)

    def _unit(self, n):
        k = np.maximum(0, -(-(n - self.window) // self.period))   # periods beyond the window
        return np.interp(n - k * self.period, self.points, self.values) + k * self.per_period

    def _unit_of(self, n: int) -> float:
        """``U(n)`` of one length, memoised (the placement rule's full parts)."""
        u = self._memo.get(n)
        if u is None:
            u = self._memo[n] = float(self._unit(np.array([n], dtype=np.int64))[0])
        return u

    def sm_cycles(self, lengths) -> float:
        """Cycles of one SM whose tile runs one-job units of ``lengths`` tokens in order."""
        lengths = np.asarray(lengths, dtype=np.int64)
        if lengths.size == 0:
            return 0.0
        return float(self.unit(lengths).sum() - self.overlap * (lengths.size - 1))


#: the placement rule's candidate parts per SM (module docs)
PARTS_PER_SM = (1, 2, 3, 4)
_PARTS = np.array(PARTS_PER_SM, dtype=np.int64)


def split_length(total_tokens: int, sms: int, per_sm: int = 1) -> int:
    """A part length ``S`` of the placement rule: the smallest multiple of 16 with ``S × sms ×
    per_sm >= total_tokens`` (at least 16)."""
    per = -(-int(total_tokens) // (sms * per_sm))
    return max(BLOCK_TOKENS, -(-per // BLOCK_TOKENS) * BLOCK_TOKENS)


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


def grid_loads(timing: SliceTiming, lengths, sms: int):
    """Every SM's cycles for each part length of :data:`PARTS_PER_SM` (one row each), the
    parts dealt as :func:`place_parts` deals them (full parts first, round by round, then the
    tails longest first), all candidates in one pass of array operations."""
    lengths = np.asarray(lengths, dtype=np.int64)
    total = int(lengths.sum())
    per = -(-total // (sms * _PARTS))                         # split_length, vectorised
    S = np.maximum(BLOCK_TOKENS, -(-per // BLOCK_TOKENS) * BLOCK_TOKENS)
    M = S.size
    full = (lengths[None, :] // S[:, None]).sum(axis=1)
    tails = -np.sort(-(lengths[None, :] % S[:, None]), axis=1)     # longest first, 0 = none
    real = tails > 0
    i = full[:, None] + np.arange(lengths.size)[None, :]
    rnd, pos = np.divmod(i, sms)
    sm = np.where(rnd % 2 == 0, pos, sms - 1 - pos) + (np.arange(M) * sms)[:, None]
    flat = sm[real]
    u = timing._unit(np.concatenate([S, tails[real]]))
    load = np.bincount(flat, weights=u[M:], minlength=M * sms)
    units = np.bincount(flat, minlength=M * sms).reshape(M, sms)
    rounds, left = np.divmod(full, sms)
    col = np.arange(sms)[None, :]
    last = np.where(rounds[:, None] % 2 == 0, col < left[:, None], col >= sms - left[:, None])
    units_full = rounds[:, None] + last
    load = load.reshape(M, sms) + units_full * u[:M, None]
    units = units + units_full
    return load - timing.overlap * np.maximum(units - 1, 0)


def grid_layer_cycles(timing: SliceTiming, lengths, sms: int) -> tuple:
    """One layer of a step on a grid of ``sms`` tiles: ``(slowest, mean)`` SM cycles, for jobs
    of ``lengths`` tokens placed by the rule (module docs): of the part lengths
    :func:`split_length` gives for :data:`PARTS_PER_SM`, the one whose slowest SM ends first
    (the fewer parts per SM on a tie)."""
    lengths = np.asarray(lengths, dtype=np.int64)
    if lengths.size == 0:
        return 0.0, 0.0
    loads = grid_loads(timing, lengths, sms)
    best = loads[int(np.argmin(loads.max(axis=1)))]
    return float(best.max()), float(best.mean())
