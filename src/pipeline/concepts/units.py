"""Readable concept units: a concept coordinate ``s = ⟨c, z⟩`` shown as a probability or a percentile.

Two monotone maps of one coordinate (and the identity, raw units):

* :class:`ProbabilityUnits`: ``P(concept | z) = σ(a·s + b)``, the CAV's own calibrated
  logistic model (Platt scaling: a regularised one-feature logistic regression of the concept
  labels on held-out CAV coordinates of the concept examples, with Platt's smoothed targets,
  :func:`calibrate`). Its decision boundary is ``s = -b / a`` (P = 0.5). Only probabilities in
  ``[0.01, 0.99]`` (:data:`PRINTABLE`) are printed: a threshold whose gap between neighbouring
  data points lies wholly in a tail prints as a percentile instead (``laced in top 36%``, the
  units' ``fallback``), since nobody pictures a probability of 2e-8.
* :class:`PercentileUnits`: the percentage of the data at or below ``s`` (the empirical
  CDF of the coordinates the tree was fitted on, ×100).

A monotone map of one coordinate does not change an axis-aligned tree's partition, so trees
are fitted on raw coordinates and only their printed thresholds are mapped
(:class:`pipeline.trees.display.RuleDisplay`). :func:`concept_units` builds one map per concept.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from decimal import Decimal
from typing import Sequence

import numpy as np

from pipeline.validation import InvalidInputError

UNITS = ("probability", "percentile", "raw")
#: printed probabilities stay inside this range; beyond it a threshold reads as a percentile
PRINTABLE = (0.01, 0.99)


class _Units:
    """What every display map declares (pipeline.trees.display): increasing, whether a step
    function's left value may be printed, the printable range and the fallback units."""

    include_low = False
    increasing = True
    printable = None
    fallback = None
    error = 0.0  # a bound on |computed − exact| of the map's values (0: computed exactly)
    saved = ()  # the numbers :meth:`to_dict` keeps (the rest is rebuilt from the run's coordinates)

    def to_dict(self) -> dict:
        """The map as JSON: its ``kind`` and the numbers in :attr:`saved`; :meth:`from_dict` of its
        class (:func:`units_from_dicts`) rebuilds it."""
        return {"kind": self.kind, **{name: getattr(self, name) for name in self.saved}}


@dataclass(frozen=True, eq=False)
class PercentileUnits(_Units):
    """``s ↦ 100 · (share of the reference values <= s)``, shown as ``name in top 12%``.

    A step function: a cut between neighbours ``lo < hi`` reads as any percentage in
    ``[F(lo), F(hi))``, hence ``include_low``. ``column`` holds the data's coordinates as given;
    they are sorted (:attr:`values`) the first time a percentile is asked for, so the fallback
    of probability units costs nothing where every cut reads as a probability.
    """

    column: np.ndarray  # the reference values (the data's coordinates), in any order
    kind = "percentile"
    include_low = True

    @property
    def values(self) -> np.ndarray:
        """The finite reference values, sorted (once, under the instance's own lock; kept on the
        instance, never pickled). Not a ``functools.cached_property``: on Python 3.11 its one lock
        per class made threads that sort different concepts' columns wait for each other."""
        v = self.__dict__.get("_sorted")
        if v is None:
            with self.__dict__.setdefault("_lock", threading.Lock()):
                v = self.__dict__.get("_sorted")
                if v is None:
                    v = np.sort(np.asarray(self.column, dtype=np.float64).ravel())
                    v = self.__dict__["_sorted"] = v[np.isfinite(v)]
        return v

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k not in ("_sorted", "_lock")}

    def __call__(self, s) -> np.ndarray:
        return 100.0 * np.searchsorted(self.values, np.asarray(s, dtype=np.float64), side="right") / self.values.size

    def condition(self, name: str, op: str, text: str) -> str:
        if op == "<=":
            return f"{name} in bottom {text}%"
        return f"{name} in top {format((Decimal(100) - Decimal(text)).normalize(), 'f')}%"

    def interval(self, name: str, low: str, high: str) -> str:
        return f"{name} in percentiles {low}–{high}"

    @classmethod
    def from_dict(cls, record: dict, column) -> "PercentileUnits":
        """The units :meth:`to_dict` described, over the coordinates ``column`` (n,)."""
        return percentile_units(column)


@dataclass(frozen=True)
class ProbabilityUnits(_Units):
    """``s ↦ σ(slope·s + intercept)``, shown as ``P(name)``.

    A printed threshold stays in ``printable`` (``[0.01, 0.99]``); where the gap between a cut's
    neighbouring data points maps wholly outside it, the cut prints in ``fallback`` units (the
    data's percentiles when known, else the raw coordinate).
    """

    slope: float
    intercept: float
    fallback: PercentileUnits | None = None
    kind = "probability"
    printable = PRINTABLE
    saved = ("slope", "intercept")  # the fallback: percentiles of the run's coordinates

    @property
    def increasing(self) -> bool:
        return self.slope > 0

    @property
    def error(self) -> float:
        """A bound on the rounding error of a computed P near the printable range.

        There ``|slope·s + intercept| <= 6``, so ``|slope·s| <= |intercept| + 6``; the argument is
        off by a few ulps of those terms, σ' <= 1/4, and σ itself adds a few ulps. A printed
        threshold keeps twice this distance from its mapped neighbours: rounding never sends a
        point across it, even where the computed map is not strictly monotone (steps of 1e-12
        in ``s`` under a slope of 1e-3 move P by less than an ulp)."""
        eps = float(np.finfo(np.float64).eps)
        return 0.25 * 4 * eps * (2 * abs(self.intercept) + 12) + 8 * eps

    @property
    def boundary(self) -> float:
        """The raw coordinate where P = 0.5."""
        return -self.intercept / self.slope

    def __call__(self, s) -> np.ndarray:
        return _sigmoid(self.slope * np.asarray(s, dtype=np.float64) + self.intercept)

    def condition(self, name: str, op: str, text: str) -> str:
        return f"P({name}) {op} {text}"

    def interval(self, name: str, low: str, high: str) -> str:
        return f"{low} < P({name}) <= {high}"

    @classmethod
    def from_dict(cls, record: dict, column) -> "ProbabilityUnits":
        """The units :meth:`to_dict` described, their percentile fallback over the coordinates ``column``."""
        return cls(float(record["slope"]), float(record["intercept"]), percentile_units(column))


@dataclass(frozen=True)
class OriginalUnits(_Units):
    """A standardised column ``z = (x - mean) / sd`` shown in its own units ``x`` (``alcohol <= 13.05``).

    Exact: the training points' z-values map back to their own raw values (``z`` and ``x``, sorted
    alike, as given); any other value maps through ``mean + sd · z``. Built by
    :func:`original_units`.
    """

    z: np.ndarray  # sorted standardised values of the training points
    x: np.ndarray  # their raw values, in the same order
    mean: float
    sd: float
    kind = "original"
    saved = ("mean", "sd")  # the training points' own values are not kept

    def __call__(self, s) -> np.ndarray:
        s = np.asarray(s, dtype=np.float64)
        i = np.clip(np.searchsorted(self.z, s), 0, self.z.size - 1)
        return np.where(self.z[i] == s, self.x[i], self.mean + self.sd * s)

    def condition(self, name: str, op: str, text: str) -> str:
        return f"{name} {op} {text}"

    def interval(self, name: str, low: str, high: str) -> str:
        return f"{low} < {name} <= {high}"

    @classmethod
    def from_dict(cls, record: dict, column=None) -> "OriginalUnits":
        """The units :meth:`to_dict` described: new values map through ``mean + sd · z`` (no training
        point to match)."""
        return cls(np.array([np.nan]), np.array([np.nan]), float(record["mean"]), float(record["sd"]))


def units_to_dicts(units: list | None) -> list | None:
    """One record per column of display maps (``to_dict``; ``{"kind": "raw"}`` for a column that reads
    as it is), as JSON; None for raw units."""
    if units is None:
        return None
    return [{"kind": "raw"} if u is None else u.to_dict() for u in units]


def units_from_dicts(records: list | None, X) -> list | None:
    """The display maps :func:`units_to_dicts` described, rebuilt over the coordinates ``X`` (n, M)
    (the reference values of percentiles); a kind no class has reads as percentiles."""
    if records is None:
        return None
    classes = {cls.kind: cls for cls in (PercentileUnits, ProbabilityUnits, OriginalUnits)}
    return [None if r["kind"] == "raw" else classes.get(r["kind"], PercentileUnits).from_dict(r, X[:, m])
            for m, r in enumerate(records)]


def original_units(Z, X, record: dict) -> list:
    """One :class:`OriginalUnits` per standardised column of ``Z`` (n, d) whose raw values are
    ``X`` (n, d), from the standardisation ``record`` (``mean``, ``sd``, ``scaled`` lists); None for
    a column kept unscaled (it already reads in its own units)."""
    Z, X = np.asarray(Z, dtype=np.float64), np.asarray(X, dtype=np.float64)
    out = []
    for j, scaled in enumerate(record["scaled"]):
        order = np.argsort(Z[:, j], kind="stable")
        z, x = Z[order, j], X[order, j]
        # a z-value shared by distinct raw values (rounded together) has no one raw value to print
        # exactly: such a column reads in z-scores
        if not scaled or np.unique(z).size != np.unique(np.column_stack([z, x]), axis=0).shape[0]:
            out.append(None)
            continue
        out.append(OriginalUnits(z, x, float(record["mean"][j]), float(record["sd"][j])))
    return out


def _sigmoid(x: np.ndarray) -> np.ndarray:
    out = np.empty_like(x, dtype=np.float64)
    pos = x >= 0
    out[pos] = 1.0 / (1.0 + np.exp(-x[pos]))
    e = np.exp(x[~pos])
    out[~pos] = e / (1.0 + e)
    return out


def calibrate(coords, labels, C: float = 1.0) -> tuple[float, float]:
    """Platt scaling: ``(slope, intercept)`` of ``P(y = 1 | s) = σ(slope·s + intercept)`` fitted to
    binary ``labels`` (1 / 0; other values are ignored) on ``coords`` (shape (n,)).

    Platt (1999)'s recipe: smoothed targets ``(N₊ + 1) / (N₊ + 2)`` and ``1 / (N₋ + 2)`` instead of
    1 and 0, so separable examples give a finite slope, plus an L2 penalty ``‖a‖² / (2C)`` on the
    slope of the standardised coordinate. Pass *held-out* coordinates (as
    :meth:`pipeline.concepts.cav.CAVFitter.calibration` does): on the examples the CAV was fitted
    on, the classes are over-separated and the probabilities saturate. Newton's method on the
    two parameters (the problem is strictly convex).
    """
    s = np.asarray(coords, dtype=np.float64).ravel()
    y = np.asarray(labels, dtype=np.float64).ravel()
    used = np.isin(y, (0.0, 1.0)) & np.isfinite(s)
    s, y = s[used], y[used]
    n_pos, n_neg = int((y == 1).sum()), int((y == 0).sum())
    if s.size < 2 or n_pos == 0 or n_neg == 0:
        return float("nan"), float("nan")
    centre, scale = s.mean(), s.std()
    if not scale > 0:
        return float("nan"), float("nan")
    x = (s - centre) / scale
    t = np.where(y == 1, (n_pos + 1.0) / (n_pos + 2.0), 1.0 / (n_neg + 2.0))
    a, b, lam = 0.0, float(np.log((n_pos + 1.0) / (n_neg + 1.0))), 1.0 / float(C)
    for _ in range(100):
        p = _sigmoid(a * x + b)
        r, w = p - t, np.maximum(p * (1 - p), 1e-12)
        g = np.array([r @ x + lam * a, r.sum()])
        H = np.array([[w @ (x * x) + lam, w @ x], [w @ x, w.sum()]])
        step = np.linalg.solve(H, g)
        step *= min(1.0, 5.0 / max(np.abs(step).max(), 1e-300))  # damped: no overshoot from a flat start
        a, b = a - step[0], b - step[1]
        if np.abs(step).max() < 1e-10:
            break
    return float(a / scale), float(b - a * centre / scale)


def expected_calibration_error(probabilities, labels, n_bins: int = 10) -> float:
    """Expected calibration error of predicted probabilities against 0/1 labels: the size-weighted
    mean, over ``n_bins`` equal-width bins of the probability, of ``|mean label - mean probability|``
    (NaN without labelled rows)."""
    p = np.asarray(probabilities, dtype=np.float64).ravel()
    y = np.asarray(labels, dtype=np.float64).ravel()
    ok = np.isfinite(p) & np.isin(y, (0.0, 1.0))
    p, y = p[ok], y[ok]
    if p.size == 0:
        return float("nan")
    bins = np.minimum((p * n_bins).astype(np.int64), n_bins - 1)
    total = 0.0
    for b in np.unique(bins):
        sel = bins == b
        total += sel.sum() * abs(y[sel].mean() - p[sel].mean())
    return float(total / p.size)


def percentile_units(values, name: str = "concept", finite: int | None = None) -> PercentileUnits:
    """Percentile units over the coordinates ``values`` (shape (n,)); at least 2 finite values.
    ``finite``: how many, when known (:func:`column_ranges`), so they are not counted again."""
    v = np.asarray(values, dtype=np.float64).reshape(-1)  # a column of the coordinates stays a view, not a copy
    finite = int(np.isfinite(v).sum()) if finite is None else int(finite)
    if finite < 2:
        raise InvalidInputError(
            f"percentile units for {name!r} need at least 2 data points to rank against, got {finite}. Use "
            "concepts.units=raw (or probability with a calibrated CAV fitter) for such small data.")
    return PercentileUnits(v)


def column_ranges(X, block_rows: int = 262_144) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(count, smallest, largest)`` of the finite values in each column of ``X`` (n, M); NaN
    where a column has none. ``X`` is read row-wise, a block of rows at a time: one column of a
    C-ordered array read on its own touches the memory of every row (10M x 20 coordinates: each
    column scan costs as much as reading all of them)."""
    X = np.asarray(X)
    n, m = X.shape
    count, lo, hi = np.zeros(m, np.int64), np.full(m, np.inf), np.full(m, -np.inf)
    for i in range(0, n, block_rows):
        b = np.asarray(X[i:i + block_rows], dtype=np.float64)
        with np.errstate(over="ignore", invalid="ignore"):
            finite = bool(np.isfinite(b.sum()))
        if finite:
            count += b.shape[0]
            np.minimum(lo, b.min(axis=0), out=lo)
            np.maximum(hi, b.max(axis=0), out=hi)
        else:
            ok = np.isfinite(b)
            count += ok.sum(axis=0)
            np.minimum(lo, np.where(ok, b, np.inf).min(axis=0), out=lo)
            np.maximum(hi, np.where(ok, b, -np.inf).max(axis=0), out=hi)
    lo[count == 0] = np.nan
    hi[count == 0] = np.nan
    return count, lo, hi


def probability_units(slope: float, intercept: float, values=None, name: str = "concept",
                      value_range: tuple[int, float, float] | None = None) -> ProbabilityUnits:
    """Probability units from a calibration ``(slope, intercept)``; ``values`` (the data's
    coordinates), when given, must not all map to the same probability, and are the percentiles
    a threshold in a tail is printed in. ``value_range``: ``values``' ``(count, smallest,
    largest)`` finite values when known (:func:`column_ranges`), so they are not scanned again."""
    if not (np.isfinite(slope) and np.isfinite(intercept)) or slope == 0:
        raise InvalidInputError(
            f"concept {name!r} has no usable calibration (slope={slope}, intercept={intercept}): its calibrated "
            "probability P(concept | z) is constant, so P(...) thresholds would say nothing. The concept examples "
            "do not separate along its CAV (or it was fitted without binary labels). Use concepts.units=percentile "
            "(or raw), or drop the concept from the concept set.")
    if values is None:
        return ProbabilityUnits(float(slope), float(intercept), None)
    v = np.asarray(values, dtype=np.float64).reshape(-1)  # a column of the coordinates stays a view, not a copy
    count, lo, hi = value_range if value_range is not None else (c[0] for c in column_ranges(v[:, None]))
    units = ProbabilityUnits(float(slope), float(intercept), PercentileUnits(v) if count >= 2 else None)
    # σ is monotone: every point has the same P exactly when the smallest and largest coordinates do
    p = units(np.array([lo, hi])) if count else np.empty(0)
    if p.size and p.max() == p.min():
        raise InvalidInputError(
            f"concept {name!r}: its calibrated probability P(concept | z) is the same ({p[0]:.3g}) for every "
            "data point, so P(...) thresholds cannot separate anything. Use concepts.units=percentile (or raw), "
            "or drop the concept.")
    return units


def concept_units(kind: str, X, names: Sequence[str], calibration=None) -> list | None:
    """One display map per column of the concept coordinates ``X`` (n, M), or None for raw.

    Parameters
    ----------
    kind : {"probability", "percentile", "raw"}
    X : array-like of shape (n_samples, n_concepts)
        The coordinates the trees are fitted on (percentile reference; probability check).
    names : sequence of str
    calibration : array-like of shape (n_concepts, 2), optional
        ``(slope, intercept)`` per concept; required for ``probability``.
    """
    if kind not in UNITS:
        raise InvalidInputError(f"concepts.units={kind!r} is not a unit; choose one of {list(UNITS)}.")
    if kind == "raw":
        return None
    X = np.asarray(X, dtype=np.float64)
    count, lo, hi = column_ranges(X)
    if kind == "percentile":
        return [percentile_units(X[:, m], names[m], count[m]) for m in range(X.shape[1])]
    if calibration is None:
        raise InvalidInputError(
            "concepts.units=probability needs the CAVs' calibrated classifiers, but these concepts have none "
            "(discovered concepts, or a CAV fitter without probabilities). Use concepts.units=percentile or raw, "
            "or cav=logistic.")
    cal = np.asarray(calibration, dtype=np.float64)
    return [probability_units(cal[m, 0], cal[m, 1], X[:, m], names[m], (count[m], lo[m], hi[m]))
            for m in range(X.shape[1])]


def boundary_in_units(units, boundary: float) -> float:
    """A raw decision boundary ``s`` shown in ``units`` (None: raw)."""
    return float(boundary) if units is None else float(units(np.array([boundary]))[0])
