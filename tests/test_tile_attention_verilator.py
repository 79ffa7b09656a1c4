"""The decode tile's attention path on Verilator (``sim/harness/tile/attention_verilator.py``,
bench ``sim/harness/benches/tile_attention.py``): Python only at layer boundaries (q, ``go``,
``RisingEdge(done)``, the output buffer), the KV image loaded by ``$readmemh``.

One small configuration (bf16, G 2, 2 engines, split-K of 6 tokens through the combine unit,
an HBM answering out of order, two rounds) is bit-exact with the golden on Verilator, and
every layer takes exactly as many cycles, issues as many HBM bursts and produces the same
words as the same plan in Amaranth's simulator; the HBM beat counter counts the K/V words
the jobs need. A flipped bit of the image fails the check. One Verilator build (``-O0``) in a
build directory per pytest-xdist worker.
"""

from __future__ import annotations

import numpy as np
import pytest

from tricut.models.dsu import Descriptor as D
from tricut.rtl.tile import attention_layouts as AL
from tricut.sim.harness.tile import attention as A
from tricut.sim.harness.tile.hbm_image import kv_image, make_kv
from tricut.sim.harness.tile.params import DEFAULTS
from tricut.sim.harness.tile import attention_verilator as V
from tricut.sim.harness.sequencer import SeqRound

P = dict(G=2, engines=2, split_tokens=6, latency=5, max_beats=6, reorder=True, hbm_seed=7)
SEED = 5


def _rounds():
    """Round 0: slot 0 request 2 with 17 tokens (3 parts, the last crossing the block
    boundary), slot 3 request 1 with 1 token; round 1: slot 1 request 0 with 6 tokens (one
    part, exactly the split), slot 2 request 3 with 8 (2 parts)."""
    return [SeqRound(0, [D(0, 0, 2, 17, 0, 0), D(0, 3, 1, 1, 0, 1)]),
            SeqRound(1, [D(1, 1, 0, 6, 0, 0), D(1, 2, 3, 8, 0, 1)], end=True)]


@pytest.fixture(scope="module")
def build():
    return V.build(P, "-O0")


@pytest.fixture(scope="module")
def amaranth():
    return A.simulate(_rounds(), P, seed=SEED)


def test_verilator_bit_exact_and_cycle_equal_to_amaranth(build, amaranth):
    layers, info, _ = V.simulate_verilator(_rounds(), P, seed=SEED, b=build)   # golden check
    assert [(r.round, r.layer) for r in layers] == [(r.round, r.layer) for r in amaranth]
    assert [r.cycles for r in layers] == [r.cycles for r in amaranth]
    assert [r.bursts for r in layers] == [r.bursts for r in amaranth]
    assert any(r.reordered for r in amaranth), "the HBM answered every burst in order"
    p = dict(DEFAULTS, **P)
    words_per_token = 2 * p["head_dim"] // p["lanes"]
    for lv, la in zip(layers, amaranth):
        assert lv.out.keys() == la.out.keys()
        assert all(np.array_equal(lv.out[k], la.out[k]) for k in la.out)
        n = sum(d.seq_len for d in _rounds()[lv.round].descriptors)
        assert lv.beats == n * p["num_kv_heads"] * words_per_token
        assert lv.run_s >= 0 and lv.q_s >= 0 and lv.out_s >= 0
    assert info.sim_s > 0 and 0 < info.bench_s <= info.sim_s


def test_verilator_check_fails_on_a_flipped_hbm_bit(build):
    """One bit of the first V word of round 0's slot 3 (request 1, layer 0, kv_head 1, one
    token) flipped in the image the simulator loads: the golden check names that output."""
    p = dict(DEFAULTS, **P)
    rounds = _rounds()[:1]
    rng = np.random.default_rng(SEED)
    kv = make_kv(rng, p)
    qs = A.make_qs(rng, rounds, p)
    image = kv_image(kv, p)
    addr = AL.kv_addr(1, 0, 1, 0, num_layers=p["num_layers"], num_kv_heads=p["num_kv_heads"],
                      max_ctx=p["max_ctx"], head_dim=p["head_dim"], lanes=p["lanes"])
    image[addr + p["head_dim"] // p["lanes"]] ^= 1 << 5
    info = V.run_plan(build, V.plan_json(rounds, qs, p, kv.ts_bits), image)
    with pytest.raises(AssertionError, match="round 0 layer 0 slot 3 kv_head 1"):
        A.check(rounds, qs, kv, info.layers, p)
