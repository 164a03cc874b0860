"""The quiet console: log lines go through tqdm.write, per-epoch details only to the log file."""

from __future__ import annotations

import io
import logging

from tqdm import tqdm

from pipeline.app.console import DetailsToFileOnly, TqdmConsoleHandler


def record(name: str, level: int, msg: str = "m") -> logging.LogRecord:
    return logging.LogRecord(name, level, __file__, 1, msg, None, None)


def test_details_filter_keeps_warnings_and_other_loggers():
    f = DetailsToFileOnly()
    assert not f.filter(record("pipeline.encoders.training", logging.INFO, "vade epoch 3"))
    assert f.filter(record("pipeline.encoders.training", logging.WARNING, "cluster collapse"))
    assert f.filter(record("pipeline.app.stores.cache", logging.INFO))


def test_console_handler_writes_around_progress_bars():
    stream = io.StringIO()
    handler = TqdmConsoleHandler(stream)
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    bar_out = io.StringIO()
    with tqdm(total=3, file=bar_out) as bar:
        bar.update(1)
        handler.emit(record("x", logging.INFO, "hello"))
    assert stream.getvalue() == "INFO hello\n"


def test_help_describes_the_tool_its_groups_and_examples():
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "pipeline", "--help"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert text.startswith("concept trees: explain the clusters") and "powered by Hydra" not in text
    assert "== Config groups" in text and "explainer: " in text and "dataset: " in text
    assert text.count("python -m pipeline") >= 4  # usage + three examples
