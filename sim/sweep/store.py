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
that is not a sweep database, is refused rather than mixed. Before a database is used its
tables, columns, their types and constraints are checked against this schema, every row is
read once and (for writing) a row is written and rolled back, so that a file DuckDB cannot
use -- another format, truncated, corrupt, a ``points`` table of other columns -- is refused
with one line before any point runs. DuckDB loads no extension on its own here: an SQLite file
given as ``--db`` would otherwise make it download one (and create ``~/.duckdb``).
"""

from __future__ import annotations

import datetime as _dt
import json
from pathlib import Path

__all__ = ["SCHEMA_VERSION", "StoreError", "ResultStore", "FIXED_COLUMNS"]

SCHEMA_VERSION = 1
#: no extension installed or loaded behind the user's back (a file of another format would make
#: DuckDB download its reader from the network)
DUCKDB_CONFIG = {"autoinstall_known_extensions": False, "autoload_known_extensions": False}
#: bytes 8..11 of every DuckDB database file
DUCKDB_MAGIC = b"DUCK"
FIXED_COLUMNS = {"key": "VARCHAR PRIMARY KEY", "sweep": "VARCHAR", "task": "VARCHAR",
                 "status": "VARCHAR", "error": "VARCHAR", "wall_s": "DOUBLE",
                 "tricut_version": "VARCHAR", "git_commit": "VARCHAR", "finished_at": "TIMESTAMP",
                 "axes": "VARCHAR", "config": "VARCHAR", "metrics": "VARCHAR"}
_TYPES = ((bool, "BOOLEAN"), (int, "BIGINT"), (float, "DOUBLE"), (str, "VARCHAR"))
#: the types of the columns this module adds (:func:`_sql_type`, :data:`_WIDER`)
WRITTEN_TYPES = ("BOOLEAN", "BIGINT", "HUGEINT", "DOUBLE", "VARCHAR")
#: the constraints of table ``points``: its key
_CONSTRAINTS = {("PRIMARY KEY", ("key",)), ("NOT NULL", ("key",))}
#: the key of the row a check writes and rolls back (no point's key: those are hex digits)
_PROBE_KEY = "tricut-schema-probe"


class StoreError(ValueError):
    """The database cannot be used; one line naming the file and why."""


def duckdb_why(error) -> str:
    """Why DuckDB refused a file, in a few words (its own first line for a cause not known)."""
    text = str(error)
    low = text.lower()
    if "could not set lock" in low or "conflicting lock" in low:
        return "it is in use by another process (another sweep?)"
    if "not a valid duckdb database" in low or "magic" in low:
        return "it is not a DuckDB database"
    if "could not read enough bytes" in low or "corrupt" in low or "checksum" in low:
        return "it is truncated or corrupt (DuckDB cannot read all of it)"
    if "permission denied" in low or "read-only" in low:
        return "permission denied"
    if "no space left" in low:
        return "no space left on the device"
    return text.splitlines()[0] if text else type(error).__name__


def _file_kind(path: Path) -> str | None:
    """None for a file that starts like a DuckDB database; else what it is instead."""
    with open(path, "rb") as f:
        head = f.read(16)
    if head[8:12] == DUCKDB_MAGIC:
        return None
    if head.startswith(b"SQLite format 3\0"):
        return "an SQLite database, not a DuckDB database"
    return "not a DuckDB database"


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
        self.verb = verb = "read" if read_only else "write"
        try:
            kind = _file_kind(self.path) if self.path.is_file() else None
        except OSError as e:
            raise StoreError(f"cannot {verb} database {self.path}: {duckdb_why(e.strerror or e)}") from None
        if kind is not None:
            raise StoreError(f"cannot {verb} database {self.path}: it is {kind}")
        try:
            self.con = duckdb.connect(str(self.path), read_only=read_only, config=DUCKDB_CONFIG)
        except duckdb.Error as e:
            raise StoreError(f"cannot {verb} database {self.path}: {duckdb_why(e)}") from None
        try:
            self._check_schema(read_only)
            self.columns = self._points_columns()
            self._check_readable(read_only)
        except BaseException:
            self.con.close()
            raise

    def _sql(self, query: str, params=None):
        """``query`` run; a DuckDB error as a one-line :class:`StoreError` naming the file."""
        import duckdb
        try:
            return self.con.execute(query, params) if params is not None else self.con.execute(query)
        except duckdb.Error as e:
            raise StoreError(f"cannot {self.verb} database {self.path}: {duckdb_why(e)}") from None

    def _points_columns(self) -> dict:
        return dict(self._sql(
            "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = 'points' "
            "AND table_schema = 'main' AND table_catalog = current_database() ORDER BY ordinal_position"
        ).fetchall())

    def _refuse(self, why: str):
        raise StoreError(f"database {self.path} is not a tricut sweep database of this schema: {why}; "
                         "use another --db")

    def _check_points_table(self) -> None:
        """The columns, their types and the constraints of table ``points``."""
        columns = self._points_columns()
        for name, decl in FIXED_COLUMNS.items():
            want = decl.split()[0]
            if name not in columns:
                self._refuse(f"table points has no column {name}")
            if columns[name] != want:
                self._refuse(f"column points.{name} is {columns[name]}, not {want}")
        for name, kind in columns.items():
            if name not in FIXED_COLUMNS and kind not in WRITTEN_TYPES:
                self._refuse(f"column points.{name} is {kind}, a type tricut never writes "
                             f"({', '.join(WRITTEN_TYPES)})")
        found = {(kind, tuple(cols)) for kind, cols in self._sql(
            "SELECT constraint_type, constraint_column_names FROM duckdb_constraints() "
            "WHERE table_name = 'points' AND schema_name = 'main' "
            "AND database_name = current_database()").fetchall()}
        if ("PRIMARY KEY", ("key",)) not in found:
            self._refuse("table points has no primary key on column key")
        extra = sorted(found - _CONSTRAINTS)
        if extra:
            self._refuse(f"table points has a {extra[0][0]} constraint on {', '.join(extra[0][1])}, "
                         "which tricut never makes")

    def _check_readable(self, read_only: bool) -> None:
        """Every row read once and, for writing, a row written and rolled back: a truncated or
        corrupt file is refused here rather than when a finished point's row is written."""
        self._sql("SELECT count(hash(points)) FROM points").fetchall()
        if read_only:
            return
        self._sql("BEGIN")
        try:
            cols = ", ".join(_q(k) for k in FIXED_COLUMNS)
            probe = [_PROBE_KEY, "", "", "failed", "", 0.0, "", "", _dt.datetime.now(), "{}", "{}", "{}"]
            self._sql(f"INSERT INTO points ({cols}) VALUES ({', '.join('?' for _ in probe)})", probe)
        finally:
            self._sql("ROLLBACK")

    def _check_schema(self, read_only: bool) -> None:
        tables = dict(self._sql(
            "SELECT table_name, table_type FROM information_schema.tables WHERE table_schema = 'main' "
            "AND table_catalog = current_database()").fetchall())
        if "sweep_meta" in tables:
            meta = dict(self._sql(
                "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = "
                "'sweep_meta' AND table_schema = 'main' AND table_catalog = current_database()").fetchall())
            if meta.get("schema_version") not in (None, "INTEGER"):
                self._refuse(f"sweep_meta.schema_version is {meta['schema_version']}, not INTEGER")
            if "schema_version" not in meta:
                self._refuse("table sweep_meta has no column schema_version")
            versions = [r[0] for r in self._sql("SELECT schema_version FROM sweep_meta").fetchall()]
            if len(versions) != 1:
                self._refuse(f"table sweep_meta holds {len(versions)} schema versions, not one")
            if versions[0] != SCHEMA_VERSION:
                raise StoreError(f"database {self.path} was written with sweep schema version "
                                 f"{versions[0]}; this tricut writes version "
                                 f"{SCHEMA_VERSION}: use another --db (the old rows are not mixed in)")
            if tables.get("points") != "BASE TABLE":
                self._refuse("it has no table points")
            self._check_points_table()
            return
        if tables:
            raise StoreError(f"database {self.path} is a DuckDB database but not a tricut sweep database "
                             f"(tables {', '.join(sorted(tables))}); use another --db")
        if read_only:
            raise StoreError(f"database {self.path} holds no sweep")
        cols = ", ".join(f"{_q(k)} {v}" for k, v in FIXED_COLUMNS.items())
        self._sql("BEGIN")
        self._sql("CREATE TABLE sweep_meta (schema_version INTEGER)")
        self._sql("INSERT INTO sweep_meta VALUES (?)", [SCHEMA_VERSION])
        self._sql(f"CREATE TABLE points ({cols})")
        self._sql("COMMIT")

    def close(self) -> None:
        self.con.close()

    def is_empty(self) -> bool:
        """Whether table ``points`` holds no row (False when that cannot be read)."""
        try:
            return self._sql("SELECT count(*) FROM points").fetchone()[0] == 0
        except StoreError:
            return False

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
        self._sql("CREATE OR REPLACE TEMP TABLE wanted (key VARCHAR)")
        self._sql("INSERT INTO wanted SELECT unnest(?)", [keys])
        rows = self._sql("SELECT p.key, p.status FROM points p JOIN wanted USING (key)").fetchall()
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
        cur = self._sql(sql, params)
        names = [d[0] for d in cur.description]
        out = []
        for r in cur.fetchall():
            row = dict(zip(names, r))
            for k in ("axes", "config", "metrics"):
                row[k] = self._json_cell(row, k)
            out.append(row)
        return out

    def _json_cell(self, row: dict, column: str) -> dict:
        """A JSON object column of ``row`` parsed; a cell that is not one, refused naming the
        file, the point and the column."""
        text = row[column]
        if not text:
            return {}
        try:
            value = json.loads(text)
        except ValueError as e:
            why = f"not JSON ({e})"
        else:
            if isinstance(value, dict):
                return value
            why = f"JSON {type(value).__name__}, not an object"
        raise StoreError(f"database {self.path}: point {row['key']} (sweep {row.get('sweep')!r}): column "
                         f"{column} is {why}")

    def sweeps(self) -> list[str]:
        return [r[0] for r in self._sql("SELECT DISTINCT sweep FROM points ORDER BY sweep").fetchall()]

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
        count = self._sql(f"SELECT count(*) FROM {src}").fetchone()[0]
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
        import duckdb
        try:
            self.con.execute("BEGIN")
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
        except BaseException as e:
            try:
                self.con.execute("ROLLBACK")
                self.columns = self._points_columns()
            except (duckdb.Error, StoreError):
                pass                 # the write's own error is the one to report
            if isinstance(e, duckdb.Error):
                raise StoreError(f"cannot write the row of point {key} to database {self.path}: "
                                 f"{duckdb_why(e)}") from None
            raise
