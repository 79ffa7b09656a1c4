"""Long runs on the command line, one helper for ``te run``, ``dsu run``, ``tile run`` and
``verilog``: their progress on stderr (:class:`StatusLine`), the refusal of a run estimated
longer than :data:`LONG_RUN_S` unless ``--allow-long`` (:func:`add_allow_long`,
:func:`refuse_long_run`), and :func:`duration_text`, how the CLI writes a duration.

On a terminal the status is one line rewritten in place (at most every
:data:`TTY_INTERVAL_S`). Elsewhere (a pipe, a file, a CI log, where ``\\r`` would pile up)
it is a whole line ``tricut: note: STATUS (T elapsed)`` every :data:`PIPE_INTERVAL_S`, the
first one that long after the start: a run shorter than that prints nothing.
:meth:`StatusLine.ticking` keeps the status alive through a phase that reports nothing (a
Verilator build, a run that has no cycle callback), re-reading it every second.
"""

from __future__ import annotations

import sys
import threading
import time
from contextlib import contextmanager

from ..options import InputError

__all__ = ["StatusLine", "duration_text", "add_allow_long", "refuse_long_run", "LONG_RUN_S",
           "TTY_INTERVAL_S", "PIPE_INTERVAL_S"]

#: a run estimated to take longer (s) is refused unless ``--allow-long``
LONG_RUN_S = 3600

#: a terminal's status line is rewritten at most this often (s)
TTY_INTERVAL_S = 0.5
#: off a terminal, one status line this often (s), the first this long after the start
PIPE_INTERVAL_S = 10.0


def duration_text(seconds: float) -> str:
    """``42 s``, ``12 min``, ``9.1 h``, ``3.2 days``."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    if seconds < 172800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def add_allow_long(parser, what: str = "the run") -> None:
    """The ``--allow-long`` flag (:func:`refuse_long_run`)."""
    parser.add_argument("--allow-long", action="store_true",
                        help=f"start {what} even when its estimate exceeds "
                             f"{LONG_RUN_S // 60} minutes")


def refuse_long_run(seconds: float, what: str, allow_long: bool, faster: str = "") -> None:
    """Refuse (:class:`InputError`, one line) ``what`` estimated at ``seconds`` when that is
    more than :data:`LONG_RUN_S` and not ``allow_long``; ``faster``: a quicker way, named in
    the message."""
    if allow_long or seconds <= LONG_RUN_S:
        return
    raise InputError(f"{what}: about {duration_text(seconds)}, more than the "
                     f"{LONG_RUN_S // 60} min allowed (--allow-long runs it anyway"
                     + (f"; {faster}" if faster else "") + ")")


class StatusLine:
    """A run's status on ``stream`` (default ``sys.stderr``; see the module docs). ``tty``:
    whether it is a terminal (default: ``stream.isatty()``); ``status``: a function giving
    the status text when :meth:`show` is given none (a status that follows the clock);
    ``clock``: seconds, monotonic; ``elapsed_in_text``: the status says the time elapsed
    (:meth:`elapsed`) itself, so the lines off a terminal do not add it."""

    def __init__(self, stream=None, tty: bool | None = None, status=None,
                 clock=time.monotonic, elapsed_in_text: bool = False):
        self.stream = sys.stderr if stream is None else stream
        self.tty = self.stream.isatty() if tty is None else tty
        self.status, self.clock = status, clock
        self.elapsed_in_text = elapsed_in_text
        self.text = ""
        self.t0 = clock()
        self.last = None if self.tty else self.t0      # when the stream was last written
        self.shown = False
        self._lock = threading.Lock()

    def show(self, text: str | None = None, now: float | None = None, force: bool = False):
        """Make ``text`` (default: ``status()``, else the last text) the status; write it if
        its interval has passed since the last write (``force``: on a terminal, at once)."""
        if text is None:
            text = self.status() if self.status is not None else self.text
        with self._lock:
            self.text = text
            now = self.clock() if now is None else now
            interval = TTY_INTERVAL_S if self.tty else PIPE_INTERVAL_S
            if not (force and self.tty) and self.last is not None and now - self.last < interval:
                return
            self.last = now
            if self.tty:
                self.stream.write(f"\r{text[:200]}\x1b[K")
            else:
                spent = "" if self.elapsed_in_text else \
                    f" ({duration_text(now - self.t0)} elapsed)"
                self.stream.write(f"tricut: note: {text}{spent}\n")
            self.stream.flush()
            self.shown = True

    def elapsed(self) -> float:
        """Seconds since the status line was made."""
        return self.clock() - self.t0

    def note(self, text: str) -> None:
        """``text`` as the status, on a terminal shown at once."""
        self.show(text, force=True)

    def close(self) -> None:
        """Clear a terminal's status line (before the run's own output)."""
        with self._lock:
            if self.shown and self.tty:
                self.stream.write("\r\x1b[K")
                self.stream.flush()
            self.shown = False

    @contextmanager
    def ticking(self, period_s: float = 1.0):
        """Re-show the status every ``period_s`` from a background thread while the block
        runs; the line is cleared at its end."""
        stop = threading.Event()

        def tick():
            while not stop.wait(period_s):
                self.show()
        thread = threading.Thread(target=tick, name="tricut-status", daemon=True)
        thread.start()
        try:
            yield self
        finally:
            stop.set()
            thread.join()
            self.close()
