"""The TE decode engine's bit-exact model as the attention of the foundation decode step:
the tiny Llama (head_dim widened to 64, a size the engine supports) generates the same greedy
tokens as with the float32 reference attention for 16 decode steps (bf16 K/V)."""

import dataclasses

import numpy as np

from tricut.models.config import load_model
from tricut.models.llama import LlamaWeights, generate
from tricut.sim.harness.te import make_vector

DECODE_STEPS = 16


def te_attention(kv_dtype, lanes=16):
    """An ``attention_fn`` running :func:`tricut.models.te.te_decode` per KV head."""
    def attention(q, k, v, scale):
        heads, d = q.shape
        n, kv_heads, _ = k.shape
        G = heads // kv_heads
        out = np.zeros((heads, d), np.float32)
        for h in range(kv_heads):
            vec = make_vector(q[h * G:(h + 1) * G], k[:, h], v[:, h], kv_dtype, scale=scale,
                              lanes=lanes)
            res = vec.golden()
            assert not any(res.status.values()), res.status
            out[h * G:(h + 1) * G] = res.out_f32()
        return out
    return attention


def test_tiny_llama_greedy_tokens_with_te_attention():
    cfg = dataclasses.replace(load_model("tiny"), name="tiny-d64", head_dim=64)
    weights = LlamaWeights.random(cfg, seed=7)
    prompt = np.random.default_rng(3).integers(0, cfg.vocab_size, 20)
    ref = generate(weights, [prompt], DECODE_STEPS + 1)
    ours = generate(weights, [prompt], DECODE_STEPS + 1, attention_fn=te_attention("bf16"))
    assert len(set(ref.tokens[0])) >= 6, f"degenerate reference tokens {ref.tokens[0]}"
    assert ours.tokens == ref.tokens
    # the logits stay close (q and K/V rounded to bf16, fp32 datapath)
    for a, b in zip(ours.logits[1:], ref.logits[1:]):
        assert np.max(np.abs(a - b)) <= 0.05 * np.max(np.abs(b))
