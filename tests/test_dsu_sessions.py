# amaranth: UnusedElaboratable=no
"""Parked slots (agentic sessions) on the RTL: the cluster running the scheduler firmware
against ``models/dsu.run_sessions``, every batch, outcome and move equal round by round, under
each park policy, in Amaranth's simulator (short runs) and on Verilator (cocotb): seeded
sessions and the named edge cases (a restore that does not fit, a continue queued before its
restore is served, every slot parked, a continue that can never fit). docs/dsu.md, "Parked
slots"."""

import json
import random

import pytest

from tricut.models.dsu import PARK_POLICIES, RequestSpec, Session, SessionTurn, run_sessions
from tricut.rtl.dsu import regmap
from tricut.sim.harness.dsu import plan_dsu, run_dsu
from tricut.sim.harness.unit_matrices import (MATRICES, check_sessions_result,
                                              random_sessions)


def test_regmap_parked_codes():
    assert regmap.SlotState.PARKED == 3
    assert [k.name for k in regmap.MoveKind] == ["PARK", "RESTORE", "DROP"]
    assert tuple(regmap.PARK_POLICY_CODE) == PARK_POLICIES
    header = regmap.c_header()
    for text in ("#define DSU_SLOT_ST_PARKED 3u", "#define DSU_MOVE_DROP 2u",
                 "#define DSU_PARK_PARK_EARLY 2u", "#define DSU_HOST_ROUND_END 0xffffffu",
                 "#define DSU_SLOT_CONTINUES 12u"):
        assert text in header


def test_plan_with_sessions_is_run_sessions():
    rng = random.Random(7)
    reqs, sess = random_sessions(rng, 4, 3)
    plan = plan_dsu(reqs, "fairness-opt", n_slots=4, kv_capacity_tokens=150, sessions=sess,
                    park_policy="drop", lead=1, sim="amaranth")
    batches, ended, moves, host = run_sessions(reqs, sess, plan.params, {}, 1)
    assert plan.golden_batches == batches
    assert plan.sessions["ended"] == ended and plan.sessions["moves"] == moves
    assert plan.sessions["host"] == [h for h in host if h[1] != "submit"]
    resubmits = [h[2][0] for h in host if h[1] == "submit"]
    assert resubmits and all(r in plan.requests for r in resubmits)
    assert len(plan.requests) == len(reqs) + len(sess) + len(resubmits)
    with pytest.raises(ValueError, match="park_policy"):
        plan_dsu(reqs, sessions=sess, park_policy="evict", sim="amaranth")
    hung = plan_dsu(reqs, sessions=sess, faults="hang:cycle=5", sim="amaranth")
    assert hung.hang == 5 and hung.sessions is not None     # the host takes the sessions over


@pytest.mark.parametrize("policy", PARK_POLICIES)
def test_sessions_match_golden_amaranth(policy):
    rng = random.Random(31)
    reqs, sess = random_sessions(rng, 2, 2, arrival_span=2)
    res = run_dsu(reqs, "throughput-opt", sim="amaranth", n_slots=4, kv_capacity_tokens=200,
                  sessions=sess, park_policy=policy, lead=1, seed=31)
    check_sessions_result(res, policy)


def _edge_cases():
    """(name, policy, requests, sessions, kwargs, a check of the golden run that the case
    is what its name says)."""
    cases = []
    # a restore that does not fit: requests 1 and 2 hold 50 of 55 tokens when session 5 (14
    # tokens in G2) asks for its restore; the restore and the continue behind it wait
    reqs = [RequestSpec(1, 30, 10, arrival_step=0), RequestSpec(2, 5, 5, arrival_step=2)]
    sess = [Session(RequestSpec(5, 12, 2, 0), (SessionTurn(2, 2, 2),))]

    def restore_waits(host, moves):
        asked = next(r for r, k, _ in host if k == "restore")
        done = next(m.round for m in moves if m.kind == "restore")
        return done > asked
    cases.append(("restore_does_not_fit", "park", reqs, sess,
                  dict(kv_capacity_tokens=55), restore_waits))
    # a continue queued before its restore is served (park-early with a lead: the restore
    # is asked early but cannot fit; the continue arrives and waits behind it)
    reqs = [RequestSpec(1, 30, 7, arrival_step=0), RequestSpec(2, 3, 5, arrival_step=2)]
    sess = [Session(RequestSpec(5, 16, 2, 0), (SessionTurn(4, 2, 2), SessionTurn(1, 1, 1)))]

    def continue_before_restore(host, moves):
        cont = next(r for r, k, _ in host if k == "continue")
        return next(m.round for m in moves if m.kind == "restore") > cont
    cases.append(("continue_before_restore", "park-early", reqs, sess,
                  dict(kv_capacity_tokens=55, lead=2), continue_before_restore))
    # every slot parked: two slots, two sessions on long tools, a request that must wait
    reqs = [RequestSpec(1, 5, 2, arrival_step=3)]
    sess = [Session(RequestSpec(5, 8, 1, 0), (SessionTurn(6, 1, 2),)),
            Session(RequestSpec(6, 9, 2, 0), (SessionTurn(5, 2, 1),))]

    def all_parked(host, moves):
        return True                      # checked through the model's rounds below
    cases.append(("every_slot_parked", "keep", reqs, sess, dict(n_slots=2), all_parked))
    # a continue that can never fit: failed "too large", its KV dropped, its slot freed
    reqs = [RequestSpec(1, 5, 2, arrival_step=0)]
    sess = [Session(RequestSpec(5, 8, 2, 0), (SessionTurn(1, 70, 5), SessionTurn(1, 1, 1)))]

    def too_large(host, moves):
        return any(m.kind == "drop" for m in moves)
    cases.append(("continue_too_large", "park", reqs, sess, dict(kv_capacity_tokens=60),
                  too_large))
    return cases


EDGE = {c[0]: c for c in _edge_cases()}


@pytest.mark.parametrize("name", list(EDGE))
def test_edge_case_golden_is_what_it_says(name):
    from tricut.models.dsu import DsuParams
    _, policy, reqs, sess, kw, check = EDGE[name]
    params = DsuParams(n_slots=kw.get("n_slots", 4), max_batch=kw.get("n_slots", 4),
                       kv_capacity_tokens=kw.get("kv_capacity_tokens", 1 << 20),
                       park_policy=policy)
    rounds = []
    _, ended, moves, host = run_sessions(reqs, sess, params, {}, kw.get("lead", 0),
                                         on_round=lambda m, r: rounds.append(r))
    assert check(host, moves)
    if name == "every_slot_parked":
        assert any(r.parked == params.n_slots and r.blocked and not r.batch for r in rounds)
    if name == "continue_too_large":
        assert any(o.request == 5 and o.reason == "too large" for o in ended)


def _run_edge(name, sim):
    _, policy, reqs, sess, kw, _check_golden = EDGE[name]
    kw = dict(kw)
    n_slots = kw.pop("n_slots", 4)
    return policy, run_dsu(reqs, "throughput-opt", sim=sim, n_slots=n_slots, sessions=sess,
                           park_policy=policy, **kw)


@pytest.mark.parametrize("name", ["restore_does_not_fit", "continue_too_large"])
def test_edge_cases_amaranth(name):
    policy, res = _run_edge(name, "amaranth")
    assert res.differences == [], res.differences[:6]
    assert res.moves == res.golden_moves


# -- Verilator: every edge case, seeded sessions x policies x profiles, faults, 4 cores -----------
@pytest.mark.parametrize("name", list(EDGE))
def test_edge_cases_verilator(name):
    policy, res = _run_edge(name, "verilator")
    assert res.differences == [], res.differences[:6]
    assert res.moves == res.golden_moves


#: the sessions' matrix on Verilator (sim/harness/unit_matrices.py): the suite runs two cases,
#: benchmarks/unit_matrices.py every policy x profile x cores
SESSIONS = MATRICES["dsu_sessions"]


@pytest.mark.parametrize("policy,profile,cores,seed", SESSIONS.in_tests, ids=SESSIONS.ids())
def test_sessions_match_golden_verilator(policy, profile, cores, seed):
    SESSIONS.check(policy, profile, cores, seed)


def test_wrong_firmware_park_policy_is_caught_amaranth():
    """The firmware keeps the KV in HBM (keep) while the model and host park it: the host's
    restore names a slot whose KV is not in G2, the firmware stops with E_HCMD, the
    heartbeat watchdog degrades the unit and the run is reported different."""
    reqs = [RequestSpec(1, 5, 2, arrival_step=0)]
    sess = [Session(RequestSpec(5, 8, 2, 0), (SessionTurn(1, 1, 1),))]
    res = run_dsu(reqs, "throughput-opt", sim="amaranth", n_slots=4, sessions=sess,
                  park_policy="park", config_overrides={"park_policy": 0},
                  heartbeat_limit=3000, max_cycles=30_000)
    assert res.differences
    assert res.fw_error == (15 << 8) | 0xFE          # E_HCMD: restore of a slot not in G2
    assert res.degraded_cycle is not None


# -- the CLI: tricut dsu run --sessions FILE ------------------------------------------------------
#: a small session file: three sessions (ids 3, 7, 9), 6 turns, arrivals and gaps in seconds
SESSION_FILE = "".join(
    json.dumps(row) + "\n" for row in (
        {"session": 3, "turn": 0, "arrival_s": 0.0, "input_tokens": 20, "output_tokens": 3},
        {"session": 3, "turn": 1, "gap_s": 0.04, "input_tokens": 5, "output_tokens": 2},
        {"session": 7, "turn": 0, "arrival_s": 0.02, "input_tokens": 40, "output_tokens": 2},
        {"session": 7, "turn": 1, "gap_s": 0.06, "input_tokens": 9, "output_tokens": 3},
        {"session": 7, "turn": 2, "gap_s": 0.02, "input_tokens": 4, "output_tokens": 1},
        {"session": 9, "turn": 0, "arrival_s": 0.06, "input_tokens": 12, "output_tokens": 2}))


def _cli_golden_counts(path, policy, lead):
    """The counts the CLI must print, computed here from the golden model directly."""
    from tricut.models.dsu import DsuParams
    from tricut.sim.cli.dsu_cmd import dsu_sessions, session_counts
    from tricut.sim.fast.sessions import read_sessions
    sess = dsu_sessions(read_sessions(path), 0.02)
    assert [x.first.id for x in sess] == [3, 7, 9]
    assert [t.gap for t in sess[1].turns] == [3, 1]          # 0.06 s and 0.02 s at 20 ms
    params = DsuParams(n_slots=4, max_batch=4, latency_batch=1, park_policy=policy)
    _, ended, moves, _ = run_sessions([], sess, params, {}, lead)
    return session_counts(ended, moves)


@pytest.mark.parametrize("policy, lead", [("park-early", 2), ("drop", None)])
def test_cli_sessions_verilator(policy, lead, tmp_path, capsys):
    from tricut.sim.cli.testing import run_cli
    path = tmp_path / "s.jsonl"
    path.write_text(SESSION_FILE)
    argv = ["dsu", "run", "--sessions", str(path), "--sim", "verilator", "--slots", "4",
            "--park-policy", policy, "--json"] + (["--restore-lead", str(lead)] if lead else [])
    code, cap = run_cli(argv, capsys)
    assert code == 0, cap.err
    out = json.loads(cap.out)
    assert out["differences"] == []
    summary = out["sessions"]
    want = _cli_golden_counts(path, policy, lead or 0)
    assert summary["rtl"] == summary["golden"] == want
    assert summary["sessions"] == 3 and summary["turns"] == 6 and want["completed"] == 6
    assert summary["park_policy"] == policy and summary["restore_lead_rounds"] == (lead or 0)
    kinds = {"park-early": {"park": 3, "restore": 3, "drop": 0},
             "drop": {"park": 0, "restore": 0, "drop": 3}}[policy]
    assert want["moves"] == kinds
    assert len(out["moves"]) == sum(kinds.values()) and len(out["ended"]) == 6
    # text: the counts of both sides and the verdict
    code, cap = run_cli([a for a in argv if a != "--json"], capsys)
    assert code == 0, cap.err
    mv = want["moves"]
    line = (f"6 turns ended: 6 completed, 0 failed; moves: {mv['park']} park, "
            f"{mv['restore']} restore, {mv['drop']} drop")
    assert f"RTL run: {line}" in cap.out and f"golden model: {line}" in cap.out
    assert "RTL == golden model: every round's batch, every outcome and every move" in cap.out


def test_cli_sessions_wrong_expectation_fails(tmp_path, capsys, monkeypatch):
    """A golden expectation changed by one token of one move: the run must exit 1 naming it."""
    from tricut.sim.cli.testing import run_cli, without_notes

    import tricut.sim.harness.dsu as h
    real = h._golden_sessions

    def wrong(*a, **kw):
        batches, last, counts, sess = real(*a, **kw)
        m = sess["moves"][-1]
        sess["moves"][-1] = type(m)(m.round, m.request, m.kind, m.tokens + 1, m.slot)
        return batches, last, counts, sess
    monkeypatch.setattr(h, "_golden_sessions", wrong)
    path = tmp_path / "s.jsonl"
    path.write_text(SESSION_FILE)
    code, cap = run_cli(["dsu", "run", "--sessions", str(path), "--sim", "amaranth",
                         "--slots", "4", "--park-policy", "park"], capsys)
    assert code == 1
    err = without_notes(cap.err)         # a run over 10 s adds status notes
    assert len(err) == 1 and err[0].startswith("tricut: error: DSU RTL differs from the golden "
                                               "model: move 5: got"), cap.err


# -- a hung firmware: the host takes the sessions over ---------------------------------------------
def _hang_run(hang):
    rng = random.Random(31)
    reqs, sess = random_sessions(rng, 2, 2, arrival_span=2)
    return run_dsu(reqs, "throughput-opt", sim="amaranth", n_slots=4, kv_capacity_tokens=200,
                   sessions=sess, park_policy="park", lead=1, seed=31,
                   faults=f"hang:cycle={hang}", heartbeat_limit=5000)


#: cycles (from the release) at which the firmware of the case above has two sessions parked
#: in G2, their restores and continues pushed by the host but not served, and the park move
#: of the turn that ended in the last round not yet emitted (collect() of that round)
HANG_PARKED = 8100


def test_takeover_with_parked_sessions_amaranth():
    """The firmware hangs with parked slots and queued host commands; the host rebuilds the
    model from the slot records, the streams and its own commands and finishes the run:
    every batch, every turn's outcome and every move equal to the no-fault golden run."""
    res = _hang_run(HANG_PARKED)
    assert res.degraded_cycle is not None and res.faults_fired == [f"hang:cycle={HANG_PARKED}"]
    n = res.rounds_rtl
    assert 0 < n < len(res.golden_batches)              # both the firmware and the host ran
    assert res.differences == [], res.differences[:6]
    assert res.moves == res.golden_moves and len(res.ended) == len(res.golden_ended)
    # what the host carried over: sessions parked in G2 before the takeover and restored
    # after it, and moves the host made itself
    parked = {m.request for m in res.golden_moves if m.kind == "park" and m.round < n}
    later = {m.request for m in res.golden_moves if m.kind == "restore" and m.round >= n}
    assert parked & later
    assert any(m.round >= n for m in res.moves)
    assert all(o.status == "completed" for o in res.ended)


def test_takeover_that_forgets_the_queued_continues_is_caught_amaranth(monkeypatch):
    """The same hang with a host that drops the continues it had pushed: the sessions' next
    turns never run (the host's model refuses the next restore of a KV already in HBM); the
    run is reported different (a test of the check itself)."""
    from tricut.models.dsu import DsuModel
    real = DsuModel.resume.__func__

    def forgetful(cls, *a, **kw):
        kw["continues"] = ()
        return real(cls, *a, **kw)
    monkeypatch.setattr(DsuModel, "resume", classmethod(forgetful))
    res = _hang_run(HANG_PARKED)
    assert res.degraded_cycle is not None
    assert res.differences and any(d.startswith("takeover: ") for d in res.differences), \
        res.differences[:4]
