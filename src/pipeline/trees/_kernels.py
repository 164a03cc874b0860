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
_GRAPH_ROWS = 8  # feature rows sharing one pass over the edge list in graph_sweep

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
    def _clique_add(s, c, gm1, t, cut_s, vol_s, cut_r):
        """Move one point of cluster c from the suffix to the prefix: updated (cut_s, vol_s, cut_r)."""
        sc = s[c]
        s[c] = sc + 1
        return cut_s + gm1[c] - 2 * sc, vol_s + gm1[c], cut_r + t[c] - 2 * sc

    @numba.njit(inline="always")
    def _clique_stats(s, g, gm1, local):
        """(cut_s, vol_s, cut_r) of a prefix with per-cluster counts s, from scratch (integers)."""
        cut_s = 0
        vol_s = 0
        cut_r = 0
        for c in range(g.size):
            r = local[c] - s[c]
            cut_s += s[c] * (g[c] - s[c])
            vol_s += s[c] * gm1[c]
            cut_r += r * (g[c] - r)
        return cut_s, vol_s, cut_r

    @numba.njit(inline="always")
    def _clique_bound(lo, hi, g, gm1, local):
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
            v_s += hi[c] * gm1[c]
            r_lo = local[c] - hi[c]
            r_hi = local[c] - lo[c]
            e_r += min(r_lo * (g[c] - r_lo), r_hi * (g[c] - r_hi))
            v_r += r_hi * gm1[c]
        return (e_s / v_s if v_s > 0 else 0.0) + (e_r / v_r if v_r > 0 else 0.0)

    @numba.njit(cache=True, nogil=True)
    def _clique_row(row, tie_row, has_ties, member, codes, g, gm1, local, t, cut_v, vol_v, block):
        """Best prefix cut (score, position) of one sorted row for the clique graph.

        The node is the points x of ``row`` with ``member[x] == 1`` (the row may hold other
        points too); a cut is reported at the row position of the last member of its prefix.
        Pass 1 counts the members' clusters in blocks of ``block`` row positions and (without
        ties) scores the cuts at block boundaries exactly: a good incumbent. Pass 2 rescans,
        position by position, only the blocks whose lower bound (:func:`_clique_bound`) can
        still reach the incumbent, so the result equals a full scan: lowest score, ties to the
        lowest position.
        """
        n = row.size
        k = g.size
        m = 0
        for c in range(k):
            m += local[c]
        nb = (n + block - 1) // block
        counts = np.zeros((nb + 1, k + 1), np.int64)  # slot k counts non-members
        last = np.full(nb + 1, -1, np.int64)  # row position of the last member before block b
        s = np.zeros(k + 1, np.int64)
        lp = -1
        for b in range(nb):
            for p in range(b * block, min((b + 1) * block, n)):
                x = row[p]
                is_member = member[x] == 1
                s[codes[x] if is_member else k] += 1
                lp = p if is_member else lp
            counts[b + 1] = s
            last[b + 1] = lp
        best = np.inf
        best_p = -1
        if not has_ties:
            for b in range(1, nb):
                before = np.sum(counts[b, :k])
                if 0 < before < m:
                    cut_s, vol_s, cut_r = _clique_stats(counts[b], g, gm1, local)
                    best, best_p = _clique_eval(cut_s, vol_s, cut_r, vol_v, best, best_p, last[b])
        for b in range(nb):
            if _clique_bound(counts[b], counts[b + 1], g, gm1, local) > _SLACK * best:
                continue
            s[:] = counts[b]
            cut_s, vol_s, cut_r = _clique_stats(s, g, gm1, local)
            before = np.sum(s[:k])
            prev = last[b]
            prev_tie = tie_row[prev] if has_ties and prev >= 0 else -1
            for p in range(b * block, min((b + 1) * block, n)):
                x = row[p]
                if member[x] != 1:
                    continue
                tie = tie_row[p] if has_ties else 0
                if before > 0 and (not has_ties or prev_tie != tie):
                    best, best_p = _clique_eval(cut_s, vol_s, cut_r, vol_v, best, best_p, prev)
                cut_s, vol_s, cut_r = _clique_add(s, codes[x], gm1, t, cut_s, vol_s, cut_r)
                before += 1
                prev = p
                prev_tie = tie
        return best, best_p

    @numba.njit(parallel=True, cache=True, nogil=True)
    def clique_sweep(order, tie_ids, has_ties, member, codes, g, local, cut_v, vol_v, block, out_score, out_pos):
        """Best prefix cut per row for the clique graph; see ``clique_best_cut``.

        ``member`` (int8 over global points, 1 = in the node) selects the node's points from
        the rows; ``g`` global and ``local`` node cluster sizes (int64); ``cut_v``, ``vol_v`` of
        the node. Positions index the rows of ``order``.
        """
        d = order.shape[0]
        gm1 = g - 1
        t = 2 * local - g - 1
        empty = np.empty(0, tie_ids.dtype)
        for j in prange(d):
            tie_row = tie_ids[j] if has_ties else empty
            out_score[j], out_pos[j] = _clique_row(order[j], tie_row, has_ties, member, codes, g, gm1, local, t,
                                                   cut_v, vol_v, block)

    @numba.njit(parallel=True, cache=True, nogil=True)
    def extract_rows(order, tie_ids, has_ties, member, size):
        """Stable subsequence of every row: the ``size`` points x with ``member[x] == 1``.

        Branch-free: every point is written to a buffer with one slack slot and the cursor
        advances only for members. Returns (order, tie_ids) of the subset.
        """
        d, n = order.shape
        out = np.empty((d, size), order.dtype)
        out_ties = np.empty((d if has_ties else 0, size), tie_ids.dtype)
        for j in prange(d):
            buf = np.empty(size + 1, order.dtype)
            tbuf = np.empty(size + 1 if has_ties else 0, tie_ids.dtype)
            a = 0
            for p in range(n):
                x = order[j, p]
                buf[a] = x
                if has_ties:
                    tbuf[a] = tie_ids[j, p]
                a += np.int64(member[x] == 1)
            out[j] = buf[:size]
            if has_ties:
                out_ties[j] = tbuf[:size]
        return out, out_ties

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
        group of ``_GRAPH_ROWS`` rows into histograms over the position of their later
        endpoint; a histogram's prefix sum is the weight of the edges inside the prefix.
        """
        d, m = order_local.shape
        n_edges = edge_a.size
        empty = np.empty(0, tie_ids.dtype)
        for jg in prange((d + _GRAPH_ROWS - 1) // _GRAPH_ROWS):
            j0 = _GRAPH_ROWS * jg
            rows = min(_GRAPH_ROWS, d - j0)
            pos = np.empty((m, _GRAPH_ROWS), order_local.dtype)  # pos[point, r]: one cache line per point
            for r in range(_GRAPH_ROWS):
                jr = j0 + min(r, rows - 1)
                for p in range(m):
                    pos[order_local[jr, p], r] = p
            hist = np.zeros((_GRAPH_ROWS, m), edge_w.dtype)  # float32 only when its sums are exact
            for e in range(n_edges):
                w = edge_w[e]
                pa = pos[edge_a[e]]
                pb = pos[edge_b[e]]
                for r in range(_GRAPH_ROWS):
                    hist[r, max(pa[r], pb[r])] += w
            for r in range(rows):
                j = j0 + r
                tie_row = tie_ids[j] if has_ties else empty
                out_score[j], out_pos[j] = _graph_row(order_local[j], tie_row, has_ties, hist[r], deg, deg_off,
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
        """Row ids (low bits) of sorted keys, and whether neighbours share the truncated key;
        returns the number of such neighbour pairs (usually 0)."""
        b, n = keys.shape
        low = (np.int64(1) << idx_bits) - 1
        n_same = 0
        for r in prange(b):
            for i in range(n):
                order[r, i] = keys[r, i] & low
                if i + 1 < n:
                    same = (keys[r, i] >> idx_bits) == (keys[r, i + 1] >> idx_bits)
                    same_key[r, i] = same
                    n_same += same
        return n_same
