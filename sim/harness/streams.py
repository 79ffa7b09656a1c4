"""One stream-driver vocabulary for every unit bench, independent of the simulator.

The drivers decide, cycle by cycle, what the testbench puts on a valid/ready stream (``valid``
and the payload of a source, ``ready`` of a sink, the answers of a memory model) from a seeded
RNG and a :class:`Schedule`; they never touch a simulator. A bench applies them through a thin
adapter: the Amaranth benches with ``ctx.set``/``ctx.get``, the cocotb benches with
``dut.x.value``. Per cycle, in this order:

1. ``drive()`` on every driver (inputs of this cycle; decided from the driver's own state,
   never from this cycle's outputs of the design);
2. the adapter applies them, lets the design settle and reads the design's side;
3. ``sample(...)`` on every driver with what the clock edge will see (a transfer is
   ``valid and ready`` on that edge).

Schedules (the ``idle`` of a source or memory model, the ``backpressure`` of a sink) give one
bit per cycle, 1 = active (a source may offer its next beat, a sink is ready):

* ``none``: always 1;
* ``random``: 1 with probability ``p`` (seeded);
* ``periodic``: a repeating pattern, e.g. ``(1, 1, 1, 0)``: active 3 cycles of every 4.

This is the complement of cocotbext-axi's ``idle_inserter``/``backpressure_inserter``
generators, which yield 1 to *pause* (there ``itertools.cycle([1, 1, 1, 0])`` pauses 3 cycles
of 4). Every bench runs under the :data:`IDLE_BACKPRESSURE` matrix (``idle`` x
``backpressure`` over :data:`MODES`) and ends with :func:`assert_drained`: every source empty,
no beat in flight on any stream, the memory model with nothing pending, every sink with
exactly the beats it should have.

A :class:`Source` keeps a beat valid until it transfers (valid never waits on ready, and
never drops); the schedule only decides when the *next* beat is offered. This module imports
neither amaranth nor cocotb.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass

__all__ = ["MODES", "IDLE_BACKPRESSURE", "PERIODIC", "RANDOM_P", "Schedule", "Gate",
           "stream_rng", "Source", "Sink", "MemoryModel", "NotDrained", "drained",
           "assert_drained", "matrix_id"]

#: the schedule modes, in the order of the matrix
MODES = ("none", "random", "periodic")
#: the default ``periodic`` pattern: active 3 cycles of every 4
PERIODIC = (1, 1, 1, 0)
#: the default ``random`` probability of an active cycle
RANDOM_P = 0.7
#: every (idle, backpressure) pair of modes: what each unit bench runs under
IDLE_BACKPRESSURE = [(i, b) for i in MODES for b in MODES]


def matrix_id(pair):
    """pytest id of an (idle, backpressure) pair: ``"idle=random-bp=none"``."""
    return f"idle={pair[0]}-bp={pair[1]}"


@dataclass(frozen=True)
class Schedule:
    """When a stream end is active: ``mode`` in :data:`MODES`; ``p`` the probability of an
    active cycle (``random``); ``pattern`` the repeating 0/1 cycle pattern (``periodic``)."""
    mode: str = "none"
    p: float = RANDOM_P
    pattern: tuple = PERIODIC

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"schedule mode must be one of {', '.join(MODES)}, got {self.mode!r}")
        if isinstance(self.p, bool) or not isinstance(self.p, (int, float)) or \
                not 0 < self.p <= 1:
            raise ValueError(f"random schedule: p must be in (0, 1], got {self.p!r}")
        pat = tuple(self.pattern)
        if not pat or any(x not in (0, 1) or isinstance(x, bool) for x in pat) or 1 not in pat:
            raise ValueError(f"periodic schedule: pattern must be 0/1 values with at least one 1, "
                             f"got {self.pattern!r}")
        object.__setattr__(self, "pattern", pat)

    @classmethod
    def of(cls, spec) -> "Schedule":
        """A Schedule from a Schedule, a mode name, a :meth:`to_json` dict, ``None`` (none)
        or a number: the probability of an *active* cycle (1 = ``none``, else ``random``)."""
        if isinstance(spec, Schedule):
            return spec
        if spec is None:
            return cls()
        if isinstance(spec, str):
            return cls(spec)
        if isinstance(spec, dict):
            return cls(spec.get("mode", "none"), spec.get("p", RANDOM_P),
                       tuple(spec.get("pattern", PERIODIC)))
        if isinstance(spec, (int, float)) and not isinstance(spec, bool):
            return cls() if spec == 1 else cls("random", p=spec)
        raise ValueError(f"not a schedule: {spec!r}")

    def to_json(self) -> dict:
        return {"mode": self.mode, "p": self.p, "pattern": list(self.pattern)}

    @property
    def duty(self) -> float:
        """The long-run fraction of active cycles."""
        if self.mode == "none":
            return 1.0
        if self.mode == "random":
            return float(self.p)
        return sum(self.pattern) / len(self.pattern)

    def gate(self, rng=None) -> "Gate":
        return Gate(self, rng)

    def __str__(self):
        if self.mode == "random":
            return f"random(p={self.p:g})"
        if self.mode == "periodic":
            return f"periodic({''.join(map(str, self.pattern))})"
        return "none"


class Gate:
    """One stream end's per-cycle bit: call once per cycle. ``none`` and ``periodic`` draw
    nothing from the RNG; ``random`` draws one number per call."""

    def __init__(self, schedule: Schedule, rng=None):
        self.schedule = Schedule.of(schedule)
        self.rng = rng if rng is not None else random.Random(0)
        self._cycle = itertools.cycle(self.schedule.pattern)

    def __call__(self) -> int:
        s = self.schedule
        if s.mode == "none":
            return 1
        if s.mode == "random":
            return int(self.rng.random() < s.p)
        return next(self._cycle)


def stream_rng(seed, name) -> random.Random:
    """The RNG of one stream end of a seeded run: independent of every other stream's (adding
    a stream or changing one's schedule leaves the others' sequences alone); the same in every
    process (string seeds do not depend on ``PYTHONHASHSEED``)."""
    return random.Random(f"{seed}/{name}")


class Source:
    """Drives one input stream of the design with ``beats`` (any payload objects; the adapter
    converts them). ``drive()`` -> ``(valid, payload)``: offers the next beat on a cycle the
    ``idle`` schedule allows and keeps it valid until it transfers; while not valid the
    payload is the last beat driven (``None`` before the first: leave the port as it is)."""

    def __init__(self, name, beats, idle=None, seed=0, rng=None):
        self.name, self.beats = name, list(beats)
        self.gate = Schedule.of(idle).gate(rng if rng is not None else stream_rng(seed, name))
        self.i = 0
        self.presenting = False
        self.valid = 0
        self._last = None

    def drive(self):
        go = self.gate()           # advanced every cycle, like a pause generator
        if not self.presenting and self.i < len(self.beats) and go:
            self.presenting = True
        self.valid = int(self.presenting)
        if self.presenting:
            self._last = self.beats[self.i]
        return self.valid, self._last

    def sample(self, ready) -> bool:
        """After the design settled: ``ready`` as the edge sees it; True if a beat transferred."""
        if self.presenting and ready:
            self.i += 1
            self.presenting = False
            return True
        return False

    @property
    def done(self):
        return self.i == len(self.beats)

    @property
    def left(self):
        return len(self.beats) - self.i

    def problems(self):
        out = []
        if self.presenting:
            out.append(f"{self.name}: beat {self.i} valid and never taken")
        if not self.done:
            out.append(f"{self.name}: {self.left} of {len(self.beats)} beats not sent")
        return out


class Sink:
    """Takes one output stream of the design: ``drive()`` -> ``ready`` by the
    ``backpressure`` schedule; ``sample(valid, payload)`` records each transferred beat in
    ``beats`` (``payload`` may be a zero-argument callable, read only on a transfer).

    ``expect``: the number of beats, or the list of beats, the sink must end with (checked by
    :func:`assert_drained`); ``None`` leaves that to the bench's own comparison. A beat the
    design holds valid that was not taken on the last sampled cycle is *in flight*."""

    def __init__(self, name, backpressure=None, seed=0, rng=None, expect=None):
        self.name = name
        self.gate = Schedule.of(backpressure).gate(rng if rng is not None
                                                   else stream_rng(seed, name))
        self.beats = []
        self.ready = 0
        self.in_flight = False
        self.expect = expect

    def drive(self) -> int:
        self.ready = self.gate()
        return self.ready

    def sample(self, valid, payload=None) -> bool:
        if valid and self.ready:
            self.beats.append(payload() if callable(payload) else payload)
            self.in_flight = False
            return True
        self.in_flight = bool(valid)
        return False

    def problems(self):
        out = []
        if self.in_flight:
            out.append(f"{self.name}: a beat valid and not taken")
        e = self.expect
        if isinstance(e, int) and not isinstance(e, bool):
            if len(self.beats) != e:
                out.append(f"{self.name}: {len(self.beats)} beats received, {e} expected")
        elif e is not None:
            e = list(e)
            if self.beats != e:
                n = next((k for k, (a, b) in enumerate(zip(self.beats, e)) if a != b),
                         min(len(self.beats), len(e)))
                out.append(f"{self.name}: {len(self.beats)} beats received, {len(e)} expected, "
                           f"first difference at beat {n}")
        return out


class MemoryModel:
    """A memory (or any responder) answering requests out of order: each request is answered
    after a random latency of 1..``max_latency`` cycles; among the answers due, ``order``
    ``"random"`` picks one at random (an out-of-order HBM), ``"due"`` the earliest due (ties:
    lowest id). An answer ``(id, err)`` is offered on a cycle the ``idle`` schedule allows
    and held valid until taken. ``err(tag, attempt)`` decides which answers carry the error
    bit (``attempt`` counts retries of the same id: 0 for a first request).

    ``rng`` draws the latencies and the random order; the idle gate has its own RNG
    (``gate_rng``, default :func:`stream_rng` of ``seed`` and ``name``)."""

    def __init__(self, rng, max_latency=12, err=None, idle=None, *, name="memory", seed=0,
                 gate_rng=None, order="random"):
        if order not in ("random", "due"):
            raise ValueError(f"order must be 'random' or 'due', got {order!r}")
        self.rng, self.max_latency = rng, max_latency
        self.err = err or (lambda tag, attempt: False)
        self.name, self.order = name, order
        self.gate = Schedule.of(idle).gate(gate_rng if gate_rng is not None
                                           else stream_rng(seed, name))
        self.pending = []          # [due cycle, id, tag, attempt]
        self.attempts = {}
        self.errors = 0
        self.answered = 0
        self.presenting = None     # (id, err) offered until taken

    def request(self, now, rid, tag=None, retry=False):
        """Take a request on cycle ``now`` (``retry``: the same id again)."""
        a = self.attempts.get(rid, 0) + 1 if retry else 0
        self.attempts[rid] = a
        self.pending.append([now + self.rng.randrange(1, self.max_latency + 1), rid, tag, a])

    def drive(self, now):
        """The answer ``(id, err)`` valid on cycle ``now``, or None."""
        go = self.gate()
        if self.presenting is None and go:
            due = [p for p in self.pending if p[0] <= now]
            if due:
                p = self.rng.choice(due) if self.order == "random" else min(due, key=lambda x: x[:2])
                self.pending.remove(p)
                e = bool(self.err(p[2], p[3]))
                self.errors += e
                self.presenting = (p[1], int(e))
        return self.presenting

    def sample(self, ready) -> bool:
        """True if the answer offered this cycle was taken."""
        if self.presenting is not None and ready:
            self.presenting = None
            self.answered += 1
            return True
        return False

    @property
    def idle(self):
        return not self.pending and self.presenting is None

    def problems(self):
        out = []
        if self.presenting is not None:
            out.append(f"{self.name}: answer {self.presenting} valid and never taken")
        if self.pending:
            out.append(f"{self.name}: {len(self.pending)} requests never answered")
        return out


class NotDrained(AssertionError):
    """A bench ended with a beat left behind; the message is one line."""


def drained(*ends) -> list:
    """What is left in ``ends`` (sources, sinks, memory models; nested lists and dicts of
    them are flattened): an empty list when everything drained."""
    out = []
    for e in ends:
        if isinstance(e, dict):
            out += drained(*e.values())
        elif isinstance(e, (list, tuple)):
            out += drained(*e)
        elif e is not None:
            out += e.problems()
    return out


def assert_drained(*ends, where="bench"):
    """Raise :class:`NotDrained` naming everything left behind (see :func:`drained`)."""
    left = drained(*ends)
    if left:
        raise NotDrained(f"{where} not drained: " + "; ".join(left))
