"""benchmarks/te_bandwidth.py (issue 12's baseline): the bandwidth table's arithmetic, the
report's rows, the area grouping and the nextpnr parser on canned input, and a bad flag.
No simulation, no Yosys, no place and route."""

import subprocess
import sys
from pathlib import Path

import pytest

from conftest import load_benchmark

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "te_bandwidth.py"


@pytest.fixture(scope="module")
def tb():
    return load_benchmark("te_bandwidth")


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
        for dt in ("bf16", "fp8", "nvfp4"):
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
    assert "| llama-3-70b | 8 | 192 | bf16 |" in r.stdout and "**RTL cross-check**" not in r.stdout


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
