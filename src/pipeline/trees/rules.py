"""Rules read off an explanation tree: raw path conditions, simplified intervals, leaf annotations.

A leaf's path is a conjunction of tests (``Condition``). Several tests on the same feature
(or on the same oblique combination) collapse into one :class:`Interval`
``low < lhs <= high``: the largest ``>`` threshold and the smallest ``<=`` threshold. The
interval selects exactly the points the conjunction selects (an empty interval, ``low >=
high``, selects none, like the contradictory path it stands for). Intervals keep the order
in which their feature first appears on the path, so every rule reads from the root down.

:func:`leaf_stats` annotates leaves with data: size, purity with respect to a reference
clustering (share of the leaf's points whose reference cluster is the leaf's label), and the
majority ground-truth class with its share.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

def _name(names: Sequence[str] | None, j: int) -> str:
    return names[j] if names is not None else f"x[{j}]"


def full_decimal(t: float) -> str:
    """The float ``t`` written exactly (its shortest round-trip decimal, ``2`` for ``2.0``): the
    text of a cut for which no training values are known, exact for every point."""
    t = float(t)
    if t == 0:
        return "0"
    if 1e-6 <= abs(t) < 1e16:  # positional where that stays short: 0.00012, not 1.2e-04
        return np.format_float_positional(t, unique=True, trim="-")
    return repr(t)


def lhs_text(feature: int | None, weights: dict[int, float] | None, names: Sequence[str] | None) -> str:
    """The left-hand side of a test: a feature name, or every term of a weighted sum (largest
    weight first; weights in full, as the tree adds them)."""
    if weights is None:
        return _name(names, feature)
    terms = [f"{'-' if w < 0 else '+'} {full_decimal(abs(w))}·{_name(names, j)}" for j, w in zip(*oblique_terms(weights))]
    text = " ".join(terms)
    return text[2:] if text.startswith("+ ") else "-" + text[2:]


def oblique_terms(weights: dict[int, float]) -> tuple[np.ndarray, np.ndarray]:
    """An oblique test's columns and weights in the order its sum is evaluated and printed:
    the largest ``|w|`` first (equal ones as stored)."""
    ordered = sorted(weights.items(), key=lambda kv: -abs(kv[1]))
    return (np.array([j for j, _ in ordered], dtype=np.int64).reshape(-1),
            np.array([w for _, w in ordered], dtype=np.float64).reshape(-1))


def weighted_sum(X: np.ndarray, cols: np.ndarray, w: np.ndarray) -> np.ndarray:
    """``Σ_k w_k · X[:, cols_k]`` added term by term, left to right: the one evaluation of an
    oblique test. The tree routes with it, its rules select with it, and a printed rule read
    left to right gives the very same floats, so ties closer than an ulp route alike everywhere
    (a BLAS product sums in an order that depends on the number of rows)."""
    v = X[:, cols[0]] * w[0]
    for c, x in zip(cols[1:], w[1:]):
        v += X[:, c] * x
    return v


def _values(X: np.ndarray, feature: int | None, weights: dict[int, float] | None) -> np.ndarray:
    if weights is None:
        return X[:, feature]
    return weighted_sum(X, *oblique_terms(weights))


@dataclass
class Condition:
    """One test on the path to a leaf: ``lhs <= threshold`` (``op='<='``) or ``lhs > threshold``."""

    op: str
    threshold: float
    feature: int | None = None  # axis-aligned test
    weights: dict[int, float] | None = None  # oblique test: feature index -> weight
    names: Sequence[str] | None = field(default=None, repr=False)
    node: int | None = None  # the tree node holding the test
    display: object = field(default=None, repr=False, compare=False)  # a pipeline.trees.display.RuleDisplay

    def lhs(self) -> str:
        if self.display is not None:
            return self.display.lhs(self.node)
        return lhs_text(self.feature, self.weights, self.names)

    def format(self) -> str:
        """The test as text: through its display (:meth:`ExplanationTree.rules` gives one), the
        shortest exact threshold in display units; without one the stored float in full."""
        if self.display is not None:
            return self.display.condition(self.node, self.op)
        return f"{self.lhs()} {self.op} {full_decimal(self.threshold)}"

    def __str__(self) -> str:
        return self.format()

    def mask(self, X: np.ndarray) -> np.ndarray:
        """Which rows of X satisfy the test, shape (n_samples,)."""
        v = _values(np.asarray(X, dtype=float), self.feature, self.weights)
        return v <= self.threshold if self.op == "<=" else v > self.threshold


@dataclass
class Interval:
    """``low < lhs <= high`` on one feature or one oblique combination; ``None`` = unbounded."""

    low: float | None
    high: float | None
    feature: int | None = None
    weights: dict[int, float] | None = None
    names: Sequence[str] | None = field(default=None, repr=False)
    low_node: int | None = None  # the nodes whose tests give low / high
    high_node: int | None = None
    display: object = field(default=None, repr=False, compare=False)

    @property
    def empty(self) -> bool:
        """True when no value satisfies the interval (a contradictory path)."""
        return self.low is not None and self.high is not None and self.low >= self.high

    def lhs(self) -> str:
        if self.display is not None:
            return self.display.lhs(self.high_node if self.high_node is not None else self.low_node)
        return lhs_text(self.feature, self.weights, self.names)

    def format(self) -> str:
        if self.display is not None:
            return self.display.interval(self.low_node, self.high_node)
        lhs = self.lhs()
        if self.low is None:
            return f"{lhs} <= {full_decimal(self.high)}"
        if self.high is None:
            return f"{lhs} > {full_decimal(self.low)}"
        return f"{full_decimal(self.low)} < {lhs} <= {full_decimal(self.high)}"

    def __str__(self) -> str:
        return self.format()

    def mask(self, X: np.ndarray) -> np.ndarray:
        v = _values(np.asarray(X, dtype=float), self.feature, self.weights)
        out = np.ones(v.shape[0], dtype=bool)
        if self.low is not None:
            out &= v > self.low
        if self.high is not None:
            out &= v <= self.high
        return out

    def to_dict(self) -> dict:
        d = {"low": self.low, "high": self.high, "text": self.format()}  # low/high: the raw thresholds
        if self.display is not None:
            d["units"] = self.display.node_units(self.high_node if self.high_node is not None else self.low_node)
        if self.weights is None:
            d.update(feature=int(self.feature), name=_name(self.names, self.feature))
        else:
            d["weights"] = {_name(self.names, j): w for j, w in self.weights.items()}
        return d


def simplify(conditions: Sequence[Condition]) -> list[Interval]:
    """At most one interval per feature (or oblique combination), in order of first appearance."""
    out: dict[object, Interval] = {}
    for c in conditions:
        key = c.feature if c.weights is None else tuple(c.weights.items())
        iv = out.setdefault(key, Interval(None, None, c.feature, c.weights, c.names, display=c.display))
        if c.op == "<=":
            if iv.high is None or c.threshold < iv.high:
                iv.high, iv.high_node = c.threshold, c.node
        elif iv.low is None or c.threshold > iv.low:
            iv.low, iv.low_node = c.threshold, c.node
    return list(out.values())


@dataclass
class LeafStats:
    """What a leaf holds: its size, purity vs the reference and majority ground-truth class."""

    size: int
    purity: float | None = None  # share of the leaf's points whose reference cluster is the leaf's label
    majority: object = None  # most frequent ground-truth class (None without ground truth or points)
    majority_share: float | None = None
    majority_name: str | None = None

    def parts(self) -> list[str]:
        """The annotation pieces: ``412 points``, ``91% pure``, ``mostly "7" (84%)``."""
        out = [f"{self.size} point{'s' if self.size != 1 else ''}"]
        if self.purity is not None and self.size:
            out.append(f"{self.purity:.0%} pure")
        if self.majority_name is not None:
            out.append(f'mostly "{self.majority_name}" ({self.majority_share:.0%})')
        return out


def leaf_stats(leaf_of_row: np.ndarray, leaves: Sequence[int], labels: Sequence[int], reference=None, y=None,
               class_names: Sequence[str] | None = None) -> dict[int, LeafStats]:
    """Per leaf id: :class:`LeafStats` from the rows' leaf ids (``tree.apply(X)``).

    ``reference`` are the reference cluster ids (noise -1 counts as impure); ``y`` ground-truth
    classes (ints or strings; negative ints are ignored as unknown); ``class_names`` names int classes.
    """
    ref = None if reference is None else np.asarray(reference)
    truth = None if y is None else np.asarray(y)
    leaf_of_row = np.asarray(leaf_of_row)
    counted = _counted_leaf_stats(leaf_of_row, leaves, labels, ref, truth, class_names)
    return counted if counted is not None else _sorted_leaf_stats(leaf_of_row, leaves, labels, ref, truth, class_names)


def _sorted_leaf_stats(leaf_of_row, leaves, labels, ref, truth, class_names) -> dict[int, LeafStats]:
    """:func:`leaf_stats` for any labels and classes: the rows grouped by leaf."""
    small = leaf_of_row.size and -2**15 <= leaf_of_row.min() and leaf_of_row.max() < 2**15
    # the rows grouped by leaf once, not one mask per leaf (16-bit keys: numpy's radix sort, O(n))
    order = np.argsort(leaf_of_row.astype(np.int16) if small else leaf_of_row, kind="stable")
    grouped = leaf_of_row[order]
    out = {}
    for leaf, label in zip(leaves, labels):
        lo, hi = np.searchsorted(grouped, leaf, side="left"), np.searchsorted(grouped, leaf, side="right")
        rows = order[lo:hi]
        stats = LeafStats(size=int(rows.size))
        if ref is not None and stats.size:
            stats.purity = float(np.count_nonzero(ref[rows] == label) / rows.size)
        if truth is not None:
            members = truth[rows]
            if members.dtype.kind in "iu":
                members = members[members >= 0]
            if members.size:
                if members.dtype.kind in "iu":  # the smallest of the most frequent values, as np.unique + argmax
                    counts = np.bincount(members)
                    values = np.arange(counts.size)
                else:
                    values, counts = np.unique(members, return_counts=True)
                best = int(np.argmax(counts))
                major = values[best].item()
                stats.majority, stats.majority_share = major, float(counts[best] / members.size)
                named = class_names is not None and isinstance(major, int) and 0 <= major < len(class_names)
                stats.majority_name = str(class_names[major]) if named else str(major)
        out[int(leaf)] = stats
    return out


_BLOCK_ROWS = 1 << 20


def _counted_leaf_stats(leaf_of_row, leaves, labels, ref, truth, class_names) -> dict[int, LeafStats] | None:
    """:func:`leaf_stats` by counting (a few passes over the rows, no sort of them) for integer
    leaf ids, integer reference labels and integer classes of small ranges; None otherwise."""
    def small_ints(a, limit=1 << 16):
        return a is None or (a.dtype.kind in "iu" and (a.size == 0 or (int(a.min()) >= -1 and int(a.max()) < limit)))

    if leaf_of_row.size == 0 or not small_ints(leaf_of_row) or int(leaf_of_row.min()) < 0:
        return None
    if not (small_ints(ref) and small_ints(truth) and all(isinstance(v, (int, np.integer)) for v in labels)):
        return None
    if ref is not None and ref.size != leaf_of_row.size or truth is not None and truth.size != leaf_of_row.size:
        return None
    n_nodes = int(leaf_of_row.max()) + 1
    label_of = np.full(n_nodes, np.iinfo(np.int64).min, np.int64)
    for leaf, label in zip(leaves, labels):
        if leaf < n_nodes:
            label_of[leaf] = int(label)
    classes = 1
    if truth is not None:  # the largest class (unknown, -1, is smaller than any)
        classes = max(int(truth.max()) + 1, 1)
        if n_nodes * classes > 1 << 22:  # a table larger than the rows' grouping: sort them instead
            return None
    sizes = np.zeros(n_nodes, np.int64)
    pure = np.zeros(n_nodes, np.int64) if ref is not None else None
    table = np.zeros(n_nodes * classes, np.int64) if truth is not None else None
    step = _BLOCK_ROWS  # a block of rows at a time: the temporaries stay small at 10M rows
    for start in range(0, leaf_of_row.size, step):
        leaf = leaf_of_row[start:start + step]
        sizes += np.bincount(leaf, minlength=n_nodes)
        if pure is not None:  # rows whose reference cluster is their leaf's label
            pure += np.bincount(leaf[ref[start:start + step] == label_of[leaf]], minlength=n_nodes)
        if table is not None:  # (leaf, class) counts of the rows with a known class
            t = truth[start:start + step]
            known = t >= 0
            table += np.bincount(leaf[known].astype(np.int64) * classes + t[known].astype(np.int64),
                                 minlength=n_nodes * classes)
    table = table.reshape(n_nodes, classes) if table is not None else None
    out = {}
    for leaf, label in zip(leaves, labels):
        size = int(sizes[leaf]) if leaf < n_nodes else 0
        stats = LeafStats(size=size)
        if pure is not None and size:
            stats.purity = float(int(pure[leaf]) / size)
        if table is not None and leaf < n_nodes and table[leaf].sum():
            counts = table[leaf]  # the smallest of the most frequent classes, as np.unique + argmax
            major = int(np.argmax(counts))
            stats.majority, stats.majority_share = major, float(counts[major] / counts.sum())
            named = class_names is not None and 0 <= major < len(class_names)
            stats.majority_name = str(class_names[major]) if named else str(major)
        out[int(leaf)] = stats
    return out


@dataclass
class Rule:
    """The conjunction of conditions that leads to one leaf.

    ``conditions`` is the raw path (root first); ``intervals`` its simplification (one interval
    per feature); ``stats`` the leaf's annotations when the rules were computed with data.
    """

    leaf: int
    label: int
    conditions: list[Condition]
    stats: LeafStats | None = None
    name: str | None = None  # how the leaf's label reads ("cluster 3", or a class name)

    @property
    def intervals(self) -> list[Interval]:
        return simplify(self.conditions)

    def format(self, simplified: bool = True) -> str:
        parts = self.intervals if simplified else self.conditions
        body = " and ".join(p.format() for p in parts) or "always"
        text = f"{body} → {self.name or f'cluster {self.label}'}"
        if self.stats is not None:
            text += "".join(f" · {p}" for p in self.stats.parts())
        return text

    def raw(self) -> str:
        """The unsimplified conjunction, as the path reads (annotations included)."""
        return self.format(simplified=False)

    def __str__(self) -> str:
        return self.format()

    def mask(self, X) -> np.ndarray:
        """Rows of X the (simplified) rule selects, shape (n_samples,)."""
        X = np.asarray(X, dtype=float)
        out = np.ones(X.shape[0], dtype=bool)
        for iv in self.intervals:
            out &= iv.mask(X)
        return out

    def to_dict(self) -> dict:
        d = {"leaf": int(self.leaf), "label": int(self.label), "text": self.format(),
             "raw": self.format(simplified=False),
             "conditions": [iv.to_dict() for iv in self.intervals]}
        if self.stats is not None:
            s = self.stats
            d.update(n_points=s.size, purity=s.purity, majority=s.majority, majority_share=s.majority_share,
                     majority_name=s.majority_name)
        return d
