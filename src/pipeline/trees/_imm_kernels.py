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

from pipeline.trees._kernels import SizeDispatch


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


@numba.njit(cache=True, nogil=True)
def _mistakes_row(X, order_row, tie_row, has_ties, j, codes, centers, node_centers, local, ratio):
    """Best (score, threshold) of one feature; see :func:`mistakes_sweep`.

    ``codes[x] == k`` marks a point of the (shared) order that does not belong to the node:
    it moves no count, so every cut next to it scores as the cut next to the node's nearest
    point with the same or a smaller value, and the best cut is the node's own.

    Only the stretch between the lowest and the highest centre is scanned point by point:
    before the lowest centre no cut is valid and every point is a mistake (only the
    per-cluster counts matter, one branch-free pass), after the highest none is valid.
    """
    m = order_row.size
    n_centres = node_centers.size
    k = centers.shape[0]
    centre_value = np.empty(n_centres)
    for i in range(n_centres):
        centre_value[i] = centers[node_centers[i], j]
    by_value = np.argsort(centre_value, kind="mergesort")
    enter = np.empty(n_centres, np.int64)  # data points strictly below each sorted centre
    equal = np.zeros(n_centres, np.bool_)  # some data point equals the centre value
    for i in range(n_centres):
        c = centre_value[by_value[i]]
        enter[i] = _count_le(X, order_row, j, c, True)
        equal[i] = _count_le(X, order_row, j, c, False) > enter[i]
    step = np.ones(k + 1, np.int64)  # +1: a point moving left is a mistake (its centre is right)
    step[k] = 0  # code k: a point of the shared order that is not in this node
    s = np.zeros(k + 1, np.int64)
    for p in range(enter[0]):
        s[codes[order_row[p]]] += 1
    mistakes = enter[0] - s[k]
    best = np.inf
    best_mistakes = np.iinfo(np.int64).max
    best_threshold = np.nan
    best_p = -1  # sorted position of the best data-value threshold (-1: a centre value or none)
    denom = 1.0
    centres_left = 0
    i = 0
    p = enter[0]
    while i < n_centres:
        e = enter[i]
        while p < e:  # data points strictly between the previous centre and this one
            x = order_row[p]
            c = codes[x]
            mistakes += step[c]
            s[c] += 1
            p += 1
            if has_ties and p < m and tie_row[p - 1] == tie_row[p]:
                continue
            if ratio:
                score = mistakes / denom
                if score < best:
                    best = score
                    best_p = p - 1  # the threshold is read once at the end: X[x, j] is a cache miss
            elif mistakes < best_mistakes:
                best_mistakes = mistakes
                best_p = p - 1
        value = centre_value[by_value[i]]
        while i < n_centres and enter[i] == e and centre_value[by_value[i]] == value:  # centres entering together
            c = node_centers[by_value[i]]
            mistakes += local[c] - 2 * s[c]
            step[c] = -1
            centres_left += 1
            i += 1
        if centres_left == n_centres:
            break
        denom = float(min(centres_left, n_centres - centres_left))
        if not equal[i - 1]:  # threshold strictly between two data values
            if ratio:
                score = mistakes / denom
                if score < best:
                    best = score
                    best_p = -1
                    best_threshold = value
            elif mistakes < best_mistakes:
                best_mistakes = mistakes
                best_p = -1
                best_threshold = value
    if best_p >= 0:
        best_threshold = X[order_row[best_p], j]
    if not ratio and best_mistakes < np.iinfo(np.int64).max:
        best = float(best_mistakes)
    return best, best_threshold


@numba.njit(parallel=True, cache=True, nogil=True)
def mistakes_sweep(X, order, tie_ids, has_ties, codes, centers, node_centers, local, ratio,
                   out_score, out_thr):
    """Best IMM (ratio=False) or EMN (ratio=True) cut per feature of one node."""
    d = order.shape[0]
    empty = np.empty(0, tie_ids.dtype)
    for j in prange(d):
        out_score[j], out_thr[j] = _mistakes_row(X, order[j], tie_ids[j] if has_ties else empty, has_ties, j,
                                                 codes, centers, node_centers, local, ratio)


@numba.njit(cache=True, nogil=True, inline="always")
def _first_min(sums, c_norm2, count, value):
    """Lowest centre index whose surrogate cost ``count |c|^2 - 2 sums[c]`` equals ``value``."""
    for c in range(sums.size):
        if count * c_norm2[c] - 2.0 * sums[c] == value:
            return c
    return -1


@numba.njit(cache=True, nogil=True, inline="always")
def _side_min(sums, c_norm2, count):
    """(smallest, first index, second smallest) of the surrogate costs ``count |c|^2 - 2 sums[c]``."""
    lo = np.inf
    second = np.inf
    arg = -1
    for c in range(sums.size):
        v = count * c_norm2[c] - 2.0 * sums[c]
        if v < lo:
            second = lo
            lo = v
            arg = c
        elif v < second:
            second = v
    return lo, arg, second


@numba.njit(parallel=True, cache=True, nogil=True)
def surrogate_sweep(order, tie_ids, has_ties, table, c_norm2, total, out_cost, out_pos, out_left, out_right):
    """Best ExKMC surrogate-cost cut per feature: min_c sum_left(|c|^2 - 2 x.c) + same on the right.

    ``table`` (n, k + 2) holds per point ``xc = x.c`` for the k centres, then ``floor`` and
    ``spread`` (below): one row, so one cache line or two, per point visited (:func:`sweep_table`).
    ``total[c]`` is the node's sum of ``xc[:, c]``. The right-hand sums are kept by running
    subtraction from ``total`` (not as ``total - left``), the floating-point steps of ExKMC
    0.0.3's ``cut_finder``, so that near-equal costs (zero-gain cuts on data with repeated
    values) compare as they do there. Left and right sums share one array of 2k, updated in
    one loop that reads each product once.

    The side minima are not recomputed over all k centres at every position. Moving point x
    to the left changes centre c's left cost by ``d_c(x) = |c|^2 - 2 x.c`` and its right cost
    by ``-d_c(x)``, so the lead of the current minimum over every other centre shrinks by at
    most ``spread[x] = max_c d_c(x) - min_c d_c(x)`` per point. While the running lower bound
    on that lead stays above a rounding margin, the minimum is the leader's cost (the same
    expression on the same sums, hence bit-identical); otherwise all k costs are evaluated.

    Rows stop early once no later cut can beat the best cost found so far in any row (only
    the node's best cut must be exact; a row that stops reports a higher cost and loses):
    with ``floor[x] = min_c d_c(x)``, every cut after position p costs at least
    ``min_c left_c(p) + sum of floor over the points right of p``.
    """
    d, m = order.shape
    k = c_norm2.size
    scale = 0.0
    floor_total = 0.0
    for p in range(m):
        x = order[0, p]
        floor_total += table[x, k]
        for c in range(k):
            scale += abs(table[x, c])
    big = 0.0
    for c in range(k):
        big = max(big, c_norm2[c])
    margin = 1e-9 * (m * big + 2.0 * scale + 1.0)  # far above the rounding of any cost, lead or bound
    limit = np.full(1, np.inf)  # best cost so far in any row (threads may read a stale value: still a real cut)
    for j in prange(d):
        sums = np.zeros(2 * k)  # left sums, then right sums
        sums[k:] = total
        left = sums[:k]
        right = sums[k:]
        best_left = np.zeros(k)  # sums at the best cut: its argmin centres are found once, at the end
        best_right = np.zeros(k)
        best = np.inf
        best_cost_left = np.inf
        best_cost_right = np.inf
        best_p = -1
        best_l = -1
        best_r = -1
        lead_l = -1.0  # lower bounds on the leaders' leads (negative: recompute)
        lead_r = -1.0
        arg_l = 0
        arg_r = 0
        floor_left = 0.0
        for p in range(m - 1):
            x = order[j, p]
            for c in range(k):
                v = table[x, c]
                sums[c] += v
                sums[k + c] -= v
            lead_l -= table[x, k + 1]
            lead_r -= table[x, k + 1]
            floor_left += table[x, k]
            if has_ties and tie_ids[j, p] == tie_ids[j, p + 1]:
                continue
            n_left = p + 1
            if lead_l > margin:
                cost_left = n_left * c_norm2[arg_l] - 2.0 * left[arg_l]
            else:
                cost_left, arg_l, second = _side_min(left, c_norm2, n_left)
                lead_l = second - cost_left
            if lead_r > margin:
                cost_right = (m - n_left) * c_norm2[arg_r] - 2.0 * right[arg_r]
            else:
                cost_right, arg_r, second = _side_min(right, c_norm2, m - n_left)
                lead_r = second - cost_right
            if cost_left + cost_right < best:
                best = cost_left + cost_right
                best_p = p
                best_cost_left = cost_left
                best_cost_right = cost_right
                best_left[:] = left
                best_right[:] = right
                if best < limit[0]:
                    limit[0] = best
            if cost_left + (floor_total - floor_left) > min(best, limit[0]) + margin:
                break  # no later cut of this row can reach the best cut found so far
        if best_p >= 0:
            best_l = _first_min(best_left, c_norm2, best_p + 1, best_cost_left)
            best_r = _first_min(best_right, c_norm2, m - best_p - 1, best_cost_right)
        out_cost[j] = best
        out_pos[j] = best_p
        out_left[j] = best_l
        out_right[j] = best_r


@numba.njit(inline="always")
def _least_cost(sums, c_norm2, count):
    """Least surrogate cost ``count |c|^2 - 2 sums[c]`` over the centres c."""
    lo = np.inf
    for c in range(sums.size):
        lo = min(lo, count * c_norm2[c] - 2.0 * sums[c])
    return lo


@numba.njit(cache=True, nogil=True)
def _bin_bounds_row(row, xrow, ids, table, c_norm2):
    """(lower, upper) of one feature for :func:`surrogate_bin_bounds` (``row`` its bins)."""
    m = ids.size
    k = c_norm2.size
    n_bins = 256
    cnt = np.zeros(n_bins, np.int64)
    S = np.zeros((n_bins, k))
    F = np.zeros(n_bins)
    for p in range(m):
        b = row[xrow[p]]
        x = ids[p]
        cnt[b] += 1
        F[b] += table[x, k]
        for c in range(k):
            S[b, c] += table[x, c]
    total = np.zeros(k)
    for b in range(n_bins):
        for c in range(k):
            total[c] += S[b, c]
    left = np.zeros(k)
    right = np.empty(k)
    n_left = 0
    lower = np.inf
    upper = np.inf
    for b in range(n_bins):
        if cnt[b] == 0:
            continue
        if cnt[b] >= 2:  # cuts inside the bin
            for c in range(k):
                right[c] = total[c] - left[c] - S[b, c]
            inside = _least_cost(left, c_norm2, n_left) + _least_cost(right, c_norm2, m - n_left - cnt[b]) + F[b]
            lower = min(lower, inside)
        n_left += cnt[b]
        for c in range(k):
            left[c] += S[b, c]
            right[c] = total[c] - left[c]
        if n_left < m:
            cut = _least_cost(left, c_norm2, n_left) + _least_cost(right, c_norm2, m - n_left)
            upper = min(upper, cut)
            lower = min(lower, cut)
    return lower, upper


@numba.njit(parallel=True, cache=True, nogil=True)
def surrogate_bin_bounds(bins, xrow, ids, table, c_norm2, out_lower, out_upper):
    """Per feature j of a leaf, from per-bin sums (the leaf's points ``ids`` of the sweep's
    ``table``, in bins ``bins[j, xrow]``, at most 256 bins): ``out_upper[j]`` the least
    surrogate cost of the cuts between two bins (real cuts, summed in another order: within
    rounding of their cost), ``out_lower[j]`` a lower bound of the cost of every cut of
    feature j: at most the former, and for the cuts inside bin b, with
    ``floor[x] = min_c d_c(x)`` (:func:`sweep_table`),
    ``min_c left_c(bins < b) + min_c right_c(bins > b) + sum of floor over bin b``
    (each point of the bin costs at least its floor on either side)."""
    for j in prange(bins.shape[0]):
        out_lower[j], out_upper[j] = _bin_bounds_row(bins[j], xrow, ids, table, c_norm2)


@numba.njit(cache=True, nogil=True)
def two_centre_floor(table, rows, c_norm2):
    """(least cost, margin) of the points ``rows`` when each point takes the better of two
    centres, least over all pairs of centres (one centre if k == 1): every cut of these points
    costs at least that much (a cut gives one centre to each side). ``margin`` is
    :func:`surrogate_sweep`'s rounding margin for these points."""
    k = c_norm2.size
    m = rows.size
    pair = np.zeros((k, k))
    d = np.empty(k)
    scale = 0.0
    for p in range(m):
        x = rows[p]
        for a in range(k):
            d[a] = c_norm2[a] - 2.0 * table[x, a]
            scale += abs(table[x, a])
        pair[0, 0] += d[0]
        for a in range(k):
            for b in range(a + 1, k):
                pair[a, b] += min(d[a], d[b])
    least = pair[0, 0] if k == 1 else np.inf
    big = 0.0
    for a in range(k):
        big = max(big, c_norm2[a])
        for b in range(a + 1, k):
            least = min(least, pair[a, b])
    return least, 1e-9 * (m * big + 2.0 * scale + 1.0)


def sweep_table(xc: np.ndarray, c_norm2: np.ndarray) -> np.ndarray:
    """The per-point table of :func:`surrogate_sweep`: ``[xc, floor, spread]`` (n, k + 2) with
    ``d_c(x) = |c|^2 - 2 x.c``, ``floor = min_c d_c`` and ``spread = max_c d_c - floor``."""
    step = c_norm2 - 2.0 * xc
    floor = step.min(axis=1)
    spread = step.max(axis=1) - floor
    return np.concatenate([xc, floor[:, None], spread[:, None]], axis=1)


mistakes_sweep = SizeDispatch(mistakes_sweep, work_arg=1)  # work: the node's orders
surrogate_sweep = SizeDispatch(surrogate_sweep)
surrogate_bin_bounds = SizeDispatch(surrogate_bin_bounds, work_arg=0)
