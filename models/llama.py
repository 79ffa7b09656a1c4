"""Golden model of a Llama-family decoder (Llama-3, Qwen2): prefill and batched decode step.

Pure numpy, float32 arithmetic in Hugging Face ``transformers``' order (RMSNorm in float32,
RoPE with HF's ``rotate_half`` convention, eager attention with a float32 softmax), so its
logits agree with ``LlamaForCausalLM`` / ``Qwen2ForCausalLM`` run in float32 to ~1e-6
relative. Every matrix product is :func:`~tricut.models.matmul.matmul` (the exact sum of the
products, rounded once to float32), so a step's bits do not depend on the BLAS thread
count, the processor or the process that runs it. See ``docs/decode-step.md``.

* :class:`LlamaWeights` — weights in HF's ``[out_features, in_features]`` layout;
  :meth:`LlamaWeights.random` makes deterministic random ones from a seed;
  :func:`to_hf` builds the matching ``transformers`` model (torch is imported only there).
* :func:`prefill` — run a request's prompt (or a chunk of it), writing K/V into the
  :class:`~tricut.models.paged_kv.PagedKVCache`.
* :func:`decode_step` — one token for each request of a batch, each at its own position;
  :func:`decode_step_layers` — the same step as a generator that hands each layer's attention
  to its caller (how a co-simulation plays the attention hardware, ``docs/tile/cosim.md``).
* :func:`generate` — prefill several prompts, then decode them as one batch.

Attention is a parameter (``attention_fn`` / ``prefill_attention_fn``, see
:mod:`tricut.models.attention`) so a bit-exact model of the TE datapath can replace the
float32 reference.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from .attention import AttentionFn, decode_attention, prefill_attention
from .matmul import matmul
from .paged_kv import DEFAULT_BLOCK_SIZE, PagedKVCache
from .sampling import GREEDY, SamplingParams, sample

__all__ = [
    "LayerWeights", "LlamaWeights", "rms_norm", "silu", "swiglu", "rope_inv_freq", "rope_cos_sin",
    "apply_rope", "prefill", "decode_step", "decode_step_layers", "DecodeLayer", "generate",
    "Generation", "hf_config", "to_hf",
]

_F32 = np.float32


# ---- weights -----------------------------------------------------------------------------

@dataclass
class LayerWeights:
    """One decoder layer. Projections are ``[out, in]`` (HF ``nn.Linear.weight``)."""

    input_norm: np.ndarray      # [hidden]
    wq: np.ndarray              # [heads*head_dim, hidden]
    wk: np.ndarray              # [kv_heads*head_dim, hidden]
    wv: np.ndarray              # [kv_heads*head_dim, hidden]
    wo: np.ndarray              # [hidden, heads*head_dim]
    post_norm: np.ndarray       # [hidden]
    w_gate: np.ndarray          # [ffn, hidden]
    w_up: np.ndarray            # [ffn, hidden]
    w_down: np.ndarray          # [hidden, ffn]
    bq: np.ndarray | None = None  # [heads*head_dim]     (Qwen2: qkv_bias)
    bk: np.ndarray | None = None  # [kv_heads*head_dim]
    bv: np.ndarray | None = None  # [kv_heads*head_dim]


# (our attribute, HF name under model.layers.{i}.)
_LAYER_HF_NAMES = (
    ("input_norm", "input_layernorm.weight"),
    ("wq", "self_attn.q_proj.weight"), ("bq", "self_attn.q_proj.bias"),
    ("wk", "self_attn.k_proj.weight"), ("bk", "self_attn.k_proj.bias"),
    ("wv", "self_attn.v_proj.weight"), ("bv", "self_attn.v_proj.bias"),
    ("wo", "self_attn.o_proj.weight"),
    ("post_norm", "post_attention_layernorm.weight"),
    ("w_gate", "mlp.gate_proj.weight"), ("w_up", "mlp.up_proj.weight"),
    ("w_down", "mlp.down_proj.weight"),
)


@dataclass
class LlamaWeights:
    """All weights of a model. With ``cfg.tie_embeddings`` ``lm_head is embed``."""

    cfg: object                 # ModelConfig
    embed: np.ndarray           # [vocab, hidden]
    layers: list[LayerWeights]
    final_norm: np.ndarray      # [hidden]
    lm_head: np.ndarray         # [vocab, hidden]

    @classmethod
    def random(cls, cfg, seed: int = 0, std: float = 0.15) -> "LlamaWeights":
        """Deterministic random weights: every matrix and bias ~ N(0, std²), every norm
        weight ~ 1 + N(0, std²) (so the norms are exercised), float32, drawn from
        ``numpy.random.default_rng(seed)`` in a fixed order."""
        rng = np.random.default_rng(seed)
        h, d, f = cfg.hidden_size, cfg.head_dim, cfg.ffn_size
        qd, kvd = cfg.num_heads * d, cfg.num_kv_heads * d

        def mat(*shape):
            return (rng.standard_normal(shape, dtype=_F32) * _F32(std)).astype(_F32)

        def norm():
            return (_F32(1) + mat(h)).astype(_F32)

        embed = mat(cfg.vocab_size, h)
        layers = []
        for _ in range(cfg.num_layers):
            lw = LayerWeights(
                input_norm=norm(), wq=mat(qd, h), wk=mat(kvd, h), wv=mat(kvd, h), wo=mat(h, qd),
                post_norm=norm(), w_gate=mat(f, h), w_up=mat(f, h), w_down=mat(h, f))
            if cfg.qkv_bias:
                lw.bq, lw.bk, lw.bv = mat(qd), mat(kvd), mat(kvd)
            layers.append(lw)
        final_norm = norm()
        lm_head = embed if cfg.tie_embeddings else mat(cfg.vocab_size, h)
        return cls(cfg, embed, layers, final_norm, lm_head)

    def state_dict(self) -> dict[str, np.ndarray]:
        """Weights under Hugging Face ``LlamaForCausalLM`` / ``Qwen2ForCausalLM`` names
        (``lm_head.weight`` is included also when tied)."""
        sd = {"model.embed_tokens.weight": self.embed}
        for i, lw in enumerate(self.layers):
            for attr, name in _LAYER_HF_NAMES:
                value = getattr(lw, attr)
                if value is not None:
                    sd[f"model.layers.{i}.{name}"] = value
        sd["model.norm.weight"] = self.final_norm
        sd["lm_head.weight"] = self.lm_head
        return sd

    @classmethod
    def from_state_dict(cls, cfg, sd) -> "LlamaWeights":
        """Inverse of :meth:`state_dict`; values may be numpy arrays or torch tensors."""
        def get(name):
            v = sd[name]
            if hasattr(v, "detach"):
                v = v.detach().cpu().float().numpy()
            return np.ascontiguousarray(v, dtype=_F32)

        layers = []
        for i in range(cfg.num_layers):
            kw = {}
            for attr, name in _LAYER_HF_NAMES:
                key = f"model.layers.{i}.{name}"
                if attr in ("bq", "bk", "bv"):
                    kw[attr] = get(key) if cfg.qkv_bias else None
                else:
                    kw[attr] = get(key)
            layers.append(LayerWeights(**kw))
        embed = get("model.embed_tokens.weight")
        lm_head = embed if cfg.tie_embeddings else get("lm_head.weight")
        return cls(cfg, embed, layers, get("model.norm.weight"), lm_head)


# ---- building blocks ----------------------------------------------------------------------

def rms_norm(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    """``weight * (x * rsqrt(mean(x², -1) + eps))``, float32 (HF ``LlamaRMSNorm``)."""
    x = np.asarray(x, dtype=_F32)
    var = np.mean(x * x, axis=-1, keepdims=True, dtype=_F32)
    return weight * (x * (_F32(1) / np.sqrt(var + _F32(eps))))


def silu(x: np.ndarray) -> np.ndarray:
    """``x * sigmoid(x)``, float32."""
    with np.errstate(over="ignore"):
        return x / (_F32(1) + np.exp(-x))


def swiglu(x: np.ndarray, lw: LayerWeights) -> np.ndarray:
    """``down(silu(gate(x)) * up(x))``."""
    return matmul(silu(matmul(x, lw.w_gate.T)) * matmul(x, lw.w_up.T), lw.w_down.T)


def rope_inv_freq(head_dim: int, theta: float) -> np.ndarray:
    """``1 / theta^(2i / head_dim)``, i = 0 .. head_dim/2 - 1, float32 (HF default RoPE)."""
    exponent = np.arange(0, head_dim, 2, dtype=_F32) / _F32(head_dim)
    return (_F32(1) / (_F32(theta) ** exponent)).astype(_F32)


def rope_cos_sin(positions, head_dim: int, theta: float) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin ``[len(positions), head_dim]`` of angles ``pos * inv_freq``, the
    frequencies repeated twice (``cat(freqs, freqs)``, HF convention)."""
    pos = np.asarray(positions, dtype=_F32)
    freqs = pos[:, None] * rope_inv_freq(head_dim, theta)[None, :]
    emb = np.concatenate([freqs, freqs], axis=-1)
    return np.cos(emb), np.sin(emb)


def apply_rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """``x * cos + rotate_half(x) * sin`` with ``rotate_half([a, b]) = [-b, a]``.

    ``x`` [T, heads, head_dim], ``cos``/``sin`` [T, head_dim]."""
    half = x.shape[-1] // 2
    rot = np.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * cos[:, None, :] + rot * sin[:, None, :]


def _qkv(x: np.ndarray, lw: LayerWeights, cfg, positions,
         q_from: int = 0) -> tuple[np.ndarray, ...]:
    """Projections of normed hidden states ``x`` [T, hidden] -> q [T - q_from, H, D] (of rows
    ``q_from ..``), k/v [T, KVH, D], RoPE applied to q and k."""
    t, d = x.shape[0], cfg.head_dim
    q = matmul(x[q_from:], lw.wq.T)
    k = matmul(x, lw.wk.T)
    v = matmul(x, lw.wv.T)
    if lw.bq is not None:
        q, k, v = q + lw.bq, k + lw.bk, v + lw.bv
    q = q.reshape(t - q_from, cfg.num_heads, d)
    k = k.reshape(t, cfg.num_kv_heads, d)
    v = v.reshape(t, cfg.num_kv_heads, d)
    cos, sin = rope_cos_sin(positions, d, cfg.rope_theta)
    return apply_rope(q, cos[q_from:], sin[q_from:]), apply_rope(k, cos, sin), v


def _check_tokens(cfg, tokens) -> np.ndarray:
    tok = np.asarray(tokens)
    if tok.ndim == 1 and tok.size == 0:
        return tok.astype(np.int64)
    if tok.ndim != 1 or not np.issubdtype(tok.dtype, np.integer):
        raise ValueError(f"tokens must be a 1-D sequence of integer ids, got {tok.dtype} {tok.shape}")
    bad = (tok < 0) | (tok >= cfg.vocab_size)
    if bad.any():
        raise ValueError(f"token id {int(tok[bad][0])} is outside the vocabulary [0, {cfg.vocab_size})")
    return tok.astype(np.int64)


def _check_cache(weights: LlamaWeights, cache: PagedKVCache) -> None:
    cfg = weights.cfg
    if (cache.num_layers, cache.num_kv_heads, cache.head_dim) != \
            (cfg.num_layers, cfg.num_kv_heads, cfg.head_dim):
        raise ValueError(
            f"KV cache shape (layers {cache.num_layers}, kv_heads {cache.num_kv_heads}, head_dim "
            f"{cache.head_dim}) does not fit model {cfg.name!r} ({cfg.num_layers}, "
            f"{cfg.num_kv_heads}, {cfg.head_dim})")


# ---- prefill and decode -------------------------------------------------------------------

def prefill(weights: LlamaWeights, cache: PagedKVCache, request_id, tokens: Sequence[int], *,
            all_logits: bool = False,
            prefill_attention_fn: AttentionFn = prefill_attention) -> np.ndarray:
    """Run ``tokens`` of one request through the model, appending their K/V to the cache.

    A new ``request_id`` is registered; a known one continues from its current length
    (chunked prefill). Returns the logits of the last token ``[vocab]`` or, with
    ``all_logits``, of every token ``[len(tokens), vocab]``.
    """
    cfg = weights.cfg
    _check_cache(weights, cache)
    tok = _check_tokens(cfg, tokens)
    if tok.size == 0:
        raise ValueError(f"request {request_id!r}: prefill needs at least one token")
    new = request_id not in cache
    start = 0 if new else cache.seq_len(request_id)
    if start + tok.size > cfg.max_context:
        raise ValueError(f"request {request_id!r}: {start + tok.size} tokens exceed max_context "
                         f"{cfg.max_context} of model {cfg.name!r}")
    if new:
        cache.add_request(request_id)
    try:
        cache.extend(request_id, tok.size)
    except ValueError:
        if new:
            cache.free(request_id)
        raise
    positions = np.arange(start, start + tok.size)
    scale = float(cfg.head_dim) ** -0.5
    x = weights.embed[tok]
    for li, lw in enumerate(weights.layers):
        h = rms_norm(x, lw.input_norm, cfg.rms_norm_eps)
        # Rows are independent past the K/V (every product is exact per entry): without
        # all_logits, the last layer needs its queries and the rest for the last row only.
        q_from = tok.size - 1 if li == cfg.num_layers - 1 and not all_logits else 0
        q, k, v = _qkv(h, lw, cfg, positions, q_from)
        cache.write(li, request_id, start, k, v)
        kh, vh = cache.gather(li, request_id)
        x = x[q_from:]
        attn = np.asarray(prefill_attention_fn(q, kh, vh, scale), dtype=_F32)
        x = x + matmul(attn.reshape(x.shape[0], -1), lw.wo.T)
        x = x + swiglu(rms_norm(x, lw.post_norm, cfg.rms_norm_eps), lw)
    if not all_logits:
        x = x[-1:]
    logits = matmul(rms_norm(x, weights.final_norm, cfg.rms_norm_eps), weights.lm_head.T)
    return logits if all_logits else logits[0]


class DecodeLayer(NamedTuple):
    """What :func:`decode_step_layers` yields once per layer: the layer index, the batch's
    request ids (in batch order), their queries ``q`` ``[B, num_heads, head_dim]`` (RoPE
    applied, float32) and their positions (``positions[i]`` is request ``ids[i]``'s new token's
    position; its attention covers tokens ``[0, positions[i]]`` of the request's cache)."""

    layer: int
    ids: list
    q: np.ndarray
    positions: np.ndarray


def decode_step_layers(weights: LlamaWeights, cache: PagedKVCache, batch: Sequence[tuple]):
    """One decode step as a generator whose attention is done by the caller, layer by layer.

    The same step as :func:`decode_step` (same checks, same arithmetic): before the first
    yield every request's cache length grows by one (its new token's position); per layer,
    after every request's new K/V has been written into the paged cache, it yields a
    :class:`DecodeLayer` and expects the attention output ``[B, num_heads, head_dim]`` back
    through ``send()`` (softmax scale ``head_dim ** -0.5``, each request over its own paged
    history ``cache.gather(layer, id)``); after the last layer it returns the logits
    ``[B, vocab]`` (the ``StopIteration`` value). An empty batch returns at once. Bad input
    raises ``ValueError`` at the first ``next()``, before the cache is touched; a generator
    abandoned part way leaves the cache extended and holding the K/V of the layers done.
    """
    cfg = weights.cfg
    _check_cache(weights, cache)
    ids = [rid for rid, _ in batch]
    if len(set(ids)) != len(ids):
        dup = next(r for r in ids if ids.count(r) > 1)
        raise ValueError(f"request id {dup!r} appears twice in one decode batch")
    if not ids:
        return np.zeros((0, cfg.vocab_size), dtype=_F32)
    tok = _check_tokens(cfg, [t for _, t in batch])
    for rid in ids:
        if rid not in cache:
            raise ValueError(f"unknown request id {rid!r}: prefill it before decoding")
        if cache.seq_len(rid) == 0:
            raise ValueError(f"request {rid!r} has no tokens yet: prefill it before decoding")
        if cache.seq_len(rid) + 1 > cfg.max_context:
            raise ValueError(f"request {rid!r}: position {cache.seq_len(rid)} is past max_context "
                             f"{cfg.max_context} of model {cfg.name!r}")
    cache.check_capacity((rid, 1) for rid in ids)
    positions = np.array([cache.extend(rid, 1) for rid in ids])
    b = len(ids)
    shape = (b, cfg.num_heads, cfg.head_dim)
    x = weights.embed[tok]                                           # [B, hidden]
    for li, lw in enumerate(weights.layers):
        h = rms_norm(x, lw.input_norm, cfg.rms_norm_eps)
        q, k, v = _qkv(h, lw, cfg, positions)                        # rows = requests
        for i, rid in enumerate(ids):
            cache.write(li, rid, int(positions[i]), k[i:i + 1], v[i:i + 1])
        attn = yield DecodeLayer(li, list(ids), q, positions.copy())
        if attn is None or np.shape(attn) != shape:
            raise ValueError(f"layer {li}: the attention sent back must be {list(shape)}, got "
                             f"{None if attn is None else list(np.shape(attn))}")
        attn = np.asarray(attn, dtype=_F32)
        x = x + matmul(attn.reshape(b, -1), lw.wo.T)
        x = x + swiglu(rms_norm(x, lw.post_norm, cfg.rms_norm_eps), lw)
    return matmul(rms_norm(x, weights.final_norm, cfg.rms_norm_eps), weights.lm_head.T)


def decode_step(weights: LlamaWeights, cache: PagedKVCache, batch: Sequence[tuple], *,
                attention_fn: AttentionFn = decode_attention) -> np.ndarray:
    """One decode step for a batch of ``(request_id, token)`` pairs -> logits ``[B, vocab]``.

    Each request's ``token`` is placed at that request's next position (its current cache
    length; requests may all have different lengths), its K/V appended to its blocks (a new
    block is allocated when it crosses a block boundary), and its attention runs over its
    own paged history via ``attention_fn(q, k, v, scale)`` once per layer. All blocks the
    batch needs are checked up front, so running out of blocks changes nothing.

    A driver of :func:`decode_step_layers` that answers each layer with ``attention_fn`` per
    request.
    """
    steps = decode_step_layers(weights, cache, batch)
    scale = float(weights.cfg.head_dim) ** -0.5
    try:
        layer = next(steps)
    except StopIteration as stop:
        return stop.value
    while True:
        attn = np.empty(layer.q.shape, dtype=_F32)
        for i, rid in enumerate(layer.ids):
            kh, vh = cache.gather(layer.layer, rid)
            attn[i] = attention_fn(layer.q[i], kh, vh, scale)
        try:
            layer = steps.send(attn)
        except StopIteration as stop:
            return stop.value


@dataclass
class Generation:
    """Result of :func:`generate`: per prompt the new tokens, and per step the logits
    ``[num_prompts, vocab]`` they were drawn from (step 0 = prefill, then decode steps)."""

    tokens: list[list[int]]
    logits: list[np.ndarray]


def generate(weights: LlamaWeights, prompts: Sequence[Sequence[int]], max_new_tokens: int, *,
             sampling: SamplingParams = GREEDY, rng: np.random.Generator | int | None = None,
             cache: PagedKVCache | None = None, block_size: int = DEFAULT_BLOCK_SIZE,
             attention_fn: AttentionFn = decode_attention,
             prefill_attention_fn: AttentionFn = prefill_attention) -> Generation:
    """Prefill every prompt (request ids ``0 .. len(prompts)-1``), then decode them together.

    Produces ``max_new_tokens`` tokens per prompt, like HF ``generate``: the first from the
    prefill logits, the rest from ``max_new_tokens - 1`` batched decode steps (the last
    token is not fed back). Greedy by default; otherwise ``sampling`` with ``rng`` (a
    Generator or seed), one draw per request per step, requests in order. Without a
    ``cache`` one just big enough is made; the requests are freed at the end either way.
    """
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    if not prompts:
        raise ValueError("generate needs at least one prompt")
    if not sampling.is_greedy and not isinstance(rng, np.random.Generator):
        if rng is None:
            raise ValueError("rng: a numpy.random.Generator or an int seed is required when "
                             "temperature > 0")
        rng = np.random.default_rng(rng)
    cfg = weights.cfg
    if cache is None:
        need = sum(-(-(len(p) + max_new_tokens - 1) // block_size) for p in prompts)
        cache = PagedKVCache.for_model(cfg, need, block_size)
    ids = list(range(len(prompts)))
    for rid in ids:
        if rid in cache:
            raise ValueError(f"request id {rid!r} is already in the KV cache")
    try:
        first = np.stack([prefill(weights, cache, rid, p, prefill_attention_fn=prefill_attention_fn)
                          for rid, p in zip(ids, prompts)])
        steps = [first]
        nxt = np.atleast_1d(sample(first, sampling, rng))
        out = [[int(t)] for t in nxt]
        for _ in range(max_new_tokens - 1):
            logits = decode_step(weights, cache, list(zip(ids, (int(t) for t in nxt))),
                                 attention_fn=attention_fn)
            steps.append(logits)
            nxt = np.atleast_1d(sample(logits, sampling, rng))
            for seq, t in zip(out, nxt):
                seq.append(int(t))
    finally:
        for rid in ids:
            if rid in cache:
                cache.free(rid)
    return Generation(out, steps)


# ---- Hugging Face reference (torch imported lazily) ---------------------------------------

def hf_config(cfg):
    """The ``transformers`` config (``LlamaConfig`` or ``Qwen2Config``) of a ModelConfig."""
    common = dict(
        vocab_size=cfg.vocab_size, hidden_size=cfg.hidden_size, intermediate_size=cfg.ffn_size,
        num_hidden_layers=cfg.num_layers, num_attention_heads=cfg.num_heads,
        num_key_value_heads=cfg.num_kv_heads, head_dim=cfg.head_dim, hidden_act="silu",
        max_position_embeddings=cfg.max_context, rms_norm_eps=cfg.rms_norm_eps,
        rope_parameters={"rope_type": "default", "rope_theta": float(cfg.rope_theta)},
        tie_word_embeddings=cfg.tie_embeddings, attention_dropout=0.0,
        bos_token_id=None, eos_token_id=None, pad_token_id=None)
    if cfg.family == "qwen2":
        if not cfg.qkv_bias:
            raise ValueError(f"model {cfg.name!r}: transformers' Qwen2 always has q/k/v bias; "
                             "qkv_bias = false cannot be represented")
        from transformers import Qwen2Config
        return Qwen2Config(use_sliding_window=False, **common)
    if cfg.family == "llama":
        from transformers import LlamaConfig
        return LlamaConfig(attention_bias=cfg.qkv_bias, mlp_bias=False, **common)
    raise ValueError(f"unknown model family {cfg.family!r}")


def to_hf(cfg, weights: LlamaWeights):
    """``LlamaForCausalLM`` / ``Qwen2ForCausalLM`` (float32, CPU, eval, eager attention)
    holding exactly ``weights``. Imports torch and transformers."""
    import torch

    if cfg.family == "llama" and cfg.qkv_bias:
        # HF Llama's attention_bias also puts a bias on o_proj; ours has none.
        raise ValueError(f"model {cfg.name!r}: a llama-family model with qkv_bias has no "
                         "transformers equivalent (attention_bias adds an o_proj bias too)")
    hcfg = hf_config(cfg)
    hcfg._attn_implementation = "eager"
    if cfg.family == "qwen2":
        from transformers import Qwen2ForCausalLM as cls
    else:
        from transformers import LlamaForCausalLM as cls
    with torch.random.fork_rng():        # HF's own init draws from torch's global RNG
        model = cls(hcfg).to(torch.float32)
    sd = {k: torch.from_numpy(np.array(v, dtype=_F32)) for k, v in weights.state_dict().items()}
    missing, unexpected = model.load_state_dict(sd, strict=False)
    missing = [m for m in missing if not (cfg.tie_embeddings and m == "lm_head.weight")]
    if missing or unexpected:
        raise ValueError(f"weights do not fit the transformers model: missing {missing}, "
                         f"unexpected {unexpected}")
    if cfg.tie_embeddings:
        model.lm_head.weight = model.model.embed_tokens.weight
    model.config._attn_implementation = "eager"
    return model.eval()
