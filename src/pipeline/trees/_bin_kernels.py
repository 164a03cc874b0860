"""Compiled SpEx-Clique sweep on binned columns: exact best cuts without sorting any column.

Each column is cut into ``n_bins`` equal-width value bins once (one ``uint8`` per value). In
a node, one pass per feature counts the node's points per (bin, cluster)
(:func:`bin_histograms`); the cuts between bins are then scored exactly from the cumulative
counts (:func:`clique_bins_boundaries`), and every bin whose lower bound (:func:`_clique_bound`
on the counts at its two ends) can still reach the node's best score is flagged
(:func:`clique_bins_flags`) and resolved exactly: its points are sorted by value and every
cut inside it is scored (:func:`clique_bins_resolve`). The result per feature equals a full
sweep of the sorted column (lowest score, ties to the lowest position), as in
:func:`~pipeline.trees._kernels.clique_sweep`; only the cuts that matter are ever sorted.

Binning is monotone (``floor((x - lo) * scale)`` rounds monotonically), so equal values
share a bin and a cut between two bins is always a cut between different values.
"""

from __future__ import annotations

import numpy as np

from pipeline.trees._kernels import _SLACK, AVAILABLE, SizeDispatch

_INSERTION_MAX = 24  # bins up to this many points are sorted by insertion

if AVAILABLE:
    import numba
    from numba import prange

    from pipeline.trees._kernels import _box_bound, _clique_add, _clique_eval, _clique_stats

    @numba.njit(inline="always")
    def _clique_bound(lo, hi, g, deg, local):
        """Lower bound of the cut score of every prefix with counts between lo and hi and both
        sides non-empty: the larger of :func:`~pipeline.trees._kernels._box_bound` and, with
        ``e(S)/vol(S) = 1 - sum_c s_c (s_c - 1) / sum_c s_c (g_c - 1)`` at least
        ``1 - max_c (s_c - 1) / (g_c - 1)``, the same per side at the box's largest counts
        (this one is tight where a side holds few points; skipped if a cluster of the node has
        a single point overall, whose volume is 0)."""
        box = _box_bound(lo, hi, g, deg, local)
        top_s = 0.0
        top_r = 0.0
        for c in range(g.size):
            if local[c] > 0:
                if deg[c] == 0:
                    return box
                if hi[c] > 0:
                    top_s = max(top_s, (hi[c] - 1) / deg[c])
                r_hi = local[c] - lo[c]
                if r_hi > 0:
                    top_r = max(top_r, (r_hi - 1) / deg[c])
        return max(box, 2.0 - top_s - top_r)

    @numba.njit(cache=True, nogil=True)
    def column_range(X):
        """Per-column (min, max) of X (n >= 1 rows), in one pass over the rows."""
        n, d = X.shape
        lo = np.empty(d)
        hi = np.empty(d)
        for j in range(d):
            lo[j] = X[0, j]
            hi[j] = X[0, j]
        for i in range(1, n):
            for j in range(d):
                v = X[i, j]
                lo[j] = min(lo[j], v)
                hi[j] = max(hi[j], v)
        return lo, hi

    @numba.njit(cache=True, nogil=True)
    def range_scales(lo, hi, n_bins):
        """``scale`` per column such that ``(x - lo) * scale`` lies in [0, n_bins] for x in
        [lo, hi] (0 for a constant column or a range that overflows)."""
        scale = np.zeros(lo.size)
        for j in range(lo.size):
            width = hi[j] - lo[j]
            if width > 0 and np.isfinite(width):
                s = n_bins / width
                if np.isfinite(s):
                    scale[j] = s
        return scale

    @numba.njit(cache=True, nogil=True)
    def column_scales(X, n_bins):
        """Per-column ``lo`` and ``scale`` such that ``(x - lo) * scale`` lies in [0, n_bins]
        (scale 0 for a constant column or a range that overflows)."""
        lo, hi = column_range(X)
        return lo, range_scales(lo, hi, n_bins)

    @numba.njit(parallel=True, cache=True, nogil=True)
    def bin_columns(X, lo, scale, n_bins):
        """Bin index of every value, transposed: shape (d, n), uint8 (tiles of 32 rows)."""
        n, d = X.shape
        out = np.empty((d, n), np.uint8)
        top = n_bins - 1
        for it in prange((n + 31) // 32):
            i0 = 32 * it
            i1 = min(i0 + 32, n)
            for j in range(d):
                low = lo[j]
                s = scale[j]
                for i in range(i0, i1):
                    out[j, i] = min(np.int64((X[i, j] - low) * s), top)
        return out

    @numba.njit(parallel=True, cache=True, nogil=True)
    def bin_index(bins, n_bins):
        """Rows of each bin, per feature: ``rows[j, start[j, b]:start[j, b + 1]]`` lists the rows
        in bin b of feature j, ascending (a counting sort of every column by bin)."""
        d, n = bins.shape
        start = np.zeros((d, n_bins + 1), np.int64)
        rows = np.empty((d, n), np.int32)
        for j in prange(d):
            row = bins[j]
            st = start[j]
            for i in range(n):
                st[row[i] + 1] += 1
            for b in range(n_bins):
                st[b + 1] += st[b]
            at = st[:n_bins].copy()
            out = rows[j]
            for i in range(n):
                b = row[i]
                out[at[b]] = i
                at[b] += 1
        return start, rows

    @numba.njit(parallel=True, cache=True, nogil=True)
    def gather_transposed(X, members):
        """``X[members].T`` as a contiguous (d, m) array (tiles of 32 members: rows are read
        whole, in order)."""
        m = members.size
        d = X.shape[1]
        out = np.empty((d, m), X.dtype)
        for it in prange((m + 31) // 32):
            p0 = 32 * it
            p1 = min(p0 + 32, m)
            for j in range(d):
                for p in range(p0, p1):
                    out[j, p] = X[members[p], j]
        return out

    @numba.njit(inline="always")
    def _insertion(vals, pts, a0, a1):
        """Insertion sort of vals[a0:a1] (pts carried along): O(length + inversions)."""
        for q in range(a0 + 1, a1):
            v = vals[q]
            x = pts[q]
            r = q - 1
            while r >= a0 and vals[r] > v:
                vals[r + 1] = vals[r]
                pts[r + 1] = pts[r]
                r -= 1
            vals[r + 1] = v
            pts[r + 1] = x

    @numba.njit(cache=True, nogil=True)
    def _sort_bin(vals, pts, a0, a1, low, scale, b, keys, cnts, tmp_v, tmp_p):
        """Sort bin b's values vals[a0:a1] ascending, carrying pts along.

        Long runs are bucketed first by their position inside the bin (``(v - low) * scale - b``,
        the binning's own monotone arithmetic, times the run length), then insertion sort
        finishes the nearly sorted run; a run crowded into a few buckets is argsorted.
        """
        c = a1 - a0
        if c > _INSERTION_MAX:
            cnts[:c + 1] = 0
            most = 0
            for q in range(a0, a1):
                key = min(max(np.int64(((vals[q] - low) * scale - b) * c), 0), c - 1)
                keys[q - a0] = key
                cnts[key + 1] += 1
                most = max(most, cnts[key + 1])
            if most > _INSERTION_MAX:
                o = np.argsort(vals[a0:a1])
                tmp_v[:c] = vals[a0:a1][o]
                tmp_p[:c] = pts[a0:a1][o]
                vals[a0:a1] = tmp_v[:c]
                pts[a0:a1] = tmp_p[:c]
                return
            for key in range(c):
                cnts[key + 1] += cnts[key]
            for q in range(a0, a1):
                key = keys[q - a0]
                at = cnts[key]
                tmp_v[at] = vals[q]
                tmp_p[at] = pts[q]
                cnts[key] = at + 1
            vals[a0:a1] = tmp_v[:c]
            pts[a0:a1] = tmp_p[:c]
        _insertion(vals, pts, a0, a1)

    @numba.njit(parallel=True, cache=True, nogil=True)
    def bin_histograms(bins, members, cl, C, cnt):
        """Cumulative cluster counts of the node at the bin boundaries, per feature j:
        ``C[j, b, c]`` points of cluster c in bins < b, ``cnt[j, b]`` their total."""
        d = bins.shape[0]
        m = members.size
        n_bins = C.shape[1] - 1
        k = C.shape[2]
        for j in prange(d):
            row = bins[j]
            Cj = C[j]
            Cj[:] = 0
            for p in range(m):
                Cj[row[members[p]] + 1, cl[p]] += 1
            cj = cnt[j]
            cj[0] = 0
            for b in range(n_bins):
                total = 0
                for c in range(k):
                    total += Cj[b + 1, c]
                    Cj[b + 1, c] += Cj[b, c]
                cj[b + 1] = cj[b] + total

    @numba.njit(parallel=True, cache=True, nogil=True)
    def clique_bins_boundaries(C, cnt, g, local, vol_v, out_score, out_pos):
        """Best exact cut between bins per feature (score, sorted position; inf, -1 if none)."""
        d, nb1, k = C.shape
        m = cnt[0, nb1 - 1]
        deg = g - 1
        for j in prange(d):
            best = np.inf
            best_p = -1
            for b in range(1, nb1):
                if cnt[j, b] > cnt[j, b - 1] and cnt[j, b] < m:
                    cut_s, vol_s, cut_r = _clique_stats(C[j, b], g, deg, local)
                    best, best_p = _clique_eval(cut_s, vol_s, cut_r, vol_v, best, best_p, cnt[j, b] - 1)
            out_score[j] = best
            out_pos[j] = best_p

    @numba.njit(parallel=True, cache=True, nogil=True)
    def clique_bins_flags(C, cnt, g, local, limit, out_score, flags, out_bound):
        """Which bins may hold a cut that reaches min(feature's best, limit): holding two or
        more points, with a lower bound (:func:`_clique_bound`) within the slack. Returns the
        number of points in flagged bins per feature; ``out_bound[j]`` gets the least lower
        bound over feature j's bins of two or more points (inf if none)."""
        d, n_bins = flags.shape
        deg = g - 1
        n_flagged = np.zeros(d, np.int64)
        for j in prange(d):
            cap = _SLACK * min(out_score[j], limit)
            total = 0
            least = np.inf
            for b in range(n_bins):
                f = False
                if cnt[j, b + 1] - cnt[j, b] > 1:
                    bound = _clique_bound(C[j, b], C[j, b + 1], g, deg, local)
                    least = min(least, bound)
                    f = bound <= cap
                flags[j, b] = f
                if f:
                    total += cnt[j, b + 1] - cnt[j, b]
            n_flagged[j] = total
            out_bound[j] = least
        return n_flagged

    @numba.njit(cache=True, nogil=True)
    def _resolve_row(row, j, X, XT, heavy, low, scale, members, local_pos, start, rows, cl, g, deg, local, suffix_step,
                     vol_v, Cj, cj, fj, best, best_p, limit, off, vals, pts, s, keys, cnts, tmp_v, tmp_p):
        """Pass 2 for feature j: score every cut inside the flagged bins (sorted by value)."""
        n_bins = fj.size
        scan = 0  # rows of the flagged bins over the whole data
        for b in range(n_bins):
            if fj[b]:
                scan += start[b + 1] - start[b]
        if scan <= members.size:  # collect the node's points from the bins' row lists
            for b in range(n_bins):
                if fj[b]:
                    q = cj[b]
                    for r in range(start[b], start[b + 1]):
                        p = local_pos[rows[r]]
                        if p >= 0:
                            pts[q] = p
                            q += 1
        else:  # one pass over the node's points
            for b in range(n_bins):
                off[b] = cj[b]
            for p in range(members.size):  # bucket the points of the flagged bins, in bin order
                b = row[members[p]]
                if fj[b]:
                    q = off[b]
                    pts[q] = p
                    off[b] = q + 1
        for b in range(n_bins):
            if not fj[b] or _clique_bound(Cj[b], Cj[b + 1], g, deg, local) > _SLACK * min(best, limit[0]):
                continue
            a0 = cj[b]
            a1 = cj[b + 1]
            for q in range(a0, a1):
                vals[q] = XT[j, pts[q]] if heavy else X[members[pts[q]], j]
            _sort_bin(vals, pts, a0, a1, low, scale, b, keys, cnts, tmp_v, tmp_p)
            s[:] = Cj[b]
            cut_s, vol_s, cut_r = _clique_stats(s, g, deg, local)
            for q in range(a0, a1 - 1):
                cut_s, vol_s, cut_r = _clique_add(s, cl[pts[q]], deg, suffix_step, cut_s, vol_s, cut_r)
                if vals[q] != vals[q + 1]:
                    best, best_p = _clique_eval(cut_s, vol_s, cut_r, vol_v, best, best_p, q)
        if best < limit[0]:
            limit[0] = best  # shared by the features (threads) of this node, as in clique_sweep
        return best, best_p

    @numba.njit(parallel=True, cache=True, nogil=True)
    def clique_bins_resolve(bins, X, XT, heavy, lo, scale, members, local_pos, start, rows, cl, g, local, vol_v, C,
                            cnt, flags, n_flagged, limit, n_chunks, out_score, out_pos):
        """Pass 2 of the binned sweep: features with flagged bins (:func:`clique_bins_flags`)
        get every cut inside those bins scored; ``out_score``/``out_pos`` (pass 1's results)
        become each feature's exact best cut. Values are read from X, or, when ``heavy``, from
        ``XT = X[members].T`` (:func:`gather_transposed`; else empty). The points of a flagged
        bin come from the bin's row list (:func:`bin_index`, with ``local_pos`` mapping a row to
        its index in ``members`` or -1) when the lists are shorter than the node."""
        d = bins.shape[0]
        m = members.size
        k = g.size
        deg = g - 1
        suffix_step = 2 * local - g - 1
        lim = np.full(1, limit)
        for ch in prange(n_chunks):  # scratch allocated once per chunk of features
            off = np.empty(flags.shape[1], np.int64)
            vals = np.empty(m, X.dtype)
            pts = np.empty(m, np.int64)
            s = np.empty(k, np.int64)
            keys = np.empty(m, np.int64)
            cnts = np.empty(m + 1, np.int64)
            tmp_v = np.empty(m, X.dtype)
            tmp_p = np.empty(m, np.int64)
            for j in range(ch, d, n_chunks):
                if n_flagged[j] > 0:
                    out_score[j], out_pos[j] = _resolve_row(
                        bins[j], j, X, XT, heavy, lo[j], scale[j], members, local_pos, start[j], rows[j], cl, g, deg,
                        local, suffix_step, vol_v, C[j],
                        cnt[j], flags[j], out_score[j], out_pos[j], lim, off, vals, pts, s, keys, cnts, tmp_v,
                        tmp_p)

    @numba.njit(cache=True, nogil=True)
    def value_at(row, X, j, members, position, n_bins):
        """Value at sorted ``position`` of feature j among ``members`` (0-based)."""
        cnt = np.zeros(n_bins + 1, np.int64)
        for p in range(members.size):
            cnt[row[members[p]] + 1] += 1
        for b in range(n_bins):
            cnt[b + 1] += cnt[b]
        b = np.searchsorted(cnt, position, side="right") - 1
        vals = np.empty(cnt[b + 1] - cnt[b], X.dtype)
        q = 0
        for p in range(members.size):
            if row[members[p]] == b:
                vals[q] = X[members[p], j]
                q += 1
        vals.sort()
        return vals[position - cnt[b]]

    bin_columns = SizeDispatch(bin_columns)
    gather_transposed = SizeDispatch(gather_transposed)
    bin_index = SizeDispatch(bin_index)
    bin_histograms = SizeDispatch(bin_histograms)
    clique_bins_boundaries = SizeDispatch(clique_bins_boundaries, work_arg=0)
    clique_bins_flags = SizeDispatch(clique_bins_flags, work_arg=6)
    clique_bins_resolve = SizeDispatch(clique_bins_resolve)
