"""Graphs over data points for SpEx: validation of user graphs and the symmetrised kNN graph."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from pipeline.trees import _kernels
from pipeline.validation import InvalidInputError, check_matrix


def check_graph(graph, n_samples: int) -> sp.csr_matrix:
    """Return ``graph`` as a CSR float64 matrix after checking it can be used by SpEx.

    Parameters
    ----------
    graph : scipy.sparse matrix or array-like of shape (n_samples, n_samples)
        Symmetric, finite, non-negative edge weights (0 = no edge).
    n_samples : int
        Number of rows of the data the graph is defined on.
    """
    if sp.issparse(graph):
        A = sp.csr_matrix(graph, dtype=np.float64)
    else:
        try:
            dense = np.asarray(graph, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise InvalidInputError(f"graph must be a scipy.sparse matrix or a numeric array: {exc}") from None
        if dense.ndim != 2:
            raise InvalidInputError(f"graph must be a 2-D (n_samples, n_samples) matrix, got shape {dense.shape}.")
        A = sp.csr_matrix(dense)
    if A.shape != (n_samples, n_samples):
        raise InvalidInputError(
            f"graph has shape {A.shape} but X has {n_samples} rows; the graph must be ({n_samples}, {n_samples}) "
            "with row/column i describing row i of X."
        )
    if A.nnz and not np.all(np.isfinite(A.data)):
        raise InvalidInputError("graph contains NaN or infinite edge weights; edge weights must be finite.")
    if A.nnz and A.data.min() < 0:
        raise InvalidInputError(
            f"graph contains negative edge weights (min {A.data.min():.4g}); SpEx needs non-negative weights."
        )
    A.eliminate_zeros()
    A.sort_indices()
    asymmetry = _kernels.asymmetry(A.indptr, A.indices, A.data) if _kernels.AVAILABLE else -1.0
    if asymmetry < 0:  # patterns differ (or no numba): the exact largest difference
        diff = abs(A - A.T)
        asymmetry = diff.max() if diff.nnz else 0.0
    if asymmetry > 1e-12 * max(1.0, float(A.max())):
        raise InvalidInputError(
            "graph is not symmetric; SpEx works on undirected graphs. Symmetrise it first, e.g. "
            "graph = graph + graph.T or graph.maximum(graph.T)."
        )
    return A


EXACT_MAX_POINTS = 20_000  # above this, method="auto" switches to pynndescent (measured, docs/spex.md)


def knn_graph(X, n_neighbors: int = 20, *, method: str = "auto", random_state=None,
              n_jobs: int | None = None) -> sp.csr_matrix:
    """Symmetrised k-nearest-neighbour graph ``A + A.T`` (Euclidean).

    ``A[i, j] = 1`` when j is among the ``n_neighbors`` nearest neighbours of i (i itself
    excluded), so mutual neighbours get weight 2 — the graph of the published SpEx-kNN.

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features)
    n_neighbors : int, default=20
    method : {"auto", "exact", "nndescent"}
        "exact": scikit-learn ``NearestNeighbors`` (brute force; the published graph).
        "nndescent": pynndescent's approximate graph (much faster for large n; compiles with
        numba on first use). "auto": exact up to ``EXACT_MAX_POINTS`` points, else nndescent.
    random_state : int or None
        Seed for pynndescent.

    Returns
    -------
    scipy.sparse.csr_matrix of shape (n_samples, n_samples)
    """
    X = check_matrix(X, "X", min_rows=2)
    n = X.shape[0]
    if isinstance(n_neighbors, bool) or not isinstance(n_neighbors, (int, np.integer)) or n_neighbors < 1:
        raise InvalidInputError(f"n_neighbors must be a positive integer, got {n_neighbors!r}.")
    if n_neighbors >= n:
        raise InvalidInputError(f"n_neighbors={n_neighbors} must be smaller than the number of points ({n}).")
    if method not in ("auto", "exact", "nndescent"):
        raise InvalidInputError(f"method must be 'auto', 'exact' or 'nndescent', got {method!r}.")
    if method == "exact" or (method == "auto" and n <= EXACT_MAX_POINTS):
        from sklearn.neighbors import NearestNeighbors

        A = NearestNeighbors(n_neighbors=int(n_neighbors), n_jobs=n_jobs).fit(X).kneighbors_graph(mode="connectivity")
    else:
        from pynndescent import NNDescent

        idx, _ = NNDescent(X, n_neighbors=int(n_neighbors) + 1, random_state=random_state,
                           n_jobs=n_jobs).neighbor_graph
        not_self = idx != np.arange(n)[:, None]
        not_self &= idx >= 0
        keep = np.cumsum(not_self, axis=1) <= n_neighbors  # first n_neighbors other points
        rows, cols = np.nonzero(not_self & keep)
        A = sp.csr_matrix((np.ones(rows.size), (rows, idx[rows, cols])), shape=(n, n))
    return (A + A.T).tocsr()


def check_has_edges(A: sp.csr_matrix) -> None:
    """Raise when no edge joins two different points (all weights zero, or self-loops only):
    every cut would then weigh zero and SpEx would cut arbitrarily."""
    if int((A.data > 0).sum()) == int(np.count_nonzero(A.diagonal() > 0)):
        n = A.shape[0]
        raise InvalidInputError(
            f"graph has no edges between different points ({n}x{n} weights, all zero off the diagonal), so every "
            "cut has the same (zero) weight and SpEx would cut arbitrarily; pass a graph that connects similar points "
            "(e.g. a kNN graph), or n_leaves=1."
        )
