"""The golden side of a tile co-simulation and the inputs both sides share (``docs/tile/cosim.md``,
"Co-simulation with the golden decode step").

The golden model plays the SMs (everything but attention: projections, RoPE, the MLP, the
logits, greedy sampling) through :func:`tricut.models.llama.decode_step`, with
:func:`te_golden_attention` as the attention: ``te_decode`` (its compiled twin) per KV head
on the quantised history, ``combine_partials`` of the partial runs of each split part when
``split_tokens`` splits the context. K/V quantisation: bf16 and fp8 element by element; NVFP4
with one tensor scale for the whole run (``amax`` of the prefilled cache / 2688), since the
tile has one ``tensor_scale`` input. Prefill (once per run; both sides start from copies of
it): the float32 reference ``prefill`` (there is no TE prefill path), so the tile and the
golden start from the same KV cache (:class:`RunInputs`); it is kept in ``.build/prefill``
(:func:`cached_prefill`), so a later run of the same prompts skips it. :func:`golden_run`
runs the DSU model's rounds; :class:`RunResult` holds either side's tokens, attention
outputs and cycles.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import pickle
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tricut.models import formats as F
from tricut.models import te as M
from tricut.models.cdu import HINT_OF_RESIDENCY, CDUCore, FrontEnd, SlotDesc, StepDesc
from tricut.models.llama import LlamaWeights, decode_step, prefill
from tricut.models.paged_kv import PagedKVCache
from tricut.models.tile import split_parts
from tricut.rtl.tile.attention_layouts import kv_addr, kv_image_words
from tricut.sim.harness.te import make_vector

from .hbm_image import kv_words
from .setup import (DSU_HEARTBEAT_LIMIT, CosimError, Setup, SetupError, check_setup,
                    dsu_schedule, fill_retries, watchdog_limit)

__all__ = ["te_golden_attention", "RunResult", "RunInputs", "Prefilled", "cdu_fault_retries",
           "golden_run", "cached_prefill", "WEIGHT_SEED_OFFSET", "PREFILL_CACHE"]

#: the random weights' seed: the setup's seed plus this
WEIGHT_SEED_OFFSET = 7


def te_golden_attention(kv_dtype, lanes, split_tokens=0, tensor_scale=None, record=None,
                        engine="serial"):
    """An ``attention_fn`` for :func:`tricut.models.llama.decode_step`: per KV head
    ``models.te.te_decode`` (the arithmetic of ``engine``; run as its compiled twin
    ``sim/fast/te_twin.py``, bit for bit the same) of its group's q (bf16) over the K/V
    history quantised as the TE takes it (:func:`tricut.sim.harness.te.make_vector`; NVFP4
    with ``tensor_scale``), or, when ``split_tokens`` splits the context
    (``models.tile.split_parts``), ``models.te.combine_partials`` of the partial runs of its
    parts, as the tile computes it.
    ``record`` (a list) gets each call's output as fp32 bit patterns ``[num_heads, d]``."""
    from tricut.sim.fast.te_twin import te_decode_fast

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
            res = [te_decode_fast(vec.q_codes, vec.k_codes[lo:hi], vec.v_codes[lo:hi], kv_dtype,
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
    first layer that differed from a golden run given to
    :func:`~tricut.sim.harness.tile.amaranth_run.cosim_run`."""
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


@dataclass
class Prefilled:
    """The prompts' prefill, the costliest part of a run's set-up: for ``key`` (what it
    depends on: model, seed, prompt lengths, steps), the weights (None in a plan sent to the
    Verilator bench, which makes its own), the prefilled cache and each request's first
    token."""
    key: tuple
    weights: object
    cache: PagedKVCache
    first: list


#: this process's last prefill (both sides of a run, and the runs of the same prompts, start
#: from a copy of it)
_LAST_PREFILL: list = []
#: the prefills of earlier runs, one file per key and version of the model code
PREFILL_CACHE = Path(__file__).resolve().parents[3] / ".build" / "prefill"


def _prefill_digest(key) -> str:
    """The key with what the prefill's numbers depend on: the code and configs of
    ``models/``, this module (the prompts, the weights' seed and scale) and the numpy
    version."""
    root = Path(__file__).resolve().parents[3] / "models"
    h = hashlib.sha256(json.dumps([list(key), np.__version__], default=str).encode())
    h.update(Path(__file__).read_bytes())
    for f in sorted(p for p in root.rglob("*") if p.suffix in (".py", ".toml", ".json")):
        h.update(str(f.relative_to(root)).encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:20]


def cached_prefill(key, compute):
    """``(cache, first tokens)`` of the prefill ``key`` from :data:`PREFILL_CACHE`, else
    ``compute()``'s, then kept there (written atomically: concurrent runs of the same
    prompts both end with the same file). The prefill is deterministic (exact sums,
    ``models/matmul.py``), so a kept one equals a recomputed one."""
    path = PREFILL_CACHE / f"{_prefill_digest(key)}.pkl"
    try:
        return pickle.loads(path.read_bytes())
    except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ValueError):
        pass
    value = compute()
    PREFILL_CACHE.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("wb", dir=PREFILL_CACHE, suffix=".tmp", delete=False) as f:
        pickle.dump(value, f)
    Path(f.name).replace(path)
    return value


class RunInputs:
    """The inputs both sides of a co-simulation share, built from the setup ``s`` alike: the
    model, weights, prompts, the prefilled cache and the first tokens, the DSU schedule and
    the NVFP4 tensor scale; the HBM image of the prefilled cache and each new token's K/V
    words, the run's parameter dict (:meth:`params`), the CDU golden model's decisions. A side
    advances the cache and the tokens as it runs the steps (:meth:`batch`, :meth:`sampled`,
    :meth:`roll_back`), so each side builds its own, from a copy of one prefill: this
    process's last one for the same prompts, or ``prefilled`` (:meth:`prefilled`, sent with
    the Verilator bench's plan)."""

    def __init__(self, s: Setup, prefilled: Prefilled | None = None):
        self.s = s
        self.cfg = cfg = check_setup(s)
        rng = np.random.default_rng(s.seed)
        self.lens = s.lens()
        self.prompts = [rng.integers(0, cfg.vocab_size, n) for n in self.lens]
        self.rounds, self.failed, self.outcomes = dsu_schedule(s)
        key = (s.model, s.seed, tuple(self.lens), s.steps)
        if prefilled is None and _LAST_PREFILL and _LAST_PREFILL[0].key == key:
            prefilled = _LAST_PREFILL[0]
        if prefilled is not None and prefilled.key != key:
            raise CosimError(f"a prefill of {prefilled.key} given for a run of {key}")
        if prefilled is None:
            prefilled = self._prefill(key)
            _LAST_PREFILL[:] = [prefilled]
        self._source = prefilled
        self.weights = prefilled.weights or self._weights()
        self.cache = copy.deepcopy(prefilled.cache)
        self.tokens = {r: [t] for r, t in enumerate(prefilled.first)}
        self.ts = None
        if s.kv_dtype == "nvfp4":
            amax = max(float(np.max(np.abs(a))) for li in range(cfg.num_layers)
                       for r in range(s.requests) for a in self.cache.gather(li, r))
            self.ts = np.float32(amax) / np.float32(2688.0) if amax > 0 else np.float32(1.0)

    def _weights(self):
        cfg = self.cfg
        return LlamaWeights.random(cfg, seed=self.s.seed + WEIGHT_SEED_OFFSET,
                                   std=0.15 * (64 / cfg.hidden_size) ** 0.5)

    def _prefill(self, key) -> Prefilled:
        weights = self._weights()

        def compute():
            cache = PagedKVCache.for_model(
                self.cfg, sum(-(-(p + self.s.steps) // 16) for p in self.lens), 16)
            first = [int(np.argmax(prefill(weights, cache, r, p)))
                     for r, p in enumerate(self.prompts)]
            return cache, first
        cache, first = cached_prefill(key, compute)
        return Prefilled(key, weights, cache, first)

    def prefilled(self) -> Prefilled:
        """The prefill this run started from, without the weights (for the Verilator bench's
        plan)."""
        p = self._source
        return Prefilled(p.key, None, p.cache, p.first)

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
                    hbm_outstanding=s.max_outstanding, hbm_rate=s.hbm_rate,
                    engine=s.te_engine(),
                    cdu=None if s.policy is None else dict(sets=s.cdu_sets, ways=s.cdu_ways),
                    **self.dsu_cluster_params())

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
        s, cfg, geo = self.s, self.cfg, self._geometry()
        words = [0] * kv_image_words(s.requests, cfg.num_layers, cfg.num_kv_heads, s.max_ctx,
                                     cfg.head_dim, s.lanes)
        for r in range(s.requests):
            for li in range(cfg.num_layers):
                k, v = self.cache.gather(li, r)
                for h in range(cfg.num_kv_heads):
                    kc, vc, ks, vs = self.codes(k[:, h], v[:, h])
                    beats = kv_words(kc, vc, s.kv_dtype, s.lanes, ks, vs)
                    a = kv_addr(r, li, h, 0, **geo)
                    words[a:a + len(beats)] = beats
        return words, int(M.f2b(self.ts)) if s.kv_dtype == "nvfp4" else 0

    def token_beats(self, layer, request, pos):
        """Token ``pos``'s K/V words per KV head: ``[H][2*Dk]`` as the HBM image holds them."""
        s, cfg = self.s, self.cfg
        k, v = self.cache.gather(layer, request)
        out = []
        for h in range(cfg.num_kv_heads):
            kc, vc, ks, vs = self.codes(k[pos:pos + 1, h], v[pos:pos + 1, h])
            out.append(kv_words(kc, vc, s.kv_dtype, s.lanes, ks, vs))
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
        from tricut.rtl.tile.attention_path import CDU_FE_ENTRIES
        fe = FrontEnd(s.policy, s.cdu_sets * s.cdu_ways, distance=s.distance,
                      entries=CDU_FE_ENTRIES)
        core = CDUCore(s.cdu_sets, s.cdu_ways)
        for step in self.cdu_steps():       # one step at a time: each is the last one known
            for op in fe.ops([step], lambda st, sd, ly: list(range(-(-sd.seq_len // 16)))):
                core.apply(op)
        return core


def cdu_fault_retries(run: RunInputs) -> int:
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


def golden_run(s: Setup) -> RunResult:
    """The expected side: the DSU's rounds through ``decode_step`` with
    :func:`te_golden_attention`."""
    run = RunInputs(s)
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
