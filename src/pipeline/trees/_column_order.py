"""Per-feature sorted orders of a point set, computed once and inherited by children.

Every sweep-line tree algorithm (SpEx, IMM, EMN, ExKMC) scans, in each node and for each
feature, the node's points in increasing order of that feature. Instead of re-sorting in
every node, :class:`ColumnOrder` sorts each column once at the root and derives a child's
orders by *stable filtering* (a subsequence of a sorted sequence is sorted), which costs one
gather + compress per child instead of ``d`` sorts.

The root sort packs an order-preserving integer image of each float64 value together with
its row index into one int64 and sorts those integers (numpy's SIMD integer sort is ~3x
faster than ``argsort`` here). The few columns where two *different* values share the
truncated key are re-sorted exactly; equal values keep row-index order, so the result is the
stable argsort of every column.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np

from pipeline.trees import _kernels

_BLOCK_ELEMENTS = 1 << 20  # work on ~1M-element column blocks (cache + memory friendly)
_SMALL_ELEMENTS = 1 << 16  # up to this many values a plain argsort beats key packing and threads


def _n_threads() -> int:
    """Threads the compiled kernels may use now (numba's current setting)."""
    try:
        import numba

        return int(numba.get_num_threads())
    except ImportError:  # pragma: no cover
        return 1


def _tie_ids(ties: np.ndarray) -> np.ndarray | None:
    """Dense value ranks along each sorted row from "equal to the next value" flags, or None."""
    if not ties.any():
        return None
    tie_ids = np.zeros((ties.shape[0], ties.shape[1] + 1), dtype=np.int32)
    np.cumsum(~ties, axis=1, out=tie_ids[:, 1:])
    return tie_ids


def column_block_size(n_rows: int) -> int:
    """Number of columns to process at once so that a block holds about 1M elements."""
    return max(1, _BLOCK_ELEMENTS // max(int(n_rows), 1))


def _sort_block(XT: np.ndarray, idx_bits: int) -> tuple[np.ndarray, np.ndarray]:
    """Stable argsort of each row of ``XT`` (B, n) -> (order int32 (B, n), equal-next bool (B, n-1))."""
    n = XT.shape[1]
    i = XT.view(np.int64)
    key = i ^ ((i >> 63) & np.int64(0x7FFF_FFFF_FFFF_FFFF))  # float order == signed-int order
    low = np.int64((1 << idx_bits) - 1)
    key &= ~low
    key |= np.arange(n, dtype=np.int64)
    key.sort(axis=1)
    order = (key & low).astype(np.int32)
    same_key = (key[:, 1:] >> idx_bits) == (key[:, :-1] >> idx_bits)
    equal_next = np.zeros_like(same_key)
    rows, cols = np.nonzero(same_key)
    if rows.size:
        a = XT[rows, order[rows, cols]]
        b = XT[rows, order[rows, cols + 1]]
        equal_next[rows, cols] = a == b
        collided = np.unique(rows[a != b])
        for r in collided:  # truncated keys collided for different values: sort this column exactly
            order[r] = np.argsort(XT[r], kind="stable")
            v = XT[r, order[r]]
            equal_next[r] = v[1:] == v[:-1]
    return order, equal_next


def _finish_keys(X, start, keys, idx_bits, order, ties) -> None:
    """Row ids and tie flags of sorted packed keys of columns start:start+len(keys); columns
    where different values collided in the truncated key are re-sorted exactly."""
    stop = start + keys.shape[0]
    same_key = np.empty((stop - start, max(X.shape[0] - 1, 0)), dtype=bool)
    if _kernels.unpack_keys(keys, idx_bits, order[start:stop], same_key) == 0:
        return
    rows, cols = np.nonzero(same_key)
    if rows.size:
        rows += start
        a = X[order[rows, cols], rows] + 0.0
        b = X[order[rows, cols + 1], rows] + 0.0
        ties[rows, cols] = a == b
        for r in np.unique(rows[a != b]):  # different values sharing a truncated key: exact sort
            col = X[:, r] + 0.0
            order[r] = np.argsort(col, kind="stable")
            v = col[order[r]]
            ties[r] = v[1:] == v[:-1]


class ColumnOrder:
    """Sorted orders of the points of one tree node, one row per feature.

    Parameters
    ----------
    order : ndarray of shape (n_features, n_points), uint16 (n_samples <= 65536) or int32
        ``order[j]`` lists the node's (global) row ids in increasing order of feature ``j``
        (ties by row id).
    tie_ids : ndarray of shape (n_features, n_points), int32, or None
        Dense rank of the value at each sorted position; None when no column has ties.
    """

    def __init__(self, order: np.ndarray, tie_ids: np.ndarray | None = None):
        self.order = order
        self.tie_ids = tie_ids

    @classmethod
    def from_matrix(cls, X: np.ndarray) -> "ColumnOrder":
        """Sort every column of ``X`` (n_samples, n_features); rows are the global point ids.

        Uses as many threads as the current numba setting (see
        :func:`pipeline.threads.limit_threads`); small matrices are sorted in one
        ``argsort`` call without any thread pool.
        """
        n, d = X.shape
        # uint16 row ids when they fit: halves the memory traffic of every later pass
        id_dtype = np.uint16 if n <= 1 << 16 else np.int32
        if n * d <= _SMALL_ELEMENTS:
            return cls._from_small_matrix(X, id_dtype)
        bits = max(1, int(n - 1).bit_length())
        order = np.empty((d, n), dtype=id_dtype)
        ties = np.zeros((d, max(n - 1, 0)), dtype=bool)
        step = column_block_size(n)

        X = np.ascontiguousarray(X, dtype=np.float64)
        starts = list(range(0, d, step))
        n_threads = min(2, _n_threads(), len(starts))
        pool = ThreadPoolExecutor(max_workers=n_threads) if n_threads > 1 else None
        run = pool.map if pool is not None else map  # numpy's sort releases the GIL
        try:
            if not _kernels.AVAILABLE:
                def work(s: int) -> None:
                    block = np.ascontiguousarray(X[:, s:s + step].T)
                    block += 0.0  # turns -0.0 into 0.0
                    order[s:s + step], ties[s:s + step] = _sort_block(block, bits)

                list(run(work, starts))
            else:  # compiled kernels run from this thread only (numba's workqueue layer is not thread-safe)
                # one key buffer per thread, reused block after block (fresh pages per block cost
                # a fifth of the sort)
                buffers = [np.empty((min(step, d), n), np.int64) for _ in range(n_threads)]
                for i in range(0, len(starts), len(buffers)):  # a cache-sized block per thread at a time
                    group = starts[i:i + len(buffers)]
                    keys = [buf[:min(s + step, d) - s] for s, buf in zip(group, buffers)]
                    for s, k in zip(group, keys):
                        _kernels.pack_keys(X.view(np.int64), s, s + k.shape[0], bits, k)
                    list(run(lambda k: k.sort(axis=1), keys))
                    for s, k in zip(group, keys):
                        _finish_keys(X, s, k, bits, order, ties)
        finally:
            if pool is not None:
                pool.shutdown()
        return cls(order, _tie_ids(ties))

    @classmethod
    def _from_small_matrix(cls, X: np.ndarray, id_dtype) -> "ColumnOrder":
        """``from_matrix`` for small inputs: one stable argsort, no packing, no threads."""
        XT = np.array(X.T, dtype=np.float64)
        XT += 0.0  # -0.0 sorts with 0.0 (as in the packed keys)
        order = np.argsort(XT, axis=1, kind="stable")
        v = np.take_along_axis(XT, order, axis=1)
        return cls(order.astype(id_dtype), _tie_ids(v[:, 1:] == v[:, :-1]))

    @property
    def n_features(self) -> int:
        return self.order.shape[0]

    @property
    def n_points(self) -> int:
        return self.order.shape[1]

    @property
    def members(self) -> np.ndarray:
        """Sorted global row ids of the node, shape (n_points,)."""
        return np.sort(self.order[0])

    def valid_cuts(self, start: int, stop: int) -> np.ndarray | None:
        """Bool (stop-start, n_points-1): True where a cut after position p separates values.

        None means every position is valid (no ties anywhere).
        """
        if self.tie_ids is None:
            return None
        t = self.tie_ids[start:stop]
        return t[:, 1:] != t[:, :-1]

    def filter(self, keep: np.ndarray) -> "ColumnOrder":
        """Orders of the subset ``keep`` (bool over all global rows), by stable filtering."""
        m = self.order.shape[0]
        mask = keep[self.order]
        order = self.order[mask].reshape(m, -1)
        tie_ids = None if self.tie_ids is None else self.tie_ids[mask].reshape(m, -1)
        return ColumnOrder(order, tie_ids)

    def groups(self, group: np.ndarray, n_groups: int, relabel: np.ndarray | None = None) -> list["ColumnOrder"]:
        """Orders of every group at once (``group``: int over all global rows, 0..n_groups-1
        for the node's points), one pass over the node instead of one filter per group.
        ``relabel`` (over global rows) renames the points in the result."""
        sizes = np.bincount(group[self.order[0]], minlength=n_groups)
        if not _kernels.AVAILABLE:
            out = [self.filter(group == g) for g in range(n_groups)]
            return out if relabel is None else [ColumnOrder(relabel[o.order].astype(o.order.dtype), o.tie_ids)
                                                 for o in out]
        offsets = np.zeros(n_groups + 1, dtype=np.int64)
        np.cumsum(sizes, out=offsets[1:])
        has_ties = self.tie_ids is not None
        ties = self.tie_ids if has_ties else np.empty((0, 0), np.int32)
        rename = np.empty(0, self.order.dtype) if relabel is None else relabel.astype(self.order.dtype, copy=False)
        out, t_out = _kernels.group_rows(self.order, ties, has_ties, group.astype(np.int64, copy=False), offsets,
                                         rename)
        d = self.order.shape[0]
        blocks = [(a * d, b * d, b - a) for a, b in zip(offsets[:-1], offsets[1:])]
        return [ColumnOrder(out[s:e].reshape(d, m), t_out[s:e].reshape(d, m) if has_ties else None)
                for s, e, m in blocks]

    def split(self, feature: int, position: int, n_total: int) -> tuple["ColumnOrder", "ColumnOrder"]:
        """Children for the cut after sorted ``position`` of ``feature``: (left, right)."""
        side = np.full(n_total, -1, dtype=np.int8)
        side[self.order[feature, :position + 1]] = 1
        side[self.order[feature, position + 1:]] = 0
        return self.partition(side)

    def partition(self, side: np.ndarray) -> tuple["ColumnOrder", "ColumnOrder"]:
        """Stable split by ``side`` (int8 over global rows: 1 left, 0 right, -1 dropped)."""
        member_side = side[self.order[0]]
        n_left, n_right = int(np.sum(member_side == 1)), int(np.sum(member_side == 0))
        if _kernels.AVAILABLE:
            has_ties = self.tie_ids is not None
            ties = self.tie_ids if has_ties else np.empty((0, 0), np.int32)
            if n_left == 0 or n_right == 0:  # one child only (e.g. IMM's other child is a leaf)
                value, n_keep = (1, n_left) if n_right == 0 else (0, n_right)
                out, t_out = _kernels.compress_rows(self.order, ties, has_ties, side, value, n_keep)
                kept = ColumnOrder(out, t_out if has_ties else None)
                empty = ColumnOrder(out[:, :0], t_out[:, :0] if has_ties else None)
                return (kept, empty) if n_right == 0 else (empty, kept)
            lo, ro, lt, rt = _kernels.partition_rows(self.order, ties, has_ties, side, n_left, n_right)
            return ColumnOrder(lo, lt if has_ties else None), ColumnOrder(ro, rt if has_ties else None)
        return self.filter(side == 1), self.filter(side == 0)


def pick_best(col_scores: np.ndarray, col_pos: np.ndarray, priority: np.ndarray) -> tuple[int, int, float]:
    """Among per-feature best cuts choose the minimum score; ties go to the lowest ``priority``.

    Returns (feature, position, score); feature is -1 when no feature has a finite score.
    """
    best = col_scores.min() if col_scores.size else np.inf
    if not np.isfinite(best):
        return -1, -1, np.inf
    tied = np.flatnonzero(col_scores == best)
    j = int(tied[np.argmin(priority[tied])])
    return j, int(col_pos[j]), float(best)


def feature_priority(n_features: int, random_state) -> np.ndarray:
    """Tie-breaking rank of each feature: identity for None, a seeded permutation otherwise."""
    if random_state is None:
        return np.arange(n_features)
    from sklearn.utils import check_random_state

    return check_random_state(random_state).permutation(n_features)
