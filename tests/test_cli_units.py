"""`tricut te run` and `tricut verilog` from the command line."""

import json
import re
import subprocess
import sys

import numpy as np
import pytest

from tricut.models.cdu import POLICIES


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "tricut.sim", *args], capture_output=True, text=True)


def test_te_run_writes_rtl_and_golden(tmp_path):
    """No ``--engine``: the shipped engine, pipelined (its name in the line, its cycles)."""
    from tricut.models import te as M
    rng = np.random.default_rng(3)
    vec = tmp_path / "vec.npz"
    np.savez(vec, q=rng.standard_normal((1, 64)).astype(np.float32),
             k=rng.standard_normal((3, 64)).astype(np.float32),
             v=rng.standard_normal((3, 64)).astype(np.float32), scale=np.float32(0.2))
    out = tmp_path / "res.npz"
    r = _cli("te", "run", "--in", str(vec), "--out", str(out), "--kv-dtype", "fp8", "--lanes", "16")
    assert r.returncode == 0, r.stderr
    assert "RTL == model: True" in r.stdout
    assert r.stdout.startswith("TE pipelined fp8 G=1 d=64 n=3 lanes=16 "), r.stdout
    res = np.load(out)
    assert int(res["cycles"]) == M.te_cycles(3, 64, 1, 16, engine="pipelined", kv_dtype="fp8")
    assert set(res.files) >= {"out", "golden", "q_used", "k_used", "v_used", "cycles", "status"}
    assert res["out"].shape == (1, 64) and res["out"].dtype == np.float32
    np.testing.assert_array_equal(res["out"].view(np.uint32), res["golden"].view(np.uint32))
    # k_used is what the engine saw: fp8 values, within fp8's error of the input
    k = np.load(vec)["k"]
    assert np.all(np.abs(res["k_used"] - k) <= 0.0625 * np.abs(k) + 2.0 ** -9)
    ref = np.exp(0.2 * res["q_used"] @ res["k_used"].T)
    ref = (ref / ref.sum()) @ res["v_used"]
    np.testing.assert_allclose(res["out"], ref, rtol=1e-5, atol=1e-6)
    assert int(res["cycles"]) > 0 and res["status"].sum() == 0


@pytest.mark.parametrize("engine", ["serial", "split", "pipelined"])
def test_te_run_each_engine_at_32_lanes(tmp_path, engine):
    """``--engine serial`` / ``split`` / ``pipelined``: RTL == model, and the cycles are that
    engine's formula (the two-array engines' below the serial one's)."""
    from tricut.models import te as M
    rng = np.random.default_rng(4)
    vec = tmp_path / "vec.npz"
    np.savez(vec, q=rng.standard_normal((4, 128)).astype(np.float32),
             k=rng.standard_normal((3, 128)).astype(np.float32),
             v=rng.standard_normal((3, 128)).astype(np.float32))
    out = tmp_path / "res.npz"
    r = _cli("te", "run", "--in", str(vec), "--out", str(out), "--kv-dtype", "nvfp4",
             "--lanes", "32", "--engine", engine)
    assert r.returncode == 0, r.stderr
    assert f"TE {engine} nvfp4" in r.stdout and "RTL == model: True" in r.stdout
    res = np.load(out)
    np.testing.assert_array_equal(res["out"].view(np.uint32), res["golden"].view(np.uint32))
    assert int(res["cycles"]) == M.te_cycles(3, 128, 4, 32, engine=engine, kv_dtype="nvfp4")
    if engine != "serial":
        assert int(res["cycles"]) < M.te_cycles(3, 128, 4, 32, engine="serial")


@pytest.mark.parametrize("arrays,needle", [
    (dict(q=np.zeros((1, 64), np.float32), k=np.zeros((3, 64), np.float32)), "missing array 'v'"),
    (dict(q=np.zeros((1, 64), np.float32), k=np.zeros((3, 64), np.float32),
          v=np.zeros((2, 64), np.float32)), "differ in shape"),
    (dict(q=np.zeros((1, 32), np.float32), k=np.zeros((3, 64), np.float32),
          v=np.zeros((3, 64), np.float32)), "head_dim 32 but k has 64"),
    (dict(q=np.zeros(64, np.float32), k=np.zeros((3, 64), np.float32),
          v=np.zeros((3, 64), np.float32)), "q must be a 2-D float array"),
    (dict(q=np.zeros((1, 64), np.float32), k=np.zeros((3, 64), np.float32),
          v=np.zeros((3, 64), np.float32), bias=np.zeros(3)), "unknown array 'bias'"),
])
def test_te_run_bad_vectors(tmp_path, arrays, needle):
    vec = tmp_path / "vec.npz"
    np.savez(vec, **arrays)
    r = _cli("te", "run", "--in", str(vec), "--out", str(tmp_path / "o.npz"))
    assert r.returncode == 2 and needle in r.stderr and "Traceback" not in r.stderr


def test_te_run_not_npz(tmp_path):
    bad = tmp_path / "vec.npz"
    bad.write_text("hello")
    r = _cli("te", "run", "--in", str(bad), "--out", str(tmp_path / "o.npz"))
    assert r.returncode == 2 and "not a readable .npz" in r.stderr


def test_verilog_dsu_core_lint_clean(tmp_path):
    r = _cli("verilog", "dsu-core", "-o", str(tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "clean" in r.stdout and (tmp_path / "dsu_core.v").read_text().startswith("/*")


def test_verilog_te_default_is_the_pipelined_engine(tmp_path):
    """``tricut verilog te`` without ``--engine`` writes the shipped engine: the same file as
    ``--engine pipelined``, not the split or serial engine's."""
    small = ["-p", "head_dim=64", "-p", "G=1", "-p", "lanes=2"]
    text = {}
    for engine in (None, "pipelined", "split", "serial"):
        d = tmp_path / str(engine)
        r = _cli("verilog", "te", "-o", str(d), *small, "--json",
                 *(["--engine", engine] if engine else []))
        assert r.returncode == 0, r.stdout + r.stderr
        assert json.loads(r.stdout)["params"]["engine"] == (engine or "pipelined")
        text[engine] = (d / "te.v").read_text()
    assert text[None] == text["pipelined"]
    assert text[None] != text["split"] and text[None] != text["serial"]
    # the pipelined engine's Exp2 has registered stages (a clock port), the split engine's not
    exp_a_ports = {e: re.search(r"^module \\te\.exp_a \(([^)]*)\);", t, re.M).group(1)
                   for e, t in text.items()}
    assert "clk" in exp_a_ports[None] and "clk" not in exp_a_ports["split"]


@pytest.mark.parametrize("args,needle", [
    (["verilog", "te", "-o", "x", "-p", "G=99"], "G must be an int in 1..16, got 99"),
    (["verilog", "te", "-o", "x", "-p", "width=3"], "te has no parameter 'width'"),
    (["verilog", "te", "-o", "x", "-p", "G"], "expected NAME=VALUE"),
    (["verilog", "gpu", "-o", "x"], "invalid choice: 'gpu'"),
])
def test_verilog_bad_params(args, needle):
    r = _cli(*args)
    assert r.returncode == 2 and needle in r.stderr and "Traceback" not in r.stderr


def test_cdu_replay_json_keys_and_policies():
    rows = {}
    for policy in POLICIES:
        r = _cli("cdu", "replay", "--pattern", "window", "--policy", policy, "--batch", "2",
                 "--steps", "3", "--json")
        assert r.returncode == 0, r.stderr
        rows[policy] = json.loads(r.stdout)
    for key in ("accesses", "hits", "misses", "prefetch_issued", "prefetch_useful", "prefetch_late",
                "prefetch_useless", "evictions", "hbm_read_bytes", "hbm_write_bytes"):
        assert all(key in row for row in rows.values()), key
    for row in rows.values():
        assert row["accesses"] == row["hits"] + row["misses"]
    assert rows["disabled"]["hits"] == 0 and rows["disabled"]["prefetch_issued"] == 0
    assert rows["adaptive"]["hits"] > rows["static"]["hits"]


def test_cdu_replay_implementations_give_the_same_counters():
    out = {}
    for impl in ("fast", "golden"):
        r = _cli("cdu", "replay", "--pattern", "topk", "--policy", "adaptive", "--batch", "2",
                 "--steps", "3", "--context", "600", "--reserve", "3", "--implementation", impl,
                 "--json")
        assert r.returncode == 0, r.stderr
        out[impl] = json.loads(r.stdout)
    assert out["fast"].pop("txn_checksum") >= 0
    assert out["fast"] == out["golden"] and out["golden"]["reserve"] == 3


def test_cdu_replay_rtl_small_instance():
    r = _cli("cdu", "replay", "--model", "tiny", "--pattern", "reread", "--rtl", "--steps", "3",
             "--batch", "2", "--context", "60", "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["rtl_cycles"] > 0 and data["accesses"] == data["hits"] + data["misses"]


@pytest.mark.parametrize("args,needle", [
    (["cdu", "replay", "--pattern", "full", "--l2-mb", "-3"], "l2_mb must be a positive number"),
    (["cdu", "replay", "--pattern", "zigzag"], "invalid choice: 'zigzag'"),
    (["cdu", "replay"], "one of the arguments --pattern --trace is required"),
    (["cdu", "replay", "--trace", "missing.jsonl"], "missing.jsonl"),
    (["cdu", "replay", "--pattern", "full", "--batch", "0"], "batch must be a positive integer"),
    (["cdu", "replay", "--pattern", "full", "--reserve", "16"], "reserve must be an integer in [0, ways)"),
    (["cdu", "replay", "--pattern", "full", "--implementation", "turbo"], "invalid choice: 'turbo'"),
])
def test_cdu_replay_bad_input(args, needle):
    r = _cli(*args)
    assert r.returncode == 2 and needle in r.stderr and "Traceback" not in r.stderr


def test_dsu_run_matches_golden(tmp_path):
    reqs = tmp_path / "reqs.jsonl"
    reqs.write_text('{"prompt_tokens": 100, "max_new_tokens": 3}\n'
                    '{"prompt_tokens": 5000, "max_new_tokens": 4, "arrival_step": 1, "priority": 2}\n'
                    '{"prompt_tokens": 20, "max_new_tokens": 2, "arrival_step": 2}\n')
    r = _cli("dsu", "run", "--requests", str(reqs), "--profile", "latency-opt",
             "--faults", "error:slot=0:step=1", "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["differences"] == []
    assert {k: (v["status"], v["tokens"]) for k, v in data["outcomes"].items()} == \
        {"0": ("completed", 3), "1": ("completed", 4), "2": ("completed", 2)}
    # the failed step of round 1 is rolled back: request 0 runs at seq_len 102 twice
    assert [d["seq_len"] for b in data["batches"] for d in b if d["request"] == 0] == [101, 102, 102, 103]
    assert all(x["cycles"] > 0 for x in data["latencies"])


@pytest.mark.parametrize("body,needle", [
    ('{"prompt_tokens": 10}\n', ":1: missing field 'max_new_tokens'"),
    ('{"prompt_tokens": 10, "max_new_tokens": 0}\n', ":1: max_new_tokens out of range: 0"),
    ('{"prompt_tokens": 10, "max_new_tokens": 2, "priority": 9}\n', ":1: priority out of range: 9"),
    ('{"prompt_tokens": 10, "max_new_tokens": 2, "colour": 1}\n', ":1: unknown field 'colour'"),
    ('{"prompt_tokens": 1, "max_new_tokens": 1}\n{"id": 0, "prompt_tokens": 1, "max_new_tokens": 1}\n',
     ":2: request id 0 appears twice"),
    ('{"prompt_tokens": 10, "max_new', ":1: not valid JSON"),
])
def test_dsu_run_bad_requests(tmp_path, body, needle):
    f = tmp_path / "r.jsonl"
    f.write_text(body)
    r = _cli("dsu", "run", "--requests", str(f))
    assert r.returncode == 2 and needle in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("spec", ["error:slot=3", "melt:slot=1:step=2", "error:slot=x:step=1"])
def test_dsu_run_bad_fault_spec(spec):
    r = _cli("dsu", "run", "--synthetic", "2", "--faults", spec)
    assert r.returncode == 2 and r.stderr.startswith("tricut: error: ") and "Traceback" not in r.stderr


def test_verilog_dsu_cluster_lint_clean(tmp_path):
    r = _cli("verilog", "dsu", "-o", str(tmp_path), "-p", "n_slots=8", "-p", "n_cores=2")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "clean" in r.stdout
