"""Vectorised SpEx cut sweeps: the best coordinate cut of one node, all features at once.

For a node V and a prefix S of V in the sorted order of feature j, the SpEx cut score is
``psi(S) + psi(V \\ S)`` with ``psi(A) = e_G(A, X \\ A) / vol_G(A)`` (conductance in the
whole graph; ``psi(A) = 0`` when ``vol_G(A) = 0``). Both sweeps below evaluate every prefix
of every feature with prefix sums (``numpy.cumsum``) over the node's sorted orders
(:class:`~pipeline.trees._column_order.ColumnOrder`), column block by column block.

Clique graph of a reference clustering (unit weights inside clusters, never built): with
``g_c`` global and ``l_c`` node cluster sizes and ``s_c`` the count of cluster c in S,
``e(S) = sum_c s_c (g_c - s_c)`` and ``vol(S) = sum_c s_c (g_c - 1)``; adding the point of
within-cluster rank r (0-based, along the feature) changes ``e(S)`` by ``g_c - 1 - 2r``.
The ranks come from a stable radix argsort of the labels along each sorted column.

General sparse graph: ``e(S) = vol'(S) - 2 w(S, S)`` where ``vol'`` excludes self-loops and
``w(S, S)`` is the weight of node-internal edges whose later endpoint (in feature order) is
in S: a histogram of edge weights over the max endpoint position, then a cumsum.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from pipeline.trees import _kernels
from pipeline.trees._column_order import ColumnOrder, column_block_size, pick_best

USE_KERNELS = True  # use the compiled kernels when numba is importable (tests flip this)
CLIQUE_BLOCK = 64  # positions per bound-pruned block of the compiled clique sweep (tests shrink it)


def _finish_block(score: np.ndarray, valid: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """Per-row (min score, argmin position) over the m-1 cut positions of a score block."""
    cut = score[:, :-1]
    if valid is not None:
        cut[~valid] = np.inf
    pos = np.argmin(cut, axis=1)
    return cut[np.arange(cut.shape[0]), pos], pos


class MaskedOrder:
    """A node given as a member mask over the rows of a larger node's :class:`ColumnOrder`.

    The compiled clique sweep reads the base rows and skips non-members, so the larger child
    of a split need not be copied out (it is only while it holds at least half of the base
    rows; smaller nodes are extracted). ``order`` is the base's, so cut positions index it.

    Parameters
    ----------
    base : ColumnOrder
    member : ndarray of shape (n_samples,), int8 — 1 for the node's (global) points.
    n_points : int — number of members.
    """

    def __init__(self, base: ColumnOrder, member: np.ndarray, n_points: int):
        self.base = base
        self.member = member
        self.n_points = n_points

    @property
    def order(self) -> np.ndarray:
        return self.base.order


def _base_and_member(node, n_total: int):
    if isinstance(node, MaskedOrder):
        return node.base, node.member
    return node, np.ones(n_total, dtype=np.int8)


def clique_best_cut(node, codes: np.ndarray, global_counts: np.ndarray,
                    priority: np.ndarray) -> tuple[int, int, float, float]:
    """Best SpEx-Clique cut of a node.

    Parameters
    ----------
    node : ColumnOrder (or, with the compiled kernels, MaskedOrder) with n_points >= 1.
    codes : ndarray of shape (n_samples,), small int
        Cluster code 0..k-1 of every (global) point.
    global_counts : ndarray of shape (k,), int64
        Cluster sizes over the whole fitted data.
    priority : ndarray of shape (n_features,)
        Feature tie-breaking ranks (lower wins).

    Returns
    -------
    feature, position, cut_score, node_psi
        ``position`` indexes ``node.order[feature]``: the cut keeps the node's points up to
        that position on the left; feature is -1 if the node has no valid cut.
    """
    g = global_counts.astype(np.int64)
    kernels = _kernels.AVAILABLE and USE_KERNELS
    base, member = _base_and_member(node, codes.size) if kernels else (node, None)
    members = base.order[0] if member is None or not isinstance(node, MaskedOrder) else np.flatnonzero(member)
    local = np.bincount(codes[members], minlength=g.size).astype(np.int64)
    vol_v = float(local @ (g - 1))
    cut_v = float(local @ (g - local))
    psi_v = cut_v / vol_v if vol_v > 0 else 0.0
    if node.n_points < 2:
        return -1, -1, np.inf, psi_v
    d = base.order.shape[0]
    col_score = np.empty(d)
    col_pos = np.empty(d, dtype=np.int64)
    if kernels:
        _kernels.clique_sweep(base.order, _ties_or_empty(base), base.tie_ids is not None, member, codes, g, local,
                              np.int64(local @ (g - local)), np.int64(local @ (g - 1)), CLIQUE_BLOCK,
                              col_score, col_pos)
    else:
        _clique_numpy(node, codes, g, local, cut_v, vol_v, col_score, col_pos)
    j, p, score = pick_best(col_score, col_pos, priority)
    return j, p, score, psi_v


def _ties_or_empty(node: ColumnOrder) -> np.ndarray:
    return node.tie_ids if node.tie_ids is not None else np.empty((0, 0), np.int32)


def clique_split_cuts(node, feature: int, position: int, codes: np.ndarray,
                      global_counts: np.ndarray, priority: np.ndarray):
    """Split a node after ``position`` of ``feature`` and find both children's best cuts.

    Equivalent to ``[(c, clique_best_cut(c, ...)) for c in node.split(feature, position, n)]``.
    With the compiled kernels a child holding at least half of the node's base rows stays a
    :class:`MaskedOrder` over them (no copy); the other child is extracted.

    Returns
    -------
    ((left node, left cut), (right node, right cut)), each cut as returned by
    :func:`clique_best_cut`.
    """
    n_total = codes.size
    if not (_kernels.AVAILABLE and USE_KERNELS):
        return tuple((c, clique_best_cut(c, codes, global_counts, priority))
                     for c in node.split(feature, position, n_total))
    base, member = _base_and_member(node, n_total)
    prefix = base.order[feature, :position + 1]
    left = np.zeros(n_total, dtype=np.int8)
    left[prefix] = member[prefix]
    right = member - left
    n_left = int(np.count_nonzero(left))
    out = []
    for mask, size in ((left, n_left), (right, node.n_points - n_left)):
        if 2 * size >= base.n_points:
            child = MaskedOrder(base, mask, size)
        else:
            order, ties = _kernels.extract_rows(base.order, _ties_or_empty(base), base.tie_ids is not None, mask, size)
            child = ColumnOrder(order, ties if base.tie_ids is not None else None)
        out.append((child, clique_best_cut(child, codes, global_counts, priority)))
    return tuple(out)


def _clique_numpy(node, codes, g, local, cut_v, vol_v, col_score, col_pos):
    d, m = node.order.shape
    gm1 = (g - 1).astype(np.float64)
    t2 = (2 * local - g - 1).astype(np.float64)
    starts = np.cumsum(local) - local
    rank2 = 2.0 * (np.arange(m) - np.repeat(starts, local))  # 2*rank in label-grouped order
    step = column_block_size(m)
    for s in range(0, d, step):
        labels = codes[node.order[s:s + step]]
        b = labels.shape[0]
        perm = np.argsort(labels, axis=1, kind="stable")  # radix sort for small int codes
        perm += (np.arange(b) * m)[:, None]
        r2 = np.empty(b * m)
        r2[perm.ravel()] = np.tile(rank2, b)
        r2 = r2.reshape(b, m)
        vol_s = np.cumsum(gm1[labels], axis=1)
        twice_rank_sum = np.cumsum(r2, axis=1)
        cut_r = np.cumsum(t2[labels], axis=1)
        cut_r += cut_v
        cut_r -= twice_rank_sum
        cut_s = np.subtract(vol_s, twice_rank_sum, out=twice_rank_sum)
        vol_r = np.subtract(vol_v, vol_s)
        np.maximum(vol_s, 1.0, out=vol_s)  # integer volumes: 0 only when the cut is 0 too
        np.maximum(vol_r, 1.0, out=vol_r)
        cut_s /= vol_s
        cut_r /= vol_r
        cut_s += cut_r
        col_score[s:s + b], col_pos[s:s + b] = _finish_block(cut_s, node.valid_cuts(s, s + b))


class GraphData:
    """A validated symmetric non-negative graph with precomputed degrees.

    Parameters
    ----------
    adjacency : scipy.sparse matrix of shape (n, n), symmetric, non-negative.
    """

    def __init__(self, adjacency):
        self.adjacency = sp.csr_matrix(adjacency, dtype=np.float64)
        self.degree = np.asarray(self.adjacency.sum(axis=1)).ravel()
        self.degree_off = self.degree - self.adjacency.diagonal()  # weight that can ever be cut

    def internal(self, members: np.ndarray) -> sp.csr_matrix:
        """Node-internal off-diagonal edges as a CSR matrix in local ids (members order)."""
        sub = self.adjacency[members][:, members].tocsr()
        sub.setdiag(0)
        sub.eliminate_zeros()
        return sub


def graph_best_cut(node: ColumnOrder, graph: GraphData, priority: np.ndarray) -> tuple[int, int, float, float]:
    """Best SpEx cut of a node for a general graph; same contract as :func:`clique_best_cut`."""
    d, m = node.order.shape
    members = node.members
    sub = graph.internal(members)
    inner_deg = np.asarray(sub.sum(axis=1)).ravel()
    deg = graph.degree[members]
    deg_off = graph.degree_off[members]
    vol_v = float(deg.sum())
    cut_v = float(deg_off.sum() - inner_deg.sum())
    psi_v = cut_v / vol_v if vol_v > 0 else 0.0
    if m < 2:
        return -1, -1, np.inf, psi_v
    local_dtype = np.uint16 if m <= 1 << 16 else np.int32  # halves the kernels' position tables
    local = np.zeros(graph.degree.size, dtype=local_dtype)
    local[members] = np.arange(m, dtype=local_dtype)
    order_local = local[node.order]
    col_score = np.empty(d)
    col_pos = np.empty(d, dtype=np.int64)
    if _kernels.AVAILABLE and USE_KERNELS:
        ties = node.tie_ids if node.tie_ids is not None else np.empty((0, 0), np.int32)
        upper = sp.triu(sub, k=1).tocoo()  # each undirected edge once, sorted by row
        w = upper.data
        if w.size and np.array_equal(w, np.round(w)) and w.sum() < 1 << 24:
            w = w.astype(np.float32)  # e.g. kNN weights 1/2: float32 sums stay exact integers
        _kernels.graph_sweep(order_local, ties, node.tie_ids is not None, upper.row.astype(np.int32),
                             upper.col.astype(np.int32), w, deg, deg_off, inner_deg, float(upper.data.sum()),
                             float(deg_off.sum()), vol_v, int(np.count_nonzero(deg > 0)), col_score, col_pos)
    else:
        _graph_numpy(node, order_local, sub, deg, deg_off, inner_deg, col_score, col_pos)
    j, p, score = pick_best(col_score, col_pos, priority)
    return j, p, score, psi_v


def _graph_numpy(node, order_local, sub, deg, deg_off, inner_deg, col_score, col_pos):
    d, m = order_local.shape
    upper = sp.triu(sub, k=1).tocoo()
    a, b, w = upper.row, upper.col, upper.data
    inner_total = float(w.sum())
    unit = w.size > 0 and np.all(w == w[0])
    step = max(1, column_block_size(max(m, w.size)) // 2)
    for s in range(0, d, step):
        lo = order_local[s:s + step]  # (B, m) local ids in feature order
        nb = lo.shape[0]
        pos = np.empty((nb, m), dtype=np.int32)
        np.put_along_axis(pos, lo, np.arange(m, dtype=np.int32)[None, :], axis=1)
        later = np.maximum(np.take(pos, a, axis=1), np.take(pos, b, axis=1)).astype(np.int64)
        later += (np.arange(nb, dtype=np.int64) * m)[:, None]
        if unit:
            hist = np.bincount(later.ravel(), minlength=nb * m) * float(w[0])
        else:
            hist = np.bincount(later.ravel(), weights=np.tile(w, nb), minlength=nb * m)
        w_in_s = np.cumsum(hist.reshape(nb, m), axis=1)  # w(S, S)
        deg_ord = deg[lo]
        vol_s = np.cumsum(deg_ord, axis=1)
        vol_r = np.cumsum(deg_ord[:, ::-1], axis=1)[:, ::-1]  # suffix sums: exact zeros stay zero
        vol_r = np.concatenate([vol_r[:, 1:], np.zeros((nb, 1))], axis=1)
        off_s = np.cumsum(deg_off[lo], axis=1)
        inner_s = np.cumsum(inner_deg[lo], axis=1)
        cut_s = off_s - 2.0 * w_in_s
        # edges with both ends in R = inner_total - (edges with an endpoint in S)
        w_in_r = inner_total - (inner_s - w_in_s)
        cut_r = (deg_off.sum() - off_s) - 2.0 * w_in_r
        with np.errstate(divide="ignore", invalid="ignore"):
            score = np.where(vol_s > 0, cut_s / vol_s, 0.0) + np.where(vol_r > 0, cut_r / vol_r, 0.0)
        col_score[s:s + nb], col_pos[s:s + nb] = _finish_block(score, node.valid_cuts(s, s + nb))
