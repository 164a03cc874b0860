"""TAO: sparse oblique clustering trees optimised jointly with the clustering cost.

Gabidolla & Carreira-Perpiñán, "Optimal interpretable clustering using oblique decision
trees", KDD 2022. The clustering assignments are constrained to be the output of a tree
``T(x; Theta)`` and the problem ``min E(Z, Psi) + lambda * phi(Theta) s.t. Z = T(X; Theta)``
is solved with a quadratic-penalty-style homotopy: for ``mu = mu0, a*mu0, a^2*mu0, ...``
alternate

* clustering step: ``min_{Z, Psi} E(Z, Psi) + mu * #{n : z_n != T(x_n)}`` (Lloyd-type);
* tree step: ``min_Theta #{n : T(x_n) != z_n} + (lambda / mu) * phi(Theta)`` by Tree
  Alternating Optimization on a fixed-structure tree (see :mod:`pipeline.trees._tao_tree`),

until the assignments equal the tree's predictions and nothing changes.
"""

from __future__ import annotations

import logging
import numbers
import warnings

import numpy as np
from sklearn.base import BaseEstimator, ClusterMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils.validation import check_is_fitted
from tqdm.auto import tqdm

from pipeline.trees._tao_cost import ClusteringCost, KMeansCost, SphericalKMeansCost, penalised_clustering_step
from pipeline.trees._tao_tree import HeapTree, tao_fit
from pipeline.trees.tree import ExplanationTree
from pipeline.validation import InvalidInputError, check_labels, check_matrix, check_n_features

__all__ = ["TAO", "ClusteringCost", "KMeansCost", "SphericalKMeansCost"]

logger = logging.getLogger(__name__)

_COSTS = {"kmeans": KMeansCost, "spherical": SphericalKMeansCost}


class TAO(ClusterMixin, BaseEstimator):
    """Interpretable clustering by a (sparse oblique) tree, jointly optimised with k-means.

    Parameters
    ----------
    n_clusters : int, default=8
        Number of clusters K.
    depth : int, default=4
        Depth Δ of the complete tree TAO optimises (2**depth leaves must be >= K). Branches
        that end up receiving no training points are pruned from ``tree_``.
    oblique : bool, default=True
        Sparse oblique nodes ``w . x <= t`` (phi = ||w||_1, l1-logistic node solver) or
        axis-aligned nodes ``x[f] <= t`` (phi = 1 per split, exact node solver).
    sparsity : float, default=0.0
        λ >= 0, weight of phi in ``E + λ phi``, in the units of the clustering cost. The
        tree step sees ``λ / μ`` per unit of phi, in units of misassigned points.
    mu0 : float or "auto", default="auto"
        Initial penalty μ₀ > 0 (units of the clustering cost per misassigned point).
        "auto": 0.05 × the free clustering's mean cost per point.
    mu_growth : float, default=1.5
        Factor a > 1 applied to μ after each round.
    max_rounds : int, default=60
        Cap on the number of μ rounds; 0 stops after the direct fit (a TAO tree fitted to the
        starting clustering, which is left unchanged — use this to explain a non-centroid
        clustering without moving it).
    max_tao_iter : int, default=20
        Cap on TAO iterations per tree step.
    cost : {"kmeans", "spherical"} or ClusteringCost, default="kmeans"
        Clustering cost E.
    init : {"cart", "random"} or ExplanationTree, default="cart"
        Initial tree of the direct fit: scikit-learn CART of depth ``depth`` fitted to the
        starting clustering, random axis-aligned cuts at the median of the points reaching
        each node, or a given tree (depth <= ``depth``; shallower leaves are embedded as
        constant nodes, which TAO does not grow).
    max_C : float, default=1e3
        Upper bound on liblinear's inverse regularisation ``C = μ / λ`` at oblique nodes.
    random_state : int, RandomState or None
        Seeds the free clustering, the random initial tree and liblinear.
    verbose : bool, default=False
        Show a tqdm progress bar over the μ rounds.

    Attributes
    ----------
    tree_ : ExplanationTree
        The pruned clustering tree.
    labels_ : ndarray of int64, shape (n_samples,)
        The tree's clusters of the training points (``tree_.predict(X)``).
    assignments_ : ndarray of int64, shape (n_samples,)
        Last clustering-step assignments Z (equal to ``labels_`` when ``converged_``).
    cluster_centers_ : ndarray of shape (n_clusters, n_features)
        Centers optimal for ``labels_`` (a cluster no leaf predicts keeps its last center).
    kmeans_cost_ : float
        Clustering cost E of ``labels_`` with ``cluster_centers_`` (k-means: sum of squared
        distances).
    free_labels_, free_centers_, free_cost_ :
        The free (unconstrained) clustering the optimisation started from.
    history_ : list of dict
        One entry per stage ("direct" fit, then every μ round): ``mu``, ``tree_cost`` (E of
        the tree's assignments with their optimal centers — the paper's plotted curve),
        ``E`` (cost of Z), ``mismatches`` (#{z_n != T(x_n)}), ``phi``, ``objective``
        (E + λ phi + μ mismatches) and ``tao_trace`` (tree-step objective per TAO iteration).
    converged_ : bool
        Whether the assignments reached the tree's predictions with nothing changing
        (always False when ``max_rounds=0``).
    n_rounds_ : int
    """

    def __init__(self, n_clusters=8, depth=4, *, oblique=True, sparsity=0.0, mu0="auto", mu_growth=1.5,
                 max_rounds=60, max_tao_iter=20, cost="kmeans", init="cart", max_C=1e3, random_state=None,
                 verbose=False):
        self.n_clusters = n_clusters
        self.depth = depth
        self.oblique = oblique
        self.sparsity = sparsity
        self.mu0 = mu0
        self.mu_growth = mu_growth
        self.max_rounds = max_rounds
        self.max_tao_iter = max_tao_iter
        self.cost = cost
        self.init = init
        self.max_C = max_C
        self.random_state = random_state
        self.verbose = verbose

    # ------------------------------------------------------------- validation
    def _check_params(self, n_samples: int) -> ClusteringCost:
        def positive_int(name, value, low):
            if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < low:
                raise InvalidInputError(f"{name} must be an integer >= {low}, got {value!r}.")

        positive_int("n_clusters", self.n_clusters, 2)
        positive_int("depth", self.depth, 1)
        positive_int("max_rounds", self.max_rounds, 0)
        positive_int("max_tao_iter", self.max_tao_iter, 1)
        if self.n_clusters > n_samples:
            raise InvalidInputError(f"n_clusters={self.n_clusters} exceeds the {n_samples} samples; lower it.")
        if 2 ** self.depth < self.n_clusters:
            need = int(np.ceil(np.log2(self.n_clusters)))
            raise InvalidInputError(f"a tree of depth {self.depth} has {2 ** self.depth} leaves and cannot cover "
                                    f"n_clusters={self.n_clusters}; use depth >= {need}.")
        if not isinstance(self.sparsity, numbers.Real) or not np.isfinite(self.sparsity) or self.sparsity < 0:
            raise InvalidInputError(f"sparsity (lambda) must be a finite number >= 0, got {self.sparsity!r}.")
        if not (isinstance(self.mu0, str) and self.mu0 == "auto") and not (
                isinstance(self.mu0, numbers.Real) and np.isfinite(self.mu0) and self.mu0 > 0):
            raise InvalidInputError(f"mu0 must be 'auto' or a finite number > 0, got {self.mu0!r}.")
        if not isinstance(self.mu_growth, numbers.Real) or not np.isfinite(self.mu_growth) or self.mu_growth <= 1:
            raise InvalidInputError(f"mu_growth (a) must be a finite number > 1, got {self.mu_growth!r}.")
        if not isinstance(self.max_C, numbers.Real) or not self.max_C > 0:
            raise InvalidInputError(f"max_C must be > 0, got {self.max_C!r}.")
        if isinstance(self.cost, ClusteringCost):
            return self.cost
        if self.cost not in _COSTS:
            raise InvalidInputError(f"cost must be one of {sorted(_COSTS)} or a ClusteringCost, got {self.cost!r}.")
        return _COSTS[self.cost]()

    def _start(self, cost, X, y, centers, seed):
        K = self.n_clusters
        if centers is not None:
            centers = check_matrix(centers, "centers")
            if centers.shape != (K, X.shape[1]):
                raise InvalidInputError(f"centers must have shape ({K}, {X.shape[1]}), got {centers.shape}.")
        if y is None:
            if centers is None:
                return cost.fit_free(X, K, seed)
            return np.argmin(cost.point_costs(X, centers), axis=1).astype(np.int64), centers
        y = check_labels(y, X.shape[0])
        if y.min() < 0 or y.max() >= K:
            raise InvalidInputError(f"y must hold cluster ids in [0, {K}) (no noise label -1), got range "
                                    f"[{y.min()}, {y.max()}]; relabel or set n_clusters.")
        if centers is None:
            centers = cost.update_centers(X, y, np.tile(X.mean(axis=0), (K, 1)))
        return y, centers

    # -------------------------------------------------------------------- fit
    def fit(self, X, y=None, *, centers=None, feature_names=None):
        """Run the joint optimisation.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of int, shape (n_samples,), optional
            A given clustering (ids in [0, n_clusters)) to start from instead of the free one.
        centers : array-like of shape (n_clusters, n_features), optional
            Centers of the given clustering (computed from ``y`` if omitted; if given without
            ``y``, the start assigns each point to its nearest center).
        feature_names : sequence of str, optional
            Names used in ``tree_.rules()``.

        Returns
        -------
        self
        """
        X = check_matrix(X, "X")
        cost = self._check_params(X.shape[0])
        cost.validate(X)
        rng = np.random.default_rng(self.random_state if not isinstance(self.random_state, np.random.RandomState)
                                    else self.random_state.randint(2 ** 31 - 1))
        seed = int(rng.integers(2 ** 31 - 1))
        z, psi = self._start(cost, X, y, centers, seed)
        self.free_labels_, self.free_centers_ = z.copy(), psi.copy()
        self.free_cost_ = cost.total(X, z, psi)
        mu = float(self.mu0) if self.mu0 != "auto" else 0.05 * max(self.free_cost_, 1e-300) / X.shape[0]
        lam = float(self.sparsity)
        if isinstance(self.init, ExplanationTree):
            if self.init.n_features != X.shape[1]:
                raise InvalidInputError(f"init tree has {self.init.n_features} features but X has {X.shape[1]}.")
            tree = HeapTree.from_explanation_tree(self.init, self.depth, bool(self.oblique))
        elif isinstance(self.init, str) and self.init == "cart":
            tree = HeapTree.from_cart(self.depth, X, z, bool(self.oblique), seed)
        elif isinstance(self.init, str) and self.init == "random":
            tree = HeapTree.random(self.depth, X, z, bool(self.oblique), rng)
        else:
            raise InvalidInputError(f"init must be 'cart', 'random' or an ExplanationTree, got {self.init!r}.")
        tao_kw = dict(max_iter=self.max_tao_iter, max_C=float(self.max_C), random_state=seed)

        trace = tao_fit(tree, X, z, lam / mu, **tao_kw)  # direct fit to the free clustering
        self.history_ = [self._record("direct", cost, X, z, psi, tree, mu, lam, trace)]
        self.converged_ = False
        bar = tqdm(range(self.max_rounds), desc="TAO μ rounds", disable=not self.verbose, leave=False)
        for r in bar:
            before = tree.copy()
            z_prev = z
            z, psi = penalised_clustering_step(cost, X, z, psi, mu, target=tree.predict(X))
            trace = tao_fit(tree, X, z, lam / mu, **tao_kw)
            rec = self._record(r + 1, cost, X, z, psi, tree, mu, lam, trace)
            self.history_.append(rec)
            bar.set_postfix(mu=f"{mu:.3g}", cost=f"{rec['tree_cost']:.5g}", mismatches=rec["mismatches"])
            logger.info("TAO round %d: mu=%.4g tree cost=%.6g mismatches=%d phi=%.4g", r + 1, mu,
                        rec["tree_cost"], rec["mismatches"], rec["phi"])
            if rec["mismatches"] == 0 and np.array_equal(z, z_prev) and tree.same_as(before):
                self.converged_ = True
                break
            mu *= float(self.mu_growth)
        bar.close()
        self.n_rounds_ = len(self.history_) - 1
        if not self.converged_ and self.max_rounds > 0:
            warnings.warn(f"TAO did not converge in max_rounds={self.max_rounds} μ rounds ({rec['mismatches']} "
                          "assignments still differ from the tree); labels_ are the tree's. Increase max_rounds "
                          "or mu_growth.", ConvergenceWarning, stacklevel=2)

        self.tree_ = tree.to_explanation_tree(X, feature_names)
        self.assignments_ = z
        self.labels_ = self.tree_.predict(X)
        self.cluster_centers_ = cost.update_centers(X, self.labels_, psi)
        self.kmeans_cost_ = cost.total(X, self.labels_, self.cluster_centers_)
        self.n_features_in_ = X.shape[1]
        return self

    @staticmethod
    def _record(stage, cost, X, z, psi, tree, mu, lam, trace) -> dict:
        pred = tree.predict(X)
        E = cost.total(X, z, psi)
        mismatches = int(np.sum(pred != z))
        phi = tree.phi()
        return {"stage": stage, "mu": mu, "E": E, "mismatches": mismatches, "phi": phi,
                "objective": E + lam * phi + mu * mismatches,
                "tree_cost": cost.total(X, pred, cost.update_centers(X, pred, psi)), "tao_trace": trace}

    def predict(self, X) -> np.ndarray:
        """Cluster id of each row of X by the tree, shape (n_samples,), dtype int64."""
        check_is_fitted(self, "tree_")
        X = check_matrix(X, "X")
        check_n_features(X, self.n_features_in_)
        return self.tree_.predict(X)
