"""Bad input to ``tricut cdu replay``: every case ends with exactly one stderr line
``tricut: error: ...`` naming what is wrong, exit status 2, no traceback -- and before any
work: the replay implementations, the RTL bench and the model front end are replaced by stubs
that fail the test if they are reached (a refusal after a minute of work, or a MemoryError,
would show as ``internal error``, exit 3).

``BAD_INPUTS`` (module level) lists ``(command, case id)`` for counting."""

import json

import pytest
from tricut.sim.cli.testing import assert_one_line_error, expand_argv, run_cli


# access-trace files: name -> content (bytes); "@name" in a case's argv is its path
_ROW = {"step": 0, "request": 0, "layer": 0, "blocks": [0, 1]}


def _j(**kw):
    return json.dumps(dict(_ROW, **kw))


def _drop(k):
    return json.dumps({a: b for a, b in _ROW.items() if a != k})


TRACES = {
    "ok": _j() + "\n" + _j(step=1, blocks=[0, 1, 2]) + "\n",
    "layer999": _j(layer=999) + "\n",
    "layer2_tiny": _j(layer=2) + "\n",
    "seq_over_ctx": _j(seq_len=200_000) + "\n",
    "block_over_ctx": _j(blocks=[9000]) + "\n",
    "huge_block": _j(blocks=[10 ** 30]) + "\n",
    "neg_block": _j(blocks=[-1, 2]) + "\n",
    "str_step": _j(step="0") + "\n",
    "float_layer": _j(layer=1.5) + "\n",
    "bool_request": _j(request=True) + "\n",
    "str_blocks": _j(blocks="0,1") + "\n",
    "mixed_blocks": _j(blocks=[0, "1"]) + "\n",
    "empty_blocks": _j(blocks=[]) + "\n",
    "repeat_blocks": _j(blocks=[3, 3]) + "\n",
    "no_blocks": _drop("blocks") + "\n",
    "no_step": _drop("step") + "\n",
    "unknown_field": _j(colour=1) + "\n",
    "seq_zero": _j(seq_len=0) + "\n",
    "seq_float": _j(seq_len=32.0) + "\n",
    "block_past_seq": _j(blocks=[5], seq_len=16) + "\n",
    "duplicate": _j() + "\n" + _j() + "\n",
    "nan_step": '{"step": NaN, "request": 0, "layer": 0, "blocks": [0]}\n',
    "huge_request": _j(request=10 ** 20) + "\n",
    "array_line": "[1, 2, 3]\n",
    "null_line": "null\n",
    "truncated": '{"step": 0, "request": 0, "layer": 0, "blocks": [0]',
    "deep_nesting": "[" * 100_000 + "]" * 100_000 + "\n",
    "huge_int_literal": '{"step": ' + "9" * 5000 + ', "request": 0, "layer": 0, "blocks": [0]}\n',
    "empty": "",
    "blank_lines": "\n  \n\n",
    "binary": bytes(range(256)) * 8,
    "latin1": b'{"step": 0, "request": 0, "layer": 0, "blocks": [0], "x": "\xe9"}\n',
    "rtl_missing_unit": _j() + "\n" + _j(request=1, layer=1) + "\n",
    "rtl_17_requests": "".join(_j(request=r) + "\n" for r in range(17)),
    "rtl_layer9": _j(layer=9) + "\n",
    "rtl_seq_20k": _j(seq_len=20_000) + "\n",
}

R = ["cdu", "replay"]
P = R + ["--pattern", "full"]
RTL = P + ["--rtl"]

# (argv, case id, what the message must contain)
CASES = [
    # 1. sizes beyond the stated limits: refused up front, the limit named
    (P + ["--l2-mb", "1e12"], "l2-mb-1e12", "the limit is 1,048,576 frames"),
    (P + ["--l2-mb", "1e300"], "l2-mb-1e300", "the limit is 1,048,576 frames"),
    (P + ["--steps", "1000000", "--batch", "64", "--context", "100000"], "steps-1e6-ctx-1e5",
     "exceeds llama-3-8b's max_context"),
    (P + ["--steps", "100", "--batch", "64", "--context", "100000"], "block-ops-limit",
     "block operations exceed the limit of 1,000,000,000 for --implementation fast"),
    (P + ["--steps", "100", "--batch", "64", "--context", "2000", "--implementation", "golden"],
     "block-ops-limit-golden", "exceed the limit of 20,000,000 for --implementation golden"),
    (P + ["--steps", "100000", "--batch", "64", "--context", "1"], "units-limit",
     "units exceed the replay limit of 1,000,000 units"),
    (P + ["--batch", "9000000", "--context", "1", "--steps", "1"], "batch-beyond-requests",
     "requests"),
    (P + ["--batch", "1000000000000", "--context", "1", "--steps", "1"], "batch-1e12",
     "requests"),
    # 2. against the model
    (P + ["--model", "tiny", "--context", "100000"], "context-over-max-context",
     "exceeds tiny's max_context 4,096"),
    (P + ["--model", "tiny"], "default-context-over-tiny", "4,104 tokens exceeds tiny's max_context"),
    (R + ["--trace", "@layer999"], "trace-layer-999", ":1: layer 999 does not exist"),
    (R + ["--model", "tiny", "--trace", "@layer2_tiny"], "trace-layer-2-tiny", "tiny has 2 layers"),
    (R + ["--trace", "@seq_over_ctx"], "trace-seq-over-max-context", "max_context 131,072"),
    (R + ["--model", "tiny", "--trace", "@block_over_ctx"], "trace-block-over-max-context",
     "block 9000 lies beyond tiny's max_context"),
    (R + ["--trace", "@huge_block"], "trace-huge-block", "lies beyond"),
    (R + ["--trace", "@huge_request"], "trace-huge-request", "exceeds the limit of 8,388,607"),
    # 3. --rtl and traces: supported, but what the RTL instance cannot take is refused
    (R + ["--rtl", "--trace", "@rtl_missing_unit"], "rtl-trace-missing-unit", "no record for the pair"),
    (R + ["--rtl", "--trace", "@rtl_17_requests"], "rtl-trace-17-requests", "at most 16"),
    (R + ["--rtl", "--trace", "@rtl_layer9"], "rtl-trace-layer-9", "of the --rtl instance"),
    (R + ["--rtl", "--trace", "@rtl_seq_20k"], "rtl-trace-seq-20k", "16,384 tokens of the --rtl instance"),
    (RTL + ["--batch", "17"], "rtl-batch-17", "--batch must be <= 16"),
    (RTL + ["--context", "20000"], "rtl-context-20k", "must be <= 16384 tokens"),
    (RTL + ["--batch", "16", "--context", "1000"], "rtl-block-ops", "limit of 40,000"),
    # 4. numeric flags, one line naming the flag
    (P + ["--l2-mb", "0"], "l2-mb-0", "--l2-mb"),
    (P + ["--l2-mb", "-1"], "l2-mb-negative", "--l2-mb"),
    (P + ["--l2-mb", "nan"], "l2-mb-nan", "--l2-mb"),
    (P + ["--l2-mb", "inf"], "l2-mb-inf", "--l2-mb"),
    (P + ["--l2-mb", "-inf"], "l2-mb-minus-inf", "--l2-mb"),
    (P + ["--l2-mb", "1e-300"], "l2-mb-tiny", "--l2-mb = 1e-300 holds no"),
    (P + ["--l2-mb", "fifty"], "l2-mb-text", "--l2-mb"),
    (P + ["--steps", "0"], "steps-0", "--steps"),
    (P + ["--steps", "-3"], "steps-negative", "--steps"),
    (P + ["--steps", "1.5"], "steps-float", "--steps"),
    (P + ["--steps", "1e3"], "steps-exp", "--steps"),
    (P + ["--batch", "-1"], "batch-negative", "--batch"),
    (P + ["--batch", "0"], "batch-0", "--batch"),
    (P + ["--context", "0"], "context-0", "--context"),
    (P + ["--context", "nan"], "context-nan", "--context"),
    (P + ["--reserve", "16"], "reserve-16", "--reserve"),
    (P + ["--reserve", "-1"], "reserve-negative", "--reserve"),
    (RTL + ["--reserve", "2"], "rtl-reserve-2", "--reserve 2"),
    (P + ["--seed", "-1"], "seed-negative", "--seed"),
    (P + ["--seed", str(2 ** 64)], "seed-2-64", "--seed"),
    (P + ["--seed", "x"], "seed-text", "--seed"),
    # 5. --hbm-errors
    (RTL + ["--hbm-errors", "2"], "hbm-errors-2", "--hbm-errors"),
    (RTL + ["--hbm-errors", "-0.1"], "hbm-errors-negative", "--hbm-errors"),
    (RTL + ["--hbm-errors", "nan"], "hbm-errors-nan", "--hbm-errors"),
    (RTL + ["--hbm-errors", ""], "hbm-errors-empty", "--hbm-errors"),
    (RTL + ["--hbm-errors", "0.1:sticky"], "hbm-errors-bad-mode", "--hbm-errors"),
    (RTL + ["--hbm-errors", "0.1:persistent:x"], "hbm-errors-extra", "--hbm-errors"),
    (P + ["--hbm-errors", "0.1"], "hbm-errors-without-rtl", "--hbm-errors needs --rtl"),
    # 6. --wave / --wave-window
    (P + ["--wave", "@dir/w.vcd"], "wave-without-rtl", "--wave needs --rtl"),
    (RTL + ["--wave-window", "1:5"], "window-without-wave", "--wave-window needs --wave"),
    (RTL + ["--wave", "@dir/w.txt"], "wave-bad-suffix", ".vcd or .fst"),
    (RTL + ["--wave", "@dir/missing/w.vcd"], "wave-missing-dir", "does not exist"),
    (RTL + ["--wave", "@dir"], "wave-is-directory", "--wave"),
    (RTL + ["--wave", "@dir/w.vcd", "--wave-window", "9:3"], "window-reversed", "greater than START"),
    (RTL + ["--wave", "@dir/w.vcd", "--wave-window", "abc"], "window-garbage", "START:END"),
    (RTL + ["--wave", "@dir/w.vcd", "--wave-window", "-5:3"], "window-negative", "--wave-window"),
    (RTL + ["--wave", "@dir/w.vcd", "--wave-window", "900000000:900000001"], "window-past-timeout",
     "ends before cycle"),
    # combinations that would be silently ignored
    (R + ["--trace", "@ok", "--steps", "3"], "trace-with-steps", "--steps does not apply to --trace"),
    (R + ["--trace", "@ok", "--context", "300"], "trace-with-context", "--context does not apply"),
    (RTL + ["--l2-mb", "5"], "rtl-with-l2-mb", "--l2-mb does not apply to --rtl"),
    (RTL + ["--implementation", "golden"], "rtl-with-implementation",
     "--implementation does not apply to --rtl"),
    (RTL + ["--engine", "golden"], "rtl-with-engine", "--engine does not apply to --rtl"),
    (P + ["--implementation", "fast", "--engine", "golden"], "implementation-and-engine-disagree",
     "--engine golden and --implementation fast disagree"),
    # 7. malformed access traces (file:line where there is a line)
    (R + ["--trace", "@neg_block"], "trace-negative-block", ":1: field 'blocks'"),
    (R + ["--trace", "@str_step"], "trace-string-step", ":1: field 'step'"),
    (R + ["--trace", "@float_layer"], "trace-float-layer", ":1: field 'layer'"),
    (R + ["--trace", "@bool_request"], "trace-bool-request", ":1: field 'request'"),
    (R + ["--trace", "@str_blocks"], "trace-string-blocks", ":1: field 'blocks'"),
    (R + ["--trace", "@mixed_blocks"], "trace-mixed-blocks", ":1: field 'blocks'"),
    (R + ["--trace", "@empty_blocks"], "trace-empty-blocks", ":1: field 'blocks'"),
    (R + ["--trace", "@repeat_blocks"], "trace-repeated-block", ":1: field 'blocks' repeats"),
    (R + ["--trace", "@no_blocks"], "trace-missing-blocks", ":1: field 'blocks'"),
    (R + ["--trace", "@no_step"], "trace-missing-step", ":1: missing field 'step'"),
    (R + ["--trace", "@unknown_field"], "trace-unknown-field", ":1: unknown field 'colour'"),
    (R + ["--trace", "@seq_zero"], "trace-seq-len-0", ":1: field 'seq_len'"),
    (R + ["--trace", "@seq_float"], "trace-seq-len-float", ":1: field 'seq_len'"),
    (R + ["--trace", "@block_past_seq"], "trace-block-past-seq-len", ":1: block 5 lies beyond seq_len 16"),
    (R + ["--trace", "@duplicate"], "trace-duplicate-unit", ":2: step 0 request 0 layer 0 appears twice"),
    (R + ["--trace", "@nan_step"], "trace-nan", ":1: field 'step'"),
    (R + ["--trace", "@array_line"], "trace-array-line", ":1: expected a JSON object"),
    (R + ["--trace", "@null_line"], "trace-null-line", ":1: expected a JSON object"),
    (R + ["--trace", "@truncated"], "trace-truncated-json", ":1: not valid JSON"),
    (R + ["--trace", "@deep_nesting"], "trace-deep-nesting", ":1: not valid JSON (nested too deeply)"),
    (R + ["--trace", "@huge_int_literal"], "trace-5000-digit-int", ":1: not valid JSON"),
    (R + ["--trace", "@empty"], "trace-empty-file", "no records"),
    (R + ["--trace", "@blank_lines"], "trace-blank-lines", "no records"),
    (R + ["--trace", "@binary"], "trace-binary", "not UTF-8 text"),
    (R + ["--trace", "@latin1"], "trace-latin1", "not UTF-8 text"),
    (R + ["--trace", "@dir"], "trace-directory", "is a directory"),
    (R + ["--trace", "@dir/none.jsonl"], "trace-missing-file", "file not found"),
    (R + ["--trace", "/dev/zero"], "trace-dev-zero", "not a regular file"),
    (R + ["--trace", "@big"], "trace-too-big", "exceeds the access-trace limit of 134,217,728 bytes"),
    # flags argparse checks, as one line
    (R + ["--pattern", "zigzag"], "pattern-unknown", "invalid choice: 'zigzag'"),
    (R, "no-source", "one of the arguments --pattern --trace is required"),
    (P + ["--trace", "@ok"], "pattern-and-trace", "not allowed with argument"),
    (P + ["--policy", "lru"], "policy-unknown", "invalid choice: 'lru'"),
    (P + ["--kv-dtype", "fp16"], "kv-dtype-unknown", "invalid choice: 'fp16'"),
    (P + ["--frobnicate"], "unknown-flag", "unrecognized arguments: --frobnicate"),
    (P + ["--model", "no-such-model"], "model-unknown", "no-such-model"),
    (P + ["--model", "@dir"], "model-directory", "tricut: error:"),
    (["cdu"], "cdu-no-subcommand", "required"),
    (["cdu", "replya"], "cdu-bad-subcommand", "invalid choice: 'replya'"),
]

#: (command, case id) of every case, for counting
BAD_INPUTS = [(" ".join(argv[:2]), cid) for argv, cid, _ in CASES]


@pytest.fixture
def no_work(monkeypatch):
    """Replace everything that does work by stubs that fail the test when reached."""
    import tricut.sim.fast.cdu_replay as rp
    import tricut.sim.fast.cdu_twin as twin
    import tricut.sim.harness.cdu as h

    def boom(*a, **k):
        raise AssertionError("work started before the input was refused")
    monkeypatch.setattr(rp, "run", boom)
    monkeypatch.setattr(twin, "run_fast", boom)
    monkeypatch.setattr(h, "run_rtl", boom)
    monkeypatch.setattr(h, "frontend_reference_lookahead", boom)


@pytest.mark.parametrize("argv,needle", [(a, n) for a, _, n in CASES],
                         ids=[c for _, c, _ in CASES])
def test_bad_input_is_one_line_exit_2(argv, needle, tmp_path, capsys, no_work):
    code, cap = run_cli(expand_argv(argv, tmp_path, TRACES, (128 << 20) + 1), capsys)
    assert_one_line_error(code, cap, needle)


def test_case_ids_unique_and_counted():
    ids = [c for _, c, _ in CASES]
    assert len(ids) == len(set(ids)) == len(BAD_INPUTS) >= 90


def test_good_inputs_still_run(tmp_path, capsys):
    """The stubs are the only thing between these cases and a run: the same commands with
    valid values succeed (so the refusals above are about the values)."""
    code, cap = run_cli(P + ["--steps", "2", "--context", "100", "--l2-mb", "2"], capsys)
    assert code == 0 and "accesses" in cap.out, cap.err
    code, cap = run_cli(R + ["--trace", expand_argv(["@ok"], tmp_path, TRACES, (128 << 20) + 1)[0], "--json"], capsys)
    assert code == 0 and json.loads(cap.out)["accesses"] == 5, cap.err


@pytest.mark.parametrize("implementation", ["fast", "golden"])
def test_engine_is_the_deprecated_spelling_of_implementation(implementation, capsys):
    """``--engine`` (deprecated) replays as ``--implementation`` does, the same counters, and
    says so in one note on stderr; given both, agreeing, it runs the same with the note."""
    run = R + ["--pattern", "window", "--batch", "2", "--steps", "2", "--context", "100", "--json"]
    code, new = run_cli(run + ["--implementation", implementation], capsys)
    assert code == 0 and new.err == "", new.err
    note = ["tricut: note: cdu replay --engine is deprecated; use --implementation"]
    for alias in (["--engine", implementation],
                  ["--engine", implementation, "--implementation", implementation]):
        code, old = run_cli(run + alias, capsys)
        assert code == 0 and old.err.splitlines() == note, old.err
        assert json.loads(old.out) == json.loads(new.out)
