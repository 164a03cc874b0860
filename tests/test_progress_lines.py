"""Issue 36 item 5: progress bars in a log file are plain lines, not carriage-return redraws."""

from __future__ import annotations

import io
import itertools
import subprocess
import sys

from tqdm.std import tqdm

from pipeline.app.console import ProgressLines


def clock(step: float):
    """A fake clock advancing ``step`` seconds per reading."""
    ticks = itertools.count()
    return lambda: next(ticks) * step


def test_a_long_bar_becomes_a_few_plain_lines_ending_at_its_last_state():
    out = io.StringIO()
    log = ProgressLines(out, interval=10.0, clock=clock(1.0))
    for _ in tqdm(range(200), desc="CAVs", file=log, mininterval=0, miniters=1):
        pass
    text = out.getvalue()
    assert "\r" not in text
    lines = text.splitlines()
    assert 10 <= len(lines) <= 25 and all(line.startswith("CAVs:") for line in lines)
    assert "200/200" in lines[-1]


def test_a_cleared_bar_keeps_its_last_state_and_a_short_one_leaves_nothing():
    out = io.StringIO()
    log = ProgressLines(out, interval=10.0, clock=clock(1.0))
    for _ in tqdm(range(50), desc="long", file=log, mininterval=0, miniters=1, leave=False):
        pass
    for _ in tqdm(range(3), desc="short", file=log, mininterval=0, miniters=1, leave=False):
        pass
    log.write("a plain line\n")
    lines = out.getvalue().splitlines()
    assert "\r" not in out.getvalue() and "50/50" in lines[-2] and lines[-1] == "a plain line"
    assert not any(line.startswith("short") for line in lines)


def test_a_cli_run_writes_no_carriage_return_runs_to_its_log(tmp_path):
    """``python -m pipeline ... 2> run.log``: IMM's progress bar (verbose) ends as one plain line."""
    from tests.test_cli_typos_and_paths import FAST, cli

    proc = cli(tmp_path, "dataset=iris", "clustering=kmeans", "explainer=[imm]", "explainer.imm.params.verbose=true",
               *FAST)
    assert proc.returncode == 0, proc.stderr
    assert "\r" not in proc.stderr and "\r" not in proc.stdout
    assert "IMM splits: 100%" in proc.stderr


def test_a_terminal_keeps_tqdm_and_a_notebook_without_ipywidgets_gets_no_warning():
    code = ("import sys, warnings; warnings.simplefilter('error'); sys.modules['ipykernel.zmqshell'] = sys;"
            "from pipeline.progress import tqdm as bar; from tqdm.std import tqdm as std; assert bar is std, bar")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
