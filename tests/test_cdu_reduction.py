"""The system model's CDU reduction (sim/fast/cdu_reduction.py) against the block-level policy model
(models/cdu.py; its exact compiled twin sim/fast/cdu_twin.py at real sizes), in steady state: every
cached request re-reads every block each step (the ``full`` pattern), hints from the DSU
residency bit. Hit rate (allocation state) must agree within 2 %; HBM reads are reported too."""

import random

import pytest

from tricut.models.cdu import POLICIES
from tricut.models.config import load_gpu, load_model
from tricut.sim.fast.cdu_reduction import CduReduction, against_block_model
from tricut.sim.fast.timing import StepModel

def random_batch(rng, n_max):
    n = rng.randint(1, n_max)
    frac = rng.random()
    return [rng.randint(4096, 12000) if rng.random() < frac else rng.randint(16, 4000) for _ in range(n)]


@pytest.mark.parametrize("policy", POLICIES)
def test_reduction_vs_golden_small(policy):
    rng = random.Random(policy)
    for _ in range(4):
        red = CduReduction(policy, rng.choice([32, 64]), 16, rng.choice([6, 20]), rng.choice([2, 3]))
        ctxs = random_batch(rng, 4)
        hit, red_hit, hbm, red_hbm = against_block_model(ctxs, red, "golden")
        assert abs(red_hit - hit) <= 0.02 * max(hit, 1e-9) + 1e-12, (ctxs, hit, red_hit)
        assert abs(red_hbm - hbm) <= 0.05, (ctxs, hbm, red_hbm)


def sized(model, tp, policy):
    """The reduction exactly as the system model sizes it (H100, bf16)."""
    return StepModel(load_model(model), load_gpu("h100-sxm5"), "bf16", tp, frozenset({"cdu"}), policy).cdu


@pytest.mark.parametrize("model,tp", [("llama-3-8b", 1), ("llama-3-70b", 8)])
@pytest.mark.parametrize("policy", ["static", "adaptive"])
def test_reduction_vs_block_model_at_real_size(model, tp, policy):
    """H100 sizing of the system model (40 MB of block frames, HBM latency in blocks), mixed
    batches of streamed and cached requests, every layer."""
    red = sized(model, tp, policy)
    rng = random.Random(f"{model}{policy}")
    for n_max in (2, 8, 24):
        ctxs = random_batch(rng, n_max)
        hit, red_hit, hbm, red_hbm = against_block_model(ctxs, red, "fast")
        assert abs(red_hit - hit) <= 0.02 * max(hit, 1e-9) + 1e-12, (ctxs, hit, red_hit)
        assert abs(red_hbm - hbm) <= 0.02, (ctxs, hbm, red_hbm)


def test_comparison_can_fail_without_the_keep_cap():
    """With no reserved ways (reserve 0) the keep class fills whole sets and evicts prefetched
    blocks before use: the block model's hit rate drops far below the reduction's."""
    red = sized("llama-3-70b", 8, "adaptive")
    ctxs = [12000, 9000]
    hit, red_hit, _, _ = against_block_model(ctxs, red, "fast")
    assert abs(red_hit - hit) <= 0.02 * hit
    hit0, red_hit0, hbm0, _ = against_block_model(ctxs, red, "fast", reserve=0)
    assert red_hit0 - hit0 > 0.02 * hit0 and hbm0 > 1.0


def test_reduction_refuses_configurations_it_does_not_follow():
    with pytest.raises(ValueError, match="fewer prefetches in flight per set"):
        CduReduction("static", 16, 16, 30, 8)
    with pytest.raises(ValueError, match="unknown CDU policy 'lru'"):
        CduReduction("lru", 64, 16, 6, 2)
    CduReduction("disabled", 16, 16, 30, 8)     # nothing is prefetched
