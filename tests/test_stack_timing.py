"""A software-stack profile's parameters reach the decode step time (sim/fast/timing.py) as
docs/system-model.md says: each changed alone, the step changes by a hand-computed amount."""

import math

import numpy as np
import pytest

from tricut.models.config import load_gpu, load_model
from tricut.sim.fast.stacks import get_stack
from tricut.sim.fast.timing import StepModel

H100 = load_gpu("h100-sxm5")
L8B = load_model("llama-3-8b")
LAYERS = L8B.num_layers
#: a stack with no overheads at all: each test switches one on
BARE = get_stack("vllm-v0").with_values(
    host_step_s=0, host_per_request_s=0, host_jitter_s=0, sched_overlap=0, graph_layer_gap_s=0,
    eager_extra_gap_s=0, attn_call_s=0, allreduce_latency_s=0)
LENS = [4097, 1025, 2049, 513]


def time_of(stack, lens=LENS, cuts=(), tp=1, degraded=False, model=L8B) -> float:
    sm = StepModel(model, H100, tp=tp, cuts=frozenset(cuts), stack=stack)
    return sm.step_time(lens, [0] * len(lens), np.random.default_rng(0), degraded).time_s


def test_host_time_is_serial_without_overlap():
    base = time_of(BARE)
    assert time_of(BARE.with_values(host_step_s=1e-3)) - base == pytest.approx(1e-3, rel=1e-9)
    per_request = time_of(BARE.with_values(host_per_request_s=1e-5)) - base
    assert per_request == pytest.approx(len(LENS) * 1e-5, rel=1e-9)


@pytest.mark.parametrize("host", [1e-3, 2e-3, 0.02, 0.05])
def test_overlapped_host_time_shows_only_beyond_the_gpu(host):
    gpu = time_of(BARE)                            # no host work: the GPU's time alone
    assert 0.005 < gpu < 0.02                      # so 1-2 ms hide and 20-50 ms show
    overlapped = BARE.with_values(sched_overlap=1, host_step_s=host)
    assert time_of(overlapped) == pytest.approx(gpu + max(0.0, host - gpu), rel=1e-12)
    half = BARE.with_values(sched_overlap=0.5, host_step_s=host)
    assert time_of(half) == pytest.approx(gpu + 0.5 * host + 0.5 * max(0.0, host - gpu), rel=1e-12)


def test_host_time_does_not_reach_a_dsu_step_unless_degraded():
    slow = BARE.with_values(host_step_s=1e-3)
    assert time_of(slow, cuts=("dsu",)) == time_of(BARE, cuts=("dsu",))
    assert time_of(slow, cuts=("dsu",), degraded=True) - time_of(BARE, cuts=("dsu",), degraded=True) \
        == pytest.approx(1e-3, rel=1e-9)


def test_launch_gaps_switch_to_eager_above_the_graph_batch():
    gaps = BARE.with_values(graph_layer_gap_s=3e-6, eager_extra_gap_s=20e-6)
    batch = len(LENS)
    base = time_of(BARE)
    graphed = time_of(gaps.with_values(graph_max_batch=batch))
    eager = time_of(gaps.with_values(graph_max_batch=batch - 1))
    assert graphed - base == pytest.approx(LAYERS * 3e-6, rel=1e-9)
    assert eager - base == pytest.approx(LAYERS * (3e-6 + 20e-6), rel=1e-9)
    no_graphs = gaps.with_values(graph_max_batch=4096, cuda_graphs=False)
    assert time_of(no_graphs) == pytest.approx(eager, rel=1e-12)
    # the gaps add to the TE path too
    assert time_of(gaps.with_values(graph_max_batch=batch), cuts=("te",)) - time_of(BARE, cuts=("te",)) \
        == pytest.approx(LAYERS * 3e-6, rel=1e-9)


def test_attention_call_cost_is_per_layer_on_the_sm_path():
    assert time_of(BARE.with_values(attn_call_s=1.5e-5)) - time_of(BARE) == pytest.approx(LAYERS * 1.5e-5,
                                                                                           rel=1e-9)
    # the TE path runs no SM attention kernel
    assert time_of(BARE.with_values(attn_call_s=1.5e-5), cuts=("te",)) == time_of(BARE, cuts=("te",))


def test_attention_bandwidth_efficiency_scales_the_kv_bytes():
    sm = StepModel(L8B, H100, stack=BARE)
    st = sm.step_time(LENS, [0] * len(LENS), np.random.default_rng(0))
    kv_bytes = st.kv_read_bytes + st.hbm_write_bytes
    full = BARE.with_values(attn_bw_efficiency=1.0)
    half = BARE.with_values(attn_bw_efficiency=0.5)
    assert time_of(half) - time_of(full) == pytest.approx(kv_bytes / H100.hbm_bandwidth, rel=1e-9)


@pytest.mark.parametrize("cuts", [(), ("te",)])
def test_fp8_weights_stream_at_the_stacks_fp8_gemv_efficiency(cuts):
    """fp8 weights: the GEMVs reach fp8_gemv_efficiency_ratio x gemv_bw_efficiency of peak HBM
    bandwidth and cost fp8_gemv_call_extra_s more per call (4 per layer), so the GEMV-bound step
    grows by weight bytes / bw x (1/ratio - 1) + layers x 4 x extra; bf16 weights see neither."""
    import dataclasses
    fp8 = dataclasses.replace(L8B, weight_dtype="fp8")
    sm = StepModel(fp8, H100, stack=BARE)
    weights = sm.weight_bytes / (H100.hbm_bandwidth * sm.assumptions.gemv_bw_efficiency)
    plain = BARE.with_values(fp8_gemv_efficiency_ratio=1.0, fp8_gemv_call_extra_s=0.0)
    slower = plain.with_values(fp8_gemv_efficiency_ratio=0.5)
    called = plain.with_values(fp8_gemv_call_extra_s=2e-6)
    lens = [1025]                      # one short request: the weight GEMVs bound the step
    base = time_of(plain, lens, cuts, model=fp8)
    assert time_of(slower, lens, cuts, model=fp8) - base == pytest.approx(weights * (1 / 0.5 - 1), rel=1e-9)
    assert time_of(called, lens, cuts, model=fp8) - base == pytest.approx(LAYERS * 4 * 2e-6, rel=1e-9)
    assert time_of(slower, lens, cuts) == time_of(called, lens, cuts) == time_of(plain, lens, cuts)
    # the GEMVs of a prefill read the weights the same way
    assert StepModel(fp8, H100, stack=slower)._prefill_compute_s([1]) == pytest.approx(2 * weights, rel=1e-9)


@pytest.mark.parametrize("tp", [2, 4, 8])
def test_allreduce_latency_per_doubling_of_tp(tp):
    lat = BARE.with_values(allreduce_latency_s=1e-5)
    # two all-reduces per layer, each allreduce_latency_s x log2(tp)
    assert time_of(lat, tp=tp) - time_of(BARE, tp=tp) == pytest.approx(2 * LAYERS * 1e-5 * math.log2(tp),
                                                                        rel=1e-9)
    assert time_of(lat, tp=1) == time_of(BARE, tp=1)


def test_an_empty_decode_batch_carrying_a_prefill_chunk():
    sm = StepModel(L8B, H100, stack=BARE)
    rng = np.random.default_rng(0)
    st = sm.step_time([], [], rng, prefill_tokens=512, prefill_context=1024)
    # compute-bound: the chunk's GEMMs and its attention over 1024 earlier + its own tokens
    gemm = sm.gemv_flops_per_request * 512
    attn = 4 * LAYERS * L8B.num_heads * L8B.head_dim * (512 * 1024 + 512 * 512 / 2)
    assert st.sm_busy_s >= (gemm + attn) / (sm.peak_flops * sm.assumptions.compute_efficiency) * (1 - 1e-12)
    assert st.hbm_write_bytes == 512 * sm.kv_token_bytes and st.kv_read_bytes == 0
    assert st.time_s >= st.floor_s
    longer = sm.step_time([], [], rng, prefill_tokens=512, prefill_context=4096)
    assert longer.time_s > st.time_s
