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
from pipeline.app.streamed import StreamedRun, moments_of, open_part
from pipeline.streaming import Contingency, chunk_moments, merge_moments, stratified_sample, stream_kmeans
from pipeline.trees.mmdt import MMDT
from pipeline.trees.tree import ExplanationTree
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
def _streamed(data, tmp_path, compute, sample_rows=None, chunk_rows=6_000, model=None, cavs=None):
    d, X, y = data
    run = StreamedRun(open_chunked(d / "shards"), open_chunked(d / "y.npy", vector=True), K, chunk_rows,
                      tmp_path / "work", compute, cavs=cavs)
    model = model or run.cluster("kmeans", {})
    assigned = run.assign(model)
    fits = run.fit(assigned, EXPLAINERS, sample_rows, model.centers)
    return run, model, assigned, fits, run.evaluate(assigned, fits).rows


def test_streamed_equals_in_memory(data, tmp_path):
    d, X, y = data
    run, model, assigned, fits, rows = _streamed(data, tmp_path, LocalCompute())
    labels = model.predict(X).astype(np.int64)  # the reference assigns a row alone: chunking changes nothing
    assert np.array_equal(open_part(assigned.shards, "labels").read(0, N), labels)
    # MMDT: the streamed means/variances are exactly those of the in-memory array (one chunk), so
    # is the tree; MMDT.fit's own (two-pass float) estimates agree to rounding, with the same cuts
    w, means, covs = moments_of(assigned).mixture()
    in_memory = chunk_moments(X, labels, K)
    assert all(np.array_equal(a, b) for a, b in zip((w, means, covs.diagonal(axis1=1, axis2=2)),
                                                      (*in_memory.mixture()[:2], in_memory.exact()[1])))
    names = [f"x{j}" for j in range(D)]
    ref = MMDT(random_state=0).fit_mixture(in_memory.mixture()[1], mixture_sigma(in_memory.mixture()[2]), names)
    # the same tree; the streamed fit also kept the neighbouring values of its sample around each cut
    # (exact printed rules), which a mixture-only fit has no rows for
    assert _without_neighbours(fits["mmdt"].tree) == ref.tree_.to_dict()
    est = MMDT(random_state=0).fit(X.astype(np.float64), labels, feature_names=names)
    np.testing.assert_allclose(means, est.means_, rtol=1e-12)
    np.testing.assert_allclose(mixture_sigma(covs), est.sigma_, rtol=1e-12)
    _same_cuts(fits["mmdt"].tree, est.tree_)
    # the other trees, fitted on every row, are the in-memory fits; the metrics over all rows too
    inputs = FitInputs(X=X, labels=labels, feature_names=[f"x{j}" for j in range(D)], n_clusters=K,
                       centers=model.centers)
    by_row = {r["explainer"]: r for r in rows}
    for row in ("imm", "cart"):
        est, pred = fit_explainer(row, EXPLAINERS[row], inputs, 0)
        assert fits[row].tree == est.tree_.to_dict()
        assert by_row[row]["ari"] == metrics.ari(y, pred)
        assert by_row[row]["misassignment"] == pytest.approx(metrics.misassignment_rate(pred, labels), abs=1e-15)
    assert by_row["reference"]["ari"] == metrics.ari(y, labels)
    assert (tmp_path / "work" / "predict" / "manifest.json").exists()


def _without_neighbours(doc: dict) -> dict:
    return {**doc, "nodes": [{k: v for k, v in node.items() if k not in ("neighbours", "weight_digits")}
                             for node in doc["nodes"]]}


def _same_cuts(doc: dict, tree) -> None:
    a = ExplanationTree.from_dict(doc)
    assert np.array_equal(a.feature, tree.feature)
    assert np.allclose(a.threshold, tree.threshold, rtol=1e-12, atol=1e-12, equal_nan=True)


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


# ------------------------------------------------------------------ concepts, ids, stages: the command line
def _cli(tmp_path, d, *extra, out="out", cache="cache", path="X.npy"):
    return [f"paths.output_dir={tmp_path / out}", f"paths.cache_dir={tmp_path / cache}", "dataset=files",
            f"dataset.path={d / path}", f"dataset.labels={d / 'y.npy'}", "dataset.chunk_rows=7000",
            "clustering=kmeans", f"clustering.n_clusters={K}", *extra]


@pytest.fixture(scope="module")
def concept_files(data):
    """Concept examples two ways: embeddings of examples (.npz) and a per-row concept table (rows
    0-499 unlabelled, some cells empty), plus string ids and the same table keyed by shuffled ids."""
    d, X, y = data
    rng = np.random.default_rng(1)
    np.savez(d / "cex.npz", c0=X[y == 0][:300], c1=X[y == 1][:300], c2=X[y == 2][:300], random=X[rng.choice(N, 600)])
    table = pd.DataFrame({"c0": (y == 0).astype(float), "c1": (X[:, 0] > np.median(X[:, 0])).astype(float),
                          "c3": (y == 3).astype(float)})
    table.iloc[:500] = np.nan
    table.loc[1000:1999, "c1"] = np.nan
    table.to_csv(d / "concepts.csv", index=False)
    (d / "mapping.yaml").write_text("low: [0, 1]\nthird: [2]\n")
    ids = np.array([f"img{i:05d}" for i in range(N)])
    np.save(d / "ids.npy", ids)
    keyed = table.assign(id=ids).sample(frac=1.0, random_state=0)
    keyed.to_csv(d / "concepts_by_id.csv", index=False)
    return d


def _in_memory_cavs(tmp_path, d, concepts):
    """The in-memory run's concepts stage on the same files (no chunk_rows)."""
    from pipeline.app.cache import StageCache
    from pipeline.app.runner import run_pipeline, to_plain
    from pipeline.app.stages.concepts import CONCEPTS
    from pipeline.app.stages.encode import ENCODE, TRAIN
    from pipeline.app.stages.framework import RunContext
    from pipeline.app.stages.load import LOAD

    cfg = to_plain(compose_config([a for a in _cli(tmp_path, d, *concepts, out="mem", cache="memcache")
                                   if not a.startswith("dataset.chunk_rows")]))
    done = run_pipeline(cfg, RunContext(StageCache(tmp_path / "memcache"), tmp_path / "mem"),
                        [LOAD, TRAIN, ENCODE, CONCEPTS])
    return cfg, done


def _streamed_stages(tmp_path, d, *extra, cache="cache"):
    from pipeline.app.cache import StageCache
    from pipeline.app.runner import run_stages, to_plain

    cfg = to_plain(compose_config(_cli(tmp_path, d, *extra, cache=cache)))
    done, fits, _ = run_stages(cfg, StageCache(tmp_path / cache))
    return cfg, done, fits


@pytest.mark.slow
@pytest.mark.parametrize("concepts", [["concepts=examples", "concepts.path=cex.npz"],
                                      ["concepts=examples", "concepts.path=concepts.csv"],
                                      ["concepts=classes", "concepts.path=mapping.yaml"]], ids=["npz", "table", "classes"])
def test_streamed_concepts_equal_in_memory(concept_files, tmp_path, concepts):
    """CAVs as in the in-memory run, Z Cᵀ streamed into shards, MMDT on its exact moments, trees on
    all rows equal to the in-memory run's project + fit stages on the same reference labels."""
    from pipeline.app.artifacts import ClusterArtifact
    from pipeline.app.stages.fit import fit_row
    from pipeline.app.stages.project import PROJECT
    from pipeline.concepts.projection import project

    d = concept_files
    concepts = [concepts[0], f"concepts.path={d / concepts[1].split('=')[1]}"]
    X = np.load(d / "X.npy")
    mem_cfg, mem = _in_memory_cavs(tmp_path, d, concepts)
    cfg, done, fits = _streamed_stages(tmp_path, d, *concepts, "explainer=[mmdt,cart]")
    C = done["concepts"].artifact.cavs
    assert np.array_equal(C, mem["concepts"].artifact.cavs)
    assert done["concepts"].artifact.concept_names == mem["concepts"].artifact.concept_names
    assign, cluster = done["assign"].artifact, done["cluster"].artifact
    labels = cluster.predict(X).astype(np.int64)
    P = project(X, C)
    assert np.array_equal(open_part(assign.shards, "X").read(0, N), P)  # Z Cᵀ chunk by chunk = in memory
    assert np.array_equal(open_part(assign.shards, "labels").read(0, N), labels)
    # MMDT on the exact streamed moments of the concept coordinates = on the in-memory array's exact moments
    exact = chunk_moments(P, labels, K).mixture()
    names = done["concepts"].artifact.concept_names
    ref = MMDT(random_state=0).fit_mixture(exact[1], mixture_sigma(exact[2]), names)
    # the streamed fit also keeps its sample's values around each cut (exact printed rules)
    assert _without_neighbours(fits["mmdt"].tree) == ref.tree_.to_dict()
    # the in-memory run's project and fit stages on the same reference labels
    mem_cluster = ClusterArtifact(labels=labels, method="kmeans", centers=cluster.centers)
    mem_cfg["explainer"] = cfg["explainer"]
    projected = PROJECT.compute(mem_cfg, encode=mem["encode"].artifact, cluster=mem_cluster,
                                concepts=mem["concepts"].artifact)
    assert np.array_equal(projected.X, P)
    assert fits["cart"].tree == fit_row(mem_cfg, "cart", projected, mem_cluster).tree
    _same_cuts(fits["mmdt"].tree, ExplanationTree.from_dict(fit_row(mem_cfg, "mmdt", projected, mem_cluster).tree))


@pytest.mark.slow
def test_ids_streamed_to_assignments_and_concept_join(concept_files, tmp_path):
    d = concept_files
    by_order = ["concepts=examples", f"concepts.path={d / 'concepts.csv'}", "explainer=[cart]"]
    by_id = ["concepts=examples", f"concepts.path={d / 'concepts_by_id.csv'}", "concepts.id_column=id",
             f"dataset.ids={d / 'ids.npy'}", "explainer=[cart]"]
    _, a, fa = _streamed_stages(tmp_path, d, *by_order, cache="c1")
    _, b, fb = _streamed_stages(tmp_path, d, *by_id, cache="c2")
    assert np.array_equal(a["concepts"].artifact.cavs, b["concepts"].artifact.cavs)  # joined on the streamed ids
    df = run(compose_config(_cli(tmp_path, d, *by_id, cache="c2", path="shards")))
    out = pd.read_parquet(tmp_path / "out" / "assignments")
    assert list(out.columns) == ["id", "reference", "cart"] and len(out) == N
    assert np.array_equal(out["id"].to_numpy(), np.load(d / "ids.npy"))
    assert df.set_index("explainer").loc["cart", "misassignment"] == pytest.approx(
        float(np.mean(out["cart"] != out["reference"])), abs=1e-12)
    np.save(tmp_path / "few_ids.npy", np.load(d / "ids.npy")[:100])
    with pytest.raises(InvalidInputError, match=r"dataset\.ids=.* holds 100 ids but dataset\.path=.* holds 40000 rows"):
        run(compose_config(_cli(tmp_path, d, f"dataset.ids={tmp_path / 'few_ids.npy'}", out="o2")))


def _events(out):
    import json

    return {(e["stage"], e["key"]): e for e in json.loads((out / "status.json").read_text())["cache"]}


def test_chunked_run_cached_resumed_and_verified(concept_files, tmp_path, monkeypatch):
    import pipeline.app.streamed as streamed

    d = concept_files
    args = ["concepts=examples", f"concepts.path={d / 'cex.npz'}", "explainer=[mmdt,cart]"]
    first = run(compose_config(_cli(tmp_path, d, *args)))
    again = run(compose_config(_cli(tmp_path, d, *args, out="again")))
    assert all(e["hit"] for e in _events(tmp_path / "again").values())  # every cached stage read back
    drop = lambda df: df.drop(columns=["fit_seconds"])  # noqa: E731
    pd.testing.assert_frame_equal(drop(first), drop(again))

    # killed mid-stage (chunk 2 of assign): nothing of the stage is left; the next run resumes after concepts
    original = streamed.AssignTask

    class Killed:
        def __init__(self, *a):
            self.task = original(*a)

        def __call__(self, item):
            if item[0] == 2:
                raise KeyboardInterrupt
            return self.task(item)

    monkeypatch.setattr(streamed, "AssignTask", Killed)
    with pytest.raises(KeyboardInterrupt):
        run(compose_config(_cli(tmp_path, d, *args, "seed=1", out="killed")))
    assign_dir = tmp_path / "cache" / "assign"
    assert not [p for p in assign_dir.iterdir() if p.name.startswith(".")]  # no temporary shards left
    before = {p.name for p in assign_dir.iterdir()}
    monkeypatch.setattr(streamed, "AssignTask", original)
    resumed = run(compose_config(_cli(tmp_path, d, *args, "seed=1", out="resumed")))
    hits = {stage: e["hit"] for (stage, _), e in _events(tmp_path / "resumed").items()}
    assert hits["stream_cluster"] and hits["stream_concepts"] and not hits["assign"]
    assert len({p.name for p in assign_dir.iterdir()} - before) == 2  # the entry and its shards, now complete
    fresh = run(compose_config(_cli(tmp_path, d, *args, "seed=1", out="fresh", cache="fresh_cache")))
    pd.testing.assert_frame_equal(drop(resumed), drop(fresh))

    # a damaged shard: the cached entry is quarantined and recomputed, same results
    (key,) = [k for (stage, k) in _events(tmp_path / "again") if stage == "assign"]  # the first command's entry
    shard = tmp_path / "cache" / "assign" / f"{key}.shards" / "X" / "000001.npy"
    shard.write_bytes(shard.read_bytes()[:-8] + b"\0" * 8)
    repaired = run(compose_config(_cli(tmp_path, d, *args, out="repaired")))
    events = _events(tmp_path / "repaired")
    assert any(e["recovered"] for (stage, _), e in events.items() if stage == "assign")
    pd.testing.assert_frame_equal(drop(first), drop(repaired))


def test_chunked_concept_bad_input(concept_files, tmp_path):
    d = concept_files
    (tmp_path / "cf" / "stripes").mkdir(parents=True)
    (tmp_path / "cf" / "random").mkdir()
    for f in ("cf/stripes/a.txt", "cf/random/b.txt"):
        (tmp_path / f).write_text("words")
    cases = [
        (["concepts=examples", f"concepts.path={tmp_path / 'cf'}"], r"holds text examples but the dataset is tabular"),
        (["concepts=examples", f"concepts.path={d / 'cex.npz'}", "concepts.params.select=1"],
         r"concepts\.params\.select .* needs the in-memory run"),
        (["concepts=examples", f"concepts.path={d / 'cex.npz'}", "explainer=[concept_mmdt]"],
         r"explainer 'concept_mmdt' \(fit: concept_mixture\) does not run on streamed data"),
    ]
    for extra, message in cases:
        with pytest.raises(InvalidInputError, match=message):
            run(compose_config(_cli(tmp_path, d, *extra)))


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


# The stated tolerance of compute=dask's clustering (dask-ml k-means||) against the local streamed
# one (MiniBatchKMeans partial_fit): adjusted Rand index of the two reference clusterings >= 0.99 on
# well-separated clusters (docs/out-of-core.md). Everything after the clustering is deterministic.
DASK_ML_ARI = 0.99


@pytest.mark.slow
def test_dask_equals_local_streamed(data, tmp_path, dask_compute):
    d, X, y = data
    _, model, la, lf, lr = _streamed(data, tmp_path / "local", LocalCompute())
    _, dask_model, da, df_, dr = _streamed(data, tmp_path / "dask", dask_compute, model=model)  # same reference
    assert np.array_equal(la.chan_means, da.chan_means) and np.array_equal(la.scatter, da.scatter)
    assert la.manifest_sha256 == da.manifest_sha256  # the same shards, byte for byte
    assert all(lf[r].tree == df_[r].tree for r in EXPLAINERS)
    drop = lambda rows: [{k: v for k, v in r.items() if k != "fit_seconds"} for r in rows]  # noqa: E731
    assert drop(lr) == drop(dr)
    # the reference clustering on Dask: dask-ml's k-means||, within the stated tolerance of the local one
    run = StreamedRun(open_chunked(d / "shards"), None, K, 6_000, tmp_path / "w", dask_compute)
    dask_ml = run.cluster("kmeans", {})
    assert dask_ml.backend == "dask-ml k-means||"
    assert metrics.ari(model.predict(X), dask_ml.predict(X)) >= DASK_ML_ARI


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

    _, model, ref, ref_fits, _ = _streamed(data, tmp_path / "ref", LocalCompute())
    monkeypatch.setattr(streamed, "AssignTask", dying)
    # a worker dies once mid-stage: Dask moves its task to another worker; results as without the death
    _, _, assigned, fits, rows = _streamed(data, tmp_path / "once", dask_compute, model=model)
    assert marker.read_text() == "died"
    assert np.array_equal(assigned.scatter, ref.scatter)
    # a chunk that kills every worker it reaches: the stage fails cleanly, no artifact is left behind
    marker.write_text("always")
    with pytest.raises(RuntimeError, match="Dask workers died"):  # after the scheduler's allowed failures
        _streamed(data, tmp_path / "always", dask_compute, model=model)
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
    np.save(tmp_path / "ids.npy", np.array([f"row{i}" for i in range(N)]))
    np.savez(tmp_path / "concept_examples.npz", near_0=X[y == 0][:200], near_1=X[y == 1][:200], random=X[:400])
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.slow
def test_docs_commands_run(doc_dir):
    import shlex

    lines = [ln for block in _doc_blocks("bash") for ln in block.splitlines() if ln.startswith("python -m pipeline")]
    assert len(lines) == 4
    for i, line in enumerate(lines):
        args = shlex.split(line)[3:]
        df = run(compose_config(args + [f"paths.output_dir={doc_dir / f'out{i}'}", f"paths.cache_dir={doc_dir / 'c'}"]))
        assert df["explainer"].iloc[0] == "reference" and (df["ref_ari"] > 0.5).all()
        assert (doc_dir / f"out{i}" / "streamed" / "seconds.json").exists()
    assert pd.read_parquet(doc_dir / "out3" / "assignments")["id"].iloc[-1] == f"row{N - 1}"


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


# ------------------------------------------------------------------ SIGKILL mid-stage (a real process)
KILL_LAUNCHER = r'''
import os, runpy, signal, sys

import pipeline.app.streamed as streamed

original = streamed.write_shard
def write_shard(folder, index, arrays):
    out = original(folder, index, arrays)
    if "/assign/" in folder and index == int(os.environ["KILL_AT_CHUNK"]):
        os.kill(os.getpid(), signal.SIGKILL)  # mid-stage: some shards written, the stage unfinished
    return out
streamed.write_shard = write_shard
sys.argv = ["pipeline", *sys.argv[1:]]
runpy.run_module("pipeline", run_name="__main__", alter_sys=True)
'''


@pytest.mark.slow
def test_sigkill_mid_assign_resumes(tmp_path):
    import json
    import signal
    import subprocess
    import sys

    X, y = blobs(8_000, 16)
    (tmp_path / "emb").mkdir()
    for i in range(2):
        np.save(tmp_path / "emb" / f"{i}.npy", X[i * 4_000:(i + 1) * 4_000])
    np.save(tmp_path / "y.npy", y)
    np.savez(tmp_path / "cex.npz", a=X[y == 0][:100], b=X[y == 1][:100], random=X[:200])
    (tmp_path / "launch.py").write_text(KILL_LAUNCHER)

    def cli(out, cache, kill=None):
        args = [f"paths.output_dir={tmp_path / out}", f"paths.cache_dir={tmp_path / cache}", "dataset=files",
                f"dataset.path={tmp_path / 'emb'}", f"dataset.labels={tmp_path / 'y.npy'}", "dataset.chunk_rows=1000",
                "clustering=kmeans", f"clustering.n_clusters={K}", "concepts=examples",
                f"concepts.path={tmp_path / 'cex.npz'}", "explainer=[mmdt,cart]"]
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src"), "KILL_AT_CHUNK": str(kill)}
        cmd = [sys.executable, str(tmp_path / "launch.py")] if kill is not None else [sys.executable, "-m", "pipeline"]
        return subprocess.run(cmd + args, env=env, capture_output=True, text=True, timeout=600)

    killed = cli("killed", "cache", kill=3)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assign = tmp_path / "cache" / "assign"
    assert [p.name for p in assign.iterdir() if p.name.endswith(".tmp")]  # the unfinished shards, not in place
    assert not [p for p in assign.iterdir() if p.is_dir() and not p.name.startswith(".")]  # no entry, no shards
    resumed = cli("resumed", "cache")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    events = json.loads((tmp_path / "resumed" / "status.json").read_text())["cache"]
    hits = {e["stage"]: e["hit"] for e in events}
    assert hits["stream_cluster"] and hits["stream_concepts"] and not hits["assign"]
    assert not [p for p in assign.iterdir() if p.name.endswith(".tmp")]  # the leftover was removed
    assert cli("whole", "fresh").returncode == 0
    a, b = (pd.read_csv(tmp_path / d / "results.csv").drop(columns=["fit_seconds"]) for d in ("resumed", "whole"))
    pd.testing.assert_frame_equal(a, b)
    for row in ("mmdt", "cart"):
        assert (tmp_path / "resumed" / "trees" / f"{row}.json").read_text() == \
            (tmp_path / "whole" / "trees" / f"{row}.json").read_text()
