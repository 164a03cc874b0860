"""One predictor for the reference clustering (issue 49, item 4): the chunk pass, the saved explainer
and ``ConceptExplainer`` assign a row to a cluster by the same rule, so the saved explainer gives a
run's own rows the run's own labels, whatever the clustering.

Before, the saved explainer assigned spectral, DBSCAN, scaled k-means and a user's clustering to the
nearest cluster *mean*: UCI wine from a CSV with ``clustering=spectral`` put 2 of its 178 rows
(1.1%) in another cluster than the run did.
"""

from __future__ import annotations

import json
import pickle
import textwrap

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.app.stores.cache import StageCache
from pipeline.app.configuration.config import compose_config
from pipeline.app.running.runner import run, run_stages, to_plain
from pipeline.cluster_heads import (
    EncoderHead,
    MixtureHead,
    NearestCentreHead,
    NearestRowPredictor,
    predictor_from_dict,
    predictor_of,
)
from pipeline.clustering import Clustering, nearest_centers
from pipeline.validation import InvalidInputError

QUIET = ["report.figures=false", "report.html=false", "report.summary=false"]


def wine_csv(path):
    from sklearn.datasets import load_wine

    load_wine(as_frame=True).frame.rename(columns={"target": "cultivar"}).to_csv(path, index=False)
    return path


def finished(tmp, *overrides):
    """(run dir, stage outputs) of a run into ``tmp/run`` (cache ``tmp/cache``)."""
    args = [*overrides, f"paths.output_dir={tmp / 'run'}", f"paths.cache_dir={tmp / 'cache'}",
            f"paths.models_dir={tmp / 'models'}", *QUIET]
    run(compose_config(args))
    plain = to_plain(compose_config(args))
    done, _, _ = run_stages(plain, StageCache(tmp / "cache"))
    return tmp / "run", done


USER_CLUSTERING = '''
import numpy as np
from sklearn.cluster import AgglomerativeClustering
from pipeline.clustering import Clustering

def agglomerative(X, n_clusters, random_state=0):
    return Clustering(AgglomerativeClustering(n_clusters).fit_predict(X).astype(np.int64), "agglomerative")
'''

CASES = {
    "gmm": (["clustering=gmm"], "mixture"),
    "kmeans": (["clustering=kmeans", "dataset.standardize=false"], "nearest_center"),
    # the CSV's columns z-scored for clustering (the default for a table): k-means on the standardised table
    "kmeans, standardised table": (["clustering=kmeans"], "nearest_center"),
    # k-means on its own scaled copy of the latents: no rule in the latents' units
    "kmeans, scaled by the clustering": (["clustering=kmeans", "+clustering.params.standardize=true"], "nearest_row"),
    "spectral": (["clustering=spectral"], "nearest_row"),
    "user _target_": (["clustering._target_=user_clusterings.agglomerative", "clustering.name=agglomerative",
                       "clustering.provides=[labels]", "~clustering.params.covariance_type",
                       "~clustering.params.n_init"], "nearest_row"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_saved_explainer_gives_the_runs_own_rows_the_runs_labels(case, tmp_path, monkeypatch):
    from pipeline import ConceptExplainer

    (tmp_path / "user_clusterings.py").write_text(textwrap.dedent(USER_CLUSTERING))
    monkeypatch.syspath_prepend(str(tmp_path))
    overrides, kind = CASES[case]
    csv = wine_csv(tmp_path / "wine.csv")
    run_dir, done = finished(tmp_path, "dataset=files", f"dataset.path={csv}", "dataset.labels=cultivar",
                             "explainer=[cart]", *overrides)
    ex = ConceptExplainer.load(run_dir)
    assert ex.bundle_.doc["reference"]["assign"] == kind
    load, cluster = done["load"].artifact, done["cluster"].artifact
    table = load.raw if load.raw is not None else load.X
    assert np.array_equal(ex.predict(table), cluster.labels)
    assert np.array_equal(ex.explain(table)["reference"].to_numpy(), cluster.labels)
    # the run's own predictor says the same, and so does the one read back from the bundle
    assert np.array_equal(cluster.predictor(done["encode"].artifact.Z).predict(done["encode"].artifact.Z),
                          cluster.labels)


def test_the_encoders_head_gives_the_runs_own_labels(tmp_path):
    from pipeline import ConceptExplainer

    run_dir, done = finished(tmp_path, "dataset=digits", "encoder=vade", "encoder.device=cpu",
                             "encoder.params.hidden_dims=[16]", "encoder.params.latent_dim=2",
                             "encoder.params.n_clusters=3", "encoder.params.pretrain_epochs=1",
                             "encoder.params.epochs=1", "clustering=encoder",
                             "dataset.classes=[0,1,7]", "dataset.n_samples=150", "concepts=none", "explainer=[cart]")
    ex = ConceptExplainer.load(run_dir)
    assert ex.bundle_.doc["reference"]["assign"] == "encoder_head"
    load, cluster, encode = done["load"].artifact, done["cluster"].artifact, done["encode"].artifact
    assert np.array_equal(ex.predict(load.inputs), cluster.labels)  # the encoder's head itself
    # on latents alone, its mixture prior in float64: the encoder's own answer but at a boundary
    on_latents = ex.predict(encode.Z, latents=True)
    assert np.mean(on_latents == cluster.labels) >= 0.99


def test_a_run_out_of_core_and_its_saved_explainer_assign_alike(tmp_path):
    """Spectral clustering fitted on a sample, every row assigned by the chunk pass: the saved
    explainer keeps the sample's rows and labels, so it assigns every row as the pass did."""
    from pipeline import ConceptExplainer

    rng = np.random.default_rng(0)
    centres = rng.normal(scale=3, size=(3, 6))
    y = rng.integers(0, 3, 6000)
    np.save(tmp_path / "emb.npy", (centres[y] + rng.normal(size=(6000, 6))).astype(np.float32))
    np.save(tmp_path / "labels.npy", y)
    run_dir, done = finished(tmp_path, "dataset=files", f"dataset.path={tmp_path / 'emb.npy'}",
                             f"dataset.labels={tmp_path / 'labels.npy'}", "dataset.memory_budget=64kB",
                             "dataset.chunk_rows=1000", "clustering=spectral", "clustering.sample_rows=400",
                             "explainer=[cart]")
    cluster = done["cluster"].artifact
    assert cluster.fit_rows is not None and len(cluster.fit_rows) == 400
    ex = ConceptExplainer.load(run_dir)
    assert ex.bundle_.arrays["ref_rows"].shape == (400, 6)
    Z = np.load(tmp_path / "emb.npy")
    assert np.array_equal(ex.predict(Z, latents=True), cluster.labels)


def test_an_older_bundle_keeps_its_nearest_mean_rule(tmp_path):
    """A bundle of format version 2 assigned spectral clusters to the nearest cluster mean: it still
    loads, and keeps that rule."""
    import importlib.util
    from pathlib import Path

    from pipeline import ConceptExplainer

    spec = importlib.util.spec_from_file_location(
        "battery", Path(__file__).resolve().parents[1] / "benchmarks" / "edge_battery_issue51.py")
    battery = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(battery)
    run_dir, done = finished(tmp_path, "dataset=iris", "clustering=spectral", "explainer=[cart]")
    folder = run_dir / "explainer"
    Z = np.asarray(done["encode"].artifact.Z, dtype=np.float64)
    labels = done["cluster"].artifact.labels
    used = np.unique(labels)
    means = np.stack([Z[labels == c].mean(axis=0) for c in used])

    def as_version_2(a):
        a.pop("ref_rows"), a.pop("ref_labels")
        a.update(ref_centers=means, ref_center_labels=used.astype(np.int64))

    battery.edit_arrays(folder, as_version_2)

    def doc_2(doc):
        from pipeline.app.explainer.bundle_checks import array_record, content_digest

        with np.load(folder / "arrays.npz") as z:
            doc["arrays"] = array_record({k: z[k] for k in z.files})
        doc.update(version=2)
        doc["reference"]["assign"] = "nearest_mean"
        doc["content_sha256"] = content_digest(doc)

    battery.edit_json(folder, doc_2)
    ex = ConceptExplainer.load(folder)
    want = used[nearest_centers(Z, means)[0]]
    assert np.array_equal(ex.predict(Z, latents=True), want)
    saved = ex.save(tmp_path / "again")  # saved again: the current format, the same rule
    assert json.loads((saved / "explainer.json").read_text())["reference"]["assign"] == "nearest_row"
    assert np.array_equal(ConceptExplainer.load(saved).predict(Z, latents=True), want)


# ------------------------------------------------------------------ the predictors themselves
def _blobs(n=300, d=4, k=3, seed=0, dtype=np.float64):
    rng = np.random.default_rng(seed)
    centres = rng.normal(scale=3, size=(k, d))
    y = rng.integers(0, k, n)
    return (centres[y] + rng.normal(size=(n, d))).astype(dtype), y


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10_000), st.sampled_from([np.float32, np.float64]), st.integers(1, 97))
def test_every_predictor_equals_its_brute_force_rule_in_any_chunking(seed, dtype, block):
    from sklearn.mixture import GaussianMixture

    Z, y = _blobs(seed=seed, dtype=dtype)
    rng = np.random.default_rng(seed)
    new = (Z[rng.permutation(len(Z))[:80]] + rng.normal(scale=0.5, size=(80, Z.shape[1]))).astype(dtype)
    gm = GaussianMixture(3, random_state=0).fit(Z)
    centres = Z[:3]  # in the rows' precision: a float32 chunk is compared with float32 centres
    brute = {
        MixtureHead(gm.weights_, gm.means_, gm.covariances_): gm.predict(new),
        NearestCentreHead(centres): ((new.astype(np.float64)[:, None] - centres.astype(np.float64)[None]) ** 2)
        .sum(axis=2).argmin(axis=1),
        NearestRowPredictor(Z, y): y[((new.astype(np.float64)[:, None] - Z.astype(np.float64)[None]) ** 2)
                                     .sum(axis=2).argmin(axis=1)],
    }
    for predictor, want in brute.items():
        got = predictor.predict(new, block_rows=block)
        assert got.dtype == np.int64 and np.array_equal(got, want), predictor.kind
        again = predictor_from_dict(pickle.loads(pickle.dumps(predictor.to_dict())))
        assert type(again) is type(predictor) and np.array_equal(again.predict(new), want)
        assert np.array_equal(pickle.loads(pickle.dumps(predictor)).predict(new), want)  # picklable (Dask)


def test_predictor_of_picks_the_runs_rule_and_says_what_it_needs():
    Z, y = _blobs()
    w, m, c = np.full(3, 1 / 3), np.zeros((3, 4)), np.stack([np.eye(4)] * 3)
    assert type(predictor_of(Clustering(y, "gmm", means=m, weights=w, covariances=c))) is MixtureHead
    assert type(predictor_of(Clustering(y, "encoder", means=m, weights=w, covariances=c))) is EncoderHead
    assert type(predictor_of(Clustering(y, "kmeans", centers=m))) is NearestCentreHead
    scaled = Clustering(y, "kmeans", centers=m, scores={"scaled": True})
    assert type(predictor_of(scaled, Z)) is NearestRowPredictor
    with pytest.raises(InvalidInputError, match="rows it was fitted on"):
        predictor_of(Clustering(y, "spectral"))
    assert np.array_equal(predictor_of(Clustering(y, "dbscan"), lambda: Z).predict(Z), y)  # rows read only then
    with pytest.raises(InvalidInputError, match="cannot be built"):
        predictor_from_dict({"kind": "mixture"})


def test_an_encoder_head_maps_the_heads_numbers_to_the_runs():
    class Head:
        def predict_clusters(self, inputs):
            return np.array([0, 2, 5, 2])

    head = EncoderHead(np.full(3, 1 / 3), np.zeros((3, 2)), np.stack([np.eye(2)] * 3), head_labels=[0, 2, 5])
    assert head.predict_inputs(Head(), None).tolist() == [0, 1, 2, 1]
