"""The energy model (sim/fast/energy.py, sim/fast/energy.json): every coefficient has a source,
bad coefficients are one error line, a run's energy respects its physics floor and the board
power, and the docs quote the shipped values."""

import json
from pathlib import Path

import pytest

from tricut.models.config import load_gpu, load_model
from tricut.sim.cli.testing import assert_one_line_error, run_cli
from tricut.sim.fast import energy as E
from tricut.sim.fast.setup import ServingSetup
from tricut.sim.fast.stacks import get_stack
from tricut.sim.fast.timing import PhysicsViolation
from tricut.sim.fast.workload import synthetic

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ROOT / "sim" / "fast" / "energy.json"
KEYS = ("energy_j_per_token", "tokens_per_joule", "power_w_mean", "power_w_peak", "tokens_per_s_per_mw",
        "power_capped", "power_cap_clock", "energy_split")


def _run(energy_file=None, gpu="h100-sxm5", n=40, rate=20.0):
    setup = ServingSetup(load_model("llama-3-8b"), load_gpu(gpu), stack=get_stack("vllm-v0"),
                         energy_file=energy_file)
    return setup.run(synthetic(n, rate, prompt=512, output=32, seed=3), ())


def _table_with(tmp_path, gpu="h100-sxm5", **values):
    raw = json.loads(SHIPPED.read_text())
    for k, v in values.items():
        raw["gpus"][gpu][k]["value"] = v
    path = tmp_path / "energy.json"
    path.write_text(json.dumps(raw))
    return path


def test_every_coefficient_has_a_source_and_fits_come_from_the_script():
    table = E.load_energy()
    assert set(table.gpus) == {"h100-sxm5", "h200"}
    for gpu, src in table.sources.items():
        for field, text in src.items():
            assert text and len(text) > 10, (gpu, field)
            if text.startswith("fit:"):
                assert text.startswith("fit: .venv/bin/python benchmarks/energy.py --write"), (gpu, field)
            if text.startswith("derived:"):
                assert text.startswith("derived: .venv/bin/python benchmarks/unit_energy.py --write: "), (gpu, field)
    fitted = {f for f, s in table.sources["h100-sxm5"].items() if s.startswith("fit:")}
    assert fitted == {"static_w", "sm_pj_per_flop"}
    derived = {f for f, s in table.sources["h100-sxm5"].items() if s.startswith("derived:")}
    assert derived == {"te_pj_per_cycle", "cdu_pj_per_cycle", "dsu_pj_per_cycle", "sram_pj_per_byte"}
    h100, h200 = table.gpus["h100-sxm5"], table.gpus["h200"]
    assert (h200.static_w, h200.sm_pj_per_flop) == (h100.static_w, h100.sm_pj_per_flop)
    for f in derived:
        assert getattr(h100, f) == getattr(h200, f) > 0, f


def test_the_ledger_adds_bytes_and_flops_at_their_coefficients():
    c = E.load_energy().gpus["h100-sxm5"]
    led = E.EnergyLedger(c, "bf16")
    led.work(E.GpuWork(1e9, 2e9, 3e12, 4e6, 5e6, 6e8, 7e5, 8e4), 0.01, 0.01)
    j = led.joules
    assert j["hbm"] == pytest.approx(1e9 * c.hbm_pj_per_byte * 1e-12)
    assert j["l2"] == pytest.approx(2e9 * c.l2_pj_per_byte * 1e-12)
    assert j["sm"] == pytest.approx(3e12 * c.sm_pj_per_flop * 1e-12)
    assert j["links"] == pytest.approx(4e6 * c.link_pj_per_byte * 1e-12)
    assert j["te"] == pytest.approx((5e6 * c.te_pj_per_cycle + 2 * 6e8 * c.sram_pj_per_byte) * 1e-12)
    assert j["cdu"] == pytest.approx(7e5 * c.cdu_pj_per_cycle * 1e-12)
    assert j["dsu"] == pytest.approx(8e4 * c.dsu_pj_per_cycle * 1e-12)
    assert led.peak_w() == pytest.approx((sum(j.values()) + c.static_w * 0.01) / 0.01)
    fp8 = E.EnergyLedger(c, "fp8")
    fp8.work(E.GpuWork(flops=3e12))
    assert fp8.joules["sm"] == pytest.approx(j["sm"] * c.fp8_flop_ratio)
    led.close(2.0)
    assert led.joules["static"] == c.static_w * 2.0 and led.joules["host"] == c.host_w * 2.0


def test_a_run_reports_energy_and_respects_its_floor():
    r = _run()
    s = r.summary
    c = E.load_energy().gpus["h100-sxm5"]
    led = r.energy
    gpu_j = sum(led.joules[k] for k in E.GPU_COMPONENTS)
    assert led.joules["pool"] == 0.0                  # colocated: the prefill is the GPU's own
    assert s["energy_j_per_token"] == pytest.approx(gpu_j / s["output_tokens"])
    assert s["tokens_per_joule"] == pytest.approx(1 / s["energy_j_per_token"])
    assert s["power_w_mean"] == pytest.approx(gpu_j / s["duration_s"])
    # the mean under the board power; a compute-bound prefill batch may peak above it (a real
    # GPU would clock down for it: docs/energy.md)
    assert c.static_w < s["power_w_mean"] <= s["power_w_peak"] and s["power_w_mean"] < c.board_w
    assert s["power_capped"] is False and s["power_cap_clock"] == 1.0
    assert sum(s["energy_split"].values()) == pytest.approx(1.0) and set(s["energy_split"]) == set(E.COMPONENTS)
    # the floor: static power over the run plus every HBM byte (decode and prefill)
    hbm_j = led.joules["hbm"]
    assert gpu_j >= c.static_w * s["duration_s"] + hbm_j
    assert r.summary["tokens_per_s_per_mw"] == pytest.approx(s["tokens_per_s"] / s["power_w_mean"] * 1e6)


def test_the_floor_check_catches_a_run_that_loses_its_hbm_energy(monkeypatch):
    real = E.EnergyLedger.dynamic_j

    def no_hbm(self, w):
        return {**real(self, w), "hbm": 0.0}
    monkeypatch.setattr(E.EnergyLedger, "dynamic_j", no_hbm)
    with pytest.raises(PhysicsViolation, match="below its floor"):
        _run()


def test_a_run_above_the_board_power_is_reported_power_capped(tmp_path):
    c = E.load_energy().gpus["h100-sxm5"]
    low = _table_with(tmp_path, board_w=c.static_w + 20.0)
    s = _run(str(low)).summary
    assert s["power_capped"] is True and 0 < s["power_cap_clock"] < 1
    # the clock that fits: static + share × dynamic = board
    dyn = s["power_w_mean"] - c.static_w
    assert c.static_w + s["power_cap_clock"] * dyn == pytest.approx(c.static_w + 20.0)


def test_a_gpu_without_coefficients_reports_no_energy():
    s = _run(gpu="edge", n=8).summary
    assert all(s[k] is None for k in KEYS)


@pytest.mark.parametrize("change,needle", [
    ({"hbm_pj_per_byte": -3}, "hbm_pj_per_byte must be a finite number >= 0, got -3"),
    ({"static_w": "lots"}, "static_w must be a finite number >= 0, got 'lots'"),
    ({"static_w": 800.0}, "static_w 800.0 must be below board_w 700.0"),
    ({"fp8_flop_ratio": 1.5}, "fp8_flop_ratio must be in (0, 1], got 1.5"),
    ({"te_pj_per_cycle": -1.0}, "te_pj_per_cycle must be a finite number >= 0, got -1.0"),
    ({"dsu_pj_per_cycle": None}, "dsu_pj_per_cycle must be a finite number >= 0, got None"),
])
def test_bad_coefficients_are_one_error_line(tmp_path, capsys, change, needle):
    path = _table_with(tmp_path, **change)
    code, cap = run_cli(["simulate", "--synthetic", "4", "--energy", str(path), "--no-progress"], capsys)
    assert_one_line_error(code, cap, needle)


@pytest.mark.parametrize("text,needle", [
    (None, "file not found"),
    ("{", "not valid JSON"),
    ('{"about": "x", "gpus": {"h100-sxm5": {"board_w": {"value": 700, "source": "s"}}}}', "expected the keys"),
])
def test_bad_coefficient_files_are_one_error_line(tmp_path, capsys, text, needle):
    path = tmp_path / "e.json"
    if text is not None:
        path.write_text(text)
    code, cap = run_cli(["simulate", "--synthetic", "4", "--energy", str(path), "--no-progress"], capsys)
    assert_one_line_error(code, cap, needle)


def test_session_runs_report_energy_and_check_the_flag(tmp_path, capsys):
    code, cap = run_cli(["simulate", "--agentic", "sessions=2", "--no-progress", "--json"], capsys)
    assert code == 0, cap.err
    s = json.loads(cap.out)
    assert s["energy_j_per_token"] > 0 and s["power_w_mean"] > E.load_energy().gpus["h100-sxm5"].static_w
    bad = _table_with(tmp_path, static_w=-1)
    code, cap = run_cli(["simulate", "--agentic", "sessions=2", "--energy", str(bad), "--no-progress"], capsys)
    assert_one_line_error(code, cap, "static_w must be a finite number >= 0, got -1")


def test_docs_quote_the_shipped_coefficients():
    doc = (ROOT / "docs" / "energy.md").read_text()
    table = E.load_energy()
    for gpu, c in table.gpus.items():
        for f in c.__dataclass_fields__:
            if f != "gpu":
                row = f"| {gpu} | `{f}` | {getattr(c, f):.4g} | {table.sources[gpu][f]} |"
                assert row in doc, row


def test_a_disaggregated_pool_counts_in_joules_per_token_not_in_the_gpus_power():
    setup = ServingSetup(load_model("llama-3-8b"), load_gpu("h100-sxm5"), stack=get_stack("vllm-v0"),
                         prefill="disaggregated")
    r = setup.run(synthetic(40, 20.0, prompt=4096, output=16, seed=3), ())
    s, led = r.summary, r.energy
    gpu_j = sum(led.joules[k] for k in E.GPU_COMPONENTS)
    assert led.joules["pool"] > 0
    assert s["power_w_mean"] == pytest.approx(gpu_j / s["duration_s"]) and s["power_w_mean"] <= s["power_w_peak"]
    assert s["energy_j_per_token"] == pytest.approx((gpu_j + led.joules["pool"]) / s["output_tokens"])


def test_the_cuts_put_their_work_on_the_units():
    """With the te cut the TE engines run the attention: its FLOPs leave the SMs, its engine
    cycles (the fast model's TE job cycles) and K/V bytes are the TE's energy; the cdu and dsu
    cuts add their cycles; without the cuts the units cost nothing."""
    import numpy as np

    from tricut.sim.fast.timing import StepModel
    gpu, model = load_gpu("h100-sxm5"), load_model("llama-3-70b")
    c = E.load_energy().gpus["h100-sxm5"]
    seqs, rng = [4097] * 64, np.random.default_rng(0)
    base = StepModel(model, gpu, "bf16", 8).step_time(seqs, [1] * 64, rng)
    both = StepModel(model, gpu, "bf16", 8, frozenset({"te", "cdu", "dsu"}))
    st = both.step_time(seqs, [1] * 64, rng)
    heads = model.num_kv_heads // 8
    attention = 4 * model.num_layers * model.num_heads * model.head_dim * sum(s - 1 for s in seqs) / 8
    assert base.flops - st.flops == pytest.approx(attention)
    assert st.te_cycles == pytest.approx(model.num_layers * both.units.te_job_cycles(
        sum(seqs) * heads, model.head_dim, model.group_size, 64 * heads))
    assert st.te_kv_bytes == pytest.approx(sum(seqs) * both.kv_token_bytes)
    assert st.cdu_cycles == pytest.approx(st.cdu_busy_s * gpu.cdu_clock_hz) and st.cdu_cycles > 0
    assert st.dsu_cycles == pytest.approx(st.sched_s * gpu.dsu_clock_hz) and st.dsu_cycles > 0
    assert (base.te_cycles, base.te_kv_bytes, base.cdu_cycles, base.dsu_cycles) == (0, 0, 0, 0)
    j = E.EnergyLedger(c, "bf16").dynamic_j(E.GpuWork.of_step(st))
    assert j["te"] > 0 and j["cdu"] > 0 and j["dsu"] > 0
    # a degraded DSU hands the round to the host: no DSU cycles
    assert both.step_time(seqs, [1] * 64, rng, degraded=True).dsu_cycles == 0


def test_a_run_with_the_cuts_reports_the_units_energy():
    setup = ServingSetup(load_model("llama-3-8b"), load_gpu("h100-sxm5"), stack=get_stack("vllm-v0"))
    r = setup.run(synthetic(20, 20.0, prompt=512, output=16, seed=3), ("te", "cdu", "dsu"))
    split, led = r.summary["energy_split"], r.energy
    assert all(split[k] > 0 for k in ("te", "cdu", "dsu")), split
    assert sum(split.values()) == pytest.approx(1.0)
    assert led.joules["te"] == pytest.approx(sum(E.EnergyLedger(led.coeffs, "bf16").dynamic_j(w)["te"]
                                                 for _, _, w in led.records))


def test_kv_tier_moves_count_their_link_bytes():
    """A session run that parks KV in the host tier: its link energy is the bytes it moved
    (out and back) at ``link_pj_per_byte`` (TP1: no all-reduces)."""
    from tricut.models.tiers import load_tiers
    from tricut.sim.fast.agentic import AgenticOptions, simulate_sessions
    from tricut.sim.fast.sessions import agentic
    setup = ServingSetup(load_model("llama-3-8b"), load_gpu("h100-sxm5"))
    sessions = agentic(n_sessions=4, rate=2.0, turns=3, gap_s=("lognormal", 2.0, 0.5),
                       first_input=("lognormal", 4096.0, 0.3), turn_input=("uniform", 256, 1024),
                       output=("uniform", 8, 16), system_prompt_tokens=512, seed=1, max_context=65536)
    r = simulate_sessions(sessions, setup.step_model(()), setup.dsu_params(),
                          AgenticOptions("park", g2=load_tiers("grace-hopper").g2), prefill="colocated")
    s, led = r.summary, r.sim.energy
    moved = s["bytes_hbm_to_g2"] + s["bytes_g2_to_hbm"]
    assert moved > 0
    assert led.joules["links"] == pytest.approx(moved * led.coeffs.link_pj_per_byte * 1e-12)
