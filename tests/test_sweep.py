"""`tricut sweep` (docs/sweeps.md): grid files expand to checked points with stable keys; a
sweep writes one DuckDB row per point whose metrics are exactly what `tricut simulate --json`
prints for the same flags, in this process (``--workers 0``) and on a local Ray cluster alike;
a failing point is recorded and the sweep goes on; an interrupted sweep (SIGKILL) resumes to
the table an uninterrupted run writes; a Ray worker killed during a task is retried.

The Ray runs are subprocesses (``python -m tricut.sim sweep ...``) in a session of their own
(``start_new_session``): Ray's processes (gcs_server, raylet, ``ray::`` workers) inherit that
session id, which is how a test finds a worker to kill and checks that none is left behind
(``/proc``, no psutil: it is only on ``sys.path`` once ray is imported).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import duckdb
import pytest

from tricut.sim import cli
from tricut.sim.cli.testing import run_cli
from tricut.sim.sweep.grid import load_grid
from tricut.sim.sweep.runner import MAX_RETRIES
from tricut.sim.sweep.tasks import SimulateTask

#: 8 short points (llama-3-8b, 40 synthetic requests each; ~0.05 s a point)
SMALL = """\
name = "small"

[fixed]
model = "llama-3-8b"
synthetic = 40
rate = 8
prompt_tokens = "uniform:256:2048"
output_tokens = 32

[axes]
kv_dtype = ["bf16", "fp8"]
policy = ["static", "adaptive"]
"unit.te_engines_per_sm" = [1, 4]
"""

#: 8 points of ~0.7 s each (1-2 s on a loaded 2-core machine): long enough to interrupt
SLOWER = """\
name = "slower"

[fixed]
model = "llama-3-8b"
synthetic = 2000
rate = 20
prompt_tokens = "uniform:256:2048"
output_tokens = 32

[axes]
kv_dtype = ["bf16", "fp8"]
policy = ["static", "adaptive"]
seed = [1, 2]
"""

#: bounded waits of the subprocess tests (a loaded machine; Ray's start alone is ~5-10 s)
RUN_TIMEOUT = 180
#: how long Ray's processes may outlive their driver before they count as left behind
GRACE_S = 30


def _grid(folder: Path, text: str, name: str = "grid.toml") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(text)
    return path


def _main(argv) -> tuple[int, str, str]:
    """``tricut ARGV`` in this process: (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main([str(a) for a in argv])
        except SystemExit as e:
            code = e.code
    return code, out.getvalue(), err.getvalue()


def _table(db: Path) -> dict:
    """``{key: (status, error, metrics)}`` of every row (metrics parsed)."""
    con = duckdb.connect(str(db), read_only=True)
    try:
        rows = con.execute("SELECT key, status, error, metrics FROM points ORDER BY key").fetchall()
    finally:
        con.close()
    return {k: (s, e, json.loads(m)) for k, s, e, m in rows}


def _columns(db: Path) -> dict:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return dict(con.execute("SELECT column_name, data_type FROM information_schema.columns "
                                "WHERE table_name = 'points'").fetchall())
    finally:
        con.close()


# --------------------------------------------------------------------------- /proc
def _procs() -> dict:
    """``{pid: (sid, start time, state, cmdline)}`` of every process (from /proc)."""
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat", "rb") as f:
                stat = f.read()
            with open(f"/proc/{d}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        fields = stat[stat.rindex(b")") + 2:].split()
        out[int(d)] = (int(fields[3]), int(fields[19]), fields[0].decode(), cmd)
    return out


class SweepProcess:
    """``tricut sweep ARGV`` as a subprocess in a new session; stderr read line by line (with
    timeouts) by a thread, stdout to a file; every process of the session is remembered (pid
    and start time), so the ones left behind are found even if they changed session."""

    def __init__(self, argv, cwd: Path):
        env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
        env["RAY_USAGE_STATS_ENABLED"] = "0"
        self.out_path = cwd / f"stdout-{time.monotonic_ns()}.txt"
        self._out = open(self.out_path, "w")
        self.proc = subprocess.Popen([sys.executable, "-m", "tricut.sim", "sweep", *map(str, argv)],
                                     cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=self._out,
                                     stderr=subprocess.PIPE, text=True, start_new_session=True)
        self.sid = self.proc.pid
        self.err: list[str] = []
        self.seen: dict[int, int] = {}
        self._lines: queue.Queue = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        for line in self.proc.stderr:
            self.err.append(line)
            self._lines.put(line)
        self._lines.put(None)

    def members(self) -> dict:
        """The live (not zombie) processes of the session, or seen in it before:
        ``{pid: cmdline}``."""
        live = {}
        for pid, (sid, start, state, cmd) in _procs().items():
            if sid == self.sid:
                self.seen.setdefault(pid, start)
            if state != "Z" and (sid == self.sid or self.seen.get(pid) == start):
                live[pid] = cmd
        return live

    def next_line(self, deadline: float) -> str | None:
        """The next stderr line (None at its end); fails the test at the deadline."""
        while True:
            self.members()
            try:
                return self._lines.get(timeout=min(0.2, max(0.01, deadline - time.monotonic())))
            except queue.Empty:
                if time.monotonic() > deadline:
                    pytest.fail(f"no progress line from the sweep in time; stderr so far: "
                                f"{''.join(self.err)[-2000:]}")

    def wait(self, timeout: float = RUN_TIMEOUT) -> tuple[int, str]:
        """Exit code and stdout; fails the test (after killing the session) on a hang."""
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None:
            self.members()
            if time.monotonic() > deadline:
                self.kill()
                pytest.fail(f"tricut sweep still running after {timeout} s; stderr: "
                            f"{''.join(self.err)[-2000:]}")
            time.sleep(0.1)
        self._out.close()
        self._reader.join(timeout=10)          # all of stderr read (unless a child still holds it)
        return self.proc.returncode, self.out_path.read_text()

    def kill(self) -> None:
        """SIGKILL the sweep's process group (the driver, gcs_server, raylet, ...: Ray's workers
        have process groups of their own and must notice on their own)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.sid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=30)

    def assert_nothing_left(self, grace: float = GRACE_S) -> None:
        """No process of the session outlives the sweep by more than ``grace`` seconds; the
        ones that do are killed, then the test fails naming them."""
        deadline = time.monotonic() + grace
        left = self.members()
        while left and time.monotonic() < deadline:
            time.sleep(0.25)
            left = self.members()
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        assert not left, f"Ray left processes behind {grace} s after the sweep ended: {left}"

    def close(self) -> None:
        """Clean-up: kill whatever is left of the session (the test already failed if any)."""
        if self.proc.poll() is None:
            self.kill()
        for pid in self.members():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self._out.close()


@contextlib.contextmanager
def sweep_process(argv, cwd: Path):
    p = SweepProcess(argv, cwd)
    try:
        yield p
    finally:
        p.close()


# =========================================================================== grid expansion
def test_axes_product_in_order_with_fixed_settings(tmp_path):
    g = load_grid(_grid(tmp_path, '[fixed]\nsynthetic = 8\n\n[axes]\nkv_dtype = ["bf16", "fp8"]\n'
                                  'tp = [1, 2, 4]\n'))
    assert (g.name, g.task, g.excluded, g.dropped) == ("grid", "simulate", 0, [])
    assert [p.axes for p in g.points] == [{"kv_dtype": k, "tp": t} for k in ("bf16", "fp8") for t in (1, 2, 4)]
    for p in g.points:
        assert p.settings == {"synthetic": 8, **p.axes}
        assert p.config["kv_dtype"] == p.axes["kv_dtype"] and p.config["tp"] == p.axes["tp"]
        assert p.config["policy"] == "adaptive"          # defaults filled in
    assert g.points[0].label() == "kv_dtype=bf16 tp=1"


def test_compound_axis_and_trace_relative_to_the_grid_file(tmp_path, monkeypatch, capsys):
    trace = tmp_path / "grids" / "traces" / "t.jsonl"
    trace.parent.mkdir(parents=True)
    trace.write_text("".join(json.dumps({"timestamp": 100 * i, "input_length": 200 + 50 * i,
                                         "output_length": 8 + i}) + "\n" for i in range(12)))
    path = _grid(tmp_path / "grids", '[fixed]\nmodel = "llama-3-8b"\n\n[axes]\n'
                                     'workload = [{trace = "traces/t.jsonl", limit = 6}, {synthetic = 8, rate = 4}]\n'
                                     'kv_dtype = ["bf16", "fp8"]\n')
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)                        # the current folder plays no part
    g = load_grid(path)
    assert len(g.points) == 4
    by_trace = [p for p in g.points if "trace" in p.settings]
    assert [p.axes["kv_dtype"] for p in by_trace] == ["bf16", "fp8"]
    for p in by_trace:
        assert p.settings["trace"] == str(trace.resolve())
        assert p.settings["limit"] == 6 and "synthetic" not in p.settings
        assert p.config["trace_sha256"] == hashlib.sha256(trace.read_bytes()).hexdigest()[:16]
        assert p.axes["workload"] == {"trace": "traces/t.jsonl", "limit": 6}
        assert p.label().startswith("workload={trace=traces/t.jsonl,limit=6} kv_dtype=")
    for p in g.points:
        if p not in by_trace:
            assert p.settings == {"model": "llama-3-8b", "synthetic": 8, "rate": 4,
                                  "kv_dtype": p.axes["kv_dtype"]}
    # and the points run: the trace is found from the other folder
    code, cap = run_cli(["sweep", str(path), "--db", str(tmp_path / "c.duckdb"), "--workers", "0",
                         "--json"], capsys)
    assert code == 0, cap.err
    rows = _table(tmp_path / "c.duckdb")
    assert sorted(m["requests"] for _, _, m in rows.values()) == [6, 6, 8, 8]
    assert {s for s, _, _ in rows.values()} == {"done"}


def test_exclude_drops_the_matching_points(tmp_path, capsys):
    path = _grid(tmp_path, '[fixed]\nsynthetic = 4\n\n[axes]\nkv_dtype = ["bf16", "fp8"]\n'
                           'policy = ["static", "adaptive", "disabled"]\n\n'
                           '[[exclude]]\nkv_dtype = "fp8"\npolicy = "static"\n\n'
                           '[[exclude]]\npolicy = "disabled"\n')
    g = load_grid(path)
    assert g.excluded == 3
    assert [p.axes for p in g.points] == [{"kv_dtype": "bf16", "policy": "static"},
                                          {"kv_dtype": "bf16", "policy": "adaptive"},
                                          {"kv_dtype": "fp8", "policy": "adaptive"}]
    code, cap = run_cli(["sweep", str(path), "--db", str(tmp_path / "x.duckdb"), "--workers", "0",
                         "--json"], capsys)
    summary = json.loads(cap.out)
    assert code == 0 and (summary["total"], summary["excluded"], summary["done"]) == (3, 3, 3)


def test_drop_impossible_drops_and_counts_tp_that_does_not_divide_the_heads(tmp_path, capsys):
    # llama-3-8b: 32 query heads, 8 KV heads; tp 3 and 5 divide neither (tp 16 replicates KV)
    path = _grid(tmp_path, '[fixed]\nmodel = "llama-3-8b"\nsynthetic = 4\n\n[axes]\n'
                           'tp = [1, 2, 3, 4, 5, 16]\n\n[filter]\ndrop_impossible = true\n')
    g = load_grid(path)
    assert [p.axes["tp"] for p in g.points] == [1, 2, 4, 16]
    assert [axes for axes, _ in g.dropped] == [{"tp": 3}, {"tp": 5}]
    for axes, reason in g.dropped:
        assert f"tp {axes['tp']} must divide llama-3-8b's num_heads 32" in reason
    code, cap = run_cli(["sweep", str(path), "--db", str(tmp_path / "x.duckdb"), "--workers", "0",
                         "--json"], capsys)
    summary = json.loads(cap.out)
    assert code == 0, cap.err
    assert (summary["total"], summary["dropped"], summary["done"], summary["failed"]) == (4, 2, 4, 0)
    con = duckdb.connect(str(tmp_path / "x.duckdb"), read_only=True)
    assert sorted(r[0] for r in con.execute("SELECT tp FROM points").fetchall()) == [1, 2, 4, 16]
    con.close()
    # the plain-text summary counts them too
    code, cap = run_cli(["sweep", str(path), "--db", str(tmp_path / "y.duckdb"), "--workers", "0",
                         "--no-progress"], capsys)
    assert code == 0 and "2 impossible and 0 excluded combinations left out" in cap.out


def test_keys_are_distinct_and_stable(tmp_path):
    text = '[fixed]\nsynthetic = 8\n\n[axes]\nkv_dtype = ["bf16", "fp8"]\ntp = [1, 2]\n'
    a = load_grid(_grid(tmp_path / "a", text))
    b = load_grid(_grid(tmp_path / "a", text))
    keys = [p.key for p in a.points]
    assert len(set(keys)) == 4 and all(re.fullmatch(r"[0-9a-f]{24}", k) for k in keys)
    assert [p.key for p in b.points] == keys                        # the same grid, again
    # neither the file's place nor the grid's name is in the key; a default spelt out is no change
    c = load_grid(_grid(tmp_path / "c", 'name = "other"\n' + text.replace(
        "synthetic = 8\n", 'synthetic = 8\npolicy = "adaptive"\n'), name="other.toml"))
    assert [p.key for p in c.points] == keys
    # a changed fixed value changes every key; a changed axis value only its points'
    d = load_grid(_grid(tmp_path / "d", text.replace("synthetic = 8", "synthetic = 9")))
    assert not set(p.key for p in d.points) & set(keys)
    e = load_grid(_grid(tmp_path / "e", text.replace("tp = [1, 2]", "tp = [1, 4]")))
    same = {p.key for p in e.points} & set(keys)
    assert same == {p.key for p in a.points if p.axes["tp"] == 1}
    # the key of a trace point follows the trace's content
    tr = tmp_path / "f" / "t.jsonl"
    tr.parent.mkdir()
    tr.write_text('{"timestamp": 0, "input_length": 100, "output_length": 4}\n')
    f1 = load_grid(_grid(tmp_path / "f", '[fixed]\ntrace = "t.jsonl"\n')).points[0].key
    tr.write_text('{"timestamp": 0, "input_length": 101, "output_length": 4}\n')
    f2 = load_grid(tmp_path / "f" / "grid.toml").points[0].key
    assert f1 != f2


# =========================================================================== in-process sweep
@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """The SMALL grid run in this process (``--workers 0 --json``) into a fresh database."""
    d = tmp_path_factory.mktemp("small")
    grid = _grid(d, SMALL)
    db = d / "small.duckdb"
    code, out, err = _main(["sweep", grid, "--db", db, "--workers", "0", "--json"])
    assert code == 0, err
    return {"dir": d, "grid": grid, "db": db, "summary": json.loads(out), "err": err}


def test_in_process_sweep_writes_one_done_row_per_point(small):
    s = small["summary"]
    assert (s["sweep"], s["total"], s["done"], s["failed"], s["skipped"]) == ("small", 8, 8, 0, 0)
    assert (s["backend"], s["workers"], s["failures"], s["db"]) == ("in-process", 0, [], str(small["db"]))
    assert small["err"] == ""                            # --json: no progress lines
    grid = load_grid(small["grid"])
    rows = _table(small["db"])
    assert set(rows) == {p.key for p in grid.points}
    assert all(status == "done" and error is None and m["requests"] == 40
               for status, error, m in rows.values())
    con = duckdb.connect(str(small["db"]), read_only=True)
    try:
        fixed = con.execute("SELECT DISTINCT sweep, task, tricut_version, git_commit FROM points").fetchall()
        assert len(fixed) == 1 and fixed[0][:2] == ("small", "simulate")
        axes = {r[0]: json.loads(r[1]) for r in con.execute("SELECT key, axes FROM points").fetchall()}
        assert axes == {p.key: p.axes for p in grid.points}
        assert con.execute("SELECT count(*) FROM points WHERE wall_s > 0 AND finished_at IS NOT NULL"
                           ).fetchone()[0] == 8
    finally:
        con.close()


def test_typed_columns_hold_the_metrics_and_configuration(small):
    cols = _columns(small["db"])
    expected = {"key": "VARCHAR", "status": "VARCHAR", "wall_s": "DOUBLE", "finished_at": "TIMESTAMP",
                "tokens_per_s": "DOUBLE", "tpot_p99_s": "DOUBLE", "requests": "BIGINT",
                "failed": "BIGINT", "kv_dtype": "VARCHAR", "policy": "VARCHAR", "tp": "BIGINT",
                "te_engines_per_sm": "BIGINT", "cdu_l2_share": "DOUBLE", "stack": "VARCHAR"}
    assert {k: cols.get(k) for k in expected} == expected
    con = duckdb.connect(str(small["db"]), read_only=True)
    try:
        typed = con.execute("SELECT key, tokens_per_s, requests, kv_dtype, policy, te_engines_per_sm "
                            "FROM points").fetchall()
    finally:
        con.close()
    grid = {p.key: p for p in load_grid(small["grid"]).points}
    rows = _table(small["db"])
    for key, tps, requests, kv, policy, te in typed:
        m = rows[key][2]
        assert (tps, requests) == (m["tokens_per_s"], m["requests"])
        p = grid[key]
        assert (kv, policy, te) == (p.axes["kv_dtype"], p.axes["policy"], p.axes["unit.te_engines_per_sm"])


def test_metrics_equal_what_simulate_json_prints_for_the_same_flags(small, capsys):
    rows = _table(small["db"])
    for p in load_grid(small["grid"]).points:
        argv = ["simulate", *SimulateTask.argv(p.settings), "--json"]
        code, cap = run_cli(argv, capsys)
        assert code == 0, cap.err
        assert rows[p.key][2] == json.loads(cap.out), f"{p.label()}: sweep row != tricut {' '.join(argv)}"
    # the argv really is simulate's flags
    assert SimulateTask.argv({"kv_dtype": "fp8", "unit.te_engines_per_sm": 4, "assume.cdu_l2_share": 0.5,
                              "max_batch": 8, "cuts": ["te", "cdu"]}) == \
        ["--kv-dtype", "fp8", "--unit", "te_engines_per_sm=4", "--assume", "cdu_l2_share=0.5",
         "--max-batch", "8", "--cuts", "te,cdu"]


def test_the_typed_options_are_the_commands_flags():
    """A grid's settings are :class:`RunOptions` (sim/fast/run.py), not ``tricut simulate``'s
    parser: each option is one of its flags, with its default and choices; and the command
    takes no configuration flag the options lack."""
    from tricut.sim.cli.simulate import simulate_parser
    from tricut.sim.fast.run import OPTIONS, RunOptions
    actions = {a.dest: a for a in simulate_parser()._actions if a.option_strings}
    assert set(actions) - set(OPTIONS) == {"json", "csv", "plot", "no_progress"}
    defaults = RunOptions()
    for name, opt in OPTIONS.items():
        a = actions[name]
        assert a.option_strings == [opt.flag], name
        assert a.default == (list(getattr(defaults, name)) if opt.repeat else getattr(defaults, name)), name
        assert (None if a.choices is None else list(a.choices)) == \
            (None if opt.allowed() is None else list(opt.allowed())), name


def test_export_parquet_has_every_row(small, tmp_path, capsys):
    out = tmp_path / "small.parquet"
    code, cap = run_cli(["sweep", "export", "--db", str(small["db"]), "--parquet", str(out)], capsys)
    assert code == 0 and cap.out == "" and f"wrote {out} (8 rows)" in cap.err
    con = duckdb.connect()
    lit = "'" + str(out).replace("'", "''") + "'"
    assert con.execute(f"SELECT count(*) FROM read_parquet({lit})").fetchone()[0] == 8
    back = dict(con.execute(f"SELECT key, metrics FROM read_parquet({lit})").fetchall())
    assert {k: json.loads(v) for k, v in back.items()} == {k: m for k, (_, _, m) in _table(small["db"]).items()}
    assert con.execute(f"SELECT typeof(tokens_per_s) FROM read_parquet({lit}) LIMIT 1").fetchone()[0] == "DOUBLE"
    out2 = tmp_path / "one.parquet"
    code, cap = run_cli(["sweep", "export", "--db", str(small["db"]), "--parquet", str(out2),
                         "--sweep", "small"], capsys)
    assert code == 0 and "(8 rows)" in cap.err
    assert con.execute(f"SELECT count(*) FROM read_parquet('{out2}')").fetchone()[0] == 8


def test_plot_writes_the_pareto_and_heat_map_pngs(small, tmp_path, capsys):
    out = tmp_path / "figs"
    code, cap = run_cli(["sweep", "plot", "--db", str(small["db"]), "-o", str(out)], capsys)
    assert code == 0, cap.err
    names = {"pareto_tokens_per_s_vs_tpot_p99_s.png", "heatmap_tokens_per_s_kv_dtype_policy.png"}
    assert {p.name for p in out.iterdir()} == names
    for n in names:
        assert (out / n).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and (out / n).stat().st_size > 5000
        assert f"wrote {out / n}" in cap.err
    out = tmp_path / "figs2"
    code, cap = run_cli(["sweep", "plot", "--db", str(small["db"]), "-o", str(out), "--x", "ttft_p99_s",
                         "--y", "requests_per_s", "--group", "policy", "--heat",
                         "policy,unit.te_engines_per_sm", "--metric", "tpot_p99_s"], capsys)
    assert code == 0, cap.err
    assert {p.name for p in out.iterdir()} == {"pareto_requests_per_s_vs_ttft_p99_s.png",
                                               "heatmap_tpot_p99_s_policy_unit.te_engines_per_sm.png"}


def test_resume_with_everything_done_runs_nothing(small, capsys):
    code, cap = run_cli(["sweep", str(small["grid"]), "--db", str(small["db"]), "--workers", "0",
                         "--resume", "--json"], capsys)
    s = json.loads(cap.out)
    assert code == 0 and (s["skipped"], s["done"], s["backend"]) == (8, 0, "nothing to run")


# =========================================================================== a failing point
def test_a_failing_point_is_recorded_and_the_sweep_goes_on(tmp_path, monkeypatch, capsys):
    path = _grid(tmp_path, '[fixed]\nsynthetic = 8\n\n[axes]\nkv_dtype = ["bf16", "fp8"]\n'
                           'policy = ["static", "adaptive"]\n')
    db = tmp_path / "f.duckdb"
    real_run = SimulateTask.run.__func__

    def run(cls, settings):          # a failure no pre-run check can see: a bug at run time
        if settings["kv_dtype"] == "fp8" and settings["policy"] == "static":
            raise RuntimeError("the model fell over\nat its second line")
        return real_run(cls, settings)

    monkeypatch.setattr(SimulateTask, "run", classmethod(run))
    code, cap = run_cli(["sweep", str(path), "--db", str(db), "--workers", "0"], capsys)
    assert code == 1, cap.err
    assert "4 points: 3 done, 1 failed, 0 skipped" in cap.out
    assert "  failed: kv_dtype=fp8 policy=static: RuntimeError: the model fell over at its second line" in cap.out
    assert cap.err.count("\n") == 4 and "sweep: 3/4 failed kv_dtype=fp8 policy=static" in cap.err
    assert "Traceback" not in cap.err + cap.out
    rows = _table(db)
    statuses = sorted((s, e) for s, e, _ in rows.values())
    assert statuses == [("done", None)] * 3 + [("failed", "RuntimeError: the model fell over at its second line")]
    assert all(m == {} for s, _, m in rows.values() if s == "failed")
    # --json carries the failure; --resume re-runs the failed point alone, now fixed
    monkeypatch.undo()
    code, cap = run_cli(["sweep", str(path), "--db", str(db), "--workers", "0", "--resume", "--json"], capsys)
    s = json.loads(cap.out)
    assert code == 0 and (s["skipped"], s["done"], s["failed"]) == (3, 1, 0)
    assert {st for st, _, _ in _table(db).values()} == {"done"}


# =========================================================================== a write that fails
def test_a_write_that_fails_keeps_the_result_and_stops_the_sweep(tmp_path, monkeypatch, capsys):
    """A finished point whose row DuckDB refuses (here a metric named like another but for its
    case: DuckDB's column names ignore case, so the second cannot be added) is not lost: it is
    kept beside the database, no further point runs, and the line names the file."""
    path = _grid(tmp_path, '[fixed]\nsynthetic = 8\n\n[axes]\nseed = [1, 2, 3]\n')
    db = tmp_path / "w.duckdb"
    ran = []

    def run(cls, settings):
        ran.append(settings["seed"])
        return {"speed": 1.0} if settings["seed"] == 1 else {"SPEED": 2.0}

    monkeypatch.setattr(SimulateTask, "run", classmethod(run))
    code, cap = run_cli(["sweep", str(path), "--db", str(db), "--workers", "0", "--no-progress"], capsys)
    unsaved = tmp_path / "w.duckdb.unsaved.jsonl"
    lines = cap.err.splitlines()
    assert code == 2 and len(lines) == 1 and "Traceback" not in cap.err, cap.err
    assert lines[0].startswith(f"tricut: error: cannot write the row of point ")
    assert lines[0].endswith(f"the sweep stopped, and the 1 finished point(s) not written are kept in {unsaved} "
                             "(one JSON row per line)")
    assert ran == [1, 2]                                  # the third point never started
    rows = _table(db)
    assert [m for _, _, m in rows.values()] == [{"speed": 1.0}]
    kept = [json.loads(line) for line in unsaved.read_text().splitlines()]
    assert len(kept) == 1 and kept[0]["label"] == "seed=2" and kept[0]["status"] == "done"
    assert kept[0]["metrics"] == {"SPEED": 2.0} and kept[0]["key"] not in rows
    assert kept[0]["config"]["seed"] == 2


# =========================================================================== checking a grid
def test_checking_a_grid_prints_a_line_every_interval_when_not_on_a_terminal(tmp_path):
    from tricut.sim.sweep.grid import CheckProgress
    path = _grid(tmp_path, '[fixed]\nsynthetic = 4\n\n[axes]\nseed = [1, 2, 3, 4, 5, 6]\n')
    ticks = iter(range(0, 1000, 3))                  # each look at the clock: 3 s later

    stream = io.StringIO()
    with CheckProgress(stream, clock=lambda: next(ticks)) as progress:
        assert len(load_grid(path, progress=progress).points) == 6
    # after 1 s quiet a first line (3 s), then one once 10 s passed since it (15 s), then the end
    assert stream.getvalue().splitlines() == [
        "sweep: checked 0 of 6 points (0 %), 3 s so far, about 18 s left",
        "sweep: checked 4 of 6 points (67 %), 15 s so far, about 8 s left",
        "sweep: checked 6 of 6 points (100 %), 21 s so far"]
    quick = io.StringIO()
    with CheckProgress(quick) as progress:                       # the real clock: done in < 1 s
        load_grid(path, progress=progress)
    assert quick.getvalue() == ""


def test_checking_on_a_terminal_redraws_one_line_ended_before_an_error(tmp_path):
    from tricut.sim.sweep.grid import CheckProgress, GridError

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    path = _grid(tmp_path, '[fixed]\nsynthetic = 4\n\n[axes]\ntp = [1, 2, 3]\n')
    stream = Terminal()
    with pytest.raises(GridError, match="point tp=3"):
        with CheckProgress(stream, quiet_s=0) as progress:
            load_grid(path, progress=progress)
    text = stream.getvalue()
    assert text.startswith("\rsweep: checked 0 of 3 points") and text.endswith("\n")
    assert text.count("\n") == 1                   # one line, redrawn in place, then ended


def test_sweep_prints_its_check_progress_on_stderr(tmp_path, monkeypatch, capsys):
    from tricut.sim.sweep import grid
    monkeypatch.setattr(grid, "CHECK_QUIET_S", 0.0)
    monkeypatch.setattr(grid, "CHECK_INTERVAL_S", 0.0)
    path = _grid(tmp_path, '[fixed]\nsynthetic = 4\n\n[axes]\nseed = [1, 2]\n')
    code, cap = run_cli(["sweep", str(path), "--db", str(tmp_path / "p.duckdb"), "--workers", "0"], capsys)
    assert code == 0, cap.err
    checked = [line for line in cap.err.splitlines() if line.startswith("sweep: checked")]
    assert [line.split(" points")[0] for line in checked] == [
        "sweep: checked 0 of 2", "sweep: checked 1 of 2", "sweep: checked 2 of 2"]
    code, cap = run_cli(["sweep", str(path), "--db", str(tmp_path / "q.duckdb"), "--workers", "0",
                         "--no-progress"], capsys)
    assert code == 0 and "checked" not in cap.err


# =========================================================================== one check everywhere
#: (task, grid setting, its value as TOML, the command line that gives the same value)
SAME_REFUSAL = [
    ("cdu-replay", "l2_mb", "1e12", ["cdu", "replay", "--pattern", "full", "--l2-mb", "1e12"]),
    ("cdu-replay", "l2_mb", "0.001", ["cdu", "replay", "--pattern", "full", "--l2-mb", "0.001"]),
    ("cdu-replay", "seed", "12345678901234567890",
     ["cdu", "replay", "--pattern", "full", "--seed", "12345678901234567890"]),
    ("cdu-replay", "reserve", "16", ["cdu", "replay", "--pattern", "full", "--reserve", "16"]),
    ("cdu-replay", "batch", "100000000", ["cdu", "replay", "--pattern", "full", "--batch", "100000000"]),
    ("cdu-replay", "steps", "0", ["cdu", "replay", "--pattern", "full", "--steps", "0"]),
    ("cdu-replay", "batch", "2000", ["cdu", "replay", "--pattern", "full", "--batch", "2000", "--context",
                                     "100000", "--model", "llama-3-70b"]),
    ("simulate", "prefix_cache_tokens", "1000000000",
     ["simulate", "--synthetic", "4", "--prefix-cache-tokens", "1000000000"]),
]


@pytest.mark.parametrize("task,setting,value,argv", SAME_REFUSAL, ids=[f"{c[1]}={c[2]}" for c in SAME_REFUSAL])
def test_a_grid_point_is_refused_up_front_in_the_commands_words(tmp_path, capsys, task, setting, value, argv):
    """What the command refuses, the grid refuses before any point runs, naming the point,
    with the command's own message (the same check code)."""
    code, cap = run_cli(argv, capsys)
    assert code == 2 and cap.err.startswith("tricut: error: "), cap.err
    message = cap.err.strip().removeprefix("tricut: error: ")
    fixed = {"cdu-replay": 'model = "llama-3-70b"\ncontext = 100000\n' if "--context" in argv else "",
             "simulate": "synthetic = 4\n"}[task]
    good = {"l2_mb": "50", "seed": "0", "reserve": "1", "batch": "1", "steps": "1",
            "prefix_cache_tokens": "1000"}[setting]
    path = _grid(tmp_path, f'task = "{task}"\n[fixed]\n{fixed}[axes]\n{setting} = [{good}, {value}]\n')
    code, cap = run_cli(["sweep", str(path), "--db", str(tmp_path / "r.duckdb"), "--workers", "0"], capsys)
    assert code == 2 and cap.out == "" and len(cap.err.splitlines()) == 1, cap.err
    line = cap.err.strip()
    assert line.startswith(f"tricut: error: {path}: point {setting}="), line
    assert message in line, (message, line)
    assert not (tmp_path / "r.duckdb").exists()


# =========================================================================== Ray
def test_ray_sweep_rows_equal_the_in_process_rows(small, tmp_path):
    db = tmp_path / "ray.duckdb"
    with sweep_process([small["grid"], "--db", db, "--workers", "2", "--json"], tmp_path) as p:
        code, out = p.wait()
        assert code == 0, "".join(p.err)[-3000:]
        p.assert_nothing_left()
    s = json.loads(out)
    assert (s["total"], s["done"], s["failed"], s["backend"], s["workers"]) == (8, 8, 0, "ray local", 2)
    assert _table(db) == _table(small["db"])


def _progress(line: str) -> int | None:
    m = re.match(r"sweep: (\d+)/(\d+) (done|failed) ", line)
    return int(m.group(1)) if m else None


def test_resume_after_sigkill_gives_the_uninterrupted_table(tmp_path, capsys):
    grid = _grid(tmp_path, SLOWER)
    killed_db, fresh_db = tmp_path / "killed.duckdb", tmp_path / "fresh.duckdb"
    with sweep_process([grid, "--db", killed_db, "--workers", "2"], tmp_path) as p:
        deadline = time.monotonic() + RUN_TIMEOUT
        while True:
            line = p.next_line(deadline)
            assert line is not None, f"the sweep ended before it was killed: {''.join(p.err)[-2000:]}"
            if (_progress(line) or 0) >= 4:                 # half of the 8 points done
                break
        p.kill()
        assert p.proc.returncode == -signal.SIGKILL
        p.assert_nothing_left()
    done_before = _table(killed_db)                         # the killed database still opens
    assert 4 <= len(done_before) < 8, f"{len(done_before)} rows: the kill came too late to test resume"
    assert {s for s, _, _ in done_before.values()} == {"done"}

    code, cap = run_cli(["sweep", str(grid), "--db", str(killed_db), "--workers", "0", "--resume",
                         "--json"], capsys)
    s = json.loads(cap.out)
    assert code == 0, cap.err
    assert (s["total"], s["skipped"], s["done"], s["failed"]) == (8, len(done_before), 8 - len(done_before), 0)
    code, cap = run_cli(["sweep", str(grid), "--db", str(fresh_db), "--workers", "0", "--json"], capsys)
    assert code == 0, cap.err
    resumed, fresh = _table(killed_db), _table(fresh_db)
    assert set(resumed) == {p.key for p in load_grid(grid).points}
    assert resumed == fresh
    assert {k: resumed[k] for k in done_before} == done_before      # the first run's rows kept


def test_a_killed_ray_worker_is_retried_and_the_sweep_finishes(tmp_path):
    # 4 points of ~1.5 s each, 2 at a time: a worker is caught executing one and SIGKILLed
    grid = _grid(tmp_path, SLOWER.replace("synthetic = 2000", "synthetic = 8000")
                 .replace("seed = [1, 2]", "seed = [1]").replace('policy = ["static", "adaptive"]',
                                                                 'policy = ["adaptive", "static"]'))
    db = tmp_path / "w.duckdb"
    assert MAX_RETRIES >= 1
    with sweep_process([grid, "--db", db, "--workers", "2", "--json"], tmp_path) as p:
        deadline = time.monotonic() + 120
        victim = None
        while victim is None:
            if p.proc.poll() is not None:
                pytest.fail(f"the sweep ended before a worker could be killed: {''.join(p.err)[-2000:]}")
            if time.monotonic() > deadline:
                pytest.fail(f"no ray::execute_point process in the sweep's session within 120 s; "
                            f"its processes: {p.members()}")
            busy = [pid for pid, cmd in p.members().items() if cmd.startswith("ray::execute_point")]
            if busy:
                victim = busy[0]
                os.kill(victim, signal.SIGKILL)
            else:
                time.sleep(0.05)
        code, out = p.wait()
        assert code == 0, f"exit {code} after killing worker {victim}: {''.join(p.err)[-3000:]}"
        p.assert_nothing_left()
    # Ray saw the task's worker die and retried it (its message is on stderr: stdout is the JSON)
    err = "".join(p.err)
    assert "A worker died or was killed while executing a task" in err and f"Worker PID: {victim}" in err, err[-3000:]
    s = json.loads(out)
    assert (s["total"], s["done"], s["failed"]) == (4, 4, 0), s
    rows = _table(db)
    assert len(rows) == 4 and {st for st, _, _ in rows.values()} == {"done"}


def _free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_address_joins_a_cluster_started_by_ray_start(small, tmp_path):
    """The documented multi-node path on one machine: `ray start --head` (its own session, as
    on a head node), then `tricut sweep --address HOST:PORT` — the same code, no local cluster."""
    port = _free_port()
    ray_bin = Path(sys.executable).with_name("ray")
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    head = subprocess.Popen([str(ray_bin), "start", "--head", "--block", f"--port={port}", "--num-cpus=2",
                             "--include-dashboard=false", "--disable-usage-stats"],
                            cwd=tmp_path, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    head_session = SweepProcess.__new__(SweepProcess)      # only its session bookkeeping
    head_session.sid, head_session.seen, head_session.proc = head.pid, {}, head
    try:
        db = tmp_path / "joined.duckdb"
        deadline = time.monotonic() + 120
        while True:                    # the head is up when its GCS port answers
            with contextlib.suppress(OSError):
                import socket
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            assert head.poll() is None, "ray start --head exited"
            assert time.monotonic() < deadline, "ray start --head did not open its port in 120 s"
            time.sleep(0.5)
        with sweep_process([small["grid"], "--db", db, "--address", f"127.0.0.1:{port}", "--workers", "2",
                            "--json"], tmp_path) as p:
            code, out = p.wait()
            assert code == 0, "".join(p.err)[-3000:]
        s = json.loads(out)
        assert (s["done"], s["failed"], s["backend"]) == (8, 0, f"ray 127.0.0.1:{port}")
        assert _table(db) == _table(small["db"])
    finally:
        head_session.members()
        with contextlib.suppress(ProcessLookupError):      # SIGTERM: a 30 s graceful stop
            os.killpg(head.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            head.wait(timeout=30)
        head_session.assert_nothing_left()
