"""experiment=spex_table2 and its published-notebook twin (spex_table2_notebook) on Iris, and
the clustering options the notebook's protocol needs (MiniBatchKMeans, standardisation, k-NN graph)."""

import numpy as np
import pytest
from sklearn.datasets import load_iris
from sklearn.neighbors import kneighbors_graph
from sklearn.preprocessing import StandardScaler

from pipeline.app.configuration.config import compose_config
from pipeline.app.running.runner import run
from pipeline.clustering import fit_kmeans, fit_spectral
from pipeline.validation import InvalidInputError

OTHER_RUNS = [f"~study.runs.{name}_{ref}" for name in ("r15", "pathbased", "cancer") for ref in ("spectral", "kmeans")]


def test_standardised_minibatch_kmeans_keeps_centres_in_raw_units():
    X = load_iris().data * np.array([1.0, 100.0, 1.0, 0.01])
    c = fit_kmeans(X, 3, random_state=0, minibatch=True, standardize=True)
    for k in range(3):
        np.testing.assert_allclose(c.centers[k], X[c.labels == k].mean(axis=0))
    plain = fit_kmeans(X, 3, random_state=0, n_init=10)
    assert np.allclose(plain.centers.mean(0), X.mean(0), rtol=0.5)  # KMeans: its own centres, raw units


def test_spectral_knn_graph_is_the_notebooks_symmetrised_graph():
    X = load_iris().data
    c = fit_spectral(X, 3, random_state=0, affinity="nearest_neighbors", n_neighbors=50, assign_labels="cluster_qr",
                     standardize=True, graph="knn")
    A = kneighbors_graph(StandardScaler().fit_transform(X), n_neighbors=50)
    assert (abs(c.graph - (A + A.T)) > 0).nnz == 0
    assert c.graph.diagonal().sum() == 0 and set(np.unique(c.graph.data)) <= {1.0, 2.0}
    with pytest.raises(InvalidInputError, match="graph must be"):
        fit_spectral(X, 3, graph="full")


@pytest.mark.parametrize("experiment", ["spex_table2", "spex_table2_notebook"])
def test_both_protocols_run_on_iris(tmp_path, capsys, experiment):
    cfg = compose_config([f"experiment={experiment}", f"paths.output_dir={tmp_path / 'run'}",
                          f"paths.cache_dir={tmp_path / 'cache'}", "report.figures=false", "report.html=false",
                          *OTHER_RUNS])
    df = run(cfg)
    assert set(df["run"]) == {"iris_spectral", "iris_kmeans"}
    rows = df.set_index(["run", "explainer"])
    assert {"spex_knn", "spex_clique", "cart"} <= set(rows.loc["iris_spectral"].index)
    assert {"emn", "spex_clique", "cart"} <= set(rows.loc["iris_kmeans"].index)
    assert (rows["ari"].dropna() > 0.4).all()
    assert "published" in capsys.readouterr().out
