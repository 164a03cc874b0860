"""Fixed-structure trees optimised by TAO (the tree step of the TAO clustering method).

A complete binary tree of depth ``depth`` in heap order: internal node ``i`` has children
``2i+1`` (left, ``W[i] . x <= t[i]``) and ``2i+2``; heap ids ``>= n_internal`` are leaves
(leaf ``j`` = heap id ``n_internal + j``). Constant nodes (``W[i] = 0``) route everything to
one child, which is how an arbitrary smaller tree is embedded and how dead branches are
represented. :func:`tao_fit` runs TAO iterations (reverse breadth-first sweeps) on the
objective ``#{n : T(x_n) != z_n} + penalty * phi(T)``; :meth:`HeapTree.to_explanation_tree`
prunes branches that receive no training points and merges same-label siblings.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
from sklearn.tree import DecisionTreeClassifier

from pipeline.trees._tao_node import ALL_LEFT, care_problem, regularizer, solve_axis_node, solve_oblique_node
from pipeline.trees.tree import ExplanationTree
from pipeline.validation import InvalidInputError

logger = logging.getLogger(__name__)


@dataclass
class HeapTree:
    """Complete binary tree with dense node weights.

    Attributes
    ----------
    W : ndarray of shape (2**depth - 1, n_features)
        Node weights (one-hot rows for axis-aligned nodes, zero rows for constant nodes).
    t : ndarray of shape (2**depth - 1,)
        Node thresholds.
    labels : ndarray of int64, shape (2**depth,)
        Leaf labels, left to right.
    oblique : bool
        Whether decision nodes are oblique (phi = l1 norm) or axis-aligned (phi = #splits).
    """

    W: np.ndarray
    t: np.ndarray
    labels: np.ndarray
    oblique: bool

    @property
    def n_internal(self) -> int:
        return self.W.shape[0]

    @property
    def depth(self) -> int:
        return int(np.log2(self.n_internal + 1))

    def copy(self) -> "HeapTree":
        return HeapTree(self.W.copy(), self.t.copy(), self.labels.copy(), self.oblique)

    def same_as(self, other: "HeapTree") -> bool:
        return (np.array_equal(self.W, other.W) and np.array_equal(self.t, other.t)
                and np.array_equal(self.labels, other.labels))

    # ----------------------------------------------------------------- routing
    def values(self, X: np.ndarray) -> np.ndarray:
        """Node activations ``X @ W.T``, shape (n_samples, n_internal)."""
        return X @ self.W.T

    def route(self, V: np.ndarray, start: int, rows: np.ndarray) -> np.ndarray:
        """Leaf label of each sample ``rows`` when it enters the tree at heap node ``start``."""
        cur = np.full(rows.size, start, dtype=np.int64)
        inner = cur < self.n_internal
        while inner.any():
            idx = np.flatnonzero(inner)
            c = cur[idx]
            cur[idx] = 2 * c + 1 + (V[rows[idx], c] > self.t[c])
            inner = cur < self.n_internal
        return self.labels[cur - self.n_internal]

    def paths(self, V: np.ndarray) -> np.ndarray:
        """Heap node reached at each depth, shape (n_samples, depth + 1)."""
        n = V.shape[0]
        out = np.zeros((n, self.depth + 1), dtype=np.int64)
        rows = np.arange(n)
        for d in range(self.depth):
            c = out[:, d]
            out[:, d + 1] = 2 * c + 1 + (V[rows, c] > self.t[c])
        return out

    def predict(self, X: np.ndarray) -> np.ndarray:
        return self.labels[self.paths(self.values(X))[:, -1] - self.n_internal]

    def phi(self) -> float:
        """Regularizer of the whole tree: sum of the nodes' phi."""
        return float(sum(regularizer(w, self.oblique) for w in self.W))

    # ---------------------------------------------------------- construction
    @classmethod
    def random(cls, depth: int, X: np.ndarray, z: np.ndarray, oblique: bool, rng: np.random.Generator) -> "HeapTree":
        """Random axis-aligned cuts at the median of the points reaching each node; majority leaves."""
        n_int = 2 ** depth - 1
        tree = cls(np.zeros((n_int, X.shape[1])), np.full(n_int, ALL_LEFT), np.zeros(2 ** depth, np.int64), oblique)
        reach = np.zeros(X.shape[0], dtype=np.int64)
        for i in range(n_int):
            rows = np.flatnonzero(reach == i)
            if rows.size:
                f = int(rng.integers(X.shape[1]))
                tree.W[i, f] = 1.0
                tree.t[i] = float(np.median(X[rows, f]))
            reach[rows] = 2 * i + 1 + (X[rows] @ tree.W[i] > tree.t[i])
        _set_leaf_labels(tree, z, tree.paths(tree.values(X))[:, -1])
        return tree

    @classmethod
    def from_cart(cls, depth: int, X: np.ndarray, z: np.ndarray, oblique: bool, random_state) -> "HeapTree":
        """CART (scikit-learn, ``max_depth=depth``) fitted to ``z``, embedded in the complete tree."""
        st = DecisionTreeClassifier(max_depth=depth, random_state=random_state).fit(X, z).tree_
        classes = np.unique(z)
        et = ExplanationTree(X.shape[1])

        def grow(node: int, sk: int) -> None:
            if st.children_left[sk] == -1:
                et.set_label(node, int(classes[np.argmax(st.value[sk])]))
                return
            left, right = et.split(node, int(st.feature[sk]), float(st.threshold[sk]))
            grow(left, int(st.children_left[sk]))
            grow(right, int(st.children_right[sk]))

        grow(0, 0)
        return cls.from_explanation_tree(et, depth, oblique)

    @classmethod
    def from_explanation_tree(cls, et: ExplanationTree, depth: int, oblique: bool) -> "HeapTree":
        """Embed ``et`` (depth <= ``depth``) in a complete tree; its shallow leaves become
        chains of constant (all-left) nodes over leaves with the same label."""
        if et.depth > depth:
            raise InvalidInputError(f"init tree has depth {et.depth} but depth={depth}; "
                                    f"pass depth >= {et.depth} or a shallower init tree.")
        n_int = 2 ** depth - 1
        tree = cls(np.zeros((n_int, et.n_features)), np.full(n_int, ALL_LEFT), np.zeros(2 ** depth, np.int64), oblique)

        def fill(heap: int, node: int, label: int | None) -> None:
            if heap >= n_int:
                tree.labels[heap - n_int] = label if label is not None else et.label[node]
                return
            if label is None and et.is_leaf(node):
                label = int(et.label[node])
            if label is not None:
                fill(2 * heap + 1, node, label)
                fill(2 * heap + 2, node, label)
                return
            if et.is_oblique(node):
                if not oblique:
                    raise InvalidInputError("init tree has oblique nodes; pass oblique=True or an axis-aligned tree.")
                for j, v in et.weights(node).items():
                    tree.W[heap, j] = v
            else:
                tree.W[heap, et.feature[node]] = 1.0
            tree.t[heap] = et.threshold[node]
            fill(2 * heap + 1, int(et.children_left[node]), None)
            fill(2 * heap + 2, int(et.children_right[node]), None)

        fill(0, 0, None)
        return tree

    # ---------------------------------------------------------------- export
    def to_explanation_tree(self, X: np.ndarray, feature_names=None) -> ExplanationTree:
        """The tree as an :class:`ExplanationTree`, pruned on the training points ``X``.

        Decision nodes one of whose children receives no training point (including constant
        nodes) are replaced by the other child; siblings that are leaves with the same label
        are merged. Oblique weights are rescaled so the largest |weight| is 1 (the test is
        invariant to positive scaling). Predictions on ``X`` are unchanged (up to rounding of
        points lying exactly on a hyperplane).
        """
        counts = np.bincount(self.paths(self.values(X)).ravel(), minlength=2 * self.n_internal + 1)

        def build(i: int):
            while i < self.n_internal:
                left, right = 2 * i + 1, 2 * i + 2
                if not np.any(self.W[i]):
                    i = left if self.t[i] >= 0 else right
                elif counts[left] == 0 or counts[right] == 0:
                    i = right if counts[left] == 0 else left
                else:
                    break
            if i >= self.n_internal:
                return int(self.labels[i - self.n_internal])
            lt, rt = build(2 * i + 1), build(2 * i + 2)
            if isinstance(lt, int) and lt == rt:
                return lt
            return (i, lt, rt)

        def emit(et: ExplanationTree, node: int, sub) -> None:
            if isinstance(sub, int):
                et.set_label(node, sub)
                return
            i, lt, rt = sub
            nz = np.flatnonzero(self.W[i])
            scale = np.abs(self.W[i, nz]).max()  # readable rules: largest |weight| is 1
            weights = {int(j): float(self.W[i, j] / scale) for j in nz}
            left, right = et.split_oblique(node, weights, float(self.t[i] / scale))
            emit(et, left, lt)
            emit(et, right, rt)

        et = ExplanationTree(X.shape[1], feature_names)
        emit(et, 0, build(0))
        return et


def _set_leaf_labels(tree: HeapTree, z: np.ndarray, leaf_heap: np.ndarray) -> bool:
    """Majority target label at each reached leaf (keeps the current label on ties)."""
    changed = False
    leaf = leaf_heap - tree.n_internal
    n_labels = int(max(z.max(), tree.labels.max())) + 1
    counts = np.zeros((tree.labels.size, n_labels), dtype=np.int64)
    np.add.at(counts, (leaf, z), 1)
    for j in np.flatnonzero(counts.sum(axis=1)):
        if counts[j, tree.labels[j]] < counts[j].max():
            tree.labels[j] = int(np.argmax(counts[j]))
            changed = True
    return changed


def tree_objective(tree: HeapTree, X: np.ndarray, z: np.ndarray, penalty: float) -> float:
    """``#{n : T(x_n) != z_n} + penalty * phi(T)`` — the tree-step objective (7)."""
    return float(np.sum(tree.predict(X) != z)) + penalty * tree.phi()


def tao_iteration(tree: HeapTree, X: np.ndarray, z: np.ndarray, penalty: float, *,
                  max_C: float = 1e3, random_state: int | None = None, memo: dict | None = None) -> bool:
    """One TAO sweep in place: leaves, then decision nodes depth by depth up to the root.

    Returns True if any parameter changed. Nodes of one depth have disjoint reduced sets
    and are solved independently; node activations are refreshed after each depth.
    ``memo`` (node -> key of its last reduced problem) skips re-solving a node whose
    reduced problem and parameters are unchanged since it was last solved (the solvers
    are deterministic, so the answer would be the same).
    """
    memo = {} if memo is None else memo
    V = tree.values(X)
    path = tree.paths(V)
    changed = _set_leaf_labels(tree, z, path[:, -1])
    for d in range(tree.depth - 1, -1, -1):
        for i in range(2 ** d - 1, 2 ** (d + 1) - 1):
            rows = np.flatnonzero(path[:, d] == i)
            if rows.size == 0:
                if np.any(tree.W[i]):  # unreached: parameters are free, phi is not
                    tree.W[i], tree.t[i] = 0.0, ALL_LEFT
                    changed = True
                continue
            care, y = care_problem(tree.route(V, 2 * i + 1, rows), tree.route(V, 2 * i + 2, rows), z[rows])
            key = (penalty, rows[care].tobytes(), y.tobytes(), tree.W[i].tobytes(), float(tree.t[i]))
            if memo.get(i) == key:
                continue
            memo[i] = key
            Xc, weight, w_cur = X[rows[care]], np.ones(int(care.sum())), tree.W[i]
            if tree.oblique:
                sol = solve_oblique_node(Xc, y, weight, penalty, w_cur, tree.t[i],
                                         max_C=max_C, random_state=random_state)
            else:
                sol = solve_axis_node(Xc, y, weight, penalty, w_cur, tree.t[i])
            if sol.w is not w_cur:
                tree.W[i], tree.t[i] = sol.w, sol.t
                V[:, i] = X @ sol.w
                changed = True
    return changed


def tao_fit(tree: HeapTree, X: np.ndarray, z: np.ndarray, penalty: float, *, max_iter: int = 20,
            max_C: float = 1e3, random_state: int | None = None) -> list[float]:
    """TAO iterations in place until nothing changes or ``max_iter``.

    Returns the objective :func:`tree_objective` before the first and after every iteration
    (non-increasing by construction).
    """
    trace = [tree_objective(tree, X, z, penalty)]
    memo: dict = {}
    for it in range(max_iter):
        changed = tao_iteration(tree, X, z, penalty, max_C=max_C, random_state=random_state, memo=memo)
        trace.append(tree_objective(tree, X, z, penalty))
        logger.debug("TAO iteration %d: objective %.6g", it + 1, trace[-1])
        if not changed:
            break
    return trace
