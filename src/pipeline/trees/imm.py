"""Centre-based explanation trees: IMM, EMN and ExKMC.

* :class:`IMM` — Iterative Mistake Minimization (Moshkovitz, Dasgupta, Rashtchian & Frost,
  ICML 2020). In every node holding >= 2 reference centres choose the coordinate cut
  ``x_j <= t`` with the fewest *mistakes* (points on the other side than their centre) among
  cuts that separate at least two of the node's centres; points cut off from their centre
  leave the construction (as in the published ExKMC implementation); stop when every leaf
  holds exactly one centre. Thresholds are data or centre values, ties go to the smallest
  threshold and then to the lowest feature index (or a seeded feature order).
* :class:`EMN` — Esfandiari, Mirrokni & Narayanan (SODA 2022) as used in the SpEx paper
  (§3.2): the same tree, minimising ``mistakes / min(#centres left, #centres right)``.
* :class:`ExKMC` — Frost, Moshkovitz & Rashtchian (2020): IMM to k leaves, then repeatedly
  split the leaf whose best cut most lowers the surrogate k-means cost
  ``sum_leaves min_c sum_{x in leaf} ||x - c||^2`` over the reference centres.

The per-node sweeps are compiled. No column is sorted in full: the mistakes of every cut
between two value bins follow from per-bin cluster counts, and only the bins whose lower
bound can reach the node's best cut are sorted and scanned (:mod:`pipeline.trees._imm_bins`;
columns that crowd into few bins take the sweep over orders sorted once at the root,
:class:`~pipeline.trees._column_order.ColumnOrder`, :mod:`pipeline.trees._imm_kernels`).
ExKMC's expansion bounds each leaf's columns from per-bin sums and sorts and sweeps only the
columns that can hold its best cut. Small inputs (see :mod:`pipeline.trees._imm_small`) grow
the same trees with one compiled call per tree. ExKMC's surrogate costs round as ExKMC
0.0.3's do, so cuts of equal cost (common on data with repeated values) resolve as in the
published code.
"""

from __future__ import annotations

import logging
import warnings

import numpy as np
import scipy.sparse as sp
from pipeline.progress import tqdm

from pipeline.trees import _bin_kernels, _imm_bins, _imm_kernels as kern, _imm_small
from pipeline.trees._column_order import ColumnOrder, feature_priority, pick_best
from pipeline.trees._kernels import parallel_min_work
from pipeline.trees._fitting import (
    COMMON_CONSTRAINTS, N_LEAVES_CONSTRAINT, NOISE_CONSTRAINT, ReferenceTree, check_n_leaves, check_not_constant,
    check_magnitude_outliers, far_from_origin, power_of_two_scale, rescale_tree,
)
from pipeline.threads import limit_threads
from pipeline.trees.tree import ExplanationTree
from pipeline.validation import InvalidInputError, check_matrix

logger = logging.getLogger(__name__)


def _ties(order: ColumnOrder):
    has = order.tie_ids is not None
    return (order.tie_ids if has else np.empty((0, 0), np.int32)), has


def reference_centers(X, codes, k, centers=None) -> np.ndarray:
    """Centres (k, d): the given ones (validated) or the means of the reference clusters;
    raises if two are identical (no coordinate cut could separate them)."""
    d = X.shape[1]
    if centers is None:
        member = sp.csr_matrix((np.ones(codes.size), (codes, np.arange(codes.size))), shape=(k, codes.size))
        centers = np.asarray(member @ X) / np.bincount(codes, minlength=k)[:, None]
    else:
        centers = check_matrix(centers, "centers")
        if centers.shape[1] != d:
            raise InvalidInputError(f"centers have {centers.shape[1]} columns but X has {d}; they must match.")
        if centers.shape[0] != k:
            raise InvalidInputError(
                f"centers has {centers.shape[0]} rows but the reference clustering has {k} clusters; "
                "row i must be the centre of the i-th smallest cluster label."
            )
    if _has_identical_rows(centers):
        raise InvalidInputError("two reference centres are identical; no coordinate cut can separate them.")
    return centers


def _has_identical_rows(A: np.ndarray) -> bool:
    """Whether two rows of ``A`` are equal (as values: -0.0 == 0.0)."""
    k, d = A.shape
    if k * k * d <= 1 << 16:  # all pairs at once: a few us, against ~25 us for np.unique(axis=0)
        return int((A[:, None, :] == A[None, :, :]).all(axis=2).sum()) > k  # the diagonal holds k
    return np.unique(A, axis=0).shape[0] < k


def grow_centre_tree(X, codes, centers, ratio: bool, priority, sweep, feature_names=None, verbose=False):
    """Grow the IMM (``ratio=False``) or EMN (``ratio=True``) tree with ``sweep`` (sorted:
    :class:`SortedMistakes`, binned: :class:`~pipeline.trees._imm_bins.BinnedMistakes`):
    ``sweep.root()`` is the root's state, ``sweep.sweep(state, members, cset, local, score,
    thr)`` scores every feature of a node, ``sweep.children(state, members, kids)`` gives
    the states of the kids (members, centres) that hold two centres or more.

    Returns (tree, leaf_center) with ``leaf_center[leaf] = centre index``.
    """
    n, d = X.shape
    k = centers.shape[0]
    tree = ExplanationTree(d, feature_names)
    stack = [(0, np.arange(n), sweep.root(), np.arange(k))]
    leaf_center: dict[int, int] = {}
    score = np.empty(d)
    thr = np.empty(d)
    with tqdm(total=k - 1, desc="IMM splits" if not ratio else "EMN splits", disable=not verbose) as bar:
        while stack:
            node, members, state, cset = stack.pop()
            if cset.size == 1:
                leaf_center[node] = int(cset[0])
                continue
            local = np.bincount(codes[members], minlength=k).astype(np.int64)
            sweep.sweep(state, members, cset, local, score, thr)
            j, _, best = pick_best(score, np.zeros(d, dtype=np.int64), priority)
            if j < 0:  # cannot happen for distinct centres; never loop on it
                raise InvalidInputError(f"no coordinate cut separates the centres {cset.tolist()}.")
            t = float(thr[j])
            left, right = tree.split(node, j, t)
            logger.debug("node %d: x[%d] <= %.6g, score %.6g", node, j, t, best)
            c_left = centers[cset, j] <= t
            x_left = X[members, j] <= t
            ok_left = centers[codes[members], j] <= t
            # points on the other side than their centre leave; a kid with one centre is a leaf
            kids = [(members[x_left & ok_left], cset[c_left]), (members[~x_left & ~ok_left], cset[~c_left])]
            states = sweep.children(state, members, kids)
            stack.append((right, kids[1][0], states[1], kids[1][1]))
            stack.append((left, kids[0][0], states[0], kids[0][1]))
            bar.update(1)
    return tree, leaf_center


class SortedMistakes:
    """The mistakes sweep on per-feature orders sorted once at the root
    (:class:`ColumnOrder`), for :func:`grow_centre_tree`. A node's state is (orders, codes):
    its orders may be its parent's, shared, with the points outside the node coded k (the
    sweep skips them); a child is compacted into orders of its own only once it holds less
    than half of the orders' points, so the peel-one-centre-off splits typical of IMM do not
    rewrite nearly all of the orders at every level."""

    def __init__(self, X, codes, centers, ratio: bool, root: ColumnOrder | None = None):
        self.X, self.codes, self.centers, self.ratio = X, codes, centers, ratio
        self.order = ColumnOrder.from_matrix(X) if root is None else root

    def root(self):
        return self.order, self.codes

    def sweep(self, state, members, cset, local, score, thr):
        order, node_codes = state
        ties, has = _ties(order)
        kern.mistakes_sweep(self.X, order.order, ties, has, node_codes, self.centers, cset, local, self.ratio, score,
                            thr)

    def children(self, state, members, kids):
        order, _ = state
        n, k, codes = self.X.shape[0], self.centers.shape[0], self.codes
        side = None
        out: list = [None, None]
        for tag, (kid_members, kid_centres) in enumerate(kids):
            if kid_centres.size < 2:
                continue
            if 2 * kid_members.size >= order.n_points:  # share the orders
                kid_codes = np.full(n, k, dtype=codes.dtype)
                kid_codes[kid_members] = codes[kid_members]
                out[tag] = (order, kid_codes)
            else:
                if side is None:
                    side = np.full(n, -1, dtype=np.int8)
                side[kid_members] = 1 - tag  # partition's side: 1 left, 0 right
        if side is not None:
            for tag, kid_order in enumerate(order.partition(side)):
                if out[tag] is None and kids[tag][1].size >= 2:
                    out[tag] = (kid_order, codes)
        return out


def build_imm_tree(X, codes, centers, ratio: bool, priority, feature_names=None, verbose=False, root=None):
    """The IMM / EMN tree on sorted columns (``root``: the orders of X, if sorted already)."""
    return grow_centre_tree(X, codes, centers, ratio, priority, SortedMistakes(X, codes, centers, ratio, root),
                            feature_names, verbose)


def build_imm_tree_binned(X, codes, centers, ratio: bool, priority, feature_names=None, verbose=False,
                          extremes=None, n_bins: int = _imm_bins.N_BINS):
    """The IMM / EMN tree on binned columns (:class:`~pipeline.trees._imm_bins.BinnedMistakes`:
    ``extremes`` the columns' (min, max) if known, ``n_bins`` 2 to 256); the same tree as
    :func:`build_imm_tree`. None when the columns do not suit equal-width bins."""
    sweep = _imm_bins.BinnedMistakes(X, codes, centers, ratio, extremes, n_bins)
    if not sweep.suited:
        return None
    return grow_centre_tree(X, codes, centers, ratio, priority, sweep, feature_names, verbose)


def grow_imm_tree(X, codes, centers, ratio: bool, priority, feature_names=None, verbose=False, extremes=None):
    """The IMM / EMN tree of the general path: (tree, leaf_center, bins) on binned columns (see
    :func:`build_imm_tree_binned`; ``bins`` the columns' bin indices), or, where the columns do
    not suit equal-width bins, on sorted columns (:func:`build_imm_tree`; ``bins`` None)."""
    sweep = _imm_bins.BinnedMistakes(X, codes, centers, ratio, extremes)
    if not sweep.suited:
        return build_imm_tree(X, codes, centers, ratio, priority, feature_names, verbose) + (None,)
    return grow_centre_tree(X, codes, centers, ratio, priority, sweep, feature_names, verbose) + (sweep.bins,)


def _warn_stopped(reached: int, n_leaves: int, stacklevel: int) -> None:
    warnings.warn(f"ExKMC stopped at {reached} leaves: every leaf is pure or holds identical points, so none "
                  f"can be expanded towards n_leaves={n_leaves}.", stacklevel=stacklevel)


class _CentreTree(ReferenceTree):
    _ratio = False

    _parameter_constraints = {**N_LEAVES_CONSTRAINT, **NOISE_CONSTRAINT, **COMMON_CONSTRAINTS, "verbose": ["verbose"]}

    def __init__(self, n_leaves=None, *, noise_label=None, random_state=None, verbose=False, n_jobs=None):
        self.n_leaves = n_leaves
        self.noise_label = noise_label
        self.random_state = random_state
        self.verbose = verbose
        self.n_jobs = n_jobs

    def _prepare(self, X, y, centers, feature_names):
        X, codes, _, feature_names = self._validate_reference(X, y, feature_names)
        if centers is None:  # (given centres can be separated even on constant data)
            check_not_constant(X)
        classes = self.classes_
        codes = codes.astype(np.int8 if classes.size < 128 else np.int16 if classes.size < 32768 else np.int32)
        return X, codes, classes, centers, feature_names

    def _scaled(self, X, codes, centers, small: bool, extremes=None):
        """(X, centres, scale, extremes) for the power-of-two scale of
        :func:`power_of_two_scale`. On the general path (not ``small``) the columns' (min,
        max), given or found in one pass, give ``max |X|`` and come back (scaled with X) for
        the binned sweep; on small inputs extremes is None."""
        if small:
            scale = power_of_two_scale(X)
        else:
            lo, hi = extremes if extremes is not None else _bin_kernels.column_range(X)
            scale = power_of_two_scale(np.stack([lo, hi]))
        if scale != 1.0:
            X = X / scale
            centers = None if centers is None else check_matrix(centers, "centers") / scale
        if not small:  # division by a power of two is monotone: the extremes of X / scale
            extremes = (lo, hi) if scale == 1.0 else (lo / scale, hi / scale)
        centers = reference_centers(X, codes, self.classes_.size, centers)
        self.centers_ = centers * scale
        return X, centers, scale, None if small else extremes

    def _label(self, tree, leaf_center, scale, shift=None):
        labels = self._leaf_labels()
        for leaf, c in leaf_center.items():
            tree.set_label(leaf, labels[c])
        self.tree_ = rescale_tree(self._name_leaves(tree), scale, shift)
        self.n_leaves_ = tree.n_leaves
        return self

    def fit(self, X, y, feature_names=None, centers=None):
        """Fit to X (n_samples, n_features) and reference labels y.

        Rows labelled ``noise_label`` are left out. ``centers`` (k, n_features): row i is the
        centre of the i-th class in ``classes_`` (sorted labels); default: the means of the
        reference clusters.
        """
        X, codes, classes, centers, feature_names = self._prepare(X, y, centers, feature_names)
        X_fit = X
        k = classes.size
        n_leaves = check_n_leaves(self.n_leaves, k, X.shape[0], at_least=k,
                                  why=" (the number of reference clusters)")
        if n_leaves != k:
            raise InvalidInputError(
                f"{type(self).__name__} grows exactly one leaf per centre ({k}); got n_leaves={n_leaves}. "
                "Use ExKMC for more leaves."
            )
        priority = feature_priority(X.shape[1], self.random_state)
        with limit_threads(self.n_jobs, work=X.size):
            small = self._is_small(X)
            X, centers, scale, extremes = self._scaled(X, codes, centers, small)
            if small:
                tree, leaf_center, _ = _imm_small.build_imm_tree_small(X, codes, centers, self._ratio, priority,
                                                                       feature_names)
            else:
                tree, leaf_center, _ = grow_imm_tree(X, codes, centers, self._ratio, priority, feature_names,
                                                     self.verbose, extremes)
        return self._label(tree, leaf_center, scale)._keep_exact(X_fit)

    def _is_small(self, X) -> bool:
        """Grow the tree with :mod:`pipeline.trees._imm_small` (small input, no progress bar)."""
        return X.size < parallel_min_work() and not self.verbose


class IMM(_CentreTree):
    """Iterative Mistake Minimization tree with one leaf per reference centre.

    A scikit-learn classifier: ``predict`` returns the reference labels, ``score`` accuracy.

    Parameters
    ----------
    n_leaves : int, optional
        Must equal the number of reference clusters (the default).
    noise_label : int, str or None, default=None
        Rows of ``y`` with this label are left out of fitting.
    random_state : int, RandomState or None
        Seeds the feature order used to break exact ties between features.
    verbose : bool
        Show a progress bar.
    n_jobs : int or None
        Threads for the compiled sweeps (scikit-learn convention).

    Attributes
    ----------
    tree_ : ExplanationTree
    classes_ : ndarray (k,) — reference labels; centers_ : ndarray (k, n_features).
    """

    title = "IMM"  # its display name (figure titles, rules files)
    fit_protocol = "centers"  # what its fit takes: the protocol the pipeline feeds it by


class EMN(_CentreTree):
    """EMN tree: IMM with the cut score ``mistakes / min(#centres left, #centres right)``.

    Parameters are those of :class:`IMM`.
    """

    title = "EMN"  # its display name (figure titles, rules files)
    fit_protocol = "centers"  # what its fit takes: the protocol the pipeline feeds it by

    _ratio = True


class ExKMC(_CentreTree):
    """ExKMC: IMM to k leaves, then expand to ``n_leaves`` by the surrogate k-means cost.

    Parameters
    ----------
    n_leaves : int, optional
        Total number of leaves (>= number of reference clusters; default: equal to it).
    noise_label, random_state, verbose, n_jobs : see :class:`IMM`.

    Notes
    -----
    As in the published ExKMC, a leaf whose points all belong to its centre's cluster is not
    expanded; if no leaf can be expanded the tree stops early with a warning
    (``n_leaves_`` < ``n_leaves``).
    """

    title = "ExKMC"  # its display name (figure titles, rules files)
    fit_protocol = "centers"  # what its fit takes: the protocol the pipeline feeds it by

    def fit(self, X, y, feature_names=None, centers=None):
        """Fit to X (n_samples, n_features) and reference labels y; see :meth:`IMM.fit`."""
        X, codes, classes, centers, feature_names = self._prepare(X, y, centers, feature_names)
        X_fit = X
        extremes = _bin_kernels.column_range(X)  # one pass for the checks below and the binned sweep
        check_magnitude_outliers(X, "ExKMC", "one such point drags its cluster's centre and dominates the "
                                 "k-means cost that grows the extra leaves", extremes=extremes)
        k = classes.size
        n_leaves = check_n_leaves(self.n_leaves, k, X.shape[0], at_least=k,
                                  why=" (the number of reference clusters)")
        priority = feature_priority(X.shape[1], self.random_state)
        X, centers, shift = far_from_origin(X, centers, extremes)
        with limit_threads(self.n_jobs, work=X.size * k):  # the expansion's product X @ centers.T
            small = self._is_small(X)
            known = extremes if shift is None else None  # a shifted X has other extremes
            X, centers, scale, extremes = self._scaled(X, codes, centers, small, known)
            if small:
                tree, leaf_center, leaf_of = _imm_small.build_imm_tree_small(X, codes, centers, False, priority,
                                                                             feature_names)
                if n_leaves > k and not _imm_small.expand_small(X, codes, centers, tree, leaf_center, leaf_of,
                                                                n_leaves, priority):
                    _warn_stopped(tree.n_leaves, n_leaves, stacklevel=3)
            else:
                tree, leaf_center, bins = grow_imm_tree(X, codes, centers, False, priority, feature_names,
                                                        self.verbose, extremes)
                if n_leaves > k:
                    self._expand(X, codes, centers, tree, leaf_center, n_leaves, priority, bins)
        self._label(tree, leaf_center, scale, shift)._keep_exact(X_fit)
        if shift is not None:
            self.centers_ = self.centers_ + shift
        return self

    def _expand(self, X, codes, centers, tree, leaf_center, n_leaves, priority, bins=None):
        n, d = X.shape
        xc = X @ centers.T  # the products (and |c|^2 below) as ExKMC 0.0.3 computes them: see surrogate_sweep
        c_norm2 = np.linalg.norm(centers, axis=1) ** 2
        leaf_of = tree._apply(X)  # X validated by fit: no second NaN scan
        leaf_ids = np.asarray(tree.leaves)
        index = np.zeros(tree.n_nodes, dtype=np.int64)
        index[leaf_ids] = np.arange(leaf_ids.size)
        group = index[leaf_of]
        # Renumber the points leaf by leaf (ids ascending within a leaf, so every sum keeps its
        # order): the rows of a leaf, and later of its children, are one block of the sweep's
        # table, a cache-sized one. ``perm[new id]`` is the row of X. A leaf's columns are
        # sorted only when its split is needed, and with ``bins`` (the columns' bin indices)
        # only the columns whose bound can reach its best cut (see _best_surrogate_split).
        perm = np.argsort(group, kind="stable")
        xc, codes = xc[perm], codes[perm]
        table = kern.sweep_table(xc, c_norm2)
        ends = np.cumsum(np.bincount(group, minlength=leaf_ids.size))
        leaves = {int(leaf): {"rows": np.arange(end - size, end)}
                  for leaf, end, size in zip(leaf_ids, ends, np.diff(ends, prepend=0))}
        for _ in tqdm(range(n_leaves - tree.n_leaves), desc="ExKMC expansion", disable=not self.verbose):
            # The leaf with the least gain (first in line on ties) is split. A leaf's split is
            # found only when a lower bound of its gain (two_centre_floor) makes it a contender:
            # a leaf whose bound is the least is evaluated and the choice made again, so the
            # choice is the one evaluating every leaf would make.
            while True:
                best_leaf, best_key = None, None
                for leaf, info in leaves.items():
                    if "split" in info:
                        key = None if info["split"] is None else info["split"][0]
                    else:
                        if "bound" not in info:
                            info["sums"] = self._leaf_sums(codes, info["rows"], leaf_center[leaf], xc, c_norm2)
                            info["bound"] = self._surrogate_bound(info["sums"], table, c_norm2)
                        key = info["bound"]
                    if key is not None and (best_key is None or key < best_key):
                        best_leaf, best_key = leaf, key
                if best_leaf is None or "split" in leaves[best_leaf]:
                    break
                info = leaves[best_leaf]
                info["split"] = self._best_surrogate_split(X, perm, bins, info["sums"], table, c_norm2, priority)
            if best_leaf is None:
                _warn_stopped(tree.n_leaves, n_leaves, stacklevel=4)
                break
            _, j, t, c_left, c_right = leaves[best_leaf]["split"]
            rows = leaves.pop(best_leaf)["rows"]
            left, right = tree.split(best_leaf, j, t)
            go_left = X[perm[rows], j] <= t
            del leaf_center[best_leaf]
            leaf_center[left], leaf_center[right] = c_left, c_right
            leaves[left], leaves[right] = {"rows": rows[go_left]}, {"rows": rows[~go_left]}

    @staticmethod
    def _leaf_sums(codes, rows, center, xc, c_norm2):
        """(rows, their sum of ``xc``, the leaf's cost now) of a leaf (``rows``: its ids,
        ascending), or None if it cannot be split (fewer than 2 points, or only its centre's
        cluster). The rows are summed in index order, as ExKMC 0.0.3 sums the leaf total."""
        if rows.size < 2 or np.all(codes[rows] == center):
            return None
        total = xc[rows].sum(axis=0)
        return rows, total, np.min(rows.size * c_norm2 - 2.0 * total)

    @staticmethod
    def _surrogate_bound(sums, table, c_norm2):
        """A lower bound of the gain of a leaf's best cut (None if the leaf cannot be split):
        the least cost with two centres for all its points, less the rounding margin, minus
        its cost now. ``sums`` from :meth:`_leaf_sums`."""
        if sums is None:
            return None
        rows, _, before = sums
        least, margin = kern.two_centre_floor(table, rows, c_norm2)
        return least - margin - before

    @staticmethod
    def _best_surrogate_split(X, perm, bins, sums, table, c_norm2, priority):
        """(gain, feature, threshold, centre_left, centre_right) of a leaf's best cut, or None.

        ``table`` follows the renumbered points (``perm[new id]`` is the row of X); ``sums``
        from :meth:`_leaf_sums` (None: the leaf cannot be split). With ``bins`` (the columns'
        bin indices, (d, n) by row of X) only the columns whose lower bound from per-bin sums
        (:func:`~pipeline.trees._imm_kernels.surrogate_bin_bounds`) can reach the best cut
        between bins, plus a margin far above rounding, are sorted and swept; every cut of
        the others costs more than that real cut, so they can neither win nor tie.

        The costs are summed in the order ExKMC 0.0.3 sums them (rows in index order for the
        leaf total; along numpy's default ``argsort`` of each column, which only differs from
        any other sort where values repeat), so a near-tie between cuts (several cuts of zero
        gain, common on data with repeated values such as iris) resolves as it does there.
        """
        if sums is None:
            return None
        rows, total, before = sums
        xrow = perm[rows]
        d = X.shape[1]
        cols = np.arange(d)
        if bins is not None:
            lower, upper = np.empty(d), np.empty(d)
            kern.surrogate_bin_bounds(bins, xrow, rows, table, c_norm2, lower, upper)
            margin = 4e-9 * (rows.size * c_norm2.max() + 2.0 * np.abs(table[rows, :c_norm2.size]).sum() + 1.0)
            cols = np.flatnonzero(lower <= upper.min() + margin)
        srt, ties = _reference_order(X, xrow, cols)
        order = rows[srt]
        m = cols.size
        cost, pos = np.full(d, np.inf), np.zeros(d, dtype=np.int64)
        c_cost, c_pos = np.empty(m), np.empty(m, dtype=np.int64)
        c_left, c_right = np.empty(m, dtype=np.int64), np.empty(m, dtype=np.int64)
        kern.surrogate_sweep(order, ties, True, table, c_norm2, total, c_cost, c_pos, c_left, c_right)
        cost[cols], pos[cols] = c_cost, c_pos
        j, p, best = pick_best(cost, pos, priority)
        if j < 0:
            return None
        i = int(np.searchsorted(cols, j))
        return best - before, j, X[perm[order[i, p]], j], int(c_left[i]), int(c_right[i])


def _reference_order(X, rows, cols):
    """Orders (indices into ``rows``) of the points ``rows`` along the columns ``cols`` as
    ExKMC 0.0.3 sorts them: numpy's default (not stable) ``argsort`` of each column, and their
    tie ids.

    Only the order within runs of equal values differs from the stable order; it decides how
    the running sums of tied points round, hence which of several equal-cost cuts wins.
    """
    XT = np.ascontiguousarray(X[np.ix_(rows, cols)].T)
    srt = np.argsort(XT, axis=1)
    values = np.take_along_axis(XT, srt, axis=1)
    tie_ids = np.zeros(XT.shape, dtype=np.int32)
    np.cumsum(values[:, 1:] != values[:, :-1], axis=1, out=tie_ids[:, 1:])
    return srt, tie_ids
