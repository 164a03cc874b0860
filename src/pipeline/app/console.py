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


class ProgressLines:
    """A text stream for a log file: a progress bar's redraws (``\\r<state>``) become plain lines.

    A bar's state is written as a line when :data:`PROGRESS_INTERVAL` seconds have passed since
    the last such line (or since the first state seen after it); a bar that is cleared after a
    line was written (``leave=False``) gets its last state written too, and a bar that ends with a
    newline (``leave=True``) its final state. Bars shorter than the interval leave no line unless
    they keep their final state. Complete lines pass through unchanged; everything else is delegated.
    """

    def __init__(self, stream, interval: float = PROGRESS_INTERVAL, clock=time.monotonic):
        self._stream, self._interval, self._clock = stream, float(interval), clock
        self._line = ""  # text since the last \r or \n
        self._pending: str | None = None  # the newest bar state not written
        self._since: float | None = None  # start of the current interval (None: no bar since the last line)
        self._wrote_state = False  # a state of the current bar was written

    def write(self, text: str) -> int:
        for piece in re.split(r"([\r\n])", str(text)):
            if piece == "\r":
                self._redraw(self._line)
                self._line = ""
            elif piece == "\n":
                self._stream.write(self._line + "\n")
                self._line, self._pending, self._since, self._wrote_state = "", None, None, False
            else:
                self._line += piece
        return len(text)

    def _redraw(self, state: str) -> None:
        if not state.strip():  # a bar cleared (leave=False, or tqdm.write printing around it)
            if self._pending is not None and self._wrote_state:
                self._emit()
            self._wrote_state = False
            return
        now = self._clock()
        self._pending = state
        if self._since is None:
            self._since = now
        elif now - self._since >= self._interval:
            self._emit()

    def _emit(self) -> None:
        self._stream.write(self._pending.rstrip() + "\n")
        self._stream.flush()
        self._pending, self._since, self._wrote_state = None, self._clock(), True

    def flush(self) -> None:
        self._stream.flush()

    def finish(self) -> None:
        """Write what is left of an unterminated line (at exit)."""
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
