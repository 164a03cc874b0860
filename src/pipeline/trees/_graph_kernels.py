"""Compiled (numba) sweeps of SpEx on any graph: the best prefix cut of every sorted feature row
of a node given the graph's edges (:func:`graph_sweep`, rows taken ``_GRAPH_LANES`` at a time), the
node's edges split between its children (:func:`graph_split_edges`), and the checks and edge lists
of a CSR graph (:func:`asymmetry`, :func:`upper_edges`). Scores are the numpy/brute-force
versions' (:mod:`pipeline.trees._spex_sweeps`; tests/test_spex.py).
"""

from __future__ import annotations

import numpy as np

from pipeline.trees._kernel_dispatch import _SLACK, AVAILABLE, SizeDispatch

_GRAPH_LANES = 32  # feature rows sharing one pass over the edge list in graph_sweep (SIMD lanes)
_SCAN_CHUNK = 256  # positions per prefilter chunk of graph_sweep's integer scan

if AVAILABLE:
    import numba
    from numba import prange

if AVAILABLE:

    @numba.njit(cache=True, nogil=True, inline="always")
    def _graph_scan(row, local, r, tie_row, has_ties, count, stats, inner_total, off_total, vol_total, n_positive,
                    bound):
        """Best prefix cut of one sorted row (global ids, point x = ``local[id]``) given
        ``count[x, r]``, the weight of x's edges to points before x in the row: (score, position) of the first lowest score
        below ``bound``, or (inf, -1) if no cut scores below it. With integer ``stats``/``count``
        the running sums are integers (exact, and without the float-add latency chain); they
        equal the float64 sums bit for bit."""
        m = row.size
        w_in_s = count[0, 0] * 0
        vol_s = stats[0, 0] * 0
        off_s = vol_s
        inner_s = vol_s
        pos_s = vol_s
        best = bound
        best_p = -1
        for p in range(m - 1):
            x = local[row[p]]
            w_in_s += count[x, r]
            vol_s += stats[x, 0]
            off_s += stats[x, 1]
            inner_s += stats[x, 2]
            pos_s += stats[x, 3]
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
        return (best if best_p >= 0 else np.inf), best_p

    @numba.njit(cache=True, nogil=True, inline="always")
    def _graph_scan_exact(row, local, r, tie_row, has_ties, count, packed, loops, deg, inner_total, off_total,
                          vol_total, bound, w_buf, both_buf, vol_buf, keep_buf):
        """:func:`_graph_scan` for integer weights whose degree total is below 2**31, chunk by
        chunk of ``_SCAN_CHUNK`` positions: the running sums (int64, exact) go to the buffers,
        then a branch-free prefilter over the chunk (SIMD) marks the positions that may beat the
        best score so far, and only those are scored (the same divisions as the float scan, so
        the same scores). ``count`` is flat (``count[x * _GRAPH_LANES + r]``); ``packed[x]`` holds
        x's degree without self-loop in the high and its internal degree in the low 32 bits
        (one load and one add for both running sums: neither exceeds 2**31); with self-loops
        (``loops``) the degrees ``deg`` are summed apart.

        The prefilter skips a position when ``cut_s * vol_r + cut_r * vol_s > t * vol_s * vol_r``
        in float64, with ``t = _SLACK * best`` and best taken at the start of the chunk (it only
        falls within the chunk, so a larger t skips less). Every term is a non-negative integer
        below 2**53 (exact in float64), so the two products and the sum are within 3 roundings
        (a relative 4e-16) of their real values, far inside the 1e-9 slack: a skipped position's
        score is above best and could not have been chosen."""
        m = row.size
        cut_r_base = np.int64(off_total) - 2 * np.int64(inner_total)
        vol_total_i = np.int64(vol_total)
        vol_total_f = float(vol_total_i)
        w_in_s = np.int64(0)
        both = np.int64(0)
        vol_s = np.int64(0)
        best = bound
        best_p = -1
        lane = np.uint64(r)
        lanes = np.uint64(_GRAPH_LANES)
        for c0 in range(0, m - 1, _SCAN_CHUNK):
            n = min(_SCAN_CHUNK, m - 1 - c0)
            at = np.uint64(c0)
            # the running sums, the only serial part (unsigned indices: no wraparound checks)
            if loops:
                for i in range(n):
                    x = np.uint64(local[row[at + np.uint64(i)]])
                    w_in_s += count[x * lanes + lane]
                    both += packed[x]
                    vol_s += deg[x]
                    w_buf[i] = w_in_s
                    both_buf[i] = both
                    vol_buf[i] = vol_s
            else:
                for i in range(n):
                    x = np.uint64(local[row[at + np.uint64(i)]])
                    w_in_s += count[x * lanes + lane]
                    both += packed[x]
                    w_buf[i] = w_in_s
                    both_buf[i] = both
            thr = _SLACK * best
            n_keep = 0
            for i in range(n):  # branch-free: vectorises
                off_s = both_buf[i] >> 32
                w = w_buf[i]
                cut_s = off_s - 2 * w
                cut_r = cut_r_base - off_s + 2 * ((both_buf[i] & 0xFFFFFFFF) - w)
                v = float(vol_buf[i] if loops else off_s)
                vr = vol_total_f - v
                keep = (v <= 0.0) | (vr <= 0.0) | (float(cut_s) * vr + float(cut_r) * v <= thr * (v * vr))
                keep_buf[i] = keep
                n_keep += keep
            if n_keep == 0:
                continue
            for i in range(n):
                if not keep_buf[i]:
                    continue
                p = c0 + i
                if has_ties and tie_row[p] == tie_row[p + 1]:
                    continue
                off_s = both_buf[i] >> 32
                w = w_buf[i]
                cut_s = off_s - 2 * w
                cut_r = cut_r_base - off_s + 2 * ((both_buf[i] & 0xFFFFFFFF) - w)
                vs = vol_buf[i] if loops else off_s
                vr = vol_total_i - vs
                a = float(cut_s) / float(vs) if vs > 0 else 0.0
                b = float(cut_r) / float(vr) if vr > 0 else 0.0
                score = a + b
                if score < best:
                    best = score
                    best_p = p
        return (best if best_p >= 0 else np.inf), best_p

    @numba.njit(cache=True, nogil=True, inline="always")
    def _transpose_u16(src, dst):
        """``dst[x * L + r] = src[r, x]`` for a uint16 (L, m4) table, m4 a multiple of 4 and
        L = ``_GRAPH_LANES``: 4 x 4 blocks at a time in 64-bit words (two rounds of masks and
        shifts instead of 16 single stores)."""
        n_rows, m4 = src.shape
        q = m4 // 4
        words = src.reshape(-1).view(np.uint64)
        out = dst.view(np.uint64)
        per_x = np.uint64(n_rows // 4)
        lo16 = np.uint64(0x0000FFFF0000FFFF)
        hi16 = np.uint64(0xFFFF0000FFFF0000)
        lo32 = np.uint64(0x00000000FFFFFFFF)
        hi32 = np.uint64(0xFFFFFFFF00000000)
        s16 = np.uint64(16)
        s32 = np.uint64(32)
        for xb in range(q):
            at = np.uint64(4 * xb) * per_x
            for rb in range(n_rows // 4):
                a = words[(4 * rb) * q + xb]  # lanes: rows 4rb..4rb+3 at x = 4xb..4xb+3
                b = words[(4 * rb + 1) * q + xb]
                c = words[(4 * rb + 2) * q + xb]
                d = words[(4 * rb + 3) * q + xb]
                t0 = (a & lo16) | ((b & lo16) << s16)  # a0 b0 a2 b2
                t1 = ((a >> s16) & lo16) | (b & hi16)  # a1 b1 a3 b3
                t2 = (c & lo16) | ((d & lo16) << s16)
                t3 = ((c >> s16) & lo16) | (d & hi16)
                k = at + np.uint64(rb)
                out[k] = (t0 & lo32) | (t2 << s32)  # x = 4xb: rows 4rb..4rb+3
                out[k + per_x] = (t1 & lo32) | (t3 << s32)
                out[k + 2 * per_x] = (t0 >> s32) | (t2 & hi32)
                out[k + 3 * per_x] = (t1 >> s32) | (t3 & hi32)

    @numba.njit(parallel=True, cache=True, nogil=True)
    def graph_sweep(order, tie_ids, has_ties, local, edge_a, edge_b, edge_w, stats, count_dtype, exact,
                    inner_total, off_total, vol_total, n_positive, out_score, out_pos):
        """Best prefix cut per row for a general graph.

        ``order`` and the node's internal edges (each undirected edge once) hold global ids;
        ``local`` maps the node's points to local ids 0..m-1, the rows of ``stats``: per point
        degree, degree without self-loop, internal degree (filled here from the edges) and
        degree > 0. Rows are taken ``_GRAPH_LANES`` at a time: with every point's positions in
        those rows side by side (one cache line), each edge is visited once per group and
        credits its weight, in every row at once (SIMD lanes), to whichever endpoint comes
        later; a row's prefix sum of these per-point counts, in the row's order, is the weight
        of the edges inside the prefix. ``count_dtype`` (an empty array) gives the counts'
        dtype: a small integer type when the weights are integers (exact); ``exact`` says the
        weights are integers with a degree total below 2**31 (integer scan).

        ``out_score[j]`` is row j's best score, or inf when it cannot beat (or tie) the best
        score found so far in any row (shared by the groups, as the clique sweeps' limit): the
        minimum and every row attaining it stay exact, which is all
        :func:`~pipeline.trees._column_order.pick_best` reads.
        """
        d, m = order.shape
        n_edges = edge_a.size
        empty = np.empty(0, tie_ids.dtype)
        lanes = np.uint64(_GRAPH_LANES)
        # the edge list in local ids, grouped by first endpoint (stable); internal degrees
        ptr = np.zeros(m + 1, np.int64)
        stats[:, 2] = 0
        for e in range(n_edges):
            la = local[edge_a[e]]
            lb = local[edge_b[e]]
            ptr[la + 1] += 1
            stats[la, 2] += edge_w[e]
            stats[lb, 2] += edge_w[e]
        for x in range(m):
            ptr[x + 1] += ptr[x]
        nbr = np.empty(n_edges, local.dtype)
        wts = np.empty(n_edges, edge_w.dtype)
        fill = ptr[:-1].copy()
        for e in range(n_edges):
            la = local[edge_a[e]]
            k = fill[la]
            nbr[k] = local[edge_b[e]]
            wts[k] = edge_w[e]
            fill[la] = k + 1
        loops = False
        packed = np.empty(m if exact else 0, np.int64)
        for x in range(packed.size):
            packed[x] = (np.int64(stats[x, 1]) << 32) + np.int64(stats[x, 2])
            loops |= stats[x, 0] != stats[x, 1]
        deg = stats[:, 0].copy()
        limit = np.full(1, np.inf)  # the best score so far in any row (a real cut's score: any value is safe)
        m4 = (m + 3) // 4 * 4  # the position tables' rows padded to whole 64-bit words
        for jg in prange((d + _GRAPH_LANES - 1) // _GRAPH_LANES):
            j0 = _GRAPH_LANES * jg
            rows = min(_GRAPH_LANES, d - j0)
            # pos[x * lanes + r]: x's position in row r (positions < m fit the id type), written row
            # by row into a small (lanes, m4) table first (each row's scatter stays in L1), then
            # transposed
            pos_t = np.empty((_GRAPH_LANES, m4), order.dtype)
            for r in range(_GRAPH_LANES):
                jr = j0 + min(r, rows - 1)
                row_t = pos_t[r]
                for p in range(m):
                    row_t[local[order[jr, p]]] = p
            pos = np.empty(m4 * _GRAPH_LANES, order.dtype)
            if order.itemsize == 2:
                _transpose_u16(pos_t, pos)
            else:
                for x0 in range(0, m, 64):
                    x1 = min(x0 + 64, m)
                    for r in range(_GRAPH_LANES):
                        for x in range(x0, x1):
                            pos[np.uint64(x) * lanes + np.uint64(r)] = pos_t[r, x]
            count = np.zeros(m * _GRAPH_LANES, count_dtype.dtype)
            for x in range(m):  # flat unsigned indices: no wraparound or stride arithmetic per edge
                bx = np.uint64(x) * lanes
                for k in range(np.uint64(ptr[x]), np.uint64(ptr[x + 1])):
                    w = wts[k]
                    by = np.uint64(nbr[k]) * lanes
                    for r in range(_GRAPH_LANES):  # branch-free so that it vectorises
                        later = pos[by + np.uint64(r)] > pos[bx + np.uint64(r)]
                        count[by + np.uint64(r)] += w * later
                        count[bx + np.uint64(r)] += w * (1 - later)
            # a row only needs scanning for cuts at least as good as the best so far (ties
            # included: the next float up); the others report inf, which changes no pick_best
            # outcome, and the prefilter then skips almost every position
            if exact:
                w_buf = np.empty(_SCAN_CHUNK, np.int64)
                both_buf = np.empty(_SCAN_CHUNK, np.int64)
                vol_buf = np.empty(_SCAN_CHUNK, np.int64)
                keep_buf = np.empty(_SCAN_CHUNK, np.bool_)
            count2 = count.reshape(m, _GRAPH_LANES)
            for r in range(rows):
                j = j0 + r
                tie_row = tie_ids[j] if has_ties else empty
                bound = np.nextafter(limit[0], np.inf)
                if exact:
                    score, p = _graph_scan_exact(order[j], local, r, tie_row, has_ties, count, packed, loops, deg,
                                                 inner_total, off_total, vol_total, bound, w_buf, both_buf, vol_buf,
                                                 keep_buf)
                else:
                    score, p = _graph_scan(order[j], local, r, tie_row, has_ties, count2, stats, inner_total, off_total,
                                           vol_total, n_positive, bound)
                out_score[j] = score
                out_pos[j] = p
                if score < limit[0]:
                    limit[0] = score  # shared by the groups (threads): any value is a real cut's score

    @numba.njit(cache=True, nogil=True)
    def graph_split_edges(edge_a, edge_b, edge_w, side):
        """The edges (a, b, w) with both ends on side 1, then those with both ends on side 0
        (``side``: int8 per point), each in the input order."""
        n_left = 0
        n_right = 0
        for e in range(edge_a.size):
            s = side[edge_a[e]]
            if s == side[edge_b[e]]:
                if s == 1:
                    n_left += 1
                elif s == 0:
                    n_right += 1
        al = np.empty(n_left, edge_a.dtype)
        bl = np.empty(n_left, edge_b.dtype)
        wl = np.empty(n_left, edge_w.dtype)
        ar = np.empty(n_right, edge_a.dtype)
        br = np.empty(n_right, edge_b.dtype)
        wr = np.empty(n_right, edge_w.dtype)
        i = 0
        k = 0
        for e in range(edge_a.size):
            s = side[edge_a[e]]
            if s == side[edge_b[e]]:
                if s == 1:
                    al[i] = edge_a[e]
                    bl[i] = edge_b[e]
                    wl[i] = edge_w[e]
                    i += 1
                elif s == 0:
                    ar[k] = edge_a[e]
                    br[k] = edge_b[e]
                    wr[k] = edge_w[e]
                    k += 1
        return (al, bl, wl), (ar, br, wr)

    @numba.njit(cache=True, nogil=True)
    def asymmetry(indptr, indices, data):
        """max |A[i, j] - A[j, i]| of a CSR matrix with sorted column indices when A and A.T
        have the same nonzero pattern, else -1.0 (one merge pass: row j's entries right of
        the diagonal are met in column order while the rows i > j are walked in order)."""
        n = indptr.size - 1
        cursor = np.empty(n, np.int64)
        for j in range(n):
            k = indptr[j]
            while k < indptr[j + 1] and indices[k] <= j:
                k += 1
            cursor[j] = k
        worst = 0.0
        for i in range(n):
            for k in range(indptr[i], indptr[i + 1]):
                j = indices[k]
                if j >= i:
                    break
                c = cursor[j]
                if c == indptr[j + 1] or indices[c] != i:
                    return -1.0
                worst = max(worst, abs(data[k] - data[c]))
                cursor[j] = c + 1
        for j in range(n):
            if cursor[j] != indptr[j + 1]:
                return -1.0
        return worst

    @numba.njit(cache=True, nogil=True)
    def upper_edges(indptr, indices, data):
        """The entries of a CSR matrix right of the diagonal, (rows int32, columns int32, values),
        in storage order (what ``scipy.sparse.triu(A, k=1).tocoo()`` gives, in one pass)."""
        n = indptr.size - 1
        n_upper = 0
        for i in range(n):
            for k in range(indptr[i], indptr[i + 1]):
                n_upper += indices[k] > i
        a = np.empty(n_upper, np.int32)
        b = np.empty(n_upper, np.int32)
        w = np.empty(n_upper, data.dtype)
        e = 0
        for i in range(n):
            for k in range(indptr[i], indptr[i + 1]):
                if indices[k] > i:
                    a[e] = i
                    b[e] = indices[k]
                    w[e] = data[k]
                    e += 1
        return a, b, w


if AVAILABLE:  # each kernel and its serial twin, chosen per call (pipeline.trees._kernel_dispatch)
    graph_sweep = SizeDispatch(graph_sweep)
