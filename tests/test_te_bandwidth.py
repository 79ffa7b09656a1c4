"""benchmarks/te_bandwidth.py (issue 12, serial baseline, split and pipelined engines; its blocks
in ``sim/harness/te_figures.py``): the bandwidth table's arithmetic for both engines, the
report's rows, the utilisation figures (canned step results, and one tiny Amaranth run), the
area grouping and ratios, the nextpnr parser on canned input, the flags. No Yosys, no place and
route."""

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from tricut.models.config import KV_DTYPES
from tricut.sim.harness import te_figures

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "te_bandwidth.py"


@pytest.fixture(scope="module")
def tb():
    return te_figures


@pytest.fixture(scope="module")
def rows(tb):
    return tb.bandwidth_rows()


def _row(rows, model, dt, gpu):
    (r,) = [x for x in rows if (x["model"], x["kv_dtype"], x["gpu"]) == (model, dt, gpu)]
    return r


def test_kv_bytes_per_token_and_kv_head(tb):
    assert tb.kv_bytes_per_token_head(128, "bf16") == 512
    assert tb.kv_bytes_per_token_head(128, "fp8") == 256
    assert tb.kv_bytes_per_token_head(128, "nvfp4") == 128 + 16   # codes + E4M3 block scales
    assert tb.kv_bytes_per_token_head(64, "nvfp4") == 64 + 8


def test_known_cell_llama_3_70b_bf16_h100(rows):
    r = _row(rows, "llama-3-70b", "bf16", "h100-sxm5")
    assert (r["G"], r["head_dim"], r["lanes"], r["engines_per_sm"]) == (8, 128, 16, 4)
    assert r["cycles_per_token"] == 192 and r["bytes"] == 512
    assert r["b_per_cycle"] == pytest.approx(512 / 192)
    need = 3.35e12 / (4 * 132 * 1.98e9)
    assert r["need_b_per_cycle"] == pytest.approx(need)
    assert r["need_b_per_cycle"] == pytest.approx(3.204, abs=1e-3)
    assert r["ratio"] == pytest.approx(512 / 192 / need)
    assert r["array_tb_s"] == pytest.approx(512 / 192 * 528 * 1.98e9 / 1e12)
    # the whole job at n = 8192 pays the fill (q load, output) once
    job = 1 + 8 * 8 + 8192 * 192 + 8 * 8
    assert r["job_cycles"] == job
    assert r["ratio_job"] == pytest.approx(8192 * 512 / job / need)


def test_other_cells(rows):
    assert _row(rows, "llama-3-8b", "bf16", "h200")["cycles_per_token"] == 96
    assert _row(rows, "qwen2-7b", "fp8", "h100-sxm5")["cycles_per_token"] == 168
    h200 = _row(rows, "llama-3-70b", "nvfp4", "h200")
    assert h200["need_b_per_cycle"] == pytest.approx(4.8e12 / (528 * 1.98e9))
    assert h200["ratio"] == pytest.approx(144 / 192 / h200["need_b_per_cycle"])
    # fewer bytes cost the same cycles
    assert len({x["cycles_per_token"] for x in rows if x["model"] == "qwen2-7b"}) == 1


def test_report_has_every_row(tb, rows):
    assert len(rows) == 3 * 3 * 2
    text = tb.bandwidth_report(rows)
    for m in ("llama-3-8b", "qwen2-7b", "llama-3-70b"):
        for dt in KV_DTYPES:
            assert sum(1 for ln in text.splitlines() if ln.startswith(f"| {m} |")
                       and f"| {dt} |" in ln) == 1, (m, dt)
    for gpu in ("h100-sxm5", "h200"):
        assert f"{gpu}: ratio |" in text and f"models/configs/gpus/{gpu}.toml" in text
    assert "| llama-3-70b | 8 | 192 | bf16 | 512 | 2.667 |" in text
    assert "benchmarks/te_bandwidth.py --only bandwidth" in text


def test_area_grouping_and_rate(tb):
    for inst, want in (("lane_mul3", "FP32Mul, lane"), ("lane_add0", "FP32Add, lane"),
                       ("tree6", "FP32Add, softmax"), ("mul_l", "FP32Mul, scalar"),
                       ("sub_p", "FP32Add, scalar"), ("exp_a", "Exp2"), ("recip", "FP32Recip"),
                       ("deq", "KVDequant"), ("te (own logic)", "engine top")):
        assert tb.unit_kind(inst).startswith(want), inst
    r = tb.with_rate(dict(head_dim=128, G=8, lanes=16, kv_dtype="bf16",
                          total=dict(cells=100_000, ffs=0, memory_bits=0),
                          by_unit={"x": dict(cells=100_000, ffs=0, instances=1,
                                             memory_bits=0)}, seconds=1.0))
    assert r["C"] == 192 and r["b_per_kcycle"] == pytest.approx(512 / 192 / 100)
    assert "| 16 | bf16 | 100,000 | 192 | 512 |" in tb.area_report([r])


def test_nextpnr_parser(tb):
    report = {"fmax": {"$glbnet$clk": {"achieved": 23.45, "constraint": 25.0}},
              "utilization": {"TRELLIS_COMB": {"used": 12345, "available": 83640},
                              "TRELLIS_FF": {"used": 2345, "available": 83640},
                              "MULT18X18D": {"used": 4, "available": 156}}}
    assert tb.parse_nextpnr(report, "") == dict(mhz=23.45, luts=12345, ffs=2345, dsps=4)
    log = ("Info: Max frequency for clock '$glbnet$clk': 19.80 MHz (FAIL at 25.00 MHz)\n"
           "Info: Max frequency for clock '$glbnet$clk': 21.07 MHz (FAIL at 25.00 MHz)\n")
    assert tb.parse_nextpnr(None, log)["mhz"] == 21.07


def _run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)


@pytest.mark.parametrize("args", [("--bogus",), ("--only", "nope"), ("--write", "extra")])
def test_bad_flag_one_line(args):
    r = _run(*args)
    assert r.returncode == 2 and r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("benchmarks/te_bandwidth.py: "), r.stderr


def test_bandwidth_block_runs_without_rtl():
    r = _run("--only", "bandwidth", "--no-rtl")
    assert r.returncode == 0, r.stderr
    assert "| llama-3-70b | 8 | bf16 | 512 | 192 | 36 |" in r.stdout
    assert "**RTL cross-check" not in r.stdout


def test_fmax_report_names_the_command(tb):
    res = dict(setting=dict(tb.FMAX_SETTING), shell_input_bits=162, yosys_s=100.0,
               nextpnr_s=600.0, mhz=21.07, luts=12345, ffs=2345, dsps=0,
               yosys_version="0.70", nextpnr_version="0.11")
    text = tb.fmax_report(res)
    assert "**21.07**" in text and "12,345" in text
    assert "benchmarks/te_bandwidth.py --only fmax" in text and "synth_ecp5" in text


def test_synth_stat_parser(tb):
    text = ("=== te_fmax ===\n\n   Number of cells:  28475\n     2136   CCU2C\n    25830   LUT4\n"
            "       20   MULT18X18D\n       64   TRELLIS_DPR16X4\n      445   TRELLIS_FF\n")
    assert tb.parse_synth_stat(text) == dict(LUT4=25830, CCU2C=2136, TRELLIS_FF=445,
                                             MULT18X18D=20, TRELLIS_DPR16X4=64, DP16KD=0)


def test_critical_path_parser(tb):
    log = ("Info: Critical path report for clock '$glbnet$clk' (posedge -> posedge):\n"
           "Info:       type curr  total name\n"
           "Info:   clk-to-q  0.52  0.52 Source engine.accmem[0]_FF.Q\n"
           "Info:    routing  2.81  3.33 Net x\n"
           "Info:                          Sink engine.mul_c.P_CCU2C.C\n"
           "Info:      logic  0.40  3.73 Source engine.mul_c.P_CCU2C.Z\n"
           "Info:                          Sink engine.exp_a.y_LUT4.A\n"
           "Info:                          Sink engine.mul_c.q_LUT4.A\n"
           "Info:                          Sink engine.omem.0.8$DPRAM.WD\n"
           "Info: 95.68 ns logic, 184.05 ns routing\n")
    cp = tb.parse_critical_path(log)
    assert cp == dict(source="engine.accmem[0]_FF.Q", sink="engine.omem.0.8$DPRAM.WD",
                      logic_ns=95.68, routing_ns=184.05, units=["mul_c", "exp_a", "omem"])
    assert tb.parse_critical_path("Info: nothing\n") is None


def test_baseline_summary(tb):
    data = {"area": [dict(head_dim=128, G=8, lanes=16, kv_dtype="fp8", b_per_cycle=1.25,
                          b_per_kcycle=0.01, total=dict(cells=125_000))],
            "fmax": dict(setting=dict(tb.FMAX_SETTING), mhz=3.5, synth=dict(LUT4=7, TRELLIS_FF=9))}
    s = tb.summary(data)
    assert s["d128_G8_lanes16_fp8"] == dict(cells=125_000, b_per_cycle=1.25,
                                            b_per_cycle_per_kcell=0.01)
    assert s["fmax"]["mhz"] == 3.5 and s["fmax"]["lut4"] == 7


# ------------------------------------------------------------------------------ split engine
@pytest.fixture(scope="module")
def split_rows(tb):
    return tb.bandwidth_rows(**tb.SHIPPED)


def test_shipped_setting(tb):
    assert tb.SHIPPED == dict(engine="pipelined", lanes=32)
    assert tb.BASELINE_TE == dict(engine="serial", lanes=16)
    assert {r["lanes"] for r in tb.bandwidth_rows()} == {16}       # the default is the baseline


def test_split_rows_are_te_cycles_arithmetic(tb, split_rows):
    from tricut.models.te import te_cycles, te_pipe_timing
    r = _row(split_rows, "llama-3-70b", "bf16", "h100-sxm5")
    assert (r["engine"], r["lanes"], r["G"], r["head_dim"]) == ("pipelined", 32, 8, 128)
    dk = 128 // 32
    assert r["cycles_per_token"] == (8 + 1) * dk == 36
    assert r["cycles_per_token"] == te_cycles(101, 128, 8, 32, engine="pipelined") \
        - te_cycles(100, 128, 8, 32, engine="pipelined")
    # fill: q load, the V array's last token behind the pipelines, the output (bf16: three
    # passes and the multipliers' latency per beat, the reciprocal's per head)
    tm = te_pipe_timing(128, 8, 32, "bf16")
    assert (tm.v_start, tm.v_update, tm.out_beat, tm.recip) == (15, 2, 4, 5)
    job = 1 + 8 * dk + 8191 * 36 + (dk - 1) * 8 + 15 + 8 * dk - 1 + 2 + 2 + 8 * (5 + dk * 4)
    assert r["job_cycles"] == job == te_cycles(8192, 128, 8, 32, engine="pipelined")
    r4 = _row(split_rows, "llama-3-70b", "nvfp4", "h100-sxm5")      # one output pass
    assert r4["job_cycles"] == te_cycles(8192, 128, 8, 32, engine="pipelined", kv_dtype="nvfp4")
    need = 3.35e12 / (4 * 132 * 1.98e9)
    assert r["ratio"] == pytest.approx(512 / 36 / need)
    assert r["ratio_job"] == pytest.approx(8192 * 512 / job / need)
    r8 = _row(split_rows, "llama-3-8b", "fp8", "h200")
    assert r8["cycles_per_token"] == 5 * 4 and r8["ratio"] == pytest.approx(
        256 / 20 / (4.8e12 / (528 * 1.98e9)))
    # the split rows never cost more cycles per token than the serial baseline's
    serial = tb.bandwidth_rows()
    for a, b in zip(serial, split_rows):
        assert (a["model"], a["kv_dtype"], a["gpu"]) == (b["model"], b["kv_dtype"], b["gpu"])
        assert b["cycles_per_token"] < a["cycles_per_token"]


def test_before_after_report(tb, rows, split_rows):
    text = tb.bandwidth_report(rows, None, split_rows)
    assert "| llama-3-70b | 8 | bf16 | 512 | 192 | 36 |" in text
    assert "| qwen2-7b | 7 | nvfp4 | 144 | 168 | 32 |" in text
    bad = [x for x in split_rows if x["ratio"] < 1.0]
    ok = len(split_rows) - len(bad)
    assert f"**{ok} of 18 cells ≥ 1.0**" in text
    for x in bad:
        assert f"{x['model']} {x['kv_dtype']} {x['gpu']} {x['ratio']:.2f}" in text
    assert "SHIPPED" in text and "--only bandwidth" in text


def _vec(G=2, d=64, lanes=16, n=3, seed=0, engine="split"):
    import numpy as np
    from tricut.sim.harness.te import make_vector
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal(s) for s in ((G, d), (n + 1, d), (n + 1, d)))
    return [make_vector(q, k[:m], v[:m], "bf16", lanes=lanes, engine=engine)
            for m in (n, n + 1)]


def _step(cycles, k=0, v=0, resc=0, mac=0):
    return SimpleNamespace(cycles=cycles, k_busy=k, v_busy=v, v_rescale=resc, mac_busy=mac)


def test_utilisation_row_on_canned_results(tb):
    from tricut.models.te import rescale_events, te_cycles
    v1, v2 = _vec()
    G, dk = 2, 4
    c1, c2 = (te_cycles(n, 64, G, 16, engine="split", kv_dtype="bf16") for n in (3, 4))
    assert c2 - c1 == (G + 1) * dk
    ev, _ = rescale_events(v2.q_codes, v2.k_codes, "bf16", v2.scale_bits, lanes=16,
                           engine="split")
    r1 = _step(c1, k=G * dk * 3, v=G * dk * 3)
    r2 = _step(c2, k=G * dk * 4, v=G * dk * 4, resc=ev * dk)
    row = tb.utilisation_row("split", "random", v1, v2, r1, r2)
    assert row["per_token"] == row["model_per_token"] == 12
    assert row["util_steady"] == pytest.approx(G / (G + 1))
    assert row["util_step"] == pytest.approx(2 * G * dk * 4 / (2 * c2))
    assert row["rescales"] == ev and row["rescale_worst"] == G * 3
    assert row["rescale_iid"] == pytest.approx(G * (1 / 2 + 1 / 3 + 1 / 4))
    with pytest.raises(tb.BenchError, match="te_cycles"):
        tb.utilisation_row("split", "random", v1, v2, r1, _step(c2 + 1, resc=ev * dk))
    with pytest.raises(tb.BenchError, match="rescale_events"):
        tb.utilisation_row("split", "random", v1, v2, r1, _step(c2, resc=(ev + 1) * dk))
    with pytest.raises(tb.BenchError, match="n and n\\+1"):
        tb.utilisation_row("split", "random", v2, v1, r2, r1)
    s1, s2 = _vec(engine="serial")
    m1, m2 = (te_cycles(n, 64, G, 16) for n in (3, 4))
    row = tb.utilisation_row("serial", "random", s1, s2, _step(m1, mac=G * dk * 10),
                             _step(m2, mac=G * dk * 13))
    assert row["per_token"] == 3 * G * dk and row["util_steady"] == 1.0
    assert row["rescales"] == G * 4


def test_expected_rescale_events():
    from tricut.models.te import expected_rescale_events
    assert expected_rescale_events(1, 4) == (0.0, 0)
    iid, worst = expected_rescale_events(5, 8)
    assert iid == pytest.approx(8 * (137 / 60 - 1)) and worst == 32


def test_utilisation_tiny_amaranth_run(tb):
    """One tiny run of each engine (head_dim 64, 16 lanes, G 1, n 2 and 3): the figures the
    block reports, and the report's rows."""
    from tricut.models.te import te_cycles
    rows = tb.utilisation_runs(Gs=(1,), head_dim=64, lanes=16, n=2, log=lambda *a: None)
    assert [(r["engine"], r["inputs"]) for r in rows] == [
        ("pipelined", "random"), ("pipelined", "rising-max"), ("serial", "random"),
        ("serial", "rising-max")]
    sp = {r["inputs"]: r for r in rows if r["engine"] == "pipelined"}
    se = {r["inputs"]: r for r in rows if r["engine"] == "serial"}
    for r in sp.values():
        assert r["per_token"] == 2 * 4 and r["cycles_n1"] == r["model_n1"]
        assert r["util_steady"] == pytest.approx(1 / 2)
    assert sp["rising-max"]["rescales"] == sp["rising-max"]["rescale_worst"] == 2
    assert sp["random"]["rescales"] == sp["random"]["rescale_model"]
    for r in se.values():
        assert r["per_token"] == 3 * 4 and r["util_steady"] == 1.0
    text = tb.utilisation_report(rows)
    assert "--only utilisation" in text and "**the same cycles**" in text
    c2, c3 = (te_cycles(n, 64, 1, 16, engine="pipelined", kv_dtype="bf16") for n in (2, 3))
    assert f"| 1 | rising-max | {c2} | {c3} ({c3}) | **8** | 8 | **0.500** |" in text
    assert "Before → after at equal lanes, per token: G 1: 12 → 8 cycles (1.50x)" in text


def test_unit_kind_knows_the_split_engine(tb):
    for inst, want in (("k_mul0", "FP32Mul narrow, K lane array"), ("k_add31", "FP32Add, K lane"),
                       ("v_mul7", "V lane multipliers"), ("v_add3", "FP32Add, V lane"),
                       ("v_scale12", "Pow2Scale, V lane array"),
                       ("scale_l", "Pow2Scale, scalar unit"), ("ceil", "CeilInt"),
                       ("deq_k", "KVDequant, K and V"), ("deq_v", "KVDequant, K and V"),
                       ("mul_c", "FP32Mul, scalar"), ("k_acc", "FP32Add, K accumulator"),
                       ("sub_a", "FP32Add, scalar"), ("add_l", "FP32Add, scalar"),
                       ("exp_p", "Exp2"), ("recip", "FP32Recip"),
                       ("te (own logic)", "engine top")):
        assert tb.unit_kind(inst).startswith(want), (inst, tb.unit_kind(inst))
    assert tb.unit_kind("deq") != tb.unit_kind("deq_k")
    assert tb.unit_kind("tree30").startswith("FP32Add, softmax adder tree")
    assert tb.unit_kind("tree30", "split").startswith("FP32Add, K array's adder tree")
    assert tb.unit_kind("v_mul3", "split").startswith("V lane multipliers")
    assert tb.unit_kind("mul_c", "split") == "FP32Mul, scalar unit (`mul_c`)"
    assert tb.unit_kind("tree30", "pipelined") == tb.unit_kind("tree30", "split")
    assert tb.unit_kind("mystery3") == "mystery3"


def _area(tb, engine, lanes, dt, cells):
    return tb.with_rate(dict(engine=engine, head_dim=128, G=8, lanes=lanes, kv_dtype=dt,
                             total=dict(cells=cells, ffs=0, memory_bits=0),
                             by_unit={"x": dict(cells=cells, ffs=0, instances=1,
                                                memory_bits=0)}, seconds=1.0))


def test_area_split_rate_and_ratio(tb):
    serial = [_area(tb, "serial", 16, "bf16", 100_000), _area(tb, "serial", 8, "bf16", 60_000)]
    split = [_area(tb, "split", 16, "bf16", 200_000), _area(tb, "split", 32, "bf16", 400_000)]
    assert split[0]["C"] == 9 * 8 and split[1]["C"] == 9 * 4
    assert split[1]["b_per_kcycle"] == pytest.approx(512 / 36 / 400)
    rat = tb.area_ratios(serial, split)
    assert [(x["lanes"], x["serial_lanes"]) for x in rat] == [(16, 16), (32, 16)]
    assert rat[0]["ratio"] == pytest.approx((512 / 72 / 200) / (512 / 192 / 100))
    assert rat[0]["rate_ratio"] == pytest.approx(192 / 72) and rat[0]["cells_ratio"] == 2.0
    text = tb.area_report(serial, split)
    assert "| split | 32 | bf16 | 400,000 | 36 | 512 |" in text
    assert f"**{rat[0]['ratio']:.2f}x**" in text and "(equal lanes)" in text
    assert "goal is **not** met for any KV format" in text     # 1.33x < 3x
    mixed = tb.area_report(serial + [_area(tb, "serial", 16, "fp8", 100_000)],
                           split + [_area(tb, "split", 16, "fp8", 50_000)])
    assert "goal is met for fp8, **not** for bf16" in mixed           # fp8: 5.33x
    # a record without an engine is the serial baseline's
    old = tb.with_rate(dict(head_dim=128, G=8, lanes=16, kv_dtype="fp8",
                            total=dict(cells=1000), by_unit={}))
    assert old["C"] == 192


def test_area_dir_reuses_results(tb, tmp_path, monkeypatch):
    r = _area(tb, "split", 32, "fp8", 123_456)
    (tmp_path / "split_d128_G8_lanes32_fp8.json").write_text(json.dumps(r))

    def no_yosys(*a, **k):
        raise AssertionError("Yosys run")
    monkeypatch.setattr(tb, "measure_area", no_yosys)
    got = tb.area_results([(128, 8, 32, "fp8")], "split", tmp_path, log=lambda *a: None)
    assert got[0]["total"]["cells"] == 123_456
    with pytest.raises(AssertionError, match="Yosys run"):
        tb.area_results([(128, 8, 16, "fp8")], "split", tmp_path, log=lambda *a: None)


def test_fmax_report_before_after(tb):
    base = dict(setting=dict(tb.FMAX_SETTING), shell_input_bits=162, yosys_s=595.0,
                nextpnr_s=512.0, mhz=3.57, luts=31210, ffs=445, yosys_version="0.70",
                nextpnr_version="0.11", synth=dict(LUT4=25830))
    split = dict(base, setting=dict(tb.FMAX_SETTING_SPLIT), shell_input_bits=170, mhz=4.25,
                 synth=dict(LUT4=40000))
    pipe = dict(base, setting=dict(tb.FMAX_SETTING_AFTER), shell_input_bits=162, mhz=17.0,
                synth=dict(LUT4=9000))
    text = tb.fmax_report(base, split, pipe)
    assert tb.FMAX_SETTING_SPLIT["engine"] == "split"
    assert tb.FMAX_SETTING_AFTER["engine"] == "pipelined"
    assert "| before: serial (combinational units) | **3.57** | 25,830 |" in text
    assert "| after, not pipelined: split (combinational units) | **4.25** | 40,000 |" in text
    assert "| after, pipelined: pipelined (registered stages, `PIPE_STAGES`) | **17.00** |" \
        in text
    assert "Pipelining: 4.0x the split engine's clock (4.25 → 17.00 MHz)" in text
    assert "--only fmax" in text
    assert "Pipelining:" not in tb.fmax_report(base, split)


def test_engine_summary(tb):
    base = {"area": [_area(tb, "serial", 16, "nvfp4", 200_000)]}
    data = {"area": [_area(tb, "split", 16, "nvfp4", 300_000)],
            "utilisation": [dict(engine="pipelined", G=8, inputs="random", per_token=36,
                                 util_steady=8 / 9, util_step=0.8, rescales=3)],
            "bandwidth": dict(rows=[dict(model="m", kv_dtype="nvfp4", gpu="h200", ratio=0.5),
                                    dict(model="m", kv_dtype="bf16", gpu="h200", ratio=2.0)])}
    s = tb.engine_summary(data, base)
    assert s["shipped"] == tb.SHIPPED
    assert s["bandwidth"] == dict(cells=2, at_least_1=1, below_1=["m nvfp4 h200 0.500"])
    assert s["d128_G8_lanes16_nvfp4"]["ratio_to_serial_lanes16"] == pytest.approx(
        (144 / 72 / 300) / (144 / 192 / 200))
    assert s["util_G8_random"]["per_token"] == 36


def test_parse_args(tb):
    a = tb.parse_args(["--only", "utilisation", "--only", "area", "--area-dir", "x",
                       "--fpga-from", "a.json", "--fpga-from", "b.json", "--measure-baseline"])
    assert a.only == ["utilisation", "area"] and a.area_dir == Path("x")
    assert a.fpga_from == [Path("a.json"), Path("b.json")] and a.measure_baseline
    assert tb.parse_args([]).only is None and not tb.parse_args([]).measure_baseline


def test_area_path_builds_the_split_engine():
    """``measure_area``'s path: ``build_unit("te", ..., engine)`` (``tricut verilog te
    --engine``) picks the engine class and reports the engine in the parameters."""
    from tricut.rtl.te.engine import TEEngine
    from tricut.rtl.te.split_engine import TESplitEngine
    from tricut.sim.harness.verilog_out import build_unit
    comp, params = build_unit("te", ["head_dim=64", "G=1", "lanes=2"], "split")
    comp._MustUse__silence = True               # built, never elaborated: no warning
    assert isinstance(comp, TESplitEngine) and params["engine"] == "split"
    comp, params = build_unit("te", [])
    comp._MustUse__silence = True
    assert type(comp) is TEEngine and params["engine"] == "serial"
    with pytest.raises(ValueError, match="only for the te unit"):
        build_unit("dsu-core", [], "split")
    with pytest.raises(ValueError, match="choose one of serial, split"):
        build_unit("te", [], "fast")


def test_area_report_with_the_split_record(tb):
    """After = the pipelined engine; the split engine's record beside it in the rate and ratio
    tables, and what the pipeline registers cost at equal lanes."""
    serial = [_area(tb, "serial", 16, "bf16", 100_000)]
    pipe = [_area(tb, "pipelined", 16, "bf16", 22_000)]
    record = [_area(tb, "split", 16, "bf16", 20_000)]
    text = tb.area_report(serial, pipe, record)
    assert "After — pipelined engine (`rtl/te/pipelined_engine.py`" in text
    assert "| split | 16 | bf16 | 20,000 |" in text and "| pipelined | 16 | bf16 | 22,000 |" in text
    assert "the pipelined engine gives **12.12x** (bf16)" in text
    assert "Before pipelining (the split engine's record): 13.33x (bf16)" in text
    assert "+10.0% cells (bf16)" in text
