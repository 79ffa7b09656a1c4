"""Shared CDU RTL stimulus and checks (Amaranth simulator and cocotb benches use the same)."""

from __future__ import annotations

import random

from tricut.models.cdu import (
    CLASS_KEEP, CLASS_NORMAL, CLASS_PIN, CLASS_STREAM, CDUCore, FrontEnd, Op, Pattern,
    SlotDesc, StepDesc)
from tricut.sim.cdu_replay import HbmModel, compare_rtl, ops_to_descs, run_rtl  # noqa: F401
from tricut.rtl.cdu.layouts import KIND

PARAMS = dict(sets=4, ways=2, mshrs=4, rq_depth=4, max_retries=2)
KIND_NAME = {v: k for k, v in KIND.items()}


def model_of(ops, sets, ways, **_):
    core = CDUCore(sets, ways)
    for o in ops:
        core.apply(o)
    return core


def pattern_ops(pattern, policy, seed, steps=3, reqs=2, layers=2, distance=3, frames=8):
    """A small front-end run (tags fit the default RTL widths)."""
    rng = random.Random(seed)
    pat = Pattern(pattern, seed=seed, sinks=4, window=48, k=4, reread_tokens=64,
                  burst_start=1, burst_len=1)
    ctx = [rng.randrange(40, 200) for _ in range(reqs)]
    hints = [rng.choice(["auto", "auto", "priority", "stream", "pin"]) for _ in range(reqs)]
    descs = [StepDesc(t, tuple(SlotDesc(i, i, c + t + 1, h) for i, (c, h) in enumerate(zip(ctx, hints))),
                      tuple(range(layers))) for t in range(steps)]
    fe = FrontEnd(policy, frames, distance=distance, entries=8)
    return list(fe.ops(descs, lambda st, sd, l: pat.blocks(st.step, sd.request, l, sd.seq_len)))


def random_ops(seed, n=200, reqs=3, layers=2, blocks=12):
    rng = random.Random(seed)
    ops = []
    for _ in range(n):
        kind = rng.choice("RRRPPW")
        cls = rng.choice([CLASS_NORMAL, CLASS_NORMAL, CLASS_KEEP, CLASS_STREAM, CLASS_PIN]
                         if rng.random() < 0.2 else [CLASS_NORMAL, CLASS_KEEP])
        ops.append(Op(kind, rng.randrange(reqs), rng.randrange(layers), rng.randrange(blocks),
                      cls, rng.random() < 0.5))
    return ops


def edge_ops():
    """Named edge cases in one stream (sets=4, ways=2; blocks 0, 4, 8 share set 0)."""
    return [
        Op("R", 0, 0, 0, CLASS_PIN, False), Op("R", 0, 0, 4, CLASS_PIN, False),   # fill set 0, pinned
        Op("R", 0, 0, 8, CLASS_NORMAL, False),      # all pinned -> bypass read
        Op("P", 0, 0, 8, CLASS_NORMAL, False),      # prefetch into all-pinned set -> dropped
        Op("R", 0, 0, 0, CLASS_NORMAL, False),      # hit, unpins block 0
        Op("P", 0, 0, 8, CLASS_NORMAL, False),      # now evicts block 0
        Op("R", 0, 0, 8, CLASS_NORMAL, False),      # hit on a block possibly still in flight
        Op("W", 0, 0, 1, CLASS_NORMAL, True),       # fresh write allocates without HBM
        Op("W", 0, 0, 2, CLASS_NORMAL, False),      # stale write: bypass
        Op("W", 0, 0, 1, CLASS_STREAM, False),      # write hit, class kept
        Op("R", 0, 0, 1, CLASS_STREAM, False),      # read hit on a written block
        Op("R", 1, 1, 5, CLASS_STREAM, False),      # streamed read: bypass
        Op("P", 1, 1, 5, CLASS_STREAM, False),      # streamed prefetch: dropped
        Op("P", 2, 0, 3, CLASS_NORMAL, False), Op("P", 2, 0, 7, CLASS_NORMAL, False),
        Op("P", 2, 0, 11, CLASS_NORMAL, False),     # evicts an unused prefetch (useless)
        Op("R", 2, 0, 11, CLASS_NORMAL, False), Op("R", 2, 0, 11, CLASS_NORMAL, False),
    ] + [Op("R", 3, 1, b, CLASS_NORMAL, False) for b in range(10)]   # miss burst > MSHRs


compare = compare_rtl
