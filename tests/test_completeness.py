"""How much the concepts explain: concept completeness and importance (issue 34, item 5)."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.concepts.completeness_probe import concept_completeness, permutation_importance
from pipeline.validation import InvalidInputError


def clusters(n=600, d=8, k=3, seed=0):
    rng = np.random.default_rng(seed)
    centers = rng.normal(0, 3, (k, d))
    labels = rng.integers(0, k, n)
    return centers[labels] + rng.normal(0, 1, (n, d)), labels, rng


def test_concepts_that_are_the_latents_are_complete():
    Z, labels, _ = clusters()
    res = concept_completeness(Z, Z, labels)
    assert res.completeness == 1.0 and res.accuracy_concepts == res.accuracy_latents > 0.9
    Q = np.linalg.qr(np.random.default_rng(1).normal(size=(8, 8)))[0]  # a rotation of the latents
    assert concept_completeness(Z, Z @ Q.T, labels).completeness > 0.97


def test_random_concepts_are_near_zero_and_a_part_in_between():
    Z, labels, rng = clusters()
    noise = rng.normal(size=(len(Z), 4))  # concepts that know nothing of the latents
    assert concept_completeness(Z, noise, labels).completeness < 0.1
    part = concept_completeness(Z, Z[:, :1], labels).completeness  # one latent coordinate of 8
    assert 0.1 < part < 0.95


def test_noise_points_are_left_out_and_large_runs_are_subsampled():
    Z, labels, _ = clusters(n=3000)
    labels = labels.copy()
    labels[:50] = -1
    res = concept_completeness(Z, Z[:, :2], labels, max_rows=1000)
    assert res.n_rows == 1000 and 0 <= res.completeness <= 1 and abs(res.chance - 1 / 3) < 0.05


def test_bad_input():
    Z, labels, _ = clusters(n=30)
    with pytest.raises(InvalidInputError, match="one row per point"):
        concept_completeness(Z, Z[:10], labels)
    with pytest.raises(InvalidInputError, match="at least 2 clusters"):
        concept_completeness(Z, Z, np.zeros(30, int))


def test_permutation_importance_finds_the_concept_the_tree_cuts_on():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(500, 3))
    ref = (X[:, 1] > 0).astype(int)
    imp = permutation_importance(lambda A: (A[:, 1] > 0).astype(int), X, ref)
    assert imp[1] > 0.4 and imp[0] == 0 and imp[2] == 0


def test_many_rows_are_presampled_per_class_before_the_stratified_split():
    """Beyond 50 x max_rows rows a per-class pre-sample comes first (a stratified split of 10M rows
    took ~1 GB of index arrays): a class of 3 rows among 12,000 still reaches the probes."""
    rng = np.random.default_rng(0)
    y = rng.integers(0, 4, 12_000)
    y[[5, 500, 5000]] = 4
    Z = rng.normal(size=(12_000, 6)) + 3 * np.eye(6)[y % 6]
    out = concept_completeness(Z, Z[:, :3], y, max_rows=200, random_state=0)
    assert out.n_rows == 200 and 0 <= out.completeness <= 1


def _importance_one_repeat_at_a_time(predict, X, reference, n_repeats=5, max_rows=20_000, random_state=0):
    """permutation_importance as first written: one prediction per repeat (the brute force)."""
    ref = np.asarray(reference).ravel()
    rows = np.flatnonzero(ref >= 0)
    rng = np.random.default_rng(random_state)
    if rows.size > max_rows:
        rows = rows[np.sort(rng.choice(rows.size, size=max_rows, replace=False))]
    X, ref = np.asarray(X, dtype=float)[rows], ref[rows]
    base = float(np.mean(np.asarray(predict(X)) == ref))
    out = np.zeros(X.shape[1])
    for m in range(X.shape[1]):
        Xp, drops = X.copy(), []
        for _ in range(n_repeats):
            Xp[:, m] = X[rng.permutation(X.shape[0]), m]
            drops.append(base - float(np.mean(np.asarray(predict(Xp)) == ref)))
        out[m] = float(np.mean(drops))
    return out


@pytest.mark.parametrize("n, max_rows, repeats, seed", [(300, 20_000, 5, 0), (900, 250, 3, 1), (50, 20_000, 1, 2)])
def test_permutation_importance_stacked_repeats_equal_one_repeat_at_a_time(n, max_rows, repeats, seed):
    """The repeats' permuted copies are predicted in one call: the same draws, the same numbers
    (bit for bit) as one prediction per repeat; noise rows left out, large inputs sampled."""
    from pipeline.trees import CART

    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 4))
    ref = (X[:, 0] + 0.5 * X[:, 2] > 0).astype(int) + (X[:, 1] > 1)
    ref[rng.random(n) < 0.1] = -1
    tree = CART(4, random_state=0).fit(X[ref >= 0], ref[ref >= 0])
    got = permutation_importance(tree.predict, X, ref, n_repeats=repeats, max_rows=max_rows, random_state=seed)
    want = _importance_one_repeat_at_a_time(tree.predict, X, ref, repeats, max_rows, seed)
    assert np.array_equal(got, want)


def test_permutation_importance_checks_only_the_rows_it_reads():
    X = np.random.default_rng(0).normal(size=(400, 2))
    ref = (X[:, 0] > 0).astype(int)
    X[5, 1], ref[5] = np.nan, -1  # a noise row's NaN is never read
    assert np.isfinite(permutation_importance(lambda A: (A[:, 0] > 0).astype(int), X, ref)).all()
    ref[5] = 1
    with pytest.raises(InvalidInputError, match="NaN"):
        permutation_importance(lambda A: (A[:, 0] > 0).astype(int), X, ref)
    with pytest.raises(InvalidInputError, match="one row per reference label"):
        permutation_importance(lambda A: A[:, 0] > 0, X, ref[:10])
