"""Embeddings streamed from disk and the same run on a Dask cluster (issue 28).

Small shards (40k x 32 float32 in 4 shards) through the chunked readers, the streamed run
(local and a 2-process LocalCluster) and the command line: streamed moments equal the
in-memory ones, the trees equal the in-memory fits when the sample is everything, Dask equals
the local streamed run, and bad input (other width/dtype, truncated file, labels of another
length, a silent scheduler, a dying worker, a sample larger than the data) is one clear error.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline import metrics
from pipeline.app.compute import LocalCompute
from pipeline.app.config import compose_config
from pipeline.app.data.chunked import open_chunked
from pipeline.app.explainers import FitInputs, fit_explainer
from pipeline.app.runner import run
from pipeline.concepts.projection import mixture_sigma
from pipeline.app.streamed import StreamedRun
from pipeline.streaming import Contingency, chunk_moments, merge_moments, stratified_sample, stream_kmeans
from pipeline.trees.mmdt import MMDT
from pipeline.validation import InvalidInputError

N, D, K = 40_000, 32, 4
EXPLAINERS = {
    "mmdt": {"_target_": "pipeline.trees.mmdt.MMDT", "name": "mmdt", "fit": "mixture", "n_leaves": None, "params": {}},
    "imm": {"_target_": "pipeline.trees.imm.IMM", "name": "imm", "fit": "centers", "n_leaves": None, "params": {}},
    "cart": {"_target_": "pipeline.trees.cart.CART", "name": "cart", "fit": "labels", "n_leaves": None, "params": {}},
}


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


# ------------------------------------------------------------------ library: streaming maths
def _chunked(X, y, edges, k):
    return merge_moments(chunk_moments(X[a:b], y[a:b], k) for a, b in zip(edges[:-1], edges[1:]))


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 300), st.lists(st.integers(1, 97), min_size=1, max_size=6), st.integers(0, 2**16),
       st.sampled_from([1.0, 1e-3, 1e6]))
def test_moments_exact_whatever_the_chunking(n, cuts, seed, scale):
    from fractions import Fraction

    rng = np.random.default_rng(seed)
    X = rng.normal(3, 2, (n, 4)) * scale
    y = rng.integers(-1, 3, n)
    bounds = np.unique(np.clip(np.cumsum(cuts), 0, n))
    edges = [0, *[b for b in bounds if 0 < b < n], n]
    m, whole = _chunked(X, y, edges, 3), chunk_moments(X, y, 3)
    means, variances = m.exact()
    assert np.array_equal((means, variances), whole.exact())  # bit-identical to the one-chunk (in-memory) run
    for k in range(3):  # brute force: exact rationals
        rows = X[y == k]
        assert m.counts[k] == rows.shape[0]
        for j in range(4):
            if rows.shape[0]:
                s1 = sum(Fraction(v) for v in rows[:, j]) / rows.shape[0]
                s2 = sum(Fraction(v * v) for v in rows[:, j]) / rows.shape[0]
                assert means[k, j] == float(s1) and variances[k, j] == float(max(s2 - s1 * s1, 0))
        if rows.shape[0] > 1:
            np.testing.assert_allclose(m.scatter[k] / rows.shape[0], np.cov(rows.T, bias=True), rtol=1e-9,
                                       atol=1e-9 * scale**2)


def test_exact_sums_both_summation_paths_agree():
    from pipeline.streaming import ExactSums

    rng = np.random.default_rng(3)
    V, y = rng.normal(0, 1e3, (500, 100)), rng.integers(0, 4, 500)
    small, large = ExactSums.of(V, y, 4), ExactSums.of(V, y, 100)  # bincount bins vs sorted keys (K*d*2100 > 2^24)
    assert small.total() == large.total()[:4]


def test_moments_same_chunks_bit_identical():
    X, y = blobs(5000, 6)
    edges = [*range(0, 5000, 700), 5000]
    a, b = _chunked(X, y, edges, K), _chunked(X, y, edges, K)
    assert np.array_equal(a.means, b.means) and np.array_equal(a.scatter, b.scatter)
    assert all(np.array_equal(u, v) for u, v in zip(a.mixture(), b.mixture()))


@settings(max_examples=25, deadline=None)
@given(st.integers(2, 300), st.integers(0, 2**16))
def test_contingency_metrics_equal_in_memory(n, seed):
    rng = np.random.default_rng(seed)
    ref, pred = rng.integers(-1, 4, n), rng.integers(0, 5, n)
    c = Contingency()
    for i in range(0, n, 37):
        c = c.merge(Contingency().update(pred[i:i + 37], ref[i:i + 37]))
    assert c.n_rows == n
    assert c.ari() == metrics.ari(ref, pred) and c.ami() == metrics.ami(ref, pred)
    if (ref >= 0).any():
        assert c.ari(exclude_noise=True) == metrics.ari(ref, pred, exclude_noise=True)
        assert c.agreement(match=True) == metrics.reference_agreement(pred, ref, match=True)
        assert c.misassignment() == pytest.approx(metrics.misassignment_rate(pred, ref), abs=1e-15)


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


# ------------------------------------------------------------------ streamed vs in memory
def _streamed(data, tmp_path, compute, sample_rows=None, chunk_rows=6_000):
    d, X, y = data
    run = StreamedRun(open_chunked(d / "shards"), open_chunked(d / "y.npy", vector=True), K, chunk_rows,
                      tmp_path / "work", compute)
    model = run.cluster("kmeans", {})
    assigned = run.assign(model)
    fits = run.fit(assigned, EXPLAINERS, sample_rows, model.cluster_centers_)
    return run, model, assigned, fits, run.evaluate(assigned, fits)


def test_streamed_equals_in_memory(data, tmp_path):
    d, X, y = data
    run, model, assigned, fits, rows = _streamed(data, tmp_path, LocalCompute())
    labels = model.predict(X).astype(np.int64)
    assert np.array_equal(assigned["labels"].read(0, N), labels)
    # MMDT: the streamed means/variances are exactly those of the in-memory array (one chunk), so
    # is the tree; MMDT.fit's own (two-pass float) estimates agree to rounding, with the same cuts
    w, means, covs = assigned["moments"].mixture()
    in_memory = chunk_moments(X, labels, K)
    assert all(np.array_equal(a, b) for a, b in zip((w, means, covs.diagonal(axis1=1, axis2=2)),
                                                      (*in_memory.mixture()[:2], in_memory.exact()[1])))
    names = [f"x{j}" for j in range(D)]
    ref = MMDT(random_state=0).fit_mixture(in_memory.mixture()[1], mixture_sigma(in_memory.mixture()[2]), names)
    assert fits["mmdt"]["tree"].to_dict() == ref.tree_.to_dict()
    est = MMDT(random_state=0).fit(X.astype(np.float64), labels, feature_names=names)
    np.testing.assert_allclose(means, est.means_, rtol=1e-12)
    np.testing.assert_allclose(mixture_sigma(covs), est.sigma_, rtol=1e-12)
    a, b = fits["mmdt"]["tree"], est.tree_
    assert np.array_equal(a.feature, b.feature) and np.allclose(a.threshold, b.threshold, rtol=1e-12, atol=1e-12, equal_nan=True)
    # the other trees, fitted on every row, are the in-memory fits; the metrics over all rows too
    inputs = FitInputs(X=X, labels=labels, feature_names=[f"x{j}" for j in range(D)], n_clusters=K,
                       centers=model.cluster_centers_)
    by_row = {r["explainer"]: r for r in rows}
    for row in ("imm", "cart"):
        est, pred = fit_explainer(row, EXPLAINERS[row], inputs, 0)
        assert fits[row]["tree"].to_dict() == est.tree_.to_dict()
        assert by_row[row]["ari"] == metrics.ari(y, pred)
        assert by_row[row]["misassignment"] == pytest.approx(metrics.misassignment_rate(pred, labels), abs=1e-15)
    assert by_row["reference"]["ari"] == metrics.ari(y, labels)
    assert (tmp_path / "work" / "predict" / "manifest.json").exists()


def test_sample_rows_larger_than_data(data, tmp_path):
    with pytest.raises(InvalidInputError, match=r"fit\.sample_rows=50000 is larger than the data \(40000 rows\)"):
        _streamed(data, tmp_path, LocalCompute(), sample_rows=50_000)


def test_cli_chunked_run_and_bad_labels(data, tmp_path):
    d, X, y = data
    base = [f"paths.output_dir={tmp_path / 'out'}", f"paths.cache_dir={tmp_path / 'cache'}", "dataset=files",
            f"dataset.path={d / 'shards'}", "dataset.chunk_rows=10000", "clustering=kmeans",
            f"clustering.n_clusters={K}", "explainer=[mmdt,imm]", "fit.sample_rows=20000"]
    df = run(compose_config(base + [f"dataset.labels={d / 'y.npy'}"]))
    assert list(df["explainer"]) == ["reference", "mmdt", "imm"]
    assert (df.set_index("explainer").loc["imm", "fit_rows"]) == 20_000
    assert (tmp_path / "out" / "trees" / "mmdt.rules.txt").exists()
    np.save(tmp_path / "short.npy", y[:-5])
    with pytest.raises(InvalidInputError, match=r"holds 39995 labels but dataset\.path=.* holds 40000 rows"):
        run(compose_config(base + [f"dataset.labels={tmp_path / 'short.npy'}"]))


# ------------------------------------------------------------------ Dask
@pytest.mark.parametrize("address", ["tcp://127.0.0.1:9", "no-port-here"])
def test_unanswered_scheduler_fails_fast(address):
    pytest.importorskip("distributed")
    from pipeline.app.compute import DaskCompute

    t0 = time.perf_counter()
    with pytest.raises(InvalidInputError, match=rf"compute\.address={address}: no Dask scheduler answered within 2 s"):
        DaskCompute(address=address, timeout=2)
    assert time.perf_counter() - t0 < 30


@pytest.fixture(scope="module")
def dask_compute():
    pytest.importorskip("distributed")
    from pipeline.app.compute import DaskCompute

    compute = DaskCompute(n_workers=2, threads_per_worker=1, memory_limit="1GB")
    yield compute
    compute.close()


def test_dask_equals_local_streamed(data, tmp_path, dask_compute):
    _, _, la, lf, lr = _streamed(data, tmp_path / "local", LocalCompute())
    _, _, da, df_, dr = _streamed(data, tmp_path / "dask", dask_compute)
    assert np.array_equal(la["moments"].means, da["moments"].means)
    assert np.array_equal(la["moments"].scatter, da["moments"].scatter)
    assert np.array_equal(la["labels"].read(0, N), da["labels"].read(0, N))
    assert all(lf[r]["tree"].to_dict() == df_[r]["tree"].to_dict() for r in EXPLAINERS)
    drop = lambda rows: [{k: v for k, v in r.items() if k != "fit_seconds"} for r in rows]  # noqa: E731
    assert drop(lr) == drop(dr)


class _DieOnce:
    """A chunk task whose first run on chunk 1 kills its worker process (the marker file records it)."""

    def __init__(self, task, marker):
        self.task, self.marker = task, str(marker)

    def __call__(self, item):
        if item[0] == 1 and not os.path.exists(self.marker):
            Path(self.marker).write_text("died")
            os._exit(1)
        if item[0] == 1 and Path(self.marker).read_text() == "always":
            os._exit(1)
        return self.task(item)


@pytest.mark.slow
def test_killed_worker_retried_or_clean_failure(data, tmp_path, dask_compute, monkeypatch):
    import pipeline.app.streamed as streamed

    original = streamed.AssignTask
    marker = tmp_path / "marker"

    def dying(*args):
        return _DieOnce(original(*args), marker)

    monkeypatch.setattr(streamed, "AssignTask", dying)
    # a worker dies once mid-stage: Dask moves its task to another worker; results as without the death
    _, _, assigned, fits, rows = _streamed(data, tmp_path / "once", dask_compute)
    assert marker.read_text() == "died"
    _, _, ref, ref_fits, _ = _streamed(data, tmp_path / "ref", LocalCompute())
    assert np.array_equal(assigned["moments"].scatter, ref["moments"].scatter)
    # a chunk that kills every worker it reaches: the stage fails cleanly, no artifact is left behind
    marker.write_text("always")
    with pytest.raises(RuntimeError, match="Dask workers died"):  # after the scheduler's allowed failures
        _streamed(data, tmp_path / "always", dask_compute)
    work = tmp_path / "always" / "work"
    assert not (work / "assign").exists() and not [p for p in work.iterdir() if p.name.endswith(".tmp")]


# ------------------------------------------------------------------ docs/out-of-core.md runs
DOC = Path(__file__).resolve().parents[1] / "docs" / "out-of-core.md"


def _doc_blocks(kind: str) -> list[str]:
    import re

    return re.findall(rf"```{kind}\n(.*?)```", DOC.read_text(), flags=re.S)


@pytest.fixture
def doc_dir(data, tmp_path, monkeypatch):
    d, X, y = data
    shutil_copy = __import__("shutil").copytree
    shutil_copy(d / "shards", tmp_path / "emb")
    np.save(tmp_path / "labels.npy", y)
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.slow
def test_docs_commands_run(doc_dir):
    import shlex

    lines = [ln for block in _doc_blocks("bash") for ln in block.splitlines() if ln.startswith("python -m pipeline")]
    assert len(lines) == 3
    for i, line in enumerate(lines):
        args = shlex.split(line)[3:]
        df = run(compose_config(args + [f"paths.output_dir={doc_dir / f'out{i}'}", f"paths.cache_dir={doc_dir / 'c'}"]))
        assert df["explainer"].iloc[0] == "reference" and (df["ref_ari"] > 0.5).all()
        assert (doc_dir / f"out{i}" / "streamed" / "seconds.json").exists()


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
