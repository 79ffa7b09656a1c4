"""Every shipped configuration runs with the defaults (issue 32): ``tricut simulate --gpu G`` for
every GPU of ``models/configs/gpus/``, ``compare`` on each, and the documented ``simulate`` /
``compare`` examples (``--help``, the Makefile's demo, ``docs/agentic.md``), read from where they
are documented so that an example changed into one that fails is caught.

Slow examples (about 60 s in all here): the ``--agentic`` example of ``--help`` (64 sessions on
one H100, ~25 s) and the demo's ``compare`` (Llama-3-70B on 8 H100s, the Mooncake sample,
~13 s) run in full; the ``docs/agentic.md`` figure's ``compare --park-policies all`` (~23 s) is
checked up to the run (every input check of ``prepare``), not run."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from tricut.sim.cli.main import build_parser
from tricut.sim.cli.simulate import run_options
from tricut.sim.cli.testing import run_cli
from tricut.sim.fast.run import prepare

ROOT = Path(__file__).resolve().parent.parent
GPUS = sorted(p.stem for p in (ROOT / "models" / "configs" / "gpus").glob("*.toml"))


def _no_error(code, cap):
    assert code == 0, cap.err
    assert "error" not in cap.err and "Traceback" not in cap.err, cap.err


@pytest.mark.parametrize("gpu", GPUS)
def test_simulate_runs_on_every_shipped_gpu_at_the_defaults(gpu, capsys):
    code, cap = run_cli(["simulate", "--gpu", gpu, "--json", "--no-progress"], capsys)
    _no_error(code, cap)
    summary = json.loads(cap.out)
    assert summary["requests"] == 200 and summary["failed"] == 0
    from tricut.models.config import load_gpu
    if not load_gpu(gpu).has_cdu:                 # the default turns the cdu cut off and says so
        assert f"tricut: note: {gpu} has no CDU: the cdu cut is off" in cap.err, cap.err
    else:
        assert "note:" not in cap.err, cap.err


@pytest.mark.parametrize("gpu", GPUS)
def test_compare_runs_on_every_shipped_gpu(gpu, capsys):
    code, cap = run_cli(["compare", "--gpu", gpu, "--synthetic", "16", "--json", "--no-progress"], capsys)
    _no_error(code, cap)
    columns = json.loads(cap.out)
    assert "baseline" in columns and len(columns) >= 4, list(columns)


def _help_agentic_example() -> str:
    """The SPEC of ``--agentic``'s help text (``e.g. '...'``)."""
    p = build_parser()
    sub = next(a for a in p._actions if a.dest == "command").choices["simulate"]
    text = next(a.help for a in sub._actions if a.dest == "agentic")
    return re.search(r"e\.g\. '([^']+)'", text).group(1)


def test_the_help_agentic_example_runs_under_the_default_park_policy(capsys):
    """It deadlocked under keep: parked sessions held the KV budget while their next turns
    waited for room; the host now evicts one (docs/agentic.md)."""
    code, cap = run_cli(["simulate", "--agentic", _help_agentic_example(), "--json", "--no-progress"], capsys)
    _no_error(code, cap)
    s = json.loads(cap.out)
    assert s["park_policy"] == "keep" and s["failed_turns"] == 0 and s["evictions"] > 0


def _makefile_command(tool: str) -> list[str]:
    """The Makefile's demo command ``tricut TOOL ...`` (backslash continuations joined)."""
    text = (ROOT / "Makefile").read_text().replace("\\\n", " ")
    line = next(ln for ln in text.splitlines() if f"/tricut {tool} " in ln)
    words = shlex.split(line.split(f"/tricut {tool} ", 1)[1].split(">")[0])
    return [tool] + words


def test_the_demo_compare_runs(tmp_path, capsys):
    argv = [str(tmp_path) if w == "$(DEMO)" else w for w in _makefile_command("compare")]
    assert "--plot" in argv
    code, cap = run_cli([*argv, "--no-progress"], capsys)
    _no_error(code, cap)
    assert "reading: te+cdu+dsu against baseline" in cap.out
    assert {p.name for p in tmp_path.glob("*.png")}, "no figure written"


def test_the_agentic_doc_example_passes_every_check(tmp_path):
    doc = (ROOT / "docs" / "agentic.md").read_text()
    line = next(ln for ln in doc.splitlines() if ln.startswith(".venv/bin/tricut compare "))
    argv = [str(tmp_path) if w == "DIR" else w for w in shlex.split(line)[1:]]
    parser = build_parser()
    args = parser.parse_args(argv)
    assert args.park_policies == ["keep", "park", "park-early", "drop"]
    prepared = prepare(run_options(args), args.park_policies)
    assert set(prepared.agentic) == set(args.park_policies) and len(prepared.sessions) == 24


@pytest.mark.parametrize("prefill", ["colocated", "disaggregated"])
def test_keep_evicts_instead_of_deadlocking_when_parked_sessions_fill_the_budget(prefill):
    """The mechanism of the --help example's deadlock, small: under keep, parked sessions fill a
    small KV budget while their next turns wait for room and nothing decodes. The host evicts a
    parked session's KV (its next turn recomputes the context) and every turn completes; the
    ledger, checked against the DSU model after every round, ends empty (nothing lost)."""
    from tricut.models.config import load_gpu, load_model
    from tricut.sim.fast.agentic import AgenticOptions, simulate_sessions
    from tricut.sim.fast.sessions import agentic
    from tricut.sim.fast.setup import ServingSetup
    sessions = agentic(n_sessions=12, rate=2.0, turns=4, gap_s=("lognormal", 2.0, 0.5), first_input=8192,
                       turn_input=("uniform", 256, 1024), output=("uniform", 8, 32), system_prompt_tokens=1024,
                       seed=1, max_context=131072)
    setup = ServingSetup(load_model("llama-3-70b"), load_gpu("h100-sxm5"), tp=8, kv_capacity_tokens=60_000)
    r = simulate_sessions(sessions, setup.step_model(("te", "cdu", "dsu")), setup.dsu_params(),
                          AgenticOptions("keep"), prefill=prefill)
    s = r.summary
    assert (s["failed_turns"], s["turns"]) == (0, 48) and s["evictions"] > 0
    assert s["output_tokens"] == sum(t.output_tokens for x in sessions for t in x.turns)
    assert sum(len(v) for v in r.turn_ttft_s.values()) == 48
    assert r.occupancy[-1, 1:4].tolist() == [0, 0, 0]
    assert s["parked_hbm_kv_bytes_peak"] <= 60_000 * setup.step_model(("te", "cdu", "dsu")).kv_token_bytes
