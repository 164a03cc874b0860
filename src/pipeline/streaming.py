"""Streaming maths: statistics of data that arrive in row chunks (docs/out-of-core.md).

Pure functions over arrays and iterables of arrays, for data that never sit in memory whole
(embeddings memory-mapped from disk, shards on a cluster):

- :class:`Moments` -- per-cluster counts, exact means and variances (exact integer sums per
  binary exponent: the same numbers however the rows are chunked, and for one chunk in
  memory) and scatter matrices (Chan et al.'s pairwise update, merged in chunk order): the
  mixture (weights, means, covariances) MMDT needs, in one pass.
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


_E_OFFSET, _E_RANGE, _HALF = 1126, 2100, 26  # exponents of frexp mantissas scaled to 53-bit integers


@dataclass(frozen=True)
class ExactSums:
    """Exact per-(cluster, column) sums of float64 values, as integers per binary exponent.

    Every float64 is ``M · 2^E`` with an integer ``M`` (|M| < 2^53); ``M`` is split into two
    halves of 26/27 bits whose sums per (cluster, column, E) are exact in int64. The sums do
    not depend on how the rows were chunked or in which order chunks are merged, and
    :meth:`total` turns them into exact rationals.

    Attributes
    ----------
    index : ndarray of int64
        Sorted bin ids ``(k · d + j) · 2100 + E + 1126`` that hold a value.
    hi, lo : ndarray of int64
        The sums of the upper and lower mantissa halves in those bins.
    """

    shape: tuple
    index: np.ndarray
    hi: np.ndarray
    lo: np.ndarray

    @classmethod
    def of(cls, V: np.ndarray, labels: np.ndarray, n_clusters: int) -> "ExactSums":
        keep = labels >= 0
        V, labels = V[keep], labels[keep].astype(np.int64)
        d = V.shape[1]
        m, e = np.frexp(V)
        M = (m * 2.0**53).astype(np.int64)
        cell = labels[:, None] * d + np.arange(d)[None, :]
        key = (cell * _E_RANGE + (e.astype(np.int64) - 53 + _E_OFFSET)).ravel()
        upper, lower = (M >> _HALF).ravel(), (M & ((1 << _HALF) - 1)).ravel()
        size = n_clusters * d * _E_RANGE
        if size <= 1 << 24 and key.size < 1 << 26:
            # float64 bincount sums halves below 2^27 exactly while a bin holds under 2^26 values
            hi = np.bincount(key, weights=upper, minlength=size).astype(np.int64)
            lo = np.bincount(key, weights=lower, minlength=size).astype(np.int64)
            index = np.flatnonzero((hi != 0) | (lo != 0))
            return cls((n_clusters, d), index, hi[index], lo[index])
        index, inverse = np.unique(key, return_inverse=True)
        hi = np.zeros(index.size, np.int64)
        lo = np.zeros(index.size, np.int64)
        np.add.at(hi, inverse, upper)
        np.add.at(lo, inverse, lower)
        return cls((n_clusters, d), index, hi, lo)

    def merge(self, other: "ExactSums") -> "ExactSums":
        index, inverse = np.unique(np.concatenate([self.index, other.index]), return_inverse=True)
        hi = np.zeros(index.size, np.int64)
        lo = np.zeros(index.size, np.int64)
        np.add.at(hi, inverse, np.concatenate([self.hi, other.hi]))
        np.add.at(lo, inverse, np.concatenate([self.lo, other.lo]))
        return ExactSums(self.shape, index, hi, lo)

    def total(self) -> list:
        """The exact sums as a (K x d) nested list of :class:`fractions.Fraction`."""
        from fractions import Fraction

        K, d = self.shape
        out = [[Fraction(0)] * d for _ in range(K)]
        for key, h, l in zip(self.index.tolist(), self.hi.tolist(), self.lo.tolist()):
            cell, E = divmod(key, _E_RANGE)
            k, j = divmod(cell, d)
            mantissa = (h << _HALF) + l
            E -= _E_OFFSET
            out[k][j] += Fraction(mantissa * 2**E) if E >= 0 else Fraction(mantissa, 2**-E)
        return out


@dataclass(frozen=True)
class Moments:
    """Per-cluster statistics of rows of ``d`` features, accumulated chunk by chunk.

    Means and variances are exact: they come from exact sums of the values and of their
    squares (:class:`ExactSums`), so they are the correctly rounded mean and population
    variance of the rows whatever the chunking (and equal for the in-memory run, one chunk).
    The full covariance's off-diagonal entries come from Chan, Golub & LeVeque's pairwise
    update in float64: the same chunks merged in the same order give bit-identical results.

    Attributes
    ----------
    counts : ndarray of shape (K,), int64
    sums, squares : ExactSums
        Of x and of fl(x²).
    means : ndarray of shape (K, d)
        Chan's running means (pairs with ``scatter``).
    scatter : ndarray of shape (K, d, d)
        Sum over a cluster's rows of (x - mean)(x - mean)ᵀ.
    """

    counts: np.ndarray
    sums: ExactSums
    squares: ExactSums
    means: np.ndarray
    scatter: np.ndarray

    def merge(self, other: "Moments") -> "Moments":
        """The moments of both row sets."""
        na, nb = self.counts.astype(np.float64), other.counts.astype(np.float64)
        n = na + nb
        safe = np.where(n > 0, n, 1.0)
        delta = other.means - self.means
        means = self.means + delta * (nb / safe)[:, None]
        extra = np.einsum("ki,kj->kij", delta, delta) * (na * nb / safe)[:, None, None]
        return Moments(self.counts + other.counts, self.sums.merge(other.sums), self.squares.merge(other.squares),
                       means, self.scatter + other.scatter + extra)

    def exact(self) -> tuple[np.ndarray, np.ndarray]:
        """Correctly rounded per-cluster means and population variances, each (K, d)."""
        from fractions import Fraction

        s1, s2 = self.sums.total(), self.squares.total()
        K, d = self.sums.shape
        means, variances = np.zeros((K, d)), np.zeros((K, d))
        for k in range(K):
            n = int(self.counts[k])
            if n == 0:
                continue
            for j in range(d):
                mean = s1[k][j] / n
                means[k, j] = float(mean)
                variances[k, j] = float(max(s2[k][j] / n - mean * mean, Fraction(0)))
        return means, variances

    def mixture(self) -> tuple:
        """``(weights (K,), means (K, d), covariances (K, d, d))``: exact means and variances
        (the covariances' diagonal), population covariances elsewhere."""
        if np.any(self.counts == 0):
            empty = np.flatnonzero(self.counts == 0).tolist()
            raise InvalidInputError(f"clusters {empty} have no rows: no mean or covariance can be estimated; "
                                    "use fewer clusters.")
        means, variances = self.exact()
        covs = self.scatter / self.counts.astype(np.float64)[:, None, None]
        d = means.shape[1]
        covs[:, np.arange(d), np.arange(d)] = variances
        return self.counts / self.counts.sum(), means, covs


def chunk_moments(X, labels, n_clusters: int) -> Moments:
    """:class:`Moments` of one chunk: rows ``X`` (n, d) with cluster ``labels`` 0..K-1 (-1 is
    left out), in float64."""
    X = check_matrix(X, "X", min_rows=0)
    labels = np.asarray(labels)
    if labels.shape != (X.shape[0],):
        raise InvalidInputError(f"labels has shape {labels.shape}; expected ({X.shape[0]},), one per row of X.")
    d = X.shape[1]
    counts = np.bincount(labels[labels >= 0], minlength=n_clusters).astype(np.int64)[:n_clusters]
    means = np.zeros((n_clusters, d))
    scatter = np.zeros((n_clusters, d, d))
    for k in np.flatnonzero(counts):
        rows = X[labels == k]
        means[k] = rows.mean(axis=0)
        centred = rows - means[k]
        scatter[k] = centred.T @ centred
    return Moments(counts, ExactSums.of(X, labels, n_clusters), ExactSums.of(X * X, labels, n_clusters), means, scatter)


def merge_moments(parts: Iterable[Moments]) -> Moments:
    """Merge chunk moments in the order given (a fixed order gives bit-identical results)."""
    total = None
    for part in parts:
        total = part if total is None else total.merge(part)
    if total is None:
        raise InvalidInputError("no chunks to accumulate: the data has no rows.")
    return total


def stream_moments(chunks: Iterable[tuple], n_clusters: int) -> Moments:
    """One pass over ``(X_chunk, labels_chunk)`` pairs -> :class:`Moments` of all rows."""
    return merge_moments(chunk_moments(X, y, n_clusters) for X, y in chunks)


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


def assign_nearest(X, centers, block_rows: int = 16_384) -> np.ndarray:
    """Index (int32) of the nearest of ``centers`` (K, d) for every row of ``X`` (n, d), in float64
    (:func:`sklearn.metrics.pairwise_distances_argmin`, in blocks of ``block_rows`` rows so a
    float32 chunk is never widened whole). A row's label does not depend on the other rows."""
    from sklearn.metrics import pairwise_distances_argmin

    centers = check_matrix(centers, "centers")
    X = check_matrix(X, "X", min_rows=0, dtype=np.float32 if getattr(X, "dtype", None) == np.float32 else np.float64)
    out = np.empty(X.shape[0], np.int32)
    for i in range(0, X.shape[0], block_rows):
        out[i:i + block_rows] = pairwise_distances_argmin(X[i:i + block_rows].astype(np.float64), centers)
    return out


def assign_mixture(X, weights, means, covariances, precisions_cholesky, covariance_type: str = "full") -> np.ndarray:
    """The most probable component (int32) of every row of ``X`` under a fitted Gaussian mixture
    (the parameters of :class:`sklearn.mixture.GaussianMixture`, which predicts)."""
    from sklearn.mixture import GaussianMixture

    means = check_matrix(means, "means")
    gm = GaussianMixture(n_components=means.shape[0], covariance_type=covariance_type)
    gm.weights_, gm.means_, gm.covariances_ = np.asarray(weights), means, np.asarray(covariances)
    gm.precisions_cholesky_ = np.asarray(precisions_cholesky)
    gm.n_features_in_ = means.shape[1]
    return np.asarray(gm.predict(check_matrix(X, "X", min_rows=0)), dtype=np.int32)


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
    while take.sum() > max(n_rows, values.size):  # the ones given to tiny values come from the most over-served
        over = np.where(take > 1, take - exact, -np.inf)
        take[int(np.argmax(over))] -= 1
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
