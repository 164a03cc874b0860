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
    from test_cli_typos_and_paths import FAST, cli

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


def nested_run(log, inner_leave: bool, n_outer: int = 3, n_inner: int = 40):
    """A chunk bar (leave=False, as pipeline.app.execution.compute's) around inner bars (as sentence-transformers'
    ``Batches``): tqdm draws the inner one a row below with a newline and a cursor-up escape."""
    with tqdm(total=n_outer, desc="embedding (sbert)", file=log, leave=False, mininterval=0, miniters=1) as outer:
        for _ in range(n_outer):
            for _ in tqdm(range(n_inner), desc="Batches", file=log, leave=inner_leave, mininterval=0, miniters=1):
                pass
            outer.update()


def test_nested_bars_are_plain_lines_paced_on_their_own():
    out = io.StringIO()
    log = ProgressLines(out, interval=10.0, clock=clock(1.0))
    nested_run(log, inner_leave=True)
    log.write("done\n")
    log.finish()
    text = out.getvalue()
    assert "\x1b" not in text and "\r" not in text, repr(text[:300])
    lines = text.splitlines()
    assert lines[-1] == "done"
    batches = [line for line in lines if line.startswith("Batches:")]
    # each inner bar's final state (a paced line may have shown it just before)
    assert 3 <= len([line for line in batches if "40/40" in line]) <= 6
    assert 3 < len(batches) <= 3 + 3 * 40 // 10 + 3  # paced: a line per 10 ticks, not one per redraw
    outer = [line for line in lines if line.startswith("embedding")]
    assert len(outer) <= 3 and all(line.strip() for line in lines)  # not one per inner redraw


def test_nested_bars_that_are_cleared_leave_their_last_state_when_long():
    out = io.StringIO()
    log = ProgressLines(out, interval=10.0, clock=clock(1.0))
    nested_run(log, inner_leave=False, n_outer=2, n_inner=30)
    log.finish()
    text = out.getvalue()
    assert "\x1b" not in text and "\r" not in text
    assert sum("30/30" in line for line in text.splitlines()) == 2


def test_a_lone_newline_waits_for_the_next_write_and_exit_flushes_it():
    out = io.StringIO()
    log = ProgressLines(out)
    log.write("a message")
    log.write("\n")  # print() writes the newline on its own: it may be a nested bar's move
    log.write("next\n")
    log.write("last")
    log.write("\n")
    log.finish()
    assert out.getvalue() == "a message\nnext\nlast\n"


def test_the_sbert_log_of_issue_50():
    """The e-mail run's stderr before the fix: the chunk bar turned into a line at each of SBERT's
    redraws, every ``Batches`` state a line ending in ``\\x1b[A``."""
    out = io.StringIO()
    log = ProgressLines(out, interval=10.0, clock=clock(2.5))
    log.write("\rembedding (sbert):   0%|          | 0/1 [00:00<?, ?chunk/s]")
    for k in range(20):
        log.write("\n")
        log.write(f"\rBatches: {k * 5:3d}%|          | {k}/19 [00:0{k % 10}<?, ?it/s]")
        log.write("\x1b[A")
    log.write("\rBatches: 100%|##########| 19/19 [00:50<00:00,  2.6it/s]")  # leave=True: redrawn on row 0
    log.write("\n")
    log.write("\r                                                            \r")  # the chunk bar cleared
    log.finish()
    lines = out.getvalue().splitlines()
    assert "\x1b" not in out.getvalue() and not any(line.startswith("embedding") for line in lines)
    assert lines[-1].startswith("Batches: 100%") and 4 <= len(lines) <= 7, lines
