"""A quiet console for ``python -m pipeline`` (used by ``conf/hydra/job_logging/pipeline.yaml``).

- :class:`TqdmConsoleHandler` writes log lines through ``tqdm.write``, so progress bars are
  cleared and redrawn around them instead of being interleaved with them.
- :class:`DetailsToFileOnly` keeps per-epoch and per-step details (INFO and below from the
  training loops) off the console; the run's log file still gets every record.
"""

from __future__ import annotations

import logging
import sys

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
