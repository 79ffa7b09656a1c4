"""Bad input to ``tricut dsu run``: every case ends with exactly one stderr line
``tricut: error: ...`` naming what is wrong, exit status 2, no traceback -- and before any
work: the simulation (``run_plan``) and the firmware build are replaced by stubs that fail
the test if they are reached.

``BAD_INPUTS`` (module level) lists ``(command, case id)`` for counting."""

import json

import pytest
from tricut.sim.cli.testing import assert_one_line_error, expand_argv, run_cli


R = ["dsu", "run"]

# requests files: name -> content (str or bytes); "@name" in a case's argv is its path
_OK = {"prompt_tokens": 10, "max_new_tokens": 2}


def _j(**kw):
    return json.dumps({k: v for k, v in dict(_OK, **kw).items() if v is not ...})


def _s(session, turn, inp, out, t=0.02, **kw):
    """One line of a session file (turn 0: ``t`` is arrival_s, else gap_s)."""
    row = {"session": session, "turn": turn, ("gap_s" if turn else "arrival_s"): t,
           "input_tokens": inp, "output_tokens": out, **kw}
    return json.dumps(row) + "\n"


FILES = {
    "empty": "",
    "blank_lines": "\n   \n\n",
    "not_json": "prompt_tokens=10\n",
    "truncated": '{"prompt_tokens": 10, "max_new',
    "array_line": "[1, 2]\n",
    "null_line": "null\n",
    "string_line": '"hello"\n',
    "unknown_field": _j(colour=1) + "\n",
    "no_prompt": _j(prompt_tokens=...) + "\n",
    "no_max_new": _j(max_new_tokens=...) + "\n",
    "null_prompt": _j(prompt_tokens=None) + "\n",
    "prompt_zero": _j(prompt_tokens=0) + "\n",
    "prompt_negative": _j(prompt_tokens=-5) + "\n",
    "prompt_string": _j(prompt_tokens="10") + "\n",
    "prompt_float": _j(prompt_tokens=10.0) + "\n",
    "prompt_bool": _j(prompt_tokens=True) + "\n",
    "prompt_list": _j(prompt_tokens=[10]) + "\n",
    "prompt_over_field": _j(prompt_tokens=1 << 23) + "\n",
    "max_new_over_field": _j(max_new_tokens=1 << 16) + "\n",
    "max_new_zero": _j(max_new_tokens=0) + "\n",
    "id_negative": _j(id=-1) + "\n",
    "id_over_field": _j(id=1 << 16) + "\n",
    "id_huge": _j(id=10 ** 30) + "\n",
    "id_duplicate": _j(id=3) + "\n" + _j(id=3) + "\n",
    "default_id_clash": _j() + "\n" + _j(id=0) + "\n",
    "priority_4": _j(priority=4) + "\n",
    "priority_negative": _j(priority=-1) + "\n",
    "arrival_negative": _j(arrival_step=-1) + "\n",
    "arrival_over_field": _j(arrival_step=1 << 24) + "\n",
    "nan": '{"prompt_tokens": NaN, "max_new_tokens": 2}\n',
    "infinity": '{"prompt_tokens": 1e400, "max_new_tokens": 2}\n',
    "huge_literal": '{"prompt_tokens": ' + "9" * 5000 + ', "max_new_tokens": 2}\n',
    "deep_nesting": "[" * 100_000 + "]" * 100_000 + "\n",
    "binary": bytes(range(256)) * 8,
    "latin1": b'{"prompt_tokens": 10, "max_new_tokens": 2, "x": "\xe9"}\n',
    "bom": "\ufeff" + _j() + "\n",
    "second_line_bad": _j() + "\n" + _j(max_new_tokens=-2) + "\n",
    "too_many": "".join(_j() + "\n" for _ in range(65_537)),
    # valid fields, but a run nobody can wait for: refused from a bound, before the golden model
    "arrival_far": _j(arrival_step=(1 << 24) - 1) + "\n",
    "arrival_900k": _j(arrival_step=900_000) + "\n",
    "arrival_20k": _j(arrival_step=20_000) + "\n",
    "tokens_huge": "".join(_j(id=i, max_new_tokens=65_535) + "\n" for i in range(40)),
    "tokens_rounds": "".join(_j(id=i, max_new_tokens=65_535) + "\n" for i in range(200)),
    "ok": _j() + "\n" + _j(id=1, arrival_step=1) + "\n",
    # session files (sim/fast/sessions.py's format)
    "s_ok": _s(0, 0, 10, 2) + _s(0, 1, 4, 2) + _s(5, 0, 8, 1, t=0.04),
    "s_not_json": '{"session": 0, "turn": 0, "arrival_s": 0\n',
    "s_unknown_key": _s(0, 0, 10, 2, colour=1),
    "s_turn_skipped": _s(0, 0, 10, 2) + _s(0, 2, 4, 2),
    "s_requests_format": _j() + "\n",
    "s_output_over_field": _s(0, 0, 10, 1 << 16),
    "s_input_over_field": _s(0, 0, 1 << 23, 2),
    "s_turn_output_over_field": _s(0, 0, 10, 2) + _s(0, 1, 4, 1 << 16),
    "s_turn_input_over_field": _s(0, 0, 10, 2) + _s(0, 1, 1 << 24, 2),
    "s_context_over_seq_len": _s(0, 0, 8_000_000, 2) + _s(0, 1, 8_000_000, 2)
    + _s(0, 2, 8_000_000, 2),
    "s_drop_prompt": _s(0, 0, 8_000_000, 2) + _s(0, 1, 400_000, 2),
    "s_id_over_field": _s(1 << 16, 0, 10, 2),
    "s_arrival_over_field": _s(0, 0, 10, 2) + _s(1, 0, 10, 2, t=400_000.0),
    "s_gap_over_rounds": _s(0, 0, 10, 2) + _s(0, 1, 4, 2, t=30_000.0),
    "s_late": _s(0, 0, 10, 2) + _s(1, 0, 10, 2, t=400.0),
    "long_ok": "".join(_j(id=i, max_new_tokens=100, arrival_step=i) + "\n" for i in range(40)),
}

CASES = [
    # -- flags ----------------------------------------------------------------------------
    (R + ["--synthetic", "0"], "synthetic_zero", "--synthetic must be 1..65,536"),
    (R + ["--synthetic", "-1"], "synthetic_negative", "--synthetic must be 1..65,536"),
    (R + ["--synthetic", "100000000"], "synthetic_huge", "--synthetic must be 1..65,536"),
    (R + ["--synthetic", "65537"], "synthetic_over_ids", "--synthetic must be 1..65,536"),
    (R + ["--synthetic", "abc"], "synthetic_not_int", "invalid int value: 'abc'"),
    (R + ["--synthetic", "1e3"], "synthetic_float", "invalid int value: '1e3'"),
    (R + ["--synthetic", "4", "--requests", "@ok"], "two_sources", "not allowed with argument"),
    (R + ["--slots", "0"], "slots_zero", "--slots must be an integer in 1..256, not 0"),
    (R + ["--slots", "257"], "slots_over", "--slots must be an integer in 1..256, not 257"),
    (R + ["--slots", "-8"], "slots_negative", "--slots must be an integer in 1..256"),
    (R + ["--slots", "eight"], "slots_not_int", "invalid int value: 'eight'"),
    (R + ["--seed", "-1"], "seed_negative", "--seed must be an integer in 0..4,294,967,295"),
    (R + ["--seed", str(1 << 32)], "seed_over", "--seed must be an integer in 0..4,294,967,295"),
    (R + ["--cores", "5"], "cores_5", "invalid choice: 5"),
    (R + ["--cores", "0"], "cores_0", "invalid choice: 0"),
    (R + ["--profile", "fast-opt"], "profile_unknown", "invalid choice: 'fast-opt'"),
    (R + ["--sim", "iverilog"], "sim_unknown", "invalid choice: 'iverilog'"),
    (R + ["--bogus"], "unknown_flag", "unrecognized arguments: --bogus"),
    (R + ["--slots"], "flag_without_value", "expected one argument"),
    (["dsu"], "no_subcommand", "required: SUBCOMMAND"),
    (["dsu", "walk"], "bad_subcommand", "invalid choice: 'walk'"),
    (R + ["--max-cycles", "0"], "max_cycles_zero", "--max-cycles must be at least 1"),
    (R + ["--max-cycles", "-5"], "max_cycles_negative", "--max-cycles must be at least 1"),
    (R + ["--max-cycles", "100"], "max_cycles_below_boot", "more than --max-cycles 100"),
    (R + ["--max-cycles", "9" * 25], "max_cycles_huge", "--max-cycles must be an integer in 1.."),
    (R + ["--synthetic", "40", "--max-cycles", "30000"], "max_cycles_far_below",
     "more than --max-cycles 30,000"),
    (R + ["--synthetic", "65536"], "synthetic_max_too_long", "--allow-long runs it anyway"),
    (R + ["--synthetic", "20000", "--sim", "amaranth"], "amaranth_too_long",
     "--sim verilator is faster"),
    # -- fault specs ------------------------------------------------------------------------
    (R + ["--faults", "eror:slot=1:step=2"], "fault_kind", "kind must be error, timeout, hang, badcomp or mmio"),
    (R + ["--faults", "error:slot=1"], "fault_missing_step", "missing step"),
    (R + ["--faults", "error:step=1"], "fault_missing_slot", "missing slot"),
    (R + ["--faults", "hang"], "fault_hang_no_cycle", "missing cycle"),
    (R + ["--faults", "hang:slot=3"], "fault_hang_slot", "hang takes cycle, not 'slot'"),
    (R + ["--faults", "error:slot=1:step=x"], "fault_not_int", "'step=x' is not key=non-negative"),
    (R + ["--faults", "error:slot=-1:step=1"], "fault_negative", "'slot=-1' is not key="),
    (R + ["--faults", "error:slot=1:step=1e3"], "fault_float", "'step=1e3' is not key="),
    (R + ["--faults", "error: slot=1:step=2"], "fault_space", "' slot=1' is not key="),
    (R + ["--faults", "error:slot=1:step=2,,hang:cycle=3"], "fault_empty_item", "empty item"),
    (R + ["--faults", "error:slot=1:step=2,"], "fault_trailing_comma", "empty item"),
    (R + ["--faults", "hang:cycle=3:"], "fault_trailing_colon", "'' is not key="),
    (R + ["--faults", "error:slot=1:slot=2:step=1"], "fault_key_twice", "slot given twice"),
    (R + ["--faults", "error:slot=1:step=2,timeout:step=2:slot=1"], "fault_same_target",
     "already given"),
    (R + ["--faults", "hang:cycle=1,hang:cycle=2"], "fault_two_hangs", "already given"),
    (R + ["--faults", "hang:cycle=" + "9" * 19], "fault_huge_number", "cycle has more than 18"),
    (R + ["--faults", "mmio:slot=1"], "fault_mmio_slot", "mmio takes cycle, not 'slot'"),
    (R + ["--faults", "mmio:cycle=5,mmio:cycle=5"], "fault_mmio_twice", "same cycle is already"),
    (R + ["--faults", "error:slot=1:step=2,badcomp:slot=1:step=2"], "fault_badcomp_and_error",
     "same step and slot is already given"),
    (R + ["--faults", "badcomp:slot=9:step=1"], "fault_badcomp_slot", "slot 9 >= n_slots 8"),
    (R + ["--faults", "badcomp:slot=0:step=999", "--faults-strict"], "strict_badcomp",
     "fault badcomp:slot=0:step=999 cannot fire"),
    (R + ["--faults", "error:slot=8:step=0"], "fault_slot_out_of_range",
     "fault error:slot=8:step=0: slot 8 >= n_slots 8"),
    (R + ["--faults", "error:slot=2:step=0", "--slots", "2"], "fault_slot_vs_slots",
     "slot 2 >= n_slots 2"),
    (R + ["--faults", "error:slot=0:step=5000", "--faults-strict"], "strict_beyond_schedule",
     "cannot fire: the schedule has"),
    (R + ["--requests", "@ok", "--faults", "error:slot=0:step=1,error:slot=5:step=1",
          "--faults-strict"], "strict_slot_not_in_round",
     "fault error:slot=5:step=1 cannot fire: round 1 has no descriptor for slot 5"),
    # -- waves --------------------------------------------------------------------------------
    (R + ["--wave", "@dir/w.txt"], "wave_suffix", "must end in .vcd or .fst"),
    (R + ["--wave", "@dir/nodir/w.vcd"], "wave_no_dir", "does not exist"),
    (R + ["--wave", "@dir"], "wave_is_dir", "--wave"),
    (R + ["--wave", ""], "wave_empty", "--wave: empty path"),
    (R + ["--wave-window", "1:2"], "window_without_wave", "--wave-window needs --wave"),
    (R + ["--sim", "amaranth", "--wave", "@dir/w.vcd", "--wave-window", "5:3"], "window_reversed",
     "END (3) must be greater than START (5)"),
    (R + ["--sim", "amaranth", "--wave", "@dir/w.vcd", "--wave-window", "a:b"], "window_syntax",
     "expected START:END"),
    (R + ["--sim", "amaranth", "--wave", "@dir/w.vcd", "--wave-window", "90000000:"],
     "window_after_budget", "starts after the run's cycle budget"),
    # -- requests files -------------------------------------------------------------------------
    (R + ["--requests", "@dir/missing.jsonl"], "file_missing", "file not found"),
    (R + ["--requests", "@dir"], "file_is_dir", "is a directory"),
    (R + ["--requests", ""], "file_empty_path", "is a directory"),
    (R + ["--requests", "/dev/zero"], "file_char_device", "not a regular file or a pipe"),
    (R + ["--requests", "@big"], "file_too_big", "more than the 64 MiB"),
] + [(R + ["--requests", "@" + name], "file_" + name, needle) for name, needle in [
    ("empty", "no requests in the file"),
    ("blank_lines", "no requests in the file"),
    ("not_json", ":1: not valid JSON"),
    ("truncated", ":1: not valid JSON"),
    ("array_line", ":1: expected a JSON object"),
    ("null_line", ":1: expected a JSON object"),
    ("string_line", ":1: expected a JSON object"),
    ("unknown_field", ":1: unknown field 'colour'"),
    ("no_prompt", ":1: missing field 'prompt_tokens'"),
    ("no_max_new", ":1: missing field 'max_new_tokens'"),
    ("null_prompt", ":1: missing field 'prompt_tokens'"),
    ("prompt_zero", ":1: prompt_tokens out of range: 0"),
    ("prompt_negative", ":1: prompt_tokens out of range: -5"),
    ("prompt_string", ':1: prompt_tokens must be an integer, got "10"'),
    ("prompt_float", ":1: prompt_tokens must be an integer, got 10.0"),
    ("prompt_bool", ":1: prompt_tokens must be an integer, got true"),
    ("prompt_list", ":1: prompt_tokens must be an integer, got [10]"),
    ("prompt_over_field", ":1: prompt_tokens out of range: 8388608 (must be 1..8,388,607"),
    ("max_new_over_field", ":1: max_new_tokens out of range: 65536"),
    ("max_new_zero", ":1: max_new_tokens out of range: 0"),
    ("id_negative", ":1: id out of range: -1"),
    ("id_over_field", ":1: id out of range: 65536 (must be 0..65,535"),
    ("id_huge", ":1: id out of range: 1000000000000000000000000000000"),
    ("id_duplicate", ":2: request id 3 appears twice"),
    ("default_id_clash", ":2: request id 0 appears twice"),
    ("priority_4", ":1: priority out of range: 4 (must be 0..3"),
    ("priority_negative", ":1: priority out of range: -1"),
    ("arrival_negative", ":1: arrival_step out of range: -1"),
    ("arrival_over_field", ":1: arrival_step out of range: 16777216"),
    ("nan", ":1: prompt_tokens must be an integer, got NaN"),
    ("infinity", ":1: prompt_tokens must be an integer, got Infinity"),
    ("huge_literal", "huge_literal.jsonl:1: not valid JSON (Exceeds the limit (4300 digits)"),
    ("deep_nesting", "deep_nesting.jsonl:1: not valid JSON (nested too deeply)"),
    ("binary", "not UTF-8 text"),
    ("latin1", "not UTF-8 text"),
    ("bom", ":1: not valid JSON"),
    ("second_line_bad", ":2: max_new_tokens out of range: -2"),
    ("too_many", ":65537: more than 65,536 requests"),
    ("arrival_far", "at least 16,777,216 rounds"),
    ("arrival_900k", "more than the 60 min allowed (--allow-long runs it anyway)"),
    ("tokens_huge", "more than the 60 min allowed"),
    ("tokens_rounds", "needs at least 1,638,375 rounds"),
]] + [
    (R + ["--requests", "@long_ok", "--max-cycles", "50000"], "file_max_cycles_too_small",
     "more than --max-cycles 50,000"),
    (R + ["--requests", "@arrival_20k", "--sim", "amaranth"], "file_late_arrival_amaranth",
     "--sim verilator is faster"),
]

S = R + ["--sessions"]
CASES += [
    # -- sessions (--sessions FILE, --agentic SPEC) and their flags --------------------------
    (S + ["@dir/missing.jsonl"], "sessions_missing", "file not found"),
    (S + ["@dir"], "sessions_is_dir", "is a directory"),
    (S + ["@empty"], "sessions_empty", "no sessions"),
    (S + ["@s_not_json"], "sessions_not_json", ":1: not valid JSON"),
    (S + ["@s_unknown_key"], "sessions_unknown_key", ":1: unknown key 'colour'"),
    (S + ["@s_turn_skipped"], "sessions_turn_skipped", ":2: session 0 turn 2 out of order"),
    (S + ["@s_requests_format"], "sessions_given_requests", ":1: unknown key 'prompt_tokens'"),
    (S + ["@s_ok", "--requests", "@ok"], "sessions_and_requests",
     "argument --requests: not allowed with argument --sessions"),
    (S + ["@s_ok", "--synthetic", "4"], "sessions_and_synthetic",
     "argument --synthetic: not allowed with argument --sessions"),
    (S + ["@s_ok", "--agentic", "sessions=2"], "sessions_and_agentic",
     "argument --agentic: not allowed with argument --sessions"),
    (S + ["@s_ok", "--park-policy", "evict"], "park_policy_unknown",
     "argument --park-policy: invalid choice: 'evict'"),
    (R + ["--park-policy", "park"], "park_policy_without_sessions",
     "--park-policy applies to sessions (--sessions or --agentic), and there are none"),
    (R + ["--requests", "@ok", "--park-policy", "drop"], "park_policy_with_requests",
     "--park-policy applies to sessions"),
    (S + ["@s_ok", "--park-policy", "park-early", "--restore-lead", "-1"],
     "restore_lead_negative", "argument --restore-lead: must be a number of rounds >= 0"),
    (S + ["@s_ok", "--park-policy", "park-early", "--restore-lead", "1.5"],
     "restore_lead_fraction", "'1.5' is not a whole number of rounds"),
    (S + ["@s_ok", "--park-policy", "park-early", "--restore-lead", str(10 ** 7)],
     "restore_lead_huge", "--restore-lead must be an integer in 0..1,000,000"),
    (S + ["@s_ok", "--park-policy", "park", "--restore-lead", "2"], "restore_lead_not_early",
     "--restore-lead applies to --park-policy park-early"),
    (S + ["@s_ok", "--restore-lead", "2"], "restore_lead_default_policy",
     "--restore-lead applies to --park-policy park-early"),
    (R + ["--restore-lead", "2"], "restore_lead_without_sessions",
     "--restore-lead applies to sessions"),
    (S + ["@s_ok", "--round-s", "0"], "round_s_zero", "argument --round-s: must be a number"),
    (S + ["@s_ok", "--round-s", "nan"], "round_s_nan", "argument --round-s: must be a number"),
    (S + ["@s_ok", "--round-s", "fast"], "round_s_word", "'fast' is not a number of seconds"),
    (R + ["--round-s", "0.01"], "round_s_without_sessions", "--round-s applies to sessions"),
    # sessions that do not fit the hardware's fields: one error naming session, turn, field
    (S + ["@s_output_over_field"], "session_output_over_field",
     "session 0 turn 0: max_new_tokens must be an integer in 1..65,535 (the hardware's field), "
     "not 65536 [output_tokens]"),
    (S + ["@s_input_over_field"], "session_input_over_field",
     "session 0 turn 0: prompt_tokens must be an integer in 1..8,388,607"),
    (S + ["@s_turn_output_over_field"], "session_turn_output_over_field",
     "session 0 turn 1: max_new_tokens must be an integer in 1..65,535 (the host command's"),
    (S + ["@s_turn_input_over_field"], "session_turn_input_over_field",
     "session 0 turn 1: new_tokens must be an integer in 0..16,777,215"),
    (S + ["@s_context_over_seq_len"], "session_context_over_seq_len",
     "session 0 turn 2: the context reaches 24,000,006 tokens, a slot's seq_len"),
    (S + ["@s_drop_prompt", "--park-policy", "drop"], "session_drop_prompt_over_field",
     "session 0 turn 1: its whole prompt of 8,400,002 tokens (resubmitted under park policy "
     "drop)"),
    (S + ["@s_id_over_field"], "session_id_over_field",
     "session 65536: the id must be below 65,536"),
    (S + ["@s_arrival_over_field"], "session_arrival_over_field",
     "session 1 turn 0: arrival_step must be an integer in 0..16,777,215"),
    (S + ["@s_gap_over_rounds"], "session_gap_over_rounds",
     "session 0 turn 1: gap must be an integer in 1..1,000,000 (rounds), not 1500000 "
     "[gap_s / --round-s]"),
    (S + ["@s_late", "--sim", "amaranth"], "sessions_amaranth_too_long",
     "--sim verilator is faster"),
    (S + ["@s_ok", "--max-cycles", "5000"], "sessions_max_cycles", "more than --max-cycles 5,000"),
    (R + ["--agentic", "colour=red"], "agentic_unknown_key", "agentic spec: unknown key 'colour'"),
    (R + ["--agentic", "sessions=70000"], "agentic_too_many",
     "--agentic: sessions=70,000: at most 65,536"),
    (R + ["--agentic", "sessions=2,output=70000"], "agentic_output_over_field",
     "max_new_tokens must be an integer in 1..65,535"),
    (R + ["--agentic", "sessions=2,turns=3,gap=30000"], "agentic_gap_over_rounds",
     "gap must be an integer in 1..1,000,000 (rounds)"),
]

#: (command, case id) for counting
BAD_INPUTS = [(" ".join(argv[:2]), case) for argv, case, _ in CASES]


@pytest.fixture
def no_work(monkeypatch):
    import tricut.sim.harness.dsu as h

    def boom(*a, **k):
        raise AssertionError("work started before the input was refused")
    monkeypatch.setattr(h, "run_plan", boom)
    monkeypatch.setattr(h, "build_dsu_firmware", boom)
    monkeypatch.setattr(h, "execute", boom)


@pytest.mark.parametrize("argv,needle", [(a, n) for a, _, n in CASES],
                         ids=[c for _, c, _ in CASES])
def test_bad_input_is_one_line_exit_2(argv, needle, tmp_path, capsys, no_work):
    code, cap = run_cli(expand_argv(argv, tmp_path, FILES, (64 << 20) + 1), capsys)
    assert_one_line_error(code, cap, needle)


def test_case_ids_unique_and_counted():
    ids = [c for _, c, _ in CASES]
    assert len(ids) == len(set(ids)) == len(BAD_INPUTS) >= 90


def test_good_inputs_reach_the_simulation(tmp_path, capsys, monkeypatch):
    """The stub is the only thing between the cases above and a run: the same commands with
    valid values get as far as the simulation (so the refusals are about the values)."""
    import tricut.sim.harness.dsu as h
    reached = []

    def stub(plan, **kw):
        reached.append(plan)
        raise KeyboardInterrupt      # stop here: main reports "interrupted", exit 130
    monkeypatch.setattr(h, "run_plan", stub)
    for argv in (R + ["--synthetic", "1"], R + ["--slots", "256", "--seed", str((1 << 32) - 1)],
                 R + ["--requests", "@ok", "--faults", "error:slot=0:step=1", "--faults-strict"],
                 R + ["--requests", "@arrival_20k", "--sim", "amaranth", "--allow-long"],
                 R + ["--requests", "@long_ok", "--max-cycles", "1000000"],
                 R + ["--synthetic", "40", "--max-cycles", "60000"],
                 R + ["--sessions", "@s_ok", "--park-policy", "park-early", "--restore-lead",
                      "3", "--sim", "amaranth"],
                 R + ["--sessions", "@s_drop_prompt", "--park-policy", "keep"],
                 R + ["--agentic", "sessions=2,turns=2,output=4,input=30,turn_input=8,gap=0.1",
                      "--park-policy", "drop", "--round-s", "0.05"]):
        code, cap = run_cli(expand_argv(argv, tmp_path, FILES, (64 << 20) + 1), capsys)
        assert code == 130, (argv, cap.err)
    assert len(reached) == 9
    assert reached[2].faults_not_fired == []
    assert reached[3].rounds == 20_002
    assert reached[6].params.park_policy == "park-early" and reached[6].sessions["host"]
    assert reached[7].golden_outcomes[0].reason == "too large"     # 8M tokens > the KV budget
    assert reached[8].params.park_policy == "drop" and reached[8].sessions["moves"]
