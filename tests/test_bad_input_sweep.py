"""Bad input to `tricut sweep`, `sweep export` and `sweep plot` (docs/sweeps.md, "Bad input"):
every case ends as ONE line ``tricut: error: ...`` naming what is wrong, exit status 2, nothing
on stdout, no traceback, and nothing written (no database created, a database given unchanged,
no plot folder). The CLI runs in this process; no case starts Ray.

A case is (id, files to make, argv, text the line holds). In argv and the texts, ``{d}`` is the
case's folder, ``{grid}`` its grid file ``{d}/grid.toml`` and ``{db}`` a database path that does
not exist before the case (and must not afterwards). Files: ``"grid"`` is the grid text (or
bytes), the others name a prepared database (:data:`DATABASES`) made at ``{d}/NAME.duckdb``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import duckdb
import pytest

from tricut.sim.cli.testing import assert_one_line_error, run_cli
from tricut.sim.sweep.store import SCHEMA_VERSION, ResultStore

BASE = '[fixed]\nmodel = "llama-3-8b"\nsynthetic = 4\n'
TWO = BASE + '\n[axes]\ntp = [1, 2]\n'             # a good 2-point grid
RUN = ["--db", "{db}", "--workers", "0"]           # in this process, into a fresh database
S = ["sweep", "{grid}", *RUN]                      # the usual command line


def _sweep_into(db: Path, grid_text: str, name: str) -> None:
    """Run a grid named ``name`` in this process into ``db`` (the sweep API, no CLI)."""
    from tricut.sim.sweep.grid import load_grid
    from tricut.sim.sweep.runner import run_grid
    grid = db.parent / "pre" / f"{name}.toml"
    grid.parent.mkdir(exist_ok=True)
    grid.write_text(grid_text)
    with ResultStore(db) as store:
        summary = run_grid(load_grid(grid), store, workers=0, progress=False)
    assert summary.done == summary.total


def _db_done(db: Path) -> None:
    """A sweep database holding TWO's points, done (sweep name "grid", as TWO's file is)."""
    _sweep_into(db, TWO, "grid")


def _db_v99(db: Path) -> None:
    _db_done(db)
    con = duckdb.connect(str(db))
    con.execute("UPDATE sweep_meta SET schema_version = 99")
    con.close()


def _db_unrelated(db: Path) -> None:
    con = duckdb.connect(str(db))
    con.execute("CREATE TABLE measurements (a INTEGER, b VARCHAR)")
    con.close()


def _db_empty(db: Path) -> None:
    duckdb.connect(str(db)).close()                # a DuckDB file with no table at all


def _db_text(db: Path) -> None:
    db.write_text("key,status\nabc,done\n")


def _db_two_sweeps(db: Path) -> None:
    _db_done(db)
    _sweep_into(db, TWO.replace("tp = [1, 2]", "tp = [4]"), "other")


def _db_failed_only(db: Path) -> None:
    with ResultStore(db) as store:
        store.write(key="k1", sweep="grid", task="simulate", status="failed", error="RuntimeError: x",
                    wall_s=0.1, version={"tricut": "0", "commit": "c"}, axes={"tp": 1},
                    config={"tp": 1}, metrics=None)


def _db_sqlite(db: Path) -> None:
    import sqlite3
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE points (key TEXT PRIMARY KEY, status TEXT)")
    con.commit()
    con.close()


def _db_truncated(db: Path) -> None:
    """A sweep database cut to half its length (a copy interrupted, a full disk)."""
    _db_done(db)
    with open(db, "r+b") as f:
        f.truncate(db.stat().st_size // 2)


def _db_corrupt(db: Path) -> None:
    """A sweep database with bytes flipped past its headers: DuckDB's checksums fail."""
    _db_done(db)
    data = bytearray(db.read_bytes())
    for i in range(3 * 4096, len(data), 97):
        data[i] ^= 0x5A
    db.write_bytes(bytes(data))


def _altered(*sql):
    """A maker of a done sweep database changed by ``sql`` (columns, types, cells)."""
    def make(db: Path) -> None:
        _db_done(db)
        con = duckdb.connect(str(db))
        for q in sql:
            con.execute(q)
        con.close()
    return make


#: prepared databases a case may name (made at {d}/NAME.duckdb)
DATABASES = {"done": _db_done, "v99": _db_v99, "unrelated": _db_unrelated, "empty": _db_empty,
             "text": _db_text, "two_sweeps": _db_two_sweeps, "failed_only": _db_failed_only,
             "sqlite": _db_sqlite, "truncated": _db_truncated, "corrupt": _db_corrupt,
             "wall_text": _altered("ALTER TABLE points ALTER wall_s TYPE VARCHAR"),
             "no_status": _altered("ALTER TABLE points DROP COLUMN status"),
             "date_column": _altered("ALTER TABLE points ADD COLUMN day DATE"),
             "no_key": _altered("CREATE TABLE copy AS SELECT * FROM points", "DROP TABLE points",
                                "ALTER TABLE copy RENAME TO points"),
             "text_version": _altered("DROP TABLE sweep_meta", "CREATE TABLE sweep_meta (schema_version VARCHAR)",
                                      "INSERT INTO sweep_meta VALUES ('1')"),
             "bad_json": _altered("UPDATE points SET key = 'k-bad', metrics = '{not json' "
                                  "WHERE key = (SELECT min(key) FROM points)")}

CASES = [
    # ---- the grid file
    ("grid-missing", {}, ["sweep", "{d}/nope.toml", *RUN], "grid file {d}/nope.toml does not exist"),
    ("grid-is-a-directory", {}, ["sweep", "{d}", *RUN], "grid file {d} is a directory"),
    ("grid-not-utf8", {"grid": b"name = \"\xff\xfe\"\n"}, S, "{grid}: not UTF-8 text"),
    ("grid-not-toml", {"grid": 'name = "x'}, S, "{grid}: not valid TOML: Unterminated string"),
    ("unknown-top-level-key", {"grid": 'axis = 1\n' + TWO}, S, "unknown top-level key 'axis'"),
    ("unknown-task", {"grid": 'task = "replay"\n' + TWO}, S, "unknown task 'replay'; choose one of simulate, cdu-replay"),
    ("name-not-a-string", {"grid": 'name = 5\n' + TWO}, S, "name must be a non-empty string of at most 64 characters, got 5"),
    ("name-too-long", {"grid": f'name = "{"n" * 65}"\n' + TWO}, S, "name must be a non-empty string"),
    ("unknown-axis", {"grid": BASE + '[axes]\nbatch = [1, 2]\n'}, S, "axis: unknown setting 'batch' for task simulate"),
    ("unknown-fixed-setting", {"grid": '[fixed]\nsynthetics = 4\n'}, S, "[fixed]: unknown setting 'synthetics'"),
    ("unknown-assume", {"grid": BASE + '[axes]\n"assume.bogus" = [1]\n'}, S, "unknown setting 'assume.bogus'"),
    ("unknown-in-compound-axis", {"grid": '[axes]\nwl = [{synthetic = 4}, {limt = 3}]\n'}, S,
     "axis 'wl': unknown setting 'limt'"),
    ("axes-not-a-table", {"grid": 'axes = [1, 2]\n' + BASE}, S, "[axes] must be a table of name = [values]"),
    ("fixed-not-a-table", {"grid": 'fixed = 4\n'}, S, "[fixed]: expected a table, got 4"),
    ("axis-not-a-list", {"grid": BASE + '[axes]\ntp = 2\n'}, S, "axis 'tp' must be a non-empty list of values, got 2"),
    ("axis-empty-list", {"grid": BASE + '[axes]\ntp = []\n'}, S, "axis 'tp' must be a non-empty list of values, got []"),
    ("axis-repeats-a-value", {"grid": BASE + '[axes]\ntp = [1, 2, 1]\n'}, S, "axis 'tp' repeats a value: [1, 2, 1]"),
    ("axis-value-a-list", {"grid": BASE + '[axes]\ntp = [[1, 2]]\n'}, S, "axis 'tp': a value must be one value, got [1, 2]"),
    ("axis-mixes-tables-and-values", {"grid": BASE + '[axes]\ntp = [{kv_dtype = "fp8"}, 2]\n'}, S,
     "axis 'tp': a value must be one value, got {'kv_dtype': 'fp8'}"),
    ("fixed-value-a-list", {"grid": '[fixed]\nsynthetic = 4\ntp = [1, 2]\n'}, S, "[fixed]: tp must be one value, got [1, 2]"),
    ("value-true", {"grid": BASE + '[axes]\ntp = [true, 2]\n'}, S, "point tp=True: tp = True: expected a value, not true/false"),
    ("value-a-date", {"grid": BASE + '[axes]\nrate = [1979-05-27, 2]\n'}, S,
     "axis 'rate': a date or time is not a setting's value, got 1979-05-27"),
    ("fixed-value-a-time", {"grid": BASE + 'rate = 07:32:00\n'}, S, "[fixed]: rate: a date or time is not a setting's value"),
    ("kv-dtype-fp7", {"grid": BASE + '[axes]\nkv_dtype = ["bf16", "fp7"]\n'}, S,
     "point kv_dtype=fp7: argument --kv-dtype: invalid choice: 'fp7'"),
    ("policy-x", {"grid": BASE + '[axes]\npolicy = ["static", "x"]\n'}, S, "point policy=x: argument --policy: invalid choice: 'x'"),
    ("tp-0", {"grid": BASE + '[axes]\ntp = [0, 1]\n'}, S, "point tp=0: argument --tp: 0 must be > 0"),
    ("rate-negative", {"grid": BASE + '[axes]\nrate = [-1]\n'}, S, "point rate=-1: argument --rate: -1 must be > 0"),
    ("cdu-l2-share-5", {"grid": BASE + '[axes]\n"assume.cdu_l2_share" = [0.8, 5]\n'}, S,
     "point assume.cdu_l2_share=5: argument --assume: 'cdu_l2_share=5': assumption cdu_l2_share must be in (0, 1]"),
    ("te-lanes-3", {"grid": BASE + '[axes]\n"unit.te_lanes" = [2, 3]\n'}, S,
     "point unit.te_lanes=3: argument --unit: 'te_lanes=3': te_lanes must be one of 2, 4, 8, 16, 32, got 3"),
    ("cuts-unknown", {"grid": BASE + '[axes]\ncuts = [["te"], ["tee"]]\n'}, S, "point cuts=['tee']: argument --cuts: 'tee' is not a cut"),
    ("limit-without-trace", {"grid": BASE + '[axes]\nlimit = [5]\n'}, S, "point limit=5: --limit applies to a --trace, and there is none"),
    ("trace-missing", {"grid": '[axes]\ntrace = ["nope.jsonl"]\n'}, S, "point trace=nope.jsonl: {d}/nope.jsonl: file not found"),
    # an unknown model is a refused value, not an impossible combination: drop_impossible keeps it
    ("model-unknown", {"grid": '[fixed]\nsynthetic = 4\n[axes]\nmodel = ["llama-3-8b", "llama-9"]\n'
                               '[filter]\ndrop_impossible = true\n'}, S, "point model=llama-9: unknown model 'llama-9'"),
    ("gpu-file-missing", {"grid": BASE + '[axes]\ngpu = ["h100-sxm5", "mine.toml"]\n'}, S,
     "point gpu=mine.toml: {d}/mine.toml: file not found"),
    ("both-axis-and-fixed", {"grid": BASE + 'tp = 1\n[axes]\ntp = [1, 2]\n'}, S, "'tp' is both an axis and in [fixed]"),
    ("compound-sets-a-fixed-setting", {"grid": BASE + '[axes]\nwl = [{synthetic = 8}, {synthetic = 16}]\n'}, S,
     "axis 'wl' sets 'synthetic', which [fixed] or another axis sets too"),
    ("exclude-names-a-non-axis", {"grid": TWO + '[[exclude]]\npolicy = "static"\n'}, S,
     "[[exclude]] names 'policy', which is not an axis (tp)"),
    ("exclude-not-tables", {"grid": 'exclude = [1]\n' + TWO}, S, "[[exclude]] must be tables of name = value"),
    ("exclude-empty-table", {"grid": TWO + '[[exclude]]\n'}, S, "[[exclude]] must be tables of name = value"),
    ("filter-not-a-bool", {"grid": TWO + '[filter]\ndrop_impossible = "yes"\n'}, S, "[filter] takes only drop_impossible = true|false"),
    ("filter-unknown-key", {"grid": TWO + '[filter]\ndrop_duplicates = true\n'}, S, "[filter] takes only drop_impossible = true|false"),
    ("grid-empty", {"grid": ""}, S, "{grid}: the grid is empty"),
    ("grid-only-a-name", {"grid": 'name = "x"\n'}, S, "{grid}: the grid is empty"),
    ("all-points-excluded", {"grid": TWO + '[[exclude]]\ntp = 1\n[[exclude]]\ntp = 2\n'}, S,
     "no point is left after [[exclude]] and drop_impossible (2 excluded, 0 impossible)"),
    ("all-points-impossible", {"grid": BASE + '[axes]\ntp = [3, 5]\n[filter]\ndrop_impossible = true\n'}, S,
     "no point is left after [[exclude]] and drop_impossible (0 excluded, 2 impossible)"),
    ("impossible-without-drop", {"grid": BASE + '[axes]\ntp = [1, 3]\n'}, S,
     "point tp=3: tp 3 must divide llama-3-8b's num_heads 32 (each GPU computes whole query heads) "
     "(set [filter] drop_impossible = true to drop such combinations)"),
    ("too-many-points", {"grid": BASE + '[axes]\nseed = [' + ", ".join(map(str, range(400))) + ']\n'
                                        'rate = [' + ", ".join(map(str, range(1, 300))) + ']\n'}, S,
     "the grid has 119,600 points, more than 100,000"),
    ("same-configuration-twice", {"grid": '[axes]\nwl = [{synthetic = 4}, {synthetic = 4, seed = 0}]\n'}, S,
     "points wl={synthetic=4} and wl={synthetic=4,seed=0} are the same configuration"),
    ("cdu-replay-reserve", {"grid": 'task = "cdu-replay"\n[axes]\nreserve = [1, 16]\n'}, S,
     "point reserve=16: --reserve 16: reserve must be an integer in [0, ways) = 0..15"),
    ("cdu-replay-policy", {"grid": 'task = "cdu-replay"\n[axes]\npolicy = ["lru"]\n'}, S,
     "point policy=lru: policy 'lru' is not one of"),
    ("cdu-replay-unknown-setting", {"grid": 'task = "cdu-replay"\n[axes]\ntp = [1]\n'}, S,
     "unknown setting 'tp' for task cdu-replay"),
    # refused up front by the command's own checks, not after other points ran
    ("cdu-replay-l2-beyond-frames", {"grid": 'task = "cdu-replay"\n[axes]\nl2_mb = [50, 1e12]\n'}, S,
     "point l2_mb=1000000000000.0: --l2-mb 1e+12 is 16,000,000,000,000 frames of 65,536-byte KV blocks"),
    ("cdu-replay-seed-20-digits", {"grid": 'task = "cdu-replay"\n[axes]\nseed = [0, 12345678901234567890]\n'}, S,
     "point seed=12345678901234567890: --seed 12345678901234567890: seed must be an integer in 0..2**63-1"),
    ("cdu-replay-batch-beyond-limit", {"grid": 'task = "cdu-replay"\n[axes]\nbatch = [1, 100000000]\n'}, S,
     "point batch=100000000: --batch 100,000,000 exceeds the replay's limit of 8,388,608 requests"),
    ("prefix-cache-beyond-kv-budget", {"grid": BASE + '[axes]\nprefix_cache_tokens = [1000, 1000000000]\n'}, S,
     "point prefix_cache_tokens=1000000000: --prefix-cache-tokens: the prefix cache (1,000,000,000 tokens) "
     "leaves no KV budget"),
    # ---- --workers and --address
    ("workers-negative", {"grid": TWO}, ["sweep", "{grid}", "--db", "{db}", "--workers", "-1"],
     "argument --workers: -1 must be in 0..256"),
    ("workers-too-many", {"grid": TWO}, ["sweep", "{grid}", "--db", "{db}", "--workers", "257"],
     "argument --workers: 257 must be in 0..256"),
    ("workers-not-a-number", {"grid": TWO}, ["sweep", "{grid}", "--db", "{db}", "--workers", "x"],
     "argument --workers: 'x' is not an integer"),
    ("workers-0-with-address", {"grid": TWO}, [*S, "--address", "127.0.0.1:6379"],
     "--workers 0 runs in this process and cannot use --address"),
    ("address-unreachable", {"grid": TWO}, ["sweep", "{grid}", "--db", "{db}", "--address", "127.0.0.1:1"],
     "--address 127.0.0.1:1: cannot reach a Ray cluster there"),
    ("address-not-host-port", {"grid": TWO}, ["sweep", "{grid}", "--db", "{db}", "--address", "localhost"],
     "--address 'localhost': expected HOST:PORT, ray://HOST:PORT or auto"),
    ("address-port-out-of-range", {"grid": TWO}, ["sweep", "{grid}", "--db", "{db}", "--address", "ray://head:99999"],
     "--address 'ray://head:99999': expected HOST:PORT"),
    ("address-port-not-a-number", {"grid": TWO}, ["sweep", "{grid}", "--db", "{db}", "--address", "head:http"],
     "--address 'head:http': expected HOST:PORT"),
    ("address-no-ray-there", {"grid": TWO}, ["sweep", "{grid}", "--db", "{db}", "--address", "{listener}"],
     "--address {listener}: something listens there but it is not a Ray cluster"),
    # ---- the database
    ("db-folder-missing", {"grid": TWO}, ["sweep", "{grid}", "--db", "{d}/nofolder/x.duckdb", "--workers", "0"],
     "cannot write database {d}/nofolder/x.duckdb: folder {d}/nofolder does not exist"),
    ("db-is-a-directory", {"grid": TWO}, ["sweep", "{grid}", "--db", "{d}", "--workers", "0"],
     "database {d} is a directory"),
    ("db-permission-denied", {"grid": TWO, "done": True}, ["sweep", "{grid}", "--db", "{unwritable}", "--workers", "0"],
     "cannot write database {unwritable}: permission denied"),
    ("db-other-schema-version", {"grid": TWO, "v99": True}, ["sweep", "{grid}", "--db", "{d}/v99.duckdb", "--workers", "0"],
     f"database {{d}}/v99.duckdb was written with sweep schema version 99; this tricut writes version {SCHEMA_VERSION}"),
    ("db-not-duckdb", {"grid": TWO, "text": True}, ["sweep", "{grid}", "--db", "{d}/text.duckdb", "--workers", "0"],
     "cannot write database {d}/text.duckdb: it is not a DuckDB database"),
    ("db-unrelated-tables", {"grid": TWO, "unrelated": True}, ["sweep", "{grid}", "--db", "{d}/unrelated.duckdb", "--workers", "0"],
     "database {d}/unrelated.duckdb is a DuckDB database but not a tricut sweep database (tables measurements)"),
    ("db-already-holds-the-points", {"grid": TWO, "done": True}, ["sweep", "{grid}", "--db", "{d}/done.duckdb", "--workers", "0"],
     "database {d}/done.duckdb already holds 2 of this grid's 2 points (2 done): --resume skips the done ones"),
    ("db-in-use", {"grid": TWO, "done": True}, ["sweep", "{grid}", "--db", "{locked}", "--workers", "0", "--resume"],
     "cannot write database {locked}: it is in use by another process"),
    ("db-sqlite", {"grid": TWO, "sqlite": True}, ["sweep", "{grid}", "--db", "{d}/sqlite.duckdb", "--workers", "0"],
     "cannot write database {d}/sqlite.duckdb: it is an SQLite database, not a DuckDB database"),
    ("db-truncated", {"grid": TWO, "truncated": True}, ["sweep", "{grid}", "--db", "{d}/truncated.duckdb", "--workers", "0",
                                                        "--resume"],
     "cannot write database {d}/truncated.duckdb: it is truncated or corrupt"),
    ("db-corrupt", {"grid": TWO, "corrupt": True}, ["sweep", "{grid}", "--db", "{d}/corrupt.duckdb", "--workers", "0",
                                                    "--resume"],
     "cannot write database {d}/corrupt.duckdb: it is truncated or corrupt"),
    ("db-column-of-another-type", {"grid": TWO, "wall_text": True},
     ["sweep", "{grid}", "--db", "{d}/wall_text.duckdb", "--workers", "0", "--resume"],
     "database {d}/wall_text.duckdb is not a tricut sweep database of this schema: column points.wall_s is "
     "VARCHAR, not DOUBLE; use another --db"),
    ("db-column-missing", {"grid": TWO, "no_status": True},
     ["sweep", "{grid}", "--db", "{d}/no_status.duckdb", "--workers", "0", "--resume"],
     "database {d}/no_status.duckdb is not a tricut sweep database of this schema: table points has no column status"),
    ("db-column-of-a-type-never-written", {"grid": TWO, "date_column": True},
     ["sweep", "{grid}", "--db", "{d}/date_column.duckdb", "--workers", "0", "--resume"],
     "column points.day is DATE, a type tricut never writes"),
    ("db-no-primary-key", {"grid": TWO, "no_key": True},
     ["sweep", "{grid}", "--db", "{d}/no_key.duckdb", "--workers", "0", "--resume"],
     "table points has no primary key on column key"),
    ("db-text-schema-version", {"grid": TWO, "text_version": True},
     ["sweep", "{grid}", "--db", "{d}/text_version.duckdb", "--workers", "0", "--resume"],
     "database {d}/text_version.duckdb is not a tricut sweep database of this schema: sweep_meta.schema_version "
     "is VARCHAR, not INTEGER"),
    # ---- sweep export
    ("export-db-missing", {}, ["sweep", "export", "--db", "{d}/none.duckdb", "--parquet", "{d}/o.parquet"],
     "database {d}/none.duckdb does not exist"),
    ("export-parquet-folder-missing", {"done": True}, ["sweep", "export", "--db", "{d}/done.duckdb", "--parquet", "{d}/no/o.parquet"],
     "cannot write {d}/no/o.parquet: folder {d}/no does not exist"),
    ("export-unknown-sweep", {"done": True}, ["sweep", "export", "--db", "{d}/done.duckdb", "--parquet", "{d}/o.parquet",
                                              "--sweep", "smoke"], "--sweep 'smoke': not in {d}/done.duckdb (sweeps: grid)"),
    ("export-no-parquet-flag", {"done": True}, ["sweep", "export", "--db", "{d}/done.duckdb"],
     "the following arguments are required: --parquet"),
    ("export-db-holds-no-sweep", {"empty": True}, ["sweep", "export", "--db", "{d}/empty.duckdb", "--parquet", "{d}/o.parquet"],
     "database {d}/empty.duckdb holds no sweep"),
    ("export-db-not-duckdb", {"text": True}, ["sweep", "export", "--db", "{d}/text.duckdb", "--parquet", "{d}/o.parquet"],
     "cannot read database {d}/text.duckdb: it is not a DuckDB database"),
    ("export-db-other-schema", {"v99": True}, ["sweep", "export", "--db", "{d}/v99.duckdb", "--parquet", "{d}/o.parquet"],
     "was written with sweep schema version 99"),
    ("export-db-truncated", {"truncated": True},
     ["sweep", "export", "--db", "{d}/truncated.duckdb", "--parquet", "{d}/o.parquet"],
     "cannot read database {d}/truncated.duckdb: it is truncated or corrupt"),
    ("export-db-sqlite", {"sqlite": True}, ["sweep", "export", "--db", "{d}/sqlite.duckdb", "--parquet", "{d}/o.parquet"],
     "cannot read database {d}/sqlite.duckdb: it is an SQLite database"),
    # ---- sweep plot
    ("plot-no-out", {"done": True}, ["sweep", "plot", "--db", "{d}/done.duckdb"], "the following arguments are required: -o/--out"),
    ("plot-db-missing", {}, ["sweep", "plot", "--db", "{d}/none.duckdb", "-o", "{d}/figs"], "database {d}/none.duckdb does not exist"),
    ("plot-unknown-x", {"done": True}, ["sweep", "plot", "--db", "{d}/done.duckdb", "-o", "{d}/figs", "--x", "tokens"],
     "--x 'tokens' is not a numeric metric of sweep 'grid'; metrics: admission_waits, "
     "attn_hbm_utilisation, cdu_utilisation, "),
    ("plot-non-numeric-y", {"done": True}, ["sweep", "plot", "--db", "{d}/done.duckdb", "-o", "{d}/figs", "--y", "stack"],
     "--y 'stack' is not a numeric metric of sweep 'grid'"),
    ("plot-unknown-metric", {"done": True}, ["sweep", "plot", "--db", "{d}/done.duckdb", "-o", "{d}/figs", "--metric", "speed"],
     "--metric 'speed' is not a numeric metric"),
    ("plot-unknown-group", {"done": True}, ["sweep", "plot", "--db", "{d}/done.duckdb", "-o", "{d}/figs", "--group", "policy"],
     "--group 'policy' is not an axis of sweep 'grid'; axes: tp"),
    ("plot-heat-one-axis", {"done": True}, ["sweep", "plot", "--db", "{d}/done.duckdb", "-o", "{d}/figs", "--heat", "tp"],
     "--heat 'tp': expected two different axes of sweep 'grid' (tp) separated by a comma"),
    ("plot-heat-same-axis", {"done": True}, ["sweep", "plot", "--db", "{d}/done.duckdb", "-o", "{d}/figs", "--heat", "tp,tp"],
     "--heat 'tp,tp': expected two different axes"),
    ("plot-heat-unknown-axis", {"done": True}, ["sweep", "plot", "--db", "{d}/done.duckdb", "-o", "{d}/figs", "--heat", "tp,policy"],
     "--heat 'tp,policy': expected two different axes"),
    ("plot-unknown-sweep", {"done": True}, ["sweep", "plot", "--db", "{d}/done.duckdb", "-o", "{d}/figs", "--sweep", "smoke"],
     "--sweep 'smoke': not in {d}/done.duckdb (sweeps: grid)"),
    ("plot-several-sweeps", {"two_sweeps": True}, ["sweep", "plot", "--db", "{d}/two_sweeps.duckdb", "-o", "{d}/figs"],
     "holds 2 sweeps (grid, other): choose one with --sweep"),
    ("plot-no-finished-point", {"failed_only": True}, ["sweep", "plot", "--db", "{d}/failed_only.duckdb", "-o", "{d}/figs"],
     "sweep 'grid' in {d}/failed_only.duckdb has no finished point to plot"),
    ("plot-db-sqlite", {"sqlite": True}, ["sweep", "plot", "--db", "{d}/sqlite.duckdb", "-o", "{d}/figs"],
     "cannot read database {d}/sqlite.duckdb: it is an SQLite database, not a DuckDB database"),
    ("plot-db-truncated", {"truncated": True}, ["sweep", "plot", "--db", "{d}/truncated.duckdb", "-o", "{d}/figs"],
     "cannot read database {d}/truncated.duckdb: it is truncated or corrupt"),
    ("plot-db-corrupt", {"corrupt": True}, ["sweep", "plot", "--db", "{d}/corrupt.duckdb", "-o", "{d}/figs"],
     "cannot read database {d}/corrupt.duckdb: it is truncated or corrupt"),
    ("plot-db-column-of-another-type", {"wall_text": True}, ["sweep", "plot", "--db", "{d}/wall_text.duckdb", "-o", "{d}/figs"],
     "column points.wall_s is VARCHAR, not DOUBLE"),
    ("plot-db-text-schema-version", {"text_version": True},
     ["sweep", "plot", "--db", "{d}/text_version.duckdb", "-o", "{d}/figs"],
     "sweep_meta.schema_version is VARCHAR, not INTEGER"),
    ("plot-db-bad-json-cell", {"bad_json": True}, ["sweep", "plot", "--db", "{d}/bad_json.duckdb", "-o", "{d}/figs"],
     "database {d}/bad_json.duckdb: point k-bad (sweep 'grid'): column metrics is not JSON"),
    ("plot-out-is-a-file", {"done": True, "text": True}, ["sweep", "plot", "--db", "{d}/done.duckdb", "-o", "{d}/text.duckdb"],
     "cannot create {d}/text.duckdb: File exists"),
]


def test_case_ids_are_unique():
    ids = [c[0] for c in CASES]
    assert len(ids) == len(set(ids))


@pytest.fixture(scope="module")
def databases(tmp_path_factory):
    """Each of :data:`DATABASES` made once: ``{name: path}`` (a case copies it)."""
    d = tmp_path_factory.mktemp("databases")
    out = {}
    for name, make in DATABASES.items():
        (d / name).mkdir()
        out[name] = d / name / f"{name}.duckdb"
        make(out[name])
    return out


@pytest.fixture(scope="module")
def listener():
    """``127.0.0.1:PORT`` where an HTTP/1 server answers: no Ray."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    stop = threading.Event()

    def serve():                   # answers like a web server (a dashboard port, say)
        srv.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(2)
                try:
                    conn.recv(1024)
                    conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
                except OSError:
                    pass

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    yield f"127.0.0.1:{srv.getsockname()[1]}"
    stop.set()
    t.join()
    srv.close()


@pytest.fixture
def locked(tmp_path):
    """A database another process holds open (and so locked), and that process."""
    procs = []

    def lock(db: Path) -> None:
        p = subprocess.Popen([sys.executable, "-c", "import duckdb, sys; c = duckdb.connect(sys.argv[1]); "
                              "print('open', flush=True); sys.stdin.read()", str(db)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        procs.append(p)
        assert p.stdout.readline().strip() == "open"

    yield lock
    for p in procs:
        p.stdin.close()
        p.wait(timeout=30)


def _unwritable(d: Path) -> Path:
    """A sweep database this process may not write: read-only by mode, or (as root, whom modes
    do not stop) a path on sysfs, where not even root may create a file."""
    db = d / "done.duckdb"
    db.chmod(0o444)
    if not os.access(db, os.W_OK):
        return db
    db.chmod(0o644)
    # as root the case needs sysfs (every Linux CI machine has it); without it the test fails
    # rather than skip: the refusal would go untested
    assert Path("/sys/kernel").is_dir(), "running as root and no sysfs: no place a database cannot be written"
    return Path("/sys/tricut-sweep-test.duckdb")


def _fill(text: str, subs: dict) -> str:
    for k, v in subs.items():
        text = text.replace("{" + k + "}", v)
    return text


def _snapshot(d: Path) -> dict:
    """Every file under ``d`` with its size and modification time."""
    return {p: (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(d.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("case_id,files,argv,needle", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_exit_2_nothing_written(tmp_path, capsys, databases, listener, locked,
                                                      case_id, files, argv, needle):
    d = (tmp_path / "d").resolve()
    d.mkdir()
    subs = {"d": str(d), "grid": str(d / "grid.toml"), "db": str(d / "out.duckdb"),
            "listener": listener, "locked": str(d / "done.duckdb")}
    if "grid" in files:
        body = files["grid"]
        (d / "grid.toml").write_bytes(body if isinstance(body, bytes) else body.encode())
    for name in files:
        if name != "grid":
            shutil.copyfile(databases[name], d / f"{name}.duckdb")
    if case_id == "db-permission-denied":
        subs["unwritable"] = str(_unwritable(d))
    if case_id == "db-in-use":
        locked(d / "done.duckdb")
    argv = [_fill(a, subs) for a in argv]
    needle = _fill(needle, subs)
    before = _snapshot(tmp_path)
    t0 = time.monotonic()
    code, captured = run_cli(argv, capsys)
    assert_one_line_error(code, captured, needle)
    assert time.monotonic() - t0 < 15, "a refusal must not wait"
    assert not (d / "out.duckdb").exists(), "a refused sweep created its database"
    assert not (d / "figs").exists(), "a refused plot created its folder"
    if case_id != "db-in-use":         # (a database another process holds may change under it)
        assert _snapshot(tmp_path) == before, "a refused command changed a file"


def test_unreachable_address_is_refused_in_seconds(tmp_path, capsys):
    (tmp_path / "g.toml").write_text(TWO)
    for address in ("127.0.0.1:1", "ray://127.0.0.1:1"):
        t0 = time.monotonic()
        code, captured = run_cli(["sweep", str(tmp_path / "g.toml"), "--db", str(tmp_path / "x.duckdb"),
                                  "--address", address], capsys)
        assert_one_line_error(code, captured, f"--address {address}: cannot reach a Ray cluster there")
        assert time.monotonic() - t0 < 6
    assert not (tmp_path / "x.duckdb").exists()


def test_a_refused_sweep_leaves_a_given_database_as_it_was(tmp_path, capsys):
    """The database holding the points, refused without --resume, keeps its rows; with
    --resume the same command runs (nothing to do)."""
    db = tmp_path / "done.duckdb"
    _db_done(db)
    con = duckdb.connect(str(db), read_only=True)
    rows = con.execute("SELECT key, status, metrics FROM points ORDER BY key").fetchall()
    con.close()
    (tmp_path / "grid.toml").write_text(TWO)
    argv = ["sweep", str(tmp_path / "grid.toml"), "--db", str(db), "--workers", "0"]
    code, captured = run_cli(argv, capsys)
    assert_one_line_error(code, captured, "already holds 2 of this grid's 2 points")
    con = duckdb.connect(str(db), read_only=True)
    assert con.execute("SELECT key, status, metrics FROM points ORDER BY key").fetchall() == rows
    con.close()
    code, captured = run_cli(argv + ["--resume", "--json"], capsys)
    assert code == 0 and json.loads(captured.out)["skipped"] == 2


def test_duckdb_loads_no_extension_and_an_sqlite_db_touches_no_home(tmp_path, capsys, monkeypatch):
    """The store's DuckDB connection neither installs nor loads an extension by itself, and an
    SQLite file given as --db (which DuckDB would read through a downloaded extension) is
    refused without creating ~/.duckdb."""
    with ResultStore(tmp_path / "new.duckdb") as store:
        settings = dict(store.con.execute(
            "SELECT name, value FROM duckdb_settings() WHERE name IN "
            "('autoinstall_known_extensions', 'autoload_known_extensions')").fetchall())
    assert settings == {"autoinstall_known_extensions": "false", "autoload_known_extensions": "false"}
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    _db_sqlite(tmp_path / "results.db")
    (tmp_path / "grid.toml").write_text(TWO)
    for argv in (["sweep", str(tmp_path / "grid.toml"), "--db", str(tmp_path / "results.db"), "--workers", "0"],
                 ["sweep", "plot", "--db", str(tmp_path / "results.db"), "-o", str(tmp_path / "figs")]):
        code, captured = run_cli(argv, capsys)
        assert_one_line_error(code, captured, "it is an SQLite database, not a DuckDB database")
    assert not (home / ".duckdb").exists()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def ray_tmpdir(tmp_path, monkeypatch):
    """Ray's temp folder (where `ray start` records its cluster) in ``tmp_path``, no
    RAY_ADDRESS, and no Ray GCS process of this machine visible to ``--address auto``: the
    returned function writes the cluster record."""
    import ray._private.services as services
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path / "raytmp"))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr(services, "find_gcs_addresses", lambda: frozenset())

    def record(address: str) -> Path:
        path = tmp_path / "raytmp" / "ray" / "ray_current_cluster"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(address + "\n")
        return path
    return record


def test_address_auto_with_a_stale_cluster_record_is_refused_in_seconds(tmp_path, capsys, ray_tmpdir):
    port = _closed_port()
    record = ray_tmpdir(f"127.0.0.1:{port}")
    (tmp_path / "grid.toml").write_text(TWO)
    t0 = time.monotonic()
    code, captured = run_cli(["sweep", str(tmp_path / "grid.toml"), "--db", str(tmp_path / "x.duckdb"),
                              "--address", "auto"], capsys)
    assert_one_line_error(code, captured, f"--address auto is 127.0.0.1:{port} (the cluster `ray start` "
                                          f"recorded in {record}): cannot reach a Ray cluster there")
    assert time.monotonic() - t0 < 8
    assert not (tmp_path / "x.duckdb").exists()


def test_address_auto_with_no_cluster_known_is_refused(tmp_path, capsys, ray_tmpdir):
    (tmp_path / "grid.toml").write_text(TWO)
    code, captured = run_cli(["sweep", str(tmp_path / "grid.toml"), "--db", str(tmp_path / "x.duckdb"),
                              "--address", "auto"], capsys)
    assert_one_line_error(code, captured, "--address auto: no Ray cluster is known on this machine")
    assert not (tmp_path / "x.duckdb").exists()


def test_ctrl_c_while_joining_answers_at_once_and_leaves_no_database(tmp_path):
    """``--address auto`` resolving (through RAY_ADDRESS, first in Ray's lookup, so that no
    cluster running on this machine is found instead) to a port that accepts connections and
    never answers, a hung head: the sweep waits in its bounded check, and Ctrl-C ends it at
    once with exit 130."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)
    srv.settimeout(60)
    port = srv.getsockname()[1]
    (tmp_path / "grid.toml").write_text(TWO)
    env = dict(os.environ, RAY_ADDRESS=f"127.0.0.1:{port}")
    db = tmp_path / "x.duckdb"
    # Ctrl-C's default action in the sweep, as in a terminal: a suite started in the background
    # of a shell without job control (`make test &`) hands its children SIGINT ignored, and
    # Python then installs no KeyboardInterrupt handler
    proc = subprocess.Popen([sys.executable, "-m", "tricut.sim", "sweep", str(tmp_path / "grid.toml"), "--db", str(db),
                             "--address", "auto"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        conn, _ = srv.accept()           # the sweep is now waiting for the head's answer
        t0 = time.monotonic()
        time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        # the sweep drops the connection when it gives up the wait (the process's own exit,
        # slower on a loaded machine, is not timed)
        conn.settimeout(30)
        while conn.recv(4096):
            pass
        waited = time.monotonic() - t0
        out, err = proc.communicate(timeout=30)
        conn.close()
    finally:
        if proc.poll() is None:
            proc.kill()
        srv.close()
    assert proc.returncode == 130, err
    assert err.strip().splitlines()[-1] == "tricut: interrupted" and "Traceback" not in err, err
    # before the join's own check (5 s from the connection) would have given up: the signal,
    # not that timeout, ended the wait (no tighter bound: the machine may be loaded)
    assert waited < 5, f"the sweep dropped the connection {waited:.1f} s after it was made; stderr: {err}"
    assert not db.exists(), err


def test_a_database_this_run_created_is_removed_when_joining_fails(tmp_path, capsys, monkeypatch):
    """Ctrl-C (or any failure) while Ray starts, after the new database was opened: the empty
    database is gone; a database that existed before is kept."""
    from tricut.sim.sweep import runner

    @contextlib.contextmanager
    def interrupted(workers, address):
        raise KeyboardInterrupt
        yield

    monkeypatch.setattr(runner, "_ray_cluster", interrupted)
    (tmp_path / "grid.toml").write_text(TWO)
    db = tmp_path / "new.duckdb"
    code, captured = run_cli(["sweep", str(tmp_path / "grid.toml"), "--db", str(db), "--workers", "1"], capsys)
    assert code == 130 and captured.err.strip() == "tricut: interrupted"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["grid.toml"]
    _db_failed_only(tmp_path / "old.duckdb")
    code, captured = run_cli(["sweep", str(tmp_path / "grid.toml"), "--db", str(tmp_path / "old.duckdb"),
                              "--workers", "1"], capsys)
    assert code == 130 and (tmp_path / "old.duckdb").exists()
