"""Input handling shared by the reference-based tree estimators (SpEx, IMM, EMN, ExKMC)."""

from __future__ import annotations

import numpy as np

from pipeline.validation import InvalidInputError, check_labels, check_matrix


def check_data(X) -> np.ndarray:
    """Finite float64 matrix (n_samples, n_features) with at least 2 rows."""
    return check_matrix(X, "X", min_rows=2)


def encode_reference(y, n_samples: int, *, min_clusters: int = 2):
    """Validate reference labels and drop noise.

    Returns
    -------
    keep : bool ndarray (n_samples,) — rows that are not noise (-1).
    codes : int ndarray (n_kept,) — cluster code 0..k-1 per kept row.
    classes : int64 ndarray (k,) — the reference label of each code (sorted).
    """
    y = check_labels(y, n_samples)
    if np.any(y < -1):
        raise InvalidInputError("y holds negative labels other than -1; use -1 for noise and 0, 1, ... for clusters.")
    keep = y >= 0
    classes, codes = np.unique(y[keep], return_inverse=True)
    if classes.size < min_clusters:
        raise InvalidInputError(
            f"the reference clustering has {classes.size} cluster(s) after removing noise (-1); "
            f"at least {min_clusters} are needed to explain a clustering."
        )
    dtype = np.int8 if classes.size < 128 else np.int16 if classes.size < 32768 else np.int32
    return keep, codes.astype(dtype), classes.astype(np.int64)


def check_n_leaves(n_leaves, default: int | None, n_points: int, *, at_least: int = 1, why: str = "") -> int:
    """Resolve the requested number of leaves and check it is achievable."""
    if n_leaves is None:
        if default is None:
            raise InvalidInputError("n_leaves is required when no reference clustering y is given.")
        n_leaves = default
    if isinstance(n_leaves, bool) or not isinstance(n_leaves, (int, np.integer)):
        raise InvalidInputError(f"n_leaves must be an integer, got {n_leaves!r}.")
    n_leaves = int(n_leaves)
    if n_leaves < at_least:
        raise InvalidInputError(f"n_leaves={n_leaves} is too small: it must be at least {at_least}{why}.")
    if n_leaves > n_points:
        raise InvalidInputError(
            f"n_leaves={n_leaves} exceeds the {n_points} points being fitted; every leaf needs a distinct point."
        )
    return n_leaves


def check_feature_names(feature_names, n_features: int):
    if feature_names is not None and len(feature_names) != n_features:
        raise InvalidInputError(f"feature_names has {len(feature_names)} names but X has {n_features} columns.")
    return feature_names


def unsplittable_error(n_leaves: int, reached: int, X: np.ndarray) -> InvalidInputError:
    n_distinct = np.unique(X, axis=0).shape[0]
    return InvalidInputError(
        f"cannot grow the tree to n_leaves={n_leaves}: stopped at {reached} leaves because every remaining "
        f"leaf holds identical points (the data has {n_distinct} distinct points). Use n_leaves <= {n_distinct}."
    )


def majority_labels(leaf_of_point: np.ndarray, codes: np.ndarray, classes: np.ndarray, n_nodes: int) -> np.ndarray:
    """Majority reference label per tree node (ties -> smallest label); -1 for empty nodes."""
    k = classes.size
    counts = np.bincount(leaf_of_point * k + codes, minlength=n_nodes * k).reshape(n_nodes, k)
    out = classes[np.argmax(counts, axis=1)]
    out[counts.sum(axis=1) == 0] = -1
    return out
