"""CAV fitting: recovery of planted directions, sign convention, significance, bad input."""

import logging

import numpy as np
import pytest

from pipeline.concepts import CAVFitter, build_fitter, project
from pipeline.concepts.fitters import (
    LinearRegressionFitter, LinearSVMFitter, LogisticFitter, MeanDifferenceFitter, SGDFitter, _best_threshold,
)
from pipeline.validation import InvalidInputError


def planted(n=1500, d=12, M=3, noise=0.3, seed=0):
    rng = np.random.default_rng(seed)
    Z = rng.normal(size=(n, d)).astype(np.float32)
    D = rng.normal(size=(M, d))
    D /= np.linalg.norm(D, axis=1, keepdims=True)
    labels = (Z @ D.T + noise * rng.normal(size=(n, M)) > 0.3).astype(float)
    return Z, labels, D


@pytest.mark.parametrize("fitter", [LogisticFitter, LinearSVMFitter, SGDFitter, "pipeline.concepts.fitters.MeanDifferenceFitter"])
def test_cavs_recover_planted_directions(fitter):
    Z, labels, D = planted()
    cf = CAVFitter(fitter=fitter, n_repeats=3, cv=2, random_state=0).fit(Z, labels, ["a", "b", "c"])
    cos = np.sum(cf.cavs_ * D, axis=1)
    assert cos.min() > 0.97, cos  # aligned, and with the right sign
    np.testing.assert_allclose(np.linalg.norm(cf.cavs_, axis=1), 1.0)
    assert (cf.score_mean_ > 0.85).all()  # held-out accuracy of a cut along each planted direction (noisy labels)
    assert (cf.score_mean_ > 0.8).all()
    assert (cf.score_ci_[:, 0] <= cf.score_mean_).all() and (cf.score_mean_ <= cf.score_ci_[:, 1]).all()


def test_sign_convention_positives_project_higher():
    Z, labels, _ = planted(seed=3)
    cf = CAVFitter(n_repeats=2, cv=0, random_state=1).fit(Z, labels)
    S = cf.project(Z)
    for m in range(labels.shape[1]):
        assert S[labels[:, m] == 1, m].mean() > S[labels[:, m] == 0, m].mean()
    # Flipping the labels flips the CAV.
    flipped = CAVFitter(n_repeats=2, cv=0, random_state=1).fit(Z, 1 - labels)
    assert np.all(np.sum(flipped.cavs_ * cf.cavs_, axis=1) < -0.9)


def test_random_concept_has_chance_accuracy_and_an_unstable_direction():
    Z, labels, _ = planted(M=1)
    rng = np.random.default_rng(5)
    labels = np.column_stack([labels[:, 0], rng.integers(0, 2, len(Z))])
    cf = CAVFitter(n_repeats=5, cv=3, random_state=0).fit(Z, labels, ["real", "noise"])
    assert cf.score_mean_[0] > 0.9 and abs(cf.score_mean_[1] - 0.5) < 0.1
    assert cf.score_ci_[1, 0] < 0.5 < cf.score_ci_[1, 1] or abs(cf.score_mean_[1] - 0.5) < 0.06
    assert cf.spread_deg_[1] > 5 * cf.spread_deg_[0]  # unstable direction for the noise concept
    rows = cf.summary()
    assert [r["concept"] for r in rows] == ["real", "noise"] and "significant" not in rows[0]


def test_continuous_concept_with_linear_regression():
    Z, _, D = planted(M=1)
    y = Z @ D[0] + 0.05 * np.random.default_rng(0).normal(size=len(Z))
    cf = CAVFitter(fitter=LinearRegressionFitter, n_repeats=3, random_state=0).fit(Z, y)
    assert cf.cavs_[0] @ D[0] > 0.99
    assert cf.score_mean_[0] > 0.95  # held-out R²


def test_project_is_one_call_and_checks_width():
    Z, labels, _ = planted()
    cf = CAVFitter(n_repeats=1, cv=0, random_state=0).fit(Z, labels)
    np.testing.assert_allclose(cf.project(Z[:5]), Z[:5].astype(float) @ cf.cavs_.T, rtol=1e-6)
    np.testing.assert_allclose(project(Z[:5], cf.cavs_), cf.project(Z[:5]))
    with pytest.raises(InvalidInputError, match="features"):
        cf.project(Z[:, :3])


def test_reproducible_from_seed():
    Z, labels, _ = planted()
    a = CAVFitter(n_repeats=2, cv=2, random_state=7).fit(Z, labels)
    b = CAVFitter(n_repeats=2, cv=2, random_state=7).fit(Z, labels)
    np.testing.assert_array_equal(a.cavs_, b.cavs_)
    np.testing.assert_array_equal(a.scores_, b.scores_)


def test_unusable_concepts_are_dropped_with_reason(caplog):
    Z, labels, _ = planted(M=1)
    few = np.zeros(len(Z))
    few[:3] = 1
    all_pos = np.ones(len(Z))
    all_neg = np.zeros(len(Z))
    unused = np.full(len(Z), np.nan)
    L = np.column_stack([labels[:, 0], few, all_pos, all_neg, unused])
    with caplog.at_level(logging.WARNING):
        cf = CAVFitter(n_repeats=1, cv=0, random_state=0).fit(Z, L, ["ok", "few", "allpos", "allneg", "unused"])
    assert cf.concept_names_ == ["ok"]
    assert "fewer than min_positives" in cf.dropped_["few"]
    assert "positive" in cf.dropped_["allpos"] and "negative" in cf.dropped_["allneg"]
    assert set(cf.dropped_) == {"few", "allpos", "allneg", "unused"}
    assert "dropping concept 'few'" in caplog.text


def test_duplicate_concepts_are_dropped():
    Z, labels, _ = planted(M=1)
    L = np.column_stack([labels[:, 0], labels[:, 0]])
    cf = CAVFitter(fitter=MeanDifferenceFitter, n_repeats=1, subsample=1.0, cv=0).fit(Z, L, ["x", "x_again"])
    assert cf.concept_names_ == ["x"] and "same examples and labels as 'x'" in cf.dropped_["x_again"]


def test_bad_input_errors():
    Z, labels, _ = planted()
    with pytest.raises(InvalidInputError, match="no concept could be fitted"):
        CAVFitter().fit(Z, np.ones((len(Z), 1)))
    with pytest.raises(InvalidInputError, match="shape"):
        CAVFitter().fit(Z, labels[:10])
    with pytest.raises(InvalidInputError, match="binary concept labels"):
        CAVFitter().fit(Z, labels * 3)
    with pytest.raises(InvalidInputError, match="NaN"):
        CAVFitter().fit(np.full_like(Z, np.nan), labels)
    with pytest.raises(InvalidInputError, match="CAV fitter 'forest' is not a"):
        CAVFitter(fitter="forest").fit(Z, labels)  # no short names: a class or its dotted path
    with pytest.raises(InvalidInputError, match="cannot be imported"):
        CAVFitter(fitter="pipeline.concepts.fitters.ForestFitter").fit(Z, labels)
    with pytest.raises(InvalidInputError, match="names"):
        CAVFitter().fit(Z, labels, ["a"])
    with pytest.raises(InvalidInputError, match="cv"):
        CAVFitter(cv=1).fit(Z, labels)


def test_best_threshold_matches_brute_force():
    rng = np.random.default_rng(0)
    for _ in range(50):
        s = rng.integers(0, 6, size=20).astype(float)
        y = rng.integers(0, 2, size=20)
        t = _best_threshold(s, y)
        acc = np.mean((s > t) == (y == 1))
        cands = np.concatenate([[s.min() - 1], np.unique(s)])
        brute = max(np.mean((s > c) == (y == 1)) for c in cands)
        assert acc == pytest.approx(brute)


def test_build_fitter_accepts_instances():
    f = build_fitter(LinearSVMFitter, C=0.5)
    assert build_fitter(f) is f and f.C == 0.5


def test_directions_fit_further_cavs_as_the_concepts_own():
    Z, labels, D = planted(M=2)
    cf = CAVFitter(n_repeats=1, subsample=1.0, cv=0, random_state=0).fit(Z, labels, ["a", "b"])
    problems = [(Z[np.isfinite(labels[:, m]) & (labels[:, m] >= 0)], labels[:, m][np.isfinite(labels[:, m])
                                                                            & (labels[:, m] >= 0)]) for m in range(2)]
    W = cf.directions(problems, random_state=0)
    assert W.shape == (2, Z.shape[1]) and np.allclose(np.linalg.norm(W, axis=1), 1.0)
    assert (np.sum(W * cf.cavs_, axis=1) > 0.99).all()  # the same fits, up to the repeats' draws


@pytest.mark.parametrize("kwargs, param", [
    (dict(n_repeats=0), "n_repeats"), (dict(subsample=1.5), "subsample"), (dict(cv=-1), "cv"),
    (dict(fitter=3), "fitter"), (dict(fitter=LogisticFitter, fitter_params={"C": -1.0}), "C"),
    (dict(fitter=SGDFitter, fitter_params={"loss": "hinj"}), "loss"),
    (dict(fitter=LinearSVMFitter, fitter_params={"max_iter": 0}), "max_iter"),
])
def test_parameters_are_validated_at_fit_start(kwargs, param):
    Z = np.random.default_rng(0).normal(size=(40, 3))
    labels = (Z[:, :1] > 0).astype(float)
    with pytest.raises(ValueError, match=f"'{param}' parameter of"):
        CAVFitter(**kwargs).fit(Z, labels)


def test_complement_concept_is_dropped_as_the_reverse_direction():
    Z, labels, _ = planted(M=1)
    L = np.column_stack([labels[:, 0], 1.0 - labels[:, 0]])
    L[:5] = -1  # the same rows unlabelled in both
    cf = CAVFitter(n_repeats=1, cv=0, random_state=0).fit(Z, L, ["vertical_line", "curvature"])
    assert cf.concept_names_ == ["vertical_line"]
    assert "complement of 'vertical_line'" in cf.dropped_["curvature"]


@pytest.mark.parametrize("standardize", [False, None])
def test_unstandardised_cav_is_plain_logistic_regressions_direction(standardize):
    """standardize=False: the CAV is the direction of a plain sklearn LogisticRegression on the
    raw inputs; the default (standardised) one differs when feature scales differ."""
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng(0)
    Z = rng.normal(size=(600, 5)) * np.array([1.0, 1.0, 0.05, 3.0, 0.01])  # very different scales
    y = (Z[:, 0] + 10 * Z[:, 2] + 0.3 * rng.normal(size=600) > 0).astype(float)
    cf = CAVFitter(n_repeats=1, subsample=1.0, cv=0, random_state=0, standardize=standardize).fit(Z, y[:, None])
    w = LogisticRegression(C=1.0, max_iter=500).fit(Z, y).coef_[0]
    cos = float(cf.cavs_[0] @ (w / np.linalg.norm(w)))
    if standardize is False:
        assert cos > 0.999
    else:  # the default maps a standardised fit back: same sign, another direction
        assert 0 < cos < 0.99


def test_concepts_fitted_in_threads_give_the_same_cavs():
    """Concepts are shared among threads with their random draws made first (issue 27): the same
    CAVs, scores and drops for 1 or 2 threads."""
    from pipeline.threads import limit_threads

    rng = np.random.default_rng(4)
    Z = rng.normal(size=(600, 12)).astype(np.float32)
    L = (Z @ rng.normal(size=(12, 5)) > 0).astype(float)
    L[rng.random(L.shape) < 0.2] = -1
    fits = []
    for n in (1, 2):
        with limit_threads(n):
            fits.append(CAVFitter(n_repeats=3, cv=2, random_state=0).fit(Z, L))
    a, b = fits
    assert np.array_equal(a.cavs_, b.cavs_) and np.array_equal(a.scores_, b.scores_, equal_nan=True)
    assert a.dropped_ == b.dropped_


# ---- issue 34: honest statistics, duplicates by what the concepts are ------------------------
def test_no_accuracy_claimed_without_held_out_folds():
    Z, labels, _ = planted(M=2)
    cf = CAVFitter(fitter=MeanDifferenceFitter, n_repeats=5, cv=0, random_state=0).fit(Z, labels, ["a", "b"])
    rows = cf.summary()
    assert all(np.isnan(r["score"]) and np.isnan(r["ci_low"]) for r in rows)
    assert cf.test_line().startswith("accuracy: no held-out accuracy or interval (cv=0")
    cf = CAVFitter(n_repeats=5, cv=3, random_state=0).fit(Z, labels, ["a", "b"])
    assert "5 CAVs per concept" in cf.test_line() and "Wilson" in cf.test_line()


def test_accuracy_intervals_stay_inside_0_1():
    from hypothesis import given, settings, strategies as st

    from pipeline.concepts.cav import wilson_interval

    @settings(max_examples=200, deadline=None)
    @given(st.floats(0, 1), st.integers(1, 10**6))
    def check(p, n):
        lo, hi = wilson_interval([p], [n])[0]
        assert 0 <= lo <= p + 1e-12 and p - 1e-12 <= hi <= 1

    check()
    assert np.isnan(wilson_interval([np.nan, 0.5], [10, 0])).all()
    # perfectly separable concepts: accuracy 1 on every repeat, the interval ends at 1 (was 1.005)
    Z, labels, _ = planted(noise=0.0)
    cf = CAVFitter(n_repeats=5, cv=3, random_state=0).fit(Z, labels)
    assert (cf.score_ci_ >= 0).all() and (cf.score_ci_ <= 1).all()
    assert (cf.score_ci_[:, 0] <= cf.score_mean_).all() and (cf.score_mean_ <= cf.score_ci_[:, 1]).all()


def test_identical_examples_are_duplicates_different_examples_are_not():
    Z, labels, _ = planted(M=1)
    # the same examples given twice (a file copied into two folders): rows 0..n-1 and n..2n-1 are equal
    Z2 = np.concatenate([Z, Z])
    L = np.full((2 * len(Z), 2), np.nan)
    L[:len(Z), 0] = labels[:, 0]
    L[len(Z):, 1] = labels[:, 0]
    cf = CAVFitter(n_repeats=3, cv=2, random_state=0).fit(Z2, L, ["a", "copy_of_a"])
    assert cf.concept_names_ == ["a"] and "same examples and labels as 'a'" in cf.dropped_["copy_of_a"]
    # different examples whose directions coincide: both kept, the high cosine is a note
    half = len(Z) // 2
    L = np.full((len(Z), 2), np.nan)
    L[:half, 0], L[half:, 1] = labels[:half, 0], labels[half:, 0]
    cf = CAVFitter(fitter=MeanDifferenceFitter, n_repeats=1, subsample=1.0, cv=0, duplicate_tol=0.2).fit(
        Z, L, ["first_half", "second_half"])
    assert cf.concept_names_ == ["first_half", "second_half"] and not cf.dropped_
    assert "although their examples differ" in cf.similar_["second_half"]
