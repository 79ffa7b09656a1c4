"""The sweep results database: one DuckDB file, one row per point in table ``points``.

Columns (``docs/sweeps.md``):

* fixed: ``key`` (the point's key: a hash of its task, resolved configuration and code
  version), ``sweep`` (the grid's name), ``task``, ``status`` (``done`` or ``failed``),
  ``error`` (the failure's one line), ``wall_s`` (the task's own run time), ``tricut_version``, ``git_commit``, ``finished_at``, ``axes``,
  ``config`` and ``metrics`` (JSON text: the point's axis values, the full resolved
  configuration and every metric);
* one typed column per configuration field and per metric, added when first seen (an integer
  column widens to HUGEINT for an integer beyond 64-bit signed, to DOUBLE when a fraction
  arrives). A metric named like a configuration field
  (``stack``, ``concurrency``: simulate echoes them) keeps the configuration's column; the
  ``metrics`` JSON has both.

Table ``sweep_meta`` holds ``schema_version``; a database of another version, or a DuckDB file
that is not a sweep database, is refused rather than mixed.
"""

from __future__ import annotations

import datetime as _dt
import json
from pathlib import Path

__all__ = ["SCHEMA_VERSION", "StoreError", "ResultStore", "FIXED_COLUMNS"]

SCHEMA_VERSION = 1
FIXED_COLUMNS = {"key": "VARCHAR PRIMARY KEY", "sweep": "VARCHAR", "task": "VARCHAR",
                 "status": "VARCHAR", "error": "VARCHAR", "wall_s": "DOUBLE",
                 "tricut_version": "VARCHAR", "git_commit": "VARCHAR", "finished_at": "TIMESTAMP",
                 "axes": "VARCHAR", "config": "VARCHAR", "metrics": "VARCHAR"}
_TYPES = ((bool, "BOOLEAN"), (int, "BIGINT"), (float, "DOUBLE"), (str, "VARCHAR"))


class StoreError(ValueError):
    """The database cannot be used; one line naming the file and why."""


def _sql_type(value):
    if isinstance(value, int) and not isinstance(value, bool) and not -2**63 <= value < 2**63:
        return "HUGEINT"           # e.g. a replay's unsigned 64-bit transaction checksum
    for kind, name in _TYPES:
        if isinstance(value, kind):
            return name
    return "VARCHAR"               # a list or dict: JSON text


#: the type a column of type ``have`` takes to also hold a value of type ``want``
_WIDER = {frozenset({"BIGINT", "HUGEINT"}): "HUGEINT", frozenset({"BIGINT", "DOUBLE"}): "DOUBLE",
          frozenset({"HUGEINT", "DOUBLE"}): "DOUBLE"}


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


class ResultStore:
    """A sweep database opened for writing (``read_only``: for export and plots)."""

    def __init__(self, path, read_only: bool = False):
        import duckdb
        self.path = Path(path)
        if read_only and not self.path.is_file():
            raise StoreError(f"database {self.path} does not exist")
        if self.path.is_dir():
            raise StoreError(f"database {self.path} is a directory")
        if not read_only and not self.path.parent.is_dir():
            raise StoreError(f"cannot write database {self.path}: folder {self.path.parent} does not exist")
        try:
            self.con = duckdb.connect(str(self.path), read_only=read_only)
        except duckdb.Error as e:
            text = str(e).splitlines()[0]
            if "lock" in text.lower():
                why = "it is in use by another process (another sweep?)"
            elif "not a valid DuckDB database" in text or "Invalid Input" in text or "magic" in text:
                why = "it is not a DuckDB database"
            elif "Permission denied" in text or "read-only" in text.lower():
                why = "permission denied"
            else:
                why = text
            raise StoreError(f"cannot {'read' if read_only else 'write'} database {self.path}: {why}") from None
        try:
            self._check_schema(read_only)
        except BaseException:
            self.con.close()
            raise
        self.columns = {r[0]: r[1] for r in self.con.execute(
            "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = 'points'"
        ).fetchall()}

    def _check_schema(self, read_only: bool) -> None:
        tables = {r[0] for r in self.con.execute(
            "SELECT table_name FROM information_schema.tables").fetchall()}
        if "sweep_meta" in tables:
            row = self.con.execute("SELECT schema_version FROM sweep_meta").fetchone()
            if row is None or row[0] != SCHEMA_VERSION:
                raise StoreError(f"database {self.path} was written with sweep schema version "
                                 f"{None if row is None else row[0]}; this tricut writes version "
                                 f"{SCHEMA_VERSION}: use another --db (the old rows are not mixed in)")
            if "points" not in tables:
                raise StoreError(f"database {self.path} has no points table: not a sweep database")
            return
        if tables:
            raise StoreError(f"database {self.path} is a DuckDB database but not a tricut sweep database "
                             f"(tables {', '.join(sorted(tables))}); use another --db")
        if read_only:
            raise StoreError(f"database {self.path} holds no sweep")
        cols = ", ".join(f"{_q(k)} {v}" for k, v in FIXED_COLUMNS.items())
        self.con.execute("BEGIN")
        self.con.execute("CREATE TABLE sweep_meta (schema_version INTEGER)")
        self.con.execute("INSERT INTO sweep_meta VALUES (?)", [SCHEMA_VERSION])
        self.con.execute(f"CREATE TABLE points ({cols})")
        self.con.execute("COMMIT")

    def close(self) -> None:
        self.con.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ----------------------------------------------------------------------- reading
    def statuses(self, keys) -> dict:
        """``{key: status}`` of those of ``keys`` already in the database."""
        keys = list(keys)
        if not keys:
            return {}
        self.con.execute("CREATE OR REPLACE TEMP TABLE wanted (key VARCHAR)")
        self.con.executemany("INSERT INTO wanted VALUES (?)", [[k] for k in keys])
        rows = self.con.execute("SELECT p.key, p.status FROM points p JOIN wanted USING (key)").fetchall()
        return dict(rows)

    def rows(self, sweep: str | None = None, status: str | None = None) -> list[dict]:
        """Every row (optionally of one sweep and status) as a dict, JSON columns parsed."""
        where, params = [], []
        if sweep is not None:
            where.append("sweep = ?")
            params.append(sweep)
        if status is not None:
            where.append("status = ?")
            params.append(status)
        sql = "SELECT * FROM points" + (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY key"
        cur = self.con.execute(sql, params)
        names = [d[0] for d in cur.description]
        out = []
        for r in cur.fetchall():
            row = dict(zip(names, r))
            for k in ("axes", "config", "metrics"):
                row[k] = json.loads(row[k]) if row[k] else {}
            out.append(row)
        return out

    def sweeps(self) -> list[str]:
        return [r[0] for r in self.con.execute("SELECT DISTINCT sweep FROM points ORDER BY sweep").fetchall()]

    def export_parquet(self, path, sweep: str | None = None) -> int:
        """Write the table (or one sweep's rows) as Parquet; returns the row count."""
        path = Path(path)
        if not path.parent.is_dir():
            raise StoreError(f"cannot write {path}: folder {path.parent} does not exist")
        src = "points" if sweep is None else "(SELECT * FROM points WHERE sweep = " + \
            "'" + sweep.replace("'", "''") + "')"
        lit = "'" + str(path).replace("'", "''") + "'"
        try:
            self.con.execute(f"COPY {src} TO {lit} (FORMAT PARQUET)")
        except Exception as e:       # duckdb.IOException and friends
            raise StoreError(f"cannot write {path}: {str(e).splitlines()[0]}") from None
        count = self.con.execute(f"SELECT count(*) FROM {src}").fetchone()[0]
        return count

    # ----------------------------------------------------------------------- writing
    def _ensure_column(self, name: str, value) -> str | None:
        """The column for ``name`` (added or widened for ``value``); None for a null value of a
        column not yet known (it stays absent until a value arrives). Integers are BIGINT, or
        HUGEINT beyond 64-bit signed; a column widens (BIGINT -> HUGEINT -> DOUBLE, anything
        mixed with text -> VARCHAR) and never narrows."""
        if value is None:
            return name if name in self.columns else None
        want = _sql_type(value)
        have = self.columns.get(name)
        if have is None:
            self.con.execute(f"ALTER TABLE points ADD COLUMN {_q(name)} {want}")
            self.columns[name] = want
        elif have != want:
            wider = _WIDER.get(frozenset({have, want}), "VARCHAR")
            if wider != have:
                self.con.execute(f"ALTER TABLE points ALTER {_q(name)} TYPE {wider}")
                self.columns[name] = wider
        return name

    def write(self, *, key: str, sweep: str, task: str, status: str, error: str | None,
              wall_s: float, version: dict, axes: dict, config: dict,
              metrics: dict | None) -> None:
        """Insert (or replace) one point's row, committed before this returns."""
        metrics = metrics or {}
        values = {"key": key, "sweep": sweep, "task": task, "status": status, "error": error,
                  "wall_s": float(wall_s),
                  "tricut_version": version["tricut"], "git_commit": version["commit"],
                  "finished_at": _dt.datetime.now(),
                  "axes": json.dumps(axes, default=str),          # the grid's axis order
                  "config": json.dumps(config, sort_keys=True, default=str),
                  "metrics": json.dumps(metrics, sort_keys=True, default=str, allow_nan=False)}
        self.con.execute("BEGIN")
        try:
            for source in (config, metrics):
                for k, v in source.items():
                    if k in values or k in FIXED_COLUMNS:
                        continue             # a metric echoing a configuration field
                    col = self._ensure_column(k, v)
                    if col is not None:
                        values[k] = json.dumps(v) if isinstance(v, (list, dict)) else v
            self.con.execute("DELETE FROM points WHERE key = ?", [key])
            names = list(values)
            self.con.execute(f"INSERT INTO points ({', '.join(map(_q, names))}) VALUES "
                             f"({', '.join('?' for _ in names)})", [values[n] for n in names])
            self.con.execute("COMMIT")
        except BaseException:
            self.con.execute("ROLLBACK")
            self.columns = {r[0]: r[1] for r in self.con.execute(
                "SELECT column_name, data_type FROM information_schema.columns "
                "WHERE table_name = 'points'").fetchall()}
            raise
