import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.trees import ExplanationTree
from pipeline.validation import InvalidInputError


def small_tree():
    t = ExplanationTree(3, ["loop", "vertical_line", "curvature"])
    left, right = t.split(0, 0, 0.5)
    t.set_label(left, 2)
    rl, rr = t.split(right, 1, -0.2, left_label=0, right_label=1)
    return t


def brute_predict(tree, X):
    out = []
    for x in X:
        n = 0
        while not tree.is_leaf(n):
            if tree.is_oblique(n):
                v = sum(w * x[j] for j, w in tree.weights(n).items())
            else:
                v = x[tree.feature[n]]
            n = tree.children_left[n] if v <= tree.threshold[n] else tree.children_right[n]
        out.append(tree.label[n])
    return np.array(out)


def test_hand_example_predict_and_rules():
    t = small_tree()
    X = np.array([[0.5, 9, 0], [0.6, -0.2, 0], [0.6, -0.1, 0]])
    assert t.predict(X).tolist() == [2, 0, 1]
    rules = [str(r) for r in t.rules()]
    assert rules == [
        "loop <= 0.5 → cluster 2",
        "loop > 0.5 and vertical_line <= -0.2 → cluster 0",
        "loop > 0.5 and vertical_line > -0.2 → cluster 1",
    ]
    assert t.depth == 2 and t.n_leaves == 3 and t.features_used == [0, 1]


def test_oblique_node_predict_rules_json():
    t = ExplanationTree(3, ["striped", "water", "x"])
    left, right = t.split_oblique(0, {0: 0.8, 1: -0.3}, 0.1, left_label=0, right_label=1)
    X = np.array([[1.0, 0.0, 5.0], [0.0, 1.0, 5.0]])
    assert t.predict(X).tolist() == [1, 0]
    assert str(t.rules()[1]) == "0.8·striped - 0.3·water > 0.1 → cluster 1"
    assert ExplanationTree.from_json(t.to_json()) == t
    assert t.n_parameters == 3


def test_single_positive_oblique_weight_becomes_axis_test():
    t = ExplanationTree(2)
    t.split_oblique(0, [0.0, 2.0], 1.0)
    assert t.feature[0] == 1 and t.threshold[0] == 0.5


def test_bad_inputs():
    t = small_tree()
    with pytest.raises(InvalidInputError, match="4 features.*fitted with 3"):
        t.predict(np.zeros((2, 4)))
    with pytest.raises(InvalidInputError, match="NaN"):
        t.predict(np.array([[np.nan, 0, 0]]))
    with pytest.raises(InvalidInputError, match="already split"):
        t.split(0, 0, 1.0)
    with pytest.raises(InvalidInputError):
        ExplanationTree(2, ["a"])


@st.composite
def random_trees(draw):
    d = draw(st.integers(1, 4))
    t = ExplanationTree(d)
    for _ in range(draw(st.integers(0, 8))):
        leaves = list(t.leaves)
        node = leaves[draw(st.integers(0, len(leaves) - 1))]
        thr = draw(st.floats(-3, 3, allow_nan=False))
        if draw(st.booleans()) and d > 1:
            w = draw(st.lists(st.floats(-2, 2, allow_nan=False), min_size=d, max_size=d))
            if not any(w):
                w[0] = 1.0
            t.split_oblique(node, w, thr)
        else:
            t.split(node, draw(st.integers(0, d - 1)), thr)
    for i, leaf in enumerate(t.leaves):
        t.set_label(leaf, draw(st.integers(0, 5)))
    return t


@settings(max_examples=60, deadline=None)
@given(random_trees(), st.integers(0, 2**31 - 1))
def test_vectorised_predict_matches_brute_force_and_json_round_trip(tree, seed):
    X = np.random.default_rng(seed).normal(size=(50, tree.n_features)) * 2
    assert np.array_equal(tree.predict(X), brute_predict(tree, X))
    back = ExplanationTree.from_json(tree.to_json())
    assert back == tree
    assert np.array_equal(back.predict(X), tree.predict(X))
    assert json.loads(tree.to_json()) == tree.to_dict()
    assert len(tree.rules()) == tree.n_leaves
