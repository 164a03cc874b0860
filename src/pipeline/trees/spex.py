"""SpEx: explanation trees by spectral graph partitioning (Argov & Wagner, Algorithm 1).

Grow a tree to ``n_leaves`` leaves. In every leaf v the candidate split is the coordinate cut
S = {x in X_v : x_j <= t} minimising ``CutScore = psi_G(S) + psi_G(X_v \\ S)``, where
``psi_G(A) = e_G(A, X \\ A) / vol_G(A)`` is the conductance of A in the *whole* graph G
(edges to points outside the leaf count as cut; volumes use full degrees; ``psi = 0`` for a
zero-volume set). The leaf split next is the one with the largest
``LeafScore = psi_G(X_v) - CutScore`` (ties: the leaf created first).

* :class:`SpExGraph` — any symmetric non-negative sparse graph G over the points.
* :class:`SpExClique` — G is the clique graph of a reference clustering (unit weights between
  points of the same cluster), handled by per-cluster prefix counts, never materialised.
* :class:`SpExKNN` — G is the symmetrised k-nearest-neighbour graph (reference-free).

Thresholds are data values (``x_j <= t`` with t the largest left value), so the tree
reproduces its training partition exactly. Cut ties go to the smallest threshold and then to
the lowest feature index (``random_state=None``) or to a seeded random feature order.
"""

from __future__ import annotations

import heapq
import logging
import warnings
from numbers import Integral

import numpy as np
from sklearn.base import BaseEstimator, ClusterMixin
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_consistent_length, column_or_1d
from pipeline.progress import tqdm

from pipeline.trees._column_order import ColumnOrder, feature_priority
from pipeline.trees._fitting import (
    COMMON_CONSTRAINTS, N_LEAVES_CONSTRAINT, NOISE_CONSTRAINT, ReferenceTree, assert_finite, check_magnitude_outliers,
    check_n_leaves, leaf_labels, majority_labels, name_leaves, noise_mask, power_of_two_scale, predict_tree,
    resolve_feature_names, tree_predict, unsplittable_error, validate_X,
)
from pipeline.threads import limit_threads
from pipeline.trees._spex_sweeps import (
    DEFAULT_SETTINGS, BinnedColumns, GraphData, SweepSettings, clique_best_cut, clique_split_cuts, graph_best_cut,
    graph_split_cuts, use_binned_clique,
)
from pipeline.trees.graphs import check_graph, check_has_edges, knn_graph
from pipeline.trees.tree import ExplanationTree
from pipeline.validation import InvalidInputError, check_label_values

logger = logging.getLogger(__name__)


def grow_spex_tree(X: np.ndarray, n_leaves: int, best_cut, feature_names=None, verbose: bool = False,
                   split_cuts=None, root=None, threshold=None, bound=None):
    """Algorithm 1 with a pluggable ``best_cut(ColumnOrder) -> (feature, position, score, psi)``.

    ``split_cuts(order, feature, position) -> ((left order, left cut), (right order, right cut))``
    optionally fuses splitting a node with evaluating its children (default: ``order.split``
    then ``best_cut`` per child). Returns the grown :class:`ExplanationTree` (leaf labels
    unset). Leaves created by the last split are never evaluated (their best cut is not needed).

    ``root`` (default ``ColumnOrder.from_matrix(X)``) and ``threshold(node, feature, position)``
    (default: the value at that sorted position of the node's ColumnOrder) let another node
    representation (:class:`~pipeline.trees._spex_sweeps.BinnedColumns`) grow the same tree.
    With ``bound(node) -> (psi, lower bound of the best cut score)``, ``split_cuts`` may return
    a child's cut as None: the child waits in the heap under its upper bound ``psi - bound``
    of the leaf score and is evaluated only if it reaches the top (exact, as an upper bound
    never ranks a node below its true score; ties keep the node's first place in line).
    """
    n, d = X.shape
    tree = ExplanationTree(d, feature_names)
    heap: list = []
    counter = 0

    if threshold is None:
        def threshold(order, j, p):
            return X[order.order[j, p], j]

    if split_cuts is None:
        def split_cuts(order, j, p):
            return tuple((child, best_cut(child)) for child in order.split(j, p, n))

    def push(node_id: int, order: ColumnOrder, cut=None, place=None) -> None:
        nonlocal counter
        if place is None:
            place = counter
            counter += 1
        if cut is None and bound is not None:
            psi, least = bound(order)
            heapq.heappush(heap, (-(psi - least), place, node_id, order, None))
            return
        cut = best_cut(order) if cut is None else cut
        j, p, score, psi = cut
        leaf_score = psi - score if j >= 0 else -np.inf
        heapq.heappush(heap, (-leaf_score, place, node_id, order, cut))

    n_cur = 1
    if n_leaves > 1:
        push(0, ColumnOrder.from_matrix(X) if root is None else root)
    with tqdm(total=n_leaves - 1, desc="SpEx splits", disable=not verbose) as bar:
        while n_cur < n_leaves:
            neg_score, place, node_id, order, cut = heapq.heappop(heap)
            if cut is None:  # waited under an upper bound: evaluate it and put it back in line
                push(node_id, order, best_cut(order), place)
                continue
            j, p = cut[0], cut[1]
            if j < 0:
                raise unsplittable_error(n_leaves, n_cur, X)
            value = threshold(order, j, p)
            left, right = tree.split(node_id, j, value)
            n_cur += 1
            logger.debug("split node %d on x[%d] <= %.6g (leaf score %.6g)", node_id, j, value, -neg_score)
            if n_cur < n_leaves:
                (lo, lcut), (ro, rcut) = split_cuts(order, j, p)
                del order
                push(left, lo, lcut)
                push(right, ro, rcut)
            bar.update(1)
    return tree


class _SpExBase(BaseEstimator):
    def _finish(self, X, tree, codes=None, leaves=None):
        """Label the leaves (the majority reference label of their points when ``codes`` is
        given; ``leaves``: each point's leaf if known) and store the tree."""
        if codes is not None:
            leaves = tree._apply(X) if leaves is None else leaves
            labels = majority_labels(leaves, codes, np.arange(self.classes_.size), tree.n_nodes)
            for leaf in tree.leaves:
                tree.set_label(leaf, self._leaf_label(int(labels[leaf])))
            tree = name_leaves(tree, self.classes_)
        else:
            for i, leaf in enumerate(tree.leaves):
                tree.set_label(leaf, i)
        self.tree_ = tree
        self.n_leaves_ = tree.n_leaves
        return self

    def predict(self, X) -> np.ndarray:
        """Label of the leaf each row falls in, shape (n_samples,).

        The majority reference label of the leaf's training points when fitted with a
        reference clustering, otherwise the leaf index 0..n_leaves-1 (left-to-right).
        """
        return leaf_labels(predict_tree(self, X), getattr(self, "classes_", None))


_SPEX_CONSTRAINTS = {**N_LEAVES_CONSTRAINT, **NOISE_CONSTRAINT, **COMMON_CONSTRAINTS, "verbose": ["verbose"],
                     "sweep": [SweepSettings, None]}


class SpExClique(_SpExBase, ReferenceTree):
    """SpEx with the clique graph of a reference clustering (a scikit-learn classifier).

    Parameters
    ----------
    n_leaves : int, optional
        Number of leaves (default: number of reference clusters); between 1 and the number
        of fitted rows.
    noise_label : int, str or None, default=None
        Rows of ``y`` with this label are left out of fitting.
    random_state : int, RandomState or None
        Seeds the feature order used to break exact ties between features.
    verbose : bool
        Show a progress bar.
    n_jobs : int or None
        Threads for the compiled sweeps (scikit-learn convention).
    sweep : SweepSettings or None
        Tuning of the exact sweeps (None: the defaults); every setting grows the same tree.

    Attributes
    ----------
    tree_ : ExplanationTree
    classes_ : ndarray of shape (k,) — the reference labels (noise excluded).
    n_leaves_ : int
    """

    title = "SpEx-Clique"  # its display name (figure titles, rules files)
    fit_protocol = "labels"  # what its fit takes: the protocol the pipeline feeds it by

    _parameter_constraints = _SPEX_CONSTRAINTS

    def __init__(self, n_leaves=None, *, noise_label=None, random_state=None, verbose=False, n_jobs=None, sweep=None):
        self.n_leaves = n_leaves
        self.noise_label = noise_label
        self.random_state = random_state
        self.verbose = verbose
        self.n_jobs = n_jobs
        self.sweep = sweep

    def fit(self, X, y, feature_names=None):
        """Fit to X (n_samples, n_features) and reference labels y (n_samples,).

        A DataFrame's column names name the rules; rows labelled ``noise_label`` are left out.
        """
        # X's values are checked (finite) by the binned sweep's first pass, or below
        X, codes, _, feature_names = self._validate_reference(X, y, feature_names, finite_later=True)
        classes = self.classes_
        n_leaves = check_n_leaves(self.n_leaves, classes.size, X.shape[0])
        codes = codes.astype(np.int8 if classes.size < 128 else np.int16 if classes.size < 32768 else np.int32)
        counts = np.bincount(codes, minlength=classes.size)
        priority = feature_priority(X.shape[1], self.random_state)
        settings = self.sweep or DEFAULT_SETTINGS
        with limit_threads(self.n_jobs, work=X.size):
            # large data: exact cuts from value bins, no column sort (where the bins suit the data)
            binned = (BinnedColumns(X, codes, counts, priority, n_leaves, settings)
                      if use_binned_clique(X.shape[0], settings) else None)
            if binned is None or not binned.finite:  # not read, or not finite: scikit-learn's check and error
                assert_finite(self, X)
            leaves = None
            if binned is not None and binned.suited:
                tree = grow_spex_tree(X, n_leaves, binned.best_cut, feature_names, self.verbose,
                                      split_cuts=binned.split_cuts, root=binned.root(), threshold=binned.threshold,
                                      bound=binned.bound)
                leaves = binned.apply(tree)
            else:
                tree = grow_spex_tree(
                    X, n_leaves, lambda o: clique_best_cut(o, codes, counts, priority, settings), feature_names,
                    self.verbose, split_cuts=lambda o, j, p: clique_split_cuts(o, j, p, codes, counts, priority, settings),
                )
        return self._finish(X, tree, codes, leaves)._keep_exact(X)

    predict = _SpExBase.predict


DEFAULT_LEAVES = 8  # reference-free SpEx without y: scikit-learn's KMeans default of 8 clusters


def _fit_graph(est, X, A, y, feature_names):
    """Shared body of SpExGraph/SpExKNN fitting once the graph is known (noise rows dropped)."""
    codes = None
    if y is not None:
        est.classes_, codes = np.unique(y, return_inverse=True)
    default = DEFAULT_LEAVES if codes is None else est.classes_.size
    n_leaves = check_n_leaves(est.n_leaves, default, X.shape[0])
    if n_leaves > 1:
        check_has_edges(A)
    graph = GraphData(A)
    priority = feature_priority(X.shape[1], est.random_state)
    settings = est.sweep or DEFAULT_SETTINGS
    tree = grow_spex_tree(X, n_leaves, lambda o: graph_best_cut(o, graph, priority, settings), feature_names,
                          est.verbose, split_cuts=lambda o, j, p: graph_split_cuts(o, j, p, graph, priority, settings))
    return est._finish(X, tree, codes)


class _ClusterSpEx(ClusterMixin, _SpExBase):
    """Reference-free SpEx (a scikit-learn clusterer); optional ``y`` names the leaves."""

    _parameter_constraints = _SPEX_CONSTRAINTS

    def _leaf_label(self, code: int) -> int:
        return ReferenceTree._leaf_label(self, code)

    def _prepare(self, X, y, feature_names):
        """Validated X (all rows), labels without noise or None, kept-row mask, names."""
        self._validate_params()
        if hasattr(self, "classes_"):
            del self.classes_
        X = validate_X(self, X, reset=True, min_samples=2)
        keep = np.ones(X.shape[0], dtype=bool)
        if y is not None:
            y = column_or_1d(y, warn=True)
            check_consistent_length(X, y)
            check_label_values(y)
            keep = ~noise_mask(y, self.noise_label)
            y = y[keep]
            if np.unique(y).size < 1:
                raise InvalidInputError("every label of y is noise_label; pass reference labels or y=None.")
        return X, y, keep, resolve_feature_names(self, feature_names, X.shape[1])

    def _set_labels(self, X):
        """``labels_``: ``predict`` on the training rows ``X`` (already validated; a DataFrame's
        column names were checked at fit, so predicting on the array must not warn about them).
        The tree keeps the training values nearest its cuts (noise rows included): exact rules."""
        self.tree_.record_neighbours(X)
        self.labels_ = leaf_labels(tree_predict(self.tree_, X), getattr(self, "classes_", None))
        return self


class SpExGraph(_ClusterSpEx):
    """SpEx on a user-supplied graph over the points (Algorithm 1); a scikit-learn clusterer.

    Parameters
    ----------
    n_leaves : int, optional
        Number of leaves; default: the number of reference clusters if ``y`` is passed to
        ``fit``, else 8 (scikit-learn's KMeans default).
    noise_label : int, str or None, default=None
        Rows of ``y`` with this label are left out of fitting.
    random_state : int, RandomState or None
        Seeds the feature order used to break exact ties between features.
    verbose : bool
        Show a progress bar.
    n_jobs : int or None
        Threads for the compiled sweeps.
    sweep : SweepSettings or None
        Tuning of the exact sweeps (None: the defaults); every setting grows the same tree.

    Attributes
    ----------
    tree_ : ExplanationTree
    labels_ : ndarray of shape (n_samples,) — ``predict`` on the training rows.
    n_leaves_ : int
    """

    title = "SpEx-Graph"  # its display name (figure titles, rules files)
    fit_protocol = "graph"  # what its fit takes: the protocol the pipeline feeds it by

    def __init__(self, n_leaves=None, *, noise_label=None, random_state=None, verbose=False, n_jobs=None, sweep=None):
        self.n_leaves = n_leaves
        self.noise_label = noise_label
        self.random_state = random_state
        self.verbose = verbose
        self.n_jobs = n_jobs
        self.sweep = sweep

    def fit(self, X, graph, feature_names=None, y=None):
        """Fit to X (n_samples, n_features) and a graph (n_samples, n_samples).

        ``graph`` is a scipy.sparse (or dense) symmetric matrix of finite non-negative
        weights; self-loops count in degrees but are never cut. Optional reference labels
        ``y`` only name the leaves (majority label) and drop ``noise_label`` rows from fitting.
        """
        X, y, keep, feature_names = self._prepare(X, y, feature_names)
        A = check_graph(graph, X.shape[0])
        if not keep.all():
            A = A[keep][:, keep]
        with limit_threads(self.n_jobs):
            _fit_graph(self, X if keep.all() else X[keep], A, y, feature_names)  # no copy without noise
        return self._set_labels(X)


class SpExKNN(_ClusterSpEx):
    """Reference-free SpEx on the symmetrised k-nearest-neighbour graph; a scikit-learn clusterer.

    Parameters
    ----------
    n_leaves : int, optional
        Number of leaves; default: the number of reference clusters if ``y`` is passed to
        ``fit``, else 8 (scikit-learn's KMeans default).
    n_neighbors : int, default=20
        Neighbours per point in the kNN graph (mutual neighbours get edge weight 2); at most
        n_samples - 1 are used (with a warning).
    knn_method : {"auto", "exact", "nndescent"}, default="auto"
        Graph construction (see :func:`pipeline.trees.graphs.knn_graph`): exact up to 20,000
        points, pynndescent (approximate, seeded by ``random_state``) above. The graph is
        built on the centred data divided by a power of two, so any scale of X works.
    noise_label : int, str or None, default=None
        Rows of ``y`` with this label are left out of fitting.
    random_state : int, RandomState or None
        Seeds the feature order used to break exact ties between features.
    verbose : bool
        Show a progress bar.
    n_jobs : int or None
        Threads for the graph construction and the sweeps.
    sweep : SweepSettings or None
        Tuning of the exact sweeps (None: the defaults); every setting grows the same tree.

    Attributes
    ----------
    graph_ : scipy.sparse.csr_matrix — the kNN graph the tree was fitted on.
    labels_ : ndarray of shape (n_samples,) — ``predict`` on the training rows.
    """

    title = "SpEx-kNN"  # its display name (figure titles, rules files)
    fit_protocol = "labels"  # what its fit takes: the protocol the pipeline feeds it by

    _parameter_constraints = {
        **_SPEX_CONSTRAINTS, "n_neighbors": [Interval(Integral, 1, None, closed="left")],
        "knn_method": [StrOptions({"auto", "exact", "nndescent"})],
    }

    def __init__(self, n_leaves=None, n_neighbors=20, knn_method="auto", *, noise_label=None, random_state=None,
                 verbose=False, n_jobs=None, sweep=None):
        self.n_leaves = n_leaves
        self.n_neighbors = n_neighbors
        self.knn_method = knn_method
        self.noise_label = noise_label
        self.random_state = random_state
        self.verbose = verbose
        self.n_jobs = n_jobs
        self.sweep = sweep

    def fit(self, X, y=None, feature_names=None, graph=None):
        """Fit to X (n_samples, n_features); the kNN graph is built unless ``graph`` is given.

        ``y`` (optional) names the leaves by majority reference label; ``noise_label`` rows
        are dropped before the graph is built.
        """
        X, y, keep, feature_names = self._prepare(X, y, feature_names)
        Xk = X if keep.all() else X[keep]
        with limit_threads(self.n_jobs):
            if graph is None:
                k = int(self.n_neighbors)
                if k >= Xk.shape[0]:
                    warnings.warn(f"n_neighbors={k} is not smaller than the {Xk.shape[0]} points; using "
                                  f"{Xk.shape[0] - 1}.", UserWarning, stacklevel=2)
                    k = Xk.shape[0] - 1
                check_magnitude_outliers(Xk, "SpExKNN", "the distances of its k-nearest-neighbour graph lose "
                                         "every other point's spread next to such a point")
                lo, hi = Xk.min(axis=0), Xk.max(axis=0)
                centred = Xk - (lo / 2 + hi / 2)
                centred /= power_of_two_scale(centred)
                graph = knn_graph(centred, k, method=self.knn_method, random_state=self.random_state,
                                  n_jobs=self.n_jobs)
            elif not keep.all():
                graph = check_graph(graph, X.shape[0])[keep][:, keep]
            A = check_graph(graph, Xk.shape[0])
            self.graph_ = A
            _fit_graph(self, Xk, A, y, feature_names)
        return self._set_labels(X)
