"""The serving setup shared by the CLI and the benchmarks (sim/fast/setup.py)."""

import pytest

from tricut.models.config import ConfigError, load_gpu, load_model
from tricut.models.dsu import DsuParams
from tricut.models.roofline import roofline
from tricut.sim.fast.timing import DEFAULT_TE_LANES
from tricut.sim.fast.setup import ServingSetup
from tricut.sim.fast.stacks import DEFAULT_STACK, get_stack
from tricut.sim.fast.system import simulate
from tricut.sim.fast.timing import Assumptions, StepModel
from tricut.sim.fast.workload import Request, TraceError, synthetic


def test_dsu_params_default_to_what_fits_in_hbm():
    model, gpu = load_model("llama-3-70b"), load_gpu("h100-sxm5")
    p = ServingSetup(model, gpu, tp=8, max_batch=32).dsu_params()
    assert p.kv_capacity_tokens == roofline(model, gpu, "bf16", 1, 1, tp=8).kv_tokens_fit
    assert (p.n_slots, p.max_batch, p.latency_batch, p.profile) == (64, 32, 16, "throughput-opt")
    q = ServingSetup(model, gpu, tp=8, max_batch=8, kv_capacity_tokens=1000).dsu_params()
    assert (q.latency_batch, q.kv_capacity_tokens) == (8, 1000)


def test_weights_that_do_not_fit_are_a_config_error():
    with pytest.raises(ConfigError, match="raise --tp"):
        ServingSetup(load_model("llama-3-70b"), load_gpu("h100-sxm5"), tp=1).dsu_params()


def test_run_is_simulate_with_the_setups_step_model_and_dsu():
    model, gpu = load_model("llama-3-8b"), load_gpu("h100-sxm5")
    stack = get_stack("vllm-v1").with_values(host_jitter_s=0.0)
    setup = ServingSetup(model, gpu, policy="static", profile="latency-opt", n_slots=8, max_batch=8,
                         stack=stack, prefill="colocated", concurrency=3, think_s=0.01)
    reqs = synthetic(12, 50.0, 512, 16, seed=3)
    got = setup.run(reqs, ("te", "cdu"), seed=1).summary
    want = simulate(reqs, StepModel(model, gpu, "bf16", 1, frozenset({"te", "cdu"}), "static", stack=stack),
                    DsuParams("latency-opt", n_slots=8, max_batch=8, latency_batch=8,
                              kv_capacity_tokens=setup.kv_tokens_fit()), seed=1,
                    prefill="colocated", concurrency=3, think_s=0.01).summary
    assert got == want
    assert (got["stack"], got["prefill_mode"], got["concurrency"], got["think_s"]) == \
        ("vllm-v1", "colocated", 3, 0.01)
    other = ServingSetup(model, gpu, policy="static", profile="latency-opt", n_slots=8, max_batch=8,
                         assumptions=Assumptions(gemv_bw_efficiency=0.5), stack=stack, prefill="colocated",
                         concurrency=3, think_s=0.01)
    assert other.run(reqs, ("te", "cdu"), seed=1).summary["tpot_p50_s"] > got["tpot_p50_s"]


def test_the_stack_and_its_prefill_mode_are_the_defaults():
    setup = ServingSetup(load_model("tiny"), load_gpu("h100-sxm5"))
    assert setup.stack == get_stack(DEFAULT_STACK) and setup.step_model().stack == setup.stack
    assert (setup.prefill, setup.concurrency, setup.think_s) == (None, None, 0.0)
    r = setup.run(synthetic(3, 10.0, 64, 4, seed=0))
    assert r.summary["prefill_mode"] == get_stack(DEFAULT_STACK).prefill and r.summary["concurrency"] is None
    ideal = ServingSetup(load_model("tiny"), load_gpu("h100-sxm5"), stack=get_stack("ideal"))
    assert ideal.step_model().stack.name == "ideal"
    assert ideal.run(synthetic(3, 10.0, 64, 4, seed=0)).summary["prefill_mode"] == "disaggregated"


@pytest.mark.parametrize("options,needle", [
    ({"prefill": "split"}, "prefill mode must be one of disaggregated, colocated, chunked, got 'split'"),
    ({"concurrency": 0}, "concurrency must be an integer >= 1, got 0"),
    ({"concurrency": 2.5}, "concurrency must be an integer >= 1, got 2.5"),
    ({"concurrency": True}, "concurrency must be an integer >= 1, got True"),
    ({"think_s": -0.1}, "think time must be a finite number >= 0, got -0.1"),
    ({"think_s": float("inf")}, "think time must be a finite number >= 0, got inf"),
    ({"stack": "vllm-v0"}, "stack must be a StackProfile"),
])
def test_bad_run_options_are_refused(options, needle):
    with pytest.raises(ValueError) as e:
        ServingSetup(load_model("tiny"), load_gpu("h100-sxm5"), **options)
    assert needle in str(e.value)


def test_requests_longer_than_the_context_are_refused_by_id():
    setup = ServingSetup(load_model("tiny"), load_gpu("h100-sxm5"))
    long = Request(7, 0.0, setup.model.max_context, 1)
    with pytest.raises(TraceError, match="request 7"):
        setup.run([long])


def test_unit_sizes_replace_the_gpus_and_set_the_te_lanes():
    model, gpu = load_model("llama-3-70b"), load_gpu("h100-sxm5")
    base = ServingSetup(model, gpu, tp=8)
    sized = ServingSetup(model, gpu, tp=8, units={"te_engines_per_sm": 1, "te_lanes": 8, "dsu_cores": 2})
    assert (sized.gpu.te_engines_per_sm, sized.gpu.dsu_cores) == (1, 2)
    assert gpu.te_engines_per_sm != 1 and base.gpu == gpu          # the loaded config is not changed
    units = sized.step_model(("te",)).units
    assert (units.te_engines, units.te_lanes) == (gpu.sm_count, 8)
    assert base.step_model(("te",)).units.te_lanes == DEFAULT_TE_LANES == 32
    # fewer, narrower engines make TE-bound steps slower; the DSU's cores do not enter the timing
    reqs = synthetic(24, float("inf"), 8192, 8, seed=2)
    tps = lambda s: s.run(reqs, ("te", "cdu", "dsu"), seed=0).summary["tokens_per_s"]  # noqa: E731
    assert tps(sized) < tps(base)
    assert tps(ServingSetup(model, gpu, tp=8, units={"dsu_cores": 1})) == tps(base)
    for bad, match in (({"te_lanes": 3}, "te_lanes must be one of"), ({"dsu_cores": 0}, "dsu_cores must be in"),
                       ({"sm_count": 2}, "unknown unit size"), ({"te_engines_per_sm": 1.5}, "must be an integer")):
        with pytest.raises(ValueError, match=match):
            ServingSetup(model, gpu, tp=8, units=bad)
