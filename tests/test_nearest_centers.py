"""The nearest k-means centre from the projection kernel's pass (issue 35): the same label as
the exact nearest centre for every row (scikit-learn's ``pairwise_distances_argmin`` wherever no two centres are
within rounding of each other)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import pairwise_distances_argmin

from pipeline.cluster_heads import NearestCentreHead
from pipeline.clustering import exact_nearest, nearest_centers
from pipeline.concepts.projection import project


@settings(max_examples=80, deadline=None)
@given(n=st.integers(1, 60), d=st.integers(1, 40), k=st.integers(1, 12), seed=st.integers(0, 2**16),
       scale=st.sampled_from([1e-30, 1e-3, 1.0, 1e3, 1e30]), dtype=st.sampled_from([np.float32, np.float64]),
       ties=st.booleans())
def test_nearest_centers_match_scikit_learn(n, d, k, seed, scale, dtype, ties):
    rng = np.random.default_rng(seed)
    centers = (rng.normal(size=(k, d)) * scale).astype(dtype)
    X = (rng.normal(size=(n, d)) * scale).astype(dtype)
    if ties and k > 1:  # duplicate centres, and rows on (or a rounding error off) the bisector of two
        centers[-1] = centers[0]
        X[: n // 2] = ((centers[0].astype(np.float64) + centers[1 % k]) / 2).astype(dtype)
        X[: n // 4] += (rng.normal(size=(n // 4, d)) * scale * 1e-7).astype(dtype)
    labels, none = nearest_centers(X, centers)
    assert none is None and labels.dtype == np.int64
    # the exact nearest centre (scikit-learn's float answer at a near-tie depends on how many rows it is given:
    # n=2, d=12, k=6, scale 1e-30 with ties gave centre 0 for both rows and 1 for the first alone)
    assert np.array_equal(labels, exact_nearest(X, centers))
    sure = ~_near_tie(X, centers)
    assert np.array_equal(labels[sure], pairwise_distances_argmin(X, centers)[sure])


def _near_tie(X, centers) -> np.ndarray:
    """Rows whose two nearest centres are within float64's rounding of each other (or tied)."""
    d = ((X.astype(np.float64)[:, None, :] - centers.astype(np.float64)[None]) ** 2).sum(axis=2)
    part = np.sort(d, axis=1)
    if part.shape[1] < 2:
        return np.zeros(len(X), bool)
    return part[:, 1] - part[:, 0] <= 1e-10 * np.maximum(part[:, 1], 1e-300)


def test_exact_nearest_breaks_ties_as_argmin():
    centers = np.array([[0.0, 0.0], [2.0, 0.0], [0.0, 0.0]])
    assert exact_nearest(np.array([[1.0, 0.0], [1.5, 0.0], [-1.0, 0.0]]), centers).tolist() == [0, 1, 0]


def test_nearest_centers_bring_the_coordinates_and_any_chunking_agrees():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(1001, 24)).astype(np.float32)
    centers = rng.normal(size=(5, 24)).astype(np.float32)
    cavs = rng.normal(size=(6, 24))
    labels, coords = nearest_centers(X, centers, with_rows=cavs, n_jobs=2)
    assert np.array_equal(coords, project(X, cavs, n_jobs=1))  # the same bits as the projection alone
    parts = [nearest_centers(X[i:i + 97], centers, n_jobs=1)[0] for i in range(0, len(X), 97)]
    assert np.array_equal(np.concatenate(parts), labels)
    assert np.array_equal(NearestCentreHead(centers).predict(X, block_rows=64), labels)
    assert nearest_centers(X[:0], centers)[0].shape == (0,)


@pytest.mark.parametrize("value", [np.nan, np.inf])
def test_rows_that_are_not_finite_do_not_reach_scikit_learn(value):
    """predict(check_input=False) promises unspecified labels for such rows, not an error."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(20, 3))
    X[4, 1] = value
    labels, _ = nearest_centers(X, rng.normal(size=(3, 3)))
    assert labels.shape == (20,)


def test_map_blocks_runs_every_block_once_and_nested_calls_run_serially():
    from pipeline.threads import map_blocks

    assert map_blocks(lambda b: b * 2, [1, 2, 3]) == [2, 4, 6]
    assert map_blocks(lambda b: map_blocks(lambda c: c + b, [1, 2]), [10, 20]) == [[11, 12], [21, 22]]
    assert map_blocks(lambda b: b, []) == []
