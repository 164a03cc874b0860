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
MAX_POINTS = 1 << 26  # clique_bins_scan sums integers up to n**2 in floats: exact below 2**53

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

    @numba.njit(inline="always")
    def _bin_of(x, low, scale, top):
        """Bin of value x (monotone in x): the one arithmetic of :func:`bin_columns` and
        :func:`split_members`."""
        return min(np.int64((x - low) * scale), top)

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
                    out[j, i] = _bin_of(X[i, j], low, s, top)
        return out

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
    def bin_counts(bins, members, cl, H):
        """Points of the node per feature, cluster and bin: ``H[j, c, b]`` (not cumulative;
        a node's counts less one child's are the other child's)."""
        d = bins.shape[0]
        m = members.size
        for j in prange(d):
            row = bins[j]
            Hj = H[j]
            Hj[:] = 0
            for p in range(m):
                Hj[cl[p], row[members[p]]] += 1

    @numba.njit(inline="always")
    def _present(local):
        """The node's clusters (those with points in it), ascending: a cluster without points
        adds 0 to every sum of the sweep, so the sums over these alone are the same."""
        n = 0
        for c in range(local.size):
            if local[c] > 0:
                n += 1
        out = np.empty(n, np.int64)
        n = 0
        for c in range(local.size):
            if local[c] > 0:
                out[n] = c
                n += 1
        return out

    @numba.njit(inline="always")
    def _cumulate(Hj, present, S, cnt):
        """``S[i, b]``: points of cluster ``present[i]`` in bins < b (as floats: every sum
        below stays an integer under 2**53, so float arithmetic is exact); ``cnt[b]`` their
        total."""
        nb = Hj.shape[1]
        cnt[:] = 0
        for i in range(present.size):
            h = Hj[present[i]]
            s = S[i]
            acc = 0
            s[0] = 0.0
            for b in range(nb):
                acc += h[b]
                cnt[b + 1] += acc
                s[b + 1] = acc

    @numba.njit(parallel=True, cache=True, nogil=True)
    def clique_bins_scan(H, g, local, vol_v, n_chunks, out_score, out_pos, out_bound, out_size):
        """Pass 1 of the binned sweep, from the node's counts ``H`` (:func:`bin_counts`), all
        features: the best exact cut between bins (``out_score``, ``out_pos``: score and sorted
        position; inf, -1 if none) and, per bin, the lower bound of the cuts inside it
        (``out_bound``: :func:`_clique_bound` of its two ends; inf for a bin of fewer than two
        points) and its number of points (``out_size``).

        The statistics of every boundary and bin are summed cluster by cluster as vectors over
        the bins (the node's clusters only: an absent one adds 0), in floats: the sums are
        integers below 2**53 (at most n**2 for n points, see ``MAX_POINTS``), so they are exact
        and equal the integer sums of :func:`_clique_stats`, :func:`_box_bound` and
        :func:`_clique_bound` term by term."""
        d, k, nb = H.shape
        present = _present(local)
        kp = present.size
        gp = g[present].astype(np.float64)
        dp = gp - 1.0
        lp = local[present].astype(np.float64)
        m = 0
        top = True  # _clique_bound's second bound, unless a cluster of the node has volume 0
        for i in range(kp):
            m += local[present[i]]
            if dp[i] == 0:
                top = False
        fvol = float(vol_v)
        for ch in prange(n_chunks):  # scratch allocated once per chunk of features
            S = np.empty((kp, nb + 1))
            cnt = np.empty(nb + 1, np.int64)
            cs = np.empty(nb)  # at boundary b (before bin b): cut_s, vol_s, cut_r
            vs = np.empty(nb + 1)
            cr = np.empty(nb)
            e_s = np.empty(nb)  # bin b: the box bound's sums and the per-side maxima
            e_r = np.empty(nb)
            top_s = np.empty(nb)
            top_r = np.empty(nb)
            for j in range(ch, d, n_chunks):
                _cumulate(H[j], present, S, cnt)
                cs[:] = 0.0
                vs[:] = 0.0
                cr[:] = 0.0
                e_s[:] = 0.0
                e_r[:] = 0.0
                top_s[:] = 0.0
                top_r[:] = 0.0
                for i in range(kp):
                    s = S[i]
                    gc = gp[i]
                    dc = dp[i]
                    lc = lp[i]
                    for b in range(nb):
                        lo = s[b]
                        hi = s[b + 1]
                        q_lo = lo * (gc - lo)
                        r_lo = lc - hi
                        r_hi = lc - lo
                        qr_hi = r_hi * (gc - r_hi)
                        cs[b] += q_lo
                        vs[b] += lo * dc
                        cr[b] += qr_hi
                        e_s[b] += min(q_lo, hi * (gc - hi))
                        e_r[b] += min(r_lo * (gc - r_lo), qr_hi)
                    if top:  # (hi - 1) / deg < 0 when hi = 0: max with 0 as the skip in _clique_bound
                        for b in range(nb):
                            top_s[b] = max(top_s[b], (s[b + 1] - 1.0) / dc)
                            top_r[b] = max(top_r[b], (lc - s[b] - 1.0) / dc)
                vs[nb] = fvol
                best = np.inf
                best_p = -1
                for b in range(1, nb):
                    if cnt[b] > cnt[b - 1] and cnt[b] < m:
                        best, best_p = _clique_eval(np.int64(cs[b]), np.int64(vs[b]), np.int64(cr[b]), vol_v, best,
                                                    best_p, cnt[b] - 1)
                out_score[j] = best
                out_pos[j] = best_p
                for b in range(nb):
                    size = cnt[b + 1] - cnt[b]
                    out_size[j, b] = size
                    bound = np.inf
                    if size > 1:
                        v_s = vs[b + 1]
                        v_r = fvol - vs[b]
                        bound = (e_s[b] / v_s if v_s > 0 else 0.0) + (e_r[b] / v_r if v_r > 0 else 0.0)
                        if top:
                            bound = max(bound, 2.0 - top_s[b] - top_r[b])
                    out_bound[j, b] = bound

    @numba.njit(cache=True, nogil=True)
    def clique_bins_flags(bounds, sizes, out_score, limit, flags):
        """Which bins may hold a cut that reaches min(feature's best, limit): a lower bound
        (:func:`clique_bins_scan`) within the slack. Returns the number of points in flagged
        bins per feature."""
        d, nb = bounds.shape
        n_flagged = np.zeros(d, np.int64)
        for j in range(d):
            cap = _SLACK * min(out_score[j], limit)
            total = 0
            for b in range(nb):
                f = bounds[j, b] <= cap
                flags[j, b] = f
                if f:
                    total += sizes[j, b]
            n_flagged[j] = total
        return n_flagged

    @numba.njit(cache=True, nogil=True)
    def _resolve_row(row, j, X, XT, heavy, low, scale, members, cl, g, deg, local, suffix_step, vol_v, Hj, fj,
                     best, best_p, limit, Cj, cj, off, vals, pts, s, keys, cnts, tmp_v, tmp_p):
        """Pass 2 for feature j: score every cut inside the flagged bins (sorted by value)."""
        n_bins = fj.size
        k = g.size
        cj[0] = 0
        Cj[0] = 0
        for b in range(n_bins):  # cumulative counts at the bin boundaries
            total = 0
            for c in range(k):
                Cj[b + 1, c] = Cj[b, c] + Hj[c, b]
                total += Hj[c, b]
            cj[b + 1] = cj[b] + total
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
    def clique_bins_resolve(bins, X, XT, heavy, lo, scale, members, cl, g, local, vol_v, H, flags, n_flagged, limit,
                            n_chunks, out_score, out_pos):
        """Pass 2 of the binned sweep: features with flagged bins (:func:`clique_bins_flags`)
        get every cut inside those bins scored; ``out_score``/``out_pos`` (pass 1's results)
        become each feature's exact best cut. The points of the flagged bins are collected in
        one pass over the node's points; values are read from X, or, when ``heavy``, from
        ``XT = X[members].T`` (:func:`gather_transposed`; else empty)."""
        d = bins.shape[0]
        m = members.size
        k = g.size
        n_bins = flags.shape[1]
        deg = g - 1
        suffix_step = 2 * local - g - 1
        lim = np.full(1, limit)
        for ch in prange(n_chunks):  # scratch allocated once per chunk of features
            Cj = np.empty((n_bins + 1, k), np.int64)
            cj = np.empty(n_bins + 1, np.int64)
            off = np.empty(n_bins, np.int64)
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
                        bins[j], j, X, XT, heavy, lo[j], scale[j], members, cl, g, deg, local, suffix_step, vol_v,
                        H[j], flags[j], out_score[j], out_pos[j], lim, Cj, cj, off, vals, pts, s, keys, cnts, tmp_v,
                        tmp_p)

    @numba.njit(cache=True, nogil=True)
    def split_members(row, X, j, members, low, scale, n_bins, t):
        """(members with ``X[:, j] <= t``, the rest), each ascending. Binning is monotone, so
        only the points in t's own bin compare values; the others go by their bin."""
        bt = _bin_of(t, low, scale, n_bins - 1)
        m = members.size
        left = np.empty(m, np.int64)
        right = np.empty(m, np.int64)
        n_left = 0
        n_right = 0
        for p in range(m):
            i = members[p]
            b = row[i]
            if b < bt or (b == bt and X[i, j] <= t):
                left[n_left] = i
                n_left += 1
            else:
                right[n_right] = i
                n_right += 1
        return left[:n_left].copy(), right[:n_right].copy()

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
    bin_histograms = SizeDispatch(bin_histograms)
    bin_counts = SizeDispatch(bin_counts)
    clique_bins_scan = SizeDispatch(clique_bins_scan, work_arg=0)
    clique_bins_resolve = SizeDispatch(clique_bins_resolve)
