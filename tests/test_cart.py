import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.datasets import load_iris, load_wine
from sklearn.tree import DecisionTreeClassifier

from pipeline.trees import CART, ExplanationTree, tree_from_sklearn
from pipeline.trees.cart import float32_exact_threshold
from pipeline.validation import InvalidInputError


def near_threshold_points(thresholds, rng, n_features, n_rows=200):
    """Rows whose coordinates sit on, and a few float64/float32 ulps around, the thresholds."""
    cands = []
    for t in thresholds:
        t32 = np.float32(t)
        for base in (t, float(t32)):
            x = base
            for _ in range(3):
                cands += [x]
                x = np.nextafter(x, np.inf)
            x = base
            for _ in range(3):
                x = np.nextafter(x, -np.inf)
                cands += [x]
        lo32, hi32 = np.nextafter(t32, np.float32(-np.inf)), np.nextafter(t32, np.float32(np.inf))
        for a, b in ((lo32, t32), (t32, hi32)):  # float32 rounding midpoints and their neighbours
            mid = (float(a) + float(b)) / 2
            cands += [mid, np.nextafter(mid, np.inf), np.nextafter(mid, -np.inf)]
    cands = np.array(cands, dtype=np.float64)
    return rng.choice(cands, size=(n_rows, n_features))


def test_float32_exact_threshold_by_brute_force():
    rng = np.random.default_rng(0)
    ts = np.concatenate([rng.normal(0, 1, 200), rng.normal(0, 1e6, 50), [0.0, -0.0, 1.5, -2.25, 1e-40, -1e-40]])
    ts = np.concatenate([ts, [(float(np.float32(t)) + float(np.nextafter(np.float32(t), np.float32(np.inf)))) / 2
                              for t in ts[:50]]])  # thresholds that are themselves float32 midpoints
    for t in ts:
        tp = float32_exact_threshold(t)
        xs = near_threshold_points([t, tp], rng, 1, 400)[:, 0]
        assert np.array_equal(xs <= tp, xs.astype(np.float32) <= t), t


def test_largest_float32_threshold():
    big = float(np.finfo(np.float32).max)
    tp = float32_exact_threshold(big)
    assert tp > big and np.isfinite(tp)
    assert np.float32(np.nextafter(tp, -np.inf)) == np.float32(big)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**31 - 1), st.integers(1, 4), st.integers(2, 6), st.sampled_from([1.0, 1e-3, 1e5]))
def test_conversion_predicts_exactly_as_sklearn(seed, d, K, scale):
    rng = np.random.default_rng(seed)
    X = rng.normal(0, scale, (300, d))
    y = rng.integers(0, K, 300)
    clf = DecisionTreeClassifier(max_leaf_nodes=K + 2, random_state=seed).fit(X, y)
    tree = tree_from_sklearn(clf)
    thr = clf.tree_.threshold[clf.tree_.feature >= 0]
    probe = np.vstack([X, rng.normal(0, scale, (300, d)), near_threshold_points(thr, rng, d)])
    assert np.array_equal(tree.predict(probe), clf.predict(probe))
    assert tree.n_leaves == clf.get_n_leaves()
    assert np.array_equal(ExplanationTree.from_json(tree.to_json()).predict(probe), clf.predict(probe))


def test_conversion_uses_dataframe_feature_names():
    pd = pytest.importorskip("pandas")
    data = load_iris(as_frame=True)
    clf = DecisionTreeClassifier(max_leaf_nodes=3, random_state=0).fit(data.data, data.target)
    tree = tree_from_sklearn(clf)
    assert tree.feature_names == list(data.data.columns)
    assert any("petal" in str(r) for r in tree.rules())
    assert isinstance(data.data, pd.DataFrame)


def test_conversion_rejects_non_integer_classes_and_multioutput():
    X = np.arange(8.0).reshape(4, 2)
    with pytest.raises(InvalidInputError, match="integer"):
        tree_from_sklearn(DecisionTreeClassifier().fit(X, ["a", "b", "a", "b"]))
    with pytest.raises(InvalidInputError, match="single-output"):
        tree_from_sklearn(DecisionTreeClassifier().fit(X, np.array([[0, 1], [1, 0], [0, 0], [1, 1]])))


def test_cart_on_wine_has_k_leaves_and_ignores_noise():
    X, y = load_wine(return_X_y=True)
    y = y.copy()
    y[::10] = -1
    cart = CART(random_state=0, noise_label=-1).fit(X, y, feature_names=[f"f{j}" for j in range(X.shape[1])])
    assert cart.tree_.n_leaves == 3
    assert cart.classes_.tolist() == [0, 1, 2]
    keep = y != -1
    scaled = (X - cart.x_center_) / cart.x_scale_
    assert np.array_equal(cart.classes_[cart.estimator_.predict(scaled)], cart.predict(X))
    assert cart.estimator_.n_features_in_ == 13 and cart.estimator_.tree_.n_node_samples[0] == keep.sum()
    assert cart.tree_.feature_names[0] == "f0"
    assert -1 not in cart.predict(X)


def test_cart_n_leaves_and_bad_input():
    X, y = load_iris(return_X_y=True)
    assert CART(n_leaves=5, random_state=0).fit(X, y).tree_.n_leaves == 5
    with pytest.raises(InvalidInputError, match="at least 2 classes"):
        CART().fit(X, np.zeros(len(y), int))
    with pytest.raises(ValueError, match="n_leaves"):
        CART(n_leaves=1).fit(X, y)
    cart = CART().fit(X, y)
    with pytest.raises(ValueError, match="expecting 4 features"):
        cart.predict(X[:, :2])


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**31 - 1), st.integers(1, 3), st.integers(2, 5),
       st.sampled_from([1.0, 1e-300, 1e300, 1e-8]), st.sampled_from([0.0, 2.0**40, -1e6]))
def test_scaled_cart_predicts_exactly_as_its_sklearn_tree(seed, d, K, scale, offset):
    """CART fits sklearn on (X - x_center_) / x_scale_ and pulls each threshold back exactly."""
    rng = np.random.default_rng(seed)
    X = rng.normal(0, 1, (200, d)) * scale + offset
    y = rng.integers(0, K, 200)
    if np.unique(y).size < 2 or np.all(X == X[0]):  # 1e-300 spread vanishes next to an offset
        return
    cart = CART(n_leaves=K + 2, random_state=seed).fit(X, y)
    thr = cart.tree_.threshold[cart.tree_.feature >= 0]
    near = [np.nextafter(t, direction) for t in thr for direction in (-np.inf, np.inf)]
    probe = np.vstack([X, rng.choice(np.concatenate([thr, near, X.ravel()]), size=(300, d))])
    expected = cart.classes_[cart.estimator_.predict((probe - cart.x_center_) / cart.x_scale_)]
    assert np.array_equal(cart.predict(probe), expected)
    assert cart.tree_.n_leaves == cart.estimator_.get_n_leaves()


def test_cart_is_scale_invariant_and_rejects_out_of_range_leaves():
    X, y = load_iris(return_X_y=True)
    base = CART(random_state=0).fit(X, y).predict(X)
    for factor in (1e-300, 1e300):
        assert np.array_equal(CART(random_state=0).fit(X * factor, y).predict(X * factor), base)
    with pytest.raises(InvalidInputError, match="range: 3 to 150"):
        CART(n_leaves=500).fit(X, y)
    with pytest.raises(InvalidInputError, match="constant"):
        CART().fit(np.ones_like(X), y)
    assert CART(max_depth=2, min_samples_leaf=5, random_state=0).fit(X, y).tree_.depth <= 2
