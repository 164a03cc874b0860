"""Sweeps beyond one machine: Hydra's submitit launcher (local executor = the SLURM code path)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

pytest.importorskip("hydra_plugins.hydra_submitit_launcher")

FAST = ["experiment=raw_features", "dataset=iris", "report.figures=false", "report.summary=false"]


def pipeline(tmp_path: Path, *args: str, module: str = "pipeline"):
    env = {**os.environ, "PIPELINE_CACHE_DIR": str(tmp_path / "cache"), "PIPELINE_LOG_DIR": str(tmp_path / "logs"),
           "PIPELINE_MODELS_DIR": str(tmp_path / "models"), "HYDRA_FULL_ERROR": "0"}
    return subprocess.run([sys.executable, "-m", module, *args], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=900)


@pytest.mark.slow
def test_submitit_local_two_job_sweep_shares_the_cache_then_collect(tmp_path):
    proc = pipeline(tmp_path, "-m", "hydra/launcher=submitit_local", "explainer=cart,mmdt", *FAST)
    assert proc.returncode == 0, proc.stderr[-3000:]
    sweeps = list((tmp_path / "logs" / "multiruns").glob("*/*"))
    assert len(sweeps) == 1  # the default ${unique_dir:} sweep directory, the same one in both jobs
    sweep = sweeps[0]
    assert (sweep / ".submitit").is_dir() and (sweep / "multirun.yaml").is_file()
    events = []
    for job in ("0", "1"):
        status = json.loads((sweep / job / "status.json").read_text())
        assert status["status"] == "ok"
        events += [(e["stage"], e["hit"]) for e in status["cache"]]
    for stage in ("load", "encode", "cluster"):  # computed by one job, read by the other
        assert sorted(hit for s, hit in events if s == stage) == [False, True], events
    collected = pipeline(tmp_path, str(sweep), module="pipeline.collect")
    assert collected.returncode == 0, collected.stderr
    table = pd.read_csv(sweep / "collected.csv")
    assert sorted(set(table["explainer"])) == ["cart", "mmdt", "reference"] and set(table["job"]) == {0, 1}
