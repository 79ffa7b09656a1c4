"""The decode tile's attention path (``rtl/tile/attention_path.py``; docs/tile/attention-path.md)
outside a run: its parameter checks, its layouts, its block-read interface alone
(``rtl/tile/block_reader.py`` ``HbmBlockReader`` over the behavioural HBM) and its Verilog.

Bad parameters of the attention path and its unit streamer are refused before construction
with one message naming the parameter; the HBM port's layouts are declared once; random block
reads under several burst lengths, reorder-buffer sizes and a reordering HBM answer the KV
image's words in read order; the Verilog lints clean with and without the CDU. Whole decode
steps through it: tests/test_tile_cosim.py (without the CDU), tests/test_tile_cached.py and
tests/test_tile_cosim_verilator.py (with).
"""

from __future__ import annotations

import gc
import random
import warnings

import pytest

from tricut.models.config import KV_DTYPES
from tricut.rtl.tile import attention_layouts as AL
from tricut.rtl.tile.attention_path import AttentionPath
from tricut.rtl.tile.behavioural import layouts as BL
from tricut.rtl.tile.unit_streamer import UnitStreamer
from tricut.sim.harness.tile.block_reads import (BlockRead, expected_block_words,
                                                 run_block_reads)
from tricut.sim.harness.tile.params import DEFAULTS


@pytest.mark.parametrize("kw,needle", [
    (dict(engines=0), "engines must be an integer in 1..16, got 0"),
    (dict(head_dim=96), "head_dim must be one of (64, 128, 256), got 96"),
    (dict(head_dim=None), "head_dim must be one of (64, 128, 256), got None"),
    (dict(scale_bits=1 << 32), "scale_bits must be an integer in 0..4294967295, got 4294967296"),
    (dict(G=17), "G must be an integer in 1..16, got 17"),
    (dict(lanes=3), "lanes must be one of (2, 4, 8, 16, 32), got 3"),
    (dict(kv_dtype="fp16"), "kv_dtype must be one of ('bf16', 'fp8', 'nvfp4'), got 'fp16'"),
    (dict(num_layers=9), "num_layers must be an integer in 1..8, got 9"),
    (dict(max_ctx=0), "max_ctx must be an integer in 1..16383, got 0"),
    (dict(max_ctx=24), "max_ctx must be a multiple of 16"),
    (dict(split_tokens=65), "split_tokens must be an integer in 0..64, got 65"),
    (dict(num_requests=17), "num_requests must be an integer in 1..16, got 17"),
    (dict(max_beats=0), "max_beats must be an integer in 1..256, got 0"),
    (dict(max_outstanding=65), "max_outstanding must be an integer in 1..64, got 65"),
    (dict(scale_bits=-1), "scale_bits must be an integer in 0..4294967295, got -1"),
    (dict(widths=3), "widths must be a tricut.rtl.cdu.layouts.Widths, got 3"),
    (dict(num_requests=16, max_ctx=16368, lanes=16), "at most 4194304 words (the KV image), got 8380416"),
    (dict(slot_bits=8, num_kv_heads=256, max_ctx=16368, split_tokens=1, num_requests=1,
          num_layers=1, head_dim=64, lanes=16), "split_tokens must leave at most 4096 parts"),
])
def test_bad_parameters_rejected_before_construction(kw, needle):
    for cls in (AttentionPath, UnitStreamer):
        with warnings.catch_warnings():
            warnings.simplefilter("error")      # no UnusedElaboratable from a half-built unit
            with pytest.raises(ValueError) as e:
                cls(**kw)
            gc.collect()
        assert needle in str(e.value), (cls.__name__, str(e.value))


def test_layouts_agree_with_the_behavioural_hbm_and_the_te():
    # the HBM port layouts are declared once, on the synthesizable side, and the model uses them
    assert (BL.hbm_req_layout, BL.hbm_resp_layout) == (AL.hbm_req_layout, AL.hbm_resp_layout)
    # one HBM word = one TE kv beat without last, rounded to bytes (exact for every config)
    from tricut.rtl.te.layouts import kv_layout
    for lanes in (2, 4, 8, 16, 32):
        for dt in KV_DTYPES:
            assert AL.kv_word_bits(lanes, dt) == kv_layout(lanes, dt).size - 1
            assert AL.kv_data_bits(lanes, dt) % 8 == 0
            assert AL.kv_data_bits(lanes, dt) - AL.kv_word_bits(lanes, dt) < 8
    geo = dict(num_layers=2, num_kv_heads=3, max_ctx=20, head_dim=64, lanes=16)
    assert AL.kv_addr(0, 0, 0, 0, **geo) == 0
    assert AL.kv_addr(0, 0, 0, 1, **geo) == 8                    # 2 * Dk words per token
    assert AL.kv_addr(0, 0, 1, 0, **geo) == 160                  # max_ctx * 2 * Dk per region
    assert AL.kv_addr(1, 1, 2, 19, **geo) == ((1 * 2 + 1) * 3 + 2) * 160 + 19 * 8
    assert AL.kv_image_words(2, **geo) == 2 * 2 * 3 * 160


# ----------------------------------------------------------------------------------------------
# the block-read interface alone (HbmBlockReader over the behavioural HBM)
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("hbm", [
    dict(max_beats=2, max_outstanding=8, hbm_outstanding=8, latency=20, reorder=True,
         hbm_seed=0xACE1),
    dict(max_beats=1, max_outstanding=1, hbm_outstanding=2, latency=2, reorder=False),
    dict(max_beats=256, max_outstanding=4, hbm_outstanding=4, latency=9, reorder=True,
         hbm_seed=7),
], ids=["bursts2-reorder", "bursts1-one-slot", "bursts256-reorder"])
def test_block_reads_answer_the_image_in_order(hbm):
    """Random block reads (full 16-token blocks, single tokens, partial blocks at random
    offsets, random regions) back to back, ``rd_data`` ready 60 % of cycles: every word is the
    image's at ``kv_addr``, in read order, ``last`` exactly on each read's final word, no
    ``err``, nothing more (8 more cycles); with a reordering HBM some bursts were answered out
    of order (the HBM has a choice when several bursts are due at once: here when the reorder
    buffer's free slots are issued back to back, as at the start)."""
    rng = random.Random(21)
    p = dict(DEFAULTS, max_ctx=48, **hbm)
    reads = []
    for k in range(12):
        block = rng.randrange(3)
        t0, ntok = [(0, 16), (rng.randrange(16), 1)][k % 2] if k < 4 else \
            (lambda t0: (t0, rng.randint(1, 16 - t0)))(rng.randrange(16))
        reads.append(BlockRead(rng.randrange(p["num_requests"]), rng.randrange(2),
                               rng.randrange(2), block, t0, ntok))
    image = [rng.getrandbits(264) for _ in range(4 * 2 * 2 * 48 * 8)]
    beats, answered, issued = run_block_reads(reads, image, p, ready=0.6, seed=2)
    assert [(d, last) for d, last, _ in beats] == expected_block_words(reads, image, p)
    assert not any(err for _, _, err in beats)
    assert sorted(answered) == sorted(issued)
    assert (answered != issued) == hbm["reorder"]


@pytest.mark.parametrize("cdu", [None, dict(sets=2, ways=2)], ids=["no-cdu", "cdu"])
def test_verilog_lint_clean(tmp_path, cdu):
    """Verilog of a 2-engine split-K attention path, without and with the CDU, lints clean with
    the documented waivers (and, without the CDU, warns without them: the waivers are
    needed)."""
    from tricut.sim.harness.verilog_out import lint, write_verilog

    dut = AttentionPath(engines=2, head_dim=64, G=2, lanes=2, kv_dtype="fp8", split_tokens=8,
                        max_ctx=32, max_outstanding=3, max_beats=12, cdu=cdu)
    path = write_verilog(dut, "tile_attention", tmp_path)
    clean, messages = lint(path, "tile_attention")
    assert clean, messages
    if cdu is None:
        clean, messages = lint(path, "tile_attention", waivers=())
        assert not clean and "%Warning-" in messages


@pytest.mark.parametrize("kv_dtype", KV_DTYPES)
@pytest.mark.parametrize("lanes", [2, 4, 16, 32])
def test_image_words_are_the_te_kv_beats(kv_dtype, lanes):
    """``kv_words`` (the HBM image's packing, numpy) equals ``pack_kv_beats`` (the TE's kv
    payload, one beat at a time) without ``last``, block scales included."""
    import numpy as np

    from tricut.models.te import KV_CODE_BITS
    from tricut.rtl.te.layouts import pack_kv_beats
    from tricut.sim.harness.tile.hbm_image import kv_words
    rng = np.random.default_rng(lanes)
    bits, d, n = KV_CODE_BITS[kv_dtype], 64, 5
    k, v = (rng.integers(0, 1 << bits, (n, d)) for _ in range(2))
    ks = vs = None
    if kv_dtype == "nvfp4":
        ks, vs = (rng.integers(0, 256, (n, d // 16)) for _ in range(2))
    k[0], v[-1] = (1 << bits) - 1, 0                     # all ones, all zeros
    mask = (1 << AL.kv_word_bits(lanes, kv_dtype)) - 1
    want = [b & mask for b in pack_kv_beats(k, v, kv_dtype, lanes, ks, vs)]
    assert kv_words(k, v, kv_dtype, lanes, ks, vs) == want
    assert kv_words(k[:0], v[:0], kv_dtype, lanes) == []
