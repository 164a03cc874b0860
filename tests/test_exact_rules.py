"""Printed rules are the tree, without the training data (issue 36, item 1).

Every estimator keeps, at fit time, the training values nearest each cut; ``rules()``,
``to_text()``, ``to_dot()`` and the JSON's rule text, all called *without* ``X``, print
thresholds (and oblique weights) that, parsed back and evaluated left to right, route every
training row as the tree does, also after a JSON round trip, on data whose values differ only
in their 6th to 12th significant digit.
"""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from pipeline.trees import CART, IMM, ExplanationTree
from pipeline.trees.display import cut_neighbours
from pipeline.validation import InvalidInputError

NAMES = ["f0", "f1", "f2"]
# the parser of printed rules is the benchmark's (benchmarks/exact_rules.py measures the same thing)
_spec = importlib.util.spec_from_file_location("exact_rules", Path(__file__).parents[1] / "benchmarks" / "exact_rules.py")
exact_rules = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(exact_rules)
holds, rule_selects = exact_rules.holds, exact_rules.rule_selects


# ------------------------------------------------------------------ reading printed text back
def node_goes_left(tree: ExplanationTree, n: int, X: np.ndarray) -> np.ndarray:
    """The tree's own test at node ``n`` on every row (not only those reaching it)."""
    probe = ExplanationTree(tree.n_features)
    if tree.is_oblique(n):
        probe.split_oblique(0, tree.weights(n), float(tree.threshold[n]), left_label=0, right_label=1)
    else:
        probe.split(0, int(tree.feature[n]), float(tree.threshold[n]), left_label=0, right_label=1)
    return probe.predict(X) == 0


def internal_preorder(tree: ExplanationTree) -> list[int]:
    out, stack = [], [0]
    while stack:
        n = stack.pop()
        if not tree.is_leaf(n):
            out.append(n)
            stack += [int(tree.children_right[n]), int(tree.children_left[n])]
    return out


def check_every_printed_form(tree: ExplanationTree, X: np.ndarray) -> None:
    """rules(), the rules' JSON text, to_text() and to_dot(), all without X, route every row of X."""
    names = tree.feature_names or [f"x[{j}]" for j in range(tree.n_features)]
    leaf = tree.apply(X)
    for rule in tree.rules():
        for text in (str(rule), rule.to_dict()["text"], rule.raw()):
            assert "more" not in text
            wrong = rule_selects(text, X, names) != (leaf == rule.leaf)
            assert not wrong.any(), (text, X[wrong][:3].tolist())
    # to_text() and to_dot(): each node's printed test, in pre-order, against the tree's test
    tests = [line.strip()[3:-1] for line in tree.to_text().splitlines() if line.strip().startswith("if ")]
    dot = [json.loads('"' + m + '"') for m in re.findall(r'label="((?:[^"\\]|\\.)*)", fillcolor="#eef2fa"',
                                                         tree.to_dot())]
    order = internal_preorder(tree)
    assert len(tests) == len(dot) == len(order)
    for n, a, b in zip(order, tests, dot):
        want = node_goes_left(tree, n, X)
        assert a == b and np.array_equal(holds(a, X, names), want), (n, a)


# ------------------------------------------------------------------ data with near ties
@st.composite
def near_tie_data(draw):
    """Three columns around a random magnitude, values differing in the 6th-12th significant
    digit (``1.520041``, ``1.520049`` ...), labels following those tiny differences."""
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    n = draw(st.integers(24, 60))
    digit = draw(st.integers(6, 12))
    base = rng.uniform(0.5, 9.5, 3) * 10.0 ** rng.integers(-3, 4, 3) * rng.choice([-1, 1], 3)
    steps = rng.integers(-20, 21, size=(n, 3))
    X = base * (1 + steps * 10.0 ** -digit)
    y = (steps[:, 0] > 0).astype(int) + 2 * (steps[:, 1] > 5)
    assume(np.unique(y).size >= 2 and np.bincount(y).min() >= 2)
    return X, np.unique(y, return_inverse=True)[1], rng


ESTIMATORS = exact_rules.ESTIMATORS  # all ten, fitted as benchmarks/exact_rules.py fits them


@pytest.mark.filterwarnings("ignore::UserWarning")  # ExKMC/CART stopping early on tiny data
@pytest.mark.parametrize("name", ESTIMATORS)
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(data=near_tie_data())
def test_printed_rules_parsed_back_route_every_training_point_without_X(name, data):
    X, y, rng = data
    try:
        tree, rows = exact_rules.fit(name, X, y, rng, NAMES)
    except InvalidInputError:  # e.g. means closer than MMDT separates: an error, not a tree
        assume(False)
    assert tree.neighbours()  # kept at fit time
    check_every_printed_form(tree, rows)
    again = ExplanationTree.from_json(tree.to_json())  # the JSON keeps what exactness needs
    assert again == tree and [str(r) for r in again.rules()] == [str(r) for r in tree.rules()]
    check_every_printed_form(again, rows)


# ------------------------------------------------------------------ the issue's example and the edges
def test_the_issues_ri_example_prints_a_cut_between_the_neighbours():
    """RI 1.520041 goes left, 1.520490 right: four significant digits (1.52) sent points across."""
    X = np.array([[1.5171], [1.5185], [1.520041], [1.520041], [1.520490], [1.5211], [1.5230]])
    y = np.array([0, 0, 0, 0, 1, 1, 1])
    for est in (CART(random_state=0), IMM(random_state=0)):
        tree = est.fit(X, y, feature_names=["RI"]).tree_
        text = str(tree.rules()[0])
        t = float(text.split("<= ")[1].split(" →")[0])
        assert 1.520041 < t < 1.520490 and len(repr(t)) <= len("1.5203"), text
        check_every_printed_form(tree, X)


def test_noise_rows_are_routed_exactly_too():
    X = np.array([[0.0], [0.1], [1.0], [1.1], [0.5000001], [0.5000002]])
    y = np.array([0, 0, 1, 1, -1, -1])
    tree = CART(noise_label=-1, random_state=0).fit(X, y).tree_
    check_every_printed_form(tree, X)  # the noise rows sit right by the cut


def test_json_without_neighbours_loads_and_prints_the_stored_float():
    """Trees written before the neighbours were kept load; their cuts print the stored float in
    full (exact for every point), and a document with inconsistent neighbours is refused."""
    tree = CART(random_state=0).fit(np.array([[1.520041], [1.520490], [1.1], [1.9]]), [0, 1, 0, 1]).tree_
    doc = tree.to_dict()
    assert doc["nodes"][0]["neighbours"] == [1.520041, 1.52049]
    for node in doc["nodes"]:
        node.pop("neighbours", None)
    old = ExplanationTree.from_dict(doc)
    assert old.neighbours() == {} and str(old.rules()[0]).startswith(f"x[0] <= {float(tree.threshold[0])!r}")
    assert str(tree.rules()[0]).startswith("x[0] <= 1.5203")
    doc["nodes"][0]["neighbours"] = [1.6, 1.7]
    with pytest.raises(InvalidInputError, match="do not lie on either side"):
        ExplanationTree.from_dict(doc)


def test_rules_with_other_rows_are_exact_on_both():
    tree = CART(random_state=0).fit(np.array([[1.520041], [1.520490], [1.1], [1.9]]), [0, 1, 0, 1]).tree_
    other = np.array([[1.52026], [1.52027], [1.5202651]])  # test rows right by the cut (1.52026549...)
    assert str(tree.rules()[0]).startswith("x[0] <= 1.5203")  # exact on the training rows
    rows = np.vstack([other, [[1.520041], [1.520490]]])
    for rule in tree.rules(other):  # given other rows, exact on those and on the training rows
        assert str(rule).startswith(("x[0] <= 1.520266", "x[0] > 1.520266"))
        assert np.array_equal(rule_selects(str(rule), rows, ["x[0]"]), tree.apply(rows) == rule.leaf)


def test_oblique_rules_list_every_term_in_every_text_form():
    t = ExplanationTree(7, [f"c{j}" for j in range(7)])
    t.split_oblique(0, {j: (j + 1) * (-1) ** j for j in range(7)}, 0.5, left_label=0, right_label=1)
    X = np.random.default_rng(0).normal(size=(40, 7))
    t.record_neighbours(X)
    for text in (str(t.rules()[0]), t.rules()[0].to_dict()["text"], t.to_text(), t.to_dot(), str(t.rules(X)[0])):
        assert "more" not in text and all(f"c{j}" in text for j in range(7)), text
    assert str(t.rules()[0]).startswith("7·c6 - 6·c5 + 5·c4 - 4·c3 + 3·c2 - 2·c1 + 1·c0 <= ")


def test_neighbours_kernel_matches_brute_force():
    """The compiled one-pass search and the numpy one give each cut's nearest values on both sides."""
    rng = np.random.default_rng(1)
    X = rng.integers(0, 6, size=(300, 4)) * 0.5
    tree = CART(12, random_state=0).fit(X + rng.normal(scale=1e-9, size=X.shape), rng.integers(0, 4, 300)).tree_
    import scipy.sparse as sp

    for rows in (X, sp.csr_matrix(X), X[:1]):
        got = cut_neighbours(tree, rows)
        dense = rows.toarray() if sp.issparse(rows) else rows
        for n, (lo, hi) in got.items():
            v, t = dense[:, int(tree.feature[n])], float(tree.threshold[n])
            assert lo == (v[v <= t].max() if (v <= t).any() else None)
            assert hi == (v[v > t].min() if (v > t).any() else None)


@pytest.mark.parametrize("n", [50, 70_000])
def test_row_parallel_kernels_equal_their_serial_twins(n):
    """Leaf ids and cut neighbours on their prange paths (rows shared among threads, each block
    with its own extremes) equal the serial twins' and the brute force, on two threads."""
    from pipeline.threads import limit_threads
    from pipeline.trees._kernels import serial_below

    rng = np.random.default_rng(2)
    X = np.round(rng.normal(size=(n, 3)), 2)
    tree = CART(8, random_state=0).fit(X, (X[:, 0] > 0).astype(int) + 2 * (X[:, 1] > 0.5)
                                       + (X[:, 2] > 1)).tree_
    serial = (tree.apply(X), cut_neighbours(tree, X))
    with limit_threads(2), serial_below(0):
        assert np.array_equal(tree.apply(X), serial[0])
        assert cut_neighbours(tree, X) == serial[1]
    for node, (lo, hi) in serial[1].items():
        v, t = X[:, int(tree.feature[node])], float(tree.threshold[node])
        assert lo == (v[v <= t].max() if (v <= t).any() else None)
        assert hi == (v[v > t].min() if (v > t).any() else None)


def test_the_runs_mixture_trees_keep_the_runs_rows():
    """MMDT and Concept-MMDT grow from a mixture's parameters in a run (no rows seen): the fit stage
    lets their trees keep the run's rows, so the tree JSON prints exact rules without the data."""
    from sklearn.mixture import GaussianMixture

    from pipeline.app.configuration.explainers import PROTOCOLS, FitInputs
    from pipeline.trees import MMDT, ConceptMMDT

    rng = np.random.default_rng(0)
    X = np.vstack([rng.normal(c, 1e-4, (30, 3)) for c in ([1.5200, 0, 0], [1.5210, 1e-3, 0])])
    X = np.round(X, 7)  # values 1e-7 apart: a 4-digit rule would misroute
    gmm = GaussianMixture(2, reg_covar=1e-12, random_state=0).fit(X)
    d = FitInputs(X=X, labels=gmm.predict(X), feature_names=NAMES, n_clusters=2,
                  mixture=(gmm.weights_, gmm.means_, gmm.covariances_), latent=X,
                  latent_mixture=(gmm.weights_, gmm.means_, gmm.covariances_))
    for est, protocol in ((MMDT(random_state=0), "mixture"), (ConceptMMDT(np.eye(3), NAMES), "concept_mixture")):
        tree = PROTOCOLS[protocol].fit(est, d).tree_
        assert tree.neighbours()
        check_every_printed_form(ExplanationTree.from_json(tree.to_json()), X)
