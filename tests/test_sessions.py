"""Agentic sessions (sim/fast/sessions.py): the session-file reader (contexts, prompts, hash ids,
and one ``file:line`` message per malformed file), the synthetic agentic generator (seeded,
shared system-prompt blocks, prefix-stable hashes, context growth, Poisson arrivals,
max_context), the --agentic spec, one-turn sessions from a Mooncake trace, and the work of
reading and simulating a trace or sessions growing linearly with their size."""

import json
import math
from pathlib import Path

import numpy as np
import pytest

from tricut.sim.fast.kv_tiers import TIER_BLOCK_TOKENS
from tricut.sim.fast.sessions import (
    AGENTIC_DEFAULTS, SAMPLE_AGENTIC, Session, SessionError, Turn, agentic,
    check_sessions, parse_agentic_spec, read_sessions, sessions_from_requests, write_sessions)
from tricut.sim.fast.workload import TraceError, read_trace

DATA = Path(__file__).resolve().parents[1] / "sim" / "data"
SAMPLE = DATA / "agentic_sessions_sample.jsonl"


def _write(tmp_path, *rows, name="s.jsonl") -> Path:
    f = tmp_path / name
    f.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return f


def _t0(session=0, arrival=0, i=10, o=2, **extra):
    return dict(session=session, turn=0, arrival_s=arrival, input_tokens=i, output_tokens=o, **extra)


def _tk(session, turn, gap=1.0, i=5, o=3, **extra):
    return dict(session=session, turn=turn, gap_s=gap, input_tokens=i, output_tokens=o, **extra)


# --- the reader ----------------------------------------------------------------------------------

def test_sample_is_the_documented_call():
    sessions = read_sessions(SAMPLE)
    assert sessions == agentic(**SAMPLE_AGENTIC)
    assert len(sessions) == 12 and all(3 <= len(s.turns) <= 8 for s in sessions)
    assert all(t.prefix_hashes for s in sessions for t in s.turns)
    check_sessions(sessions, SAMPLE_AGENTIC["max_context"])
    assert sessions[0].arrival_s == 0.0
    assert [s.arrival_s for s in sessions] == sorted(s.arrival_s for s in sessions)


def test_hand_written_file_interleaved(tmp_path):
    f = _write(tmp_path,
               _t0(7, arrival=10.5, i=1000, o=20, hash_ids=[1, 2]),
               _t0(3, arrival=12, i=600, o=4),
               "",
               _tk(7, 1, gap=2.5, i=30, o=6, hash_ids=[1, 2, 9]),
               _tk(3, 1, gap=0, i=1, o=1),
               _tk(7, 2, gap=0.25, i=100, o=50))
    a, b = read_sessions(f)
    # sorted by arrival, shifted so that the first arrives at 0
    assert (a.id, a.arrival_s, b.id, b.arrival_s) == (7, 0.0, 3, 1.5)
    assert a.turns == (Turn(1000, 20, 0.0, (1, 2)), Turn(30, 6, 2.5, (1, 2, 9)), Turn(100, 50, 0.25, ()))
    assert [a.context_before(k) for k in range(4)] == [0, 1020, 1056, 1206]
    assert [a.prompt_tokens(k) for k in range(3)] == [1000, 1050, 1156]
    assert [b.prompt_tokens(k) for k in range(2)] == [600, 605]
    with pytest.raises(IndexError):
        a.prompt_tokens(3)
    with pytest.raises(IndexError):
        a.context_before(-1)


def test_write_then_read_round_trip(tmp_path):
    sessions = [Session(0, (Turn(700, 3, 0.0, (5, 6)), Turn(10, 1, 1e-3))),
                Session(9, (Turn(1, 1, 0.1 + 0.2),))]
    f = tmp_path / "w.jsonl"
    write_sessions(sessions, f)
    assert read_sessions(f) == sessions
    assert "hash_ids" not in f.read_text().splitlines()[1]


GOOD0 = json.dumps(_t0())

BAD_FILES = [
    # (body lines, expected "LINE: message" part)
    ([{"turn": 0, "arrival_s": 0, "input_tokens": 1, "output_tokens": 1}], ":1: missing field 'session'"),
    ([{"session": 0, "arrival_s": 0, "input_tokens": 1, "output_tokens": 1}], ":1: missing field 'turn'"),
    ([{"session": 0, "turn": 0, "input_tokens": 1, "output_tokens": 1}], ":1: missing field 'arrival_s'"),
    ([GOOD0, {"session": 0, "turn": 1, "input_tokens": 1, "output_tokens": 1}], ":2: missing field 'gap_s'"),
    ([{"session": 0, "turn": 0, "arrival_s": 0, "output_tokens": 1}], ":1: missing field 'input_tokens'"),
    ([{"session": 0, "turn": 0, "arrival_s": 0, "input_tokens": 1}], ":1: missing field 'output_tokens'"),
    ([_t0(session="a")], ":1: session must be an integer"),
    ([_t0(session=-1)], ":1: session must be >= 0"),
    ([_t0(session=True)], ":1: session must be an integer"),
    ([_t0(i=2.5)], ":1: input_tokens must be an integer"),
    ([_t0(i="12")], ":1: input_tokens must be an integer"),
    ([_t0(o=0)], ":1: output_tokens must be >= 1"),
    ([_t0(i=10**9 + 1)], ":1: input_tokens must be >= 1 and <= 1,000,000,000"),
    ([GOOD0, _tk(0, 1, i=10**9 - 5)], ":2: session 0 turn 1: context 12 + input"),
    ([_t0(arrival=-1)], ":1: arrival_s must be a finite number >= 0"),
    (['{"session": 0, "turn": 0, "arrival_s": NaN, "input_tokens": 1, "output_tokens": 1}'],
     ":1: arrival_s must be a finite number >= 0"),
    (['{"session": 0, "turn": 0, "arrival_s": 1e400, "input_tokens": 1, "output_tokens": 1}'],
     ":1: arrival_s must be a finite number >= 0"),
    ([_t0(arrival="soon")], ":1: arrival_s must be a number of seconds"),
    ([GOOD0, _tk(0, 1, gap=-0.5)], ":2: gap_s must be a finite number >= 0"),
    ([_t0(arrival=2e8)], ":1: arrival_s 2e+08 s is beyond the simulator's horizon"),
    ([_t0(arrival=6e7), _tk(0, 1, gap=6e7)], ":2: session 0's arrival and tool gaps add up to 1.2e+08 s"),
    ([GOOD0, _tk(0, 2)], ":2: session 0 turn 2 out of order: expected turn 1"),
    ([_tk(4, 1)], ":1: session 4 turn 1 out of order: expected turn 0"),
    ([GOOD0, _tk(0, 1), _tk(0, 1)], ":3: duplicate turn 1 of session 0 (first on line 2)"),
    ([GOOD0, _t0(1), GOOD0], ":3: duplicate turn 0 of session 0 (first on line 1)"),
    ([_t0(gap_s=1.0)], ":1: gap_s on turn 0"),
    ([GOOD0, _tk(0, 1, arrival_s=3.0)], ":2: arrival_s on turn 1"),
    ([_t0(prompt=5)], ":1: unknown key 'prompt'"),
    ([_t0(hash_ids="1,2")], ":1: hash_ids must be a list of integers"),
    ([_t0(hash_ids=[1, True])], ":1: hash_ids must be a list of integers"),
    ([_t0(hash_ids=[2**63])], ":1: hash_ids must be a list of integers"),
    ([_t0(i=513, hash_ids=[1, 2, 3])], ":1: hash_ids names 3 blocks but the prompt of 513 tokens"),
    ([GOOD0, '{"session": 0, "turn": 1, "gap'], ":2: not valid JSON"),
    (["[1, 2]"], ":1: expected a JSON object"),
]


@pytest.mark.parametrize("rows,message", BAD_FILES, ids=[m.split(": ", 1)[1][:40] for _, m in BAD_FILES])
def test_malformed_file_one_line_naming_file_and_line(tmp_path, rows, message):
    f = _write(tmp_path, *rows)
    with pytest.raises(SessionError) as e:
        read_sessions(f)
    text = str(e.value)
    assert "\n" not in text and text.startswith(str(f) + ":"), text
    assert message in text, text


@pytest.mark.parametrize("body,message", [
    (b"", ": no sessions in the file"),
    (b"\n  \n", ": no sessions in the file"),
    (b'{"session": 0, "turn": 0, "arrival_s": 0, "input_tokens": 5, "output_tokens": 1}\n\xff\xfe\n',
     ": not UTF-8 text"),
])
def test_file_wide_faults(tmp_path, body, message):
    f = tmp_path / "f.jsonl"
    f.write_bytes(body)
    with pytest.raises(SessionError) as e:
        read_sessions(f)
    assert str(e.value) == f"{f}{message}"


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(SessionError, match="file not found"):
        read_sessions(tmp_path / "none.jsonl")
    with pytest.raises(SessionError, match="is a directory"):
        read_sessions(tmp_path)
    assert issubclass(SessionError, TraceError) and issubclass(SessionError, ValueError)


def test_check_sessions_names_the_turn():
    s = [Session(0, (Turn(100, 10, 0.0),)), Session(5, (Turn(100, 10, 0.0), Turn(50, 20, 1.0)))]
    check_sessions(s, 180)
    with pytest.raises(ValueError, match=r"^session 5 turn 1: prompt 160 \(context 110 \+ input 50\) "
                                         r"\+ output 20 tokens exceeds max_context 179$"):
        check_sessions(s, 179)


# --- the generator -------------------------------------------------------------------------------

SMALL = dict(n_sessions=40, rate=2.0, turns=("uniform", 2, 9), gap_s=("lognormal", 5.0, 1.0),
             first_input=("lognormal", 3000.0, 0.5), turn_input=("uniform", 100, 1500),
             output=("uniform", 1, 400), system_prompt_tokens=1500)


def test_generator_deterministic_by_seed():
    a = agentic(**SMALL, seed=4)
    assert a == agentic(**SMALL, seed=4)
    assert a != agentic(**SMALL, seed=5)
    # each quantity has its own stream: another output distribution leaves arrivals and gaps alone
    b = agentic(**{**SMALL, "output": 7}, seed=4)
    assert [[t.gap_s for t in s.turns] for s in a] == [[t.gap_s for t in s.turns] for s in b]


def test_generator_counts_and_context_growth():
    sessions = agentic(**SMALL, seed=1)
    assert [s.id for s in sessions] == list(range(40))
    counts = [len(s.turns) for s in sessions]
    assert min(counts) >= 2 and max(counts) <= 9 and len(set(counts)) > 3
    for s in sessions:
        t0 = s.turns[0]
        assert t0.input_tokens > 1500                      # system prompt + first user message
        for k, t in enumerate(s.turns):
            assert 1 <= t.output_tokens <= 400
            if k:
                assert 100 <= t.input_tokens <= 1500 and t.gap_s >= 0
                assert s.context_before(k) == s.prompt_tokens(k - 1) + s.turns[k - 1].output_tokens
                assert s.prompt_tokens(k) > s.prompt_tokens(k - 1)
            assert len(t.prefix_hashes) == math.ceil(s.prompt_tokens(k) / TIER_BLOCK_TOKENS)
    gaps = [t.gap_s for s in sessions for t in s.turns[1:]]
    assert np.median(gaps) == pytest.approx(5.0, rel=0.3)


def test_shared_system_blocks_and_prefix_stable_hashes():
    sessions = agentic(**SMALL, seed=2)
    n_sys = 1500 // TIER_BLOCK_TOKENS                       # 2 full blocks; the 3rd is mixed
    owner = {}
    for s in sessions:
        for k, t in enumerate(s.turns):
            assert t.prefix_hashes[:n_sys] == (0, 1)
            for h in t.prefix_hashes[n_sys:]:
                assert owner.setdefault(h, s.id) == s.id     # no other session has its own blocks
            if k:
                prev = s.turns[k - 1].prefix_hashes
                full = s.prompt_tokens(k - 1) // TIER_BLOCK_TOKENS
                assert t.prefix_hashes[:full] == prev[:full]
                if full < len(prev):                          # a partial last block is not reused
                    assert prev[full] not in t.prefix_hashes
                else:
                    assert t.prefix_hashes[:len(prev)] == prev
    # shared ids only in the system prompt's full blocks
    assert all(h >= n_sys for h in owner)
    # the same blocks shared with no system prompt: none
    bare = agentic(**{**SMALL, "system_prompt_tokens": 0}, seed=2)
    firsts = [s.turns[0].prefix_hashes[0] for s in bare]
    assert len(set(firsts)) == len(firsts)


def test_poisson_arrivals():
    sessions = agentic(n_sessions=4000, rate=20.0, turns=1, seed=3)
    gaps = np.diff([s.arrival_s for s in sessions])
    assert sessions[0].arrival_s == 0.0 and all(g >= 0 for g in gaps)
    assert np.mean(gaps) == pytest.approx(1 / 20, rel=0.05)
    assert np.std(gaps) == pytest.approx(1 / 20, rel=0.08)
    burst = agentic(n_sessions=5, rate=math.inf, turns=2, gap_s=3.0)
    assert [s.arrival_s for s in burst] == [0.0] * 5
    assert all(s.turns[1].gap_s == 3.0 for s in burst)


@pytest.mark.parametrize("gap,lo,hi,mean", [
    (("uniform", 2.0, 4.0), 2.0, 4.0, 3.0),
    (("exponential", 1.5), 0.0, math.inf, 1.5),
    (0, 0.0, 0.0, 0.0),
])
def test_gap_distributions(gap, lo, hi, mean):
    sessions = agentic(n_sessions=200, rate=math.inf, turns=20, gap_s=gap, first_input=10, turn_input=10,
                       output=1, system_prompt_tokens=0)
    gaps = [t.gap_s for s in sessions for t in s.turns[1:]]
    assert len(gaps) == 200 * 19 and lo <= min(gaps) and max(gaps) <= hi
    assert np.mean(gaps) == pytest.approx(mean, rel=0.05, abs=1e-12)


def test_max_context_respected():
    free = agentic(**SMALL, seed=6)
    capped = agentic(**SMALL, seed=6, max_context=6000)
    assert len(capped) == len(free)
    check_sessions(capped, 6000)
    stopped = 0
    for f, c in zip(free, capped):
        assert f.turns[0].output_tokens == c.turns[0].output_tokens       # an output of <= 400 fits
        assert c.turns[0].input_tokens == min(f.turns[0].input_tokens, 6000 - f.turns[0].output_tokens)
        # later turns: the same draws, stopped before the first that would not fit
        assert [(t.input_tokens, t.output_tokens, t.gap_s) for t in c.turns[1:]] == \
               [(t.input_tokens, t.output_tokens, t.gap_s) for t in f.turns[1:len(c.turns)]]
        if len(c.turns) < len(f.turns):
            stopped += 1
            nxt = f.turns[len(c.turns)]
            assert c.context_before(len(c.turns)) + nxt.input_tokens + nxt.output_tokens > 6000
    assert stopped >= 5
    with pytest.raises(ValueError, match="exceeds max_context 6,000$"):
        check_sessions(free, 6000)
    # a cap leaving turn 0 room for one input and one output token after the system prompt
    tight = agentic(**SMALL, seed=6, max_context=1502)
    assert {(len(s.turns), s.turns[0].input_tokens, s.turns[0].output_tokens) for s in tight} == {(1, 1501, 1)}


@pytest.mark.parametrize("kwargs,message", [
    (dict(n_sessions=0), "session count"),
    (dict(n_sessions=2.0), "session count"),
    (dict(rate=0), "rate must be > 0"),
    (dict(rate=float("nan")), "rate must be > 0"),
    (dict(n_sessions=10, rate=1e-8), "horizon"),
    (dict(turns=0), "turns length must be >= 1"),
    (dict(turns=20_000), "turns per session must be <= 10,000"),
    (dict(gap_s=-1.0), "tool gap"),
    (dict(gap_s=("lognormal", 0.0, 1.0)), "tool gap"),
    (dict(gap_s=("uniform", 5.0, 1.0)), "tool gap"),
    (dict(gap_s=float("inf")), "tool gap"),
    (dict(first_input=("uniform", 9, 2)), "first input uniform bounds"),
    (dict(output=0), "output length must be >= 1"),
    (dict(system_prompt_tokens=-1), "system prompt tokens"),
    (dict(seed=-1), "seed"),
    (dict(max_context=2049), "max_context must be an integer >= the system prompt \\+ 2"),
    (dict(system_prompt_tokens=10**9 - 1), "system prompt tokens must leave room"),
])
def test_generator_errors(kwargs, message):
    with pytest.raises(TraceError, match=message) as e:
        agentic(**{**AGENTIC_DEFAULTS, **kwargs})
    assert "\n" not in str(e.value)


# --- Mooncake requests as one-turn sessions --------------------------------------------------------

def test_sessions_from_mooncake_requests():
    requests = read_trace(DATA / "mooncake_conversation_sample.jsonl")
    sessions = sessions_from_requests(requests)
    assert len(sessions) == len(requests) == 300
    for r, s in zip(requests, sessions):
        (t,) = s.turns
        assert (s.id, s.arrival_s, s.prompt_tokens(0), t.output_tokens, t.prefix_hashes) == \
               (r.id, r.arrival_s, r.prompt_tokens, r.output_tokens, r.prefix_hashes)
        assert s.context_before(0) == 0 and s.context_before(1) == r.prompt_tokens + r.output_tokens
    assert sessions[0].turns[0].prefix_hashes[0] == 0 and len(sessions[0].turns[0].prefix_hashes) == 14


# --- the --agentic spec ----------------------------------------------------------------------------

def test_spec_example_and_defaults():
    kw = parse_agentic_spec("sessions=64,rate=0.5,turns=8,gap=lognormal:5:1,system=2048,"
                            "input=lognormal:32768:0.5,turn_input=uniform:512:4096,output=lognormal:256:0.5,seed=1")
    assert kw == dict(n_sessions=64, rate=0.5, turns=8, gap_s=("lognormal", 5.0, 1.0),
                      system_prompt_tokens=2048, first_input=("lognormal", 32768.0, 0.5),
                      turn_input=("uniform", 512, 4096), output=("lognormal", 256.0, 0.5), seed=1,
                      max_context=None)
    assert parse_agentic_spec("") == AGENTIC_DEFAULTS
    kw = parse_agentic_spec(" sessions = 3 , rate=inf, gap=exponential:2, turns=uniform:2:3, max_context=65536 ")
    assert (kw["n_sessions"], kw["rate"], kw["gap_s"], kw["turns"], kw["max_context"]) == \
           (3, math.inf, ("exponential", 2.0), ("uniform", 2, 3), 65536)
    assert kw["output"] == AGENTIC_DEFAULTS["output"]
    sessions = agentic(**kw)
    assert len(sessions) == 3 and all(s.arrival_s == 0.0 for s in sessions)
    assert parse_agentic_spec("max_context=none,gap=0.5")["gap_s"] == 0.5


@pytest.mark.parametrize("text,message", [
    ("sessions=64,speed=3", "unknown key 'speed'"),
    ("sessions", "'sessions' is not KEY=VALUE"),
    ("sessions=many", "sessions='many': expected an integer"),
    ("sessions=0", "sessions=0: must be in"),
    ("rate=0", "rate='0': must be > 0"),
    ("rate=fast", "rate='fast': expected a number"),
    ("turns=uniform:4", "turns='uniform:4': expected N, uniform:LO:HI"),
    ("turns=uniform:12:4", "turns=('uniform', 12, 4): synthetic turns uniform bounds"),
    ("gap=normal:5:1", "gap='normal:5:1': expected SECONDS"),
    ("gap=-2", "gap=-2.0: tool gap"),
    ("input=lognormal:0:1", "input=('lognormal', 0.0, 1.0): synthetic first input lognormal"),
    ("output=0", "output=0: synthetic output length must be >= 1"),
    ("system=-5", "system=-5: must be in"),
    ("seed=-1", "seed=-1: must be >= 0"),
    ("max_context=100", "max_context=100: must be >= the system prompt + 2 tokens (2,050)"),
    ("seed=1,seed=2", "seed given twice"),
    ("sessions=12,rate=1e-7", "rate=1e-07: 12 sessions would arrive over about 1.1e+08 s"),
])
def test_spec_errors_name_the_key(text, message):
    with pytest.raises(ValueError) as e:
        parse_agentic_spec(text)
    assert str(e.value).startswith("agentic spec: ") and "\n" not in str(e.value)
    assert message in str(e.value), str(e.value)


# --- scale: reading and simulating 10**6 requests or sessions takes time linear in their number ---

def _executed_lines(fn) -> int:
    """Lines of tricut's own Python (``models/``, ``sim/``) that ``fn()`` executes: a measure of
    work that, unlike a clock, the machine's load does not change."""
    import sys

    import tricut.models
    import tricut.sim
    roots = tuple(str(Path(m.__file__).parent) for m in (tricut.models, tricut.sim))
    count = 0

    def local(frame, event, arg):
        nonlocal count
        count += event == "line"
        return local

    sys.settrace(lambda frame, event, arg: local if frame.f_code.co_filename.startswith(roots) else None)
    try:
        fn()
    finally:
        sys.settrace(None)
    return count


@pytest.mark.parametrize("kind", ["trace", "sessions"])
def test_reading_and_simulating_scale_linearly(tmp_path, kind):
    """A Mooncake trace, and the same requests as one-turn sessions, read and simulated with 4
    times as many requests do 4 times the work, not 16: with requests queueing for a DSU of 4
    slots, the session run used to walk every queued session after every round (the ledger
    check) and every turn for every session (session times): 4 times the sessions did about 15
    times the work."""
    from tricut.models.config import load_gpu, load_model
    from tricut.sim.fast.agentic import AgenticOptions, simulate_sessions
    from tricut.sim.fast.setup import ServingSetup
    from tricut.sim.fast.system import simulate
    from tricut.sim.fast.workload import synthetic

    setup = ServingSetup(load_model("llama-3-8b"), load_gpu("h100-sxm5"), n_slots=4, max_batch=4)
    sm, dsu = setup.step_model(("te", "cdu", "dsu")), setup.dsu_params()

    def work(n):
        reqs = synthetic(n, 1000.0, 64, 4, seed=0)
        path = tmp_path / f"{kind}{n}.jsonl"
        if kind == "trace":
            path.write_text("".join(json.dumps({"timestamp": r.arrival_s * 1e3, "input_length": r.prompt_tokens,
                                                "output_length": r.output_tokens, "hash_ids": [r.id]}) + "\n"
                                    for r in reqs))
            run = lambda: simulate(read_trace(path), sm, dsu, prefill="disaggregated")  # noqa: E731
        else:
            write_sessions(sessions_from_requests(reqs), path)
            run = lambda: simulate_sessions(read_sessions(path), sm, dsu, AgenticOptions("keep"),  # noqa: E731
                                            prefill="disaggregated")
        return _executed_lines(run)
    small, large = work(300), work(1200)
    assert 3.5 < large / small < 5, (small, large)
