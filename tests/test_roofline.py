"""Roofline arithmetic, checked by hand against the formulas in docs/roofline.md."""

import json
import subprocess
import sys

import pytest

from tricut.models.config import KV_DTYPES, ConfigError, load_gpu, load_model
from tricut.models.roofline import roofline

H100 = load_gpu("h100-sxm5")
L8B = load_model("llama-3-8b")


def test_kv_bytes_per_token_formula():
    # 2 x layers x kv_heads x head_dim x bytes
    assert L8B.kv_bytes_per_token("bf16") == 2 * 32 * 8 * 128 * 2 == 131072
    assert L8B.kv_bytes_per_token("fp8") == 65536
    assert L8B.kv_bytes_per_token("nvfp4") == 2 * 32 * 8 * 128 * 4.5 / 8
    assert load_model("llama-3-70b").kv_bytes_per_token("bf16") == 2 * 80 * 8 * 128 * 2


def test_step_floor_by_hand():
    r = roofline(L8B, H100, "bf16", context=4096, batch=4)
    # Every weight but the input embedding table (untied): 8,030,261,248 - 128256*4096 params.
    weights = (8_030_261_248 - 128256 * 4096) * 2
    kv = 4 * 4096 * 131072
    assert r.weight_bytes == weights
    assert r.kv_bytes_per_step == kv
    assert r.step_floor_s == pytest.approx((weights + kv) / 3.35e12, rel=1e-12)
    assert r.tokens_per_s_ceiling == pytest.approx(4 / r.step_floor_s)
    assert r.request_tokens_per_s_ceiling == pytest.approx(1 / r.step_floor_s)
    free = 80 * 2**30 - 8_030_261_248 * 2
    assert r.kv_tokens_fit == free // 131072


def test_fp8_holds_twice_bf16_and_nvfp4_about_3_6x():
    fits = {d: roofline(L8B, H100, d, 1024, 1).kv_tokens_fit for d in KV_DTYPES}
    assert fits["fp8"] / fits["bf16"] == pytest.approx(2.0, rel=1e-5)
    assert fits["nvfp4"] / fits["fp8"] == pytest.approx(8 / 4.5, rel=1e-5)


def test_tensor_parallel_splits_weights_and_kv():
    m = load_model("llama-3-70b")
    one = roofline(m, H100, "bf16", 8192, 8, tp=1)
    eight = roofline(m, H100, "bf16", 8192, 8, tp=8)
    assert eight.weight_bytes == pytest.approx(one.weight_bytes / 8)
    assert eight.kv_bytes_per_step == pytest.approx(one.kv_bytes_per_step / 8)
    assert not one.weights_fit and one.kv_tokens_fit == 0
    assert eight.weights_fit and eight.kv_tokens_fit > 0
    # tp=16 > 8 KV heads: heads are replicated, each GPU still reads one head's KV.
    sixteen = roofline(m, H100, "bf16", 8192, 8, tp=16)
    assert sixteen.kv_bytes_per_step == pytest.approx(one.kv_bytes_per_step / 8)


@pytest.mark.parametrize("kwargs,message", [
    (dict(context=0, batch=1), "context must be a positive integer"),
    (dict(context=10, batch=-1), "batch must be a positive integer"),
    (dict(context=10, batch=1, tp=3), "tp 3 must divide"),
    (dict(context=200_000, batch=1), "exceeds llama-3-8b's max_context"),
])
def test_bad_parameters(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        roofline(L8B, H100, "bf16", **kwargs)


def test_unknown_kv_dtype():
    with pytest.raises(ConfigError, match="unknown KV dtype 'int4'"):
        roofline(L8B, H100, "int4", 1, 1)


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "tricut.sim", *args], capture_output=True, text=True)


def test_cli_json_keys_and_values():
    out = _cli("roofline", "--model", "llama-3-8b", "--gpu", "h100-sxm5", "--kv-dtype", "fp8",
               "--context", "4096", "--batch", "4", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    for key in ("weight_bytes", "kv_bytes_per_token", "kv_bytes_per_step", "step_floor_s",
                "tokens_per_s_ceiling", "kv_tokens_fit"):
        assert key in data
    expected = roofline(L8B, H100, "fp8", 4096, 4)
    assert data["step_floor_s"] == expected.step_floor_s
    assert data["kv_tokens_fit"] == expected.kv_tokens_fit


def test_cli_tiny_te():
    """The TE-sized test model is a model id like any other: 2 layers x 2 KV heads x 64 x
    2 bytes x (K, V) = 1 KiB of bf16 KV per token; weights all but the 256 x 512 embedding."""
    out = _cli("roofline", "--model", "tiny-te", "--gpu", "h100-sxm5", "--context", "4096",
               "--batch", "3", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    weights = (4_721_152 - 256 * 512) * 2
    assert (data["model"], data["kv_bytes_per_token"], data["weight_bytes"]) == ("tiny-te", 1024, weights)
    assert data["kv_bytes_per_step"] == 3 * 4096 * 1024
    assert data["step_floor_s"] == pytest.approx((weights + 3 * 4096 * 1024) / 3.35e12, rel=1e-12)
    assert data["kv_tokens_fit"] == (80 * 2**30 - 4_721_152 * 2) // 1024
    table = _cli("roofline", "--model", "tiny-te", "--context", "4096",
                 "--kv-dtype", "bf16,fp8,nvfp4")
    assert table.returncode == 0 and table.stdout.startswith("tiny-te on h100-sxm5")
    assert len(table.stdout.splitlines()) == 2 + 3 + 1      # title, header, rule, 3 rows
    too_long = _cli("roofline", "--model", "tiny-te", "--context", "4097")
    assert too_long.returncode == 2 and "exceeds tiny-te's max_context 4096" in too_long.stderr


def test_cli_sweep_table_and_json_list():
    out = _cli("roofline", "--context", "1024,8192", "--kv-dtype", "bf16,nvfp4", "--json")
    assert out.returncode == 0
    assert [(r["kv_dtype"], r["context"]) for r in json.loads(out.stdout)] == \
        [("bf16", 1024), ("bf16", 8192), ("nvfp4", 1024), ("nvfp4", 8192)]
    table = _cli("roofline", "--context", "1024,8192")
    assert table.returncode == 0 and "floor ms" in table.stdout and len(table.stdout.splitlines()) == 5


@pytest.mark.parametrize("args,needle", [
    (["roofline", "--context", "abc"], "--context: 'abc' is not an integer"),
    (["roofline", "--context", "0"], "--context: 0 is not positive"),
    (["roofline", "--kv-dtype", "int4"], "--kv-dtype: 'int4' is not one of"),
    (["roofline", "--tp", "0"], "tp must be a positive integer"),
    (["roofline", "--gpu", "b200"], "unknown gpu 'b200'"),
    (["frobnicate"], "invalid choice: 'frobnicate'"),
])
def test_cli_bad_flags(args, needle):
    out = _cli(*args)
    assert out.returncode == 2
    assert needle in out.stderr
    assert "Traceback" not in out.stderr


def test_cli_help_explains():
    out = _cli("roofline", "--help")
    assert out.returncode == 0 and "HBM bandwidth" in out.stdout and "--kv-dtype" in out.stdout
