"""Stack profiles as data (sim/fast/stacks.json) and the fidelity benchmark's machinery
(benchmarks/fidelity.py): the file is checked on load, the docs quote it, the parser reads the
calibration tables, and the fit finds known parameters."""

import importlib.util
import json
import math
import re
import sys
from pathlib import Path

import pytest

from tricut.models.config import ConfigError
from tricut.sim.fast.stacks import DEFAULT_STACK, StackProfile, get_stack, load_stacks, stack_names

ROOT = Path(__file__).resolve().parent.parent


def _fidelity():
    spec = importlib.util.spec_from_file_location("fidelity", ROOT / "benchmarks" / "fidelity.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["fidelity"] = mod        # its dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def test_shipped_stacks_and_default():
    assert stack_names() == ["vllm-v0", "vllm-v0.6", "vllm-v1", "trtllm", "trtllm-2023", "ideal"]
    assert DEFAULT_STACK in stack_names()
    ideal = get_stack("ideal")
    assert ideal.host_step_s == ideal.graph_layer_gap_s == ideal.attn_call_s == 0
    with pytest.raises(ValueError, match="unknown stack 'nope'; choose one of vllm-v0"):
        get_stack("nope")


def test_every_value_has_a_source_and_fits_come_from_the_script():
    raw = json.loads((ROOT / "sim" / "fast" / "stacks.json").read_text())
    for name, entry in raw["stacks"].items():
        for key, item in entry.items():
            src = item["source"]
            assert src.strip(), (name, key)
            if src.startswith("fit:"):
                assert src.startswith("fit: .venv/bin/python benchmarks/fidelity.py --write"), (name, key)
            m = re.match(r"as ([\w.-]+)", src)
            if m:       # a copied value equals its origin's
                assert item["value"] == raw["stacks"][m.group(1)][key]["value"], (name, key)


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d["stacks"]["ideal"].pop("attn_call_s"), "stack 'ideal': expected the keys"),
    (lambda d: d["stacks"]["trtllm"]["host_step_s"].update(value=-1), "host_step_s must be a finite number >= 0"),
    (lambda d: d["stacks"]["trtllm"]["attn_bw_efficiency"].update(value=1.5), "attn_bw_efficiency must be in"),
    (lambda d: d["stacks"]["vllm-v1"]["fp8_gemv_efficiency_ratio"].update(value=0),
     "fp8_gemv_efficiency_ratio must be in (0, 1]"),
    (lambda d: d["stacks"]["vllm-v0"]["fp8_gemv_call_extra_s"].update(value=-1e-6),
     "fp8_gemv_call_extra_s must be a finite number >= 0"),
    (lambda d: d["stacks"]["trtllm"]["scheduler"].update(value="sometimes"), "scheduler must be one of"),
    (lambda d: d["stacks"]["trtllm"]["cuda_graphs"].update(value=1), "cuda_graphs must be true or false"),
    (lambda d: d["stacks"]["trtllm"]["graph_max_batch"].update(value=0.5), "graph_max_batch must be an integer"),
    (lambda d: d["stacks"]["vllm-v0"].update(host_step_s=0.1), "entry 'vllm-v0.host_step_s'"),
    (lambda d: d.pop("stacks"), "expected an object with 'about'"),
])
def test_a_malformed_stacks_file_names_the_entry(tmp_path, mutate, message):
    raw = json.loads((ROOT / "sim" / "fast" / "stacks.json").read_text())
    mutate(raw)
    path = tmp_path / "stacks.json"
    path.write_text(json.dumps(raw))
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_stacks(path)
    with pytest.raises(ConfigError, match="file not found"):
        load_stacks(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(ConfigError, match="not valid JSON"):
        load_stacks(tmp_path / "bad.json")


def test_the_file_round_trips():
    table = load_stacks()
    assert json.loads(table.to_json()) == json.loads((ROOT / "sim" / "fast" / "stacks.json").read_text())


def test_docs_quote_the_shipped_values():
    """docs/fidelity.md's parameter table is the file's (both are written by the script)."""
    doc = (ROOT / "docs" / "fidelity.md").read_text()
    table = load_stacks()
    fid = _fidelity()
    for name, p in table.profiles.items():
        for f in p.__dataclass_fields__:
            if f == "name":
                continue
            row = f"| {name} | `{f}` | {fid._fmt(getattr(p, f), f)} | {table.sources[name][f]} |"
            assert row in doc, row


CALIBRATION = """\
## A1. Static
| system | model | GPU | TP | prec | bs | ISL/OSL | metric | value | derived ms/output token | source |
|---|---|---|---|---|---|---|---|---|---|---|
| vLLM (mid-2024) | Llama-3-8B | H100 | 1 | fp16 | 16 | 1024/1024 | batch latency | 11.025 s | 10.77 | x |
| TRT-LLM | Llama-3-70B | H100 | 4 | fp16 | 1 | 128/128 | batch latency | 2.312 s | 18.07 | same |
| vLLM | Llama-3-8B | H100 | 1 | fp16 | 16 | 1024 in | TTFT (run with OSL=1) vs end-to-end latency (OSL=1024) | 0.426 s / 11.025 s | x | y |

## B. Kernels
| kernel | GPU | shape | batch | context | metric | value | source |
|---|---|---|---|---|---|---|---|
| FA2 | H100 SXM | Llama-3-70B heads: 64 q / 8 kv, d=128, page 256 | 64 | 32 | GPU time | 21.1 µs; 496 GB/s | z |
| same | H100 SXM | same | 64 | 64 | same | 23.0 µs; 822 GB/s | same |
"""


def test_the_parser_reads_rows_and_repeats_same():
    fid = _fidelity()
    cs, skipped = fid.cases(fid.tables(CALIBRATION))
    by = {c.label: c for c in cs}
    a = by["A1 vLLM (mid-2024) Llama-3-8B TP1 bs16 1024/1024"]
    assert (a.stack, a.kind, a.published, a.batch, a.isl, a.osl, a.fit) == ("vllm-v0", "static", 10.77, 16, 1024, 1024, True)
    t = by["A1 TRT-LLM Llama-3-70B TP4 bs1 128/128"]
    assert (t.stack, t.tp, t.model, t.fit) == ("trtllm", 4, "llama-3-70b", False)
    itl = by["A1 vLLM Llama-3-8B TP1 bs16 1024/1024 ITL"]
    assert itl.published == pytest.approx((11.025 - 0.426) / 1023 * 1e3)
    k = [c for c in cs if c.kind == "kernel"]
    assert [c.isl for c in k] == [32, 64]        # "same" repeated the shape of the row above
    assert k[1].kv_bytes == 64 * 64 * 8 * 128 * 2 * 2
    assert not skipped


def test_the_fit_recovers_known_kernel_parameters():
    """Kernel rows made by a known curve are fitted back to it."""
    fid = _fidelity()
    table = load_stacks()
    truth = table.profiles["vllm-v0"].with_values(attn_call_s=20e-6, attn_bw_efficiency=0.7)
    rows = [fid.Case(f"k{b}", "B", "kernel", "kernel", truth.attention_s(b, 1, fid.H100.hbm_bandwidth) * 1e6,
                     kv_bytes=b, fit=True) for b in (1e6, 1e7, 1e8, 1e9)]
    call, eff = fid.fit_kernel(rows, table.profiles["vllm-v0"].with_values(attn_call_s=5e-6, attn_bw_efficiency=0.5))
    assert call == pytest.approx(20e-6, rel=1e-3)
    assert eff == pytest.approx(0.7, rel=1e-3)


def test_the_fit_ends_where_it_ends_whatever_values_the_file_holds():
    """The fit starts from fixed values, not the file's: a second --write rewrites the same
    values (a start taken from the file moved them a little on every run)."""
    fid = _fidelity()
    table = load_stacks()
    cs, _ = fid.cases(fid.tables(fid.DEFAULT_CALIBRATION.read_text(encoding="utf-8")))
    rows = [c for c in cs if c.kind in ("kernel", "hostgap")]
    assert [c.stack for c in rows if c.kind == "hostgap"] == ["vllm-v0.6"]
    scale = {"host_step_s": 3, "host_per_request_s": 0.5, "allreduce_latency_s": 2, "attn_call_s": 2,
             "attn_bw_efficiency": 0.5}
    moved = {n: p.with_values(**{f: x * getattr(p, f) for f, x in scale.items()
                                 if table.sources[n][f].startswith("fit:")})
             for n, p in table.profiles.items()}
    assert moved["vllm-v0"] != table.profiles["vllm-v0"]
    a = fid.fit(rows, table.profiles, table.sources)
    b = fid.fit(rows, moved, table.sources)
    for name in table.profiles:
        assert a[name] == b[name], name
    gap = next(c for c in rows if c.kind == "hostgap")
    assert fid.predict(gap, a) == pytest.approx(gap.published, rel=1e-3)


def test_each_stack_is_the_version_its_rows_ran():
    """vLLM V0 before and after asynchronous output processing differ only in the host work per
    request; TensorRT-LLM's static GptSession (the A3 rows) has none."""
    table = load_stacks()
    v0, v06 = table.profiles["vllm-v0"], table.profiles["vllm-v0.6"]
    assert v06.host_per_request_s < v0.host_per_request_s
    others = [f for f in v0.__dataclass_fields__ if f not in ("name", "host_per_request_s")]
    assert [getattr(v06, f) for f in others] == [getattr(v0, f) for f in others]
    assert table.profiles["vllm-v1"].host_per_request_s == v06.host_per_request_s
    assert table.profiles["trtllm-2023"].host_per_request_s == 0
    assert "gptSessionBenchmark" in table.sources["trtllm-2023"]["host_per_request_s"]
    assert table.profiles["trtllm"].host_per_request_s > 0


def test_stack_profile_checks_its_values():
    p = get_stack("vllm-v0")
    with pytest.raises(ValueError, match="sched_overlap must be in"):
        p.with_values(sched_overlap=2)
    with pytest.raises(ValueError, match="prefill_chunk_tokens must be an integer"):
        p.with_values(prefill_chunk_tokens=1.5)
    assert isinstance(p, StackProfile) and p.with_values(host_step_s=0).host_step_s == 0


@pytest.mark.parametrize("stack, model, weights, tp, batch, isl, osl", [
    ("vllm-v0", "llama-3-8b", "bf16", 1, 8, 1024, 48),
    ("trtllm-2023", "llama-2-70b", "fp8", 4, 12, 512, 40),
])
def test_the_benchmarks_static_batch_is_what_the_simulator_runs(stack, model, weights, tp, batch, isl, osl):
    """The benchmark's closed form (colocated prefill, then Simpson over the decode steps) equals
    the event-driven simulation of the same static batch."""
    from dataclasses import replace as dc_replace

    from tricut.models.config import load_model
    from tricut.sim.fast.setup import ServingSetup
    from tricut.sim.fast.workload import synthetic

    fid = _fidelity()
    case = fid.Case("x", "A1", stack, "static", 1.0, model, weights, weights, tp, batch, isl, osl)
    stacks = load_stacks().profiles
    m = dc_replace(load_model(model), weight_dtype=weights)
    setup = ServingSetup(m, fid.H100, weights, tp, n_slots=64, max_batch=batch, stack=stacks[stack],
                         prefill="colocated")
    res = setup.run(synthetic(batch, math.inf, isl, osl), ())
    assert res.summary["prefill_mode"] == "colocated" and res.summary["mean_batch"] == batch
    last = max(r.token_times_s[-1] for r in res.request_times)
    assert last / osl * 1e3 == pytest.approx(fid.predict(case, stacks), rel=1e-3)


# -- the peer (AIConfigurator), without it installed: its runner is replaced by a stand-in that
# answers from the rows it is given, so the plumbing and the units are checked
FAKE_PEER = """\
import json, sys
rows = json.load(sys.stdin)
out = []
for r in rows:
    if r["batch"] == 64 and r["tp"] == 2:
        out.append({"label": r["label"], "error": "no such table"})
    else:
        # 2 ms per output token in all; TTFT 0
        out.append({"label": r["label"], "request_latency_ms": 2.0 * r["osl"], "ttft_ms": 0.0,
                    "tpot_ms": 3.0, "version": "9.9"})
json.dump(out, sys.stdout)
"""


def _peer_cases(fid):
    text = (ROOT.parent / "shared" / "calibration" / "published-h100-decode.md").read_text()
    return fid.cases(fid.tables(text))[0]


def test_peer_rows_are_the_serving_rows_with_their_model_configs():
    fid = _fidelity()
    cs = _peer_cases(fid)
    rows = fid.peer_rows(cs)
    kinds = {c.label: c.kind for c in cs}
    assert rows and all(kinds[r["label"]] in ("static", "itl", "tpot") for r in rows)
    assert len(rows) == sum(k in ("static", "itl", "tpot") for k in kinds.values())
    big = next(r for r in rows if "70B TP4 bs1 1024" in r["label"])
    assert big["config"]["num_hidden_layers"] == 80 and big["config"]["num_key_value_heads"] == 8
    assert big["config"]["intermediate_size"] == 28672 and big["backend"] == "vllm"
    fp8 = next(r for r in rows if r["label"].startswith("A3"))
    assert (fp8["gemm"], fp8["kv"], fp8["backend"]) == ("fp8", "fp8", "trtllm")


def test_run_peer_converts_each_rows_unit_and_skips_what_it_cannot_run(tmp_path, capsys):
    fid = _fidelity()
    cs = _peer_cases(fid)
    runner = tmp_path / "fake_peer.py"
    runner.write_text(FAKE_PEER)
    peer = fid.run_peer(cs, Path(sys.executable), runner=runner)
    static = next(c for c in cs if c.kind == "static" and c.label in peer)
    itl = next(c for c in cs if c.kind == "itl")
    assert peer[static.label] == (2.0, "9.9") and peer[itl.label] == (3.0, "9.9")
    skipped = [c.label for c in cs if c.batch == 64 and c.tp == 2 and c.kind == "static"]
    assert skipped and all(s not in peer for s in skipped)
    assert "AIConfigurator cannot run" in capsys.readouterr().err
    # a peer equal to the published figures has no error
    exact = {c.label: (c.published, "x") for c in cs if c.kind in ("static", "itl", "tpot")}
    got = {c.label: c.published * 1.1 for c in cs}
    text = "\n".join(fid.peer_section(cs, got, exact))
    assert "| all (30) | AIConfigurator | 0.0 % | 0.0 % | +0.0 % | 0 % |" in text
    assert "| all (30) | tricut | 10.0 % | 10.0 % | +10.0 % | 0 % |" in text


def test_the_fp8_gemv_parameters_are_fitted_on_the_gemm_table(tmp_path):
    """fp8_gemv_fit: each format's decode-sized cells fitted as a fixed time per call plus the
    weight bytes at an efficiency; the stack gets the efficiencies' ratio and the fixed times'
    difference. Cells of larger batches or smaller matrices do not count."""
    import duckdb
    fid = _fidelity()
    where = tmp_path / "lib" / "python3.11" / "site-packages" / "aiconfigurator_core" / "systems" / "data" / \
        "h100_sxm" / "gemm" / "vllm" / "0.1"
    where.mkdir(parents=True)
    bw = fid.H100.hbm_bandwidth
    line = {"bfloat16": (2, 4e-6, 0.85), "fp8": (1, 7e-6, 0.68)}    # bytes, fixed s, efficiency
    rows = []
    for m in (1, 8, 64, 512):
        for n, k in ((4096, 4096), (8192, 8192), (16384, 8192), (1024, 1024)):
            for dtype, (b, fixed, eff) in line.items():
                t = fixed + n * k * b / (bw * eff)
                decode = m <= 64 and n * k >= 2 ** 24
                rows.append((dtype, m, n, k, (t if decode else 5 * t) * 1e3))     # ms
    con = duckdb.connect()
    con.execute("create table t (gemm_dtype varchar, m int, n int, k int, latency double)")
    con.executemany("insert into t values (?, ?, ?, ?, ?)", rows)
    con.execute(f"copy t to '{where / 'gemm_perf.parquet'}' (format parquet)")
    got = fid.fp8_gemv_fit(tmp_path / "bin" / "python")
    assert got["fp8_gemv_efficiency_ratio"] == pytest.approx(0.68 / 0.85, rel=1e-9)
    assert got["fp8_gemv_call_extra_s"] == pytest.approx(3e-6, rel=1e-6)
    with pytest.raises(fid.PeerMissing, match="expected one vLLM GEMM table"):
        fid.fp8_gemv_fit(tmp_path / "elsewhere" / "bin" / "python")


def test_a_missing_peer_is_one_message_and_write_needs_it(tmp_path, capsys):
    fid = _fidelity()
    with pytest.raises(fid.PeerMissing, match="make peer-aic"):
        fid.run_peer(_peer_cases(fid), tmp_path / "no-python")
    assert fid.main(["--peer", str(tmp_path / "no-python")]) == 2
    assert "make peer-aic" in capsys.readouterr().err
    assert fid.main(["--write", "--no-peer"]) == 2
    assert "drop --no-peer" in capsys.readouterr().err
