"""A quiet console for ``python -m pipeline`` (used by ``conf/hydra/job_logging/pipeline.yaml``).

- :class:`TqdmConsoleHandler` writes log lines through ``tqdm.write``, so progress bars are
  cleared and redrawn around them instead of being interleaved with them.
- :class:`DetailsToFileOnly` keeps per-epoch and per-step details (INFO and below from the
  training loops) off the console; the run's log file still gets every record.
- :class:`ProgressLines` replaces ``sys.stderr`` when it is a file or a pipe (``> run.log
  2>&1``, a SLURM job's log): progress bars, ours and the libraries' (sentence-transformers,
  transformers), become a plain line every :data:`PROGRESS_INTERVAL` seconds instead of
  thousands of carriage-return redraws on one line; on a terminal nothing changes.
"""

from __future__ import annotations

import atexit
import logging
import re
import sys
import time

#: seconds between two lines of a progress bar written to a log file
PROGRESS_INTERVAL = 10.0

# Loggers whose INFO records are per-epoch / per-step details: the log file has them, the console not.
DETAIL_LOGGERS = ("pipeline.encoders.training",)


class TqdmConsoleHandler(logging.StreamHandler):
    """A console handler that prints through ``tqdm.write`` (bars stay intact)."""

    def __init__(self, stream=None):
        super().__init__(stream if stream is not None else sys.stdout)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            from tqdm import tqdm

            tqdm.write(self.format(record), file=self.stream)
            self.flush()
        except Exception:  # noqa: BLE001 - a logging handler must never raise
            self.handleError(record)


class DetailsToFileOnly(logging.Filter):
    """Drop INFO-and-below records of :data:`DETAIL_LOGGERS` (warnings and errors still pass)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.WARNING:
            return True
        return not any(record.name == n or record.name.startswith(n + ".") for n in DETAIL_LOGGERS)


#: a nested bar's redraw as tqdm writes it: k newlines down to its row, its state (or a blank and a
#: second carriage return when it is cleared), k cursor-ups back (``moveto``, ``\x1b[A``)
_NESTED = re.compile(r"(\n+)\r([^\r\n\x1b]*)\r?((?:\x1b\[A)+)")
#: what may still become such a redraw when the next write arrives
_NESTED_START = re.compile(r"\n+(?:\r[^\r\n\x1b]*\r?(?:\x1b\[A)*(?:\x1b\[?)?)?")
_UP = "\x1b[A"


class _Row:
    """The bar drawn on one row (0: the line being written; k: the k-th nested bar below it)."""

    __slots__ = ("pending", "since", "wrote")

    def __init__(self):
        self.pending: str | None = None  # the newest state not written
        self.since: float | None = None  # start of the current interval (None: no state since the last line)
        self.wrote = False  # a state of the current bar was written


class ProgressLines:
    """A text stream for a log file: progress bars' redraws become plain lines.

    A bar's state (``\r<state>``) is written as a line when :data:`PROGRESS_INTERVAL` seconds have
    passed since the last such line (or since the first state seen after it); a bar that is cleared
    after a line was written (``leave=False``) gets its last state written too, and a bar that ends
    with a newline (``leave=True``) its final state. Bars shorter than the interval leave no line
    unless they keep their final state. Nested bars (tqdm's ``position``, drawn on the rows below
    with newlines and cursor-up escapes, e.g. sentence-transformers' ``Batches`` inside the
    pipeline's chunk bar) are paced the same way on their own, without escapes and without turning
    the outer bar's state into a line at each redraw. Complete lines pass through unchanged;
    everything else is delegated.
    """

    def __init__(self, stream, interval: float = PROGRESS_INTERVAL, clock=time.monotonic):
        self._stream, self._interval, self._clock = stream, float(interval), clock
        self._line = ""  # text since the last \r or \n
        self._rows: dict[int, _Row] = {0: _Row()}
        self._hold = ""  # the start of what may be a nested bar's redraw, until the next write tells

    def write(self, text: str) -> int:
        text = str(text)
        held, self._hold = self._hold, ""
        self._consume(held + text, final=False)
        return len(text)

    def _consume(self, text: str, final: bool) -> None:
        i = 0
        while i < len(text):
            ch = text[i]
            if ch == "\n":
                nested = _NESTED.match(text, i)
                if nested and len(nested.group(3)) >= len(_UP) * len(nested.group(1)):
                    depth = len(nested.group(1))
                    self._redraw(nested.group(2), depth)
                    i = nested.start(3) + len(_UP) * depth
                    continue
                # tqdm writes a move down on its own (``"\n" * k``): only a write that starts with one may be a move
                if not final and i == 0 and _NESTED_START.fullmatch(text, i):
                    self._hold = text[i:]
                    return
                self._stream.write(self._line + "\n")
                self._line, self._rows[0] = "", _Row()
                i += 1
            elif ch == "\r":
                self._redraw(self._line, 0)
                self._line = ""
                i += 1
            elif text.startswith(_UP, i):  # a cursor move with nothing drawn: nothing to keep
                i += len(_UP)
            else:
                stop = min([j for j in (text.find(c, i) for c in "\r\n\x1b") if j >= 0] or [len(text)])
                stop = stop if stop > i else i + 1  # a lone escape that is not a cursor-up: kept as text
                self._line += text[i:stop]
                i = stop

    def _redraw(self, state: str, depth: int) -> None:
        row = self._rows.setdefault(depth, _Row())
        if not state.strip():  # a bar cleared (leave=False, or tqdm.write printing around it)
            if row.pending is not None and row.wrote:
                self._emit(row)
            row.wrote = False
            if depth:
                self._rows[depth] = _Row()
            return
        now = self._clock()
        row.pending = state
        if row.since is None:
            row.since = now
        elif now - row.since >= self._interval:
            self._emit(row)

    def _emit(self, row: _Row) -> None:
        self._stream.write(row.pending.rstrip() + "\n")
        self._stream.flush()
        row.pending, row.since, row.wrote = None, self._clock(), True

    def flush(self) -> None:
        self._stream.flush()

    def finish(self) -> None:
        """Write what is left of an unterminated line (at exit)."""
        held, self._hold = self._hold, ""
        self._consume(held, final=True)
        if self._line.strip():
            self._stream.write(self._line + "\n")
        self._line = ""
        self.flush()

    def isatty(self) -> bool:
        return False

    def __getattr__(self, name):  # encoding, fileno, errors, buffer ...
        return getattr(self._stream, name)


def progress_as_lines() -> None:
    """Replace ``sys.stderr`` by :class:`ProgressLines` when it is not a terminal (idempotent)."""
    stream = sys.stderr
    if stream is None or isinstance(stream, ProgressLines):
        return
    try:
        if stream.isatty():
            return
    except (AttributeError, ValueError):
        return
    sys.stderr = ProgressLines(stream)
    atexit.register(sys.stderr.finish)
