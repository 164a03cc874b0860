"""Simplified, annotated rules; Graphviz export; validation of tree documents."""

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.trees import ExplanationTree
from pipeline.validation import InvalidInputError


def redundant_tree():
    """loop is cut three times on the path to leaf 'c'; its rule must read 0.2 < loop <= 0.5."""
    t = ExplanationTree(3, ["loop", "vertical_line", "curvature"])
    left, right = t.split(0, 0, 0.5, right_label=2)
    a, b = t.split(left, 1, 0.1, left_label=0)
    c, d = t.split(b, 0, 0.2, left_label=1)
    t.split(d, 0, 0.4, left_label=1, right_label=0)
    return t


def test_hand_example_simplified_rules_with_annotations():
    t = redundant_tree()
    X = np.array([[0.0, 0.0, 0], [0.3, 0.5, 0], [0.45, 0.5, 0], [0.45, 0.5, 0], [0.9, 0, 0], [0.8, 0, 0]])
    reference = np.array([0, 1, 0, 0, 2, -1])
    y = np.array([7, 3, 7, 7, 1, 1])
    rules = t.rules(X, reference, y, class_names=[str(i) for i in range(10)])
    assert [r.raw().split(" →")[0] for r in rules][2] == "loop <= 0.5 and vertical_line > 0.1 and loop > 0.2 and loop <= 0.4"
    assert [str(r) for r in rules] == [
        'loop <= 0.5 and vertical_line <= 0.1 → cluster 0 · 1 point · 100% pure · mostly "7" (100%)',
        'loop <= 0.2 and vertical_line > 0.1 → cluster 1 · 0 points',
        '0.2 < loop <= 0.4 and vertical_line > 0.1 → cluster 1 · 1 point · 100% pure · mostly "3" (100%)',
        '0.4 < loop <= 0.5 and vertical_line > 0.1 → cluster 0 · 2 points · 100% pure · mostly "7" (100%)',
        'loop > 0.5 → cluster 2 · 2 points · 50% pure · mostly "1" (100%)',
    ]
    d = rules[2].to_dict()
    assert d["n_points"] == 1 and d["majority"] == 3 and d["conditions"][0] == {
        "low": 0.2, "high": 0.4, "text": "0.2 < loop <= 0.4", "feature": 0, "name": "loop", "units": "raw"}
    json.dumps([r.to_dict() for r in rules])  # JSON-serialisable


def test_string_classes_and_no_names():
    t = ExplanationTree(1, root_label=0)
    (rule,) = t.rules(np.zeros((3, 1)), reference=[0, 0, 1], y=np.array(["cat", "dog", "dog"]))
    assert str(rule) == 'always → cluster 0 · 3 points · 67% pure · mostly "dog" (67%)'


def test_oblique_rule_lists_every_term():
    t = ExplanationTree(7, [f"c{j}" for j in range(7)])
    t.split_oblique(0, {j: (j + 1) * (-1) ** j for j in range(7)}, 0.5, left_label=0, right_label=1)
    text = str(t.rules()[0])  # largest weight first, every term (the old "+ 3 more" cut is gone)
    assert text == "7·c6 - 6·c5 + 5·c4 - 4·c3 + 3·c2 - 2·c1 + 1·c0 <= 0.5 → cluster 0"
    assert t.rules()[0].conditions[0].format() == "7·c6 - 6·c5 + 5·c4 - 4·c3 + 3·c2 - 2·c1 + 1·c0 <= 0.5"


@st.composite
def random_trees(draw):
    d = draw(st.integers(1, 3))
    t = ExplanationTree(d)
    thresholds = st.sampled_from([-1.0, -0.5, 0.0, 0.25, 0.5, 1.0])  # repeats make equal bounds likely
    for _ in range(draw(st.integers(0, 10))):
        leaves = list(t.leaves)
        node = leaves[draw(st.integers(0, len(leaves) - 1))]
        if draw(st.integers(0, 4)) == 0 and d > 1:
            w = draw(st.lists(st.sampled_from([-1.0, 0.0, 0.5, 2.0]), min_size=d, max_size=d))
            if not any(w):
                w[0] = -1.0
            t.split_oblique(node, w, draw(thresholds))
        else:
            t.split(node, draw(st.integers(0, d - 1)), draw(thresholds))
    for leaf in t.leaves:
        t.set_label(leaf, draw(st.integers(0, 3)))
    return t


@settings(max_examples=80, deadline=None)
@given(random_trees(), st.integers(0, 2**31 - 1))
def test_simplified_rule_selects_exactly_the_raw_conjunction(tree, seed):
    rng = np.random.default_rng(seed)
    X = rng.choice([-1.0, -0.5, 0.0, 0.25, 0.5, 1.0, 0.3, -2.0], size=(80, tree.n_features))  # hits the bounds
    leaf_of = tree.apply(X)
    for rule in tree.rules():
        raw = np.ones(len(X), dtype=bool)
        for c in rule.conditions:  # brute force: every test of the path, one by one
            for i, x in enumerate(X):
                v = x[c.feature] if c.weights is None else sum(w * x[j] for j, w in c.weights.items())
                raw[i] &= (v <= c.threshold) if c.op == "<=" else (v > c.threshold)
        assert np.array_equal(rule.mask(X), raw)
        assert np.array_equal(rule.mask(X), leaf_of == rule.leaf)
        keys = [iv.feature if iv.weights is None else tuple(iv.weights.items()) for iv in rule.intervals]
        assert len(keys) == len(set(keys))  # at most one interval per feature / combination
        first_seen = list(dict.fromkeys(c.feature if c.weights is None else tuple(c.weights.items())
                                        for c in rule.conditions))
        assert keys == first_seen  # stable order: as the features first appear from the root


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # pydot's use of old pyparsing names
def test_to_dot_parses_with_pydot():
    pydot = pytest.importorskip("pydot")
    t = ExplanationTree(3, ['say "hi"', "back\\slash", "c"])
    left, right = t.split(0, 0, 0.5, left_label=0)
    t.split_oblique(right, {0: 1.0, 1: -2.0, 2: 0.5}, 0.1, left_label=1, right_label=2)
    X = np.random.default_rng(0).normal(size=(30, 3))
    source = t.to_dot(X, reference=t.predict(X), title="tree")
    (graph,) = pydot.graph_from_dot_data(source)
    assert len(graph.get_nodes()) >= t.n_nodes and len(graph.get_edges()) == t.n_nodes - 1
    labels = {n.get_name(): n.get("label") for n in graph.get_nodes()}
    assert '\\"hi\\"' in labels["n0"] and "100% pure" in labels[f"n{left}"]


@pytest.mark.parametrize("text, match", [
    ('{"format": "explanation-tree", "version": 1, "n_features": 2, "nod', "not valid JSON.*truncated"),
    ("[1, 2]", "must be an object"),
    ('{"format": "explanation-tree", "n_features": 2, "nodes": [{"feature": 5, "threshold": 0.1, "left": 1, '
     '"right": 2}, {"label": 0}, {"label": 1}]}', r"node 0 \(feature index\).*\[0, 2\)"),
    ('{"format": "explanation-tree", "n_features": 2, "nodes": [{"weights": [[0, 1.0], [9, 2.0]], "threshold": 0, '
     '"left": 1, "right": 2}, {"label": 0}, {"label": 1}]}', "index 9 out of range"),
    ('{"format": "explanation-tree", "n_features": 2, "nodes": [{"feature": 0, "threshold": 0.1, "left": 1, '
     '"right": 7}, {"label": 0}]}', "right=7"),
    ('{"format": "explanation-tree", "n_features": 2, "nodes": [{"feature": 0, "threshold": 0.1, "left": 1, '
     '"right": 1}, {"label": 0}]}', "already has a parent"),
    ('{"format": "explanation-tree", "n_features": 2, "nodes": [{"feature": 0, "threshold": null, "left": 1, '
     '"right": 2}, {"label": 0}, {"label": 1}]}', "finite number"),
    ('{"format": "explanation-tree", "n_features": 2, "nodes": [{"label": 0}, {"label": 1}]}', "not reachable"),
    ('{"format": "explanation-tree", "n_features": 0, "nodes": [{"label": 0}]}', "n_features=0"),
])
def test_from_json_rejects_malformed_documents(text, match):
    with pytest.raises(InvalidInputError, match=match):
        ExplanationTree.from_json(text)


def test_from_json_round_trip_still_exact():
    t = redundant_tree()
    assert ExplanationTree.from_json(t.to_json()) == t


def test_string_labels_name_the_leaves_in_rules_dot_and_json():
    """Fitted to string labels, rules read the class names ("→ setosa"), also after a JSON round-trip."""
    import numpy as np
    from sklearn.datasets import load_iris

    from pipeline.trees import CART, IMM, MMDT, ExplanationTree

    data = load_iris()
    names = np.array(data.target_names)[data.target]
    for est in (MMDT(), CART(), IMM()):
        tree = est.fit(data.data, names).tree_
        rules = tree.rules(data.data, est.predict(data.data), names)
        assert {r.to_dict()["text"].split("→ ")[1].split(" ·")[0] for r in rules} == set(data.target_names)
        assert all(r.stats.purity == 1.0 for r in rules)  # the reference is the tree's own prediction
        assert "setosa" in tree.to_dot() and "setosa" in tree.to_text()
        assert [str(r) for r in ExplanationTree.from_json(tree.to_json()).rules()] == [str(r) for r in tree.rules()]
    assert MMDT().fit(data.data, data.target).tree_.label_names is None  # integer labels stay "cluster k"


@settings(max_examples=60, deadline=None)
@given(random_trees(), st.integers(0, 2**31 - 1))
def test_a_reading_prints_what_the_rows_print(tree, seed):
    """tree.read(X, ...) once, then rules / text / DOT from it: the same as passing the rows to each."""
    rng = np.random.default_rng(seed)
    X = rng.choice([-1.0, -0.5, 0.0, 0.25, 0.5, 1.0, 0.3, -2.0], size=(60, tree.n_features))
    ref, y = rng.integers(0, 4, 60), rng.integers(0, 3, 60)
    reading = tree.read(X, ref, y, ["a", "b", "c"])
    assert [str(r) for r in tree.rules(reading=reading)] == [str(r) for r in tree.rules(X, ref, y, ["a", "b", "c"])]
    assert tree.to_text(reading=reading) == tree.to_text(X)
    assert tree.to_dot(title="t", reading=reading) == tree.to_dot(X, ref, y, ["a", "b", "c"], title="t")


@settings(max_examples=150, deadline=None)
@given(st.data(), st.sampled_from([1 << 20, 7]))
def test_counted_leaf_stats_equal_the_grouped_rows(data, block):
    """Leaf statistics by counting (integer leaves, labels and classes) equal those of the rows
    grouped by leaf: sizes, purity (noise -1 impure), the smallest most frequent class, unknown
    classes (-1) left out, leaves no row reaches, and class names; in one block or many."""
    from pipeline.trees.rules import _counted_leaf_stats, _sorted_leaf_stats

    n = data.draw(st.integers(1, 60))
    leaves = data.draw(st.lists(st.integers(0, 9), min_size=1, max_size=6, unique=True))
    rows = np.array(data.draw(st.lists(st.sampled_from(leaves), min_size=n, max_size=n)), dtype=np.int64)
    labels = data.draw(st.lists(st.integers(-1, 4), min_size=len(leaves), max_size=len(leaves)))
    ref = data.draw(st.none() | st.lists(st.integers(-1, 4), min_size=n, max_size=n).map(np.array))
    truth = data.draw(st.none() | st.lists(st.integers(-1, 5), min_size=n, max_size=n).map(np.array))
    names = data.draw(st.none() | st.just(["zero", "one", "two"]))
    import pipeline.trees.rules as rules_module

    saved, rules_module._BLOCK_ROWS = rules_module._BLOCK_ROWS, block  # blocks of 7 rows: every block path
    try:
        counted = _counted_leaf_stats(rows, leaves, labels, ref, truth, names)
    finally:
        rules_module._BLOCK_ROWS = saved
    assert counted is not None
    assert counted == _sorted_leaf_stats(rows, leaves, labels, ref, truth, names)
