"""A damaged cache entry costs a recompute and a warning, never a failed run (issue 16)."""

from __future__ import annotations

import json
import logging
import os

import numpy as np
import pytest

from pipeline.app.stores.cache import CorruptArtifactError, StageCache, load_artifact, save_artifact


def _artifact(seed: int = 0) -> dict:
    rng = np.random.RandomState(seed)
    return {"Z": rng.rand(200, 8).astype(np.float32), "labels": rng.randint(0, 3, 200), "names": ["a", "b"], "k": 3}


def truncate_npz(entry):
    path = entry / "arrays.npz"
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def damage_meta(entry):
    (entry / "meta.json").write_text('{"names": ["a", "b"], "k": ')


def flip_64_bytes(entry):
    path = entry / "arrays.npz"
    data = bytearray(path.read_bytes())
    mid = len(data) // 2
    data[mid:mid + 64] = bytes(b ^ 0xFF for b in data[mid:mid + 64])
    path.write_bytes(bytes(data))


def remove_meta(entry):  # a partial entry
    (entry / "meta.json").unlink()
    (entry / "manifest.json").unlink()


def damage_manifest(entry):
    (entry / "manifest.json").write_text("{not json")


@pytest.mark.parametrize("damage", [truncate_npz, damage_meta, flip_64_bytes, remove_meta, damage_manifest])
def test_corrupt_entry_is_quarantined_and_recomputed(tmp_path, caplog, damage):
    cache = StageCache(tmp_path)
    calls = []

    def compute():
        calls.append(1)
        return _artifact()

    first = cache.get_or_compute("encode", "abc123", compute)
    damage(tmp_path / "encode" / "abc123")
    with caplog.at_level(logging.WARNING, logger="pipeline.app.stores.cache"):
        again = StageCache(tmp_path).get_or_compute("encode", "abc123", compute)
    assert len(calls) == 2  # recomputed, not failed
    np.testing.assert_array_equal(again["Z"], first["Z"])
    message = " ".join(r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
    assert "'encode'" in message and "abc123" in message and "quarantine" in message
    moved = list((tmp_path / ".quarantine" / "encode").iterdir())
    assert len(moved) == 1 and moved[0].name.startswith("abc123-")
    # the repaired entry is a normal hit afterwards, and the stage directory has no leftovers
    third = StageCache(tmp_path)
    third.get_or_compute("encode", "abc123", compute)
    assert len(calls) == 2 and third.events[-1].hit
    assert sorted(p.name for p in (tmp_path / "encode").iterdir()) == ["abc123", "abc123.lock"]


def test_recovery_is_recorded_in_the_events(tmp_path):
    cache = StageCache(tmp_path)
    cache.get_or_compute("cluster", "k", _artifact)
    flip_64_bytes(tmp_path / "cluster" / "k")
    again = StageCache(tmp_path)
    again.get_or_compute("cluster", "k", _artifact)
    assert not again.events[-1].hit and "sha256" in again.events[-1].recovered


def test_manifest_lists_sizes_and_checksums(tmp_path):
    save_artifact(tmp_path / "a", _artifact())
    manifest = json.loads((tmp_path / "a" / "manifest.json").read_text())
    assert set(manifest["files"]) == {"arrays.npz", "meta.json"}
    for name, entry in manifest["files"].items():
        assert entry["size"] == os.path.getsize(tmp_path / "a" / name) and len(entry["sha256"]) == 64
    flip_64_bytes(tmp_path / "a")
    with pytest.raises(CorruptArtifactError, match="sha256"):
        load_artifact(tmp_path / "a")


def test_entry_without_manifest_still_loads(tmp_path):
    """Entries written before manifests existed stay usable; parse errors still count as corrupt."""
    save_artifact(tmp_path / "a", _artifact())
    (tmp_path / "a" / "manifest.json").unlink()
    assert load_artifact(tmp_path / "a")["k"] == 3
    truncate_npz(tmp_path / "a")
    with pytest.raises(CorruptArtifactError, match="could not be read"):
        load_artifact(tmp_path / "a")


def test_writes_are_fsynced_before_the_rename(tmp_path, monkeypatch):
    import pipeline.app.stores.cache as mod

    log = []
    real_fsync, real_rename = os.fsync, os.rename
    monkeypatch.setattr(mod.os, "fsync", lambda fd: log.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
                        or real_fsync(fd))
    monkeypatch.setattr(mod.os, "rename", lambda a, b: log.append(("rename", str(a))) or real_rename(a, b))
    StageCache(tmp_path).get_or_compute("s", "k", _artifact)
    rename = next(i for i, (op, _) in enumerate(log) if op == "rename")
    synced = {os.path.basename(p) for op, p in log[:rename] if op == "fsync"}
    assert {"arrays.npz", "meta.json", "manifest.json"} <= synced
    assert any(name.startswith(".tmp-k-") for name in synced)  # the directory itself
    assert log[rename + 1:] and log[rename + 1][0] == "fsync"  # then the parent directory


def test_run_with_a_damaged_entry_succeeds_with_a_warning(tmp_path, caplog):
    from pipeline.app.configuration.config import compose_config
    from pipeline.app.running.runner import run

    def cfg(out):
        return compose_config([f"paths.output_dir={tmp_path / out}", f"paths.cache_dir={tmp_path / 'cache'}",
                               f"paths.models_dir={tmp_path / 'models'}", "experiment=raw_features", "dataset=iris",
                               "report.figures=false", "report.summary=false", "cache.reuse_files=false"])

    first = run(cfg("a"))
    for entry in (tmp_path / "cache").glob("cluster/*"):
        if entry.is_dir():
            flip_64_bytes(entry) if (entry / "arrays.npz").exists() else damage_meta(entry)
    with caplog.at_level(logging.WARNING, logger="pipeline.app.stores.cache"):
        second = run(cfg("b"))
    assert first.equals(second)
    assert any("'cluster'" in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
    status = json.loads((tmp_path / "b" / "status.json").read_text())
    assert status["status"] == "ok" and any(e["stage"] == "cluster" and e["recovered"] for e in status["cache"])


def test_portable_config_has_no_absolute_paths_under_the_roots(tmp_path):
    from pipeline.app.stores.cache import make_key, portable

    def roots(base):
        return {"root_dir": str(base), "models_dir": str(base / "models"), "cache_dir": str(base / "cache"),
                "output_dir": str(base / "out")}

    cfg = {"params": {"pretrain_cache": str(tmp_path / "a" / "models" / "vade" / "pretrain"), "lr": 0.1},
           "files": [str(tmp_path / "a" / "data" / "x.csv"), "relative/y.csv"], "other": "/etc/hosts"}
    moved = {"params": {"pretrain_cache": str(tmp_path / "b" / "models" / "vade" / "pretrain"), "lr": 0.1},
             "files": [str(tmp_path / "b" / "data" / "x.csv"), "relative/y.csv"], "other": "/etc/hosts"}
    here, there = portable(cfg, roots(tmp_path / "a")), portable(moved, roots(tmp_path / "b"))
    assert here == there == {"params": {"pretrain_cache": "${paths.models_dir}/vade/pretrain", "lr": 0.1},
                             "files": ["${paths.root_dir}/data/x.csv", "relative/y.csv"], "other": "/etc/hosts"}
    assert make_key("encode", here) == make_key("encode", there)


def test_store_later_writes_in_the_background_and_flush_reports_its_error(tmp_path, monkeypatch):
    """A large entry handed to :meth:`StageCache.store_later` is written by a thread; its event
    keeps the place of the hand-over; ``flush`` waits for it, and a failed write (a full disk)
    is raised there, or only logged when the run failed already."""
    cache = StageCache(tmp_path / "c")
    cache.store_later("coordinates", "k1", _artifact(1))
    cache.get_or_compute("cluster", "k2", lambda: _artifact(2))
    cache.flush()
    assert [e.stage for e in cache.events] == ["coordinates", "cluster"]
    assert np.array_equal(load_artifact(cache.path("coordinates", "k1"))["Z"], _artifact(1)["Z"])
    assert cache.get_or_compute("coordinates", "k1", lambda: pytest.fail("recomputed")) is not None

    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("pipeline.app.stores.cache.save_artifact", full)
    cache.store_later("coordinates", "k3", _artifact(3))
    with pytest.raises(Exception, match="space|full|write"):
        cache.flush()
    cache.store_later("coordinates", "k4", _artifact(4))
    cache.flush(raise_errors=False)  # logged, not raised
    assert not cache.path("coordinates", "k4").exists()
