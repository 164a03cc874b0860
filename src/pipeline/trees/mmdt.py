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
import scipy.sparse as sp
from sklearn.base import TransformerMixin
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted

from pipeline.trees._fitting import (
    COMMON_CONSTRAINTS,
    N_LEAVES_CONSTRAINT,
    NOISE_CONSTRAINT,
    ReferenceTree,
    check_not_constant,
    far_from_origin,
    leaf_labels,
    power_of_two_scale,
    rescale_tree,
    reset_features,
    resolve_feature_names,
    validate_X,
)
from pipeline.concepts.projection import mixture_sigma, project
from pipeline.threads import limit_threads
from pipeline.trees.mixture import (
    check_means,
    check_separated,
    check_sigma,
    estimate_mixture,
    gmm_covariances,
    project_covariances,
    theorem1_upper_bound,
    theorem2_upper_bound,
)
from pipeline.trees.tree import ExplanationTree
from pipeline.validation import InvalidInputError, check_matrix

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


def cluster_moments(X, codes: np.ndarray):
    """Per-cluster means and (population) variances (K, d) of ``X`` for codes 0..K-1.

    Dense ``X`` uses :func:`~pipeline.trees.mixture.estimate_mixture` (two-pass variances); a
    sparse ``X`` one sparse product per moment, variance = E[x²] − mean², never densified.
    """
    if not sp.issparse(X):
        return estimate_mixture(X, codes)
    K, n = int(codes.max()) + 1, codes.size
    member = sp.csr_matrix((np.ones(n), (codes, np.arange(n))), shape=(K, n))
    counts = np.bincount(codes, minlength=K).astype(float)[:, None]
    means = (member @ X).toarray() / counts
    second = (member @ X.multiply(X)).toarray() / counts
    return means, np.maximum(second - means**2, 0.0)


def _project(Z, C) -> np.ndarray:
    """Concept coordinates Z Cᵀ of dense or sparse latents."""
    return np.asarray(Z @ C.T) if sp.issparse(Z) else project(Z, C)


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


class _MeansTree(ReferenceTree):
    """Shared estimator plumbing for trees grown from K means and per-axis σ."""

    _split_rule = None  # set by subclasses: callable(node_means, sigma, rng) -> (axis, threshold)
    _accepts_sparse = True  # only per-cluster means and variances are read
    #: ``error_bound(q, K)``: the bound on the tree's mis-assignment probability it satisfies, from
    #: the explainability-to-noise ratio q of its means and σ (Theorem 1; the randomized tree: Theorem 2)
    error_bound = staticmethod(theorem1_upper_bound)

    _parameter_constraints = {**COMMON_CONSTRAINTS, **NOISE_CONSTRAINT, **N_LEAVES_CONSTRAINT}

    def __init__(self, n_leaves=None, *, noise_label=None, random_state=None, n_jobs=None):
        self.n_leaves = n_leaves
        self.noise_label = noise_label
        self.random_state = random_state
        self.n_jobs = n_jobs

    def _check_n_leaves(self, K: int) -> None:
        if self.n_leaves is not None and self.n_leaves != K:
            raise InvalidInputError(
                f"{type(self).__name__} grows exactly one leaf per mean: n_leaves must be {K} (the number of "
                f"clusters) or None, got n_leaves={self.n_leaves}."
            )

    def fit_mixture(self, means, sigma, feature_names=None):
        """Grow the tree from the mixture's means and per-axis noise scales.

        Parameters
        ----------
        means : array-like of shape (K, d)
            K >= 2 distinct component means (Assumption 3), farther apart than 1e-9 σ.
        sigma : array-like of shape (d,)
            Positive, finite per-axis standard deviation (sub-Gaussian parameter) bound σ_j.
        feature_names : sequence of str of length d, optional
            Names used in the tree's rules.

        Returns
        -------
        self
            With ``tree_``, ``means_``, ``sigma_``, ``classes_`` = 0..K-1 (order of ``means``).
        """
        self._validate_params()
        means = check_means(means)
        sigma = check_sigma(sigma, means.shape[1])
        check_separated(means, sigma)
        self.classes_ = np.arange(means.shape[0])
        reset_features(self, means.shape[1])
        names = resolve_feature_names(self, feature_names, means.shape[1])
        return self._grow(means, sigma, names)

    def fit(self, X, y, feature_names=None):
        """Estimate means and σ from data and reference labels, then grow the tree.

        σ_j is the largest per-component (population) standard deviation on axis j. Rows
        labelled ``noise_label`` (default None: none; e.g. -1 for DBSCAN outliers) are left out; every other
        value, negative or not, integer or string, is a cluster. An axis on which every
        component has zero spread gets a tiny positive σ_j (see
        :func:`pipeline.trees.mixture.check_sigma`), so nothing divides by zero. Data of
        extreme magnitude is divided by a power of two first and the thresholds mapped back
        exactly.

        Parameters
        ----------
        X : array-like, sparse matrix or DataFrame of shape (n_samples, d)
            A DataFrame's column names become ``feature_names_in_`` and name the rules.
        y : array-like of shape (n_samples,)
            Reference cluster labels.
        feature_names : sequence of str of length d, optional
            Names for the rules (default: the DataFrame's columns).

        Returns
        -------
        self
            ``predict`` then returns the original label values of ``y``.
        """
        X, codes, _, names = self._validate_reference(X, y, feature_names)
        X_fit = X
        check_not_constant(X)  # the estimated means would all coincide
        self._check_n_leaves(self.classes_.size)
        # One power of two per column: MMDT is invariant to each axis' scale, and a column near
        # 1e300 must not flush the others (divided by the same number) to zero.
        X, _, shift = far_from_origin(X)
        scale = power_of_two_scale(X, per_column=True)
        if np.any(scale != 1.0):
            X = X.multiply(1.0 / scale).tocsr() if sp.issparse(X) else X / scale
        with limit_threads(self.n_jobs):
            means, variances = cluster_moments(X, codes)
        sigma = np.sqrt(variances.max(axis=0))
        means = check_means(means, name="estimated cluster means")
        sigma = check_sigma(sigma, X.shape[1], from_data=True, scale=np.abs(means).max(axis=0))
        check_separated(means, sigma, name="estimated cluster means")
        return self._grow(means, sigma, names, scale, shift)._keep_exact(X_fit)

    def fit_gaussian_mixture(self, gmm, feature_names=None):
        """Grow the tree from a fitted :class:`sklearn.mixture.GaussianMixture`.

        Uses ``gmm.means_`` and σ_j = max_k sqrt(Σ_k[j, j]) for any ``covariance_type``.
        ``predict`` then returns the component index, like ``gmm.predict``.
        """
        if not hasattr(gmm, "means_") and not hasattr(gmm, "covariances_"):
            if hasattr(gmm, "cluster_centers_"):  # a fitted KMeans (or alike): centres, but no spread
                raise InvalidInputError(
                    f"fit_gaussian_mixture needs a fitted GaussianMixture (means_ and covariances_); got a fitted "
                    f"{type(gmm).__name__}, which has cluster centres but no per-cluster spread. Fit on the data "
                    f"instead, {type(self).__name__}().fit(X, {type(gmm).__name__.lower()}.labels_) (σ from the "
                    f"clusters' spread), or pass the centres with a per-axis σ: "
                    f"fit_mixture({type(gmm).__name__.lower()}.cluster_centers_, sigma)."
                )
            from sklearn.mixture import BayesianGaussianMixture, GaussianMixture

            if not isinstance(gmm, (GaussianMixture, BayesianGaussianMixture)):
                raise InvalidInputError(
                    f"fit_gaussian_mixture needs a fitted sklearn.mixture.GaussianMixture (or "
                    f"BayesianGaussianMixture); got {type(gmm).__name__}. Use fit(X, labels) or "
                    "fit_mixture(means, sigma) for other clusterings."
                )
        check_is_fitted(gmm, "means_")  # an unfitted GaussianMixture: scikit-learn's "not fitted yet"
        covs = gmm_covariances(gmm)
        return self.fit_mixture(gmm.means_, mixture_sigma(covs), feature_names)

    def _grow(self, means, sigma, feature_names, scale=1.0, shift=None):
        self._check_n_leaves(means.shape[0])
        rng = check_random_state(self.random_state)
        labels = np.array([self._leaf_label(k) for k in range(means.shape[0])], dtype=np.int64)
        tree = grow_means_tree(means, sigma, type(self)._split_rule, labels, rng, feature_names)
        self.tree_ = rescale_tree(self._name_leaves(tree), scale, shift)
        self.means_, self.sigma_ = means * scale + (0.0 if shift is None else shift), sigma * scale
        logger.debug("%s: grew %d leaves, depth %d", type(self).__name__, self.tree_.n_leaves, self.tree_.depth)
        return self


_ESTIMATOR_PARAMS_DOC = """
    n_leaves : int or None, default=None
        Number of leaves; the tree always has one leaf per mean, so this may only be None or
        the number of clusters K (accepted so every explainer takes ``n_leaves``).
    noise_label : int, str or None, default=None
        Rows of ``y`` with this label are left out of fitting (None: no noise label).
    random_state : int, RandomState or None
        Seed for tie-breaking.
    n_jobs : int or None
        Threads for BLAS calls (scikit-learn convention; None = all).
"""


class MMDT(_MeansTree):
    __doc__ = """Mixture Model Decision Tree (Algorithm 1 of Fleissner et al.).

    At each node the cut is halfway across the largest gap between neighbouring projected
    means, the gap normalised by σ_j; ties are broken at random with ``random_state``.
    Construction never touches samples: O(K² d log K) for K means in d dimensions. A
    scikit-learn classifier: ``predict`` returns the reference labels, ``score`` accuracy.

    Parameters
    ----------""" + _ESTIMATOR_PARAMS_DOC + """
    Attributes
    ----------
    tree_ : ExplanationTree
        K leaves, each holding exactly one mean.
    means_ : ndarray of shape (K, d)
    sigma_ : ndarray of shape (d,)
    classes_ : ndarray of shape (K,)
        Label of each mean (``classes_[k]`` belongs to ``means_[k]``).
    n_features_in_ : int
    feature_names_in_ : ndarray of str
        Only when fitted on a DataFrame with string column names.

    Examples
    --------
    >>> import numpy as np
    >>> from pipeline.trees import MMDT
    >>> m = MMDT(random_state=0).fit_mixture([[0, 0], [10, 0], [10, 3]], sigma=[1, 1])
    >>> m.predict([[1, 0], [9, -1], [9, 4]]).tolist()
    [0, 1, 2]
    """

    title = "MMDT"  # its display name (figure titles, rules files)
    fit_protocol = "mixture"  # what its fit takes: the protocol the pipeline feeds it by
    _split_rule = staticmethod(_mmdt_split)


class RandomizedMMDT(_MeansTree):
    """The randomized tree from the proof of Theorem 2 (expected error O(K q^{-1/2})).

    At each node: the axis maximising max_{k,l} (μ_k^j − μ_l^j)² / σ_j² over the node's means,
    and a threshold drawn uniformly over the means' range on that axis (so both children
    receive at least one mean). Same parameters, API and attributes as :class:`MMDT`.
    """

    title = "Randomized MMDT"  # its display name (figure titles, rules files)
    fit_protocol = "mixture"  # what its fit takes: the protocol the pipeline feeds it by

    _split_rule = staticmethod(_randomized_split)
    error_bound = staticmethod(theorem2_upper_bound)  # its expected error (Theorem 2)


class ConceptMMDT(TransformerMixin, ReferenceTree):
    """Concept-MMDT (Algorithm 2): MMDT on means projected onto concept activation vectors.

    A scikit-learn classifier on latents Z (``predict`` returns the reference labels) and a
    transformer (``transform`` gives the concept coordinates C z).

    Parameters
    ----------
    cavs : array-like of shape (M, d) or None, default=None
        The CAV matrix C, one concept activation vector per row. None uses the latent axes
        themselves as concepts (C = I, i.e. MMDT on Z with σ̄ from the per-cluster spread).
    concept_names : sequence of str of length M, optional
        Names the tree's rules are written in (default with ``cavs=None``: the DataFrame's
        column names, if any).
    noise_label : int, str or None, default=None
        Rows of ``y`` with this label are left out of fitting.
    random_state : int, RandomState or None
        Seed for MMDT's tie-breaking.
    n_jobs : int or None
        Threads for BLAS calls.

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
    cavs_ : ndarray of shape (M, d)
    classes_ : ndarray of shape (K,)
    """

    title = "Concept-MMDT"  # its display name (figure titles, rules files)
    fit_protocol = "concept_mixture"  # what its fit takes: the protocol the pipeline feeds it by

    _parameter_constraints = {
        "cavs": ["array-like", None], "concept_names": ["array-like", None],
        **NOISE_CONSTRAINT, **COMMON_CONSTRAINTS,
    }
    _accepts_sparse = True
    error_bound = staticmethod(theorem1_upper_bound)  # MMDT on the concept means (Eq. 6's q)

    def __init__(self, cavs=None, concept_names=None, *, noise_label=None, random_state=None, n_jobs=None):
        self.cavs = cavs
        self.concept_names = concept_names
        self.noise_label = noise_label
        self.random_state = random_state
        self.n_jobs = n_jobs

    def _cavs(self, d) -> np.ndarray:
        if self.cavs is None:
            C = np.eye(d)
        else:
            C = check_matrix(self.cavs, "cavs")
        if C.shape[1] != d:
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

    def _names(self):
        if self.concept_names is not None:
            return [str(n) for n in self.concept_names]
        if self.cavs is None and hasattr(self, "feature_names_in_"):
            return [str(n) for n in self.feature_names_in_]
        return None

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
        self._validate_params()
        means = check_means(means, name="means")
        C = self._cavs(means.shape[1])
        self.classes_ = np.arange(means.shape[0])
        reset_features(self, C.shape[1])
        # The tree is invariant to each concept's scale: CAVs of extreme magnitude (1e-300: their
        # variances c Σ cᵀ would underflow to 0 and the means look like duplicates) are divided by a
        # power of two per CAV, exactly, and the thresholds mapped back.
        cav_scale = power_of_two_scale(C.T, per_column=True)
        if np.any(cav_scale != 1.0):
            Cn = C / cav_scale[:, None]
            covs = project_covariances(covariance, Cn, means.shape[0])
            return self._grow_concepts(means, C, project(means, Cn), np.sqrt(covs.max(axis=0)), cav_scale)
        covs = project_covariances(covariance, C, means.shape[0])
        return self._grow(means, C, np.sqrt(covs.max(axis=0)))

    def fit(self, Z, y):
        """Estimate latent means and per-component covariances from ``Z`` and labels, then grow.

        Parameters
        ----------
        Z : array-like of shape (n_samples, d)
            Latent representations.
        y : array-like of shape (n_samples,)
            Reference cluster labels; rows labelled ``noise_label`` are left out.

        Returns
        -------
        self
            ``predict`` returns the original label values of ``y``.
        """
        Z, codes, _, _ = self._validate_reference(Z, y)
        check_not_constant(Z, "Z")
        C = self._cavs(Z.shape[1])
        scale = power_of_two_scale(Z)
        Zs = Z / scale if scale != 1.0 else Z
        with limit_threads(self.n_jobs):
            means, _ = cluster_moments(Zs, codes)
            with np.errstate(over="ignore", invalid="ignore"):
                S = _project(Z, C)  # the concept coordinates predict() computes: the tree's training rows

            def project_rows(R):
                with np.errstate(over="ignore", invalid="ignore"):
                    return _project(R, C)

            concept_scale = power_of_two_scale(S, per_column=True) if np.all(np.isfinite(S)) else None
            if concept_scale is not None and np.any(concept_scale != 1.0):
                # The tree cuts concept coordinates, each on its own scale (like MMDT's axes): one power of
                # two per extreme concept, so a concept near 1e300 does not flush the others to zero.
                concept_means, proj_var = estimate_mixture(S / concept_scale, codes)
                return self._grow_concepts(means * scale, C, concept_means, np.sqrt(proj_var.max(axis=0)),
                                           concept_scale)._keep_exact(S, project_rows)
            # σ̄_m² = max_k c_mᵀ Σ_k c_m equals the largest per-cluster variance of the projection C z,
            # so the (d, d) covariances never need to be formed.
            _, proj_var = estimate_mixture(_project(Zs, C), codes)
        return self._grow(means, C, np.sqrt(proj_var.max(axis=0)), scale)._keep_exact(S, project_rows)

    def _grow(self, means, C, concept_sigma, scale: float = 1.0):
        return self._grow_concepts(means * scale, C, project(means, C), concept_sigma, scale)

    def _grow_concepts(self, means, C, concept_means, concept_sigma, scale=1.0):
        """Grow from concept means and σ̄ given in units of ``scale`` (a number or one per concept);
        ``means`` are the latent means in Z's units."""
        try:
            concept_means = check_means(concept_means, name="concept means C·μ_k")
        except InvalidInputError as exc:
            raise InvalidInputError(f"{exc} Add concepts that tell these clusters apart.") from None
        # A concept with zero variance under Σ (singular Σ) gets a tiny σ̄ instead of dividing by 0.
        abs_scale = np.abs(concept_means).max(axis=0)
        concept_sigma = check_sigma(concept_sigma, C.shape[0], name="concept sigma", from_data=True, scale=abs_scale)
        check_separated(concept_means, concept_sigma, name="concept means C·μ_k")
        rng = check_random_state(self.random_state)
        labels = np.array([self._leaf_label(k) for k in range(means.shape[0])], dtype=np.int64)
        tree = grow_means_tree(concept_means, concept_sigma, _mmdt_split, labels, rng, self._names())
        self.tree_ = rescale_tree(self._name_leaves(tree), scale)
        self.means_, self.concept_means_ = means, concept_means * scale
        self.concept_sigma_ = concept_sigma * scale
        self.cavs_ = C
        return self

    def transform(self, Z) -> np.ndarray:
        """Concept coordinates C z of latents ``Z`` (Eq. 4), shape (n_samples, M)."""
        check_is_fitted(self, "tree_")
        Z = validate_X(self, Z, reset=False)
        return _project(Z, self.cavs_)

    def predict(self, Z):
        """Cluster label for each latent row: project onto the CAVs, then apply the tree.

        Parameters
        ----------
        Z : array-like of shape (n_samples, d)

        Returns
        -------
        ndarray of shape (n_samples,) of ``classes_``' dtype
        """
        C = self.transform(Z)  # checks fitted state and features
        if self.n_jobs is None:
            leaf = self.tree_.predict(C)
        else:
            with limit_threads(self.n_jobs):
                leaf = self.tree_.predict(C)
        return leaf_labels(leaf, self.classes_)
