"""Centre-based trees on small inputs: the whole IMM / EMN tree in one compiled call, and
ExKMC's expansion with one compiled call per leaf.

On iris a tree has two cuts, and the Python steps around each node of
:func:`pipeline.trees.imm.build_imm_tree` (numpy calls, the ColumnOrder partition, the progress
bar) cost ten times the node's sweep. Below :func:`~pipeline.trees._kernels.parallel_min_work`
elements (where the general path's kernels run serially anyway) the estimators use
these functions instead. They run the same sweeps (``_mistakes_row``, ``surrogate_sweep``)
with the same tie rules, number the nodes in the same order and expand the same leaves, so the
trees are identical to the general path's (the tests run both).
"""

from __future__ import annotations

import logging

import numba
import numpy as np

from pipeline.trees import _imm_kernels as kern
from pipeline.trees.tree import ExplanationTree

logger = logging.getLogger("pipeline.trees.imm")

_surrogate_serial = kern.surrogate_sweep.serial


@numba.njit(cache=True, nogil=True)
def _sorted_orders(X):
    """Stable per-feature orders of the rows (int64 (d, n)) and their tie ids (dense value ranks
    along each order); -0.0 ties with 0.0, as in :class:`~pipeline.trees._column_order.ColumnOrder`."""
    n, d = X.shape
    order = np.empty((d, n), np.int64)
    ties = np.zeros((d, n), np.int64)
    col = np.empty(n)
    for j in range(d):
        for i in range(n):
            col[i] = X[i, j]
        srt = np.argsort(col, kind="mergesort")
        for i in range(n):
            order[j, i] = srt[i]
            if i > 0:
                ties[j, i] = ties[j, i - 1] + (col[srt[i]] != col[srt[i - 1]])
    return order, ties


@numba.njit(cache=True, nogil=True)
def _keep(order, ties, side, want):
    """Stable filter of every row of ``order``/``ties`` to the points with ``side == want``."""
    d, m = order.shape
    count = 0
    for i in range(m):
        if side[order[0, i]] == want:
            count += 1
    out = np.empty((d, count), np.int64)
    t_out = np.empty((d, count), np.int64)
    for j in range(d):
        c = 0
        for i in range(m):
            x = order[j, i]
            if side[x] == want:
                out[j, c] = x
                t_out[j, c] = ties[j, i]
                c += 1
    return out, t_out


@numba.njit(cache=True, nogil=True)
def _grow(X, codes, centers, ratio, priority):
    """IMM (EMN if ``ratio``) as :func:`pipeline.trees.imm.build_imm_tree` grows it.

    Returns (status, split nodes, split features, split thresholds, leaf nodes, leaf centres,
    leaf of every row); status -1 means a node had no separating cut.
    """
    n, d = X.shape
    k = centers.shape[0]
    order, ties = _sorted_orders(X)
    s_node = np.empty(k - 1, np.int64)
    s_feat = np.empty(k - 1, np.int64)
    s_thr = np.empty(k - 1)
    leaf_node = np.empty(k, np.int64)
    leaf_centre = np.empty(k, np.int64)
    n_split = 0
    n_leaf = 0
    n_nodes = 1
    score = np.empty(d)
    thr = np.empty(d)
    side = np.full(n, -1, np.int8)
    stack = [(0, order, ties, np.arange(k))]
    while len(stack) > 0:
        node, order, ties, cset = stack.pop()
        if cset.size == 1:
            leaf_node[n_leaf] = node
            leaf_centre[n_leaf] = cset[0]
            n_leaf += 1
            continue
        m = order.shape[1]
        local = np.zeros(k, np.int64)
        for i in range(m):
            local[codes[order[0, i]]] += 1
        for j in range(d):
            score[j], thr[j] = kern._mistakes_row(X, order[j], ties[j], True, j, codes, centers, cset, local, ratio)
        j = -1  # pick_best: the lowest score, ties to the lowest priority
        for f in range(d):
            if np.isfinite(score[f]) and (j < 0 or score[f] < score[j]
                                          or (score[f] == score[j] and priority[f] < priority[j])):
                j = f
        if j < 0:
            return -1, s_node, s_feat, s_thr, leaf_node, leaf_centre, side.astype(np.int64)
        t = thr[j]
        left, right = n_nodes, n_nodes + 1
        n_nodes += 2
        s_node[n_split], s_feat[n_split], s_thr[n_split] = node, j, t
        n_split += 1
        n_c_left = 0
        for c in cset:
            n_c_left += centers[c, j] <= t
        c_left = np.empty(n_c_left, np.int64)
        c_right = np.empty(cset.size - n_c_left, np.int64)
        a = 0
        b = 0
        for c in cset:
            if centers[c, j] <= t:
                c_left[a] = c
                a += 1
            else:
                c_right[b] = c
                b += 1
        lo = lt = ro = rt = np.empty((d, 0), np.int64)
        if n_c_left > 1 or cset.size - n_c_left > 1:  # a child with one centre needs no points
            for i in range(m):
                x = order[0, i]
                x_left = X[x, j] <= t
                if x_left == (centers[codes[x], j] <= t):
                    side[x] = 1 if x_left else 0
                else:
                    side[x] = -1
            if n_c_left > 1:
                lo, lt = _keep(order, ties, side, 1)
            if cset.size - n_c_left > 1:
                ro, rt = _keep(order, ties, side, 0)
        stack.append((right, ro, rt, c_right))
        stack.append((left, lo, lt, c_left))
    # the leaf of every row, for ExKMC's expansion
    leaf_of = np.empty(n, np.int64)
    s_left = np.full(2 * k - 1, -1, np.int64)
    feat = np.full(2 * k - 1, -1, np.int64)
    cut = np.empty(2 * k - 1)
    for s in range(n_split):
        feat[s_node[s]] = s_feat[s]
        cut[s_node[s]] = s_thr[s]
        s_left[s_node[s]] = 2 * s + 1  # ExplanationTree numbers the children of the s-th split so
    for i in range(n):
        v = 0
        while feat[v] >= 0:
            v = s_left[v] if X[i, feat[v]] <= cut[v] else s_left[v] + 1
        leaf_of[i] = v
    return 0, s_node, s_feat, s_thr, leaf_node, leaf_centre, leaf_of


def build_imm_tree_small(X, codes, centers, ratio: bool, priority, feature_names=None):
    """:func:`pipeline.trees.imm.build_imm_tree` in one compiled call (no progress bar).

    Returns (tree, leaf_center, leaf of every row), or None if some node has no separating
    cut (the caller then takes the general path, which raises its error).
    """
    status, s_node, s_feat, s_thr, leaf_node, leaf_centre, leaf_of = _grow(
        X, codes, centers, bool(ratio), np.asarray(priority, dtype=np.int64))
    if status < 0:
        return None
    tree = ExplanationTree(X.shape[1], feature_names)
    debug = logger.isEnabledFor(logging.DEBUG)
    for node, j, t in zip(s_node.tolist(), s_feat.tolist(), s_thr.tolist()):
        tree.split(node, j, t)
        if debug:
            logger.debug("node %d: x[%d] <= %.6g", node, j, t)
    return tree, dict(zip(leaf_node.tolist(), leaf_centre.tolist())), leaf_of


@numba.njit(cache=True, nogil=True)
def _leaf_total(codes, rows, centre, xc, c_norm2):
    """(splittable, sum of ``xc`` over the rows, the leaf's cost now): a leaf of fewer than 2
    points or of its centre's cluster only is not split. The rows are summed in index order
    (as numpy sums ``xc[rows].sum(axis=0)``, and ExKMC 0.0.3 the leaf total)."""
    k = c_norm2.size
    total = np.zeros(k)
    pure = True
    for r in rows:
        pure &= codes[r] == centre
        for c in range(k):
            total[c] += xc[r, c]
    before = np.inf
    for c in range(k):
        before = min(before, rows.size * c_norm2[c] - 2.0 * total[c])
    return rows.size >= 2 and not pure, total, before


@numba.njit(cache=True, nogil=True)
def _leaf_cut(X, rows, srt, table, c_norm2, total, priority):
    """Best surrogate cut of one leaf (``rows``; ``srt[j]`` sorts its feature j):
    (feature, threshold, cost, centre left, centre right), feature -1 if there is none."""
    d, m = srt.shape
    order = np.empty((d, m), np.int64)
    ties = np.zeros((d, m), np.int64)
    for j in range(d):
        for i in range(m):
            order[j, i] = rows[srt[j, i]]
        for i in range(1, m):
            ties[j, i] = ties[j, i - 1] + (X[order[j, i], j] != X[order[j, i - 1], j])
    cost = np.empty(d)
    pos = np.empty(d, np.int64)
    c_left = np.empty(d, np.int64)
    c_right = np.empty(d, np.int64)
    _surrogate_serial(order, ties, True, table, c_norm2, total, cost, pos, c_left, c_right)
    j = -1
    for f in range(d):
        if np.isfinite(cost[f]) and (j < 0 or cost[f] < cost[j] or (cost[f] == cost[j] and priority[f] < priority[j])):
            j = f
    if j < 0:
        return -1, np.nan, np.inf, -1, -1
    return j, X[order[j, pos[j]], j], cost[j], c_left[j], c_right[j]


def _best_cut(X, codes, rows, centre, xc, table, c_norm2, priority):
    """``ExKMC._best_surrogate_split`` for a leaf given by its sorted row ids: (gain, feature,
    threshold, centre left, centre right) or None. Columns are sorted by numpy's default
    ``argsort``, as ExKMC 0.0.3 sorts them (see ``ExKMC._best_surrogate_split``)."""
    ok, total, before = _leaf_total(codes, rows, centre, xc, c_norm2)
    if not ok:
        return None
    srt = X[rows].T.copy().argsort(axis=1)
    j, t, best, cl, cr = _leaf_cut(X, rows, srt, table, c_norm2, total, priority)
    if j < 0:
        return None
    return best - before, j, t, cl, cr


def expand_small(X, codes, centers, tree, leaf_center, leaf_of, n_leaves, priority):
    """``ExKMC._expand`` for small inputs: the leaves hold their row ids, and each leaf's
    cut is one compiled call. Returns False if it stopped early (no expandable leaf)."""
    xc = X @ centers.T
    c_norm2 = np.linalg.norm(centers, axis=1) ** 2
    table = kern.sweep_table(xc, c_norm2)
    priority = np.asarray(priority, dtype=np.int64)
    by_leaf = np.argsort(leaf_of, kind="stable")  # rows grouped by leaf, ascending within each
    count = np.bincount(leaf_of, minlength=tree.n_nodes)
    start = np.concatenate(([0], np.cumsum(count)))
    leaves = {leaf: [by_leaf[start[leaf]:start[leaf + 1]], None, False]  # depth-first order, as ExKMC._expand
              for leaf in tree.leaves.tolist()}
    while tree.n_leaves < n_leaves:
        best_leaf, best = None, None
        for leaf, info in leaves.items():
            if not info[2]:
                info[1], info[2] = _best_cut(X, codes, info[0], leaf_center[leaf], xc, table, c_norm2,
                                             priority), True
            cand = info[1]
            if cand is not None and (best is None or cand[0] < best[0]):
                best_leaf, best = leaf, cand
        if best is None:
            return False
        _, j, t, c_left, c_right = best
        rows = leaves.pop(best_leaf)[0]
        left, right = tree.split(best_leaf, j, t)
        go_left = X[rows, j] <= t
        del leaf_center[best_leaf]
        leaf_center[left], leaf_center[right] = c_left, c_right
        leaves[left], leaves[right] = [rows[go_left], None, False], [rows[~go_left], None, False]
    return True
