"""Many L2-penalised binary logistic regressions on one row matrix, solved together.

Problem ``b`` takes the rows ``R_b`` of a shared matrix ``Z`` (a concept's positives and negatives,
a cross-validation fold, a random example set) with targets ``t_i`` in [0, 1] and minimises

    ``0.5 Σ_j (s_bj w_j)² + C_b Σ_{i ∈ R_b} [log(1 + exp(z_i·w + c)) - t_i (z_i·w + c)]``

over the weights ``w`` (d,) and the unpenalised intercept ``c``. With ``s_b = 1`` and 0/1 targets
this is exactly scikit-learn's ``LogisticRegression(C=C_b, penalty="l2", fit_intercept=True)`` on
``Z[R_b]``. A standardised fit is the same problem on the raw columns: scikit-learn on
``(Z[R_b] - m) / s`` returns ``coef'`` with ``coef = coef' / s`` and ``intercept = intercept' -
coef·m``, the solution of the problem above with penalty scales ``s`` (the intercept absorbs the
shift, the scales become a diagonal penalty). So every problem shares the raw ``Z``, whatever its
standardisation (z-scores of its own rows, shrunk variances, one common scale:
:func:`standardization_scales`, the rules of :func:`standardize_shrinkage`).

How it is solved (:mod:`pipeline.concepts._logistic_batch`; benchmarks/batched_cavs.py measures it):

- Rows are shared through *tiles*: a tile holds some rows of ``Z`` (gathered once) and up to 128
  problems that use them, with a (rows × problems) matrix of counts (0 where a problem does not
  use a row; an index listed twice counts twice) and targets. The logits and gradients of all a
  tile's problems are two matrix products (BLAS, ~45-60 GFLOP/s on one core here) instead of a
  matrix-vector product per problem (~7 GFLOP/s), at the price of the zeros. Tiles come from
  ``blocks`` (a label per row of ``Z``, e.g. the example set it belongs to: one concept against
  20 random sets then costs no zeros), else from a greedy pass over the problems in their order
  (a problem joins the current tile while that costs less than fitting it alone). The tiles are
  shared among ``n_jobs`` threads (BLAS on one thread each) and their parts added in tile order,
  so the result does not depend on the thread count.
- Each problem is solved in its own scaled coordinates: columns divided by powers of two (exact)
  so that their largest magnitude lies in [0.5, 1) (1e±300 inputs neither overflow nor
  underflow; coefficients that do not fit a float64 in the original units are ±inf), weights
  multiplied by a Jacobi preconditioner ``q_j = sqrt(s_j² + C n var_j / 4)`` (the Hessian's
  diagonal at the start; for a z-scored problem its z-scores up to a factor), the intercept
  centred on the problem's mean row. The loss is summed as ``t·log(1 + e^-z) + (1 - t)·log(1 +
  e^z)``, terms without cancellation, so the line search can compare objectives near an optimum.
- ``solver="newton"``: Newton's method with the exact Hessian (narrow rows: all problems of a
  tile in one product with the rows' packed outer products; wide rows: one product per problem),
  a batched solve of the (d+1)² systems, each problem with its own line search. ``"lbfgs"``:
  limited-memory BFGS (10 pairs) in lockstep, each problem with its own line search (Armijo,
  or the slope along the step where the objective's change is below its rounding). ``"auto"``:
  Newton up to ``NEWTON_MAX_FEATURES`` (10) columns (VaDE's latents; measured as fast as L-BFGS
  there, L-BFGS 1.7x faster at 20); L-BFGS above (SBERT 384, CLIP 512, EfficientNet 1280), and
  Newton for the problems L-BFGS has not solved after ``LBFGS_BEFORE_NEWTON`` iterations and for
  those whose penalty holds less than 1e-4 of some column's starting curvature (raw columns with
  a large ``C``: condition numbers where L-BFGS's criteria can pass 1e-6 away from the optimum).
- Converged: Newton when its last step was at most ``100·tol`` of the weights (its error is then
  about the square of that); L-BFGS when the largest gradient entry in the scaled coordinates is
  at most ``tol · sqrt(C n)`` (the gradient's size at the start) and its next quasi-Newton step
  at most ``100·tol`` of the weights. At the default ``tol=1e-10`` the coefficients agree with
  scikit-learn's newton-cholesky at ``tol=1e-12`` to ~1e-9 of their largest entry (tests/
  test_batched_logistic.py allows 1e-6; plain ``solver="lbfgs"`` on a problem with a condition
  number near 1e7 was measured 2e-6 off while claiming convergence: "auto" sends those to
  Newton). A problem not converged after ``max_iter`` iterations, or where no step decreases the
  objective, keeps its last iterate and is flagged in ``converged`` (one ``ConvergenceWarning``
  says how many and the worst gradient).

A problem without rows, or whose targets are all 0 or all 1, has no finite intercept (the
objective has no minimum): such problems are refused with an :class:`InvalidInputError` that
names them. Separable problems are fine (the penalty keeps the weights finite); a column constant
on a problem's rows gets weight 0 in that problem.
"""

from __future__ import annotations

import warnings
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass

import numpy as np
from sklearn.exceptions import ConvergenceWarning

from pipeline.concepts._logistic_batch import NEWTON_MAX_FEATURES, Batch, solve
from pipeline.threads import blas_threads, resolve_n_jobs
from pipeline.validation import InvalidInputError, check_matrix


@dataclass(frozen=True)
class LogisticBatch:
    """Solutions of a batch of logistic regressions (:func:`fit_logistic_batch`).

    Attributes
    ----------
    coef : ndarray of shape (n_problems, n_features)
        Weights on the original columns of ``Z``.
    intercept : ndarray of shape (n_problems,)
        Intercepts on the original columns (``z·coef + intercept`` is the logit).
    n_iter : ndarray of int, shape (n_problems,)
        Iterations (Newton or L-BFGS steps) each problem took.
    converged : ndarray of bool, shape (n_problems,)
        Whether the convergence criterion was met (module docstring).
    gradient : ndarray of shape (n_problems,)
        The final largest gradient entry in the solver's scaled coordinates over ``sqrt(C n)``.
    solver : str
        What ran: ``"newton"``, ``"lbfgs"`` or ``"lbfgs+newton"`` (Newton finished some problems).
    """

    coef: np.ndarray
    intercept: np.ndarray
    n_iter: np.ndarray
    converged: np.ndarray
    gradient: np.ndarray
    solver: str


# --------------------------------------------------------------------------- inputs


def _rows(Z: np.ndarray, rows) -> list[np.ndarray]:
    """Row indices per problem from a (B, N) mask or a sequence of index arrays (or masks)."""
    n = Z.shape[0]
    if isinstance(rows, np.ndarray) and rows.ndim == 2:
        if rows.dtype != bool or rows.shape[1] != n:
            raise InvalidInputError(f"rows given as a 2-D array must be a boolean mask of shape (n_problems, "
                                    f"{n}) (one row per problem, one column per row of Z), got {rows.dtype} of "
                                    f"shape {rows.shape}; or give a list of integer index arrays.")
        return [np.flatnonzero(r) for r in rows]
    idx = []
    for b, r in enumerate(rows):
        a = np.asarray(r)
        if a.dtype == bool:
            if a.shape != (n,):
                raise InvalidInputError(f"rows[{b}] is a boolean mask of shape {a.shape}; it must have "
                                        f"shape ({n},), one entry per row of Z.")
            a = np.flatnonzero(a)
        elif a.size and (a.ndim != 1 or a.dtype.kind not in "iu"):
            raise InvalidInputError(f"rows[{b}] must be a 1-D array of integer row indices of Z (or a boolean "
                                    f"mask), got dtype {a.dtype} and shape {a.shape}.")
        a = a.astype(np.int64, copy=False).ravel()
        if a.size and (a.min() < 0 or a.max() >= n):
            raise InvalidInputError(f"rows[{b}] holds indices outside 0..{n - 1} (Z has {n} rows): "
                                    f"{a[(a < 0) | (a >= n)][:5]}.")
        idx.append(a)
    return idx


def _targets(idx: list[np.ndarray], labels, n: int) -> list[np.ndarray]:
    """Targets per problem: ``labels`` per row of ``Z`` ((B, N)) or aligned with each problem's rows."""
    B = len(idx)
    per_row = isinstance(labels, np.ndarray) and labels.ndim == 2 and labels.shape == (B, n)
    if not per_row and len(labels) != B:
        raise InvalidInputError(f"labels must hold one array per problem ({B}) aligned with its rows, or be an "
                                f"array of shape ({B}, {n}) (a label per row of Z), got {len(labels)} entries.")
    targets = []
    for b in range(B):
        try:
            t = (np.asarray(labels[b], dtype=np.float64)[idx[b]] if per_row
                 else np.asarray(labels[b], dtype=np.float64).ravel())
        except (TypeError, ValueError) as exc:
            raise InvalidInputError(f"labels[{b}] must be numeric (0/1 or a target in [0, 1]): {exc}") from None
        if t.shape != idx[b].shape:
            raise InvalidInputError(f"labels[{b}] has {t.size} entries but problem {b} has {idx[b].size} rows; give "
                                    "one label per row of the problem (or a (n_problems, n_rows) array).")
        inside = (t >= 0) & (t <= 1)
        if not inside.all():
            raise InvalidInputError(f"labels[{b}] must lie in [0, 1] (0/1 classes, or soft targets), got values "
                                    f"such as {np.unique(t[~inside])[:5]}.")
        targets.append(t)
    return targets


def _per_problem(value, B: int, name: str) -> np.ndarray:
    arr = np.broadcast_to(np.asarray(value, dtype=np.float64), (B,)) if np.ndim(value) == 0 else \
        np.asarray(value, dtype=np.float64)
    if arr.shape != (B,) or not np.all(np.isfinite(arr) & (arr > 0)):
        raise InvalidInputError(f"{name} must be a positive finite number or one per problem (shape ({B},)), "
                                f"got {value!r}.")
    return np.array(arr)


def _degenerate(idx, targets) -> None:
    bad = [b for b, (i, t) in enumerate(zip(idx, targets)) if i.size == 0 or t.min() == 1 or t.max() == 0]
    if bad:
        raise InvalidInputError(
            f"{len(bad)} problem(s) have no rows or targets of one class only (all 0 or all 1): {bad[:10]}"
            f"{' ...' if len(bad) > 10 else ''}; a logistic regression has no finite intercept there. Drop them or "
            "give each problem rows of both classes.")


#: ``standardize="auto"`` standardises (plain z-scores) only with at least this many rows per feature
AUTO_ROWS_PER_FEATURE = 10


def standardize_shrinkage(standardize, n_rows: int, n_features: int) -> float | str | None:
    """How a CAV fit standardises its inputs: None (not at all), a shrinkage ``λ`` or ``"common"``.

    With ``λ`` the features are divided by ``sqrt((1 - λ)·var_j + λ·mean(var))``:
    ``standardize=True`` is ``λ = 0`` (plain z-scores), ``False`` none, a float its own ``λ`` in
    [0, 1]. ``"common"``: every feature divided by one scale, the data's total spread
    ``sqrt(Σ_j var_j)``. ``"auto"`` (the logistic / SVM / SGD default): plain z-scores when every
    per-feature variance is estimated from at least ``AUTO_ROWS_PER_FEATURE`` (10) rows per
    feature (MNIST's 10 VaDE latents from 1,600 rows), else ``"common"`` — a concept folder of 10
    sentences in SBERT's 384 dimensions, or 1,600 images in EfficientNet's 1,280, where z-scores
    from so few rows give a near-constant feature (SBERT's dead dimensions, a border pixel) a
    weight of 1/1e-33 and every CAV the same direction. One common scale keeps the plain
    classifier's direction on unit-norm embeddings (SBERT's total spread is about 1, so it is
    ``False`` there) while making the fit independent of the embeddings' scale (1e-6 or 1e6: the
    L2 penalty and the solver's tolerance see a unit-spread cloud). benchmarks/cav_set_size.py.
    """
    if standardize is None:
        return None
    if isinstance(standardize, (bool, np.bool_)):
        return 0.0 if standardize else None
    if standardize == "auto":
        return 0.0 if n_rows >= AUTO_ROWS_PER_FEATURE * n_features else "common"
    return float(standardize)


def _resolve(setting, n_rows: int, d: int):
    """A standardisation setting as None, a shrinkage λ or "common" (standardize_shrinkage's rules)."""
    if isinstance(setting, str) and setting == "common":
        return "common"
    try:
        return standardize_shrinkage(setting, n_rows, d)
    except (TypeError, ValueError):
        raise InvalidInputError(f"standardize must be None/False, True, a shrinkage in [0, 1], 'common' or 'auto' "
                                f"(or one of these per problem), got {setting!r}.") from None


def _settings(standardize, idx, d: int) -> list:
    many = isinstance(standardize, (list, tuple, np.ndarray))
    if many and len(standardize) != len(idx):
        raise InvalidInputError(f"standardize has {len(standardize)} entries for {len(idx)} problems; give one "
                                "setting or one per problem.")
    out = [_resolve(standardize[b] if many else standardize, i.size, d) for b, i in enumerate(idx)]
    for s in out:
        if isinstance(s, float) and not 0.0 <= s <= 1.0:
            raise InvalidInputError(f"a standardisation shrinkage must lie in [0, 1], got {s}.")
    return out


def standardization_scales(Z, rows, standardize) -> np.ndarray:
    """Penalty scales (n_problems, n_features) that make each problem the standardised fit of
    :meth:`pipeline.concepts.cav.CAVFitter._direction`, computed the plain way (one problem at a
    time, ``np.var`` of its rows): ``sqrt(var_j)`` (z-scores), ``sqrt((1 - λ) var_j + λ mean(var))``
    (shrinkage), ``sqrt(Σ_j var_j)`` for every column ("common"), 1 for None; a zero scale is 1.

    ``rows`` as in :func:`fit_logistic_batch`; ``standardize`` one setting or one per problem.
    The reference :func:`fit_logistic_batch` is tested against (it computes the same scales from
    matrix products of the shared rows).
    """
    Z = check_matrix(Z, "Z", min_rows=1)
    idx = _rows(Z, rows)
    out = np.ones((len(idx), Z.shape[1]))
    for b, (i, s) in enumerate(zip(idx, _settings(standardize, idx, Z.shape[1]))):
        if s is None or i.size == 0:
            continue
        var = Z[i].var(axis=0)
        if s == "common":
            var = np.full_like(var, var.sum())
        elif s > 0:
            var = (1.0 - s) * var + s * var.mean()
        scale = np.sqrt(var)
        scale[scale == 0] = 1.0
        out[b] = scale
    return out


def _problem_refs(value, B: int, name: str) -> np.ndarray | None:
    """An optional (B,) array of problem indices (-1: none) that must point at other problems."""
    if value is None:
        return None
    arr = np.asarray(value)
    if arr.shape != (B,) or arr.dtype.kind not in "iu" or (arr.size and (arr.min() < -1 or arr.max() >= B)):
        raise InvalidInputError(f"{name} must hold one problem index per problem (shape ({B},), -1 for none, "
                                f"each in -1..{B - 1}), got {arr.dtype} of shape {arr.shape}.")
    return arr.astype(np.int64)


def _initial(coef_init, intercept_init, B: int, d: int):
    """The starting point on the original columns, checked, or None for the default start."""
    if coef_init is None and intercept_init is None:
        return None
    coef0 = np.zeros((B, d)) if coef_init is None else np.asarray(coef_init, dtype=np.float64)
    b0 = np.zeros(B) if intercept_init is None else np.asarray(intercept_init, dtype=np.float64)
    if coef0.shape != (B, d) or b0.shape != (B,) or not (np.isfinite(coef0).all() and np.isfinite(b0).all()):
        raise InvalidInputError(f"coef_init must be finite of shape ({B}, {d}) and intercept_init of shape ({B},), "
                                f"got {coef0.shape} and {b0.shape}.")
    return coef0, b0


def fit_logistic_batch(Z, rows, labels, *, C=1.0, standardize=None, penalty_scale=None, scale_from=None,
                       blocks=None, coef_init=None, intercept_init=None, warm_from=None, solver: str = "auto",
                       tol: float = 1e-10, max_iter: int = 1000, n_jobs=None) -> LogisticBatch:
    """Fit ``n_problems`` L2-penalised logistic regressions on rows of one matrix at once.

    Parameters
    ----------
    Z : array-like of shape (n_rows, n_features)
        The rows every problem draws from (finite).
    rows : sequence of n_problems integer arrays, or bool array of shape (n_problems, n_rows)
        The rows of ``Z`` of each problem (an index listed twice counts twice).
    labels : sequence of n_problems arrays aligned with ``rows``, or array of shape (n_problems, n_rows)
        Targets in [0, 1] (0/1 classes; fractional values are soft targets, as in Platt scaling).
        A 2-D array of shape (n_problems, n_rows) holds a label per row of ``Z``.
    C : float or array of shape (n_problems,), default=1.0
        Inverse penalty strength, scikit-learn's ``C``.
    standardize : None, bool, float, "common", "auto", or a sequence of these per problem
        Penalty scales from each problem's own rows, as :meth:`CAVFitter._direction` standardises
        (see :func:`standardization_scales`): None/False the plain problem; True z-scores; a
        shrinkage λ in [0, 1]; "common" one scale ``sqrt(Σ_j var_j)``; "auto" z-scores with at
        least 10 rows per feature, else "common".
    penalty_scale : array of shape (n_features,) or (n_problems, n_features), optional
        Explicit positive scales ``s`` (penalty ``0.5 Σ (s_j w_j)²``); overrides ``standardize``.
    scale_from : array of int, shape (n_problems,), optional
        Problem ``b`` takes the penalty scales of problem ``scale_from[b]`` (-1: its own): folds
        standardised with the statistics of the draw they split, as CAVFitter's held-out scores.
    blocks : array of int, shape (n_rows,), optional
        A label per row of ``Z`` (e.g. the example set it belongs to); each label's rows form a
        tile shared by every problem that uses them. Default: greedy tiles over the problems in
        their order (put problems that share rows next to each other).
    coef_init, intercept_init : arrays of shape (n_problems, n_features), (n_problems,), optional
        Starting point on the original columns.
    warm_from : array of int, shape (n_problems,), optional
        Problem ``b`` starts from the solution of problem ``warm_from[b]`` (-1: its own start),
        which is solved first (e.g. cross-validation folds from the full fit); one level only: a
        problem others start from must itself have ``warm_from = -1``.
    solver : {"auto", "newton", "lbfgs"}, default="auto"
    tol : float or array of shape (n_problems,), default=1e-10
        Convergence: Newton's last step at most ``100·tol`` of the weights; L-BFGS's gradient at
        most ``tol · sqrt(C n)`` in scaled coordinates and its last step at most ``100·tol`` of
        the weights (coefficients then within ~1e-9 of the exact ones, relative to the largest).
        One per problem: e.g. 1e-6 for cross-validation folds that only score held-out accuracy
        (coefficients within ~1e-5; 14 instead of 22 L-BFGS iterations on CAV problems).
    max_iter : int, default=1000
    n_jobs : int, optional
        Threads sharing the tiles (scikit-learn's convention; None: the setting of the enclosing
        :func:`pipeline.threads.limit_threads`, else the idle cores). The result does not depend on it.

    Returns
    -------
    LogisticBatch
        ``coef`` (n_problems, n_features), ``intercept``, ``n_iter``, ``converged``, ``gradient``.
    """
    Z = check_matrix(Z, "Z", min_rows=1)
    idx = _rows(Z, rows)
    targets = _targets(idx, labels, Z.shape[0])
    B, d = len(idx), Z.shape[1]
    if solver not in ("auto", "newton", "lbfgs"):
        raise InvalidInputError(f"solver must be 'auto', 'newton' or 'lbfgs', got {solver!r}.")
    if not (isinstance(max_iter, (int, np.integer)) and max_iter >= 1):
        raise InvalidInputError(f"max_iter must be a positive integer, got {max_iter!r}.")
    if B == 0:
        return LogisticBatch(np.zeros((0, d)), np.zeros(0), np.zeros(0, dtype=np.int64), np.zeros(0, dtype=bool),
                             np.zeros(0), solver)
    _degenerate(idx, targets)
    C, tol = _per_problem(C, B, "C"), _per_problem(tol, B, "tol")
    scale_from, warm_from = _problem_refs(scale_from, B, "scale_from"), _problem_refs(warm_from, B, "warm_from")
    if warm_from is not None and np.any(warm_from[warm_from[warm_from >= 0]] >= 0):
        raise InvalidInputError("warm_from may point only at problems that start on their own (warm_from = -1): "
                                "one level of warm starts.")
    if penalty_scale is not None:
        penalty_scale = np.broadcast_to(np.asarray(penalty_scale, dtype=np.float64), (B, d)) \
            if np.ndim(penalty_scale) == 1 else np.asarray(penalty_scale, dtype=np.float64)
        if penalty_scale.shape != (B, d) or not np.all(np.isfinite(penalty_scale) & (penalty_scale > 0)):
            raise InvalidInputError(f"penalty_scale must hold positive finite scales of shape ({d},) or ({B}, {d}), "
                                    f"got shape {np.shape(penalty_scale)}.")
        settings = None
    else:
        settings = _settings(standardize, idx, d)
    init = _initial(coef_init, intercept_init, B, d)
    n_iter, conv, gnorm = np.zeros(B, dtype=np.int64), np.zeros(B, dtype=bool), np.full(B, np.inf)
    later = np.zeros(B, dtype=bool) if warm_from is None else warm_from >= 0
    used = set()
    # many small matrix products: one BLAS thread each (a fork-join BLAS call waits for a descheduled
    # thread on a busy machine: 40x slower here at load 9), the tiles shared among the threads instead
    with blas_threads(1), np.errstate(over="ignore", under="ignore"):
        batch = Batch(Z, idx, targets, C, settings, penalty_scale, scale_from, blocks,
                      newton=solver == "newton" or (solver == "auto" and d <= NEWTON_MAX_FEATURES))
        theta = batch.start() if init is None else batch.to_theta(*init)
        threads = min(resolve_n_jobs(n_jobs), len(batch.tiles))
        with ThreadPoolExecutor(threads) if threads > 1 else nullcontext() as pool:
            batch.map = pool.map if pool is not None else map
            used |= solve(batch, theta, np.flatnonzero(~later), solver, tol, int(max_iter), n_iter, conv, gnorm)
            if later.any():  # in the scaled coordinates of the problem that starts there
                src = warm_from[later]
                theta[later] = batch.to_theta_of(np.flatnonzero(later), *batch.from_theta(theta[src], src))
                used |= solve(batch, theta, np.flatnonzero(later), solver, tol, int(max_iter), n_iter, conv, gnorm)
    solver = "+".join(sorted(used, key=["lbfgs", "newton"].index)) or solver
    coef, intercept = batch.from_theta(theta)
    if not conv.all():
        warnings.warn(f"{int((~conv).sum())} of {B} logistic regressions did not converge ({solver}, max_iter="
                      f"{max_iter}; worst relative gradient {np.nanmax(gnorm):.2e}, tol={np.min(tol):g}); their last "
                      "iterates are returned, flagged in .converged.", ConvergenceWarning, stacklevel=2)
    return LogisticBatch(coef, intercept, n_iter, conv, gnorm, solver)
