"""A tile co-simulation's parameters and what follows from them alone (``docs/tile/cosim.md``):
:class:`Setup` and its checks (:func:`check_setup`, :class:`SetupError`), the synthetic prompt
lengths, the DSU model's schedule of the run (:func:`dsu_schedule`, :func:`schedule`), the DSU's
slot watchdog limit (:func:`watchdog_limit`), and the timing model's configuration of the
setup's tile (:func:`tile_config`, :func:`predict_dsu_rounds`). :class:`CosimError` is
the error of a run whose tile and golden differ.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from tricut.models import te as M
from tricut.models.tile_timing import (CDU_FE_ENTRIES, TileConfig, cdu_decisions, host_gaps,
                                             predict_dsu_run, predict_run)
from tricut.models.cdu import HINT_OF_RESIDENCY, POLICIES, SlotDesc, StepDesc
from tricut.models.config import KV_DTYPES, load_model
from tricut.models.dsu import PROFILES, DsuModel, DsuParams, RequestSpec
from tricut.models.tile import TILE_ENGINES, TILE_LANES, split_parts
from tricut.rtl.cdu.layouts import Widths, seq_bits
from tricut.rtl.tile.attention_layouts import kv_image_words
from tricut.rtl.tile.behavioural.hbm import MAX_LATENCY, MAX_OUTSTANDING, check_rate

__all__ = ["Setup", "SetupError", "CosimError", "check_setup", "cdu_run_decisions",
           "layer_cycle_limit", "estimate_cycles", "estimate_run", "tile_sim_rate",
           "prompt_lengths", "dsu_schedule",
           "schedule", "watchdog_limit", "tile_config", "predict_layers",
           "predict_dsu_rounds",
           "fill_retries", "ENGINES", "MAX_REQUESTS", "MAX_CTX", "MAX_IMAGE_WORDS", "DSU_WATCHDOG_LIMIT",
           "DSU_HEARTBEAT_LIMIT", "WATCHDOG_MARGIN", "CDU_RETRIES", "FAULT_SLOTS",
           "TILE_SIM_CYCLES_PER_S", "TILE_BUILD_S"]

#: engines the co-simulation accepts (the TE array's 1..MAX_ENGINES; 8 in
#: benchmarks/tile_real_layer.py)
ENGINES = (1, 16)
#: requests: the sequencer's request field (``Widths().req`` bits)
MAX_REQUESTS = 1 << Widths().req
#: the longest context region: the largest multiple of 16 below ``2**seq_bits`` (the
#: sequencer's and the block reader's sequence field)
MAX_CTX = ((1 << seq_bits(Widths())) - 1) // 16 * 16
#: the behavioural HBM's depth limit
MAX_IMAGE_WORDS = 1 << 22
#: the DSU's slot watchdog and firmware heartbeat limits in a tile run: far beyond any round
#: (a round includes the host's traffic, one word per cycle)
DSU_WATCHDOG_LIMIT = (1 << 24) - 1
DSU_HEARTBEAT_LIMIT = (1 << 24) - 1
#: the automatic slot watchdog with ``hang``: twice the longest predicted round plus this
WATCHDOG_MARGIN = 1024
#: the CDU's HBM retries (``CDU_DEFAULTS["max_retries"]``)
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
    #: the shipped DecodeTile's lanes (``tricut tile run --lanes``' default too)
    lanes: int = 32
    #: the TE array's engine design (``models.tile.TILE_ENGINES``); None: the shipped
    #: ``pipelined``
    engine: str | None = None
    split_tokens: int = 0
    max_ctx: int = 64
    max_batch: int | None = None
    profile: str = "throughput-opt"
    seed: int = 0
    latency: int = 8
    max_beats: int = 16
    max_outstanding: int = 4
    #: the HBM model's bandwidth: at most ``num`` beats per ``den`` cycles
    #: (``HbmModel(rate=)``); ``(1, 1)``: one beat per cycle
    hbm_rate: tuple = (1, 1)
    #: the CDU in the K/V path with this policy (``disabled``, ``static``, ``adaptive``);
    #: None: the tile without the CDU (``DecodeTile(cdu=None)``: the unit streamer reads
    #: every block from HBM, no L2)
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
        return "pipelined" if self.engine is None else self.engine

    def lens(self):
        return list(self.prompt_lens) if self.prompt_lens is not None else \
            prompt_lengths(self.requests, self.max_prompt, self.seed)


#: entries of the HBM model's run-time fault table (the Verilator top's ``hbm_faults`` port,
#: :class:`~tricut.sim.harness.tile.verilator_top.HbmRwModel`): the most ``faults`` a run takes
FAULT_SLOTS = 4


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
    if s.prompt_lens is None and (not _int(s.max_prompt) or not 1 <= s.max_prompt <= MAX_CTX):
        # checked before the lengths are drawn (a permutation of 1..max_prompt)
        raise SetupError("max_prompt", f"must be in 1..{MAX_CTX} (the longest context the tile "
                                       f"takes), got {s.max_prompt!r}")
    if not _int(s.steps) or s.steps < 1:
        raise SetupError("steps", f"must be >= 1, got {s.steps!r}")
    if s.kv_dtype not in KV_DTYPES:
        raise SetupError("kv_dtype", f"must be one of {', '.join(KV_DTYPES)}, "
                                     f"got {s.kv_dtype!r}")
    if not _int(s.engines) or not ENGINES[0] <= s.engines <= ENGINES[1]:
        raise SetupError("engines", f"must be in {ENGINES[0]}..{ENGINES[1]}, got {s.engines!r}")
    if lanes not in TILE_LANES:
        raise SetupError("lanes", f"must be one of {', '.join(map(str, TILE_LANES))}, got {lanes!r}")
    if s.engine is not None and s.engine not in TILE_ENGINES:
        raise SetupError("engine", f"must be one of {', '.join(TILE_ENGINES)}, got {s.engine!r}")
    if not _int(s.max_ctx) or not 16 <= s.max_ctx <= MAX_CTX or s.max_ctx % 16:
        raise SetupError("max_ctx", f"must be a multiple of 16 (whole KV blocks) in "
                                    f"16..{MAX_CTX}, got {s.max_ctx!r}")
    if not _int(s.split_tokens) or not 0 <= s.split_tokens <= s.max_ctx:
        raise SetupError("split_tokens", f"must be in 0..max_ctx ({s.max_ctx}), "
                                         f"got {s.split_tokens!r}")
    if s.policy is not None:
        if s.policy not in POLICIES:
            raise SetupError("policy", f"must be one of {', '.join(POLICIES)}, got {s.policy!r}")
        if not _int(s.cdu_sets) or not 1 <= s.cdu_sets <= 1024 or s.cdu_sets & (s.cdu_sets - 1):
            raise SetupError("cdu_sets", f"must be a power of 2 in 1..1024, got {s.cdu_sets!r}")
        if not _int(s.cdu_ways) or not 1 <= s.cdu_ways <= 16:
            raise SetupError("cdu_ways", f"must be in 1..16, got {s.cdu_ways!r}")
        if not _int(s.distance) or not 0 <= s.distance <= 255:
            raise SetupError("distance", f"must be in 0..255, got {s.distance!r}")
        if not _int(s.long_context) or s.long_context < 1:
            raise SetupError("long_context", f"must be >= 1, got {s.long_context!r}")
    if not _int(s.latency) or not 1 <= s.latency <= MAX_LATENCY:
        raise SetupError("latency", f"must be in 1..{MAX_LATENCY} cycles, got {s.latency!r}")
    if not _int(s.max_outstanding) or not 1 <= s.max_outstanding <= MAX_OUTSTANDING:
        raise SetupError("max_outstanding", f"must be in 1..{MAX_OUTSTANDING}, "
                                            f"got {s.max_outstanding!r}")
    try:
        check_rate(s.hbm_rate)
    except ValueError as e:
        raise SetupError("hbm_rate", str(e).removeprefix("rate must be ")) from None
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
    """The timing model's configuration of the setup's tile
    (:class:`~tricut.models.tile_timing.TileConfig`; ``l2`` False without a CDU
    policy)."""
    cfg = load_model(s.model)
    return TileConfig(engines=s.engines, head_dim=cfg.head_dim, G=cfg.group_size,
                            lanes=s.lanes, num_kv_heads=cfg.num_kv_heads,
                            num_layers=cfg.num_layers, split_tokens=s.split_tokens,
                            latency=s.latency, max_beats=s.max_beats,
                            max_outstanding=s.max_outstanding,
                            hbm_outstanding=s.max_outstanding, hbm_rate=s.hbm_rate,
                            engine=s.te_engine(),
                            kv_dtype=s.kv_dtype, l2=s.policy is not None)


def cdu_run_decisions(s: Setup, rounds, policy=None):
    """The CDU golden model's decisions on ``rounds`` (descriptor dicts or descriptors) under
    ``policy`` (default the setup's; none without a policy)."""
    policy = policy or s.policy
    if policy is None:
        return []
    layers = tuple(range(load_model(s.model).num_layers))
    steps = [StepDesc(_d(r[0])["step"], tuple(SlotDesc(d["slot"], d["request"], d["seq_len"],
                                                       HINT_OF_RESIDENCY[d["residency"]])
                                              for d in map(_d, r)), layers)
             for r in rounds]
    return cdu_decisions(policy, s.cdu_sets, s.cdu_ways, s.distance, steps, CDU_FE_ENTRIES)


def _d(desc):
    return desc if isinstance(desc, dict) else dataclasses.asdict(desc)


def predict_layers(s: Setup):
    """The tile timing model's ``{(round, layer): cycles}`` (``go`` to ``done``) of the
    harness-driven run of ``s`` (the DSU model's schedule, the CDU golden model's
    decisions)."""
    rounds = schedule(s)
    return predict_run(tile_config(s), [[(d.slot, d.request, d.seq_len) for d in r]
                                        for r in rounds], cdu_run_decisions(s, rounds))


def predict_dsu_rounds(s: Setup, rounds, firsts, policy=None, retries=None):
    """The tile timing model with the DSU in the loop
    (:func:`~tricut.models.tile_timing.predict_dsu_run`) for setup ``s`` on
    ``rounds`` (descriptor dicts, as ``RunResult.rounds``) starting at the ``firsts`` cycles
    (each round's first descriptor, ``RunResult.round_spans``: the DSU firmware's time between
    rounds is an input), with the CDU golden model's decisions under ``policy`` (default the
    setup's) and the CDU's fill retries of ``s.faults``: a faulty block's first fill (which
    :func:`~.golden.cdu_fault_retries` checks it is) reads all its kv heads on every attempt,
    so it is
    answered with ``err`` as long as any of its heads' counts lasts (``retries``: per
    ``(request, layer, block)`` the max of its faults' ``fails``), unless ``retries`` is
    given (``{}``: ignore the faults). Returns (cycles per round, ``{(round, layer):
    cycles}``)."""
    cfg = tile_config(s)
    decisions = cdu_run_decisions(s, rounds, policy)
    if retries is None:
        retries = fill_retries(s.faults) if s.policy is not None else {}
    layers = {}
    cycles = predict_dsu_run(cfg, [[(d["slot"], d["request"], d["seq_len"]) for d in r]
                                   for r in rounds], decisions, firsts, layers=layers,
                             retries=retries)
    return cycles, layers


def _check_dsu(s: Setup, cfg, lens):
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
    if len(faults) > FAULT_SLOTS:
        raise SetupError("faults", f"at most {FAULT_SLOTS}, got {len(faults)}")
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
    the CDU's retries recover every fault
    (:func:`~tricut.sim.harness.tile.golden.cdu_fault_retries`): no step fails."""
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


#: a layer's hang guard beyond its work (:func:`layer_cycle_limit`)
HANG_MARGIN = 500_000


def layer_cycle_limit(s: Setup) -> int:
    """Cycles after ``go`` at which a layer of ``s`` counts as hung: far beyond any layer the
    tile can take, :data:`HANG_MARGIN` plus 4 × (the longest context's K/V words at the
    HBM rate, plus one HBM latency per block: every block of every request of a round,
    read one after another)."""
    cfg = load_model(s.model)
    lens = [n + s.steps for n in s.lens()]
    dk = cfg.head_dim // s.lanes
    words = sum(lens) * 2 * dk * cfg.num_kv_heads
    blocks = sum(-(-n // 16) for n in lens) * cfg.num_kv_heads
    num, den = s.hbm_rate
    return HANG_MARGIN + 4 * (-(-words * den // num) + blocks * s.latency)


#: the co-simulation's speed the run estimates use, whole-run cycles per second of a one-engine
#: tile (docs/tile/figures.md, "Co-simulation speed": Amaranth 94-109; Verilator's whole bench
#: 48,720-50,327 with one engine, 28,656-30,349 with four, so E engines ~sqrt(E) times slower)
TILE_SIM_CYCLES_PER_S = {"amaranth": 90, "verilator": 45_000}
#: a first Verilator build of a tile shape, at most (docs/tile/figures.md: 30-160 s)
TILE_BUILD_S = 160


def estimate_cycles(s: Setup) -> int:
    """The run's cycles, roughly, for the estimate that refuses a run too long to wait for
    (:func:`predict_layers` is exact but steps every cycle: minutes for a long run). Per round
    of the DSU model's schedule and per layer: the host's traffic
    (:func:`~tricut.models.tile_timing.host_gaps`) and ``go`` to ``done`` as the larger of
    the TE jobs (each KV head of each request, or of each split part: ``te_cycles`` and one
    HBM latency) spread over the engines and the K/V words at the HBM rate; 60-100 % of the
    timing model's cycles on the tested setups."""
    cfg = tile_config(s)
    num, den = s.hbm_rate
    total = 0
    for descs in schedule(s):
        before, after, head = host_gaps(cfg, len(descs))
        jobs, words = [], 0
        for d in descs:
            n, step = d.seq_len, s.split_tokens
            parts = split_parts(n, step)
            for size in [n] if parts == 1 else [min(step, n - i * step) for i in range(parts)]:
                cycles = M.te_cycles(size, cfg.head_dim, cfg.G, s.lanes, partial=parts > 1,
                                     engine=s.te_engine(), kv_dtype=s.kv_dtype)
                jobs += [cycles + s.latency] * cfg.num_kv_heads
            words += n * 2 * cfg.dk * cfg.num_kv_heads
        layer = max(max(jobs), -(-sum(jobs) // s.engines), -(-words * den // num))
        total += head + cfg.num_layers * (before + layer + after)
    return total


def estimate_run(s: Setup, sim: str) -> tuple[int, float]:
    """``(cycles, seconds)``: :func:`estimate_cycles` and the wall time they take on ``sim``
    at :data:`TILE_SIM_CYCLES_PER_S` (on Verilator plus a first build, :data:`TILE_BUILD_S`)."""
    cycles = estimate_cycles(s)
    seconds = cycles / tile_sim_rate(s, sim)
    return cycles, seconds + (TILE_BUILD_S if sim == "verilator" else 0)


def tile_sim_rate(s: Setup, sim: str) -> float:
    """Cycles per second of the setup's tile on ``sim`` (:data:`TILE_SIM_CYCLES_PER_S`)."""
    return TILE_SIM_CYCLES_PER_S[sim] / s.engines ** 0.5


def watchdog_limit(s: Setup):
    """The DSU's slot watchdog limit of the run (see :attr:`Setup.watchdog`)."""
    if s.watchdog is not None:
        return s.watchdog
    if not s.hang:
        return DSU_WATCHDOG_LIMIT
    rounds, _, _ = dsu_schedule(dataclasses.replace(s, hang=()))
    cfg = tile_config(s)
    longest = max(predict_dsu_run(cfg, [[(d.slot, d.request, d.seq_len) for d in r]], [], [0])[0]
                  for r in rounds)
    return min(DSU_WATCHDOG_LIMIT, 2 * longest + WATCHDOG_MARGIN)


def schedule(s: Setup):
    """The DSU model's rounds for the run without faults: a list of descriptor lists (empty
    rounds dropped), every completion ``ok``."""
    rounds, _, outcomes = dsu_schedule(dataclasses.replace(s, faults=()))
    assert all(o.status == "completed" for o in outcomes.values()), outcomes
    return rounds


def fill_retries(faults):
    """The failed attempts of each faulty block's first CDU fill, ``{(request, layer,
    block): max fails}``: a fill reads every kv head of its block on each attempt, so it fails
    while any of the block's faults lasts."""
    worst = {}
    for r, li, _, b, n in faults:
        worst[(r, li, b)] = max(worst.get((r, li, b), 0), n)
    return worst
