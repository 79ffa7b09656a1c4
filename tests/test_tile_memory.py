# amaranth: UnusedElaboratable=no
"""Behavioural memory models of the decode tile (``rtl/tile/behavioural/``, docs/tile/memory.md).

HBM (``HbmModel``) and the L2 data array (``L2Data``) in Amaranth's simulator, checked two
ways: cycle by cycle against the Python reference of ``sim/harness/memory.py`` (``ready`` and
every response beat on every cycle), and transaction by transaction against the memory image
alone (each request's beats, ids, ``last``, ``err``). Latency and bandwidth exactly (first beat
at accept + latency, one beat per cycle, bursts back to back); in order and reordered (LFSR,
deterministic per seed); transient and persistent faults; writes then reads and writes during
reads; bursts past the end, ``beats = 0``; the whole idle x backpressure matrix, every run
ending with the drained check; wrong results, wrong timing and a left-over beat are caught;
bad parameters raise one ``ValueError`` naming the value; Verilator lint.
"""

from __future__ import annotations

import gc
import random
import warnings

import pytest

from tricut.rtl.tile.behavioural import layouts as LY
from tricut.rtl.tile.behavioural.hbm import ALWAYS, HbmModel, lfsr_next
from tricut.rtl.tile.behavioural.l2 import L2Data
from tricut.sim.harness.memory import (HbmRef, Mismatch, bursts, expected_bursts, plan_json,
                                       random_requests, simulate_amaranth)
from tricut.sim.harness.streams import IDLE_BACKPRESSURE, NotDrained, Schedule, matrix_id

DB = 32


def image(seed, n, bits=DB):
    rng = random.Random(seed)
    return [rng.getrandbits(bits) for _ in range(n)]


def hbm(words, **kw):
    p = dict(words=words, data_bits=DB, latency=6, max_outstanding=4, max_beats=8, id_bits=6)
    p.update(kw)
    return p


def check_transactions(res, requests, img, reorder, fails=None, id_field="id"):
    """Every request answered exactly once with the image's words (by id when reordered, in
    request order otherwise), ``last`` only on its final beat, and never before accept +
    latency (checked by the caller's latency)."""
    got = bursts(res, id_field)
    exp = expected_bursts(img, requests, fails)
    assert len(got) == len(exp)
    if reorder:
        by_id = {g[1]: g[2] for g in got}
        assert len(by_id) == len(got)                       # ids unique in these plans
        for i, beats in exp:
            assert by_id[i] == beats, f"request id {i}: {by_id[i]} != {beats}"
    else:
        assert [(g[1], g[2]) for g in got] == exp
    return got


def check_latency(res, latency, id_field="id"):
    """No burst starts before its request's accept + latency; beats of a burst in order."""
    acc = {}
    for cyc, r in res.accepts:
        acc.setdefault(r[id_field], []).append(cyc)
    for first, i, _, cycles in bursts(res, id_field):
        t = acc[i].pop(0)
        assert first >= t + latency, (i, t, first)
        assert cycles == sorted(cycles)


def check_in_order_formula(res, latency, id_field="id"):
    """Unstalled, in order: burst k starts on max(t_k + latency, last beat of k-1 + 1) (t_k
    its accept cycle) and its beats follow on consecutive cycles."""
    got = bursts(res, id_field)
    prev_last = -1
    for (t, _), (first, _, _, cycles) in zip(res.accepts, got):
        assert first == max(t + latency, prev_last + 1), (t, first, prev_last)
        assert cycles == list(range(first, first + len(cycles)))
        prev_last = cycles[-1]
    return got


# ----------------------------------------------------------------------------------------------
# parameters and layouts
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kw,needle", [
    (dict(words=[]), "words must hold 1..4194304 words, got 0"),
    (dict(words=0), "words (a depth) must be an int in 1..4194304, got 0"),
    (dict(words=[1, -2]), "words[1] must be an int in 0..2**32-1, got -2"),
    (dict(words=[1 << 32]), "words[0] must be an int in 0..2**32-1, got 4294967296"),
    (dict(words="ab"), "words[0] must be an int in 0..2**32-1, got 'a'"),
    (dict(data_bits=12), "data_bits must be a multiple of 8 in 8..1024, got 12"),
    (dict(latency=0), "latency must be an int in 1..4096, got 0"),
    (dict(latency=2.5), "latency must be an int in 1..4096, got 2.5"),
    (dict(max_outstanding=65), "max_outstanding must be an int in 1..64, got 65"),
    (dict(max_beats=0), "max_beats must be an int in 1..256, got 0"),
    (dict(id_bits=17), "id_bits must be an int in 1..16, got 17"),
    (dict(reorder=1), "reorder must be a bool, got 1"),
    (dict(seed=0), "seed must be an int in 1..65535, got 0"),
    (dict(rate=(3, 2)), "rate must be (beats, cycles), ints with 1 <= beats <= cycles <= 4096, "
                        "got (3, 2)"),
    (dict(rate=(0, 5)), "got (0, 5)"),
    (dict(rate=(1, 5000)), "got (1, 5000)"),
    (dict(rate=0.2), "got 0.2"),
    (dict(faults=[(99, 1)]), "got (99, 1)"),
    (dict(faults=[(3, 0)]), "got (3, 0)"),
    (dict(faults=[(3, 1), (3, 2)]), "got (3, 2)"),
    (dict(faults=[(3, "never")]), "got (3, 'never')"),
    (dict(faults=5), "faults must be a sequence of (addr, fails), got 5"),
])
def test_hbm_bad_parameters_rejected_before_construction(kw, needle):
    p = hbm(list(range(16)))
    p.update(kw)
    with warnings.catch_warnings():
        warnings.simplefilter("error")          # no UnusedElaboratable from a half-built unit
        with pytest.raises(ValueError) as e:
            HbmModel(**p)
        gc.collect()
    assert needle in str(e.value)


@pytest.mark.parametrize("kw,needle", [
    (dict(frames=0), "frames must be an int in 1..65536, got 0"),
    (dict(block_beats=4097), "block_beats must be an int in 1..4096, got 4097"),
    (dict(data_bits=0), "data_bits must be a multiple of 8 in 8..1024, got 0"),
    (dict(frames=65536, block_beats=128),
     "frames * block_beats must be at most 4194304, got 8388608"),
    (dict(latency=5000), "latency must be an int in 1..4096, got 5000"),
    (dict(max_outstanding=0), "max_outstanding must be an int in 1..64, got 0"),
    (dict(tag_bits=True), "tag_bits must be an int in 1..16, got True"),
])
def test_l2_bad_parameters_rejected_before_construction(kw, needle):
    p = dict(frames=4, block_beats=4, data_bits=DB)
    p.update(kw)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError) as e:
            L2Data(**p)
        gc.collect()
    assert needle in str(e.value)


def test_layouts_and_packing():
    rl = LY.hbm_req_layout(4, 10, 16)
    assert [(n, f.shape.width) for n, f in rl] == [("id", 4), ("addr", 10), ("beats", 5)]
    w = LY.pack(rl, id=3, addr=1000, beats=16)
    assert LY.unpack(rl, w) == {"id": 3, "addr": 1000, "beats": 16}
    with pytest.raises(ValueError, match="field addr must fit in 10 bits, got 1024"):
        LY.pack(rl, id=0, addr=1024, beats=1)
    with pytest.raises(ValueError, match="payload fields must be"):
        LY.pack(rl, id=0, addr=1)
    assert LY.l2_read_layout(5, 4, 3).size == 3 + 3 + 3
    assert LY.l2_write_layout(1, 1, 8).size == 1 + 1 + 8
    m = HbmModel(40, data_bits=64, max_beats=8, id_bits=3)
    assert m.req.payload.shape().size == 3 + 6 + 4 and m.resp.payload.shape().size == 3 + 64 + 2
    x, seen = 1, set()
    for _ in range(1000):
        seen.add(x)
        x = lfsr_next(x)
    assert len(seen) == 1000                    # the LFSR does not cycle early


# ----------------------------------------------------------------------------------------------
# timing
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("latency", [1, 2, 7])
def test_hbm_latency_and_bandwidth_exact(latency):
    """Unstalled, in order, enough slots: request k (accepted on cycle k) starts on cycle
    latency + sum of the earlier bursts' beats, and every beat follows the previous one on
    the next cycle: one beat per cycle from the first response on. Single-beat requests:
    each answered exactly ``latency`` cycles after it was accepted."""
    img = image(1, 64)
    rng = random.Random(latency)
    reqs = random_requests(rng, 10, 64, 5, id_bits=6)
    res = simulate_amaranth("hbm", hbm(img, latency=latency, max_outstanding=16), reqs)
    assert [c for c, _ in res.accepts] == list(range(10))
    got = check_transactions(res, reqs, img, reorder=False)
    total = sum(r["beats"] for r in reqs)
    assert [c for c, _ in res.beats] == list(range(latency, latency + total))
    starts = [latency + sum(r["beats"] for r in reqs[:k]) for k in range(10)]
    assert [g[0] for g in got] == starts
    single = [{"id": i, "addr": i, "beats": 1} for i in range(12)]
    res = simulate_amaranth("hbm", hbm(img, latency=latency, max_outstanding=latency + 1),
                            single)
    assert [c for c, _ in res.accepts] == list(range(12))   # latency + 1 slots keep up
    assert [c for c, _ in res.beats] == [k + latency for k in range(12)]


def rate_beat_cycles(first, n, num, den):
    """The cycles of ``n`` back-to-back beats under the credit rule (docs of
    ``burst_responder``), the first due on cycle ``first`` with a full credit."""
    out, credit, t = [], den, first
    while len(out) < n:
        if credit >= den:
            out.append(t)
            credit += num - den
        else:
            credit += num
        t += 1
    return out


@pytest.mark.parametrize("rate", [(1, 4), (2, 5), (7, 8)], ids=lambda r: f"{r[0]}of{r[1]}")
def test_hbm_rate_limits_beats_exactly(rate):
    """``rate = (num, den)``: every response beat of a long in-order run lands on the cycle
    the credit rule gives, so ``num`` beats per ``den`` cycles; cycle by cycle equal to the
    reference; with idle gaps the credit holds one beat's worth, never a burst above the
    rate."""
    num, den = rate
    img = image(3, 64)
    reqs = random_requests(random.Random(num * 10 + den), 12, 64, 5, id_bits=6)
    lat = 4
    res = simulate_amaranth("hbm", hbm(img, latency=lat, max_outstanding=16, rate=rate), reqs)
    check_transactions(res, reqs, img, reorder=False)
    total = sum(r["beats"] for r in reqs)
    assert [c for c, _ in res.beats] == rate_beat_cycles(lat, total, num, den)
    # single beats spaced wider than the rate: each answered exactly latency after accept
    single = [{"id": i, "addr": i, "beats": 1} for i in range(4)]
    res = simulate_amaranth("hbm", hbm(img, latency=lat, max_outstanding=16, rate=rate), single,
                            idle=Schedule("periodic", pattern=(1,) + (0,) * (den + 3)))
    for (acc, _), (beat, _) in zip(res.accepts, res.beats):
        assert beat == acc + lat


def test_hbm_rate_under_idle_and_backpressure():
    """A rate below one beat per cycle, reordered, with faults, under random idle and
    backpressure: every cycle equal to the reference, every transaction equal to the image."""
    img = image(5, 48)
    reqs = random_requests(random.Random(5), 10, 48, 4, id_bits=6, oob=True)
    faults = [(reqs[1]["addr"], 1), (reqs[4]["addr"], ALWAYS)]
    for reorder in (False, True):
        res = simulate_amaranth("hbm", hbm(img, reorder=reorder, faults=faults, seed=3,
                                           rate=(3, 7)),
                                reqs, idle="random", backpressure="random", seed=9)
        check_transactions(res, reqs, img, reorder, fails=dict(faults))


def test_hbm_slots_limit_and_in_order_formula():
    """Few slots: requests wait for a free slot (a slot freed by a last beat takes a request
    from the next cycle), and the in-order formula first_k = max(t_k + latency, last_{k-1} + 1)
    holds exactly for the accept cycles t_k the run shows."""
    img = image(2, 64)
    reqs = random_requests(random.Random(2), 12, 64, 4, id_bits=6)
    lat = 5
    res = simulate_amaranth("hbm", hbm(img, latency=lat, max_outstanding=2), reqs)
    check_transactions(res, reqs, img, reorder=False)
    got = check_in_order_formula(res, lat)
    # with two slots, request k >= 2 is accepted the cycle after request k-2's last beat
    lasts = [g[3][-1] for g in got]
    assert [t for t, _ in res.accepts[2:]] == [x + 1 for x in lasts[:-2]]


def test_l2_fixed_latency_back_to_back():
    """L2 reads of whole and partial blocks: read k's first beat at t_k + latency when the
    data stream is free, beats back to back, frames' contents as written."""
    F, B, lat = 6, 4, 3
    data = image(3, F * B)
    writes = [{"frame": f, "beat": b, "data": data[f * B + b]} for f in range(F) for b in range(B)]
    reads = [{"frame": f, "beats": n, "tag": i} for i, (f, n) in
             enumerate([(0, 4), (5, 1), (2, 4), (2, 2), (3, 4), (1, 3)])]
    p = dict(frames=F, block_beats=B, data_bits=DB, latency=lat, max_outstanding=3, tag_bits=4)
    res = simulate_amaranth("l2", p, reads, writes, writes_first=True)
    got = check_in_order_formula(res, lat, "tag")
    assert [(g[1], g[2]) for g in got] == \
        [(r["tag"], [(data[r["frame"] * B + i], 0) for i in range(r["beats"])]) for r in reads]
    assert got[0][0] == res.accepts[0][0] + lat
    # from the first beat on, one beat every cycle (3 slots cover latency 3 here)
    cyc = [c for c, _ in res.beats]
    assert cyc == list(range(cyc[0], cyc[0] + len(cyc)))


# ----------------------------------------------------------------------------------------------
# reorder
# ----------------------------------------------------------------------------------------------
def test_hbm_reorder_out_of_order_and_deterministic():
    img = image(4, 128)
    reqs = random_requests(random.Random(4), 24, 128, 6, id_bits=6)
    orders = {}
    for seed in (1, 2, 0xACE1):
        p = hbm(img, latency=4, max_outstanding=8, reorder=True, seed=seed)
        res = simulate_amaranth("hbm", p, reqs)
        got = check_transactions(res, reqs, img, reorder=True)
        check_latency(res, 4)
        orders[seed] = [g[1] for g in got]
        again = simulate_amaranth("hbm", p, reqs)
        assert [g[1] for g in bursts(again)] == orders[seed]          # same seed, same order
        cyc = [c for c, _ in res.beats]                                # work-conserving here
        assert cyc == list(range(cyc[0], cyc[0] + len(cyc)))
    for o in orders.values():
        assert o != sorted(o)                                          # out of order
    assert len({tuple(o) for o in orders.values()}) == 3               # the seed matters
    inorder = simulate_amaranth("hbm", hbm(img, latency=4, max_outstanding=8), reqs)
    assert [g[1] for g in bursts(inorder)] == list(range(24))


# ----------------------------------------------------------------------------------------------
# faults, writes, edges
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("reorder", [False, True], ids=["in_order", "reorder"])
def test_hbm_transient_and_persistent_faults(reorder):
    """Address 8 fails its first 2 attempts, address 20 always, address 3 once; a CDU-style
    retry sequence sees err, err, ok at 8 and err forever at 20; other addresses never err."""
    img = image(5, 64)
    faults = [(8, 2), (20, ALWAYS), (3, 1)]
    addrs = [8, 20, 5, 8, 20, 3, 8, 20, 8, 3, 40]
    reqs = [{"id": i, "addr": a, "beats": 1 + i % 3} for i, a in enumerate(addrs)]
    res = simulate_amaranth("hbm", hbm(img, faults=faults, reorder=reorder, seed=9),
                            reqs, idle="random", backpressure="random", seed=2)
    got = check_transactions(res, reqs, img, reorder, fails=dict(faults))
    err = {g[1]: {e for _, e in g[2]} for g in got}
    assert [err[i] for i, a in enumerate(addrs) if a == 8] == [{1}, {1}, {0}, {0}]
    assert all(err[i] == {1} for i, a in enumerate(addrs) if a == 20)
    assert [err[i] for i, a in enumerate(addrs) if a == 3] == [{1}, {0}]
    assert err[2] == err[10] == {0}
    # faulty beats still carry the image's data (err marks them; the data are not garbage)
    assert all(d == img[reqs[g[1]]["addr"] + k] for g in got for k, (d, _) in enumerate(g[2]))


def test_hbm_writes_then_reads_and_writes_during_reads():
    img = image(6, 64)
    rng = random.Random(6)
    writes = [{"addr": rng.randrange(64), "data": rng.getrandbits(DB)} for _ in range(30)]
    new = list(img)
    for w in writes:
        new[w["addr"]] = w["data"]
    reqs = [{"id": i, "addr": 8 * i, "beats": 8} for i in range(8)]
    res = simulate_amaranth("hbm", hbm(img), reqs, writes, idle="random", backpressure="random",
                            seed=4, writes_first=True)
    check_transactions(res, reqs, new, reorder=False)
    assert new != img
    # writes while reads are answered: the reference predicts which beats see which value
    res = simulate_amaranth("hbm", hbm(img, reorder=True), reqs, writes, idle="random",
                            backpressure="random", seed=5)
    assert len(res.beats) == 64


def test_edges_out_of_range_and_zero_beats():
    img = image(7, 20)
    reqs = [{"id": 0, "addr": 17, "beats": 6}, {"id": 1, "addr": 0, "beats": 0},
            {"id": 2, "addr": 25, "beats": 2}, {"id": 3, "addr": 19, "beats": 1},
            {"id": 4, "addr": 0, "beats": 15}]
    res = simulate_amaranth("hbm", hbm(img, max_beats=8), reqs, [{"addr": 30, "data": 1}],
                            idle="random", backpressure="random", seed=1)
    got = check_transactions(res, reqs, img, reorder=False)
    assert got[0][2] == [(img[17], 0), (img[18], 0), (img[19], 0), (0, 1), (0, 1), (0, 1)]
    assert got[1][2] == [(0, 1)] and got[2][2] == [(0, 1), (0, 1)]
    assert len(got[4][2]) == 15                 # max_beats only sets the field width
    F, B = 5, 4
    reads = [{"frame": 4, "beats": 6, "tag": 0}, {"frame": 6, "beats": 2, "tag": 1},
             {"frame": 1, "beats": 0, "tag": 2}]
    writes = [{"frame": 4, "beat": b, "data": 100 + b} for b in range(4)] + \
             [{"frame": 5, "beat": 0, "data": 7}]                       # dropped
    p = dict(frames=F, block_beats=B, data_bits=DB, latency=2, max_outstanding=2, tag_bits=2)
    res = simulate_amaranth("l2", p, reads, writes, writes_first=True, idle="periodic",
                            backpressure="random", seed=3)
    got = bursts(res, "tag")
    assert got[0][2] == [(100, 0), (101, 0), (102, 0), (103, 0), (0, 1), (0, 1)]
    assert got[1][2] == [(0, 1), (0, 1)] and got[2][2] == [(0, 1)]


# ----------------------------------------------------------------------------------------------
# the idle x backpressure matrix
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("pair", IDLE_BACKPRESSURE, ids=matrix_id)
def test_idle_backpressure_matrix(pair):
    """Per pair: HBM in order and reordered (random bursts, a transient and a persistent
    fault, writes during reads) and L2 (writes then reads): every cycle equal to the
    reference, every transaction equal to the image, drained."""
    idle, bp = pair
    img = image(8, 48)
    rng = random.Random(8)
    reqs = random_requests(rng, 10, 48, 4, id_bits=6, oob=True)
    assert any(r["addr"] + r["beats"] > 48 for r in reqs)      # some run past the image
    faults = [(reqs[1]["addr"], 1), (reqs[4]["addr"], ALWAYS)]
    for reorder in (False, True):
        res = simulate_amaranth("hbm", hbm(img, reorder=reorder, faults=faults, seed=3),
                                reqs, idle=idle, backpressure=bp, seed=7)
        check_transactions(res, reqs, img, reorder, fails=dict(faults))
        check_latency(res, 6)
        if pair == ("none", "none") and not reorder:
            check_in_order_formula(res, 6)
    writes = [{"addr": rng.randrange(48), "data": rng.getrandbits(DB)} for _ in range(6)]
    simulate_amaranth("hbm", hbm(img, reorder=True), reqs, writes, idle=idle,
                      backpressure=bp, seed=8)
    F, B = 3, 4
    data = image(9, F * B)
    writes = [{"frame": f, "beat": b, "data": data[f * B + b]} for f in range(F) for b in range(B)]
    reads = [{"frame": rng.randrange(F), "beats": rng.randint(1, B), "tag": i} for i in range(6)]
    p = dict(frames=F, block_beats=B, data_bits=DB, latency=2, max_outstanding=2, tag_bits=3)
    res = simulate_amaranth("l2", p, reads, writes, idle=idle, backpressure=bp, seed=9,
                            writes_first=True)
    assert [(g[1], g[2]) for g in bursts(res, "tag")] == \
        [(r["tag"], [(data[r["frame"] * B + i], 0) for i in range(r["beats"])]) for r in reads]
    check_latency(res, 2, "tag")
    if pair == ("none", "none"):
        check_in_order_formula(res, 2, "tag")


# ----------------------------------------------------------------------------------------------
# the checks can fail
# ----------------------------------------------------------------------------------------------
def test_wrong_results_and_timing_are_caught():
    img = image(10, 32)
    reqs = random_requests(random.Random(10), 6, 32, 4, id_bits=6)
    p = hbm(img)
    res = simulate_amaranth("hbm", p, reqs)
    check_transactions(res, reqs, img, reorder=False)
    # a reference whose image differs in one bit of one word read: the cycle check fails
    ref = HbmRef(**p)
    ref.mem[reqs[2]["addr"]] ^= 1 << 7
    with pytest.raises(Mismatch, match="differs from the reference"):
        simulate_amaranth("hbm", p, reqs, ref=ref)
    # the same one-bit change in the image: the transaction check fails
    bad = list(img)
    bad[reqs[2]["addr"]] ^= 1 << 7
    with pytest.raises(AssertionError):
        check_transactions(res, reqs, bad, reorder=False)
    # a design one cycle slower than the reference, or reordering when it should not
    with pytest.raises(Mismatch, match="cycle 6: design"):
        simulate_amaranth("hbm", p, reqs, dut=HbmModel(**hbm(img, latency=7)))
    many = random_requests(random.Random(4), 16, 32, 6, id_bits=6)
    with pytest.raises(Mismatch):
        simulate_amaranth("hbm", hbm(img, max_outstanding=8), many,
                          dut=HbmModel(**hbm(img, max_outstanding=8, reorder=True, seed=5)),
                          ref=HbmRef(**hbm(img, max_outstanding=8)))
    # a forgotten fault: the design errs where the reference does not
    with pytest.raises(Mismatch):
        simulate_amaranth("hbm", p, reqs, dut=HbmModel(**hbm(img, faults=[(reqs[0]["addr"], 1)])))


def test_undrained_is_reported():
    img = image(11, 32)
    reqs = random_requests(random.Random(11), 4, 32, 3, id_bits=6)
    p = hbm(img)
    plan = plan_json("hbm", p, reqs)
    plan["n_beats"] += 1                        # the sink expects one beat more than comes
    with pytest.raises(NotDrained, match="resp: .* beats received"):
        simulate_amaranth("hbm", p, reqs, plan=plan)


# ----------------------------------------------------------------------------------------------
# Verilog
# ----------------------------------------------------------------------------------------------
def test_verilog_lint_clean(tmp_path):
    from tricut.sim.harness.verilog_out import lint, write_verilog
    for top, make in (("tile_hbm", lambda: HbmModel(image(12, 40), data_bits=64, latency=5,
                                                    max_outstanding=4, reorder=True,
                                                    faults=[(3, 2), (7, ALWAYS)])),
                      ("tile_hbm_r3", lambda: HbmModel(8, data_bits=8, max_outstanding=3,
                                                       reorder=True)),
                      ("tile_hbm_inorder", lambda: HbmModel(64, data_bits=64, latency=3)),
                      ("tile_l2", lambda: L2Data(6, 4, data_bits=64, latency=2,
                                                 max_outstanding=3))):
        path = write_verilog(make(), top, tmp_path)
        clean, messages = lint(path, top)
        assert clean, messages


def test_verilator_idle_backpressure_matrix():
    """The reordering HBM with a transient and a persistent fault on Verilator: writes then
    random bursts under the nine pairs in one build and one cocotb test; every cycle equal to
    the reference, every transaction equal to the written image, drained."""
    from tricut.sim.harness.memory import simulate_verilator_matrix
    img = image(13, 48)
    rng = random.Random(13)
    reqs = random_requests(rng, 12, 48, 4, id_bits=6)
    writes = [{"addr": a, "data": rng.getrandbits(DB)} for a in rng.sample(range(48), 8)]
    new = list(img)
    for w in writes:
        new[w["addr"]] = w["data"]
    faults = [(reqs[1]["addr"], 1), (reqs[4]["addr"], ALWAYS)]
    p = hbm(img, reorder=True, faults=faults, seed=11)
    runs = simulate_verilator_matrix("hbm", p, reqs, writes, seed=7)
    assert list(runs) == IDLE_BACKPRESSURE
    for pair, res in runs.items():
        check_transactions(res, reqs, new, reorder=True, fails=dict(faults))
        check_latency(res, 6)
    amaranth = simulate_amaranth("hbm", p, reqs, writes, idle="random", backpressure="random",
                                 seed=7, writes_first=True)
    assert amaranth.beats == runs[("random", "random")].beats      # the same plan, the same beats
