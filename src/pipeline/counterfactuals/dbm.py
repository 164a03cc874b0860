"""DBM: the Difference Between the Means baseline (Plumb et al., ICML 2020, Sec. 1).

``delta_{i->j} = mean(X_j) - mean(X_i)`` in input space, optionally thresholded to its
``k`` largest-magnitude entries. It ignores the encoder, is symmetric and transitive, and
solves ``A delta = r_j - r_i`` for a linear encoder ``r(x) = A x`` -- but not sparsely.
"""

from __future__ import annotations

import numpy as np

from pipeline.counterfactuals._checks import check_group_label, check_groups, check_k
from pipeline.counterfactuals.quality import top_k


def group_means(X, groups) -> tuple[np.ndarray, np.ndarray]:
    """Sorted group labels (l,) and the per-group input means (l, d); -1 (noise) is ignored."""
    X, groups, labels = check_groups(X, groups)
    return labels, np.stack([X[groups == g].mean(axis=0) for g in labels])


def dbm(X, groups, i, j, k: int | None = None) -> np.ndarray:
    """Difference between the means of group ``j`` and group ``i``, top-``k`` thresholded.

    Parameters
    ----------
    X : array-like of shape (n, d)
    groups : array-like of shape (n,)
        Integer group labels; -1 marks noise and is ignored.
    i, j : int
        Labels of the initial and target group.
    k : int or None
        Keep only the ``k`` largest changes (1 <= k <= d); None keeps all ``d``.

    Returns
    -------
    ndarray of shape (d,)
        The translation ``delta_{i->j}``.
    """
    labels, means = group_means(X, groups)
    a = check_group_label(i, labels, "i")
    b = check_group_label(j, labels, "j")
    check_k(k, means.shape[1])
    return top_k(means[b] - means[a], k)
