"""KV tiers beyond HBM (issue 16): the tier configs load with their numbers and refuse every kind
of mistake in one line; move times by hand; the prefix cache (contiguous hits, LRU, pins,
capacity, counters) and the physical bound of prefix reuse on the Mooncake sample; the tier
ledger conserves KV and catches a lost block."""

from __future__ import annotations

import json
import math
import random
import re
from importlib import resources

import pytest

from tricut.models.config import ConfigError
from tricut.models.tiers import TIERS, TierConfig, load_tiers, tier_ids
from tricut.sim.fast.kv_tiers import (
    TIER_BLOCK_TOKENS, LedgerError, PrefixCache, TierLedger, block_references,
    hbm_bytes_of_move, physical_bound, transfer_time_s)

GB, GiB = 1e9, 2**30

# --------------------------------------------------------------------------- tier configs


def test_shipped_tier_ids():
    assert tier_ids() == ["grace-hopper", "hgx-pcie", "none", "vera-rubin"]


# (id, tier, capacity bytes ~, bandwidth bytes/s, latency s)
SHIPPED = [
    ("grace-hopper", "G2", 480e9, 450e9, 5e-6),      # 480 GB LPDDR5X, 900 GB/s C2C = 450 each way
    ("grace-hopper", "G3", 3.84e12, 14e9, 100e-6),
    ("grace-hopper", "G3.5", 16 * 2**40, 50e9, 150e-6),
    ("hgx-pcie", "G2", 250e9, 64e9, 10e-6),          # 2 TB / 8 GPUs over PCIe Gen5 x16
    ("hgx-pcie", "G3", 3.84e12, 14e9, 100e-6),
    ("hgx-pcie", "G3.5", 16 * 2**40, 50e9, 150e-6),
    ("vera-rubin", "G2", 750e9, 600e9, 5e-6),        # 1.5 TB / 2 GPUs; LPDDR5X ~1.2 TB/s / 2
    ("vera-rubin", "G3", 3.84e12, 14e9, 100e-6),
    ("vera-rubin", "G3.5", 16 * 2**40, 200e9, 150e-6),
]


@pytest.mark.parametrize("name,tier,capacity,bandwidth,latency", SHIPPED)
def test_shipped_tier_figures(name, tier, capacity, bandwidth, latency):
    t = load_tiers(name).tier(tier)
    assert t.tier == tier
    assert t.capacity_bytes == pytest.approx(capacity, rel=1e-4)
    assert t.bandwidth == pytest.approx(bandwidth)
    assert t.latency_s == pytest.approx(latency)
    assert isinstance(t.capacity_bytes, int)


def test_every_shipped_config_loads():
    for name in tier_ids():
        cfg = load_tiers(name)
        assert isinstance(cfg, TierConfig) and cfg.name == name
    assert load_tiers("none").present() == ()
    assert "G2" not in load_tiers("none")
    assert load_tiers("grace-hopper").present() == ("G2", "G3", "G3.5")
    assert load_tiers("hgx-pcie").g2.link == "PCIe Gen5 x16"
    assert load_tiers("vera-rubin").g2.link == "NVLink-C2C"
    with pytest.raises(ValueError, match="unknown tier 'G1'"):
        load_tiers("none").tier("G1")


def test_every_shipped_value_has_a_source_comment():
    """Each number in a shipped tier file follows a comment naming its source or calling it an
    assumption (the style of models/configs/gpus/*.toml)."""
    for name in tier_ids():
        text = resources.files("tricut.models.configs").joinpath(f"tiers/{name}.toml").read_text("utf-8")
        lines = text.splitlines()
        assert lines[0].startswith("#"), name
        for i, line in enumerate(lines):
            if re.match(r"\s*(capacity_gib|bandwidth_gb_s|latency_us)\s*=", line):
                assert lines[i - 1].startswith("#"), f"{name}.toml line {i + 1}: no comment above"


def test_user_file_loads(tmp_path):
    p = tmp_path / "mine.toml"
    p.write_text(GOOD)
    cfg = load_tiers(p)
    assert cfg.name == "mine" and cfg.present() == ("G2", "G3")
    assert cfg.g2.capacity_bytes == 100 * GiB and cfg.g2.bandwidth == 64 * GB
    assert cfg.g2.latency_s == pytest.approx(10e-6)
    assert cfg.g3.latency_s == 0.0          # a latency may be 0
    assert cfg.g3_5 is None
    assert load_tiers(str(p)) == cfg


GOOD = """\
name = "mine"
[g2]
link = "PCIe"
capacity_gib = 100
bandwidth_gb_s = 64
latency_us = 10
[g3]
link = "NVMe"
capacity_gib = 3000.5
bandwidth_gb_s = 14.0
latency_us = 0
"""


def _bad(old: str, new: str) -> str:
    assert old in GOOD
    return GOOD.replace(old, new, 1)


BAD = [
    ("missing name", GOOD.replace('name = "mine"\n', ""), "missing field 'name'"),
    ("missing field", _bad("bandwidth_gb_s = 64\n", ""), "missing field 'g2.bandwidth_gb_s'"),
    ("missing link", _bad('link = "NVMe"\n', ""), "missing field 'g3.link'"),
    ("unknown top field", _bad('name = "mine"\n', 'name = "mine"\ncolour = 1\n'), "unknown field 'colour'"),
    ("unknown tier", GOOD + "[g4]\nlink = 'x'\n", "unknown field 'g4'"),
    ("g3.5 as a dotted table", GOOD + "[g3.5]\nlink = 'x'\n", "unknown field 'g3.5'"),
    ("unknown tier field", _bad("latency_us = 10\n", "latency_us = 10\nwrite_gb_s = 1\n"),
     "unknown field 'g2.write_gb_s'"),
    ("zero capacity", _bad("capacity_gib = 100", "capacity_gib = 0"),
     "field 'g2.capacity_gib': must be a positive number, got 0.0"),
    ("negative capacity", _bad("capacity_gib = 100", "capacity_gib = -5"),
     "field 'g2.capacity_gib': must be a positive number"),
    ("zero bandwidth", _bad("bandwidth_gb_s = 64", "bandwidth_gb_s = 0.0"),
     "field 'g2.bandwidth_gb_s': must be a positive number"),
    ("negative bandwidth", _bad("bandwidth_gb_s = 14.0", "bandwidth_gb_s = -14.0"),
     "field 'g3.bandwidth_gb_s': must be a positive number"),
    ("negative latency", _bad("latency_us = 10", "latency_us = -1"),
     "field 'g2.latency_us': must be a number >= 0"),
    ("NaN", _bad("bandwidth_gb_s = 64", "bandwidth_gb_s = nan"),
     "field 'g2.bandwidth_gb_s': must be a positive number, got nan"),
    ("inf", _bad("capacity_gib = 100", "capacity_gib = inf"), "field 'g2.capacity_gib'"),
    ("huge integer", _bad("capacity_gib = 100", "capacity_gib = 1" + "0" * 30),
     "field 'g2.capacity_gib': must be between"),
    ("unit slip", _bad("bandwidth_gb_s = 64", "bandwidth_gb_s = 64000000"),
     "field 'g2.bandwidth_gb_s': must be between 0.001 and 100000 GB/s"),
    ("tiny capacity", _bad("capacity_gib = 100", "capacity_gib = 1e-9"), "field 'g2.capacity_gib': must be between"),
    ("string for a number", _bad("capacity_gib = 100", 'capacity_gib = "100"'),
     "field 'g2.capacity_gib': expected float, got str '100'"),
    ("bool for a number", _bad("latency_us = 10", "latency_us = true"),
     "field 'g2.latency_us': expected float, got bool True"),
    ("link not a string", _bad('link = "PCIe"', "link = 5"), "field 'g2.link': expected str, got int 5"),
    ("empty name", _bad('name = "mine"', 'name = ""'), "field 'name': expected 1 to 64 printable"),
    ("tier not a table", _bad('name = "mine"\n', 'name = "mine"\ng3_5 = 5\n'), "field 'g3_5': expected a table"),
    ("not TOML", "name = \n[g2", "not valid TOML"),
]


@pytest.mark.parametrize("case,text,message", BAD, ids=[b[0] for b in BAD])
def test_bad_tier_file_one_line(tmp_path, case, text, message):
    p = tmp_path / "bad.toml"
    p.write_text(text)
    with pytest.raises(ConfigError) as e:
        load_tiers(p)
    msg = str(e.value)
    assert "\n" not in msg
    assert msg.startswith(f"{p}: "), msg
    assert message in msg, msg


def test_missing_file_and_unknown_id(tmp_path):
    with pytest.raises(ConfigError, match=r"nope\.toml: file not found$"):
        load_tiers(tmp_path / "nope.toml")
    with pytest.raises(ConfigError) as e:
        load_tiers("grace-blackwell")
    assert str(e.value) == ("unknown tier 'grace-blackwell': not one of grace-hopper, hgx-pcie, none, "
                            "vera-rubin, nor a .toml file")
    d = tmp_path / "dir.toml"
    d.mkdir()
    with pytest.raises(ConfigError, match="cannot read"):
        load_tiers(d)


def test_not_utf8(tmp_path):
    p = tmp_path / "bin.toml"
    p.write_bytes(b"name = \"\xff\xfe\"\n")
    with pytest.raises(ConfigError, match="bin.toml: cannot read"):
        load_tiers(p)

# --------------------------------------------------------------------------- move costs


def test_transfer_time_by_hand():
    gh, pcie = load_tiers("grace-hopper"), load_tiers("hgx-pcie")
    # 1 GB over C2C one way: 5 us + 1e9 / 450e9 s
    assert transfer_time_s(1e9, gh.g2) == pytest.approx(5e-6 + 1 / 450)
    # Llama-3-70B bf16 KV on TP8: 2 x 80 layers x 8 KV heads x 128 x 2 B / 8 GPUs = 40,960 B per
    # token per GPU; a 32K-token context is 1.342 GB per GPU: 21.0 ms over PCIe Gen5, 3.0 ms C2C.
    nbytes = 32768 * 2 * 80 * 8 * 128 * 2 / 8
    assert nbytes == 1_342_177_280
    assert transfer_time_s(nbytes, pcie.g2) == pytest.approx(10e-6 + 1_342_177_280 / 64e9)
    assert transfer_time_s(nbytes, pcie.g2) == pytest.approx(0.02098, abs=1e-5)
    assert transfer_time_s(nbytes, gh.g2) == pytest.approx(0.002988, abs=1e-6)
    # NVMe: latency + 1.342 GB / 14 GB/s; pod storage over 400 Gb/s RDMA
    assert transfer_time_s(nbytes, gh.g3) == pytest.approx(100e-6 + nbytes / 14e9)
    assert transfer_time_s(nbytes, gh.g3_5) == pytest.approx(150e-6 + nbytes / 50e9)
    # a small move is all latency; no move costs nothing
    assert transfer_time_s(1, gh.g3) == pytest.approx(100e-6, rel=1e-6)
    assert transfer_time_s(0, gh.g3) == 0.0
    for bad in (-1, math.nan, math.inf, "1", True):
        with pytest.raises(ValueError):
            transfer_time_s(bad, gh.g2)


def test_hbm_bytes_of_move():
    assert hbm_bytes_of_move(4096) == 4096.0
    assert hbm_bytes_of_move(4096, "G1", "G2") == 4096.0       # park: read from HBM
    assert hbm_bytes_of_move(4096, "G2", "G1") == 4096.0       # restore: written to HBM
    assert hbm_bytes_of_move(4096, "G2", "G3") == 0.0          # host to NVMe: HBM untouched
    assert hbm_bytes_of_move(0) == 0.0
    with pytest.raises(ValueError):
        hbm_bytes_of_move(1, "G2", "G2")
    with pytest.raises(ValueError):
        hbm_bytes_of_move(1, "G0", "G1")
    with pytest.raises(ValueError):
        hbm_bytes_of_move(-1)

# --------------------------------------------------------------------------- prefix cache


def test_prefix_hits_are_contiguous_from_the_first_block():
    c = PrefixCache(math.inf)
    assert c.lookup([1, 2, 3]) == 0
    c.insert([1, 2, 3])
    assert c.lookup([1, 2, 3, 4]) == 3
    assert c.lookup([1, 2, 9, 3]) == 2          # 3 is cached but after a miss: no hit
    assert c.lookup([9, 1, 2, 3]) == 0
    assert c.lookup([]) == 0
    assert (c.lookups_blocks, c.hit_blocks, c.inserted_blocks, c.evicted_blocks) == (15, 5, 3, 0)
    assert c.hit_rate == pytest.approx(5 / 15)
    c.insert([1, 2, 9, 10])
    assert c.inserted_blocks == 5               # 9 and 10 new; 1 and 2 already cached
    assert len(c) == 5 and c.cached_tokens == 5 * TIER_BLOCK_TOKENS


def test_lru_order_and_eviction():
    c = PrefixCache(3 * 512 + 511)              # 3 blocks: a partial block does not count
    assert c.capacity_blocks == 3
    c.insert(["a1", "a2", "a3"])
    assert c.lru_order() == ["a3", "a2", "a1"]  # a prefix leaves from its tail
    c.insert(["b1"])                            # evicts a3, the least recently used
    assert c.lru_order() == ["a2", "a1", "b1"] and c.evicted_blocks == 1
    assert c.lookup(["a1", "a2", "a3"]) == 2    # touches a2 then a1: a1 most recent
    assert c.lru_order() == ["b1", "a2", "a1"]
    c.insert(["c1"])                            # evicts b1
    assert c.lru_order() == ["a2", "a1", "c1"]
    assert "b1" not in c and c.lookup(["b1"]) == 0
    c.insert(["d1", "d2"])                      # evicts a2 then a1
    assert c.lru_order() == ["c1", "d2", "d1"] and c.evicted_blocks == 4


def test_insert_never_evicts_its_own_blocks_and_stops_when_full():
    c = PrefixCache(2 * 512)
    assert c.insert([1, 2, 3, 4]) == 2          # only the head fits
    assert c.lru_order() == [2, 1] and c.lookup([1, 2, 3, 4]) == 2
    assert c.evicted_blocks == 0
    z = PrefixCache(100)                        # less than a block: caches nothing
    assert z.capacity_blocks == 0 and z.insert([1]) == 0 and len(z) == 0


def test_pinned_blocks_are_never_evicted():
    c = PrefixCache(3 * 512)
    c.insert(["s", "x1"])
    c.pin(["s"])                                 # the shared system prompt is in use
    c.pin(["s"])                                 # by two requests
    for i in range(10):
        c.insert([f"r{i}a", f"r{i}b"])
        assert "s" in c
    c.unpin(["s"])
    c.insert(["q1", "q2"])
    assert "s" in c                              # still pinned once
    c.unpin(["s"])
    assert c.pinned_blocks == 0
    c.insert(["w1", "w2"])
    c.insert(["v1", "v2", "v3"])
    assert "s" not in c
    # when every block is pinned nothing new is cached
    c.pin(["v1", "v2", "v3"])
    assert c.insert(["u1"]) == 0 and len(c) == 3
    with pytest.raises(KeyError, match="not cached"):
        c.pin(["u1"])
    with pytest.raises(KeyError, match="not pinned"):
        c.unpin(["w1"])
    with pytest.raises(KeyError, match="not pinned"):
        c.unpin(["v1", "v1"])                    # pinned once, unpinned twice
    assert c.pinned_blocks == 3                  # a refused unpin changes nothing


def test_capacity_respected_under_random_use():
    rng = random.Random(16)
    c = PrefixCache(20 * 512)
    running: list[list[int]] = []
    for _ in range(2000):
        base = rng.randrange(8)
        hashes = [base * 1000 + i for i in range(rng.randrange(1, 8))]
        n = c.lookup(hashes)
        c.pin(hashes[:n])
        c.insert(hashes)
        running.append(hashes[:n])
        if len(running) > 3:
            c.unpin(running.pop(0))
        assert len(c) <= c.capacity_blocks
        assert c.pinned_blocks <= c.capacity_blocks
    assert c.evicted_blocks > 0 and 0 < c.hit_rate < 1
    assert c.inserted_blocks - c.evicted_blocks == len(c)


def test_bad_arguments():
    for bad in (-1, math.nan, "1", True):
        with pytest.raises(ValueError):
            PrefixCache(bad)
    for bad in (0, -512, 1.5, True):
        with pytest.raises(ValueError):
            PrefixCache(1024, block_tokens=bad)

# --------------------------------------------------------------------------- physical bound


def test_physical_bound_by_hand():
    lists = [[1, 2, 3], [1, 2, 4], [5], [1, 2, 3]]
    # references 10; repeats: 1, 2 (request 2) and 1, 2, 3 (request 4) = 5
    assert block_references(lists) == (10, 5)
    assert physical_bound(lists) == 0.5
    assert physical_bound([[7, 7]]) == 0.5          # a repeat within one request counts
    assert physical_bound([]) == 0.0 and physical_bound([[]]) == 0.0
    assert physical_bound(iter(lists)) == 0.5       # any iterable, read once
    # an unbounded cache reaches it on prefix hashes
    c = PrefixCache(math.inf)
    for h in lists:
        c.lookup(h)
        c.insert(h)
    assert c.hit_blocks == 5 and c.hit_rate == 0.5


def _mooncake_sample() -> list[list[int]]:
    res = resources.files("tricut.sim").joinpath("data/mooncake_conversation_sample.jsonl")
    return [json.loads(line)["hash_ids"] for line in res.read_text("utf-8").splitlines() if line.strip()]


def test_mooncake_sample_bound_and_infinite_cache():
    """The shipped 300-request sample (the first 300 lines of Mooncake's conversation trace):
    8,490 block references, 7,814 distinct, so 676 repeat: a bound of 7.96 % (the whole trace's
    36.6 % builds up over its 12,031 requests). An unbounded prefix cache hits exactly that many:
    every repeated hash in the trace extends a repeated prefix."""
    lists = _mooncake_sample()
    assert len(lists) == 300
    assert block_references(lists) == (8490, 676)
    bound = physical_bound(lists)
    assert bound == 676 / 8490
    rates = []
    for cap_blocks in (0, 50, 400, 2000, math.inf):
        c = PrefixCache(cap_blocks * 512)
        for h in lists:
            c.lookup(h)
            c.insert(h)
            assert len(c) <= c.capacity_blocks
        rates.append(c.hit_rate)
        if cap_blocks == math.inf:
            assert c.hit_blocks == 676 and c.evicted_blocks == 0 and len(c) == 7814
    assert rates[0] == 0.0
    assert rates == sorted(rates)                   # LRU: a bigger cache never hits less
    assert rates[-1] == bound
    assert rates[1] < bound                         # 50 blocks is too small to reach it


def test_read_mooncake_hashes_agree():
    """The workload reader keeps the same hashes (``Request.prefix_hashes``)."""
    from tricut.sim.fast.workload import read_mooncake
    with resources.as_file(resources.files("tricut.sim").joinpath(
            "data/mooncake_conversation_sample.jsonl")) as path:
        reqs = read_mooncake(path)
    assert physical_bound(r.prefix_hashes for r in reqs) == 676 / 8490
    assert all(len(r.prefix_hashes) == -(-r.prompt_tokens // TIER_BLOCK_TOKENS) for r in reqs)

# --------------------------------------------------------------------------- tier ledger


def test_ledger_moves_conserve_blocks_at_every_step():
    """A random sequence of prefills, decode steps, parks, restores, spills and drops; after
    every step the ledger agrees with an independent count and check() passes."""
    rng = random.Random(7)
    bpt = 40960
    led = TierLedger(bytes_per_token=bpt)
    mine: dict[int, dict[str, int]] = {}
    moved_bytes: dict[tuple[str, str], float] = {}
    for _ in range(3000):
        s = rng.randrange(12)
        h = mine.setdefault(s, {t: 0 for t in TIERS})
        op = rng.random()
        if op < 0.3:
            n = rng.randrange(1, 600)
            led.add(s, "G1", n)
            h["G1"] += n
        else:
            src = rng.choice([t for t in TIERS if h[t] > 0] or ["G1"])
            n = rng.randrange(0, h[src] + 1)
            if op < 0.8:
                dst = rng.choice([t for t in TIERS if t != src])
                led.move(s, src, dst, n)
                h[src] -= n
                h[dst] += n
                if n:
                    moved_bytes[(src, dst)] = moved_bytes.get((src, dst), 0) + n * bpt
            else:
                led.drop(s, src, n)
                h[src] -= n
        led.check(observed=mine)
        for t in TIERS:
            assert led.total(t) == sum(x[t] for x in mine.values())
        assert led.held(s) == h
    assert {k: v for k, v in led.bytes_moved.items() if v} == moved_bytes
    total_added = sum(led.tokens_added.values())
    total_dropped = sum(led.tokens_dropped.values())
    assert sum(led.totals().values()) == total_added - total_dropped
    for s in list(mine):
        led.drop_all(s)
    led.check()
    assert sum(led.totals().values()) == 0


def test_ledger_by_hand():
    led = TierLedger(bytes_per_token=100, capacity={"G1": 1000, "G2": 5000})
    led.add("a", "G1", 800)
    led.move("a", "G1", "G2", 800)                # park for a tool call
    led.add("b", "G1", 900)
    led.check()
    led.move("a", "G2", "G1", 100)                 # a partial restore; G1 now full
    assert led.totals() == {"G1": 1000, "G2": 700, "G3": 0, "G3.5": 0}
    assert led.held("a") == {"G1": 100, "G2": 700, "G3": 0, "G3.5": 0}
    assert led.bytes_moved[("G1", "G2")] == 80_000 and led.bytes_moved[("G2", "G1")] == 10_000
    assert led.tokens_moved[("G2", "G1")] == 100
    led.check()
    led.drop("a", "G2", 700)                       # dropped, to be recomputed
    assert led.tokens_dropped["G2"] == 700
    assert led.held("nobody") == {"G1": 0, "G2": 0, "G3": 0, "G3.5": 0}
    led.check()


def test_ledger_refuses_impossible_changes():
    led = TierLedger(bytes_per_token=1)
    led.add("a", "G1", 10)
    with pytest.raises(LedgerError, match="cannot move 11 tokens from G1 to G2: it holds 10"):
        led.move("a", "G1", "G2", 11)
    with pytest.raises(LedgerError, match="holds 0 there"):
        led.move("nobody", "G2", "G1", 1)
    with pytest.raises(LedgerError, match="cannot drop 11"):
        led.drop("a", "G1", 11)
    for args in (("a", "G1", "G1", 1), ("a", "G1", "G4", 1), ("a", "G1", "G2", -1),
                 ("a", "G1", "G2", 1.0), ("a", "G1", "G2", True)):
        with pytest.raises(ValueError):
            led.move(*args)
    with pytest.raises(ValueError):
        led.add("a", "HBM", 1)
    assert led.held("a")["G1"] == 10
    led.check()


def test_ledger_check_catches_a_lost_block():
    led = TierLedger(bytes_per_token=1)
    led.add("a", "G1", 10)
    led.move("a", "G1", "G2", 10)
    led.check()
    led._held["a"]["G2"] -= 1                       # a bug: one token vanishes from the parked KV
    with pytest.raises(LedgerError, match=r"session 'a': holds 9 tokens .* 1 lost without a drop"):
        led.check()
    led._held["a"]["G2"] += 2                       # the opposite bug
    with pytest.raises(LedgerError, match="1 appeared without an add"):
        led.check()
    led._held["a"]["G2"] -= 1
    led._held["a"]["G1"] -= 3                       # a negative count
    led._held["a"]["G3"] += 3
    with pytest.raises(LedgerError, match="-3 tokens in G1"):
        led.check()


def test_ledger_check_against_the_simulator_and_capacity():
    led = TierLedger(bytes_per_token=1, capacity={"G1": 10})
    led.add("a", "G1", 6)
    led.move("a", "G1", "G2", 6)
    led.check(observed={"a": {"G2": 6}})
    # the simulator forgot the parked KV (no drop): the ledger still has it
    with pytest.raises(LedgerError, match="the ledger has 6 tokens in G2, the simulator 0"):
        led.check(observed={"a": {"G1": 0}})
    with pytest.raises(LedgerError, match="session 'b': the ledger has 0 tokens in G1, the simulator 3"):
        led.check(observed={"a": {"G2": 6}, "b": {"G1": 3}})
    led.add("b", "G1", 11)
    with pytest.raises(LedgerError, match="G1 holds 11 tokens, over its capacity 10"):
        led.check()
    with pytest.raises(ValueError):
        TierLedger(bytes_per_token=-1)
    with pytest.raises(ValueError):
        TierLedger(bytes_per_token=1, capacity={"G9": 1})


def test_ledger_retires_only_a_session_that_holds_nothing():
    from tricut.sim.fast.kv_tiers import LedgerError, TierLedger
    led = TierLedger(1.0)
    led.add("a", "G1", 10)
    with pytest.raises(LedgerError, match="retired while it holds"):
        led.retire("a")
    led.drop_all("a")
    led.retire("a")
    assert led.sessions() == [] and led.retired == 1
    led.check()


def test_ledger_running_counts_and_a_check_of_some_sessions():
    """Totals and holders per tier are kept as the counts change (constant time), a full check
    compares them with the sessions' counts, and a check of some sessions looks at those only."""
    led = TierLedger(bytes_per_token=1)
    led.add("a", "G1", 10)
    led.add("b", "G1", 5)
    led.move("a", "G1", "G2", 4)
    assert (led.total("G1"), led.total("G2"), led.holders("G1"), led.holders("G2")) == (11, 4, 2, 1)
    assert led.take_touched() == {"a", "b"} and led.take_touched() == set()
    led.drop_all("b")
    led.retire("b")
    assert (led.total("G1"), led.holders("G1"), len(led)) == (6, 1, 1) and led.take_touched() == {"b"}
    led._held["a"]["G1"] -= 1                       # a bug in session a
    led.check(sessions=["b"])                       # a is not looked at
    with pytest.raises(LedgerError, match="1 lost without a drop"):
        led.check(sessions=["a"])
    led._held["a"]["G1"] += 1
    led.check(observed={"a": {"G1": 6, "G2": 4}, "z": {"G1": 1}}, sessions=["a"])
    with pytest.raises(LedgerError, match="the ledger has 6 tokens in G1, the simulator 5"):
        led.check(observed={"a": {"G1": 5, "G2": 4}}, sessions=["a"])
    led._totals["G2"] += 1                          # a running count off
    led.check(sessions=["a"])
    with pytest.raises(LedgerError, match="G2: the running count is 5 tokens in 1 sessions, the sessions hold 4 in 1"):
        led.check()


def _tier(name="G2", bandwidth=1e9, latency_s=1e-3, capacity=10**12):
    from tricut.models.tiers import Tier
    return Tier(name, "test link", capacity, bandwidth, latency_s)


def test_link_queue_by_hand():
    """Moves on one tier and direction run one at a time, first come first served; the other
    direction and other tiers do not wait; the waits add up."""
    from tricut.sim.fast.kv_tiers import LinkQueue
    g2, g3 = _tier("G2"), _tier("G3")
    q = LinkQueue()
    assert q.book(0.0, 1e9, g2, "out") == pytest.approx((0.0, 1.001))        # 1 ms + 1 GB at 1 GB/s
    assert q.book(0.5, 1e9, g2, "out") == pytest.approx((1.001, 2.002))      # waits 0.501 s
    assert q.book(0.5, 1e9, g2, "in") == pytest.approx((0.5, 1.501))        # other direction: free
    assert q.book(0.5, 1e9, g3, "out") == pytest.approx((0.5, 1.501))       # other tier: free
    assert q.book(3.0, 1e9, g2, "out") == pytest.approx((3.0, 4.001))       # link idle again
    assert q.book(3.5, 0, g2, "out") == (3.5, 3.5)                          # nothing to move
    assert q.wait_s == pytest.approx(0.501) and q.moves == 5
    assert q.free_at(g2, "out") == pytest.approx(4.001)
    with pytest.raises(ValueError, match="direction"):
        q.book(0.0, 1.0, g2, "sideways")
    with pytest.raises(ValueError, match="finite"):
        q.book(math.nan, 1.0, g2, "in")


def test_prefix_cache_spills_to_a_lower_level_and_fetches_back():
    """With a lower level, a block evicted from HBM is spilled there; a lookup's contiguous run
    continues into it; insert brings it back (the levels stay exclusive); the lower level drops
    its oldest block when full."""
    c = PrefixCache(2 * 512, lower_tokens=2 * 512)
    c.insert(["a", "b"])
    c.insert(["c", "d"])                       # evicts b then a (a prefix leaves from its tail)
    assert c.lru_order() == ["d", "c"]
    assert c.spilled_blocks == 2 and c.lower_blocks == 2 and c.evicted_blocks == 2
    assert c.lookup_split(["a", "b", "x"]) == (0, 2)
    assert c.lower_hit_blocks == 2 and c.hit_blocks == 2
    c.insert(["a", "b"])                       # fetched back: a, b leave the lower level, d, c spill
    assert "a" in c and "b" in c and c.lower_blocks == 2 and c.lower_evicted_blocks == 0
    assert c.lookup_split(["c", "d"]) == (0, 2)
    assert c.lookup_split(["a", "b"]) == (2, 0)
    c.insert(["e", "f"])                       # a, b spill; the lower level (c, d) drops its oldest
    assert c.lower_evicted_blocks == 2 and c.lower_blocks == 2
    assert c.lookup_split(["c"]) == (0, 0) and c.lookup_split(["a", "b"]) == (0, 2)
    # without a lower level nothing is spilled, and lookup is the HBM hits alone
    d = PrefixCache(512)
    d.insert(["a"])
    d.insert(["b"])
    assert d.spilled_blocks == 0 and d.lookup(["a"]) == 0 and d.lookup(["b"]) == 1
    with pytest.raises(ValueError, match="lower_tokens"):
        PrefixCache(512, lower_tokens=-1)
