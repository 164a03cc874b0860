"""Concept-space counterfactual explanations against a plain CAV matrix."""

import itertools

import numpy as np
import pytest

from pipeline.counterfactuals import (
    ConceptDecoder,
    LatentIdentity,
    choose_epsilon,
    concept_dbm,
    concept_pairwise_metrics,
    concept_scores,
    concept_to_latent,
    describe,
    fit_concept_tgt,
    self_similarity,
)
from pipeline.validation import InvalidInputError

NAMES = ["loop", "vertical line", "curvature", "stroke width"]


def planted_latents(seed=0, m=6, n=40):
    """Latents whose clusters differ by sparse changes of concept scores (4 CAVs in 6-D)."""
    rng = np.random.default_rng(seed)
    C = rng.normal(size=(4, m))
    C /= np.linalg.norm(C, axis=1, keepdims=True)
    concept_shifts = np.array([[0, 0, 0, 0], [1.5, 0, 0, 0], [0, -1.2, 0, 1.0]], dtype=float)
    latent_shifts = concept_shifts @ np.linalg.pinv(C).T
    Z = np.vstack([s + 0.05 * rng.normal(size=(n, m)) for s in latent_shifts])
    return Z, np.repeat(np.arange(3), n), C, concept_shifts


def test_concept_to_latent_is_least_norm_inverse():
    Z, groups, C, _ = planted_latents()
    dc = np.array([1.0, -0.5, 0.0, 2.0])
    dz = concept_to_latent(dc, C)
    np.testing.assert_allclose(C @ dz, dc, atol=1e-10)  # full row rank: exact
    # least norm: dz lies in the row space of C (no component in its null space)
    null = np.linalg.svd(C)[2][C.shape[0]:]
    np.testing.assert_allclose(null @ dz, 0, atol=1e-10)
    np.testing.assert_allclose(concept_scores(Z[:3], C), Z[:3] @ C.T)


def test_concept_dbm_and_describe():
    Z, groups, C, shifts = planted_latents()
    e = concept_dbm(Z, groups, C, 0, 2)
    np.testing.assert_allclose(e, C @ (Z[groups == 2].mean(0) - Z[groups == 0].mean(0)))
    np.testing.assert_allclose(e, shifts[2], atol=0.1)
    text = describe(concept_dbm(Z, groups, C, 0, 2, k=2), NAMES)
    assert text == "-1.2 vertical line, +1.0 stroke width"
    assert describe(np.array([1.1, -0.6, 0.0, 0.0]), NAMES) == "+1.1 loop, -0.6 vertical line"
    assert describe(np.zeros(4), NAMES) == "no change"


def test_concept_tgt_recovers_support_and_is_correct_on_latents():
    Z, groups, C, shifts = planted_latents()
    model = fit_concept_tgt(Z, groups, C, l1=0.05, learning_rate=0.05, n_iter=4000, patience=300, random_state=0)
    assert model.deltas_.shape == (2, 4)
    for i, j in itertools.permutations(range(3), 2):
        truth = shifts[j] - shifts[i]
        e = model.explanation(i, j)
        assert set(np.flatnonzero(np.abs(e) > 0.2 * np.abs(e).max())) == set(np.flatnonzero(truth))
        np.testing.assert_array_equal(e, -model.explanation(j, i))
    eps = choose_epsilon(LatentIdentity(), Z, groups)
    k = 3  # the pair 1 -> 2 changes three concepts
    _, cr, cv = concept_pairwise_metrics(Z, groups, C, lambda i, j: model.explanation(i, j, k), eps)
    off = ~np.eye(3, dtype=bool)
    assert cr[off].min() > 0.9 and cv[off].min() > 0.9
    # a wrong concept (only "curvature") explains nothing
    _, cr_bad, _ = concept_pairwise_metrics(Z, groups, C, lambda i, j: np.array([0, 0, 1.0, 0]), eps)
    assert cr_bad[off].max() < 0.1
    # the diagonal is each cluster's self-similarity on the latents
    for a in range(3):
        assert cr[a, a] == pytest.approx(self_similarity(LatentIdentity(), Z[groups == a], eps))


def test_concept_decoder_matches_pinv():
    _, _, C, _ = planted_latents()
    import torch

    s = torch.randn(5, 4, dtype=torch.float64)
    np.testing.assert_allclose(ConceptDecoder(C)(s).numpy(), s.numpy() @ np.linalg.pinv(C).T, atol=1e-12)


def test_bad_concept_input():
    Z, groups, C, _ = planted_latents()
    with pytest.raises(InvalidInputError, match="columns"):
        concept_dbm(Z, groups, C[:, :4], 0, 1)
    C0 = C.copy()
    C0[1] = 0
    with pytest.raises(InvalidInputError, match="all zero"):
        fit_concept_tgt(Z, groups, C0)
    with pytest.raises(InvalidInputError, match="k=5"):
        concept_dbm(Z, groups, C, 0, 1, k=5)
    with pytest.raises(InvalidInputError, match="names"):
        describe(np.ones(4), NAMES[:3])
