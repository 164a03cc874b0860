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

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted
from tqdm.auto import tqdm

from pipeline.trees._column_order import ColumnOrder, feature_priority
from pipeline.trees._fitting import (
    check_data, check_feature_names, check_n_leaves, encode_reference, majority_labels, unsplittable_error,
)
from pipeline.trees._spex_sweeps import GraphData, clique_best_cut, clique_split_cuts, graph_best_cut
from pipeline.trees.graphs import check_graph, knn_graph
from pipeline.trees.tree import ExplanationTree

logger = logging.getLogger(__name__)


def grow_spex_tree(X: np.ndarray, n_leaves: int, best_cut, feature_names=None, verbose: bool = False,
                   split_cuts=None):
    """Algorithm 1 with a pluggable ``best_cut(ColumnOrder) -> (feature, position, score, psi)``.

    ``split_cuts(order, feature, position) -> ((left order, left cut), (right order, right cut))``
    optionally fuses splitting a node with evaluating its children (default: ``order.split``
    then ``best_cut`` per child). Returns the grown :class:`ExplanationTree` (leaf labels
    unset). Leaves created by the last split are never evaluated (their best cut is not needed).
    """
    n, d = X.shape
    tree = ExplanationTree(d, feature_names)
    heap: list = []
    counter = 0

    if split_cuts is None:
        def split_cuts(order, j, p):
            return tuple((child, best_cut(child)) for child in order.split(j, p, n))

    def push(node_id: int, order: ColumnOrder, cut=None) -> None:
        nonlocal counter
        j, p, score, psi = best_cut(order) if cut is None else cut
        leaf_score = psi - score if j >= 0 else -np.inf
        heapq.heappush(heap, (-leaf_score, counter, node_id, order, j, p))
        counter += 1

    n_cur = 1
    if n_leaves > 1:
        push(0, ColumnOrder.from_matrix(X))
    with tqdm(total=n_leaves - 1, desc="SpEx splits", disable=not verbose) as bar:
        while n_cur < n_leaves:
            neg_score, _, node_id, order, j, p = heapq.heappop(heap)
            if j < 0:
                raise unsplittable_error(n_leaves, n_cur, X)
            threshold = X[order.order[j, p], j]
            left, right = tree.split(node_id, j, threshold)
            n_cur += 1
            logger.debug("split node %d on x[%d] <= %.6g (leaf score %.6g)", node_id, j, threshold, -neg_score)
            if n_cur < n_leaves:
                (lo, lcut), (ro, rcut) = split_cuts(order, j, p)
                del order
                push(left, lo, lcut)
                push(right, ro, rcut)
            bar.update(1)
    return tree


class _SpExBase(BaseEstimator):
    def _finish(self, X, tree, codes=None, classes=None):
        if codes is not None:
            labels = majority_labels(tree.apply(X), codes, classes, tree.n_nodes)
            for leaf in tree.leaves:
                tree.set_label(leaf, int(labels[leaf]))
        else:
            for i, leaf in enumerate(tree.leaves):
                tree.set_label(leaf, i)
        self.tree_ = tree
        self.n_features_in_ = X.shape[1]
        self.n_leaves_ = tree.n_leaves
        return self

    def predict(self, X) -> np.ndarray:
        """Label of the leaf each row falls in, shape (n_samples,), int64.

        The majority reference label of the leaf's training points when fitted with a
        reference clustering, otherwise the leaf index 0..n_leaves-1 (left-to-right).
        """
        check_is_fitted(self, "tree_")
        return self.tree_.predict(X)


class SpExClique(_SpExBase):
    """SpEx with the clique graph of a reference clustering.

    Parameters
    ----------
    n_leaves : int, optional
        Number of leaves (default: number of reference clusters). Any value >= 1.
    random_state : int, RandomState or None
        Seeds the feature order used to break exact ties between features.
    verbose : bool
        Show a progress bar.

    Attributes
    ----------
    tree_ : ExplanationTree
    classes_ : ndarray of shape (k,) — the reference labels (noise excluded).
    n_leaves_ : int
    """

    def __init__(self, n_leaves=None, random_state=None, verbose=False):
        self.n_leaves = n_leaves
        self.random_state = random_state
        self.verbose = verbose

    def fit(self, X, y, feature_names=None):
        """Fit to X (n_samples, n_features) and reference labels y (n_samples,); -1 = noise."""
        X = check_data(X)
        feature_names = check_feature_names(feature_names, X.shape[1])
        keep, codes, classes = encode_reference(y, X.shape[0])
        X = X if keep.all() else X[keep]
        n_leaves = check_n_leaves(self.n_leaves, classes.size, X.shape[0])
        counts = np.bincount(codes, minlength=classes.size)
        priority = feature_priority(X.shape[1], self.random_state)
        tree = grow_spex_tree(
            X, n_leaves, lambda o: clique_best_cut(o, codes, counts, priority), feature_names, self.verbose,
            split_cuts=lambda o, j, p: clique_split_cuts(o, j, p, codes, counts, priority),
        )
        self.classes_ = classes
        return self._finish(X, tree, codes, classes)


def _fit_graph(est, X, A, y, feature_names):
    """Shared body of SpExGraph/SpExKNN fitting once the graph is known."""
    codes = classes = None
    if y is not None:
        keep, codes, classes = encode_reference(y, X.shape[0])
        X, A = X[keep], A[keep][:, keep]
        est.classes_ = classes
    n_leaves = check_n_leaves(est.n_leaves, None if classes is None else classes.size, X.shape[0])
    graph = GraphData(A)
    priority = feature_priority(X.shape[1], est.random_state)
    tree = grow_spex_tree(X, n_leaves, lambda o: graph_best_cut(o, graph, priority), feature_names, est.verbose)
    return est._finish(X, tree, codes, classes)


class SpExGraph(_SpExBase):
    """SpEx on a user-supplied graph over the points (Algorithm 1).

    Parameters
    ----------
    n_leaves : int, optional
        Number of leaves; required unless ``y`` is passed to ``fit`` (then: number of clusters).
    random_state : int, RandomState or None
        Seeds the feature order used to break exact ties between features.
    verbose : bool
        Show a progress bar.
    """

    def __init__(self, n_leaves=None, random_state=None, verbose=False):
        self.n_leaves = n_leaves
        self.random_state = random_state
        self.verbose = verbose

    def fit(self, X, graph, feature_names=None, y=None):
        """Fit to X (n_samples, n_features) and a graph (n_samples, n_samples).

        ``graph`` is a scipy.sparse (or dense) symmetric matrix of finite non-negative
        weights; self-loops count in degrees but are never cut. Optional reference labels
        ``y`` only name the leaves (majority label) and drop noise rows (-1) from fitting.
        """
        X = check_data(X)
        feature_names = check_feature_names(feature_names, X.shape[1])
        A = check_graph(graph, X.shape[0])
        return _fit_graph(self, X, A, y, feature_names)


class SpExKNN(_SpExBase):
    """Reference-free SpEx on the symmetrised k-nearest-neighbour graph.

    Parameters
    ----------
    n_leaves : int, optional
        Number of leaves; required unless ``y`` is passed to ``fit``.
    n_neighbors : int, default=20
        Neighbours per point in the kNN graph (mutual neighbours get edge weight 2).
    knn_method : {"auto", "exact", "nndescent"}, default="auto"
        Graph construction (see :func:`pipeline.trees.graphs.knn_graph`): exact up to 20,000
        points, pynndescent (approximate, seeded by ``random_state``) above.
    random_state : int, RandomState or None
        Seeds the feature order used to break exact ties between features.
    verbose : bool
        Show a progress bar.

    Attributes
    ----------
    graph_ : scipy.sparse.csr_matrix — the kNN graph the tree was fitted on.
    """

    def __init__(self, n_leaves=None, n_neighbors=20, knn_method="auto", random_state=None, verbose=False):
        self.n_leaves = n_leaves
        self.n_neighbors = n_neighbors
        self.knn_method = knn_method
        self.random_state = random_state
        self.verbose = verbose

    def fit(self, X, y=None, feature_names=None, graph=None):
        """Fit to X (n_samples, n_features); the kNN graph is built unless ``graph`` is given.

        ``y`` (optional) names the leaves by majority reference label; noise rows (-1) are
        dropped before the graph is built.
        """
        X = check_data(X)
        feature_names = check_feature_names(feature_names, X.shape[1])
        if graph is None:
            if y is not None:
                keep, _, _ = encode_reference(y, X.shape[0])
                X, y = X[keep], np.asarray(y)[keep]
            graph = knn_graph(X, self.n_neighbors, method=self.knn_method, random_state=self.random_state)
        A = check_graph(graph, X.shape[0])
        self.graph_ = A
        return _fit_graph(self, X, A, y, feature_names)
