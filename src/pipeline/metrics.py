"""Metrics for explanation trees: agreement with a reference clustering, clustering cost,
and the explainability-to-noise ratio q with the MMDT error bounds (Fleissner et al.).

Label conventions: integer labels; in a *reference* labelling, -1 marks noise (e.g. DBSCAN
outliers) and such rows are left out wherever a function says so.

Bounds: the paper states Theorems 1 and 2 as O(·); the functions here return the explicit
expressions their proofs give (mixing weights p_k <= α/K, at most K internal nodes):

* Theorem 1 (MMDT):            P(μ̂(x) ≠ μ(x)) <= α K exp(−q / (4K²))
* Theorem 2 (randomized tree): E P(μ̂(x) ≠ μ(x)) <= α K sqrt(π / q)
* Theorem 3 (lower bound):     some K-component mixture with ratio q has, for every tree
  with one mean per leaf, P(μ̂(x) ≠ μ(x)) >= (K − 1) / (2 e^q)   (needs e^q > 2K)

Upper-bound values above 1 are vacuous; they are returned unclipped so that log-plots show
the bound's slope.
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import linear_sum_assignment
from sklearn.metrics import adjusted_mutual_info_score, adjusted_rand_score

# the two upper bounds live with the mixture maths: each MMDT estimator names the one it satisfies
from pipeline.trees.mixture import check_means, check_qk, check_sigma, theorem1_upper_bound, theorem2_upper_bound
from pipeline.validation import InvalidInputError, check_labels, check_matrix

__all__ = [
    "explainability_to_noise_ratio",
    "theorem1_upper_bound",
    "theorem2_upper_bound",
    "theorem3_lower_bound",
    "ari",
    "ami",
    "reference_agreement",
    "misassignment_rate",
    "clustering_cost",
    "price_of_explainability",
]


# ------------------------------------------------------------------ q and the bounds
def explainability_to_noise_ratio(means, sigma) -> float:
    """q = min_{k≠l} max_j (μ_k^j − μ_l^j)² / (2 σ_j²)  (Definition 1).

    For Concept-MMDT (Eq. 6) pass the concept means C μ_k and σ̄ (``ConceptMMDT.concept_means_``
    and ``concept_sigma_``).

    Parameters
    ----------
    means : array-like of shape (K, d)
        K >= 2 distinct means.
    sigma : array-like of shape (d,)
        Positive per-axis noise scales.

    Returns
    -------
    float
    """
    means = check_means(means)
    sigma = check_sigma(sigma, means.shape[1])
    z = means / (np.sqrt(2.0) * sigma)
    q = np.inf
    for k in range(z.shape[0] - 1):  # O(K² d) time, O(K d) memory
        q = min(q, float(((z[k + 1:] - z[k]) ** 2).max(axis=1).min()))
    return q


def concept_explainability_to_noise_ratio(concept_means, concept_sigma) -> float:
    """Eq. 6 from concept-space means (K, M) and σ̄ (M,): Definition 1's q of the concept
    coordinates (:func:`explainability_to_noise_ratio`, the one q)."""
    return explainability_to_noise_ratio(concept_means, concept_sigma)


def theorem3_lower_bound(q, K):
    """Theorem 3: (K − 1) / (2 e^q), attained by a worst-case mixture; NaN where e^q <= 2K
    (the theorem does not apply there)."""
    q, K = check_qk(q, K)
    with np.errstate(over="ignore"):
        value = (K - 1) / (2.0 * np.exp(q))
    return np.where(q > np.log(2.0 * K), value, np.nan)


# ------------------------------------------------------------- label agreement
def _pair(labels_pred, labels_ref, exclude_noise: bool):
    ref = np.asarray(labels_ref)
    ref = check_labels(ref, ref.shape[0] if ref.ndim else 0, "reference labels")
    pred = check_labels(labels_pred, ref.shape[0], "predicted labels")
    if exclude_noise:
        keep = ref != -1
        pred, ref = pred[keep], ref[keep]
    if ref.size == 0:
        raise InvalidInputError("no labelled rows to compare (empty input, or every reference label is -1).")
    return pred, ref


def ari(labels_true, labels_pred, exclude_noise: bool = False) -> float:
    """Adjusted Rand index (sklearn); ``exclude_noise`` drops rows with ``labels_true == -1``."""
    pred, ref = _pair(labels_pred, labels_true, exclude_noise)
    return float(adjusted_rand_score(ref, pred))


def ami(labels_true, labels_pred, exclude_noise: bool = False) -> float:
    """Adjusted mutual information (scikit-learn's definition, arithmetic normalisation, with
    :func:`expected_mutual_information` for the expectation); ``exclude_noise`` as in :func:`ari`."""
    pred, ref = _pair(labels_pred, labels_true, exclude_noise)
    return adjusted_mutual_info(ref, pred)


def adjusted_mutual_info(labels_true, labels_pred) -> float:
    """``sklearn.metrics.adjusted_mutual_info_score(labels_true, labels_pred)``: its own value below
    ``FAST_AMI_ROWS`` rows; from there on the same value (to ~1e-12) with the expected mutual
    information summed where the hypergeometric terms matter (:func:`expected_mutual_information`):
    0.25 s instead of 1.2 s on a million rows in 10 x 10 clusters, the gap growing with the rows."""
    from sklearn.metrics.cluster import contingency_matrix

    labels_true, labels_pred = np.asarray(labels_true), np.asarray(labels_pred)
    if labels_true.shape[0] < FAST_AMI_ROWS:  # small data: scikit-learn's own value, bit for bit
        return float(adjusted_mutual_info_score(labels_true, labels_pred))
    dense = contingency_table(labels_true, labels_pred)
    if dense is None:
        classes, clusters = np.unique(labels_true), np.unique(labels_pred)
        if classes.shape[0] == clusters.shape[0] == 1 or classes.shape[0] == clusters.shape[0] == 0:
            return 1.0
        dense = contingency_matrix(labels_true, labels_pred, sparse=True).toarray()
    return adjusted_mutual_info_from_table(dense)


def adjusted_mutual_info_from_table(dense: np.ndarray) -> float:
    """:func:`adjusted_mutual_info` from the (classes x clusters) count table (no empty rows or
    columns, as :func:`contingency_table` gives it): the labels are not read again."""
    from scipy import sparse
    from sklearn.metrics import mutual_info_score

    dense = np.asarray(dense, dtype=np.int64)
    if dense.shape[0] == dense.shape[1] == 1 or dense.shape[0] == dense.shape[1] == 0:
        return 1.0
    table = sparse.csr_matrix(dense)
    mi = mutual_info_score(None, None, contingency=table)
    emi = expected_mutual_information(dense, int(dense.sum()))
    h_true, h_pred = _entropy(np.asarray(table.sum(axis=1)).ravel()), _entropy(np.asarray(table.sum(axis=0)).ravel())
    denominator = (h_true + h_pred) / 2 - emi
    eps = np.finfo("float64").eps
    denominator = min(denominator, -eps) if denominator < 0 else max(denominator, eps)
    return float((mi - emi) / denominator)


FAST_AMI_ROWS = 100_000  # from here on the windowed expectation (below that scikit-learn's is fast)


def contingency_table(labels_true, labels_pred) -> np.ndarray | None:
    """The (classes x clusters) count table of two labelings of non-negative integer labels, by one
    ``bincount`` (O(n), no sort), with the empty rows and columns dropped as scikit-learn's
    ``contingency_matrix`` does; None for other labels."""
    a, b = np.asarray(labels_true), np.asarray(labels_pred)
    if a.dtype.kind not in "iu" or b.dtype.kind not in "iu" or not a.size or a.min() < 0 or b.min() < 0:
        return None
    ka, kb = int(a.max()) + 1, int(b.max()) + 1
    if ka * kb > 10**7:
        return None
    table = np.bincount(a.astype(np.int64) * kb + b, minlength=ka * kb).reshape(ka, kb)
    return table[table.sum(axis=1) > 0][:, table.sum(axis=0) > 0]


def adjusted_rand_from_table(table: np.ndarray) -> float:
    """scikit-learn's ``adjusted_rand_score`` from the count table (its pair-confusion arithmetic)."""
    table = np.asarray(table, dtype=np.int64)
    n = int(table.sum())
    n_c, n_k = table.sum(axis=1), table.sum(axis=0)
    sum_squares = int((table.astype(np.float64) ** 2).sum()) if n > 3 * 10**9 else int((table ** 2).sum())
    c11 = sum_squares - n
    c01 = int((table @ n_k).sum()) - sum_squares
    c10 = int((table.T @ n_c).sum()) - sum_squares
    c00 = n * n - c01 - c10 - sum_squares
    tn, fp, fn, tp = int(c00), int(c01), int(c10), int(c11)
    if fn == 0 and fp == 0:
        return 1.0
    return float(2.0 * (tp * tn - fn * fp) / ((tp + fn) * (fn + tn) + (tp + fp) * (fp + tn)))


def _entropy(counts) -> float:
    counts = np.asarray(counts, dtype=np.float64)
    counts = counts[counts > 0]
    if counts.size <= 1:
        return 0.0
    total = counts.sum()
    return float(-np.sum((counts / total) * (np.log(counts) - np.log(total))))


#: a cell's hypergeometric terms farther than this many standard deviations (+ this many counts)
#: from its mean are left out of the expected mutual information: each is below exp(-400) of the
#: largest (Bernstein's bound), so the sum does not change in float64
EMI_WINDOW = 40


def expected_mutual_information(contingency, n_samples: int) -> float:
    """Expected mutual information of two labelings with the margins of ``contingency`` under
    random permutation (Vinh, Epps & Bailey 2010; ``sklearn.metrics.cluster.expected_mutual_information``).

    Every cell sums its hypergeometric distribution over the counts within ``EMI_WINDOW``
    standard deviations (plus ``EMI_WINDOW`` counts) of its mean instead of over every possible
    count, so the cost no longer grows with the cluster sizes; checked against scikit-learn's
    full sum (tests/test_metrics.py)."""
    from scipy.special import gammaln

    table = np.asarray(contingency)
    a = table.sum(axis=1).astype(np.int64)
    b = table.sum(axis=0).astype(np.int64)
    N = int(n_samples)
    if a.size == 1 or b.size == 1:
        return 0.0
    g_a, g_Na = gammaln(a + 1.0), gammaln(N - a + 1.0)
    g_b, g_Nb = gammaln(b + 1.0), gammaln(N - b + 1.0)
    g_N = gammaln(N + 1.0)
    emi = 0.0
    for i in range(a.size):
        for j in range(b.size):
            lo, hi = max(1, int(a[i] + b[j] - N)), int(min(a[i], b[j]))
            if hi < lo:
                continue
            mean = a[i] * b[j] / N
            sd = np.sqrt(mean * (N - a[i]) * (N - b[j]) / (N * max(N - 1, 1)))
            lo = max(lo, int(np.floor(mean - EMI_WINDOW * (sd + 1))))
            hi = min(hi, int(np.ceil(mean + EMI_WINDOW * (sd + 1))))
            nij = np.arange(lo, hi + 1, dtype=np.float64)
            log_p = (g_a[i] + g_b[j] + g_Na[i] + g_Nb[j] - g_N - gammaln(nij + 1) - gammaln(a[i] - nij + 1)
                     - gammaln(b[j] - nij + 1) - gammaln(N - a[i] - b[j] + nij + 1))
            term = (nij / N) * (np.log(N * nij) - np.log(float(a[i]) * float(b[j])))
            emi += float(np.sum(term * np.exp(log_p)))
    return emi


def reference_agreement(labels_pred, labels_ref, match: bool = False) -> float:
    """Fraction of rows whose tree label equals the reference label (rows with reference -1
    are left out).

    Parameters
    ----------
    labels_pred, labels_ref : array-like of shape (n_samples,)
    match : bool, default=False
        If True, first relabel the prediction with the one-to-one label matching that
        maximises agreement (Hungarian algorithm), for trees whose leaf ids are not the
        reference ids.

    Returns
    -------
    float in [0, 1]
    """
    pred, ref = _pair(labels_pred, labels_ref, exclude_noise=True)
    if not match:
        return float(np.mean(pred == ref))
    p_vals, p_idx = np.unique(pred, return_inverse=True)
    r_vals, r_idx = np.unique(ref, return_inverse=True)
    table = np.zeros((p_vals.size, r_vals.size), dtype=np.int64)
    np.add.at(table, (p_idx, r_idx), 1)
    rows, cols = linear_sum_assignment(table, maximize=True)
    return float(table[rows, cols].sum() / ref.size)


def misassignment_rate(labels_pred, labels_ref) -> float:
    """Empirical P(μ̂(x) ≠ μ(x)): share of non-noise rows whose tree label differs from the
    reference (or ground-truth component) label. Equals 1 − reference_agreement."""
    pred, ref = _pair(labels_pred, labels_ref, exclude_noise=True)
    return float(np.mean(pred != ref))


# ------------------------------------------------------------ clustering cost
def clustering_cost(X, labels, kind: str = "kmeans") -> float:
    """Cost of a partition: Σ_clusters Σ_x ||x − c||² with c the cluster mean (``"kmeans"``)
    or Σ ||x − c||₁ with c the coordinate-wise median (``"kmedians"``). Every label value
    (including -1) is one cluster.

    Parameters
    ----------
    X : array-like of shape (n_samples, d)
    labels : array-like of shape (n_samples,)
    kind : {"kmeans", "kmedians"}

    Returns
    -------
    float
    """
    if kind not in ("kmeans", "kmedians"):
        raise InvalidInputError(f"kind must be 'kmeans' or 'kmedians', got {kind!r}.")
    X = check_matrix(X, "X")
    labels = check_labels(labels, X.shape[0], "labels")
    order = np.argsort(labels, kind="stable")
    bounds = np.flatnonzero(np.diff(labels[order])) + 1
    total = 0.0
    for rows in np.split(order, bounds):
        Xc = X[rows]
        if kind == "kmeans":
            total += float(((Xc - Xc.mean(axis=0)) ** 2).sum())
        else:
            total += float(np.abs(Xc - np.median(Xc, axis=0)).sum())
    return total


def price_of_explainability(X, tree_labels, reference_labels, kind: str = "kmeans") -> float:
    """Cost of the tree's partition over the cost of the reference partition.

    Rows whose reference label is -1 (noise) are left out of both costs. Each partition is
    scored with its own cluster centres (means for k-means, coordinate-wise medians for
    k-medians), see :func:`clustering_cost`.

    Returns
    -------
    float
        >= 0; ``inf`` if the reference cost is 0 and the tree's is not, 1.0 if both are 0.
    """
    X = check_matrix(X, "X")
    ref = check_labels(reference_labels, X.shape[0], "reference_labels")
    tree = check_labels(tree_labels, X.shape[0], "tree_labels")
    keep = ref != -1
    if not keep.any():
        raise InvalidInputError("every reference label is -1 (noise); nothing to compare.")
    tree_cost = clustering_cost(X[keep], tree[keep], kind)
    ref_cost = clustering_cost(X[keep], ref[keep], kind)
    if ref_cost == 0:
        return 1.0 if tree_cost == 0 else float("inf")
    return tree_cost / ref_cost
