"""Concept activation vectors (CAVs): fitting, stability, held-out accuracy, projection.

Kim et al. (2018), "Interpretability beyond feature attribution: TCAV", fit for each
concept m a linear classifier ``z ↦ sign(⟨c_m, z⟩ + b)`` between latents of inputs that
show the concept and inputs that do not; ``c_m`` is the CAV. The MMDT paper (Eq. 4) then
maps latents to concept coordinates ``z ↦ C z`` with the unit CAVs as the rows of C.

Sign convention (tested): a CAV points towards the concept, so a larger concept
coordinate ``⟨c_m, z⟩`` means "more of concept m": for binary concepts positives project
higher than negatives, for continuous concepts the coordinate grows with the label.

Following the TCAV recipe each concept is fitted ``n_repeats`` times, each time on a
fresh random draw of positives and negatives; the CAV is the normalised mean of the
repeat directions, their angular spread is reported, and so is the held-out accuracy of one
cut along each repeat's direction, with a Wilson score interval on the held-out predictions
(always inside [0, 1]; :meth:`CAVFitter.test_line` states it in one line for the tables). The
accuracy says how separable the concept's examples are, not whether the concept bears on what
is explained: that is TCAV's test against random example sets (:mod:`pipeline.concepts.tcav`),
which needs the model head. :meth:`CAVFitter.directions` fits further CAVs (the test's random
ones) exactly as the concepts' own.

Two concepts are duplicates when they *are* the same concept: the same examples (compared by
their latent rows) with the same labels, or with positives and negatives swapped. CAVs of
different example sets are kept even when their directions nearly coincide (e.g. after a
degenerate standardisation of a few examples); such pairs are listed in ``similar_``.
"""

from __future__ import annotations

import logging
import warnings
from numbers import Integral, Real
from typing import Sequence

import numpy as np
from scipy import stats
from sklearn.base import BaseEstimator
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import KFold, StratifiedKFold
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted

from pipeline.concepts.batched_logistic import fit_logistic_batch, standardize_shrinkage  # noqa: F401 (re-exported)
from pipeline.concepts.fitters import Fitter, LogisticFitter, build_fitter
from pipeline.concepts.projection import project, similar_cavs
from pipeline.progress import tqdm
from pipeline.threads import blas_threads, current_threads, map_shared
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


#: label_blocks groups rows by which concepts label them only when there are at most this many groups
MAX_BLOCKS = 64


def label_blocks(labels: np.ndarray) -> np.ndarray | None:
    """One block per pattern of which concepts label a row — a concept's own positives, the negatives it
    shares with other concepts — as the batched solver's tiles (each problem's rows then sit in a few
    tiles it shares with the others); None (the solver's own greedy tiles) where the patterns are many
    (concepts labelling the data's own rows independently: a tile per row would waste the batching)."""
    patterns, inverse = np.unique(np.isfinite(labels) & (labels >= 0), axis=0, return_inverse=True)
    return inverse.ravel() if len(patterns) <= MAX_BLOCKS else None


def _batchable(fitter) -> bool:
    """Whether the fits of ``fitter`` go to the batched solver: scikit-learn's L2 logistic regression
    exactly (:class:`LogisticFitter` itself, not a subclass that may change its model)."""
    return type(fitter) is LogisticFitter


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
    """Fit one unit CAV per concept, with repeat spread and held-out accuracy.

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
        Folds of the held-out accuracy in every repeat (0 disables it).
    min_positives : int, default=10
        Concepts with fewer positives (or fewer negatives) are dropped with a log line.
    duplicate_tol : float, default=1e-3
        CAV pairs with ``|cos| > 1 - duplicate_tol`` are listed in ``similar_`` (a note, not a
        reason to drop them: their example sets differ). A concept whose examples and labels
        equal or complement an earlier concept's (the same latent rows positive and negative,
        or swapped, e.g. curvature vs vertical_line in mnist_geometric) is dropped before
        fitting: it is the same concept, so it adds no independent cut.
    standardize : bool, float, "auto" or None, default=None
        Fit each repeat on standardised inputs and map the direction back (``w / sd``), or on
        the inputs as they are. ``True``: z-scores; ``False``: none; a float ``λ`` in [0, 1]:
        per-feature variances shrunk towards their mean, ``sd_j = sqrt((1 - λ)·var_j +
        λ·mean(var))``; ``"auto"``: z-scores with at least 10 rows per feature, else one common
        scale for all features, the data's total spread (:func:`standardize_shrinkage`). None: the fitter's default (``"auto"`` for logistic /
        SVM / SGD, whose solvers and L2 penalty depend on the feature scales; False for
        mean_difference / linear_regression). The cut it defines is the same kind of rule either
        way, but the *direction* differs when features have very different scales: plain
        z-scores put the L2 penalty on every feature equally, so near-constant features (edge
        pixels of raw images, SBERT's dead dimensions) can receive huge weights, and with a
        small concept set every CAV then points along the same dead dimension; unstandardised,
        the direction is the plain classifier's (what captum's TCAV returns). See
        docs/concepts.md, "Standardisation", and benchmarks/cav_set_size.py.
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
    score_mean_, score_ci_ : ndarray of shape (n_concepts,), (n_concepts, 2)
        Mean held-out score and its 95% interval: Wilson score interval of a proportion with
        ``n_heldout_`` trials (binary fitters: accuracy, inside [0, 1]); continuous fitters:
        the t-interval of R² over repeats, capped at 1. NaN where the score is undefined.
    n_heldout_ : ndarray of int, shape (n_concepts,)
        Held-out predictions behind each repeat's score (the rows of one draw; 0 with ``cv=0``).
    similar_ : dict of str -> str
        Concepts whose CAV is nearly parallel to an earlier one's although their examples differ.
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
        "duplicate_tol": [Interval(Real, 0, 1, closed="left")],
        "random_state": ["random_state"],
        "progress": ["boolean"],
        "standardize": ["boolean", None, StrOptions({"auto"}), Interval(Real, 0, 1, closed="both")],
    }

    def __init__(self, fitter=LogisticFitter, fitter_params=None, n_repeats: int = 5, max_per_class: int = 1000,
                 subsample: float = 0.8, cv: int = 3, min_positives: int = 10,
                 duplicate_tol: float = 1e-3, random_state=None, progress: bool = False,
                 standardize: bool | None = None):
        self.fitter = fitter
        self.fitter_params = fitter_params
        self.n_repeats = n_repeats
        self.max_per_class = max_per_class
        self.subsample = subsample
        self.cv = cv
        self.min_positives = min_positives
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
        rows = _row_ids(Z)  # identical latent rows = the same example (a file copied into two folders)
        for m in range(labels.shape[1]):  # every random draw first, in one fixed order
            reason = (self._unusable(labels[:, m], fitter.continuous)
                      or _same_examples(labels, m, kept, names, rows, binary=not fitter.continuous))
            if reason:
                log.warning("dropping concept %r: %s", names[m], reason)
                self.dropped_[names[m]] = reason
                continue
            plans.append(self._plan(fitter, labels[:, m], rng))
            kept.append(m)
        if _batchable(fitter):  # every repeat and fold of every concept in one batched solve (issue 48)
            rows = self._fit_batched(fitter, Z, labels, kept, plans)
        else:
            # Thousands of small fits: BLAS/OpenMP threads only add overhead (10x on a busy machine);
            # the concepts are shared among threads instead (each fit has its draws: same result for any count)
            with blas_threads(1), tqdm(total=len(plans), desc="CAVs", disable=not self.progress) as bar:
                rows = []
                for row in map_shared(lambda mp: self._fit_one(fitter, Z, labels[:, mp[0]], mp[1]),
                                   list(zip(kept, plans))):
                    rows.append(row)
                    bar.update()
        if not kept:
            raise InvalidInputError(
                f"no concept could be fitted; reasons: {self.dropped_}. Provide more positive and negative "
                f"examples per concept or lower min_positives (now {self.min_positives})."
            )
        self.cavs_ = np.stack([r["cav"] for r in rows])
        self.concept_names_ = [names[m] for m in kept]
        self.similar_ = similar_cavs(self.cavs_, self.concept_names_, tol=self.duplicate_tol)
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
        """The random draws of one concept's repeats: (rows, seed) each."""
        plan = []
        for _ in range(int(self.n_repeats)):
            idx = self._draw(y, fitter.continuous, rng)
            plan.append((idx, int(rng.integers(2**31 - 1))))
        return plan

    def _setting(self, fitter):
        return fitter.standardize if self.standardize is None else self.standardize

    def _fit_batched(self, fitter, Z, labels, kept, plans) -> list[dict]:
        """:meth:`_fit_one` of every concept at once: each repeat's draw and its ``cv`` folds (standardised
        with the draw's statistics, started from its solution, solved to 1e-6: they only give held-out
        accuracies) as problems of one :func:`pipeline.concepts.batched_logistic.fit_logistic_batch` on the
        latents, the exact optimum of scikit-learn's objective."""
        Zf = np.asarray(Z, dtype=np.float64)
        d, k = Zf.shape[1], int(self.cv)
        problems, layout = [], []
        for m, plan in zip(kept, plans):
            y = labels[:, m]
            for idx, seed in plan:
                ys = y[idx]
                full = len(problems)
                problems.append((idx, ys, -1, -1, 1e-10))
                folds = []
                if k and np.bincount(ys.astype(int), minlength=2).min() >= k:
                    for tr, te in StratifiedKFold(k, shuffle=True, random_state=seed).split(idx, ys):
                        folds.append((len(problems), tr, te))
                        problems.append((idx[tr], ys[tr], full, full, 1e-6))
                layout.append((m, idx, ys, full, folds))
        coef, converged = self._solve(fitter, Zf, problems, label_blocks(labels))
        out, by_concept = [], {}
        unsolved = {m for m, idx, ys, full, folds in layout if not converged[[full, *(b for b, _, _ in folds)]].all()}
        for m, idx, ys, full, folds in layout:
            if m in unsolved:  # ill-conditioned (near-constant columns): scikit-learn's fits, one at a time
                continue
            w = self._unit(coef[full])
            score = (float(np.mean([fitter.score(coef[b], Zf[idx[tr]], ys[tr], Zf[idx[te]], ys[te])
                                    for b, tr, te in folds])) if folds else float("nan"))
            by_concept.setdefault(m, []).append((w, score, idx.size if folds else 0))
        for m, plan in zip(kept, plans):
            if m in unsolved:
                out.append(self._fit_one(fitter, Z, labels[:, m], plan))
                continue
            dirs = np.stack([w for w, _, _ in by_concept[m]])
            mean = dirs.mean(axis=0)
            norm = np.linalg.norm(mean)
            cav = mean / norm if norm > 0 else dirs[0]
            lab = labels[:, m][np.isfinite(labels[:, m])]
            scores = [sc for _, sc, _ in by_concept[m]]
            out.append(dict(cav=cav, scores=scores, spread=np.degrees(np.arccos(np.clip(dirs @ cav, -1, 1))).mean(),
                            n_heldout=by_concept[m][0][2] if np.isfinite(scores).any() else 0,
                            n_pos=int((lab == 1).sum()), n_neg=int((lab == 0).sum())))
        return out

    def _solve(self, fitter, Zf: np.ndarray, problems: list, blocks=None) -> tuple[np.ndarray, np.ndarray]:
        """Coefficients (on ``Zf``'s columns) of the logistic problems ``(rows, labels, scale_from,
        warm_from, tol)``, standardised as this fitter standardises each fit; ``blocks``: a label per
        row of ``Zf`` grouping the rows problems share (the solver's tiles)."""
        d = Zf.shape[1]
        setting = self._setting(fitter)
        rows = [p[0] for p in problems]
        with warnings.catch_warnings():  # a problem it did not solve is refitted by the caller, one at a time
            warnings.simplefilter("ignore", ConvergenceWarning)
            res = fit_logistic_batch(
                Zf, rows, [p[1] for p in problems], C=float(fitter.C),
                standardize=[standardize_shrinkage(setting, len(r), d) for r in rows],
                scale_from=[p[2] for p in problems], warm_from=[p[3] for p in problems],
                tol=[p[4] for p in problems], blocks=blocks, n_jobs=current_threads())
        return res.coef, np.asarray(res.converged, dtype=bool)

    def _unit(self, w: np.ndarray, column_scale="fitted") -> np.ndarray:
        """A unit direction on the original columns from weights on the (power-of-two scaled) columns."""
        column_scale = self._column_scale if isinstance(column_scale, str) else column_scale
        if column_scale is not None:
            w = _unscaled_direction(w, column_scale)
        norm = np.linalg.norm(w)
        return w / norm if norm > 0 else w

    def _fit_one(self, fitter, Z, y, plan) -> dict:
        dirs, scores = [], []
        for idx, seed in plan:
            Zs, ys = Z[idx].astype(np.float64), y[idx]
            w, Zs = self._direction(fitter, Zs, ys, seed)
            dirs.append(w)
            scores.append(self._heldout(fitter, Zs, ys, seed))
        n_heldout = len(plan[0][0]) if plan and np.isfinite(scores).any() else 0
        dirs = np.stack(dirs)
        mean = dirs.mean(axis=0)
        norm = np.linalg.norm(mean)
        cav = mean / norm if norm > 0 else dirs[0]
        spread = np.degrees(np.arccos(np.clip(dirs @ cav, -1, 1))).mean()
        lab = y[np.isfinite(y)]
        return dict(cav=cav, scores=scores, spread=spread, n_heldout=n_heldout,
                    n_pos=int((lab == 1).sum()) if not fitter.continuous else lab.size,
                    n_neg=int((lab == 0).sum()) if not fitter.continuous else 0)

    def directions(self, problems, random_state=None) -> np.ndarray:
        """One unit CAV per problem ``(Z, y)`` (rows, 0/1 labels with the positives 1; problems may
        differ in size), fitted with this fitter's fitter and standardisation exactly as :meth:`fit`
        fits each repeat (no repeats, no held-out folds): shape (n_problems, n_features). For the
        CAVs of TCAV's test (:mod:`pipeline.concepts.tcav`)."""
        fitter = build_fitter(self.fitter, **(self.fitter_params or {}))
        fitter.validate_params()
        rng = np.random.default_rng(random_state)
        seeds = [int(rng.integers(2**31 - 1)) for _ in problems]
        if _batchable(fitter) and problems:  # the problems' rows stacked: one batched solve
            Zs = [np.asarray(Zp, dtype=np.float64) for Zp, _ in problems]
            Zall, scale = _float32_columns(check_matrix(np.vstack(Zs), "Z", min_rows=2))
            ends = np.cumsum([0, *map(len, Zs)])
            stacked = [(np.arange(a, b), np.asarray(yp, dtype=np.float64), -1, -1, 1e-10)
                       for (a, b), (_, yp) in zip(zip(ends[:-1], ends[1:]), problems)]
            coef, converged = self._solve(fitter, Zall.astype(np.float64), stacked,
                                          np.repeat(np.arange(len(Zs)), np.diff(ends)))
            out = [self._unit(w, scale) if ok else None for w, ok in zip(coef, converged)]
            for b in np.flatnonzero(~converged):  # ill-conditioned: scikit-learn's fit
                Zf, sc = _float32_columns(check_matrix(Zs[b], "Z", min_rows=2))
                out[b] = self._direction(fitter, Zf.astype(np.float64), np.asarray(problems[b][1], dtype=np.float64),
                                         seeds[b], sc)[0]
            return np.stack(out)

        def one(item):
            (Zp, yp), seed = item
            Zf, scale = _float32_columns(check_matrix(Zp, "Z", min_rows=2))
            return self._direction(fitter, Zf.astype(np.float64), np.asarray(yp, dtype=np.float64), seed, scale)[0]

        with blas_threads(1):
            return np.stack(list(map_shared(one, list(zip(problems, seeds)))))

    def _direction(self, fitter, Zs: np.ndarray, ys: np.ndarray, seed: int,
                   column_scale="fitted") -> tuple[np.ndarray, np.ndarray]:
        """(unit direction on the original columns, the rows as the fitter saw them) of one fit
        (``column_scale``: the power-of-two column scale of ``Zs``, default the one of :meth:`fit`'s latents)."""
        shrink = standardize_shrinkage(fitter.standardize if self.standardize is None else self.standardize,
                                       *Zs.shape)
        if shrink is not None:  # w·((z - m) / sd) = (w / sd)·z - const: same rule, scaled direction
            var = Zs.var(axis=0)
            if shrink == "common":  # one scale: the cloud's total spread (unit-norm embeddings: about 1)
                var = np.full_like(var, var.sum())
            elif shrink > 0:
                var = (1.0 - shrink) * var + shrink * var.mean()
            scale = np.sqrt(var)
            scale[scale == 0] = 1.0
            Zs = (Zs - Zs.mean(axis=0)) / scale
        w = np.asarray(fitter.direction(Zs, ys, seed), dtype=np.float64)
        if shrink is not None:
            w = w / scale
        column_scale = self._column_scale if isinstance(column_scale, str) else column_scale
        if column_scale is not None:  # the direction on the unscaled columns
            w = _unscaled_direction(w, column_scale)
        norm = np.linalg.norm(w)
        return (w / norm if norm > 0 else w), Zs

    def calibration(self, Z, labels, concept_names: Sequence[str] | None = None, n_folds: int = 3,
                    C: float = 1.0) -> np.ndarray:
        """``(slope, intercept)`` per kept concept, shape (n_concepts, 2): ``P(concept | z) =
        σ(slope·⟨c, z⟩ + intercept)``, Platt-scaled (:func:`pipeline.concepts.units.calibrate`:
        smoothed targets, L2 penalty ``1 / C``) on **held-out** coordinates.

        The CAV separates the very examples it was fitted on better than new ones; a logistic
        model fitted on those coordinates is too steep and saturates (P = 2e-8 one step off the
        boundary). So each example's coordinate is taken along a direction fitted (same fitter,
        same standardisation) on the other ``n_folds - 1`` folds, relative to the midpoint of that
        fold's class means; the model fitted on these is moved onto the final CAV through the
        midpoint of the class means along it. At most ``max_per_class`` examples per class are
        used. NaN for continuous fitters or a concept without positives and negatives.

        ``Z``, ``labels`` and ``concept_names`` are those given to :meth:`fit`.
        """
        from pipeline.concepts.units import calibrate

        check_is_fitted(self, "cavs_")
        fitter = build_fitter(self.fitter, **(self.fitter_params or {}))
        Zraw = check_matrix(Z, "Z", min_rows=2)
        Zf = _float32_columns(Zraw)[0]
        labels = self._check_labels(labels, Zraw.shape[0])
        names = self._check_names(concept_names, labels.shape[1])
        rng = np.random.default_rng(self.random_state)
        out = np.full((len(self.concept_names_), 2), np.nan)
        if fitter.continuous:
            return out
        plans = []  # every concept's draws first, in the order they were always drawn
        for m, name in enumerate(self.concept_names_):
            y = labels[:, names.index(name)]
            pos, neg = np.flatnonzero(y == 1), np.flatnonzero(y == 0)
            if not pos.size or not neg.size:
                continue
            k = self.max_per_class
            idx = np.concatenate([rng.choice(pos, min(k, pos.size), replace=False),
                                  rng.choice(neg, min(k, neg.size), replace=False)])
            folds = min(int(n_folds), pos.size, neg.size, k)
            seed = int(rng.integers(2**31 - 1)) if folds >= 2 else None
            plans.append((m, y[idx], idx, folds, seed))

        fold_dirs = {}
        if _batchable(fitter):  # every concept's fold fits in one batched solve
            problems, keys = [], []
            for m, ys, idx, folds, seed in plans:
                if seed is not None:
                    for f, (tr, te) in enumerate(StratifiedKFold(folds, shuffle=True, random_state=seed).split(idx, ys)):
                        problems.append((idx[tr], ys[tr], -1, -1, 1e-10))
                        keys.append((m, f))
            if problems:
                coef, converged = self._solve(fitter, Zf.astype(np.float64), problems, label_blocks(labels))
                fold_dirs = {key: self._unit(w) for key, w, ok in zip(keys, coef, converged) if ok}

        def one(plan):  # a concept's held-out coordinates and its Platt model (no draws: any thread)
            m, ys, idx, folds, seed = plan
            cav = self.cavs_[m]
            s = Zraw[idx].astype(np.float64) @ cav
            full_mid = (s[ys == 1].mean() + s[ys == 0].mean()) / 2
            if seed is not None:
                held = np.empty(idx.size)
                for f, (tr, te) in enumerate(StratifiedKFold(folds, shuffle=True, random_state=seed).split(idx, ys)):
                    w = fold_dirs[(m, f)] if (m, f) in fold_dirs else \
                        self._direction(fitter, Zf[idx[tr]].astype(np.float64), ys[tr], 0)[0]
                    s_tr = Zraw[idx[tr]].astype(np.float64) @ w
                    mid = (s_tr[ys[tr] == 1].mean() + s_tr[ys[tr] == 0].mean()) / 2
                    held[te] = Zraw[idx[te]].astype(np.float64) @ w - mid
            else:  # too few examples to hold any out: the CAV's own coordinates
                held = s - full_mid
            a, b = calibrate(held, ys, C=C)
            return m, (a, b - a * full_mid)

        with blas_threads(1):  # the concepts shared among threads, as in fit
            for m, model in map_shared(one, plans):
                out[m] = model
        return out

    def _collect(self, rows: list[dict]) -> None:
        self.scores_ = np.array([r["scores"] for r in rows], dtype=float)
        self.spread_deg_ = np.array([r["spread"] for r in rows])
        self.n_positives_ = np.array([r["n_pos"] for r in rows])
        self.n_negatives_ = np.array([r["n_neg"] for r in rows])
        self.n_heldout_ = np.array([r["n_heldout"] for r in rows], dtype=np.int64)
        with np.errstate(invalid="ignore"):
            self.score_mean_ = self.scores_.mean(axis=1)
        R = self.scores_.shape[1]
        self._continuous = build_fitter(self.fitter, **(self.fitter_params or {})).continuous
        if self._continuous:  # R² over repeats: a t-interval, capped at 1 (R² <= 1)
            with np.errstate(invalid="ignore"):
                half = (stats.t.ppf(0.975, R - 1) * self.scores_.std(axis=1, ddof=1) / np.sqrt(R) if R > 1
                        else np.full(len(rows), np.nan))
            self.score_ci_ = np.column_stack([self.score_mean_ - half, np.minimum(self.score_mean_ + half, 1.0)])
        else:
            self.score_ci_ = wilson_interval(self.score_mean_, self.n_heldout_)

    def test_line(self) -> str:
        """The held-out accuracy and its intervals in one line, for under the CAV table."""
        check_is_fitted(self, "cavs_")
        what = "R²" if self._continuous else "accuracy"
        if int(self.cv) == 0:
            return "accuracy: no held-out accuracy or interval (cv=0: no held-out folds)."
        ci = ("95% t-intervals over the repeats (capped at 1)" if self._continuous else
              "95% Wilson intervals on the held-out predictions")
        return (f"accuracy: held-out {what} of one cut along each of {int(self.n_repeats)} CAVs per concept "
                f"({int(self.cv)} folds of the concept's own examples: how separable they are, not whether the concept "
                f"bears on the clusters); {ci}.")

    # ------------------------------------------------------------- use
    def project(self, Z) -> np.ndarray:
        """Concept coordinates ``Z Cᵀ`` (Eq. 4), shape (n_samples, n_concepts)."""
        check_is_fitted(self, "cavs_")
        return project(Z, self.cavs_)

    def summary(self) -> list[dict]:
        """One row per kept concept: name, score mean ± CI, spread, counts."""
        check_is_fitted(self, "cavs_")
        return [
            dict(concept=n, score=float(self.score_mean_[m]), ci_low=float(self.score_ci_[m, 0]),
                 ci_high=float(self.score_ci_[m, 1]), spread_deg=float(self.spread_deg_[m]),
                 n_positives=int(self.n_positives_[m]), n_negatives=int(self.n_negatives_[m]))
            for m, n in enumerate(self.concept_names_)
        ]


def _row_ids(Z: np.ndarray) -> np.ndarray:
    """One integer per row of ``Z``, equal for identical rows (the same example)."""
    Z = np.ascontiguousarray(Z)
    if Z.shape[1] == 0:
        return np.zeros(len(Z), dtype=np.int64)
    return np.unique(Z.view(np.dtype((np.void, Z.dtype.itemsize * Z.shape[1]))).ravel(), return_inverse=True)[1]


def _same_examples(labels: np.ndarray, m: int, kept: list[int], names, rows: np.ndarray | None = None,
                   binary: bool = True) -> str | None:
    """Reason to drop column m if it *is* a kept concept: the same examples (rows of equal latents,
    ``rows``) with the same labels, or (binary labels) with positives and negatives swapped."""
    rows = np.arange(labels.shape[0]) if rows is None else rows

    def sets(col):
        if not binary:
            used = np.isfinite(col)
            order = np.lexsort((col[used], rows[used]))
            return (rows[used][order].tobytes(), col[used][order].tobytes())
        return (np.unique(rows[col == 1]).tobytes(), np.unique(rows[col == 0]).tobytes())

    mine = sets(labels[:, m])
    for j in kept:
        other = sets(labels[:, j])
        if mine == other:
            n_pos, n_neg = int((labels[:, m] == 1).sum()), int((labels[:, m] == 0).sum())
            what = f"{n_pos} positives, {n_neg} negatives" if binary else f"{int(np.isfinite(labels[:, m]).sum())} values"
            return (f"has the same examples and labels as {names[j]!r} ({what}), so it is the same concept under "
                    "another name; give it examples of its own or remove one of the two")
        if binary and mine == other[::-1]:
            return (f"is the complement of {names[j]!r} (the same examples, positives and negatives swapped), so its "
                    f"CAV would be the reverse of the {names[j]!r} CAV and give no independent cut")
    return None


def wilson_interval(p, n, z: float = 1.959963984540054) -> np.ndarray:
    """Wilson score interval of proportions ``p`` observed on ``n`` trials, shape (len(p), 2):
    always inside [0, 1]; NaN where ``p`` is NaN or ``n`` is 0."""
    p = np.asarray(p, dtype=float)
    n = np.asarray(n, dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        denom = 1 + z * z / n
        centre = (p + z * z / (2 * n)) / denom
        half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
        out = np.column_stack([np.clip(centre - half, 0, 1), np.clip(centre + half, 0, 1)])
    out[~(np.isfinite(p) & (n > 0))] = np.nan
    return out
