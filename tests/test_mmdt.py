import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from scipy import stats
from sklearn.mixture import GaussianMixture

from pipeline.trees import MMDT, ConceptMMDT, ExplanationTree, RandomizedMMDT
from pipeline.validation import InvalidInputError

ESTIMATORS = [MMDT, RandomizedMMDT]


# ----------------------------------------------------------------- hand-worked examples
def test_figure2_situation_normalisation_decides_the_axis():
    means = [[0, 0], [1, 5], [4, 1]]
    # σ = (1, 1): y-gaps {1, 4} beat x-gaps {1, 3}; cut halfway across the 4-gap at y = 3.
    t = MMDT(random_state=0).fit_mixture(means, [1, 1]).tree_
    assert (t.feature[0], t.threshold[0]) == (1, 3.0)
    assert [str(r) for r in t.rules()] == [
        "x[1] <= 3 and x[0] <= 2 → cluster 0",
        "x[1] <= 3 and x[0] > 2 → cluster 2",
        "x[1] > 3 → cluster 1",
    ]
    # σ = (1, 2): y's best gap normalises to 4/2 = 2 < 3/1, so x is cut first at 2.5.
    t = MMDT(random_state=0).fit_mixture(means, [1, 2], feature_names=["a", "b"]).tree_
    assert [str(r) for r in t.rules()] == [
        "a <= 2.5 and b <= 2.5 → cluster 0",
        "a <= 2.5 and b > 2.5 → cluster 1",
        "a > 2.5 → cluster 2",
    ]


def test_ties_are_broken_at_random_with_the_seed():
    square = [[0, 0], [2, 0], [0, 2], [2, 2]]  # every gap on both axes equals 2
    roots = {MMDT(random_state=s).fit_mixture(square, [1, 1]).tree_.feature[0] for s in range(40)}
    assert roots == {0, 1}
    for s in range(5):
        t = MMDT(random_state=s).fit_mixture(square, [1, 1]).tree_
        assert np.all(t.threshold[t.feature >= 0] == 1.0)
        assert t.n_leaves == 4


def test_near_duplicate_means_are_judged_relative_to_sigma():
    a = 1.0
    b = np.nextafter(a, 2.0)
    with pytest.raises(InvalidInputError, match="duplicates"):  # 2e-16 σ apart: indistinguishable
        MMDT().fit_mixture([[a], [b]], [1.0])
    m = MMDT().fit_mixture([[a], [b]], [1e-20])  # the same gap is 2e4 σ when σ is tiny
    assert m.predict([[a], [b]]).tolist() == [0, 1]


def test_fit_from_labels_keeps_label_values_and_ignores_noise():
    rng = np.random.default_rng(0)
    X = np.vstack([rng.normal([0, 0], [1, 3], (200, 2)), rng.normal([10, 0], [2, 1], (300, 2))])
    y = np.repeat([7, 3], [200, 300])
    m = MMDT(random_state=0).fit(X, y)
    assert m.classes_.tolist() == [3, 7]
    assert np.allclose(m.means_, [X[y == 3].mean(0), X[y == 7].mean(0)])
    expected_sigma = np.maximum(X[y == 3].std(0), X[y == 7].std(0))
    assert np.allclose(m.sigma_, expected_sigma)
    assert m.predict(m.means_).tolist() == [3, 7]
    # Wild noise rows labelled -1 change nothing.
    Xn = np.vstack([X, rng.normal(0, 100, (50, 2))])
    yn = np.concatenate([y, -np.ones(50, int)])
    assert MMDT(random_state=0, noise_label=-1).fit(Xn, yn).tree_ == m.tree_


def test_constant_axis_does_not_divide_by_zero():
    rng = np.random.default_rng(1)
    X = np.column_stack([rng.normal(0, 1, 100), np.full(100, 5.0), np.repeat([0.0, 1.0], 50)])
    y = np.repeat([0, 1], 50)
    X[:50, 0] += 10
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with np.errstate(all="raise"):
            m = MMDT().fit(X, y)
    assert np.all(np.isfinite(m.sigma_)) and np.all(m.sigma_ > 0)
    # Axis 2 is constant within each cluster but differs between them: a perfect cut.
    assert m.tree_.feature[0] == 2
    assert (m.predict(X) == y).all()


@pytest.mark.parametrize("cov_type", ["full", "tied", "diag", "spherical"])
def test_fit_gaussian_mixture_every_covariance_type(cov_type):
    rng = np.random.default_rng(2)
    X = np.vstack([rng.normal(c, 1, (100, 3)) for c in ([0, 0, 0], [8, 0, 0], [0, 8, 1])])
    gmm = GaussianMixture(3, covariance_type=cov_type, random_state=0).fit(X)
    m = MMDT(random_state=0).fit_gaussian_mixture(gmm)
    full = {"full": lambda c: c, "tied": lambda c: np.stack([c] * 3),
            "diag": lambda c: np.stack([np.diag(v) for v in c]),
            "spherical": lambda c: np.stack([v * np.eye(3) for v in c])}[cov_type](gmm.covariances_)
    sigma = np.sqrt(np.max([np.diag(c) for c in full], axis=0))
    assert np.allclose(m.sigma_, sigma)
    assert m.tree_ == MMDT(random_state=0).fit_mixture(gmm.means_, sigma).tree_
    assert m.predict(gmm.means_).tolist() == [0, 1, 2]


# ------------------------------------------------------------------ brute force check
def brute_force_mmdt(means, sigma):
    """Algorithm 1 literally: global arg-max over (node, axis, gap) in pure Python.

    Returns {frozenset(mean indices at a node): (axis, threshold)}; no ties expected."""
    K, d = means.shape
    open_nodes, cuts = [list(range(K))], {}
    while open_nodes:
        best = None
        for ni, node in enumerate(open_nodes):
            for j in range(d):
                t = sorted(means[k][j] for k in node)
                for i in range(len(t) - 1):
                    score = (t[i + 1] - t[i]) / sigma[j]
                    if best is None or score > best[0]:
                        best = (score, ni, j, (t[i] + t[i + 1]) / 2)
        _, ni, j, theta = best
        node = open_nodes.pop(ni)
        cuts[frozenset(node)] = (j, theta)
        for part in ([k for k in node if means[k][j] <= theta], [k for k in node if means[k][j] > theta]):
            if len(part) > 1:
                open_nodes.append(part)
    assert len(cuts) == K - 1
    return cuts


def brute_predict(means, cuts, X):
    out = []
    for x in X:
        node = frozenset(range(len(means)))
        while len(node) > 1:
            j, theta = cuts[node]
            node = frozenset(k for k in node if (means[k][j] <= theta) == (x[j] <= theta))
        out.append(next(iter(node)))
    return np.array(out)


@settings(max_examples=40, deadline=None)
@given(st.integers(2, 8), st.integers(1, 4), st.integers(0, 2**31 - 1))
def test_mmdt_matches_brute_force(K, d, seed):
    rng = np.random.default_rng(seed)
    means = rng.normal(0, 5, (K, d))  # continuous: no ties almost surely
    sigma = rng.uniform(0.5, 2, d)
    cuts = brute_force_mmdt(means, sigma)
    X = np.vstack([rng.normal(0, 6, (60, d)), means])
    m = MMDT(random_state=seed).fit_mixture(means, sigma)
    assert (m.predict(X) == brute_predict(means, cuts, X)).all()
    # same set of cuts (node order aside)
    ours = {(int(f), float(t)) for f, t in zip(m.tree_.feature, m.tree_.threshold) if f >= 0}
    assert ours == {(j, float(t)) for j, t in cuts.values()}


# ------------------------------------------------------------------ properties
grid_means = st.integers(2, 10).flatmap(
    lambda K: st.integers(1, 3).flatmap(
        lambda d: arrays(np.float64, (K, d), elements=st.integers(-3, 3).map(float))))


def _distinct(means):
    return np.unique(means, axis=0).shape[0] == means.shape[0]


@pytest.mark.parametrize("Est", ESTIMATORS)
@settings(max_examples=60, deadline=None)
@given(means=grid_means, seed=st.integers(0, 2**31 - 1), data=st.data())
def test_tree_properties(Est, means, seed, data):
    if not _distinct(means):
        with pytest.raises(InvalidInputError, match="distinct"):
            Est().fit_mixture(means, np.ones(means.shape[1]))
        return
    sigma = np.array(data.draw(st.lists(st.floats(0.1, 10), min_size=means.shape[1], max_size=means.shape[1])))
    K = means.shape[0]
    est = Est(random_state=seed).fit_mixture(means, sigma)
    tree = est.tree_
    # every leaf holds exactly one mean
    assert tree.n_leaves == K
    assert len(set(tree.apply(means).tolist())) == K
    # predict(means) returns each mean's own label
    assert est.predict(means).tolist() == list(range(K))
    # lossless JSON round trip
    back = ExplanationTree.from_json(tree.to_json())
    assert back == tree
    X = np.random.default_rng(seed).uniform(-4, 4, (50, means.shape[1]))
    assert (back.predict(X) == tree.predict(X)).all()
    # a seed reproduces the tree
    assert Est(random_state=seed).fit_mixture(means, sigma).tree_ == tree


def test_randomized_threshold_is_uniform_over_range():
    thetas = [RandomizedMMDT(random_state=s).fit_mixture([[1.0], [3.0]], [1.0]).tree_.threshold[0]
              for s in range(400)]
    assert min(thetas) >= 1 and max(thetas) < 3
    assert stats.kstest(thetas, stats.uniform(loc=1, scale=2).cdf).pvalue > 1e-3


def test_randomized_axis_maximises_normalised_spread():
    # spread/σ: axis 0 → 10/5 = 2, axis 1 → 3/1 = 3
    means = [[0, 0], [10, 3], [5, 1]]
    for s in range(10):
        assert RandomizedMMDT(random_state=s).fit_mixture(means, [5, 1]).tree_.feature[0] == 1


# ------------------------------------------------------------------ bad input
@pytest.mark.parametrize("Est", ESTIMATORS)
@pytest.mark.parametrize("means, sigma, match", [
    ([[0.0, 1.0]], [1, 1], "at least 2"),
    ([[0, 1], [0, 1], [2, 2]], [1, 1], "rows 0 and 1 are identical"),
    ([[0, 1], [2, 2]], [1, 0], "> 0"),
    ([[0, 1], [2, 2]], [1, -1], "> 0"),
    ([[0, 1], [2, 2]], [1, np.inf], "NaN or infinite"),
    ([[0, np.nan], [2, 2]], [1, 1], "NaN or infinite"),
    ([[0, 1], [2, 2]], [1, 1, 1], "length 3"),
])
def test_bad_mixture_input(Est, means, sigma, match):
    with pytest.raises(InvalidInputError, match=match):
        Est().fit_mixture(means, sigma)


def test_predict_wrong_width_and_unfitted():
    m = MMDT()
    with pytest.raises(Exception, match="not fitted"):
        m.predict([[0.0, 1.0]])
    m.fit_mixture([[0, 0], [1, 1]], [1, 1])
    with pytest.raises(ValueError, match="3 features"):
        m.predict(np.zeros((2, 3)))
    with pytest.raises(ValueError, match="NaN"):
        m.predict([[np.nan, 0.0]])


def test_fit_needs_two_clusters():
    X = np.random.default_rng(0).normal(size=(10, 2))
    with pytest.raises(InvalidInputError, match="at least 2"):
        MMDT().fit(X, np.zeros(10, int))
    with pytest.raises(InvalidInputError, match="noise"):
        MMDT(noise_label=-1).fit(X, -np.ones(10, int))


# ------------------------------------------------------------------ Concept-MMDT
def test_concept_sigma_matches_monte_carlo():
    rng = np.random.default_rng(3)
    d, M = 5, 3
    A = rng.normal(size=(d, d))
    cov = A @ A.T + 0.1 * np.eye(d)
    C = rng.normal(size=(M, d))
    means = rng.normal(0, 10, (4, d))
    cm = ConceptMMDT(C, ["loops", "lines", "curves"], random_state=0).fit_mixture(means, cov)
    assert np.allclose(cm.concept_means_, means @ C.T)
    samples = rng.multivariate_normal(np.zeros(d), cov, size=200_000) @ C.T
    assert np.allclose(cm.concept_sigma_, samples.std(axis=0), rtol=0.01)
    assert all(n in ("loops", "lines", "curves") for r in cm.tree_.rules() for n in [c.lhs() for c in r.conditions])
    assert cm.predict(means).tolist() == [0, 1, 2, 3]


def test_concept_sigma_per_component_is_max():
    C = np.array([[1.0, 0.0], [1.0, 1.0]])
    covs = np.array([np.diag([4.0, 1.0]), np.diag([1.0, 9.0])])
    cm = ConceptMMDT(C).fit_mixture([[0, 0], [5, 5]], covs)
    # c1: max(4, 1) -> 2 ; c2 = (1, 1): max(4 + 1, 1 + 9) -> sqrt(10)
    assert np.allclose(cm.concept_sigma_, [2.0, np.sqrt(10.0)])


def test_concept_mmdt_with_identity_cavs_is_mmdt():
    rng = np.random.default_rng(4)
    means = rng.normal(0, 5, (6, 3))
    cov = np.diag([1.0, 4.0, 0.25])
    a = ConceptMMDT(np.eye(3), random_state=1).fit_mixture(means, cov)
    b = MMDT(random_state=1).fit_mixture(means, np.sqrt(np.diag(cov)))
    assert a.tree_ == b.tree_


def test_concept_fit_from_latents_and_predict_projects():
    rng = np.random.default_rng(5)
    Z = np.vstack([rng.normal(c, 0.5, (150, 4)) for c in ([0, 0, 0, 0], [3, 3, 0, 0], [0, 3, 3, 3])])
    y = np.repeat([5, 1, 9], 150)
    C = rng.normal(size=(2, 4))
    cm = ConceptMMDT(C, ["a", "b"]).fit(Z, y)
    assert cm.classes_.tolist() == [1, 5, 9]
    assert np.allclose(cm.concept_means_, np.array([Z[y == c].mean(0) for c in (1, 5, 9)]) @ C.T)
    per_cluster_std = np.array([(Z[y == c] @ C.T).std(0) for c in (1, 5, 9)]).max(axis=0)
    assert np.allclose(cm.concept_sigma_, per_cluster_std)
    assert (cm.predict(Z) == cm.tree_.predict(Z @ C.T)).all()
    assert set(cm.predict(Z).tolist()) <= {1, 5, 9}


@pytest.mark.parametrize("cavs, covariance, match", [
    (np.ones((2, 3)), np.eye(2), "latent dims"),
    (np.eye(2), np.eye(3), "shape"),
    (np.eye(2), np.ones((3, 2, 2)), "shape"),
    (np.eye(2), np.array([[1.0, 2.0], [2.0, 1.0]]), "positive semi-definite"),
    (np.eye(2), np.array([[1.0, 0.5], [0.0, 1.0]]), "symmetric"),
    (np.eye(2), np.array([[1.0, np.nan], [np.nan, 1.0]]), "NaN"),
    (np.array([[1.0, 0.0], [0.0, 0.0]]), np.eye(2), "all zero"),
    (np.array([[1.0, 1.0]]), np.eye(2), "concept means"),
])
def test_concept_bad_input(cavs, covariance, match):
    # means [0, 1] and [1, 0] coincide under the single CAV (1, 1)
    with pytest.raises(InvalidInputError, match=match):
        ConceptMMDT(cavs).fit_mixture([[0.0, 1.0], [1.0, 0.0]], covariance)


def test_concept_names_length_and_predict_width():
    with pytest.raises(InvalidInputError, match="one name per CAV"):
        ConceptMMDT(np.eye(2), ["only-one"]).fit_mixture([[0, 0], [1, 1]], np.eye(2))
    cm = ConceptMMDT(np.eye(2)).fit_mixture([[0, 0], [1, 1]], np.eye(2))
    with pytest.raises(ValueError, match="expecting 2 features"):
        cm.predict(np.zeros((1, 3)))


def test_singular_covariance_gives_finite_concept_sigma():
    cov = np.diag([1.0, 0.0])  # PSD, concept 2 has zero variance
    with np.errstate(all="raise"):
        cm = ConceptMMDT(np.eye(2)).fit_mixture([[0, 0], [0, 1]], cov)
    assert np.all(cm.concept_sigma_ > 0)
    assert cm.tree_.feature[0] == 1


def test_docs_example_runs():
    import re
    from pathlib import Path

    text = (Path(__file__).parents[1] / "docs" / "mmdt.md").read_text()
    code = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    namespace = {}
    exec(compile(code, "docs/mmdt.md", "exec"), namespace)
    assert namespace["tree"].tree_.n_leaves == 3
    assert namespace["cm"].tree_.feature_names == ["stripes", "roundness"]
