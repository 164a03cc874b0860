"""SpEx-Clique / SpEx-kNN / SpEx-Graph: fast sweeps vs a brute-force Algorithm 1, examples, bad input."""

import heapq

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings, strategies as st
from sklearn.datasets import load_iris, make_blobs
from sklearn.metrics import adjusted_rand_score

from pipeline.trees import CART, SpExClique, SpExGraph, SpExKNN
from pipeline.trees import _graph_kernels, _kernels, _spex_sweeps
from pipeline.trees._spex_sweeps import SweepSettings
from pipeline.trees._column_order import ColumnOrder, feature_priority
from pipeline.trees.graphs import knn_graph
from pipeline.trees.tree import ExplanationTree
from pipeline.validation import InvalidInputError


# ---------------------------------------------------------------- brute force
def bf_psi(W, S):
    vol = W[S].sum()
    return 0.0 if vol == 0 else W[np.ix_(S, ~S)].sum() / vol


def bf_best_cut(X, W, members, priority):
    """Every coordinate cut of the node scored from scratch on the dense adjacency."""
    best = (np.inf, None, None)
    for j in np.argsort(priority):  # visiting features in priority order: strict < keeps the first
        values = np.unique(X[members, j])
        for t in values[:-1]:
            S = members & (X[:, j] <= t)
            score = bf_psi(W, S) + bf_psi(W, members & ~S)
            if score < best[0]:
                best = (score, j, t)
    return best


def bf_spex(X, W, n_leaves, priority=None):
    """Algorithm 1 with the dense adjacency W; same tie rules as the fast implementation."""
    n, d = X.shape
    priority = np.arange(d) if priority is None else priority
    tree = ExplanationTree(d)
    heap, counter = [], 0

    def push(node, members):
        nonlocal counter
        score, j, t = bf_best_cut(X, W, members, priority)
        leaf_score = bf_psi(W, members) - score if j is not None else -np.inf
        heapq.heappush(heap, (-leaf_score, counter, node, members, j, t))
        counter += 1

    push(0, np.ones(n, dtype=bool))
    while tree.n_leaves < n_leaves:
        _, _, node, members, j, t = heapq.heappop(heap)
        assert j is not None, "brute force ran out of splittable leaves"
        left, right = tree.split(node, j, t)
        push(left, members & (X[:, j] <= t))
        push(right, members & (X[:, j] > t))
    return tree


def clique_adjacency(y):
    W = (y[:, None] == y[None, :]).astype(float)
    np.fill_diagonal(W, 0.0)
    return W


def same_structure(a: ExplanationTree, b: ExplanationTree):
    np.testing.assert_array_equal(a.feature, b.feature)
    np.testing.assert_array_equal(np.nan_to_num(a.threshold, nan=-7), np.nan_to_num(b.threshold, nan=-7))
    np.testing.assert_array_equal(a.children_left, b.children_left)


small_data = st.integers(3, 14).flatmap(lambda n: st.tuples(
    st.lists(st.lists(st.integers(0, 4), min_size=3, max_size=3), min_size=n, max_size=n),
    st.lists(st.integers(0, 2), min_size=n, max_size=n),
    st.integers(1, 3),
    st.integers(1, 5),
    st.sampled_from([None, 0, 1]),
))


# --------------------------------------------------------- exact vs brute force
_SWEEPS = {
    "numba": SweepSettings(),
    "numba-block2": SweepSettings(clique_block=2, plain_scan_purity=2.0),
    "numpy": SweepSettings(use_kernels=False),
    "bins": SweepSettings(bins_min_points=0, clique_bins=3, heavy_share=10**9),
    "bins-light": SweepSettings(bins_min_points=0, clique_bins=2, heavy_share=0, histogram_budget=0),
    "bins-blocks": SweepSettings(bins_min_points=0, clique_bins=7, scan_block=2),
}


@pytest.fixture(params=list(_SWEEPS.values()), ids=list(_SWEEPS))
def kernels(request):
    """The sweep settings a test passes to its trees: the compiled kernels (default settings,
    and 2-position blocks used in every node so the bound-pruned clique sweep prunes and
    rescans on tiny inputs), the numpy sweeps, and SpEx-Clique's binned sweep on every input:
    2-3 bins so that bins are resolved, reading values from the node's gathered rows ("bins",
    keeping each node's counts for its children) or from X ("bins-light", counting every node
    afresh), and 7 bins in blocks of 2 so that the two-level scan skips and refines blocks
    ("bins-blocks")."""
    return request.param


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=small_data)
def test_clique_matches_brute_force(kernels, case):
    rows, labels, d, n_leaves, seed = case
    X = np.array(rows, dtype=float)[:, :d]
    y = np.array(labels)
    n_distinct = np.unique(X, axis=0).shape[0]
    if np.unique(y).size < 2:
        with pytest.raises(InvalidInputError, match="at least 2"):
            SpExClique(n_leaves=n_leaves, sweep=kernels).fit(X, y)
        return
    if n_leaves > n_distinct:
        with pytest.raises(InvalidInputError, match="distinct"):
            SpExClique(n_leaves=n_leaves, random_state=seed, sweep=kernels).fit(X, y)
        return
    est = SpExClique(n_leaves=n_leaves, random_state=seed, sweep=kernels).fit(X, y)
    ref = bf_spex(X, clique_adjacency(y), n_leaves, feature_priority(d, seed))
    same_structure(est.tree_, ref)
    assert est.tree_.n_leaves == n_leaves


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=small_data, data=st.data())
def test_graph_matches_brute_force(kernels, case, data):
    rows, _, d, n_leaves, seed = case
    X = np.array(rows, dtype=float)[:, :d]
    n = X.shape[0]
    # integer weights (0..3, some self-loops, some isolated points) keep every sum exact
    upper = np.array(data.draw(st.lists(st.integers(0, 3), min_size=n * n, max_size=n * n))).reshape(n, n)
    W = np.triu(upper, 1).astype(float)
    W = W + W.T + np.diag(np.diag(upper) * (np.arange(n) % 3 == 0))
    n_distinct = np.unique(X, axis=0).shape[0]
    if n_leaves > n_distinct:
        with pytest.raises(InvalidInputError):
            SpExGraph(n_leaves=n_leaves, sweep=kernels).fit(X, sp.csr_matrix(W))
        return
    if n_leaves > 1 and not np.triu(W, 1).any():  # no edge between two points: every cut weighs 0 (issue 29)
        with pytest.raises(InvalidInputError, match="no edges between different points"):
            SpExGraph(n_leaves=n_leaves, sweep=kernels).fit(X, sp.csr_matrix(W))
        return
    est = SpExGraph(n_leaves=n_leaves, random_state=seed, sweep=kernels).fit(X, sp.csr_matrix(W))
    ref = bf_spex(X, W, n_leaves, feature_priority(d, seed))
    same_structure(est.tree_, ref)
    assert sorted(np.unique(est.predict(X))) == list(range(n_leaves))


def test_graph_float_weights_close_to_brute_force(kernels):
    rng = np.random.default_rng(3)
    X = rng.normal(size=(40, 3))
    W = rng.random((40, 40)) * (rng.random((40, 40)) < 0.2)
    W = W + W.T
    est = SpExGraph(n_leaves=4, sweep=kernels).fit(X, W)
    ref = bf_spex(X, W, 4)
    same_structure(est.tree_, ref)


def test_graph_heavy_integer_weights_match_brute_force(kernels):
    """Integer weights with degrees past 2**16 (32-bit counts) and past 2**31 in total (the
    float sweep): both still reproduce the brute force."""
    rng = np.random.default_rng(5)
    X = rng.normal(size=(30, 3))
    for scale in (40_000, 2**28):
        W = np.triu(rng.integers(1, 4, size=(30, 30)) * (rng.random((30, 30)) < 0.3), 1) * float(scale)
        W = W + W.T
        est = SpExGraph(n_leaves=4, sweep=kernels).fit(X, sp.csr_matrix(W))
        same_structure(est.tree_, bf_spex(X, W, 4))


def test_clique_graph_equals_spexgraph_on_materialised_clique(kernels):
    X, y = make_blobs(n_samples=300, n_features=4, centers=5, cluster_std=3.0, random_state=1)
    a = SpExClique(n_leaves=7, sweep=kernels).fit(X, y)
    b = SpExGraph(n_leaves=7, sweep=kernels).fit(X, sp.csr_matrix(clique_adjacency(y)), y=y)
    same_structure(a.tree_, b.tree_)
    np.testing.assert_array_equal(a.predict(X), b.predict(X))


@pytest.mark.slow
@pytest.mark.parametrize("parallel", [False, True])
@pytest.mark.parametrize("case", ["knn", "ties", "heavy", "self_loops"])
def test_graph_sweep_equals_numpy_sweep_on_larger_nodes(case, parallel):
    """The compiled graph sweep (rows 32 at a time, integer scan in 256-position chunks with a
    vectorised prefilter, best score shared by the groups) finds the numpy sweep's best cut, bit
    for bit, on nodes past one chunk and one group of rows, and grows the same trees."""
    from pipeline.trees._kernels import serial_below

    rng = np.random.default_rng(len(case))
    n, d = 700, 41
    X, _ = make_blobs(n_samples=n, n_features=d, centers=4, cluster_std=4.0, random_state=len(case))
    if case == "ties":
        X = np.round(X / 4.0)
    A = knn_graph(X, 8)
    if case == "heavy":  # degrees past 2**16: 32-bit counts
        A = A * 30_000.0
    if case == "self_loops":
        A = A + sp.diags(rng.integers(0, 3, size=n).astype(float))
    numba_sweep, numpy_sweep = _SWEEPS["numba"], _SWEEPS["numpy"]
    graph = _spex_sweeps.GraphData(A)
    root = ColumnOrder.from_matrix(X)
    priority = np.arange(d)
    with serial_below(0 if parallel else 1 << 60):
        fast = _spex_sweeps.graph_best_cut(root, graph, priority, numba_sweep)
        slow = _spex_sweeps.graph_best_cut(root, graph, priority, numpy_sweep)
        assert fast == slow
        for f in range(d):  # one row alone: its own best cut (no other row's bound), exact
            one = ColumnOrder(root.order[f:f + 1], None if root.tie_ids is None else root.tie_ids[f:f + 1])
            assert (_spex_sweeps.graph_best_cut(one, graph, priority[:1], numba_sweep)
                    == _spex_sweeps.graph_best_cut(one, graph, priority[:1], numpy_sweep))
        j, p = fast[:2]
        for (child, cut), (child2, cut2) in zip(_spex_sweeps.graph_split_cuts(root, j, p, graph, priority, numba_sweep),
                                                _spex_sweeps.graph_split_cuts(root, j, p, graph, priority, numpy_sweep)):
            np.testing.assert_array_equal(child.order, child2.order)
            assert cut == cut2
        a = SpExGraph(n_leaves=6, sweep=numba_sweep).fit(X, A)
        b = SpExGraph(n_leaves=6, sweep=numpy_sweep).fit(X, A)
    same_structure(a.tree_, b.tree_)


@settings(max_examples=40, deadline=None)
@given(m4=st.integers(1, 40).map(lambda q: 4 * q), seed=st.integers(0, 10_000))
def test_transpose_u16_kernel_matches_numpy(m4, seed):
    """The graph sweep's 4 x 4-block transpose of a group's (32, m4) uint16 position table."""
    src = np.random.default_rng(seed).integers(0, 1 << 16, size=(_graph_kernels._GRAPH_LANES, m4)).astype(np.uint16)
    dst = np.empty(src.size, np.uint16)
    _graph_kernels._transpose_u16(src, dst)
    np.testing.assert_array_equal(dst, src.T.ravel())


@pytest.mark.slow
def test_graph_sweep_equals_numpy_sweep_past_uint16_ids():
    """Above 65,536 points the orders and local ids are int32 (and the positions are
    transposed without the 64-bit blocks): still the numpy sweep's cuts and trees."""
    X, _ = make_blobs(n_samples=70_000, n_features=2, centers=3, random_state=0)
    A = knn_graph(X, 3, method="exact")
    graph = _spex_sweeps.GraphData(A)
    root = ColumnOrder.from_matrix(X)
    assert root.order.dtype == np.int32 and graph.local_dtype == np.int32
    priority = np.arange(2)
    fast = _spex_sweeps.graph_best_cut(root, graph, priority, _SWEEPS["numba"])
    assert fast == _spex_sweeps.graph_best_cut(root, graph, priority, _SWEEPS["numpy"])
    a = SpExGraph(n_leaves=3, sweep=_SWEEPS["numba"]).fit(X, A)
    b = SpExGraph(n_leaves=3, sweep=_SWEEPS["numpy"]).fit(X, A)
    same_structure(a.tree_, b.tree_)


@pytest.mark.parametrize("compiled", [True, False])
@pytest.mark.parametrize("n,d", [(5, 1), (1000, 3), (70000, 2)])
def test_column_order_is_stable_argsort(n, d, compiled, monkeypatch):
    from pipeline.trees import _kernels

    monkeypatch.setattr(_kernels, "AVAILABLE", compiled and _kernels.AVAILABLE)
    rng = np.random.default_rng(n)
    X = rng.normal(size=(n, d))
    X[: n // 3, 0] = np.round(X[: n // 3, 0], 1)  # ties
    X[n // 3: n // 2, -1] = -0.0
    X[n // 2: n // 2 + 3, -1] = 0.0
    if n > 10:
        X[5, 0] = np.nextafter(X[6, 0], np.inf)  # values that collide in the packed key
    co = ColumnOrder.from_matrix(X)
    for j in range(d):
        np.testing.assert_array_equal(co.order[j], np.argsort(X[:, j] + 0.0, kind="stable"))
        v = (X[:, j] + 0.0)[co.order[j]]
        valid = co.valid_cuts(j, j + 1)
        expect = v[1:] != v[:-1]
        np.testing.assert_array_equal(np.ones_like(expect) if valid is None else valid[0], expect)
    left, right = co.split(d - 1, n // 2, n)
    in_left = np.zeros(n, dtype=bool)
    in_left[co.order[d - 1, : n // 2 + 1]] = True
    for child, mask in ((left, in_left), (right, ~in_left)):
        for j in range(d):
            np.testing.assert_array_equal(child.order[j], co.order[j][mask[co.order[j]]])


# ------------------------------------------------------------------ behaviour
def moshkovitz_example(n_top=50, n_bottom=200, seed=0):
    """Figure 2 (right): a wide top cluster above two bottom clusters side by side."""
    rng = np.random.default_rng(seed)
    top = np.c_[rng.uniform(0, 10, n_top), rng.uniform(9, 10, n_top)]
    left = np.c_[rng.uniform(0, 4.5, n_bottom), rng.uniform(0, 1, n_bottom)]
    right = np.c_[rng.uniform(5.5, 10, n_bottom), rng.uniform(0, 1, n_bottom)]
    return np.vstack([top, left, right]), np.repeat([0, 1, 2], [n_top, n_bottom, n_bottom])


def test_figure2_spex_clique_error_free_where_cart_fails():
    X, y = moshkovitz_example()
    spex = SpExClique().fit(X, y)
    assert spex.tree_.feature[0] == 1  # horizontal cut first
    assert np.array_equal(spex.predict(X), y)
    cart = CART(n_leaves=3).fit(X, y)
    assert cart.tree_.feature[0] == 0  # CART's Gini gain prefers the vertical cut
    assert np.mean(cart.predict(X) != y) > 0.04


def test_spex_recovers_blobs_and_noise_is_ignored():
    X, y = make_blobs(n_samples=600, n_features=5, centers=4, cluster_std=0.5, random_state=2)
    noisy = y.copy()
    noisy[::10] = -1
    est = SpExClique(random_state=0, noise_label=-1).fit(X, noisy)
    assert est.tree_.n_leaves == 4 and set(est.classes_) == {0, 1, 2, 3}
    assert adjusted_rand_score(y, est.predict(X)) == 1.0
    assert est.predict(X).dtype == np.int64


def test_spex_knn_on_iris_and_leaf_indices():
    X, y = load_iris(return_X_y=True)
    est = SpExKNN(n_leaves=3).fit(X)
    pred = est.predict(X)
    assert set(pred) == {0, 1, 2}
    assert adjusted_rand_score(y, pred) > 0.4
    assert est.graph_.shape == (150, 150)
    labelled = SpExKNN().fit(X, y)
    assert set(labelled.predict(X)) <= {0, 1, 2} and labelled.tree_.n_leaves == 3


@pytest.mark.skipif(not _kernels.AVAILABLE, reason="numba not importable")
def test_asymmetry_kernel_matches_scipy():
    """check_graph's one-pass symmetry test: the largest |A - A.T| when the patterns agree,
    -1 (fall back to scipy) when they do not."""
    rng = np.random.default_rng(0)
    for trial in range(300):
        m = int(rng.integers(1, 8))
        W = rng.integers(0, 3, (m, m)) * 1.0
        if trial % 2:
            W = W + W.T
        if trial % 3 == 0:
            W[rng.integers(m), rng.integers(m)] += 0.5
        S = sp.csr_matrix(W)
        S.sort_indices()
        got = _kernels.asymmetry(S.indptr, S.indices, S.data)
        ref = abs(W - W.T).max()
        assert got == ref or (got == -1.0 and ref > 0)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 12), density=st.floats(0.0, 1.0), seed=st.integers(0, 10_000))
def test_upper_edges_kernel_matches_scipy_triu(n, density, seed):
    """GraphData's edge list: the entries right of the diagonal in storage order, as
    ``scipy.sparse.triu(A, k=1).tocoo()`` (diagonal and lower entries dropped)."""
    rng = np.random.default_rng(seed)
    W = rng.integers(1, 4, (n, n)) * (rng.random((n, n)) < density) * 1.5
    A = sp.csr_matrix(W)
    A.sum_duplicates()
    upper = sp.triu(A, k=1).tocoo()
    a, b, w = _kernels.upper_edges(A.indptr, A.indices, A.data)
    np.testing.assert_array_equal(a, upper.row)
    np.testing.assert_array_equal(b, upper.col)
    np.testing.assert_array_equal(w, upper.data)
    assert a.dtype == b.dtype == np.int32


def test_knn_graph_symmetric_sum():
    X = np.random.default_rng(0).normal(size=(60, 4))
    A = knn_graph(X, 5)
    assert (A != A.T).nnz == 0 and A.diagonal().sum() == 0
    assert set(np.unique(A.data)) <= {1.0, 2.0}
    assert np.all(np.asarray((A > 0).sum(axis=1)).ravel() >= 5)


def test_more_leaves_than_clusters_and_seeded_ties():
    X, y = make_blobs(n_samples=200, n_features=3, centers=3, random_state=0)
    est = SpExClique(n_leaves=6).fit(X, y)
    assert est.tree_.n_leaves == 6
    # duplicated columns tie exactly: the seed decides which copy is used, reproducibly
    X2 = np.repeat(X, 4, axis=1)
    used = {tuple(SpExClique(random_state=s).fit(X2, y).tree_.features_used) for s in range(6)}
    assert len(used) > 1
    assert SpExClique(random_state=3).fit(X2, y).tree_ == SpExClique(random_state=3).fit(X2, y).tree_


# ------------------------------------------------------------------ bad input
def test_bad_inputs():
    X, y = make_blobs(n_samples=50, n_features=3, centers=3, random_state=0)
    with pytest.raises(InvalidInputError, match="shape"):
        SpExGraph(n_leaves=2).fit(X, sp.eye(49))
    W = knn_graph(X, 3).toarray()
    W[0, 1] = W[1, 0] = -1
    with pytest.raises(InvalidInputError, match="negative"):
        SpExGraph(n_leaves=2).fit(X, W)
    W[0, 1] = W[1, 0] = np.nan
    with pytest.raises(InvalidInputError, match="NaN"):
        SpExGraph(n_leaves=2).fit(X, W)
    W = np.zeros((50, 50))
    W[0, 1] = 1
    with pytest.raises(InvalidInputError, match="symmetric"):
        SpExGraph(n_leaves=2).fit(X, W)
    assert SpExGraph().fit(X, W + W.T).n_leaves_ == 8  # no y: scikit-learn's KMeans default
    with pytest.raises(InvalidInputError, match="at least 2"):
        SpExClique().fit(X, np.zeros(50, dtype=int))
    Xbad = X.copy()
    Xbad[3, 1] = np.inf
    with pytest.raises(ValueError, match="infinity"):
        SpExClique().fit(Xbad, y)
    with pytest.raises(InvalidInputError, match="exceeds"):
        SpExClique(n_leaves=51).fit(X, y)
    with pytest.raises(InvalidInputError, match="identical points"):
        SpExClique(n_leaves=4).fit(np.repeat([[0.0, 1.0], [2.0, 3.0], [4.0, 4.0]], 5, axis=0), np.repeat([0, 1, 2], 5))
    with pytest.raises(InvalidInputError, match="feature_names"):
        SpExClique().fit(X, y, feature_names=["a"])
    with pytest.warns(UserWarning, match="n_neighbors=50"):  # clamped to n_samples - 1
        assert SpExKNN(n_leaves=2, n_neighbors=50).fit(X).graph_.nnz == 50 * 49
    with pytest.raises(InvalidInputError, match="method"):
        knn_graph(X, 3, method="annoy")


@pytest.mark.slow  # pynndescent compiles with numba on first use (~1 min on a loaded machine)
def test_nndescent_graph_close_to_exact():
    X, _ = make_blobs(n_samples=400, n_features=6, centers=4, random_state=0)
    exact = knn_graph(X, 10, method="exact")
    approx = knn_graph(X, 10, method="nndescent", random_state=0)
    assert (approx != approx.T).nnz == 0 and approx.diagonal().sum() == 0
    assert np.all(np.asarray((approx > 0).sum(axis=1)).ravel() >= 10)
    overlap = (exact.multiply(approx) > 0).sum() / (exact > 0).sum()
    assert overlap > 0.9


def test_docs_example_runs():
    """The usage snippet in docs/spex.md is executed, so the doc cannot drift from the code."""
    from pathlib import Path

    text = (Path(__file__).parents[1] / "docs" / "spex.md").read_text()
    snippet = text.split("```python\n", 1)[1].split("```", 1)[0]
    namespace: dict = {}
    exec(compile(snippet, "docs/spex.md", "exec"), namespace)
    assert namespace["exkmc"].tree_.n_leaves == 8 and namespace["knn"].tree_.n_leaves == 4


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(n=st.integers(20, 60), d=st.integers(1, 3), k=st.integers(2, 4), n_leaves=st.integers(2, 8),
       seed=st.integers(0, 10_000), ties=st.booleans())
def test_clique_deeper_trees_match_brute_force(kernels, n, d, k, n_leaves, seed, ties):
    """Deeper trees on more points: children of extracted and of masked (not copied) nodes."""
    rng = np.random.default_rng(seed)
    X = rng.integers(0, 8, size=(n, d)).astype(float) if ties else rng.normal(size=(n, d))
    y = rng.integers(0, k, size=n)
    if np.unique(y).size < 2 or n_leaves > np.unique(X, axis=0).shape[0]:
        return
    est = SpExClique(n_leaves=n_leaves, sweep=kernels).fit(X, y)
    same_structure(est.tree_, bf_spex(X, clique_adjacency(y), n_leaves))


@pytest.mark.parametrize("case", ["blobs", "float32", "ties", "noise", "many_clusters"])
def test_binned_clique_equals_sorted_sweep_on_large_data(case):
    """Above BINS_MIN_POINTS SpEx-Clique takes the binned sweep (256 bins, node counts kept,
    lazy children): the same tree as the sorted sweep, on data with and without ties."""
    k, n_leaves = (25, 30) if case == "many_clusters" else (6, None)
    X, y = make_blobs(5000, 6, centers=k, cluster_std=3.0, random_state=1)
    if case == "float32":
        X = X.astype(np.float32)
    if case == "ties":
        X = np.round(X / 2)
    if case == "noise":
        y[::17] = -1
    assert _spex_sweeps.use_binned_clique(X.shape[0])
    binned = SpExClique(n_leaves=n_leaves, random_state=0, noise_label=-1).fit(X, y).tree_
    sorted_sweep = SweepSettings(bins_min_points=10**9)
    same_structure(binned, SpExClique(n_leaves=n_leaves, random_state=0, noise_label=-1, sweep=sorted_sweep).fit(X, y).tree_)


def test_binned_clique_falls_back_to_sorted_sweep_on_heavy_tails(monkeypatch):
    """Heavy tails crowd equal-width bins: the fit takes the sorted sweep (same tree either way)."""
    X, y = make_blobs(5000, 6, centers=5, cluster_std=3.0, random_state=2)
    X = np.exp(X / 2)
    codes = y.astype(np.int8)
    assert not _spex_sweeps.BinnedColumns(X, codes, np.bincount(y), np.arange(6)).suited
    calls = []
    monkeypatch.setattr(_spex_sweeps.BinnedColumns, "best_cut", lambda self, node: calls.append(node))
    tree = SpExClique().fit(X, y).tree_
    assert not calls
    same_structure(tree, SpExClique(sweep=SweepSettings(bins_min_points=10**9)).fit(X, y).tree_)
