import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.datasets import load_iris, make_blobs

from pipeline.trees import TAO, ExplanationTree
from pipeline.trees._tao_cost import KMeansCost, SphericalKMeansCost, penalised_clustering_step
from pipeline.trees._tao_node import (
    ALL_LEFT, ALL_RIGHT, care_problem, node_objective, solve_axis_node, solve_oblique_node,
)
from pipeline.trees._tao_tree import HeapTree, tao_fit, tree_objective
from pipeline.validation import InvalidInputError


def elongated_blobs(n_per=60, seed=0):
    """Three clusters along the diagonal, stretched across it: oblique cuts separate them
    exactly, axis-aligned ones cannot."""
    rng = np.random.default_rng(seed)
    centers = np.array([[0.0, 0.0], [3.0, 3.0], [6.0, 6.0]])
    along = rng.uniform(-5, 5, size=(3 * n_per, 1)) * np.array([[1.0, -1.0]]) / np.sqrt(2)
    across = rng.uniform(-0.5, 0.5, size=(3 * n_per, 1)) * np.array([[1.0, 1.0]]) / np.sqrt(2)
    return np.repeat(centers, n_per, axis=0) + along + across, np.repeat([0, 1, 2], n_per)


# ------------------------------------------------------------ reduced problems
def test_care_points_hand_case():
    target = np.array([0, 1, 2, 0, 1])
    left = np.array([0, 0, 2, 1, 2])
    right = np.array([0, 1, 1, 0, 1])
    care, y = care_problem(left, right, target)
    # point 0: both right (no care); 1: right only; 2: left only; 3: right only; 4: right only
    assert care.tolist() == [False, True, True, True, True]
    assert y.tolist() == [1, 0, 1, 1]


def test_axis_node_hand_case():
    # feature 1 separates the wanted children except for one point; feature 0 is useless
    X = np.array([[5.0, 0.0], [1.0, 1.0], [5.0, 2.0], [1.0, 3.0], [5.0, 4.0], [1.0, 2.5]])
    y = np.array([0, 0, 1, 1, 1, 0])
    w = np.ones(6)
    sol = solve_axis_node(X, y, w, 0.0, np.zeros(2), ALL_LEFT)
    assert sol.w.tolist() == [0.0, 1.0]
    # best cut sends {0, 1} left and leaves exactly one error: between 1.0 and 2.0, or 2.5 | 3.0
    assert sol.objective == 1.0
    assert node_objective(X, y, w, sol.w, sol.t, 0.0, False) == 1.0
    # a split costing more than the errors it saves is replaced by the best constant node
    sol = solve_axis_node(X, y, w, 5.0, np.zeros(2), ALL_LEFT)
    assert not sol.w.any() and sol.objective == 3.0


def test_oblique_node_separable_and_penalised():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(80, 3))
    y = (X[:, 0] + X[:, 1] > 0.3).astype(np.int64)
    w = np.ones(80)
    sol = solve_oblique_node(X, y, w, 1e-3, np.zeros(3), ALL_LEFT, random_state=0)
    assert node_objective(X, y, w, sol.w, sol.t, 0.0, True) == 0.0
    assert abs(sol.w[2]) < 0.2 * min(abs(sol.w[0]), abs(sol.w[1]))  # the irrelevant feature is (nearly) unused
    # huge sparsity penalty: constant node towards the majority side
    sol = solve_oblique_node(X, y, w, 1e6, np.zeros(3), ALL_LEFT, random_state=0)
    assert not sol.w.any()
    assert sol.t == (ALL_RIGHT if y.mean() > 0.5 else ALL_LEFT)


@pytest.mark.parametrize("solver", [solve_axis_node, solve_oblique_node])
def test_degenerate_reduced_problems(solver):
    X = np.arange(12.0).reshape(6, 2)
    w_cur, t_cur = np.array([1.0, 0.0]), 4.5
    # all care points want the right child: constant all-right node, zero error
    sol = solver(X, np.ones(6, np.int64), np.ones(6), 0.1, w_cur, t_cur)
    assert not sol.w.any() and sol.t == ALL_RIGHT and sol.objective == 0.0
    # no care points at all
    sol = solver(X[:0], np.zeros(0, np.int64), np.zeros(0), 0.1, w_cur, t_cur)
    assert not sol.w.any() and sol.objective == 0.0
    # a single care point
    sol = solver(X[:1], np.zeros(1, np.int64), np.ones(1), 0.1, w_cur, t_cur)
    assert sol.objective == 0.0
    # identical points that want different children: the best is one error
    sol = solver(np.ones((4, 2)), np.array([0, 1, 1, 0]), np.ones(4), 0.0, np.zeros(2), ALL_LEFT)
    assert sol.objective == 2.0 and not sol.w.any()


def brute_axis_objective(X, y, weight, penalty):
    best = min(weight[y == 1].sum(), weight[y == 0].sum())  # constant nodes
    for f in range(X.shape[1]):
        for t in np.unique(X[:, f]):
            goes_right = X[:, f] > t
            if goes_right.all() or not goes_right.any():
                continue
            best = min(best, weight[goes_right != (y == 1)].sum() + penalty)
    return best


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 25), st.integers(1, 4), st.integers(0, 2 ** 31 - 1),
       st.sampled_from([0.0, 0.5, 1.0, 3.0]))
def test_axis_node_equals_brute_force(n, d, seed, penalty):
    rng = np.random.default_rng(seed)
    X = rng.integers(0, 4, size=(n, d)).astype(float)  # many ties
    y = rng.integers(0, 2, size=n)
    weight = rng.integers(1, 4, size=n).astype(float)
    sol = solve_axis_node(X, y, weight, penalty, np.zeros(d), ALL_LEFT)
    expected = brute_axis_objective(X, y, weight, penalty)
    assert sol.objective == pytest.approx(expected)
    assert node_objective(X, y, weight, sol.w, sol.t, penalty, False) == pytest.approx(expected)


# ------------------------------------------------------------------- tree step
@pytest.mark.parametrize("oblique,penalty", [(False, 0.0), (False, 2.0), (True, 0.0), (True, 0.5)])
def test_tao_objective_never_increases(oblique, penalty):
    X, _ = make_blobs(150, n_features=4, centers=5, cluster_std=2.0, random_state=1)
    z = KMeansCost(n_init=2).fit_free(X, 5, 0)[0]
    tree = HeapTree.random(3, X, z, oblique, np.random.default_rng(0))
    trace = tao_fit(tree, X, z, penalty, max_iter=15, random_state=0)
    assert len(trace) >= 2
    assert np.all(np.diff(trace) <= 1e-9), trace
    assert trace[-1] < trace[0]
    assert trace[-1] == pytest.approx(tree_objective(tree, X, z, penalty))


def test_export_prunes_and_keeps_training_predictions():
    X = load_iris().data
    z = KMeansCost(n_init=2).fit_free(X, 3, 0)[0]
    tree = HeapTree.random(4, X, z, True, np.random.default_rng(3))
    tao_fit(tree, X, z, 0.1, random_state=0)
    et = tree.to_explanation_tree(X, load_iris().feature_names)
    assert np.array_equal(et.predict(X), tree.predict(X))
    assert et.n_leaves < 2 ** 4  # three clusters never need sixteen leaves
    counts = np.bincount(et.apply(X), minlength=et.n_nodes)
    assert np.all(counts[et.leaves] > 0)  # no dead branches left
    assert "petal" in " ".join(str(r) for r in et.rules())


def test_embed_explanation_tree():
    et = ExplanationTree(2)
    left, right = et.split(0, 0, 0.5)
    et.set_label(left, 2)
    _, rr = et.split_oblique(right, {0: 1.0, 1: -2.0}, 0.1, left_label=0, right_label=1)
    heap = HeapTree.from_explanation_tree(et, 3, oblique=True)
    X = np.random.default_rng(0).normal(size=(200, 2))
    assert np.array_equal(heap.predict(X), et.predict(X))
    with pytest.raises(InvalidInputError, match="depth"):
        HeapTree.from_explanation_tree(et, 1, oblique=True)
    with pytest.raises(InvalidInputError, match="oblique"):
        HeapTree.from_explanation_tree(et, 3, oblique=False)


# --------------------------------------------------------- clustering costs
@pytest.mark.parametrize("cost", [KMeansCost(n_init=2), SphericalKMeansCost(n_init=2)])
def test_penalised_clustering_step_lowers_its_objective(cost):
    X, _ = make_blobs(200, n_features=3, centers=4, random_state=0)
    X = X + 20.0  # keep rows away from the origin for the spherical cost
    labels, centers = cost.fit_free(X, 4, 0)
    target = np.random.default_rng(0).integers(0, 4, size=200)

    def objective(z, c, mu):
        return cost.total(X, z, c) + mu * np.sum(z != target)

    for mu in [0.0, 0.5, 1e9]:
        z, c = penalised_clustering_step(cost, X, labels, centers, mu, target=target)
        assert objective(z, c, mu) <= objective(labels, centers, mu) + 1e-9
    assert np.array_equal(z, target)  # a huge mu forces the target assignments


# ------------------------------------------------------- joint optimisation
@pytest.mark.parametrize("oblique", [True, False])
def test_joint_optimisation_ends_with_tree_assignments(oblique):
    X, _ = make_blobs(240, n_features=5, centers=4, cluster_std=2.5, random_state=2)
    model = TAO(4, 3, oblique=oblique, sparsity=0.5, random_state=0).fit(X)
    assert model.converged_
    assert model.history_[-1]["mismatches"] == 0
    assert np.array_equal(model.assignments_, model.tree_.predict(X))
    assert np.array_equal(model.labels_, model.predict(X))
    assert model.labels_.dtype == np.int64
    assert [h["mu"] for h in model.history_[1:3]] == pytest.approx(
        [model.history_[1]["mu"], model.history_[1]["mu"] * 1.5])
    assert model.kmeans_cost_ == pytest.approx(
        KMeansCost().total(X, model.labels_, model.cluster_centers_))
    for h in model.history_:
        assert np.all(np.diff(h["tao_trace"]) <= 1e-9)


def test_oblique_tree_recovers_obliquely_separable_clusters():
    X, y = elongated_blobs()  # y is a k-means fixed point: every point is nearest its own center
    obl = TAO(3, 2, oblique=True, random_state=0).fit(X, init_labels=y)
    axis = TAO(3, 2, oblique=False, random_state=0).fit(X, init_labels=y)
    assert obl.kmeans_cost_ == pytest.approx(obl.free_cost_, rel=1e-9)
    assert axis.kmeans_cost_ > 1.05 * axis.free_cost_
    assert any(len(r.conditions) and r.conditions[0].weights for r in obl.tree_.rules())


def test_fit_from_given_clustering_and_names():
    X = load_iris().data
    y = np.repeat([0, 1, 2], 50)
    model = TAO(3, 2, sparsity=1.0, random_state=0).fit(X, init_labels=y, feature_names=load_iris().feature_names)
    assert np.array_equal(model.free_labels_, y)
    assert model.free_centers_ == pytest.approx(np.stack([X[y == k].mean(axis=0) for k in range(3)]))
    assert model.tree_.feature_names == list(load_iris().feature_names)
    roundtrip = ExplanationTree.from_json(model.tree_.to_json())
    assert np.array_equal(roundtrip.predict(X), model.labels_)
    centers = model.free_centers_
    again = TAO(3, 2, sparsity=1.0, random_state=0).fit(X, centers=centers)
    assert np.array_equal(again.free_labels_, np.argmin(((X[:, None] - centers) ** 2).sum(-1), axis=1))


def test_reproducible_from_seed():
    X, _ = make_blobs(150, n_features=4, centers=3, random_state=5)
    a = TAO(3, 2, sparsity=0.1, random_state=7).fit(X)
    b = TAO(3, 2, sparsity=0.1, random_state=7).fit(X)
    assert a.tree_ == b.tree_


def test_spherical_cost_runs():
    X, _ = make_blobs(150, n_features=4, centers=3, random_state=5)
    model = TAO(3, 2, cost="spherical", random_state=0).fit(X + 10.0)
    assert model.converged_
    assert np.allclose(np.linalg.norm(model.cluster_centers_, axis=1), 1.0)


@pytest.mark.parametrize("kwargs,match", [
    (dict(sparsity=-1.0), "sparsity"),
    (dict(depth=0), "depth"),
    (dict(n_clusters=5, depth=2), "cannot cover"),
    (dict(mu_growth=1.0), "mu_growth"),
    (dict(mu0=0.0), "mu0"),
    (dict(cost="kmedoids"), "cost"),
    (dict(init="cart++"), "init"),
])
def test_bad_parameters(kwargs, match):
    X = np.random.default_rng(0).normal(size=(30, 3))
    params = dict(n_clusters=3, depth=2) | kwargs
    with pytest.raises(ValueError, match=match):
        TAO(**params).fit(X)


def test_bad_inputs():
    X = np.random.default_rng(0).normal(size=(30, 3))
    with pytest.raises(InvalidInputError, match="cluster ids"):
        TAO(3, 2).fit(X, init_labels=np.full(30, 3))
    with pytest.raises(InvalidInputError, match="centers"):
        TAO(3, 2).fit(X, centers=np.zeros((2, 3)))
    with pytest.raises(InvalidInputError, match="non-zero rows"):
        TAO(3, 2, cost="spherical").fit(np.vstack([X, np.zeros((1, 3))]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = TAO(3, 2, max_rounds=1, random_state=0).fit(X)
    with pytest.raises(ValueError, match="features"):
        model.predict(X[:, :2])


@pytest.mark.parametrize("row,oblique", [("tao", True), ("tao_axis", False)])
def test_pipeline_explainer_config(row, oblique):
    from omegaconf import OmegaConf

    from pipeline.app.configuration.config import compose_config
    from pipeline.app.configuration.explainers import FitInputs, fit_explainer

    cfg = compose_config([f"explainer=[{row}]", "explainer.%s.params.sparsity=0.5" % row])
    entry = OmegaConf.to_container(cfg.explainer, resolve=True)[row]
    X = load_iris().data
    labels, centers = KMeansCost(n_init=2).fit_free(X, 3, 0)
    inputs = FitInputs(X=X, labels=labels, feature_names=list(load_iris().feature_names), n_clusters=3,
                       centers=centers)
    est, pred, _ = fit_explainer(row, entry, inputs, random_state=0)
    assert isinstance(est, TAO) and est.oblique is oblique and est.depth == 2 and est.sparsity == 0.5
    assert np.array_equal(est.free_labels_, labels)
    assert np.array_equal(pred, est.tree_.predict(X))
