"""The timing model of the decode tile's attention path: cycles per layer and per step of the
tile's configuration (engines, lanes, HBM latency and burst, the CDU's decisions), from the
mechanisms of the RTL, for the integration calibration (docs/tile/timing.md, "Integration
calibration"; ``benchmarks/tile_calibration.py``).

**HBM-only tile** (``AttentionTile``: KV streamer, TE array in serial mode). The streamer takes
a job in the cycle after the previous job's last ``kv`` beat and issues the job's block reads
at once; the array dispatches it when its engine is idle (job beat, ``G*Dk`` q beats), then
the engine takes its ``n * 2*Dk`` K/V beats at its own pace (one token per ``3*G*Dk``
cycles), so the input phases are serial and an engine's output overlaps the next job's input
(:func:`te_array_schedule`). The first K/V beat of a job is in the streamer
``first_beat`` cycles after the take (HBM latency + one burst + the reorder buffer); when the
engine wants it earlier (its q beats are done), the job stalls for the difference. Per layer a
constant ``gate`` cycles (``go``, the layer gate, ``done``) is added::

    take_0 = 0;   take_k = s_{k-1} + I_{k-1} + x_{k-1}           (after the last kv beat)
    s_k = max(take_k + 1, f_{k-E} + 1)                            (engine k mod E free)
    x_k = max(0, take_k + first_beat(n_k) - (s_k + 1 + G*Dk))     (K/V not there yet)
    f_k = max(s_k + I_k + x_k, f_{k-1} + 1) + O_k - 1
    layer = f_last + gate  (+ Dk + G*Dk - 2 when the last job is a split part: the combine
                            unit's fold of the last head and its output after the last partial)

with ``I = 1 + G*Dk + 3*n*G*Dk`` and ``O = G*Dk`` (``+ G`` for a split part) as for the TE.

**TE array** (``rtl/tile/te_array.py``), unstalled: :func:`te_array_schedule` and
:func:`te_array_cycles` for serial engines fed from one serial job stream,
:func:`te_array_routed_schedule` and :func:`te_array_routed_cycles` for a routed-K/V array
whose engines never wait for K/V; one job's phases are
:func:`tricut.models.te.te_serial_phases`.

**Cached tile** (``CachedAttentionTile``): :mod:`.cached_tile_timing` (its units meet on shared
resources, so that model steps them cycle by cycle).

**A round with the DSU cluster in the loop** (``tricut tile run --dsu``; HBM-only tile), from
its first descriptor to its last completion: the arbiter's scan emits one slot per cycle
(``span`` = last slot - first slot), the harness's host traffic runs at one word per cycle
(per layer the new token's K/V, ``B*H*2*Dk`` words, and the q, ``B*H*G*Dk``; the outputs,
``B*H*G*Dk`` words, are read after every layer but the last, whose reads overlap the
completions), each layer takes :func:`predict_layer`, and the DSU link sends the ``B``
completions after the last ``done``::

    round = span + L*(B*H*(2*Dk + G*Dk)) + (L-1)*B*H*G*Dk + sum(layers) + B + 2

A round that never completes (a job waits forever: ``--hang``) ends when the arbiter's slot
watchdogs have timed out every descriptor: slot ``k``'s watchdog runs from its issue (``k -
first slot`` cycles after the first) for ``limit`` cycles, the expiries are applied one per
cycle, the arbiter's ``ROUND`` then moves on and the DSU link aborts the round
(:func:`predict_dsu_timeout`)::

    timed-out round = span + limit + 3      (first descriptor to the abort, inclusive)
"""

from __future__ import annotations

from dataclasses import dataclass

from tricut.models.tile import split_parts
from tricut.models.te import te_serial_phases

__all__ = ["te_array_schedule", "te_array_cycles", "te_array_routed_schedule",
           "te_array_routed_cycles", "TileConfig", "layer_jobs", "predict_layer", "predict_step",
           "predict_dsu_round", "predict_dsu_timeout", "STATUS_TAIL", "DSU_ROUND_EXTRA",
           "DSU_TIMEOUT_EXTRA"]

#: a DSU round's cycles beyond the scan, the traffic, the layers and one per completion: the
#: bench's wake-up on the last descriptor (a falling edge) and the DSU link's first completion
#: after the last ``done``
DSU_ROUND_EXTRA = 2
#: a timed-out round's cycles beyond the scan and the watchdog limit: the last expiry applied,
#: the arbiter's ``ROUND`` + 1, the link's abort
DSU_TIMEOUT_EXTRA = 3
#: cycles from a job's last ``out`` beat until the TE array's status register is taken (the
#: array is busy until then; ``rtl/tile/te_array.py``)
STATUS_TAIL = 2


def te_array_schedule(jobs, head_dim, G, lanes, engines):
    """Exact cycles of a job list on an unstalled array (every input beat offered as soon as
    it can be taken, ``out`` and ``status`` always ready); ``jobs`` is a list of
    ``(n, partial)`` with exactly ``n`` tokens of K/V each (no early end, no too-long stream).

    Returns ``[(s_k, f_k)]``: the cycle job ``k``'s ``job`` beat transfers and the cycle its
    last ``out`` beat transfers, counted from the first job beat's cycle (0). With
    ``I_k, O_k`` from the single engine (input phase ``1 + G*Dk + 3*n*G*Dk``, output
    ``G*Dk (+G)``)::

        s_0 = 0
        s_k = max(s_{k-1} + I_{k-1}, f_{k-E} + 1)    (input is serial; engine k mod E free)
        f_k = max(s_k + I_k, f_{k-1} + 1) + O_k - 1  (output in job order)
    """
    out = []
    for k, (n, partial) in enumerate(jobs):
        i_k, o_k = te_serial_phases(n, head_dim, G, lanes, partial)
        if k == 0:
            s = 0
        else:
            prev_n, prev_partial = jobs[k - 1]
            s = out[-1][0] + te_serial_phases(prev_n, head_dim, G, lanes, prev_partial)[0]
            if k >= engines:
                s = max(s, out[k - engines][1] + 1)
        first = s + i_k if k == 0 else max(s + i_k, out[-1][1] + 1)
        out.append((s, first + o_k - 1))
    return out


def te_array_cycles(J, n, head_dim, G, lanes, engines, partial=False):
    """Cycles, first ``job`` beat to last ``out`` beat inclusive, of ``J`` equal jobs of
    ``n >= 1`` tokens on an unstalled array: ``J*(I + O)`` for one engine (a single TE,
    ``J * te_cycles``), ``J*I + O`` for two or more (input phases back to back; each output
    hidden under the next job's input), ``I = 1 + G*Dk + 3*n*G*Dk``, ``O = G*Dk (+G)``."""
    if n < 1 or J < 1:
        raise ValueError(f"te_array_cycles needs J >= 1 and n >= 1, got J={J}, n={n}")
    i, o = te_serial_phases(n, head_dim, G, lanes, partial)
    return J * (i + o) if engines == 1 else J * i + o


def te_array_routed_schedule(jobs, head_dim, G, lanes, engines):
    """Cycles of a job list on a routed-K/V array (``routed_kv=True``) whose engines never
    wait for K/V: every ``kv`` beat is in its engine's FIFO by the cycle the engine wants it
    (and ``job``, ``q`` offered as soon as they can be taken, ``out`` and ``status`` always
    ready). ``jobs``: ``(n, partial)`` with exactly ``n`` tokens each. Same return value as
    :func:`te_array_schedule`; the dispatcher now spends ``1 + G*Dk`` cycles per job (the
    ``job`` beat and the ``q`` beats) instead of the whole input phase::

        s_0 = 0
        s_k = max(s_{k-1} + 1 + G*Dk, f_{k-E} + 1)   (job + q serial; engine k mod E free)
        f_k = max(s_k + I_k, f_{k-1} + 1) + O_k - 1  (output in job order)

    Exact when no engine waits for K/V; a lower bound otherwise. A ``kv`` producer sending
    one token (``2*Dk`` beats) at a time round-robin over the jobs in flight keeps up when
    ``engines * 2*Dk <= 3*G*Dk`` (``engines <= 1.5*G``: the engines then need at most one
    ``kv`` beat per cycle) and the FIFOs hold two tokens (the default depth); with more
    engines the ``kv`` stream (one beat per cycle) is the bottleneck."""
    q = G * (head_dim // lanes)
    out = []
    for k, (n, partial) in enumerate(jobs):
        i_k, o_k = te_serial_phases(n, head_dim, G, lanes, partial)
        s = 0 if k == 0 else out[-1][0] + 1 + q
        if k >= engines:
            s = max(s, out[k - engines][1] + 1)
        first = s + i_k if k == 0 else max(s + i_k, out[-1][1] + 1)
        out.append((s, first + o_k - 1))
    return out


def te_array_routed_cycles(J, n, head_dim, G, lanes, engines, partial=False):
    """Cycles, first ``job`` beat to last ``out`` beat inclusive, of ``J`` equal jobs of ``n``
    tokens on a routed-K/V array whose engines never wait for K/V
    (:func:`te_array_routed_schedule`). With ``P = 1 + G*Dk`` (dispatch interval),
    ``I = 1 + G*Dk + 3*n*G*Dk``, ``O = G*Dk (+G)`` and ``d = max(P, O)``, when
    ``E*d <= I`` (each job's input phase covers a whole round of dispatches)::

        ((J-1) // E) * (I + O) + ((J-1) % E) * d + I + O

    (waves of ``E`` jobs, one every ``I + O`` cycles, staggered by ``d``; ``E = 1`` gives
    ``J * (I + O)``, a single TE's ``J * te_cycles``); otherwise the recurrence's value."""
    if n < 0 or J < 1:
        raise ValueError(f"te_array_routed_cycles needs J >= 1 and n >= 0, got J={J}, n={n}")
    i, o = te_serial_phases(n, head_dim, G, lanes, partial)
    d = max(1 + G * (head_dim // lanes), o)
    if engines * d <= i:
        return (J - 1) // engines * (i + o) + (J - 1) % engines * d + i + o
    return te_array_routed_schedule([(n, partial)] * J, head_dim, G, lanes, engines)[-1][1] + 1


@dataclass(frozen=True)
class TileConfig:
    """What the fast model needs of a tile: the TE array (``engines``, ``lanes``), the model's
    attention shape (``head_dim``, ``G``, ``num_kv_heads``, ``num_layers``), split-K, and the
    HBM model (``latency`` cycles, bursts of ``max_beats`` beats). ``gate``: the layer gate's
    constant cycles (go, done); ``first_beat_extra``: cycles from a burst's last beat to the
    streamer's first word (the reorder buffer's drain)."""
    engines: int
    head_dim: int
    G: int
    lanes: int
    num_kv_heads: int
    num_layers: int
    split_tokens: int = 0
    latency: int = 8
    max_beats: int = 16
    gate: int = 5
    first_beat_extra: int = 2

    @property
    def dk(self):
        return self.head_dim // self.lanes

    def first_beat(self, n):
        """Cycles from the take of a job of ``n`` tokens (from a block start) to its first
        K/V word in the streamer: HBM latency, the first burst (its block read of up to 16
        tokens is cut into bursts of ``max_beats``; the reorder buffer hands a burst on once
        it is whole) and the drain."""
        words = min(n, 16) * 2 * self.dk
        return self.latency + min(self.max_beats, words) + self.first_beat_extra


def layer_jobs(cfg: TileConfig, seq_lens):
    """The layer's jobs as the step sequencer orders them: per request (``seq_lens``, the
    round's descriptors in slot order), per KV head, per split part: ``(n, partial)``."""
    jobs = []
    for n in seq_lens:
        parts = split_parts(n, cfg.split_tokens)
        for _ in range(cfg.num_kv_heads):
            for p in range(parts):
                lo, hi = (0, n) if parts == 1 else \
                    (p * cfg.split_tokens, min(n, (p + 1) * cfg.split_tokens))
                jobs.append((hi - lo, parts != 1))
    return jobs


def predict_layer(cfg: TileConfig, seq_lens) -> int:
    """Cycles of one layer (``go`` to ``done``) of the HBM-only tile for the round's
    ``seq_lens`` (see the module docs)."""
    q = cfg.G * cfg.dk
    E = cfg.engines
    s, f = [], []
    take = 0
    jobs = layer_jobs(cfg, seq_lens)
    for k, (n, partial) in enumerate(jobs):
        i_k, o_k = te_serial_phases(n, cfg.head_dim, cfg.G, cfg.lanes, partial)
        s_k = take + 1 if k < E else max(take + 1, f[k - E] + 1)
        x_k = max(0, take + cfg.first_beat(n) - (s_k + 1 + q)) if n else 0
        f_k = (s_k + i_k + x_k if k == 0 else max(s_k + i_k + x_k, f[-1] + 1)) + o_k - 1
        s.append(s_k)
        f.append(f_k)
        take = s_k + i_k + x_k
    tail = 0
    if jobs and jobs[-1][1]:
        # the layer ends with a split part: the combine unit folds its last head (Dk cycles)
        # and writes the G*Dk combined beats after the part's last out beat, where a direct
        # job ends when the array's status register is taken (STATUS_TAIL cycles after it)
        tail = max(0, cfg.dk + q - STATUS_TAIL)
    return (f[-1] if f else 0) + cfg.gate + tail


def predict_step(cfg: TileConfig, seq_lens) -> list:
    """Cycles of every layer of one step (a round with these ``seq_lens``)."""
    return [predict_layer(cfg, seq_lens) for _ in range(cfg.num_layers)]


def predict_dsu_round(cfg: TileConfig, slots, seq_lens) -> int:
    """Cycles of one round of the HBM-only tile with the DSU cluster in the loop, from its first
    descriptor to its last completion, inclusive (see the module docs): ``slots`` and
    ``seq_lens`` of its descriptors, in slot order."""
    B, L, H, dk = len(slots), cfg.num_layers, cfg.num_kv_heads, cfg.dk
    kv, q = B * H * 2 * dk, B * H * cfg.G * dk
    return (max(slots) - min(slots) + L * (kv + q) + (L - 1) * q
            + sum(predict_step(cfg, seq_lens)) + B + DSU_ROUND_EXTRA)


def predict_dsu_timeout(slots, limit) -> int:
    """Cycles of a round the DSU's slot watchdogs time out (limit ``limit``), from its first
    descriptor to the DSU link's abort, inclusive (see the module docs)."""
    return max(slots) - min(slots) + limit + DSU_TIMEOUT_EXTRA
