"""Measured concepts (issue 47): CAV labels from a measurement of each input, and checks of them.

A measured concept is a function of the raw input (:mod:`pipeline.concepts.measures`: holes of a
binarised digit, stroke thickness, sentiment of a text ...), so its labels never come from the
run's classes. It becomes a CAV like any concept, with labels taken from the measurement:

* ``split="presence"`` (counts: loops, URLs): 1 where the value is above 0, 0 where it is 0 —
  the concept is there or not, as a person checks it on the input;
* ``split="tertiles"`` (continuous properties: thickness, slant, sentiment): 1 in the top third
  of the run's values, 0 in the bottom third, the middle third unlabelled. The middle third is
  left out because a CAV is a direction in which the property *grows*: items near the median
  differ by less than the measurement's own noise, and labelling them only blurs the direction.
  (With many ties, e.g. a count that is 1 for most items, the two thirds are the values above
  and below the tied value.)

The rows a concept explains are also the rows it is measured on, so the CAV is fitted on one
random part of them (:func:`fit_rows`, ``fit_share``) and checked on the rest: how well its
coordinate ``⟨c, z⟩`` tracks the measurement there (Spearman ρ, :func:`tracking`), and the
probability ``P(concept | z)`` of a presence concept is calibrated there. The fitted rows'
ρ is kept beside it, so the optimism of the in-sample fit is visible rather than hidden.

:func:`rule_agreement` checks a printed rule against the measurements of the rows in its leaf:
the share of them whose *measured* value lies on the side of the cut the rule names ("P(loop) >
0.8" holds by the pixels on the leaf's images with at least one loop).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pipeline.validation import InvalidInputError

SPLITS = ("presence", "tertiles")
#: at most this many items are named in a note about a measurement (then "and N more")
NAMED_ITEMS = 5


def items_text(rows: np.ndarray, unit: str = "items") -> str:
    """``"3 items (rows 4, 17, 230)"``, or the first few of many, for notes about a measurement."""
    rows = np.asarray(rows).ravel()
    shown = ", ".join(str(int(r)) for r in rows[:NAMED_ITEMS])
    more = f" and {rows.size - NAMED_ITEMS} more" if rows.size > NAMED_ITEMS else ""
    return f"{rows.size} {unit} (row{'s' if rows.size > 1 else ''} {shown}{more})"


@dataclass(frozen=True)
class Split:
    """How one measurement becomes CAV labels: ``positive`` / ``negative`` describe the two sides
    in words; ``lo`` / ``hi`` are the values at or below / at or above which an item is a negative /
    positive (``strict``: below / above them); ``cut`` is where a printed rule's side is checked
    (presence: 0; tertiles: the median)."""

    kind: str
    lo: float
    hi: float
    strict: bool
    cut: float

    def labels(self, values: np.ndarray) -> np.ndarray:
        """1 (positive), 0 (negative) or NaN (middle third, or an undefined value), shape of ``values``."""
        v = np.asarray(values, dtype=np.float64)
        out = np.full(v.shape, np.nan)
        with np.errstate(invalid="ignore"):
            if self.kind == "presence":  # there (above 0) or not (0)
                pos, neg = v > 0, v <= 0
            else:
                pos = v > self.hi if self.strict else v >= self.hi
                neg = v < self.lo if self.strict else v <= self.lo
        out[neg] = 0.0
        out[pos] = 1.0
        return out

    def sides(self, unit: str = "") -> tuple[str, str]:
        """(positive, negative) in words, e.g. ``("value > 0", "value = 0")``."""
        u = f" {unit}" if unit else ""
        if self.kind == "presence":
            return f"above 0{u}", f"0{u}"
        op_hi, op_lo = (">", "<") if self.strict else ("≥", "≤")
        return f"{op_hi} {self.hi:.4g}{u} (top third)", f"{op_lo} {self.lo:.4g}{u} (bottom third)"


def make_split(values, kind: str) -> Split:
    """The :class:`Split` of a measurement's finite ``values`` (all the run's rows) under ``kind``
    (:data:`SPLITS`); raises :class:`InvalidInputError` when the values cannot be split (constant,
    or no item on one side)."""
    if kind not in SPLITS:
        raise InvalidInputError(f"split={kind!r} is not a split; choose one of {list(SPLITS)}.")
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    if v.size == 0:
        raise InvalidInputError("it is undefined (NaN) on every item")
    if v.min() == v.max():
        raise InvalidInputError(f"it takes one value ({v[0]:.6g}) on every item, so it separates nothing")
    if kind == "presence":
        if (v < 0).any():
            raise InvalidInputError(f"split=presence needs values >= 0 (a count or an amount), but {int((v < 0).sum())} "
                                    "values are negative; use split=tertiles")
        if not (v == 0).any():
            raise InvalidInputError("split=presence needs items where it is absent (value 0), but it is above 0 on "
                                    "every item; use split=tertiles")
        return Split("presence", 0.0, 0.0, True, 0.0)
    lo, hi = np.quantile(v, [1 / 3, 2 / 3])
    median = float(np.median(v))
    if lo < hi:
        return Split("tertiles", float(lo), float(hi), False, median)
    # most items share one value: the two sides are the values below and above it
    if not ((v < lo).any() and (v > lo).any()):
        side = "above" if (v > lo).any() else "below"
        raise InvalidInputError(f"{100 * np.mean(v == lo):.0f}% of the items take the value {lo:.6g} and the others "
                                f"all lie {side} it, so its upper and lower parts cannot both be labelled; use "
                                "split=presence if it is a count")
    return Split("tertiles", float(lo), float(hi), True, float(lo))


def fit_rows(n: int, share: float, random_state=0) -> np.ndarray:
    """A boolean mask of ``round(share * n)`` random rows (the rows the CAVs are fitted on; the
    others check them). ``share`` in (0, 1)."""
    if not 0 < share < 1:
        raise InvalidInputError(f"fit_share={share!r} must lie strictly between 0 and 1: the CAVs of measured concepts "
                                "are fitted on that share of the rows and checked on the others.")
    k = int(round(share * n))
    if n < 4 or not 0 < k < n:
        raise InvalidInputError(f"{n} rows cannot be split into rows to fit the CAVs on and rows to check them on "
                                f"(fit_share={share}); measured concepts need at least a few dozen rows.")
    mask = np.zeros(n, dtype=bool)
    mask[np.random.default_rng(random_state).choice(n, k, replace=False)] = True
    return mask


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman's ρ of the finite pairs of ``a`` and ``b`` (NaN with fewer than 3 or a constant side)."""
    from scipy import stats

    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    ok = np.isfinite(a) & np.isfinite(b)
    if ok.sum() < 3 or np.ptp(a[ok]) == 0 or np.ptp(b[ok]) == 0:
        return float("nan")
    return float(stats.spearmanr(a[ok], b[ok]).statistic)


def tracking(coordinates: np.ndarray, values: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Spearman ρ per concept between its coordinate (column of ``coordinates``, (n, M)) and its
    measurement (column of ``values``, (n, M)) on the rows ``rows`` (a mask or indices), shape (M,)."""
    X, V = np.asarray(coordinates, dtype=np.float64), np.asarray(values, dtype=np.float64)
    if X.shape != V.shape or X.ndim != 2:
        raise InvalidInputError(f"tracking needs coordinates and measurements of one shape (n, M); got {X.shape} and "
                                f"{V.shape}.")
    return np.array([spearman(X[rows, m], V[rows, m]) for m in range(X.shape[1])])


def percentile_ranks(values: np.ndarray) -> np.ndarray:
    """Each value's percentile among the finite ``values`` (0-100, ties at their mid-rank; NaN stays NaN)."""
    from scipy import stats

    v = np.asarray(values, dtype=np.float64)
    out = np.full(v.shape, np.nan)
    ok = np.isfinite(v)
    if ok.any():
        out[ok] = 100.0 * (stats.rankdata(v[ok]) - 0.5) / ok.sum()
    return out


def rule_agreement(leaf_of_row: np.ndarray, rules, X: np.ndarray, measured: dict[int, tuple[np.ndarray, str]]) -> dict:
    """Per rule (by leaf id), the measured check of each of its conditions on a measured concept.

    A condition cuts a concept's coordinate; its check asks the same of the concept's measurement
    on the leaf's rows. A presence concept: the share of them where the measurement is above 0
    (the rule keeps the upper part of the coordinate, ``P(loop) > 0.8``) or 0 (the lower part).
    Any other: the cut's percentile of the coordinate among all rows (``thickness in top 30%``)
    and the share of the leaf's rows whose measurement lies in the same percentiles of the
    measurement (the top 30% of the measured thicknesses).

    Parameters
    ----------
    leaf_of_row : ndarray of shape (n,)
        Each row's leaf.
    rules : sequence of rules
        Objects with ``leaf`` and ``intervals`` (each with ``feature``, ``low``, ``high``; ``weights``
        set on oblique tests, which are not checked), as :meth:`ExplanationTree.rules` gives.
    X : ndarray of shape (n, M)
        The concept coordinates the tree cuts.
    measured : dict of int to (ndarray of shape (n,), str)
        Per measured concept column: the rows' measured values and the split (``"presence"`` or
        ``"tertiles"``).

    Returns
    -------
    dict of int to list of dict
        Per leaf, one entry per checked condition: ``feature``, ``side`` ("high", "low" or
        "between"), ``share`` (of the leaf's rows with a measured value, the share that agrees),
        ``percentiles`` ((low, high) of the cut among all rows, None for presence concepts) and
        ``n`` (the leaf's rows with a measured value).
    """
    leaf_of_row = np.asarray(leaf_of_row)
    order = np.argsort(leaf_of_row, kind="stable")
    ids, starts = np.unique(leaf_of_row[order], return_index=True)
    bounds = dict(zip(ids.tolist(), zip(starts.tolist(), [*starts[1:].tolist(), leaf_of_row.size])))
    ranks, sorted_x = {}, {}
    out = {}
    for rule in rules:
        lo_hi = bounds.get(int(rule.leaf))
        rows = order[lo_hi[0]:lo_hi[1]] if lo_hi else np.empty(0, np.int64)
        checks = []
        for iv in rule.intervals:
            if getattr(iv, "weights", None) is not None or iv.feature not in measured:
                continue
            values, split = measured[iv.feature]
            v = np.asarray(values, dtype=np.float64)[rows]
            ok = np.isfinite(v)
            side = "between" if iv.low is not None and iv.high is not None else ("high" if iv.low is not None
                                                                                  else "low")
            entry = {"feature": int(iv.feature), "side": side, "n": int(ok.sum()), "percentiles": None}
            if split == "presence":
                present = v[ok] > 0
                entry["share"] = float(np.mean(~present if side == "low" else present)) if ok.any() else float("nan")
            else:
                f = int(iv.feature)
                if f not in ranks:
                    ranks[f] = percentile_ranks(values)
                    col = np.asarray(X[:, f], dtype=np.float64)
                    sorted_x[f] = np.sort(col[np.isfinite(col)])
                lo = 0.0 if iv.low is None else 100.0 * np.searchsorted(sorted_x[f], iv.low, "right") / sorted_x[f].size
                hi = 100.0 if iv.high is None else 100.0 * np.searchsorted(sorted_x[f], iv.high, "right") / sorted_x[f].size
                r = ranks[f][rows][ok]
                entry["percentiles"] = (lo, hi)
                entry["share"] = float(np.mean((r > lo) & (r <= hi))) if r.size else float("nan")
            checks.append(entry)
        out[int(rule.leaf)] = checks
    return out
