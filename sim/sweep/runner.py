"""Run a grid's points: in this process (``workers = 0``) or as Ray tasks, on a local Ray
cluster started for the sweep (the default) or on an existing one (``address``). Each finished
point is written to the database at once, so an interrupted sweep keeps everything it finished.

* A point whose task raises is recorded ``failed`` with the error's one line; it is not
  retried (a deterministic failure would fail again) and the sweep goes on.
* A Ray worker process that dies during a task is retried by Ray (``max_retries``); a point
  whose every attempt died is recorded ``failed`` ("worker died").
* ``resume``: points whose key is already ``done`` in the database are skipped; failed ones
  run again. Without it, a database that already holds some of the grid's points is refused.
* A finished point whose row the database does not take (a full disk, say) stops the sweep:
  no new point starts, and that result and those of the points still running are kept as JSON
  lines in ``DB.unsaved.jsonl`` beside the database (on stdout if that cannot be written
  either); the error names the file.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from .grid import Grid, Point
from .store import ResultStore, StoreError
from .tasks import TASKS, code_version

__all__ = ["SweepError", "SweepSummary", "run_grid", "execute_point", "check_address", "resolve_auto",
           "unsaved_path", "MAX_RETRIES"]

#: Ray re-runs a task this many times when its worker process dies
MAX_RETRIES = 3


class SweepError(ValueError):
    """A sweep that cannot start (an unreachable cluster, points already stored); one line."""


@dataclass
class SweepSummary:
    sweep: str
    total: int
    done: int = 0
    failed: int = 0
    skipped: int = 0             # already done in the database (--resume)
    dropped: int = 0             # impossible combinations drop_impossible removed
    excluded: int = 0            # removed by [[exclude]]
    wall_s: float = 0.0
    workers: int = 0
    backend: str = "in-process"
    failures: list = field(default_factory=list)      # (label, error)

    def as_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def execute_point(task_name: str, settings: dict) -> dict:
    """Run one point; never raises for the point's own failure: ``{"status", "error",
    "metrics", "wall_s", "pid"}``."""
    t0 = time.perf_counter()
    try:
        metrics = TASKS[task_name].run(settings)
        status, error = "done", None
    except Exception as e:          # the point failed: recorded, the sweep goes on
        metrics, status = None, "failed"
        error = " ".join(f"{type(e).__name__}: {e}".splitlines())[:500]
    return {"status": status, "error": error, "metrics": metrics,
            "wall_s": time.perf_counter() - t0, "pid": os.getpid()}


class _Progress:
    """Points done of total, failures and ETA: a bar on a TTY, else one line per point."""

    def __init__(self, total: int, enabled: bool, stream=None):
        self.total, self.enabled = total, enabled
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.count = self.failed = 0
        self.t0 = time.perf_counter()

    def point(self, point: Point, status: str) -> None:
        self.count += 1
        self.failed += status == "failed"
        if not self.enabled:
            return
        spent = time.perf_counter() - self.t0
        eta = spent / self.count * (self.total - self.count)
        if self.tty:
            pct = self.count / max(self.total, 1)
            bar = "#" * int(25 * pct)
            print(f"\rsweep [{bar:<25}] {self.count}/{self.total} points, {self.failed} failed, "
                  f"ETA {eta:,.0f} s ", end="", file=self.stream, flush=True)
            if self.count == self.total:
                print(file=self.stream)
        else:
            print(f"sweep: {self.count}/{self.total} {status} {point.label()}", file=self.stream, flush=True)


def resolve_auto() -> tuple[str, str]:
    """``(address, where it was found)`` of the cluster ``ray.init(address="auto")`` would join
    (Ray's own lookup: ``RAY_ADDRESS``, the cluster ``ray start`` recorded, a GCS process
    running here); a :class:`SweepError` when there is none."""
    _join_with_token()               # before Ray is imported: it reads the mode then
    from ray._private import services, utils
    try:
        found = services.get_ray_address_from_environment("auto", None)
    except ConnectionError:
        found = None
    if not found or found == "auto":
        raise SweepError("--address auto: no Ray cluster is known on this machine (no RAY_ADDRESS, no "
                         "cluster recorded by `ray start`, no Ray GCS process): start one with "
                         "`ray start --head`, or give HOST:PORT")
    if os.environ.get("RAY_ADDRESS"):
        where = "RAY_ADDRESS"
    elif utils.read_ray_address(None) == found:
        where = f"the cluster `ray start` recorded in {utils.get_ray_address_file(None)}"
    else:
        where = "a Ray GCS process running on this machine"
    return found, where


def check_address(address: str) -> str:
    """The address to join: ``auto`` resolved as Ray resolves it, and every address checked to
    answer as a Ray cluster within seconds (Ray itself would wait a minute, deaf to Ctrl-C, at
    a cluster that is gone: a stale ``ray start`` record, say)."""
    if address == "auto":
        resolved, where = resolve_auto()
        try:
            check_address(resolved)
        except SweepError as e:
            raise SweepError(f"--address auto is {resolved} ({where}): "
                             f"{str(e).removeprefix(f'--address {resolved}: ')}; has that cluster "
                             "stopped? Start one with `ray start --head`, or give HOST:PORT") from None
        return resolved
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    try:
        port_n = int(port)
    except ValueError:
        port_n = -1
    if not sep or not 0 < port_n < 65536:
        raise SweepError(f"--address {address!r}: expected HOST:PORT, ray://HOST:PORT or auto")
    try:
        with socket.create_connection((host or "127.0.0.1", port_n), timeout=5) as conn:
            speaks = _speaks_http2(conn) if os.environ.get("RAY_USE_TLS", "0").lower() not in ("1", "true") \
                else True
    except OSError as e:
        raise SweepError(f"--address {address}: cannot reach a Ray cluster there "
                         f"({e.strerror or type(e).__name__})") from None
    if not speaks:      # a port that listens but is no Ray head: ray.init would retry for minutes
        raise SweepError(f"--address {address}: something listens there but it is not a Ray cluster "
                         "(no gRPC answer in 5 s): give the head's GCS port (ray start --head's "
                         "--port, 6379 by default) or its ray:// client port")
    return address


def _speaks_http2(conn: socket.socket, timeout: float = 5.0) -> bool:
    """Whether the peer answers an HTTP/2 connection preface with a SETTINGS frame, as a gRPC
    server (a Ray GCS or Ray client server) does."""
    empty_settings = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"     # length 0, type 4, no flags, stream 0
    conn.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + empty_settings)
    head, deadline = b"", time.monotonic() + timeout
    while len(head) < 9:
        conn.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            chunk = conn.recv(9 - len(head))
        except (socket.timeout, OSError):
            return False
        if not chunk:
            return False
        head += chunk
    return head[3] == 0x04


def _join_with_token() -> None:
    """Ray >= 2.59 starts clusters (``ray start --head``) with token authentication and keeps
    the token in ``~/.ray/auth_token``; a driver joins only in token mode. When the user has a
    token and has not chosen a mode, join in token mode (it also joins a cluster without
    authentication)."""
    if "RAY_AUTH_MODE" in os.environ:
        return
    if os.environ.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN_PATH") \
            or os.path.isfile(os.path.expanduser("~/.ray/auth_token")):
        os.environ["RAY_AUTH_MODE"] = "token"


@contextlib.contextmanager
def _fd2_captured():
    """Ray's C++ client logs each failed connection attempt to file descriptor 2, one line a
    second; while joining, those lines go to a temporary file, whose text is in the yielded
    list once the block ends, so that a failure stays one line. Without a real descriptor 2 (a
    captured test), nothing is moved."""
    text = []
    try:
        fd = sys.stderr.fileno()
    except (AttributeError, ValueError, OSError):
        yield text
        return
    sys.stderr.flush()
    saved = os.dup(fd)
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), fd)
        try:
            yield text
        finally:
            sys.stderr.flush()
            os.dup2(saved, fd)
            os.close(saved)
            tmp.seek(0)
            text.append(tmp.read().decode(errors="replace"))


@contextlib.contextmanager
def _ray_cluster(workers: int, address: str | None):
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    if address is not None:
        _join_with_token()           # before Ray is imported: it reads the mode then
        address = check_address(address)
    import ray
    kwargs = dict(include_dashboard=False, logging_level=logging.ERROR, log_to_driver=False,
                  configure_logging=True)
    # Ray's driver prints its raylet's messages ("A worker died or was killed ...") to
    # sys.stdout: they go to stderr, stdout is the summary (--json: one JSON document)
    with contextlib.redirect_stdout(sys.stderr):
        if address is not None:
            with _fd2_captured() as log:
                try:
                    ray.init(address=address, **kwargs)
                    failure = None
                except (ConnectionError, RuntimeError, ValueError, TimeoutError) as e:
                    failure = " ".join(str(e).splitlines())[:300]
            if failure is not None:
                if "InvalidAuthToken" in "".join(log):
                    raise SweepError(f"--address {address}: the Ray cluster refused this machine's "
                                     "authentication token: put the cluster's token (`ray get-auth-token` "
                                     "on its head) in RAY_AUTH_TOKEN or ~/.ray/auth_token")
                raise SweepError(f"--address {address}: cannot join the Ray cluster: {failure}")
        else:
            # "local": a new cluster for this sweep, even where `ray start` runs one (which a
            # bare ray.init() would join)
            ray.init(address="local", num_cpus=workers, object_store_memory=128 * 2**20, **kwargs)
        try:
            yield ray
        finally:
            ray.shutdown()


def _pending(grid: Grid, store: ResultStore, resume: bool) -> tuple[list[Point], int]:
    stored = store.statuses(p.key for p in grid.points)
    if stored and not resume:
        done = sum(s == "done" for s in stored.values())
        raise SweepError(f"database {store.path} already holds {len(stored)} of this grid's "
                         f"{len(grid.points)} points ({done} done): --resume skips the done ones and "
                         "re-runs the failed, or use another --db")
    todo = [p for p in grid.points if stored.get(p.key) != "done"]
    return todo, len(grid.points) - len(todo)


def run_grid(grid: Grid, store: ResultStore, *, workers: int = 2, address: str | None = None,
             resume: bool = False, progress: bool = True) -> SweepSummary:
    """Run the grid's points not yet done, writing each row as it finishes."""
    todo, skipped = _pending(grid, store, resume)
    summary = SweepSummary(grid.name, len(grid.points), skipped=skipped, dropped=len(grid.dropped),
                           excluded=grid.excluded, workers=workers)
    bar = _Progress(len(todo), progress)
    version = code_version()
    t0 = time.perf_counter()

    unsaved = _Unsaved(store.path)

    def record(point: Point, result: dict) -> None:
        row = dict(key=point.key, sweep=grid.name, task=grid.task, status=result["status"],
                   error=result["error"], wall_s=result["wall_s"], version=version, axes=point.axes,
                   config=point.config, metrics=result["metrics"])
        if unsaved.error is None:
            try:
                store.write(**row)
            except StoreError as e:
                unsaved.error = e
        if unsaved.error is not None:
            unsaved.keep(point, row)
        if result["status"] == "done":
            summary.done += 1
        else:
            summary.failed += 1
            summary.failures.append((point.label(), result["error"]))
        bar.point(point, result["status"])

    if not todo:
        summary.backend = "nothing to run"
    elif workers == 0 and address is None:
        summary.backend = "in-process"
        for point in todo:
            if unsaved.error is not None:
                break
            record(point, execute_point(grid.task, point.settings))
    else:
        with _ray_cluster(workers, address) as ray:
            summary.backend = "ray " + (address or "local")
            summary.workers = _run_ray(ray, grid, todo, workers, record,
                                       stopped=lambda: unsaved.error is not None)
    summary.wall_s = time.perf_counter() - t0
    unsaved.raise_if_any()
    return summary


def unsaved_path(db) -> Path:
    """Where the results a database did not take are kept: ``DB.unsaved.jsonl`` beside it."""
    return Path(f"{db}.unsaved.jsonl")


class _Unsaved:
    """The finished points' rows the database did not take after its first failed write, kept
    as JSON lines (one ``ResultStore.write`` argument set per line) beside it, or on stdout."""

    def __init__(self, db: Path):
        self.path = unsaved_path(db)
        self.error: StoreError | None = None
        self.count = 0
        self.on_stdout = False

    def keep(self, point: Point, row: dict) -> None:
        line = json.dumps({"label": point.label(), **row}, sort_keys=True, default=str) + "\n"
        self.count += 1
        if not self.on_stdout:
            try:
                with open(self.path, "a", encoding="utf-8") as f:
                    f.write(line)
                return
            except OSError:
                self.on_stdout = True
        sys.stdout.write(line)
        sys.stdout.flush()

    def raise_if_any(self) -> None:
        if self.error is None:
            return
        where = "printed on stdout" if self.on_stdout else f"kept in {self.path}"
        raise StoreError(f"{self.error}; the sweep stopped, and the {self.count} finished point(s) "
                         f"not written are {where} (one JSON row per line)")


def _run_ray(ray, grid: Grid, todo: list[Point], workers: int, record, stopped=lambda: False) -> int:
    """Run ``todo`` as Ray tasks, at most ``2 x workers`` in flight (``workers`` 0: the
    cluster's CPUs), none started once ``stopped()``; returns that worker count."""
    remote = ray.remote(max_retries=MAX_RETRIES, retry_exceptions=False)(execute_point)
    limit = max(1, 2 * (workers or int(ray.cluster_resources().get("CPU", 1))))
    queue = list(reversed(todo))
    running = {}
    while queue or running:
        if stopped():
            queue.clear()          # the points running still finish and are recorded
            if not running:
                break
        while queue and len(running) < limit:
            point = queue.pop()
            running[remote.remote(grid.task, point.settings)] = point
        ready, _ = ray.wait(list(running), num_returns=1)
        for ref in ready:
            point = running.pop(ref)
            try:
                result = ray.get(ref)
            except ray.exceptions.RayError as e:    # every attempt's worker died
                result = {"status": "failed", "wall_s": 0.0, "metrics": None, "pid": None,
                          "error": f"worker died ({MAX_RETRIES + 1} attempts): "
                                   f"{' '.join(str(e).splitlines())[:300]}"}
                record(point, result)
                continue
            record(point, result)
    return limit // 2
