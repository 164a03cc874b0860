import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import adjusted_rand_score

from pipeline import metrics
from pipeline.trees import MMDT
from pipeline.validation import InvalidInputError


def brute_q(means, sigma):
    return min(max((means[k][j] - means[l][j]) ** 2 / (2 * sigma[j] ** 2) for j in range(len(sigma)))
               for k, l in itertools.combinations(range(len(means)), 2))


def test_q_hand_example():
    # pairs: (0,1): max(1/2, 25/8) = 3.125; (0,2): max(16/2, 1/8) = 8; (1,2): max(9/2, 16/8) = 4.5
    assert metrics.explainability_to_noise_ratio([[0, 0], [1, 5], [4, 1]], [1, 2]) == pytest.approx(3.125)


@settings(max_examples=50, deadline=None)
@given(st.integers(2, 7), st.integers(1, 4), st.integers(0, 2**31 - 1))
def test_q_matches_brute_force(K, d, seed):
    rng = np.random.default_rng(seed)
    means, sigma = rng.normal(0, 3, (K, d)), rng.uniform(0.1, 3, d)
    assert metrics.explainability_to_noise_ratio(means, sigma) == pytest.approx(brute_q(means, sigma), rel=1e-12)


def test_q_bad_input():
    with pytest.raises(InvalidInputError, match="at least 2"):
        metrics.explainability_to_noise_ratio([[0.0, 1.0]], [1, 1])
    with pytest.raises(InvalidInputError, match="identical"):
        metrics.explainability_to_noise_ratio([[0, 1], [0, 1]], [1, 1])
    with pytest.raises(InvalidInputError, match="> 0"):
        metrics.explainability_to_noise_ratio([[0, 1], [1, 1]], [1, 0])
    with pytest.raises(InvalidInputError, match="length"):
        metrics.explainability_to_noise_ratio([[0, 1], [1, 1]], [1])


def test_bound_values():
    assert metrics.theorem1_upper_bound(400.0, 10) == pytest.approx(10 * np.exp(-1))
    assert metrics.theorem1_upper_bound(16.0, 2, alpha=1.5) == pytest.approx(1.5 * 2 * np.exp(-1))
    assert metrics.theorem2_upper_bound(np.pi, 5) == pytest.approx(5.0)
    assert metrics.theorem3_lower_bound(np.log(100.0), 5) == pytest.approx(4 / 200)
    assert np.isnan(metrics.theorem3_lower_bound(np.log(10.0), 5))  # e^q = 10 = 2K: not covered
    q = np.array([1.0, 10.0, 100.0])
    assert metrics.theorem1_upper_bound(q, 3).shape == (3,)
    with pytest.raises(InvalidInputError, match="q must be"):
        metrics.theorem1_upper_bound(0.0, 3)
    with pytest.raises(InvalidInputError, match="K must"):
        metrics.theorem2_upper_bound(1.0, 1)
    with pytest.raises(InvalidInputError, match="alpha"):
        metrics.theorem1_upper_bound(1.0, 3, alpha=0.5)


def test_theorem3_construction_attains_the_bound():
    """The proof's discrete mixture (d = K, means e_k, ±1 steps w.p. e^{-q}) against MMDT."""
    K, q = 4, 3.0
    eps = np.exp(-q)
    means = np.eye(K)
    # Exact error of a tree: enumerate every atom of every component.
    m = MMDT(random_state=0).fit_mixture(means, np.full(K, np.sqrt(1 / (2 * q))))
    assert metrics.explainability_to_noise_ratio(means, np.full(K, np.sqrt(1 / (2 * q)))) == pytest.approx(q)
    err = 0.0
    for k in range(K):
        atoms = [(means[k], 1 - 2 * K * eps)]
        for j in range(K):
            for s in (1, -1):
                x = means[k].copy()
                x[j] += s
                atoms.append((x, eps))
        err += sum(p for x, p in atoms if m.predict(x[None])[0] != k) / K
    assert err >= metrics.theorem3_lower_bound(q, K) - 1e-12


def test_ari_ami_and_noise():
    ref = np.array([0, 0, 1, 1, 2, -1])
    pred = np.array([1, 1, 0, 0, 2, 2])
    assert metrics.ari(ref, pred) == pytest.approx(adjusted_rand_score(ref, pred))
    assert metrics.ari(ref, pred, exclude_noise=True) == pytest.approx(1.0)
    assert metrics.ami(ref, pred, exclude_noise=True) == pytest.approx(1.0)
    with pytest.raises(InvalidInputError, match="labels"):
        metrics.ari(ref, pred[:3])


def test_agreement_and_misassignment():
    ref = np.array([0, 0, 1, 1, 2, -1])
    pred = np.array([0, 1, 1, 1, 0, 2])
    # non-noise rows: 5, equal on rows 0, 2, 3
    assert metrics.reference_agreement(pred, ref) == pytest.approx(3 / 5)
    assert metrics.misassignment_rate(pred, ref) == pytest.approx(2 / 5)
    # permuted labels: identity agreement 0, matched agreement 1
    assert metrics.reference_agreement([1, 1, 2, 2, 0], [0, 0, 1, 1, 2]) == 0.0
    assert metrics.reference_agreement([1, 1, 2, 2, 0], [0, 0, 1, 1, 2], match=True) == 1.0
    with pytest.raises(InvalidInputError, match="no labelled rows"):
        metrics.misassignment_rate([0, 1], [-1, -1])


def test_clustering_cost_hand_example():
    X = np.array([[0.0, 0], [2, 0], [10, 10], [10, 12], [10, 20]])
    labels = [0, 0, 1, 1, 1]
    # kmeans: cluster 0 mean (1, 0): 1 + 1; cluster 1 mean (10, 14): 16 + 4 + 36
    assert metrics.clustering_cost(X, labels) == pytest.approx(58.0)
    # kmedians: medians (1, 0) and (10, 12): 1 + 1; 2 + 0 + 8
    assert metrics.clustering_cost(X, labels, "kmedians") == pytest.approx(12.0)


def test_price_of_explainability():
    X = np.array([[0.0], [1], [10], [11], [50]])
    ref = [0, 0, 1, 1, -1]
    assert metrics.price_of_explainability(X, [0, 0, 1, 1, 0], ref) == pytest.approx(1.0)
    # tree puts x=10 with the first cluster: (0,1,10) mean 11/3 -> 101 - 121/3 = 182/3 ; ref 0.5 + 0.5
    tree = [0, 0, 0, 1, 7]
    assert metrics.price_of_explainability(X, tree, ref) == pytest.approx(182 / 3)
    # kmedians: (0,1,10) median 1 -> 1 + 0 + 9 = 10 ; ref: 1 + 1 = 2
    assert metrics.price_of_explainability(X, tree, ref, kind="kmedians") == pytest.approx(5.0)
    assert metrics.price_of_explainability(np.zeros((2, 1)), [0, 1], [0, 1]) == 1.0
    with pytest.raises(InvalidInputError, match="kind"):
        metrics.price_of_explainability(X, tree, ref, kind="kcenter")


# ------------------------------------------------------------------ AMI with a windowed expectation (issue 35)


@settings(max_examples=80, deadline=None)
@given(st.integers(2, 3000), st.integers(1, 12), st.integers(1, 12), st.floats(0, 1), st.integers(0, 2**16),
       st.booleans())
def test_windowed_expected_mutual_information_equals_scikit_learn(n, k1, k2, noise, seed, skewed):
    from sklearn.metrics.cluster import contingency_matrix, expected_mutual_information

    from pipeline.metrics import expected_mutual_information as windowed

    rng = np.random.default_rng(seed)
    a = np.minimum(rng.geometric(0.4, n) - 1, k1 - 1) if skewed else rng.integers(0, k1, n)
    b = a.copy()
    flip = rng.random(n) < noise
    b[flip] = rng.integers(0, k2, int(flip.sum()))
    table = contingency_matrix(a, b)
    assert windowed(table, n) == pytest.approx(expected_mutual_information(table, n), rel=1e-9, abs=1e-14)


def test_ami_on_many_rows_equals_scikit_learn():
    from sklearn.metrics import adjusted_mutual_info_score

    from pipeline.metrics import FAST_AMI_ROWS, adjusted_mutual_info

    rng = np.random.default_rng(0)
    y = np.minimum(rng.geometric(0.3, 3 * FAST_AMI_ROWS), 12)  # clusters from 90k rows down to a handful
    p = y.copy()
    p[:20_000] = rng.integers(0, 12, 20_000)
    assert adjusted_mutual_info(y, p) == pytest.approx(adjusted_mutual_info_score(y, p), rel=1e-12)
    q = rng.integers(0, 5, y.size)  # independent: AMI ~ 0, where the expectation matters most
    assert adjusted_mutual_info(y, q) == pytest.approx(adjusted_mutual_info_score(y, q), abs=1e-12)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 3000), st.integers(1, 9), st.integers(1, 9), st.floats(0, 1), st.integers(0, 2**16))
def test_ari_from_a_bincount_table_is_scikit_learns(n, k1, k2, noise, seed):
    """The O(n) contingency path of large runs gives scikit-learn's ARI bit for bit."""
    from pipeline.metrics import adjusted_rand_from_table, contingency_table

    rng = np.random.default_rng(seed)
    a = rng.integers(0, k1, n)
    b = a.copy()
    flip = rng.random(n) < noise
    b[flip] = rng.integers(0, k2, int(flip.sum()))
    assert adjusted_rand_from_table(contingency_table(a, b)) == adjusted_rand_score(a, b)
