"""Bad input to the agentic-session flags of `tricut simulate` / `tricut compare`: one line
`tricut: error: ...`, exit 2, nothing printed on stdout (docs/agentic.md, "Bad input")."""

from __future__ import annotations

import pytest

from tricut.sim.cli.testing import assert_one_line_error, run_cli

S = ["--model", "llama-3-70b", "--tp", "8"]
SAMPLE = "sim/data/agentic_sessions_sample.jsonl"
GOOD_TIER = """name = "t"
[g2]
link = "test link"
capacity_gib = 100
bandwidth_gb_s = 50
latency_us = 5
"""

FILES = {
    "not-json": "{nope\n",
    "missing-output": '{"session": 0, "turn": 0, "arrival_s": 0, "input_tokens": 100}\n',
    "gap-on-turn-0": '{"session": 0, "turn": 0, "gap_s": 1, "input_tokens": 100, "output_tokens": 5}\n',
    "turn-skipped": ('{"session": 0, "turn": 0, "arrival_s": 0, "input_tokens": 100, "output_tokens": 5}\n'
                     '{"session": 0, "turn": 2, "gap_s": 1, "input_tokens": 100, "output_tokens": 5}\n'),
    "negative-gap": ('{"session": 0, "turn": 0, "arrival_s": 0, "input_tokens": 100, "output_tokens": 5}\n'
                     '{"session": 0, "turn": 1, "gap_s": -1, "input_tokens": 100, "output_tokens": 5}\n'),
    "too-long": '{"session": 0, "turn": 0, "arrival_s": 0, "input_tokens": 200000, "output_tokens": 5}\n',
    "empty": "",
}
TIERS = {
    "zero-capacity": GOOD_TIER.replace("capacity_gib = 100", "capacity_gib = 0"),
    "negative-bandwidth": GOOD_TIER.replace("bandwidth_gb_s = 50", "bandwidth_gb_s = -50"),
    "nan-latency": GOOD_TIER.replace("latency_us = 5", "latency_us = nan"),
    "unknown-field": GOOD_TIER + "speed = 1\n",
    "g2-only": GOOD_TIER,
}

CASES = [
    # session files
    ("simulate", "file-not-json", ["--sessions", "@not-json"], "not-json.jsonl:1"),
    ("simulate", "file-missing-output", ["--sessions", "@missing-output"], "output_tokens"),
    ("simulate", "file-gap-on-turn-0", ["--sessions", "@gap-on-turn-0"], "gap-on-turn-0.jsonl:1"),
    ("simulate", "file-turn-skipped", ["--sessions", "@turn-skipped"], "turn-skipped.jsonl:2"),
    ("simulate", "file-negative-gap", ["--sessions", "@negative-gap"], "negative-gap.jsonl:2"),
    ("simulate", "file-too-long", ["--sessions", "@too-long"], "max_context"),
    ("simulate", "file-empty", ["--sessions", "@empty"], "empty.jsonl"),
    ("simulate", "file-missing", ["--sessions", "@dir/none.jsonl"], "none.jsonl"),
    ("simulate", "sessions-and-trace", ["--sessions", SAMPLE, "--trace", SAMPLE], "not allowed with argument"),
    # synthetic spec
    ("simulate", "spec-unknown-key", ["--agentic", "sessions=4,colour=red"], "colour"),
    ("simulate", "spec-bad-value", ["--agentic", "sessions=-4"], "sessions"),
    ("simulate", "spec-bad-gap", ["--agentic", "gap=lognormal:x:1"], "gap"),
    # tiers
    ("simulate", "tier-unknown", ["--sessions", SAMPLE, "--tiers", "hyperspace"], "hyperspace"),
    ("simulate", "tier-zero-capacity", ["--sessions", SAMPLE, "--tiers", "@tier:zero-capacity"], "capacity_gib"),
    ("simulate", "tier-negative-bandwidth", ["--sessions", SAMPLE, "--tiers", "@tier:negative-bandwidth"],
     "bandwidth_gb_s"),
    ("simulate", "tier-nan-latency", ["--sessions", SAMPLE, "--tiers", "@tier:nan-latency"], "latency_us"),
    ("simulate", "tier-unknown-field", ["--sessions", SAMPLE, "--tiers", "@tier:unknown-field"], "speed"),
    # policies
    ("simulate", "park-without-g2", ["--sessions", SAMPLE, "--park-policy", "park"], "needs a G2 tier"),
    ("simulate", "park-early-tiers-none", ["--sessions", SAMPLE, "--park-policy", "park-early", "--tiers", "none"],
     "needs a G2 tier"),
    ("simulate", "park-policy-unknown", ["--sessions", SAMPLE, "--park-policy", "hoard"], "argument --park-policy"),
    ("simulate", "park-policy-without-sessions", ["--park-policy", "park"], "--park-policy applies to agentic sessions"),
    ("simulate", "tiers-without-sessions", ["--tiers", "grace-hopper"], "--tiers applies to agentic sessions"),
    ("simulate", "restore-lead-not-early", ["--sessions", SAMPLE, "--tiers", "grace-hopper", "--park-policy", "park",
                                            "--restore-lead", "1"], "--restore-lead applies to --park-policy park-early"),
    ("simulate", "restore-lead-negative", ["--sessions", SAMPLE, "--restore-lead", "-1"], "argument --restore-lead"),
    ("simulate", "chunked", ["--sessions", SAMPLE, "--prefill", "chunked"], "not chunked"),
    ("simulate", "concurrency", ["--sessions", SAMPLE, "--concurrency", "4"], "--concurrency does not apply to sessions"),
    ("simulate", "limit-with-sessions", ["--sessions", SAMPLE, "--limit", "5"], "--limit does not apply to sessions"),
    ("simulate", "prefix-cache-negative", ["--sessions", SAMPLE, "--prefix-cache-tokens", "-5"],
     "argument --prefix-cache-tokens"),
    ("simulate", "prefix-cache-too-big", ["--sessions", SAMPLE, "--prefix-cache-tokens", "10000000000"],
     "leaves no KV budget"),
    ("simulate", "prefix-spill-without-cache", ["--sessions", SAMPLE, "--tiers", "grace-hopper",
                                                "--prefix-spill", "G3.5"], "--prefix-spill applies to a prefix cache"),
    ("simulate", "prefix-spill-without-sessions", ["--prefix-spill", "G3"], "--prefix-spill applies to a prefix cache"),
    ("simulate", "prefix-spill-bad-tier", ["--sessions", SAMPLE, "--prefix-cache-tokens", "4096",
                                           "--prefix-spill", "G2"], "argument --prefix-spill: invalid choice"),
    ("simulate", "prefix-spill-tier-absent", ["--sessions", SAMPLE, "--prefix-cache-tokens", "4096",
                                              "--tiers", "@tier:g2-only", "--prefix-spill", "G3.5"],
     "has no G3.5 tier"),
    ("compare", "park-policies-without-sessions", ["--park-policies", "all"], "give --sessions or --agentic"),
    ("compare", "park-policies-bad", ["--sessions", SAMPLE, "--park-policies", "keep,hoard"], "'hoard' is not a park policy"),
    ("compare", "park-policies-repeat", ["--sessions", SAMPLE, "--park-policies", "keep,keep"], "repeats a policy"),
    ("compare", "park-policies-and-policy", ["--sessions", SAMPLE, "--park-policies", "all", "--park-policy", "keep"],
     "drop --park-policy"),
    ("compare", "sessions-without-park-policies", ["--sessions", SAMPLE], "add --park-policies"),
    ("compare", "park-policies-need-g2", ["--sessions", SAMPLE, "--park-policies", "keep,park"], "needs a G2 tier"),
]


def _expand(argv, tmp_path):
    out = []
    for a in argv:
        if a.startswith("@tier:"):
            f = tmp_path / f"{a[6:]}.toml"
            f.write_text(TIERS[a[6:]])
            out.append(str(f))
        elif a.startswith("@dir/"):
            out.append(str(tmp_path / a[5:]))
        elif a.startswith("@"):
            f = tmp_path / f"{a[1:]}.jsonl"
            f.write_text(FILES[a[1:]])
            out.append(str(f))
        else:
            out.append(a)
    return out


@pytest.mark.parametrize("command,case,argv,needle", CASES, ids=[c[1] for c in CASES])
def test_bad_input_is_one_line(command, case, argv, needle, tmp_path, capsys):
    code, cap = run_cli([command, *S, *_expand(argv, tmp_path)], capsys)
    assert_one_line_error(code, cap, needle)
