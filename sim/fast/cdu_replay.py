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

Every argument error is a :class:`ValueError` with a one-line message, raised before anything
is allocated. Limits (docs/cdu.md, section "tricut cdu replay", Limits): at most
:data:`MAX_FRAMES` frames, :data:`MAX_UNITS` (step, request, layer) units,
:data:`MAX_BLOCK_OPS` block operations per engine (``steps x requests x layers x blocks``,
blocks = ``ceil(final seq_len / 16)``, an upper bound on the demand reads of any pattern),
and for an access trace
:data:`MAX_TRACE_BYTES` bytes and :data:`MAX_TRACE_BLOCKS` listed blocks
(:func:`check_access_trace` also checks every row against the model: layer < its layers,
seq_len <= its ``max_context``, naming ``file:line``).
"""

from __future__ import annotations

import math
import os
from pathlib import Path

from tricut.models.cdu import (
    KV_BLOCK_TOKENS, HINTS, PATTERNS, POLICIES, Pattern, SlotDesc, StepDesc,
    dsu_hints, read_access_trace, run, default_reserve, geometry)
from tricut.models.config import ModelConfig, kv_dtype_bytes, load_gpu, load_model
from tricut.models.jsonl import TraceError, parse_json_object, stat_input_file

__all__ = ["replay", "COUNTER_KEYS", "check_access_trace", "trace_size", "check_size",
           "MAX_FRAMES", "MAX_UNITS", "MAX_BLOCK_OPS", "MAX_TRACE_BYTES", "MAX_TRACE_BLOCKS",
           "MAX_SEED"]

#: Limits of one replay (docs/cdu.md, section "tricut cdu replay", Limits), checked before
#: anything is allocated.
#: Tag-store frames (2**20 = 64 GiB of L2 at 64 KiB blocks; the docs go up to 16,384).
MAX_FRAMES = 1 << 20
#: (step, request, layer) units: the fast engine keeps ~1.3 KB per unit (1.3 GB at the limit).
MAX_UNITS = 1_000_000
#: block operations, ``steps x requests x layers x ceil(final seq_len / 16)``: about 5 min
#: of the compiled twin (3 M ops/s), 2.5 min of the golden model (130 k ops/s).
MAX_BLOCK_OPS = {"fast": 1_000_000_000, "golden": 20_000_000}
#: an access trace file (bytes) and the blocks it lists (all rows together).
MAX_TRACE_BYTES = 128 << 20
MAX_TRACE_BLOCKS = 10_000_000
#: seeds: non-negative 63-bit integers (numpy seed sequences refuse negative ones).
MAX_SEED = 2**63 - 1
#: the largest request id and seq_len the compiled twin takes (cdu_twin REQ_LIMIT, BLOCK_LIMIT)
REQ_MAX = (1 << 23) - 1
SEQ_MAX = (1 << 24) * KV_BLOCK_TOKENS

COUNTER_KEYS = ("accesses", "hits", "misses", "prefetch_issued", "prefetch_useful",
                "prefetch_late", "prefetch_useless", "evictions", "hbm_read_bytes",
                "hbm_write_bytes")


def check_positive_int(name, v):
    """Raise ``ValueError`` naming ``name`` unless ``v`` is an int >= 1 (not a bool)."""
    if not isinstance(v, int) or isinstance(v, bool) or v < 1:
        raise ValueError(f"{name} must be a positive integer, got {v!r}")


def arg_name(names, key):
    """How an argument is called in messages: ``names`` maps replay() argument names to the
    caller's (the CLI passes its flags, e.g. ``l2_mb`` -> ``--l2-mb``)."""
    return (names or {}).get(key, key)


def _blocks(tokens):
    return -(-tokens // KV_BLOCK_TOKENS)


def check_size(units, block_ops, engine, what, names=None):
    """Raise ValueError naming the limit when ``units`` or ``block_ops`` exceed the limits of
    ``engine`` (``what`` says how they were counted)."""
    if units > MAX_UNITS:
        raise ValueError(f"{what}: {units:,} (step, request, layer) units exceed the replay "
                         f"limit of {MAX_UNITS:,} units")
    lim = MAX_BLOCK_OPS[engine]
    if block_ops > lim:
        raise ValueError(f"{what}: {block_ops:,} block operations exceed the limit of {lim:,} "
                         f"for {arg_name(names, 'engine')} {engine}")


def check_access_trace(path, model=None, *, names=None, max_layers=None, max_seq_len=None,
                       max_request=None, limit_note=""):
    """Check an access-trace JSONL file before it is read: a regular file of at most
    :data:`MAX_TRACE_BYTES` bytes, every line a JSON object (``json`` errors, including
    nesting too deep, as :class:`TraceError` ``file:line``), at most
    :data:`MAX_TRACE_BLOCKS` blocks listed, and -- for rows whose fields have the right
    types (:func:`tricut.models.cdu.read_access_trace` reports the others) -- ``layer`` below
    the model's layers (or ``max_layers``), ``request`` at most ``max_request`` and
    ``seq_len`` (given, or implied by the largest block) at most the model's ``max_context``
    (or ``max_seq_len``). Streams the file line by line; returns ``None``."""
    label = str(path)
    p = Path(path)
    st = stat_input_file(p, "an access-trace file", TraceError)
    if st.st_size > MAX_TRACE_BYTES:
        raise TraceError(f"{label}: {st.st_size:,} bytes exceeds the access-trace limit of "
                         f"{MAX_TRACE_BYTES:,} bytes ({MAX_TRACE_BYTES >> 20} MiB)")
    if not os.access(p, os.R_OK):
        raise TraceError(f"{label}: cannot read: permission denied")
    limits = []             # (field, largest allowed value, how to say whose limit)
    if model is not None:
        limits += [("layer", model.num_layers - 1, f"{model.name} has {model.num_layers} layers"),
                   ("seq_len", model.max_context, f"{model.name}'s max_context")]
    if max_layers is not None:
        limits.append(("layer", max_layers - 1, f"the limit of {max_layers} layers{limit_note}"))
    if max_seq_len is not None:
        limits.append(("seq_len", max_seq_len, f"the limit of {max_seq_len:,} "
                                               f"tokens{limit_note}"))
    if max_request is not None:
        limits.append(("request", max_request, f"the limit of {max_request:,}{limit_note}"))
    listed = 0

    def _int(v):
        return isinstance(v, int) and not isinstance(v, bool)
    try:
        f = open(p, encoding="utf-8", newline=None)
    except OSError as e:
        raise TraceError(f"{label}: cannot read: {e.strerror}") from None
    with f:
        number = 0
        while True:
            try:
                line = f.readline()
            except UnicodeDecodeError:
                raise TraceError(f"{label}: not UTF-8 text (at or after line {number + 1})") \
                    from None
            if not line:
                break
            number += 1
            if not line.strip():
                continue
            where = f"{label}:{number}"
            rec = parse_json_object(line, where, TraceError)
            blocks = rec.get("blocks")
            if isinstance(blocks, list):
                listed += len(blocks)
                if listed > MAX_TRACE_BLOCKS:
                    raise TraceError(f"{where}: the trace lists more than {MAX_TRACE_BLOCKS:,} "
                                     "blocks (the access-trace limit)")
            seq = rec.get("seq_len")
            implied = None
            if seq is None and isinstance(blocks, list) and blocks and \
                    all(_int(b) for b in blocks):
                implied = max(blocks)
            for field, top, whose in limits:
                v = rec.get(field)
                if field == "seq_len" and implied is not None:
                    if implied >= _blocks(top):
                        own = model is not None and top == model.max_context
                        raise TraceError(f"{where}: block {implied} lies beyond {whose}"
                                         + (f" {top:,} tokens" if own else "")
                                         + f" (blocks 0..{_blocks(top) - 1})")
                elif _int(v) and v > top:
                    if field == "layer" and model is not None and top == model.num_layers - 1:
                        raise TraceError(f"{where}: layer {v} does not exist: {whose} "
                                         f"(0..{top})")
                    raise TraceError(f"{where}: {field} {v:,} exceeds {whose}"
                                     + (f" {top:,}" if field == "seq_len" and model is not None
                                        and top == model.max_context else ""))


def trace_size(recs):
    """(units, block operations) of a read trace as :func:`replay` lays it out: per step,
    every (request, layer) pair of the step's requests and layers, each with blocks =
    ``ceil(seq_len / 16)`` of its request (the largest ``seq_len`` of the step)."""
    units = ops = 0
    for st in recs.values():
        reqs, lays, seq = set(), set(), {}
        for (r, ly), (_, sl) in st.items():
            reqs.add(r)
            lays.add(ly)
            seq[r] = max(seq.get(r, 0), sl)
        units += len(reqs) * len(lays)
        ops += len(lays) * sum(_blocks(v) for v in seq.values())
    return units, ops


def replay(model, pattern=None, policy="adaptive", l2_mb=50.0, steps=8, batch=1,
           kv_dtype="bf16", seed=0, *, trace=None, context=4096, contexts=None,
           gpu="h100-sxm5", ways=16, distance=None, layers=None, hints="auto",
           pattern_args=None, return_core=False, engine="golden", reserve=None, names=None,
           check_only=False):
    """Counters of one replay (see the module docstring).

    ``pattern`` is one of ``full, window, topk, reread``, or a path to an access-trace JSONL
    file (or pass ``trace=``). ``hints``: ``auto`` (no DSU hint), ``dsu`` (the DSU's residency
    bit, ``models.cdu.dsu_hints``: contexts below 4096 tokens are streamed, the others left to
    the policy) or one of the hint names for all.
    ``contexts`` (a list, one per request) overrides ``batch`` x ``context``.
    ``engine``: ``golden`` (the policy model, :func:`tricut.models.cdu.run`) or ``fast`` (its
    exact compiled twin, :func:`tricut.sim.fast.cdu_twin.run_fast`; adds ``txn_checksum``; no
    ``return_core``). ``reserve``: ways per set kept from the keep class (default ways // 8).
    ``names``: how messages call the arguments (the CLI passes its flags, ``l2_mb`` ->
    ``--l2-mb``). Everything is checked, including the size limits of the module docstring,
    before anything is allocated. ``check_only``: return None once everything is checked
    (a sweep's grid check), before the replay allocates or runs.
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
        raise ValueError(f"{arg_name(names, 'l2_mb')} must be a positive number, got {l2_mb!r}")
    check_positive_int(arg_name(names, "steps"), steps)
    check_positive_int(arg_name(names, "batch"), batch)
    check_positive_int(arg_name(names, "context"), context)
    check_positive_int("ways", ways)
    if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed <= MAX_SEED:
        raise ValueError(f"{arg_name(names, 'seed')} must be an integer in 0..2**63-1, "
                         f"got {seed!r}")
    if layers is None:
        layers = model.num_layers
    check_positive_int("layers", layers)
    if layers > model.num_layers:
        raise ValueError(f"layers = {layers} exceeds the model's {model.num_layers} layers")
    if hints != "dsu" and hints not in HINTS:
        raise ValueError(f"unknown hints {hints!r}; choose dsu or one of {', '.join(HINTS)}")
    g = load_gpu(gpu) if isinstance(gpu, (str, Path)) else gpu

    token_bytes = model.kv_bytes_per_token(kv_dtype) / model.num_layers
    block_bytes = token_bytes * KV_BLOCK_TOKENS
    l2_bytes = l2_mb * 2**20 * layers / model.num_layers
    if l2_bytes / block_bytes > MAX_FRAMES:
        raise ValueError(
            f"{arg_name(names, 'l2_mb')} {l2_mb:g} is {l2_bytes / block_bytes:,.0f} frames of "
            f"{block_bytes:,.0f}-byte KV blocks ({model.name}, {kv_dtype}); the limit is "
            f"{MAX_FRAMES:,} frames ({arg_name(names, 'l2_mb')} <= "
            f"{MAX_FRAMES * block_bytes * model.num_layers / layers / 2**20:,.0f})")
    sets, ways_eff, latency, default_distance = geometry(
        l2_bytes, block_bytes, g.hbm_latency_s, g.hbm_bandwidth, ways)
    if sets < 1:
        raise ValueError(f"{arg_name(names, 'l2_mb')} = {l2_mb} holds no {block_bytes:.0f}-byte KV "
                         f"block for {layers} simulated layer(s) of {model.name}")
    eff_reserve = default_reserve(ways_eff) if reserve is None else reserve
    if not isinstance(eff_reserve, int) or isinstance(eff_reserve, bool) or \
            not 0 <= eff_reserve < ways_eff:
        raise ValueError(f"{arg_name(names, 'reserve')} must be an integer in 0..{ways_eff - 1} "
                         f"(< {ways_eff} ways per set), got {reserve!r}")
    if distance is None:
        distance = default_distance
    if not isinstance(distance, int) or isinstance(distance, bool) or distance < 0:
        raise ValueError(f"distance must be a non-negative integer, got {distance!r}")

    if trace is not None:
        check_access_trace(trace, model, names=names, max_request=REQ_MAX)
        recs = read_access_trace(trace)
        units, nops = trace_size(recs)
        check_size(units, nops, engine, f"trace {trace}", names)
        if check_only:
            return None
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
        if contexts is None and batch > REQ_MAX + 1:     # before [context] * batch exists
            raise ValueError(f"{arg_name(names, 'batch')} {batch:,} exceeds the replay's limit of "
                             f"{REQ_MAX + 1:,} requests")
        ctx = list(contexts) if contexts is not None else [context] * batch
        for c in ctx:
            check_positive_int(arg_name(names, "context"), c)
        if max(ctx) + steps > SEQ_MAX:
            raise ValueError(f"{arg_name(names, 'context')} + {arg_name(names, 'steps')} = "
                             f"{max(ctx) + steps:,} tokens exceeds the replay's limit of "
                             f"{SEQ_MAX:,} tokens per request")
        if len(ctx) > REQ_MAX + 1:
            raise ValueError(f"{arg_name(names, 'batch')} {len(ctx):,} exceeds the replay's "
                             f"limit of {REQ_MAX + 1:,} requests")
        check_size(steps * len(ctx) * layers,
                   steps * layers * sum(_blocks(c + steps) for c in ctx), engine,
                   f"{steps:,} steps x {len(ctx):,} requests x {layers} layers x "
                   f"{_blocks(max(ctx) + steps):,} blocks", names)
        if check_only:
            return None
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
