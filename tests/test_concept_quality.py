"""Issue 48: the clustering's rule as a head, completeness beside random directions, TCAV's test
through the clustering, circularity by content."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from sklearn.cluster import KMeans
from sklearn.mixture import GaussianMixture

from pipeline.cluster_heads import MixtureHead, NearestCentreHead, head_of
from pipeline.concept_quality import completeness_table, principal_directions, random_directions, tree_baseline
from pipeline.concepts.circularity import LEAKAGE, class_leakage, content_marks, match_examples
from pipeline.concepts.completeness_probe import yeh_completeness
from pipeline.concepts.tcav import random_sets, tcav_scores, tcav_test
from pipeline.validation import InvalidInputError


def blobs(n=600, d=6, k=3, seed=0, spread=3.0):
    rng = np.random.default_rng(seed)
    centres = rng.normal(scale=spread, size=(k, d))
    y = rng.integers(0, k, n)
    return centres[y] + rng.normal(size=(n, d)), y


@pytest.fixture(scope="module")
def gmm():
    Z, _ = blobs()
    g = GaussianMixture(3, random_state=0).fit(Z)
    return Z, g, MixtureHead(g.weights_, g.means_, g.covariances_)


# ---- heads -----------------------------------------------------------------------------------
def test_mixture_head_predicts_as_scikit_learn(gmm):
    Z, g, head = gmm
    assert np.array_equal(head.predict(Z), g.predict(Z))
    np.testing.assert_allclose(head.predict_proba(Z), g.predict_proba(Z), atol=1e-10)


@pytest.mark.parametrize("kind", ["mixture", "centres"])
def test_posterior_slopes_equal_finite_differences(gmm, kind):
    Z, g, head = gmm
    if kind == "centres":
        head = NearestCentreHead(g.means_, 2.0)
    rng = np.random.default_rng(1)
    C = random_directions(4, Z.shape[1], rng)
    S = head.log_posterior_slopes(Z[:40], C)
    eps = 1e-6
    for r in range(len(C)):
        fd = (np.log(head.predict_proba(Z[:40] + eps * C[r])) - np.log(head.predict_proba(Z[:40] - eps * C[r]))) / (2 * eps)
        np.testing.assert_allclose(S[:, :, r], fd, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("kind", ["mixture", "centres"])
def test_scaled_slopes_are_the_slopes_over_the_runner_up_posterior(gmm, kind):
    Z, g, head = gmm
    if kind == "centres":
        head = NearestCentreHead(g.means_, 2.0)
    C = random_directions(3, Z.shape[1], np.random.default_rng(2))
    plain, scaled = head.log_posterior_slopes(Z[:60], C), head.log_posterior_slopes(Z[:60], C, scaled=True)
    P = head.predict_proba(Z[:60])
    for k in range(P.shape[1]):
        runner_up = np.delete(P, k, axis=1).max(axis=1)
        ok = runner_up > 1e-250
        np.testing.assert_allclose(scaled[ok, k, :] * runner_up[ok, None], plain[ok, k, :], rtol=1e-9, atol=1e-300)


def test_scaled_slopes_keep_the_sign_where_the_posterior_saturates():
    """Two components 60 standard deviations apart: p(other | z) underflows to 0 in float64, the plain
    slope is 0 and TCAV's score would count no row as rising; the scaled slope is a_k - a_j exactly."""
    means = np.array([[0.0, 0.0], [60.0, 0.0]])
    head = MixtureHead([0.5, 0.5], means, np.stack([np.eye(2)] * 2))
    Z = np.array([[-1.0, 0.3], [61.0, -0.2]])
    C = np.array([[1.0, 0.0], [-1.0, 0.0], [0.0, 1.0]])
    plain, scaled = head.log_posterior_slopes(Z, C), head.log_posterior_slopes(Z, C, scaled=True)
    assert np.all(plain[0, 0] == 0) and np.all(plain[1, 1] == 0)
    a = -np.einsum("nkd,rd->nkr", Z[:, None, :] - means[None], C)  # a_j = -(z - μ_j)ᵀ c (Σ = I)
    np.testing.assert_allclose(scaled[:, 0], a[:, 0] - a[:, 1], atol=1e-12)
    np.testing.assert_allclose(scaled[:, 1], a[:, 1] - a[:, 0], atol=1e-12)
    # along +x the row of component 0 leaves it, the row of component 1 goes deeper into it
    assert tcav_scores(scaled[:, :, :1], np.array([0, 1]), 2).tolist() == [[0.0, 1.0]]


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 5), st.integers(0, 10_000))
def test_predict_affine_equals_predict_of_the_rebuilt_points(M, seed):
    Z, g, head = _GMM
    rng = np.random.default_rng(seed)
    V = rng.normal(size=(50, M))
    a, B = rng.normal(size=Z.shape[1]), rng.normal(size=(Z.shape[1], M))
    points = a + V @ B.T
    for h in (head, NearestCentreHead(g.means_)):
        assert np.array_equal(h.predict_affine(a, B, V), h.predict(points))


_Z, _ = blobs()
_G = GaussianMixture(3, random_state=0).fit(_Z)
_GMM = (_Z, _G, MixtureHead(_G.weights_, _G.means_, _G.covariances_))


def test_head_of_says_why_there_is_none():
    head, why = head_of("dbscan")
    assert head is None and "no rule" in why
    head, why = head_of("kmeans", centers=np.zeros((2, 3)), scaled=True)
    assert head is None and "scaled" in why
    with pytest.raises(InvalidInputError, match="not positive definite"):
        MixtureHead([0.5, 0.5], np.zeros((2, 2)), np.array([np.eye(2), -np.eye(2)]))
    with pytest.raises(InvalidInputError, match="sum to 1"):
        MixtureHead([0.5, 0.6], np.zeros((2, 2)), np.array([np.eye(2), np.eye(2)]))


# ---- completeness ------------------------------------------------------------------------------
def test_yeh_completeness_of_the_latent_axes_is_one_and_of_noise_near_zero(gmm):
    from sklearn.model_selection import StratifiedKFold

    Z, g, head = gmm
    y = head.predict(Z)
    folds = list(StratifiedKFold(3, shuffle=True, random_state=0).split(Z, y))
    full = yeh_completeness(Z, Z, y, head, folds)
    assert full["completeness"] == pytest.approx(1.0) and full["accuracy_latents"] == 1.0
    noise = np.random.default_rng(0).normal(size=(len(Z), 2))
    assert yeh_completeness(Z, noise, y, head, folds)["completeness"] < 0.2
    assert yeh_completeness(Z, Z, y, head, folds, g="network")["completeness"] > 0.95


def test_completeness_table_has_the_baselines_and_says_when_directions_span(gmm):
    Z, g, head = gmm
    y = head.predict(Z)
    t = completeness_table(Z, principal_directions(Z, 2), y, head, n_random=5, n_folds=3)
    assert t["affine"]["concepts"] == pytest.approx(t["affine"]["principal"]) and t["affine"]["random"]["n"] == 5
    assert t["affine"]["random"]["low"] <= t["affine"]["random"]["median"] <= t["affine"]["random"]["high"]
    assert not t["spans"] and {"affine", "network", "probe"} <= set(t)
    spanning = completeness_table(Z, random_directions(Z.shape[1], Z.shape[1], np.random.default_rng(0)), y, head,
                                  n_random=3, n_folds=3)
    assert spanning["spans"] and spanning["affine"]["random"]["median"] == pytest.approx(1.0)
    probe_only = completeness_table(Z, principal_directions(Z, 2), y, None, n_random=3, n_folds=3)
    assert "affine" not in probe_only and "probe" in probe_only


def test_tree_baseline_compares_concepts_with_random_directions(gmm):
    Z, g, head = gmm
    y = head.predict(Z)
    b = tree_baseline(Z @ principal_directions(Z, 2).T, Z, principal_directions(Z, 2), y, 3, n_random=5)
    assert b["concepts"] == pytest.approx(b["principal"]) and b["random"]["n"] == 5


# ---- TCAV ----------------------------------------------------------------------------------------
def _directions(problems):
    from pipeline.concepts.cav import CAVFitter

    return CAVFitter(n_repeats=1, cv=0).directions(problems, random_state=0)


def test_tcav_scores_count_rising_posteriors():
    slopes = np.zeros((4, 2, 1))
    slopes[:, 0, 0] = [1, -1, 1, 1]
    slopes[:, 1, 0] = [0, 0, 2, -1]
    assert tcav_scores(slopes, np.array([0, 0, 1, 1]), 2).tolist() == [[0.5, 0.5]]


def test_random_sets_are_distinct_and_refused_when_too_few():
    sets = random_sets(10, 3, 20, np.random.default_rng(0))
    assert len({s.tobytes() for s in sets}) == 20
    with pytest.raises(InvalidInputError, match="only 10 different random example set"):
        random_sets(5, 2, 20, np.random.default_rng(0))


def test_tcav_finds_a_planted_concept_and_not_noise(gmm):
    Z, g, head = gmm
    y = head.predict(Z)
    rng = np.random.default_rng(0)
    towards = g.means_[0] - g.means_[1]
    planted = Z[np.argsort(Z @ towards)[-150:]]  # the rows furthest towards cluster 0
    noise = Z[rng.choice(len(Z), 150, replace=False)]
    res = tcav_test([planted, noise], ["planted", "noise"], Z, _directions,
                    lambda C: head.log_posterior_slopes(Z, C), y, 3, n_random=10, max_set=100, random_state=0)
    assert res.significant.tolist() == [True, False]
    assert res.n_tests == 6 and "Bonferroni over 6" in res.line()


@pytest.mark.slow
def test_tcav_p_values_reject_meaningless_concepts_at_about_alpha(gmm):
    """50 concepts of pure noise (random example sets themselves): their uncorrected p-values reject
    at about the test's level."""
    Z, g, head = gmm
    y = head.predict(Z)
    rng = np.random.default_rng(3)
    noise = [Z[rng.choice(len(Z), 200, replace=False)] for _ in range(50)]
    res = tcav_test(noise, [f"n{i}" for i in range(50)], Z, _directions, lambda C: head.log_posterior_slopes(Z, C),
                    y, 3, n_random=20, max_set=60, random_state=1)
    rate = float(np.mean(res.raw_p_values < 0.05))
    assert rate < 0.12, rate  # about alpha (the 150 tests share one null, so their rejections are correlated)
    literal = tcav_test(noise, [f"n{i}" for i in range(50)], Z, _directions, lambda C: head.log_posterior_slopes(Z, C),
                        y, 3, n_random=20, max_set=60, design="tcav", random_state=1)
    assert float(np.mean(literal.raw_p_values < 0.05)) > 0.2  # TCAV's own layout: far above alpha
    assert not res.significant.any()


# ---- circularity ---------------------------------------------------------------------------------
def test_class_leakage_survives_a_few_flipped_labels():
    y = np.repeat(np.arange(5), 183)
    labels = (y == 3).astype(float)
    rows = np.arange(y.size)
    assert class_leakage(labels, rows, y)[0] == 1.0
    flipped = labels.copy()
    flipped[np.flatnonzero(y == 3)[:3]] = 0.0
    assert class_leakage(flipped, rows, y)[0] >= LEAKAGE
    other = np.random.default_rng(0).integers(0, 2, y.size).astype(float)
    assert class_leakage(other, rows, y)[0] < 0.6


def test_examples_matched_by_content_and_near_duplicates():
    rng = np.random.default_rng(0)
    run = rng.integers(0, 255, (30, 4, 4, 1)).astype(np.uint8)
    Z = rng.normal(size=(30, 8))
    ex = np.concatenate([run[[3, 7]], rng.integers(0, 255, (2, 4, 4, 1)).astype(np.uint8)])
    Zex = np.vstack([Z[[3, 7]], Z[11] * 1.00001, rng.normal(size=8)])
    matched, counts = match_examples(list(ex), list(run), Zex, Z)
    assert matched.tolist() == [3, 7, 11, -1] and counts["content"] == 2 and counts["near"] == 1
    texts, found = match_examples(["a  b", "c"], ["x", "a b"])
    assert texts.tolist() == [1, -1]


def test_content_marks():
    y = np.repeat(np.arange(4), 30)
    labels = np.column_stack([(y == 2).astype(float), np.random.default_rng(1).integers(0, 2, y.size)])
    matched = np.arange(y.size)
    marks = content_marks(labels, ["class_copy", "own_labels"], matched, y)
    assert marks["class_copy"]["from_run"] == "classes" and marks["own_labels"]["from_run"] == "rows"
    assert content_marks(labels, ["a", "b"], np.full(y.size, -1), y)["a"]["from_run"] is None
    assert content_marks(labels, ["a", "b"], matched, y, bounded={"b"})["b"]["from_run"] is None


def test_a_measured_property_that_separates_the_classes_is_no_dagger():
    """A measurement that happens to follow the classes (Fashion-MNIST's shirts are top-heavy, shoes
    are not) is computed from the pixels, not labelled by class: no †, and the note says it separates
    the classes; the same labels given as class-labelled examples restate the class (†)."""
    y = np.repeat(np.arange(3), 40)
    labels = (y == 0).astype(float)[:, None]
    matched = np.arange(y.size)
    measured = content_marks(labels, ["top_heavy"], matched, y, bounded={"top_heavy"})["top_heavy"]
    assert measured["from_run"] is None and measured["leakage"] >= LEAKAGE
    assert "separates the run's classes" in measured["note"] and "not a label restating the class" in measured["note"]
    assert content_marks(labels, ["top_heavy"], matched, y)["top_heavy"]["from_run"] == "classes"


# ---- the fast linear algebra of the baselines ----------------------------------------------------
@settings(max_examples=40, deadline=None)
@given(n=st.integers(2, 300), m=st.integers(1, 12), k=st.integers(1, 40), rank=st.integers(0, 12),
       seed=st.integers(0, 2**16))
def test_least_squares_equals_numpys_lstsq(n, m, k, rank, seed):
    """The SVD route of the affine rebuild gives lstsq's minimum-norm solution, also for a rank-
    deficient design (a repeated column, a constant one beside the intercept, more columns than rows)."""
    from pipeline.concepts.completeness_probe import least_squares

    rng = np.random.default_rng(seed)
    A = rng.standard_normal((n, m))
    if rank < m:  # columns past `rank` repeat earlier ones
        A[:, max(rank, 1):] = A[:, :1]
    A = np.column_stack([A, np.ones(n)])
    B = rng.standard_normal((n, k)) * 10.0 ** rng.integers(-3, 4)
    want = np.linalg.lstsq(A, B, rcond=None)[0]
    np.testing.assert_allclose(least_squares(A, B), want, rtol=1e-8, atol=1e-10 * max(1.0, np.abs(want).max()))


@pytest.mark.parametrize("shape", [(5000, 64), (300, 40), (50, 40), (40, 60)])
def test_principal_directions_equal_the_svds(shape):
    """Through R of a QR factorisation for tall rows, directly otherwise: numpy's SVD's directions."""
    rng = np.random.default_rng(1)
    Z = rng.standard_normal(shape) @ np.diag(np.linspace(3.0, 0.1, shape[1])) + 5.0
    Vt = np.linalg.svd(Z - Z.mean(axis=0), full_matrices=False)[2][:10]
    got = principal_directions(Z, 10)
    np.testing.assert_allclose(np.abs(np.sum(got * Vt, axis=1)), 1.0, atol=1e-9)  # the same lines


def test_the_report_and_the_console_say_the_same_of_the_concept_tests():
    """The report's notes under its concept table carry every line the console prints about the tests:
    kept out, failed but kept (concepts.tests.keep_failed), not tested, weak tests."""
    from pipeline.app.report.concept_run import concept_test_notes
    from pipeline.app.report.run_report import concept_notes
    from pipeline.app.stores.artifacts import ConceptsArtifact, ConceptTestsArtifact

    tests = ConceptTestsArtifact(names=["a", "b", "c", "d"], excluded={"a": "does not transfer"},
                                 kept_failing=["b"], untested={"c": "too few examples; it has 3"},
                                 weak={"d": "not significant, but a weak test: it has 9 examples per side"})
    lines = concept_test_notes(tests)
    assert [line.split(":")[0] for line in lines] == ["Kept out of the trees", "Failed their tests but kept in the trees",
                                                      "Significance not tested", "Weak tests"]
    assert concept_notes(ConceptsArtifact(concept_names=["a", "b", "c", "d"]), tests)[:4] == lines
    assert concept_test_notes(None) == [] and concept_test_notes(ConceptTestsArtifact()) == []
