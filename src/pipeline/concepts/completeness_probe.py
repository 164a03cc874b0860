"""How much a concept set can explain: Yeh et al.'s completeness, the linear-probe ratio, importance.

**Completeness** (Yeh et al., "On completeness-aware concept-based explanations in deep neural
networks", NeurIPS 2020, Def. 3.1), :func:`yeh_completeness`: the model's own head — here the
reference clustering's rule for a latent point — applied to latents *rebuilt from the concept
scores* (by an affine map, or a small network, fitted on other rows), relative to the head on the
latents themselves, each above chance (the largest cluster's share). It is meaningful only beside
what random directions score (:mod:`pipeline.concept_quality`): any few directions of a small latent
space rebuild part of it.

**Linear-probe ratio** (:func:`concept_completeness`): with ``acc(F)`` the cross-validated held-out
accuracy of one probe (a multinomial logistic regression on standardised features) predicting the
reference cluster from features ``F``,

    probe ratio = (acc(Z Cᵀ) − chance) / (acc(Z) − chance)   (not clipped: above 1 when the concept
                                                              scores suit the probe better than the latents).

It asks the question of a clustering that has no head; it is not Yeh et al.'s figure.

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

    completeness: float  # the probe ratio (1: as much as the latents; may exceed 1)
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
    k = fold_count(counts, cv)
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
    return Completeness(completeness=float(ratio),
                        accuracy_concepts=float(acc_c), accuracy_latents=float(acc_z), chance=chance,
                        n_rows=int(y.size), n_concepts=int(Xc.shape[1]), n_latents=int(Z.shape[1]))


def fold_count(counts, n_folds: int) -> int:
    """The stratified folds the clusters' sizes ``counts`` allow (at most ``n_folds``); an
    :class:`InvalidInputError` with fewer than 2 clusters or 2 folds."""
    counts = np.asarray(counts)
    k = min(int(n_folds), int(counts.min())) if counts.size else 0
    if counts.size < 2 or k < 2:
        raise InvalidInputError(f"completeness needs at least 2 clusters with {max(int(n_folds), 2)} points each; the "
                                f"clusters have {counts.tolist()} points.")
    return k


def sample_rows(labels, max_rows: int = MAX_ROWS, min_per_class: int = 2, random_state=0) -> np.ndarray:
    """Sorted indices of at most ``max_rows`` rows with a label >= 0, stratified by label (every
    label's share kept); all such rows when there are fewer."""
    from sklearn.model_selection import train_test_split

    y = np.asarray(labels).ravel()
    keep = np.flatnonzero(y >= 0)
    if keep.size <= max_rows:
        return keep
    classes, counts = np.unique(y[keep], return_counts=True)
    if keep.size > 50 * max_rows:
        keep, _ = _presample(keep, y[keep], classes, counts, 50 * max_rows, 2 * min_per_class, random_state)
    try:
        rows, _ = train_test_split(keep, train_size=max_rows, stratify=y[keep], random_state=random_state)
    except ValueError:  # a class too small to stratify: a uniform sample
        rows = np.random.default_rng(random_state).choice(keep, max_rows, replace=False)
    return np.sort(rows)


def yeh_completeness(Z, V, reference, head, folds, *, g: str = "affine", random_state=0) -> dict:
    """Yeh et al.'s completeness (NeurIPS 2020, Def. 3.1) of concept scores ``V`` (n, M) with the
    reference clustering's own rule ``head`` as the model head.

    Latents are rebuilt from the concept scores by ``g`` fitted on each fold's training rows —
    ``"affine"``: least squares ``z ≈ a + B v``; ``"network"``: a one-hidden-layer network of
    random tanh features with a ridge output layer (:func:`_network_rebuild`) — and the head
    assigns the rebuilt latents of the held-out rows. With ``acc`` the share of held-out rows the
    head puts in their reference cluster, ``acc_Z`` the same for the latents themselves and
    ``chance`` the largest cluster's share,

        completeness = (acc − chance) / (acc_Z − chance)

    (not clipped: a value above 1 means the rebuilt latents agree with the reference more often
    than the latents themselves, which happens only where the head's rule differs from the labels).

    Parameters
    ----------
    Z : ndarray of shape (n, d)
    V : ndarray of shape (n, M)
    reference : ndarray of shape (n,)
        The reference clusters of the rows (>= 0).
    head : object
        ``predict(Z)``; with ``g="affine"`` also ``predict_affine(a, B, V)``
        (:mod:`pipeline.cluster_heads`).
    folds : list of (train, test) index arrays

    Returns
    -------
    dict
        ``completeness`` (over the pooled held-out rows), ``per_fold`` (list), ``accuracy``,
        ``accuracy_latents``, ``chance``.
    """
    Z = np.asarray(Z, dtype=np.float64)
    V = np.asarray(V, dtype=np.float64)
    y = np.asarray(reference).ravel()
    chance = float(np.bincount(np.unique(y, return_inverse=True)[1]).max() / y.size)
    acc_z = float(np.mean(np.asarray(head.predict(Z)) == y))
    hits, per_fold = np.zeros(y.size, dtype=bool), []
    for tr, te in folds:
        if g == "affine":
            coef = least_squares(np.column_stack([V[tr], np.ones(tr.size)]), Z[tr])  # (M + 1, d)
            pred = head.predict_affine(coef[-1], coef[:-1].T, V[te])
        elif g == "network":
            pred = head.predict(_network_rebuild(V[tr], Z[tr], V[te], random_state))
        else:
            raise InvalidInputError(f"g={g!r}; choose 'affine' or 'network'.")
        hits[te] = np.asarray(pred) == y[te]
        acc = float(hits[te].mean())
        per_fold.append((acc - chance) / (acc_z - chance) if acc_z > chance else float("nan"))
    acc = float(hits[np.concatenate([te for _, te in folds])].mean())
    value = (acc - chance) / (acc_z - chance) if acc_z > chance else float("nan")
    return {"completeness": float(value), "per_fold": [float(v) for v in per_fold], "accuracy": acc,
            "accuracy_latents": acc_z, "chance": chance}


def least_squares(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """The minimum-norm least-squares solution X of ``A X ≈ B`` (``np.linalg.lstsq(A, B, rcond=None)``:
    singular values of ``A`` below ``max(A.shape)·eps`` times the largest are left out), through the
    thin SVD of the narrow ``A`` and two products: ~8x faster than LAPACK's gelsd for a few
    columns and hundreds of right-hand sides (4,000 x 21 against 512: 4 ms, not 32), equal within
    rounding (tested)."""
    U, s, Vt = np.linalg.svd(A, full_matrices=False)
    keep = s > (s[0] if s.size else 0.0) * max(A.shape) * np.finfo(np.float64).eps
    return (Vt[keep].T / s[keep]) @ (U[:, keep].T @ B)


#: hidden units of the network that rebuilds latents from concept scores
NETWORK_UNITS = 256


def _network_rebuild(V_train, Z_train, V_test, random_state) -> np.ndarray:
    """Latents of the test scores rebuilt by a one-hidden-layer network fitted on the training rows:
    ``NETWORK_UNITS`` tanh units with random input weights (on standardised scores) and an output
    layer fitted by ridge regression (a random-feature network: trained in closed form, so a
    completeness table of twenty random draws costs a fraction of a second per draw)."""
    rng = np.random.default_rng(random_state)
    v_mu, v_sd = V_train.mean(axis=0), V_train.std(axis=0)
    v_sd[v_sd == 0] = 1.0
    M = V_train.shape[1]
    W = rng.standard_normal((M, NETWORK_UNITS)) / np.sqrt(M)
    b = rng.uniform(-1.0, 1.0, NETWORK_UNITS)

    def hidden(V):
        H = np.tanh(((V - v_mu) / v_sd) @ W + b)
        return np.column_stack([H, (V - v_mu) / v_sd, np.ones(len(V))])  # the affine part kept beside

    H = hidden(V_train)
    ridge = 1e-3 * len(H)
    coef = np.linalg.solve(H.T @ H + ridge * np.eye(H.shape[1]), H.T @ Z_train)
    return hidden(V_test) @ coef


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
