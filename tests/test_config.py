"""Config files: every shipped one loads with the right numbers; every kind of mistake in a
user's file gives one error line naming the file and the field."""

import subprocess
from importlib import resources
import sys

import pytest

from tricut.models.config import ConfigError, gpu_ids, load_gpu, load_model, model_ids

GOOD_GPU = """\
name = "mine"
sm_count = 10
sm_clock_ghz = 1.5
l1_kib_per_sm = 128
l2_mib = 8
hbm_gib = 16
hbm_bandwidth_tb_s = 1.0
l1_latency_ns = 1.0
l2_latency_ns = 20.0
hbm_latency_ns = 500.0
bf16_tflops = 100.0
fp8_tflops = 200.0
nvlink_gb_s = 50.0
has_cdu = true
te_engines_per_sm = 2
te_clock_ghz = 1.5
cdu_clock_ghz = 1.4
dsu_cores = 2
dsu_clock_ghz = 1.0
"""


def test_shipped_ids():
    assert model_ids() == ["llama-2-70b", "llama-2-7b", "llama-3-70b", "llama-3-70b-kv1", "llama-3-8b", "llama-3-8b-attn1", "llama-3-8b-kv1", "qwen2-72b", "qwen2-7b", "qwen3-32b", "qwen3-8b", "tiny", "tiny-te"]
    assert gpu_ids() == ["edge", "h100-sxm5", "h200"]


@pytest.mark.parametrize("name,layers,hidden,heads,kv,ffn,vocab,params_b", [
    ("llama-3-8b", 32, 4096, 32, 8, 14336, 128256, 8.03),
    ("llama-3-70b", 80, 8192, 64, 8, 28672, 128256, 70.55),
    ("qwen2-7b", 28, 3584, 28, 4, 18944, 152064, 7.62),
    ("qwen2-72b", 80, 8192, 64, 8, 29568, 152064, 72.71),
])
def test_model_configs_match_published_shapes(name, layers, hidden, heads, kv, ffn, vocab, params_b):
    m = load_model(name)
    assert (m.num_layers, m.hidden_size, m.num_heads, m.num_kv_heads, m.ffn_size, m.vocab_size) == \
        (layers, hidden, heads, kv, ffn, vocab)
    assert m.head_dim == 128
    # Parameter counts published with the checkpoints (8.03B, 70.6B, 7.62B, 72.7B).
    assert m.param_count() / 1e9 == pytest.approx(params_b, abs=0.01)


def test_tiny_te_is_a_llama_the_te_can_run():
    """tiny-te: head_dim 64 (the TE's smallest; tiny has 16), GQA group 4, E = H x D."""
    m = load_model("tiny-te")
    assert (m.name, m.family, m.num_layers, m.hidden_size, m.num_heads, m.num_kv_heads, m.head_dim,
            m.ffn_size, m.vocab_size, m.max_context, m.weight_dtype) == \
        ("tiny-te", "llama", 2, 512, 8, 2, 64, 1024, 256, 4096, "bf16")
    assert (m.rope_theta, m.rms_norm_eps, m.qkv_bias, m.tie_embeddings) == (1e4, 1e-5, False, False)
    assert m.group_size == 4 and m.hidden_size == m.num_heads * m.head_dim
    # per layer: q and o 512x512, k and v 128x512, gate/up/down 1024x512, two norms;
    # embedding and LM head 256x512, final norm
    per_layer = 2 * 512 * 512 + 2 * 128 * 512 + 3 * 1024 * 512 + 2 * 512
    assert m.param_count() == 2 * per_layer + 2 * 256 * 512 + 512 == 4_721_152
    assert m.kv_bytes_per_token("bf16") == 2 * 2 * 2 * 64 * 2


def test_gpu_configs():
    h100 = load_gpu("h100-sxm5")
    assert (h100.sm_count, h100.l2_bytes, h100.hbm_bytes) == (132, 50 * 2**20, 80 * 2**30)
    assert h100.hbm_bandwidth == 3.35e12 and h100.sm_clock_hz == 1.98e9
    assert (h100.dsu_cores, h100.dsu_clock_hz, h100.has_cdu) == (4, 1.2e9, True)
    assert (h100.te_engines_per_sm, h100.te_clock_hz, h100.cdu_clock_hz) == (4, 1.98e9, 1.98e9)
    h200 = load_gpu("h200")
    assert h200.hbm_bandwidth == 4.8e12
    assert (h200.te_engines_per_sm, h200.te_clock_hz, h200.cdu_clock_hz) == (4, 1.98e9, 1.98e9)
    edge = load_gpu("edge")
    assert edge.has_cdu is False
    assert (edge.sm_count, edge.te_engines_per_sm, edge.te_clock_hz, edge.dsu_clock_hz) == \
        (16, 4, 1.3e9, 1.2e9)


def test_user_file_loads(tmp_path):
    f = tmp_path / "mine.toml"
    f.write_text(GOOD_GPU)
    gpu = load_gpu(f)
    assert gpu.hbm_bytes == 16 * 2**30
    assert (gpu.te_engines_per_sm, gpu.te_clock_hz, gpu.cdu_clock_hz) == (2, 1.5e9, 1.4e9)
    assert load_gpu(str(f)).name == "mine"


@pytest.mark.parametrize("edit,message", [
    (lambda t: t.replace("sm_count = 10", "sm_count = -3"), "field 'sm_count': must be a positive"),
    (lambda t: t.replace("sm_count = 10", 'sm_count = "ten"'), "field 'sm_count': expected int, got str"),
    (lambda t: t.replace("sm_count = 10", "sm_count = 10.5"), "field 'sm_count': expected int, got float"),
    (lambda t: t.replace("has_cdu = true", "has_cdu = 1"), "field 'has_cdu': expected bool, got int"),
    (lambda t: t.replace("hbm_gib = 16", "hbm_gib = true"), "field 'hbm_gib': expected int, got bool"),
    (lambda t: t.replace("l2_mib = 8", "l2_mib = 0"), "field 'l2_mib': must be a positive"),
    (lambda t: t.replace("hbm_bandwidth_tb_s = 1.0", "hbm_bandwidth_tb_s = nan"), "field 'hbm_bandwidth_tb_s'"),
    (lambda t: t + "hbm_colour = 3\n", "unknown field 'hbm_colour'"),
    (lambda t: t.replace("fp8_tflops = 200.0\n", ""), "missing field 'fp8_tflops'"),
    (lambda t: t.replace("sm_count = 10", "sm_count = "), "not valid TOML"),
    (lambda t: t.replace("te_engines_per_sm = 2", "te_engines_per_sm = 0"),
     "field 'te_engines_per_sm': must be a positive"),
    (lambda t: t.replace("te_engines_per_sm = 2", "te_engines_per_sm = 2.5"),
     "field 'te_engines_per_sm': expected int, got float"),
    (lambda t: t.replace("te_clock_ghz = 1.5", "te_clock_ghz = -1.5"), "field 'te_clock_ghz': must be a positive"),
    (lambda t: t.replace("cdu_clock_ghz = 1.4", 'cdu_clock_ghz = "fast"'), "field 'cdu_clock_ghz': expected float"),
    (lambda t: t.replace("te_clock_ghz = 1.5\n", ""), "missing field 'te_clock_ghz'"),
])
def test_bad_gpu_file_names_file_and_field(tmp_path, edit, message):
    f = tmp_path / "bad.toml"
    f.write_text(edit(GOOD_GPU))
    with pytest.raises(ConfigError) as e:
        load_gpu(f)
    assert str(f) in str(e.value) and message in str(e.value)
    assert "\n" not in str(e.value)


def test_bad_model_fields(tmp_path):
    text = (resources.files("tricut.models.configs") / "models" / "tiny.toml").read_text()
    cases = [
        (text.replace("num_kv_heads = 2", "num_kv_heads = 3"), "'num_kv_heads': 3 does not divide"),
        (text.replace('family = "llama"', 'family = "gpt"'), "'family': expected one of"),
        (text.replace("head_dim = 16", "head_dim = 15"), "'head_dim': RoPE needs an even"),
        (text.replace('weight_dtype = "bf16"', 'weight_dtype = "int3"'), "'weight_dtype'"),
        (text.replace("num_layers = 2", "num_layers = -2"), "'num_layers': must be a positive"),
    ]
    for i, (body, message) in enumerate(cases):
        f = tmp_path / f"m{i}.toml"
        f.write_text(body)
        with pytest.raises(ConfigError, match=message):
            load_model(f)


def test_missing_file_and_unknown_id(tmp_path):
    with pytest.raises(ConfigError, match="nope.toml: file not found"):
        load_model(tmp_path / "nope.toml")
    with pytest.raises(ConfigError, match="unknown gpu 'b200'"):
        load_gpu("b200")


@pytest.mark.parametrize("flag", ["--gpu", "--model"])
def test_cli_reports_one_line_and_exit_2(tmp_path, flag):
    f = tmp_path / "broken.toml"
    f.write_text("sm_count = -1\n")
    out = subprocess.run([sys.executable, "-m", "tricut.sim", "roofline", flag, str(f)],
                         capture_output=True, text=True)
    assert out.returncode == 2
    assert out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tricut: error: ") and str(f) in lines[0]
    assert "Traceback" not in out.stderr


@pytest.mark.parametrize("field, bad", [("te_engines_per_sm", "0"), ("te_clock_ghz", "-1.0"),
                                        ("cdu_clock_ghz", '"fast"')])
def test_cli_bad_unit_field_one_line_exit_2_nothing_written(tmp_path, field, bad):
    """The unit fields the fast model's timing now reads, given wrong through the CLI."""
    lines = [f"{field} = {bad}" if line.startswith(f"{field} =") else line
             for line in GOOD_GPU.splitlines()]
    assert lines != GOOD_GPU.splitlines()
    f = tmp_path / "gpu.toml"
    f.write_text("\n".join(lines) + "\n")
    plots = tmp_path / "plots"
    out = subprocess.run([sys.executable, "-m", "tricut.sim", "simulate", "--gpu", str(f),
                          "--synthetic", "4", "--cuts", "te", "--plot", str(plots)],
                         capture_output=True, text=True)
    assert out.returncode == 2 and out.stdout == ""
    err = out.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("tricut: error: ") and field in err[0], err
    assert not plots.exists()
