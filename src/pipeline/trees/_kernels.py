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

    @numba.njit(parallel=True, cache=True, nogil=True)
    def clique_sweep(order, tie_ids, has_ties, codes, g, local, cut_v, vol_v, out_score, out_pos):
        """Best prefix cut per row for the clique graph; see ``clique_best_cut``."""
        d, m = order.shape
        k = g.size
        for j in prange(d):
            s = np.zeros(k, np.int64)
            cut_s = 0
            vol_s = 0
            cut_r = cut_v
            best = np.inf
            best_p = -1
            for p in range(m - 1):
                c = codes[order[j, p]]
                sc = s[c]
                cut_s += g[c] - 1 - 2 * sc
                vol_s += g[c] - 1
                cut_r += 2 * (local[c] - sc) - g[c] - 1
                s[c] = sc + 1
                if has_ties and tie_ids[j, p] == tie_ids[j, p + 1]:
                    continue
                vol_r = vol_v - vol_s
                if vol_s > 0 and vol_r > 0:
                    # a/vs + b/vr >= best(1 + 1e-9) certainly cannot win: skip the two divisions
                    if float(cut_s) * vol_r + float(cut_r) * vol_s > _SLACK * best * (float(vol_s) * vol_r):
                        continue
                a = cut_s / vol_s if vol_s > 0 else 0.0
                b = cut_r / vol_r if vol_r > 0 else 0.0
                score = a + b
                if score < best:
                    best = score
                    best_p = p
            out_score[j] = best
            out_pos[j] = best_p

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
    def pack_keys(bits_view, start, stop, idx_bits):
        """Order-preserving int64 keys of columns start:stop of a float64 matrix (given as its
        int64 view, shape (n, d)), low ``idx_bits`` bits replaced by the row index."""
        n = bits_view.shape[0]
        out = np.empty((stop - start, n), np.int64)
        low = (np.int64(1) << idx_bits) - 1
        sign_zero = np.int64(-9223372036854775807) - 1  # bit pattern of -0.0
        flip = np.int64(9223372036854775807)
        for jj in prange(stop - start):
            j = start + jj
            for i in range(n):
                v = bits_view[i, j]
                if v == sign_zero:
                    v = 0
                key = v ^ ((v >> 63) & flip)
                out[jj, i] = (key & ~low) | i
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
