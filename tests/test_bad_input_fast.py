"""Bad input to `tricut simulate`, `compare`, `bench` and `roofline` (docs/system-model.md,
"Bad input"): every case ends as ONE line ``tricut: error: ...`` on stderr and exit status 2,
before any work is done (nothing on stdout), with no traceback, and nothing written (no plot
directory, no stray file). Where the fix is a behaviour (the roofline note, null in JSON, the
decode-queue metric, atomic plots) the behaviour is checked too.

The CLI runs in-process (``tricut.sim.cli.main``), a few cases through ``python -m tricut.sim``.
``TRIED`` lists every bad input as (command, case id): ``len()`` per command is the count of
bad inputs tried per command (:func:`tried_per_command`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import resources

import pytest

import tricut.sim.cli
from tricut.models.config import load_gpu, load_model
from tricut.sim.fast.metrics import RequestTimes, summarise
from tricut.sim.fast.setup import ServingSetup
from tricut.sim.fast.stacks import get_stack
from tricut.sim.fast.workload import Request, read_azure

_CONFIGS = resources.files("tricut.models.configs")
H100 = (_CONFIGS / "gpus" / "h100-sxm5.toml").read_text()
L8B = (_CONFIGS / "models" / "llama-3-8b.toml").read_text()
AZURE_HEAD = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
VIDUR_HEAD = "arrived_at,num_prefill_tokens,num_decode_tokens\n"


def _gpu(old: str, new: str) -> str:
    assert old in H100, old
    return H100.replace(old, new)


def _model(old: str, new: str) -> str:
    assert old in L8B, old
    return L8B.replace(old, new)


def _jsonl(*rows: str) -> str:
    return "".join(r + "\n" for r in rows)


#: the input files every case may name (as {d}/NAME); a name ending in "/" is a directory
FILES = {
    # item 2: GPU and model numbers out of range
    "gpu_1e300.toml": _gpu("hbm_bandwidth_tb_s = 3.35", "hbm_bandwidth_tb_s = 1e300"),
    "gpu_tiny_bw.toml": _gpu("hbm_bandwidth_tb_s = 3.35", "hbm_bandwidth_tb_s = 1e-300"),
    "gpu_nan.toml": _gpu("sm_clock_ghz = 1.98", "sm_clock_ghz = nan"),
    "gpu_inf.toml": _gpu("bf16_tflops = 989.4", "bf16_tflops = inf"),
    "gpu_neg.toml": _gpu("hbm_gib = 80", "hbm_gib = -80"),
    "gpu_bigint.toml": _gpu("hbm_gib = 80", "hbm_gib = 9223372036854775807"),
    "gpu_400_digits.toml": _gpu("nvlink_gb_s = 450.0", "nvlink_gb_s = 1" + "0" * 400),
    "gpu_huge_sms.toml": _gpu("sm_count = 132", "sm_count = 10000000"),
    "gpu_slow_clock.toml": _gpu("dsu_clock_ghz = 1.2", "dsu_clock_ghz = 1e-300"),
    "model_layers.toml": _model("num_layers = 32", "num_layers = 1000000000"),
    "model_eps_nan.toml": _model("rms_norm_eps = 1e-5", "rms_norm_eps = nan"),
    "model_ctx_neg.toml": _model("max_context = 131072", "max_context = -1"),
    "model_theta.toml": _model("rope_theta = 500000.0", "rope_theta = 1e300"),
    # item 12: an H100 with 17 GiB: 16,731 tokens of KV beside Llama-3-8B's weights
    "gpu_17gib.toml": _gpu("hbm_gib = 80", "hbm_gib = 17"),
    "too_large.jsonl": _jsonl('{"timestamp": 0, "input_length": 20000, "output_length": 50}',
                              '{"timestamp": 10, "input_length": 30000, "output_length": 50}'),
    # item 9: Azure timestamps
    "azure_exp.csv": AZURE_HEAD + "2023-11-16 18:17:03.9799600,4808,10\n2023-11-16 18:17:03.5e5,3180,8\n",
    "azure_sign.csv": AZURE_HEAD + "2023-11-16 18:17:03.-5,3180,8\n",
    "azure_dot.csv": AZURE_HEAD + "2023-11-16 18:17:03.,3180,8\n",
    "azure_space.csv": AZURE_HEAD + "2023-11-16 18:17:03. 5,3180,8\n",
    "azure_month.csv": AZURE_HEAD + "2023-13-16 18:17:03.5,3180,8\n",
    # item 7: arrivals past the horizon
    "far_future.jsonl": _jsonl('{"timestamp": 0, "input_length": 10, "output_length": 5}',
                               '{"timestamp": 1e300, "input_length": 10, "output_length": 5}'),
    "azure_centuries.csv": AZURE_HEAD + "2023-11-16 18:17:03,10,5\n9999-12-31 23:59:59,10,5\n",
    # item 15: hostile trace files
    "empty.jsonl": "",
    "blank.jsonl": "\n\n   \n",
    "empty.csv": "",
    "binary.jsonl": b"\x00\xff\xfe\x01garbage",
    "binary.csv": b"\xff\xfe\x00\x01",
    "dir.jsonl/": None,
    "not_object.jsonl": "[1, 2, 3]\n",
    "deep.jsonl": "[" * 100_000 + "]" * 100_000 + "\n",
    "long_int.jsonl": _jsonl('{"timestamp": 0, "input_length": 5, "output_length": 5}',
                             '{"timestamp": 0, "input_length": ' + "9" * 5000 + ', "output_length": 5}'),
    "nan_length.jsonl": '{"timestamp": 0, "input_length": NaN, "output_length": 5}\n',
    "huge_length.jsonl": '{"timestamp": 0, "input_length": 1e300, "output_length": 5}\n',
    "neg_length.jsonl": '{"timestamp": 0, "input_length": -5, "output_length": 5}\n',
    "inf_time.jsonl": '{"timestamp": Infinity, "input_length": 5, "output_length": 5}\n',
    "missing.jsonl": '{"timestamp": 0, "input_length": 5}\n',
    "bad_hashes.jsonl": '{"timestamp": 0, "input_length": 5, "output_length": 5, "hash_ids": [1.5]}\n',
    "vidur_short_row.csv": VIDUR_HEAD + "0,5\n",
    "vidur_header_only.csv": VIDUR_HEAD,
    "vidur_1e400.csv": VIDUR_HEAD + "1e400,5,5\n",
    "unknown_header.csv": "a,b,c\n1,2,3\n",
    # item 15: hostile TOML
    "empty.toml": "",
    "binary.toml": b"\x00\xff\xfe",
    "dir.toml/": None,
    "unclosed.toml": 'name = "x',
    "duplicate.toml": H100 + "sm_count = 5\n",
    "table_value.toml": _gpu("sm_count = 132", "sm_count = {a = 1}"),
    "date_value.toml": _gpu("sm_count = 132", "sm_count = 1979-05-27"),
    "section.toml": H100 + "[extra]\nx = 1\n",
    "name_newline.toml": _gpu('name = "h100-sxm5"', 'name = "a\\nb"'),
    "bool_number.toml": _gpu("sm_count = 132", "sm_count = true"),
    "model_as_gpu.toml": L8B,
    # item 3: a file where the plot directory should be
    "afile": "not a directory\n",
    "plots_with_dir/latency_cdf.png/": None,
}


def _write_inputs(d) -> None:
    for name, content in FILES.items():
        path = d / name.rstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        if content is None:
            path.mkdir(parents=True, exist_ok=True)
        elif isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)


S = ["--synthetic", "4"]     # a small synthetic workload for cases whose flaw is elsewhere

#: (command, case id, argv after the command ({d} = the input directory), text the one line holds)
CASES = [
    # 1. bandwidth assumptions of 0 divided by
    ("simulate", "1-l2-bandwidth-0", [*S, "--assume", "l2_bandwidth=0"], "l2_bandwidth is a bandwidth: it must be > 0"),
    ("simulate", "1-prefill-link-0", [*S, "--prefill", "disaggregated", "--assume", "prefill_link_bandwidth=0"],
     "prefill_link_bandwidth is a bandwidth: it must be > 0"),
    ("compare", "1-l2-bandwidth-negative", [*S, "--assume", "l2_bandwidth=-1"], "l2_bandwidth is a bandwidth"),
    ("bench", "1-prefill-link-0", ["--assume", "prefill_link_bandwidth=0"], "prefill_link_bandwidth is a bandwidth"),
    ("simulate", "1-l2-bandwidth-1e300", [*S, "--assume", "l2_bandwidth=1e300"], "between 1e+08 and 1e+16 bytes/s"),
    # 2. config numbers: finite, within stated limits, naming the field and the limit
    ("simulate", "2-hbm-bw-1e300", [*S, "--gpu", "{d}/gpu_1e300.toml"],
     "field 'hbm_bandwidth_tb_s': must be between 0.001 and 1000 TB/s"),
    ("roofline", "2-hbm-bw-1e300", ["--gpu", "{d}/gpu_1e300.toml"], "field 'hbm_bandwidth_tb_s'"),
    ("roofline", "2-hbm-bw-1e-300", ["--gpu", "{d}/gpu_tiny_bw.toml"], "must be between 0.001 and 1000 TB/s"),
    ("simulate", "2-clock-nan", [*S, "--gpu", "{d}/gpu_nan.toml"], "field 'sm_clock_ghz': must be a positive"),
    ("compare", "2-tflops-inf", [*S, "--gpu", "{d}/gpu_inf.toml"], "field 'bf16_tflops'"),
    ("bench", "2-hbm-negative", ["--gpu", "{d}/gpu_neg.toml"], "field 'hbm_gib': must be a positive"),
    ("roofline", "2-hbm-int64-max", ["--gpu", "{d}/gpu_bigint.toml"], "field 'hbm_gib': must be between 1 and"),
    ("roofline", "2-int-400-digits", ["--gpu", "{d}/gpu_400_digits.toml"], "field 'nvlink_gb_s'"),
    ("simulate", "2-sm-count-huge", [*S, "--gpu", "{d}/gpu_huge_sms.toml"], "field 'sm_count': must be between 1 and 100000"),
    ("simulate", "2-dsu-clock-1e-300", [*S, "--gpu", "{d}/gpu_slow_clock.toml"], "field 'dsu_clock_ghz'"),
    ("roofline", "2-layers-1e9", ["--model", "{d}/model_layers.toml"], "field 'num_layers': must be between 1 and 10000"),
    ("simulate", "2-eps-nan", [*S, "--model", "{d}/model_eps_nan.toml"], "field 'rms_norm_eps'"),
    ("roofline", "2-context-negative", ["--model", "{d}/model_ctx_neg.toml"], "field 'max_context'"),
    ("roofline", "2-rope-theta-1e300", ["--model", "{d}/model_theta.toml"], "field 'rope_theta'"),
    # 3. --plot a file, or under a file, or where a figure's name is a directory
    ("simulate", "3-plot-is-a-file", [*S, "--plot", "{d}/afile"], "exists and is not a directory"),
    ("simulate", "3-plot-under-a-file", [*S, "--plot", "{d}/afile/sub"], "is not a directory"),
    ("compare", "3-plot-is-a-file", [*S, "--plot", "{d}/afile"], "exists and is not a directory"),
    ("bench", "3-plot-under-a-file", ["--slots", "2", "--plot", "{d}/afile/sub/deeper"], "is not a directory"),
    ("simulate", "3-figure-name-is-a-dir", [*S, "--plot", "{d}/plots_with_dir"],
     "latency_cdf.png exists and is not a regular file"),
    # 4. tp must divide the query heads (and divide or be a multiple of the KV heads)
    ("roofline", "4-tp-24", ["--tp", "24"], "tp 24 must divide llama-3-8b's num_heads 32"),
    ("roofline", "4-tp-1000", ["--tp", "1000"], "tp 1000 must divide llama-3-8b's num_heads 32"),
    ("roofline", "4-tp-3", ["--tp", "3"], "tp 3 must divide"),
    ("roofline", "4-tp-huge", ["--model", "llama-3-70b", "--tp", "9" * 30], "must divide llama-3-70b's num_heads 64"),
    ("simulate", "4-tp-24", [*S, "--tp", "24"], "tp 24 must divide llama-3-8b's num_heads 32"),
    ("compare", "4-tp-48", [*S, "--model", "llama-3-70b", "--tp", "48"], "tp 48 must divide"),
    # 5. bench needs two output tokens
    ("bench", "5-output-1", ["--output-tokens", "1"], "bench needs --output-tokens of at least 2"),
    ("bench", "5-output-uniform-from-1", ["--output-tokens", "uniform:1:8"], "at least 2"),
    ("bench", "5-output-lognormal-median-1", ["--output-tokens", "lognormal:1:0.5"], "at least 2"),
    # 6. bench replays no trace and sets its own rates
    ("bench", "6-trace", ["--trace", "{d}/too_large.jsonl"], "bench does not take --trace"),
    ("bench", "6-rate", ["--rate", "5"], "bench does not take --rate"),
    ("bench", "6-rate-scale", ["--rate-scale", "2"], "bench does not take --rate-scale"),
    ("bench", "6-limit", ["--limit", "3"], "bench does not take --limit"),
    ("bench", "6-trace-format", ["--trace-format", "azure"], "bench does not take --trace-format"),
    # 7. arrivals past the float64 time horizon
    ("simulate", "7-rate-1e-15", [*S, "--rate", "1e-15"], "beyond the simulator's 1e+08 s horizon"),
    ("compare", "7-rate-1e-15", ["--synthetic", "20", "--rate", "1e-15"], "horizon"),
    ("simulate", "7-rate-1e-320", [*S, "--rate", "1e-320"], "horizon"),
    ("simulate", "7-rate-scale-1e-300", [*S, "--rate-scale", "1e-300"], "horizon"),
    ("simulate", "7-trace-timestamp-1e300", ["--trace", "{d}/far_future.jsonl"], "the arrivals span 1e+297 s"),
    ("simulate", "7-azure-8000-years", ["--trace", "{d}/azure_centuries.csv"], "horizon"),
    ("simulate", "7-think-time-1e300", [*S, "--concurrency", "1", "--think-time", "1e300"], "horizon"),
    # 8. --degraded-at: a finite number >= 0
    ("simulate", "8-degraded-nan", [*S, "--degraded-at", "nan"], "argument --degraded-at: nan must be a finite number >= 0"),
    ("simulate", "8-degraded-inf", [*S, "--degraded-at", "inf"], "argument --degraded-at"),
    ("compare", "8-degraded-negative", [*S, "--degraded-at", "-1"], "argument --degraded-at"),
    ("bench", "8-degraded-nan", ["--degraded-at", "nan"], "argument --degraded-at"),
    # 9. Azure TIMESTAMP fraction: digits only, the file and line named
    ("simulate", "9-azure-fraction-5e5", ["--trace", "{d}/azure_exp.csv"], "azure_exp.csv:3: TIMESTAMP must be"),
    ("simulate", "9-azure-fraction-sign", ["--trace", "{d}/azure_sign.csv"], "azure_sign.csv:2: TIMESTAMP"),
    ("simulate", "9-azure-fraction-empty", ["--trace", "{d}/azure_dot.csv"], "azure_dot.csv:2: TIMESTAMP"),
    ("compare", "9-azure-fraction-space", ["--trace", "{d}/azure_space.csv"], "azure_space.csv:2: TIMESTAMP"),
    ("simulate", "9-azure-month-13", ["--trace", "{d}/azure_month.csv"], "azure_month.csv:2: TIMESTAMP"),
    # 10. synthetic length distributions checked up front, naming the flag
    ("simulate", "10-prompt-lognormal-nan", [*S, "--prompt-tokens", "lognormal:nan:1"],
     "argument --prompt-tokens: 'lognormal:nan:1': synthetic prompt lognormal needs a finite median"),
    ("simulate", "10-output-lognormal-sigma-nan", [*S, "--output-tokens", "lognormal:64:nan"], "argument --output-tokens"),
    ("compare", "10-prompt-lognormal-inf", [*S, "--prompt-tokens", "lognormal:inf:1"], "argument --prompt-tokens"),
    ("simulate", "10-prompt-sigma-1e300", [*S, "--prompt-tokens", "lognormal:100:1e300"], "sigma in [0, 10]"),
    ("simulate", "10-prompt-median-below-1", [*S, "--prompt-tokens", "lognormal:0.5:1"], "median in [1,"),
    ("bench", "10-prompt-lognormal-nan", ["--prompt-tokens", "lognormal:nan:1"], "argument --prompt-tokens"),
    ("simulate", "10-uniform-huge", [*S, "--prompt-tokens", "uniform:1:99999999999999999999"], "uniform bounds"),
    ("simulate", "10-prompt-huge", [*S, "--prompt-tokens", "9" * 30], "argument --prompt-tokens"),
    ("simulate", "10-output-zero", [*S, "--output-tokens", "0"], "argument --output-tokens"),
    # 11. --seed names the flag
    ("simulate", "11-seed-negative", [*S, "--seed", "-1"], "argument --seed: -1 must be an integer >= 0"),
    ("compare", "11-seed-negative", [*S, "--seed", "-1"], "argument --seed"),
    ("bench", "11-seed-negative", ["--seed", "-1"], "argument --seed"),
    ("simulate", "11-seed-fraction", [*S, "--seed", "1.5"], "argument --seed: '1.5' is not an integer"),
    # 12. every request too large for the KV budget: said why, before running
    ("simulate", "12-all-too-large", ["--trace", "{d}/too_large.jsonl", "--gpu", "{d}/gpu_17gib.toml"],
     "every request is too large for the DSU's KV budget of 16,731 tokens"),
    ("compare", "12-all-too-large", ["--trace", "{d}/too_large.jsonl", "--gpu", "{d}/gpu_17gib.toml"],
     "every request is too large"),
    ("bench", "12-all-too-large", ["--prompt-tokens", "20000", "--gpu", "{d}/gpu_17gib.toml", "--slots", "2"],
     "every request is too large"),
    # 15. other hostile input: trace files
    ("simulate", "15-trace-empty", ["--trace", "{d}/empty.jsonl"], "no requests in the file"),
    ("simulate", "15-trace-blank-lines", ["--trace", "{d}/blank.jsonl"], "no requests in the file"),
    ("simulate", "15-trace-empty-csv", ["--trace", "{d}/empty.csv"], "unknown trace format"),
    ("simulate", "15-trace-binary", ["--trace", "{d}/binary.jsonl"], "not UTF-8 text"),
    ("compare", "15-trace-binary-csv", ["--trace", "{d}/binary.csv"], "not UTF-8 text"),
    ("simulate", "15-trace-is-a-directory", ["--trace", "{d}/dir.jsonl"], "cannot read"),
    ("simulate", "15-trace-missing", ["--trace", "{d}/nope.jsonl"], "file not found"),
    ("simulate", "15-trace-not-object", ["--trace", "{d}/not_object.jsonl"], "not_object.jsonl:1: expected a JSON object"),
    ("simulate", "15-trace-nested-100k", ["--trace", "{d}/deep.jsonl"], "deep.jsonl:1: not valid JSON (nested too deeply)"),
    ("simulate", "15-trace-int-5000-digits", ["--trace", "{d}/long_int.jsonl"], "long_int.jsonl:2: not valid JSON"),
    ("simulate", "15-trace-nan-length", ["--trace", "{d}/nan_length.jsonl"], "input_length must be an integer"),
    ("simulate", "15-trace-length-1e300", ["--trace", "{d}/huge_length.jsonl"], "input_length must be <= 1,000,000,000"),
    ("compare", "15-trace-negative-length", ["--trace", "{d}/neg_length.jsonl"], "input_length must be >= 1"),
    ("simulate", "15-trace-inf-time", ["--trace", "{d}/inf_time.jsonl"], "timestamp must be a finite number"),
    ("simulate", "15-trace-missing-field", ["--trace", "{d}/missing.jsonl"], "missing field 'output_length'"),
    ("simulate", "15-trace-bad-hashes", ["--trace", "{d}/bad_hashes.jsonl"], "hash_ids must be a list of integers"),
    ("simulate", "15-vidur-short-row", ["--trace", "{d}/vidur_short_row.csv"], "vidur_short_row.csv:2: expected 3 columns"),
    ("simulate", "15-vidur-header-only", ["--trace", "{d}/vidur_header_only.csv"], "no requests in the file"),
    ("simulate", "15-vidur-time-1e400", ["--trace", "{d}/vidur_1e400.csv"], "arrived_at must be a finite number"),
    ("simulate", "15-csv-unknown-header", ["--trace", "{d}/unknown_header.csv"], "unknown trace format"),
    ("simulate", "15-wrong-trace-format", ["--trace", "{d}/too_large.jsonl", "--trace-format", "azure"],
     "header lacks column 'TIMESTAMP'"),
    ("simulate", "15-limit-without-trace", [*S, "--limit", "3"], "--limit applies to a --trace"),
    ("simulate", "15-trace-and-synthetic", ["--trace", "{d}/too_large.jsonl", "--synthetic", "3"], "not allowed with"),
    # 15. other hostile input: config files and ids
    ("roofline", "15-toml-empty", ["--gpu", "{d}/empty.toml"], "missing field 'name'"),
    ("roofline", "15-toml-binary", ["--gpu", "{d}/binary.toml"], "cannot read"),
    ("roofline", "15-toml-is-a-directory", ["--model", "{d}/dir.toml"], "cannot read"),
    ("roofline", "15-toml-unclosed-string", ["--gpu", "{d}/unclosed.toml"], "not valid TOML"),
    ("simulate", "15-toml-duplicate-key", [*S, "--gpu", "{d}/duplicate.toml"], "not valid TOML"),
    ("roofline", "15-toml-table-value", ["--gpu", "{d}/table_value.toml"], "field 'sm_count': expected int, got dict"),
    ("roofline", "15-toml-date-value", ["--gpu", "{d}/date_value.toml"], "field 'sm_count': expected int, got date"),
    ("roofline", "15-toml-extra-section", ["--gpu", "{d}/section.toml"], "unknown field 'extra'"),
    ("roofline", "15-toml-name-newline", ["--gpu", "{d}/name_newline.toml"], "field 'name': expected 1 to 64 printable"),
    ("roofline", "15-toml-bool-number", ["--gpu", "{d}/bool_number.toml"], "field 'sm_count': expected int, got bool"),
    ("simulate", "15-model-file-as-gpu", [*S, "--gpu", "{d}/model_as_gpu.toml"], "unknown field"),
    ("roofline", "15-toml-missing", ["--gpu", "{d}/nope.toml"], "file not found"),
    ("roofline", "15-unknown-gpu", ["--gpu", "b300"], "unknown gpu 'b300'"),
    ("simulate", "15-unknown-model", [*S, "--model", "gpt-5"], "unknown model 'gpt-5'"),
    ("bench", "15-unknown-model", ["--model", "gpt-5"], "unknown model 'gpt-5'"),
    ("simulate", "15-weights-do-not-fit", [*S, "--model", "llama-3-70b"], "raise --tp"),
    ("simulate", "15-cdu-on-edge", [*S, "--gpu", "edge", "--cuts", "cdu"], "has no CDU"),
    ("simulate", "15-cdu-share-tiny", [*S, "--assume", "cdu_l2_share=0.01"], "cdu cut with cdu_l2_share 0.01"),
    ("simulate", "15-context-too-long", [*S, "--prompt-tokens", "200000"], "exceeds llama-3-8b's max_context"),
    # 15. other hostile input: numbers in flags (nan, inf, huge, negative)
    ("simulate", "15-tp-nan", [*S, "--tp", "nan"], "argument --tp: 'nan' is not an integer"),
    ("simulate", "15-synthetic-huge", ["--synthetic", "99999999999"], "argument --synthetic: 99999999999 must be at most"),
    ("simulate", "15-synthetic-nan", ["--synthetic", "nan"], "argument --synthetic"),
    ("simulate", "15-rate-nan", [*S, "--rate", "nan"], "argument --rate: nan must be > 0"),
    ("simulate", "15-rate-negative", [*S, "--rate", "-1"], "argument --rate"),
    ("simulate", "15-rate-scale-inf", [*S, "--rate-scale", "inf"], "argument --rate-scale: inf must be a finite number"),
    ("simulate", "15-slots-huge", [*S, "--slots", "100000000"], "argument --slots: 100000000 must be at most 65,536"),
    ("compare", "15-max-batch-huge", [*S, "--max-batch", "99999999999"], "argument --max-batch"),
    ("simulate", "15-ttft-slo-nan", [*S, "--ttft-slo", "nan"], "argument --ttft-slo"),
    ("simulate", "15-tpot-slo-zero", [*S, "--tpot-slo", "0"], "argument --tpot-slo"),
    ("simulate", "15-concurrency-fraction", [*S, "--concurrency", "1.5"], "argument --concurrency"),
    ("simulate", "15-think-time-inf", [*S, "--think-time", "inf"], "argument --think-time"),
    ("simulate", "15-assume-efficiency-nan", [*S, "--assume", "gemv_bw_efficiency=nan"], "gemv_bw_efficiency"),
    ("simulate", "15-assume-efficiency-1e-300", [*S, "--assume", "compute_efficiency=1e-300"], "at least 0.01"),
    ("compare", "15-assume-degraded-1e300", [*S, "--assume", "degraded_extra_s=1e300"], "at most 10 s"),
    ("simulate", "15-assume-host-step-1e300", [*S, "--assume", "host_step_s=1e300"], "host_step_s must be at most 10 s"),
    ("simulate", "15-assume-graph-batch-inf", [*S, "--assume", "graph_max_batch=inf"], "graph_max_batch"),
    ("simulate", "15-assume-chunk-1e300", [*S, "--assume", "prefill_chunk_tokens=1e300"], "prefill_chunk_tokens must be at most"),
    ("simulate", "15-assume-attn-eff-tiny", [*S, "--assume", "attn_bw_efficiency=1e-300"], "attn_bw_efficiency"),
    ("simulate", "15-assume-kv-watermark-1", [*S, "--assume", "kv_watermark=1"], "kv_watermark must be in [0, 1)"),
    ("simulate", "15-assume-fp8-ratio-above-1", [*S, "--assume", "fp8_gemv_efficiency_ratio=1.5"],
     "fp8_gemv_efficiency_ratio must be in (0, 1]"),
    ("simulate", "15-assume-fp8-ratio-bf16-weights", [*S, "--assume", "fp8_gemv_efficiency_ratio=0.5"],
     "--assume fp8_gemv_efficiency_ratio changes nothing for --model llama-3-8b: its weights are bf16"),
    ("compare", "15-assume-fp8-call-bf16-weights", [*S, "--assume", "fp8_gemv_call_extra_s=1e-6"],
     "--assume fp8_gemv_call_extra_s changes nothing for --model llama-3-8b: its weights are bf16"),
    ("compare", "15-assume-kv-watermark-idle", [*S, "--stack", "trtllm", "--assume", "kv_watermark=0.1"],
     "--assume kv_watermark changes nothing under --stack trtllm"),
    ("simulate", "15-assume-kv-watermark-dsu-cut", [*S, "--assume", "kv_watermark=0.1"],
     "--assume kv_watermark changes nothing with the dsu cut"),
    ("bench", "15-assume-kv-watermark-dsu-cut", ["--cuts", "dsu", "--assume", "kv_watermark=0.1"],
     "--assume kv_watermark changes nothing with the dsu cut"),
    ("compare", "15-assume-kv-watermark-admission-off", [*S, "--admission", "off", "--assume", "kv_watermark=0.1"],
     "--assume kv_watermark changes nothing with --admission off"),
    ("simulate", "15-assume-empty-value", [*S, "--assume", "l2_bandwidth="], "'' is not a number"),
    ("simulate", "15-unit-unknown", [*S, "--unit", "sm_count=4"], "NAME one of te_engines_per_sm"),
    ("simulate", "15-unit-no-equals", [*S, "--unit", "te_lanes"], "expected NAME=VALUE"),
    ("simulate", "15-unit-fraction", [*S, "--unit", "te_lanes=2.5"], "'2.5' is not an integer"),
    ("simulate", "15-unit-lanes-3", [*S, "--unit", "te_lanes=3"], "te_lanes must be one of 2, 4, 8, 16, 32, got 3"),
    ("compare", "15-unit-engines-0", [*S, "--unit", "te_engines_per_sm=0"], "te_engines_per_sm must be in 1..1024"),
    ("bench", "15-unit-dsu-cores-huge", ["--unit", "dsu_cores=" + "9" * 30], "dsu_cores must be in 1..1024"),
    ("simulate", "15-unit-te-without-te-cut", [*S, "--cuts", "cdu,dsu", "--unit", "te_lanes=4"],
     "--unit te_lanes needs the te cut (--cuts with te)"),
    ("simulate", "15-unit-te-engines-baseline", [*S, "--cuts", "none", "--unit", "te_engines_per_sm=2"],
     "--unit te_engines_per_sm needs the te cut"),
    ("simulate", "15-unit-dsu-cores-idle", [*S, "--unit", "dsu_cores=2"], "--unit dsu_cores changes nothing"),
    ("simulate", "15-json-and-csv", [*S, "--json", "--csv"], "not allowed with argument --json"),
    ("simulate", "15-unknown-flag", [*S, "--turbo"], "unrecognized arguments: --turbo"),
    ("bench", "15-slots-zero", ["--slots", "0"], "argument --slots: 0 must be > 0"),
    ("bench", "15-synthetic-huge", ["--synthetic", "10000000"], "argument --synthetic"),
    ("roofline", "15-tp-not-a-number", ["--tp", "x"], "argument --tp"),
    ("roofline", "15-tp-negative", ["--tp", "-1"], "tp must be a positive integer"),
    ("roofline", "15-context-nan", ["--context", "nan"], "argument --context: 'nan' is not an integer"),
    ("roofline", "15-context-huge", ["--context", "9" * 30], "exceeds llama-3-8b's max_context"),
    ("roofline", "15-batch-inf", ["--batch", "inf"], "argument --batch"),
    ("roofline", "15-batch-empty-item", ["--batch", "1,,2"], "argument --batch: '' is not an integer"),
    ("roofline", "15-kv-dtype-empty", ["--kv-dtype", ","], "argument --kv-dtype"),
    ("roofline", "15-unknown-flag", ["--turbo"], "unrecognized arguments: --turbo"),
    ("compare", "15-trace-empty", ["--trace", "{d}/empty.jsonl"], "no requests in the file"),
    ("compare", "15-trace-nested-100k", ["--trace", "{d}/deep.jsonl"], "nested too deeply"),
    ("compare", "15-gpu-toml-is-a-directory", [*S, "--gpu", "{d}/dir.toml"], "cannot read"),
    ("compare", "15-tp-nan", [*S, "--tp", "nan"], "argument --tp"),
    ("compare", "15-concurrency-zero", [*S, "--concurrency", "0"], "argument --concurrency: 0 must be > 0"),
    ("compare", "15-assume-host-step-1e300", [*S, "--assume", "host_step_s=1e300"], "at most 10 s"),
    ("compare", "15-json-and-csv", [*S, "--json", "--csv"], "not allowed with argument --json"),
    ("compare", "15-unknown-stack", [*S, "--stack", "sglang"], "argument --stack: invalid choice: 'sglang'"),
    ("bench", "15-gpu-1e300", ["--gpu", "{d}/gpu_1e300.toml"], "field 'hbm_bandwidth_tb_s'"),
    ("bench", "15-tp-24", ["--tp", "24"], "tp 24 must divide"),
    ("bench", "15-context-too-long", ["--prompt-tokens", "200000"], "exceeds llama-3-8b's max_context"),
    ("bench", "15-assume-l2-bandwidth-0", ["--assume", "l2_bandwidth=0"], "l2_bandwidth is a bandwidth"),
]
#: every bad input tried, as (command, case id)
BAD_INPUTS = [(command, case_id) for command, case_id, _, _ in CASES]
TRIED = BAD_INPUTS


def tried_per_command() -> dict[str, int]:
    counts: dict[str, int] = {}
    for command, _ in TRIED:
        counts[command] = counts.get(command, 0) + 1
    return counts


def _cli(args: list[str]) -> int:
    try:
        return tricut.sim.cli.main(args)
    except SystemExit as e:          # argparse's one-line error
        return e.code


def _tree(d) -> set:
    return {(str(p.relative_to(d)), p.is_dir(), p.stat().st_size if p.is_file() else 0) for p in d.rglob("*")}


def test_case_ids_are_unique():
    assert len(set(TRIED)) == len(TRIED)
    assert {c for c, _ in TRIED} == {"simulate", "compare", "bench", "roofline"}


@pytest.mark.parametrize("command,case_id,argv,needle", CASES, ids=[f"{c}:{i}" for c, i, _, _ in CASES])
def test_bad_input_is_one_line_exit_2_nothing_done(tmp_path, monkeypatch, capsys, command, case_id, argv, needle):
    _write_inputs(tmp_path)
    monkeypatch.chdir(tmp_path)
    args = [a.format(d=tmp_path) for a in argv]
    if command != "roofline":
        args.append("--no-progress")
        if "--plot" not in args:
            args += ["--plot", str(tmp_path / "plots")]
    before = _tree(tmp_path)
    rc = _cli([command, *args])
    out, err = capsys.readouterr()
    assert rc == 2, (rc, err)
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("tricut: error: "), err
    assert "Traceback" not in err and "internal error" not in err
    assert needle in lines[0], lines[0]
    assert out == ""                                  # refused before any work: nothing printed
    assert _tree(tmp_path) == before                  # nothing written: no plot dir, no stray file


@pytest.mark.parametrize("args,needle", [
    (["simulate", "--synthetic", "4", "--assume", "l2_bandwidth=0"], "l2_bandwidth is a bandwidth"),
    (["roofline", "--tp", "24"], "tp 24 must divide"),
    (["roofline", "--context", "x"], "argument --context"),      # roofline's parser: one line too
    (["frobnicate"], "invalid choice: 'frobnicate'"),
])
def test_through_the_real_entry_point(tmp_path, args, needle):
    out = subprocess.run([sys.executable, "-m", "tricut.sim", *args], capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 2 and out.stdout == ""
    lines = out.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("tricut: error: ") and needle in lines[0], out.stderr
    assert list(tmp_path.iterdir()) == []


# -- behaviours ----------------------------------------------------------------------------------

def _json(text: str):
    """Strict JSON: NaN and Infinity are not JSON."""
    def refuse(name):
        raise AssertionError(f"{name} in JSON output")
    return json.loads(text, parse_constant=refuse)


def test_4_roofline_notes_a_batch_whose_kv_does_not_fit(capsys):
    assert _cli(["roofline", "--batch", "128", "--context", "8192", "--json"]) == 0
    out, err = capsys.readouterr()
    r = _json(out)
    assert (r["kv_tokens_needed"], r["kv_tokens_fit"], r["batch_fits"], r["max_batch_fit"]) == \
        (128 * 8192, 532_827, False, 532_827 // 8192)
    assert err.startswith("note: bf16, context 8,192, batch 128: the batch needs 1,048,576 tokens of KV "
                          "but 532,827 fit") and "not reachable" in err
    assert _cli(["roofline", "--batch", "64", "--context", "8192"]) == 0
    out, err = capsys.readouterr()
    assert err == "" and "batch fits" in out and out.splitlines()[-1].endswith("yes")
    assert _cli(["roofline", "--batch", "64,128", "--context", "8192"]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines()[-1].endswith("NO") and len(err.splitlines()) == 1


def test_4_tp_rules_kept_for_kv_replication():
    from tricut.models.roofline import roofline
    m, g = load_model("llama-3-70b"), load_gpu("h100-sxm5")
    assert roofline(m, g, "bf16", 1024, 1, tp=16).kv_bytes_per_step == \
        roofline(m, g, "bf16", 1024, 1, tp=8).kv_bytes_per_step      # 8 KV heads replicated on 16 GPUs
    assert roofline(m, g, "bf16", 1024, 1, tp=64).tp == 64              # 64 query heads, one each


def test_5_undefined_metrics_are_null_empty_and_dash(capsys):
    base = ["simulate", "--synthetic", "6", "--output-tokens", "1", "--no-progress"]
    assert _cli([*base, "--json"]) == 0
    data = _json(capsys.readouterr().out)
    for key in ("tpot_mean_s", "tpot_p50_s", "itl_p99_s", "decode_queue_mean_s", "decode_queue_p99_s",
                "min_step_over_floor"):
        assert data[key] is None, key
    assert data["ttft_p50_s"] > 0 and data["output_tokens"] == 6
    assert _cli([*base, "--csv"]) == 0
    header, row = capsys.readouterr().out.strip().splitlines()
    cells = dict(zip(header.split(","), row.split(",")))
    assert cells["tpot_p50_s"] == "" and cells["decode_queue_p50_s"] == "" and float(cells["ttft_p50_s"]) > 0
    assert _cli(base) == 0
    table = {line.split()[0]: line.split()[-1] for line in capsys.readouterr().out.splitlines()[1:]}
    assert table["tpot_p50_s"] == "-" and table["decode_queue_p99_s"] == "-"


def test_7_low_rates_within_the_horizon_keep_their_resolution(capsys):
    """At 1e-5 requests/s (arrivals over 2e6 s) the latencies are the same milliseconds as at
    a normal rate with the same requests one at a time (no float64 rounding to 0)."""
    base = ["simulate", "--synthetic", "20", "--prefill", "disaggregated", "--cuts", "none",
            "--stack", "ideal", "--json", "--no-progress"]
    assert _cli([*base, "--rate", "1e-5"]) == 0
    slow = _json(capsys.readouterr().out)
    assert _cli([*base, "--rate", "0.01"]) == 0
    fast = _json(capsys.readouterr().out)
    for key in ("ttft_p50_s", "tpot_p50_s", "e2e_p50_s"):
        assert slow[key] > 0 and slow[key] == pytest.approx(fast[key], rel=1e-6), key


def test_9_azure_fraction_is_digits(tmp_path):
    f = tmp_path / "a.csv"
    f.write_text(AZURE_HEAD + "2023-11-16 18:17:03.5,10,5\n2023-11-16 18:17:04.0000001,10,5\n")
    reqs = read_azure(f)
    assert [r.arrival_s for r in reqs] == pytest.approx([0.0, 0.5000001], abs=1e-6)


def test_12_some_too_large_is_a_note_not_an_error(tmp_path, capsys):
    f = tmp_path / "mixed.jsonl"
    f.write_text(_jsonl('{"timestamp": 0, "input_length": 20000, "output_length": 50}',
                        '{"timestamp": 5, "input_length": 1000, "output_length": 50}'))
    gpu = tmp_path / "g.toml"
    gpu.write_text(FILES["gpu_17gib.toml"])
    assert _cli(["simulate", "--trace", str(f), "--gpu", str(gpu), "--json", "--no-progress"]) == 0
    out, err = capsys.readouterr()
    assert _json(out)["failed"] == 1 and _json(out)["output_tokens"] == 50
    assert err.startswith("note: te+cdu+dsu: 1 of 2 requests failed (1 too large)")


def test_12_api_says_why_nothing_finished():
    from tricut.models.dsu import DsuParams
    from tricut.sim.fast.system import simulate
    from tricut.sim.fast.timing import StepModel
    reqs = [Request(i, 0.0, 2000, 10) for i in range(3)]
    with pytest.raises(ValueError, match=r"no request finished: all 3 failed \(3 too large\).*KV budget of 1,000"):
        simulate(reqs, StepModel(load_model("llama-3-8b"), load_gpu("h100-sxm5")), DsuParams(kv_capacity_tokens=1000))


def test_14_decode_queue_by_hand_metrics():
    a = RequestTimes(0.0, (1.0, 2.0, 3.0), admitted_s=1.0)       # a slot at once: 0
    b = RequestTimes(0.0, (1.0, 4.0, 5.0), admitted_s=3.5)       # waited 2.5 s for a slot
    c = RequestTimes(0.5, (2.0,))                                # one token: never admitted
    assert (a.decode_queue_s, b.decode_queue_s, c.decode_queue_s) == (0.0, 2.5, None)
    d = summarise([a, b, c]).as_dict()
    assert d["decode_queue_mean_s"] == 1.25 and d["decode_queue_p50_s"] == 1.25
    assert d["decode_queue_p90_s"] == pytest.approx(0.9 * 2.5)
    with pytest.raises(ValueError, match="admitted into a decode slot after its first token"):
        RequestTimes(0.0, (1.0, 2.0), admitted_s=0.5)
    with pytest.raises(ValueError, match="admitted"):
        RequestTimes(0.0, (1.0, 2.0), admitted_s=2.5)
    with pytest.raises(ValueError, match="one-token request never is"):
        RequestTimes(0.0, (1.0,), admitted_s=1.0)


def test_14_decode_queue_by_hand_one_slot():
    """One slot, two identical requests prefilled together (disaggregated, ideal stack: no
    jitter). A is admitted at its first token f and decodes two tokens, at steps 0 and 1; B
    waits for A's slot: it is admitted in the round after step 1, at t = step_end_s[1], so its
    decode queue is step_end_s[1] − f and A's is 0."""
    setup = ServingSetup(load_model("tiny"), load_gpu("h100-sxm5"), n_slots=1, max_batch=1,
                         stack=get_stack("ideal"), prefill="disaggregated", admission=False)
    r = setup.run([Request(0, 0.0, 64, 3), Request(1, 0.0, 64, 3)], ())
    f = setup.step_model(()).prefill_time(64)
    ends = r.step_end_s
    assert len(ends) == 4
    a, b = r.request_times                       # in first-token order: request 0, then 1
    assert a.token_times_s == (f, ends[0], ends[1]) and a.decode_queue_s == 0.0
    assert b.token_times_s == (f, ends[2], ends[3]) and b.admitted_s == ends[1]
    assert b.decode_queue_s == pytest.approx(ends[1] - f, rel=1e-12)
    s = r.summary
    assert s["decode_queue_mean_s"] == pytest.approx((ends[1] - f) / 2, rel=1e-12)
    assert s["decode_queue_p99_s"] == pytest.approx(0.99 * (ends[1] - f), rel=1e-12)


def test_14_decode_queue_in_table_json_csv(capsys):
    base = ["simulate", "--synthetic", "40", "--rate", "inf", "--slots", "4", "--max-batch", "4",
            "--output-tokens", "8", "--prompt-tokens", "256", "--no-progress"]
    assert _cli([*base, "--json"]) == 0
    data = _json(capsys.readouterr().out)
    assert data["decode_queue_p99_s"] > data["decode_queue_p50_s"] > 0     # 40 requests for 4 slots
    assert data["decode_queue_mean_s"] > 0 and "decode_queue_p90_s" in data
    assert _cli([*base, "--csv"]) == 0
    assert "decode_queue_p50_s" in capsys.readouterr().out.splitlines()[0]
    assert _cli(base) == 0
    assert "decode_queue_p99_s" in capsys.readouterr().out


def test_3_plots_are_written_atomically(tmp_path, capsys):
    out_dir = tmp_path / "new" / "nested"
    assert _cli(["simulate", "--synthetic", "4", "--no-progress", "--plot", str(out_dir)]) == 0
    capsys.readouterr()
    assert sorted(p.name for p in out_dir.iterdir()) == ["energy_split.png", "hbm_bandwidth.png",
                                                          "latency_cdf.png"]
    assert (out_dir / "latency_cdf.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_3_a_failed_plot_leaves_no_file(tmp_path, monkeypatch):
    from tricut.sim import plotting
    plt = plotting.pyplot()
    fig = plt.figure()
    target = tmp_path / "x.png"
    target.write_bytes(b"old")

    def broken(f, **kw):
        f.write(b"half a png")
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(fig, "savefig", broken)
    with pytest.raises(OSError):
        plotting.save_png(fig, target)
    plt.close(fig)
    assert os.listdir(tmp_path) == ["x.png"] and target.read_bytes() == b"old"


def test_6_bench_documents_its_synthetic_rounds(capsys):
    with pytest.raises(SystemExit):
        tricut.sim.cli.main(["bench", "--help"])
    assert "--trace, --limit, --rate and --rate-scale are refused" in " ".join(capsys.readouterr().out.split())


def test_counts_reported():
    counts = tried_per_command()
    assert sum(counts.values()) == len(CASES) and min(counts.values()) >= 10, counts
