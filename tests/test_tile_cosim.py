"""Whole decode steps through the decode tile's RTL attention path, co-simulated with the golden
decode step (``sim/harness/tile/cosim.py``, ``tricut tile run``; docs/tile/cosim.md, "Co-simulation
with the golden decode step").

* the refactor: ``decode_step`` (now a driver of ``decode_step_layers``) gives the logits of
  the former per-request loop bit for bit, and the generator driven by hand gives them too;
* equivalence: tiny-te, 3 requests of different lengths, 3 decode steps in DSU rounds, both
  layers, bf16, 2 engines, split-K on the longest context: every attention output of the tile
  equals the TE golden's bit for bit and the tokens are the golden decode step's;
  (run through ``tricut tile run``: exit 0 and the printed tokens are the golden's);
* the check can fail: one bit of one HBM word flipped (the golden keeps it) is reported; the
  command exits 1 with one error line on a difference;
* bad flags: one error line, exit 2.

The Amaranth simulator runs this design at ~85-130 cycles/s: the equivalence case (~9,100
cycles) takes ~70 s, the rest ~10 s.
"""

import json

import numpy as np
import pytest

from tricut.models.attention import decode_attention
from tricut.models.config import load_model
from tricut.models.llama import (LlamaWeights, _qkv, decode_step, decode_step_layers, prefill,
                                 rms_norm, swiglu)
from tricut.models.matmul import matmul
from tricut.models.paged_kv import PagedKVCache
from tricut.rtl.tile.attention_layouts import kv_addr
from tricut.sim.cli.testing import assert_one_line_error, only_progress, run_cli
from tricut.sim.harness.tile import cosim
from tricut.sim.harness.tile import verilator as V
from tricut.sim.harness.tile.cases import EQUIV, QUICK_OPT
from tricut.sim.harness.tile.cosim import Report, simulate
from tricut.sim.harness.tile.golden import RunResult, golden_run
from tricut.sim.harness.tile.setup import CosimError, Setup, predict_layers, schedule


# ---- the refactor ---------------------------------------------------------------------------

def _old_decode_step(weights, cache, batch, attention_fn=decode_attention):
    """``decode_step`` as it was before the generator (the per-request loop), for comparison."""
    cfg = weights.cfg
    ids = [rid for rid, _ in batch]
    tok = np.array([t for _, t in batch])
    positions = np.array([cache.extend(rid, 1) for rid in ids])
    scale = float(cfg.head_dim) ** -0.5
    b = len(ids)
    x = weights.embed[tok]
    for li, lw in enumerate(weights.layers):
        h = rms_norm(x, lw.input_norm, cfg.rms_norm_eps)
        q, k, v = _qkv(h, lw, cfg, positions)
        attn = np.empty((b, cfg.num_heads, cfg.head_dim), dtype=np.float32)
        for i, rid in enumerate(ids):
            cache.write(li, rid, int(positions[i]), k[i:i + 1], v[i:i + 1])
            kh, vh = cache.gather(li, rid)
            attn[i] = attention_fn(q[i], kh, vh, scale)
        x = x + matmul(attn.reshape(b, -1), lw.wo.T)
        x = x + swiglu(rms_norm(x, lw.post_norm, cfg.rms_norm_eps), lw)
    return matmul(rms_norm(x, weights.final_norm, cfg.rms_norm_eps), weights.lm_head.T)


def test_decode_step_via_the_generator_equals_the_former_loop():
    cfg = load_model("tiny-te")
    weights = LlamaWeights.random(cfg, seed=3, std=0.15 * (64 / cfg.hidden_size) ** 0.5)
    rng = np.random.default_rng(1)
    prompts = [rng.integers(0, cfg.vocab_size, n) for n in (5, 16, 30)]
    caches = [PagedKVCache.for_model(cfg, 12, 16) for _ in range(3)]
    toks = [[int(np.argmax(prefill(weights, c, r, p))) for r, p in enumerate(prompts)]
            for c in caches]
    assert toks[0] == toks[1] == toks[2]
    nxt = toks[0]
    for step in range(4):                        # a different batch each step
        batch = [(r, nxt[r]) for r in ((0, 1, 2), (2, 0), (1,), (0, 1, 2))[step]]
        old = _old_decode_step(weights, caches[0], batch)
        new = decode_step(weights, caches[1], batch)
        gen = decode_step_layers(weights, caches[2], batch)
        lay, layers = next(gen), []
        while True:                              # the generator driven by hand
            layers.append(lay.layer)
            assert lay.q.shape == (len(batch), cfg.num_heads, cfg.head_dim)
            assert list(lay.ids) == [r for r, _ in batch]
            attn = [decode_attention(lay.q[i], *caches[2].gather(lay.layer, r),
                                     cfg.head_dim ** -0.5) for i, r in enumerate(lay.ids)]
            try:
                lay = gen.send(np.stack(attn))
            except StopIteration as stop:
                by_hand = stop.value
                break
        assert layers == list(range(cfg.num_layers))
        assert np.array_equal(old, new) and np.array_equal(old, by_hand)
        for i, (r, _) in enumerate(batch):
            nxt[r] = int(np.argmax(new[i]))
    for li in range(cfg.num_layers):
        for r in range(3):
            a, b = caches[0].gather(li, r), caches[1].gather(li, r)
            assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])


def test_decode_step_layers_rejects_a_bad_attention_and_empty_batch():
    cfg = load_model("tiny-te")
    weights = LlamaWeights.random(cfg, seed=3)
    cache = PagedKVCache.for_model(cfg, 2, 16)
    prefill(weights, cache, 0, [1, 2, 3])
    gen = decode_step_layers(weights, cache, [(0, 5)])
    lay = next(gen)
    assert lay.positions.tolist() == [3] and cache.seq_len(0) == 4
    with pytest.raises(ValueError, match="attention sent back"):
        gen.send(np.zeros((2, cfg.num_heads, cfg.head_dim)))
    empty = decode_step_layers(weights, cache, [])
    with pytest.raises(StopIteration) as stop:
        next(empty)
    assert stop.value.value.shape == (0, cfg.vocab_size)


# ---- the co-simulation ----------------------------------------------------------------------

#: ``EQUIV`` (``sim/harness/tile/cases.py``) on the command line
EQUIV_ARGV = ["tile", "run", "--prompt-lens", "1,2,3", "--steps", "3", "--kv-dtype", "bf16",
              "--engines", "2", "--split-tokens", "5", "--max-ctx", "16", "--seed", "1",
              "--lanes", "16"]


def test_tile_decode_steps_equal_the_golden_decode_step(capsys, monkeypatch):
    """One run through ``tricut tile run --sim verilator`` (the command's own run is the
    equivalence case; on Verilator, the build ``tests/test_tile_cosim_verilator.py`` shares:
    Amaranth's simulator takes minutes for it and runs the same cycles): exit 0, the printed tokens are those of an independent golden run,
    and the report the command got holds every attention output bit-exact."""
    reports = []

    def keep(s, **kw):
        reports.append(real(s, **kw))
        return reports[-1]
    real = simulate
    monkeypatch.setattr(cosim, "simulate", keep)
    code, cap = run_cli(EQUIV_ARGV + ["--sim", "verilator"], capsys)
    assert code == 0, cap.err
    (rep,) = reports
    assert rep.setup == EQUIV
    golden = golden_run(EQUIV)                 # independent of the command's run
    t = rep.tile
    cfg = load_model("tiny-te")
    seq = [d.seq_len for descs in schedule(EQUIV) for d in descs]
    assert max(seq) > EQUIV.split_tokens >= min(seq)     # split on one context, not on others
    assert rep.rounds == [[0, 1, 2]] * 3
    assert rep.differences == [] and not t.stopped and not t.problems
    keys = {(ri, li, r) for ri in range(3) for li in range(cfg.num_layers) for r in range(3)}
    assert set(golden.attn) == set(t.attn) == keys
    for k in keys:
        assert np.array_equal(golden.attn[k], t.attn[k]), k      # bit for bit
    assert t.tokens == golden.tokens and all(len(v) == 4 for v in t.tokens.values())
    assert len({tuple(v) for v in t.tokens.values()}) == 3
    for r, toks in golden.tokens.items():
        assert f"request {r} (prompt {r + 1}): tokens {' '.join(map(str, toks))}" in cap.out
    assert "18 attention outputs bit-exact, tokens equal" in cap.out and only_progress(cap.err)
    # cycles: one entry per (round, layer), growing with the contexts; a step also holds the
    # host's K/V, q and output traffic between its layers
    assert sorted(t.layer_cycles) == sorted({(ri, li) for ri, li, _ in keys})
    steps = [t.step_cycles[ri] for ri in range(3)]
    assert steps == sorted(steps) and all(
        t.step_cycles[ri] > sum(t.layer_cycles[(ri, li)] for li in range(2)) for ri in range(3))
    for ri in range(3):
        assert f"step {ri}: {t.step_cycles[ri]} cycles" in cap.out
    # the tile's timing model (models/tile_timing.py, without the CDU) gives every
    # layer's cycles
    assert t.layer_cycles == predict_layers(EQUIV)
    print(f"\n[tile cosim] layer cycles {t.layer_cycles}, step cycles {t.step_cycles}")


def test_a_flipped_hbm_bit_is_reported():
    s = Setup(lanes=16, requests=1, prompt_lens=(2,), steps=1, max_ctx=16)
    # token 1's first V word of request 0, layer 0, KV head 0: bit 14 (a bf16 exponent bit)
    addr = kv_addr(0, 0, 0, 1, num_layers=2, num_kv_heads=2, max_ctx=16, head_dim=64,
                   lanes=16) + 4
    with pytest.raises(CosimError, match=r"first: round 0 layer 0 request 0: attention\["):
        simulate(s, corrupt=(addr, 14), strict=True)


def test_cli_exit_1_and_one_line_on_a_difference(capsys, monkeypatch):
    """The command's exit status and error line when the report has differences (the report
    is made up here; the comparison itself is covered above)."""
    def differs(s, **kw):
        run = RunResult({0: [1, 2]}, layer_cycles={(0, 0): 5, (0, 1): 5}, step_cycles={0: 12})
        return Report(s, [1], [[0]], RunResult({0: [1, 3]}), run,
                        ["round 0 layer 1 request 0: attention[0][0] = 0x1, golden 0x2",
                         "request 0: tokens [1, 2], golden [1, 3]"])
    monkeypatch.setattr(cosim, "simulate", differs)
    code, cap = run_cli(["tile", "run", "--prompt-lens", "1", "--steps", "1", "--json"], capsys)
    assert code == 1
    out = json.loads(cap.out)
    assert out["ok"] is False and len(out["differences"]) == 2
    lines = cap.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("tricut: error: tile differs"), cap.err
    assert "first: round 0 layer 1 request 0" in lines[0]


BAD = [
    (["--model", "no-such-model"], "no-such-model"),
    (["--model", "tiny"], "head_dim"),
    (["--steps", "0"], "--steps"),
    (["--steps", "x"], "--steps"),
    (["--engines", "0"], "--engines"),
    (["--engines", "17"], "--engines"),
    (["--kv-dtype", "fp16"], "--kv-dtype"),
    (["--lanes", "3"], "--lanes"),
    (["--synthetic", "0"], "--synthetic"),
    (["--synthetic", "17"], "--synthetic"),
    (["--synthetic", "2", "--prompt-lens", "1,2"], "not allowed"),
    (["--prompt-lens", "1,x"], "--prompt-lens"),
    (["--prompt-lens", "0"], "not positive"),
    (["--max-prompt", "0"], "--max-prompt"),
    (["--max-ctx", "4"], "--max-ctx"),
    (["--prompt-lens", "60", "--steps", "10"], "--max-ctx"),
    (["--max-ctx", "99999"], "--max-ctx"),
    (["--synthetic", "16", "--lanes", "2", "--max-ctx", "4096"], "HBM words"),
    (["--split-tokens", "-1"], "--split-tokens"),
    (["--split-tokens", "40"], "splits no context"),
    (["--max-batch", "0"], "--max-batch"),
    (["--max-batch", "9"], "--max-batch"),
    (["--profile", "best"], "--profile"),
    (["--sim", "vcs"], "invalid choice"),
    (["--seed", "-1"], "--seed"),
    (["--bogus"], "unrecognized"),
    (["--gpu", "no-such-gpu"], "--gpu: unknown gpu 'no-such-gpu'"),
    (["--gpu", "h100-sxm5", "--engines", "17"], "--engines"),
    (["--max-prompt", "1000000000"], "--max-prompt: must be in 1..16368"),   # before any draw
    (["--gpu", "h100-sxm5", "--max-prompt", "1000000000"], "--max-prompt: must be in 1..16368"),
    (["--gpu", "h100-sxm5", "--model", "nope"], "--gpu: unknown model"),
]


@pytest.mark.parametrize("extra,needle", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_cli_tile_run_bad_input(capsys, extra, needle):
    code, cap = run_cli(["tile", "run", *extra], capsys)
    assert_one_line_error(code, cap, needle)


def test_cli_tile_without_subcommand(capsys):
    code, cap = run_cli(["tile"], capsys)
    assert_one_line_error(code, cap, "tile")


def test_the_suite_builds_the_tile_at_its_quick_optimisation_and_refuses_an_unknown_one():
    """tests/conftest.py sets ``$TRICUT_TILE_CXX_OPT``: every tile build of the suite (the
    default of :func:`~tricut.sim.harness.tile.verilator.build`) compiles at -O0; an
    optimisation the build does not know is refused before anything is generated."""
    assert V.DEFAULT_OPT == QUICK_OPT == "-O0"
    with pytest.raises(ValueError, match=r"'-Ofast'.*choose one of -O0, -O1, -O2, -O3"):
        V.build({}, False, "-Ofast")


def test_tile_run_refuses_an_unknown_build_optimisation_in_one_line(monkeypatch, capsys):
    """``$TRICUT_TILE_CXX_OPT`` (read into ``DEFAULT_OPT``) of a value no build takes: one
    ``tricut: error:`` line naming it, exit 2, before anything is built."""
    monkeypatch.setattr(V, "DEFAULT_OPT", "-Ofast")
    code, cap = run_cli(["tile", "run", "--sim", "verilator"], capsys)
    assert_one_line_error(code, cap, "C++ optimisation '-Ofast' (of $TRICUT_TILE_CXX_OPT")
