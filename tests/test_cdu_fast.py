"""The compiled CDU model (sim/fast/cdu_twin.py) against the golden policy model (models/cdu.py):
whole counter dicts and whole transaction sequences (checksums) on seeded random
configurations -- every pattern x policy x hint mix, tiny tag stores, late prefetches,
growing contexts, traces with missing units, odd callbacks -- and the replay engine switch."""

import random

import pytest

from tricut.models.cdu import (
    HINTS, PATTERNS, POLICIES, CDUCore, FrontEnd, Pattern, SlotDesc, StepDesc, Txn, run)
from tricut.sim.fast.cdu_twin import run_fast, txn_checksum
from tricut.sim.fast.cdu_replay import replay


def golden(descs, demand, policy, sets, ways, **kw):
    core = run(descs, demand, policy, sets, ways, **kw)
    c = core.counters()
    c["txn_checksum"] = txn_checksum(core.txns)
    return c, core


def pattern_demand(pat):
    return lambda st, sd, layer: pat.blocks(st.step, sd.request, layer, sd.seq_len)


def random_descs(rng, hints):
    """Steps of a random batch: slot ids != request ids, contexts growing by a random stride
    (new blocks -> fresh writes), a layer order (and subset) drawn per step, arbitrary step
    numbers (the reread burst keys on them)."""
    n = rng.randint(1, 4)
    reqs = rng.sample(range(40), n)
    slots = rng.sample(range(3, 60), n)
    if hints == "mixed":
        hint = [rng.choice(HINTS) for _ in range(n)]
    else:
        hint = [hints] * n
    layer_ids = rng.sample(range(30), rng.randint(1, 4))
    ctx = [rng.randint(1, 400) for _ in range(n)]
    grow = [rng.randint(1, 24) for _ in range(n)]
    descs = []
    step = rng.randint(0, 2)
    for t in range(rng.randint(1, 5)):
        order = rng.sample(layer_ids, rng.randint(1, len(layer_ids)))
        descs.append(StepDesc(step, tuple(SlotDesc(slots[i], reqs[i], ctx[i] + t * grow[i],
                                                   hint[i]) for i in range(n)), tuple(order)))
        step += rng.randint(1, 2)
    return descs


def random_geometry(rng):
    ways = rng.randint(1, 4)
    return dict(sets=rng.randint(1, 8), ways=ways,
                distance=rng.choice([0, 1, 2, 5, 9, 24]),
                latency=rng.choice([0, 0, 1, 3, 8, 40]),
                entries=rng.choice([1, 2, 3, 8, 64]),
                reserve=rng.randint(0, ways - 1))


def random_pattern_args(rng):
    return dict(seed=rng.randint(0, 99), sinks=rng.randint(1, 40), window=rng.randint(1, 80),
                k=rng.randint(1, 7), overlap=rng.choice([0.0, 0.5, 0.9, 1.0]),
                reread_tokens=rng.randint(1, 80), burst_start=rng.randint(0, 3),
                burst_len=rng.randint(1, 2))


def check_case(descs, policy, geo, pat_name=None, pat_args=None, demand=None, via_pattern=True,
               block_bytes=1, token_bytes=1):
    kw = dict(distance=geo["distance"], latency=geo["latency"], entries=geo["entries"],
              block_bytes=block_bytes, token_bytes=token_bytes, reserve=geo.get("reserve"))
    if pat_name is not None:
        pg, pf = Pattern(pat_name, **pat_args), Pattern(pat_name, **pat_args)
        want, core = golden(descs, pattern_demand(pg), policy, geo["sets"], geo["ways"], **kw)
        got = run_fast(descs, pattern_demand(pf), policy, geo["sets"], geo["ways"],
                       pattern=pf if via_pattern else None, **kw)
    else:
        want, core = golden(descs, demand, policy, geo["sets"], geo["ways"], **kw)
        got = run_fast(descs, demand, policy, geo["sets"], geo["ways"], **kw)
    assert got == want, {k: (want.get(k), got.get(k)) for k in set(want) | set(got)
                         if want.get(k) != got.get(k)}
    return want, core


# ------------------------------------------------------------------ random configurations

CASES = [(pat, pol, h) for pat in PATTERNS for pol in POLICIES
         for h in ("auto", "stream", "priority", "pin", "mixed")]


@pytest.mark.parametrize("pattern,policy,hints", CASES)
def test_random_patterns_equal_golden(pattern, policy, hints):
    rng = random.Random(f"{pattern}-{policy}-{hints}")
    for n in range(9):
        descs = random_descs(rng, hints)
        geo = random_geometry(rng)
        check_case(descs, policy, geo, pattern, random_pattern_args(rng),
                   via_pattern=(n % 3 != 2))        # list path for the compiled patterns too


def trace_demand(rng, descs, p_missing=0.25):
    """A trace: per (step, request, layer) a sorted distinct block list or no record."""
    recs = {}
    for st in descs:
        for sd in st.slots:
            nb = -(-sd.seq_len // 16)
            for ly in st.layers:
                if rng.random() < p_missing:
                    continue
                kind = rng.random()
                if kind < 0.3:
                    blocks = list(range(nb))
                elif kind < 0.6:
                    blocks = sorted(set(range(min(nb, rng.randint(0, 3)))) |
                                    set(range(max(0, nb - rng.randint(1, 4)), nb)))
                else:
                    blocks = sorted(set(rng.sample(range(nb), rng.randint(1, nb))) | {nb - 1})
                recs[(st.step, sd.request, ly)] = blocks
    return lambda st, sd, ly: recs.get((st.step, sd.request, ly))


def odd_demand(rng):
    """Not a trace: unsorted, repeated, empty, past the context; never the same twice."""
    memo = {}

    def demand(st, sd, ly):
        key = (st.step, sd.slot, sd.request, ly)
        if key not in memo:
            nb = -(-sd.seq_len // 16)
            r = rng.random()
            if r < 0.1:
                memo[key] = None
            elif r < 0.2:
                memo[key] = []
            else:
                memo[key] = [rng.randrange(nb + 3) for _ in range(rng.randint(1, 2 * nb + 2))]
        return memo[key]
    return demand


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("hints", ["auto", "mixed"])
def test_random_traces_equal_golden(policy, hints):
    rng = random.Random(f"trace-{policy}-{hints}")
    for _ in range(12):
        descs = random_descs(rng, hints)
        check_case(descs, policy, random_geometry(rng), demand=trace_demand(rng, descs))


@pytest.mark.parametrize("policy", POLICIES)
def test_odd_callbacks_equal_golden(policy):
    rng = random.Random(f"odd-{policy}")
    for _ in range(12):
        descs = random_descs(rng, "mixed")
        # one callback object for both runs: it memoises, so both see the same lists
        check_case(descs, policy, random_geometry(rng), demand=odd_demand(rng))


def with_restores(rng, descs, p_empty=0.3):
    """The steps with random restore moves (0-3 per step, contexts 0..100 tokens, requests and
    layers possibly those of the batch) and, now and then, steps with no units in between."""
    out = []
    for st in descs:
        if rng.random() < p_empty:
            out.append(StepDesc(st.step, (), rng.choice([(), st.layers]),
                                tuple((rng.randrange(40), rng.randrange(30), rng.randint(0, 60))
                                      for _ in range(rng.randint(1, 2)))))
        rs = tuple((rng.choice([sd.request for sd in st.slots] + [rng.randrange(40)]),
                    rng.choice(st.layers), rng.randint(0, 100))
                   for _ in range(rng.randint(0, 3)))
        out.append(StepDesc(st.step, st.slots, st.layers, rs))
    return out


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("pattern", PATTERNS)
def test_restores_equal_golden(pattern, policy):
    """Step descriptors with restore moves (and unit-less steps carrying only restores): the
    S transactions in the golden's order (checksum) and the restore counters."""
    rng = random.Random(f"restore-{pattern}-{policy}")
    seen = 0
    for n in range(8):
        descs = with_restores(rng, random_descs(rng, "mixed"))
        geo = random_geometry(rng)
        want, core = check_case(descs, policy, geo, pattern, random_pattern_args(rng),
                                via_pattern=(n % 2 == 0), block_bytes=3)
        s = sum(1 for t in core.txns if t.kind == "S")
        assert want["restores"] == s and want["restore_bytes"] == 3 * s
        seen += s
        if s and any(t.kind != "S" for t in core.txns):
            last = want, core
    assert seen > 0
    # the checksum sees where the S transactions are
    want, core = last
    t = list(core.txns)
    i = next(i for i, x in enumerate(t) if x.kind == "S")
    j = next(j for j, x in enumerate(t) if x.kind != "S")
    t[i], t[j] = t[j], t[i]
    assert txn_checksum(t) != want["txn_checksum"]


def test_restores_with_traces_equal_golden():
    rng = random.Random("restore-trace")
    for policy in POLICIES:
        for _ in range(6):
            descs = with_restores(rng, random_descs(rng, "mixed"))
            check_case(descs, policy, random_geometry(rng), demand=trace_demand(rng, descs))


def test_restore_argument_errors():
    st = [StepDesc(0, (SlotDesc(0, 0, 20),), (0,), ((1 << 23, 0, 16),))]
    with pytest.raises(ValueError, match="restore request must be an integer"):
        run_fast(st, pattern_demand(Pattern("full")), "static", 2, 2)
    st = [StepDesc(0, (SlotDesc(0, 0, 20),), (0,), ((0, 0),))]
    with pytest.raises(ValueError, match=r"a restore is \(req, layer, seq_len\)"):
        run_fast(st, pattern_demand(Pattern("full")), "static", 2, 2)


def test_all_pinned_bypass_and_keep_budget():
    """All-pinned sets make every later allocation bypass; a store small enough that the
    adaptive keep budget is exceeded exercises the keep hash."""
    descs = [StepDesc(t, (SlotDesc(0, 7, 40 + 16 * t, "pin"), SlotDesc(1, 3, 90 + t, "auto")),
                      (1, 0)) for t in range(4)]
    for pol in POLICIES:
        for pat in PATTERNS:
            want, _ = check_case(descs, pol, dict(sets=1, ways=2, distance=3, latency=2,
                                                  entries=4), pat, dict(seed=1, window=40, k=3))
            if pol != "disabled":
                assert want["misses_bypass"] + want["prefetch_dropped"] > 0
    descs = [StepDesc(t, tuple(SlotDesc(s, s + 10, 300 + t, "auto") for s in range(3)),
                      (0, 1)) for t in range(5)]
    for pat in ("full", "window", "reread", "topk"):
        check_case(descs, "adaptive", dict(sets=4, ways=2, distance=1, latency=3, entries=4),
                   pat, dict(seed=2, window=100, sinks=20, reread_tokens=64, k=6, overlap=0.5))


def test_larger_configuration_equals_golden():
    """A few thousand blocks per step on a bigger store, the replay's geometry shape."""
    descs = [StepDesc(t, tuple(SlotDesc(i, i + 1, 2000 + 37 * i + t, "auto") for i in range(3)),
                      (0, 1, 2)) for t in range(3)]
    for pol in POLICIES:
        for pat in ("full", "reread"):
            check_case(descs, pol, dict(sets=16, ways=8, distance=12, latency=9, entries=64),
                       pat, dict(seed=0, window=512, reread_tokens=320, burst_start=1))


def test_float_byte_sizes():
    descs = [StepDesc(t, (SlotDesc(0, 0, 100 + t),), (0, 1)) for t in range(3)]
    for bb, tb in ((2.5, 0.25), (65536.0, 4096.0), (3, 1.5)):
        want, _ = check_case(descs, "static", dict(sets=2, ways=2, distance=2, latency=1,
                                                   entries=64), "full", {},
                             block_bytes=bb, token_bytes=tb)
        assert type(want["hbm_read_bytes"]) is type(bb)
    # 0.1 added up one by one is not n * 0.1: the golden's identity check fails, and so
    # does the fast one's
    with pytest.raises(AssertionError):
        run(descs, pattern_demand(Pattern("full")), "static", 2, 2, block_bytes=0.1)
    with pytest.raises(AssertionError):
        run_fast(descs, pattern_demand(Pattern("full")), "static", 2, 2, block_bytes=0.1,
                 pattern=Pattern("full"))


def test_repeated_step_object_and_empty_steps():
    """new_step follows step-object identity, as in the golden: a step listed twice in a
    row does not start a new predictor step; steps without slots or layers yield nothing."""
    a = StepDesc(0, (SlotDesc(0, 0, 200), SlotDesc(1, 1, 150)), (0,))
    b = StepDesc(1, (SlotDesc(0, 0, 201), SlotDesc(1, 1, 151)), (0,))
    a2 = StepDesc(0, a.slots, a.layers)          # equal to a, but another step object
    empty = StepDesc(2, (), (0,))
    assert a2 == a and a2 is not a
    for descs in ([a, a, b, b], [a, a2, b], [a, empty, a, b], [a, StepDesc(3, a.slots, ()), b]):
        for pat in ("topk", "full"):
            check_case(descs, "adaptive", dict(sets=2, ways=3, distance=4, latency=2, entries=2),
                       pat, dict(seed=3, k=4))


# ------------------------------------------------------------------ the comparison can fail

class PromotingCore(CDUCore):
    """A wrong core: the first demand hit on a prefetched block makes it most recent."""

    def apply(self, op):
        loc = self.where.get((op.req, op.layer, op.block))
        pf = loc is not None and self.entries[loc[0]][loc[1]]["pf"]
        t = super().apply(op)
        if op.kind == "R" and pf:
            self._touch(*loc)
        return t


def test_checksum_detects_differences():
    descs = [StepDesc(t, (SlotDesc(0, 0, 600 + t), SlotDesc(1, 1, 300 + t, "priority")),
                      (0, 1)) for t in range(3)]
    kw = dict(distance=6, latency=4)
    pat = Pattern("reread", reread_tokens=96, window=64, burst_start=1)
    want, core = golden(descs, pattern_demand(pat), "static", 4, 2, **kw)
    got = run_fast(descs, pattern_demand(pat), "static", 4, 2, pattern=pat, **kw)
    assert got == want
    # a perturbed transaction list
    txns = list(core.txns)
    i = next(n for n, t in enumerate(txns) if t.victim is not None)
    t = txns[i]
    for bad in ([*txns[:i], t._replace(victim=None), *txns[i + 1:]],
                [*txns[:i], t._replace(hbm=not t.hbm), *txns[i + 1:]],
                [*txns[:i], t._replace(block=t.block + 1), *txns[i + 1:]],
                [*txns[:i], txns[i + 1], t, *txns[i + 2:]],
                txns[:-1]):
        assert txn_checksum(bad) != got["txn_checksum"]
    # a perturbed golden (one LRU rule changed) gives another transaction sequence
    wrong = PromotingCore(4, 2, latency=4)
    for op in FrontEnd("static", 8, 6).ops(descs, pattern_demand(pat)):
        wrong.apply(op)
    assert txn_checksum(wrong.txns) != got["txn_checksum"]
    assert txn_checksum([Txn("R", 0, 0, 0, "hit", None, False)]) != \
        txn_checksum([Txn("R", 0, 0, 0, "hit", None, True)])


# ------------------------------------------------------------------ errors and replay

def test_argument_errors():
    descs = [StepDesc(0, (SlotDesc(0, 0, 20),), (0,))]
    d = pattern_demand(Pattern("full"))
    for args, kw, msg in (((descs, d, "lru", 2, 2), {}, "unknown CDU policy"),
                          ((descs, d, "static", 0, 2), {}, "sets must be positive"),
                          ((descs, d, "static", 2, 2), dict(distance=-1), "prefetch distance"),
                          ((descs, d, "static", 2, 2), dict(latency=-1), "latency")):
        with pytest.raises(ValueError, match=msg):
            run(*args, **kw)
        with pytest.raises(ValueError, match=msg):
            run_fast(*args, **kw)
    with pytest.raises(ValueError, match="request"):
        run_fast([StepDesc(0, (SlotDesc(0, 1 << 23, 20),), (0,))], d, "static", 2, 2)
    with pytest.raises(ValueError, match="layer"):
        run_fast([StepDesc(0, (SlotDesc(0, 0, 20),), (1 << 16,))], d, "static", 2, 2)
    with pytest.raises(ValueError, match="demand blocks"):
        run_fast(descs, lambda st, sd, ly: [1 << 24], "static", 2, 2)
    with pytest.raises(ValueError, match="disagrees with pattern"):
        run_fast([StepDesc(0, (SlotDesc(0, 0, 200),), (0,))], d, "static", 2, 2,
                 pattern=Pattern("window", window=16))


@pytest.mark.parametrize("pattern", PATTERNS)
def test_replay_engines_agree(pattern):
    kw = dict(steps=2, contexts=[2000, 5000], layers=4, distance=8, hints="dsu")
    g = replay("llama-3-8b", pattern, "adaptive", 2.0, **kw)
    f = replay("llama-3-8b", pattern, "adaptive", 2.0, engine="fast", **kw)
    assert f.pop("txn_checksum") >= 0
    assert f == g


def test_predictor_table_larger_than_one_demand_list():
    """Regression: the adaptive table keeps entries across steps, so a unit's plan can hold
    more scatter blocks than any single demand list (an undersized plan buffer corrupted memory)."""
    kw = dict(steps=4, batch=1, context=4096, layers=2, pattern_args=dict(k=32))
    g = replay("llama-3-8b", "topk", "adaptive", 4.0, **kw)
    f = replay("llama-3-8b", "topk", "adaptive", 4.0, engine="fast", **kw)
    f.pop("txn_checksum")
    assert f == g


def test_replay_trace_engines_agree(tmp_path):
    import json
    path = tmp_path / "t.jsonl"
    rng = random.Random(5)
    with open(path, "w") as fh:
        for step in range(3):
            for req in (0, 4):
                for layer in (0, 1, 2):
                    if rng.random() < 0.2:
                        continue
                    nb = 30 + step + 10 * req
                    blocks = sorted(set(rng.sample(range(nb), 8)) | {nb - 1})
                    fh.write(json.dumps(dict(step=step, request=req, layer=layer, blocks=blocks,
                                             seq_len=16 * nb)) + "\n")
    for pol in POLICIES:
        g = replay("llama-3-8b", str(path), pol, 1.0, layers=3)
        f = replay("llama-3-8b", str(path), pol, 1.0, layers=3, engine="fast")
        f.pop("txn_checksum")
        assert f == g


def test_replay_engine_errors():
    with pytest.raises(ValueError, match="'turbo'"):
        replay("llama-3-8b", "full", engine="turbo")
    with pytest.raises(ValueError, match="return_core"):
        replay("llama-3-8b", "full", engine="fast", return_core=True)
