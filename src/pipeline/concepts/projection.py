"""Carry a latent mixture into concept space (MMDT paper, Eq. 4-6).

With unit CAVs as the rows of C (M × d), a latent z maps to ``C z`` (Eq. 4); a mixture
with means μ_k and covariance Σ maps to means ``μ̄_k = C μ_k`` and per-concept standard
deviations ``σ̄_m = sqrt(c_mᵀ Σ c_m)`` (Eq. 5). The explainability-to-noise ratio in
concept space is (Eq. 6)

    q = min_{k≠l} max_m (c_mᵀ(μ_k − μ_l))² / (2 c_mᵀ Σ c_m).

When the mixture has one covariance per component, σ̄_m is the largest component
standard deviation along c_m (the paper's σ_j bounds every component uniformly);
``reduce="mean"`` uses the weighted average instead. A clustering without covariances
uses the pooled within-cluster covariance of the projected latents.

This module is the one home of the concept maths: ``Z Cᵀ`` (:func:`project`), a mixture in
concept coordinates ``(w, μ Cᵀ, C Σ Cᵀ)`` (:func:`project_mixture`), σ from covariances
(:func:`mixture_sigma`) and the pairwise ratios behind q (Eq. 6's q itself is
:func:`pipeline.metrics.concept_explainability_to_noise_ratio`: this module imports nothing
above ``pipeline.threads`` and ``pipeline.validation``); the trees, the metrics and the pipeline's stages call these instead of writing the formulas again.
"""

from __future__ import annotations

import logging
from typing import Sequence

import numpy as np

from pipeline.threads import limit_threads, map_blocks
from pipeline.validation import InvalidInputError, all_finite, check_labels, check_matrix, check_n_features

log = logging.getLogger(__name__)


def project(Z, cavs, n_jobs=None) -> np.ndarray:
    """Concept coordinates ``Z Cᵀ`` (Eq. 4) for latents Z (n, d) and CAV rows C (M, d); shape (n, M).

    float64 multiply-adds either way, by a compiled kernel
    (:func:`pipeline.concepts._project_kernel.project_rows`) that reads float32 latents as
    they are (no float64 copy of 1M x 512 latents, 4 GB), a four-row tile at a time. The rows
    are shared among ``n_jobs`` threads (scikit-learn convention); every element is summed in
    the same order whatever the split, so the result is the same for any thread count, and
    float32 latents give the same bits as their float64 widening.

    The latents are read once: a NaN or inf in a row reaches every coordinate of that row (the
    kernel keeps IEEE semantics), so finite coordinates prove finite latents; otherwise the
    latents are checked for the usual error, and finite latents whose coordinates overflow
    float64 are refused too.
    """
    C = check_matrix(cavs, "cavs")
    dtype = np.float32 if getattr(Z, "dtype", None) == np.float32 else np.float64
    Z = check_matrix(Z, "Z", min_rows=0, dtype=dtype, finite=False)
    check_n_features(Z, C.shape[1], "Z")
    out = _project(Z, np.ascontiguousarray(C, dtype=np.float64), n_jobs)
    check_projected(Z, out)
    return out


def check_projected(Z, out) -> None:
    """Nothing when the coordinates ``out`` of ``Z`` are finite, else the clear error: NaN/inf
    latents, or finite latents whose coordinates overflow float64."""
    if not all_finite(out):
        check_matrix(Z, "Z", min_rows=0, dtype=Z.dtype)  # raises for NaN/inf latents
        raise InvalidInputError(
            f"Z Cᵀ overflows float64 (largest |Z| entry {float(np.abs(Z).max()):.3g}): rescale the latents "
            "(e.g. standardise them) before projecting them onto the CAVs.")


def project_with_norms(Z, C, n_jobs=None) -> tuple[np.ndarray, np.ndarray]:
    """``(Z Cᵀ, ‖z‖²)`` of latents Z (n, d) and rows C (M, d), float64, in one pass over Z (the
    squared norms are summed from the widened rows while they are in cache). No input check:
    for callers that checked Z (or only need finite rows' results) and give C as float64;
    :func:`project`'s guarantees (same bits at any thread count) hold."""
    return _project(Z, np.ascontiguousarray(C, dtype=np.float64), n_jobs, norms=True)


def _project(Z, C, n_jobs, norms: bool = False):
    from pipeline.concepts import _project_kernel as _kernel  # numba on first use: a run without concepts never loads it

    if not _kernel.AVAILABLE:  # pragma: no cover - numba is a dependency
        Z64 = Z.astype(np.float64)
        return (Z64 @ C.T, np.einsum("ij,ij->i", Z64, Z64)) if norms else Z64 @ C.T
    n_rows = Z.shape[0]
    out = np.empty((n_rows, C.shape[0]))
    sq = np.empty(n_rows if norms else 0)
    with limit_threads(n_jobs, work=Z.size * C.shape[0]) as n:
        tiles = -(-n_rows // _kernel.ROWS)
        n = max(1, min(n, tiles // 64))  # a thread for at least 64 tiles (256 rows)
        if n == 1:
            _kernel.project_rows(Z, C, out, sq, 0, n_rows)
        else:
            bounds = [min(n_rows, (tiles * i // n) * _kernel.ROWS) for i in range(n + 1)]
            map_blocks(lambda i: _kernel.project_rows(Z, C, out, sq, bounds[i], bounds[i + 1]), list(range(n)))
    return (out, sq) if norms else out


def project_mixture(cavs, weights, means, covariances) -> tuple:
    """A latent mixture in concept coordinates: ``(w, μ Cᵀ, C Σ_k Cᵀ)`` (Eq. 5), shapes
    (K,), (K, M), (K, M, M), for CAV rows C (M, d), means (K, d), covariances (K, d, d)."""
    C = np.asarray(cavs, dtype=np.float64)
    return weights, project(means, C), np.einsum("ij,kjl,ml->kim", C, np.asarray(covariances), C)


def concept_variances(cavs, covariances) -> np.ndarray:
    """``c_mᵀ Σ c_m`` for every CAV row c_m, under a covariance (d, d) -> (M,) or a stack
    (K, d, d) -> (K, M): the diagonal of C Σ Cᵀ (Eq. 5)."""
    C = np.asarray(cavs, dtype=np.float64)
    return np.einsum("md,...de,me->...m", C, np.asarray(covariances, dtype=np.float64), C)


def mixture_sigma(covariances) -> np.ndarray:
    """Per-axis σ_j bounding every component (MMDT Algorithm 1): sqrt of the largest
    component variance along each axis, from covariances (K, d, d); shape (d,)."""
    return np.sqrt(np.einsum("kjj->kj", np.asarray(covariances)).max(axis=0))


def check_cavs(cavs, names: Sequence[str] | None = None) -> np.ndarray:
    """Return CAVs as a finite (M, d) float array; raise on zero rows, log rank deficiency."""
    C = check_matrix(cavs, "cavs")
    names = list(names) if names is not None else [f"concept_{m}" for m in range(C.shape[0])]
    norms = np.linalg.norm(C, axis=1)
    if (norms == 0).any():
        zero = [names[m] for m in np.flatnonzero(norms == 0)]
        raise InvalidInputError(f"CAV(s) {zero} are all-zero; refit them or remove these concepts.")
    if C.shape[0] <= C.shape[1]:
        rank = np.linalg.matrix_rank(C / norms[:, None], tol=1e-6)
        if rank < C.shape[0]:
            log.warning("the %d CAVs span only %d dimensions (collinear concepts); the tree can use at most "
                        "%d independent concept directions", C.shape[0], rank, rank)
    return C


def similar_cavs(cavs: np.ndarray, names: Sequence[str], tol: float = 1e-3) -> dict[str, str]:
    """Concepts whose CAV has ``|cos| > 1 - tol`` to an earlier one: name -> a note naming it.

    A note, not a reason to drop the concept: two concepts are the same only when their examples
    and labels are (:class:`pipeline.concepts.cav.CAVFitter` drops those before fitting); different
    example sets can still give (nearly) parallel directions, e.g. after a degenerate
    standardisation of a few examples, and the reader should know the two cuts coincide."""
    U = cavs / np.maximum(np.linalg.norm(cavs, axis=1, keepdims=True), 1e-300)
    out: dict[str, str] = {}
    for m in range(1, U.shape[0]):
        cos = U[:m] @ U[m]
        j = int(np.argmax(np.abs(cos)))
        if abs(cos[j]) > 1 - tol:
            out[names[m]] = (f"its CAV is {'parallel' if cos[j] > 0 else 'opposite'} to {names[j]!r}'s "
                             f"(cos {cos[j]:+.4f}) although their examples differ: the two cut the data alike")
            log.warning("concept %r: %s", names[m], out[names[m]])
    return out


def check_covariance(covariance, n_features: int, name: str = "covariance", atol: float = 1e-8) -> np.ndarray:
    """Return a symmetric PSD covariance of shape (d, d) or (K, d, d); diagonal vectors
    (d,) / (K, d) are expanded. Raise InvalidInputError if it is not PSD."""
    S = np.asarray(covariance, dtype=np.float64)
    if S.ndim in (1, 2) and S.shape[-1] == n_features and (S.ndim == 1 or S.shape[0] != n_features):
        # diagonal variances: (d,) or (K, d) with K != d
        if (S < 0).any():
            raise InvalidInputError(f"{name}: diagonal variances must be >= 0, got min {S.min():.3g}.")
        return np.einsum("...i,ij->...ij", S, np.eye(n_features))
    if S.shape[-2:] != (n_features, n_features) or S.ndim not in (2, 3):
        raise InvalidInputError(
            f"{name} must have shape (d, d), (K, d, d), (d,) or (K, d) with d={n_features}, got {S.shape}."
        )
    if not np.isfinite(S).all():
        raise InvalidInputError(f"{name} contains NaN or infinite values.")
    scale = max(1.0, float(np.abs(S).max()))
    if not np.allclose(S, np.swapaxes(S, -1, -2), atol=atol * scale * 1e3):
        raise InvalidInputError(f"{name} is not symmetric; pass a valid covariance matrix.")
    S = (S + np.swapaxes(S, -1, -2)) / 2
    eig = np.linalg.eigvalsh(S)
    if eig.min() < -1e-6 * scale:
        raise InvalidInputError(
            f"{name} is not positive semi-definite (smallest eigenvalue {eig.min():.3g}); "
            "check the mixture fit or pass covariance=None to use the pooled within-cluster covariance."
        )
    return S


def concept_mixture(cavs, means, covariance, *, weights=None, reduce: str = "max",
                    concept_names: Sequence[str] | None = None):
    """Means and standard deviations of a latent mixture in concept coordinates (Eq. 5).

    Parameters
    ----------
    cavs : array-like of shape (M, d)
    means : array-like of shape (K, d)
    covariance : array-like of shape (d, d), (K, d, d), (d,) or (K, d)
        Shared covariance, per-component covariances, or their diagonals.
    weights : array-like of shape (K,), optional
        Mixing weights, used only by ``reduce="mean"``.
    reduce : {"max", "mean"}
        How per-component variances along c_m combine into one σ̄_m.

    Returns
    -------
    concept_means : ndarray of shape (K, M)
    concept_sigma : ndarray of shape (M,)
    """
    C = check_cavs(cavs, concept_names)
    mu = check_matrix(means, "means", min_rows=2)
    if mu.shape[1] != C.shape[1]:
        raise InvalidInputError(f"means have {mu.shape[1]} latent dims but the CAVs have {C.shape[1]}.")
    S = check_covariance(covariance, C.shape[1])
    var = concept_variances(C, S)  # (M,) or (K, M)
    if var.ndim == 2:
        if var.shape[0] != mu.shape[0]:
            raise InvalidInputError(f"{var.shape[0]} covariances for {mu.shape[0]} means.")
        if reduce == "max":
            var = var.max(axis=0)
        elif reduce == "mean":
            w = np.full(mu.shape[0], 1 / mu.shape[0]) if weights is None else np.asarray(weights, float)
            var = (w / w.sum()) @ var
        else:
            raise InvalidInputError(f"reduce must be 'max' or 'mean', got {reduce!r}.")
    _check_sigma(var, concept_names)
    return mu @ C.T, np.sqrt(var)


def pooled_concept_sigma(concept_coords, labels) -> tuple[np.ndarray, np.ndarray]:
    """Cluster means and pooled within-cluster σ̄ of concept coordinates, for clusterings
    without a mixture. Noise points (label -1) are ignored.

    Returns ``(means (K, M), sigma (M,))`` with clusters ordered by label.
    """
    X = check_matrix(concept_coords, "concept_coords")
    y = check_labels(labels, X.shape[0], "labels")
    keep = y >= 0
    X, y = X[keep], y[keep]
    ks = np.unique(y)
    if ks.size < 2:
        raise InvalidInputError(f"need at least 2 clusters to explain, got {ks.size}.")
    if X.shape[0] <= ks.size:
        raise InvalidInputError("need more points than clusters to estimate a within-cluster variance.")
    means = np.stack([X[y == k].mean(axis=0) for k in ks])
    resid = X - means[np.searchsorted(ks, y)]
    var = (resid**2).sum(axis=0) / (X.shape[0] - ks.size)
    _check_sigma(var, None)
    return means, np.sqrt(var)


def _check_sigma(var: np.ndarray, names) -> None:
    tiny = var <= 1e-12 * max(1.0, float(var.max()))
    if tiny.any():
        bad = [names[m] if names is not None else m for m in np.flatnonzero(tiny)]
        raise InvalidInputError(
            f"concept(s) {bad} have zero variance under the mixture (CAV in the null space of Σ); "
            "their explainability-to-noise ratio is undefined — drop these concepts."
        )


def pairwise_ratios(concept_means, concept_sigma) -> np.ndarray:
    """``(μ̄_k,m − μ̄_l,m)² / (2 σ̄_m²)`` for all pairs, shape (M, K, K)."""
    mu = np.asarray(concept_means, float)
    sig = np.asarray(concept_sigma, float)
    diff = mu.T[:, :, None] - mu.T[:, None, :]
    return diff**2 / (2 * sig[:, None, None] ** 2)


def q_from_ratios(ratios: np.ndarray) -> float:
    """min over pairs k≠l of max over concepts of the pairwise ratios (M, K, K)."""
    best = ratios.max(axis=0)
    K = best.shape[0]
    return float(best[~np.eye(K, dtype=bool)].min())
