"""Replay an access pattern or an access trace through the CDU policy model.

:func:`replay` is what ``tricut cdu replay`` runs. It builds the step descriptors of a
batch decoding ``steps`` tokens from ``context`` tokens each (or reads them from an access
trace), sizes the CDU from the model, the KV dtype and ``l2_mb``, and returns the counters
of :class:`tricut.models.cdu.CDUCore` as a dict.

Sizing: ``block_bytes = kv_bytes_per_token / num_layers * 16`` (one layer's K and V of 16
tokens); frames = ``l2_mb`` MiB / block_bytes; ``ways`` ways per set. Latency in TE block
slots: ``ceil(hbm_latency * hbm_bandwidth / block_bytes)`` (the TE consumes blocks at the HBM
rate). ``layers`` < num_layers simulates only that many layers with the frames scaled by
``layers / num_layers`` (layers never share blocks, so this keeps the per-layer share of
L2; byte counters are then for the simulated layers only, and ``layers_simulated`` says so).
Sampling does not scale the ~``2 × distance`` frames the prefetch stream keeps in transit, so
it understates prefetch hits unless the scaled frame count is well above that; the figures in
``docs/cdu.md`` simulate every layer.

The RTL replay (``--rtl``) is in :mod:`tricut.sim.harness.cdu`.
``benchmarks/cdu_figures.py`` reproduces the docs tables.

Every argument error is a :class:`ValueError` with a one-line message.
"""

from __future__ import annotations

import math
from pathlib import Path

from tricut.models.cdu import (
    BLOCK_TOKENS, HINTS, PATTERNS, POLICIES, Pattern, SlotDesc, StepDesc,
    dsu_hints, read_access_trace, run, default_reserve, geometry)
from tricut.models.config import ModelConfig, kv_dtype_bytes, load_gpu, load_model

__all__ = ["replay", "COUNTER_KEYS"]

COUNTER_KEYS = ("accesses", "hits", "misses", "prefetch_issued", "prefetch_useful",
                "prefetch_late", "prefetch_useless", "evictions", "hbm_read_bytes",
                "hbm_write_bytes")


def _pos_int(name, v):
    if not isinstance(v, int) or isinstance(v, bool) or v < 1:
        raise ValueError(f"{name} must be a positive integer, got {v!r}")


def replay(model, pattern=None, policy="adaptive", l2_mb=50.0, steps=8, batch=1,
           kv_dtype="bf16", seed=0, *, trace=None, context=4096, contexts=None,
           gpu="h100-sxm5", ways=16, distance=None, layers=None, hints="auto",
           pattern_args=None, return_core=False, engine="golden", reserve=None):
    """Counters of one replay (see the module docstring).

    ``pattern`` is one of ``full, window, topk, reread``, or a path to an access-trace JSONL
    file (or pass ``trace=``). ``hints``: ``auto`` (no DSU hint), ``dsu`` (the DSU's residency
    bit, ``models.cdu.dsu_hints``: contexts below 4096 tokens are streamed, the others left to
    the policy) or one of the hint names for all.
    ``contexts`` (a list, one per request) overrides ``batch`` x ``context``.
    ``engine``: ``golden`` (the policy model, :func:`tricut.models.cdu.run`) or ``fast`` (its
    exact compiled twin, :func:`tricut.sim.fast.cdu_twin.run_fast`; adds ``txn_checksum``; no
    ``return_core``). ``reserve``: ways per set kept from the keep class (default ways // 8).
    """
    if engine not in ("golden", "fast"):
        raise ValueError(f"unknown replay engine {engine!r}; choose golden or fast")
    if return_core and engine != "golden":
        raise ValueError("return_core=True needs engine='golden' (the fast engine keeps no core)")
    if isinstance(model, (str, Path)):
        model = load_model(model)
    if not isinstance(model, ModelConfig):
        raise ValueError(f"model must be a model id, a .toml path or a ModelConfig, got {model!r}")
    if policy not in POLICIES:
        raise ValueError(f"unknown CDU policy {policy!r}; choose one of {', '.join(POLICIES)}")
    kv_dtype_bytes(kv_dtype)
    if isinstance(pattern, Path) or (isinstance(pattern, str) and pattern.endswith(".jsonl")):
        if trace is not None:
            raise ValueError("give either a pattern or a trace, not both")
        trace, pattern = pattern, None
    if (pattern is None) == (trace is None):
        raise ValueError("give exactly one of a pattern "
                         f"({', '.join(PATTERNS)}) or an access-trace file")
    if pattern is not None and pattern not in PATTERNS:
        raise ValueError(f"unknown access pattern {pattern!r}; choose one of "
                         f"{', '.join(PATTERNS)}, or a .jsonl access trace")
    if isinstance(l2_mb, bool) or not isinstance(l2_mb, (int, float)) or not l2_mb > 0 \
            or not math.isfinite(l2_mb):
        raise ValueError(f"l2_mb must be a positive number, got {l2_mb!r}")
    _pos_int("steps", steps)
    _pos_int("batch", batch)
    _pos_int("context", context)
    _pos_int("ways", ways)
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise ValueError(f"seed must be an integer, got {seed!r}")
    if layers is None:
        layers = model.num_layers
    _pos_int("layers", layers)
    if layers > model.num_layers:
        raise ValueError(f"layers = {layers} exceeds the model's {model.num_layers} layers")
    if hints != "dsu" and hints not in HINTS:
        raise ValueError(f"unknown hints {hints!r}; choose dsu or one of {', '.join(HINTS)}")
    g = load_gpu(gpu) if isinstance(gpu, (str, Path)) else gpu

    token_bytes = model.kv_bytes_per_token(kv_dtype) / model.num_layers
    block_bytes = token_bytes * BLOCK_TOKENS
    sets, ways_eff, latency, default_distance = geometry(
        l2_mb * 2**20 * layers / model.num_layers, block_bytes, g.hbm_latency_s, g.hbm_bandwidth,
        ways)
    if sets < 1:
        raise ValueError(f"l2_mb = {l2_mb} holds no {block_bytes:.0f}-byte KV block for "
                         f"{layers} simulated layer(s) of {model.name}")
    if distance is None:
        distance = default_distance
    if not isinstance(distance, int) or isinstance(distance, bool) or distance < 0:
        raise ValueError(f"distance must be a non-negative integer, got {distance!r}")

    if trace is not None:
        recs = read_access_trace(trace)
        reqs = sorted({r for st in recs.values() for (r, _) in st})
        slot_of = {r: i for i, r in enumerate(reqs)}
        descs = []
        for t in sorted(recs):
            st = recs[t]
            rl = sorted({r for (r, _) in st})
            lay = tuple(sorted({ly for (_, ly) in st}))
            seq = {r: max(sl for (rr, _), (_, sl) in st.items() if rr == r) for r in rl}
            hint = [hints] * len(rl) if hints != "dsu" else dsu_hints([seq[r] for r in rl])
            descs.append(StepDesc(t, tuple(SlotDesc(slot_of[r], r, seq[r], h)
                                           for r, h in zip(rl, hint)), lay))

        def demand(st, sd, layer):
            rec = recs[st.step].get((sd.request, layer))
            return None if rec is None else rec[0]
    else:
        ctx = list(contexts) if contexts is not None else [context] * batch
        for c in ctx:
            _pos_int("context", c)
        hint = [hints] * len(ctx) if hints != "dsu" else dsu_hints(ctx)
        pat = Pattern(pattern, seed=seed, **(pattern_args or {}))
        descs = [StepDesc(t, tuple(SlotDesc(i, i, c + t + 1, h)
                                   for i, (c, h) in enumerate(zip(ctx, hint))),
                          tuple(range(layers)))
                 for t in range(steps)]

        def demand(st, sd, layer):
            return pat.blocks(st.step, sd.request, layer, sd.seq_len)

    if engine == "fast":
        from tricut.sim.fast.cdu_twin import run_fast
        core = None
        out = run_fast(descs, demand, policy, sets, ways_eff, distance=distance,
                       block_bytes=block_bytes, token_bytes=token_bytes, latency=latency,
                       pattern=pat if trace is None else None, reserve=reserve)
    else:
        core = run(descs, demand, policy, sets, ways_eff, distance=distance,
                   block_bytes=block_bytes, token_bytes=token_bytes, latency=latency,
                   keep_txns=return_core, reserve=reserve)
        out = core.counters()
    out.update(model=model.name, policy=policy, pattern=pattern or str(trace), l2_mb=l2_mb,
               kv_dtype=kv_dtype, block_bytes=block_bytes, sets=sets, ways=ways_eff,
               latency_blocks=latency, distance=distance, layers_simulated=layers,
               reserve=default_reserve(ways_eff) if reserve is None else reserve,
               steps=len(descs))
    if return_core:
        return out, core
    return out
