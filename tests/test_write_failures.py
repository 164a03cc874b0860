"""Issue 29, item 5: a full disk (or any failed write) ends a run with one `error:` paragraph that
names the directory and the bytes needed, status "failed", no temporary files, a consistent cache.

The runs are real `python -m pipeline` processes whose writes are failed by a small wrapper
(``open`` raises ``OSError(ENOSPC)`` for matching paths), so nothing needs a full file system.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pipeline.app.stores.cache import StageCache
from pipeline.app.report.writer import write_final_status
from pipeline.app.stores.status import remove_stale_temporaries, running_status
from pipeline.app.stores.writing import WriteFailedError, atomic_write

ROOT = Path(__file__).resolve().parents[1]
FAST = ["dataset=iris", "explainer=[cart]", "report.summary=false"]

WRAPPER = '''
import builtins, errno, os, runpy, sys
MATCH, ALLOW = os.environ["FAKE_FULL_MATCH"], int(os.environ.get("FAKE_FULL_ALLOW", "0"))
seen = [0]
_open = builtins.open
def full_open(file, mode="r", *args, **kwargs):
    if any(c in mode for c in "wax+") and MATCH in os.fspath(file):
        seen[0] += 1
        if seen[0] > ALLOW:
            raise OSError(errno.ENOSPC, "No space left on device", os.fspath(file))
    return _open(file, mode, *args, **kwargs)
builtins.open = full_open
sys.argv = ["pipeline", *sys.argv[1:]]
runpy.run_module("pipeline", run_name="__main__", alter_sys=True)
'''


def run(tmp_path: Path, *args: str, match: str | None = None, allow: int = 0):
    env = {**os.environ, "PIPELINE_CACHE_DIR": str(tmp_path / "cache"), "PIPELINE_LOG_DIR": str(tmp_path / "logs"),
           "PIPELINE_MODELS_DIR": str(tmp_path / "models"), "HYDRA_FULL_ERROR": "0"}
    if match is None:
        cmd = [sys.executable, "-m", "pipeline", *args]
    else:
        wrapper = tmp_path / "full_disk.py"
        wrapper.write_text(WRAPPER)
        env.update(FAKE_FULL_MATCH=match, FAKE_FULL_ALLOW=str(allow))
        cmd = [sys.executable, str(wrapper), *args]
    return subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)


def statuses(tmp_path: Path) -> list[str]:
    return [json.loads(p.read_text())["status"] for p in sorted((tmp_path / "logs").glob("runs/*/*/status.json"))]


def temporaries(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.name.endswith(".tmp") or p.name.startswith(".tmp-")]


@pytest.mark.slow
def test_output_directory_full_is_one_paragraph_and_a_failed_status(tmp_path):
    proc = run(tmp_path, *FAST, match="results.csv")
    assert proc.returncode == 1
    err = proc.stderr.strip()
    assert err.startswith("error: cannot write results.csv in ") and "Traceback" not in proc.stderr
    assert len(err.splitlines()) == 1
    assert str(tmp_path / "logs" / "runs") in err and "No space left on device" in err
    assert "it needs about" in err and "bytes" in err and "paths.log_dir" in err
    assert statuses(tmp_path) == ["failed"]
    assert not temporaries(tmp_path / "logs")
    again = run(tmp_path, *FAST)  # the next run succeeds and nothing temporary is left anywhere
    assert again.returncode == 0, again.stderr
    assert sorted(statuses(tmp_path)) == ["failed", "ok"]
    assert not temporaries(tmp_path / "logs") and not temporaries(tmp_path / "cache")


def test_status_is_failed_even_when_no_new_file_fits(tmp_path):
    """Only the first (running) status fits; every later temporary file fails: the final status is
    written in place over the old one."""
    proc = run(tmp_path, *FAST, match=".tmp", allow=1)
    assert proc.returncode == 1 and proc.stderr.startswith("error: cannot write ")
    assert "Traceback" not in proc.stderr
    assert statuses(tmp_path) == ["failed"]
    assert not temporaries(tmp_path / "logs")


@pytest.mark.slow
def test_cache_directory_full_is_one_paragraph_and_the_cache_stays_consistent(tmp_path):
    proc = run(tmp_path, *FAST, match=str(tmp_path / "cache"))
    assert proc.returncode == 1
    err = proc.stderr.strip()
    assert err.startswith("error: cannot write ") and str(tmp_path / "cache") in err and "Traceback" not in err
    assert "paths.cache_dir" in err and "cache.enabled=false" in err and len(err.splitlines()) == 1
    assert statuses(tmp_path) == ["failed"]
    assert not temporaries(tmp_path / "cache")
    assert not list((tmp_path / "cache").glob("*/*/meta.json"))  # no half-written entry
    first = run(tmp_path, *FAST)
    assert first.returncode == 0, first.stderr
    warm = run(tmp_path, *FAST)
    assert warm.returncode == 0 and "cache hit: outputs" in warm.stdout + warm.stderr  # the whole run restored


def test_stage_cache_write_failure_names_the_cache_and_leaves_nothing(tmp_path, monkeypatch):
    import pipeline.app.stores.cache as cache_module

    def full(path, artifact):
        Path(path).mkdir(parents=True)
        (Path(path) / "arrays.npz").write_bytes(b"partial")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(cache_module, "save_artifact", full)
    cache = StageCache(tmp_path / "c", enabled=True)
    with pytest.raises(WriteFailedError, match=r"cannot write the cache entry fit/k in .*c: No space left on device "
                                               r"\(it needs about 12,096 bytes"):
        cache.get_or_compute("fit", "k", lambda: {"a": np.zeros(1000)})
    assert [p.name for p in (tmp_path / "c" / "fit").iterdir()] == ["k.lock"]
    monkeypatch.undo()
    assert cache.get_or_compute("fit", "k", lambda: {"a": np.ones(3)})["a"].tolist() == [1.0, 1.0, 1.0]
    assert StageCache(tmp_path / "c", enabled=True).get_or_compute("fit", "k", lambda: None)["a"].tolist() == [1, 1, 1]


def test_atomic_write_failure_removes_its_temporary(tmp_path, monkeypatch):
    import pipeline.app.report.writer as writer

    def refuse(src, dst):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(writer.os, "replace", refuse)
    with pytest.raises(WriteFailedError, match=r"cannot write x.txt in .*: No space left on device \(it needs about "
                                               r"5 bytes, [\d,]+ bytes free there\). Free space there"):
        atomic_write(tmp_path / "x.txt", "hello")
    assert list(tmp_path.iterdir()) == []


def test_final_status_falls_back_to_writing_in_place(tmp_path, monkeypatch):
    import pipeline.app.report.writer as writer

    (tmp_path / "status.json").write_text(json.dumps({"status": "running", "pid": 1}))
    monkeypatch.setattr(writer, "write_status", lambda *a: (_ for _ in ()).throw(OSError(errno.ENOSPC, "full")))
    write_final_status(tmp_path, {"status": "failed", "error": "x", "traceback": "long " * 1000})
    assert json.loads((tmp_path / "status.json").read_text()) == {"status": "failed", "error": "x"}


def test_the_next_run_sweeps_temporaries_of_finished_runs(tmp_path):
    done = tmp_path / "runs" / "d" / "t"
    (done / "figures").mkdir(parents=True)
    (done / "status.json").write_text(json.dumps({"status": "failed"}))
    stale = [done / ".results.csv.0123abcd.tmp", done / "figures" / ".cart.png.89abcdef.tmp"]
    for p in stale:
        p.write_text("partial")
    running = tmp_path / "runs" / "d" / "u"
    running.mkdir(parents=True)
    (running / "status.json").write_text(json.dumps(running_status()))  # this (live) process
    busy = running / ".results.csv.00000000.tmp"
    busy.write_text("being written")
    removed = remove_stale_temporaries(tmp_path)
    assert sorted(removed) == sorted(stale) and busy.exists()


def test_checkpoint_write_failure_names_the_models_dir_and_keeps_nothing_half_written(tmp_path, monkeypatch):
    import torch

    from pipeline.app.stores import checkpoint

    path = tmp_path / "models" / "vade" / "k.pt"
    checkpoint.save_state(path, {"w": torch.zeros(10)}, {"encoder": "vade"})  # an earlier, complete checkpoint
    before = sorted(p.name for p in path.parent.iterdir())

    real_open = open

    class FullDisk:
        """A state file whose write stores a few bytes and then finds the disk full."""

        def __init__(self, file, mode="r", *args, **kwargs):
            self.fh = real_open(file, mode, *args, **kwargs)

        def write(self, data):
            self.fh.write(data[:7] if isinstance(data, bytes) else data)
            raise OSError(errno.ENOSPC, "No space left on device")

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.fh.close()

    monkeypatch.setattr(checkpoint, "open", FullDisk, raising=False)
    with pytest.raises(WriteFailedError, match=r"cannot write the checkpoint k.pt in .*vade: No space left on device "
                                               r"\(it needs about 8,096 bytes.*paths.models_dir"):
        checkpoint.save_state(path, {"w": torch.zeros(1000)}, {"encoder": "vade"})
    assert sorted(p.name for p in path.parent.iterdir()) == before  # the old checkpoint stays, no .tmp


def test_hydra_config_write_failure_is_one_paragraph(tmp_path):
    """Hydra saves .hydra/config.yaml before the run starts; a full disk there is no traceback either."""
    proc = run(tmp_path, *FAST, match=".hydra")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    err = proc.stderr.strip()
    assert err.startswith("error: cannot write config.yaml in ") and err.endswith("PIPELINE_LOG_DIR=<dir>).")
    assert len(err.splitlines()) == 1
    assert not list((tmp_path / "logs").rglob("config.yaml"))


def test_a_streamed_file_on_a_full_disk_is_one_paragraph_and_leaves_nothing(tmp_path):
    """atomic_write(path, writer): the writer fills the file piece by piece (assignments.parquet);
    a full disk mid-way is the same paragraph (what was written so far as the size), no temporary
    left; a cache write (fsync) names paths.cache_dir."""
    from pipeline.app.stores.cache import write_file_atomic

    def stream(fh):
        fh.write(b"x" * 1000)
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(WriteFailedError, match=r"cannot write big.parquet in .*No space left on device \(it needs "
                                               r"about 1,000 bytes"):
        atomic_write(tmp_path / "big.parquet", stream)
    assert list(tmp_path.iterdir()) == []
    written = atomic_write(tmp_path / "ok.bin", lambda fh: fh.write(b"abc"), fsync=True)
    assert written.read_bytes() == b"abc"
    write_file_atomic(tmp_path / "c.npz", b"123", suffix=".part")
    assert (tmp_path / "c.npz").read_bytes() == b"123" and not list(tmp_path.glob(".*"))
