"""Bad and unusual input for every tree estimator: a clear error or the right answer, never a silent wrong one.

Categories (issue 15): DataFrames (names in the rules, reordered/renamed columns), labels
(negative, string, noise_label), n_leaves out of range, extreme scales, malformed arrays
(complex, sparse, 1-D, empty, NaN/inf, strings), constant data, near-duplicate means,
unfitted estimators, invalid parameters and use inside GridSearchCV.
"""

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.datasets import make_blobs
from sklearn.exceptions import NotFittedError
from sklearn.metrics import adjusted_rand_score
from sklearn.model_selection import GridSearchCV

from pipeline.trees import CART, EMN, IMM, MMDT, TAO, ConceptMMDT, ExKMC, RandomizedMMDT, SpExClique, SpExGraph, SpExKNN
from pipeline.trees.graphs import knn_graph
from pipeline.validation import InvalidInputError

pd = pytest.importorskip("pandas")

X0, Y0 = make_blobs(n_samples=90, n_features=3, centers=[[0, 0, 0], [6, 1, 0], [1, 7, 3]], cluster_std=1.0,
                    random_state=0)

# name -> (factory, whether fit uses reference labels)
ESTIMATORS = {
    "MMDT": (lambda: MMDT(random_state=0), True),
    "RandomizedMMDT": (lambda: RandomizedMMDT(random_state=0), True),
    "ConceptMMDT": (lambda: ConceptMMDT(random_state=0), True),
    "CART": (lambda: CART(random_state=0), True),
    "SpExClique": (lambda: SpExClique(random_state=0), True),
    "IMM": (lambda: IMM(random_state=0), True),
    "EMN": (lambda: EMN(random_state=0), True),
    "ExKMC": (lambda: ExKMC(n_leaves=4, random_state=0), True),
    "SpExKNN": (lambda: SpExKNN(n_leaves=3, n_neighbors=10, random_state=0), False),
    "SpExGraph": (lambda: SpExGraph(n_leaves=3, random_state=0), False),
    "TAO": (lambda: TAO(n_clusters=3, depth=2, max_rounds=5, random_state=0), False),
}
NAMES = list(ESTIMATORS)
GRAPH = knn_graph(X0, 10)
REFERENCE = [n for n in NAMES if ESTIMATORS[n][1]]


def fit(name, X, y=Y0, est=None, **kwargs):
    est = ESTIMATORS[name][0]() if est is None else est
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if name == "SpExGraph":
            return est.fit(X, GRAPH, **kwargs)  # the same rows whatever the scale of X
        if ESTIMATORS[name][1]:
            return est.fit(X, y, **kwargs)
        return est.fit(X, **kwargs)


def frame(X=X0, columns=("width", "height", "depth")):
    return pd.DataFrame(X, columns=list(columns))


# ------------------------------------------------------------------ DataFrames
@pytest.mark.parametrize("name", NAMES)
def test_dataframe_column_names_name_the_rules(name):
    est = fit(name, frame())
    assert list(est.feature_names_in_) == ["width", "height", "depth"]
    text = " ".join(str(r) for r in est.tree_.rules())
    assert any(c in text for c in ("width", "height", "depth")) and "x[" not in text
    with pytest.warns(UserWarning, match="feature names"):  # sklearn's warning for a bare array
        assert np.array_equal(est.predict(frame()), est.predict(X0))


@pytest.mark.parametrize("name", NAMES)
def test_reordered_columns_raise(name):
    est = fit(name, frame())
    with pytest.raises(ValueError, match="feature names"):
        est.predict(frame()[["depth", "width", "height"]])


@pytest.mark.parametrize("name", NAMES)
def test_renamed_columns_raise(name):
    est = fit(name, frame())
    with pytest.raises(ValueError, match="feature names"):
        est.predict(frame(columns=("a", "b", "c")))


# ------------------------------------------------------------------ labels
@pytest.mark.parametrize("name", REFERENCE)
def test_negative_labels_other_than_noise_are_clusters(name):
    y = np.array([-3, -2, 5])[Y0]
    est = fit(name, X0, y)
    assert est.classes_.tolist() == [-3, -2, 5]
    assert set(np.unique(est.predict(X0))) <= {-3, -2, 5}
    assert adjusted_rand_score(y, est.predict(X0)) > 0.9


@pytest.mark.parametrize("name", REFERENCE)
def test_string_labels_work_and_score_is_accuracy(name):
    y = np.array(["cat", "dog", "eel"])[Y0]
    est = fit(name, X0, y)
    pred = est.predict(X0)
    assert est.classes_.tolist() == ["cat", "dog", "eel"] and set(pred) <= {"cat", "dog", "eel"}
    assert est.score(X0, y) == pytest.approx(np.mean(pred == y)) and est.score(X0, y) > 0.9


@pytest.mark.parametrize("name", REFERENCE)
def test_noise_rows_are_left_out(name):
    y = Y0.copy()
    y[::7] = -1
    noisy = X0.copy()
    noisy[::7] = 1e3  # wild noise rows would move means/centres/cuts if they were used
    est = fit(name, noisy, y, est=ESTIMATORS[name][0]().set_params(noise_label=-1))
    assert -1 not in est.classes_
    assert est.tree_ == fit(name, X0[y != -1], y[y != -1]).tree_
    assert -1 in fit(name, noisy, y).classes_  # noise_label=None (the default): -1 is a cluster like any other


@pytest.mark.parametrize("name", REFERENCE)
def test_custom_noise_label(name):
    y = np.array(["a", "b", "c"])[Y0].astype(object)
    y[::9] = "noise"
    est = ESTIMATORS[name][0]().set_params(noise_label="noise")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(X0, y)
    assert "noise" not in est.classes_.tolist()


# ------------------------------------------------------------------ n_leaves
@pytest.mark.parametrize("name,n_leaves", [("CART", 500), ("SpExClique", 500), ("ExKMC", 500), ("IMM", 5),
                                           ("EMN", 2), ("MMDT", 5), ("RandomizedMMDT", 2), ("SpExKNN", 500)])
def test_n_leaves_out_of_range_is_an_error(name, n_leaves):
    est = ESTIMATORS[name][0]().set_params(n_leaves=n_leaves)
    with pytest.raises(InvalidInputError, match=r"n_leaves"):
        est.fit(X0, Y0)


def test_cart_n_leaves_error_names_the_range():
    with pytest.raises(InvalidInputError, match=r"range: 3 to 90"):
        CART(n_leaves=500).fit(X0, Y0)
    with pytest.raises(InvalidInputError, match=r"at least 3 \(the number of clusters\)"):
        CART(n_leaves=2).fit(X0, Y0)


# ------------------------------------------------------------------ scale
SCALES = {
    "tiny": lambda X: X * 1e-300,
    "huge": lambda X: X * 1e300,
    "int64_near_2^62": lambda X: np.round(X * 2.0**58).astype(np.int64),
    "offset_2^40": lambda X: X + 2.0**40,
}


@pytest.mark.parametrize("scale", SCALES)
@pytest.mark.parametrize("name", NAMES)
def test_extreme_scales_give_the_same_clusters(name, scale):
    Xs = SCALES[scale](X0)
    ref, est = fit(name, X0), fit(name, Xs)
    assert adjusted_rand_score(ref.predict(X0), est.predict(Xs)) > 0.95


# ------------------------------------------------------------------ malformed arrays
BAD_X = {
    "complex": (X0 + 1j, ValueError, "Complex data not supported"),
    "1-D": (X0[:, 0], ValueError, "2D array"),
    "empty": (np.empty((0, 3)), ValueError, "0 sample"),
    "nan": (np.where(np.arange(X0.size).reshape(X0.shape) == 5, np.nan, X0), ValueError, "NaN"),
    "inf": (np.where(np.arange(X0.size).reshape(X0.shape) == 5, np.inf, X0), ValueError, "infinity"),
    "strings": (X0.astype(str).astype(object) + "x", ValueError, "could not convert"),
}


@pytest.mark.parametrize("case", BAD_X)
@pytest.mark.parametrize("name", NAMES)
def test_malformed_X_is_rejected(name, case):
    X, exc, match = BAD_X[case]
    est = ESTIMATORS[name][0]()
    y = Y0[:X.shape[0]] if getattr(X, "ndim", 2) == 2 else Y0
    with pytest.raises(exc, match=match):
        if name == "SpExGraph":
            est.fit(X, sp.eye(X.shape[0]))
        elif ESTIMATORS[name][1]:
            est.fit(X, y)
        else:
            est.fit(X)


SPARSE_OK = ["MMDT", "RandomizedMMDT", "ConceptMMDT", "CART"]  # algorithms that only need sums / sklearn


@pytest.mark.parametrize("fmt", ["csr", "csc", "coo"])
@pytest.mark.parametrize("name", NAMES)
def test_sparse_X_is_supported_where_the_algorithm_allows_else_rejected(name, fmt):
    Xsp = sp.csr_matrix(np.where(X0 > 1.0, X0, 0.0)).asformat(fmt)
    if name in SPARSE_OK:
        dense, sparse = fit(name, Xsp.toarray()), fit(name, Xsp)
        assert np.array_equal(dense.predict(Xsp.toarray()), sparse.predict(Xsp))
        # the same tree; CART scales sparse columns without centring, so thresholds may differ in the last bits
        assert np.array_equal(dense.tree_.feature, sparse.tree_.feature)
        assert np.allclose(dense.tree_.threshold, sparse.tree_.threshold, equal_nan=True)
    else:
        with pytest.raises(TypeError, match="Sparse data was passed"):
            fit(name, Xsp)


@pytest.mark.parametrize("name", REFERENCE)
def test_continuous_y_is_rejected(name):
    with pytest.raises(ValueError, match="Unknown label type"):
        ESTIMATORS[name][0]().fit(X0, X0[:, 0])


@pytest.mark.parametrize("name", REFERENCE)
def test_y_length_mismatch(name):
    with pytest.raises(ValueError, match="inconsistent numbers of samples"):
        ESTIMATORS[name][0]().fit(X0, Y0[:-1])


# ------------------------------------------------------------------ constant data, duplicates
@pytest.mark.parametrize("name", NAMES)
def test_all_constant_X_is_an_error(name):
    with pytest.raises(InvalidInputError, match="constant|identical"):
        fit(name, np.ones_like(X0))


def test_near_duplicate_means_relative_to_sigma():
    with pytest.raises(InvalidInputError, match="duplicates"):
        MMDT().fit_mixture([[0.0, 0.0], [1e-17, 0.0], [5.0, 5.0]], [1.0, 1.0])
    with pytest.raises(InvalidInputError, match="duplicates"):
        ConceptMMDT().fit_mixture([[0.0, 0.0], [1e-17, 0.0]], np.eye(2))


# ------------------------------------------------------------------ unfitted, parameters, model selection
@pytest.mark.parametrize("name", NAMES)
def test_predict_before_fit(name):
    with pytest.raises(NotFittedError):
        ESTIMATORS[name][0]().predict(X0)


@pytest.mark.parametrize("name,params", [
    ("MMDT", dict(noise_label=1.5)), ("CART", dict(max_depth=0)), ("CART", dict(min_samples_leaf=-1)),
    ("CART", dict(n_leaves="many")), ("SpExClique", dict(n_leaves=0)), ("SpExKNN", dict(n_neighbors=0)),
    ("SpExKNN", dict(knn_method="annoy")), ("IMM", dict(random_state="seed")), ("ExKMC", dict(n_jobs=1.5)),
    ("TAO", dict(depth=0)), ("TAO", dict(sparsity=-1.0)), ("ConceptMMDT", dict(cavs="C")),
])
def test_invalid_parameters_fail_at_fit_naming_the_parameter(name, params):
    est = ESTIMATORS[name][0]().set_params(**params)
    (param,) = params
    with pytest.raises(ValueError, match=f"'{param}' parameter of {type(est).__name__}"):
        fit(name, X0, est=est)


@pytest.mark.parametrize("name", ["CART", "SpExClique", "ExKMC"])
def test_grid_search_without_scoring(name):
    est = ESTIMATORS[name][0]()
    search = GridSearchCV(est, {"n_leaves": [3, 4]}, cv=3).fit(X0, Y0)
    assert search.best_score_ > 0.9


# ------------------------------------------------------------------ clusterers with reference labels
@pytest.mark.parametrize("name", ["SpExKNN", "SpExGraph"])
def test_reference_free_spex_names_leaves_with_string_labels_and_drops_noise(name):
    y = np.array(["cat", "dog", "eel"])[Y0].astype(object)
    y[::10] = "noise"
    est = ESTIMATORS[name][0]().set_params(noise_label="noise")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = est.fit(X0, GRAPH, y=y) if name == "SpExGraph" else est.fit(X0, y)
    assert est.classes_.tolist() == ["cat", "dog", "eel"]
    assert est.labels_.shape == (90,) and set(est.labels_) <= {"cat", "dog", "eel"}
    keep = y != "noise"
    assert np.mean(est.labels_[keep] == y[keep]) > 0.9


def test_tao_is_a_clusterer_starting_from_init_labels_without_noise_rows():
    init = Y0.copy()
    init[::10] = -1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = TAO(n_clusters=3, depth=2, max_rounds=0, random_state=0, noise_label=-1).fit(X0, y=np.zeros(90),
                                                                                           init_labels=init)
    assert est.labels_.shape == (90,) and est.assignments_.shape == (90,)
    assert np.array_equal(est.free_labels_, init)  # noise rows stay -1, the others are the start
    again = TAO(n_clusters=3, depth=2, max_rounds=0, random_state=0, noise_label=-1).fit(X0, init_labels=init)
    assert again.tree_ == est.tree_  # y is ignored, as for every scikit-learn clusterer
