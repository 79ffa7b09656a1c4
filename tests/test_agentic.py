"""Agentic sessions through the system model (sim/fast/agentic.py, docs/agentic.md): every turn
of every session completes under every park policy; the tier ledger is checked against the DSU
model's own state after every round (nothing lost); each policy does what it says with the KV;
the CLI runs them side by side."""

from __future__ import annotations

import json
import math

import pytest

from tricut.models.config import load_gpu, load_model
from tricut.models.dsu import PARK_POLICIES
from tricut.models.tiers import load_tiers
from tricut.sim.cli.testing import run_cli
from tricut.sim.fast.agentic import AgenticOptions, simulate_sessions
from tricut.sim.fast.kv_tiers import LedgerError, transfer_time_s
from tricut.sim.fast.sessions import Session, Turn, agentic, sessions_from_requests
from tricut.sim.fast.setup import ServingSetup
from tricut.sim.fast.workload import read_trace

CUTS = ("te", "cdu", "dsu")
SAMPLE = "sim/data/agentic_sessions_sample.jsonl"


def _setup(**kw):
    model = load_model("llama-3-70b")
    return ServingSetup(model, load_gpu("h100-sxm5"), tp=8, **kw)


def _sessions(n=8, turns=3, seed=1, first=("lognormal", 16384.0, 0.3)):
    return agentic(n_sessions=n, rate=2.0, turns=turns, gap_s=("lognormal", 2.0, 0.5), first_input=first,
                   turn_input=("uniform", 256, 1024), output=("uniform", 8, 32), system_prompt_tokens=1024,
                   seed=seed, max_context=131072)


def _run(sessions, policy, setup=None, prefill="colocated", **opts):
    setup = setup or _setup()
    g2 = load_tiers("grace-hopper").g2
    return simulate_sessions(sessions, setup.step_model(CUTS), setup.dsu_params(),
                             AgenticOptions(policy, g2=g2, **opts), prefill=prefill)


@pytest.mark.parametrize("prefill", ["colocated", "disaggregated"])
@pytest.mark.parametrize("policy", PARK_POLICIES)
def test_every_turn_completes_and_no_kv_is_lost(policy, prefill):
    sessions = _sessions()
    r = _run(sessions, policy, prefill=prefill)
    s = r.summary
    assert (s["sessions"], s["turns"], s["failed_turns"]) == (8, sum(len(x.turns) for x in sessions), 0)
    # every turn has its output tokens, after its input was ready
    assert sum(len(v) for v in r.turn_ttft_s.values()) == s["turns"]
    assert all(x > 0 for v in r.turn_ttft_s.values() for x in v)
    assert s["output_tokens"] == sum(t.output_tokens for x in sessions for t in x.turns)
    # the ledger ends empty: every block was parked and restored, or dropped when its session or turn ended
    assert r.occupancy[-1, 1:4].tolist() == [0, 0, 0]
    if policy in ("park", "park-early"):
        assert s["bytes_hbm_to_g2"] == s["bytes_g2_to_hbm"] > 0
        assert s["g2_kv_bytes_peak"] > 0
    else:
        assert s["bytes_hbm_to_g2"] == s["bytes_g2_to_hbm"] == s["g2_kv_bytes_peak"] == 0


def test_the_ledger_check_catches_a_lost_block(monkeypatch):
    """The per-round check can fail: a park whose ledger move moves too few tokens leaves the
    ledger and the DSU model's state apart."""
    from tricut.sim.fast import agentic as mod
    real = mod.TierLedger.move

    def leaky(self, session, src, dst, tokens):
        real(self, session, src, dst, max(0, tokens - 1))
    monkeypatch.setattr(mod.TierLedger, "move", leaky)
    with pytest.raises(LedgerError):
        _run(_sessions(n=2), "park")


def test_keep_holds_parked_kv_in_hbm_park_moves_it_and_drop_recomputes():
    sessions = _sessions()
    keep, park, drop = (_run(sessions, p).summary for p in ("keep", "park", "drop"))
    assert keep["parked_hbm_kv_bytes_peak"] > 0 and keep["g2_kv_bytes_peak"] == 0
    assert park["g2_kv_bytes_peak"] > 0 and park["parked_hbm_kv_bytes_peak"] < keep["parked_hbm_kv_bytes_peak"]
    # bytes parked = the context each session had at each of its turn ends (but the last)
    kv = _setup().step_model(CUTS).kv_token_bytes
    parked = sum(s.context_before(k + 1) for s in sessions for k in range(len(s.turns) - 1))
    assert park["bytes_hbm_to_g2"] == pytest.approx(parked * kv)
    # drop prefills every turn's whole context again; keep only the new input
    new_input = sum(t.input_tokens for s in sessions for t in s.turns)
    assert keep["prefill_tokens"] + keep["prefill_tokens_saved"] == pytest.approx(
        drop["prefill_tokens"] + drop["prefill_tokens_saved"])
    assert keep["prefill_tokens"] <= new_input < drop["prefill_tokens"]
    assert drop["ttft_later_p50_s"] > keep["ttft_later_p50_s"]
    assert keep["prefill_flops_saved"] > drop["prefill_flops_saved"]


def test_a_later_turn_waits_for_its_restore_unless_it_started_early():
    """One session, one tool gap: under park the next turn's TTFT includes the restore over the
    G2 link; park-early starts it a restore's time before the tool returns and hides it."""
    s = Session(0, (Turn(8192, 8, 0.0), Turn(512, 8, 3.0)))
    g2 = load_tiers("hgx-pcie").g2
    setup = _setup()
    kv = setup.step_model(CUTS).kv_token_bytes
    restore = transfer_time_s(s.context_before(1) * kv, g2)

    def later_ttft(policy, lead=None):
        r = simulate_sessions([s], setup.step_model(CUTS), setup.dsu_params(),
                              AgenticOptions(policy, g2=g2, restore_lead_s=lead), prefill="colocated")
        return r.turn_ttft_s[1][0]
    keep, park, early = later_ttft("keep"), later_ttft("park"), later_ttft("park-early")
    assert park == pytest.approx(keep + restore, rel=0.02)
    assert early == pytest.approx(keep, rel=0.02)
    assert later_ttft("park-early", lead=restore / 2) == pytest.approx(keep + restore / 2, rel=0.05)


def test_keep_evicts_when_parked_sessions_fill_the_budget_and_parking_needs_not():
    """With a small KV budget, keep holds idle sessions' KV through their tool calls until parked
    sessions fill the budget and none of their next turns fits: the host evicts parked KV (the
    evicted turn recomputes its context), where parking moves idle KV out of HBM and evicts
    nothing; every policy completes every turn within the same budget."""
    sessions = _sessions(n=12, turns=4, first=8192)
    setup = _setup(kv_capacity_tokens=60_000)
    keep = _run(sessions, "keep", setup=setup).summary
    assert (keep["failed_turns"], keep["turns"], keep["park_policy"]) == (0, 48, "keep")
    assert keep["evictions"] > 0
    for policy in ("park", "park-early", "drop"):
        s = _run(sessions, policy, setup=setup).summary
        assert (s["failed_turns"], s["turns"], s["evictions"]) == (0, 48, 0)
        assert s["parked_hbm_kv_bytes_peak"] <= 60_000 * _setup().step_model(CUTS).kv_token_bytes


def test_prefix_cache_on_mooncake_reaches_the_bound_with_room_for_everything():
    from tricut.sim.fast.kv_tiers import physical_bound
    reqs = read_trace(SAMPLE.replace("agentic_sessions_sample", "mooncake_conversation_sample"))[:120]
    sessions = sessions_from_requests(reqs)
    setup = _setup(kv_capacity_tokens=10**7)
    none = _run(sessions, "keep", setup=setup).summary
    big = _run(sessions, "keep", setup=setup, prefix_cache_tokens=2_000_000).summary
    assert none["prefix_hit_rate"] == 0 and none["prefill_tokens_saved"] == 0
    bound = physical_bound([r.prefix_hashes for r in reqs])
    assert 0 < big["prefix_hit_rate"] <= bound + 1e-12
    assert big["prefix_hit_rate"] == pytest.approx(bound, abs=0.01)
    assert big["prefill_tokens"] < none["prefill_tokens"]


def test_options_are_checked():
    with pytest.raises(ValueError, match="needs a G2 tier"):
        AgenticOptions("park")
    with pytest.raises(ValueError, match="park policy must be one of"):
        AgenticOptions("hoard")
    with pytest.raises(ValueError, match="restore lead"):
        AgenticOptions("park-early", g2=load_tiers("grace-hopper").g2, restore_lead_s=math.nan)
    with pytest.raises(ValueError, match="no sessions"):
        _run([], "keep")
    with pytest.raises(ValueError, match="not chunked"):
        _run(_sessions(n=1), "keep", prefill="chunked")


def test_compare_runs_every_park_policy_on_the_sample(capsys, tmp_path):
    code, cap = run_cli(["compare", "--model", "llama-3-70b", "--tp", "8", "--sessions", SAMPLE,
                         "--tiers", "grace-hopper", "--park-policies", "all", "--json",
                         "--plot", str(tmp_path / "fig")], capsys)
    assert code == 0, cap.err
    rows = json.loads(cap.out)
    assert list(rows) == list(PARK_POLICIES)
    assert {r["turns"] for r in rows.values()} == {69}
    assert all(r["failed_turns"] == 0 for r in rows.values())
    assert sorted(p.name for p in (tmp_path / "fig").iterdir()) == ["kv_occupancy.png", "turn_ttft_cdf.png"]
    # simulate with one policy prints that policy's column
    code, cap = run_cli(["simulate", "--model", "llama-3-70b", "--tp", "8", "--sessions", SAMPLE,
                         "--tiers", "hgx-pcie", "--park-policy", "park", "--json"], capsys)
    assert code == 0, cap.err
    one = json.loads(cap.out)
    assert one["park_policy"] == "park" and one["turns"] == 69


def test_a_continued_turn_takes_nothing_from_the_prefix_cache():
    """Only whole prompts (turn 0, and every turn under drop) can hit the prefix cache: a
    continued turn's context is its own slot's KV and its input is its own. With a cache the
    keep run saves exactly the shared system-prompt blocks of turns 0 (1,024 tokens each, but
    for the first session, which fills the cache)."""
    sessions = _sessions(n=6, turns=3)
    plain = _run(sessions, "keep").summary
    cached = _run(sessions, "keep", prefix_cache_tokens=200_000).summary
    saved = plain["prefill_tokens"] - cached["prefill_tokens"]
    assert saved == cached["prefill_tokens_saved"] - plain["prefill_tokens_saved"] == 5 * 1024


def _small_tiers(g2_tokens, g3_tokens):
    """G2 and G3 with Grace Hopper's links but room for only so many tokens of this GPU's KV."""
    from tricut.models.tiers import Tier
    kv = _setup().step_model(CUTS).kv_token_bytes
    gh = load_tiers("grace-hopper")
    return (Tier("G2", gh.g2.link, int(g2_tokens * kv), gh.g2.bandwidth, gh.g2.latency_s),
            Tier("G3", gh.g3.link, int(g3_tokens * kv), gh.g3.bandwidth, gh.g3.latency_s))


@pytest.mark.parametrize("policy", ["park", "park-early"])
def test_tier_capacity_is_enforced_parks_spill_to_g3_then_recompute(policy):
    """With G2 and G3 too small for every parked session, parks fill G2, then G3, and the rest
    are dropped and recomputed at their restore; every turn still completes, the ledger (with
    the tiers' capacities, checked every round) balances, and the bytes add up."""
    sessions = _sessions()
    g2, g3 = _small_tiers(40_000, 30_000)
    setup = _setup()
    r = simulate_sessions(sessions, setup.step_model(CUTS), setup.dsu_params(),
                          AgenticOptions(policy, g2=g2, g3=g3), prefill="colocated")
    s = r.summary
    assert (s["failed_turns"], s["turns"]) == (0, 24)
    assert s["parks_g2"] > 0 and s["parks_g3"] > 0 and s["parks_dropped"] > 0
    assert s["parks_g2"] + s["parks_g3"] + s["parks_dropped"] == sum(len(x.turns) - 1 for x in sessions)
    assert s["g2_kv_bytes_peak"] <= g2.capacity_bytes and s["g3_kv_bytes_peak"] <= g3.capacity_bytes
    kv = r.kv_bytes_per_token
    parked = sum(x.context_before(k + 1) for x in sessions for k in range(len(x.turns) - 1))
    assert s["bytes_hbm_to_g2"] + s["bytes_hbm_to_g3"] + s["recomputed_tokens"] * kv == pytest.approx(parked * kv)
    assert s["bytes_g2_to_hbm"] == s["bytes_hbm_to_g2"] and s["bytes_g3_to_hbm"] == s["bytes_hbm_to_g3"]
    assert r.occupancy[-1, 1:4].tolist() == [0, 0, 0]


def test_a_park_over_capacity_is_caught_by_the_ledger(monkeypatch):
    """The capacity check can fail: a host that parks into G2 whatever its room breaks it."""
    from tricut.sim.fast import agentic as mod
    monkeypatch.setattr(mod._SessionRun, "_park_tier", lambda self, tokens: self.park_tiers[0])
    g2, g3 = _small_tiers(40_000, 30_000)
    setup = _setup()
    with pytest.raises(LedgerError, match="G2 holds .* over its capacity"):
        simulate_sessions(_sessions(), setup.step_model(CUTS), setup.dsu_params(),
                          AgenticOptions("park", g2=g2, g3=g3), prefill="colocated")


def test_a_restore_waits_for_its_park_on_the_link():
    """A tool that returns at once: the restore must wait for the park to reach G2 (one link
    direction each), so the next turn waits for both transfers: keep + park + restore."""
    s = Session(0, (Turn(8192, 8, 0.0), Turn(512, 8, 0.0)))
    g2 = load_tiers("hgx-pcie").g2
    setup = _setup()
    move = transfer_time_s(s.context_before(1) * setup.step_model(CUTS).kv_token_bytes, g2)

    def later_ttft(policy):
        r = simulate_sessions([s], setup.step_model(CUTS), setup.dsu_params(),
                              AgenticOptions(policy, g2=g2), prefill="colocated")
        return r.turn_ttft_s[1][0], r.summary["link_wait_s"]
    (keep, _), (park, wait) = later_ttft("keep"), later_ttft("park")
    assert park == pytest.approx(keep + 2 * move, rel=0.05)
    assert wait == 0          # the restore waited for its own park, not for another move


def test_moves_on_one_link_queue(monkeypatch):
    """Sessions that all park at once on a slow link: their moves queue (link_wait_s > 0), and
    later turns wait longer than they would if every move had the link to itself."""
    sessions = agentic(n_sessions=6, rate=math.inf, turns=2, gap_s=("uniform", 0.05, 0.05), first_input=16384,
                       turn_input=256, output=8, system_prompt_tokens=0, seed=3,
                       max_context=131072)
    g2 = load_tiers("hgx-pcie").g2
    setup = _setup()

    def run():
        return simulate_sessions(sessions, setup.step_model(CUTS), setup.dsu_params(), AgenticOptions("park", g2=g2),
                                 prefill="colocated")
    r = run()
    one = transfer_time_s(sessions[0].context_before(1) * r.kv_bytes_per_token, g2)
    assert r.summary["link_wait_s"] > 5 * one
    from tricut.sim.fast.kv_tiers import LinkQueue
    monkeypatch.setattr(LinkQueue, "book", lambda self, ready, nbytes, tier, d: (ready, ready + transfer_time_s(nbytes, tier)))
    unshared = run()
    assert max(r.turn_ttft_s[1]) > max(unshared.turn_ttft_s[1]) + one


def test_prefix_blocks_spill_to_g35_and_come_back_on_a_hit():
    """A small HBM prefix cache forgets blocks; with G3.5 (16 TiB per GPU) below it the evicted
    blocks are fetched back instead: on the Mooncake sample the hit rate rises to the physical
    bound (nothing is forgotten), above even a 2M-token HBM cache, and the fetches cost link bytes."""
    from tricut.sim.fast.kv_tiers import physical_bound
    reqs = read_trace(SAMPLE.replace("agentic_sessions_sample", "mooncake_conversation_sample"))
    sessions = sessions_from_requests(reqs)
    setup = _setup(kv_capacity_tokens=10**7)
    g35 = load_tiers("grace-hopper").g3_5
    small = _run(sessions, "keep", setup=setup, prefix_cache_tokens=65_536).summary
    spill = _run(sessions, "keep", setup=setup, prefix_cache_tokens=65_536, prefix_spill=g35).summary
    big = _run(sessions, "keep", setup=setup, prefix_cache_tokens=2_000_000).summary
    bound = physical_bound([r.prefix_hashes for r in reqs])
    assert small["prefix_hit_rate"] < big["prefix_hit_rate"] < spill["prefix_hit_rate"]
    assert spill["prefix_hit_rate"] == pytest.approx(bound, abs=1e-12)
    assert spill["prefix_lower_hit_blocks"] > 0 and spill["prefix_bytes_fetched"] > 0
    assert spill["prefix_bytes_spilled"] > 0 and small["prefix_bytes_fetched"] == 0
    with pytest.raises(ValueError, match="needs a prefix cache"):
        AgenticOptions("keep", prefix_spill=g35)
    with pytest.raises(ValueError, match="spill to G3 or G3.5"):
        AgenticOptions("keep", prefix_cache_tokens=4096, prefix_spill=load_tiers("grace-hopper").g2)
