"""Graphs over data points for SpEx: validation of user graphs and the symmetrised kNN graph."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

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
    diff = abs(A - A.T)
    if diff.nnz and diff.max() > 1e-12 * max(1.0, float(A.max())):
        raise InvalidInputError(
            "graph is not symmetric; SpEx works on undirected graphs. Symmetrise it first, e.g. "
            "graph = graph + graph.T or graph.maximum(graph.T)."
        )
    return A


def knn_graph(X, n_neighbors: int = 20, *, n_jobs: int | None = None) -> sp.csr_matrix:
    """Symmetrised k-nearest-neighbour graph ``A + A.T`` (Euclidean, exact).

    ``A[i, j] = 1`` when j is among the ``n_neighbors`` nearest neighbours of i (i itself
    excluded), so mutual neighbours get weight 2 — the graph of the published SpEx-kNN.
    Built with scikit-learn's exact ``NearestNeighbors`` (chosen over pynndescent by measured
    speed at 10k-50k x 512, see docs/spex.md).

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features)
    n_neighbors : int, default=20

    Returns
    -------
    scipy.sparse.csr_matrix of shape (n_samples, n_samples)
    """
    from sklearn.neighbors import NearestNeighbors

    X = check_matrix(X, "X", min_rows=2)
    if isinstance(n_neighbors, bool) or not isinstance(n_neighbors, (int, np.integer)) or n_neighbors < 1:
        raise InvalidInputError(f"n_neighbors must be a positive integer, got {n_neighbors!r}.")
    if n_neighbors >= X.shape[0]:
        raise InvalidInputError(
            f"n_neighbors={n_neighbors} must be smaller than the number of points ({X.shape[0]})."
        )
    A = NearestNeighbors(n_neighbors=int(n_neighbors), n_jobs=n_jobs).fit(X).kneighbors_graph(mode="connectivity")
    return (A + A.T).tocsr()
