"""Mixture transfer to concept space (Eq. 4-6) and greedy concept selection."""

import itertools
import logging

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.concepts import (
    concept_mixture,
    pooled_concept_sigma,
    select_concepts,
)
from pipeline.concepts.projection import check_cavs, similar_cavs
from pipeline.metrics import concept_explainability_to_noise_ratio
from pipeline.validation import InvalidInputError


def random_spd(d, rng):
    A = rng.normal(size=(d, d))
    return A @ A.T / d + 0.1 * np.eye(d)


def test_eq5_variance_transfer_matches_monte_carlo():
    rng = np.random.default_rng(0)
    d, M, K = 6, 4, 3
    C = rng.normal(size=(M, d))
    C /= np.linalg.norm(C, axis=1, keepdims=True)
    means = rng.normal(scale=3, size=(K, d))
    Sigma = random_spd(d, rng)
    mu_c, sig_c = concept_mixture(C, means, Sigma)
    n = 200_000
    for k in range(K):
        Z = rng.multivariate_normal(means[k], Sigma, size=n)
        P = Z @ C.T  # Eq. 4
        # Monte-Carlo mean and std of the projected component (standard errors ~ sigma/sqrt(n)).
        np.testing.assert_allclose(P.mean(axis=0), mu_c[k], atol=5 * sig_c.max() / np.sqrt(n))
        np.testing.assert_allclose(P.std(axis=0), sig_c, rtol=0.01)


def test_per_component_covariances_take_the_max_or_weighted_mean():
    rng = np.random.default_rng(1)
    d, M, K = 5, 3, 4
    C = rng.normal(size=(M, d))
    means = rng.normal(size=(K, d))
    covs = np.stack([random_spd(d, rng) for _ in range(K)])
    _, sig_max = concept_mixture(C, means, covs)
    per = np.array([[C[m] @ covs[k] @ C[m] for m in range(M)] for k in range(K)])
    np.testing.assert_allclose(sig_max**2, per.max(axis=0))
    w = np.array([0.1, 0.2, 0.3, 0.4])
    _, sig_mean = concept_mixture(C, means, covs, weights=w, reduce="mean")
    np.testing.assert_allclose(sig_mean**2, w @ per)
    # Diagonal covariances (as VaDE stores them) are accepted too.
    diag = np.abs(rng.normal(size=(K, d))) + 0.1
    _, sig_diag = concept_mixture(C, means, diag)
    np.testing.assert_allclose(sig_diag**2, ((C**2) @ diag.T).max(axis=1))


def test_pooled_sigma_matches_brute_force():
    rng = np.random.default_rng(2)
    X = rng.normal(size=(60, 3))
    y = rng.integers(-1, 3, size=60)
    means, sig = pooled_concept_sigma(X, y)
    keep = y >= 0
    ks = np.unique(y[keep])
    ss = sum(((X[y == k] - X[y == k].mean(0)) ** 2).sum(0) for k in ks)
    np.testing.assert_allclose(sig**2, ss / (keep.sum() - len(ks)))
    np.testing.assert_allclose(means, [X[y == k].mean(0) for k in ks])


def brute_q(mu, sig):
    K, M = mu.shape
    return min(max((mu[k, m] - mu[l, m]) ** 2 / (2 * sig[m] ** 2) for m in range(M))
               for k in range(K) for l in range(K) if k != l)


@settings(max_examples=40, deadline=None)
@given(st.integers(2, 5), st.integers(1, 5), st.integers(0, 10_000))
def test_q_matches_brute_force_and_eq6(K, M, seed):
    rng = np.random.default_rng(seed)
    d = 4
    C = rng.normal(size=(M, d))
    means = rng.normal(size=(K, d))
    Sigma = random_spd(d, rng)
    mu_c, sig_c = concept_mixture(C, means, Sigma)
    q = concept_explainability_to_noise_ratio(mu_c, sig_c)
    assert q == pytest.approx(brute_q(mu_c, sig_c))
    # Eq. 6 written directly in latent quantities.
    eq6 = min(max((C[m] @ (means[k] - means[l])) ** 2 / (2 * C[m] @ Sigma @ C[m]) for m in range(M))
              for k in range(K) for l in range(K) if k != l)
    assert q == pytest.approx(eq6)


def brute_greedy(mu, sig, max_concepts):
    chosen = []
    M = mu.shape[1]
    for _ in range(min(max_concepts, M)):
        best = max((m for m in range(M) if m not in chosen),
                   key=lambda m: (brute_q(mu[:, chosen + [m]], sig[chosen + [m]]), -m))
        chosen.append(best)
    return chosen


@settings(max_examples=40, deadline=None)
@given(st.integers(2, 5), st.integers(1, 6), st.integers(1, 6), st.integers(0, 10_000))
def test_greedy_selection_properties(K, M, size, seed):
    rng = np.random.default_rng(seed)
    mu = rng.normal(size=(K, M))
    sig = rng.uniform(0.2, 2, size=M)
    res = select_concepts(mu, sig, size)
    assert 1 <= len(res.selected) <= min(size, M) and len(set(res.selected)) == len(res.selected)
    # q along the path is the exact q of each prefix and never decreases.
    for i in range(len(res.selected)):
        sub = res.selected[: i + 1]
        assert res.q_path[i] == pytest.approx(brute_q(mu[:, sub], sig[sub]))
    assert np.all(np.diff(res.q_path) >= -1e-12)
    assert res.q_selected <= res.q_all + 1e-12
    # The first pick maximises single-concept q (same greedy step as a brute-force loop).
    first = brute_greedy(mu, sig, 1)[0]
    assert brute_q(mu[:, [res.selected[0]]], sig[[res.selected[0]]]) == pytest.approx(
        brute_q(mu[:, [first]], sig[[first]]))


def test_selection_finds_the_informative_pair():
    # Four clusters on a 2x2 grid of concepts a and b; c and d are noise.
    mu = np.array([[0, 0, 0.1, 0.0], [4, 0, 0.0, 0.1], [0, 4, 0.1, 0.1], [4, 4, 0.0, 0.0]], float)
    res = select_concepts(mu, np.ones(4), 2, names=list("abcd"))
    assert sorted(res.names) == ["a", "b"]
    assert res.q_selected == pytest.approx(res.q_all) == pytest.approx(4.0**2 / 2)


def test_bad_covariance_and_cavs():
    rng = np.random.default_rng(0)
    C = rng.normal(size=(2, 3))
    means = rng.normal(size=(3, 3))
    with pytest.raises(InvalidInputError, match="positive semi-definite"):
        concept_mixture(C, means, np.diag([1.0, -1.0, 1.0]))
    with pytest.raises(InvalidInputError, match="symmetric"):
        concept_mixture(C, means, np.array([[1, 0.5, 0], [0, 1, 0], [0, 0, 1.0]]))
    with pytest.raises(InvalidInputError, match="shape"):
        concept_mixture(C, means, np.eye(4))
    with pytest.raises(InvalidInputError, match="all-zero"):
        concept_mixture(np.zeros((1, 3)), means, np.eye(3))
    with pytest.raises(InvalidInputError, match="null space"):
        concept_mixture(np.array([[0, 0, 1.0]]), means, np.diag([1.0, 1.0, 0.0]), concept_names=["z"])
    with pytest.raises(InvalidInputError, match="latent dims"):
        concept_mixture(C, means[:, :2], np.eye(3))


def test_rank_deficient_cavs_are_reported(caplog):
    C = np.array([[1.0, 0, 0], [0, 1.0, 0], [1.0, 1.0, 0]])
    with caplog.at_level(logging.WARNING):
        check_cavs(C)
    assert "span only 2 dimensions" in caplog.text
    notes = similar_cavs(np.array([[1.0, 0], [0, 1.0], [-2.0, 0]]), ["a", "b", "minus_a"])
    assert list(notes) == ["minus_a"] and "opposite to 'a'" in notes["minus_a"]


def test_selection_bad_input():
    with pytest.raises(InvalidInputError, match="max_concepts"):
        select_concepts(np.zeros((2, 2)), np.ones(2), 0)
    with pytest.raises(InvalidInputError, match="> 0"):
        select_concepts(np.zeros((2, 2)), np.array([1.0, 0.0]), 1)


def test_cross_check_with_metrics_q_and_concept_mmdt():
    from pipeline.metrics import explainability_to_noise_ratio
    from pipeline.trees import ConceptMMDT

    rng = np.random.default_rng(4)
    d, M, K = 5, 3, 4
    C = rng.normal(size=(M, d))
    means = rng.normal(scale=2, size=(K, d))
    covs = np.stack([random_spd(d, rng) for _ in range(K)])
    mu_c, sig_c = concept_mixture(C, means, covs)
    assert concept_explainability_to_noise_ratio(mu_c, sig_c) == pytest.approx(explainability_to_noise_ratio(mu_c, sig_c))
    tree = ConceptMMDT(C, random_state=0).fit_mixture(means, covs)
    np.testing.assert_allclose(tree.concept_means_, mu_c)
    np.testing.assert_allclose(tree.concept_sigma_, sig_c)


def test_project_kernel_same_for_any_thread_count_and_dtype():
    """The compiled projection (issue 27): float64 multiply-adds, the same bits for 1 or 2 threads
    and for float32 latents and their float64 widening, and NaN/inf still refused."""
    from pipeline.concepts.projection import project

    rng = np.random.default_rng(0)
    Z = rng.normal(size=(5 * 256 + 7, 33)).astype(np.float32)
    C = rng.normal(size=(4, 33))
    one, two = project(Z, C, n_jobs=1), project(Z, C, n_jobs=2)
    assert one.dtype == np.float64 and np.array_equal(one, two)
    assert np.array_equal(one, project(Z.astype(np.float64), C, n_jobs=2))
    np.testing.assert_allclose(one, Z.astype(np.float64) @ C.T, rtol=1e-12, atol=1e-12)
    Z[3, 5] = np.nan
    with pytest.raises(InvalidInputError, match="NaN or infinite"):
        project(Z, C)
    Z[3, 5] = np.inf
    with pytest.raises(InvalidInputError, match="NaN or infinite"):
        project(Z, np.abs(C) * 0 + np.eye(4, 33))  # inf times a zero CAV entry is still caught
    with pytest.raises(InvalidInputError, match="overflows float64"):
        project(np.full((3, 4), 1e308), np.ones((2, 4)))
    assert project(np.zeros((0, 33), np.float32), C).shape == (0, 4)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 23), d=st.integers(1, 40), m=st.integers(1, 12), seed=st.integers(0, 2**16),
       scale=st.sampled_from([1e-310, 1e-300, 1e-30, 1.0, 1e30, 1e150]))
def test_project_kernel_matches_brute_force(n, d, m, seed, scale):
    """Every tile shape (rows not a multiple of 4, CAVs not a multiple of 5) and magnitudes down to
    subnormal products: each coordinate equals an exactly rounded dot product within the float64
    summation bound sum |z_k c_k| * d * eps."""
    from fractions import Fraction

    from pipeline.concepts.projection import project

    rng = np.random.default_rng(seed)
    Z, C = rng.normal(size=(n, d)) * scale, rng.normal(size=(m, d))
    out = project(Z, C, n_jobs=2)
    assert out.shape == (n, m)
    for i in range(0, n, max(1, n // 4)):
        for j in range(m):
            exact = float(sum(Fraction(float(a)) * Fraction(float(b)) for a, b in zip(Z[i], C[j])))
            bound = d * np.finfo(float).eps * float(np.abs(Z[i] * C[j]).sum()) + d * np.finfo(float).smallest_subnormal
            assert abs(out[i, j] - exact) <= bound


def test_project_with_norms_is_project_plus_exact_norms():
    """The norms ride along the projection's pass: the same coordinates (bits) as :func:`project`,
    and each row's squared norm summed in float64, for any thread count."""
    from pipeline.concepts.projection import project, project_with_norms

    rng = np.random.default_rng(1)
    Z = rng.normal(size=(4 * 300 + 3, 37)).astype(np.float32)
    C = rng.normal(size=(7, 37))
    for n_jobs in (1, 2):
        P, sq = project_with_norms(Z, C, n_jobs=n_jobs)
        assert np.array_equal(P, project(Z, C, n_jobs=1))
        np.testing.assert_allclose(sq, np.einsum("ij,ij->i", Z.astype(np.float64), Z.astype(np.float64)),
                                   rtol=1e-13)
    P, sq = project_with_norms(np.zeros((0, 37), np.float32), C)
    assert P.shape == (0, 7) and sq.shape == (0,)
