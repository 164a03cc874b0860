"""Compiled (numba) passes of the presorted CART builder (:mod:`pipeline.trees._cart_best_first`).

The builder keeps, for every feature, the rows of each node sorted by that feature: three
(n_features, n) arrays (row ids, float32 values, classes) in which every node owns the same
segment ``[start, end)`` of every row, so that sweeps read memory in order. These passes do
all the work on the data:

* :func:`scaled_columns` — ``float32((X - center) / scale)`` per column, transposed to
  (n_features, n): the values scikit-learn's splitter sees (it casts to float32);
* :func:`presort_columns` — every column's rows in increasing order, with their values and
  classes in that order (float32 bit patterns and row ids packed into 64-bit keys for
  numpy's SIMD integer sort; ties keep row order);
* :func:`sweep_features` — per feature, one sequential pass over the node's sorted values
  that moves each row's class from right to left and scores every boundary with
  scikit-learn's Gini proxy ``-n_R (1 - sq_R / n_R²) - n_L (1 - sq_L / n_L²)``, the squared
  counts kept exactly as integers (so the score is bit for bit the one scikit-learn
  computes); positions that provably cannot win skip the two divisions;
* :func:`partition_segments` — after a split, every feature's segment is split stably into
  the rows going left and those going right, so both children stay sorted.

Features are independent and run in parallel (``prange``).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numba
import numpy as np
from numba import prange

#: scikit-learn's FEATURE_THRESHOLD: a float32 constant added in float32 arithmetic
#: (``feature_values[p] <= feature_values[p - 1] + FEATURE_THRESHOLD`` on two float32).
FEATURE_THRESHOLD = np.float32(1e-7)


@numba.njit(parallel=True, cache=True, nogil=True)
def scaled_columns(X, center, scale):
    """``float32((X[:, f] - center[f]) / scale[f])`` as rows of a (n_features, n) array."""
    n, d = X.shape
    out = np.empty((d, n), dtype=np.float32)
    block = 4096
    for b in prange((n + block - 1) // block):
        lo = b * block
        hi = min(n, lo + block)
        for i in range(lo, hi):
            for f in range(d):
                out[f, i] = np.float32((X[i, f] - center[f]) / scale[f])
    return out


@numba.njit(parallel=True, cache=True, nogil=True)
def pack_keys(cols, first, keys):
    """``keys[j, i]`` = the order-preserving image of ``cols[first + j, i]`` (float32 bits) in the
    high 32 bits, ``i`` in the low 32: sorting the integers sorts the values stably."""
    b, n = keys.shape
    for i in prange(n):
        for j in range(b):
            u = np.uint64(cols[first + j, i:i + 1].view(np.uint32)[0])
            key = (u ^ np.uint64(0xFFFFFFFF)) if u & np.uint64(0x80000000) else (u | np.uint64(0x80000000))
            keys[j, i] = (key << np.uint64(32)) | np.uint64(i)


@numba.njit(parallel=True, cache=True, nogil=True)
def unpack_keys(keys, y, first, orders, vals, labels):
    """Rows, values and classes of sorted keys into ``orders``, ``vals``, ``labels`` at row ``first + j``."""
    b, n = keys.shape
    for j in prange(b):
        out_v = vals[first + j].view(np.uint32)
        for i in range(n):
            k = keys[j, i]
            r = np.int64(k & np.uint64(0xFFFFFFFF))
            key = np.uint32(k >> np.uint64(32))
            out_v[i] = (key ^ np.uint32(0x80000000)) if key & np.uint32(0x80000000) else (key ^ np.uint32(0xFFFFFFFF))
            orders[first + j, i] = r
            labels[first + j, i] = y[r]


def presort_columns(cols, y, n_threads: int = 1):
    """Every column of ``cols`` (n_features, n) float32 sorted (stable): rows (int32), values
    and classes in that order, each (n_features, n). Blocks of ``n_threads`` columns are packed
    into 64-bit keys, sorted by numpy (its SIMD sort, in threads: it releases the GIL) and unpacked."""
    d, n = cols.shape
    orders = np.empty((d, n), dtype=np.int32)
    vals = np.empty((d, n), dtype=np.float32)
    labels = np.empty((d, n), dtype=y.dtype)
    step = max(1, min(int(n_threads), d))
    buffer = np.empty((step, n), dtype=np.uint64)
    pool = ThreadPoolExecutor(max_workers=step) if step > 1 else None
    try:
        for first in range(0, d, step):
            keys = buffer[:min(step, d - first)]
            pack_keys(cols, first, keys)
            if pool is None:
                keys.sort(axis=1)
            else:  # compiled kernels only run from this thread (numba's workqueue is not thread-safe)
                list(pool.map(np.ndarray.sort, list(keys)))
            unpack_keys(keys, y, first, orders, vals, labels)
    finally:
        if pool is not None:
            pool.shutdown()
    return orders, vals, labels


@numba.njit(cache=True, nogil=True)
def _sweep_row(vals, labels, start, end, total, min_leaf):
    """(best proxy, its position, constant?) of one feature on the node's sorted values.

    Position p means the rows at ``[start, p)`` go left. Like scikit-learn's ``next_p``, a
    boundary exists between consecutive sorted values only when the later one exceeds the
    earlier plus FEATURE_THRESHOLD (float32 arithmetic), and the first position with the
    largest proxy wins (strict ``>``)."""
    k = total.size
    left = np.zeros(k, dtype=np.int64)
    sq_l = 0
    sq_r = 0
    for c in range(k):
        sq_r += total[c] * total[c]
    best = -np.inf
    best_p = end
    ft = FEATURE_THRESHOLD
    if vals[end - 1] <= vals[start] + ft:
        return best, best_p, True
    lo = start + min_leaf  # the first position with min_leaf rows on the left
    hi = end - min_leaf  # the last with min_leaf rows on the right
    prev = vals[start]
    w_n = float(end - start)
    margin = 1e-9 * w_n
    target = -np.inf
    for p in range(start + 1, hi + 1):
        c = labels[p - 1]
        lc = left[c]
        rc = total[c] - lc
        sq_l += 2 * lc + 1
        sq_r -= 2 * rc - 1
        left[c] = lc + 1
        v = vals[p]
        tie = v <= prev + ft
        prev = v
        if tie or p < lo:
            continue
        w_l = float(p - start)
        w_r = float(end - p)
        # proxy = sq_l / w_l + sq_r / w_r - n up to rounding (~1e-15 n): a position whose exact
        # value lies 1e-9 n below the best cannot win; skip it without the two divisions
        if float(sq_l) * w_r + float(sq_r) * w_l < target * (w_l * w_r):
            continue
        imp_l = 1.0 - float(sq_l) / (w_l * w_l)
        imp_r = 1.0 - float(sq_r) / (w_r * w_r)
        proxy = -w_r * imp_r - w_l * imp_l
        if proxy > best:
            best = proxy
            best_p = p
            target = best + w_n - margin
    return best, best_p, False


@numba.njit(parallel=True, cache=True, nogil=True)
def sweep_features(vals, labels, start, end, total, min_leaf):
    """:func:`_sweep_row` for every feature: proxies (d,), positions (d,), constant flags (d,)."""
    d = vals.shape[0]
    proxy = np.empty(d, dtype=np.float64)
    pos = np.empty(d, dtype=np.int64)
    const = np.empty(d, dtype=np.bool_)
    for f in prange(d):
        proxy[f], pos[f], const[f] = _sweep_row(vals[f], labels[f], start, end, total, min_leaf)
    return proxy, pos, const


@numba.njit(cache=True, nogil=True)
def class_counts(labels, n_classes):
    """Class counts of ``labels``."""
    out = np.zeros(n_classes, dtype=np.int64)
    for c in labels:
        out[c] += 1
    return out


@numba.njit(parallel=True, cache=True, nogil=True)
def partition_segments(orders, vals, labels, start, pos, end, feature, goes_left):
    """Split every feature's segment ``[start, end)`` stably into the rows that
    ``orders[feature, start:pos]`` sends left, then the others, moving their values and
    classes with them (``goes_left`` is scratch, all zero)."""
    d = orders.shape[0]
    split = orders[feature]
    for i in range(start, pos):
        goes_left[split[i]] = 1
    for f in prange(d):
        if f == feature:
            continue
        row, val, lab = orders[f], vals[f], labels[f]
        m = end - pos + 1  # one spare slot: the branchless loop writes before it knows
        right = np.empty(m, dtype=row.dtype)
        right_v = np.empty(m, dtype=val.dtype)
        right_l = np.empty(m, dtype=lab.dtype)
        a = start
        b = 0
        for i in range(start, end):  # branchless: write both places, advance one
            r = row[i]
            v = val[i]
            c = lab[i]
            g = goes_left[r]
            row[a] = r
            val[a] = v
            lab[a] = c
            right[b] = r
            right_v[b] = v
            right_l[b] = c
            a += g
            b += 1 - g
        row[pos:end] = right[:m - 1]
        val[pos:end] = right_v[:m - 1]
        lab[pos:end] = right_l[:m - 1]
    for i in range(start, pos):
        goes_left[split[i]] = 0
