"""Thresholds as a person reads them: the shortest exact decimal, optionally in display units.

A tree stores its cut as a float (``loop <= 7.6983321``); a rule printed with four
significant digits (``loop <= 7.698``) can send training points the other way. The number
printed here is the **shortest decimal strictly between the two neighbouring training
values around the cut** (the largest value that goes left and the smallest that goes
right, among all training points), so the printed rule routes every
training point exactly as the tree does (:func:`shortest_decimal`).

The estimators keep those two values per cut at fit time (:func:`cut_neighbours`, stored by
:meth:`ExplanationTree.record_neighbours` and in the tree's JSON), so every printed form is
exact without the training data. Data passed at print time (``rules(X)``) narrows the
neighbours further, so the text is then exact on those rows too. A cut with neither (a tree
grown by hand, from a mixture's parameters alone, or read from JSON written before the
neighbours were kept) prints its stored float in full (shortest round-trip decimal): exact
for every point, only longer.

Display units (``units``: one monotone map per feature, e.g.
:class:`pipeline.concepts.units.ProbabilityUnits` or ``PercentileUnits``) change only how
a threshold reads (``P(loop) > 0.82``, ``top_heavy in top 12%``): a monotone map of one
coordinate does not change an axis-aligned tree's partition, so the tree and its JSON keep
the raw thresholds. The exact decimal is then chosen between the *mapped* neighbours.
Oblique tests stay in raw units; their weights are printed with the fewest significant
digits (at least 3) that still route every training point as the tree does.

A units object needs: ``increasing`` (bool), ``__call__(values) -> mapped values``,
``include_low`` (True when the map is a step function whose value at the left neighbour
may itself be the printed threshold, as percentiles are) and ``condition(name, op, text)``
/ ``interval(name, low_text, high_text)`` returning the text. Optionally ``printable``
(``(low, high)``: printed values stay inside, e.g. probabilities in [0.01, 0.99]) and
``fallback`` (the units a cut reads in when no printable value lies between its neighbours,
e.g. percentiles; None: raw) and ``error`` (a bound on the rounding error of a computed mapped
value: a printed threshold keeps twice that distance from both mapped neighbours).
"""

from __future__ import annotations

import math
from decimal import ROUND_CEILING, ROUND_HALF_EVEN, Decimal
from typing import Sequence

import numpy as np

from pipeline.trees.rules import full_decimal, oblique_terms, weighted_sum

__all__ = ["RuleDisplay", "cut_neighbours", "full_decimal", "shortest_decimal"]

MIN_WEIGHT_DIGITS = 3


def shortest_decimal(lo: float, hi: float, near: float | None = None, include_low: bool = False) -> str:
    """The shortest decimal ``d`` with ``lo < d < hi`` (``lo <= d < hi`` with ``include_low``).

    ``lo`` and ``hi`` are taken as they read (the shortest decimal of each float, ``repr``), and
    ``float(d)`` must still satisfy ``lo <= float(d) < hi`` (so a program evaluating the printed
    rule routes ``lo`` and ``hi`` as the tree does). Among the decimals with the fewest digits
    after the point, the one nearest ``near`` (default: the midpoint). Computed in exact decimal
    arithmetic.

    >>> shortest_decimal(1.5204, 1.5206)
    '1.5205'
    >>> shortest_decimal(0.2, 3.9, near=1.7)
    '2'
    """
    # the neighbours as a person reads them (the shortest decimal of each float: 1.7, not 1.69999...)
    L, H = Decimal(repr(float(lo))), Decimal(repr(float(hi)))
    if not L < H:
        raise ValueError(f"shortest_decimal needs lo < hi, got lo={lo!r}, hi={hi!r}.")
    N = Decimal(float(near)) if near is not None else (L + H) / 2
    top = max(abs(L), abs(H))
    k = -(top.adjusted() + 2) if top > 0 else 0  # start with a step larger than both values
    lo, hi = float(lo), float(hi)
    for _ in range(400):
        q = Decimal(1).scaleb(-k)
        first = (L / q).to_integral_value(ROUND_CEILING)
        if not include_low and first * q == L:
            first += 1
        last = (H / q).to_integral_value(ROUND_CEILING) - 1
        if first <= last:
            c = min(max((N / q).to_integral_value(ROUND_HALF_EVEN), first), last)
            for cand in (c, c - 1, c + 1, first, last):
                # read back as a float (what a program evaluating the rule sees) it must still split lo | hi
                if first <= cand <= last and lo <= float(cand * q) < hi:
                    return _plain(cand * q)
        k += 1
    return repr(lo)  # lo and hi are adjacent floats: "x <= lo" is the only exact float test


def _in_range(a: float, b: float, include_low: bool, printable) -> str | None:
    """The shortest decimal ``d`` in ``(a, b)`` (``[a, b)`` with ``include_low``) that also lies in
    ``printable = (low, high)`` (inclusive; None: anywhere), or None when there is none."""
    if printable is None:
        return shortest_decimal(a, b, include_low=include_low)
    low, high = printable
    if a >= high or b <= low:
        return None
    if a < low:
        a, include_low = low, True
    if b > high:
        b = float(np.nextafter(high, np.inf))  # d < b: d <= high
    return shortest_decimal(a, b, include_low=include_low) if a < b else None


def _plain(d: Decimal) -> str:
    text = format(d.normalize(), "f")
    return "0" if text in ("-0", "0") else text


def _sig(w: float, digits: int) -> str:
    text = f"{w:.{digits}g}"
    return _plain(Decimal(text)) if "e" in text else text


def _complete(lo: float | None, hi: float | None, t: float) -> tuple[float, float]:
    """(lo, hi) with a missing side (no training value there) filled in around the cut ``t``."""
    if hi is None:
        hi = t + max(t - lo, abs(t) * 1e-3, 1e-12)
    if lo is None:
        lo = min(t, hi - max(abs(hi) * 1e-3, 1e-12)) - max(hi - t, abs(t) * 1e-3, 1e-12)
    return lo, hi


def _sorted_neighbours(v: np.ndarray, T: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For sorted distinct cuts ``T``: ``lo[j] = max{v <= T[j]}``, ``hi[j] = min{v > T[j]}``
    (-inf / inf where none): one pass over ``v`` (a binary search per value)."""
    m = T.size
    b = np.searchsorted(T, v, side="left")  # how many cuts lie below v: v <= T[j] iff j >= b
    top = np.full(m + 1, -np.inf)
    bottom = np.full(m + 1, np.inf)
    np.maximum.at(top, b, v)
    np.minimum.at(bottom, b, v)
    return np.maximum.accumulate(top)[:m], np.minimum.accumulate(bottom[::-1])[::-1][1:]


def cut_neighbours(tree, X) -> dict[int, tuple]:
    """For every internal node of ``tree``, the training values nearest its cut, among all rows of ``X``.

    An axis test ``x[f] <= t`` gets ``(lo, hi)``: the largest ``x[f]`` that goes left and the
    smallest that goes right (None for a side no row reaches). An oblique test gets
    ``(lo, hi, digits)``: the fewest significant digits (at least 3) of its weights whose
    printed sum, added left to right, still puts every row on its side, and the nearest values
    of that printed sum. One pass over the columns the tree cuts (a binary search among that
    column's cuts per value, compiled where the tree kernels are loaded) plus one weighted sum
    per oblique node: cheap next to growing the tree. ``X``: dense array or sparse matrix.
    """
    import sys

    import scipy.sparse as sp

    feature, threshold = tree._feature, tree._threshold  # the node lists (no array conversion: ~us matter on iris)
    by_feature: dict[int, set] = {}
    oblique = []
    for n, f in enumerate(feature):
        if f >= 0:
            by_feature.setdefault(f, set()).add(threshold[n])
        elif f != -1:  # OBLIQUE (-1 is a leaf)
            oblique.append(n)
    out: dict[int, tuple] = {}
    if X.shape[0] == 0:
        return out
    if by_feature:
        fs = sorted(by_feature)
        cuts = [sorted(by_feature[f]) for f in fs]
        offsets = [0]
        for c in cuts:
            offsets.append(offsets[-1] + len(c))
        T = np.array([t for c in cuts for t in c], dtype=np.float64)
        kernels = sys.modules.get("pipeline.trees._kernels")
        if not sp.issparse(X) and kernels is not None and kernels.AVAILABLE and X.dtype == np.float64:
            lo, hi = kernels.cut_neighbours(X, np.array(fs, dtype=np.int64), np.array(offsets, dtype=np.int64), T,
                                            kernels.row_blocks(X.shape[0]))
        else:
            lo, hi = np.empty(T.size), np.empty(T.size)
            Xc = X.tocsc() if sp.issparse(X) else X
            for g, f in enumerate(fs):
                v = Xc[:, f].toarray().ravel() if sp.issparse(X) else np.asarray(X[:, f], dtype=np.float64)
                a, b = offsets[g], offsets[g + 1]
                lo[a:b], hi[a:b] = _sorted_neighbours(v, T[a:b])
        lo, hi = lo.tolist(), hi.tolist()
        where = {(f, t): j for g, f in enumerate(fs) for j, t in enumerate(cuts[g], start=offsets[g])}
        for n, f in enumerate(feature):
            if f >= 0:
                j = where[(f, threshold[n])]
                out[n] = (lo[j] if lo[j] != -math.inf else None, hi[j] if hi[j] != math.inf else None)
    if oblique:
        dense = X.toarray() if sp.issparse(X) else np.asarray(X, dtype=np.float64)
        for n in oblique:
            out[n] = _oblique_neighbours(dense, tree.weights(n), float(threshold[n]))
    return out


def _extremes(v: np.ndarray, left: np.ndarray) -> tuple[float | None, float | None]:
    return (float(v[left].max()) if left.any() else None), (float(v[~left].min()) if (~left).any() else None)


def _oblique_neighbours(X: np.ndarray, weights: dict[int, float], t: float) -> tuple:
    """(lo, hi, digits) of an oblique test ``weights · x <= t`` on the rows of ``X`` (see :func:`cut_neighbours`)."""
    cols, w = oblique_terms(weights)  # the printed order, in which the tree adds the terms too
    left = weighted_sum(X, cols, w) <= t  # as the tree routes
    # At 17 significant digits every printed weight reads back as the tree's own float, so the
    # printed sum gives the tree's values and the loop always ends there at the latest.
    for digits in range(MIN_WEIGHT_DIGITS, 18):
        v = weighted_sum(X, cols, np.array([float(_sig(x, digits)) for x in w]))  # read left to right
        lo, hi = _extremes(v, left)
        if lo is None or hi is None or lo < hi:
            return lo, hi, digits
    raise AssertionError("unreachable: 17 significant digits give back the weights")  # pragma: no cover


def _merge(a: tuple | None, b: tuple | None) -> tuple | None:
    """Neighbours known from two sources (kept at fit time, and the rows passed now): the nearer of each side."""
    if a is None or b is None:
        return a if b is None else b
    lo = [x for x in (a[0], b[0]) if x is not None]
    hi = [x for x in (a[1], b[1]) if x is not None]
    return (max(lo) if lo else None), (min(hi) if hi else None)


class RuleDisplay:
    """Exact, unit-mapped text of every test of ``tree``.

    Parameters
    ----------
    tree : ExplanationTree
    X : array-like of shape (n_samples, tree.n_features), optional
        Rows the printed tests must route as the tree does, besides the training values the
        tree kept at fit time (:meth:`ExplanationTree.record_neighbours`); only their order
        around each cut matters.
    units : sequence of (units object or None) of length n_features, optional
        Display map per feature (None: raw). Oblique tests always read in raw units.
    """

    def __init__(self, tree, X=None, units: Sequence | None = None):
        self.tree = tree
        self.names = tree.feature_names or [f"x[{j}]" for j in range(tree.n_features)]
        self.units = list(units) if units is not None else [None] * tree.n_features
        if len(self.units) != tree.n_features:
            raise ValueError(f"units has {len(self.units)} entries for a tree with {tree.n_features} features.")
        X = None if X is None else np.asarray(X, dtype=np.float64)
        kept = tree.neighbours()
        fresh = cut_neighbours(tree, X) if X is not None and X.shape[0] else {}
        self._node: dict[int, tuple] = {}
        self._near: dict[int, tuple | None] = {}  # an axis cut's neighbouring training values
        # Neighbours among *all* rows, not only those reaching the node: then each printed test agrees
        # with the tree's test on every row, so any conjunction of them (the simplified intervals of a
        # rule, which drop a test implied by a later one) routes exactly too.
        for n in range(tree.n_nodes):
            if tree.is_leaf(n):
                continue
            t = float(tree.threshold[n])
            if tree.is_oblique(n):
                self._node[n] = self._oblique(tree.weights(n), t, kept.get(n), X)
            else:
                near = _merge(kept.get(n), fresh.get(n))
                self._near[n] = near
                self._node[n] = self._axis(int(tree.feature[n]), near, t)
        # A feature with one cut in its fallback units (a probability in a tail read as a percentile)
        # reads in those units at every cut, so one rule never mixes "P(c) <= 0.3" with "c in top 78%".
        fell = {info[1] for info in self._node.values() if info[0] == "units" and info[4] is not self.units[info[1]]}
        for f in fell:
            self.units[f] = self.units[f].fallback
        for n, info in list(self._node.items()):
            if info[0] != "oblique" and info[1] in fell:
                self._node[n] = self._axis(info[1], self._near[n], float(tree.threshold[n]))

    @property
    def mapped(self) -> bool:
        """True when some feature reads in display units (not raw)."""
        return any(u is not None for u in self.units)

    # ------------------------------------------------------------------ per node
    def _axis(self, f: int, near: tuple | None, t: float) -> tuple:
        if near is None or (near[0] is None and near[1] is None):
            return ("raw", f, full_decimal(t), False)
        lo, hi = _complete(near[0], near[1], t)
        u = self.units[f]
        while u is not None:
            mlo, mhi = (float(x) for x in np.asarray(u(np.array([lo, hi])), dtype=np.float64))
            flip = not u.increasing
            a, b = (mhi, mlo) if flip else (mlo, mhi)
            margin = 2 * getattr(u, "error", 0.0)  # a computed map may round a point across a cut nearer than this
            a, b = a + margin, b - margin
            text = _in_range(a, b, u.include_low and not flip, getattr(u, "printable", None)) if a < b else None
            if text is not None:
                return ("units", f, text, flip, u)
            u = getattr(u, "fallback", None)  # e.g. a probability in a tail: the percentile instead
        return ("raw", f, shortest_decimal(lo, hi, near=t), False)

    def _oblique(self, weights: dict[int, float], t: float, kept: tuple | None, X) -> tuple:
        cols, w = oblique_terms(weights)
        if kept is not None and X is not None:  # the kept digits, if they still separate the rows passed now
            lo, hi, digits = kept
            shown = np.array([float(_sig(x, digits)) for x in w])
            more = _extremes(weighted_sum(X, cols, shown), weighted_sum(X, cols, w) <= t)
            merged = _merge((lo, hi), more)
            kept = None if None not in merged and merged[0] >= merged[1] else merged + (digits,)
            if kept is None:  # they do not: the weights and the cut in full, exact for every point
                return self._oblique_text(cols, w, 17, full_decimal(t))
        elif X is not None:
            kept = _oblique_neighbours(X, weights, t)
        if kept is None or (kept[0] is None and kept[1] is None):
            return self._oblique_text(cols, w, 17, full_decimal(t))
        lo, hi, digits = kept
        return self._oblique_text(cols, w, digits, shortest_decimal(*_complete(lo, hi, t), near=t))

    @staticmethod
    def _oblique_text(cols, w, digits: int, threshold: str) -> tuple:
        text = (lambda x: _sig(x, digits)) if digits < 17 else full_decimal  # 17: each weight as stored
        return ("oblique", [(j, text(x), x) for j, x in zip(cols.tolist(), w.tolist())], threshold, False)

    # ------------------------------------------------------------------ text
    def lhs(self, node: int) -> str:
        """The tested feature's name, or every term of an oblique test (largest weight first)."""
        info = self._node[node]
        if info[0] != "oblique":
            return self.names[info[1]]
        terms = [f"{'-' if w < 0 else '+'} {s.lstrip('-')}·{self.names[j]}" for j, s, w in info[1]]
        text = " ".join(terms)
        return text[2:] if text.startswith("+ ") else "-" + text[2:]

    def threshold(self, node: int) -> str:
        """The printed threshold of ``node`` (in its display units)."""
        return self._node[node][2]

    def condition(self, node: int, op: str) -> str:
        """``lhs op threshold`` of ``node`` (``op``: ``<=`` goes left, ``>`` right)."""
        kind, f, thr, flip = self._node[node][:4]
        if kind == "units":
            if flip:  # a decreasing map: the left side has the larger mapped values
                op = ">" if op == "<=" else "<"
            return self._node[node][4].condition(self.names[f], op, thr)
        return f"{self.lhs(node)} {op} {thr}"

    def interval(self, low_node: int | None, high_node: int | None) -> str:
        """``low < lhs <= high`` from the ``>`` test of ``low_node`` and the ``<=`` test of ``high_node``."""
        if low_node is None:
            return self.condition(high_node, "<=")
        if high_node is None:
            return self.condition(low_node, ">")
        a, b = self._node[low_node], self._node[high_node]
        if a[0] == "units" and b[0] == "units" and not a[3] and not b[3] and a[4] is b[4]:
            return a[4].interval(self.names[a[1]], a[2], b[2])
        if a[0] != "units" and b[0] != "units" and self.lhs(low_node) == self.lhs(high_node):
            return f"{a[2]} < {self.lhs(low_node)} <= {b[2]}"
        return f"{self.condition(low_node, '>')} and {self.condition(high_node, '<=')}"

    def printed_test(self, node: int) -> dict:
        """The test of internal ``node`` as printed: ``kind`` (``raw``, ``units`` or ``oblique``),
        ``threshold`` (the printed text), ``flip`` (a decreasing display map), ``units`` (the units
        object it reads in, for ``units``: the feature's own or its fallback) and ``feature`` or
        ``terms`` (``[(column, printed weight, weight), ...]``)."""
        info = self._node[node]
        test = {"kind": info[0], "threshold": info[2], "flip": bool(info[3]),
                "units": info[4] if info[0] == "units" else None}
        test["terms" if info[0] == "oblique" else "feature"] = info[1]
        return test

    def printed_tests(self) -> dict[int, dict]:
        """:meth:`printed_test` of every internal node, by node id."""
        return {n: self.printed_test(n) for n in self._node}

    def node_units(self, node: int) -> str:
        """``raw``, ``oblique`` (raw) or the units kind the test of ``node`` reads in."""
        kind, f = self._node[node][:2]
        return getattr(self._node[node][4], "kind", "units") if kind == "units" else kind
