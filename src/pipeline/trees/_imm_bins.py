"""IMM / EMN on binned columns: the exact mistake sweep without sorting any column.

Each column is cut once into equal-width value bins (:mod:`pipeline.trees._bin_kernels`:
one ``uint8`` per value, a monotone map, so equal values share a bin). A node counts its
points per (bin, cluster) (:func:`~pipeline.trees._bin_kernels.bin_histograms`, cumulative:
``C[j, b, c]`` points of cluster c in bins < b). With ``L_c(t)`` the points of cluster c at
or below a threshold t, the mistakes of the cut ``x_j <= t`` are exactly

    sum over the node's centres c of  (c_j <= t) ? l_c - L_c(t) : L_c(t),

so every cut between two bins is scored from the counts alone, and inside bin b each
cluster's term is at least its value at one end of the bin (``L_c`` lies between
``C[j, b, c]`` and ``C[j, b + 1, c]``; a centre inside the bin may take either side). The
best cut between bins over all features is a real cut: only bins whose lower bound can
still reach it are resolved, their points sorted by value and every candidate threshold in
them scored as :func:`pipeline.trees._imm_kernels._mistakes_row` scores it (the same
candidates — data values and the centre values no data point equals, from the lowest
centre up to, not including, the highest — the same order, the same ties to the smallest
threshold). A feature whose bins cannot reach the best cut reports a worse score (or inf)
and loses, so the chosen cut is the full sweep's.

EMN's score ``mistakes / min(#centres left, #centres right)`` is bounded the same way,
dividing by the largest denominator a threshold in the bin can have.
"""

from __future__ import annotations

import numpy as np

from pipeline.trees import _bin_kernels
from pipeline.trees._kernels import AVAILABLE, SizeDispatch

N_BINS = 256  # value bins per column (uint8 bin indices)
CROWDED_BIN = 16  # a column whose fullest bin holds this many times the mean share is crowded
CROWDED_MIN = 1024  # a bin of at most this many points is never crowded (resolving it is cheap)
CROWDED_COLUMNS = 0.05  # more crowded columns than this share: the sorted sweep instead
NODE_COUNTS_MAX = 1 << 26  # bytes of one node's bin counts above which the sorted sweep runs

if AVAILABLE:
    import numba
    from numba import prange

    @numba.njit(cache=True, nogil=True)
    def centre_bins(centers, lo, scale, n_bins):
        """Bin of every centre value (k, d) under the columns' binning, clamped to the bins (a
        centre may lie outside the data's range): the same monotone arithmetic as
        :func:`~pipeline.trees._bin_kernels.bin_columns`."""
        k, d = centers.shape
        out = np.empty((d, k), np.int64)
        top = float(n_bins - 1)
        for j in range(d):
            for c in range(k):
                v = (centers[c, j] - lo[j]) * scale[j]
                out[j, c] = np.int64(min(max(v, 0.0), top)) if v == v else 0
        return out

    @numba.njit(inline="always")
    def _best_denominator(a, b, n_centres):
        """Largest ``min(l, n - l)`` over the valid numbers l in [a, b] of centres at or
        below a threshold (1 <= l <= n - 1); 0 if none is valid."""
        best = 0
        for cl in range(max(a, 1), min(b, n_centres - 1) + 1):
            best = max(best, min(cl, n_centres - cl))
        return best

    @numba.njit(inline="always")
    def _bin_scores(Cj, cb, cset, local, b, ratio):
        """(score of the cut after bin b or inf if it is not a valid cut, lower bound of every
        cut inside bin b or inf if none can be valid) from the cumulative counts."""
        n_centres = cset.size
        below = 0  # centres in bins < b
        upto = 0  # centres in bins <= b
        cut = 0
        bound = 0
        for i in range(n_centres):
            c = cset[i]
            lo = Cj[b, c]
            hi = Cj[b + 1, c]
            if cb[c] < b:
                below += 1
                upto += 1
                cut += local[c] - hi
                bound += local[c] - hi
            elif cb[c] > b:
                cut += hi
                bound += lo
            else:
                upto += 1
                cut += local[c] - hi
                bound += min(lo, local[c] - hi)
        score = np.inf
        if 1 <= upto < n_centres:
            score = cut / min(upto, n_centres - upto) if ratio else float(cut)
        inside = np.inf
        denom = _best_denominator(below, upto, n_centres)
        if denom > 0:
            inside = bound / denom if ratio else float(bound)
        return score, inside

    @numba.njit(cache=True, nogil=True)
    def _column_bounds(Cj, cb, cset, local, ratio, bound):
        """Pass 1 for one feature: ``bound[b]`` the lower bound of every cut inside bin b (inf
        where no candidate threshold lies: outside the centres' bins, or no point or centre
        of the node in the bin); returns the best exact score of the cuts between bins."""
        n_bins = bound.size
        lo_bin = n_bins
        hi_bin = -1
        for i in range(cset.size):
            lo_bin = min(lo_bin, cb[cset[i]])
            hi_bin = max(hi_bin, cb[cset[i]])
        best = np.inf
        for b in range(n_bins):
            bound[b] = np.inf
            if b < lo_bin or b > hi_bin:
                continue
            score, inside = _bin_scores(Cj, cb, cset, local, b, ratio)
            best = min(best, score)
            has_centre = False
            for i in range(cset.size):
                if cb[cset[i]] == b:
                    has_centre = True
            if has_centre or Cj[b + 1].sum() > Cj[b].sum():
                bound[b] = inside
        return best

    @numba.njit(cache=True, nogil=True)
    def _resolve_column(j, X, row, members, codes, Cj, cb, centers, cset, local, ratio, bound, limit):
        """Best (score, threshold) of feature j over the bins whose bound can reach ``limit[0]``
        (scanned in value order; the first of equal scores wins); (inf, nan) if none."""
        n_bins = bound.size
        n_centres = cset.size
        best = np.inf
        best_thr = np.nan
        off = np.zeros(n_bins + 1, np.int64)  # bucket starts of the flagged bins, in bin order
        n_flagged = 0
        for b in range(n_bins):
            off[b + 1] = off[b]
            if bound[b] <= limit[0]:
                off[b + 1] += Cj[b + 1].sum() - Cj[b].sum()
                n_flagged += 1
        if n_flagged == 0:
            return best, best_thr
        pts = np.empty(off[n_bins], np.int64)
        vals = np.empty(off[n_bins])
        s = np.zeros(local.size, np.int64)
        step = np.ones(local.size, np.int64)
        at = off[:n_bins].copy()
        for p in range(members.size):  # the flagged bins' points, ascending ids within a bin
            b = row[members[p]]
            if bound[b] <= limit[0]:
                pts[at[b]] = members[p]
                at[b] += 1
        cval = np.empty(n_centres)
        cidx = np.empty(n_centres, np.int64)
        done = False
        for b in range(n_bins):
            if done:
                break
            if not bound[b] <= min(limit[0], best):
                continue
            a0 = off[b]
            m_b = off[b + 1] - a0
            for i in range(m_b):
                vals[i] = X[pts[a0 + i], j] + 0.0  # -0.0 sorts with 0.0
            srt = np.argsort(vals[:m_b], kind="mergesort")
            # the state before the bin: the centres of lower bins are left
            mistakes = 0
            centres_left = 0
            n_in = 0
            for i in range(n_centres):
                c = cset[i]
                s[c] = Cj[b, c]
                if cb[c] < b:
                    step[c] = -1
                    centres_left += 1
                    mistakes += local[c] - s[c]
                else:
                    step[c] = 1
                    mistakes += s[c]
                    if cb[c] == b:
                        cval[n_in] = centers[c, j]
                        cidx[n_in] = c
                        n_in += 1
            by_value = np.argsort(cval[:n_in], kind="mergesort")
            denom = float(min(centres_left, n_centres - centres_left))
            p = 0
            r = 0
            while p < m_b or r < n_in:
                if r < n_in and (p == m_b or cval[by_value[r]] <= vals[srt[p]]):
                    value = cval[by_value[r]]
                    while r < n_in and cval[by_value[r]] == value:  # centres entering together
                        c = cidx[by_value[r]]
                        mistakes += local[c] - 2 * s[c]
                        step[c] = -1
                        centres_left += 1
                        r += 1
                    if centres_left == n_centres:
                        done = True  # no threshold at or above the highest centre is valid
                        break
                    denom = float(min(centres_left, n_centres - centres_left))
                    if p < m_b and vals[srt[p]] == value:
                        continue  # data points equal the centre value: the cut comes after them
                    score = mistakes / denom if ratio else float(mistakes)
                    if score < best:
                        best = score
                        best_thr = value
                else:
                    x = pts[a0 + srt[p]]
                    c = codes[x]
                    mistakes += step[c]
                    s[c] += 1
                    p += 1
                    if p < m_b and vals[srt[p]] == vals[srt[p - 1]]:
                        continue
                    if centres_left == 0:
                        continue  # below the lowest centre no cut is valid
                    score = mistakes / denom if ratio else float(mistakes)
                    if score < best:
                        best = score
                        best_thr = X[x, j]
        if best < limit[0]:
            limit[0] = best  # shared by the features (threads) of the node: a real cut's score
        return best, best_thr

    @numba.njit(parallel=True, cache=True, nogil=True)
    def binned_mistakes(X, bins, members, codes, C, cb, centers, cset, local, ratio, out_score, out_thr):
        """Best IMM (ratio=False) or EMN cut per feature of the node ``members`` (ascending
        row ids) with cumulative bin counts ``C`` (d, n_bins + 1, k) and centre bins ``cb``
        (d, k): exact for every feature whose best cut reaches the node's best, a worse
        score (or inf) for the others."""
        d = C.shape[0]
        n_bins = C.shape[1] - 1
        bound = np.empty((d, n_bins))
        cut_best = np.empty(d)
        for j in prange(d):  # pass 1: exact cuts between bins, bounds inside bins
            cut_best[j] = _column_bounds(C[j], cb[j], cset, local, ratio, bound[j])
        limit = np.full(1, cut_best.min())  # a real cut: only bins that can reach it are resolved
        for j in prange(d):
            out_score[j], out_thr[j] = _resolve_column(j, X, bins[j], members, codes, C[j], cb[j], centers, cset,
                                                       local, ratio, bound[j], limit)

    binned_mistakes = SizeDispatch(binned_mistakes, work_arg=4)  # work: the node's counts


class BinnedMistakes:
    """The binned mistake sweep for :func:`pipeline.trees.imm.grow_centre_tree`: a node's
    state is its cumulative bin counts (:func:`_histograms`); a kid's are counted, or, for a
    kid holding more than half of the node, the node's less the rest's.

    ``extremes``: the columns' (min, max) if known; ``n_bins``: 2 to 256 bins per column.
    ``suited`` is False when the columns do not suit equal-width bins (many columns crowd a
    large share of the points into one bin: far outliers, heavy tails), where resolving bins
    would sort most of every node again, and, with nothing binned, when one node's counts
    would take more than ``NODE_COUNTS_MAX`` bytes (many features and centres).
    """

    def __init__(self, X, codes, centers, ratio: bool, extremes=None, n_bins: int = N_BINS):
        if not 2 <= n_bins <= 256:
            raise ValueError(f"n_bins must be between 2 and 256 (uint8 bins), got {n_bins}")
        n, d = X.shape
        self.X, self.centers, self.ratio, self.n_bins = X, centers, ratio, n_bins
        self.k = centers.shape[0]
        if d * (n_bins + 1) * self.k * 4 > NODE_COUNTS_MAX:  # many features and centres: the sorted sweep
            self.suited = False
            return
        lo, hi = _bin_kernels.column_range(X) if extremes is None else extremes
        scale = _bin_kernels.range_scales(lo, hi, n_bins)
        self.bins = _bin_kernels.bin_columns(X, lo, scale, n_bins, False)[0]
        self.codes = codes.astype(np.int64)
        self._root = self._histograms(np.arange(n, dtype=np.int64))
        per_bin = np.diff(self._root.sum(axis=2, dtype=np.int64), axis=1)
        self.suited = bool((per_bin.max(axis=1) > max(CROWDED_BIN * n / n_bins, CROWDED_MIN)).mean()
                           <= CROWDED_COLUMNS)
        self.cb = centre_bins(centers, lo, scale, n_bins)

    def root(self):
        return self._root

    def sweep(self, C, members, cset, local, score, thr):
        binned_mistakes(self.X, self.bins, members, self.codes, C, self.cb, self.centers, cset, local, self.ratio,
                        score, thr)

    def children(self, C, members, kids):
        out = []
        for kid_members, kid_centres in kids:
            if kid_centres.size < 2:
                out.append(None)  # a leaf: its points are never needed
            elif 2 * kid_members.size <= members.size:
                out.append(self._histograms(kid_members))
            else:  # the node's counts less the rest's (one kid at most: C is not needed after)
                rest = np.ones(self.X.shape[0], dtype=bool)
                rest[kid_members] = False
                out.append(np.subtract(C, self._histograms(members[rest[members]]), out=C))
        return out

    def _histograms(self, members):
        """Cumulative counts (d, n_bins + 1, k) int32 of the points ``members`` per bin and cluster."""
        d = self.bins.shape[0]
        C = np.empty((d, self.n_bins + 1, self.k), np.int32)
        cnt = np.empty((d, self.n_bins + 1), np.int64)
        _bin_kernels.bin_histograms(self.bins, members, self.codes[members], C, cnt)
        return C
