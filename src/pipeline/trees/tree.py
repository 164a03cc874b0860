"""The one explanation-tree type shared by every tree algorithm.

A binary tree over feature (or concept) coordinates. Each internal node holds either an
axis-aligned test ``x[feature] <= threshold`` or an oblique test
``sum_j w_j * x[j] <= threshold`` over a sparse weight vector; samples for which the test
is true go left. Each leaf carries a cluster id (``label``; -1 = no cluster).

Algorithms grow a tree with :meth:`ExplanationTree.split` / :meth:`split_oblique` and set
leaf labels with :meth:`set_label`; everything downstream (reports, plots, notebooks) uses
``predict``, ``apply``, ``rules``, ``to_json`` and the read-only properties.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from pipeline.trees import _tree_format
from pipeline.trees.rules import Condition, LeafStats, Rule, leaf_stats, oblique_terms, weighted_sum
from pipeline.validation import InvalidInputError, check_matrix, check_n_features

__all__ = ["ExplanationTree", "Condition", "Rule", "LeafStats", "Reading"]

LEAF = -1
OBLIQUE = -2
FORMAT_VERSION = 1
#: Deepest tree whose rules() / to_text() are printed (paths grow as depth squared).
MAX_PRINT_DEPTH = 1000


@dataclass(frozen=True)
class Reading:
    """How a tree reads on given rows, computed once (:meth:`ExplanationTree.read`) and passed to
    :meth:`~ExplanationTree.rules`, :meth:`~ExplanationTree.to_dot`, :meth:`~ExplanationTree.to_text`
    and the figures instead of the rows: each of those would otherwise route every row again.

    Attributes
    ----------
    display : pipeline.trees.display.RuleDisplay
        The printed tests (exact on the rows, in their units).
    stats : dict of int to LeafStats
        Per leaf id: size, purity and majority class on the rows (empty without rows).
    """

    display: Any
    stats: dict


class ExplanationTree:
    """Binary decision tree with axis-aligned or sparse oblique nodes and labelled leaves.

    Parameters
    ----------
    n_features : int
        Width of the data the tree is applied to.
    feature_names : sequence of str, optional
        Names used in rules and plots (concept names for concept trees).
    root_label : int, default=-1
        Label of the single leaf a new tree starts with.

    Attributes
    ----------
    label_names : list of str or None
        Names of the leaf labels (``label_names[k]`` for label ``k``), set by estimators fitted
        to string labels; rules then read "→ zebra" instead of "→ cluster 0".
    """

    def __init__(self, n_features: int, feature_names: Sequence[str] | None = None, root_label: int = -1):
        if int(n_features) < 1:
            raise InvalidInputError(f"n_features must be >= 1, got {n_features}.")
        self.n_features = int(n_features)
        if feature_names is not None:
            feature_names = [str(n) for n in feature_names]
            if len(feature_names) != self.n_features:
                raise InvalidInputError(
                    f"feature_names has {len(feature_names)} names but n_features is {self.n_features}."
                )
        self.feature_names = feature_names
        self._feature: list[int] = [LEAF]
        self._threshold: list[float] = [np.nan]
        self._left: list[int] = [-1]
        self._right: list[int] = [-1]
        self._label: list[int] = [int(root_label)]
        self._weights: dict[int, dict[int, float]] = {}
        self._near: dict[int, tuple] = {}  # node -> training values nearest its cut (record_neighbours)
        self._arrays = None
        self.label_names: list[str] | None = None

    def leaf_name(self, label: int) -> str:
        """How a leaf label reads: its name from ``label_names``, else ``cluster <label>``."""
        names = self.label_names
        if names is not None and 0 <= int(label) < len(names):
            return str(names[int(label)])
        return f"cluster {int(label)}"

    # ------------------------------------------------------------------ growing
    def _new_leaf(self, label: int) -> int:
        self._feature.append(LEAF)
        self._threshold.append(np.nan)
        self._left.append(-1)
        self._right.append(-1)
        self._label.append(int(label))
        return len(self._feature) - 1

    def record_neighbours(self, *Xs) -> "ExplanationTree":
        """Keep, for every cut, the training values nearest it on either side (over all rows of
        the arrays ``Xs``, dense or sparse, n_features wide), so that :meth:`rules`,
        :meth:`to_text`, :meth:`to_dot` and the JSON print thresholds that route every one of
        those rows as the tree does without being given the data again. The estimators call
        this at the end of ``fit`` with their training data. Oblique cuts also keep the fewest
        significant digits of their weights that still route those rows exactly
        (:func:`pipeline.trees.display.cut_neighbours`). Replaces what was kept before.
        Returns the tree.
        """
        from pipeline.trees.display import cut_neighbours

        near: dict[int, tuple] = {}
        for X in Xs:
            if X is None or X.shape[0] == 0:
                continue
            if X.ndim != 2 or X.shape[1] != self.n_features:
                raise InvalidInputError(f"record_neighbours needs arrays with {self.n_features} columns, "
                                        f"got shape {X.shape}.")
            for n, v in cut_neighbours(self, X).items():
                if n not in near:
                    near[n] = v
                elif len(v) == 2:
                    lo = [x for x in (near[n][0], v[0]) if x is not None]
                    hi = [x for x in (near[n][1], v[1]) if x is not None]
                    near[n] = (max(lo) if lo else None, min(hi) if hi else None)
                else:  # an oblique cut seen in two arrays: the digits that separate both
                    both = np.vstack([x.toarray() if hasattr(x, "toarray") else np.asarray(x, float)
                                      for x in Xs if x is not None and x.shape[0]])
                    near[n] = cut_neighbours(self, both)[n]
        self._near = near
        return self

    def neighbours(self) -> dict[int, tuple]:
        """What :meth:`record_neighbours` kept: node -> ``(lo, hi)`` (axis) or ``(lo, hi, digits)``
        (oblique); ``lo``/``hi`` is None for a side no training row reached. Empty when nothing
        was recorded (a tree built by hand, grown from a mixture's parameters alone, or read from
        JSON written before the neighbours were kept)."""
        return dict(self._near)

    def _check_leaf(self, node: int) -> None:
        if not 0 <= node < self.n_nodes:
            raise InvalidInputError(f"node {node} does not exist (tree has {self.n_nodes} nodes).")
        if self._feature[node] != LEAF:
            raise InvalidInputError(f"node {node} is already split; only leaves can be split.")

    def split(self, node: int, feature: int, threshold: float, left_label: int = -1, right_label: int = -1):
        """Turn leaf ``node`` into the test ``x[feature] <= threshold``; return (left, right) ids."""
        self._check_leaf(node)
        if not 0 <= int(feature) < self.n_features:
            raise InvalidInputError(f"feature {feature} out of range [0, {self.n_features}).")
        if not np.isfinite(threshold):
            raise InvalidInputError(f"threshold must be finite, got {threshold}.")
        left, right = self._new_leaf(left_label), self._new_leaf(right_label)
        self._feature[node], self._threshold[node] = int(feature), float(threshold)
        self._left[node], self._right[node] = left, right
        self._label[node] = -1
        self._near.pop(node, None)
        self._arrays = None
        return left, right

    def split_oblique(self, node: int, weights, threshold: float, left_label: int = -1, right_label: int = -1):
        """Turn leaf ``node`` into ``weights · x <= threshold``; ``weights`` is a dense vector of
        length n_features or a {feature: weight} dict. Zero weights are dropped."""
        self._check_leaf(node)
        if isinstance(weights, dict):
            w = {int(j): float(v) for j, v in weights.items() if v != 0}
        else:
            dense = np.asarray(weights, dtype=float)
            if dense.shape != (self.n_features,):
                raise InvalidInputError(f"oblique weights must have shape ({self.n_features},), got {dense.shape}.")
            w = {int(j): float(dense[j]) for j in np.flatnonzero(dense)}
        if not w:
            raise InvalidInputError("an oblique node needs at least one non-zero weight.")
        if any(not 0 <= j < self.n_features for j in w) or not all(np.isfinite(list(w.values()))):
            raise InvalidInputError("oblique weights must be finite and index existing features.")
        if not np.isfinite(threshold):
            raise InvalidInputError(f"threshold must be finite, got {threshold}.")
        if len(w) == 1 and next(iter(w.values())) > 0:
            # A single positive weight is an axis-aligned test; store it as one.
            (j, v), = w.items()
            return self.split(node, j, float(threshold) / v, left_label, right_label)
        left, right = self._new_leaf(left_label), self._new_leaf(right_label)
        self._feature[node], self._threshold[node] = OBLIQUE, float(threshold)
        self._weights[node] = w
        self._near.pop(node, None)
        self._left[node], self._right[node] = left, right
        self._label[node] = -1
        self._arrays = None
        return left, right

    def set_label(self, node: int, label: int) -> None:
        """Set the cluster id of leaf ``node``."""
        if self._feature[node] != LEAF:
            raise InvalidInputError(f"node {node} is not a leaf; only leaves carry labels.")
        self._label[node] = int(label)
        self._arrays = None

    # --------------------------------------------------------------- structure
    @property
    def n_nodes(self) -> int:
        return len(self._feature)

    def is_leaf(self, node: int) -> bool:
        return self._feature[node] == LEAF

    def is_oblique(self, node: int) -> bool:
        return self._feature[node] == OBLIQUE

    @property
    def feature(self) -> np.ndarray:
        """Per-node feature index; -1 for leaves, -2 for oblique nodes. Shape (n_nodes,)."""
        return self._as_arrays()[0]

    @property
    def threshold(self) -> np.ndarray:
        return self._as_arrays()[1]

    @property
    def children_left(self) -> np.ndarray:
        return self._as_arrays()[2]

    @property
    def children_right(self) -> np.ndarray:
        return self._as_arrays()[3]

    @property
    def label(self) -> np.ndarray:
        """Per-node label; meaningful for leaves, -1 for internal nodes."""
        return self._as_arrays()[4]

    def weights(self, node: int) -> dict[int, float]:
        """Sparse weights of an oblique node ({feature: weight})."""
        return dict(self._weights[node])

    @property
    def leaves(self) -> np.ndarray:
        """Ids of the leaf nodes in depth-first (left-to-right) order."""
        return np.array([n for n in self._dfs() if self._feature[n] == LEAF], dtype=np.int64)

    @property
    def n_leaves(self) -> int:
        return sum(1 for f in self._feature if f == LEAF)

    @property
    def depth(self) -> int:
        """Length of the longest root-to-leaf path (a single leaf has depth 0)."""
        return int(self.node_depths().max())

    def node_depths(self) -> np.ndarray:
        depths = np.zeros(self.n_nodes, dtype=np.int64)
        for n in self._dfs():
            if self._feature[n] != LEAF:
                depths[self._left[n]] = depths[self._right[n]] = depths[n] + 1
        return depths

    @property
    def features_used(self) -> list[int]:
        """Sorted indices of the features that appear in any test."""
        used = {f for f in self._feature if f >= 0}
        for w in self._weights.values():
            used.update(w)
        return sorted(used)

    @property
    def n_parameters(self) -> int:
        """Number of thresholds plus non-zero weights (axis-aligned nodes count 2)."""
        total = 0
        for n, f in enumerate(self._feature):
            if f >= 0:
                total += 2
            elif f == OBLIQUE:
                total += len(self._weights[n]) + 1
        return total

    def _dfs(self):
        stack = [0]
        while stack:
            n = stack.pop()
            yield n
            if self._feature[n] != LEAF:
                stack.append(self._right[n])
                stack.append(self._left[n])

    def _as_arrays(self):
        if self._arrays is None:
            self._arrays = (
                np.asarray(self._feature, dtype=np.int64),
                np.asarray(self._threshold, dtype=np.float64),
                np.asarray(self._left, dtype=np.int64),
                np.asarray(self._right, dtype=np.int64),
                np.asarray(self._label, dtype=np.int64),
            )
        return self._arrays

    # -------------------------------------------------------------- prediction
    def apply(self, X) -> np.ndarray:
        """Leaf id for each row of X, shape (n_samples,). Vectorised over samples.

        Rows are partitioned node by node: each internal node gathers and compares only the
        rows that reach it, so the cost is O(n_samples * depth) numpy work plus O(n_nodes)
        Python steps.
        """
        return self._apply(check_matrix(X, "X", min_rows=0))

    def _apply(self, X: np.ndarray) -> np.ndarray:
        """:meth:`apply` for an ``X`` already checked to be a finite 2-D float array (the
        estimators' ``predict`` has run sklearn's ``validate_data``; no second NaN scan)."""
        check_n_features(X, self.n_features)
        out = np.zeros(X.shape[0], dtype=np.int64)
        # axis-aligned: one compiled pass over the rows, where a tree module already loaded the
        # kernels (a run that needs no numba, such as MMDT on raw features, never imports it)
        _kernels = sys.modules.get("pipeline.trees._kernels")
        if not self._weights and X.dtype == np.float64 and _kernels is not None:
            if _kernels.AVAILABLE:
                feature, threshold, left, right, _ = self._as_arrays()
                _kernels.apply_axis_tree(X, feature, threshold, left, right, out)
                return out
        stack = [(0, None)]  # (node, indices of the rows that reach it; None = all rows)
        while stack:
            n, rows = stack.pop()
            f = self._feature[n]
            if f == LEAF:
                out[slice(None) if rows is None else rows] = n
                continue
            if rows is not None and rows.size == 0:
                continue
            if f == OBLIQUE:
                cols, w = oblique_terms(self._weights[n])  # term by term, as the rules print it
                values = weighted_sum(X if rows is None else X[np.ix_(rows, cols)],
                                      cols if rows is None else np.arange(cols.size), w)
            else:
                values = X[:, f] if rows is None else X[rows, f]
            go_left = values <= self._threshold[n]
            if rows is None:
                left_rows, right_rows = np.flatnonzero(go_left), np.flatnonzero(~go_left)
            else:
                left_rows, right_rows = rows[go_left], rows[~go_left]
            stack.append((self._right[n], right_rows))
            stack.append((self._left[n], left_rows))
        return out

    def predict(self, X) -> np.ndarray:
        """Cluster id of the leaf each row of X falls in, shape (n_samples,), dtype int64."""
        return self._as_arrays()[4][self.apply(X)]

    def _predict(self, X: np.ndarray) -> np.ndarray:
        """:meth:`predict` for an already validated ``X`` (see :meth:`_apply`)."""
        return self._as_arrays()[4][self._apply(X)]

    # ------------------------------------------------------------------- rules
    def leaf_stats(self, X, reference=None, y=None, class_names=None) -> dict[int, LeafStats]:
        """Per leaf id: size, purity with respect to ``reference`` and majority class of ``y``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        reference : array-like of shape (n_samples,), optional
            Reference cluster ids; purity is the share of a leaf's points whose reference
            cluster is the leaf's label (noise, -1, counts as impure).
        y : array-like of shape (n_samples,), optional
            Ground-truth classes (ints or strings); negative ints are ignored as unknown.
        class_names : sequence of str, optional
            Names of integer classes in ``y``.
        """
        return self._leaf_stats(self.apply(X), reference, y, class_names)

    def _leaf_stats(self, rows: np.ndarray, reference=None, y=None, class_names=None) -> dict[int, LeafStats]:
        """:meth:`leaf_stats` from the rows' leaf ids."""
        for name, v in (("reference", reference), ("y", y)):
            if v is not None and len(v) != len(rows):
                raise InvalidInputError(f"{name} has {len(v)} entries but X has {len(rows)} rows; they must match.")
        leaves = self.leaves
        labels = [self._label[n] for n in leaves]
        if self.label_names is not None and reference is not None and np.asarray(reference).dtype.kind not in "iub":
            labels = [self.leaf_name(label) for label in labels]  # a reference given in the class names
        return leaf_stats(rows, leaves, labels, reference, y, class_names)

    def read(self, X=None, reference=None, y=None, class_names=None, units=None, check_input: bool = True,
             leaves=None) -> Reading:
        """The printed tests and leaf statistics on the rows ``X`` (see :meth:`rules` for the
        arguments), computed once: pass the :class:`Reading` as ``reading=`` to :meth:`rules`,
        :meth:`to_dot`, :meth:`to_text` (and the report's figures) to print the tree many ways.

        ``X`` is checked once (a finite 2-D float array of the tree's width);
        ``check_input=False`` (scikit-learn's name) skips the pass over its values, for a caller
        that has checked the same array already (the report reads several trees on the same rows).
        ``leaves``: ``self.apply(X)`` when the caller has it (the fit stage routed the same rows),
        so the rows are not routed again.
        """
        if X is None:
            return Reading(self.display(None, units), {})
        X = check_matrix(X, "X", min_rows=0, finite=check_input)
        check_n_features(X, self.n_features, "X")
        if leaves is None:
            leaves = self._apply(X)
        else:  # kept in its own small integer type: no int64 copy of 10M leaf ids
            leaves = np.asarray(leaves)
            if leaves.shape != (X.shape[0],) or leaves.dtype.kind not in "iu":
                raise InvalidInputError(f"leaves has shape {leaves.shape} and dtype {leaves.dtype}; it must hold one "
                                        f"integer leaf id per row of X ({X.shape[0]},), as apply(X) gives.")
        stats = self._leaf_stats(leaves, reference, y, class_names)
        from pipeline.trees.display import RuleDisplay

        return Reading(RuleDisplay(self, X, units), stats)

    def rules(self, X=None, reference=None, y=None, class_names=None, units=None,
              reading: Reading | None = None) -> list[Rule]:
        """One rule per leaf (depth-first order), in feature names.

        ``str(rule)`` shows the simplified rule (one interval per feature, in the order the
        features first appear on the path); ``rule.conditions`` keeps the raw path. Every
        threshold prints as the shortest decimal that routes every training row as the tree
        does (the estimators keep the training values around each cut at fit time:
        :meth:`record_neighbours`), and oblique tests list every term. With ``X`` (and
        optionally ``reference``, ``y``, ``class_names``, see :meth:`leaf_stats`) each rule also
        carries its leaf's size, purity and majority class, and the thresholds route every
        row of ``X`` exactly too; ``units`` (one monotone map or None per feature;
        :class:`pipeline.trees.display.RuleDisplay`) sets the units thresholds read in. The
        raw thresholds stay in ``rule.conditions`` and ``to_dict``. ``reading`` (:meth:`read`)
        replaces ``X``, ``reference``, ``y``, ``class_names`` and ``units``.
        """
        self._check_printable("rules")
        reading = reading or self.read(X, reference, y, class_names, units)
        stats, display = reading.stats, reading.display
        out: list[Rule] = []
        stack: list[tuple[int, list[Condition]]] = [(0, [])]  # iterative: no recursion limit
        while stack:
            n, conds = stack.pop()
            if self._feature[n] == LEAF:
                out.append(Rule(leaf=n, label=self._label[n], conditions=conds, stats=stats.get(n),
                                name=self.leaf_name(self._label[n])))
                continue
            stack.append((self._right[n], conds + [self.condition(n, ">", display)]))
            stack.append((self._left[n], conds + [self.condition(n, "<=", display)]))
        return out

    def _check_printable(self, what: str) -> None:
        """Raise when the tree is too deep for per-leaf paths (their size grows as depth squared)."""
        depth = self.depth
        if depth > MAX_PRINT_DEPTH:
            raise InvalidInputError(
                f"the tree is {depth} levels deep; {what}() prints root-to-leaf paths only up to depth "
                f"{MAX_PRINT_DEPTH} (their text grows as depth squared). predict(), apply(), to_json() and "
                "to_dot() work at any depth; a tree this deep explains nothing a reader could follow."
            )

    def condition(self, node: int, op: str = "<=", display=None) -> Condition:
        """The test of internal ``node`` as a Condition (``<=`` goes left), in the tree's feature names
        (printed through ``display``, a :meth:`display`, when given)."""
        if self._feature[node] == LEAF:
            raise InvalidInputError(f"node {node} is a leaf; only internal nodes hold a test.")
        oblique = self._feature[node] == OBLIQUE
        return Condition(op=op, threshold=self._threshold[node], names=self.feature_names,
                         feature=None if oblique else self._feature[node],
                         weights=dict(self._weights[node]) if oblique else None, node=node, display=display)

    def display(self, X=None, units=None):
        """How the tests read: exact shortest decimals for the kept training values (and the rows
        of ``X``, when given), in display ``units`` (:class:`pipeline.trees.display.RuleDisplay`)."""
        from pipeline.trees.display import RuleDisplay

        if X is not None:
            X = check_matrix(X, "X", min_rows=0)
            check_n_features(X, self.n_features, "X")
        return RuleDisplay(self, X, units)

    def to_dot(self, X=None, reference=None, y=None, class_names=None, title: str | None = None,
               units=None, reading: Reading | None = None) -> str:
        """Graphviz DOT source of the tree (render with ``dot -Tsvg``; nothing here needs Graphviz).

        Internal nodes show their exact test (oblique ones every term), edges "yes"/"no",
        leaves their cluster and, given data (see :meth:`leaf_stats`), size, purity and
        majority class. ``reading`` (:meth:`read`) replaces the rows and their annotations.
        """
        reading = reading or self.read(X, reference, y, class_names, units)
        stats, display = reading.stats, reading.display
        nodes, edges = [], []
        for n in self._dfs():
            if self._feature[n] == LEAF:
                parts = [self.leaf_name(self._label[n])] + (stats[n].parts() if n in stats else [])
                nodes.append((n, "\n".join(parts), True))
            else:
                nodes.append((n, self.condition(n, "<=", display).format(), False))
                edges += [(n, self._left[n], "yes"), (n, self._right[n], "no")]
        return _tree_format.to_dot(nodes, edges, title)

    def to_text(self, X=None, units=None, reading: Reading | None = None) -> str:
        """Indented drawing of the tree, one line per node, with exact thresholds (as in
        :meth:`rules`: exact on the training rows and on ``X`` when given, in display ``units``;
        or as ``reading`` (:meth:`read`) prints them)."""
        self._check_printable("to_text")
        display = reading.display if reading is not None else self.display(X, units)
        lines: list[str] = []
        stack: list[tuple] = [(0, "")]  # a node to draw, or a ready line (str) for an "else"
        while stack:
            item = stack.pop()
            if isinstance(item, str):
                lines.append(item)
                continue
            n, indent = item
            if self._feature[n] == LEAF:
                lines.append(f"{indent}leaf {n}: {self.leaf_name(self._label[n])}")
                continue
            lines.append(f"{indent}if {self.condition(n, '<=', display).format()}:")
            stack.append((self._right[n], indent + "    "))
            stack.append(f"{indent}else:  # {self.condition(n, '>', display).format()}")
            stack.append((self._left[n], indent + "    "))
        return "\n".join(lines)

    def __repr__(self) -> str:
        kind = "oblique" if self._weights else "axis-aligned"
        return f"ExplanationTree({kind}, n_features={self.n_features}, leaves={self.n_leaves}, depth={self.depth})"

    # --------------------------------------------------------------------- I/O
    def to_dict(self) -> dict:
        nodes = []
        for n in range(self.n_nodes):
            f = self._feature[n]
            if f == LEAF:
                nodes.append({"label": self._label[n]})
            elif f == OBLIQUE:
                w = self._weights[n]
                nodes.append({"weights": [[j, v] for j, v in w.items()], "threshold": self._threshold[n],
                              "left": self._left[n], "right": self._right[n]})
            else:
                nodes.append({"feature": f, "threshold": self._threshold[n],
                              "left": self._left[n], "right": self._right[n]})
            if n in self._near:  # the training values nearest the cut (null: no row on that side)
                near = self._near[n]
                nodes[-1]["neighbours"] = [near[0], near[1]]
                if len(near) == 3:
                    nodes[-1]["weight_digits"] = near[2]
        doc = {"format": "explanation-tree", "version": FORMAT_VERSION, "n_features": self.n_features,
               "feature_names": self.feature_names, "nodes": nodes}
        if self.label_names is not None:
            doc["label_names"] = list(self.label_names)
        return doc

    def to_json(self, **kwargs) -> str:
        """Lossless JSON (floats are written with full precision)."""
        return json.dumps(self.to_dict(), **kwargs)

    @classmethod
    def from_dict(cls, data: dict) -> "ExplanationTree":
        """The tree of a :meth:`to_dict` document; InvalidInputError names whatever is malformed."""
        _tree_format.check_document(data, FORMAT_VERSION)
        tree = cls(data["n_features"], data.get("feature_names"))
        tree._feature, tree._threshold, tree._left, tree._right, tree._label = [], [], [], [], []
        for n, node in enumerate(data["nodes"]):
            if "label" in node:
                tree._feature.append(LEAF)
                tree._threshold.append(np.nan)
                tree._left.append(-1)
                tree._right.append(-1)
                tree._label.append(int(node["label"]))
                continue
            if "weights" in node:
                tree._feature.append(OBLIQUE)
                tree._weights[n] = {int(j): float(v) for j, v in node["weights"]}
            else:
                tree._feature.append(int(node["feature"]))
            tree._threshold.append(float(node["threshold"]))
            if "neighbours" in node:
                lo, hi = (None if x is None else float(x) for x in node["neighbours"])
                tree._near[n] = (lo, hi, int(node["weight_digits"])) if "weights" in node else (lo, hi)
            tree._left.append(int(node["left"]))
            tree._right.append(int(node["right"]))
            tree._label.append(-1)
        tree._arrays = None
        names = data.get("label_names")
        if names is not None:
            if not isinstance(names, list) or not all(isinstance(x, str) for x in names):
                raise InvalidInputError("the tree document's 'label_names' must be a list of strings.")
            tree.label_names = names
        return tree

    @classmethod
    def from_json(cls, text: str) -> "ExplanationTree":
        """The tree of a :meth:`to_json` text; truncated or malformed text is an InvalidInputError."""
        return cls.from_dict(_tree_format.parse_json(text))

    def __eq__(self, other) -> bool:
        if not isinstance(other, ExplanationTree):
            return NotImplemented
        # to_dict never writes the NaN thresholds of leaves, so dict equality is exact equality.
        return self.to_dict() == other.to_dict()

