"""Maths for data read in row chunks (docs/out-of-core.md): pure functions over arrays.

- :func:`assign_nearest`, :func:`assign_mixture` -- a row's cluster under k-means centres or a
  fitted Gaussian mixture (a row's label does not depend on the other rows);
- :func:`stratified_sample` -- row indices of a sample that keeps every cluster's share.
"""

from __future__ import annotations

import numpy as np

from pipeline.validation import InvalidInputError, check_matrix


def assign_nearest(X, centers, block_rows: int = 16_384) -> np.ndarray:
    """Index (int32) of the nearest of ``centers`` (K, d) for every row of ``X`` (n, d), in float64
    (:func:`sklearn.metrics.pairwise_distances_argmin`, in blocks of ``block_rows`` rows so a
    float32 chunk is never widened whole). A row's label does not depend on the other rows."""
    from sklearn.metrics import pairwise_distances_argmin

    centers = check_matrix(centers, "centers")
    X = check_matrix(X, "X", min_rows=0, dtype=np.float32 if getattr(X, "dtype", None) == np.float32 else np.float64)
    out = np.empty(X.shape[0], np.int32)
    for i in range(0, X.shape[0], block_rows):
        out[i:i + block_rows] = pairwise_distances_argmin(X[i:i + block_rows].astype(np.float64), centers)
    return out


def assign_mixture(X, weights, means, covariances, precisions_cholesky, covariance_type: str = "full") -> np.ndarray:
    """The most probable component (int32) of every row of ``X`` under a fitted Gaussian mixture
    (the parameters of :class:`sklearn.mixture.GaussianMixture`, which predicts)."""
    from sklearn.mixture import GaussianMixture

    means = check_matrix(means, "means")
    gm = GaussianMixture(n_components=means.shape[0], covariance_type=covariance_type)
    gm.weights_, gm.means_, gm.covariances_ = np.asarray(weights), means, np.asarray(covariances)
    gm.precisions_cholesky_ = np.asarray(precisions_cholesky)
    gm.n_features_in_ = means.shape[1]
    from pipeline.clustering import mixture_predict

    return np.asarray(mixture_predict(gm, check_matrix(X, "X", min_rows=0)), dtype=np.int32)


def _unique_inverse(labels: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``np.unique(labels, return_inverse=True, return_counts=True)`` of a 1-D array; integer
    labels of a small range by counting (no sort of the n labels: 10M cluster ids in 0.1 s, not 1 s)."""
    if labels.ndim == 1 and labels.size and labels.dtype.kind in "iu":
        lo, hi = int(labels.min()), int(labels.max())
        if hi - lo < 1 << 16 and hi < 1 << 62:
            shifted = labels.astype(np.intp) - lo
            counts = np.bincount(shifted, minlength=hi - lo + 1)
            present = np.flatnonzero(counts)
            lookup = np.zeros(hi - lo + 1, np.intp)
            lookup[present] = np.arange(present.size)
            return (present + lo).astype(labels.dtype), lookup[shifted], counts[present]
    return np.unique(labels, return_inverse=True, return_counts=True)


def stratified_sample(labels, n_rows: int, random_state: int = 0) -> np.ndarray:
    """Sorted indices of ``n_rows`` rows drawn without replacement, every label value (noise
    -1 included) keeping its share (largest-remainder rounding, at least one row per value).

    ``n_rows`` at least the number of rows returns every row.
    """
    labels = np.asarray(labels)
    n = labels.shape[0]
    if n_rows >= n:
        return np.arange(n)
    if n_rows < 1:
        raise InvalidInputError(f"a sample of {n_rows} rows: ask for at least one row.")
    values, inverse, counts = _unique_inverse(labels)
    exact = counts * (n_rows / n)
    take = np.minimum(np.maximum(np.floor(exact).astype(np.int64), 1), counts)
    order = np.argsort(-(exact - np.floor(exact)), kind="stable")
    for i in order:  # largest remainders first, until the total is n_rows
        if take.sum() >= n_rows:
            break
        if take[i] < counts[i]:
            take[i] += 1
    while take.sum() > max(n_rows, values.size):  # the ones given to tiny values come from the most over-served
        over = np.where(take > 1, take - exact, -np.inf)
        take[int(np.argmax(over))] -= 1
    rng = np.random.default_rng(random_state)
    # stable: the one order of the rows by value (16-bit keys: numpy's radix sort, O(n))
    by_value = np.argsort(inverse.astype(np.uint16) if values.size <= 1 << 16 else inverse, kind="stable")
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    picked = [rng.choice(by_value[s:s + c], size=t, replace=False) for s, c, t in zip(starts, counts, take)]
    return np.sort(np.concatenate(picked))
