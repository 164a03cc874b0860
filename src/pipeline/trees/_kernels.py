"""Compiled (numba) inner loops for the sweep-line tree algorithms.

Each kernel does, per feature row of a node's sorted orders, the single pass that the numpy
versions in :mod:`pipeline.trees._spex_sweeps` spread over ~20 array passes: it keeps the
prefix statistics in registers and tracks the row minimum. Rows are independent and run in
parallel (``prange``). The arithmetic is the same as the numpy/brute-force versions, so scores
are bit-identical on integer-weighted inputs. numba is already a dependency of pynndescent;
if it cannot be imported, ``AVAILABLE`` is False and callers use the numpy paths.
"""

from __future__ import annotations

import contextlib
import contextvars

import numpy as np

try:  # pragma: no cover - exercised implicitly
    import numba
    from numba import prange

    AVAILABLE = True
except ImportError:  # pragma: no cover
    AVAILABLE = False

_SLACK = 1.0 + 1e-9  # prefilter margin, far above float rounding; exact scores decide
_GRAPH_LANES = 32  # feature rows sharing one pass over the edge list in graph_sweep (SIMD lanes)
_SCAN_CHUNK = 256  # positions per prefilter chunk of graph_sweep's integer scan

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

    @numba.njit(inline="always")
    def _child_arrays(order, tie_ids, has_ties, n_left, n_right):
        """Uninitialised (left order, right order, left tie ids, right tie ids) of a split."""
        d = order.shape[0]
        t_rows = d if has_ties else 0
        return (np.empty((d, n_left), order.dtype), np.empty((d, n_right), order.dtype),
                np.empty((t_rows, n_left), tie_ids.dtype), np.empty((t_rows, n_right), tie_ids.dtype))

    @numba.njit(inline="always")
    def _split_row(row, tie_row, has_ties, side, buf_l, buf_r, tbuf_l, tbuf_r):
        """Branch-free stable split of one row by ``side`` (1 left, 0 right, -1 dropped) into
        buffers with one slack slot each (every point is written to both; at most one cursor
        advances)."""
        a = 0
        b = 0
        for p in range(row.size):
            x = row[p]
            sd = np.int64(side[x])
            buf_l[a] = x
            buf_r[b] = x
            if has_ties:
                tbuf_l[a] = tie_row[p]
                tbuf_r[b] = tie_row[p]
            a += sd == 1
            b += sd == 0

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

    @numba.njit(parallel=True, cache=True, nogil=True)
    def partition_rows(order, tie_ids, has_ties, side, n_left, n_right):
        """Stable split of every row of ``order`` by ``side[point]`` (1 = left, 0 = right, else dropped).

        Branch-free (see :func:`_split_row`): the side of consecutive points is unpredictable.
        """
        d, m = order.shape
        left, right, t_left, t_right = _child_arrays(order, tie_ids, has_ties, n_left, n_right)
        empty = np.empty(0, tie_ids.dtype)
        for j in prange(d):
            buf_l = np.empty(n_left + 1, order.dtype)
            buf_r = np.empty(n_right + 1, order.dtype)
            tbuf_l = np.empty(n_left + 1 if has_ties else 0, tie_ids.dtype)
            tbuf_r = np.empty(n_right + 1 if has_ties else 0, tie_ids.dtype)
            _split_row(order[j], tie_ids[j] if has_ties else empty, has_ties, side, buf_l, buf_r, tbuf_l, tbuf_r)
            left[j] = buf_l[:n_left]
            right[j] = buf_r[:n_right]
            if has_ties:
                t_left[j] = tbuf_l[:n_left]
                t_right[j] = tbuf_r[:n_right]
        return left, right, t_left, t_right

    @numba.njit(parallel=True, cache=True, nogil=True)
    def compress_rows(order, tie_ids, has_ties, side, value, n_keep):
        """Stable filter of every row of ``order``: the points with ``side[point] == value``
        (``partition_rows`` when one child is empty: one output stream instead of two)."""
        d, m = order.shape
        out = np.empty((d, n_keep), order.dtype)
        t_out = np.empty((d if has_ties else 0, n_keep), tie_ids.dtype)
        for j in prange(d):
            row = order[j]
            dst = out[j]
            a = 0
            for p in range(m):
                x = row[p]
                if a < n_keep:  # taken until the last kept point: predictable
                    dst[a] = x
                    if has_ties:
                        t_out[j, a] = tie_ids[j, p]
                a += side[x] == value
        return out, t_out

    @numba.njit(parallel=True, cache=True, nogil=True)
    def group_rows(order, tie_ids, has_ties, group, offsets, relabel):
        """Stable split of every row of ``order`` into groups (``group[point]`` in 0..G-1) in one
        pass. Group g's (d, size_g) block is stored contiguously at ``offsets[g] * d`` of the flat
        results (so each group's orders are a reshaped view, no copy). A non-empty ``relabel``
        renames the points on the way (``relabel[point]`` is written)."""
        d, m = order.shape
        n_groups = offsets.size - 1
        rename = relabel.size > 0
        out = np.empty(d * m, order.dtype)
        t_out = np.empty(d * m if has_ties else 0, tie_ids.dtype)
        for j in prange(d):
            cur = np.empty(n_groups, np.int64)  # next write index of each group in this row
            for g in range(n_groups):
                cur[g] = offsets[g] * d + j * (offsets[g + 1] - offsets[g])
            for p in range(m):
                x = order[j, p]
                g = group[x]
                at = cur[g]
                out[at] = relabel[x] if rename else x
                if has_ties:
                    t_out[at] = tie_ids[j, p]
                cur[g] = at + 1
        return out, t_out

    @numba.njit(parallel=True, cache=True, nogil=True)
    def pack_keys(bits_view, start, stop, idx_bits, out):
        """Order-preserving int64 keys of columns start:stop of a float64 matrix (given as its
        int64 view, shape (n, d)), low ``idx_bits`` bits replaced by the row index, written to
        ``out`` of shape (stop - start, n) (a reused buffer: no fresh pages per block).

        Tiles of 32 rows are transposed column by column: the tile's cache lines stay in L1
        while its columns are read, and each output row gets 32 contiguous keys.
        """
        n = bits_view.shape[0]
        low = (np.int64(1) << idx_bits) - 1
        sign_zero = np.int64(-9223372036854775807) - 1  # bit pattern of -0.0
        flip = np.int64(9223372036854775807)
        for ib in prange((n + 31) // 32):
            i0 = 32 * ib
            i1 = min(i0 + 32, n)
            for j in range(start, stop):
                for i in range(i0, i1):
                    v = bits_view[i, j]
                    if v == sign_zero:
                        v = 0
                    key = v ^ ((v >> 63) & flip)
                    out[j - start, i] = (key & ~low) | i

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


PARALLEL_MIN_WORK = 1 << 17  # below this many elements a kernel runs serially: waking threads costs more
_MIN_WORK: contextvars.ContextVar[int] = contextvars.ContextVar("parallel_min_work", default=PARALLEL_MIN_WORK)


def parallel_min_work() -> int:
    """The input size (elements) below which kernels take their serial twins and the centre
    trees their small-input path: :data:`PARALLEL_MIN_WORK` unless a :func:`serial_below`
    block says otherwise."""
    return _MIN_WORK.get()


@contextlib.contextmanager
def serial_below(min_work: int):
    """Run the body with ``min_work`` as :func:`parallel_min_work` (0: every kernel call takes
    its ``prange`` path and no estimator its small-input path; the results are the same)."""
    token = _MIN_WORK.set(int(min_work))
    try:
        yield
    finally:
        _MIN_WORK.reset(token)


class SizeDispatch:
    """A ``prange`` kernel and its serial twin, chosen per call.

    The serial twin (the same Python source compiled without ``parallel``) runs when the
    current thread setting is 1 or the call is small (``args[work_arg].size`` below
    :func:`parallel_min_work`): a parallel launch wakes the thread pool, which costs
    microseconds on an idle machine and milliseconds on a busy one, more than a small node's
    whole sweep. Both compile to the same arithmetic, so results do not depend on the choice.
    """

    def __init__(self, kernel, work_arg: int = 0):
        import types

        f = kernel.py_func
        twin = types.FunctionType(f.__code__, f.__globals__, f.__name__ + "_serial", f.__defaults__, f.__closure__)
        twin.__qualname__ = f.__qualname__ + "_serial"  # its own on-disk cache entry
        twin.__doc__ = f.__doc__
        self.parallel = kernel
        fastmath = kernel.targetoptions.get("fastmath", False)  # the twin keeps the kernel's float flags
        self.serial = numba.njit(cache=True, nogil=True, fastmath=fastmath)(twin)
        self.work_arg = work_arg
        self.__doc__ = f.__doc__
        self.__name__ = f.__name__

    def __call__(self, *args):
        if args[self.work_arg].size < _MIN_WORK.get() or numba.get_num_threads() == 1:
            return self.serial(*args)
        return self.parallel(*args)


if AVAILABLE:
    clique_sweep = SizeDispatch(clique_sweep)
    clique_split_sweep = SizeDispatch(clique_split_sweep)
    graph_sweep = SizeDispatch(graph_sweep)
    partition_rows = SizeDispatch(partition_rows)
    compress_rows = SizeDispatch(compress_rows)
    group_rows = SizeDispatch(group_rows)
    pack_keys = SizeDispatch(pack_keys)
    unpack_keys = SizeDispatch(unpack_keys)
    apply_axis_tree = SizeDispatch(apply_axis_tree)
    cut_neighbours = SizeDispatch(cut_neighbours)
