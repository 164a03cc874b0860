"""Settings checked before work starts (issue 51, item 3): chunk sizes, memory budgets, every
``compute=dask`` setting (a Dask address must answer: the only connection made is to the loopback
address the test gives), the worker cap; ``python -m pipeline.explain`` refusing overrides it does
not read and an ``output=`` that cannot be created. Each one paragraph, nothing written."""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipeline.app.configuration.config import compose_config
from pipeline.app.running.runner import run
from pipeline.app.startup.settings_checks import (check_address, check_compute_settings, check_dataset_settings,
                                                  worker_count)
from pipeline.validation import InvalidInputError

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT / "src")}


def closed_loopback_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


BAD = [
    ("dataset.chunk_rows=0", r"dataset\.chunk_rows=0: a chunk holds at least one row"),
    ("dataset.chunk_rows=-5", r"dataset\.chunk_rows=-5: a chunk holds at least one row"),
    ("dataset.memory_budget=0", r"dataset\.memory_budget=0: the memory budget must be positive"),
    ("dataset.memory_budget=lots", r"dataset\.memory_budget='lots': give a size"),
    ("compute.n_workers=0", r"compute\.n_workers=0: a Dask LocalCluster needs at least one worker"),
    ("compute.n_workers=-1", r"compute\.n_workers=-1: a Dask LocalCluster needs at least one worker"),
    ("compute.threads_per_worker=0", r"compute\.threads_per_worker=0: a worker needs at least one thread"),
    ("compute.memory_limit=1KB", r"compute\.memory_limit='1KB' \(1000 bytes\) is below what a Dask worker"),
    ("compute.timeout=0", r"compute\.timeout=0: seconds to wait for the scheduler must be a positive number"),
    ("compute.retries=-1", r"compute\.retries=-1: a task is re-run 0 or more times"),
    ("compute.address=nowhere", r"compute\.address=nowhere: not a scheduler address"),
]


@pytest.mark.parametrize("setting, message", BAD)
def test_settings_that_cannot_work_are_refused_before_any_stage(tmp_path, setting, message):
    out = tmp_path / "run"
    extra = ["compute=dask"] if setting.startswith("compute.") else []
    cfg = compose_config(["dataset=iris", *extra, setting, f"paths.output_dir={out}",
                          f"paths.cache_dir={tmp_path / 'cache'}"])
    with pytest.raises(InvalidInputError, match=message) as info:
        run(cfg)
    assert "\n" not in str(info.value)
    assert not out.exists() and not (tmp_path / "cache").exists()  # nothing started, nothing half-written


def test_an_unreachable_dask_address_is_refused_fast(tmp_path):
    port = closed_loopback_port()
    cfg = compose_config(["dataset=iris", "compute=dask", f"compute.address=tcp://127.0.0.1:{port}",
                          f"paths.output_dir={tmp_path / 'run'}", f"paths.cache_dir={tmp_path / 'cache'}"])
    start = time.perf_counter()
    with pytest.raises(InvalidInputError, match=rf"compute\.address=tcp://127\.0\.0\.1:{port}: no Dask scheduler "
                                                r"answers there \(ConnectionRefusedError"):
        run(cfg)
    assert time.perf_counter() - start < 10


def test_a_listening_address_passes_and_only_it_is_contacted():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        port = server.getsockname()[1]
        check_address(f"tcp://127.0.0.1:{port}", timeout=2)
        conn, peer = server.accept()  # the one connection the check made, to the address it was given
        conn.close()
        assert peer[0] == "127.0.0.1"
    check_address("inproc://whatever/1:2")  # other transports are left to Dask


def test_the_worker_count_is_capped_by_the_machine_with_a_log_line(caplog):
    from pipeline.app.startup.settings_checks import available_cores

    cores = available_cores()
    with caplog.at_level(logging.WARNING, logger="pipeline.app.startup.settings_checks"):
        assert worker_count({"n_workers": 1000}) == cores
        check_compute_settings({"_target_": "pipeline.app.execution.compute.DaskCompute", "name": "dask",
                                "n_workers": 1000})  # said when the run is planned
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 2 and all(f"compute.n_workers=1000 is more than this machine holds ({cores} cores" in s
                                  and f"capped at {cores} workers" in s for s in said)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="pipeline.app.startup.settings_checks"):
        assert worker_count({"n_workers": 1, "threads_per_worker": 1}) == 1
        assert worker_count({"n_workers": 3, "threads_per_worker": 10 * cores}) == 1
        assert worker_count({"n_workers": 1000, "memory_limit": "1TB"}) == 1
        assert worker_count({"n_workers": 1000}, quiet=True) == cores
    assert len(caplog.records) == 2


def test_a_memory_budget_beyond_the_machine_is_warned_about(caplog):
    with caplog.at_level(logging.WARNING, logger="pipeline.app.startup.settings_checks"):
        check_dataset_settings({"memory_budget": "1000TB"})
    assert "more than this machine's memory" in caplog.text


# ------------------------------------------------------------------ python -m pipeline.explain
@pytest.fixture(scope="module")
def iris_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("iris")
    run(compose_config(["dataset=iris", f"paths.output_dir={tmp / 'run'}", f"paths.cache_dir={tmp / 'cache'}",
                        "report.figures=false", "report.html=false", "report.summary=false"]))
    return tmp / "run"


def explain(run_dir, tmp_path, *args):
    return subprocess.run([sys.executable, "-m", "pipeline.explain", str(run_dir), "dataset=iris",
                           f"paths.cache_dir={tmp_path / 'cache'}", *args], env=ENV, cwd=tmp_path,
                          capture_output=True, text=True)


@pytest.mark.parametrize("arg, words", [
    ("explainer=[cart]", "explainer=[cart]: python -m pipeline.explain does not read explainer: it sets the run's trees"),
    ("clustering=kmeans", "does not read clustering: it sets the run's reference clustering, which the saved explainer "
                          "fixes"),
    ("encoder.batch_size=7", "does not read encoder.batch_size"),
    ("seed=7", "seed=7: python -m pipeline.explain reads seed only to draw dataset.n_samples rows"),
    ("+force=load", "does not read force: nothing reads it"),
    ("latents=maybe", "latents=maybe: give latents=true or latents=false"),
    ("positional=sure", "positional=sure: give positional=true or positional=false"),
    ("show=many", "show=many: give the number of rows to print"),
    ("dataset.chunk_rows=0", "dataset.chunk_rows=0: a chunk holds at least one row"),
])
def test_the_command_refuses_what_it_does_not_read_listing_what_it_does(iris_run, tmp_path, arg, words):
    from pipeline.app.explainer.explain_options import READ

    proc = explain(iris_run, tmp_path, arg, f"output={tmp_path / 'out'}")
    assert proc.returncode == 1 and proc.stderr.startswith("error: ") and "Traceback" not in proc.stderr
    assert words in proc.stderr, proc.stderr
    if "does not read" in words:
        assert READ in proc.stderr  # the options it does read
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".out*"))


def test_an_output_that_cannot_be_created_is_one_line(iris_run, tmp_path):
    (tmp_path / "afile").write_text("x")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    for output, words in [(tmp_path / "afile", "is a file, not a folder"),
                          (tmp_path / "afile" / "sub", f"cannot be created: {tmp_path / 'afile'} is a file"),
                          (tmp_path / "full", "exists and is not empty")]:
        proc = explain(iris_run, tmp_path, f"output={output}")
        assert proc.returncode == 1 and words in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
        assert proc.stderr.count("\n") == 1  # one line
    ok = explain(iris_run, tmp_path, "seed=3", "dataset.n_samples=30", f"output={tmp_path / 'empty'}")
    assert ok.returncode == 0, ok.stderr  # seed with dataset.n_samples: read (which rows are drawn)
    assert sorted(p.name for p in (tmp_path / "empty").iterdir()) == ["explain.json", "explanations.parquet",
                                                                    "generalisation.csv", "report.html"]
