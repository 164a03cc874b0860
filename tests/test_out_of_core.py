"""One pipeline at any size (issues 28, 35): arrays read by row range, the same stages out of core.

Small arrays (40k x 32 float32, also as 4 shards) through the chunked readers and the command
line: a run whose latents exceed ``dataset.memory_budget`` (forced with a 1 MB budget) gives
exactly the in-memory run's results when its samples are every row, fits the clustering on a
sample and the trees on a stratified sample by default, resumes a killed chunk pass from its
finished chunks, equals itself on a 2-process Dask LocalCluster, and bad input (other
width/dtype, truncated file, labels of another length, a budget below one chunk, samples larger
than the data, NaN rows, a silent scheduler, a dying worker) is one clear error.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.app.configuration.config import compose_config
from pipeline.app.data.chunked import open_chunked
from pipeline.app.running.runner import run
from pipeline.clustering import mixture_predict
from pipeline.clustering import stratified_sample
from pipeline.validation import InvalidInputError

N, D, K = 40_000, 32, 4


def blobs(n=N, d=D, k=K, seed=0):
    rng = np.random.default_rng(seed)
    centres = rng.uniform(-10, 10, (k, d)).astype(np.float32)
    y = rng.integers(0, k, n).astype(np.int32)
    return (rng.standard_normal((n, d), dtype=np.float32) * 3 + centres[y]).astype(np.float32), y


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("ooc")
    X, y = blobs()
    (d / "shards").mkdir()
    for i in range(4):
        np.save(d / "shards" / f"part{i}.npy", X[i * 10_000:(i + 1) * 10_000])
    np.save(d / "X.npy", X)
    np.save(d / "y.npy", y)
    return d, X, y


# ------------------------------------------------------------------ library: samples
@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**31 - 1), st.sampled_from(["full", "tied"]), st.sampled_from([0.0, 1e4]),
       st.sampled_from([np.float32, np.float64]), st.booleans())
def test_mixture_predict_equals_scikit_learn(seed, kind, offset, dtype, twins):
    """The float32 screen with its error bound gives GaussianMixture.predict's labels exactly: on
    data far from the origin, for float32 and float64 rows, and with two identical components
    (every row a tie, all decided by scikit-learn itself)."""
    from sklearn.mixture import GaussianMixture

    rng = np.random.default_rng(seed)
    centres = rng.normal(0, 3, (4, 6))
    X64 = offset + centres[rng.integers(0, 4, 600)] + rng.normal(0, 1, (600, 6))
    gm = GaussianMixture(4, covariance_type=kind, random_state=0, max_iter=20).fit(X64)
    X = X64.astype(dtype)
    if twins:  # component 1 a copy of component 0: exact ties
        gm.means_[1] = gm.means_[0]
        if kind == "full":
            gm.precisions_cholesky_[1] = gm.precisions_cholesky_[0]
        gm.weights_[1] = gm.weights_[0]
    near = (X[:50] + rng.normal(0, 1e-3, (50, 6))).astype(dtype)  # rows near the boundaries too
    for rows in (X, near, np.vstack([X, near])[::7]):
        assert np.array_equal(mixture_predict(gm, rows), gm.predict(rows))


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(0, 5), min_size=1, max_size=300), st.integers(1, 400))
def test_stratified_sample_keeps_shares(labels, size):
    labels = np.array(labels)
    idx = stratified_sample(labels, size, random_state=0)
    assert np.all(np.diff(idx) > 0)
    if size >= labels.size:
        assert idx.size == labels.size
        return
    assert idx.size == max(size, np.unique(labels).size)
    for v in np.unique(labels):  # every value kept, share within one row of proportional
        share = (labels == v).sum() * size / labels.size
        assert 1 <= (labels[idx] == v).sum() <= max(np.ceil(share), 1) + 1


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(-3, 300), min_size=1, max_size=200), st.sampled_from(["int8", "int16", "int64", "uint8", "uint64"]))
def test_unique_inverse_by_counting_equals_numpy(values, dtype):
    """The stratified sample's grouping of integer labels by counting = np.unique's (values,
    inverse, counts), whatever the integer type (no overflow when shifting int8 labels)."""
    from pipeline.clustering import _unique_inverse

    labels = np.array(values, dtype=np.int64)
    info = np.iinfo(dtype)
    labels = np.clip(labels, info.min, info.max).astype(dtype)
    for got, want in zip(_unique_inverse(labels), np.unique(labels, return_inverse=True, return_counts=True)):
        assert got.dtype == want.dtype and np.array_equal(got, want)


# ------------------------------------------------------------------ readers
def test_readers_npy_shards_parquet_zarr(data, tmp_path):
    d, X, y = data
    for source in (d / "X.npy", d / "shards"):
        Z = open_chunked(source)
        assert Z.shape == X.shape and Z.dtype == np.float32
        assert np.array_equal(np.concatenate(list(Z.chunks(7_000))), X)
        assert np.array_equal(Z.read(9_990, 20_010), X[9_990:20_010])  # across shard borders
        idx = np.array([0, 9_999, 10_000, 39_999])
        assert np.array_equal(Z.take(idx, 3_000), X[idx])
    (tmp_path / "pq").mkdir()
    for i in range(2):
        pd.DataFrame(X[i * 500:(i + 1) * 500, :4], columns=list("abcd")).to_parquet(tmp_path / "pq" / f"{i}.parquet",
                                                                                   row_group_size=128)
    Zp = open_chunked(tmp_path / "pq")
    assert np.array_equal(Zp.read(100, 900), X[100:900, :4])
    zarr = pytest.importorskip("zarr")
    za = zarr.open_array(str(tmp_path / "a.zarr"), mode="w", shape=(1000, D), chunks=(256, D), dtype="f4")
    za[:] = X[:1000]
    assert np.array_equal(np.concatenate(list(open_chunked(tmp_path / "a.zarr").chunks(300))), X[:1000])
    labels = open_chunked(d / "y.npy", vector=True)
    assert labels.shape == (N,) and np.array_equal(labels.read(0, N), y)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(0, N - 1), max_size=3000, unique=True), st.sampled_from([64, 3_000, 65_536]),
       st.booleans())
def test_take_equals_numpy_indexing(data, rows, chunk_rows, shards):
    """Rows gathered one by one from sparse stretches and whole from dense ones, across shards."""
    d, X, _ = data
    Z = open_chunked(d / "shards" if shards else d / "X.npy")
    idx = np.sort(np.asarray(rows, dtype=np.int64))
    assert np.array_equal(Z.take(idx, chunk_rows), X[idx])
    assert np.array_equal(Z.as_dtype(np.float64).take(idx, chunk_rows), X[idx].astype(np.float64))


def test_shard_of_other_width_or_dtype_named(data, tmp_path):
    d, X, _ = data
    (tmp_path / "s").mkdir()
    np.save(tmp_path / "s" / "a.npy", X[:100])
    np.save(tmp_path / "s" / "b.npy", X[:100, :31])
    with pytest.raises(InvalidInputError, match=r"shard b\.npy .*\(31,\).*same width and dtype"):
        open_chunked(tmp_path / "s")
    np.save(tmp_path / "s" / "b.npy", X[:100].astype(np.float64))
    with pytest.raises(InvalidInputError, match=r"shard b\.npy .*float64"):
        open_chunked(tmp_path / "s")


def test_truncated_npy_is_one_clear_error(data, tmp_path):
    d, X, _ = data
    path = tmp_path / "cut.npy"
    np.save(path, X[:1000])
    with open(path, "r+b") as fh:
        fh.truncate(path.stat().st_size - 1000)
    with pytest.raises(InvalidInputError, match=r"truncated: its header announces 1000 rows.*only 992 whole rows"):
        open_chunked(path)
    (tmp_path / "s").mkdir()  # a truncated shard among good ones
    np.save(tmp_path / "s" / "0.npy", X[:100])
    os.replace(path, tmp_path / "s" / "1.npy")
    with pytest.raises(InvalidInputError, match=r"1\.npy is truncated"):
        open_chunked(tmp_path / "s")


# ------------------------------------------------------------------ the command line at any size
def _cli(tmp_path, d, *extra, out="out", cache="cache", path="X.npy"):
    return [f"paths.output_dir={tmp_path / out}", f"paths.cache_dir={tmp_path / cache}", "dataset=files",
            f"dataset.path={d / path}", f"dataset.labels={d / 'y.npy'}", "clustering=kmeans",
            f"clustering.n_clusters={K}", "explainer=[mmdt,imm,cart]", *extra]


OUT_OF_CORE = ["dataset.memory_budget=1MB", "dataset.chunk_rows=3000"]  # 40k x 32 float32 = 5 MB > 1 MB
EVERY_ROW = [f"clustering.sample_rows={N}", f"fit.sample_rows={N}"]


def _results(df):
    return df.drop(columns=["fit_seconds", "dataset"]).reset_index(drop=True)


def _trees(out):
    return {row: json.loads((out / "trees" / f"{row}.json").read_text())["tree"] for row in ("mmdt", "imm", "cart")}


def test_out_of_core_with_every_row_equals_in_memory(data, tmp_path):
    """The same stages: out of core, with the clustering and the trees on every row, the results,
    trees and every row's cluster are the in-memory run's, for a .npy and for shards."""
    d, X, y = data
    memory = run(compose_config(_cli(tmp_path, d, out="mem", cache="c1")))
    assert "fit_rows" not in memory.columns
    for path in ("X.npy", "shards"):
        ooc = run(compose_config(_cli(tmp_path, d, *OUT_OF_CORE, *EVERY_ROW, out=path, cache=f"c-{path}", path=path)))
        pd.testing.assert_frame_equal(_results(memory), _results(ooc))
        assert _trees(tmp_path / "mem") == _trees(tmp_path / path)
    # the latents are never copied, at any size: no load or encode cache entry for an array read by row range
    for cache in ("c1", "c-X.npy", "c-shards"):
        assert not (tmp_path / cache / "load").exists() and not (tmp_path / cache / "encode").exists()


def test_automatic_out_of_core_samples_and_says_so(data, tmp_path, caplog):
    d, X, y = data
    caplog.set_level("INFO")
    df = run(compose_config(_cli(tmp_path, d, *OUT_OF_CORE)))
    log = caplog.text
    assert "fitted on a uniform sample of 20000 of 40000 rows (clustering.sample_rows)" in log
    assert "fitted on a stratified sample of" in log and "every row is predicted and evaluated" in log
    by = df.set_index("explainer")
    assert by.loc["imm", "fit_rows"] == 10**6 // 4 // (8 * D)  # float64 coordinates in a quarter of the budget
    assert (by["ref_ari"] > 0.95).all() and by.loc["reference", "ari"] > 0.99
    status = json.loads((tmp_path / "out" / "status.json").read_text())
    assert status["status"] == "ok"


def test_concepts_out_of_core_equal_in_memory(data, tmp_path, caplog):
    """Out of core the CAVs are fitted ahead, by a worker process (the RunAhead callback), while the
    clustering is fitted, and the same worker computes the completeness baselines while the trees are
    fitted where the concept coordinates fit in the memory budget: the same results as the in-memory
    run, which computes both here."""
    import os

    d, X, y = data
    rng = np.random.default_rng(1)
    np.savez(tmp_path / "cex.npz", c0=X[y == 0][:300], c1=X[y == 1][:300], c2=X[y == 2][:300],
             random=X[rng.choice(N, 600)])
    concepts = ["concepts=examples", f"concepts.path={tmp_path / 'cex.npz'}", "explainer=[mmdt,concept_cart]"]
    caplog.set_level("INFO")
    memory = run(compose_config(_cli(tmp_path, d, *concepts, out="mem", cache="c1")))
    fitted_in = {r.process for r in caplog.records if r.getMessage().startswith("CAVs:")}
    assert fitted_in == {os.getpid()}
    caplog.clear()
    ooc = run(compose_config(_cli(tmp_path, d, *concepts, *OUT_OF_CORE, *EVERY_ROW, out="ooc", cache="c2")))
    fitted_in = {r.process for r in caplog.records if r.getMessage().startswith("CAVs:")}
    assert len(fitted_in) == 1 and os.getpid() not in fitted_in  # a worker's line, logged here
    # the coordinates (40k x 3 float64: 0.96 MB) fit in the 1 MB budget (the 5 MB of latents do not):
    # the worker stays and computes the completeness baselines while the trees are fitted
    baselines_in = {r.process for r in caplog.records if r.getMessage().startswith("concept completeness")}
    assert len(baselines_in) == 1 and os.getpid() not in baselines_in
    pd.testing.assert_frame_equal(_results(memory), _results(ooc))
    # the concept coordinates are cached (a warm run does not read the latents again), nothing else large
    assert list((tmp_path / "c2" / "coordinates").iterdir())
    # where they exceed it (0.6 MB), the worker stops with the CAVs and the baselines are computed here
    caplog.clear()
    here = run(compose_config(_cli(tmp_path, d, *concepts, "dataset.memory_budget=600000", "dataset.chunk_rows=1000",
                                   *EVERY_ROW, out="here", cache="c3")))
    baselines_in = {r.process for r in caplog.records if r.getMessage().startswith("concept completeness")}
    assert baselines_in == {os.getpid()}
    pd.testing.assert_frame_equal(_results(memory), _results(here))
    for out in ("ooc", "here"):
        assert ((tmp_path / out / "concepts" / "completeness.json").read_bytes()
                == (tmp_path / "mem" / "concepts" / "completeness.json").read_bytes())


def test_assignment_pass_projects_on_the_cavs_once(data, tmp_path, monkeypatch):
    """Latents on disk are read once for the clustering's assignment and ``Z Cᵀ`` together (the
    coordinates stage's pass rides along the cluster stage's: the executor); the coordinates equal
    those of a pass of their own (``+force=coordinates`` with the clustering cached)."""
    from pipeline.app.execution import chunk_map

    d, X, y = data
    rng = np.random.default_rng(1)
    np.savez(tmp_path / "cex.npz", c0=X[y == 0][:300], c1=X[y == 1][:300], c2=X[y == 2][:300],
             random=X[rng.choice(N, 600)])
    concepts = ["concepts=examples", f"concepts.path={tmp_path / 'cex.npz'}", "explainer=[mmdt,concept_cart]",
                *OUT_OF_CORE, "report.figures=false"]
    passes = []
    original = chunk_map.map_rows

    def counted(fn, X, *args, **kw):
        passes.append(kw.get("desc", args[3] if len(args) > 3 else ""))
        return original(fn, X, *args, **kw)

    monkeypatch.setattr(chunk_map, "map_rows", counted)
    fused = run(compose_config(_cli(tmp_path, d, *concepts, out="a", cache="c1")))
    assert [p for p in passes if "Z Cᵀ" in p or "assign" in p] == ["assign, Z Cᵀ"]  # one read for both

    def coordinates(cache):
        [entry] = [p for p in (tmp_path / cache / "coordinates").iterdir() if p.is_dir()]
        with np.load(entry / "arrays.npz") as z:
            return z["X"]

    together = coordinates("c1")
    passes.clear()
    alone = run(compose_config(_cli(tmp_path, d, *concepts, "+force=coordinates", out="b", cache="c1")))
    assert [p for p in passes if "Z Cᵀ" in p or "assign" in p] == ["Z Cᵀ"]  # the clustering cached: a pass alone
    pd.testing.assert_frame_equal(_results(fused), _results(alone))
    assert np.array_equal(together, coordinates("c1"))
    events = {e["stage"]: e["hit"] for e in json.loads((tmp_path / "b" / "status.json").read_text())["cache"]}
    assert events["cluster"] is True and events["coordinates"] is False


def test_bad_sizes_are_one_paragraph(data, tmp_path):
    d, X, y = data
    cases = [
        (["dataset.memory_budget=100"], r"dataset\.memory_budget=100 \(100 bytes\) is below one chunk"),
        (["dataset.memory_budget=1MB", "dataset.chunk_rows=100000"], r"one chunk of 100000 rows .* more than "
                                                                     r"dataset\.memory_budget"),
        (["dataset.memory_budget=lots"], r"dataset\.memory_budget='lots': give a size such as 2GB"),
        ([*OUT_OF_CORE, "clustering.sample_rows=50000"], r"clustering\.sample_rows=50000 is larger than the data "
                                                         r"\(40000 rows\)"),
        ([*OUT_OF_CORE, "fit.sample_rows=50000"], r"fit\.sample_rows=50000 is larger than the data \(40000 rows\)"),
    ]
    for extra, message in cases:
        with pytest.raises(InvalidInputError, match=message):
            run(compose_config(_cli(tmp_path, d, *extra)))
    np.save(tmp_path / "short.npy", y[:-5])
    with pytest.raises(InvalidInputError, match=r"has 39995 labels but the data have 40000 rows"):
        run(compose_config(_cli(tmp_path, d, *OUT_OF_CORE) + [f"dataset.labels={tmp_path / 'short.npy'}"]))
    bad = X.copy()
    bad[12_345, 3] = np.nan
    np.save(tmp_path / "nan.npy", bad)
    with pytest.raises(InvalidInputError, match=r"nan\.npy.*12345"):
        run(compose_config(_cli(tmp_path, tmp_path, *OUT_OF_CORE, path="nan.npy")
                           + [f"dataset.labels={d / 'y.npy'}"]))


# ------------------------------------------------------------------ Dask
@pytest.mark.parametrize("address", ["tcp://127.0.0.1:9", "no-port-here"])
def test_unanswered_scheduler_fails_fast(address):
    pytest.importorskip("distributed")
    from pipeline.app.execution.compute import DaskCompute

    t0 = time.perf_counter()
    with pytest.raises(InvalidInputError, match=rf"compute\.address={address}: no Dask scheduler answered within 2 s"):
        DaskCompute(address=address, timeout=2)
    assert time.perf_counter() - t0 < 30


@pytest.mark.slow
def test_dask_equals_local(data, tmp_path):
    """compute=dask: the chunk passes (assignment, Z Cᵀ, predictions) run as tasks on a 2-process
    LocalCluster; the clustering is fitted in the driver on the same sample: identical results."""
    pytest.importorskip("distributed")
    d, X, y = data
    local = run(compose_config(_cli(tmp_path, d, *OUT_OF_CORE, out="local", cache="c1")))
    dask = run(compose_config(_cli(tmp_path, d, *OUT_OF_CORE, "compute=dask", "compute.n_workers=2",
                                   out="dask", cache="c2")))
    pd.testing.assert_frame_equal(_results(local), _results(dask))
    assert _trees(tmp_path / "local") == _trees(tmp_path / "dask")


class _DieOnce:
    """A chunk task whose first run on the chunk starting at row 3000 kills its worker process."""

    def __init__(self, task, marker):
        self.task, self.marker = task, str(marker)

    def __call__(self, item):
        if item[1][0] == 3000 and not os.path.exists(self.marker):
            Path(self.marker).write_text("died")
            os._exit(1)
        if item[1][0] == 3000 and Path(self.marker).read_text() == "always":
            os._exit(1)
        return self.task(item)


@pytest.mark.slow
def test_killed_worker_retried_or_clean_failure(data, tmp_path, monkeypatch):
    pytest.importorskip("distributed")
    import pipeline.app.execution.chunk_map as chunk_map

    d, X, y = data
    original = chunk_map.ChunkTask
    marker = tmp_path / "marker"
    args = [*OUT_OF_CORE, "compute=dask", "compute.n_workers=2", "explainer=[imm]"]
    ref = run(compose_config(_cli(tmp_path, d, *OUT_OF_CORE, "explainer=[imm]", out="ref", cache="c0")))
    monkeypatch.setattr(chunk_map, "ChunkTask", lambda X, fn: _DieOnce(original(X, fn), marker))
    once = run(compose_config(_cli(tmp_path, d, *args, out="once", cache="c1")))
    assert marker.read_text() == "died"
    pd.testing.assert_frame_equal(_results(ref), _results(once))
    marker.write_text("always")
    with pytest.raises(RuntimeError, match="Dask workers died"):
        run(compose_config(_cli(tmp_path, d, *args, out="always", cache="c2")))
    assert not (tmp_path / "c2" / "cluster").exists() or not [
        p for p in (tmp_path / "c2" / "cluster").iterdir() if p.is_dir()]


# ------------------------------------------------------------------ docs/out-of-core.md runs
DOC = Path(__file__).resolve().parents[1] / "docs" / "out-of-core.md"


def _doc_blocks(kind: str) -> list[str]:
    import re

    return re.findall(rf"```{kind}\n(.*?)```", DOC.read_text(), flags=re.S)


@pytest.fixture
def doc_dir(data, tmp_path, monkeypatch):
    d, X, y = data
    __import__("shutil").copytree(d / "shards", tmp_path / "emb")
    np.save(tmp_path / "big.npy", X)
    np.save(tmp_path / "labels.npy", y)
    np.save(tmp_path / "ids.npy", np.array([f"row{i}" for i in range(N)]))
    np.savez(tmp_path / "concept_examples.npz", near_0=X[y == 0][:200], near_1=X[y == 1][:200], random=X[:400])
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.slow
def test_docs_commands_run(doc_dir):
    import shlex

    lines = [ln for block in _doc_blocks("bash") for ln in block.splitlines() if ln.startswith("python -m pipeline")]
    assert len(lines) >= 4
    for i, line in enumerate(lines):
        args = shlex.split(line)[3:]
        df = run(compose_config(args + [f"paths.output_dir={doc_dir / f'out{i}'}", f"paths.cache_dir={doc_dir / 'c'}"]))
        assert df["explainer"].iloc[0] == "reference" and (df["ref_ari"] > 0.5).all()
    assert any(pd.read_parquet(doc_dir / f"out{i}" / "assignments.parquet")["id"].iloc[-1] == f"row{N - 1}"
               for i in range(len(lines)) if (doc_dir / f"out{i}" / "assignments.parquet").exists())


@pytest.mark.slow
def test_docs_slurm_snippet_runs_with_a_local_cluster(doc_dir, monkeypatch):
    """The SLURM block with a LocalCluster standing in for SLURMCluster (no SLURM here)."""
    import sys
    import types

    from distributed import LocalCluster

    class FakeSLURMCluster(LocalCluster):
        def __init__(self, cores, memory, processes, walltime, queue):
            super().__init__(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None)

        def job_script(self):
            return "#!/usr/bin/env bash\n#SBATCH ..."

        def scale(self, n=0, jobs=0, **kw):  # close() scales to 0 through here
            return super().scale(2 if jobs else n)

    monkeypatch.setitem(sys.modules, "dask_jobqueue", types.SimpleNamespace(SLURMCluster=FakeSLURMCluster))
    (code,) = _doc_blocks("python")
    exec(compile(code, "docs/out-of-core.md[python]", "exec"), {})
    assert (doc_dir / "out_slurm" / "results.csv").exists()


# ------------------------------------------------------------------ SIGKILL mid-pass (a real process)
KILL_LAUNCHER = r'''
import os, runpy, signal, sys

import pipeline.app.execution.chunk_map as chunk_map

original, count = chunk_map._save, [0]
def save(folder, rng, result):
    original(folder, rng, result)
    if os.environ.get("KILL_IN") in str(folder):
        count[0] += 1
        if count[0] == int(os.environ["KILL_AFTER"]):
            os.kill(os.getpid(), signal.SIGKILL)  # mid-pass: some chunks finished, the stage unfinished
chunk_map._save = save
sys.argv = ["pipeline", *sys.argv[1:]]
runpy.run_module("pipeline", run_name="__main__", alter_sys=True)
'''


@pytest.mark.slow
@pytest.mark.parametrize("stage", ["cluster", "coordinates"])
def test_sigkill_mid_pass_recomputes_only_unfinished_chunks(tmp_path, stage):
    """Killed in the cluster stage's pass (the assignment, with the coordinates' Z Cᵀ riding along)
    or in the coordinates stage's own pass (the clustering cached, ``+force=coordinates``), a rerun
    computes only the rest."""
    import signal
    import subprocess
    import sys

    X, y = blobs(8_000, 16)
    np.save(tmp_path / "X.npy", X)
    np.save(tmp_path / "y.npy", y)
    np.savez(tmp_path / "cex.npz", a=X[y == 0][:100], b=X[y == 1][:100], random=X[:200])
    (tmp_path / "launch.py").write_text(KILL_LAUNCHER)

    def cli(out, cache, kill=None):
        args = [f"paths.output_dir={tmp_path / out}", f"paths.cache_dir={tmp_path / cache}", "dataset=files",
                f"dataset.path={tmp_path / 'X.npy'}", f"dataset.labels={tmp_path / 'y.npy'}",
                "dataset.memory_budget=100kB", "dataset.chunk_rows=500", "clustering=kmeans", "clustering.sample_rows=2000",
                f"clustering.n_clusters={K}", "concepts=examples", f"concepts.path={tmp_path / 'cex.npz'}",
                "explainer=[mmdt,cart]", *(["+force=coordinates"] if stage == "coordinates" else [])]
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src"), "KILL_IN": stage,
               "KILL_AFTER": str(kill)}
        cmd = [sys.executable, str(tmp_path / "launch.py")] if kill is not None else [sys.executable, "-m", "pipeline"]
        return subprocess.run(cmd + args, env=env, capture_output=True, text=True, timeout=600)

    if stage == "coordinates":  # the clustering cached: the coordinates' pass runs on its own
        assert cli("first", "cache").returncode == 0
    killed = cli("killed", "cache", kill=5)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    left = list((tmp_path / "cache" / "chunks" / stage).glob("*/*.npz"))
    assert len(left) == 5  # the finished chunks, kept
    resumed = cli("resumed", "cache")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "5 of 16 chunks finished by an earlier run are reused; 11 to compute" in resumed.stdout + resumed.stderr
    assert not list((tmp_path / "cache" / "chunks" / stage).glob("*/*.npz"))  # removed once the pass is done
    assert cli("whole", "fresh").returncode == 0
    a, b = (pd.read_csv(tmp_path / d / "results.csv").drop(columns=["fit_seconds"]) for d in ("resumed", "whole"))
    pd.testing.assert_frame_equal(a, b)
    for row in ("mmdt", "cart"):
        a, b = (json.loads((tmp_path / d / "trees" / f"{row}.json").read_text()) for d in ("resumed", "whole"))
        assert a["tree"] == b["tree"] and a["rules"] == b["rules"]


def test_nan_rows_found_in_a_chunk_pass_are_named():
    """Arrays over 256 MB are checked as their chunks are read: the first bad rows, 0-based, by file."""
    from pipeline.app.stages.cluster import check_finite_chunk

    block = np.zeros((100, 3), np.float32)
    block[[7, 42], 1] = np.inf
    Z = type("View", (), {"source": "big.npy"})()
    with pytest.raises(InvalidInputError, match=r"big\.npy holds NaN or inf values in rows \[5007, 5042\]"):
        check_finite_chunk(block, 5000, Z)


def test_assignment_pass_with_the_coordinates_names_nan_rows_and_keeps_labels():
    """The coordinates' pass riding along the assignment (the executor's Together: one read of the
    chunk for both): NaN rows are still named by file and row, overflowing coordinates refused, and
    the labels and coordinates are each pass's own."""
    from pipeline.app.execution.executor import Together
    from pipeline.app.stages.cluster import AssignChunk
    from pipeline.app.stages.coordinates import ProjectChunk
    from pipeline.cluster_heads import NearestCentreHead

    rng = np.random.default_rng(0)
    centers = rng.standard_normal((3, 4)).astype(np.float32)
    head = NearestCentreHead(centers)
    Z = type("View", (), {"source": "big.npy"})()
    cavs = rng.standard_normal((2, 4))
    task = Together((AssignChunk(head, Z), ProjectChunk(cavs)))
    block = rng.standard_normal((50, 4)).astype(np.float32)
    labels, coords = task.split(task(block, 0))
    assert np.array_equal(labels["labels"], head.predict(block))
    np.testing.assert_allclose(coords["X"], block.astype(np.float64) @ cavs.T, rtol=1e-12)
    bad = block.copy()
    bad[[3, 9], 2] = np.nan
    with pytest.raises(InvalidInputError, match=r"big\.npy holds NaN or inf values in rows \[103, 109\]"):
        task(bad, 100)
    huge = block.copy()
    huge[0] = 3e38
    with pytest.raises(InvalidInputError, match="overflows float64|rescale"):
        Together((AssignChunk(head, Z), ProjectChunk(np.full((2, 4), 1e300))))(huge, 0)
