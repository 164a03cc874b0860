"""Compiled sweeps for the centre-based trees: IMM / EMN mistakes and the ExKMC surrogate cost.

Mistakes sweep (one node, every feature): the node holds points whose reference centre is in
the node (earlier mistakes are dropped, as in the published IMM) and a set of centres.
Candidate thresholds t are the distinct data and centre values with
``min(centre_j) <= t < max(centre_j)``; a point is a mistake when it and its centre fall on
different sides of ``x_j <= t``. The sweep walks data (sorted order) and centres (sorted per
feature) in one merged pass, updating the mistake count in O(1) per event:
a point of cluster c moving left changes it by -1 if c's centre is already left, else +1; a
centre moving left changes it by ``l_c - 2 s_c`` (l_c points of c in the node, s_c already left).
Score: ``mistakes`` (IMM) or ``mistakes / min(#centres left, #centres right)`` (EMN). Ties go
to the smallest threshold. Positions of centres among the data come from binary search.
"""

from __future__ import annotations

import numpy as np
import numba
from numba import prange


@numba.njit(cache=True, nogil=True)
def _count_le(X, order_row, j, value, strict):
    """Number of sorted data values (row ``order_row`` of feature j) < value (strict) or <= value."""
    lo = 0
    hi = order_row.size
    while lo < hi:
        mid = (lo + hi) // 2
        v = X[order_row[mid], j]
        if v < value or (not strict and v == value):
            lo = mid + 1
        else:
            hi = mid
    return lo


@numba.njit(parallel=True, cache=True, nogil=True)
def mistakes_sweep(X, order, tie_ids, has_ties, codes, centers, node_centers, local, ratio,
                   out_score, out_thr):
    """Best IMM (ratio=False) or EMN (ratio=True) cut per feature of one node."""
    d, m = order.shape
    mc = node_centers.size
    k = centers.shape[0]
    for j in prange(d):
        cv = np.empty(mc)
        for i in range(mc):
            cv[i] = centers[node_centers[i], j]
        srt = np.argsort(cv, kind="mergesort")
        enter = np.empty(mc, np.int64)  # data points strictly below each sorted centre
        equal = np.zeros(mc, np.bool_)  # some data point equals the centre value
        for i in range(mc):
            c = cv[srt[i]]
            enter[i] = _count_le(X, order[j], j, c, True)
            equal[i] = _count_le(X, order[j], j, c, False) > enter[i]
        is_left = np.zeros(k, np.bool_)
        s = np.zeros(k, np.int64)
        mis = 0
        r = 0
        i = 0
        best = np.inf
        best_t = np.nan
        for p in range(m + 1):
            while i < mc and enter[i] == p:  # centres below data point p (or equal to it)
                c0 = cv[srt[i]]
                while i < mc and enter[i] == p and cv[srt[i]] == c0:
                    c = node_centers[srt[i]]
                    mis += local[c] - 2 * s[c]
                    is_left[c] = True
                    r += 1
                    i += 1
                if not equal[i - 1] and 0 < r < mc:  # threshold strictly between two data values
                    score = mis / min(r, mc - r) if ratio else float(mis)
                    if score < best:
                        best = score
                        best_t = c0
            if p == m:
                break
            c = codes[order[j, p]]
            mis += -1 if is_left[c] else 1
            s[c] += 1
            if p < m - 1 and has_ties and tie_ids[j, p] == tie_ids[j, p + 1]:
                continue
            if 0 < r < mc:
                score = mis / min(r, mc - r) if ratio else float(mis)
                if score < best:
                    best = score
                    best_t = X[order[j, p], j]
        out_score[j] = best
        out_thr[j] = best_t


@numba.njit(parallel=True, cache=True, nogil=True)
def surrogate_sweep(order, tie_ids, has_ties, xc, c_norm2, out_cost, out_pos, out_left, out_right):
    """Best ExKMC surrogate-cost cut per feature: min_c sum_left(|c|^2 - 2 x.c) + same on the right."""
    d, m = order.shape
    k = xc.shape[1]
    total = np.zeros(k)
    for p in range(m):
        for c in range(k):
            total[c] += xc[order[0, p], c]
    for j in prange(d):
        left = np.zeros(k)
        best = np.inf
        best_p = -1
        best_l = -1
        best_r = -1
        for p in range(m - 1):
            x = order[j, p]
            for c in range(k):
                left[c] += xc[x, c]
            if has_ties and tie_ids[j, p] == tie_ids[j, p + 1]:
                continue
            n_left = p + 1
            lc = np.inf
            li = -1
            rc = np.inf
            ri = -1
            for c in range(k):
                v = n_left * c_norm2[c] - 2.0 * left[c]
                if v < lc:
                    lc = v
                    li = c
                v = (m - n_left) * c_norm2[c] - 2.0 * (total[c] - left[c])
                if v < rc:
                    rc = v
                    ri = c
            if lc + rc < best:
                best = lc + rc
                best_p = p
                best_l = li
                best_r = ri
        out_cost[j] = best
        out_pos[j] = best_p
        out_left[j] = best_l
        out_right[j] = best_r
