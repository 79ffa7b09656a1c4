# amaranth: UnusedElaboratable=no
"""HBM read errors in the CDU RTL against the policy model (``HbmFaults``,
``compare_rtl(faults=...)``, ``tricut cdu replay --rtl --hbm-errors RATE[:persistent]``),
access traces through the RTL, and ``--wave``/``--wave-window``.

Transient errors that the retries absorb leave every transaction equal to the error-free
model; reads that fail every allowed attempt (transient ones beyond the retries, every
persistent one) are reported on ``status``, invalidate their frame and set ``err`` on the
waiting demand reads -- equal, transaction by transaction and beat by beat, to the model with
those frames invalidated when the RTL reported the failure (``fault_reference``)."""

import json
from pathlib import Path

import pytest

import tricut.sim.cli as cli
import tricut.sim.harness.cdu as H
from tricut.models.cdu import Pattern
from tricut.sim.fast.cdu_replay import COUNTER_KEYS
from tricut.sim.harness.cdu import HbmFaults, RtlMismatch, compare_rtl, replay_rtl, run_rtl
from tricut.sim.harness import cdu_stimulus as B


OPS = B.random_ops(3, n=160) + B.edge_ops()
RETRIES = B.PARAMS["max_retries"]


def _run(faults, seed=3, **kw):
    kw = dict(dict(p_valid=0.6, p_ready=0.6, max_latency=20), **kw)
    return run_rtl(B.ops_to_descs(OPS), params=B.PARAMS, seed=seed, faults=faults, **kw)


def _error_free_txns():
    return [H.txn_tuple(t) for t in B.model_of(OPS, **B.PARAMS).txns]


def _attempts(got):
    """Attempts per read number (first attempts numbered in order; retries by MSHR id)."""
    n_of, tries = {}, []
    for r in got["hbm_reqs"]:
        if not r[4]:
            n_of[r[0]] = len(tries)
            tries.append(0)
        tries[n_of[r[0]]] += 1
    return tries


def test_transient_errors_are_retried_and_recovered():
    f = HbmFaults(0.4, seed=1, again=0.0)        # every faulty read fails exactly once
    got = _run(f)
    core = compare_rtl(OPS, got, **B.PARAMS, faults=f)
    c = got["counters"]
    assert c["hbm_retries"] > 0 and c["hbm_failures"] == 0 and got["status"] == []
    assert core.faults["reads_recovered"] == core.faults["reads_faulty"] == c["hbm_retries"]
    assert not any(r[4] for r in got["ready"])
    assert got["txns"] == _error_free_txns()      # the retries leave no trace in the decisions
    assert _attempts(got) == [1 + min(f.fails(n), RETRIES) for n in range(c["hbm_reads"])]


def test_transient_errors_beyond_the_retries_fail():
    f = HbmFaults(0.6, seed=2)                   # k failed attempts with P = 2^-k
    got = _run(f, seed=4)
    core = compare_rtl(OPS, got, **B.PARAMS, faults=f)
    fl = core.faults
    assert fl["reads_recovered"] > 0 and fl["reads_failed"] > 0
    assert got["counters"]["hbm_failures"] == fl["reads_failed"] == len(got["status"])
    tries = _attempts(got)
    assert sorted(n for n, t in enumerate(tries) if t == RETRIES + 1 and f.fails(n) > RETRIES) == \
        sorted(n for n in range(len(tries)) if f.outcome(n, RETRIES) == "failed")


@pytest.mark.parametrize("timing", [dict(p_valid=1, p_ready=1, max_latency=1),
                                    dict(p_valid=0.5, p_ready=0.5, max_latency=30)],
                         ids=["fast", "slow"])
def test_persistent_errors_reported_with_err_equal_to_model(timing):
    f = HbmFaults(0.3, persistent=True, seed=5)
    got = _run(f, **timing)
    core = compare_rtl(OPS, got, **B.PARAMS, faults=f)
    fl = core.faults
    fails = got["counters"]["hbm_failures"]
    assert fails > 0 and fails == fl["reads_failed"] == fl["reads_faulty"] == len(got["status"])
    assert fl["reads_recovered"] == 0
    # every failing read was tried max_retries + 1 times, every status beat is one of them
    tries = _attempts(got)
    assert all(tries[n] == RETRIES + 1 for n in range(len(tries)) if f.fails(n))
    # err on ready = the model's (the waiting reads of each failed read), and some frames were
    # invalidated, so the decisions after them differ from an error-free run
    errs = [r[4] for r in got["ready"]]
    assert sum(errs) == fl["ready_err"] > 0
    assert fl["frames_invalidated"] > 0 and got["txns"] != _error_free_txns()
    assert got["counters"]["occupancy"] == core.counters()["occupancy"]


def test_fault_comparison_catches_differences(monkeypatch):
    """Each check of the fault comparison can fail: a model that ignores the failures, a
    wrong err bit, a lost status beat, a different retry limit."""
    f = HbmFaults(0.3, persistent=True, seed=5)
    got = _run(f)
    compare_rtl(OPS, got, **B.PARAMS, faults=f)
    orig = H.fault_reference
    with monkeypatch.context() as m:
        m.setattr(H, "fault_reference",
                  lambda ops, s, w, r, events, failing: orig(ops, s, w, r, (), failing))
        with pytest.raises(RtlMismatch, match=r"^(txn \d+|counter|ready)"):
            compare_rtl(OPS, got, **B.PARAMS, faults=f)
    i = next(k for k, r in enumerate(got["ready"]) if r[4])
    flipped = dict(got, ready=got["ready"][:i] + [got["ready"][i][:4] + (0,)] + got["ready"][i + 1:])
    with pytest.raises(RtlMismatch, match=rf"^ready beat {i}: RTL err=0, model err=1"):
        compare_rtl(OPS, flipped, **B.PARAMS, faults=f)
    with pytest.raises(RtlMismatch, match="^status beats"):
        compare_rtl(OPS, dict(got, status=got["status"][1:]), **B.PARAMS, faults=f)
    with pytest.raises(RtlMismatch, match="attempts, expected"):
        compare_rtl(OPS, got, **dict(B.PARAMS, max_retries=3), faults=f)


def test_hbm_faults_draw():
    assert HbmFaults(0).fails(7) == 0 and HbmFaults(1, persistent=True).fails(7) == HbmFaults.PERSISTENT
    f = HbmFaults(0.5, seed=9)
    ks = [f.fails(n) for n in range(4000)]
    assert ks == [HbmFaults(0.5, seed=9).fails(n) for n in range(4000)]     # (seed, n) only
    faulty = [k for k in ks if k]
    assert 0.45 < len(faulty) / len(ks) < 0.55
    assert 0.2 < sum(k > RETRIES for k in faulty) / len(faulty) < 0.3      # 2^-2 exhaust
    for bad in (-0.1, 1.5, float("nan"), "0.1", True):
        with pytest.raises(ValueError, match="HBM error rate"):
            HbmFaults(bad)


BASE = ["cdu", "replay", "--model", "tiny", "--pattern", "window", "--rtl", "--steps", "3",
        "--batch", "2", "--context", "60"]


def _cli_json(argv, capsys):
    code = cli.main(argv + ["--json"])
    cap = capsys.readouterr()
    assert code == 0, cap.err
    return json.loads(cap.out)


def test_cli_hbm_errors_transient_and_persistent(capsys):
    c = _cli_json(BASE + ["--hbm-errors", "0.3"], capsys)
    assert c["hbm_errors"] == "0.3" and c["hbm_retries"] > 0 and c["reads_recovered"] > 0
    assert c["hbm_failures"] == c["reads_failed"] == c["status_beats"]
    assert c["reads_faulty"] == c["reads_recovered"] + c["reads_failed"]
    p = _cli_json(BASE + ["--hbm-errors", "0.3:persistent"], capsys)
    assert p["hbm_failures"] == p["reads_failed"] == p["reads_faulty"] == p["status_beats"] > 0
    assert p["reads_recovered"] == 0 and p["ready_err"] > 0
    assert p["hbm_retries"] == RETRIES * p["hbm_failures"]
    z = _cli_json(BASE, capsys)                       # no --hbm-errors: no errors at all
    assert z["hbm_retries"] == z["hbm_failures"] == 0 and "hbm_errors" not in z
    assert cli.main(BASE + ["--hbm-errors", "1:persistent"]) == 0
    out = capsys.readouterr().out
    assert "hbm_retries" in out and "hbm_failures" in out
    assert "failed after all retries" in out and "0 recovered by retry" in out


def _topk_trace(tmp_path):
    pat = Pattern("topk", seed=5, k=4)
    lines = []
    for t in range(3):
        for layer in range(2):
            for r in range(2):
                n = 60 + t + 1
                lines.append(json.dumps({"step": t, "request": r, "layer": layer, "seq_len": n,
                                         "blocks": pat.blocks(t, r, layer, n)}))
    f = tmp_path / "topk.jsonl"
    f.write_text("\n".join(lines) + "\n")
    return f


def test_rtl_replays_an_access_trace(tmp_path, capsys):
    """A trace dumped from topk replays through the RTL to the counters of the pattern."""
    f = _topk_trace(tmp_path)
    a = replay_rtl("tiny", f, "adaptive", seed=5)
    b = replay_rtl("tiny", "topk", "adaptive", steps=3, batch=2, context=60, seed=5,
                   pattern_args=dict(k=4))
    keys = list(COUNTER_KEYS) + ["hbm_reads", "steps", "requests"]
    assert {k: a[k] for k in keys} == {k: b[k] for k in keys} and a["accesses"] > 0
    c = _cli_json(["cdu", "replay", "--model", "tiny", "--rtl", "--trace", str(f),
                   "--hbm-errors", "0.5:persistent"], capsys)
    assert c["hbm_failures"] > 0 and c["requests"] == 2


def _vcd(path):
    text = Path(path).read_text()
    header, body = text.split("$enddefinitions $end", 1)
    variables = [ln.split() for ln in header.splitlines() if ln.strip().startswith("$var")]
    times, changes, t = [], {}, None
    for ln in body.split("\n"):
        ln = ln.strip()
        if ln.startswith("#"):
            t = int(ln[1:])
            times.append(t)
        elif ln and not ln.startswith("$"):
            changes.setdefault(t, []).append(ln)
    return header, variables, times, changes


def test_wave_window_holds_the_window_only(tmp_path, capsys):
    full, win = tmp_path / "full.vcd", tmp_path / "win.vcd"
    assert cli.main(BASE + ["--wave", str(full)]) == 0
    assert cli.main(BASE + ["--wave", str(win), "--wave-window", "40:90"]) == 0
    assert "waves:" in capsys.readouterr().out
    h_full, v_full, t_full, c_full = _vcd(full)
    h_win, v_win, t_win, c_win = _vcd(win)
    assert "$timescale 1 fs $end" in h_win
    assert v_win == v_full and any(v[4] == "clk" for v in v_win) and len(v_win) > 100
    ps = 1_000_000                                   # 1 ns clock in fs; cycle c starts at
    lo, hi = 40 * ps - ps // 2, 90 * ps - ps // 2    # c*P - P/2 (sim/harness/waves.py)
    assert t_full[0] == 0 and t_full[-1] > hi        # the run is longer than the window
    assert t_win[0] == lo and max(t_win) <= hi and t_win == sorted(t_win)
    ids = {v[3] for v in v_win}                      # $dumpvars: every signal's state at
    assert {c.split()[-1] if c[0] in "brs" else c[1:] for c in c_win[lo]} == ids   # the start
    # inside the window, exactly the full run's changes
    assert {t: c for t, c in c_win.items() if t > lo} == \
        {t: c for t, c in c_full.items() if lo < t <= hi}
    assert not list(tmp_path.glob(".*"))             # no temporary file left behind
