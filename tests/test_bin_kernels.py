"""SpEx-Clique's binned sweep kernels against plain numpy and brute force: binning, counts,
splits, leaf routing, and a node's best cut and lower bound from the two-level scan."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from pipeline.trees import SpExClique, _kernels
from pipeline.trees._spex_sweeps import BinnedColumns, BinnedNode, SweepSettings

pytestmark = pytest.mark.skipif(not _kernels.AVAILABLE, reason="numba is not installed")

if _kernels.AVAILABLE:
    from pipeline.trees import _bin_kernels


def data(draw, max_n=40, max_d=5, max_k=4):
    """Small X with ties (a few integer levels or normal values), codes, and a node."""
    n = draw(st.integers(2, max_n))
    d = draw(st.integers(1, max_d))
    k = min(n, draw(st.integers(2, max_k)))
    seed = draw(st.integers(0, 2**31))
    rng = np.random.default_rng(seed)
    X = rng.integers(0, draw(st.integers(1, 9)), size=(n, d)).astype(float) if draw(st.booleans()) \
        else rng.normal(size=(n, d))
    codes = rng.integers(0, k, size=n)
    codes[:k] = np.arange(k)  # every cluster present
    members = np.flatnonzero(rng.random(n) < draw(st.floats(0.2, 1.0)))
    return X, codes.astype(np.int8), members, rng


def column_scales(X, n_bins):
    """Each column's minimum and the scale that maps its range onto [0, n_bins]."""
    lo, hi, _ = _bin_kernels.column_range_finite(X)
    return lo, _bin_kernels.range_scales(lo, hi, n_bins)


def plain_bins(X, lo, scale, n_bins):
    """The binning formula row by row in Python (floor of the scaled offset, capped)."""
    out = np.empty(X.T.shape, np.uint8)
    for i in range(X.shape[0]):
        for j in range(X.shape[1]):
            out[j, i] = min(int((X[i, j] - lo[j]) * scale[j]), n_bins - 1)
    return out


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 40), d=st.integers(1, 19), n_bins=st.integers(2, 256), seed=st.integers(0, 2**31),
       f32=st.booleans(), fortran=st.booleans())
def test_bin_columns_equals_formula(n, d, n_bins, seed, f32, fortran):
    """Tiles of 8 rows transposed in words: every shape (n and d not multiples of 8 too)."""
    X = np.random.default_rng(seed).normal(size=(n, d)).astype(np.float32 if f32 else np.float64)
    X[::3] = np.round(X[::3])
    lo, scale = column_scales(X.astype(np.float64), n_bins)
    ref = plain_bins(X, lo, scale, n_bins)
    X = np.asfortranarray(X) if fortran else X
    for kernel in (_bin_kernels.bin_columns.serial, _bin_kernels.bin_columns.parallel):
        bins, low, high, finite = kernel(X, lo, scale, n_bins, True)
        np.testing.assert_array_equal(bins, ref)
        np.testing.assert_array_equal(low, X.min(axis=0))
        np.testing.assert_array_equal(high, X.max(axis=0))
        assert finite
        np.testing.assert_array_equal(kernel(X, lo, scale, n_bins, False)[0], ref)
        # a narrower range (as from a sample of the rows): values outside go to the end bins
        narrow = plain_bins(np.clip(X, -0.5, 0.5), np.full(d, -0.5), np.full(d, n_bins / 1.0), n_bins)
        np.testing.assert_array_equal(kernel(X, np.full(d, -0.5), np.full(d, n_bins / 1.0), n_bins, False)[0], narrow)
        Xb = np.array(X, dtype=np.float64)
        Xb[n // 2, d // 2] = np.inf if seed % 2 else np.nan
        assert not kernel(Xb, lo, scale, n_bins, True)[3]


@settings(max_examples=60, deadline=None)
@given(case=st.data(), n_bins=st.integers(2, 12), block=st.integers(1, 6))
def test_bin_counts_and_block_counts_equal_numpy(case, n_bins, block):
    X, codes, members, _ = data(case.draw)
    lo, scale = column_scales(X, n_bins)
    bins = _bin_kernels.bin_columns(X, lo, scale, n_bins, False)[0]
    d, k = X.shape[1], int(codes.max()) + 1
    n_blocks = -(-n_bins // block)
    cl = codes[members].astype(np.int64)
    expected = np.zeros((d, k, n_bins), np.int32)
    for j in range(d):
        np.add.at(expected[j], (cl, bins[j, members]), 1)
    padded = np.zeros((d, k, n_blocks * block), np.int64)
    padded[:, :, :n_bins] = expected
    expected_blocks = np.concatenate([np.zeros((d, k, 1), np.int64),
                                      np.cumsum(padded.reshape(d, k, n_blocks, block).sum(3), axis=2)], axis=2)
    none = np.empty((0, 0, 0), np.int32)
    for kernel in (_bin_kernels.bin_counts.serial, _bin_kernels.bin_counts.parallel):
        H = np.full((d, k, n_bins), 7, np.int32)
        Hb = np.full((d, k, n_blocks + 1), 7, np.int32)
        kernel(bins, members.astype(np.int64), cl, H, block, Hb, none, none)
        np.testing.assert_array_equal(H, expected)
        np.testing.assert_array_equal(Hb, expected_blocks)
        # the whole data's counts less these rows' are the other rows' (the larger child's)
        rest = np.setdiff1d(np.arange(X.shape[0]), members)
        H_all = np.empty_like(H)
        Hb_all = np.empty_like(Hb)
        H_rest = np.empty_like(H)
        Hb_rest = np.empty_like(Hb)
        kernel(bins, np.arange(X.shape[0]), codes.astype(np.int64), H_all, block, Hb_all, none, none)
        kernel(bins, rest, codes[rest].astype(np.int64), H_rest, block, Hb_rest, none, none)
        kernel(bins, members.astype(np.int64), cl, H, block, Hb, H_all, Hb_all)
        np.testing.assert_array_equal(H_all, H_rest)
        np.testing.assert_array_equal(Hb_all, Hb_rest)


@settings(max_examples=60, deadline=None)
@given(case=st.data(), n_bins=st.integers(2, 12))
def test_split_members_equals_value_test(case, n_bins):
    """Bins decide outside the threshold's bin, values inside it: the same sides as x <= t."""
    X, _, members, rng = data(case.draw)
    lo, scale = column_scales(X, n_bins)
    bins = _bin_kernels.bin_columns(X, lo, scale, n_bins, False)[0]
    j = int(rng.integers(X.shape[1]))
    members = members.astype(np.int64)
    for t in np.unique(X[:, j]):
        left, right = _bin_kernels.split_members(bins[j], X, j, members, lo[j], scale[j], n_bins, t)
        np.testing.assert_array_equal(left, members[X[members, j] <= t])
        np.testing.assert_array_equal(right, members[X[members, j] > t])


def brute_cuts(X, codes, members, g):
    """Every cut of the node: (score, feature, sorted position) from per-cluster counts."""
    deg = g - 1
    local = np.bincount(codes[members], minlength=g.size)
    vol_v = local @ deg
    cuts = []
    for j in range(X.shape[1]):
        order = members[np.argsort(X[members, j], kind="stable")]
        s = np.zeros(g.size, np.int64)
        for p in range(order.size - 1):
            s[codes[order[p]]] += 1
            if X[order[p], j] == X[order[p + 1], j]:
                continue
            r = local - s
            cut_s, vol_s, cut_r = s @ (g - s), s @ deg, r @ (g - r)
            vol_r = vol_v - vol_s
            cuts.append(((cut_s / vol_s if vol_s > 0 else 0.0) + (cut_r / vol_r if vol_r > 0 else 0.0), j, p))
    return cuts


@pytest.mark.slow
@settings(max_examples=100, deadline=None)
@given(case=st.data(), n_bins=st.integers(2, 9), block=st.integers(1, 4))
def test_binned_node_best_cut_and_bound_match_brute_force(case, n_bins, block):
    """A node's best cut (lowest score, then lowest position, then lowest feature) equals the
    brute force over every cut, and its lower bound from the block scan is at most that."""
    X, codes, members, _ = data(case.draw)
    g = np.bincount(codes).astype(np.int64)
    sweep = SweepSettings(bins_min_points=0, clique_bins=n_bins, scan_block=block)
    binned = BinnedColumns(X, codes, g, np.arange(X.shape[1]), 4, sweep)
    node = BinnedNode(members.astype(np.int64))
    node.hist = binned.histograms(node.members)
    cuts = brute_cuts(X, codes, members, g)
    psi, lb = binned.bound(node)
    j, p, score, psi_cut = binned.best_cut(node)
    assert psi == psi_cut
    if not cuts:
        assert j == -1
        return
    best = min(cuts, key=lambda c: (c[0], c[1], c[2]))
    tied = [c for c in cuts if c[0] == best[0]]
    first = min(tied, key=lambda c: (c[1], c[2]))  # feature priority = index, then position
    assert (j, p) == (first[1], first[2]) and score == first[0]
    assert lb <= score


@settings(max_examples=40, deadline=None)
@given(case=st.data(), n_bins=st.integers(2, 9), n_leaves=st.integers(2, 6))
def test_binned_apply_equals_tree_apply(case, n_bins, n_leaves):
    X, codes, _, _ = data(case.draw)
    if n_leaves > np.unique(X, axis=0).shape[0]:
        return
    sweep = SweepSettings(bins_min_points=0, clique_bins=n_bins, scan_block=2)
    est = SpExClique(n_leaves=n_leaves, sweep=sweep).fit(X, codes)
    binned = BinnedColumns(X, codes, np.bincount(codes).astype(np.int64), np.arange(X.shape[1]), n_leaves, sweep)
    np.testing.assert_array_equal(binned.apply(est.tree_), est.tree_._apply(X))


@pytest.mark.parametrize("bad", [np.nan, np.inf])
@pytest.mark.parametrize("n", [200, 5000])
def test_spex_clique_nonfinite_x_gets_scikit_learns_error(bad, n):
    """The binned sweep's range pass (n >= 4096) checks X's values instead of a separate pass:
    the same error as on small data, also for a bad value in a noise row (dropped later)."""
    from sklearn.datasets import make_blobs
    from sklearn.utils import assert_all_finite

    X, y = make_blobs(n, 4, centers=3, random_state=0)
    for row, noise in ((n // 2, None), (0, -1)):
        Xb, yb = X.copy(), y.copy()
        Xb[row, 2] = bad
        if noise is not None:
            yb[row] = noise
        with pytest.raises(ValueError) as expected:
            assert_all_finite(Xb, allow_nan=False, estimator_name="SpExClique", input_name="X")
        with pytest.raises(ValueError) as got:
            SpExClique(noise_label=noise).fit(Xb, yb)
        assert str(got.value) == str(expected.value)


def test_range_from_a_sample_rebins_what_it_missed():
    """The bins' range comes from every (n // range_rows)-th row. A column that the sample sees
    as constant (spread only in the other rows) crowds its bins: it is binned again on its
    whole range, and the tree is the sorted sweep's either way."""
    from sklearn.datasets import make_blobs

    X, y = make_blobs(5000, 6, centers=4, cluster_std=2.0, random_state=3)
    X[::50, 0] = 0.0  # the sampled rows' values of column 0: all zero
    sweep = SweepSettings(bins_min_points=0, range_rows=100)
    binned = BinnedColumns(X, y.astype(np.int8), np.bincount(y), np.arange(6), 4, sweep)
    assert binned.suited and np.unique(binned.bins[0]).size > 100  # binned on the whole range
    tree = SpExClique(sweep=sweep).fit(X, y).tree_
    sorted_tree = SpExClique(sweep=SweepSettings(bins_min_points=10**9)).fit(X, y).tree_
    np.testing.assert_array_equal(tree.feature, sorted_tree.feature)
    np.testing.assert_array_equal(tree.threshold, sorted_tree.threshold)


def test_binned_sweep_does_not_depend_on_thread_count():
    """Every kernel of the binned sweep on its prange path (``serial_below(0)``), at one thread
    and at all cores, grows the sorted sweep's tree."""
    from sklearn.datasets import make_blobs

    from pipeline.threads import limit_threads
    from pipeline.trees._kernels import serial_below

    X, y = make_blobs(5000, 40, centers=5, cluster_std=8.0, random_state=4)
    reference = SpExClique(n_leaves=7, sweep=SweepSettings(bins_min_points=10**9)).fit(X, y).tree_
    with serial_below(0):
        for threads in (1, None):
            with limit_threads(threads):
                tree = SpExClique(n_leaves=7).fit(X, y).tree_
            np.testing.assert_array_equal(tree.feature, reference.feature)
            np.testing.assert_array_equal(tree.threshold, reference.threshold)
