"""Golden decode step vs Hugging Face transformers, paged KV cache, swappable attention.

The worst logits error against transformers is printed; see it with

    .venv/bin/pytest tests/test_decode_step.py -q -s -k matches_hf

or ``.venv/bin/python tests/test_decode_step.py`` (prints a small report).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tricut.models.attention import decode_attention, prefill_attention
from tricut.models.config import load_model
import torch  # the [test] extra; a missing torch is a failure, not a skip

from tricut.models.llama import (LlamaWeights, apply_rope, decode_step, generate, prefill,
                                 rope_cos_sin, to_hf)
from tricut.models.paged_kv import PagedKVCache
from tricut.models.sampling import SamplingParams

REL_TOL = 1e-4
PROMPT_LENS = (40, 53, 67, 16)   # 16: exactly one block, the first decode token opens block 2
NEW_TOKENS = 34                  # 1 from prefill + 33 decode steps
SEED = 1234


def _tiny():
    return load_model("tiny")


CASES = {
    # tiny as shipped: llama, GQA group 2, untied embeddings, theta 1e4, eps 1e-5
    "llama": lambda: _tiny(),
    # qwen2: q/k/v bias, tied embeddings, Qwen2's theta and eps
    "qwen2-tied": lambda: dataclasses.replace(_tiny(), name="tiny-qwen2", family="qwen2",
                                              qkv_bias=True, tie_embeddings=True,
                                              rope_theta=1e6, rms_norm_eps=1e-6),
    # llama with tied embeddings and one KV head (MQA, group 4)
    "llama-tied-mqa": lambda: dataclasses.replace(_tiny(), name="tiny-mqa", num_kv_heads=1,
                                                  tie_embeddings=True),
    # tiny-te as shipped: the model the TE can run (head_dim 64, GQA group 4, E = 512)
    "tiny-te": lambda: load_model("tiny-te"),
}


def weight_std(cfg):
    """The random weights' std: 0.15 (LlamaWeights.random's default) for E = 64, scaled by
    sqrt(64 / E) so a wider model's projections keep tiny's statistics (tiny-te: 0.053, its
    attention scores spread about as tiny's; at 0.15 its softmax is nearly one-hot)."""
    return 0.15 * (64 / cfg.hidden_size) ** 0.5


#: worst max|ours - hf| / max|hf| per case, filled by test_decode_matches_hf
WORST: dict[str, float] = {}


def _prompts(cfg, seed=SEED):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, cfg.vocab_size, n) for n in PROMPT_LENS]


def _rel(ours, ref):
    return float(np.max(np.abs(np.asarray(ours, np.float64) - ref)) / np.max(np.abs(ref)))


@pytest.fixture(scope="module", params=list(CASES))
def case(request):
    cfg = CASES[request.param]()
    weights = LlamaWeights.random(cfg, seed=7, std=weight_std(cfg))
    return request.param, cfg, weights, to_hf(cfg, weights)


def _hf_logits(model, tokens):
    with torch.no_grad():
        return model(torch.tensor(np.asarray(tokens)[None], dtype=torch.long)).logits[0].double().numpy()


# ---- against transformers -----------------------------------------------------------------

def test_decode_matches_hf(case):
    """Prefill 4 prompts of different lengths, then 33 batched greedy decode steps driven by our
    own greedy tokens; every step's logits vs HF's full-sequence forward of the same tokens."""
    name, cfg, weights, hf = case
    prompts = _prompts(cfg)
    cache = PagedKVCache.for_model(cfg, num_blocks=64)
    prefill_logits, step_logits, tokens = {}, [], {}
    for rid, p in enumerate(prompts):
        prefill_logits[rid] = prefill(weights, cache, rid, p, all_logits=True)
        tokens[rid] = [int(np.argmax(prefill_logits[rid][-1]))]
    step_logits.append(np.stack([prefill_logits[r][-1] for r in range(len(prompts))]))
    for _ in range(NEW_TOKENS - 1):
        batch = [(rid, tokens[rid][-1]) for rid in range(len(prompts))]
        logits = decode_step(weights, cache, batch)
        assert logits.shape == (len(prompts), cfg.vocab_size) and logits.dtype == np.float32
        step_logits.append(logits)
        for rid in range(len(prompts)):
            tokens[rid].append(int(np.argmax(logits[rid])))
            n = cache.seq_len(rid)
            assert n == len(prompts[rid]) + len(tokens[rid]) - 1
            assert len(cache.block_table(rid)) == -(-n // 16)

    worst = 0.0
    for rid, p in enumerate(prompts):
        seq = np.concatenate([p, tokens[rid][:-1]])
        ref = _hf_logits(hf, seq)                      # [len(seq), vocab]
        plen = len(p)
        # prefill: every prompt position
        assert _rel(prefill_logits[rid], ref[:plen]) <= REL_TOL
        for s in range(NEW_TOKENS):
            r = ref[plen - 1 + s]
            err = _rel(step_logits[s][rid], r)
            assert err <= REL_TOL, f"{name} request {rid} step {s}: rel err {err:.3g}"
            worst = max(worst, err)
            assert int(np.argmax(r)) == tokens[rid][s], f"{name} request {rid} step {s}: greedy differs"
        # greedy must not be degenerate
        assert len(set(tokens[rid])) >= 8, f"{name} request {rid}: degenerate tokens {tokens[rid]}"
    WORST[name] = worst
    print(f"\n[{name}] worst logits rel error vs transformers over {len(prompts)} requests x "
          f"{NEW_TOKENS} steps: {worst:.3e}")


def test_generate_matches_hf_generate(case):
    """Our batched greedy generate == HF's own generate (its KV cache) for each prompt."""
    name, cfg, weights, hf = case
    prompts = _prompts(cfg, seed=99)[:3]
    ours = generate(weights, prompts, NEW_TOKENS)
    assert len(ours.logits) == NEW_TOKENS
    for rid, p in enumerate(prompts):
        ids = torch.tensor(p[None], dtype=torch.long)
        with torch.no_grad():
            out = hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW_TOKENS,
                              do_sample=False, pad_token_id=0)
        assert out[0, len(p):].tolist() == ours.tokens[rid], f"{name} request {rid}"


# ---- generate helper ------------------------------------------------------------------------

def test_generate_sampled_is_seeded():
    cfg = _tiny()
    w = LlamaWeights.random(cfg, seed=3)
    prompts = _prompts(cfg)[:3]
    sp = SamplingParams(temperature=0.8, top_k=20, top_p=0.9)
    a = generate(w, prompts, 12, sampling=sp, rng=np.random.default_rng(5))
    b = generate(w, prompts, 12, sampling=sp, rng=5)
    c = generate(w, prompts, 12, sampling=sp, rng=6)
    assert a.tokens == b.tokens
    assert a.tokens != c.tokens
    for s, logits in enumerate(a.logits):            # every token is inside its step's top-20
        for rid in range(len(prompts)):
            assert a.tokens[rid][s] in np.argsort(logits[rid])[-20:]
    with pytest.raises(ValueError, match="rng"):
        generate(w, prompts, 2, sampling=sp)
    g = generate(w, prompts, 5)                       # greedy default
    assert [t[:1] for t in g.tokens] == [[int(np.argmax(l))] for l in g.logits[0]]


# ---- paged KV cache -----------------------------------------------------------------------

def test_blocks_allocated_on_demand():
    cache = PagedKVCache(num_layers=2, num_kv_heads=2, head_dim=4, num_blocks=8)
    cache.add_request("r")
    assert cache.block_table("r") == [] and cache.num_free_blocks == 8
    counts = {}
    for n in range(1, 34):
        cache.extend("r", 1)
        counts[n] = len(cache.block_table("r"))
    assert (counts[1], counts[15], counts[16], counts[17], counts[32], counts[33]) == (1, 1, 1, 2, 2, 3)
    assert cache.num_used_blocks == 3 and cache.seq_len("r") == 33


def test_blocks_allocated_on_demand_by_the_model():
    cfg = _tiny()
    w = LlamaWeights.random(cfg, seed=1)
    cache = PagedKVCache.for_model(cfg, num_blocks=4)
    prefill(w, cache, "a", np.arange(15))
    assert cache.seq_len("a") == 15 and len(cache.block_table("a")) == 1
    decode_step(w, cache, [("a", 3)])
    assert cache.seq_len("a") == 16 and len(cache.block_table("a")) == 1
    decode_step(w, cache, [("a", 4)])
    assert cache.seq_len("a") == 17 and len(cache.block_table("a")) == 2
    assert cache.num_free_blocks == 2


def test_block_size_parameter():
    cache = PagedKVCache(1, 1, 2, num_blocks=10, block_size=4)
    cache.add_request(0)
    cache.extend(0, 9)
    assert len(cache.block_table(0)) == 3


def test_free_returns_blocks_and_forgets_request():
    cache = PagedKVCache(1, 1, 2, num_blocks=6)
    cache.add_request("a")
    cache.add_request("b")
    cache.extend("a", 40)
    cache.extend("b", 10)
    assert cache.num_free_blocks == 2
    blocks_a = cache.block_table("a")
    cache.free("a")
    assert cache.num_free_blocks == 5 and "a" not in cache and cache.requests == ["b"]
    with pytest.raises(ValueError, match="unknown request id 'a'"):
        cache.seq_len("a")
    with pytest.raises(ValueError, match="unknown request id 'a'"):
        cache.free("a")
    cache.add_request("c")
    cache.extend("c", 48)
    assert sorted(cache.block_table("c")) == sorted(blocks_a)  # freed blocks are reused


def test_out_of_blocks_is_a_clear_error_and_changes_nothing():
    cache = PagedKVCache(1, 1, 2, num_blocks=3)
    cache.add_request("big")
    cache.extend("big", 40)
    with pytest.raises(ValueError, match=r"out of KV blocks: request 'big'.*only 0 of 3 are free"):
        cache.extend("big", 20)
    assert cache.seq_len("big") == 40 and len(cache.block_table("big")) == 3
    with pytest.raises(ValueError, match="already in the KV cache"):
        cache.add_request("big")


def test_out_of_blocks_in_decode_and_prefill():
    cfg = _tiny()
    w = LlamaWeights.random(cfg, seed=1)
    cache = PagedKVCache.for_model(cfg, num_blocks=3)
    prefill(w, cache, "a", np.arange(16))
    prefill(w, cache, "b", np.arange(20))
    assert cache.num_free_blocks == 0
    # "a" needs a new block (position 16), "b" does not: the whole batch is refused
    with pytest.raises(ValueError, match=r"out of KV blocks.*'a'.*of 3 are free"):
        decode_step(w, cache, [("b", 1), ("a", 1)])
    assert (cache.seq_len("a"), cache.seq_len("b")) == (16, 20)
    decode_step(w, cache, [("b", 1)])                 # fits in b's block
    with pytest.raises(ValueError, match="out of KV blocks: request 'c'"):
        prefill(w, cache, "c", np.arange(5))
    assert "c" not in cache


def test_unknown_request_and_bad_inputs():
    cfg = _tiny()
    w = LlamaWeights.random(cfg, seed=1)
    cache = PagedKVCache.for_model(cfg, num_blocks=4)
    prefill(w, cache, 1, [1, 2, 3])
    with pytest.raises(ValueError, match="unknown request id 2"):
        decode_step(w, cache, [(1, 5), (2, 5)])
    assert cache.seq_len(1) == 3
    with pytest.raises(ValueError, match="appears twice"):
        decode_step(w, cache, [(1, 5), (1, 6)])
    with pytest.raises(ValueError, match="outside the vocabulary"):
        decode_step(w, cache, [(1, cfg.vocab_size)])
    with pytest.raises(ValueError, match="outside the vocabulary"):
        prefill(w, cache, 3, [-1])
    with pytest.raises(ValueError, match="at least one token"):
        prefill(w, cache, 3, [])
    with pytest.raises(ValueError, match="does not fit model"):
        decode_step(w, PagedKVCache(1, 2, 16, 4), [(1, 5)])
    assert decode_step(w, cache, []).shape == (0, cfg.vocab_size)


def test_gather_equals_what_was_written():
    rng = np.random.default_rng(0)
    cache = PagedKVCache(num_layers=3, num_kv_heads=2, head_dim=8, num_blocks=16)
    cache.add_request("r")
    ks, vs = [], []
    for chunk in (7, 16, 1, 20, 3):                   # chunks straddling block boundaries
        k = rng.standard_normal((3, chunk, 2, 8)).astype(np.float32)
        v = rng.standard_normal((3, chunk, 2, 8)).astype(np.float32)
        start = cache.extend("r", chunk)
        for layer in range(3):
            cache.write(layer, "r", start, k[layer], v[layer])
        ks.append(k)
        vs.append(v)
    k_all, v_all = np.concatenate(ks, axis=1), np.concatenate(vs, axis=1)
    for layer in range(3):
        gk, gv = cache.gather(layer, "r")
        assert gk.shape == (47, 2, 8)
        np.testing.assert_array_equal(gk, k_all[layer])
        np.testing.assert_array_equal(gv, v_all[layer])
        np.testing.assert_array_equal(cache.gather(layer, "r", 10)[0], k_all[layer, :10])
    # the pool layout: position p is in block table[p // 16], slot p % 16
    table = cache.block_table("r")
    np.testing.assert_array_equal(cache.k[1, table[2], 5], k_all[1, 2 * 16 + 5])
    with pytest.raises(ValueError, match="outside its 47 reserved"):
        cache.write(0, "r", 47, k_all[0, :1], v_all[0, :1])


def test_interleaved_requests_do_not_corrupt_each_other():
    rng = np.random.default_rng(1)
    cache = PagedKVCache(num_layers=1, num_kv_heads=1, head_dim=4, num_blocks=8)
    data = {"a": [], "b": []}
    for rid in data:
        cache.add_request(rid)
    for step in range(50):                            # token by token, alternating
        for rid in ("a", "b") if step % 3 else ("b", "a"):
            if rid == "b" and step >= 40:
                continue
            k = rng.standard_normal((1, 1, 4)).astype(np.float32)
            pos = cache.extend(rid, 1)
            cache.write(0, rid, pos, k, -k)
            data[rid].append(k[0])
    ta, tb = cache.block_table("a"), cache.block_table("b")
    assert not set(ta) & set(tb) and len(ta) == 4 and len(tb) == 3
    assert max(ta) > min(tb) and max(tb) > min(ta)    # physically interleaved in the pool
    for rid in data:
        k, v = cache.gather(0, rid)
        np.testing.assert_array_equal(k, np.stack(data[rid]))
        np.testing.assert_array_equal(v, -np.stack(data[rid]))


def test_continuous_batching_with_recycled_blocks():
    """Requests joining and leaving, a new one reusing freed (stale) blocks, give the same
    logits as each request run alone in a fresh cache."""
    cfg = _tiny()
    w = LlamaWeights.random(cfg, seed=2)
    rng = np.random.default_rng(3)
    pa, pb, pc = (rng.integers(0, cfg.vocab_size, n) for n in (30, 18, 45))

    def alone(prompt, steps):
        cache = PagedKVCache.for_model(cfg, num_blocks=8)
        out = [prefill(w, cache, 0, prompt)]
        for t in steps:
            out.append(decode_step(w, cache, [(0, t)])[0])
        return np.stack(out)

    cache = PagedKVCache.for_model(cfg, num_blocks=8)
    la = [prefill(w, cache, "a", pa)]
    lb = [prefill(w, cache, "b", pb)]
    ta, tb, tc = [5, 6, 7, 8], [9, 10, 11, 12, 13, 14, 15], [16, 17, 18, 19]
    for i in range(4):
        logits = decode_step(w, cache, [("b", tb[i]), ("a", ta[i])])
        lb.append(logits[0])
        la.append(logits[1])
    cache.free("a")
    lc = [prefill(w, cache, "c", pc)]                  # lands on a's stale blocks
    for i in range(4):
        logits = decode_step(w, cache, [("c", tc[i]), ("b", tb[4 + i] if 4 + i < 7 else 1)])
        lc.append(logits[0])
        lb.append(logits[1])
    np.testing.assert_allclose(np.stack(la), alone(pa, ta), rtol=0, atol=1e-5)
    np.testing.assert_allclose(np.stack(lc), alone(pc, tc), rtol=0, atol=1e-5)
    np.testing.assert_allclose(np.stack(lb), alone(pb, tb + [1]), rtol=0, atol=1e-5)


# ---- swappable attention ----------------------------------------------------------------------

def test_custom_attention_fn_is_used():
    cfg = _tiny()
    w = LlamaWeights.random(cfg, seed=4)
    prompts = [np.arange(20), np.arange(5, 38)]
    calls = []

    def counting(q, k, v, scale):
        calls.append((q.shape, k.shape, v.shape, scale))
        return decode_attention(q, k, v, scale)

    def run(attention_fn):
        cache = PagedKVCache.for_model(cfg, num_blocks=8)
        for rid, p in enumerate(prompts):
            prefill(w, cache, rid, p)
        return np.stack([decode_step(w, cache, [(0, 3 + s), (1, 4 + s)], attention_fn=attention_fn)
                         for s in range(3)])

    ref = run(decode_attention)
    got = run(counting)
    np.testing.assert_array_equal(got, ref)
    assert len(calls) == 3 * cfg.num_layers * 2       # steps x layers x requests
    h, kvh, d = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    assert calls[0] == ((h, d), (21, kvh, d), (21, kvh, d), d ** -0.5)   # request 0, layer 0
    assert calls[1][1] == (34, kvh, d) and calls[2][1] == (21, kvh, d)   # layer 0 r1, layer 1 r0
    # an attention function that changes the result changes the logits
    zeroed = run(lambda q, k, v, scale: np.zeros_like(q))
    assert np.max(np.abs(zeroed - ref)) > 1e-2


def test_custom_prefill_attention_fn_is_used():
    cfg = _tiny()
    w = LlamaWeights.random(cfg, seed=4)
    seen = []

    def counting(q, k, v, scale):
        seen.append((q.shape, k.shape))
        return prefill_attention(q, k, v, scale)

    cache1, cache2 = (PagedKVCache.for_model(cfg, num_blocks=4) for _ in range(2))
    ref = prefill(w, cache1, 0, np.arange(25), all_logits=True)
    got = prefill(w, cache2, 0, np.arange(25), all_logits=True, prefill_attention_fn=counting)
    np.testing.assert_array_equal(got, ref)
    assert seen == [((25, cfg.num_heads, cfg.head_dim), (25, cfg.num_kv_heads, cfg.head_dim))] * 2


def test_attention_references_against_float64_loop():
    rng = np.random.default_rng(5)
    heads, kvh, d, n = 8, 2, 16, 37
    q = rng.standard_normal((heads, d)).astype(np.float32)
    k = rng.standard_normal((n, kvh, d)).astype(np.float32)
    v = rng.standard_normal((n, kvh, d)).astype(np.float32)
    scale = d ** -0.5
    ref = np.empty((heads, d))
    for h in range(heads):                            # query head h uses kv head h // G
        kv = h // (heads // kvh)
        s = k[:, kv].astype(np.float64) @ q[h] * scale
        p = np.exp(s - s.max())
        ref[h] = (p / p.sum()) @ v[:, kv]
    out = decode_attention(q, k, v, scale)
    assert out.shape == (heads, d) and out.dtype == np.float32
    np.testing.assert_allclose(out, ref, rtol=0, atol=1e-5)
    # causal prefill: row t of T queries sees keys 0..n-T+t; its last row is the decode case
    qs = rng.standard_normal((5, heads, d)).astype(np.float32)
    qs[-1] = q
    pre = prefill_attention(qs, k, v, scale)
    np.testing.assert_allclose(pre[-1], out, rtol=0, atol=1e-6)
    np.testing.assert_allclose(pre[0], decode_attention(qs[0], k[:n - 4], v[:n - 4], scale),
                               rtol=0, atol=1e-6)


def test_rope_matches_rotation_pairs():
    """HF rotate_half pairs dim i with i + D/2, rotated by pos * theta^(-2i/D)."""
    d, theta = 8, 10000.0
    x = np.random.default_rng(6).standard_normal((3, 1, d)).astype(np.float32)
    pos = np.array([0, 5, 100])
    cos, sin = rope_cos_sin(pos, d, theta)
    y = apply_rope(x, cos, sin)
    for t, p in enumerate(pos):
        for i in range(d // 2):
            a = p * theta ** (-2 * i / d)
            x1, x2 = x[t, 0, i], x[t, 0, i + d // 2]
            assert y[t, 0, i] == pytest.approx(x1 * np.cos(a) - x2 * np.sin(a), abs=1e-5)
            assert y[t, 0, i + d // 2] == pytest.approx(x2 * np.cos(a) + x1 * np.sin(a), abs=1e-5)


def test_chunked_prefill_equals_one_shot():
    cfg = _tiny()
    w = LlamaWeights.random(cfg, seed=8)
    p = np.random.default_rng(8).integers(0, cfg.vocab_size, 50)
    c1, c2 = (PagedKVCache.for_model(cfg, num_blocks=4) for _ in range(2))
    one = prefill(w, c1, 0, p, all_logits=True)
    parts = [prefill(w, c2, 0, p[:21], all_logits=True), prefill(w, c2, 0, p[21:], all_logits=True)]
    np.testing.assert_allclose(np.concatenate(parts), one, rtol=0, atol=1e-5)
    for layer in range(cfg.num_layers):
        np.testing.assert_allclose(c2.gather(layer, 0)[0], c1.gather(layer, 0)[0], rtol=0, atol=1e-5)


def test_last_token_prefill_is_the_last_row_of_the_whole_one():
    """Without ``all_logits`` the last layer computes its queries, attention and MLP for the
    last token only; the rows are independent, so the logits and the cache are the same bits."""
    cfg = _tiny()
    w = LlamaWeights.random(cfg, seed=9)
    p = np.random.default_rng(9).integers(0, cfg.vocab_size, 37)
    c1, c2 = (PagedKVCache.for_model(cfg, num_blocks=4) for _ in range(2))
    whole = prefill(w, c1, 0, p, all_logits=True)
    last = prefill(w, c2, 0, p)
    assert cfg.num_layers >= 2 and last.dtype == np.float32
    assert np.array_equal(last.view(np.uint32), whole[-1].view(np.uint32))
    for layer in range(cfg.num_layers):
        for a, b in zip(c1.gather(layer, 0), c2.gather(layer, 0)):
            assert np.array_equal(a, b)


def test_weights_are_deterministic_and_round_trip():
    cfg = CASES["qwen2-tied"]()
    a, b = LlamaWeights.random(cfg, 11), LlamaWeights.random(cfg, 11)
    c = LlamaWeights.random(cfg, 12)
    sa, sb, sc = a.state_dict(), b.state_dict(), c.state_dict()
    assert all(np.array_equal(sa[k], sb[k]) for k in sa)
    assert not np.array_equal(sa["model.layers.0.self_attn.q_proj.weight"],
                              sc["model.layers.0.self_attn.q_proj.weight"])
    assert a.lm_head is a.embed and "model.layers.1.self_attn.k_proj.bias" in sa
    assert sum(v.size for k, v in sa.items() if k != "lm_head.weight") == cfg.param_count()
    back = LlamaWeights.from_state_dict(cfg, sa)
    assert all(np.array_equal(back.state_dict()[k], sa[k]) for k in sa)


if __name__ == "__main__":
    import time

    for name, make in CASES.items():
        cfg = make()
        w = LlamaWeights.random(cfg, seed=7, std=weight_std(cfg))
        t0 = time.perf_counter()
        test_decode_matches_hf((name, cfg, w, to_hf(cfg, w)))
        print(f"  ({time.perf_counter() - t0:.1f} s)")
    print({k: f"{v:.3e}" for k, v in WORST.items()})
