"""Trace readers and synthetic workloads: real files parse to the published statistics, and
every malformed line is reported with its file and line number."""

import math
from pathlib import Path

import numpy as np
import pytest

from tricut.sim.fast.workload import (
    TraceError, read_azure, read_mooncake, read_trace, read_vidur, scale_rate, synthetic)

TRACES = Path(__file__).resolve().parents[2] / "shared" / "traces"


@pytest.mark.parametrize("name,rows,span,prompt_mean,output_mean", [
    ("mooncake/conversation_trace.jsonl", 12031, 3537, 12035, 343),
    ("mooncake/synthetic_trace.jsonl", 3993, 1022, 15325, 149),
    ("azure_llm_2023/AzureLLMInferenceTrace_code.csv", 8819, 3436, 2048, 28),
    ("azure_llm_2023/AzureLLMInferenceTrace_conv.csv", 19366, 3502, 1155, 211),
])
def test_shared_traces_match_their_readme(name, rows, span, prompt_mean, output_mean):
    reqs = read_trace(TRACES / name)
    assert len(reqs) == rows
    assert reqs[0].arrival_s == 0 and reqs[-1].arrival_s == pytest.approx(span, abs=1)
    assert np.mean([r.prompt_tokens for r in reqs]) == pytest.approx(prompt_mean, abs=0.6)
    assert np.mean([r.output_tokens for r in reqs]) == pytest.approx(output_mean, abs=0.6)
    assert all(a.arrival_s <= b.arrival_s for a, b in zip(reqs, reqs[1:]))


def test_mooncake_fields(tmp_path):
    f = tmp_path / "t.jsonl"
    f.write_text('{"timestamp": 1500, "input_length": 10, "output_length": 3, "hash_ids": [7]}\n'
                 '\n'
                 '{"timestamp": 500, "input_length": 20, "output_length": 4}\n')
    a, b = read_mooncake(f)
    # Sorted by arrival and shifted to start at 0; ms -> s.
    assert (a.prompt_tokens, a.arrival_s, a.prefix_hashes) == (20, 0.0, ())
    assert (b.prompt_tokens, b.arrival_s, b.prefix_hashes) == (10, 1.0, (7,))


def test_azure_fraction_and_vidur(tmp_path):
    f = tmp_path / "a.csv"
    f.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                 "2023-11-16 18:17:03.9799600,4808,10\n2023-11-16 18:17:05.0319600,3180,8\n")
    a, b = read_azure(f)
    assert b.arrival_s == pytest.approx(1.052, abs=1e-6) and b.output_tokens == 8
    v = tmp_path / "v.csv"
    v.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n0.5,100,20\n2.0,50,5\n")
    assert [(r.arrival_s, r.prompt_tokens) for r in read_vidur(v)] == [(0.0, 100), (1.5, 50)]
    assert read_trace(v)[1].output_tokens == 5


@pytest.mark.parametrize("body,message", [
    ('{"timestamp": 0, "input_length": 5, "output_length": 1}\n{"timestamp": 1, "input_len',
     ":2: not valid JSON"),
    ('{"timestamp": 0, "input_length": 5}\n', ":1: missing field 'output_length'"),
    ('{"timestamp": -4, "input_length": 5, "output_length": 1}\n', ":1: timestamp must be a finite"),
    ('{"timestamp": 0, "input_length": 0, "output_length": 1}\n', ":1: input_length must be >= 1"),
    ('{"timestamp": 0, "input_length": "x", "output_length": 1}\n', ":1: input_length must be an integer"),
    ('{"timestamp": 0, "input_length": 5, "output_length": 2.5}\n', ":1: output_length must be an integer"),
    ('{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": "a"}\n', ":1: hash_ids"),
    ('[1, 2]\n', ":1: expected a JSON object"),
    ('', ": no requests"),
])
def test_mooncake_malformed(tmp_path, body, message):
    f = tmp_path / "bad.jsonl"
    f.write_text(body)
    with pytest.raises(TraceError) as e:
        read_mooncake(f)
    assert str(e.value).startswith(str(f)) and message in str(e.value)


@pytest.mark.parametrize("body,message", [
    ("TIMESTAMP,ContextTokens\n", ":1: header lacks column 'GeneratedTokens'"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.1,5,1\n2023-11-16 18:17:04,5\n",
     ":3: expected 3 columns"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,5,1\n", ":2: TIMESTAMP must be"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03,-5,1\n", ":2: ContextTokens must be >= 1"),
])
def test_azure_malformed(tmp_path, body, message):
    f = tmp_path / "bad.csv"
    f.write_text(body)
    with pytest.raises(TraceError, match=".*" + message.replace("(", r"\(")):
        read_azure(f)


def test_format_guessing_and_missing_file(tmp_path):
    with pytest.raises(TraceError, match="file not found"):
        read_trace(tmp_path / "none.jsonl")
    odd = tmp_path / "odd.csv"
    odd.write_text("a,b,c\n1,2,3\n")
    with pytest.raises(TraceError, match="unknown trace format"):
        read_trace(odd)
    with pytest.raises(TraceError, match="unknown trace format 'bogus'"):
        read_trace(odd, fmt="bogus")
    binary = tmp_path / "bin.jsonl"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(TraceError, match="not UTF-8"):
        read_trace(binary)


def test_synthetic_poisson_and_lengths():
    reqs = synthetic(20000, rate=50.0, prompt=("uniform", 100, 200), output=("lognormal", 64, 0.5), seed=3)
    gaps = np.diff([r.arrival_s for r in reqs])
    assert np.mean(gaps) == pytest.approx(1 / 50, rel=0.03)
    assert np.std(gaps) == pytest.approx(1 / 50, rel=0.05)   # exponential: std == mean
    prompts = [r.prompt_tokens for r in reqs]
    assert min(prompts) == 100 and max(prompts) == 200
    assert np.median([r.output_tokens for r in reqs]) == pytest.approx(64, rel=0.05)
    assert synthetic(5, 1.0, seed=3) == synthetic(5, 1.0, seed=3)
    burst = synthetic(4, math.inf, prompt=7, output=9)
    assert [(r.arrival_s, r.prompt_tokens, r.output_tokens) for r in burst] == [(0.0, 7, 9)] * 4


@pytest.mark.parametrize("kwargs,message", [
    (dict(n=0, rate=1.0), "request count"),
    (dict(n=3, rate=0.0), "rate must be > 0"),
    (dict(n=3, rate=1.0, prompt=0), "prompt length must be >= 1"),
    (dict(n=3, rate=1.0, output=("uniform", 5, 2)), "uniform bounds"),
    (dict(n=3, rate=1.0, output="long"), "expected an int"),
])
def test_synthetic_errors(kwargs, message):
    with pytest.raises(TraceError, match=message):
        synthetic(**kwargs)


def test_scale_rate():
    reqs = synthetic(10, rate=2.0, seed=1)
    fast = scale_rate(reqs, 4.0)
    assert [f.arrival_s for f in fast] == pytest.approx([r.arrival_s / 4 for r in reqs])
    with pytest.raises(TraceError):
        scale_rate(reqs, 0)
