"""Streaming maths: statistics of data that arrive in row chunks (docs/out-of-core.md).

Pure functions over arrays and iterables of arrays, for data that never sit in memory whole
(embeddings memory-mapped from disk, shards on a cluster):

- :class:`Moments` -- per-cluster counts, means and scatter matrices accumulated in one pass
  (Chan et al.'s pairwise update), merged in a fixed order so that any partition of the rows
  into the same chunks gives bit-identical results, wherever each chunk was computed; the
  mixture (weights, means, covariances) MMDT needs.
- :func:`stream_kmeans` -- MiniBatchKMeans ``partial_fit`` over chunks (several passes).
- :func:`stratified_sample` -- row indices of a sample that keeps every cluster's share.
- :class:`Contingency` -- predicted x reference counts accumulated chunk by chunk; ARI, AMI,
  agreement and mis-assignment from it equal the in-memory metrics on all rows (they are
  functions of the contingency table).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

import numpy as np

from pipeline.metrics import ami, ari, reference_agreement
from pipeline.validation import InvalidInputError, check_matrix


@dataclass(frozen=True)
class Moments:
    """Per-cluster sufficient statistics of rows of ``d`` features.

    Attributes
    ----------
    counts : ndarray of shape (K,), int64
    means : ndarray of shape (K, d), float64
    scatter : ndarray of shape (K, d, d), float64
        Sum over a cluster's rows of (x - mean)(x - mean)ᵀ (only the diagonal when
        ``diagonal``: shape (K, d)).
    """

    counts: np.ndarray
    means: np.ndarray
    scatter: np.ndarray

    @property
    def diagonal(self) -> bool:
        return self.scatter.ndim == 2

    def merge(self, other: "Moments") -> "Moments":
        """The moments of both row sets (Chan, Golub & LeVeque's pairwise update)."""
        na, nb = self.counts.astype(np.float64), other.counts.astype(np.float64)
        n = na + nb
        safe = np.where(n > 0, n, 1.0)
        delta = other.means - self.means
        means = self.means + delta * (nb / safe)[:, None]
        factor = (na * nb / safe)
        if self.diagonal:
            extra = delta * delta * factor[:, None]
        else:
            extra = np.einsum("ki,kj->kij", delta, delta) * factor[:, None, None]
        return Moments(self.counts + other.counts, means, self.scatter + other.scatter + extra)

    def mixture(self, ddof: int = 0) -> tuple:
        """``(weights (K,), means (K, d), covariances (K, d, d) or variances (K, d))``;
        population covariances by default (``ddof=0``, as :func:`MMDT.fit` estimates them)."""
        if np.any(self.counts <= ddof):
            empty = np.flatnonzero(self.counts <= ddof).tolist()
            raise InvalidInputError(f"clusters {empty} have no rows (or too few for ddof={ddof}): no mean or "
                                    "covariance can be estimated; use fewer clusters.")
        denom = (self.counts - ddof).astype(np.float64)
        shape = (-1, 1) if self.diagonal else (-1, 1, 1)
        return self.counts / self.counts.sum(), self.means.copy(), self.scatter / denom.reshape(shape)


def chunk_moments(X, labels, n_clusters: int, diagonal: bool = False) -> Moments:
    """:class:`Moments` of one chunk: rows ``X`` (n, d) with cluster ``labels`` 0..K-1 (-1 is
    left out), computed in float64 (two-pass within the chunk)."""
    X = check_matrix(X, "X", min_rows=0)
    labels = np.asarray(labels)
    if labels.shape != (X.shape[0],):
        raise InvalidInputError(f"labels has shape {labels.shape}; expected ({X.shape[0]},), one per row of X.")
    d = X.shape[1]
    counts = np.bincount(labels[labels >= 0], minlength=n_clusters).astype(np.int64)[:n_clusters]
    means = np.zeros((n_clusters, d))
    scatter = np.zeros((n_clusters, d) if diagonal else (n_clusters, d, d))
    for k in np.flatnonzero(counts):
        rows = X[labels == k]
        means[k] = rows.mean(axis=0)
        centred = rows - means[k]
        scatter[k] = (centred * centred).sum(axis=0) if diagonal else centred.T @ centred
    return Moments(counts, means, scatter)


def merge_moments(parts: Iterable[Moments]) -> Moments:
    """Merge chunk moments in the order given (a fixed order gives bit-identical results)."""
    total = None
    for part in parts:
        total = part if total is None else total.merge(part)
    if total is None:
        raise InvalidInputError("no chunks to accumulate: the data has no rows.")
    return total


def stream_moments(chunks: Iterable[tuple], n_clusters: int, diagonal: bool = False) -> Moments:
    """One pass over ``(X_chunk, labels_chunk)`` pairs -> :class:`Moments` of all rows."""
    return merge_moments(chunk_moments(X, y, n_clusters, diagonal) for X, y in chunks)


def stream_kmeans(chunk_passes: Iterable[Iterable[np.ndarray]], n_clusters: int, random_state: int = 0,
                  **params):
    """k-means on rows that arrive in chunks: :class:`sklearn.cluster.MiniBatchKMeans`
    ``partial_fit`` on every chunk of every pass.

    Parameters
    ----------
    chunk_passes : iterable of iterables of ndarray (n_i, d)
        One iterable of chunks per pass over the data (the first chunk must hold at least
        ``n_clusters`` rows: it seeds k-means++).
    n_clusters : int
    random_state : int
    **params
        Passed to MiniBatchKMeans (``n_init``, ``reassignment_ratio`` ...).

    Returns
    -------
    sklearn.cluster.MiniBatchKMeans
        Fitted; ``predict`` assigns further chunks.
    """
    from sklearn.cluster import MiniBatchKMeans

    model = MiniBatchKMeans(n_clusters=n_clusters, random_state=random_state, **params)
    seen = 0
    for chunks in chunk_passes:
        for chunk in chunks:
            if seen == 0 and chunk.shape[0] < n_clusters:
                raise InvalidInputError(f"the first chunk has {chunk.shape[0]} rows, fewer than the {n_clusters} "
                                        "clusters k-means must seed from it; use larger chunks.")
            model.partial_fit(chunk)
            seen += chunk.shape[0]
    if seen == 0:
        raise InvalidInputError("no chunks to cluster: the data has no rows.")
    return model


def stratified_sample(labels, n_rows: int, random_state: int = 0) -> np.ndarray:
    """Sorted indices of ``n_rows`` rows drawn without replacement, every label value (noise
    -1 included) keeping its share (largest-remainder rounding, at least one row per value).

    ``n_rows`` at least the number of rows returns every row.
    """
    labels = np.asarray(labels)
    n = labels.shape[0]
    if n_rows >= n:
        return np.arange(n)
    if n_rows < 1:
        raise InvalidInputError(f"a sample of {n_rows} rows: ask for at least one row.")
    values, inverse, counts = np.unique(labels, return_inverse=True, return_counts=True)
    exact = counts * (n_rows / n)
    take = np.minimum(np.maximum(np.floor(exact).astype(np.int64), 1), counts)
    order = np.argsort(-(exact - np.floor(exact)), kind="stable")
    for i in order:  # largest remainders first, until the total is n_rows
        if take.sum() >= n_rows:
            break
        if take[i] < counts[i]:
            take[i] += 1
    rng = np.random.default_rng(random_state)
    by_value = np.argsort(inverse, kind="stable")
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    picked = [rng.choice(by_value[s:s + c], size=t, replace=False) for s, c, t in zip(starts, counts, take)]
    return np.sort(np.concatenate(picked))


class Contingency:
    """Counts of (predicted, reference) label pairs, accumulated chunk by chunk.

    Labels are integers; a reference ``-1`` is noise (left out of agreement and
    mis-assignment, kept in ARI/AMI unless ``exclude_noise``). The metrics equal
    :mod:`pipeline.metrics` on all rows at once: each depends on the rows only through this table.
    """

    def __init__(self):
        self.table: dict[tuple[int, int], int] = {}

    def update(self, pred, ref) -> "Contingency":
        pred, ref = np.asarray(pred, dtype=np.int64), np.asarray(ref, dtype=np.int64)
        if pred.shape != ref.shape:
            raise InvalidInputError(f"predicted labels {pred.shape} and reference labels {ref.shape} differ in length.")
        pairs, counts = np.unique(np.stack([pred, ref]), axis=1, return_counts=True)
        for (p, r), c in zip(pairs.T.tolist(), counts.tolist()):
            self.table[p, r] = self.table.get((p, r), 0) + c
        return self

    def merge(self, other: "Contingency") -> "Contingency":
        out = Contingency()
        for t in (self.table, other.table):
            for k, c in t.items():
                out.table[k] = out.table.get(k, 0) + c
        return out

    def _labels(self, exclude_noise: bool):
        items = sorted((k, c) for k, c in self.table.items() if not (exclude_noise and k[1] == -1))
        if not items:
            raise InvalidInputError("no labelled rows to compare (empty input, or every reference label is -1).")
        keys = np.array([k for k, _ in items], dtype=np.int64)
        counts = np.array([c for _, c in items], dtype=np.int64)
        return np.repeat(keys[:, 0], counts), np.repeat(keys[:, 1], counts)

    def ari(self, exclude_noise: bool = False) -> float:
        pred, ref = self._labels(exclude_noise)
        return ari(ref, pred)

    def ami(self, exclude_noise: bool = False) -> float:
        pred, ref = self._labels(exclude_noise)
        return ami(ref, pred)

    def agreement(self, match: bool = False) -> float:
        pred, ref = self._labels(exclude_noise=True)
        return reference_agreement(pred, ref, match=match)

    def misassignment(self) -> float:
        return 1.0 - self.agreement()

    @property
    def n_rows(self) -> int:
        return int(sum(self.table.values()))
