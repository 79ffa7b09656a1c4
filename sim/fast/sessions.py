"""Agentic sessions: multi-turn conversations whose turns are separated by tool-call gaps.

A session alternates model turns with tool calls (code execution, retrieval, search). Turn 0
arrives with the whole first prompt (system prompt + user message); every later turn arrives a
*tool gap* after the previous turn's last token, adding the tool output (or the next user
message) to the context, which grows by input + output every turn::

    context_before(k) = sum over j < k of (input_tokens[j] + output_tokens[j])
    prompt_tokens(k)  = context_before(k) + input_tokens[k]

Session file format (JSONL, one turn per line)
----------------------------------------------
::

    {"session": 3, "turn": 0, "arrival_s": 12.5, "input_tokens": 34000, "output_tokens": 210,
     "hash_ids": [0, 1, 2, 3, 17, 18, ...]}
    {"session": 3, "turn": 1, "gap_s": 4.2, "input_tokens": 1800, "output_tokens": 95, "hash_ids": [...]}

* ``session``: the session id, an integer >= 0 (below 2**63).
* ``turn``: 0, 1, 2, ... The turns of one session come in order, consecutive, turn 0 first;
  sessions may interleave in the file. A (session, turn) pair given twice is refused.
* ``arrival_s`` (turn 0 only): the session's arrival, seconds. ``gap_s`` (turns > 0 only): the
  tool-call gap in seconds from turn k-1's last token to turn k's input being ready. Both are
  finite numbers >= 0; a session's arrival plus its gaps must stay within the simulator's
  horizon (:data:`~tricut.sim.fast.workload.TIME_HORIZON_S`). As the trace readers do, the
  reader shifts arrivals so that the first session arrives at 0.
* ``input_tokens``: the new tokens of this turn (turn 0: the whole first prompt); ``output_tokens``:
  the tokens it decodes, the first one included. JSON integers in [1, 10**9]; a turn's prompt +
  output (the whole context) must also stay within 10**9.
* ``hash_ids`` (optional): ids of the 512-token blocks (:data:`TIER_BLOCK_TOKENS`) of the turn's
  whole prompt (context so far + input), as in Mooncake's traces: the same id means the same
  tokens from the start of the prompt to the end of that block, so its KV can be reused. At
  most ``ceil(prompt_tokens / 512)`` integers (below 2**63 in magnitude); the last one may name
  a partial block.
* Any other key is refused. Blank lines are skipped. Every error is one line ``FILE:LINE: what``
  (``FILE: what`` for a file-wide fault: missing, not UTF-8, no sessions).

Sessions are returned in order of arrival (then id).

Synthetic agentic workload (:func:`agentic`)
--------------------------------------------
**The defaults below are illustrative assumptions, not measurements.** No public trace we
hold gives per-session turn counts or tool-gap durations (Mooncake's tool-agent trace was not
available, see ``../shared/traces/README.md``); the numbers only make the shape the source
articles describe: long contexts, growing by turn, with tool gaps of seconds. Every one is a
parameter.

* Sessions arrive as a Poisson process at ``rate`` sessions/s (the first at t = 0; ``inf``: all
  at t = 0). Default 0.5 sessions/s, 64 sessions.
* ``turns`` per session: a length form (below). Default ``uniform:4:12``. At most
  :data:`MAX_TURNS` (a lognormal's tail is cut there).
* ``gap_s``, the tool gap before every turn k > 0: a number of seconds (constant),
  ``uniform:LO:HI`` (seconds), ``lognormal:MEDIAN:SIGMA`` (seconds; sigma in [0, 10]) or
  ``exponential:MEAN``. Default ``lognormal:5:1`` (median 5 s, P90 about 18 s). Draws are cut
  at :data:`MAX_GAP_S` (one day).
* ``system_prompt_tokens``: a system prompt (with tool schemas) shared by every session: turn
  0's input is ``system_prompt_tokens + first_input``. Default 2048 tokens. Its full 512-token
  blocks have the same hash ids (0, 1, ...) in every session.
* ``first_input``: the first user message, default ``lognormal:32768:0.5`` (median 32K tokens).
* ``turn_input``: the tool output (or user message) each later turn adds, default
  ``uniform:512:4096``.
* ``output``: tokens decoded per turn, default ``lognormal:256:0.5``.
* Length forms are those of ``tricut simulate --prompt-tokens`` and
  :func:`~tricut.sim.fast.workload.check_lengths`: ``N``, ``uniform:LO:HI`` (integers),
  ``lognormal:MEDIAN:SIGMA`` (rounded, at least 1, tail cut at 10**9); as tuples in Python
  (``("uniform", 512, 4096)``).
* ``max_context`` (default none, which means 10**9): a session's turns stop before the turn
  whose prompt + output would exceed it (the session simply ends earlier, so it has fewer
  turns than drawn). Turn 0 is never dropped (the session count stays exact): if it alone
  would exceed ``max_context``, its first-user-message tokens are cut to fit (and its output
  too if the output alone leaves no room for one input token after the system prompt).
  ``max_context`` must be at least ``system_prompt_tokens + 2``. Pass the model's
  ``max_context`` to get a workload the model accepts.
* ``seed``: every quantity (arrivals, turn counts, first inputs, turn inputs, outputs, gaps)
  has its own random stream derived from the seed, so changing one distribution leaves the
  draws of the others unchanged. The same arguments give the same sessions.

Prefix hashes: turn k's ``prefix_hashes`` name the blocks of its whole prompt. The system
prompt's full blocks have the ids ``0 .. system_prompt_tokens // 512 - 1`` in every session; a
session's further full blocks get ids unique to the session and stable across its turns; the
last, partial block of a prompt (if ``prompt_tokens % 512``) gets an id of its own, because
its tokens differ from the full block it becomes on the next turn (Mooncake's convention: its
traces never reuse a partial block's id as a full block). So turn k's hashes start with turn
k-1's hashes, except turn k-1's partial last block. Ids are dense: 0, 1, 2, ...

The command-line form (:func:`parse_agentic_spec`) is a comma-separated list of ``key=value``::

    sessions=64,rate=0.5,turns=uniform:4:12,gap=lognormal:5:1,system=2048,
    input=lognormal:32768:0.5,turn_input=uniform:512:4096,output=lognormal:256:0.5,seed=0,
    max_context=none

Any key left out takes the default above.

The shipped sample ``sim/data/agentic_sessions_sample.jsonl`` is ``write_sessions(agentic(
**SAMPLE_AGENTIC), path)`` (:data:`SAMPLE_AGENTIC`; ``python -m tricut.sim.fast.sessions PATH``
writes it again).
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tricut.models.jsonl import TraceError, iter_jsonl_objects, stat_input_file

from .kv_tiers import TIER_BLOCK_TOKENS
from .workload import MAX_LENGTH, MAX_SIGMA, TIME_HORIZON_S, Request, _lengths, _short, check_lengths

__all__ = ["Turn", "Session", "SessionError", "read_sessions", "write_sessions",
           "agentic", "parse_agentic_spec", "sessions_from_requests", "check_sessions",
           "AGENTIC_DEFAULTS", "SAMPLE_AGENTIC", "MAX_TURNS", "MAX_SESSIONS", "MAX_GAP_S"]

#: generator limits: turns per session, sessions, one tool gap (draws are cut there), turns in
#: all, and prefix-block ids in all (the sum over turns of the prompt's blocks)
MAX_TURNS = 10_000
MAX_SESSIONS = 1_000_000
MAX_GAP_S = 86_400.0
MAX_TOTAL_TURNS = 10_000_000
MAX_PREFIX_BLOCKS = 50_000_000

_MAX_ID = 2**63


class SessionError(TraceError):
    """A malformed session file or a bad agentic-workload parameter; ``str()`` is one line,
    naming ``file:line`` where there is one."""


@dataclass(frozen=True)
class Turn:
    input_tokens: int          # new tokens this turn adds before it decodes: turn 0 the whole first
                               # prompt (system prompt + user message); later turns the tool output
    output_tokens: int         # tokens this turn decodes (>= 1), the first one included
    gap_s: float               # turn 0: the session's arrival (s from the start); turn k > 0: the
                               # tool gap from turn k-1's last token to this turn's input being ready
    prefix_hashes: tuple[int, ...] = ()   # ids of the 512-token blocks of this turn's whole prompt
                                          # (context so far + input); () = none known


@dataclass(frozen=True)
class Session:
    id: int
    turns: tuple[Turn, ...]
    _context: tuple[int, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        turns = tuple(self.turns)
        if not turns:
            raise ValueError(f"session {self.id} has no turns")
        object.__setattr__(self, "turns", turns)
        ctx, acc = [0], 0
        for t in turns:
            acc += t.input_tokens + t.output_tokens
            ctx.append(acc)
        object.__setattr__(self, "_context", tuple(ctx))

    @property
    def arrival_s(self) -> float:
        """The session's arrival (turn 0's ``gap_s``)."""
        return self.turns[0].gap_s

    def context_before(self, k: int) -> int:
        """Tokens in the KV cache when turn ``k``'s input arrives: the sum over j < k of
        input_j + output_j (``k == len(turns)``: the whole context after the last turn)."""
        if not 0 <= k <= len(self.turns):
            raise IndexError(f"session {self.id}: turn {k} out of range 0..{len(self.turns)}")
        return self._context[k]

    def prompt_tokens(self, k: int) -> int:
        """``context_before(k) + turns[k].input_tokens``: the prompt turn ``k`` prefills."""
        if not 0 <= k < len(self.turns):
            raise IndexError(f"session {self.id}: turn {k} out of range 0..{len(self.turns) - 1}")
        return self._context[k] + self.turns[k].input_tokens


def _blocks(tokens: int) -> int:
    return -(-tokens // TIER_BLOCK_TOKENS)


# ----------------------------------------------------------------------------------------------
# the file format

_KEYS = ("session", "turn", "arrival_s", "gap_s", "input_tokens", "output_tokens", "hash_ids")


def _int(row: dict, key: str, label: str, minimum: int, maximum: int) -> int:
    if key not in row:
        raise SessionError(f"{label}: missing field {key!r}")
    v = row[key]
    if isinstance(v, bool) or not isinstance(v, int):
        raise SessionError(f"{label}: {key} must be an integer, got {_short(v)}")
    if not minimum <= v <= maximum:
        raise SessionError(f"{label}: {key} must be >= {minimum} and <= {maximum:,}, got {_short(v)}")
    return v


def _seconds(row: dict, key: str, label: str) -> float:
    v = row[key]
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise SessionError(f"{label}: {key} must be a number of seconds, got {_short(v)}")
    try:
        t = float(v)
    except OverflowError:
        t = math.inf
    if not math.isfinite(t) or t < 0:
        raise SessionError(f"{label}: {key} must be a finite number >= 0, got {_short(v)}")
    if t > TIME_HORIZON_S:
        raise SessionError(f"{label}: {key} {t:.3g} s is beyond the simulator's horizon of "
                           f"{TIME_HORIZON_S:g} s")
    return t


def _hash_ids(row: dict, label: str, prompt: int) -> tuple[int, ...]:
    h = row.get("hash_ids", [])
    if not isinstance(h, list) or not all(
            isinstance(x, int) and not isinstance(x, bool) and -_MAX_ID <= x < _MAX_ID for x in h):
        raise SessionError(f"{label}: hash_ids must be a list of integers (each below 2**63 in magnitude)")
    if len(h) > _blocks(prompt):
        raise SessionError(f"{label}: hash_ids names {len(h)} blocks but the prompt of {prompt:,} "
                           f"tokens (context + input) fills only {_blocks(prompt)} blocks of "
                           f"{TIER_BLOCK_TOKENS}")
    return tuple(h)


def read_sessions(path: str | Path) -> list[Session]:
    """Read a session file (format in the module docstring); a :class:`SessionError` naming
    ``file:line`` for the first fault."""
    path = Path(path)
    stat_input_file(path, "a session file", SessionError, pipe_ok=True)
    turns: dict[int, list[Turn]] = {}
    lines: dict[int, list[str]] = {}     # session -> label of each turn
    context: dict[int, int] = {}
    clock: dict[int, float] = {}         # arrival + gaps so far
    for label, row in iter_jsonl_objects(path, SessionError):
        for key in row:
            if key not in _KEYS:
                raise SessionError(f"{label}: unknown key {_short(key)} (expected {', '.join(_KEYS)})")
        sid = _int(row, "session", label, 0, _MAX_ID - 1)
        k = _int(row, "turn", label, 0, _MAX_ID - 1)
        seen = lines.get(sid, [])
        if k < len(seen):
            raise SessionError(f"{label}: duplicate turn {k} of session {sid} (first on line "
                               f"{seen[k].rsplit(':', 1)[1]})")
        if k > len(seen):
            raise SessionError(f"{label}: session {sid} turn {k} out of order: expected turn {len(seen)} "
                               "next (a session's turns come in order 0, 1, 2, ...)")
        if k == 0:
            if "gap_s" in row:
                raise SessionError(f"{label}: gap_s on turn 0 (turn 0 gives the session's arrival_s; "
                                   "gap_s is the tool gap before a later turn)")
            if "arrival_s" not in row:
                raise SessionError(f"{label}: missing field 'arrival_s' (turn 0 gives the session's arrival)")
            t = _seconds(row, "arrival_s", label)
            total = t
        else:
            if "arrival_s" in row:
                raise SessionError(f"{label}: arrival_s on turn {k} (only turn 0 has an arrival; a later "
                                   "turn gives gap_s, the tool gap after the previous turn)")
            if "gap_s" not in row:
                raise SessionError(f"{label}: missing field 'gap_s' (turn {k} > 0 gives the tool gap "
                                   f"after turn {k - 1})")
            t = _seconds(row, "gap_s", label)
            total = clock[sid] + t
            if total > TIME_HORIZON_S:
                raise SessionError(f"{label}: session {sid}'s arrival and tool gaps add up to {total:.3g} s, "
                                   f"beyond the simulator's horizon of {TIME_HORIZON_S:g} s")
        n_in = _int(row, "input_tokens", label, 1, MAX_LENGTH)
        n_out = _int(row, "output_tokens", label, 1, MAX_LENGTH)
        ctx = context.get(sid, 0)
        if ctx + n_in + n_out > MAX_LENGTH:
            raise SessionError(f"{label}: session {sid} turn {k}: context {ctx:,} + input {n_in:,} + "
                               f"output {n_out:,} tokens exceeds {MAX_LENGTH:,}")
        hashes = _hash_ids(row, label, ctx + n_in)
        turns.setdefault(sid, []).append(Turn(n_in, n_out, t, hashes))
        lines.setdefault(sid, []).append(label)
        context[sid] = ctx + n_in + n_out
        clock[sid] = total
    if not turns:
        raise SessionError(f"{path}: no sessions in the file")
    t0 = min(ts[0].gap_s for ts in turns.values())
    out = []
    for sid, ts in turns.items():
        first = ts[0]
        ts[0] = Turn(first.input_tokens, first.output_tokens, first.gap_s - t0, first.prefix_hashes)
        out.append(Session(sid, tuple(ts)))
    out.sort(key=lambda s: (s.arrival_s, s.id))
    return out


def write_sessions(sessions: list[Session], path: str | Path) -> None:
    """Write ``sessions`` in the session file format, session by session (turn 0 first), so
    that :func:`read_sessions` gives them back (arrivals shifted to start at 0)."""
    rows = []
    for s in sessions:
        for k, t in enumerate(s.turns):
            row = {"session": s.id, "turn": k, ("arrival_s" if k == 0 else "gap_s"): float(t.gap_s),
                   "input_tokens": t.input_tokens, "output_tokens": t.output_tokens}
            if t.prefix_hashes:
                row["hash_ids"] = list(t.prefix_hashes)
            rows.append(json.dumps(row) + "\n")
    Path(path).write_text("".join(rows), encoding="utf-8")


def sessions_from_requests(requests: list[Request]) -> list[Session]:
    """Each request a one-turn session: same id, its prompt as turn 0's input, its output, its
    arrival as turn 0's ``gap_s``, its prefix hashes (Mooncake's ``hash_ids``) kept."""
    return [Session(r.id, (Turn(r.prompt_tokens, r.output_tokens, r.arrival_s, tuple(r.prefix_hashes)),))
            for r in requests]


def check_sessions(sessions: list[Session], max_context: int) -> None:
    """A :class:`SessionError` (a ``ValueError``) naming the first session and turn whose
    prompt + output exceeds ``max_context``."""
    for s in sessions:
        for k, t in enumerate(s.turns):
            p = s.prompt_tokens(k)
            if p + t.output_tokens > max_context:
                raise SessionError(f"session {s.id} turn {k}: prompt {p:,} (context {s.context_before(k):,} "
                                   f"+ input {t.input_tokens:,}) + output {t.output_tokens:,} tokens "
                                   f"exceeds max_context {max_context:,}")


# ----------------------------------------------------------------------------------------------
# the synthetic generator

#: :func:`agentic`'s defaults (illustrative assumptions, not measurements; see the docstring)
AGENTIC_DEFAULTS = dict(
    n_sessions=64, rate=0.5, turns=("uniform", 4, 12), gap_s=("lognormal", 5.0, 1.0),
    first_input=("lognormal", 32768.0, 0.5), turn_input=("uniform", 512, 4096),
    output=("lognormal", 256.0, 0.5), system_prompt_tokens=2048, seed=0, max_context=None)

#: the call that wrote ``sim/data/agentic_sessions_sample.jsonl`` (short contexts keep it small)
SAMPLE_AGENTIC = dict(
    n_sessions=12, rate=0.5, turns=("uniform", 3, 8), gap_s=("lognormal", 5.0, 1.0),
    first_input=("lognormal", 4096.0, 0.5), turn_input=("uniform", 256, 2048),
    output=("lognormal", 256.0, 0.5), system_prompt_tokens=1024, seed=16, max_context=32768)


def _is_int(x) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, bool)


def _is_num(x) -> bool:
    return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, bool)


def _check_turns(spec) -> None:
    check_lengths(spec, "turns")
    top = spec if not isinstance(spec, tuple) else spec[2] if spec[0] == "uniform" else spec[1]
    if top > MAX_TURNS:
        raise SessionError(f"synthetic turns per session must be <= {MAX_TURNS:,} (a lognormal's median "
                           f"too), got {spec!r}")


def _check_gap(spec) -> None:
    ok = False
    if _is_num(spec):
        ok = math.isfinite(spec) and 0 <= spec <= MAX_GAP_S
    elif isinstance(spec, tuple) and len(spec) == 3 and spec[0] == "uniform":
        ok = all(_is_num(x) and math.isfinite(x) for x in spec[1:]) and 0 <= spec[1] <= spec[2] <= MAX_GAP_S
    elif isinstance(spec, tuple) and len(spec) == 3 and spec[0] == "lognormal":
        ok = all(_is_num(x) and math.isfinite(x) for x in spec[1:]) and 0 < spec[1] <= MAX_GAP_S \
            and 0 <= spec[2] <= MAX_SIGMA
    elif isinstance(spec, tuple) and len(spec) == 2 and spec[0] == "exponential":
        ok = _is_num(spec[1]) and math.isfinite(spec[1]) and 0 < spec[1] <= MAX_GAP_S
    if not ok:
        raise SessionError(f"tool gap: expected seconds in [0, {MAX_GAP_S:g}] as a number, ('uniform', lo, hi), "
                           f"('lognormal', median > 0, sigma in [0, {MAX_SIGMA:g}]) or ('exponential', mean > 0), "
                           f"got {spec!r}")


def _gaps(spec, n: int, rng: np.random.Generator) -> np.ndarray:
    if not isinstance(spec, tuple):
        return np.full(n, float(spec))
    if spec[0] == "uniform":
        draws = rng.uniform(spec[1], spec[2], size=n)
    elif spec[0] == "lognormal":
        draws = rng.lognormal(math.log(spec[1]), spec[2], size=n)
    else:
        draws = rng.exponential(spec[1], size=n)
    return np.minimum(draws, MAX_GAP_S)


def agentic(n_sessions=AGENTIC_DEFAULTS["n_sessions"], rate=AGENTIC_DEFAULTS["rate"],
            turns=AGENTIC_DEFAULTS["turns"], gap_s=AGENTIC_DEFAULTS["gap_s"],
            first_input=AGENTIC_DEFAULTS["first_input"], turn_input=AGENTIC_DEFAULTS["turn_input"],
            output=AGENTIC_DEFAULTS["output"], system_prompt_tokens=AGENTIC_DEFAULTS["system_prompt_tokens"],
            seed=0, max_context=None) -> list[Session]:
    """A synthetic agentic workload (distributions, defaults and the prefix-hash scheme in the
    module docstring); a :class:`SessionError` for a bad parameter."""
    if not _is_int(n_sessions) or not 1 <= n_sessions <= MAX_SESSIONS:
        raise SessionError(f"synthetic session count must be an integer in [1, {MAX_SESSIONS:,}], got {n_sessions!r}")
    n_sessions = int(n_sessions)
    if not _is_num(rate) or not rate > 0:
        raise SessionError(f"synthetic rate must be > 0 sessions/s, got {rate!r}")
    if not math.isinf(rate) and (n_sessions - 1) / rate > TIME_HORIZON_S:
        raise SessionError(f"synthetic rate {rate:g} sessions/s: {n_sessions} arrivals would span about "
                           f"{(n_sessions - 1) / rate:.3g} s, beyond the simulator's {TIME_HORIZON_S:g} s horizon")
    _check_turns(turns)
    _check_gap(gap_s)
    for spec, what in ((first_input, "first input"), (turn_input, "turn input"), (output, "output")):
        check_lengths(spec, what)
    if not _is_int(system_prompt_tokens) or not 0 <= system_prompt_tokens <= MAX_LENGTH:
        raise SessionError(f"system prompt tokens must be an integer in [0, {MAX_LENGTH:,}], "
                           f"got {system_prompt_tokens!r}")
    system = int(system_prompt_tokens)
    if not _is_int(seed) or seed < 0:
        raise SessionError(f"seed must be an integer >= 0, got {seed!r}")
    if max_context is not None and (not _is_int(max_context) or max_context < system + 2):
        raise SessionError(f"max_context must be an integer >= the system prompt + 2 tokens "
                           f"({system + 2:,}: one input and one output token), got {max_context!r}")
    cap = MAX_LENGTH if max_context is None else min(int(max_context), MAX_LENGTH)
    if cap < system + 2:
        raise SessionError(f"system prompt tokens must leave room for one input and one output token "
                           f"within {cap:,}, got {system:,}")

    streams = [np.random.default_rng(s) for s in np.random.SeedSequence(int(seed)).spawn(6)]
    r_arrival, r_turns, r_first, r_input, r_output, r_gap = streams
    arrivals = (np.zeros(n_sessions) if math.isinf(rate) else
                np.concatenate([[0.0], np.cumsum(r_arrival.exponential(1.0 / rate, size=n_sessions - 1))]))
    counts = np.minimum(_lengths(turns, n_sessions, r_turns, "turns"), MAX_TURNS)
    total = int(counts.sum())
    if total > MAX_TOTAL_TURNS:
        raise SessionError(f"synthetic workload of {total:,} turns, more than {MAX_TOTAL_TURNS:,}: "
                           "fewer sessions or turns")
    firsts = _lengths(first_input, n_sessions, r_first, "first input")
    inputs = _lengths(turn_input, total, r_input, "turn input")
    outputs = _lengths(output, total, r_output, "output")
    gaps = _gaps(gap_s, total, r_gap)

    # token counts per turn, cut at the context cap
    plan = []          # per session: [(input, output, gap), ...]
    blocks = 0
    offset = 0
    for s in range(n_sessions):
        n = int(counts[s])
        rows, ctx = [], 0
        for k in range(n):
            i, o = int(inputs[offset + k]), int(outputs[offset + k])
            if k == 0:
                o = min(o, cap - system - 1)
                i = min(system + int(firsts[s]), cap - o)
                g = float(arrivals[s])
            else:
                if ctx + i + o > cap:
                    break
                g = float(gaps[offset + k])
            rows.append((i, o, g))
            blocks += _blocks(ctx + i)
            ctx += i + o
        offset += n
        if sum(g for _, _, g in rows) > TIME_HORIZON_S:
            raise SessionError(f"synthetic session {s}: arrival and tool gaps add up to beyond the simulator's "
                               f"{TIME_HORIZON_S:g} s horizon: shorter gaps or fewer turns")
        plan.append(rows)
    if blocks > MAX_PREFIX_BLOCKS:
        raise SessionError(f"synthetic workload needs {blocks:,} prefix-block ids over all turns, more than "
                           f"{MAX_PREFIX_BLOCKS:,}: fewer sessions, turns or tokens")

    # prefix hashes: shared system blocks 0..n_sys-1, then ids unique to a session
    n_sys = system // TIER_BLOCK_TOKENS
    shared = tuple(range(n_sys))
    next_id = n_sys
    out = []
    for s, rows in enumerate(plan):
        own: list[int] = []          # ids of the session's full blocks after the shared ones
        ctx = 0
        ts = []
        for i, o, g in rows:
            prompt = ctx + i
            full = prompt // TIER_BLOCK_TOKENS
            while n_sys + len(own) < full:
                own.append(next_id)
                next_id += 1
            hashes = shared + tuple(own[:full - n_sys])
            if prompt % TIER_BLOCK_TOKENS:
                hashes += (next_id,)
                next_id += 1
            ts.append(Turn(i, o, g, hashes))
            ctx = prompt + o
        out.append(Session(s, tuple(ts)))
    return out


# ----------------------------------------------------------------------------------------------
# the command-line form

_SPEC_KEYS = {"sessions": "n_sessions", "rate": "rate", "turns": "turns", "gap": "gap_s",
              "system": "system_prompt_tokens", "input": "first_input", "turn_input": "turn_input",
              "output": "output", "seed": "seed", "max_context": "max_context"}


def _parse_length(text: str):
    """``N``, ``uniform:LO:HI`` or ``lognormal:MEDIAN:SIGMA`` (as ``tricut simulate --prompt-tokens``)."""
    parts = text.split(":")
    try:
        if len(parts) == 1:
            return int(parts[0])
        if len(parts) == 3 and parts[0] == "uniform":
            return ("uniform", int(parts[1]), int(parts[2]))
        if len(parts) == 3 and parts[0] == "lognormal":
            return ("lognormal", float(parts[1]), float(parts[2]))
    except ValueError:
        pass
    raise ValueError("expected N, uniform:LO:HI or lognormal:MEDIAN:SIGMA")


def _parse_gap(text: str):
    parts = text.split(":")
    try:
        if len(parts) == 1:
            return float(parts[0])
        if len(parts) == 3 and parts[0] in ("uniform", "lognormal"):
            return (parts[0], float(parts[1]), float(parts[2]))
        if len(parts) == 2 and parts[0] == "exponential":
            return ("exponential", float(parts[1]))
    except ValueError:
        pass
    raise ValueError("expected SECONDS, uniform:LO:HI, lognormal:MEDIAN:SIGMA or exponential:MEAN")


def _parse_int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ValueError("expected an integer") from None


def _parse_rate(text: str) -> float:
    try:
        rate = float(text)
    except ValueError:
        raise ValueError("expected a number of sessions/s (or inf)") from None
    if not rate > 0:
        raise ValueError("must be > 0 sessions/s (or inf)")
    return rate


def _parse_max_context(text: str):
    return None if text.lower() == "none" else _parse_int(text)


_PARSERS = {"sessions": _parse_int, "rate": _parse_rate, "turns": _parse_length, "gap": _parse_gap,
            "system": _parse_int, "input": _parse_length, "turn_input": _parse_length,
            "output": _parse_length, "seed": _parse_int, "max_context": _parse_max_context}

def parse_agentic_spec(text: str) -> dict:
    """``'sessions=64,rate=0.5,turns=uniform:4:12,...'`` (keys in the module docstring) -> the
    keyword arguments of :func:`agentic`, every key left out at its default; a one-line
    :class:`SessionError` (a ``ValueError``) naming the key of a bad or unknown item."""
    kwargs = dict(AGENTIC_DEFAULTS)
    given = set()
    for item in (p.strip() for p in text.split(",")):
        if not item:
            continue
        key, eq, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not eq:
            raise SessionError(f"agentic spec: {_short(item)} is not KEY=VALUE "
                               f"(keys: {', '.join(_SPEC_KEYS)})")
        if key not in _SPEC_KEYS:
            raise SessionError(f"agentic spec: unknown key {_short(key)} (keys: {', '.join(_SPEC_KEYS)})")
        if key in given:
            raise SessionError(f"agentic spec: {key} given twice")
        given.add(key)
        try:
            kwargs[_SPEC_KEYS[key]] = _PARSERS[key](value)
        except ValueError as e:
            raise SessionError(f"agentic spec: {key}={_short(value)}: {e}") from None
    # each value checked with the others at their defaults, so that the message names its key
    for key, name in _SPEC_KEYS.items():
        if key not in given or name == "max_context":
            continue
        try:
            _check_one(name, kwargs[name])
        except TraceError as e:
            raise SessionError(f"agentic spec: {key}={_short(kwargs[name])}: {e}") from None
    n, rate = kwargs["n_sessions"], kwargs["rate"]
    if not math.isinf(rate) and (n - 1) / rate > TIME_HORIZON_S:
        raise SessionError(f"agentic spec: rate={rate:g}: {n} sessions would arrive over about {(n - 1) / rate:.3g} s, "
                           f"beyond the simulator's {TIME_HORIZON_S:g} s horizon")
    if kwargs["max_context"] is not None:
        try:
            _check_one("max_context", kwargs["max_context"], kwargs["system_prompt_tokens"])
        except TraceError as e:
            raise SessionError(f"agentic spec: max_context={kwargs['max_context']}: {e}") from None
    return kwargs


def _check_one(name: str, value, system: int = 0) -> None:
    """The check :func:`agentic` makes of one parameter (without drawing anything)."""
    if name == "turns":
        _check_turns(value)
    elif name == "gap_s":
        _check_gap(value)
    elif name in ("first_input", "turn_input", "output"):
        check_lengths(value, name.replace("_", " "))
    elif name == "n_sessions":
        if not 1 <= value <= MAX_SESSIONS:
            raise SessionError(f"must be in [1, {MAX_SESSIONS:,}]")
    elif name == "system_prompt_tokens":
        if not 0 <= value <= MAX_LENGTH:
            raise SessionError(f"must be in [0, {MAX_LENGTH:,}]")
    elif name == "seed":
        if value < 0:
            raise SessionError("must be >= 0")
    elif name == "max_context":
        if value < system + 2:
            raise SessionError(f"must be >= the system prompt + 2 tokens ({system + 2:,})")


def _main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m tricut.sim.fast.sessions OUT.jsonl  (writes the shipped sample)", file=sys.stderr)
        return 2
    write_sessions(agentic(**SAMPLE_AGENTIC), argv[0])
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
