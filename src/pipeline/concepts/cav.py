"""Concept activation vectors (CAVs): fitting, stability, significance, projection.

Kim et al. (2018), "Interpretability beyond feature attribution: TCAV", fit for each
concept m a linear classifier ``z ↦ sign(⟨c_m, z⟩ + b)`` between latents of inputs that
show the concept and inputs that do not; ``c_m`` is the CAV. The MMDT paper (Eq. 4) then
maps latents to concept coordinates ``z ↦ C z`` with the unit CAVs as the rows of C.

Sign convention (tested): a CAV points towards the concept, so a larger concept
coordinate ``⟨c_m, z⟩`` means "more of concept m": for binary concepts positives project
higher than negatives, for continuous concepts the coordinate grows with the label.

Following the TCAV recipe each concept is fitted ``n_repeats`` times, each time on a
fresh random draw of positives and negatives; the CAV is the normalised mean of the
repeat directions, their angular spread is reported, and the held-out accuracy of the
concept repeats is compared with that of random-split CAVs (same examples, permuted
labels) by a one-sided Welch t-test, Bonferroni-corrected over concepts. Concepts that
are not linearly present in the latent space come out with ``significant_ = False``.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from numbers import Integral, Real
from typing import Sequence

import numpy as np
from scipy import stats
from sklearn.base import BaseEstimator
from sklearn.model_selection import KFold, StratifiedKFold
from sklearn.utils._param_validation import Interval
from sklearn.utils.validation import check_is_fitted
from pipeline.progress import tqdm

from pipeline.concepts.fitters import Fitter, LogisticFitter, build_fitter
from pipeline.concepts.projection import drop_duplicate_cavs, project
from pipeline.threads import blas_threads, current_threads
from pipeline.validation import InvalidInputError, check_matrix, check_n_features

log = logging.getLogger(__name__)


def _float32_columns(Z: np.ndarray):
    """(Z as float32, per-column scale or None). Latents beyond float32's comfortable range
    (max |z| above 2**60 or below 2**-60, e.g. near 1e300 or 1e-300) are divided by a power of
    two first (exact), so they neither overflow to inf nor flush to zero: one for all columns
    when their magnitudes lie within 2**100 of each other (any fitter's direction is then
    unchanged), else one per column that float32 cannot hold (above 2**60 or below 2**-120),
    and a direction ``w`` fitted on those is the classifier weight vector ``w / scale`` on the
    original columns."""
    top = np.abs(Z).max(axis=0)
    extreme = (top > 2.0**60) | ((top < 2.0**-60) & (top > 0))
    if not extreme.any():
        return Z.astype(np.float32), None
    exps = np.minimum(np.frexp(top)[1], 1023)
    used = top > 0
    if exps[used].max() - exps[used].min() < 100:  # one power of two fits all: every fitter's direction
        exps = np.full_like(exps, exps[used].max())  # is then the same up to a positive factor
    else:  # columns 2**100 apart: each its own (a direction is read as a classifier's weights), but
        # only the columns float32 cannot hold (above 2**60, or below 2**-120 where it flushes to zero):
        # a near-zero column that float32 holds (e.g. SBERT's dead dimensions at ~1e-33) stays as it is;
        # scaling it up would hand a column of rounding noise the largest weight.
        rescue = (top > 2.0**60) | ((top < 2.0**-120) & (top > 0))
        if not rescue.any():
            return Z.astype(np.float32), None
        exps = np.where(rescue, exps, 0)
    scale = np.ldexp(1.0, exps)
    return (Z / scale).astype(np.float32), scale


def _unscaled_direction(w: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """A positive multiple of ``w / scale`` (power-of-two ``scale``) with largest entry in [0.5, 1):
    done on the exponents, so columns 2**±1000 apart neither overflow nor leave a zero norm."""
    mant, exp = np.frexp(w)
    exp = exp - (np.frexp(scale)[1] - 1)
    nonzero = mant != 0
    if not nonzero.any():
        return w
    return np.ldexp(mant, exp - exp[nonzero].max())


class CAVFitter(BaseEstimator):
    """Fit one unit CAV per concept, with repeat spread and a significance test.

    Parameters
    ----------
    fitter : Fitter subclass, instance or dotted path, default=LogisticFitter
        ``LogisticFitter``, ``LinearSVMFitter``, ``SGDFitter``, ``MeanDifferenceFitter`` or
        ``LinearRegressionFitter`` (continuous concepts) of :mod:`pipeline.concepts.fitters`,
        any other :class:`~pipeline.concepts.fitters.Fitter`, or its dotted import path.
    fitter_params : dict, optional
        Keyword arguments for a fitter given as a class or path.
    n_repeats : int, default=5
        Fits per concept, each on a different random draw of positives and negatives.
    max_per_class : int, default=1000
        At most this many positives and as many negatives per repeat (continuous
        concepts: at most ``2 * max_per_class`` labelled rows), so large latent sets
        (50k × 100 concepts) cost the same as small ones.
    subsample : float, default=0.8
        Fraction of the smaller class drawn per repeat (below 1 so repeats differ).
    cv : int, default=3
        Folds of the held-out accuracy in every repeat (0 disables it and the test).
    min_positives : int, default=10
        Concepts with fewer positives (or fewer negatives) are dropped with a log line.
    alpha : float, default=0.05
        Family-wise level of the significance test (Bonferroni over concepts).
    duplicate_tol : float, default=1e-3
        CAVs with ``|cos| > 1 - duplicate_tol`` to an earlier CAV are dropped as duplicates.
        A concept whose labels equal or complement an earlier concept's (binary concepts:
        every example positive for one is negative for the other and vice versa, e.g.
        curvature vs vertical_line in mnist_geometric) is dropped before fitting: its CAV
        would be the same direction or its reverse, so it adds no independent cut.
    standardize : bool or None, default=None
        Fit each repeat on standardised inputs (zero mean, unit variance per feature) and map
        the direction back (``w / sd``), or on the inputs as they are. None: the fitter's
        default (True for logistic / SVM / SGD, whose solvers and L2 penalty depend on the
        feature scales; False for mean_difference / linear_regression). The cut it defines
        is the same kind of rule either way, but the *direction* differs when features have
        very different scales: standardising puts the L2 penalty on every feature equally,
        so near-constant features (edge pixels of raw images) can receive large weights;
        unstandardised, the direction is the plain classifier's (what captum's TCAV
        returns), usually better to read, sometimes slightly less accurate. See
        docs/concepts.md, "Standardisation".
    random_state : int, optional
    progress : bool, default=False
        Show a tqdm bar over concepts.

    Attributes
    ----------
    cavs_ : ndarray of shape (n_concepts, n_features)
        Unit CAVs of the kept concepts (rows of C).
    concept_names_ : list of str
    scores_ : ndarray of shape (n_concepts, n_repeats)
        Held-out accuracy (R² for continuous fitters) of every repeat; NaN if ``cv=0``.
    random_scores_ : ndarray of shape (n_concepts, n_repeats)
        The same for random-split CAVs.
    score_mean_, score_ci_ : ndarray of shape (n_concepts,), (n_concepts, 2)
        Mean held-out score and its 95% t-interval over repeats.
    p_values_ : ndarray of shape (n_concepts,)
        Bonferroni-adjusted p-values of "concept beats random split" (NaN when the test
        is skipped: ``cv=0`` or ``n_repeats < 3``).
    significant_ : ndarray of bool, shape (n_concepts,)
        ``p_values_ < alpha`` (all True when the test is skipped).
    spread_deg_ : ndarray of shape (n_concepts,)
        Mean angle (degrees) between the repeat directions and the final CAV.
    n_positives_, n_negatives_ : ndarray of int, shape (n_concepts,)
    dropped_ : dict of str -> str
        Concepts that were dropped and why.
    """

    _parameter_constraints = {
        "fitter": [str, Fitter, type],
        "fitter_params": [dict, None],
        "n_repeats": [Interval(Integral, 1, None, closed="left")],
        "max_per_class": [Interval(Integral, 1, None, closed="left")],
        "subsample": [Interval(Real, 0, 1, closed="right")],
        "cv": [Interval(Integral, 0, None, closed="left")],
        "min_positives": [Interval(Integral, 1, None, closed="left")],
        "alpha": [Interval(Real, 0, 1, closed="neither")],
        "duplicate_tol": [Interval(Real, 0, 1, closed="left")],
        "random_state": ["random_state"],
        "progress": ["boolean"],
        "standardize": ["boolean", None],
    }

    def __init__(self, fitter=LogisticFitter, fitter_params=None, n_repeats: int = 5, max_per_class: int = 1000,
                 subsample: float = 0.8, cv: int = 3, min_positives: int = 10, alpha: float = 0.05,
                 duplicate_tol: float = 1e-3, random_state=None, progress: bool = False,
                 standardize: bool | None = None):
        self.fitter = fitter
        self.fitter_params = fitter_params
        self.n_repeats = n_repeats
        self.max_per_class = max_per_class
        self.subsample = subsample
        self.cv = cv
        self.min_positives = min_positives
        self.alpha = alpha
        self.duplicate_tol = duplicate_tol
        self.random_state = random_state
        self.progress = progress
        self.standardize = standardize

    # ------------------------------------------------------------------ fit
    def fit(self, Z, labels, concept_names: Sequence[str] | None = None) -> "CAVFitter":
        """Fit the CAVs.

        Parameters
        ----------
        Z : array-like of shape (n_examples, n_features)
            Latents of the concept examples (from the same encoder as the data).
        labels : array-like of shape (n_examples, n_concepts)
            Binary fitters: 1 = concept present, 0 = absent, -1 or NaN = not an example
            of this concept. Continuous fitters: real values, NaN = unlabelled.
        concept_names : sequence of str, optional
            Defaults to ``concept_0, concept_1, ...``.
        """
        self._validate_params()
        self._check_params()
        fitter = build_fitter(self.fitter, **(self.fitter_params or {}))
        fitter.validate_params()
        Z, self._column_scale = _float32_columns(check_matrix(Z, "Z", min_rows=2))
        labels = self._check_labels(labels, Z.shape[0])
        names = self._check_names(concept_names, labels.shape[1])
        rng = np.random.default_rng(self.random_state)
        self.n_features_in_ = Z.shape[1]

        plans, kept, self.dropped_ = [], [], {}
        for m in range(labels.shape[1]):  # every random draw first, in one fixed order
            reason = (self._unusable(labels[:, m], fitter.continuous)
                      or _same_examples(labels, m, kept, names, binary=not fitter.continuous))
            if reason:
                log.warning("dropping concept %r: %s", names[m], reason)
                self.dropped_[names[m]] = reason
                continue
            plans.append(self._plan(fitter, labels[:, m], rng))
            kept.append(m)
        # Thousands of small fits: BLAS/OpenMP threads only add overhead (10x on a busy machine);
        # the concepts are shared among threads instead (each fit has its draws: same result for any count)
        with blas_threads(1):
            fit = lambda m, plan: self._fit_one(fitter, Z, labels[:, m], plan)  # noqa: E731
            n = min(current_threads(), len(plans))
            bar = tqdm(total=len(plans), desc="CAVs", disable=not self.progress)
            with bar, ThreadPoolExecutor(max_workers=max(n, 1)) as pool:
                rows = []
                for row in (pool.map(fit, kept, plans) if n > 1 else map(fit, kept, plans)):
                    rows.append(row)
                    bar.update()
        if not kept:
            raise InvalidInputError(
                f"no concept could be fitted; reasons: {self.dropped_}. Provide more positive and negative "
                f"examples per concept or lower min_positives (now {self.min_positives})."
            )
        cavs = np.stack([r["cav"] for r in rows])
        keep = drop_duplicate_cavs(cavs, [names[m] for m in kept], tol=self.duplicate_tol, dropped=self.dropped_)
        rows = [rows[i] for i in keep]
        self.cavs_ = cavs[keep]
        self.concept_names_ = [names[kept[i]] for i in keep]
        self._collect(rows)
        return self

    def _check_params(self) -> None:
        """What ``_parameter_constraints`` cannot say."""
        if self.cv == 1:
            raise InvalidInputError(f"cv must be 0 (no held-out score) or >= 2, got {self.cv}.")

    @staticmethod
    def _check_labels(labels, n_rows: int) -> np.ndarray:
        try:
            arr = np.asarray(labels, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise InvalidInputError(f"concept labels must be numeric (1/0/-1 or real values): {exc}") from None
        if arr.ndim == 1:
            arr = arr[:, None]
        if arr.ndim != 2 or arr.shape[0] != n_rows:
            raise InvalidInputError(
                f"concept labels must have shape (n_examples={n_rows}, n_concepts), got {arr.shape}; "
                "one column per concept, one row per latent."
            )
        if np.isinf(arr).any():
            raise InvalidInputError("concept labels contain infinite values; use NaN or -1 for 'not labelled'.")
        return arr

    @staticmethod
    def _check_names(names, n_concepts: int) -> list[str]:
        if names is None:
            return [f"concept_{m}" for m in range(n_concepts)]
        names = [str(n) for n in names]
        if len(names) != n_concepts:
            raise InvalidInputError(f"got {len(names)} concept names for {n_concepts} label columns.")
        if len(set(names)) != len(names):
            raise InvalidInputError(f"concept names must be unique, got {names}.")
        return names

    def _unusable(self, y: np.ndarray, continuous: bool) -> str | None:
        lab = y[np.isfinite(y)]
        if continuous:
            if lab.size < 2 * self.min_positives:
                return f"only {lab.size} labelled examples (need {2 * self.min_positives})"
            return "the concept value is constant" if np.ptp(lab) == 0 else None
        bad = ~np.isin(lab, (-1.0, 0.0, 1.0))
        if bad.any():
            raise InvalidInputError(
                f"binary concept labels must be 1 (present), 0 (absent) or -1/NaN (unused), got {np.unique(lab[bad])[:5]}; "
                "use fitter=LinearRegressionFitter for continuous concepts."
            )
        n_pos, n_neg = int((lab == 1).sum()), int((lab == 0).sum())
        if n_neg == 0:
            return f"all {n_pos} labelled examples are positive (no negatives)"
        if n_pos == 0:
            return f"all {n_neg} labelled examples are negative (no positives)"
        if min(n_pos, n_neg) < self.min_positives:
            return f"{n_pos} positives / {n_neg} negatives, fewer than min_positives={self.min_positives}"
        return None

    def _draw(self, y: np.ndarray, continuous: bool, rng) -> np.ndarray:
        """Row indices of one repeat: balanced positives/negatives (or labelled rows)."""
        if continuous:
            idx = np.flatnonzero(np.isfinite(y))
            n = min(2 * self.max_per_class, max(2, int(self.subsample * idx.size)))
            return rng.choice(idx, size=n, replace=False)
        pos, neg = np.flatnonzero(y == 1), np.flatnonzero(y == 0)
        n = min(self.max_per_class, max(1, int(self.subsample * min(pos.size, neg.size))))
        return np.concatenate([rng.choice(pos, size=n, replace=False), rng.choice(neg, size=n, replace=False)])

    def _heldout(self, fitter, Zs, ys, seed: int) -> float:
        """Mean held-out score over ``cv`` folds (NaN when cv=0 or too few rows)."""
        k = int(self.cv)
        too_few = ys.size < 2 * k if fitter.continuous else np.bincount(ys.astype(int), minlength=2).min() < k
        if k == 0 or too_few:
            return float("nan")
        splitter = (KFold if fitter.continuous else StratifiedKFold)(k, shuffle=True, random_state=seed)
        out = []
        for tr, te in splitter.split(Zs, ys):
            w = fitter.direction(Zs[tr], ys[tr], seed)
            out.append(fitter.score(w, Zs[tr], ys[tr], Zs[te], ys[te]))
        return float(np.mean(out))

    def _plan(self, fitter, y, rng) -> list[tuple]:
        """The random draws of one concept's repeats: (rows, seed, permuted labels) each, in the
        order the repeats have always drawn them."""
        plan = []
        for _ in range(int(self.n_repeats)):
            idx = self._draw(y, fitter.continuous, rng)
            seed = int(rng.integers(2**31 - 1))
            plan.append((idx, seed, rng.permutation(y[idx])))
        return plan

    def _fit_one(self, fitter, Z, y, plan) -> dict:
        dirs, scores, random_scores = [], [], []
        for idx, seed, permuted in plan:
            Zs, ys = Z[idx].astype(np.float64), y[idx]
            standardize = fitter.standardize if self.standardize is None else bool(self.standardize)
            if standardize:  # w·((z - m) / sd) = (w / sd)·z - const: same rule, scaled direction
                scale = Zs.std(axis=0)
                scale[scale == 0] = 1.0
                Zs = (Zs - Zs.mean(axis=0)) / scale
            w = np.asarray(fitter.direction(Zs, ys, seed), dtype=np.float64)
            if standardize:
                w = w / scale
            if self._column_scale is not None:  # the direction on the unscaled columns
                w = _unscaled_direction(w, self._column_scale)
            norm = np.linalg.norm(w)
            dirs.append(w / norm if norm > 0 else w)
            scores.append(self._heldout(fitter, Zs, ys, seed))
            random_scores.append(self._heldout(fitter, Zs, permuted, seed))
        dirs = np.stack(dirs)
        mean = dirs.mean(axis=0)
        norm = np.linalg.norm(mean)
        cav = mean / norm if norm > 0 else dirs[0]
        spread = np.degrees(np.arccos(np.clip(dirs @ cav, -1, 1))).mean()
        lab = y[np.isfinite(y)]
        return dict(cav=cav, scores=scores, random_scores=random_scores, spread=spread,
                    n_pos=int((lab == 1).sum()) if not fitter.continuous else lab.size,
                    n_neg=int((lab == 0).sum()) if not fitter.continuous else 0)

    def _collect(self, rows: list[dict]) -> None:
        self.scores_ = np.array([r["scores"] for r in rows], dtype=float)
        self.random_scores_ = np.array([r["random_scores"] for r in rows], dtype=float)
        self.spread_deg_ = np.array([r["spread"] for r in rows])
        self.n_positives_ = np.array([r["n_pos"] for r in rows])
        self.n_negatives_ = np.array([r["n_neg"] for r in rows])
        self.score_mean_ = self.scores_.mean(axis=1)
        R = self.scores_.shape[1]
        half = stats.t.ppf(0.975, R - 1) * self.scores_.std(axis=1, ddof=1) / np.sqrt(R) if R > 1 else np.nan
        self.score_ci_ = np.column_stack([self.score_mean_ - half, self.score_mean_ + half])
        if int(self.cv) == 0 or R < 3:  # a t-test on 2 vs 2 scores has next to no power
            log.info("CAV significance test skipped (needs cv >= 2 and n_repeats >= 3)")
            self.p_values_ = np.full(len(rows), np.nan)
            self.significant_ = np.ones(len(rows), dtype=bool)
            return
        p = np.array([_greater_p(a, b) for a, b in zip(self.scores_, self.random_scores_)])
        self.p_values_ = np.minimum(1.0, p * len(rows))
        self.significant_ = self.p_values_ < self.alpha
        for name, ok, s in zip(self.concept_names_, self.significant_, self.score_mean_):
            if not ok:
                log.warning("concept %r is not linearly present (held-out score %.3f does not beat "
                            "random-split CAVs at alpha=%g)", name, s, self.alpha)

    # ------------------------------------------------------------- use
    def project(self, Z) -> np.ndarray:
        """Concept coordinates ``Z Cᵀ`` (Eq. 4), shape (n_samples, n_concepts)."""
        check_is_fitted(self, "cavs_")
        return project(Z, self.cavs_)

    def summary(self) -> list[dict]:
        """One row per kept concept: name, score mean ± CI, random score, p, spread, counts."""
        check_is_fitted(self, "cavs_")
        return [
            dict(concept=n, score=float(self.score_mean_[m]), ci_low=float(self.score_ci_[m, 0]),
                 ci_high=float(self.score_ci_[m, 1]), random_score=float(np.mean(self.random_scores_[m])),
                 p_value=float(self.p_values_[m]), significant=bool(self.significant_[m]),
                 spread_deg=float(self.spread_deg_[m]), n_positives=int(self.n_positives_[m]),
                 n_negatives=int(self.n_negatives_[m]))
            for m, n in enumerate(self.concept_names_)
        ]


def _same_examples(labels: np.ndarray, m: int, kept: list[int], names, binary: bool = True) -> str | None:
    """Reason to drop column m if it labels the examples like a kept concept, or as its
    exact complement (binary labels: 1 where the other has 0 and 0 where it has 1)."""
    col = labels[:, m]
    for j in kept:
        if np.array_equal(col, labels[:, j], equal_nan=True):
            return f"duplicates the CAV of {names[j]!r} (identical concept labels)"
        if not binary:
            continue
        other = labels[:, j]
        used = np.isin(col, (0.0, 1.0)) & np.isin(other, (0.0, 1.0))
        same_rows = np.array_equal(np.isin(col, (0.0, 1.0)), np.isin(other, (0.0, 1.0)))
        if same_rows and used.any() and np.all(col[used] == 1.0 - other[used]):
            return (f"is the complement of {names[j]!r} (positives and negatives swapped), so its CAV would be "
                    f"the reverse of the {names[j]!r} CAV and give no independent cut")
    return None


def _greater_p(a: np.ndarray, b: np.ndarray) -> float:
    """One-sided Welch p-value of mean(a) > mean(b); NaN scores give p = 1."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    if np.isnan(a).any() or np.isnan(b).any() or a.size < 2:
        return 1.0
    if max(a.std(), b.std()) < 1e-9:  # (near-)constant scores: the t statistic is meaningless
        return 0.0 if a.mean() > b.mean() + 1e-9 else 1.0
    return float(stats.ttest_ind(a, b, equal_var=False, alternative="greater").pvalue)
