"""TGT, DBM and the GCE metrics (correctness, coverage, eps, similarity)."""

import itertools

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from pipeline.counterfactuals import (
    TGT,
    LatentIdentity,
    choose_epsilon,
    correctness,
    coverage,
    dbm,
    pairwise_metrics,
    self_similarity,
    similarity,
    sparsity_sweep,
    top_k,
    tune_l1,
)
from pipeline.validation import InvalidInputError


def linear_encoder(A):
    enc = torch.nn.Linear(A.shape[1], A.shape[0], bias=False).double()
    with torch.no_grad():
        enc.weight.copy_(torch.as_tensor(A))
    return enc


def planted(seed=0, d=12, m=8, n=40, noise=0.05):
    """Four groups whose means differ from group 0 on planted sparse supports."""
    rng = np.random.default_rng(seed)
    A = rng.normal(size=(m, d))
    shifts = np.zeros((4, d))
    shifts[1, 2] = 3.0
    shifts[2, [5, 9]] = [-2.0, 2.5]
    shifts[3, 0] = 2.0
    X = np.vstack([s + noise * rng.normal(size=(n, d)) for s in shifts])
    groups = np.repeat(np.arange(4), n)
    return A, X, groups, shifts


@pytest.fixture(scope="module")
def planted_fit():
    A, X, groups, shifts = planted()
    model = TGT(linear_encoder(A), l1=0.5, learning_rate=0.01, n_iter=6000, random_state=0).fit(X, groups)
    return A, X, groups, shifts, model


# ---------------------------------------------------------------- TGT


def test_tgt_recovers_planted_support(planted_fit):
    A, X, groups, shifts, model = planted_fit
    assert model.deltas_.shape == (3, X.shape[1])
    for i, j in itertools.permutations(range(4), 2):
        truth = shifts[j] - shifts[i]
        e = model.explanation(i, j)
        support = set(np.flatnonzero(np.abs(e) > 0.2 * np.abs(e).max()))
        assert support == set(np.flatnonzero(truth)), (i, j, np.round(e, 2))
        k = np.count_nonzero(truth)
        np.testing.assert_allclose(model.explanation(i, j, k), truth, atol=0.35)


def test_tgt_ignores_feature_the_encoder_does_not_use():
    # Paper's Table 1: x3 copies x0 but the encoder ignores it, so TGT does not use it; DBM does.
    rng = np.random.default_rng(1)
    n = 60
    x0 = np.repeat([0.0, 1.5], n) + 0.1 * rng.normal(size=2 * n)
    X = np.column_stack([x0, rng.normal(size=2 * n), rng.normal(size=2 * n), x0 + 0.05 * rng.normal(size=2 * n)])
    groups = np.repeat([0, 1], n)
    A = np.array([[1.0, 0.3, 0.0, 0.0], [0.2, 1.0, 0.1, 0.0]])
    model = TGT(linear_encoder(A), l1=0.05, learning_rate=0.02, n_iter=4000, random_state=0).fit(X, groups)
    e = model.explanation(0, 1)
    assert abs(e[3]) < 0.05 and e[0] == pytest.approx(1.5, abs=0.2)
    assert abs(dbm(X, groups, 0, 1)[3]) > 1.0


def test_explanations_symmetric_and_transitive(planted_fit):
    *_, model = planted_fit
    for i, j in itertools.permutations(range(4), 2):
        np.testing.assert_array_equal(model.explanation(i, j), -model.explanation(j, i))
    for i, j, k in itertools.permutations(range(4), 3):
        np.testing.assert_allclose(
            model.explanation(i, k), model.explanation(i, j) + model.explanation(j, k), rtol=0, atol=1e-12
        )
    np.testing.assert_array_equal(model.explanation(2, 2), 0.0)


@settings(max_examples=30, deadline=None)
@given(arrays(np.float64, (3, 5), elements=st.floats(-1e3, 1e3)), st.permutations([3, 7, 11, 20]))
def test_symmetry_transitivity_property(basis, labels):
    model = TGT()
    model.groups_ = np.sort(np.array(labels))
    model.deltas_ = basis
    for i, j in itertools.permutations(model.groups_, 2):
        np.testing.assert_array_equal(model.explanation(i, j), -model.explanation(j, i))
    for i, j, k in itertools.permutations(model.groups_, 3):
        np.testing.assert_allclose(
            model.explanation(i, k), model.explanation(i, j) + model.explanation(j, k), rtol=1e-12, atol=1e-9
        )
    ref = model.groups_[0]
    np.testing.assert_array_equal(model.explanation(ref, model.groups_[2]), basis[1])


def test_tgt_reproducible_converges_and_keeps_training_mode():
    A, X, groups, _ = planted(n=20)
    enc = torch.nn.Sequential(linear_encoder(A), torch.nn.Dropout(0.5))
    enc.train()
    fits = [TGT(enc, l1=0.5, learning_rate=0.01, n_iter=5000, patience=300, random_state=3).fit(X, groups)
            for _ in range(2)]
    np.testing.assert_array_equal(fits[0].deltas_, fits[1].deltas_)
    assert enc.training and enc[1].training
    assert fits[0].converged_ and fits[0].n_iter_ < 5000
    curve = fits[0].loss_curve_
    assert curve.min() == pytest.approx(curve[-1], rel=0.05) and curve[-1] < 0.1 * curve[0]


def test_tgt_nonlinear_encoder_improves_correctness():
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    X = np.vstack([rng.normal(size=(50, 6)), rng.normal(size=(50, 6)) + [4, 0, 0, 0, 0, 0]])
    groups = np.repeat([0, 1], 50)
    enc = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2)).double()
    eps = choose_epsilon(enc, X, groups)
    model = TGT(enc, l1=0.01, learning_rate=0.05, n_iter=3000, random_state=0).fit(X, groups)
    X0, X1 = X[groups == 0], X[groups == 1]
    before = correctness(enc, X0, X1, np.zeros(6), eps)
    after = correctness(enc, X0, X1, model.explanation(0, 1), eps)
    assert after > before + 0.2


# ---------------------------------------------------------------- metrics


def brute_metrics(R_t, R_j, eps, same):
    d = ((R_t[:, None, :] - R_j[None, :, :]) ** 2).sum(-1)
    if same:
        np.fill_diagonal(d, np.inf)
    return np.mean((d <= eps).any(axis=1)), np.mean((d <= eps).any(axis=0))


small_groups = st.integers(2, 9).flatmap(
    lambda n: arrays(np.float64, (n, 3), elements=st.floats(-3, 3, allow_subnormal=False))
)


@settings(max_examples=60, deadline=None)
@given(small_groups, small_groups, arrays(np.float64, 3, elements=st.floats(-2, 2)), st.floats(0, 5))
def test_correctness_coverage_match_brute_force(X_i, X_j, delta, eps):
    A = np.array([[1.0, -0.5, 0.2], [0.3, 0.8, -1.0]])
    enc = linear_encoder(A)
    R_t, R_j = (X_i + delta) @ A.T, X_j @ A.T
    same = X_i.shape == X_j.shape and np.array_equal(X_i, X_j) and not delta.any()
    cr, cv = brute_metrics(R_t, R_j, eps, same)
    # skip draws with a distance within rounding of eps (the two computations may disagree there)
    d = ((R_t[:, None, :] - R_j[None, :, :]) ** 2).sum(-1)
    if np.any(np.abs(d - eps) < 1e-9):
        return
    assert correctness(enc, X_i, X_j, delta, eps) == pytest.approx(cr)
    assert coverage(enc, X_i, X_j, delta, eps) == pytest.approx(cv)


@settings(max_examples=40, deadline=None)
@given(small_groups, st.floats(0.01, 5))
def test_identity_translation_equals_self_similarity(X_g, eps):
    enc = LatentIdentity()
    zero = np.zeros(X_g.shape[1])
    d = ((X_g[:, None] - X_g[None]) ** 2).sum(-1)
    if np.any(np.abs(d - eps) < 1e-9):
        return
    np.fill_diagonal(d, np.inf)
    expected = np.mean((d <= eps).any(axis=1))
    assert correctness(enc, X_g, X_g, zero, eps) == pytest.approx(expected)
    assert coverage(enc, X_g, X_g, zero, eps) == pytest.approx(expected)
    assert self_similarity(enc, X_g, eps) == pytest.approx(expected)


def test_pairwise_metrics_diagonal_and_entries(planted_fit):
    A, X, groups, _, model = planted_fit
    enc = linear_encoder(A)
    eps = choose_epsilon(enc, X, groups)
    labels, cr, cv = pairwise_metrics(enc, X, groups, lambda i, j: model.explanation(i, j, 3), eps)
    for a, g in enumerate(labels):
        Xg = X[groups == g]
        assert cr[a, a] == cv[a, a] == pytest.approx(self_similarity(enc, Xg, eps))
    Xa, Xb = X[groups == 1], X[groups == 3]
    assert cr[1, 3] == pytest.approx(correctness(enc, Xa, Xb, model.explanation(1, 3, 3), eps))
    assert cv[1, 3] == pytest.approx(coverage(enc, Xa, Xb, model.explanation(1, 3, 3), eps))
    assert cr[~np.eye(4, dtype=bool)].min() > 0.8  # planted differences have at most 3 features


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10_000), st.sampled_from([0.5, 0.9, 0.95, 1.0]))
def test_choose_epsilon_is_smallest_reaching_target(seed, target):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(23, 2))
    groups = rng.integers(0, 3, size=23)
    groups[:6] = [0, 0, 1, 1, 2, 2]
    enc = LatentIdentity()
    eps = choose_epsilon(enc, X, groups, target=target)
    sims = lambda e: [self_similarity(enc, X[groups == g], e) for g in range(3)]  # noqa: E731
    assert min(sims(eps)) >= target - 1e-12
    assert min(sims(np.nextafter(eps, 0) * (1 - 1e-9))) < target


# ---------------------------------------------------------------- similarity, top-k, DBM


def test_similarity_hand_cases():
    assert similarity([1, 2, 0], [0, 5, 0]) == pytest.approx(2 / 3)
    assert similarity([1, 0, 0], [3, 2, 1]) == 1.0
    assert similarity([1, 0, 0], [0, 2, 1]) == 0.0
    assert similarity([0, 0, 0], [0, 2, 1]) == 1.0
    assert similarity([-3, 1, 0], [1, 0, 0]) == pytest.approx(0.75)


def test_top_k_and_dbm():
    np.testing.assert_array_equal(top_k([0.5, -3.0, 2.0, -0.1], 2), [0, -3.0, 2.0, 0])
    np.testing.assert_array_equal(top_k([1.0, -1.0, 1.0], 1), [1.0, 0, 0])  # ties -> lower index
    X = np.array([[0.0, 0, 0], [2, 0, 0], [1, 4, -1], [3, 4, -3], [9, 9, 9]])
    groups = np.array([5, 5, 8, 8, -1])
    np.testing.assert_allclose(dbm(X, groups, 5, 8), [1, 4, -2])
    np.testing.assert_allclose(dbm(X, groups, 8, 5, k=2), [0, -4, 2])


# ---------------------------------------------------------------- tuning and the sweep


def distractor_data(seed=0, n=50):
    """Feature 0 differs most between groups but the encoder ignores it; feature 1 matters."""
    rng = np.random.default_rng(seed)
    shifts = np.array([[0.0, 0, 0, 0], [5.0, 1.0, 0, 0], [-5.0, 0, 1.0, 0]])
    X = np.vstack([s + 0.1 * rng.normal(size=(n, 4)) for s in shifts])
    A = np.array([[0.0, 3.0, 0.0, 0.5], [0.0, 0.0, 3.0, 0.5]])
    return linear_encoder(A), X, np.repeat(np.arange(3), n)


def test_sweep_tgt_beats_dbm_at_small_k():
    enc, X, groups = distractor_data()
    df = sparsity_sweep(enc, X, groups, [1, 2, 4], l1_grid=[0.0, 1.0], learning_rate=0.01,
                        n_iter=2000, patience=300, random_state=0, progress=False)
    assert list(df.columns) == ["method", "k", "l1", "correctness", "coverage", "similarity"]
    tgt = df[df.method == "TGT"].set_index("k")
    dbm_ = df[df.method == "DBM"].set_index("k")
    assert tgt.loc[2, "correctness"] > dbm_.loc[2, "correctness"] + 0.3
    assert tgt.loc[2, "coverage"] > dbm_.loc[2, "coverage"] + 0.3
    assert (dbm_.similarity.dropna() == 1.0).all()
    assert tgt.similarity.between(0, 1).all() or tgt.similarity.isna().any()
    assert np.isnan(tgt.loc[4, "similarity"])


def test_tune_l1_picks_most_correct():
    enc, X, groups = distractor_data(n=30)
    eps = choose_epsilon(enc, X, groups)
    grid, params = [0.0, 1.0, 500.0], dict(learning_rate=0.01, n_iter=1500, patience=300, random_state=0)
    model = tune_l1(enc, X, groups, 2, eps=eps, l1_grid=grid, progress=False, **params)
    scores = {}
    for lam in grid:
        fit = TGT(enc, l1=lam, **params).fit(X, groups)
        _, cr, _ = pairwise_metrics(enc, X, groups, lambda i, j, f=fit: f.explanation(i, j, 2), eps)
        scores[lam] = cr[~np.eye(3, dtype=bool)].mean()
    assert scores[500.0] < 0.1  # l1=500 zeroes every translation
    assert scores[model.l1] == pytest.approx(max(scores.values()), abs=1e-12)


# ---------------------------------------------------------------- bad input


class Detaching(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 2)

    def forward(self, x):
        return self.lin(x.detach())


@pytest.mark.parametrize(
    "kwargs, X, groups, match",
    [
        ({}, np.zeros((4, 3)), [0, 0, 0, 0], "at least two groups"),
        ({}, np.arange(12.0).reshape(4, 3), [0, 0, 0, 1], "single point"),
        ({"l1": -0.1}, np.arange(12.0).reshape(4, 3), [0, 0, 1, 1], "l1"),
        ({"learning_rate": 0}, np.arange(12.0).reshape(4, 3), [0, 0, 1, 1], "learning_rate"),
    ],
)
def test_bad_input_fit(kwargs, X, groups, match):
    with pytest.raises(InvalidInputError, match=match):
        TGT(torch.nn.Linear(3, 2), **kwargs).fit(X, groups)


@pytest.mark.parametrize(
    "encoder, match",
    [
        (Detaching(), "not differentiable"),
        (lambda x: torch.as_tensor(x.detach().numpy() * 2), "not differentiable"),
        (torch.nn.Linear(5, 2), "probe batch"),
        (lambda x: x.sum(), "2-D torch tensor"),
        ("not a model", "callable"),
    ],
)
def test_bad_encoder(encoder, match):
    X = np.arange(12.0).reshape(4, 3)
    with pytest.raises(InvalidInputError, match=match):
        TGT(encoder).fit(X, [0, 0, 1, 1])


def test_bad_k_and_labels(planted_fit):
    *_, X, groups, _, model = planted_fit
    for k in (0, X.shape[1] + 1, 2.5):
        with pytest.raises(InvalidInputError, match="k"):
            model.explanation(0, 1, k)
        with pytest.raises(InvalidInputError, match="k"):
            dbm(X, groups, 0, 1, k)
    with pytest.raises(InvalidInputError, match="not a group"):
        model.explanation(0, 9)
    with pytest.raises(InvalidInputError, match="eps"):
        correctness(LatentIdentity(), X[:3], X[3:6], np.zeros(X.shape[1]), -1.0)


def test_docs_snippet_runs(capsys):
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "counterfactuals.md").read_text()
    snippet = text.split("```python\n", 1)[1].split("```", 1)[0]
    exec(compile(snippet, "docs/counterfactuals.md", "exec"), {})
    printed = capsys.readouterr().out
    delta = np.array(printed[printed.index("[") + 1 : printed.index("]")].split(), dtype=float)
    assert np.flatnonzero(delta).tolist() == [2] and delta[2] > 1.5  # the planted feature, via the encoder
