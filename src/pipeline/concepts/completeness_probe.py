"""How much a concept set can explain: concept completeness and each concept's importance.

**Completeness** (after Yeh et al., "On completeness-aware concept-based explanations in deep
neural networks", NeurIPS 2020, Def. 3.1): how well the quantity being explained — here the
reference clustering — is recovered from the concept scores alone, relative to the latents
themselves. With ``acc(F)`` the cross-validated held-out accuracy of one probe (a multinomial
logistic regression on standardised features) predicting the reference cluster from features
``F``, and ``chance`` the share of the largest cluster (what a probe that ignores its input
reaches),

    completeness = (acc(Z Cᵀ) − chance) / (acc(Z) − chance),   clipped to [0, 1].

1 means the concept coordinates carry everything about the clusters that the latents carry
(for a linear probe); 0 that they carry nothing beyond the cluster sizes. Yeh et al. use the
model's own head on the reconstructed latents; a linear probe on both inputs asks the same
question of a clustering that has no head, and uses the same folds and probe for both.

**Importance** of concept m for a tree: how much the tree's agreement with the reference (the
share of points it assigns to their reference cluster) drops when column m of the concept
coordinates is permuted (permutation importance, Breiman 2001), averaged over repeats.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from pipeline.validation import InvalidInputError, check_matrix

MAX_ROWS = 5000  # the probes see at most this many rows (stratified), so large runs stay cheap


@dataclass(frozen=True)
class Completeness:
    """Result of :func:`concept_completeness`."""

    completeness: float  # in [0, 1]
    accuracy_concepts: float  # held-out probe accuracy on the concept coordinates
    accuracy_latents: float  # ... on the latents
    chance: float  # share of the largest cluster
    n_rows: int  # rows the probes were fitted on
    n_concepts: int
    n_latents: int

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def _probe_accuracy(F: np.ndarray, y: np.ndarray, folds, C: float) -> float:
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    correct = 0
    for tr, te in folds:
        probe = make_pipeline(StandardScaler(), LogisticRegression(C=C, max_iter=300))
        probe.fit(F[tr], y[tr])
        correct += int((probe.predict(F[te]) == y[te]).sum())
    return correct / sum(len(te) for _, te in folds)


def concept_completeness(Z, concept_X, labels, cv: int = 3, max_rows: int = MAX_ROWS, C: float = 1.0,
                         random_state=0) -> Completeness:
    """Completeness of concept coordinates ``concept_X`` (n, M) for the clustering ``labels``
    (n,; negative = noise, left out) relative to the latents ``Z`` (n, m). See the module text.

    The same ``cv`` stratified folds and the same probe (standardised features, multinomial
    logistic regression with inverse penalty ``C``) are used for both; at most ``max_rows``
    rows (a stratified sample) enter the probes.
    """
    from sklearn.model_selection import StratifiedKFold, train_test_split

    y = np.asarray(labels).ravel()
    n_z, n_x = (np.shape(Z)[0] if np.ndim(Z) else 0), (np.shape(concept_X)[0] if np.ndim(concept_X) else 0)
    if not (n_z == n_x == y.shape[0]):
        raise InvalidInputError(f"completeness needs one row per point in Z ({n_z}), the concept coordinates "
                                f"({n_x}) and the labels ({y.shape[0]}).")
    # the rows are chosen from the labels alone; only they are read and checked (a million latents
    # are never copied whole)
    keep = np.flatnonzero(y >= 0)
    y = y[keep]
    classes, counts = np.unique(y, return_counts=True)
    k = min(int(cv), int(counts.min())) if counts.size else 0
    if classes.size < 2 or k < 2:
        raise InvalidInputError(f"completeness needs at least 2 clusters with {max(int(cv), 2)} points each; the "
                                f"clusters have {counts.tolist()} points.")
    if y.size > 50 * max_rows:  # a stratified split of 10M rows takes ~1 GB of index arrays: first a pre-sample
        keep, y = _presample(keep, y, classes, counts, 50 * max_rows, 2 * k, random_state)
    if y.size > max_rows:
        rows, _ = train_test_split(np.arange(y.size), train_size=max_rows, stratify=y, random_state=random_state)
        rows = np.sort(rows)
        keep, y = keep[rows], y[rows]
    Z = check_matrix(Z[keep] if hasattr(Z, "shape") else np.asarray(Z)[keep], "Z", min_rows=2)
    Xc = check_matrix(concept_X[keep] if hasattr(concept_X, "shape") else np.asarray(concept_X)[keep],
                      "concept coordinates", min_rows=2)
    folds = list(StratifiedKFold(k, shuffle=True, random_state=random_state).split(Z, y))
    chance = float(np.bincount(np.searchsorted(classes, y)).max() / y.size)
    acc_z = _probe_accuracy(Z, y, folds, C)
    acc_c = _probe_accuracy(Xc, y, folds, C)
    ratio = (acc_c - chance) / (acc_z - chance) if acc_z > chance else float("nan")
    return Completeness(completeness=float(np.clip(ratio, 0.0, 1.0)) if ratio == ratio else float("nan"),
                        accuracy_concepts=float(acc_c), accuracy_latents=float(acc_z), chance=chance,
                        n_rows=int(y.size), n_concepts=int(Xc.shape[1]), n_latents=int(Z.shape[1]))


def _presample(keep: np.ndarray, y: np.ndarray, classes, counts, size: int, least: int, random_state):
    """About ``size`` of the rows ``keep`` (labels ``y``), each class's share kept and at least
    ``least`` rows of every class (all of a smaller one); uniform within a class, in row order."""
    rng = np.random.default_rng(random_state)
    take = np.minimum(counts, np.maximum(np.round(counts * size / y.size).astype(np.int64), least))
    by_class = np.argsort(y, kind="stable")
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    picked = np.sort(np.concatenate([rng.choice(by_class[s:s + c], t, replace=False)
                                     for s, c, t in zip(starts, counts, take)]))
    return keep[picked], y[picked]


def permutation_importance(predict: Callable, X, reference, n_repeats: int = 5, max_rows: int = 20_000,
                           random_state=0) -> np.ndarray:
    """Drop in agreement (share of points ``predict`` assigns to their ``reference`` label; noise
    points, label < 0, left out) when each column of ``X`` (n, M) is permuted; shape (M,).

    ``predict`` maps an (n, M) array to labels (a fitted tree's ``predict``). At most
    ``max_rows`` rows (a random sample) are used.
    """
    ref = np.asarray(reference).ravel()
    if np.ndim(X) != 2 or len(X) != ref.size:
        raise InvalidInputError(f"permutation_importance needs X of shape (n, M) with one row per reference label "
                                f"({ref.size}), got shape {np.shape(X)}.")
    rows = np.flatnonzero(ref >= 0)  # the rows are chosen first: only they are copied and checked
    rng = np.random.default_rng(random_state)
    if rows.size > max_rows:
        rows = rows[np.sort(rng.choice(rows.size, size=max_rows, replace=False))]
    X, ref = check_matrix(np.asarray(X)[rows], "X", min_rows=1), ref[rows]
    base = float(np.mean(np.asarray(predict(X)) == ref))
    out = np.zeros(X.shape[1])
    n, repeats = X.shape[0], int(n_repeats)
    # the repeats' permuted copies stacked: one prediction of repeats x n rows per column (a tree's
    # predict is row by row, so each block's labels are those of its own call), the same draws in order
    Xp, refs = np.tile(X, (repeats, 1)), np.tile(ref, repeats)
    for m in range(X.shape[1]):
        for r in range(repeats):
            Xp[r * n:(r + 1) * n, m] = X[rng.permutation(n), m]
        hits = (np.asarray(predict(Xp)) == refs).reshape(repeats, n)
        out[m] = float(np.mean([base - float(np.mean(h)) for h in hits]))
        Xp[:, m] = np.tile(X[:, m], repeats)  # the column back, for the next one's permutations
    return out
