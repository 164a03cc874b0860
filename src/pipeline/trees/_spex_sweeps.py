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
in S: a histogram of edge weights over the max endpoint position, then a cumsum (the
compiled sweep credits each edge to its later endpoint instead, 32 features at a time).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from pipeline.trees import _bin_kernels, _kernels
from pipeline.trees._kernels import _SLACK
from pipeline.trees._column_order import ColumnOrder, _n_threads, column_block_size, pick_best

@dataclass(frozen=True)
class SweepSettings:
    """Tuning constants of the SpEx sweeps. Every setting gives the same tree; they change
    only which exact sweep runs and how much work it skips. Tests pass their own (tiny blocks
    and bins, so that pruning and bin resolution happen on small inputs).

    use_kernels : the compiled kernels when numba is importable (False: the numpy sweeps).
    clique_block : positions per bound-pruned block of the compiled clique sweep.
    plain_scan_purity : a plain scan when one cluster holds this share of a node.
    bins_min_points : SpEx-Clique fits with at least this many points use the binned sweep.
    clique_bins : value bins per column of the binned clique sweep (2 to 256).
    crowded_bin, crowded_columns : a column is crowded when one bin holds ``crowded_bin`` times
        the mean share of points; more than ``crowded_columns`` crowded columns send a fit
        back to the sorted sweep.
    histogram_budget : bytes of per-node bin counts the binned sweep may keep for children.
    node_counts_max : above this many bytes of counts per node SpEx-Clique takes the sorted sweep.
    heavy_share : the binned sweep gathers a node's rows when 1/heavy_share of its values
        need resolving.
    scan_block : bins per block of the binned sweep's first level (blocks whose bound cannot
        reach the best cut between blocks are skipped).
    range_rows : the binned sweep takes its bins' range from about this many rows (a column
        that the sample's range crowds is binned again on its whole range).
    """

    use_kernels: bool = True
    clique_block: int = 64
    plain_scan_purity: float = 0.8
    bins_min_points: int = 4096
    clique_bins: int = 256
    crowded_bin: float = 16
    crowded_columns: float = 0.05
    histogram_budget: int = 1 << 30
    node_counts_max: int = 1 << 28
    heavy_share: int = 16
    scan_block: int = 16
    range_rows: int = 4096

    @property
    def compiled(self) -> bool:
        """Whether the compiled kernels run (numba importable and ``use_kernels``)."""
        return _kernels.AVAILABLE and self.use_kernels


DEFAULT_SETTINGS = SweepSettings()


def _finish_block(score: np.ndarray, valid: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """Per-row (min score, argmin position) over the m-1 cut positions of a score block."""
    cut = score[:, :-1]
    if valid is not None:
        cut[~valid] = np.inf
    pos = np.argmin(cut, axis=1)
    return cut[np.arange(cut.shape[0]), pos], pos


def _block_size(local: np.ndarray, settings: SweepSettings) -> int:
    """Bound-pruned blocks pay off unless one cluster dominates the node (then the cut score is
    nearly flat, no block can be pruned, and a plain scan is cheaper)."""
    m = int(local.sum())
    return m + 1 if local.max() >= settings.plain_scan_purity * m else settings.clique_block


def clique_best_cut(node: ColumnOrder, codes: np.ndarray, global_counts: np.ndarray, priority: np.ndarray,
                    settings: SweepSettings = DEFAULT_SETTINGS) -> tuple[int, int, float, float]:
    """Best SpEx-Clique cut of a node.

    Parameters
    ----------
    node : ColumnOrder with n_points >= 1.
    codes : ndarray of shape (n_samples,), small int
        Cluster code 0..k-1 of every (global) point.
    global_counts : ndarray of shape (k,), int64
        Cluster sizes over the whole fitted data.
    priority : ndarray of shape (n_features,)
        Feature tie-breaking ranks (lower wins).
    settings : SweepSettings
        Tuning of the sweep (the result does not depend on it).

    Returns
    -------
    feature, position, cut_score, node_psi
        ``position`` indexes the sorted order of ``feature`` (the cut keeps positions
        0..position on the left); feature is -1 if the node has no valid cut.
    """
    d, m = node.order.shape
    g = global_counts.astype(np.int64)
    local = np.bincount(codes[node.order[0]], minlength=g.size).astype(np.int64)
    vol_v = float(local @ (g - 1))
    cut_v = float(local @ (g - local))
    psi_v = cut_v / vol_v if vol_v > 0 else 0.0
    if m < 2:
        return -1, -1, np.inf, psi_v
    col_score = np.empty(d)
    col_pos = np.empty(d, dtype=np.int64)
    if settings.compiled:
        _kernels.clique_sweep(node.order, _ties_or_empty(node), node.tie_ids is not None, codes, g, local,
                              np.int64(local @ (g - local)), np.int64(local @ (g - 1)), _block_size(local, settings),
                              col_score, col_pos)
    else:
        _clique_numpy(node, codes, g, local, cut_v, vol_v, col_score, col_pos)
    j, p, score = pick_best(col_score, col_pos, priority)
    return j, p, score, psi_v


def use_binned_clique(n_points: int, settings: SweepSettings = DEFAULT_SETTINGS) -> bool:
    """Whether a SpEx-Clique fit on ``n_points`` points runs on :class:`BinnedColumns`."""
    return settings.compiled and settings.bins_min_points <= n_points < _bin_kernels.MAX_POINTS


class BinnedNode:
    """A tree node of the binned clique sweep: its global row ids, ascending (int64), and,
    once computed, its counts per (feature, cluster, bin) and per block of bins (``hist``, of
    :func:`~pipeline.trees._bin_kernels.bin_counts`, or None)."""

    __slots__ = ("members", "hist", "state")

    def __init__(self, members: np.ndarray, hist=None):
        self.members = members
        self.hist = hist
        self.state = None  # BinnedColumns' work between bound() and best_cut()

    @property
    def n_points(self) -> int:
        return self.members.size


class BinnedColumns:
    """The columns of X cut into ``n_bins`` equal-width bins, for exact SpEx-Clique cuts
    without sorting (see :mod:`pipeline.trees._bin_kernels`).

    Plays the part :class:`ColumnOrder` plays in :func:`clique_best_cut`: ``root()``,
    ``best_cut(node)``, ``split_cuts(node, feature, position)`` and ``threshold(node,
    feature, position)`` (the value at a sorted position of the node), with the same results.
    Children come back unevaluated: ``bound(node)`` gives (psi, a lower bound of the best
    cut's score) from the bin counts, and the tree evaluates a node only when that bound
    could make it the next split.

    ``suited`` is False, and nothing is binned, when one node's counts would exceed
    ``settings.node_counts_max`` bytes (many clusters and features); it is False after binning when many columns crowd most
    points into few bins (far outliers, heavy tails). The fit then takes the sorted sweep.
    ``finite`` tells whether every value of X is finite (None when X was not read): the pass
    that finds the columns' ranges checks it, so a fit need not read X once more to check.
    """

    def __init__(self, X: np.ndarray, codes: np.ndarray, global_counts: np.ndarray, priority: np.ndarray,
                 n_leaves: int = 2, settings: SweepSettings = DEFAULT_SETTINGS):
        n_bins = settings.clique_bins
        if not 2 <= n_bins <= 256:
            raise ValueError(f"n_bins must be between 2 and 256 (uint8 bins), got {n_bins}")
        self.X = X
        self.codes = codes
        self.g = global_counts.astype(np.int64)
        self.priority = priority
        self.n_bins = n_bins
        self.heavy_share = settings.heavy_share
        self.scan_block = settings.scan_block
        hist_bytes = X.shape[1] * n_bins * 4 * self.g.size  # one node's counts (int32)
        self.suited = hist_bytes <= settings.node_counts_max
        self.finite = None  # whether every value of X is finite, once seen
        if not self.suited:
            return
        # the bins' range from a sample of the rows: any monotone binning gives the same exact
        # cuts, and one pass over X bins it, checks it is finite and finds its columns' ranges
        lo, hi, finite = _bin_kernels.column_range_finite(X[::max(1, X.shape[0] // settings.range_rows)])
        if finite:
            scale = _bin_kernels.range_scales(lo, hi, n_bins)
            self.bins, lo_x, hi_x, finite = _bin_kernels.bin_columns(X, lo, scale, n_bins, True)
        self.finite = finite
        if not finite:
            self.suited = False
            return
        self._root = BinnedNode(np.arange(X.shape[0], dtype=np.int64))
        self._root.hist = self.histograms(self._root.members)
        # equal-width bins suit columns without far outliers or heavy tails; where one bin holds
        # a large share of the points, resolving it would sort most of every node again
        crowd = self._crowded(settings)
        if (crowd & ((lo_x < lo) | (hi_x > hi))).any():  # the sample missed such a column's range
            lo, scale = lo_x, _bin_kernels.range_scales(lo_x, hi_x, n_bins)
            self.bins = _bin_kernels.bin_columns(X, lo, scale, n_bins, False)[0]
            self._root.hist = self.histograms(self._root.members)
            crowd = self._crowded(settings)
        self.lo, self.scale = lo, scale
        self.suited = bool(crowd.mean() <= settings.crowded_columns)
        if not self.suited:
            return
        # a node keeps its counts (for its children: the larger child's are the parent's minus
        # the smaller's) while all leaves' counts fit in settings.histogram_budget bytes
        self.keep_hist = hist_bytes * max(n_leaves, 2) <= settings.histogram_budget
        self._bounds = np.empty((X.shape[1], n_bins))  # scratch of _counts_pass

    def _crowded(self, settings: SweepSettings) -> np.ndarray:
        """Per column: whether one of its bins holds ``crowded_bin`` times the mean share of points."""
        most = self._root.hist[0].sum(axis=1, dtype=np.int32).max(axis=1)
        return most > settings.crowded_bin * self.X.shape[0] / self.n_bins

    def root(self) -> BinnedNode:
        return self._root

    def threshold(self, node: BinnedNode, feature: int, position: int) -> float:
        return _bin_kernels.value_at(self.bins[feature], self.X, feature, node.members, position, self.n_bins)

    def bound(self, node: BinnedNode) -> tuple[float, float]:
        """(psi, a lower bound of the node's best cut score) from its bin counts alone; the
        work is kept for :meth:`best_cut`, which finishes it."""
        if node.state is None:
            node.state = self._counts_pass(node)
        psi_v, lb = node.state[:2]
        return psi_v, lb

    def best_cut(self, node: BinnedNode) -> tuple[int, int, float, float]:
        """As :func:`clique_best_cut` for the node's points: the blocks that may hold the best
        cut are scanned bin by bin, then the flagged bins resolved."""
        state = node.state if node.state is not None else self._counts_pass(node)
        node.state = None
        psi_v, _, local, col_score, col_pos, block_bound = state
        members = node.members
        m = members.size
        if m < 2:
            return -1, -1, np.inf, psi_v
        X = self.X
        d = X.shape[1]
        g = self.g
        vol_v = np.int64(local @ (g - 1))
        counts = self._node_counts(node)
        bounds = self._bounds  # scratch: read by clique_bins_flags right away
        cap = _SLACK * float(col_score.min())
        _bin_kernels.clique_bins_fine(*counts, g, local, vol_v, self.scan_block, self._chunks(), cap, block_bound,
                                      col_score, col_pos, bounds)
        limit = float(col_score.min())
        flags = np.empty((d, self.n_bins), dtype=bool)
        n_flagged = _bin_kernels.clique_bins_flags(bounds, counts[0], col_score, limit, flags)
        # values of many points needed: gather the node's rows once (streaming) instead of
        # reading each value from X (a cache miss each)
        heavy = bool(n_flagged.sum() * self.heavy_share >= m * d)
        XT = _bin_kernels.gather_transposed(X, members) if heavy else np.empty((0, 0), X.dtype)
        _bin_kernels.clique_bins_resolve(
            self.bins, X, XT, heavy, self.lo, self.scale, members, self.codes[members].astype(np.int64), g, local,
            vol_v, counts[0], flags, n_flagged, limit, self._chunks(), col_score, col_pos)
        j, p, score = pick_best(col_score, col_pos, self.priority)
        return j, p, score, psi_v

    def _counts_pass(self, node: BinnedNode) -> tuple:
        """Bin counts, the exact cuts between blocks of bins and the blocks' bounds: the node's
        psi and a lower bound of its best cut score, and the work :meth:`best_cut` goes on from."""
        g = self.g
        members = node.members
        m = members.size
        local = np.bincount(self.codes[members], minlength=g.size).astype(np.int64)
        vol_v = float(local @ (g - 1))
        psi_v = float(local @ (g - local)) / vol_v if vol_v > 0 else 0.0
        if m < 2:
            return psi_v, np.inf, local, None, None, None
        d = self.X.shape[1]
        _, block_counts = self._node_counts(node)
        col_score = np.empty(d)
        col_pos = np.empty(d, dtype=np.int64)
        block_bound = np.empty((d, block_counts.shape[2] - 1))
        _bin_kernels.clique_bins_coarse(block_counts, g, local, np.int64(local @ (g - 1)), self._chunks(), col_score,
                                        col_pos, block_bound)
        # every cut lies between blocks (at least the least of those) or inside a block of two
        # or more points (at least its bound)
        lb = min(float(col_score.min()), float(block_bound.min()))
        lb -= (_SLACK - 1.0) * abs(lb)  # as the bins' pruning: a margin far above rounding
        return psi_v, lb, local, col_score, col_pos, block_bound

    def _chunks(self) -> int:
        """Chunks of features per kernel call (scratch is allocated once per chunk)."""
        return min(self.X.shape[1], 4 * _n_threads())

    def _node_counts(self, node: BinnedNode) -> tuple[np.ndarray, np.ndarray]:
        """The node's bin counts, counted unless it has them; it keeps them only while
        ``keep_hist`` allows (else :meth:`best_cut` counts again after :meth:`bound`)."""
        counts = node.hist if node.hist is not None else self.histograms(node.members)
        node.hist = counts if self.keep_hist else None
        return counts

    def histograms(self, members: np.ndarray, parent=None) -> tuple[np.ndarray, np.ndarray]:
        """Counts (d, k, n_bins) and cumulative block counts (d, k, n_blocks + 1), int32, of
        :func:`~pipeline.trees._bin_kernels.bin_counts` for these rows; ``parent`` (the counts
        of a node they are part of) is turned into the rest's counts."""
        d, k, block = self.X.shape[1], self.g.size, self.scan_block
        counts = np.empty((d, k, self.n_bins), np.int32)
        block_counts = np.empty((d, k, -(-self.n_bins // block) + 1), np.int32)
        if parent is None:
            parent = (np.empty((0, 0, 0), np.int32),) * 2
        _bin_kernels.bin_counts(self.bins, members, self.codes[members].astype(np.int64), counts, block, block_counts,
                                *parent)
        return counts, block_counts

    def apply(self, tree) -> np.ndarray:
        """Leaf id of every fitted row, as ``tree._apply(X)``: the rows routed node by node
        with :func:`~pipeline.trees._bin_kernels.split_members` (by bin, by value only in the
        threshold's bin), never reading X row by row."""
        feature, threshold, left, right = tree.feature, tree.threshold, tree.children_left, tree.children_right
        out = np.empty(self.X.shape[0], dtype=np.int64)
        stack = [(0, self._root.members)]
        while stack:
            node, members = stack.pop()
            j = feature[node]
            if j < 0:  # a leaf
                out[members] = node
                continue
            lo, hi = _bin_kernels.split_members(self.bins[j], self.X, j, members, self.lo[j], self.scale[j],
                                                self.n_bins, threshold[node])
            stack += [(left[node], lo), (right[node], hi)]
        return out

    def split_cuts(self, node: BinnedNode, feature: int, position: int):
        """((left node, left cut), (right node, right cut)) of the split after ``position``."""
        j = feature
        left, right = _bin_kernels.split_members(self.bins[j], self.X, j, node.members, self.lo[j], self.scale[j],
                                                 self.n_bins, self.threshold(node, j, position))
        children = [BinnedNode(left), BinnedNode(right)]
        if node.hist is not None:  # count the smaller child; the larger one's counts are the difference
            small, large = sorted(children, key=lambda c: c.n_points)
            small.hist = self.histograms(small.members, parent=node.hist)  # node.hist becomes the larger's
            large.hist = node.hist
            node.hist = None
        return tuple((child, None) for child in children)  # evaluated when needed: see bound()


def _ties_or_empty(node: ColumnOrder) -> np.ndarray:
    return node.tie_ids if node.tie_ids is not None else np.empty((0, 0), np.int32)


def clique_split_cuts(node: ColumnOrder, feature: int, position: int, codes: np.ndarray,
                      global_counts: np.ndarray, priority: np.ndarray, settings: SweepSettings = DEFAULT_SETTINGS):
    """Split a node after sorted ``position`` of ``feature`` and find both children's best cuts.

    Equivalent to ``[(c, clique_best_cut(c, ...)) for c in node.split(feature, position, n)]``;
    with the compiled kernels the split and both sweeps are one pass over the node's orders.

    Returns
    -------
    ((left ColumnOrder, left cut), (right ColumnOrder, right cut)), each cut as returned by
    :func:`clique_best_cut`.
    """
    n_total = codes.size
    if not settings.compiled:
        return tuple((c, clique_best_cut(c, codes, global_counts, priority, settings))
                     for c in node.split(feature, position, n_total))
    g = global_counts.astype(np.int64)
    in_left = node.order[feature, :position + 1]
    side = np.zeros(n_total, dtype=np.int8)
    side[in_left] = 1
    local_l = np.bincount(codes[in_left], minlength=g.size).astype(np.int64)
    local_r = np.bincount(codes[node.order[feature, position + 1:]], minlength=g.size).astype(np.int64)
    d = node.order.shape[0]
    score = np.empty((2, d))
    pos = np.empty((2, d), dtype=np.int64)
    has_ties = node.tie_ids is not None
    lo, ro, lt, rt = _kernels.clique_split_sweep(
        node.order, _ties_or_empty(node), has_ties, side, in_left.size, node.n_points - in_left.size, codes,
        g, local_l, local_r, np.int64(local_l @ (g - local_l)), np.int64(local_l @ (g - 1)),
        np.int64(local_r @ (g - local_r)), np.int64(local_r @ (g - 1)), _block_size(local_l, settings), _block_size(local_r, settings),
        score, pos)
    out = []
    for i, (order, ties, local) in enumerate(((lo, lt, local_l), (ro, rt, local_r))):
        vol_v = float(local @ (g - 1))
        psi = float(local @ (g - local)) / vol_v if vol_v > 0 else 0.0
        j, p, best = pick_best(score[i], pos[i], priority) if order.shape[1] >= 2 else (-1, -1, np.inf)
        out.append((ColumnOrder(order, ties if has_ties else None), (j, p, best, psi)))
    return tuple(out)


def _clique_numpy(node, codes, g, local, cut_v, vol_v, col_score, col_pos):
    d, m = node.order.shape
    deg = (g - 1).astype(np.float64)
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
        vol_s = np.cumsum(deg[labels], axis=1)
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
    """A validated symmetric non-negative graph with precomputed degrees and edge list.

    Parameters
    ----------
    adjacency : scipy.sparse matrix of shape (n, n), symmetric, non-negative.

    Attributes
    ----------
    edges : (a, b, w) — every off-diagonal undirected edge once (``a < b``, global ids).
    exact : bool — the weights are integers with a total below 2**31; the compiled sweep then
        counts and scans in integers (exact, same scores).
    """

    def __init__(self, adjacency):
        A = sp.csr_matrix(adjacency, dtype=np.float64)
        A.sum_duplicates()
        self.adjacency = A
        self.n = A.shape[0]
        self.degree = np.asarray(A.sum(axis=1)).ravel()
        self.degree_off = self.degree - A.diagonal()  # weight that can ever be cut
        if _kernels.AVAILABLE:  # row-major: (a, b) sorted
            a, b, w = _kernels.upper_edges(A.indptr, A.indices, A.data)
        else:
            upper = sp.triu(A, k=1).tocoo()
            a, b, w = upper.row.astype(np.int32), upper.col.astype(np.int32), upper.data
        data = A.data
        self.exact = bool(np.array_equal(data, np.round(data)) and data.sum() < 2.0 ** 31)
        if self.exact:  # integer counts: exact in any order; 16 bits when no degree reaches 2**16
            self.count_dtype = np.uint16 if self.degree_off.max(initial=0) < 1 << 16 else np.int32
            w = w.astype(self.count_dtype)
        else:
            self.count_dtype = np.float64
        self.edges = (a, b, w)
        self.local_dtype = np.uint16 if self.n <= 1 << 16 else np.int32
        self._local = np.zeros(self.n, dtype=self.local_dtype)  # scratch: global -> local ids

    def node_edges(self, node: ColumnOrder):
        """The node's internal edges (a, b, w) in global ids, in the order of :attr:`edges`."""
        if isinstance(node, GraphOrder):
            return node.edges
        if node.n_points == self.n:
            return self.edges
        inside = np.zeros(self.n, dtype=bool)
        inside[node.order[0]] = True
        a, b, w = self.edges
        keep = inside[a] & inside[b]
        return a[keep], b[keep], w[keep]


class GraphOrder(ColumnOrder):
    """A :class:`ColumnOrder` that carries its node's internal edges (global ids), so that a
    child's edges are a filter of its parent's instead of a submatrix of the whole graph."""

    def __init__(self, order: np.ndarray, tie_ids: np.ndarray | None, edges):
        super().__init__(order, tie_ids)
        self.edges = edges


def graph_split_cuts(node: ColumnOrder, feature: int, position: int, graph: GraphData, priority: np.ndarray,
                     settings: SweepSettings = DEFAULT_SETTINGS):
    """Split a node after sorted ``position`` of ``feature``; both children with their best cuts.

    Same contract as :func:`clique_split_cuts`; each child's edge list is the parent's
    filtered by side (edges across the cut are dropped).
    """
    side = np.full(graph.n, -1, dtype=np.int8)
    side[node.order[feature, :position + 1]] = 1
    side[node.order[feature, position + 1:]] = 0
    a, b, w = graph.node_edges(node)
    if settings.compiled:
        edges = _kernels.graph_split_edges(a, b, w, side)
    else:
        side_a = side[a]
        same = side_a == side[b]
        edges = [(a[keep], b[keep], w[keep]) for keep in (same & (side_a == 1), same & (side_a == 0))]
    out = []
    for child, child_edges in zip(node.partition(side), edges):
        child = GraphOrder(child.order, child.tie_ids, child_edges)
        out.append((child, graph_best_cut(child, graph, priority, settings)))
    return tuple(out)


def graph_best_cut(node: ColumnOrder, graph: GraphData, priority: np.ndarray,
                   settings: SweepSettings = DEFAULT_SETTINGS) -> tuple[int, int, float, float]:
    """Best SpEx cut of a node for a general graph; same contract as :func:`clique_best_cut`."""
    d, m = node.order.shape
    members = node.order[0]  # local id i = position in row 0 (any numbering gives the same sums)
    a, b, w = graph.node_edges(node)
    local = graph._local
    local[members] = np.arange(m, dtype=local.dtype)
    deg = graph.degree[members]
    deg_off = graph.degree_off[members]
    vol_v = float(deg.sum())
    off_total = float(deg_off.sum())
    inner_total = float(w.sum())
    cut_v = off_total - 2.0 * inner_total
    psi_v = cut_v / vol_v if vol_v > 0 else 0.0
    if m < 2:
        return -1, -1, np.inf, psi_v
    col_score = np.empty(d)
    col_pos = np.empty(d, dtype=np.int64)
    if settings.compiled:
        ties = node.tie_ids if node.tie_ids is not None else np.empty((0, 0), np.int32)
        stats = np.empty((m, 4), dtype=np.int32 if graph.exact else np.float64)
        stats[:, 0] = deg
        stats[:, 1] = deg_off
        stats[:, 3] = deg > 0  # column 2, the internal degree, is filled by the kernel
        _kernels.graph_sweep(node.order, ties, node.tie_ids is not None, local, a, b, w, stats,
                             np.empty(0, graph.count_dtype), graph.exact, inner_total, off_total, vol_v,
                             int(np.count_nonzero(deg > 0)), col_score, col_pos)
    else:
        la, lb = local[a], local[b]
        w = w.astype(np.float64)
        inner_deg = np.bincount(la, w, minlength=m) + np.bincount(lb, w, minlength=m)
        _graph_numpy(node, local[node.order], la, lb, w, deg, deg_off, inner_deg, col_score, col_pos)
    j, p, score = pick_best(col_score, col_pos, priority)
    return j, p, score, psi_v


def _graph_numpy(node, order_local, a, b, w, deg, deg_off, inner_deg, col_score, col_pos):
    d, m = order_local.shape
    inner_total = float(w.sum())
    unit = w.size > 0 and np.all(w == w[0])
    step = max(1, column_block_size(max(m, w.size)) // 2)
    for s in range(0, d, step):
        lo = order_local[s:s + step]  # (B, m) local ids in feature order
        n_rows = lo.shape[0]
        pos = np.empty((n_rows, m), dtype=np.int32)
        np.put_along_axis(pos, lo, np.arange(m, dtype=np.int32)[None, :], axis=1)
        later = np.maximum(np.take(pos, a, axis=1), np.take(pos, b, axis=1)).astype(np.int64)
        later += (np.arange(n_rows, dtype=np.int64) * m)[:, None]
        if unit:
            hist = np.bincount(later.ravel(), minlength=n_rows * m) * float(w[0])
        else:
            hist = np.bincount(later.ravel(), weights=np.tile(w, n_rows), minlength=n_rows * m)
        w_in_s = np.cumsum(hist.reshape(n_rows, m), axis=1)  # w(S, S)
        deg_ord = deg[lo]
        vol_s = np.cumsum(deg_ord, axis=1)
        vol_r = np.cumsum(deg_ord[:, ::-1], axis=1)[:, ::-1]  # suffix sums: exact zeros stay zero
        vol_r = np.concatenate([vol_r[:, 1:], np.zeros((n_rows, 1))], axis=1)
        off_s = np.cumsum(deg_off[lo], axis=1)
        inner_s = np.cumsum(inner_deg[lo], axis=1)
        cut_s = off_s - 2.0 * w_in_s
        # edges with both ends in R = inner_total - (edges with an endpoint in S)
        w_in_r = inner_total - (inner_s - w_in_s)
        cut_r = (deg_off.sum() - off_s) - 2.0 * w_in_r
        with np.errstate(divide="ignore", invalid="ignore"):
            score = np.where(vol_s > 0, cut_s / vol_s, 0.0) + np.where(vol_r > 0, cut_r / vol_r, 0.0)
        col_score[s:s + n_rows], col_pos[s:s + n_rows] = _finish_block(score, node.valid_cuts(s, s + n_rows))
