"""Attention path of the decode tile (``rtl/tile/attention_tile.py``, ``kv_streamer.py``;
docs/tile/attention-path.md): step sequencer jobs -> KV streamer (K/V from the behavioural HBM) -> TE array
(+ split-K combine) -> output buffer, one layer at a time, in Amaranth's simulator.

Every output of every (round, layer, slot, kv_head) equals the golden (``te_decode`` over
``[0, seq_len)``, or ``combine_partials`` of the split parts' partial ``te_decode``) bit for
bit: seq_len 1, a context crossing the 16-token block boundary inside a job, a split context
of 3 parts, several rounds; bf16 and fp8; 1 and 2 engines; HBM latency > 1, an HBM that
answers out of order. The check can fail (one flipped bit of one HBM word); bad parameters
are refused before construction.
"""

from __future__ import annotations

import gc
import random
import warnings

import pytest

from tricut.models.dsu import Descriptor as D
from tricut.rtl.tile import attention_layouts as AL
from tricut.rtl.tile.attention_tile import AttentionTile
from tricut.rtl.tile.behavioural import layouts as BL
from tricut.rtl.tile.kv_streamer import KVStreamer
from tricut.sim.harness.sequencer import SeqRound
from tricut.sim.harness.tile.attention import (BlockRead, expected_block_words,
                                               run_block_reads, simulate)
from tricut.sim.harness.tile.params import DEFAULTS

#: cycles per layer (``go`` to ``done``) of each run below, as measured; docs/tile/attention-path.md quotes
#: them, and a change in the path's timing shows up here
CYCLES = {
    "split": [1069, 1069],
    "fp8": [704, 704],
    "rounds": [152, 152, 306, 306],
    "nvfp4": [197, 197],
}


def layer_cycles(res):
    return [r.cycles for r in res]


# ----------------------------------------------------------------------------------------------
# parameters and layouts
# ----------------------------------------------------------------------------------------------
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
    (dict(split_tokens=65), "split_tokens must be an integer in 0..64, got 65"),
    (dict(num_requests=17), "num_requests must be an integer in 1..16, got 17"),
    (dict(max_beats=0), "max_beats must be an integer in 1..256, got 0"),
    (dict(max_outstanding=65), "max_outstanding must be an integer in 1..64, got 65"),
    (dict(scale_bits=-1), "scale_bits must be an integer in 0..4294967295, got -1"),
    (dict(widths=3), "widths must be a tricut.rtl.cdu.layouts.Widths, got 3"),
    (dict(num_requests=16, max_ctx=16383), "at most 4194304 words (the KV image), got 8388096"),
    (dict(slot_bits=8, num_kv_heads=256, max_ctx=16383, split_tokens=1, num_requests=1,
          num_layers=1, head_dim=64, lanes=16), "split_tokens must leave at most 4096 parts"),
])
def test_bad_parameters_rejected_before_construction(kw, needle):
    for cls in (AttentionTile, KVStreamer):
        if cls is KVStreamer and "engines" in kw:
            continue
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
        for dt in ("bf16", "fp8", "nvfp4"):
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


# ----------------------------------------------------------------------------------------------
# whole layers, bit for bit against the golden
# ----------------------------------------------------------------------------------------------
def _rounds(rng, shapes, max_slots=4, num_requests=4):
    """Rounds of descriptors on random distinct slots (in slot order) with random requests;
    ``shapes``: per round the seq_lens."""
    out = []
    for k, lens in enumerate(shapes):
        slots = sorted(rng.sample(range(max_slots), len(lens)))
        reqs = rng.sample(range(num_requests), len(lens))
        out.append(SeqRound(k, [D(k, s, r, n, 0, rng.randrange(2))
                                for s, r, n in zip(slots, reqs, lens)],
                            end=k == len(shapes) - 1))
    return out


def test_split_context_and_block_boundary_bf16_one_engine():
    """bf16, G 2, 1 engine, split 6: a 17-token context is 3 parts ``[0,6) [6,12) [12,17)``
    (the last crosses the block boundary at 16 inside one job) through the combine unit, and
    a 1-token context goes straight to the buffer; HBM latency 8, in order."""
    rng = random.Random(11)
    p = dict(G=2, split_tokens=6, latency=8)
    rounds = _rounds(rng, [[17, 1]])
    res = simulate(rounds, p, seed=1)
    assert layer_cycles(res) == CYCLES["split"]
    assert all(r.reordered == 0 for r in res)


def test_fp8_two_engines_reordering_hbm():
    """fp8, G 3, 2 engines, no split; random round of 1..4 slots with seq_len 1..3; HBM
    latency 5 answering out of order (``reorder``), bursts of 4 beats (two per token), so the
    reorder buffer sees several bursts in flight."""
    rng = random.Random(0)                 # 4 slots, seq_len 2, 1, 2, 3
    n = rng.randint(1, 4)
    rounds = _rounds(rng, [[rng.randint(1, 3) for _ in range(n)]])
    p = dict(G=3, kv_dtype="fp8", engines=2, latency=5, reorder=True, hbm_seed=7, max_beats=4)
    assert [len(r.descriptors) for r in rounds] == [4]
    res = simulate(rounds, p, seed=2)
    assert layer_cycles(res) == CYCLES["fp8"]
    for r in res:               # 8 words per token, bursts of 4
        assert r.bursts == 2 * 2 * sum(d.seq_len for d in rounds[0].descriptors)
        assert r.reordered > 0, "the HBM answered every burst in order: reorder not exercised"


def test_rounds_back_to_back_and_a_flipped_hbm_bit_fails():
    """Two rounds (bf16, G 4, 2 engines, seq_len 1, then 2 split into 2 parts through the
    combine unit; bursts of 6 beats, not a power of two, across token boundaries):
    bit-exact; then one bit of the
    first V word of the first slot's region flipped in the HBM image only: the comparison
    fails at that slot (a V word: with one token the softmax weight is 1 whatever K is)."""
    rng = random.Random(3)
    p = dict(G=4, engines=2, latency=3, max_beats=6, split_tokens=1)
    rounds = _rounds(rng, [[1], [2]])
    res = simulate(rounds, p, seed=4)
    assert layer_cycles(res) == CYCLES["rounds"]
    d = rounds[0].descriptors[0]
    q = dict(DEFAULTS, **p)
    addr = AL.kv_addr(d.request, 0, 0, 0, num_layers=q["num_layers"],
                      num_kv_heads=q["num_kv_heads"], max_ctx=q["max_ctx"],
                      head_dim=q["head_dim"], lanes=q["lanes"]) + q["head_dim"] // q["lanes"]
    with pytest.raises(AssertionError, match=f"round 0 layer 0 slot {d.slot} kv_head 0"):
        simulate(rounds[:1], p, seed=4, corrupt=(addr, 3))


def test_nvfp4_tensor_scale_input():
    """nvfp4 (block scales in the HBM words, the tensor scale on ``tensor_scale``), G 2, one
    slot of 2 tokens split into 2 parts of 1; one HBM burst in flight (``max_outstanding``
    1)."""
    rng = random.Random(8)
    res = simulate(_rounds(rng, [[2]]), dict(G=2, kv_dtype="nvfp4", split_tokens=1, max_ctx=16,
                                             max_outstanding=1), seed=6)
    assert layer_cycles(res) == CYCLES["nvfp4"]


def test_verilog_lint_clean(tmp_path):
    """Verilog of a 2-engine split-K tile lints clean with the documented waivers (and warns
    without)."""
    from tricut.sim.harness.verilog_out import lint, write_verilog

    dut = AttentionTile(engines=2, head_dim=64, G=2, lanes=2, kv_dtype="fp8", split_tokens=8,
                        max_ctx=32, max_outstanding=3, max_beats=12)
    path = write_verilog(dut, "tile_attention", tmp_path)
    clean, messages = lint(path, "tile_attention")
    assert clean, messages
    clean, messages = lint(path, "tile_attention", waivers=())
    assert not clean and "%Warning-" in messages
