"""Compiled (numba) inner loops for the sweep-line tree algorithms.

Each kernel does, per feature row of a node's sorted orders, the single pass that the numpy
versions in :mod:`pipeline.trees._spex_sweeps` spread over ~20 array passes: it keeps the
prefix statistics in registers and tracks the row minimum. Rows are independent and run in
parallel (``prange``). The arithmetic is the same as the numpy/brute-force versions, so scores
are bit-identical on integer-weighted inputs. numba is already a dependency of pynndescent;
if it cannot be imported, ``AVAILABLE`` is False and callers use the numpy paths.
"""

from __future__ import annotations

import numpy as np

try:  # pragma: no cover - exercised implicitly
    import numba
    from numba import prange

    AVAILABLE = True
except ImportError:  # pragma: no cover
    AVAILABLE = False

_SLACK = 1.0 + 1e-9  # prefilter margin, far above float rounding; exact scores decide

if AVAILABLE:

    @numba.njit(inline="always")
    def _clique_eval(cut_s, vol_s, cut_r, vol_v, best, best_p, p):
        """Score of the prefix cut after position p (stats of the prefix given); keep the best."""
        vol_r = vol_v - vol_s
        if vol_s > 0 and vol_r > 0:
            # a/vs + b/vr >= best(1 + 1e-9) certainly cannot win: skip the two divisions
            if float(cut_s) * vol_r + float(cut_r) * vol_s > _SLACK * best * (float(vol_s) * vol_r):
                return best, best_p
        a = cut_s / vol_s if vol_s > 0 else 0.0
        b = cut_r / vol_r if vol_r > 0 else 0.0
        score = a + b
        if score < best:
            return score, p
        return best, best_p

    @numba.njit(inline="always")
    def _clique_add(s, c, gm1, t, cut_s, vol_s, cut_r):
        """Move one point of cluster c from the suffix to the prefix: updated (cut_s, vol_s, cut_r)."""
        sc = s[c]
        s[c] = sc + 1
        return cut_s + gm1[c] - 2 * sc, vol_s + gm1[c], cut_r + t[c] - 2 * sc

    @numba.njit(parallel=True, cache=True, nogil=True)
    def clique_sweep(order, tie_ids, has_ties, codes, gm1, t, cut_v, vol_v, out_score, out_pos):
        """Best prefix cut per row for the clique graph; see ``clique_best_cut``.

        ``gm1 = g - 1`` and ``t = 2 * local - g - 1`` per cluster (g global, local node sizes).
        A cut after position p-1 is scored when the point at p arrives (if its value differs).
        """
        d, m = order.shape
        for j in prange(d):
            s = np.zeros(gm1.size, np.int64)
            cut_s = 0
            vol_s = 0
            cut_r = cut_v
            best = np.inf
            best_p = -1
            for p in range(m):
                if p > 0 and (not has_ties or tie_ids[j, p - 1] != tie_ids[j, p]):
                    best, best_p = _clique_eval(cut_s, vol_s, cut_r, vol_v, best, best_p, p - 1)
                cut_s, vol_s, cut_r = _clique_add(s, codes[order[j, p]], gm1, t, cut_s, vol_s, cut_r)
            out_score[j] = best
            out_pos[j] = best_p

    @numba.njit(parallel=True, cache=True, nogil=True)
    def clique_split_sweep(order, tie_ids, has_ties, side, n_left, n_right, codes, gm1, t_l, t_r,
                           cut_v_l, vol_v_l, cut_v_r, vol_v_r, out_score, out_pos):
        """Stable split of every row by ``side`` (1 left, 0 right) fused with the clique sweeps
        of both children: one pass over the parent's orders, no re-reading of the children.

        Returns the children's (order, tie_ids) like :func:`partition_rows`; best cut score and
        position per row of the left (right) child go to ``out_score[0]``, ``out_pos[0]`` ([1]).
        """
        d, m = order.shape
        left = np.empty((d, n_left), order.dtype)
        right = np.empty((d, n_right), order.dtype)
        t_rows = d if has_ties else 0
        tie_left = np.empty((t_rows, n_left), tie_ids.dtype)
        tie_right = np.empty((t_rows, n_right), tie_ids.dtype)
        for j in prange(d):
            s_l = np.zeros(gm1.size, np.int64)
            s_r = np.zeros(gm1.size, np.int64)
            a = 0
            b = 0
            cut_sl = 0
            vol_sl = 0
            cut_rl = cut_v_l
            cut_sr = 0
            vol_sr = 0
            cut_rr = cut_v_r
            best_l = np.inf
            best_r = np.inf
            pos_l = -1
            pos_r = -1
            prev_l = -1
            prev_r = -1
            for p in range(m):
                x = order[j, p]
                tie = tie_ids[j, p] if has_ties else 0
                if side[x] == 1:
                    if a > 0 and (not has_ties or prev_l != tie):
                        best_l, pos_l = _clique_eval(cut_sl, vol_sl, cut_rl, vol_v_l, best_l, pos_l, a - 1)
                    left[j, a] = x
                    if has_ties:
                        tie_left[j, a] = tie
                    prev_l = tie
                    a += 1
                    cut_sl, vol_sl, cut_rl = _clique_add(s_l, codes[x], gm1, t_l, cut_sl, vol_sl, cut_rl)
                else:
                    if b > 0 and (not has_ties or prev_r != tie):
                        best_r, pos_r = _clique_eval(cut_sr, vol_sr, cut_rr, vol_v_r, best_r, pos_r, b - 1)
                    right[j, b] = x
                    if has_ties:
                        tie_right[j, b] = tie
                    prev_r = tie
                    b += 1
                    cut_sr, vol_sr, cut_rr = _clique_add(s_r, codes[x], gm1, t_r, cut_sr, vol_sr, cut_rr)
            out_score[0, j] = best_l
            out_pos[0, j] = pos_l
            out_score[1, j] = best_r
            out_pos[1, j] = pos_r
        return left, right, tie_left, tie_right

    @numba.njit(cache=True, nogil=True)
    def _graph_row(order_row, tie_row, has_ties, hist, deg, deg_off, inner_deg,
                   inner_total, off_total, vol_total, n_positive):
        """Best prefix cut of one sorted row given the histogram of edge weights by later endpoint."""
        m = order_row.size
        w_in_s = 0.0
        vol_s = 0.0
        off_s = 0.0
        inner_s = 0.0
        pos_s = 0
        best = np.inf
        best_p = -1
        for p in range(m - 1):
            x = order_row[p]
            w_in_s += hist[p]
            vol_s += deg[x]
            off_s += deg_off[x]
            inner_s += inner_deg[x]
            if deg[x] > 0:
                pos_s += 1
            if has_ties and tie_row[p] == tie_row[p + 1]:
                continue
            cut_s = off_s - 2.0 * w_in_s
            w_in_r = inner_total - (inner_s - w_in_s)
            cut_r = (off_total - off_s) - 2.0 * w_in_r
            vol_r = vol_total - vol_s
            if vol_s > 0 and n_positive - pos_s > 0 and vol_r > 0:
                if cut_s * vol_r + cut_r * vol_s > _SLACK * best * (vol_s * vol_r):
                    continue  # cannot beat the best: skip the divisions
            a = cut_s / vol_s if vol_s > 0 else 0.0
            b = cut_r / vol_r if n_positive - pos_s > 0 else 0.0
            score = a + b
            if score < best:
                best = score
                best_p = p
        return best, best_p

    @numba.njit(parallel=True, cache=True, nogil=True)
    def graph_sweep(order_local, tie_ids, has_ties, edge_a, edge_b, edge_w, deg, deg_off, inner_deg,
                    inner_total, off_total, vol_total, n_positive, out_score, out_pos):
        """Best prefix cut per row for a general graph.

        The node's internal edges (local ids, each undirected edge once) are streamed once per
        pair of rows into histograms over the position of their later endpoint; a histogram's
        prefix sum is the weight of the edges inside the prefix.
        """
        d, m = order_local.shape
        n_edges = edge_a.size
        empty = np.empty(0, np.int32)
        for jp in prange((d + 1) // 2):
            j0 = 2 * jp
            j1 = min(j0 + 1, d - 1)
            pos0 = np.empty(m, np.int32)
            pos1 = np.empty(m, np.int32)
            for p in range(m):
                pos0[order_local[j0, p]] = p
                pos1[order_local[j1, p]] = p
            hist0 = np.zeros(m)
            hist1 = np.zeros(m)
            for e in range(n_edges):
                a = edge_a[e]
                b = edge_b[e]
                w = edge_w[e]
                pa = pos0[a]
                pb = pos0[b]
                hist0[pa if pa > pb else pb] += w
                pa = pos1[a]
                pb = pos1[b]
                hist1[pa if pa > pb else pb] += w
            for j, hist in ((j0, hist0), (j1, hist1)):
                tie_row = tie_ids[j] if has_ties else empty
                out_score[j], out_pos[j] = _graph_row(order_local[j], tie_row, has_ties, hist, deg, deg_off,
                                                      inner_deg, inner_total, off_total, vol_total, n_positive)

    @numba.njit(parallel=True, cache=True, nogil=True)
    def partition_rows(order, tie_ids, has_ties, side, n_left, n_right):
        """Stable split of every row of ``order`` by ``side[point]`` (1 = left, 0 = right, else dropped)."""
        d, m = order.shape
        left = np.empty((d, n_left), order.dtype)
        right = np.empty((d, n_right), order.dtype)
        t_rows = d if has_ties else 0
        t_left = np.empty((t_rows, n_left), tie_ids.dtype)
        t_right = np.empty((t_rows, n_right), tie_ids.dtype)
        for j in prange(d):
            a = 0
            b = 0
            for p in range(m):
                x = order[j, p]
                if side[x] == 1:
                    left[j, a] = x
                    if has_ties:
                        t_left[j, a] = tie_ids[j, p]
                    a += 1
                elif side[x] == 0:
                    right[j, b] = x
                    if has_ties:
                        t_right[j, b] = tie_ids[j, p]
                    b += 1
        return left, right, t_left, t_right

    @numba.njit(parallel=True, cache=True, nogil=True)
    def pack_keys(bits_view, idx_bits):
        """Order-preserving int64 keys of every column of a float64 matrix (given as its int64
        view, shape (n, d)), low ``idx_bits`` bits replaced by the row index; shape (d, n).

        Tiles of 256 rows are transposed column by column: the tile's cache lines stay in L1
        while its 8 columns per line are read, and each output row gets 256 contiguous keys.
        """
        n, d = bits_view.shape
        out = np.empty((d, n), np.int64)
        low = (np.int64(1) << idx_bits) - 1
        sign_zero = np.int64(-9223372036854775807) - 1  # bit pattern of -0.0
        flip = np.int64(9223372036854775807)
        for ib in prange((n + 255) // 256):
            i0 = 256 * ib
            i1 = min(i0 + 256, n)
            for j in range(d):
                for i in range(i0, i1):
                    v = bits_view[i, j]
                    if v == sign_zero:
                        v = 0
                    key = v ^ ((v >> 63) & flip)
                    out[j, i] = (key & ~low) | i
        return out

    @numba.njit(parallel=True, cache=True, nogil=True)
    def unpack_keys(keys, idx_bits, order, same_key):
        """Row ids (low bits) of sorted keys, and whether neighbours share the truncated key."""
        b, n = keys.shape
        low = (np.int64(1) << idx_bits) - 1
        for r in prange(b):
            for i in range(n):
                order[r, i] = keys[r, i] & low
                if i + 1 < n:
                    same_key[r, i] = (keys[r, i] >> idx_bits) == (keys[r, i + 1] >> idx_bits)
