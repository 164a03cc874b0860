"""Compiled SpEx-Clique sweep on binned columns: exact best cuts without sorting any column.

Each column is cut into ``n_bins`` equal-width value bins once (one ``uint8`` per value,
:func:`bin_columns`). A node's points are counted per (feature, cluster, bin) and, cumulative,
per block of bins (:func:`bin_counts`). The cuts between blocks are scored exactly and each
block gets a lower bound of the cuts inside it (:func:`clique_bins_coarse`, from the block
counts only: the node's lower bound); in the blocks that may hold the best cut, the cuts
between bins are scored and each bin bounded (:func:`clique_bins_fine`; the bound is
:func:`_clique_bound` on the counts at its two ends); every bin whose bound can still reach
the node's best score is flagged (:func:`clique_bins_flags`) and resolved exactly: its points
are sorted by value and every cut inside it is scored (:func:`clique_bins_resolve`). The
node's best cut equals a full sweep of the sorted columns (lowest score, ties to the lowest
position, then the feature priority), as in :func:`~pipeline.trees._kernels.clique_sweep`;
only the cuts that matter are ever sorted.

Binning is monotone (``floor((x - lo) * scale)`` rounds monotonically, clipped to the end
bins), so equal values share a bin and a cut between two bins is always a cut between
different values; any ``lo`` and ``scale`` give the same cuts.
"""

from __future__ import annotations

import numpy as np

from pipeline.trees._kernels import _SLACK, AVAILABLE, SizeDispatch

_INSERTION_MAX = 24  # bins up to this many points are sorted by insertion
MAX_POINTS = 1 << 26  # clique_bins_coarse/fine sum integers up to n**2 in floats: exact below 2**53

if AVAILABLE:
    import numba
    from numba import prange

    from pipeline.trees._clique_kernels import _box_bound, _clique_add, _clique_eval, _clique_stats

    @numba.njit(inline="always")
    def _clique_bound(lo, hi, g, deg, local):
        """Lower bound of the cut score of every prefix with counts between lo and hi and both
        sides non-empty: the larger of :func:`~pipeline.trees._clique_kernels._box_bound` and, with
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
        """Bin of value x (monotone in x; values below ``low`` in bin 0, above the range in bin
        ``top``): the one arithmetic of :func:`bin_columns` and :func:`split_members`."""
        return min(max(np.int64((x - low) * scale), 0), top)

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

    @numba.njit(inline="always")
    def _track_row(x, lo, hi, nonfinite):
        """Fold one row into per-column minima, maxima and sums of ``x - x`` (0 while every
        value is finite, NaN from then on)."""
        for j in range(x.size):
            v = x[j]
            lo[j] = v if v < lo[j] else lo[j]
            hi[j] = v if v > hi[j] else hi[j]
            nonfinite[j] += v - v

    @numba.njit(cache=True, nogil=True)
    def column_range_finite(X):
        """Per-column (min, max) of X (n >= 1 rows) and whether every value is finite, in one
        pass over the rows (the range is meaningless when a value is not)."""
        lo = X[0].copy()
        hi = X[0].copy()
        nonfinite = np.zeros(X.shape[1])
        for i in range(X.shape[0]):
            _track_row(X[i], lo, hi, nonfinite)
        return lo, hi, bool(np.all(nonfinite == 0.0))

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

    @numba.njit(inline="always")
    def _swap_bytes(w, a, b, shift, mask):
        t = ((w[a] >> shift) ^ w[b]) & mask
        w[a] ^= t << shift
        w[b] ^= t

    @numba.njit(inline="always")
    def _transpose8(w):
        """8 x 8 bytes held in 8 words (word r, byte c: element (r, c)) transposed in place:
        blocks of 1, 2 and 4 bytes swapped across the diagonal."""
        s8 = np.uint64(8)
        s16 = np.uint64(16)
        s32 = np.uint64(32)
        m8 = np.uint64(0x00FF00FF00FF00FF)
        m16 = np.uint64(0x0000FFFF0000FFFF)
        m32 = np.uint64(0xFFFFFFFF)
        _swap_bytes(w, 0, 1, s8, m8)
        _swap_bytes(w, 2, 3, s8, m8)
        _swap_bytes(w, 4, 5, s8, m8)
        _swap_bytes(w, 6, 7, s8, m8)
        _swap_bytes(w, 0, 2, s16, m16)
        _swap_bytes(w, 1, 3, s16, m16)
        _swap_bytes(w, 4, 6, s16, m16)
        _swap_bytes(w, 5, 7, s16, m16)
        _swap_bytes(w, 0, 4, s32, m32)
        _swap_bytes(w, 1, 5, s32, m32)
        _swap_bytes(w, 2, 6, s32, m32)
        _swap_bytes(w, 3, 7, s32, m32)

    @numba.njit(parallel=True, cache=True, nogil=True)
    def bin_columns(X, lo, scale, n_bins, track):
        """Bin index of every value, transposed: shape (d, n), uint8. Tiles of 8 rows are binned
        row by row (rows read whole, in order), then written column by column, 8 x 8 bytes at
        a time transposed in words. Values outside [lo, lo + n_bins / scale] go to the end
        bins (the binning stays monotone). Returns (bins, column minima, column maxima,
        whether every value is finite); the last three are found in the same pass when
        ``track`` (else they are the first row and True)."""
        n, d = X.shape
        out = np.empty((d, n), np.uint8)
        top = n_bins - 1
        d8 = (d + 7) // 8
        n_tiles = n // 8
        aligned = n % 8 == 0  # each column's 8 bytes of a tile are one aligned word of out
        o64 = out.reshape(-1).view(np.uint64) if aligned else np.empty(0, np.uint64)
        n_chunks = max(1, min(n_tiles, 64))  # runs of tiles, one per task
        mins = np.empty((n_chunks, d))
        maxs = np.empty((n_chunks, d))
        nonfinite = np.zeros((n_chunks, d))  # sums of x - x: 0 while every x is finite, NaN from then on
        for ch in prange(n_chunks):
            tmp = np.zeros((8, 8 * d8), np.uint8)
            t64 = tmp.view(np.uint64)  # (8, d8): word q of row r holds columns 8q..8q+7
            w = np.empty(8, np.uint64)
            mn = mins[ch]
            mx = maxs[ch]
            nf = nonfinite[ch]
            mn[:] = X[0]
            mx[:] = X[0]
            for tile in range(ch * n_tiles // n_chunks, (ch + 1) * n_tiles // n_chunks):  # a run of tiles
                i0 = 8 * tile
                for r in range(8):
                    x = X[i0 + r]
                    t = tmp[r]
                    for j in range(d):
                        t[j] = _bin_of(x[j], lo[j], scale[j], top)
                    if track:
                        _track_row(x, mn, mx, nf)
                for q in range(d8):
                    for r in range(8):
                        w[r] = t64[r, q]
                    _transpose8(w)  # word c: column 8q + c of rows i0..i0+7
                    for c in range(min(8, d - 8 * q)):
                        j = 8 * q + c
                        if aligned:
                            o64[(j * n + i0) // 8] = w[c]
                        else:
                            u = w[c]
                            for r in range(8):
                                out[j, i0 + r] = np.uint8((u >> np.uint64(8 * r)) & np.uint64(255))
        mn = mins[0]
        mx = maxs[0]
        nf = nonfinite[0]
        for ch in range(1, n_chunks):
            for j in range(d):
                mn[j] = min(mn[j], mins[ch, j])
                mx[j] = max(mx[j], maxs[ch, j])
                nf[j] += nonfinite[ch, j]
        for i in range(8 * n_tiles, n):
            x = X[i]
            for j in range(d):
                out[j, i] = _bin_of(x[j], lo[j], scale[j], top)
            if track:
                _track_row(x, mn, mx, nf)
        return out, mn, mx, bool(np.all(nf == 0.0))

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

    @numba.njit(inline="always")
    def _block_counts(h, hb, block):
        """``hb[c, B]``: the points of cluster c in bins < B * block, from one feature's counts
        ``h`` (k, n_bins) (read while they are in L1)."""
        k, nb = h.shape
        for c in range(k):
            acc = 0
            hb[c, 0] = 0
            for B in range(hb.shape[1] - 1):
                total = 0  # a block's sum: independent adds (vectorised), then the running total
                for b in range(B * block, min(B * block + block, nb)):
                    total += h[c, b]
                acc += total
                hb[c, B + 1] = acc

    @numba.njit(parallel=True, cache=True, nogil=True)
    def bin_counts(bins, members, cl, H, block, Hb, parent_H, parent_Hb):
        """Points of the node per feature, cluster and bin: ``H[j, c, b]`` (not cumulative;
        a node's counts less one child's are the other child's), and per block of ``block``
        bins, cumulative: ``Hb[j, c, B]`` in bins < B * block. Two features per pass over the
        members (their counts, 2 k n_bins values, stay in L1); ``members`` ascending and
        distinct (all rows: read in order, without the indirection). With a non-empty
        ``parent_H``/``parent_Hb`` (the counts of a node these rows are a part of), those
        become the other part's, feature by feature while the new counts are in cache."""
        d, n = bins.shape
        m = members.size
        nb = H.shape[2]
        off = np.empty(m, np.int64)  # cluster row of each member in a feature's counts
        for p in range(m):
            off[p] = cl[p] * nb
        for t in prange((d + 1) // 2):
            j = 2 * t
            h0 = H[j].reshape(-1)
            h0[:] = 0
            r0 = bins[j]
            if j + 1 < d:
                h1 = H[j + 1].reshape(-1)
                h1[:] = 0
                r1 = bins[j + 1]
                if m == n:  # the root
                    for p in range(n):
                        o = off[p]
                        h0[o + r0[p]] += 1
                        h1[o + r1[p]] += 1
                else:
                    for p in range(m):
                        i = members[p]
                        o = off[p]
                        h0[o + r0[i]] += 1
                        h1[o + r1[i]] += 1
                _block_counts(H[j + 1], Hb[j + 1], block)
            else:
                for p in range(m):
                    h0[off[p] + r0[members[p]]] += 1
            _block_counts(H[j], Hb[j], block)
            if parent_H.size > 0:
                for f in range(j, min(j + 2, d)):
                    ph = parent_H[f].reshape(-1)
                    h = H[f].reshape(-1)
                    for q in range(h.size):
                        ph[q] -= h[q]
                    phb = parent_Hb[f].reshape(-1)
                    hb = Hb[f].reshape(-1)
                    for q in range(hb.size):
                        phb[q] -= hb[q]

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
    def _present_blocks(Hbj, present, S, cnt):
        """``S[i, B]`` = ``Hbj[present[i], B]`` as floats (every sum of the scan is an integer
        below 2**53, so float arithmetic is exact); ``cnt[B]`` their total."""
        cnt[:] = 0
        for i in range(present.size):
            hb = Hbj[present[i]]
            for B in range(S.shape[1]):
                S[i, B] = hb[B]
                cnt[B] += hb[B]

    @numba.njit(inline="always")
    def _float_bound(lo, hi, gp, dp, lp, vol_v, top):
        """:func:`_clique_bound` over the node's clusters (counts ``lo``, ``hi`` as floats)."""
        e_s = 0.0
        v_s = 0.0
        e_r = 0.0
        v_r = 0.0
        top_s = 0.0
        top_r = 0.0
        for i in range(gp.size):
            gc = gp[i]
            a = lo[i]
            z = hi[i]
            e_s += min(a * (gc - a), z * (gc - z))
            v_s += z * dp[i]
            r_lo = lp[i] - z
            r_hi = lp[i] - a
            e_r += min(r_lo * (gc - r_lo), r_hi * (gc - r_hi))
            v_r += r_hi * dp[i]
            if top:
                top_s = max(top_s, (z - 1.0) / dp[i])
                top_r = max(top_r, (r_hi - 1.0) / dp[i])
        bound = (e_s / v_s if v_s > 0 else 0.0) + (e_r / v_r if v_r > 0 else 0.0)
        return max(bound, 2.0 - top_s - top_r) if top else bound

    @numba.njit(inline="always")
    def _float_eval(s, col, gp, dp, lp, vol_v, best, best_p, p):
        """:func:`_clique_eval` of the prefix with counts ``s[:, col]`` (floats, exact)."""
        cut_s = 0.0
        vol_s = 0.0
        cut_r = 0.0
        for i in range(gp.size):
            a = s[i, col]
            r = lp[i] - a
            cut_s += a * (gp[i] - a)
            vol_s += a * dp[i]
            cut_r += r * (gp[i] - r)
        return _clique_eval(np.int64(cut_s), np.int64(vol_s), np.int64(cut_r), vol_v, best, best_p, p)

    @numba.njit(inline="always")
    def _node_stats(g, local):
        """(present clusters, their g, g - 1 and node counts as floats, node size, whether
        :func:`_clique_bound`'s second bound applies: no cluster of the node has volume 0)."""
        present = _present(local)
        gp = g[present].astype(np.float64)
        dp = gp - 1.0
        lp = local[present].astype(np.float64)
        m = 0
        top = True
        for i in range(present.size):
            m += local[present[i]]
            if dp[i] == 0:
                top = False
        return present, gp, dp, lp, m, top

    @numba.njit(parallel=True, cache=True, nogil=True)
    def clique_bins_coarse(Hb, g, local, vol_v, n_chunks, out_score, out_pos, block_bound):
        """Level 1 of the binned sweep, from the node's block counts ``Hb`` (:func:`bin_counts`),
        all features: the best exact cut between blocks (``out_score``, ``out_pos``: score and
        sorted position; inf, -1 if none) and each block's lower bound (``block_bound``:
        :func:`_clique_bound` of its ends, at most every bound and score inside it; inf for a
        block of fewer than two points, whose only cuts are the blocks' boundaries).

        The sums are over the node's clusters only (an absent one adds 0), in floats: they are
        integers below 2**53 (at most n**2 for n points, see ``MAX_POINTS``), so they are exact
        and equal the integer sums of :func:`_clique_stats`, :func:`_box_bound` and
        :func:`_clique_bound`."""
        d = Hb.shape[0]
        n_blocks = Hb.shape[2] - 1
        present, gp, dp, lp, m, top = _node_stats(g, local)
        for ch in prange(n_chunks):
            S = np.empty((present.size, n_blocks + 1))
            cnt = np.empty(n_blocks + 1, np.int64)
            for j in range(ch, d, n_chunks):
                _present_blocks(Hb[j], present, S, cnt)
                best = np.inf
                best_p = -1
                for B in range(1, n_blocks):
                    if 0 < cnt[B] < m:
                        best, best_p = _float_eval(S, B, gp, dp, lp, vol_v, best, best_p, cnt[B] - 1)
                out_score[j] = best
                out_pos[j] = best_p
                for B in range(n_blocks):
                    block_bound[j, B] = (_float_bound(S[:, B], S[:, B + 1], gp, dp, lp, vol_v, top)
                                         if cnt[B + 1] - cnt[B] >= 2 else np.inf)

    @numba.njit(parallel=True, cache=True, nogil=True)
    def clique_bins_fine(H, Hb, g, local, vol_v, block, n_chunks, cap, block_bound, out_score, out_pos, out_bound):
        """Level 2 of the binned sweep, after :func:`clique_bins_coarse` (its outputs passed
        on): every block whose bound is within ``cap`` (the least cut between blocks, with the
        slack) gets every boundary scored (``out_score``, ``out_pos`` become the best exact cut
        between bins) and every bin bounded (``out_bound``: :func:`_clique_bound` of its two
        ends; inf for a bin of fewer than two points). The other blocks hold no cut that can
        win or be flagged: their bins report inf, and a feature's score may then be above its
        own best, never at or below the node's best. The statistics are summed cluster by
        cluster as vectors over the bins of a run of such blocks, in floats (exact, as in
        :func:`clique_bins_coarse`)."""
        d, k, nb = H.shape
        present, gp, dp, lp, m, top = _node_stats(g, local)
        kp = present.size
        fvol = float(vol_v)
        n_blocks = Hb.shape[2] - 1
        for ch in prange(n_chunks):  # level 2: inside the blocks that may matter
            refine = np.empty(n_blocks, np.bool_)
            S = np.empty((kp, n_blocks + 1))
            cnt = np.empty(n_blocks + 1, np.int64)
            F = np.empty((kp, nb + 1))  # counts at the bin boundaries of a run of blocks
            fcnt = np.empty(nb + 1, np.int64)
            cs = np.empty(nb)  # at boundary b of the run: cut_s, vol_s, cut_r
            vs = np.empty(nb + 1)
            cr = np.empty(nb)
            e_s = np.empty(nb)  # bin b: the box bound's sums and the per-side maxima
            e_r = np.empty(nb)
            top_s = np.empty(nb)
            top_r = np.empty(nb)
            for j in range(ch, d, n_chunks):
                Hj = H[j]
                _present_blocks(Hb[j], present, S, cnt)
                out_bound[j] = np.inf
                for B in range(n_blocks):
                    refine[B] = block_bound[j, B] <= cap
                best = out_score[j]
                best_p = out_pos[j]
                B = 0
                while B < n_blocks:
                    if not refine[B]:
                        B += 1
                        continue
                    B1 = B + 1
                    while B1 < n_blocks and refine[B1]:
                        B1 += 1
                    b0 = B * block
                    w = min(B1 * block, nb) - b0  # the run of blocks B..B1-1: bins b0..b0+w-1
                    fcnt[0] = cnt[B]
                    fcnt[1:w + 1] = 0
                    for i in range(kp):
                        h = Hj[present[i]]
                        f = F[i]
                        acc = np.int64(S[i, B])
                        f[0] = acc
                        for b in range(w):
                            acc += h[b0 + b]
                            fcnt[b + 1] += acc
                            f[b + 1] = acc
                    cs[:w] = 0.0
                    vs[:w + 1] = 0.0
                    cr[:w] = 0.0
                    e_s[:w] = 0.0
                    e_r[:w] = 0.0
                    top_s[:w] = 0.0
                    top_r[:w] = 0.0
                    for i in range(kp):  # one vector pass per cluster (as _clique_stats, _box_bound)
                        f = F[i]
                        gc = gp[i]
                        dc = dp[i]
                        lc = lp[i]
                        for b in range(w):
                            lo = f[b]
                            hi = f[b + 1]
                            q_lo = lo * (gc - lo)
                            r_lo = lc - hi
                            r_hi = lc - lo
                            qr_hi = r_hi * (gc - r_hi)
                            cs[b] += q_lo
                            vs[b] += lo * dc
                            cr[b] += qr_hi
                            e_s[b] += min(q_lo, hi * (gc - hi))
                            e_r[b] += min(r_lo * (gc - r_lo), qr_hi)
                        vs[w] += f[w] * dc
                        if top:  # (hi - 1) / deg < 0 when hi = 0: max with 0 as the skip in _clique_bound
                            for b in range(w):
                                top_s[b] = max(top_s[b], (f[b + 1] - 1.0) / dc)
                                top_r[b] = max(top_r[b], (lc - f[b] - 1.0) / dc)
                    for b in range(1, w):  # boundaries inside the run (its ends are level 1's)
                        if fcnt[b] > fcnt[b - 1] and fcnt[b] < m:
                            best, best_p = _clique_eval(np.int64(cs[b]), np.int64(vs[b]), np.int64(cr[b]), vol_v,
                                                        best, best_p, fcnt[b] - 1)
                    for b in range(w):
                        size = fcnt[b + 1] - fcnt[b]
                        if size > 1:
                            v_s = vs[b + 1]
                            v_r = fvol - vs[b]
                            bound = (e_s[b] / v_s if v_s > 0 else 0.0) + (e_r[b] / v_r if v_r > 0 else 0.0)
                            if top:
                                bound = max(bound, 2.0 - top_s[b] - top_r[b])
                            out_bound[j, b0 + b] = bound
                    B = B1
                out_score[j] = best
                out_pos[j] = best_p

    @numba.njit(cache=True, nogil=True)
    def clique_bins_flags(bounds, H, out_score, limit, flags):
        """Which bins may hold a cut that reaches min(feature's best, limit): a lower bound
        (:func:`clique_bins_fine`) within the slack. Returns the number of points in flagged
        bins per feature (``H``: the node's counts)."""
        d, k, nb = H.shape
        n_flagged = np.zeros(d, np.int64)
        for j in range(d):
            cap = _SLACK * min(out_score[j], limit)
            total = 0
            for b in range(nb):
                f = bounds[j, b] <= cap
                flags[j, b] = f
                if f:
                    for c in range(k):
                        total += H[j, c, b]
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
    clique_bins_coarse = SizeDispatch(clique_bins_coarse, work_arg=0)
    clique_bins_fine = SizeDispatch(clique_bins_fine, work_arg=0)
    clique_bins_resolve = SizeDispatch(clique_bins_resolve)
