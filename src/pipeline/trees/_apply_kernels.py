"""Compiled (numba) passes of a fitted axis-aligned tree over rows: each row's leaf
(:func:`apply_axis_tree`, the comparisons of :meth:`pipeline.trees.tree.ExplanationTree.apply`) and
the training values nearest each cut (:func:`cut_neighbours`, :mod:`pipeline.trees.display`), both
checked against their numpy paths (tests/test_exact_rules.py, tests/test_tree.py).
"""

from __future__ import annotations

import numpy as np

from pipeline.trees._kernel_dispatch import AVAILABLE, SizeDispatch

if AVAILABLE:
    import numba
    from numba import prange

if AVAILABLE:

    @numba.njit(parallel=True, cache=True, nogil=True)
    def apply_axis_tree(X, feature, threshold, left, right, out):
        """Leaf id of every row of X in an axis-aligned tree (``feature[n] < 0``: a leaf): each
        row walks from the root, ``X[i, feature[n]] <= threshold[n]`` going left. The same
        comparisons as :meth:`ExplanationTree.apply`, one pass over the rows instead of numpy
        calls per node (on iris: ~2 us instead of ~25 us); the rows shared among threads."""
        for i in prange(X.shape[0]):
            n = 0
            while feature[n] >= 0:
                n = left[n] if X[i, feature[n]] <= threshold[n] else right[n]
            out[i] = n

    @numba.njit(parallel=True, cache=True, nogil=True)
    def cut_neighbours(X, cols, ptr, T, parts):
        """The training values nearest each axis cut, in one pass over the rows: group g cuts
        column ``cols[g]`` at the sorted distinct thresholds ``T[ptr[g]:ptr[g + 1]]``; each value
        falls in the bin between two of them (a binary search), bins keep their extremes, and
        then ``lo[j]`` = the largest value <= ``T[j]``, ``hi[j]`` = the smallest > ``T[j]``
        (-inf / inf where none): :func:`pipeline.trees.display._sorted_neighbours` per column.
        Returns (lo, hi)."""
        G = cols.shape[0]
        n = X.shape[0]
        lo = np.empty(T.shape[0])
        hi = np.empty(T.shape[0])
        bins = T.shape[0] + G  # group g's bins start at ptr[g] + g
        parts = max(1, parts)  # row blocks (:func:`row_blocks`), each with its own extremes
        step = (n + parts - 1) // parts
        tops = np.full((parts, bins), -np.inf)
        bottoms = np.full((parts, bins), np.inf)
        for p in prange(parts):
            for i in range(p * step, min(n, (p + 1) * step)):
                for g in range(G):
                    v = X[i, cols[g]]
                    a, b = ptr[g], ptr[g + 1]
                    while a < b:  # the first cut >= v
                        mid = (a + b) >> 1
                        if T[mid] < v:
                            a = mid + 1
                        else:
                            b = mid
                    k = a + g
                    if v > tops[p, k]:
                        tops[p, k] = v
                    if v < bottoms[p, k]:
                        bottoms[p, k] = v
        top = np.full(bins, -np.inf)  # the extremes of every block: max and min, in any order the same
        bottom = np.full(bins, np.inf)
        for p in range(parts):
            for k in range(bins):
                if tops[p, k] > top[k]:
                    top[k] = tops[p, k]
                if bottoms[p, k] < bottom[k]:
                    bottom[k] = bottoms[p, k]
        for g in range(G):
            run = -np.inf
            for j in range(ptr[g], ptr[g + 1]):
                if top[j + g] > run:
                    run = top[j + g]
                lo[j] = run
            run = np.inf
            for j in range(ptr[g + 1] - 1, ptr[g] - 1, -1):
                if bottom[j + g + 1] < run:
                    run = bottom[j + g + 1]
                hi[j] = run
        return lo, hi


def row_blocks(n_rows: int) -> int:
    """Blocks of rows a row-parallel reduction (:func:`cut_neighbours`) splits ``n_rows`` into:
    four per thread, of at least 16,384 rows."""
    return max(1, min(4 * numba.get_num_threads(), n_rows // 16384))


if AVAILABLE:  # each kernel and its serial twin, chosen per call (pipeline.trees._kernel_dispatch)
    apply_axis_tree = SizeDispatch(apply_axis_tree)
    cut_neighbours = SizeDispatch(cut_neighbours)
