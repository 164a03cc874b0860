"""Compiled (numba) passes over a node's sorted orders (one row per feature): the stable split of
every row between the children (:func:`partition_rows`, branch-free), the filter when one child is
empty (:func:`compress_rows`), the split into several groups in one pass (:func:`group_rows`), and
the order-preserving sort keys of float columns (:func:`pack_keys`, :func:`unpack_keys`;
:mod:`pipeline.trees._column_order`). Tested against numpy's stable sorts and splits
(tests/test_spex.py, tests/test_cart_presorted.py).

:func:`_child_arrays` and :func:`_split_row` are inlined by
:func:`pipeline.trees._clique_kernels.clique_split_sweep` too: numba's on-disk cache tracks only the
file a kernel is defined in, so a change to them must touch that file as well (its cache is rebuilt).
"""

from __future__ import annotations

import numpy as np

from pipeline.trees._kernel_dispatch import AVAILABLE, SizeDispatch

if AVAILABLE:
    import numba
    from numba import prange

if AVAILABLE:

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


if AVAILABLE:  # each kernel and its serial twin, chosen per call (pipeline.trees._kernel_dispatch)
    partition_rows = SizeDispatch(partition_rows)
    compress_rows = SizeDispatch(compress_rows)
    group_rows = SizeDispatch(group_rows)
    pack_keys = SizeDispatch(pack_keys)
    unpack_keys = SizeDispatch(unpack_keys)
