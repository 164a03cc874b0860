"""CART baseline for explainable clustering and an exact sklearn → ExplanationTree converter.

scikit-learn's trees cast features to float32 and test ``float32(x[f]) <= threshold`` with a
float64 threshold. :func:`tree_from_sklearn` rewrites every threshold t into the float64
threshold t' with ``x <= t'  ⇔  float32(x) <= t`` for every float64 x (round-to-nearest-even,
values that overflow float32 excepted — sklearn rejects those), so the converted tree
predicts exactly as the fitted estimator on float64 input.
"""

from __future__ import annotations

import numpy as np
from sklearn.tree import DecisionTreeClassifier
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted

from pipeline.trees.tree import ExplanationTree
from pipeline.validation import InvalidInputError, check_labels, check_matrix, check_n_features

_F32_OVERFLOW = 2.0**128  # the float32 "successor" of the largest finite float32


def float32_exact_threshold(threshold: float) -> float:
    """The float64 t' such that, for all float64 x in float32 range, x <= t' ⇔ float32(x) <= t.

    Let t32 be the largest float32 not above t. float32(x) <= t ⇔ float32(x) <= t32 ⇔ x rounds
    to t32 or below: x is below the midpoint m between t32 and the next float32 up, or equal
    to m when ties round to t32 (t32 has an even last mantissa bit). m is exactly
    representable in float64.
    """
    t = float(threshold)
    t32 = np.float32(t)
    if float(t32) > t:
        t32 = np.nextafter(t32, np.float32(-np.inf))
    with np.errstate(over="ignore"):
        up = np.nextafter(t32, np.float32(np.inf))
    up = _F32_OVERFLOW if np.isinf(up) else float(up)
    mid = (float(t32) + up) / 2.0  # exact: needs one bit more than float32's 24
    ties_down = (int(t32.view(np.uint32)) & 1) == 0
    return mid if ties_down else float(np.nextafter(mid, -np.inf))


def tree_from_sklearn(estimator: DecisionTreeClassifier, feature_names=None) -> ExplanationTree:
    """Convert a fitted single-output DecisionTreeClassifier into an :class:`ExplanationTree`.

    Parameters
    ----------
    estimator : DecisionTreeClassifier
        Fitted, single output, integer class labels.
    feature_names : sequence of str, optional
        Defaults to ``estimator.feature_names_in_`` when it was fitted on a DataFrame.

    Returns
    -------
    ExplanationTree
        Same structure; thresholds adjusted for sklearn's float32 cast (see module doc); each
        leaf labelled ``classes_[argmax(value)]`` — the class sklearn's ``predict`` returns.
    """
    check_is_fitted(estimator, "tree_")
    if estimator.n_outputs_ != 1:
        raise InvalidInputError(f"only single-output trees can be converted, got n_outputs_={estimator.n_outputs_}.")
    classes = np.asarray(estimator.classes_)
    if classes.dtype.kind not in "iub" and not (
        classes.dtype.kind == "f" and np.all(classes == np.round(classes))
    ):
        raise InvalidInputError(f"tree leaves carry integer cluster ids; the estimator's classes are {classes!r}.")
    if feature_names is None:
        feature_names = getattr(estimator, "feature_names_in_", None)
    sk = estimator.tree_
    out = ExplanationTree(int(estimator.n_features_in_), feature_names)
    leaf_class = classes[np.argmax(sk.value[:, 0, :], axis=1)].astype(np.int64)
    stack = [(0, 0)]  # (sklearn node, our node)
    while stack:
        s, o = stack.pop()
        if sk.children_left[s] == -1:
            out.set_label(o, int(leaf_class[s]))
            continue
        left, right = out.split(o, int(sk.feature[s]), float32_exact_threshold(sk.threshold[s]))
        stack.append((sk.children_left[s], left))
        stack.append((sk.children_right[s], right))
    return out


class CART(BaseEstimator):
    """CART baseline: a DecisionTreeClassifier with K leaves fitted on the reference labels.

    Parameters
    ----------
    n_leaves : int, optional
        ``max_leaf_nodes``; defaults to the number of clusters K in ``y`` (noise excluded).
        sklearn grows best-first and stops early only if no split lowers the impurity, so the
        tree has at most (usually exactly) ``n_leaves`` leaves.
    random_state : int, RandomState or None
        Passed to DecisionTreeClassifier (feature permutation for tie-breaking).

    Attributes
    ----------
    estimator_ : DecisionTreeClassifier
    tree_ : ExplanationTree
        Predicts exactly as ``estimator_``.
    classes_ : ndarray of shape (K,)
    """

    def __init__(self, n_leaves=None, random_state=None):
        self.n_leaves = n_leaves
        self.random_state = random_state

    def fit(self, X, y, feature_names=None):
        """Fit on rows whose label is not -1 (noise).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,)
            Integer reference cluster labels; -1 marks noise.
        feature_names : sequence of str, optional

        Returns
        -------
        self
        """
        X = check_matrix(X, "X")
        y = check_labels(y, X.shape[0])
        keep = y != -1
        classes = np.unique(y[keep])
        if classes.size < 2:
            raise InvalidInputError(f"CART needs at least 2 clusters besides noise (-1), got {classes.size}.")
        n_leaves = classes.size if self.n_leaves is None else self.n_leaves
        if not isinstance(n_leaves, (int, np.integer)) or n_leaves < 2:
            raise InvalidInputError(f"n_leaves must be an integer >= 2, got {n_leaves!r}.")
        self.estimator_ = DecisionTreeClassifier(max_leaf_nodes=int(n_leaves), random_state=self.random_state)
        self.estimator_.fit(X[keep], y[keep])
        self.tree_ = tree_from_sklearn(self.estimator_, feature_names)
        self.classes_ = classes
        self.n_features_in_ = X.shape[1]
        return self

    def predict(self, X):
        """Cluster label of each row's leaf, shape (n_samples,), dtype int64."""
        check_is_fitted(self, "tree_")
        X = check_matrix(X, "X", min_rows=0)
        check_n_features(X, self.n_features_in_)
        return self.tree_.predict(X)
