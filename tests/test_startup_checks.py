"""Every command-line value is checked at start-up with a one-paragraph error (issue 16)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from pipeline.app.startup import checks
from pipeline.app.stores import status
from pipeline.validation import InvalidInputError

STAGES = ["load", "encode", "cluster", "concepts", "cavs", "project", "fit", "counterfactuals"]


def test_force_takes_only_known_stage_names():
    assert checks.check_force("encode", STAGES) == {"encode"}
    assert checks.check_force(["cluster", "fit"], STAGES) == {"cluster", "fit"}
    assert checks.check_force("all", STAGES) == {"all"}
    with pytest.raises(InvalidInputError, match=r"\+force=bogus: no such stage\. Stages that can be forced: load, "
                                                r"encode, cluster"):
        checks.check_force("bogus", STAGES)


@pytest.mark.parametrize("value", [0, -1, "abc", 2.5, True])
def test_threads_must_be_a_positive_integer_or_null(value):
    with pytest.raises(InvalidInputError, match="threads=.* integer >= 1, or threads=null"):
        checks.check_threads(value)
    checks.check_threads(None)
    checks.check_threads(4)


@pytest.mark.parametrize("n", [-5, 0, 1, 2, 3])
def test_tiny_or_negative_subsample_is_refused(n):
    with pytest.raises(InvalidInputError, match=f"dataset.n_samples={n}"):
        checks.check_sizes({"dataset": {"n_samples": n}, "clustering": {"n_clusters": None}})


def test_subsample_needs_two_samples_per_cluster():
    with pytest.raises(InvalidInputError, match="n_samples >= 10"):
        checks.check_sizes({"dataset": {"n_samples": 6}, "clustering": {"n_clusters": 5}})
    checks.check_sizes({"dataset": {"n_samples": 10}, "clustering": {"n_clusters": 5}})
    with pytest.raises(InvalidInputError, match="2 samples for 3 clusters"):
        checks.check_cluster_sizes(2, 3)


def test_directories_must_be_creatable(tmp_path):
    checks.check_directories({"cache_dir": str(tmp_path / "a" / "b")})
    assert not (tmp_path / "a").exists()  # nothing is created by the check
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(InvalidInputError, match=r"paths.cache_dir=.*file/c cannot be used: .* PIPELINE_CACHE_DIR"):
        checks.check_directories({"cache_dir": str(blocker / "c")})


def test_unconvertible_environment_value_is_one_paragraph(monkeypatch):
    from pipeline.app.configuration.config import compose_config

    monkeypatch.setenv("PIPELINE_THREADS", "abc")
    cfg = compose_config(["paths.output_dir=/tmp/x"])
    with pytest.raises(InvalidInputError, match="threads is invalid .*PIPELINE_THREADS='abc'"):
        checks.resolve_config(cfg)


def test_status_of_a_dead_process_reads_interrupted(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    running = {**status.running_status(), "pid": proc.pid, "pid_start": status._start_ticks(proc.pid)}
    assert status.effective_status(running) == "running"
    proc.kill()
    proc.wait()
    assert status.effective_status(running) == "interrupted"
    assert status.effective_status({**running, "host": "elsewhere"}) == "running"  # cannot tell: unchanged
    mine = status.running_status()
    assert status.effective_status(mine) == "running"
    assert status.effective_status({**mine, "pid_start": (mine["pid_start"] or 0) + 1}) == "interrupted"  # pid reused


def test_mark_interrupted_rewrites_dead_runs_only(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    dead = {**status.running_status(), "pid": proc.pid}
    alive = status.running_status()
    paths = {name: tmp_path / rel / "status.json" for name, rel in
             {"dead": "runs/2026-01-01/10-00-00", "alive": "runs/2026-01-01/10-00-01",
              "job": "multiruns/2026-01-01/10-00-02/0", "ok": "runs/2026-01-01/10-00-03"}.items()}
    contents = {"dead": dead, "alive": alive, "job": dead, "ok": {"status": "ok"}}
    for name, path in paths.items():
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps(contents[name]))
    changed = status.mark_interrupted(tmp_path)
    assert sorted(changed) == sorted([paths["dead"], paths["job"]])
    states = {name: json.loads(p.read_text())["status"] for name, p in paths.items()}
    assert states == {"dead": "interrupted", "alive": "running", "job": "interrupted", "ok": "ok"}


def test_collect_reports_a_killed_job_as_interrupted(tmp_path):
    from pipeline.app.report.sweep_results import read_status

    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    job = tmp_path / "0"
    job.mkdir()
    (job / "status.json").write_text(json.dumps({**status.running_status(), "pid": proc.pid}))
    got = read_status(job)
    assert got["status"] == "interrupted" and "killed" in got["error"]
