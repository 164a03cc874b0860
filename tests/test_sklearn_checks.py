"""scikit-learn's own estimator checks over every tree estimator (issue 15, item 1)."""

import warnings

import pytest
from sklearn.utils import estimator_checks
from sklearn.utils.estimator_checks import parametrize_with_checks

from pipeline.trees import CART, EMN, IMM, MMDT, TAO, ConceptMMDT, ExKMC, RandomizedMMDT, SpExClique, SpExGraph, SpExKNN

CLASSIFIERS = [MMDT(), RandomizedMMDT(random_state=0), ConceptMMDT(), CART(random_state=0), SpExClique(), IMM(), EMN(),
               ExKMC()]
# TAO() with its defaults (8 clusters, depth 4, 60 rounds) passes as well; a smaller TAO keeps the suite fast
CLUSTERERS = [SpExKNN(), TAO(n_clusters=3, depth=2, max_rounds=3, random_state=0)]

NOISE_REASON = ("y in {-1, 1}: -1 is the documented default noise_label, so those rows are left out and one class "
                "remains; the check passes with noise_label=None (test_binary_minus_one_is_a_class_without_noise)")
GRAPH_REASON = "fit(X, graph) needs an (n_samples, n_samples) graph over the rows where the check passes y"
SPEX_GRAPH_FAILS = [
    "check_fit_score_takes_y", "check_estimators_overwrite_params", "check_dont_overwrite_parameters",
    "check_estimators_fit_returns_self", "check_readonly_memmap_input", "check_n_features_in_after_fitting",
    "check_positive_only_tag_during_fit", "check_estimators_dtypes", "check_dtype_object",
    "check_pipeline_consistency", "check_estimators_nan_inf", "check_estimators_pickle",
    "check_f_contiguous_array_estimator", "check_clustering", "check_methods_sample_order_invariance",
    "check_methods_subset_invariance", "check_fit2d_1feature", "check_dict_unchanged", "check_fit_idempotent",
    "check_fit_check_is_fitted", "check_n_features_in", "check_fit2d_predict1d",
]


def expected_failed_checks(estimator):
    if isinstance(estimator, SpExGraph):
        return {name: GRAPH_REASON for name in SPEX_GRAPH_FAILS}
    out = {}
    if getattr(estimator, "noise_label", None) == -1 and not isinstance(estimator, (SpExKNN, TAO)):
        out["check_classifiers_classes"] = NOISE_REASON
    if isinstance(estimator, RandomizedMMDT):
        out["check_classifiers_train"] = ("Theorem 2's rule draws thresholds uniformly between the extreme means, "
                                          "so accuracy on the check's overlapping blobs is ~0.75 (< 0.83) by design")
    return out


@parametrize_with_checks(CLASSIFIERS + CLUSTERERS + [SpExGraph()],
                         expected_failed_checks=expected_failed_checks)
def test_sklearn_estimator_checks(estimator, check):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # TAO's ConvergenceWarning with few rounds, n_neighbors clamping
        check(estimator)


@pytest.mark.parametrize("estimator", CLASSIFIERS, ids=lambda e: type(e).__name__)
def test_binary_minus_one_is_a_class_without_noise(estimator):
    estimator_checks.check_classifiers_classes(type(estimator).__name__, estimator.set_params(noise_label=None))


@pytest.mark.parametrize("estimator", CLASSIFIERS + CLUSTERERS,
                         ids=lambda e: type(e).__name__)
def test_parameter_validation_the_sklearn_way(estimator):
    estimator_checks.check_param_validation(type(estimator).__name__, estimator)
