"""Thresholds as a person reads them: the shortest exact decimal, optionally in display units.

A tree stores its cut as a float (``loop <= 7.6983321``); a rule printed with four
significant digits (``loop <= 7.698``) can send training points the other way. The number
printed here is the **shortest decimal strictly between the two neighbouring training
values around the cut** (the largest value that goes left and the smallest that goes
right, among all training points), so the printed rule routes every
training point exactly as the tree does (:func:`shortest_decimal`).

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
e.g. percentiles; None: raw).
"""

from __future__ import annotations

from decimal import ROUND_CEILING, ROUND_HALF_EVEN, Decimal
from typing import Sequence

import numpy as np

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


class RuleDisplay:
    """Exact, unit-mapped text of every test of ``tree`` given its training data ``X``.

    Parameters
    ----------
    tree : ExplanationTree
    X : array-like of shape (n_samples, tree.n_features)
        The points the tree was fitted on (only their order around each cut matters).
    units : sequence of (units object or None) of length n_features, optional
        Display map per feature (None: raw). Oblique tests always read in raw units.
    """

    def __init__(self, tree, X, units: Sequence | None = None):
        X = np.asarray(X, dtype=np.float64)
        self.tree = tree
        self.names = tree.feature_names or [f"x[{j}]" for j in range(tree.n_features)]
        self.units = list(units) if units is not None else [None] * tree.n_features
        if len(self.units) != tree.n_features:
            raise ValueError(f"units has {len(self.units)} entries for a tree with {tree.n_features} features.")
        self._node: dict[int, tuple] = {}
        # Neighbours among *all* training points, not only those reaching the node: then each printed
        # test agrees with the tree's test on every training point, so any conjunction of them (the
        # simplified intervals of a rule, which drop a test implied by a later one) routes exactly too.
        for n in range(tree.n_nodes):
            if tree.is_leaf(n):
                continue
            t = float(tree.threshold[n])
            if tree.is_oblique(n):
                self._node[n] = self._oblique(X, tree.weights(n), t)
            else:
                v = X[:, int(tree.feature[n])]
                self._node[n] = self._axis(int(tree.feature[n]), v, v <= t, t)
        # A feature with one cut in its fallback units (a probability in a tail read as a percentile)
        # reads in those units at every cut, so one rule never mixes "P(c) <= 0.3" with "c in top 78%".
        fell = {info[1] for info in self._node.values() if info[0] == "units" and info[4] is not self.units[info[1]]}
        for f in fell:
            self.units[f] = self.units[f].fallback
        for n, info in list(self._node.items()):
            if info[0] != "oblique" and info[1] in fell:
                v = X[:, info[1]]
                self._node[n] = self._axis(info[1], v, v <= float(tree.threshold[n]), float(tree.threshold[n]))

    @property
    def mapped(self) -> bool:
        """True when some feature reads in display units (not raw)."""
        return any(u is not None for u in self.units)

    # ------------------------------------------------------------------ per node
    @staticmethod
    def _neighbours(v: np.ndarray, left: np.ndarray, t: float) -> tuple[float | None, float | None]:
        lo = float(v[left].max()) if left.any() else None
        hi = float(v[~left].min()) if (~left).any() else None
        if lo is None and hi is None:
            return None, None
        if hi is None:
            hi = t + max(t - lo, abs(t) * 1e-3, 1e-12)
        if lo is None:
            lo = min(t, hi - max(abs(hi) * 1e-3, 1e-12)) - max(hi - t, abs(t) * 1e-3, 1e-12)
        return lo, hi

    def _axis(self, f: int, v: np.ndarray, left: np.ndarray, t: float) -> tuple:
        lo, hi = self._neighbours(v, left, t)
        if lo is None:
            return ("raw", f, f"{t:.4g}", False)
        u = self.units[f]
        while u is not None:
            mlo, mhi = (float(x) for x in np.asarray(u(np.array([lo, hi])), dtype=np.float64))
            flip = not u.increasing
            a, b = (mhi, mlo) if flip else (mlo, mhi)
            text = _in_range(a, b, u.include_low and not flip, getattr(u, "printable", None)) if a < b else None
            if text is not None:
                return ("units", f, text, flip, u)
            u = getattr(u, "fallback", None)  # e.g. a probability in a tail: the percentile instead
        return ("raw", f, shortest_decimal(lo, hi, near=t), False)

    def _oblique(self, X: np.ndarray, weights: dict[int, float], t: float) -> tuple:
        from pipeline.trees.rules import oblique_terms, weighted_sum

        cols, w = oblique_terms(weights)  # the printed order, in which the tree adds the terms too
        left = weighted_sum(X, cols, w) <= t  # as the tree routes
        # At 17 significant digits every printed weight reads back as the tree's own float, so the
        # printed sum gives the tree's values and the loop always ends there at the latest.
        for digits in range(MIN_WEIGHT_DIGITS, 18):
            shown = [_sig(x, digits) for x in w]
            v = weighted_sum(X, cols, np.array([float(x) for x in shown]))  # read left to right
            lo = v[left].max() if left.any() else None
            hi = v[~left].min() if (~left).any() else None
            if lo is None or hi is None or lo < hi:
                lo, hi = self._neighbours(v, left, t)
                thr = f"{t:.4g}" if lo is None else shortest_decimal(lo, hi, near=t)
                return ("oblique", list(zip(cols.tolist(), shown, w.tolist())), thr, False)
        raise AssertionError("unreachable: 17 significant digits give back the weights")  # pragma: no cover

    # ------------------------------------------------------------------ text
    def lhs(self, node: int, max_terms: int | None = None) -> str:
        info = self._node[node]
        if info[0] != "oblique":
            return self.names[info[1]]
        ordered = sorted(info[1], key=lambda term: -abs(term[2]))
        shown = ordered if max_terms is None else ordered[:max_terms]
        terms = [f"{'-' if w < 0 else '+'} {s.lstrip('-')}·{self.names[j]}" for j, s, w in shown]
        if len(ordered) > len(shown):
            terms.append(f"+ {len(ordered) - len(shown)} more")
        text = " ".join(terms)
        return text[2:] if text.startswith("+ ") else "-" + text[2:]

    def threshold(self, node: int) -> str:
        """The printed threshold of ``node`` (in its display units)."""
        return self._node[node][2]

    def condition(self, node: int, op: str, max_terms: int | None = None) -> str:
        """``lhs op threshold`` of ``node`` (``op``: ``<=`` goes left, ``>`` right)."""
        kind, f, thr, flip = self._node[node][:4]
        if kind == "units":
            if flip:  # a decreasing map: the left side has the larger mapped values
                op = ">" if op == "<=" else "<"
            return self._node[node][4].condition(self.names[f], op, thr)
        return f"{self.lhs(node, max_terms)} {op} {thr}"

    def interval(self, low_node: int | None, high_node: int | None, max_terms: int | None = None) -> str:
        """``low < lhs <= high`` from the ``>`` test of ``low_node`` and the ``<=`` test of ``high_node``."""
        if low_node is None:
            return self.condition(high_node, "<=", max_terms)
        if high_node is None:
            return self.condition(low_node, ">", max_terms)
        a, b = self._node[low_node], self._node[high_node]
        if a[0] == "units" and b[0] == "units" and not a[3] and not b[3] and a[4] is b[4]:
            return a[4].interval(self.names[a[1]], a[2], b[2])
        if a[0] != "units" and b[0] != "units":
            return f"{a[2]} < {self.lhs(low_node, max_terms)} <= {b[2]}"
        return f"{self.condition(low_node, '>', max_terms)} and {self.condition(high_node, '<=', max_terms)}"

    def node_units(self, node: int) -> str:
        """``raw``, ``oblique`` (raw) or the units kind the test of ``node`` reads in."""
        kind, f = self._node[node][:2]
        return getattr(self._node[node][4], "kind", "units") if kind == "units" else kind
