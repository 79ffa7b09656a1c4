"""Co-simulation of the decode tile's attention path with the golden decode step: whole decode
steps of a model whose attention runs on the tile's RTL, against the same steps with the
bit-exact TE golden as the attention (``docs/tile/cosim.md``, "Co-simulation with the golden decode
step").

The golden model plays the SMs (everything but attention: projections, RoPE, the MLP, the
logits, greedy sampling) through :func:`tricut.models.llama.decode_step_layers`; the golden
DSU model (:mod:`tricut.models.dsu`) plays the DSU cluster: its schedule (every completion
``ok``, so it does not depend on the tokens) decides each round's batch, and its descriptors
go to the tile's step sequencer as they are. Per round and layer the Amaranth testbench (async,
one simulator for the whole run):

1. takes the layer from the decode-step generator (its new K/V already in the paged cache);
2. writes each batch request's new K/V token into the behavioural HBM through its ``write``
   port (the words :func:`~tricut.sim.harness.attention_tile.kv_image` would hold, at
   :func:`~tricut.rtl.tile.attention_layouts.kv_addr`);
3. writes every (slot, kv_head)'s q, rounded to bf16, into the Q buffer (``q_write``);
4. pulses ``go``, waits for ``done`` (polled each cycle, with a hang limit), checks ``err``
   and ``te_status``, reads the output buffer and sends the fp32 outputs back as the step's
   attention ``[B, num_heads, head_dim]``.

The expected side runs the same steps with :func:`te_golden_attention` (``te_decode`` per KV
head on the quantised history; ``combine_partials`` of the partial runs of each split part
when ``split_tokens`` splits the context). K/V quantisation: bf16 and fp8 element by element;
NVFP4 with one tensor scale for the whole run (``amax`` of the prefilled cache / 2688), since
the tile has one ``tensor_scale`` input. Prefill (both sides, the same function on the same
prompts): the float32 reference ``prefill`` (there is no TE prefill path), so the tile and the
golden start from the same KV cache.

:func:`simulate` runs both and compares every attention output bit for bit and the tokens
exactly; :class:`Report` holds the tokens, the per-layer and per-step cycles and the
differences.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np
from amaranth.hdl import Elaboratable

from tricut.models import formats as F
from tricut.models import te as M
from tricut.models.config import load_model
from tricut.models.cdu import (HINT_OF_RESIDENCY, POLICIES, CDUCore, FrontEnd, SlotDesc,
                               StepDesc)
from tricut.models.dsu import PROFILES, DsuModel, DsuParams, RequestSpec
from tricut.models.llama import LlamaWeights, decode_step, decode_step_layers, prefill
from tricut.models.paged_kv import PagedKVCache
from tricut.models.tile import TILE_ENGINES, TILE_LANES, split_parts
from tricut.rtl.cdu.layouts import Widths
from tricut.rtl.te.layouts import pack_kv_beats, pack_q_beats, unpack_out_beat
from tricut.rtl.tile.attention_layouts import (kv_addr, kv_image_words, kv_word_bits,
                                               q_write_layout, index_bits)
from tricut.rtl.tile.behavioural.layouts import hbm_write_layout
from tricut.rtl.tile.sequencer_layouts import DESCRIPTOR_LAYOUT, pack, round_layout
from tricut.sim.harness.attention_tile import KV, AttentionTop, kv_image
from tricut.sim.harness.cdu import describe, fe_config, txn_tuple
from tricut.sim.harness.te import make_vector

__all__ = ["Setup", "SetupError", "CosimError", "Report", "RunResult", "CosimTop", "CachedCosimTop",
           "check_setup", "compare_cdu", "decode_tile", "txn_fields",
           "prompt_lengths", "schedule", "te_golden_attention", "golden_run", "cosim_run",
           "compare", "compare_dsu", "dsu_schedule", "tile_config", "predict_cached_dsu_rounds",
           "cdu_fault_retries", "watchdog_limit", "simulate", "ENGINES",
           "MAX_REQUESTS", "MAX_IMAGE_WORDS"]

#: engines the co-simulation accepts (the TE array's 1..MAX_ENGINES; 8 in
#: benchmarks/tile_real_layer.py)
ENGINES = (1, 16)
#: requests: the sequencer's request field (``Widths().req`` bits)
MAX_REQUESTS = 1 << Widths().req
#: the behavioural HBM's depth limit
MAX_IMAGE_WORDS = 1 << 22
_WEIGHT_SEED_OFFSET = 7
#: the DSU's slot watchdog and firmware heartbeat limits in a tile run: far beyond any round
#: (a round includes the host's traffic, one word per cycle)
DSU_WATCHDOG_LIMIT = (1 << 24) - 1
DSU_HEARTBEAT_LIMIT = (1 << 24) - 1
#: the automatic slot watchdog with ``hang``: twice the longest predicted round plus this
WATCHDOG_MARGIN = 1024
#: the CDU's HBM retries in a cached tile (``CDU_DEFAULTS["max_retries"]``)
CDU_RETRIES = 2


class SetupError(ValueError):
    """A bad co-simulation parameter: ``param`` names it, the message says why."""

    def __init__(self, param, detail):
        super().__init__(f"{param} {detail}")
        self.param, self.detail = param, detail


class CosimError(AssertionError):
    """The tile and the golden model differ (the message names the first difference)."""


@dataclass
class Setup:
    """One co-simulation. ``prompt_lens`` (one per request) or, if None, ``requests``
    synthetic lengths drawn from ``seed`` (:func:`prompt_lengths`); every request decodes
    ``steps`` tokens in rounds chosen by the DSU model (``profile``, at most ``max_batch``
    requests per round; None: every request every round)."""
    model: str = "tiny-te"
    requests: int = 3
    prompt_lens: tuple | None = None
    max_prompt: int = 3
    steps: int = 3
    kv_dtype: str = "bf16"
    engines: int = 2
    lanes: int = 16
    #: the TE array's engine design (``models.te.ENGINES``); None: the shipped ``pipelined``
    #: with a CDU policy, ``serial`` for the HBM-only attention path (its only engine)
    engine: str | None = None
    split_tokens: int = 0
    max_ctx: int = 64
    max_batch: int | None = None
    profile: str = "throughput-opt"
    seed: int = 0
    latency: int = 8
    max_beats: int = 16
    max_outstanding: int = 4
    #: the CDU in the K/V path with this policy (``disabled``, ``static``, ``adaptive``);
    #: None: the attention path reads every block from HBM (no CDU, no L2)
    policy: str | None = None
    cdu_sets: int = 4
    cdu_ways: int = 2
    distance: int = 4
    #: the DSU's residency hint is 1 ("auto": the CDU may keep the blocks in L2) for contexts of
    #: at least this many tokens, else 0 ("stream"); used with ``policy``
    long_context: int = 1
    #: the DSU cluster in RTL (cores, scheduler firmware, slot arbiter) in front of the
    #: sequencer: it chooses the rounds and takes the tile's completions (Verilator only);
    #: False: the golden DSU model's schedule, computed up front
    dsu: bool = False
    dsu_cores: int = 1
    max_retries: int = 2
    #: HBM read faults (with ``dsu``): ``(request, layer, kv_head, block, fails)``: the
    #: first burst of that 16-token KV block's kv head answers ``err`` to its first ``fails``
    #: reads. HBM-only tile: the step fails (a failed completion), the DSU rolls it back and
    #: runs it again (up to ``max_retries`` times). With a CDU policy: the CDU re-sends the
    #: block's fill (up to the CDU's ``max_retries``, :data:`CDU_RETRIES`), so ``fails`` is at
    #: most that: transient errors, recovered with no step failed
    faults: tuple = ()
    #: a lost HBM read (with ``dsu``, HBM-only tile, no ``faults``): ``(request, layer,
    #: kv_head, block, count)``: the next ``count`` reads of that block's first burst are
    #: taken and never answered, so the TE job waits forever; the DSU's slot watchdogs time
    #: the round out, the tile aborts it and the DSU runs it again
    hang: tuple = ()
    #: the DSU's slot watchdog limit in cycles (1..2**24-1); None: far beyond any round, or
    #: with ``hang`` twice the fast model's longest round plus :data:`WATCHDOG_MARGIN`
    watchdog: int | None = None

    def slot_bits(self):
        return max(1, (self.requests - 1).bit_length())

    def te_engine(self):
        """The TE engine design the run simulates (``engine`` with its default applied)."""
        if self.engine is not None:
            return self.engine
        return "serial" if self.policy is None else "pipelined"

    def lens(self):
        return list(self.prompt_lens) if self.prompt_lens is not None else \
            prompt_lengths(self.requests, self.max_prompt, self.seed)


def _int(v):
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


def prompt_lengths(n, longest, seed):
    """``n`` synthetic prompt lengths in ``1..longest``, distinct while there are enough,
    drawn from ``seed``."""
    top = max(1, longest)
    rng = np.random.default_rng(seed)
    pool = rng.permutation(np.arange(1, top + 1))
    return [int(pool[i % top]) for i in range(n)]


def check_setup(s: Setup):
    """Raise :class:`SetupError` for the first bad parameter; returns the model config."""
    cfg = load_model(s.model)                    # ConfigError for an unknown model
    d, G, lanes = cfg.head_dim, cfg.group_size, s.lanes
    if d not in M.HEAD_DIMS:
        raise SetupError("model", f"{cfg.name!r} has head_dim {d}; the TE takes "
                                  f"{', '.join(map(str, M.HEAD_DIMS))}")
    if not 1 <= G <= M.MAX_G or cfg.num_heads != G * cfg.num_kv_heads:
        raise SetupError("model", f"{cfg.name!r}: GQA group {cfg.num_heads}/{cfg.num_kv_heads} "
                                  f"is not a TE group (1..{M.MAX_G})")
    if cfg.num_layers > 1 << Widths().layer:
        raise SetupError("model", f"{cfg.name!r} has {cfg.num_layers} layers; the tile's layer "
                                  f"field holds {1 << Widths().layer}")
    if not _int(s.requests) or not 1 <= s.requests <= MAX_REQUESTS:
        raise SetupError("requests", f"must be in 1..{MAX_REQUESTS}, got {s.requests!r}")
    if s.prompt_lens is None and (not _int(s.max_prompt) or s.max_prompt < 1):
        raise SetupError("max_prompt", f"must be >= 1, got {s.max_prompt!r}")
    if not _int(s.steps) or s.steps < 1:
        raise SetupError("steps", f"must be >= 1, got {s.steps!r}")
    if s.kv_dtype not in M.KV_CODE_BITS:
        raise SetupError("kv_dtype", f"must be one of {', '.join(M.KV_CODE_BITS)}, "
                                     f"got {s.kv_dtype!r}")
    if not _int(s.engines) or not ENGINES[0] <= s.engines <= ENGINES[1]:
        raise SetupError("engines", f"must be in {ENGINES[0]}..{ENGINES[1]}, got {s.engines!r}")
    if lanes not in TILE_LANES:
        raise SetupError("lanes", f"must be one of {', '.join(map(str, TILE_LANES))}, got {lanes!r}")
    if s.engine is not None and s.engine not in TILE_ENGINES:
        raise SetupError("engine", f"must be one of {', '.join(TILE_ENGINES)}, got {s.engine!r}")
    if s.policy is None and s.te_engine() != "serial":
        raise SetupError("engine", f"{s.engine}: the HBM-only attention path (no CDU policy) "
                                   f"has the serial engine only; give a CDU policy "
                                   f"(disabled, static, adaptive) or the serial engine")
    if not _int(s.max_ctx) or not 2 <= s.max_ctx <= 4096:
        raise SetupError("max_ctx", f"must be in 2..4096, got {s.max_ctx!r}")
    if not _int(s.split_tokens) or not 0 <= s.split_tokens <= s.max_ctx:
        raise SetupError("split_tokens", f"must be in 0..max_ctx ({s.max_ctx}), "
                                         f"got {s.split_tokens!r}")
    if s.policy is not None:
        if s.policy not in POLICIES:
            raise SetupError("policy", f"must be one of {', '.join(POLICIES)}, got {s.policy!r}")
        if s.max_ctx % 16:
            raise SetupError("max_ctx", f"must be a multiple of 16 (whole KV blocks in L2) with "
                                        f"a CDU policy, got {s.max_ctx!r}")
        if not _int(s.cdu_sets) or not 1 <= s.cdu_sets <= 1024 or s.cdu_sets & (s.cdu_sets - 1):
            raise SetupError("cdu_sets", f"must be a power of 2 in 1..1024, got {s.cdu_sets!r}")
        if not _int(s.cdu_ways) or not 1 <= s.cdu_ways <= 16:
            raise SetupError("cdu_ways", f"must be in 1..16, got {s.cdu_ways!r}")
        if not _int(s.distance) or not 0 <= s.distance <= 255:
            raise SetupError("distance", f"must be in 0..255, got {s.distance!r}")
        if not _int(s.long_context) or s.long_context < 1:
            raise SetupError("long_context", f"must be >= 1, got {s.long_context!r}")
    if s.profile not in PROFILES:
        raise SetupError("profile", f"must be one of {', '.join(PROFILES)}, got {s.profile!r}")
    if s.max_batch is not None and (not _int(s.max_batch) or
                                    not 1 <= s.max_batch <= 1 << s.slot_bits()):
        raise SetupError("max_batch", f"must be in 1..{1 << s.slot_bits()} (the tile's slots), "
                                      f"got {s.max_batch!r}")
    lens = s.lens()
    if len(lens) != s.requests or not all(_int(p) and p >= 1 for p in lens):
        raise SetupError("prompt_lens", f"must be {s.requests} positive lengths, got {lens!r}")
    longest = max(lens) + s.steps
    if longest > s.max_ctx:
        raise SetupError("max_ctx", f"{s.max_ctx} is too small: the longest context is "
                                    f"{max(lens)} prompt + {s.steps} steps = {longest} tokens")
    if longest > cfg.max_context:
        raise SetupError("steps", f"{s.steps}: {longest} tokens exceed the model's max_context "
                                  f"{cfg.max_context}")
    if s.split_tokens and longest <= s.split_tokens:
        raise SetupError("split_tokens", f"{s.split_tokens} splits no context (the longest is "
                                         f"{longest} tokens)")
    _check_dsu(s, cfg, lens)
    words = kv_image_words(s.requests, cfg.num_layers, cfg.num_kv_heads, s.max_ctx, d, lanes)
    if words > MAX_IMAGE_WORDS:
        raise SetupError("max_ctx", f"{s.max_ctx}: the KV image would need {words:,} HBM words "
                                    f"(at most {MAX_IMAGE_WORDS:,})")
    return cfg


def tile_config(s: Setup):
    """The fast model's configuration of the setup's tile: a
    :class:`~tricut.models.tile_timing.TileConfig` (HBM-only) or, with a CDU policy, a
    :class:`~tricut.models.cached_tile_timing.CachedTileConfig`."""
    from tricut.models.cached_tile_timing import CachedTileConfig
    from tricut.models.tile_timing import TileConfig
    cfg = load_model(s.model)
    common = dict(engines=s.engines, head_dim=cfg.head_dim, G=cfg.group_size, lanes=s.lanes,
                  num_kv_heads=cfg.num_kv_heads, num_layers=cfg.num_layers,
                  split_tokens=s.split_tokens, latency=s.latency, max_beats=s.max_beats)
    if s.policy is None:
        return TileConfig(**common)
    return CachedTileConfig(**common, max_outstanding=s.max_outstanding,
                            hbm_outstanding=s.max_outstanding, engine=s.te_engine(),
                            kv_dtype=s.kv_dtype)


def predict_cached_dsu_rounds(s: Setup, rounds, firsts, policy=None, retries=None):
    """The cached tile's fast model with the DSU in the loop
    (:func:`~tricut.models.cached_tile_timing.predict_dsu_run`) for setup ``s`` on
    ``rounds`` (descriptor dicts, as ``RunResult.rounds``) starting at the ``firsts`` cycles
    (each round's first descriptor, ``RunResult.round_spans``: the DSU firmware's time between
    rounds is an input), with the CDU golden model's decisions under ``policy`` (default the
    setup's) and the CDU's fill retries of ``s.faults``: a faulty block's first fill (which
    :func:`cdu_fault_retries` checks it is) reads all its kv heads on every attempt, so it is
    answered with ``err`` as long as any of its heads' counts lasts (``retries``: per
    ``(request, layer, block)`` the max of its faults' ``fails``), unless ``retries`` is
    given (``{}``: ignore the faults). Returns (cycles per round, ``{(round, layer):
    cycles}``)."""
    from tricut.rtl.tile.cached_attention_tile import CDU_FE_ENTRIES
    from tricut.models.cached_tile_timing import cdu_decisions, predict_dsu_run
    cfg = tile_config(s)
    steps = [StepDesc(r[0]["step"], tuple(SlotDesc(d["slot"], d["request"], d["seq_len"],
                                                   HINT_OF_RESIDENCY[d["residency"]])
                                          for d in r), tuple(range(cfg.num_layers)))
             for r in rounds]
    decisions = cdu_decisions(policy or s.policy, s.cdu_sets, s.cdu_ways, s.distance, steps,
                              CDU_FE_ENTRIES)
    if retries is None:
        retries = fill_retries(s.faults)
    layers = {}
    cycles = predict_dsu_run(cfg, [[(d["slot"], d["request"], d["seq_len"]) for d in r]
                                   for r in rounds], decisions, firsts, layers=layers,
                             retries=retries)
    return cycles, layers


def _check_dsu(s: Setup, cfg, lens):
    from tricut.sim.harness.tile_cosim_verilator import FAULT_SLOTS as MAX_FAULTS
    MAX_FAILS = 255
    if not isinstance(s.dsu, bool):
        raise SetupError("dsu", f"must be True or False, got {s.dsu!r}")
    if not _int(s.dsu_cores) or not 1 <= s.dsu_cores <= 4:
        raise SetupError("dsu_cores", f"must be in 1..4, got {s.dsu_cores!r}")
    if not _int(s.max_retries) or not 0 <= s.max_retries <= 15:
        raise SetupError("max_retries", f"must be in 0..15, got {s.max_retries!r}")
    faults = list(s.faults)
    if faults and not s.dsu:
        raise SetupError("faults", "need the DSU cluster (--dsu): a failed step is rolled back "
                                   "and run again by the DSU")
    if len(faults) > MAX_FAULTS:
        raise SetupError("faults", f"at most {MAX_FAULTS}, got {len(faults)}")
    most = CDU_RETRIES if s.policy is not None else MAX_FAILS
    why = f" (the CDU retries a fill {most} times)" if s.policy is not None else ""
    seen = set()
    for f in faults:
        ok = _block_entry(s, cfg, lens, f, most) and tuple(f[:4]) not in seen
        if not ok:
            raise SetupError("faults", f"entry must be (request, layer, kv_head, block, fails) "
                                       f"with a block the request reads, fails in 1..{most}"
                                       f"{why}, each block once; got {f!r}")
        seen.add(tuple(f[:4]))
    if s.hang:
        if not s.dsu:
            raise SetupError("hang", "needs the DSU cluster (--dsu): its slot watchdog ends the "
                                     "hung round")
        if s.policy is not None:
            raise SetupError("hang", "is injected on the HBM-only tile (no --policy): the abort "
                                     "resets the CDU's L2 state, which the CDU model does not")
        if faults:
            raise SetupError("hang", "and faults cannot be combined (a hung round stops before "
                                     "its later reads)")
        if not _block_entry(s, cfg, lens, s.hang, MAX_FAILS):
            raise SetupError("hang", f"must be (request, layer, kv_head, block, count) with a "
                                     f"block the request reads, count in 1..{MAX_FAILS}; got "
                                     f"{s.hang!r}")
    if (faults or s.hang) and s.split_tokens % 16:
        raise SetupError("split_tokens", f"must be a multiple of 16 with faults or a lost read "
                                         f"(a split part starting inside a block reads it from "
                                         f"there, not from the block's first burst), got "
                                         f"{s.split_tokens}")
    if s.watchdog is not None and (not _int(s.watchdog) or
                                   not 1 <= s.watchdog <= DSU_WATCHDOG_LIMIT):
        raise SetupError("watchdog", f"must be in 1..{DSU_WATCHDOG_LIMIT}, got {s.watchdog!r}")


def _block_entry(s, cfg, lens, f, most):
    """``f`` is ``(request, layer, kv_head, block, n)`` with a block the request reads and
    ``n`` in ``1..most``."""
    if not (isinstance(f, (tuple, list)) and len(f) == 5 and all(_int(x) for x in f)):
        return False
    r, li, h, b, n = f
    return 0 <= r < s.requests and 0 <= li < cfg.num_layers and 0 <= h < cfg.num_kv_heads \
        and 0 <= b and b * 16 < lens[r] + s.steps and 1 <= n <= most


def _dsu_params(s: Setup):
    n_slots = 1 << s.slot_bits()
    cap = n_slots if s.max_batch is None else s.max_batch
    return DsuParams(profile=s.profile, n_slots=n_slots, max_batch=cap, latency_batch=cap,
                     kv_capacity_tokens=1 << 20,
                     long_context_tokens=s.long_context if s.policy else 1 << 20,
                     max_retries=s.max_retries)


def dsu_schedule(s: Setup):
    """The DSU model's run with ``s.faults`` and ``s.hang`` applied as the tile meets them:
    ``(rounds, failed, outcomes)``, the rounds as descriptor lists (empty rounds dropped),
    ``failed`` the ``(round, request)`` steps whose completion is an error or a timeout. The
    HBM-only tile reads each block of ``[0, seq_len)`` once per layer and KV head, so a fault
    fails its request's first ``fails`` steps whose context covers the block, and a lost read
    times out every step of the first ``count`` rounds in which a step's context covers the
    block (the tile waits for it; the completions come at the round's end). With a CDU policy
    the CDU's retries recover every fault (:func:`cdu_fault_retries`): no step fails."""
    model = DsuModel(_dsu_params(s))
    for i, p in enumerate(s.lens()):
        model.submit(RequestSpec(i, p, s.steps))
    left = {} if s.policy is not None else {tuple(f[:4]): f[4] for f in s.faults}
    hang = list(s.hang)
    rounds, failed = [], set()
    while not model.idle:
        batch = model.step().batch
        errors = {}
        if hang and hang[4] and any(d.request == hang[0] and 16 * hang[3] < d.seq_len
                                    for d in batch):
            hang[4] -= 1
            errors = {d.slot: "timeout" for d in batch}
        for d in batch:
            hit = [k for k, n in left.items()
                   if n and k[0] == d.request and 16 * k[3] < d.seq_len]
            for k in hit:
                left[k] -= 1
            if hit:
                errors[d.slot] = "error"
        failed |= {(len(rounds), d.request) for d in batch if d.slot in errors}
        if batch:
            rounds.append(batch)
        model.complete(errors)
    return rounds, failed, model.outcomes


def watchdog_limit(s: Setup):
    """The DSU's slot watchdog limit of the run (see :attr:`Setup.watchdog`)."""
    if s.watchdog is not None:
        return s.watchdog
    if not s.hang:
        return DSU_WATCHDOG_LIMIT
    from tricut.models.tile_timing import predict_dsu_round
    rounds, _, _ = dsu_schedule(dataclasses.replace(s, hang=()))
    longest = max(predict_dsu_round(tile_config(s), [d.slot for d in r], [d.seq_len for d in r])
                  for r in rounds)
    return min(DSU_WATCHDOG_LIMIT, 2 * longest + WATCHDOG_MARGIN)


def schedule(s: Setup):
    """The DSU model's rounds for the run without faults: a list of descriptor lists (empty
    rounds dropped), every completion ``ok``."""
    rounds, _, outcomes = dsu_schedule(dataclasses.replace(s, faults=()))
    assert all(o.status == "completed" for o in outcomes.values()), outcomes
    return rounds


def te_golden_attention(kv_dtype, lanes, split_tokens=0, tensor_scale=None, record=None,
                        engine="serial"):
    """An ``attention_fn`` for :func:`tricut.models.llama.decode_step`: per KV head
    ``models.te.te_decode`` (the arithmetic of ``engine``) of its group's q (bf16) over the K/V history quantised as the TE
    takes it (:func:`tricut.sim.harness.te.make_vector`; NVFP4 with ``tensor_scale``), or,
    when ``split_tokens`` splits the context (``models.tile.split_parts``),
    ``models.te.combine_partials`` of the partial runs of its parts, as the tile computes it.
    ``record`` (a list) gets each call's output as fp32 bit patterns ``[num_heads, d]``."""
    def attention(q, k, v, scale):
        heads, d = q.shape
        n, kv_heads, _ = k.shape
        G = heads // kv_heads
        bits = np.zeros((heads, d), dtype=np.int64)
        for h in range(kv_heads):
            vec = make_vector(q[h * G:(h + 1) * G], k[:, h], v[:, h], kv_dtype, scale=scale,
                              lanes=lanes, tensor_scale=tensor_scale)
            parts = split_parts(n, split_tokens)
            bounds = [(0, n)] if parts == 1 else \
                [(i * split_tokens, min(n, (i + 1) * split_tokens)) for i in range(parts)]
            res = [M.te_decode(vec.q_codes, vec.k_codes[lo:hi], vec.v_codes[lo:hi], kv_dtype,
                               vec.scale_bits, lanes=lanes, partial=parts > 1,
                               k_scales=None if vec.k_scales is None else vec.k_scales[lo:hi],
                               v_scales=None if vec.v_scales is None else vec.v_scales[lo:hi],
                               tensor_scale_bits=vec.ts_bits, engine=engine)
                   for lo, hi in bounds]
            flags = [name for r in res for name, on in r.status.items() if on]
            if flags:
                raise CosimError(f"golden TE status {flags} (KV head {h}, {n} tokens)")
            bits[h * G:(h + 1) * G] = res[0].out if parts == 1 else \
                M.combine_partials([(r.out, r.m, r.l) for r in res])
        if record is not None:
            record.append(bits.copy())
        return M.b2f(bits)
    return attention


@dataclass
class RunResult:
    """One side of the co-simulation: ``tokens[request]`` (the prefill's token, then one per
    decode step), ``attn[(round, layer, request)]`` the attention output ``[num_heads, d]`` as
    fp32 bit patterns; the tile side also has ``layer_cycles[(round, layer)]`` (``go`` to
    ``done`` inclusive) and ``step_cycles[round]`` (first ``go`` to last ``done`` inclusive,
    the host's K/V, q and output traffic between layers included); ``problems`` lists HBM
    ``err`` / TE status flags seen at ``done``; ``stopped``: the run ended early, at the
    first layer that differed from a golden run given to :func:`cosim_run`."""
    tokens: dict
    attn: dict = field(default_factory=dict)
    layer_cycles: dict = field(default_factory=dict)
    step_cycles: dict = field(default_factory=dict)
    problems: list = field(default_factory=list)
    stopped: bool = False
    #: with a CDU: its decisions (the RTL ``txn`` fields, :func:`tricut.sim.harness.cdu.txn_tuple`
    #: order) and its counters at the end of the run
    txns: list = field(default_factory=list)
    cdu_counters: dict = field(default_factory=dict)
    #: with the DSU cluster: each round's descriptors (dicts), the ``(round, request)`` steps
    #: whose completion failed (rolled back, their outputs not compared), the outcomes
    #: (request -> :class:`~tricut.models.dsu.Outcome`); ``step_cycles`` is then from the
    #: round's first descriptor to its last completion, inclusive
    rounds: list = field(default_factory=list)
    failed: list = field(default_factory=list)
    outcomes: dict = field(default_factory=dict)
    #: the golden side with ``faults`` and a CDU policy: the CDU's expected ``hbm_retries``
    #: (:func:`cdu_fault_retries`); the tile side with the DSU: the rounds it aborted, and
    #: per round the cycles (of the top's free-running counter) of its first descriptor and
    #: of its last completion (or its abort)
    cdu_retries: int | None = None
    aborted: list = field(default_factory=list)
    round_spans: dict = field(default_factory=dict)
    #: the tile side on Verilator: the HBM model's beats served, ``(read, written)`` (its
    #: ``resp`` and ``write`` transfers: K/V reads and fills, new tokens' K/V)
    hbm_beats: tuple | None = None


class _Run:
    """What both sides share: the model, weights, prompts, the prefilled cache and the first
    tokens, the schedule and the NVFP4 tensor scale."""

    def __init__(self, s: Setup):
        self.s = s
        self.cfg = cfg = check_setup(s)
        self.weights = LlamaWeights.random(cfg, seed=s.seed + _WEIGHT_SEED_OFFSET,
                                           std=0.15 * (64 / cfg.hidden_size) ** 0.5)
        rng = np.random.default_rng(s.seed)
        self.lens = s.lens()
        self.prompts = [rng.integers(0, cfg.vocab_size, n) for n in self.lens]
        self.rounds, self.failed, self.outcomes = dsu_schedule(s)
        self.cache = PagedKVCache.for_model(
            cfg, sum(-(-(p + s.steps) // 16) for p in self.lens), 16)
        first = [prefill(self.weights, self.cache, r, p) for r, p in enumerate(self.prompts)]
        self.tokens = {r: [int(np.argmax(lg))] for r, lg in enumerate(first)}
        self.ts = None
        if s.kv_dtype == "nvfp4":
            amax = max(float(np.max(np.abs(a))) for li in range(cfg.num_layers)
                       for r in range(s.requests) for a in self.cache.gather(li, r))
            self.ts = np.float32(amax) / np.float32(2688.0) if amax > 0 else np.float32(1.0)

    def batch(self, descs):
        for d in descs:
            if d.seq_len != self.cache.seq_len(d.request) + 1:
                raise CosimError(f"DSU round {d.step}: request {d.request} seq_len {d.seq_len}, "
                                 f"the cache holds {self.cache.seq_len(d.request)} tokens")
        return [(d.request, self.tokens[d.request][-1]) for d in descs]

    def sampled(self, descs, logits):
        for d, lg in zip(descs, logits):
            self.tokens[d.request].append(int(np.argmax(lg)))

    def roll_back(self, ri, descs, requests):
        """A failed step of ``requests`` in round ``ri``: its token and its K/V dropped (the
        DSU runs it again from the same context)."""
        for d in descs:
            if d.request in requests:
                self.tokens[d.request].pop()
                self.cache.truncate(d.request, d.seq_len - 1)

    def codes(self, k, v):
        """K/V rows ``[n, d]`` -> (k codes, v codes, k scales, v scales) as the HBM holds them."""
        dt = self.s.kv_dtype
        if dt == "bf16":
            return F.bf16_encode(k), F.bf16_encode(v), None, None
        if dt == "fp8":
            return (F.fp8_e4m3_encode(k, saturate=True), F.fp8_e4m3_encode(v, saturate=True),
                    None, None)
        tk, tv = (F.nvfp4_quantize(x, tensor_scale=self.ts) for x in (k, v))
        return (F.unpack_fp4(tk.packed), F.unpack_fp4(tv.packed), np.asarray(tk.block_scales),
                np.asarray(tv.block_scales))

    def params(self):
        if getattr(self, "_params", None) is None:
            self._params = self._make_params()
        return self._params

    def _make_params(self):
        s, cfg = self.s, self.cfg
        n_slots = 1 << s.slot_bits()
        return dict(engines=s.engines, head_dim=cfg.head_dim, G=cfg.group_size, lanes=s.lanes,
                    kv_dtype=s.kv_dtype, num_layers=cfg.num_layers,
                    num_kv_heads=cfg.num_kv_heads, split_tokens=s.split_tokens,
                    slot_bits=s.slot_bits(), max_ctx=s.max_ctx, num_requests=s.requests,
                    max_beats=s.max_beats, max_outstanding=s.max_outstanding,
                    max_slots=n_slots, latency=s.latency, reorder=False, hbm_seed=1,
                    hbm_outstanding=s.max_outstanding, engine=s.te_engine(),
                    cdu=dict(sets=s.cdu_sets, ways=s.cdu_ways), **self.dsu_cluster_params())

    def dsu_cluster_params(self):
        """With ``dsu``: the DSU cluster's configuration, its firmware image included (the
        build depends on it)."""
        s = self.s
        if not s.dsu:
            return {}
        from tricut.sim.harness.dsu import MEM_BYTES, build_dsu_firmware, firmware_words
        from tricut.rtl.dsu.regmap import CONFIG_MAGIC, PARK_POLICY_CODE, PROFILE_CODE
        n_slots = 1 << s.slot_bits()
        cap = n_slots if s.max_batch is None else s.max_batch
        config = {"magic": CONFIG_MAGIC, "profile": PROFILE_CODE[s.profile], "max_batch": cap,
                  "latency_batch": cap, "kv_capacity": 1 << 20,
                  "long_ctx": s.long_context if s.policy else 1 << 20,
                  "max_retries": s.max_retries, "watchdog_limit": watchdog_limit(s),
                  "heartbeat_limit": DSU_HEARTBEAT_LIMIT, "park_policy": PARK_POLICY_CODE["keep"],
                  "sessions": 0}
        words = firmware_words(build_dsu_firmware("scheduler"), config)
        return {"dsu": dict(cores=s.dsu_cores, intake_depth=4, mem_bytes=MEM_BYTES,
                            firmware=words)}

    def hbm_faults(self):
        """The HBM fault table ``[(addr, fails)]`` of ``faults``: each block's first word."""
        geo = self._geometry()
        return [(kv_addr(r, li, h, 16 * b, **geo), n) for r, li, h, b, n in self.s.faults]

    def hbm_lost(self):
        """The HBM lost-request table ``[(addr, count)]`` of ``hang``."""
        if not self.s.hang:
            return []
        r, li, h, b, n = self.s.hang
        return [(kv_addr(r, li, h, 16 * b, **self._geometry()), n)]

    def _geometry(self):
        s, cfg = self.s, self.cfg
        return dict(num_layers=cfg.num_layers, num_kv_heads=cfg.num_kv_heads, max_ctx=s.max_ctx,
                    head_dim=cfg.head_dim, lanes=s.lanes)

    def image(self):
        """The HBM image of the prefilled cache (later tokens are written per step)."""
        s, cfg = self.s, self.cfg
        shape = (s.requests, cfg.num_layers, cfg.num_kv_heads, s.max_ctx, cfg.head_dim)
        sc = shape[:-1] + (cfg.head_dim // 16,)
        nv = s.kv_dtype == "nvfp4"
        kv = KV(np.zeros(shape, np.int64), np.zeros(shape, np.int64),
                np.zeros(sc, np.int64) if nv else None, np.zeros(sc, np.int64) if nv else None,
                int(M.f2b(self.ts)) if nv else 0)
        for r in range(s.requests):
            for li in range(cfg.num_layers):
                k, v = self.cache.gather(li, r)
                for h in range(cfg.num_kv_heads):
                    kc, vc, ks, vs = self.codes(k[:, h], v[:, h])
                    n = kc.shape[0]
                    kv.k[r, li, h, :n], kv.v[r, li, h, :n] = kc, vc
                    if nv:
                        kv.ks[r, li, h, :n], kv.vs[r, li, h, :n] = ks, vs
        return kv_image(kv, self.params()), kv.ts_bits

    def token_beats(self, layer, request, pos):
        """Token ``pos``'s K/V words per KV head: ``[H][2*Dk]`` as the HBM image holds them."""
        s, cfg = self.s, self.cfg
        k, v = self.cache.gather(layer, request)
        mask = (1 << kv_word_bits(s.lanes, s.kv_dtype)) - 1
        out = []
        for h in range(cfg.num_kv_heads):
            kc, vc, ks, vs = self.codes(k[pos:pos + 1, h], v[pos:pos + 1, h])
            out.append([b & mask for b in pack_kv_beats(kc, vc, s.kv_dtype, s.lanes, ks, vs)])
        return out

    def token_words(self, layer, request, pos):
        """``{addr: word}`` of token ``pos``'s K/V (every KV head) in the HBM image."""
        cfg, p = self.cfg, self.params()
        geo = dict(num_layers=cfg.num_layers, num_kv_heads=cfg.num_kv_heads, max_ctx=p["max_ctx"],
                   head_dim=cfg.head_dim, lanes=self.s.lanes)
        return {kv_addr(request, layer, h, pos, **geo) + i: w
                for h, beats in enumerate(self.token_beats(layer, request, pos))
                for i, w in enumerate(beats)}

    def cdu_steps(self):
        """The rounds as the CDU's step descriptors (hint from the residency bit)."""
        L = self.cfg.num_layers
        return [StepDesc(descs[0].step,
                         tuple(SlotDesc(d.slot, d.request, d.seq_len,
                                        HINT_OF_RESIDENCY[d.residency]) for d in descs),
                         tuple(range(L))) for descs in self.rounds]

    def cdu_reference(self):
        """The CDU golden model's transactions for the run (pattern ``full``)."""
        s = self.s
        from tricut.rtl.tile.cached_attention_tile import CDU_FE_ENTRIES
        fe = FrontEnd(s.policy, s.cdu_sets * s.cdu_ways, distance=s.distance,
                      entries=CDU_FE_ENTRIES)
        core = CDUCore(s.cdu_sets, s.cdu_ways)
        for step in self.cdu_steps():       # one step at a time: each is the last one known
            for op in fe.ops([step], lambda st, sd, ly: list(range(-(-sd.seq_len // 16)))):
                core.apply(op)
        return core


def cdu_fault_retries(run: _Run) -> int:
    """With a CDU policy: the CDU's ``hbm_retries`` under ``faults``. A fault's block must
    first be read (its first R or P decision) by a CDU fill (``miss_alloc``, ``pf_issue``):
    the fill's HBM reads of every kv head go out again on each retry, so the faults of one
    block cost the fill ``max(fails)`` retries (at most :data:`CDU_RETRIES`: recovered, the
    decisions and the steps as without faults); a block first read otherwise (a bypass,
    which the streamer reads with no retry, or a hit on a frame the new-token writer
    allocated) raises :class:`SetupError`."""
    s = run.s
    first = {}
    for t in run.cdu_reference().txns:
        if t.kind in ("R", "P"):
            first.setdefault((t.req, t.layer, t.block), t.result)
    for r, li, h, b, n in s.faults:
        result = first.get((r, li, b))
        if result not in ("miss_alloc", "pf_issue"):
            raise SetupError("faults", f"{(r, li, h, b, n)}: with policy {s.policy} the block "
                                       f"is first {'never read' if result is None else result} "
                                       f"(not a CDU fill, which alone retries): pick a block "
                                       f"the CDU fills")
    return sum(fill_retries(s.faults).values())


def fill_retries(faults):
    """The failed attempts of each faulty block's first CDU fill, ``{(request, layer,
    block): max fails}``: a fill reads every kv head of its block on each attempt, so it fails
    while any of the block's faults lasts."""
    worst = {}
    for r, li, _, b, n in faults:
        worst[(r, li, b)] = max(worst.get((r, li, b), 0), n)
    return worst


def golden_run(s: Setup) -> RunResult:
    """The expected side: the DSU's rounds through ``decode_step`` with
    :func:`te_golden_attention`."""
    run = _Run(s)
    L = run.cfg.num_layers
    res = RunResult(run.tokens)
    for ri, descs in enumerate(run.rounds):
        calls = []
        fn = te_golden_attention(s.kv_dtype, s.lanes, s.split_tokens, run.ts, record=calls,
                                 engine=s.te_engine())
        logits = decode_step(run.weights, run.cache, run.batch(descs), attention_fn=fn)
        for li in range(L):
            for i, d in enumerate(descs):
                res.attn[(ri, li, d.request)] = calls[li * len(descs) + i]
        run.sampled(descs, logits)
        run.roll_back(ri, descs, {r for k, r in run.failed if k == ri})
    res.rounds = [[dataclasses.asdict(d) for d in b] for b in run.rounds]
    res.failed = sorted(run.failed)
    res.outcomes = dict(run.outcomes)
    if s.policy is not None and s.faults:
        res.cdu_retries = cdu_fault_retries(run)
    return res


class CosimTop(AttentionTop):
    """:class:`~tricut.sim.harness.attention_tile.AttentionTop` with the HBM model's ``write``
    port left to the testbench (the decode steps' new K/V go in through it)."""

    hbm_write_open = True


def decode_tile(p):
    """The shipped :class:`~tricut.rtl.tile.decode_tile.DecodeTile` of a run's parameters
    (:meth:`_Run.params`): the cached attention path, with ``p["dsu"]`` the DSU cluster
    (its firmware in the cores' memories) and the DSU link in front."""
    from tricut.rtl.tile.decode_tile import DecodeTile
    from tricut.sim.harness.attention_tile import _TILE_KEYS
    d = p.get("dsu")
    dsu = dict(dsu_cores=d["cores"], dsu_mem_bytes=d["mem_bytes"],
               dsu_intake_depth=d["intake_depth"], dsu_firmware=d["firmware"]) if d else \
        dict(dsu_cores=0)
    return DecodeTile(**{k: p[k] for k in _TILE_KEYS}, cdu=p["cdu"], max_slots=p["max_slots"],
                      engine=p["engine"], **dsu)


class CachedCosimTop(Elaboratable):
    """Simulation top of the cached tile: the shipped
    :class:`~tricut.rtl.tile.decode_tile.DecodeTile` without the DSU (``dut``: step sequencer
    -> CDU, L2 fill engine, new-token writer, unit streamer, TE array) <-> the behavioural HBM
    (reads and the writer's write-through) and L2 data array; the testbench drives the
    DecodeTile's ports."""

    def __init__(self, image, p, l2_latency=2):
        from tricut.rtl.tile.behavioural.hbm import HbmModel
        from tricut.rtl.tile.behavioural.l2 import L2Data
        self.p = p
        self.dut = decode_tile(dict(p, dsu=None))
        self.tile = t = self.dut.tile
        self.seq = self.dut.seq
        self.hbm = HbmModel(image, data_bits=t.data_bits, latency=p["latency"],
                            max_outstanding=p["hbm_outstanding"], max_beats=p["max_beats"],
                            id_bits=t.id_bits, reorder=p["reorder"], seed=p["hbm_seed"])
        st = t.streamer
        self.l2 = L2Data(st.frames, st.block_beats, data_bits=t.data_bits, latency=l2_latency,
                         max_outstanding=2, tag_bits=1)

    def elaborate(self, platform):
        from amaranth.hdl import Module
        from amaranth.lib import wiring
        m = Module()
        dut = self.dut
        m.submodules.dut, m.submodules.hbm, m.submodules.l2 = dut, self.hbm, self.l2
        wiring.connect(m, dut.hbm_req, self.hbm.req)
        wiring.connect(m, self.hbm.resp, dut.hbm_resp)
        wiring.connect(m, dut.hbm_write, self.hbm.write)
        wiring.connect(m, dut.l2_read, self.l2.read)
        wiring.connect(m, self.l2.data, dut.l2_data)
        wiring.connect(m, dut.l2_write, self.l2.write)
        m.d.comb += dut.reg_addr.eq(0)
        return m


def cosim_run(s: Setup, corrupt=None, golden: RunResult | None = None,
              max_layer_cycles=500_000) -> RunResult:
    """The tile side (see the module docs). ``corrupt=(addr, bit)`` flips one bit of the
    initial HBM image (the golden keeps it) to show that a difference is caught. With
    ``golden`` (its :func:`golden_run`) the run stops after the first layer whose outputs
    (or HBM ``err`` / TE status) differ from it."""
    from amaranth.sim import Simulator

    run = _Run(s)
    p = run.params()
    image, ts_bits = run.image()
    if corrupt is not None:
        image[corrupt[0]] ^= 1 << corrupt[1]
    cached = s.policy is not None
    top = CachedCosimTop(image, p) if cached else CosimTop(image, p)
    tile, hbm = top.tile, top.hbm
    dut = top.dut                   # the design whose ports the bench drives
    rounds_in = dut if cached else top.seq
    cfg, G, H = run.cfg, run.cfg.group_size, run.cfg.num_kv_heads
    rl, wl = round_layout(p["max_slots"]), hbm_write_layout(hbm.addr_bits, hbm.data_bits)
    ql = q_write_layout(tile.streamer.slot_bits, tile.streamer.hb, index_bits(tile.qbeats),
                        s.lanes)
    nl = tile.newkv_write.payload.shape() if cached else None
    res = RunResult(run.tokens)
    clock = [0]

    async def watch_txns(ctx):
        """The CDU's decisions as the new-token writer takes them."""
        t = tile.cdu.txn
        async for _, _, v, r, word in ctx.tick().sample(t.valid, t.ready, t.payload.as_value()):
            if v and r:
                res.txns.append(txn_fields(t.payload.shape(), word))

    async def new_kv(ctx, descs, lay):
        """The new token's K/V: into HBM directly (no CDU), or into the tile's new-K/V buffer
        (the CDU's W operations write it through to HBM, and into L2)."""
        for i, d in enumerate(descs):
            pos = int(lay.positions[i])
            if not cached:
                for a, w in run.token_words(lay.layer, d.request, pos).items():
                    await send(ctx, hbm.write, pack(wl, dict(addr=a, data=w)))
                continue
            for h, beats in enumerate(run.token_beats(lay.layer, d.request, pos)):
                for b, w in enumerate(beats):
                    await send(ctx, dut.newkv_write,
                               pack(nl, dict(request=d.request, kv_head=h, beat=b, data=w,
                                             pos=pos)))
        if cached:
            ctx.set(dut.layer, lay.layer)

    async def tick(ctx):
        await ctx.tick()
        clock[0] += 1

    async def send(ctx, stream, word):
        ctx.set(stream.valid, 1)
        ctx.set(stream.payload.as_value(), word)
        while True:                             # ready as sampled at the clock edge
            _, _, ready = await ctx.tick().sample(stream.ready)
            clock[0] += 1
            if ready:
                break
        ctx.set(stream.valid, 0)

    async def layer(ctx, ri, descs, lay):
        await new_kv(ctx, descs, lay)
        for i, d in enumerate(descs):                           # q of every (slot, kv_head)
            for h in range(H):
                qc = F.bf16_encode(lay.q[i, h * G:(h + 1) * G])
                for b, w in enumerate(pack_q_beats(qc, s.lanes)):
                    await send(ctx, dut.q_write, pack(ql, dict(slot=d.slot, kv_head=h, beat=b,
                                                                data=w)))
        ctx.set(dut.go, 1)
        t_go = clock[0]
        await tick(ctx)
        ctx.set(dut.go, 0)
        while not ctx.get(dut.done):
            await tick(ctx)
            if clock[0] - t_go > max_layer_cycles:
                raise TimeoutError(f"round {ri} layer {lay.layer}: tile not done after "
                                   f"{max_layer_cycles} cycles")
        res.layer_cycles[(ri, lay.layer)] = clock[0] - t_go
        if ctx.get(dut.err) or ctx.get(dut.te_status):
            res.problems.append(f"round {ri} layer {lay.layer}: HBM err {ctx.get(dut.err)}, "
                                f"TE status {ctx.get(dut.te_status):#x}")
        if cached and ctx.get(dut.misorder):
            res.problems.append(f"round {ri} layer {lay.layer}: misorder (a CDU ready entry or "
                                f"a job not the one expected)")
        attn = np.zeros(lay.q.shape, dtype=np.int64)
        for i, d in enumerate(descs):
            for h in range(H):
                for b in range(tile.qbeats):
                    ctx.set(dut.out_addr, tile.streamer.qbuf_addr(d.slot, h, b))
                    await tick(ctx)
                    row = unpack_out_beat(ctx.get(dut.out_data), s.lanes)[0]
                    g, c = divmod(b * s.lanes, cfg.head_dim)
                    attn[i, h * G + g, c:c + s.lanes] = row
            key = (ri, lay.layer, d.request)
            res.attn[key] = attn[i].copy()
            if golden is not None and not np.array_equal(golden.attn[key], attn[i]):
                res.stopped = True
        res.stopped |= golden is not None and bool(res.problems)
        return t_go, M.b2f(attn)

    async def bench(ctx):
        ctx.set(dut.tensor_scale, ts_bits)
        if cached:
            ctx.set(dut.config, fe_config(s.policy, "full", s.distance))
        for ri, descs in enumerate(run.rounds):
            # with a CDU every round is sent as the last one known ("end"): the DSU issues a
            # round only after the previous one completed, so the CDU's prefetch walk must
            # not wait for the next step's descriptor (it would wait forever)
            last = cached or ri == len(run.rounds) - 1
            await send(ctx, rounds_in.round, pack(rl, dict(step=descs[0].step, count=len(descs),
                                                     end=int(last))))
            for d in descs:
                await send(ctx, rounds_in.descriptor, pack(DESCRIPTOR_LAYOUT, dataclasses.asdict(d)))
            steps = decode_step_layers(run.weights, run.cache, run.batch(descs))
            lay, first = next(steps), None
            while True:
                t_go, attn = await layer(ctx, ri, descs, lay)
                first = t_go if first is None else first
                res.step_cycles[ri] = clock[0] - first
                if res.stopped:
                    if cached:
                        res.cdu_counters = _fields(dut.cdu_counters.shape(),
                                                   ctx.get(dut.cdu_counters.as_value()))
                    return
                try:
                    lay = steps.send(attn)
                except StopIteration as stop:
                    run.sampled(descs, stop.value)
                    break
        if cached:                      # the CDU's trailing decisions, then its counters
            for _ in range(max_layer_cycles):
                if ctx.get(dut.cdu_idle):
                    break
                await tick(ctx)
            res.cdu_counters = _fields(dut.cdu_counters.shape(),
                                       ctx.get(dut.cdu_counters.as_value()))

    sim = Simulator(top)
    sim.add_clock(1e-9)
    sim.add_testbench(bench)
    if cached:
        sim.add_testbench(watch_txns, background=True)
    sim.run()
    return res


def _fields(layout, word):
    """A payload int -> ``{field: int or nested dict}`` of a (nested) ``StructLayout``."""
    from amaranth.lib import data
    out = {}
    for name, f in layout:
        v = (int(word) >> f.offset) & ((1 << f.width) - 1)
        out[name] = _fields(f.shape, v) if isinstance(f.shape, data.StructLayout) else v
    return out


def txn_fields(layout, word):
    """A CDU ``txn`` payload int -> the tuple :func:`~tricut.sim.harness.cdu.txn_tuple`
    gives a model decision (kind, req, layer, block, result, victim valid, victim req,
    layer, block, hbm)."""
    f = _fields(layout, word)
    vic = f["victim"]
    return (f["kind"], f["req"], f["layer"], f["block"], f["result"], f["victim_valid"],
            vic["req"], vic["layer"], vic["block"], f["hbm"])


def compare(golden: RunResult, tile: RunResult, skip=frozenset()) -> list:
    """The differences, first first: tile problems (HBM ``err``, TE status), attention outputs
    (bit for bit, in run order; not those of the ``(round, request)`` steps in ``skip``),
    tokens."""
    out = list(tile.problems)
    for key in golden.attn:
        want, got = golden.attn[key], tile.attn.get(key)
        if (got is None and tile.stopped) or (key[0], key[2]) in skip:
            continue
        if got is None:
            out.append(f"round {key[0]} layer {key[1]} request {key[2]}: no tile output")
        elif not np.array_equal(want, got):
            hd, i = map(int, np.argwhere(want != got)[0])
            out.append(f"round {key[0]} layer {key[1]} request {key[2]}: attention[{hd}][{i}] = "
                       f"{int(got[hd, i]):#010x}, golden {int(want[hd, i]):#010x}")
    for r, toks in golden.tokens.items():
        if not tile.stopped and tile.tokens.get(r) != toks:
            out.append(f"request {r}: tokens {tile.tokens.get(r)}, golden {toks}")
    return out


def compare_dsu(s: Setup, golden: RunResult, tile: RunResult, fault_free=None) -> list:
    """With the DSU cluster: the rounds it issued, the steps that failed and the outcomes
    against the DSU model's run with the same faults (``golden``, which replays those rounds,
    rollbacks included); every attention output of a step that completed bit for bit against
    the golden's, none missing; the tokens exactly, and against the ``fault_free`` run's (a
    :class:`RunResult` of the same requests without faults) too."""
    out = []
    for ri, (a, b) in enumerate(zip(tile.rounds, golden.rounds)):
        if a != b:
            out.append(f"DSU round {ri}: the cluster issued {a}, the DSU model {b}")
            break
    else:
        if len(tile.rounds) != len(golden.rounds):
            out.append(f"DSU: the cluster issued {len(tile.rounds)} rounds, the DSU model "
                       f"{len(golden.rounds)}")
    if sorted(tile.failed) != golden.failed:
        out.append(f"failed steps (round, request): the tile {sorted(tile.failed)}, the faults "
                   f"{golden.failed}")
    if tile.outcomes != golden.outcomes:
        out.append(f"DSU outcomes: cluster {sorted(tile.outcomes.items())}, model "
                   f"{sorted(golden.outcomes.items())}")
    out += compare(golden, tile, skip=set(golden.failed))
    for r, toks in golden.tokens.items():
        if tile.tokens.get(r) != toks:
            continue                                # named by compare
        if fault_free is not None and toks != fault_free.tokens[r]:
            out.append(f"request {r}: tokens {toks}, the fault-free run's {fault_free.tokens[r]}")
    return out


@dataclass
class Report:
    """:func:`simulate`'s result: the setup, the prompt lengths, the DSU rounds (request ids
    per round), both runs and the differences (empty: bit-exact and the same tokens)."""
    setup: Setup
    prompt_lens: list
    rounds: list
    golden: RunResult
    tile: RunResult
    differences: list

    @property
    def ok(self):
        return not self.differences


def compare_cdu(s: Setup, tile: RunResult, golden: RunResult | None = None) -> list:
    """With a CDU policy: the tile's CDU decisions against the CDU golden model on the same
    step descriptors, transaction by transaction, and its counters (every counter the model
    defines the same way; a run that stopped early is compared on its prefix); with faults,
    ``hbm_retries`` against ``golden.cdu_retries`` and no ``hbm_failures``."""
    if s.policy is None:
        return []
    from tricut.rtl.cdu.core import COUNTERS
    core = _Run(s).cdu_reference()
    want = [txn_tuple(t) for t in core.txns]
    got = tile.txns
    for i, (a, b) in enumerate(zip(got, want)):
        if a != b:
            return [f"CDU txn {i}: tile {describe(a)}, model {describe(b)}"]
    if tile.stopped:
        return []
    if len(got) != len(want):
        return [f"CDU: the tile decided {len(got)} operations, the model {len(want)}"]
    c = core.counters()
    skip = ("prefetch_late", "hbm_reads", "hbm_retries", "hbm_failures")
    out = [f"CDU counter {k}: tile {tile.cdu_counters[k]}, model {c[k]}" for k in COUNTERS
           if k not in skip and tile.cdu_counters.get(k) != c[k]]
    if golden is not None and golden.cdu_retries is not None:
        want = {"hbm_retries": golden.cdu_retries, "hbm_failures": 0}
        out += [f"CDU counter {k}: tile {tile.cdu_counters.get(k)}, the faults {v}"
                for k, v in want.items() if tile.cdu_counters.get(k) != v]
    return out


def simulate(s: Setup, corrupt=None, strict=False, stop_early=True, sim="amaranth") -> Report:
    """Golden run, tile run, comparison (with a CDU policy, also of the CDU's decisions with
    its golden model). ``stop_early``: the tile run ends at the first layer that differs.
    ``strict``: raise :class:`CosimError` naming the first difference instead of returning it
    in the report. ``sim``: the tile's simulator, ``amaranth`` (:func:`cosim_run`) or
    ``verilator`` (:mod:`tricut.sim.harness.tile_cosim_verilator`: the same run, cycle for
    cycle)."""
    if s.dsu and sim != "verilator":
        raise SetupError("dsu", "the DSU cluster runs on Verilator only (sim='verilator')")
    if sim == "verilator":
        from tricut.sim.harness.tile_cosim_verilator import cosim_run_verilator as tile_run
    elif sim == "amaranth":
        tile_run = cosim_run
    else:
        raise SetupError("sim", f"must be amaranth or verilator, got {sim!r}")
    golden = golden_run(s)
    tile = tile_run(s, corrupt=corrupt, golden=golden if stop_early else None)
    fault_free = golden_run(dataclasses.replace(s, faults=(), hang=())) \
        if s.faults or s.hang else None
    diffs = (compare_dsu(s, golden, tile, fault_free) if s.dsu else compare(golden, tile)) + \
        compare_cdu(s, tile, golden)
    if strict and diffs:
        raise CosimError(f"{len(diffs)} difference(s); first: {diffs[0]}")
    rounds = [[d["request"] for d in descs] for descs in tile.rounds] if s.dsu else \
        [[d.request for d in descs] for descs in schedule(s)]
    return Report(s, s.lens(), rounds, golden, tile, diffs)
