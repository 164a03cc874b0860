"""The presorted CART builder grows scikit-learn's tree node for node (issue 27)."""

import copy
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.datasets import load_digits, load_iris, load_wine
from sklearn.tree import DecisionTreeClassifier

from pipeline.trees import CART
from pipeline.trees import _cart_best_first as presorted
from pipeline.trees.cart import _center_scale

from shared_data import BENCHMARKS, needs_benchmarks
FIELDS = ("left_child", "right_child", "feature", "threshold", "impurity", "n_node_samples",
          "weighted_n_node_samples")


def assert_same_tree(X, y, **settings):
    """scikit-learn's DecisionTreeClassifier on the scaled X and the presorted builder agree exactly."""
    center, scale = _center_scale(X.min(axis=0), X.max(axis=0))
    ref = DecisionTreeClassifier(**copy.deepcopy(settings)).fit((X - center) / scale, y)
    ours = presorted.fit(X, y, center=center, scale=scale, **copy.deepcopy(settings))  # RandomState: same draws
    a, b = ref.tree_.__getstate__(), ours.tree_.__getstate__()
    assert (a["node_count"], a["max_depth"]) == (b["node_count"], b["max_depth"]), settings
    for name in FIELDS:
        assert np.array_equal(a["nodes"][name], b["nodes"][name]), (name, settings)
    split = a["nodes"]["left_child"] != -1
    assert np.array_equal(a["nodes"]["missing_go_to_left"][split], b["nodes"]["missing_go_to_left"][split])
    assert np.array_equal(a["values"], b["values"])
    assert np.array_equal(ref.classes_, ours.classes_) and ref.n_classes_ == ours.n_classes_
    Xs = (X - center) / scale
    assert np.array_equal(ref.predict(Xs), ours.predict(Xs))
    return ref, ours


@st.composite
def tied_data(draw):
    """Small data full of ties: few distinct values, duplicated and constant columns, values one
    float32 ulp apart (scikit-learn treats values within 1e-7, in float32, as one value)."""
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    n, d, k = draw(st.integers(2, 120)), draw(st.integers(1, 6)), draw(st.integers(2, 5))
    kind = draw(st.sampled_from(["levels", "normal", "ulps", "mixed"]))
    if kind == "levels":
        X = rng.integers(0, draw(st.integers(1, 6)), size=(n, d)).astype(float)
    elif kind == "normal":
        X = rng.normal(size=(n, d))
    elif kind == "ulps":  # neighbours of 1.0 and 0.5 in float32: near [-1, 1]'s ends after scaling
        base = np.array([1.0, 0.5, -1.0], dtype=np.float32)[rng.integers(0, 3, size=(n, d))]
        X = np.nextafter(base, np.float32(2), dtype=np.float32) if rng.random() < 0.5 else base
        X = X.astype(float) + rng.integers(0, 3, size=(n, d)) * float(np.finfo(np.float32).eps)
    else:
        X = np.round(rng.normal(size=(n, d)), 1)
    if d > 1 and draw(st.booleans()):
        X[:, -1] = X[:, 0]  # a duplicate column: ties between features
    if d > 2 and draw(st.booleans()):
        X[:, 1] = 3.0  # a constant column
    y = rng.integers(0, k, n)
    settings = dict(max_leaf_nodes=draw(st.integers(2, 14)), random_state=draw(st.integers(0, 2**31 - 2)),
                    min_samples_leaf=draw(st.sampled_from([1, 1, 2, 3, 0.1])),
                    max_depth=draw(st.sampled_from([None, None, 1, 2, 4])))
    return X, y, settings


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(tied_data())
def test_same_tree_as_sklearn_on_ties_and_duplicates(case):
    X, y, settings = case
    assert_same_tree(X, y, **settings)


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**31 - 1), st.integers(2, 12))
def test_same_tree_as_sklearn_on_blobs(seed, n_classes):
    rng = np.random.default_rng(seed)
    centres = rng.uniform(-3, 3, size=(n_classes, 5))
    y = rng.integers(0, n_classes, 3000)
    X = centres[y] + rng.normal(size=(3000, 5))
    assert_same_tree(X, y, max_leaf_nodes=2 * n_classes, random_state=seed)


@pytest.mark.parametrize("load", [load_iris, load_wine, load_digits])
def test_same_tree_as_sklearn_on_real_data(load):
    X, y = load(return_X_y=True)  # digits: 64 pixel columns of 17 levels, many constant
    for leaves in (3, 10, 40):
        assert_same_tree(X, y, max_leaf_nodes=leaves, random_state=0)
    assert_same_tree(X, y, max_leaf_nodes=20, random_state=np.random.RandomState(7))  # drawn as scikit-learn does


@needs_benchmarks("sipu/d31")
def test_same_tree_as_sklearn_on_d31():
    X = np.loadtxt(BENCHMARKS / "sipu" / "d31.data.gz")
    y = np.loadtxt(BENCHMARKS / "sipu" / "d31.labels0.gz", dtype=int)
    for leaves in (31, 60):
        assert_same_tree(X, y, max_leaf_nodes=leaves, random_state=1)


@pytest.mark.slow
def test_more_than_256_classes_and_sparse_class_ids():
    rng = np.random.default_rng(3)
    X = rng.normal(size=(3000, 3))
    y = rng.integers(0, 300, 3000) * 7  # int32 classes in the kernels
    assert_same_tree(X, y, max_leaf_nodes=400, random_state=0)


def test_cart_builders_agree_and_auto_picks_by_size():
    rng = np.random.default_rng(0)
    centres = rng.uniform(-10, 10, size=(6, 8))
    y = rng.integers(0, 6, 20000)
    X = centres[y] + 4 * rng.normal(size=(20000, 8))
    fits = {b: CART(random_state=0, builder=b).fit(X, y) for b in ("sklearn", "presorted")}
    assert fits["sklearn"].tree_ == fits["presorted"].tree_
    assert np.array_equal(fits["sklearn"].predict(X), fits["presorted"].predict(X))
    a, b = (fits[k].estimator_.tree_.__getstate__() for k in ("sklearn", "presorted"))
    assert all(np.array_equal(a["nodes"][name], b["nodes"][name]) for name in FIELDS)
    with pytest.raises(ValueError, match="builder"):
        CART(builder="fast").fit(X, y)


def test_presorted_builder_falls_back_to_sklearn_for_sparse_input():
    import scipy.sparse as sp

    X, y = load_iris(return_X_y=True)
    dense = CART(random_state=0, builder="sklearn").fit(X, y)
    sparse = CART(random_state=0, builder="presorted").fit(sp.csr_matrix(X), y)
    assert np.array_equal(dense.predict(X), sparse.predict(X))


@pytest.mark.slow
def test_same_tree_as_sklearn_at_200k_rows():
    rng = np.random.default_rng(5)
    centres = rng.uniform(-10, 10, size=(10, 20))
    y = rng.integers(0, 10, 200_000)
    X = centres[y] + 6 * rng.normal(size=(200_000, 20))
    assert_same_tree(X, y, max_leaf_nodes=10, random_state=0)
