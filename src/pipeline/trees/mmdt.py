"""Mixture Model Decision Trees: MMDT, its randomized variant and Concept-MMDT.

Reference: Fleissner, Zarvandi, Ghoshdastidar, "Decision Trees for Interpretable Clusters in
Mixture Models and Deep Representations" (``../shared/papers/mmdt-concept-trees.txt``).

* :class:`MMDT` is Algorithm 1. Given K distinct means μ_k ∈ R^d and per-axis noise scales
  σ_j > 0, every node with more than one mean projects its means onto each axis j, finds the
  largest gap δ(N, j) between neighbouring projections and cuts halfway across the gap that
  maximises δ(N, j) / σ_j (exact ties broken at random). Every leaf holds exactly one mean.
  Nodes are independent of one another, so Algorithm 1's global arg-max over (node, axis)
  only fixes the order in which nodes are split, not the resulting tree; we split in
  breadth-first order. Cost O(K² d log K), independent of the number of samples.
* :class:`RandomizedMMDT` is the algorithm in the proof of Theorem 2: the axis maximising
  max_{k,l} (μ_k^j − μ_l^j)² / σ_j² over the node's means, threshold uniform over their range.
* :class:`ConceptMMDT` is Algorithm 2: project latent means onto concept activation vectors,
  μ̄_k = C μ_k, σ̄_m = sqrt(c_mᵀ Σ c_m) (Eq. 5; the square root that Algorithm 2's listing
  omits is applied), then run MMDT in concept space.

A leaf test is ``x[feature] <= threshold`` (left), exactly as in :class:`ExplanationTree`.
"""

from __future__ import annotations

import logging

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted

from pipeline.trees.mixture import (
    check_means,
    check_sigma,
    estimate_mixture,
    gmm_covariances,
    project_covariances,
)
from pipeline.trees.tree import ExplanationTree
from pipeline.validation import InvalidInputError, check_labels, check_matrix, check_n_features

logger = logging.getLogger(__name__)

# Relative tolerance under which two normalised gaps count as a tie (floating-point noise
# from subtracting projections that are equal on paper).
_TIE_RTOL = 1e-12


def _midpoint(a: float, b: float) -> float:
    """A threshold t with a <= t < b for a < b (halfway, unless a and b are adjacent floats)."""
    t = (a + b) / 2
    if not np.isfinite(t):  # a + b overflowed
        t = a / 2 + b / 2
    return t if a <= t < b else a


def _mmdt_split(means: np.ndarray, sigma: np.ndarray, rng: np.random.RandomState):
    """Algorithm 1 at one node: (axis, threshold) of the largest σ-normalised neighbour gap."""
    order = np.sort(means, axis=0)  # (n, d) projections sorted per axis
    gaps = np.diff(order, axis=0)  # (n - 1, d)
    with np.errstate(over="ignore"):
        scores = np.where(gaps > 0, gaps / sigma, -np.inf)
    best = scores.max()
    i, j = np.nonzero((scores >= best * (1 - _TIE_RTOL)) & (gaps > 0))
    pick = rng.randint(len(i)) if len(i) > 1 else 0
    gi, axis = i[pick], j[pick]
    return int(axis), _midpoint(order[gi, axis], order[gi + 1, axis])


def _randomized_split(means: np.ndarray, sigma: np.ndarray, rng: np.random.RandomState):
    """Theorem 2's randomized rule: widest σ-normalised spread, uniform threshold on it."""
    lo, hi = means.min(axis=0), means.max(axis=0)
    spread = hi - lo
    with np.errstate(over="ignore"):
        scores = np.where(spread > 0, (spread / sigma) ** 2, -np.inf)
    best = scores.max()
    axes = np.flatnonzero((scores >= best * (1 - _TIE_RTOL)) & (spread > 0))
    axis = int(axes[rng.randint(len(axes))]) if len(axes) > 1 else int(axes[0])
    a, b = lo[axis], hi[axis]
    # θ ~ U[a, b): the smallest mean goes left, the largest right, so both sides are non-empty.
    # Redraw in the (measure-zero) case that rounding returned b itself.
    while True:
        theta = float(rng.uniform(a, b))
        if a <= theta < b:
            return axis, theta


def grow_means_tree(means: np.ndarray, sigma: np.ndarray, split_rule, labels, rng, feature_names=None):
    """Grow the tree that separates ``means`` one cut at a time (no validation).

    Parameters
    ----------
    means : ndarray of shape (K, d)
        Distinct means.
    sigma : ndarray of shape (d,)
        Positive per-axis noise scales.
    split_rule : callable
        ``split_rule(node_means, sigma, rng) -> (axis, threshold)`` with at least one node
        mean on each side of ``x[axis] <= threshold``.
    labels : ndarray of shape (K,)
        Label of the leaf that ends up holding each mean.
    rng : numpy.random.RandomState
    feature_names : sequence of str, optional

    Returns
    -------
    ExplanationTree
        K leaves, leaf of mean k labelled ``labels[k]``.
    """
    tree = ExplanationTree(means.shape[1], feature_names, root_label=int(labels[0]))
    queue = [(0, np.arange(means.shape[0]))]
    while queue:
        node, idx = queue.pop(0)
        if idx.size == 1:
            tree.set_label(node, int(labels[idx[0]]))
            continue
        axis, threshold = split_rule(means[idx], sigma, rng)
        go_left = means[idx, axis] <= threshold
        left, right = tree.split(node, axis, threshold)
        queue.append((left, idx[go_left]))
        queue.append((right, idx[~go_left]))
    return tree


class _MeansTree(BaseEstimator):
    """Shared estimator plumbing for trees grown from K means and per-axis σ."""

    _split_rule = None  # set by subclasses: callable(node_means, sigma, rng) -> (axis, threshold)

    def __init__(self, random_state=None):
        self.random_state = random_state

    def fit_mixture(self, means, sigma, feature_names=None):
        """Grow the tree from the mixture's means and per-axis noise scales.

        Parameters
        ----------
        means : array-like of shape (K, d)
            K >= 2 distinct component means (Assumption 3).
        sigma : array-like of shape (d,)
            Positive, finite per-axis standard deviation (sub-Gaussian parameter) bound σ_j.
        feature_names : sequence of str of length d, optional
            Names used in the tree's rules.

        Returns
        -------
        self
            With ``tree_``, ``means_``, ``sigma_``, ``classes_`` = 0..K-1 (order of ``means``).
        """
        means = check_means(means)
        sigma = check_sigma(sigma, means.shape[1])
        return self._grow(means, sigma, np.arange(means.shape[0]), feature_names)

    def fit(self, X, y, feature_names=None):
        """Estimate means and σ from data and reference labels, then grow the tree.

        σ_j is the largest per-component (population) standard deviation on axis j. Rows
        labelled -1 (noise, e.g. DBSCAN outliers) are ignored. An axis on which every
        component has zero spread gets a tiny positive σ_j (see
        :func:`pipeline.trees.mixture.check_sigma`), so nothing divides by zero.

        Parameters
        ----------
        X : array-like of shape (n_samples, d)
        y : array-like of shape (n_samples,)
            Integer cluster labels; -1 marks noise.
        feature_names : sequence of str of length d, optional

        Returns
        -------
        self
            ``predict`` then returns the original label values of ``y``.
        """
        X = check_matrix(X, "X")
        y = check_labels(y, X.shape[0])
        classes, means, variances = estimate_mixture(X, y)
        sigma = np.sqrt(variances.max(axis=0))
        means = check_means(means, name="estimated cluster means")
        sigma = check_sigma(sigma, X.shape[1], from_data=True, scale=np.abs(means).max(axis=0))
        return self._grow(means, sigma, classes, feature_names)

    def fit_gaussian_mixture(self, gmm, feature_names=None):
        """Grow the tree from a fitted :class:`sklearn.mixture.GaussianMixture`.

        Uses ``gmm.means_`` and σ_j = max_k sqrt(Σ_k[j, j]) for any ``covariance_type``.
        ``predict`` then returns the component index, like ``gmm.predict``.
        """
        check_is_fitted(gmm, "means_")
        means = check_means(gmm.means_)
        covs = gmm_covariances(gmm)
        sigma = check_sigma(np.sqrt(np.einsum("kjj->kj", covs).max(axis=0)), means.shape[1])
        return self._grow(means, sigma, np.arange(means.shape[0]), feature_names)

    def _grow(self, means, sigma, classes, feature_names):
        rng = check_random_state(self.random_state)
        self.tree_ = grow_means_tree(means, sigma, type(self)._split_rule, classes, rng, feature_names)
        self.means_, self.sigma_, self.classes_ = means, sigma, np.asarray(classes, dtype=np.int64)
        self.n_features_in_ = means.shape[1]
        logger.debug("%s: grew %d leaves, depth %d", type(self).__name__, self.tree_.n_leaves, self.tree_.depth)
        return self

    def predict(self, X):
        """Label of the mean that shares each row's leaf.

        Parameters
        ----------
        X : array-like of shape (n_samples, d)

        Returns
        -------
        ndarray of shape (n_samples,), dtype int64
        """
        check_is_fitted(self, "tree_")
        X = check_matrix(X, "X", min_rows=0)
        check_n_features(X, self.n_features_in_)
        return self.tree_.predict(X)


class MMDT(_MeansTree):
    """Mixture Model Decision Tree (Algorithm 1 of Fleissner et al.).

    At each node the cut is halfway across the largest gap between neighbouring projected
    means, the gap normalised by σ_j; ties are broken at random with ``random_state``.
    Construction never touches samples: O(K² d log K) for K means in d dimensions.

    Parameters
    ----------
    random_state : int, RandomState or None
        Seed for tie-breaking.

    Attributes
    ----------
    tree_ : ExplanationTree
        K leaves, each holding exactly one mean and labelled with its class.
    means_ : ndarray of shape (K, d)
    sigma_ : ndarray of shape (d,)
    classes_ : ndarray of shape (K,)
        Label of each mean (``classes_[k]`` belongs to ``means_[k]``).

    Examples
    --------
    >>> import numpy as np
    >>> from pipeline.trees import MMDT
    >>> m = MMDT(random_state=0).fit_mixture([[0, 0], [10, 0], [10, 3]], sigma=[1, 1])
    >>> m.predict([[1, 0], [9, -1], [9, 4]]).tolist()
    [0, 1, 2]
    """

    _split_rule = staticmethod(_mmdt_split)


class RandomizedMMDT(_MeansTree):
    """The randomized tree from the proof of Theorem 2 (expected error O(K q^{-1/2})).

    At each node: the axis maximising max_{k,l} (μ_k^j − μ_l^j)² / σ_j² over the node's means,
    and a threshold drawn uniformly over the means' range on that axis (so both children
    receive at least one mean). Same API and attributes as :class:`MMDT`.
    """

    _split_rule = staticmethod(_randomized_split)


class ConceptMMDT(BaseEstimator):
    """Concept-MMDT (Algorithm 2): MMDT on means projected onto concept activation vectors.

    Parameters
    ----------
    cavs : array-like of shape (M, d)
        The CAV matrix C, one concept activation vector per row.
    concept_names : sequence of str of length M, optional
        Names the tree's rules are written in.
    random_state : int, RandomState or None
        Seed for MMDT's tie-breaking.

    Attributes
    ----------
    tree_ : ExplanationTree
        Tree over the M concept coordinates C z.
    means_ : ndarray of shape (K, d)
        Latent means μ_k.
    concept_means_ : ndarray of shape (K, M)
        μ̄_k = C μ_k.
    concept_sigma_ : ndarray of shape (M,)
        σ̄_m = sqrt(c_mᵀ Σ c_m) (max over components for per-component covariances).
    classes_ : ndarray of shape (K,)
    """

    def __init__(self, cavs, concept_names=None, random_state=None):
        self.cavs = cavs
        self.concept_names = concept_names
        self.random_state = random_state

    def _cavs(self, d=None) -> np.ndarray:
        C = check_matrix(self.cavs, "cavs")
        if d is not None and C.shape[1] != d:
            raise InvalidInputError(
                f"cavs has shape {C.shape} (M concepts x {C.shape[1]} latent dims) but the latent space has "
                f"{d} dimensions; each CAV must have one entry per latent dimension."
            )
        if np.any(~C.any(axis=1)):
            raise InvalidInputError(f"cavs row(s) {np.flatnonzero(~C.any(axis=1)).tolist()} are all zero; "
                                    "drop those concepts.")
        if self.concept_names is not None and len(self.concept_names) != C.shape[0]:
            raise InvalidInputError(f"concept_names has {len(self.concept_names)} names but cavs has "
                                    f"{C.shape[0]} rows; give one name per CAV.")
        return C

    def fit_mixture(self, means, covariance):
        """Grow the concept tree from latent means and covariance(s).

        Parameters
        ----------
        means : array-like of shape (K, d)
            Latent component means.
        covariance : array-like of shape (d, d) or (K, d, d)
            Shared covariance Σ, or one per component; symmetric positive semi-definite.

        Returns
        -------
        self
        """
        means = check_means(means, name="means")
        C = self._cavs(means.shape[1])
        covs = project_covariances(covariance, C, means.shape[0])
        return self._grow(means, C, np.sqrt(covs.max(axis=0)), np.arange(means.shape[0]))

    def fit(self, Z, y):
        """Estimate latent means and per-component covariances from ``Z`` and labels, then grow.

        Parameters
        ----------
        Z : array-like of shape (n_samples, d)
            Latent representations.
        y : array-like of shape (n_samples,)
            Integer cluster labels; -1 (noise) rows are ignored.

        Returns
        -------
        self
            ``predict`` returns the original label values of ``y``.
        """
        Z = check_matrix(Z, "Z")
        y = check_labels(y, Z.shape[0], "y")
        C = self._cavs(Z.shape[1])
        classes, means, _ = estimate_mixture(Z, y)
        # σ̄_m² = max_k c_mᵀ Σ_k c_m equals the largest per-cluster variance of the projection C z,
        # so the (d, d) covariances never need to be formed.
        _, _, proj_var = estimate_mixture(Z @ C.T, y)
        return self._grow(means, C, np.sqrt(proj_var.max(axis=0)), classes)

    def _grow(self, means, C, concept_sigma, classes):
        concept_means = means @ C.T
        try:
            concept_means = check_means(concept_means, name="concept means C·μ_k")
        except InvalidInputError as exc:
            raise InvalidInputError(f"{exc} Add concepts that tell these clusters apart.") from None
        # A concept with zero variance under Σ (singular Σ) gets a tiny σ̄ instead of dividing by 0.
        scale = np.abs(concept_means).max(axis=0)
        concept_sigma = check_sigma(concept_sigma, C.shape[0], name="concept sigma", from_data=True, scale=scale)
        rng = check_random_state(self.random_state)
        names = None if self.concept_names is None else list(self.concept_names)
        self.tree_ = grow_means_tree(concept_means, concept_sigma, _mmdt_split, classes, rng, names)
        self.means_, self.concept_means_, self.concept_sigma_ = means, concept_means, concept_sigma
        self.classes_ = np.asarray(classes, dtype=np.int64)
        self.cavs_ = C
        self.n_features_in_ = C.shape[1]
        return self

    def transform(self, Z) -> np.ndarray:
        """Concept coordinates C z of latents ``Z`` (Eq. 4), shape (n_samples, M)."""
        check_is_fitted(self, "tree_")
        Z = check_matrix(Z, "Z", min_rows=0)
        check_n_features(Z, self.n_features_in_, "Z")
        return Z @ self.cavs_.T

    def predict(self, Z):
        """Cluster label for each latent row: project onto the CAVs, then apply the tree.

        Parameters
        ----------
        Z : array-like of shape (n_samples, d)

        Returns
        -------
        ndarray of shape (n_samples,), dtype int64
        """
        return self.tree_.predict(self.transform(Z))
