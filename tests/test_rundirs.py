"""Run directories never collide: two runs launched in the same second keep both results (issue 16)."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from omegaconf import OmegaConf

from pipeline.app.configuration.config import compose_config
from pipeline.app.configuration.rundir import claim_directory

FAST = ["experiment=raw_features", "explainer=[cart]", "report.figures=false", "report.summary=false"]


def _claim(base):
    return claim_directory(base)


def test_parallel_claims_of_one_name_get_distinct_directories(tmp_path):
    base = tmp_path / "runs" / "16-28-21"
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        claimed = pool.map(_claim, [str(base)] * 12)
    assert len(set(claimed)) == 12 and all(Path(p).is_dir() for p in claimed)
    assert str(base) in claimed and str(base) + "_11" in claimed


def test_run_dir_is_resolved_once_per_config(tmp_path):
    cfg = compose_config([f"paths.log_dir={tmp_path}"], return_hydra_config=True)
    first, again = str(cfg.hydra.run.dir), str(cfg.hydra.run.dir)
    assert first == again and Path(first).is_dir() and first.startswith(str(tmp_path / "runs"))
    other = compose_config([f"paths.log_dir={tmp_path}"], return_hydra_config=True)
    assert str(other.hydra.run.dir) != first or OmegaConf.is_missing(other.hydra.run, "dir")


@pytest.mark.slow
def test_two_runs_launched_in_the_same_second_keep_both_results(tmp_path):
    """Both runs ask for the same directory name (as two launches in one second do)."""
    env = {**os.environ, "PIPELINE_CACHE_DIR": str(tmp_path / "cache"), "PIPELINE_LOG_DIR": str(tmp_path / "logs"),
           "PIPELINE_MODELS_DIR": str(tmp_path / "models")}
    same = 'hydra.run.dir="${unique_dir:${paths.log_dir}/runs/16-28-21}"'
    procs = [subprocess.Popen([sys.executable, "-m", "pipeline", f"dataset={name}", *FAST, same], cwd=tmp_path,
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for name in ("iris", "wine")]
    outputs = [p.communicate(timeout=600) for p in procs]
    assert all(p.returncode == 0 for p in procs), outputs
    dirs = sorted((tmp_path / "logs" / "runs").iterdir())
    assert [d.name for d in dirs] == ["16-28-21", "16-28-21_1"]
    seen = set()
    for d in dirs:
        override = [o for o in OmegaConf.load(d / ".hydra" / "overrides.yaml") if o.startswith("dataset=")][0]
        dataset = override.split("=")[1]
        assert set(pd.read_csv(d / "results.csv")["dataset"]) == {dataset}  # results beside their own config
        seen.add(dataset)
    assert seen == {"iris", "wine"}
    printed = {line for out, _ in outputs for line in out.splitlines() if line.startswith("results written to")}
    assert len(printed) == 2
