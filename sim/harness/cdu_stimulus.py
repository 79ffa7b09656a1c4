"""CDU RTL stimulus and checks shared by the Amaranth-simulator tests (tests/test_cdu_*.py) and
the cocotb benches on Verilator (tests/cocotb/cdu_equiv.py, cdu_fe_equiv.py): the back end's
parameters and op streams (seeded random ops, named edge and keep-cap cases, the policy model
of a stream), and the front end's step descriptors and vectors (seeded random steps, named
edge and restore cases, the model's ops with the RTL's inputs).

The benches read the harness names they use from here too (``Op``, ``ops_to_descs``,
``HbmModel``, ``compare`` = :func:`~tricut.sim.harness.cdu.compare_rtl`, the grid's
``PATTERNS`` and ``POLICIES``).
"""

from __future__ import annotations

import random

from tricut.models.cdu import (
    CLASS_KEEP, CLASS_NORMAL, CLASS_PIN, CLASS_STREAM, PATTERNS, POLICIES, CDUCore, FrontEnd, Op,
    Pattern, SlotDesc, StepDesc)
from tricut.rtl.cdu.layouts import KIND, STEP_KIND
from tricut.sim.harness.cdu import (
    HbmModel, compare_ops, compare_rtl, fe_config, frontend_reference_lookahead, ops_to_descs,
    run_frontend_rtl, run_rtl, step_beats)

__all__ = [
    # back end
    "PARAMS", "KIND_NAME", "model_of", "CapProbe", "cap_events", "CAP_PLACES", "pattern_ops",
    "random_ops", "edge_ops", "keep_cap_ops", "shuffled_beats", "compare",
    # front end
    "KIND_HEADER", "KIND_RESTORE", "FE_PARAMS", "random_steps", "restore_steps", "make_pattern",
    "fe_vectors", "run_fe", "edge_steps",
    # re-exported for the benches: the grid, the ops and the harness's runners
    "PATTERNS", "POLICIES", "Op", "HbmModel", "ops_to_descs", "run_rtl", "compare_ops"]

#: reserve=1 of 2 ways: keep_cap = 1, so keep-class traffic hits the keep cap all the time
#: (the default, ways // 8 = 0, never caps 2 ways; other geometries in the tests use it)
PARAMS = dict(sets=4, ways=2, mshrs=4, rq_depth=4, max_retries=2, reserve=1)
KIND_NAME = {v: k for k, v in KIND.items()}


def model_of(ops, sets, ways, reserve=None, **_):
    core = CDUCore(sets, ways, reserve=reserve)
    for o in ops:
        core.apply(o)
    return core


class CapProbe(CDUCore):
    """The policy model, recording what the keep cap did: ``events`` counts
    ``(kind, "alloc" | "hit")`` demotions of a keep request to normal, and
    ``("skip", kind)`` allocations whose keep was kept only because the victim way is not
    counted (with it the set would have reached keep_cap)."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.events, self._kind = {}, None

    def apply(self, op):
        self._kind = op.kind
        return super().apply(op)

    def effective_class(self, s, cls, skip=-1, current=CLASS_STREAM):
        got = super().effective_class(s, cls, skip, current)
        if got != cls:
            key = (self._kind, "alloc" if skip >= 0 else "hit")
            self.events[key] = self.events.get(key, 0) + 1
        elif cls == CLASS_KEEP and current < CLASS_KEEP and skip >= 0:
            e = self.entries[s][skip]
            held = sum(1 for x in self.entries[s] if x is not None and x["cls"] >= CLASS_KEEP)
            if e is not None and e["cls"] >= CLASS_KEEP and held >= self.keep_cap:
                key = ("skip", self._kind)
                self.events[key] = self.events.get(key, 0) + 1
        return got


def cap_events(ops, sets, ways, reserve=None, **_):
    """:class:`CapProbe` events of the model run of ``ops``."""
    core = CapProbe(sets, ways, reserve=reserve)
    for o in ops:
        core.apply(o)
    return core.events


#: every place the keep cap applies: keep allocation by R, P, W; keep promotion at R, W hits
CAP_PLACES = {("R", "alloc"), ("P", "alloc"), ("W", "alloc"), ("R", "hit"), ("W", "hit")}


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


def random_ops(seed, n=200, reqs=3, layers=2, blocks=12, restores=1 / 6):
    """A seeded random mix of R, P and W ops over a few tags, with S (restore) ops mixed in:
    after each op, with probability ``restores``, an S op of one of the last few ops' tags
    (mostly resident or in flight) or of a random tag. The S ops come from their own
    generator, so the R/P/W ops are those of ``restores=0`` (and so are their decisions: S
    changes nothing)."""
    rng = random.Random(seed)
    srng = random.Random(f"restores-{seed}")
    ops = []
    for _ in range(n):
        kind = rng.choice("RRRPPW")
        cls = rng.choice([CLASS_NORMAL, CLASS_NORMAL, CLASS_KEEP, CLASS_STREAM, CLASS_PIN]
                         if rng.random() < 0.2 else [CLASS_NORMAL, CLASS_KEEP])
        ops.append(Op(kind, rng.randrange(reqs), rng.randrange(layers), rng.randrange(blocks),
                      cls, rng.random() < 0.5))
        if srng.random() < restores:
            if srng.random() < 0.7:        # a recently used tag: often resident
                o = ops[-srng.randint(1, min(6, len(ops)))]
                tag = (o.req, o.layer, o.block)
            else:
                tag = (srng.randrange(reqs), srng.randrange(layers), srng.randrange(blocks))
            ops.append(Op("S", *tag, srng.choice([0, 0, 1, 2, 3]), False))
    return ops


def edge_ops():
    """Named edge cases in one stream (sets=4, ways=2; blocks 0, 4, 8 share set 0)."""
    return [
        Op("R", 0, 0, 0, CLASS_PIN, False), Op("R", 0, 0, 4, CLASS_PIN, False),   # fill set 0, pinned
        Op("S", 0, 0, 0, CLASS_STREAM, False),      # restore of a resident (in flight) block
        Op("R", 0, 0, 8, CLASS_NORMAL, False),      # all pinned -> bypass read
        Op("S", 0, 0, 8, CLASS_NORMAL, False),      # restore of an absent block: no allocation
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
        Op("S", 2, 0, 7, CLASS_KEEP, False),        # restore of an unread prefetched block
        Op("R", 2, 0, 11, CLASS_NORMAL, False), Op("R", 2, 0, 11, CLASS_NORMAL, False),
    ] + [Op("R", 3, 1, b, CLASS_NORMAL, False) for b in range(10)] + [   # miss burst > MSHRs
        Op("S", 1, 1, b, CLASS_STREAM, False) for b in range(6)]         # restore run


def keep_cap_ops():
    """Named keep-cap edge cases in one stream, for sets=4, ways=2, reserve=1 (keep_cap 1;
    blocks 0, 4, 8, ... of request 0 layer 0 share set 0). Each demotion is visible in a
    later victim choice (a normal block goes before a keep one). Under reserve=0 the same
    stream allocates keep blocks into a set full of keep blocks (victim not counted)."""
    K, N, P = CLASS_KEEP, CLASS_NORMAL, CLASS_PIN
    return [
        Op("R", 0, 0, 0, K, False),     # keep alloc: set 0 holds 1 keep block = keep_cap
        Op("R", 0, 0, 4, K, False),     # keep miss-alloc into the free way: demoted
        Op("R", 0, 0, 8, N, False),     # victim 4 (normal), not 0 (keep, older)
        Op("R", 0, 0, 8, K, False),     # keep promotion at a read hit: demoted
        Op("P", 0, 0, 12, N, False),    # victim 8 (normal), although 0 is older
        Op("W", 0, 0, 12, K, False),    # keep promotion at a write hit: demoted
        Op("R", 0, 0, 4, N, False),     # victim 12
        Op("R", 0, 0, 0, N, False),     # keep -> normal: set 0 holds no keep block
        Op("R", 0, 0, 4, K, False),     # promotion allowed (0 < keep_cap)
        Op("W", 0, 0, 16, K, True),     # fresh keep write-alloc: victim 0, demoted
        Op("P", 0, 0, 0, K, False),     # keep prefetch: victim 16, demoted
        Op("R", 0, 0, 0, P, False),     # pin is never capped; pinned counts as held
        Op("R", 0, 0, 8, K, False),     # victim 4 (the only unpinned, keep): held 1 -> demoted
        Op("R", 0, 0, 8, K, False),     # promotion at a hit, pinned block in the set: demoted
        Op("R", 0, 0, 12, N, False),    # victim 8
        Op("R", 0, 0, 0, K, False),     # pin -> keep (already >= keep: not capped)
        Op("R", 0, 0, 12, K, False),    # promotion, set holds a keep block: demoted
        Op("R", 0, 0, 4, N, False),     # victim 12, not 0
        Op("R", 0, 0, 20, K, False),    # keep alloc over normal victim 4: demoted
        Op("R", 0, 0, 24, K, False),    # ... over 20
        Op("R", 0, 0, 24, N, False), Op("R", 0, 0, 28, N, False),
        Op("W", 1, 0, 3, K, True), Op("P", 1, 0, 7, K, False),   # set 0: 949 + 3 = 952 % 4
        Op("R", 1, 0, 11, K, False), Op("W", 1, 0, 15, K, True), Op("R", 1, 0, 3, N, False),
    ]


def shuffled_beats(descs, seed):
    """``step_beats`` with each step's slot, layer and restore beats in a random interleaving
    (each kind kept in its order; ``last``/``end`` moved to the step's new final beat)."""
    rng = random.Random(seed)
    out = []
    for b in step_beats(descs):
        if b["kind"] == KIND_HEADER:
            out.append([dict(b)])
        else:
            out[-1].append(dict(b))
    beats = []
    for head, *body in out:
        last = (body or [head])[-1]
        flags = dict(last=last["last"], end=last["end"])
        queues = [[x for x in body if x["kind"] == k] for k in sorted({x["kind"] for x in body})]
        mixed = []
        while any(queues):
            q = rng.choice([q for q in queues if q])
            mixed.append(dict(q.pop(0), last=0, end=0))
        if mixed:
            head = dict(head, last=0, end=0)
            mixed[-1].update(flags)
        beats += [head] + mixed
    return beats


compare = compare_rtl


# --------------------------------------------------------------------------- front end vectors

KIND_HEADER, KIND_RESTORE = STEP_KIND["header"], STEP_KIND["restore"]

FE_PARAMS = dict(slot_bits=2, max_slots=4, max_layers=8, entries=4, units=16, max_demand=16)


def random_steps(seed, steps=4, pool=5, max_batch=3, layers=3, p_empty=0.1, hint_change=0.2,
                 seq=(1, 120), restores=0.0):
    """Seeded random DSU step descriptors: requests from a pool join and leave (each keeps
    its slot), seq_len grows by one per step it decodes, hints change now and then, a step
    may be an empty batch, layer order is a random permutation per step. ``restores``: the
    probability of a step carrying restore moves (1-2 triples: a pool request that is not
    in the batch, a layer, 0..80 tokens), drawn from a separate generator so the steps are
    those of ``restores=0``."""
    rrng = random.Random(f"restores-{seed}")
    rng = random.Random(seed)
    seq = {r: rng.randrange(*seq) for r in range(pool)}
    slot_of = {r: r % 4 for r in range(pool)}
    hint = {r: rng.choice(["auto", "auto", "auto", "priority", "stream", "pin"]) for r in range(pool)}
    out = []
    for t in range(steps):
        if rng.random() < p_empty:
            batch = []
        else:
            used, batch = set(), []
            for r in rng.sample(range(pool), pool):
                if len(batch) < max_batch and slot_of[r] not in used:
                    used.add(slot_of[r])
                    batch.append(r)
        sl = []
        for r in batch:
            seq[r] += 1
            if rng.random() < hint_change:
                hint[r] = rng.choice(["auto", "stream", "priority", "pin"])
            sl.append(SlotDesc(slot_of[r], r, seq[r], hint[r]))
        ly = tuple(rng.sample(range(layers), rng.randrange(1, layers + 1)))
        rs = ()
        if rrng.random() < restores:
            out_of_batch = [r for r in range(pool) if r not in batch] or list(range(pool))
            rs = tuple((rrng.choice(out_of_batch), rrng.randrange(layers), rrng.randint(0, 80))
                       for _ in range(rrng.randint(1, 2)))
        out.append(StepDesc(t, tuple(sl), ly, rs))
    return out


def restore_steps():
    """Named restore cases in one descriptor stream: two restores in one step (kept in
    order), a step of restores only (no slots), a zero-token restore (no ops), a restore of
    a request whose blocks are resident in L2 (request 0), one of a single token, and a
    trailing step with no units."""
    S = SlotDesc
    return [
        StepDesc(0, (S(0, 0, 40), S(1, 1, 20)), (0, 1), restores=((2, 1, 33),)),
        StepDesc(1, (), (0,), restores=((3, 0, 16), (2, 0, 0))),          # restores only
        StepDesc(2, (S(0, 0, 41), S(1, 2, 34)), (1, 0), restores=((0, 0, 48), (4, 1, 1))),
        StepDesc(3, (S(0, 0, 42),), (0,)),
        StepDesc(4, (), (), restores=((1, 1, 21),)),                        # trailing
    ]


def make_pattern(name, seed, **kw):
    args = dict(sinks=4, window=48, k=5, reread_tokens=64, burst_start=1, burst_len=2,
                overlap=0.6)
    args.update(kw)
    return Pattern(name, seed=seed, **args)


def fe_vectors(descs, pattern, policy, distance=4, frames=8, entries=None, pat=None, seed=0):
    """(model ops, front dict for run_rtl / run_frontend_rtl) of one front-end run."""
    entries = entries or FE_PARAMS["entries"]
    pat = pat or make_pattern(pattern, seed)
    ops, lists, deep = frontend_reference_lookahead(
        descs, lambda st, sd, ly: pat.blocks(st.step, sd.request, ly, sd.seq_len),
        policy, frames, distance, entries)
    front = dict(beats=step_beats(descs), lists=lists,
                 config=fe_config(policy, pattern, distance, pat),
                 params=dict(FE_PARAMS, entries=entries), frames=frames, lookahead=deep)
    return ops, front


def run_fe(front, **kw):
    """The front end alone in Amaranth's simulator (frames as in the model run)."""
    return run_frontend_rtl(front["beats"], front["lists"], front["config"],
                            dict(front["params"], frames=front["frames"]), **kw)


def edge_steps():
    """Named edge cases in one descriptor stream: seq_len crossing a 16-token block
    (15 -> 16 -> 17, and 32 -> 33: fresh writes), an empty batch, a step with the same
    slot's hint changing (auto -> stream -> pin -> priority -> auto), a one-token context,
    a slot reused by another request, and a step listing a single layer."""
    S = SlotDesc
    return [
        StepDesc(0, (S(0, 0, 15), S(1, 1, 32), S(2, 2, 1)), (0, 1)),
        StepDesc(1, (S(0, 0, 16, "stream"), S(1, 1, 33)), (1, 0)),
        StepDesc(2, (), (0, 1)),                                   # empty batch
        StepDesc(3, (S(0, 0, 17, "pin"), S(1, 1, 34, "priority"), S(2, 2, 2)), (0,)),
        StepDesc(4, (S(0, 0, 18, "priority"), S(2, 3, 80)), (1, 0)),  # slot 2 reused
        StepDesc(5, (S(0, 0, 19), S(1, 1, 35), S(2, 3, 81)), (0, 1)),
    ]
