"""The serving setup shared by the CLI and the benchmarks (sim/fast/setup.py)."""

import pytest

from tricut.models.config import ConfigError, load_gpu, load_model
from tricut.models.dsu import DsuParams
from tricut.models.roofline import roofline
from tricut.sim.fast.setup import ServingSetup
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
    assume = Assumptions(host_jitter_s=0.0)
    setup = ServingSetup(model, gpu, policy="static", profile="latency-opt", n_slots=8, max_batch=8,
                         assumptions=assume)
    reqs = synthetic(12, 50.0, 512, 16, seed=3)
    got = setup.run(reqs, ("te", "cdu"), seed=1).summary
    want = simulate(reqs, StepModel(model, gpu, "bf16", 1, frozenset({"te", "cdu"}), "static", assume),
                    DsuParams("latency-opt", n_slots=8, max_batch=8, latency_batch=8,
                              kv_capacity_tokens=setup.kv_tokens_fit()), seed=1).summary
    assert got == want
    other = ServingSetup(model, gpu, policy="static", profile="latency-opt", n_slots=8, max_batch=8,
                         assumptions=Assumptions(host_jitter_s=0.0, gemv_bw_efficiency=0.5))
    assert other.run(reqs, ("te", "cdu"), seed=1).summary["tpot_p50_s"] > got["tpot_p50_s"]


def test_requests_longer_than_the_context_are_refused_by_id():
    setup = ServingSetup(load_model("tiny"), load_gpu("h100-sxm5"))
    long = Request(7, 0.0, setup.model.max_context, 1)
    with pytest.raises(TraceError, match="request 7"):
        setup.run([long])
