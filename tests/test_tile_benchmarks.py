"""The decode tile's co-simulation benchmarks (benchmarks/tile_equivalence.py,
benchmarks/tile_real_layer.py) on their smallest configuration: a run that passes exits 0 and
says so, a run with one flipped HBM bit exits 1 and says it failed.

Both scripts run here on the equivalence setup without the CDU of ``tests/test_tile_cosim.py``
(tiny-te, bf16, 2 engines, split-K at 5 tokens, 3 requests, max_ctx 16), whose Verilator
build (``-O0``) ``tests/test_tile_cosim_verilator.py`` shares: ~5 s per run once built, ~60 s
for the build otherwise.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tricut.rtl.tile.attention_layouts import kv_addr

ROOT = Path(__file__).resolve().parent.parent

#: the smallest configuration: tests/test_tile_cosim.py's EQUIV (one build for all)
SMALL = ["--prompt-lens", "1,2,3", "--steps", "3", "--split-tokens", "5", "--max-ctx", "16",
         "--opt=-O0", "--seed", "1"]
EQUIVALENCE = SMALL + ["--designs", "pipelined@16", "--dtypes", "bf16", "--policies", "none",
                       "--engines", "2",
                       "--max-batch", "0", "--long-context", "1", "--scheduler", "model"]
REAL_LAYER = SMALL + ["--model", "tiny-te", "--engines", "2", "--policies", "none",
                      "--lanes", "16"]
#: request 0's first V word of token 0 (its only prompt token), layer 0, KV head 0
_ADDR = kv_addr(0, 0, 0, 0, num_layers=2, num_kv_heads=2, max_ctx=16, head_dim=64, lanes=16)
CORRUPT = ["--corrupt", f"{_ADDR + 4},14"]


def _script(name, *args):
    return subprocess.run([sys.executable, str(ROOT / "benchmarks" / name), *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=900)


def test_equivalence_matrix_smallest_configuration_passes():
    r = _script("tile_equivalence.py", *EQUIVALENCE)
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    assert "**1 of 1 runs pass**" in r.stdout
    row = next(line for line in r.stdout.splitlines() if line.startswith("| pipelined@16, bf16"))
    # 3 rounds x 2 layers x 3 requests compared, tokens equal
    assert "| yes | 18 / 18 | yes | 3 |" in row, row


def test_equivalence_matrix_reports_a_corrupted_run_as_failing():
    r = _script("tile_equivalence.py", *EQUIVALENCE, *CORRUPT)
    assert r.returncode == 1, r.stdout + r.stderr[-3000:]
    assert "**0 of 1 runs pass**" in r.stdout and "| **NO** |" in r.stdout
    assert "\n\npipelined@16, bf16, none (no CDU), 2 eng, batch ≤ all: round 0 layer 0" in r.stdout


def test_real_layer_smallest_configuration_passes():
    r = _script("tile_real_layer.py", *REAL_LAYER)
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    assert "**1 of 1 runs pass**" in r.stdout
    row = next(line for line in r.stdout.splitlines() if line.startswith("| no CDU"))
    assert "| yes | 18 / 18 | yes |" in row and "every layer's cycles equal" in row, row


def test_real_layer_reports_a_corrupted_run_as_failing():
    r = _script("tile_real_layer.py", *REAL_LAYER, *CORRUPT)
    assert r.returncode == 1, r.stdout + r.stderr[-3000:]
    assert "**0 of 1 runs pass**" in r.stdout and "| **NO** |" in r.stdout


def test_tile_wing_counts_and_a_bad_revision_is_one_line():
    r = _script("tile_wing.py", "--base", "HEAD", "--head", "HEAD")   # no older commit needed
    assert r.returncode == 0, r.stderr
    assert "| import cycles among them | 0 | 0 |" in r.stdout
    assert "| private-name imports between them | 0 | 0 |" in r.stdout
    r = _script("tile_wing.py", "--base", "no-such-revision")
    assert r.returncode != 0 and r.stdout == ""
    assert r.stderr.strip().splitlines() == [
        "benchmarks/tile_wing.py: not a git revision: no-such-revision"]
