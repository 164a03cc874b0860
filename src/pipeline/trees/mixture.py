"""Mixture parameters for trees grown from means: validation, estimation from labels, GMM access,
and the upper bounds on a tree's mis-assignment probability (Theorems 1 and 2 of Fleissner et al.;
each estimator names the one it satisfies, ``error_bound``).

Shared by :mod:`pipeline.trees.mmdt` and :mod:`pipeline.metrics` (q needs the same checks).
"""

from __future__ import annotations

import logging

import numpy as np
import scipy.sparse as sp

from pipeline.validation import InvalidInputError, check_finite, check_matrix, check_vector

logger = logging.getLogger(__name__)

# A zero σ_j estimated from data (every component constant on axis j) is replaced by this
# fraction of the axis' scale, so normalised gaps stay finite and positive.
SIGMA_FLOOR = 1e-12
_BLOCK_VALUES = 1 << 22  # estimate_mixture works on float64 column blocks of this many values


def check_means(means, name: str = "means") -> np.ndarray:
    """Return K >= 2 distinct, finite means as an array of shape (K, d).

    Raises InvalidInputError naming the first pair of identical rows (Assumption 3).
    """
    arr = check_matrix(means, name)
    if arr.shape[0] < 2:
        raise InvalidInputError(f"{name} needs at least 2 rows (one per mixture component), got {arr.shape[0]}.")
    _, first, inverse, counts = np.unique(arr, axis=0, return_index=True, return_inverse=True, return_counts=True)
    if np.any(counts > 1):
        group = int(np.flatnonzero(counts > 1)[0])
        rows = np.flatnonzero(inverse.ravel() == group)[:2].tolist()
        raise InvalidInputError(
            f"{name} rows {rows[0]} and {rows[1]} are identical; the means must be distinct "
            "(Assumption 3). Merge those components or drop one."
        )
    return arr


def check_separated(means: np.ndarray, sigma: np.ndarray, name: str = "means", rtol: float = 1e-9) -> None:
    """Raise if two means are closer than ``rtol * σ_j`` on every axis j (near-duplicates).

    Means that differ only by rounding noise relative to the spread σ cannot be told apart
    by any cut; Assumption 3 asks for distinct means, judged on the scale of σ.
    """
    for k in range(means.shape[0] - 1):
        gap = np.max(np.abs(means[k + 1:] - means[k]) / sigma, axis=1)
        close = np.flatnonzero(gap <= rtol)
        if close.size:
            other = k + 1 + int(close[0])
            raise InvalidInputError(
                f"{name} rows {k} and {other} differ by at most {gap[close[0]]:.3g} σ on every axis, so they "
                f"are duplicates for all practical purposes (Assumption 3 needs distinct means, farther apart "
                f"than {rtol:g} σ). Merge those components or drop one."
            )


def check_sigma(sigma, n_features: int, name: str = "sigma", *, from_data: bool = False, scale=None) -> np.ndarray:
    """Return per-axis σ of shape (n_features,), finite and > 0.

    User-given σ must be strictly positive. For σ estimated from data (``from_data=True``) a
    zero on some axis means every component is constant there; it is replaced by
    ``SIGMA_FLOOR * max(scale_j, 1)`` so that gaps on that axis count as (almost) infinitely
    well separated instead of dividing by zero.
    """
    arr = check_vector(sigma, name)
    if arr.shape[0] != n_features:
        raise InvalidInputError(
            f"{name} has length {arr.shape[0]} but the means have {n_features} columns; give one σ per axis."
        )
    if from_data:
        zero = arr <= 0
        if zero.any():
            scale = np.ones(n_features) if scale is None else np.maximum(np.asarray(scale, dtype=float), 1.0)
            logger.warning("%s is zero on axes %s (no spread within any component); using a floor of %g x scale.",
                           name, np.flatnonzero(zero).tolist(), SIGMA_FLOOR)
            arr = np.where(zero, SIGMA_FLOOR * scale, arr)
    elif np.any(arr <= 0):
        bad = np.flatnonzero(arr <= 0)
        raise InvalidInputError(
            f"{name} must be > 0 on every axis, got {arr[bad[0]]!r} at axis {int(bad[0])} "
            f"({bad.size} axis/axes non-positive); pass standard deviations, not zeros."
        )
    return arr


def estimate_mixture(X: np.ndarray, codes: np.ndarray):
    """Per-cluster means and (population) variances per axis.

    Parameters
    ----------
    X : ndarray of shape (n_samples, d)
        Validated, finite data (noise rows already removed).
    codes : ndarray of shape (n_samples,)
        Cluster code 0..K-1 of each row, every code present (as returned by
        ``ReferenceTree._validate_reference``).

    Returns
    -------
    means : ndarray of shape (K, d)
    variances : ndarray of shape (K, d)
        Two-pass (numerically stable) variance of each cluster on each axis.
    """
    idx = np.asarray(codes, dtype=np.int64)
    K, d = int(idx.max()) + 1, X.shape[1]
    counts = np.bincount(idx, minlength=K).astype(float)[:, None]
    # one-hot membership: a sparse product sums each cluster's rows in row order (float64)
    member = sp.csr_matrix((np.ones(idx.size), (idx, np.arange(idx.size))), shape=(K, idx.size))
    means = np.empty((K, d))
    variances = np.empty((K, d))
    step = max(1, _BLOCK_VALUES // max(idx.size, 1))  # float64 column blocks of ~32 MB
    for s in range(0, d, step):
        block = np.array(X[:, s:s + step], dtype=np.float64)  # float32 data: only this block is widened
        means[:, s:s + step] = member @ block / counts
        block -= means[idx, s:s + step]
        np.square(block, out=block)
        variances[:, s:s + step] = member @ block / counts
    return means, variances


def gmm_covariances(gmm) -> np.ndarray:
    """Full covariance matrices (K, d, d) of a fitted sklearn GaussianMixture, any covariance_type."""
    K, d = gmm.means_.shape
    kind = gmm.covariance_type
    cov = np.asarray(gmm.covariances_, dtype=float)
    if kind == "full":
        return cov
    if kind == "tied":
        return np.broadcast_to(cov, (K, d, d))
    if kind == "diag":
        return cov[:, :, None] * np.eye(d)
    if kind == "spherical":
        return cov[:, None, None] * np.eye(d)
    raise InvalidInputError(f"unknown GaussianMixture covariance_type {kind!r}.")


def project_covariances(covariance, C: np.ndarray, n_components: int) -> np.ndarray:
    """Variances c_mᵀ Σ_k c_m of each concept under each covariance (Eq. 5).

    Parameters
    ----------
    covariance : array-like of shape (d, d) or (K, d, d)
        Shared or per-component covariance; must be symmetric positive semi-definite.
    C : ndarray of shape (M, d)
        CAV matrix.
    n_components : int
        K, to check a per-component stack.

    Returns
    -------
    ndarray of shape (1 or K, M)
    """
    d = C.shape[1]
    try:
        cov = np.asarray(covariance, dtype=float)
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(f"covariance must be a numeric array: {exc}") from None
    if cov.ndim == 2:
        cov = cov[None]
    if cov.ndim != 3 or cov.shape[1:] != (d, d) or cov.shape[0] not in (1, n_components):
        raise InvalidInputError(
            f"covariance must have shape ({d}, {d}) (shared) or ({n_components}, {d}, {d}) (one per "
            f"component), got {np.shape(covariance)}."
        )
    check_finite(cov, "covariance")
    scale = max(float(np.abs(cov).max()), np.finfo(float).tiny)
    if not np.allclose(cov, np.swapaxes(cov, 1, 2), rtol=1e-8, atol=1e-10 * scale):
        raise InvalidInputError("covariance must be symmetric (Σ = Σᵀ); symmetrise it with (S + S.T) / 2.")
    eig_min = np.linalg.eigvalsh(cov).min(axis=1)
    if np.any(eig_min < -1e-9 * scale):
        k = int(np.argmin(eig_min))
        raise InvalidInputError(
            f"covariance {k} is not positive semi-definite (smallest eigenvalue {eig_min[k]:.3g}); "
            "pass a valid covariance matrix."
        )
    from pipeline.concepts.projection import concept_variances  # the one home of C Σ Cᵀ

    return np.clip(concept_variances(C, cov), 0.0, None)


# ------------------------------------------------------------------ the bounds (pipeline.metrics re-exports them)
def check_qk(q, K):
    """``q`` (array-valued) finite and > 0, ``K`` an integer >= 2: the bounds' arguments."""
    q = np.asarray(q, dtype=float)
    if np.any(~np.isfinite(q)) or np.any(q <= 0):
        raise InvalidInputError(f"q must be finite and > 0, got {q!r}.")
    if int(K) != K or K < 2:
        raise InvalidInputError(f"K must be an integer >= 2 (number of mixture components), got {K!r}.")
    return q, int(K)


def _check_alpha(alpha):
    if not alpha >= 1:
        raise InvalidInputError(f"alpha bounds the mixing weights by alpha/K and must be >= 1, got {alpha!r}.")


def theorem1_upper_bound(q, K, alpha: float = 1.0):
    """Theorem 1: MMDT's error P(μ̂(x) ≠ μ(x)) <= α K exp(−q / (4K²)). Array-valued in q."""
    q, K = check_qk(q, K)
    _check_alpha(alpha)
    return alpha * K * np.exp(-q / (4.0 * K * K))


def theorem2_upper_bound(q, K, alpha: float = 1.0):
    """Theorem 2: the randomized tree's expected error <= α K sqrt(π / q). Array-valued in q."""
    q, K = check_qk(q, K)
    _check_alpha(alpha)
    return alpha * K * np.sqrt(np.pi / q)
