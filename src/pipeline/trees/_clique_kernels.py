"""Compiled (numba) sweeps of SpEx-Clique: the best prefix cut of every sorted feature row of a node
under the clique graph of a reference clustering (:func:`clique_sweep`), and the same fused with the
node's split into its children (:func:`clique_split_sweep`). Each kernel does, per row, the single
pass that the numpy versions in :mod:`pipeline.trees._spex_sweeps` spread over ~20 array passes,
with the prefix statistics in registers; rows run in parallel (``prange``). The arithmetic is the
numpy/brute-force versions', so scores are bit-identical on integer-weighted inputs (tests/test_spex.py).

:func:`clique_split_sweep` inlines the row split of :mod:`pipeline.trees._row_kernels`; numba's
on-disk cache tracks only this file, so a change there must touch this file too (its cache is then
rebuilt).
"""

from __future__ import annotations

import numpy as np

from pipeline.trees._kernel_dispatch import _SLACK, AVAILABLE, SizeDispatch

if AVAILABLE:
    import numba
    from numba import prange

    from pipeline.trees._row_kernels import _child_arrays, _split_row  # inlined by clique_split_sweep

if AVAILABLE:

    @numba.njit(inline="always")
    def _clique_eval(cut_s, vol_s, cut_r, vol_v, best, best_p, p):
        """Score of the prefix cut after position p (stats of the prefix given); keep the best
        (lowest score, then lowest position)."""
        vol_r = vol_v - vol_s
        if vol_s > 0 and vol_r > 0:
            # a/vs + b/vr >= best(1 + 1e-9) certainly cannot win: skip the two divisions
            if float(cut_s) * vol_r + float(cut_r) * vol_s > _SLACK * best * (float(vol_s) * vol_r):
                return best, best_p
        a = cut_s / vol_s if vol_s > 0 else 0.0
        b = cut_r / vol_r if vol_r > 0 else 0.0
        score = a + b
        if score < best or (score == best and p < best_p):
            return score, p
        return best, best_p

    @numba.njit(inline="always")
    def _clique_add(s, c, deg, suffix_step, cut_s, vol_s, cut_r):
        """Move one point of cluster c from the suffix to the prefix: updated (cut_s, vol_s, cut_r).

        ``deg[c] = g_c - 1`` is a point's degree in the clique graph (vol grows by it);
        ``suffix_step[c] = 2 local_c - g_c - 1`` is the change of ``cut_r = sum_c r_c (g_c - r_c)``
        when ``r_c = local_c - s_c`` drops by one, less the ``- 2 s_c`` term added here."""
        sc = s[c]
        s[c] = sc + 1
        return cut_s + deg[c] - 2 * sc, vol_s + deg[c], cut_r + suffix_step[c] - 2 * sc

    @numba.njit(inline="always")
    def _clique_stats(s, g, deg, local):
        """(cut_s, vol_s, cut_r) of a prefix with per-cluster counts s, from scratch (integers)."""
        cut_s = 0
        vol_s = 0
        cut_r = 0
        for c in range(g.size):
            r = local[c] - s[c]
            cut_s += s[c] * (g[c] - s[c])
            vol_s += s[c] * deg[c]
            cut_r += r * (g[c] - r)
        return cut_s, vol_s, cut_r

    @numba.njit(inline="always")
    def _box_bound(lo, hi, g, deg, local):
        """Lower bound of the cut score of every prefix whose counts lie between lo and hi.

        ``e(S) = sum_c s_c (g_c - s_c)`` is concave in each s_c, so its minimum over the box is
        the sum of per-cluster minima at the box ends; volumes are bounded by the larger set.
        """
        e_s = 0.0
        v_s = 0.0
        e_r = 0.0
        v_r = 0.0
        for c in range(g.size):
            e_s += min(lo[c] * (g[c] - lo[c]), hi[c] * (g[c] - hi[c]))
            v_s += hi[c] * deg[c]
            r_lo = local[c] - hi[c]
            r_hi = local[c] - lo[c]
            e_r += min(r_lo * (g[c] - r_lo), r_hi * (g[c] - r_hi))
            v_r += r_hi * deg[c]
        return (e_s / v_s if v_s > 0 else 0.0) + (e_r / v_r if v_r > 0 else 0.0)

    @numba.njit(cache=True, nogil=True)
    def _clique_row(row, tie_row, has_ties, codes, g, deg, local, suffix_step, cut_v, vol_v, block, limit):
        """Best prefix cut (score, position) of one sorted row for the clique graph.

        With ``block < row.size``: pass 1 counts the clusters in blocks of ``block`` positions
        and (without ties) scores the cuts at block boundaries exactly, a good incumbent; pass
        2 rescans, position by position, only the blocks whose lower bound
        (:func:`_box_bound`) can still reach the incumbent. Otherwise one plain scan. Either
        way the result equals a full scan: lowest score, ties to the lowest position, whenever
        that score is at most ``limit`` (a score reached by a cut of another row of the node:
        blocks that cannot reach it are skipped too; a row that cannot beat it reports a score
        above it, and loses).
        """
        m = row.size
        k = g.size
        n_blocks = (m + block - 1) // block if block < m else 1
        counts = np.zeros((n_blocks + 1, k), np.int64)
        s = np.zeros(k, np.int64)
        best = np.inf
        best_p = -1
        if n_blocks > 1:
            s_odd = np.zeros(k, np.int64)  # odd positions: two histograms halve the chains of
            for b in range(n_blocks):         # increments of one counter through memory
                p = b * block
                end = min((b + 1) * block, m)
                while p + 1 < end:
                    s[codes[row[p]]] += 1
                    s_odd[codes[row[p + 1]]] += 1
                    p += 2
                if p < end:
                    s[codes[row[p]]] += 1
                for c in range(k):
                    counts[b + 1, c] = s[c] + s_odd[c]
            if not has_ties:
                for b in range(1, n_blocks):
                    cut_s, vol_s, cut_r = _clique_stats(counts[b], g, deg, local)
                    best, best_p = _clique_eval(cut_s, vol_s, cut_r, vol_v, best, best_p, b * block - 1)
        else:
            block = m
            counts[1] = local
        for b in range(n_blocks):
            if n_blocks > 1 and _box_bound(counts[b], counts[b + 1], g, deg, local) > _SLACK * min(best, limit[0]):
                continue
            s[:] = counts[b]
            cut_s, vol_s, cut_r = _clique_stats(s, g, deg, local)
            for p in range(b * block, min((b + 1) * block, m)):
                if p > 0 and (not has_ties or tie_row[p - 1] != tie_row[p]):
                    best, best_p = _clique_eval(cut_s, vol_s, cut_r, vol_v, best, best_p, p - 1)
                cut_s, vol_s, cut_r = _clique_add(s, codes[row[p]], deg, suffix_step, cut_s, vol_s, cut_r)
        if best < limit[0]:
            limit[0] = best  # shared by the rows (threads) of this node: any value is a real cut's score
        return best, best_p

    @numba.njit(parallel=True, cache=True, nogil=True)
    def clique_sweep(order, tie_ids, has_ties, codes, g, local, cut_v, vol_v, block, out_score, out_pos):
        """Best prefix cut per row for the clique graph; see ``clique_best_cut``.

        ``g`` global and ``local`` node cluster sizes (int64); ``cut_v``, ``vol_v`` of the node.
        """
        d = order.shape[0]
        deg = g - 1
        suffix_step = 2 * local - g - 1
        empty = np.empty(0, tie_ids.dtype)
        limit = np.full(1, np.inf)  # the best score found so far in any row (see _clique_row)
        for j in prange(d):
            tie_row = tie_ids[j] if has_ties else empty
            out_score[j], out_pos[j] = _clique_row(order[j], tie_row, has_ties, codes, g, deg, local, suffix_step, cut_v,
                                                   vol_v, block, limit)

    @numba.njit(parallel=True, cache=True, nogil=True)
    def clique_split_sweep(order, tie_ids, has_ties, side, n_left, n_right, codes, g, local_l, local_r,
                           cut_v_l, vol_v_l, cut_v_r, vol_v_r, block_l, block_r, out_score, out_pos):
        """Stable split of every row by ``side`` (1 left, 0 right) fused with the clique sweeps
        of both children (each child row is swept while it is still in cache).

        Returns the children's (order, tie_ids) like :func:`partition_rows`; best cut score and
        position per row of the left (right) child go to ``out_score[0]``, ``out_pos[0]`` ([1]).
        """
        d, m = order.shape
        left, right, tie_left, tie_right = _child_arrays(order, tie_ids, has_ties, n_left, n_right)
        deg = g - 1
        suffix_step_l = 2 * local_l - g - 1
        suffix_step_r = 2 * local_r - g - 1
        empty = np.empty(0, tie_ids.dtype)
        t_size = n_left + 1 if has_ties else 0
        limit_l = np.full(1, np.inf)  # best score so far in any row of each child (see _clique_row)
        limit_r = np.full(1, np.inf)
        for j in prange(d):
            buf_l = np.empty(n_left + 1, order.dtype)
            buf_r = np.empty(n_right + 1, order.dtype)
            tbuf_l = np.empty(t_size, tie_ids.dtype)
            tbuf_r = np.empty(n_right + 1 if has_ties else 0, tie_ids.dtype)
            _split_row(order[j], tie_ids[j] if has_ties else empty, has_ties, side, buf_l, buf_r, tbuf_l, tbuf_r)
            left[j] = buf_l[:n_left]
            right[j] = buf_r[:n_right]
            tl = empty
            tr = empty
            if has_ties:
                tie_left[j] = tbuf_l[:n_left]
                tie_right[j] = tbuf_r[:n_right]
                tl = tie_left[j]
                tr = tie_right[j]
            out_score[0, j], out_pos[0, j] = _clique_row(left[j], tl, has_ties, codes, g, deg, local_l, suffix_step_l,
                                                         cut_v_l, vol_v_l, block_l, limit_l)
            out_score[1, j], out_pos[1, j] = _clique_row(right[j], tr, has_ties, codes, g, deg, local_r, suffix_step_r,
                                                         cut_v_r, vol_v_r, block_r, limit_r)
        return left, right, tie_left, tie_right


if AVAILABLE:  # each kernel and its serial twin, chosen per call (pipeline.trees._kernel_dispatch)
    clique_sweep = SizeDispatch(clique_sweep)
    clique_split_sweep = SizeDispatch(clique_split_sweep)
