"""The stage cache: keys, atomic writes, locking between parallel jobs, force."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from pipeline.app.stores.cache import StageCache, load_artifact, make_key, save_artifact


def test_key_depends_on_config_inputs_and_version():
    base = make_key("s", {"a": 1, "b": [1, 2]}, ["k1"])
    assert base == make_key("s", {"b": [1, 2], "a": 1}, ["k1"])  # key order does not matter
    assert len({base, make_key("s", {"a": 2, "b": [1, 2]}, ["k1"]), make_key("s", {"a": 1, "b": [1, 2]}, ["k2"]),
                make_key("t", {"a": 1, "b": [1, 2]}, ["k1"]), make_key("s", {"a": 1, "b": [1, 2]}, ["k1"], 2)}) == 5


def test_artifact_round_trip(tmp_path):
    art = {"Z": np.arange(6, dtype=np.float32).reshape(3, 2), "names": ["a", "b"], "meta": {"x": 1}, "none": None}
    save_artifact(tmp_path / "a", art)
    back = load_artifact(tmp_path / "a")
    assert back.keys() == art.keys() and back["Z"].dtype == np.float32
    np.testing.assert_array_equal(back["Z"], art["Z"])
    assert back["names"] == ["a", "b"] and back["meta"] == {"x": 1} and back["none"] is None


def test_hit_after_miss_and_force(tmp_path):
    calls = []
    cache = StageCache(tmp_path)
    compute = lambda: calls.append(1) or {"v": np.array([len(calls)])}  # noqa: E731
    assert cache.get_or_compute("s", "k", compute)["v"][0] == 1
    assert cache.get_or_compute("s", "k", compute)["v"][0] == 1 and len(calls) == 1
    assert [e.hit for e in cache.events] == [False, True]
    forced = StageCache(tmp_path, force={"s"})
    assert forced.get_or_compute("s", "k", compute)["v"][0] == 2  # recomputed and replaced
    assert StageCache(tmp_path).get_or_compute("s", "k", compute)["v"][0] == 2
    assert sorted(p.name for p in (tmp_path / "s").iterdir()) == ["k", "k.lock"]  # no temp / old leftovers


def test_crash_while_writing_leaves_no_artifact(tmp_path, monkeypatch):
    cache = StageCache(tmp_path)
    import pipeline.app.stores.cache as mod

    def broken_savez(path, **arrays):
        open(path, "wb").write(b"half")  # a partial file, then the process "dies"
        raise KeyboardInterrupt

    monkeypatch.setattr(mod.np, "savez", broken_savez)
    with pytest.raises(KeyboardInterrupt):
        cache.get_or_compute("s", "k", lambda: {"v": np.ones(3)})
    monkeypatch.undo()
    assert not (tmp_path / "s" / "k").exists() and not list((tmp_path / "s").glob(".tmp-*"))
    calls = []
    out = cache.get_or_compute("s", "k", lambda: calls.append(1) or {"v": np.ones(3)})
    assert calls == [1] and out["v"].sum() == 3


def test_parallel_jobs_compute_once(tmp_path):
    calls = []

    def slow():
        calls.append(1)
        time.sleep(0.3)
        return {"v": np.arange(3)}

    results = []
    threads = [threading.Thread(target=lambda: results.append(StageCache(tmp_path).get_or_compute("s", "k", slow)))
               for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1 and len(results) == 3
    assert all(np.array_equal(r["v"], np.arange(3)) for r in results)


def test_disabled_cache_stores_nothing(tmp_path):
    cache = StageCache(tmp_path / "c", enabled=False)
    cache.get_or_compute("s", "k", lambda: {"v": np.ones(1)})
    assert not (tmp_path / "c").exists()


def test_object_arrays_are_refused(tmp_path):
    with pytest.raises(TypeError, match="dtype object"):
        save_artifact(tmp_path / "a", {"bad": np.array([{"a": 1}], dtype=object)})
