"""The DSU's restore moves drive the CDU's restore descriptor (issue 16), at the golden-model
level: every restore the scheduler decides in a round becomes, in that round's CDU step, one
restore triple per layer, and the CDU issues exactly one S op per block of each -- before the
step's own ops, after the earlier steps' -- with its counters, and nothing else changes."""

from __future__ import annotations

import random

import pytest

from tricut.models.cdu import (HINT_OF_RESIDENCY, KV_BLOCK_TOKENS, POLICIES, CDUCore, FrontEnd,
                               SlotDesc, StepDesc)
from tricut.models.dsu import DsuParams, RequestSpec, Session, SessionTurn, run_sessions

LAYERS = 3


def _workload(seed):
    rng = random.Random(seed)
    reqs = [RequestSpec(i, rng.randint(10, 60), rng.randint(1, 4), arrival_step=rng.randint(0, 4))
            for i in range(4)]
    sessions = [Session(RequestSpec(100 + k, rng.randint(20, 80), rng.randint(1, 3),
                                    arrival_step=rng.randint(0, 4)),
                        tuple(SessionTurn(rng.randint(1, 4), rng.randint(1, 20), rng.randint(1, 3))
                              for _ in range(rng.randint(1, 3))))
                for k in range(4)]
    return reqs, sessions


def _steps(batches, moves):
    """The CDU step of every DSU round: its batch as slots, every layer, and the round's restore
    moves as one (request, layer, tokens) triple per layer."""
    restores: dict[int, list] = {}
    for m in moves:
        if m.kind == "restore":
            restores.setdefault(m.round, []).extend((m.request, layer, m.tokens) for layer in range(LAYERS))
    return [StepDesc(r, tuple(SlotDesc(d.slot, d.request, d.seq_len, HINT_OF_RESIDENCY[d.residency])
                              for d in batch), tuple(range(LAYERS)), tuple(restores.get(r, ())))
            for r, batch in enumerate(batches)]


def _demand(step, slot, layer):
    return list(range(-(-slot.seq_len // KV_BLOCK_TOKENS)))


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("park_policy", ["park", "park-early"])
def test_every_dsu_restore_becomes_the_cdu_restore_ops_of_its_blocks(policy, park_policy):
    reqs, sessions = _workload(5)
    params = DsuParams(profile="throughput-opt", n_slots=4, max_batch=4, latency_batch=1,
                       kv_capacity_tokens=400, park_policy=park_policy)
    batches, _, moves, _ = run_sessions(reqs, sessions, params, {}, lead=2)
    restore_moves = [m for m in moves if m.kind == "restore"]
    assert restore_moves, "the workload must make the DSU restore something"
    steps = _steps(batches, moves)

    ops = list(FrontEnd(policy, 16, distance=4).ops(steps, _demand))
    s_ops = [(o.req, o.layer, o.block) for o in ops if o.kind == "S"]
    expect = [(m.request, layer, b) for m in restore_moves for layer in range(LAYERS)
              for b in range(-(-m.tokens // KV_BLOCK_TOKENS))]
    assert s_ops == expect

    core = CDUCore(4, 4, block_bytes=512)
    for o in ops:
        core.apply(o)
    c = core.check()
    assert c["restores"] == len(expect) and c["restore_bytes"] == 512 * len(expect)

    # without the restores the CDU makes the same decisions for every other op
    plain = CDUCore(4, 4, block_bytes=512)
    for o in FrontEnd(policy, 16, distance=4).ops(
            [StepDesc(s.step, s.slots, s.layers) for s in steps], _demand):
        plain.apply(o)
    assert [t for t in core.txns if t.kind != "S"] == plain.txns


def test_a_restore_comes_before_the_ops_of_its_step():
    """The S ops of a round's restores precede every op of that round's slots (the CDU has the
    blocks on their way to HBM before it reads or prefetches any of them for the step)."""
    reqs, sessions = _workload(9)
    params = DsuParams(profile="throughput-opt", n_slots=4, max_batch=4, latency_batch=1,
                       kv_capacity_tokens=400, park_policy="park")
    batches, _, moves, _ = run_sessions(reqs, sessions, params, {}, lead=0)
    steps = _steps(batches, moves)
    ops = list(FrontEnd("disabled", 16, distance=0).ops(steps, _demand))
    # with no prefetch walk a step is loaded right before its first op: the k-th run of S ops
    # belongs to the k-th step with restores and is followed by the ops of the first step with
    # slots at or after it
    runs, i = [], 0
    while i < len(ops):
        if ops[i].kind == "S":
            j = i
            while j < len(ops) and ops[j].kind == "S":
                j += 1
            runs.append((i, j))
            i = j
        else:
            i += 1
    with_restores = [k for k, s in enumerate(steps) if s.restores]
    assert len(runs) == len(with_restores) > 0
    for (i, j), k in zip(runs, with_restores):
        assert [(o.req, o.layer) for o in ops[i:j:1]][0] == steps[k].restores[0][:2]
        nxt = next((s for s in steps[k:] if s.slots), None)
        if nxt is not None and j < len(ops):
            assert ops[j].req in {sl.request for sl in nxt.slots}
