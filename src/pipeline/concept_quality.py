"""How good a concept set is, judged against directions that mean nothing (issue 48).

Every concept coordinate is a linear map of the latents, so *any* few directions carry some of
what the latents carry about the clusters; a quality figure means something only beside what
random directions score on the same run. This module computes, for concept directions ``C``
(M, d) on latents ``Z`` (n, d) with reference clusters and the clustering's own head
(:mod:`pipeline.cluster_heads`):

* :func:`completeness_table` — Yeh et al.'s completeness (latents rebuilt from the concept scores
  by an affine map, and by a small network), the linear-probe ratio, each for the concepts, for
  ``n_random`` draws of M random unit directions (median and range) and for the top-M principal
  directions, with fold-to-fold intervals;
* :func:`tree_baseline` — the agreement (ARI) with the reference of a CART tree of K leaves on
  the concept coordinates against the same tree on random and principal directions.

Pure: arrays in, dicts of numbers out.
"""

from __future__ import annotations

import numpy as np

from pipeline.concepts.completeness_probe import _probe_accuracy, fold_count, sample_rows, yeh_completeness
from pipeline.threads import blas_threads, map_shared
from pipeline.validation import InvalidInputError

#: the three kinds of direction sets every figure is computed for
SETS = ("concepts", "random", "principal")


def random_directions(M: int, d: int, rng: np.random.Generator) -> np.ndarray:
    """M random unit directions in d dimensions (isotropic Gaussian, normalised), shape (M, d)."""
    D = rng.standard_normal((M, d))
    return D / np.linalg.norm(D, axis=1, keepdims=True)


def principal_directions(Z: np.ndarray, M: int) -> np.ndarray:
    """The top-M principal directions of ``Z`` (rows of the result, (min(M, d), d)): the right
    singular vectors of the centred rows, taken from the SVD of their QR factor R when there are
    at least twice as many rows as columns (LAPACK's own route for such tall matrices, without
    forming the left singular vectors: a third less time on 20,000 x 512; equal to
    ``np.linalg.svd``'s within rounding, tested)."""
    Zc = Z - Z.mean(axis=0)
    if Zc.shape[0] >= 2 * Zc.shape[1]:
        Zc = np.linalg.qr(Zc, mode="r")
    _, _, Vt = np.linalg.svd(Zc, full_matrices=False)
    return Vt[:M]


def _summary(values: list[float]) -> dict:
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    if v.size == 0:
        return {"median": float("nan"), "low": float("nan"), "high": float("nan"), "n": 0}
    return {"median": float(np.median(v)), "low": float(v.min()), "high": float(v.max()), "n": int(v.size)}


def completeness_table(Z, C, reference, head=None, *, n_random: int = 20, n_folds: int = 5, max_rows: int = 5000,
                       network: bool = True, network_rows: int = 2000, principal=None, random_state=0) -> dict:
    """Completeness of the concept directions ``C`` beside random and principal directions.

    Parameters
    ----------
    Z : array-like of shape (n, d)
        Latents.
    C : array-like of shape (M, d)
        Concept directions (CAVs).
    reference : array-like of shape (n,)
        Reference clusters (negative: noise, left out).
    head : object, optional
        The clustering's rule (:mod:`pipeline.cluster_heads`); None: the Yeh figures are not computed
        (only the probe ratio).
    n_random : int, default=20
        Draws of M random directions.
    n_folds : int, default=5
        Stratified folds of the Yeh figures (fold-to-fold range reported for the concepts).
    max_rows, network_rows : int
        Rows (a stratified sample) of the affine figure and the probe / of the network figure.
    network : bool, default=True
        Also rebuild the latents by a small network.
    principal : array-like of shape (M, d), optional
        The top-M principal directions of the sampled rows (:func:`principal_directions`), when the
        caller has them already; computed here when None.

    Returns
    -------
    dict
        ``n_concepts``, ``n_latents``, ``n_rows``, ``spans`` (M >= d: any M independent directions
        rebuild the latents exactly, so the Yeh figures are 1 for every set) and, per measure
        (``affine``, ``network``, ``probe``): ``concepts`` (value, fold range), ``random`` (median,
        low, high over the draws), ``principal``; plus ``accuracy_latents`` and ``chance``.
    """
    from sklearn.model_selection import StratifiedKFold

    C = np.atleast_2d(np.asarray(C, dtype=np.float64))
    labels = np.asarray(reference).ravel()
    if np.ndim(Z) != 2 or len(Z) != labels.size or C.shape[1] != np.shape(Z)[1]:
        raise InvalidInputError(f"completeness needs latents (n, d), concept directions (M, d) and one reference label "
                                f"per row; got {np.shape(Z)}, {C.shape} and {labels.shape}.")
    rows = sample_rows(labels, max_rows, random_state=random_state)
    Zs = np.asarray(Z[rows] if hasattr(Z, "shape") else np.asarray(Z)[rows], dtype=np.float64)
    y = labels[rows]
    classes, counts = np.unique(y, return_counts=True)
    k = fold_count(counts, n_folds)
    M, d = C.shape
    rng = np.random.default_rng(random_state)
    folds = list(StratifiedKFold(k, shuffle=True, random_state=random_state).split(Zs, y))
    net_rows = sample_rows(y, network_rows, random_state=random_state)
    net_folds = list(StratifiedKFold(min(3, k), shuffle=True, random_state=random_state).split(net_rows, y[net_rows]))
    chance = float(counts.max() / y.size)
    probe_folds = folds[:3] if k > 3 else folds
    with blas_threads(1):
        acc_z_probe = _probe_accuracy(Zs, y, probe_folds, 1.0)

    def evaluate(D: np.ndarray, full: bool) -> dict:
        V = Zs @ D.T
        out = {}
        if head is not None:
            out["affine"] = yeh_completeness(Zs, V, y, head, folds if full else folds[:1], g="affine")
            if network:
                out["network"] = yeh_completeness(Zs[net_rows], V[net_rows], y[net_rows], head,
                                                  net_folds if full else net_folds[:1], g="network",
                                                  random_state=random_state)
        acc = _probe_accuracy(V, y, probe_folds if full else probe_folds[:1], 1.0)
        out["probe"] = {"completeness": (acc - chance) / (acc_z_probe - chance) if acc_z_probe > chance
                        else float("nan"), "accuracy": acc}
        return out

    # many small fits: one BLAS thread each, the draws shared among the run's threads (each draw's
    # directions are drawn here first, in order, so any count of threads gives the same table)
    random_sets = [random_directions(M, d, rng) for _ in range(int(n_random))]
    top = principal_directions(Zs, M) if principal is None else np.asarray(principal, dtype=np.float64)
    with blas_threads(1):
        concepts = evaluate(C, True)
        draws = list(map_shared(lambda D: evaluate(D, False), random_sets))
        principal = evaluate(top, True)
    table = {"n_concepts": M, "n_latents": d, "n_rows": int(y.size), "n_folds": k, "n_random": int(n_random),
             "spans": bool(M >= d), "chance": chance, "accuracy_latents_probe": acc_z_probe}
    for measure in ("affine", "network", "probe"):
        if measure not in concepts:
            continue
        c = concepts[measure]
        entry = {"concepts": float(c["completeness"]), "principal": float(principal[measure]["completeness"]),
                 "random": _summary([dr[measure]["completeness"] for dr in draws])}
        if "per_fold" in c:
            entry["concepts_folds"] = [min(c["per_fold"]), max(c["per_fold"])]
            entry["accuracy"] = c["accuracy"]
            entry["accuracy_latents"] = c["accuracy_latents"]
        table[measure] = entry
    return table


def tree_baseline(X, Z, C, reference, n_leaves: int, *, n_random: int = 20, max_rows: int = 20_000,
                  principal=None, random_state=0) -> dict:
    """ARI with the reference of CART trees with ``n_leaves`` leaves on the concept coordinates
    ``X`` (n, M), on the coordinates of M random directions (median, low, high over ``n_random``
    draws) and on the top-M principal directions of ``Z`` (n, d): what the concepts add over
    directions that mean nothing, for trees of the same size. ``principal``: those directions of
    the sampled rows, when the caller has them already (:func:`principal_directions`)."""
    from sklearn.metrics import adjusted_rand_score

    from pipeline.trees.cart import CART

    labels = np.asarray(reference).ravel()
    rows = sample_rows(labels, max_rows, random_state=random_state)
    y = labels[rows]
    Zs = np.asarray(Z[rows] if hasattr(Z, "shape") else np.asarray(Z)[rows], dtype=np.float64)
    Xs = np.asarray(X[rows] if hasattr(X, "shape") else np.asarray(X)[rows], dtype=np.float64)
    M = Xs.shape[1]
    rng = np.random.default_rng(random_state)

    def ari(F: np.ndarray) -> float:
        # the presorted builder grows scikit-learn's tree (the same one) ~9x faster on 20,000 x 20
        tree = CART(n_leaves=int(n_leaves), random_state=0, builder="presorted").fit(F, y)
        return float(adjusted_rand_score(y, tree.predict(F)))

    random_sets = [random_directions(M, Zs.shape[1], rng) for _ in range(int(n_random))]
    top = principal_directions(Zs, M) if principal is None else np.asarray(principal, dtype=np.float64)
    with blas_threads(1):
        return {"concepts": ari(Xs), "principal": ari(Zs @ top.T),
                "random": _summary(list(map_shared(lambda D: ari(Zs @ D.T), random_sets))),
                "n_leaves": int(n_leaves), "n_rows": int(y.size)}
