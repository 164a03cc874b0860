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
import warnings
from numbers import Integral, Real

import numpy as np
from sklearn.base import BaseEstimator, ClusterMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_consistent_length, column_or_1d
from pipeline.progress import tqdm

from pipeline.trees._tao_cost import ClusteringCost, KMeansCost, SphericalKMeansCost, penalised_clustering_step
from pipeline.trees._tao_tree import HeapTree, tao_fit
from pipeline.trees._fitting import (
    COMMON_CONSTRAINTS, NOISE_CONSTRAINT, check_magnitude_outliers, check_not_constant, noise_mask,
    power_of_two_scale, predict_tree,
    rescale_tree, resolve_feature_names, validate_X,
)
from pipeline.threads import limit_threads
from pipeline.trees.tree import ExplanationTree
from pipeline.validation import InvalidInputError, check_label_values, check_labels, check_matrix

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
    noise_label : int, str or None, default=None
        Rows of a given ``init_labels`` with this label are left out of the optimisation (they still get
        a cluster in ``labels_`` from the tree).
    n_jobs : int or None
        Threads for BLAS calls and liblinear (scikit-learn convention; None = all).

    Notes
    -----
    TAO works on X centred (k-means cost only) and divided by a power of two near its largest
    magnitude, and maps the tree, centres and costs back, so the result does not depend on
    the scale (or, for k-means, the offset) of the data. ``phi`` (the l1 norm of oblique
    weights) is measured in those internal units; ``history_`` costs are in the data's units.

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
        distances). ``inf`` only when the cost lies beyond float64's range (data near 1e154
        or larger: squared distances overflow); fitting then warns, naming the cost.
    kmeans_cost_log10_ : float
        ``log10(kmeans_cost_)``, finite also where ``kmeans_cost_`` overflows (computed from the
        internal, rescaled units); ``-inf`` for a zero cost.
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
    n_features_in_ : int
    feature_names_in_ : ndarray of str
        Only when fitted on a DataFrame; these names are used in the rules.
    """

    title = "TAO"  # its display name (figure titles, rules files)
    fit_protocol = "optional_centers"  # what its fit takes: the protocol the pipeline feeds it by

    _parameter_constraints = {
        "n_clusters": [Interval(Integral, 1, None, closed="left")],
        "depth": [Interval(Integral, 1, None, closed="left")],
        "oblique": ["boolean"],
        "sparsity": [Interval(Real, 0, None, closed="left")],
        "mu0": [StrOptions({"auto"}), Interval(Real, 0, None, closed="neither")],
        "mu_growth": [Interval(Real, 1, None, closed="neither")],
        "max_rounds": [Interval(Integral, 0, None, closed="left")],
        "max_tao_iter": [Interval(Integral, 1, None, closed="left")],
        "cost": [StrOptions(set(_COSTS)), ClusteringCost],
        "init": [StrOptions({"cart", "random"}), ExplanationTree],
        "max_C": [Interval(Real, 0, None, closed="neither")],
        "verbose": ["verbose"],
        **NOISE_CONSTRAINT, **COMMON_CONSTRAINTS,
    }

    def __init__(self, n_clusters=8, depth=4, *, oblique=True, sparsity=0.0, mu0="auto", mu_growth=1.5,
                 max_rounds=60, max_tao_iter=20, cost="kmeans", init="cart", max_C=1e3, random_state=None,
                 verbose=False, noise_label=None, n_jobs=None):
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
        self.noise_label = noise_label
        self.n_jobs = n_jobs

    # ------------------------------------------------------------- validation
    def _check_params(self, n_samples: int) -> ClusteringCost:
        """Checks across parameters and data (single parameters: ``_parameter_constraints``)."""
        if self.n_clusters > n_samples:
            raise InvalidInputError(f"n_clusters={self.n_clusters} exceeds the {n_samples} samples; lower it.")
        if 2 ** self.depth < self.n_clusters:
            need = int(np.ceil(np.log2(self.n_clusters)))
            raise InvalidInputError(f"a tree of depth {self.depth} has {2 ** self.depth} leaves and cannot cover "
                                    f"n_clusters={self.n_clusters}; use depth >= {need}.")
        if isinstance(self.cost, ClusteringCost):
            return self.cost
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
        y = check_labels(y, X.shape[0], "init_labels")
        if y.min() < 0 or y.max() >= K:
            raise InvalidInputError(f"init_labels must hold cluster ids in [0, {K}) besides noise_label="
                                    f"{self.noise_label!r}, got range [{y.min()}, {y.max()}]; relabel or set n_clusters.")
        if centers is None:
            centers = cost.update_centers(X, y, np.tile(X.mean(axis=0), (K, 1)))
        return y, centers

    # -------------------------------------------------------------------- fit
    def fit(self, X, y=None, *, init_labels=None, centers=None, feature_names=None):
        """Run the joint optimisation.

        Parameters
        ----------
        X : array-like or DataFrame of shape (n_samples, n_features)
        y : None
            Ignored (scikit-learn's clusterer convention); pass a starting clustering as
            ``init_labels``.
        init_labels : array-like of int, shape (n_samples,), optional
            A given clustering (ids in [0, n_clusters)) to start from instead of the free one;
            rows labelled ``noise_label`` are left out of the optimisation.
        centers : array-like of shape (n_clusters, n_features), optional
            Centers of the given clustering (computed from ``init_labels`` if omitted; if given
            without ``init_labels``, the start assigns each point to its nearest center).
        feature_names : sequence of str, optional
            Names used in ``tree_.rules()`` (default: the DataFrame's columns).

        Returns
        -------
        self
        """
        self._validate_params()
        X_all = validate_X(self, X, reset=True, min_samples=2)
        keep = np.ones(X_all.shape[0], dtype=bool)
        y = init_labels
        if y is not None:
            y = column_or_1d(y, warn=True)
            check_consistent_length(X_all, y)
            check_label_values(y, "init_labels")
            keep = ~noise_mask(y, self.noise_label)
            y = y[keep]
            if y.size == 0:
                raise InvalidInputError(f"every init_label equals noise_label={self.noise_label!r}, so no row has a "
                                        "starting cluster; pass real cluster ids or init_labels=None.")
            if self.n_clusters > 1 and np.unique(y).size == 1:
                only = np.asarray(y)[0].item()
                raise InvalidInputError(f"every init_label (besides noise) is {only!r}: one starting cluster cannot "
                                        f"seed n_clusters={self.n_clusters}; pass at least two distinct cluster ids "
                                        "or init_labels=None.")
        X_orig = X_all if keep.all() else X_all[keep]
        if self.n_clusters > 1:
            check_not_constant(X_orig)
        names = resolve_feature_names(self, feature_names, X_all.shape[1])
        cost = self._check_params(X_orig.shape[0])
        cost.validate(X_orig)
        if type(cost) is KMeansCost:
            check_magnitude_outliers(X_orig, "TAO", "one such point dominates the k-means cost")
        # Work on (X - c) / s: k-means is invariant to the shift, both costs to the scale.
        shift = (type(cost) is KMeansCost)
        c = X_orig.min(axis=0) / 2 + X_orig.max(axis=0) / 2 if shift else np.zeros(X_orig.shape[1])
        scaled = type(cost) in (KMeansCost, SphericalKMeansCost)
        s = power_of_two_scale(X_orig - c, always=True) if scaled else 1.0
        cf = s * s if shift else 1.0  # cost units per internal cost unit
        X = (X_orig - c) / s
        if centers is not None:
            centers = (check_matrix(centers, "centers") - c) / s
        rng = np.random.default_rng(self.random_state if not isinstance(self.random_state, np.random.RandomState)
                                    else self.random_state.randint(2 ** 31 - 1))
        seed = int(rng.integers(2 ** 31 - 1))
        with limit_threads(self.n_jobs):
            tree, z, psi = self._optimise(cost, X, y, centers, seed, rng, cf, c, s)
        self.tree_ = rescale_tree(tree.to_explanation_tree(X, names), s, c)
        self.tree_.record_neighbours(X_all)  # printed rules route every training row as the tree does
        self.labels_ = self.tree_.predict(X_all)
        labels_kept = self.labels_[keep]
        self.assignments_ = self._full(z, keep)
        self.free_labels_ = self._full(self.free_labels_, keep)
        self.cluster_centers_, self.kmeans_cost_, self.kmeans_cost_log10_ = self._final_cost(
            cost, X_orig, X, labels_kept, psi, s, c, cf)
        over = not np.isfinite(self.kmeans_cost_)
        if over or (self.kmeans_cost_ == 0.0 and np.isfinite(self.kmeans_cost_log10_)):
            exp = int(np.floor(self.kmeans_cost_log10_))
            value = f"{10 ** (self.kmeans_cost_log10_ - exp):.4g}e{exp:+d}"
            warnings.warn(
                f"TAO: the k-means cost of the fitted tree is {value} in X's units, "
                + ("beyond float64's largest value (1.8e+308), so kmeans_cost_ (and the costs in history_) read inf"
                   if over else "below float64's smallest value (5e-324), so kmeans_cost_ (and the costs in "
                   "history_) read 0")
                + f"; kmeans_cost_log10_ = {self.kmeans_cost_log10_:.6g} holds it. The tree is unaffected. For a "
                "representable cost, fit on X " + ("divided" if over else "multiplied")
                + " by a power of ten (the cost scales by its square, the cuts by the same factor).",
                UserWarning, stacklevel=2)
        return self

    @staticmethod
    def _final_cost(cost, X_orig, X, labels, psi, s, c, cf):
        """Centres, cost and log10(cost) in X's units; on data so large that squared distances
        overflow (beyond ~1e154) all come from the internal units, and the cost is ``inf`` when it
        exceeds float64's range (never NaN) while its log10 stays finite."""
        def log10(v):
            with np.errstate(divide="ignore"):
                return float(np.log10(v))

        kmeans = type(cost) is KMeansCost
        with np.errstate(over="ignore", invalid="ignore", under="ignore"):
            inner = cost.update_centers(X, labels, psi)
            inner_total = cost.total(X, labels, inner)  # internal units: neither overflows nor underflows
            log = log10(inner_total) + (2 * log10(s) if kmeans else 0.0)  # cf = s * s (k-means), else 1
            centers = cost.update_centers(X_orig, labels, psi * s + c)
            if np.all(np.isfinite(centers)):
                total = cost.total(X_orig, labels, centers)
                if np.isfinite(total):
                    return centers, total, log
            if not kmeans:  # the spherical cost has unit centres: no overflow
                return centers, cost.total(X_orig, labels, centers), log
            return inner * s + c, (0.0 if inner_total == 0.0 else float(np.float64(inner_total) * cf)), log

    @staticmethod
    def _full(z, keep):
        if keep.all():
            return z
        out = np.full(keep.shape[0], -1, dtype=np.int64)
        out[keep] = z
        return out

    def _optimise(self, cost, X, y, centers, seed, rng, cf, c, s):
        """The μ homotopy on the internal (centred, scaled) data; returns (tree, Z, Ψ)."""
        z, psi = self._start(cost, X, y, centers, seed)
        self.free_labels_, self.free_centers_ = z.copy(), psi * s + c
        free_cost = cost.total(X, z, psi)
        self.free_cost_ = free_cost * cf
        def internal(v):  # cost units -> internal units; cf underflows to 0 for data near 1e-300
            with np.errstate(divide="ignore", over="ignore"):
                return 0.0 if v == 0 else float(np.float64(v) / cf)

        mu = internal(self.mu0) if self.mu0 != "auto" else 0.05 * max(free_cost, 1e-300) / X.shape[0]
        lam = internal(self.sparsity)
        if isinstance(self.init, ExplanationTree):
            if self.init.n_features != X.shape[1]:
                raise InvalidInputError(f"init tree has {self.init.n_features} features but X has {X.shape[1]}.")
            init = rescale_tree(self.init, 1.0 / s, -c / s)
            tree = HeapTree.from_explanation_tree(init, self.depth, bool(self.oblique))
        elif self.init == "cart":
            tree = HeapTree.from_cart(self.depth, X, z, bool(self.oblique), seed)
        else:
            tree = HeapTree.random(self.depth, X, z, bool(self.oblique), rng)
        tao_kw = dict(max_iter=self.max_tao_iter, max_C=float(self.max_C), random_state=seed)

        trace = tao_fit(tree, X, z, lam / mu, **tao_kw)  # direct fit to the free clustering
        self.history_ = [self._record("direct", cost, X, z, psi, tree, mu, lam, trace, cf)]
        self.converged_ = False
        bar = tqdm(range(self.max_rounds), desc="TAO μ rounds", disable=not self.verbose, leave=False)
        for r in bar:
            before = tree.copy()
            z_prev = z
            z, psi = penalised_clustering_step(cost, X, z, psi, mu, target=tree.predict(X))
            trace = tao_fit(tree, X, z, lam / mu, **tao_kw)
            rec = self._record(r + 1, cost, X, z, psi, tree, mu, lam, trace, cf)
            self.history_.append(rec)
            bar.set_postfix(mu=f"{rec['mu']:.3g}", cost=f"{rec['tree_cost']:.5g}", mismatches=rec["mismatches"])
            logger.info("TAO round %d: mu=%.4g tree cost=%.6g mismatches=%d phi=%.4g", r + 1, rec["mu"],
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
                          "or mu_growth.", ConvergenceWarning, stacklevel=3)
        return tree, z, psi

    @staticmethod
    def _record(stage, cost, X, z, psi, tree, mu, lam, trace, cf=1.0) -> dict:
        """One ``history_`` entry; costs, μ and λ converted to the data's units by ``cf``."""
        pred = tree.predict(X)
        E = cost.total(X, z, psi)
        mismatches = int(np.sum(pred != z))
        phi = tree.phi()
        return {"stage": stage, "mu": mu * cf, "E": E * cf, "mismatches": mismatches, "phi": phi,
                "objective": (E + lam * phi + mu * mismatches) * cf,
                "tree_cost": cost.total(X, pred, cost.update_centers(X, pred, psi)) * cf, "tao_trace": trace}

    def predict(self, X) -> np.ndarray:
        """Cluster id of each row of X by the tree, shape (n_samples,), dtype int64."""
        return predict_tree(self, X)
