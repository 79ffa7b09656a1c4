"""Every flag acts or is refused (issue 32): each command's mode table (``APPLIES``, declared once
beside its options; the mechanism in ``sim/options.py``) is walked, and for every flag and every
mode in which one of its needs does not hold, the command exits 2 with one line naming the flag,
before any simulation. The flag is given with its default value where it has one, so that a flag
given on the command line is refused whatever its value; for the typed options (simulate,
compare, tile run) the sweep's path (``from_texts``) refuses it too."""

from __future__ import annotations

import argparse

import pytest

from tricut.sim.cli import cdu_cmd, dsu_cmd
from tricut.sim.cli.main import build_parser
from tricut.sim.cli.simulate import run_options
from tricut.sim.cli.testing import assert_one_line_error, run_cli
from tricut.sim.cli.tile_cmd import tile_options
from tricut.sim.fast import run as fast_run
from tricut.sim.harness.tile import options as tile
from tricut.sim.options import InputError, given_on_command_line

TRACE = "sim/data/mooncake_conversation_sample.jsonl"
SESSIONS = "sim/data/agentic_sessions_sample.jsonl"

#: per command: (argv prefix, its table, the typed options class or None, modes as (dest, text)
#: pairs (a switch's text is None), a sample value for each flag of the table without a default)
SIMULATE_MODES = {
    "synthetic": [],
    "synthetic, closed loop": [("concurrency", "2")],
    "trace": [("trace", TRACE)],
    "trace, prefix cache": [("trace", TRACE), ("prefix_cache_tokens", "4096")],
    "sessions": [("sessions", SESSIONS)],
    "agentic": [("agentic", "sessions=2")],
    "agentic, park-early": [("agentic", "sessions=2"), ("park_policy", "park-early"), ("tiers", "grace-hopper")],
    "cuts te": [("cuts", "te")],
    "cuts none": [("cuts", "none")],
}
COMMANDS = {
    "simulate": (["simulate"], fast_run.APPLIES, fast_run.RunOptions, SIMULATE_MODES,
                 {"trace_format": "mooncake", "limit": "3", "degraded_at": "1", "concurrency": "2",
                  "park_policy": "keep", "restore_lead": "1", "prefix_spill": "G3",
                  "energy": "sim/fast/energy.json"}),
    "compare": (["compare"], fast_run.APPLIES, fast_run.RunOptions,
                {k: v for k, v in SIMULATE_MODES.items() if not k.startswith("cuts")} |
                {"edge (no CDU)": [("gpu", "edge")]},
                {"trace_format": "mooncake", "limit": "3", "degraded_at": "1", "concurrency": "2",
                 "park_policy": "keep", "restore_lead": "1", "prefix_spill": "G3",
                  "energy": "sim/fast/energy.json"}),
    "tile run": (["tile", "run"], tile.APPLIES, tile.TileRunOptions,
                 {"default": [], "prompt lengths": [("prompt_lens", "3,4")],
                  "cdu": [("policy", "static")], "dsu": [("dsu", None), ("sim", "verilator")]},
                 {"cdu_sets": "4", "cdu_ways": "2", "distance": "4", "watchdog": "100",
                  "faults": "0:0:0:0:1", "hang": "0:0:0:0:1"}),
    "dsu run": (["dsu", "run"], dsu_cmd.APPLIES, None,
                {"requests": [], "agentic": [("agentic", "sessions=2")],
                 "agentic, park": [("agentic", "sessions=2"), ("park_policy", "park")],
                 "faults": [("faults", "error:slot=0:step=1")]},
                {"park_policy": "keep", "round_s": "0.02", "restore_lead": "1"}),
    "cdu replay": (["cdu", "replay"], cdu_cmd.APPLIES, None,
                   {"pattern": [("pattern", "full")], "trace": [("trace", "t.jsonl")],
                    "pattern, rtl": [("pattern", "full"), ("rtl", None)]},
                   {"steps": "8", "batch": "1", "context": "4096", "l2_mb": "50", "implementation": "fast",
                    "deprecated_engine": "fast", "hbm_errors": "0.1", "wave": "w.vcd", "wave_window": "1:5"}),
}


def _parser(path):
    """The argparse parser of the command ``path`` (``["tile", "run"]``)."""
    p = build_parser()
    for name in path:
        sub = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction))
        p = sub.choices[name]
    return p


def _actions(path) -> dict[str, argparse.Action]:
    return {a.dest: a for a in _parser(path)._actions if a.option_strings}


def _argv(actions, pairs) -> list[str]:
    out = []
    for dest, text in pairs:
        out += [actions[dest].option_strings[0]] + ([] if text is None else [text])
    return out


def _sample(actions, samples, dest):
    """``(dest, text)``: the flag with its default where it has one (given explicitly), else a
    sample value; a switch without one."""
    a = actions[dest]
    if a.nargs == 0:
        return dest, None
    if dest in samples:
        return dest, samples[dest]
    default = a.default
    assert default is not None and not isinstance(default, (list, tuple)), dest
    return dest, str(default)


def _options(command, argv):
    """What the mode's needs are evaluated on: the typed options or the parsed flags."""
    path, _, cls, _, _ = COMMANDS[command]
    ns = _parser(path).parse_args(argv)
    if cls is fast_run.RunOptions:
        return run_options(ns)
    if cls is tile.TileRunOptions:
        return tile_options(ns)
    return ns


def _cases():
    for command, (path, applies, _, modes, samples) in COMMANDS.items():
        for dest in applies:
            for mode in modes:
                yield pytest.param(command, dest, mode, id=f"{command}-{dest}-{mode}")


@pytest.mark.parametrize("command,dest,mode", list(_cases()))
def test_a_flag_is_refused_where_it_would_not_act(command, dest, mode, capsys):
    path, applies, cls, modes, samples = COMMANDS[command]
    actions = _actions(path)
    mode_argv = _argv(actions, modes[mode])
    state = _options(command, mode_argv)                  # the mode alone is accepted
    if all(need.holds(state) for need in applies[dest]):
        return                                             # it acts here: nothing to refuse
    flag = actions[dest].option_strings[0]
    pair = _sample(actions, samples, dest)
    code, cap = run_cli(path + mode_argv + _argv(actions, [pair]), capsys)
    first = next(need for need in applies[dest] if not need.holds(state))
    assert_one_line_error(code, cap, first.message(flag))
    if cls is not None:                                   # a sweep grid's point: the same refusal
        items = [(d, t or "") for d, t in modes[mode] + [pair]]
        with pytest.raises(InputError, match=flag):
            cls.from_texts(items)


def test_every_need_of_every_table_is_walked():
    """Each need of each flag fails in at least one mode walked above (of a command with that
    table), so that the walk covers the whole table: a new mode-dependent flag needs a mode here."""
    failing = {}
    for command, (path, applies, _, modes, _) in COMMANDS.items():
        states = [_options(command, _argv(_actions(path), pairs)) for pairs in modes.values()]
        for dest, needs in applies.items():
            for need in needs:
                failing.setdefault(id(need), (command, dest, need.says, False))
                if any(not need.holds(state) for state in states):
                    failing[id(need)] = (command, dest, need.says, True)
    assert [k for k in failing.values() if not k[3]] == []


def test_a_flag_at_its_default_acts_silently_where_it_applies():
    """The refusal fires for a flag given, not for a default: the same options without the flag
    on the command line are accepted, and with it in a mode where it acts too."""
    fast_run.RunOptions(trace=TRACE)                       # --rate's default, not given
    with pytest.raises(InputError, match="--rate needs synthetic requests"):
        fast_run.RunOptions(trace=TRACE, given=frozenset({"rate"}))
    fast_run.RunOptions(concurrency=2, think_time=1.0)
    tile.TileRunOptions(policy="static", cdu_sets=8)


def test_given_on_command_line_names_only_what_argv_gives():
    p = build_parser()
    argv = ["simulate", "--rate", "10", "--cuts", "all", "--no-progress"]
    given = given_on_command_line(p, argv)
    assert {"rate", "cuts", "no_progress"} <= given
    assert not given & {"rate_scale", "prompt_tokens", "think_time", "seed"}
    assert p.parse_args(["simulate"]).rate == 10.0          # the defaults are back afterwards


def test_the_default_cuts_are_the_gpus_and_an_explicit_cdu_cut_on_edge_is_refused(capsys):
    opts = fast_run.RunOptions(gpu="edge")
    assert opts.cuts == ("te", "dsu") and opts.notes and "edge has no CDU" in opts.notes[0]
    assert fast_run.RunOptions(gpu="h100-sxm5").notes == ()
    for cuts in ("all", "cdu", "te,cdu,dsu"):
        code, cap = run_cli(["simulate", "--gpu", "edge", "--cuts", cuts, "--synthetic", "2"], capsys)
        assert_one_line_error(code, cap, "edge has no CDU")
