"""The command line: `python -m pipeline` single runs, errors, multirun sweeps, collection.

These start real processes (Hydra's @main, launchers), so they are the slowest pipeline tests;
each run uses tiny data (iris / wine, one explainer, no figures).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]
FAST = ["explainer=[cart]", "report.figures=false", "report.summary=false"]


def pipeline(tmp_path: Path, *args: str, module: str = "pipeline", env: dict | None = None, timeout: int = 600):
    cmd = [sys.executable, "-m", module, *args]
    full_env = {**os.environ, "PIPELINE_CACHE_DIR": str(tmp_path / "cache"), "PIPELINE_LOG_DIR": str(tmp_path / "logs"),
                "PIPELINE_MODELS_DIR": str(tmp_path / "models"),
                "HYDRA_FULL_ERROR": "0", **(env or {})}
    return subprocess.run(cmd, cwd=tmp_path, env=full_env, capture_output=True, text=True, timeout=timeout)


def test_single_run_prints_where_it_wrote_results(tmp_path):
    proc = pipeline(tmp_path, "dataset=iris", "explainer=[mmdt,cart]", "report.figures=false")
    assert proc.returncode == 0, proc.stderr
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("results written to ")][-1]
    results = Path(line.removeprefix("results written to "))
    assert results.parent.parent.parent == tmp_path / "logs" / "runs"  # env var PIPELINE_LOG_DIR honoured
    table = pd.read_csv(results)
    assert list(table["explainer"]) == ["reference", "mmdt", "cart"]
    assert "mmdt rules:" in proc.stdout  # the terminal summary
    assert (results.parent / ".hydra" / "config.yaml").exists()


def test_bad_input_is_one_paragraph_and_nonzero_exit(tmp_path):
    proc = pipeline(tmp_path, "dataset=clustbench", f"paths.benchmark_dir={tmp_path}/missing", *FAST)
    assert proc.returncode != 0
    assert proc.stderr.startswith("error: clustering benchmark 'sipu/r15'") and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not list((tmp_path / "logs").rglob("results.csv"))


def test_two_job_multirun_with_a_failure_and_collect(tmp_path):
    sweep = tmp_path / "sweep"
    proc = pipeline(tmp_path, "-m", "dataset=iris,clustbench", f"paths.benchmark_dir={tmp_path}/missing",
                    f"hydra.sweep.dir={sweep}", *FAST)
    assert proc.returncode != 0  # the sweep reports the failed job...
    assert (sweep / "0" / "results.csv").exists()  # ...after the other job finished
    assert '"failed"' in (sweep / "1" / "status.json").read_text()
    collected = pipeline(tmp_path, str(sweep), module="pipeline.collect")
    assert collected.returncode == 1 and "job 1 failed: InvalidInputError: clustering benchmark" in collected.stderr
    table = pd.read_csv(sweep / "collected.csv")
    assert list(table["job"]) == [0, 0] and list(table["dataset_override"]) == ["iris", "iris"]


def test_fail_fast_stops_at_first_failure(tmp_path):
    sweep = tmp_path / "sweep"
    proc = pipeline(tmp_path, "-m", "hydra/sweeper=fail_fast", "dataset=clustbench,iris",
                    f"paths.benchmark_dir={tmp_path}/missing", f"hydra.sweep.dir={sweep}", *FAST)
    assert proc.returncode != 0 and (sweep / "0" / "status.json").exists()
    assert not (sweep / "1").exists()  # never launched


@pytest.mark.slow
def test_joblib_launcher_two_parallel_jobs_and_collect(tmp_path):
    sweep = tmp_path / "sweep"
    proc = pipeline(tmp_path, "-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", "dataset=iris,wine",
                    f"hydra.sweep.dir={sweep}", *FAST)
    assert proc.returncode == 0, proc.stderr
    collected = pipeline(tmp_path, str(sweep), module="pipeline.collect")
    assert collected.returncode == 0, collected.stderr
    table = pd.read_csv(sweep / "collected.csv")
    assert sorted(set(table["dataset"])) == ["iris", "wine"] and len(table) == 4


@pytest.mark.slow
def test_default_run_offline(tmp_path):
    # trains VaDE from scratch: 4 min on a quiet 2-core machine, past 10 min at load 6
    proc = pipeline(tmp_path, "report.figures=false", timeout=1800)
    assert proc.returncode == 0, proc.stderr
    table = pd.read_csv(next((tmp_path / "logs").rglob("results.csv")))
    # The deep default: 5,000 real MNIST digits -> VaDE -> GMM on the latents -> concepts measured on
    # the pixels (mnist_measured) -> concept trees.
    assert list(table["explainer"]) == ["reference", "concept_mmdt", "concept_cart"]
    assert table["dataset"][0] == "mnist" and table["method"][0] == "gmm"
    assert table.set_index("explainer").loc["reference", "ari"] > 0.4  # VaDE finds the digits
    assert "Table 2" in proc.stdout and "→ cluster" in proc.stdout  # the row and the concept rules
    assert "†" not in proc.stdout and "‡" not in proc.stdout  # no concept restates the classes
    assert "measured: loop" in proc.stdout or "measured: " in proc.stdout  # rules checked on the pixels
    assert "random direction" in proc.stdout  # completeness beside random directions


@pytest.mark.slow
def test_non_editable_install_ships_the_config(tmp_path):
    """Build a wheel, install it into a plain directory and run from elsewhere without the source tree."""
    wheel_dir, target, source = tmp_path / "wheel", tmp_path / "site", tmp_path / "source"
    # Build from a copy so setuptools' build/ and egg-info never land in the working tree.
    shutil.copytree(ROOT / "src", source / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheel_dir), str(source)]
    build = subprocess.run([*cmd, "--no-build-isolation"], capture_output=True, text=True, timeout=600)
    if build.returncode != 0:  # the venv's setuptools/wheel too old: build in pip's isolated env (PyPI)
        build = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert build.returncode == 0, build.stderr
    wheel = next(wheel_dir.glob("*.whl"))
    install = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target),
                              str(wheel)], capture_output=True, text=True, timeout=600)
    assert install.returncode == 0, install.stderr
    assert (target / "pipeline" / "conf" / "config.yaml").exists()
    assert (target / "pipeline" / "conf" / "explainer" / "mmdt.yaml").exists()
    env = {"PYTHONPATH": str(target), "PIPELINE_BENCHMARK_DIR": str(ROOT.parent / "shared" / "data" /
                                                                     "clustering-benchmarks")}
    proc = subprocess.run([sys.executable, "-P", "-m", "pipeline", "dataset=iris", *FAST], cwd=tmp_path,
                          env={**os.environ, **env, "PIPELINE_LOG_DIR": str(tmp_path / "logs"),
                               "PIPELINE_CACHE_DIR": str(tmp_path / "cache")},
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert str(target / "pipeline") in subprocess.run(
        [sys.executable, "-P", "-c", "import pipeline; print(pipeline.__file__)"], cwd=tmp_path,
        env={**os.environ, **env}, capture_output=True, text=True).stdout
