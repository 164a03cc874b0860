"""A run killed mid-chunk resumes to the uninterrupted run's assignments (issue 51, item 5).

Unlike ``test_out_of_core.py``'s kill, which the process deals itself at a chosen point, this one
comes from outside, as a user's Ctrl-\\ or the kernel's OOM killer would: a real ``python -m
pipeline`` out of core, its chunks slowed (so the pass lasts seconds), is sent SIGKILL once the
first finished chunk file is on disk, i.e. while a later chunk is being computed. The rerun
reuses the chunks the killed run finished and writes the same ``assignments.parquet`` (and
trees) as a run that was never interrupted.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
CHUNKS = 40
SLOW = r'''
import runpy, sys, time

import pipeline.app.execution.chunk_map as chunk_map

compute = chunk_map.ChunkTask.compute
def slow(self, rows, item):  # the same work, 0.15 s later: the pass lasts seconds
    time.sleep(0.15)
    return compute(self, rows, item)
chunk_map.ChunkTask.compute = slow
sys.argv = ["pipeline", *sys.argv[1:]]
runpy.run_module("pipeline", run_name="__main__", alter_sys=True)
'''


def test_a_run_killed_mid_chunk_resumes_to_the_uninterrupted_assignments(tmp_path):
    rng = np.random.default_rng(0)
    centres = rng.uniform(-10, 10, (4, 16))
    y = rng.integers(0, 4, 20_000)
    np.save(tmp_path / "X.npy", (rng.standard_normal((20_000, 16)) * 3 + centres[y]).astype(np.float32))
    (tmp_path / "slow.py").write_text(SLOW)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}

    def args(out, cache):
        return [f"paths.output_dir={tmp_path / out}", f"paths.cache_dir={tmp_path / cache}", "dataset=files",
                f"dataset.path={tmp_path / 'X.npy'}", "dataset.memory_budget=100kB",
                f"dataset.chunk_rows={20_000 // CHUNKS}", "clustering=kmeans", "clustering.n_clusters=4",
                "clustering.sample_rows=2000", "explainer=[mmdt,cart]", "report.figures=false", "report.html=false"]

    killed = subprocess.Popen([sys.executable, str(tmp_path / "slow.py"), *args("killed", "cache")], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    chunks = tmp_path / "cache" / "chunks"
    deadline = time.monotonic() + 300
    while not list(chunks.glob("*/*/*.npz")):  # wait for the first finished chunk file
        assert killed.poll() is None, killed.stderr.read()[-3000:]
        assert time.monotonic() < deadline, "no chunk file appeared"
        time.sleep(0.02)
    killed.send_signal(signal.SIGKILL)
    assert killed.wait(60) == -signal.SIGKILL
    killed.stderr.close()
    left = list(chunks.glob("*/*/*.npz"))
    assert 1 <= len(left) < CHUNKS  # killed mid-pass: some chunks finished, not all
    assert not (tmp_path / "killed" / "assignments.parquet").exists()

    resumed = subprocess.run([sys.executable, "-m", "pipeline", *args("resumed", "cache")], env=env,
                             capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    said = resumed.stdout + resumed.stderr
    assert f"{len(left)} of {CHUNKS} chunks finished by an earlier run are reused" in said, said[-2000:]
    whole = subprocess.run([sys.executable, "-m", "pipeline", *args("whole", "fresh")], env=env,
                           capture_output=True, text=True, timeout=600)
    assert whole.returncode == 0, whole.stderr[-3000:]

    a, b = (pd.read_parquet(tmp_path / d / "assignments.parquet") for d in ("resumed", "whole"))
    assert len(a) == 20_000
    pd.testing.assert_frame_equal(a, b)
    for row in ("mmdt", "cart"):
        t1, t2 = (json.loads((tmp_path / d / "trees" / f"{row}.json").read_text()) for d in ("resumed", "whole"))
        assert t1["tree"] == t2["tree"]
    assert not list(chunks.glob("*/*/*.npz"))  # the pass finished: its chunk files are gone
