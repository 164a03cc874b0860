"""k-means fitted on a sample, then one assignment pass (clustering.params.fit_rows, issue 27)."""

import numpy as np
import pytest
from sklearn.cluster import KMeans
from sklearn.datasets import make_blobs
from sklearn.metrics import adjusted_rand_score

from pipeline.clustering import fit_kmeans
from pipeline.validation import InvalidInputError


def test_fit_rows_labels_every_row_by_its_nearest_sample_centre():
    X, _ = make_blobs(20000, 16, centers=6, cluster_std=3.0, random_state=0)
    X = X.astype(np.float32)
    c = fit_kmeans(X, 6, random_state=0, fit_rows=2000, n_init=3)
    assert c.labels.shape == (20000,) and c.centers.shape == (6, 16)
    d = ((X[:, None, :].astype(np.float64) - c.centers[None]) ** 2).sum(axis=2)
    assert np.mean(np.argmin(d, axis=1) == c.labels) > 0.9999  # nearest centre (float32 rounding aside)
    full = KMeans(6, n_init=3, random_state=0).fit(X).labels_
    assert adjusted_rand_score(full, c.labels) > 0.99
    again = fit_kmeans(X, 6, random_state=0, fit_rows=2000, n_init=3)
    assert np.array_equal(again.labels, c.labels)  # seeded sample


def test_fit_rows_at_least_all_rows_is_plain_kmeans_and_bad_values_fail():
    X, _ = make_blobs(300, 4, centers=3, random_state=1)
    plain = fit_kmeans(X, 3, random_state=0, n_init=2)
    assert np.array_equal(fit_kmeans(X, 3, random_state=0, n_init=2, fit_rows=300).labels, plain.labels)
    for bad in (2, 2.5, "many", True):
        with pytest.raises(InvalidInputError, match="fit_rows"):
            fit_kmeans(X, 3, fit_rows=bad)
