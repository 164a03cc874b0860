"""Killed runs: SIGKILL at every stage boundary, inside a cache write and in the middle of the
encoder's training; each re-run picks up where the last one stopped, and the final results
and weights equal an uninterrupted run's, with no temporary files left (issue 16).

The runs are real ``python -m pipeline`` processes; a small launcher makes the process SIGKILL
itself at an exact point (after a stage's cache entry is stored, after a cache entry is on
disk but before its rename, after the n-th epoch checkpoint), which an outside ``kill`` could
only hit by chance.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

LAUNCHER = r'''
import os, runpy, signal, sys

def die():
    os.kill(os.getpid(), signal.SIGKILL)

kind, _, arg = os.environ.get("KILL_AT", "").partition(":")
if kind in ("after", "during"):
    import pipeline.app.stores.cache as cache
    if kind == "after":  # the stage's entry is stored: a stage boundary
        original_write = cache.StageCache._write
        def _write(self, final, artifact):
            original_write(self, final, artifact)
            if final.parent.name == arg:
                die()
        cache.StageCache._write = _write
    else:  # the entry is complete in its temporary directory, not yet renamed into place
        original_save = cache.save_artifact
        def save_artifact(path, artifact):
            original_save(path, artifact)
            if path.parent.name == arg:
                die()
        cache.save_artifact = save_artifact
elif kind == "epoch":  # mid-training, right after the epoch checkpoint of epoch <arg>
    import pipeline.app.stores.checkpoint as checkpoint
    original_state = checkpoint.save_state
    def save_state(path, state, sidecar):
        sha = original_state(path, state, sidecar)
        if ".partial" in str(path) and int(state.get("epoch", -1)) == int(arg):
            die()
        return sha
    checkpoint.save_state = save_state
sys.argv = ["pipeline", *sys.argv[1:]]
runpy.run_module("pipeline", run_name="__main__", alter_sys=True)
'''

CONFIG = ["dataset=digits", "dataset.n_samples=400", "encoder=vade", "encoder.device=cpu", "encoder.params.hidden_dims=[32]",
          "encoder.params.latent_dim=4", "encoder.params.n_clusters=10", "encoder.params.pretrain_epochs=2",
          "encoder.params.epochs=5", "clustering=encoder", "concepts=none",
          "explainer=[mmdt,cart]", "report.figures=false", "report.summary=false", "report.html=false", "threads=1"]

# where each run of the chain dies
KILLS = ["after:load", "epoch:2", "during:encode", "after:cluster", "after:fit"]


def launch(tmp_path: Path, base: Path, kill_at: str = ""):
    env = {**os.environ, "PIPELINE_CACHE_DIR": str(base / "cache"), "PIPELINE_MODELS_DIR": str(base / "models"),
           "PIPELINE_LOG_DIR": str(base / "logs"), "KILL_AT": kill_at, "HYDRA_FULL_ERROR": "1"}
    launcher = tmp_path / "launcher.py"
    launcher.write_text(LAUNCHER)
    return subprocess.run([sys.executable, str(launcher), *CONFIG], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=600)


def results(base: Path) -> pd.DataFrame:
    newest = max((base / "logs" / "runs").glob("*/*/results.csv"), key=lambda p: p.stat().st_mtime)
    df = pd.read_csv(newest)
    return df[[c for c in df.columns if "seconds" not in c]]


def final_checkpoint(base: Path) -> Path:
    (path,) = [p for p in (base / "models" / "vade").glob("*.pt") if ".partial" not in p.name]
    return path


def final_weights(base: Path) -> dict:
    import torch

    return torch.load(final_checkpoint(base), weights_only=True)["module"]


def trees(base: Path) -> dict:
    """The run's tree files (rules, dot, JSON without the timing), name -> content."""
    newest = max((base / "logs" / "runs").glob("*/*/results.csv"), key=lambda p: p.stat().st_mtime).parent
    out = {}
    for path in sorted((newest / "trees").glob("*")):
        if path.suffix == ".json":
            doc = json.loads(path.read_text())
            doc.pop("fit_seconds", None)
            out[path.name] = doc
        else:
            out[path.name] = path.read_bytes()
    return out


@pytest.mark.slow
def test_killed_runs_resume_to_the_uninterrupted_result(tmp_path):
    import torch

    reference = tmp_path / "reference"
    proc = launch(tmp_path, reference)
    assert proc.returncode == 0, proc.stderr[-3000:]

    chain = tmp_path / "chain"
    for point in KILLS:
        proc = launch(tmp_path, chain, point)
        assert proc.returncode == -signal.SIGKILL, (point, proc.returncode, proc.stderr[-3000:])
        if point == "during:encode":  # the entry's temporary directory is what the kill left
            assert list((chain / "cache" / "encode").glob(".tmp-*"))
    proc = launch(tmp_path, chain)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "resuming vade training from epoch 2" in proc.stderr + "".join(
        p.read_text() for p in (chain / "logs" / "runs").glob("*/*/*.log"))

    pd.testing.assert_frame_equal(results(chain), results(reference))
    ours, theirs = final_weights(chain), final_weights(reference)
    assert ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in ours)
    # the same bytes, not only the same tensors (issue 26): every cache key downstream matches
    assert final_checkpoint(chain).read_bytes() == final_checkpoint(reference).read_bytes()
    assert trees(chain) == trees(reference) != {}

    leftovers = [p for root in (chain / "cache", chain / "models") for p in root.rglob("*")
                 if p.name.startswith((".tmp-", ".old-")) or p.name.endswith(".tmp") or ".partial" in p.name]
    assert leftovers == []
    statuses = sorted(json.loads(p.read_text())["status"] for p in (chain / "logs" / "runs").glob("*/*/status.json"))
    assert statuses == ["interrupted"] * len(KILLS) + ["ok"]
