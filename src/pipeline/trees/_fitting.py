"""Front-end plumbing shared by the tree estimators: sklearn validation, labels, scale, threads.

* :class:`ReferenceTree` — base of every tree that explains a given labelling (MMDT, CART,
  SpExClique, IMM, EMN, ExKMC, ConceptMMDT): a scikit-learn classifier whose ``predict``
  returns the reference labels (any integers or strings), ``score`` is accuracy against them.
* :func:`validate_X` / :func:`predict_tree` — the same checks for the clustering trees.
* :func:`power_of_two_scale` / :func:`rescale_tree` — run an algorithm on ``X / 2**e`` and map
  the thresholds back, bit for bit, so extreme magnitudes neither underflow nor overflow.
"""

from __future__ import annotations

from numbers import Integral

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils._param_validation import Interval
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from pipeline.threads import limit_threads
from pipeline.trees.tree import ExplanationTree
from pipeline.validation import InvalidInputError

#: ``_parameter_constraints`` entries every tree estimator shares.
COMMON_CONSTRAINTS = {
    "random_state": ["random_state"],
    "n_jobs": [Integral, None],
}
NOISE_CONSTRAINT = {"noise_label": [Integral, str, None]}
N_LEAVES_CONSTRAINT = {"n_leaves": [Interval(Integral, 1, None, closed="left"), None]}


def validate_X(est, X, *, reset: bool, min_samples: int = 1):
    """``X`` as a finite float64 array (CSR matrix if ``est`` accepts sparse) via ``validate_data``.

    At fit (``reset=True``) this sets ``n_features_in_`` and, for a DataFrame with string
    column names, ``feature_names_in_``; at predict it checks them (reordered or renamed
    columns raise). Complex input, and sparse input for estimators whose algorithm needs
    dense columns, is rejected with sklearn's messages.
    """
    if _plain_X(X, min_samples):  # nothing to convert: only the fitted-feature bookkeeping (see plain_Xy)
        if reset:
            reset_features(est, X.shape[1])
            return X
        if getattr(est, "n_features_in_", None) == X.shape[1] and not hasattr(est, "feature_names_in_"):
            return X
    sparse = "csr" if getattr(est, "_accepts_sparse", False) else False
    return validate_data(est, X, reset=reset, dtype=np.float64, ensure_min_samples=min_samples,
                         accept_sparse=sparse)


def plain_Xy(X, y) -> bool:
    """Whether ``validate_data(est, X, y, dtype=np.float64, ensure_min_samples=2)`` followed by
    ``check_classification_targets(y)`` would return ``X`` and ``y`` unchanged without a
    warning: ``X`` a finite float64 ndarray (n >= 2, d >= 1), ``y`` integer labels of length n.

    These checks cost ~250 us, more than fitting a tree to iris; for such inputs only the
    fitted-feature bookkeeping remains (:func:`reset_features`). Anything else (lists,
    DataFrames, sparse, other dtypes, NaN/inf, string or float labels) goes through
    scikit-learn, with its conversions and error messages.
    """
    return (type(y) is np.ndarray and y.ndim == 1 and y.dtype.kind in "iu" and type(X) is np.ndarray
            and X.ndim == 2 and y.shape[0] == X.shape[0] and _plain_X(X, 2))


def _plain_X(X, min_samples: int) -> bool:
    """Whether ``X`` is a finite float64 ndarray of shape (>= min_samples, >= 1)."""
    return (type(X) is np.ndarray and X.dtype == np.float64 and X.ndim == 2 and X.shape[0] >= min_samples
            and X.shape[1] >= 1 and bool(np.isfinite(X.sum())))  # an overflowing sum falls back


_VALIDATED_PARAMS: set = set()  # (class, parameter values) that passed scikit-learn's constraint check
_PARAM_NAMES: dict = {}  # class -> its __init__ parameter names (inspect.signature costs ~12 us)
_SIMPLE = (int, float, str, bool, type(None))


def validate_params(est) -> None:
    """``est._validate_params()``, skipped when the same class with the same simple parameter
    values (ints, floats, strings, None; compared with their types) passed it before.

    scikit-learn re-derives the parameter names and constraint objects on every call (~25 us).
    """
    cls = type(est)
    names = _PARAM_NAMES.get(cls)
    if names is None:
        names = _PARAM_NAMES[cls] = tuple(cls._get_param_names())
    values = tuple((name, type(v), v) for name in names for v in (getattr(est, name),))
    if not all(t in _SIMPLE for _, t, _ in values):
        est._validate_params()
        return
    key = (cls, values)
    if key not in _VALIDATED_PARAMS:
        est._validate_params()
        if len(_VALIDATED_PARAMS) < 4096:
            _VALIDATED_PARAMS.add(key)


def tree_predict(tree: ExplanationTree, X) -> np.ndarray:
    """``tree.predict(X)`` for an ``X`` that :func:`validate_X` already checked (finite float64);
    a sparse ``X`` is densified a block of rows at a time."""
    if not sp.issparse(X):
        return tree._predict(X)
    step = max(1, (1 << 22) // max(X.shape[1], 1))
    X = X.tocsr()
    return np.concatenate([tree._predict(X[i:i + step].toarray()) for i in range(0, X.shape[0], step)])


def predict_tree(est, X) -> np.ndarray:
    """``est.tree_``'s leaf labels for ``X`` after the fitted-state and feature checks."""
    check_is_fitted(est, "tree_")
    X = validate_X(est, X, reset=False)
    n_jobs = getattr(est, "n_jobs", None)
    if n_jobs is None:  # the enclosing limit (or numba's setting) already holds; entering a block costs ~5 ms
        return tree_predict(est.tree_, X)
    with limit_threads(n_jobs, work=X.shape[0] * X.shape[1]):
        return tree_predict(est.tree_, X)


def resolve_feature_names(est, feature_names, n_features: int):
    """Names for the rules: the explicit ``feature_names`` argument, else ``feature_names_in_``."""
    if feature_names is None:
        names = getattr(est, "feature_names_in_", None)
        return None if names is None else [str(n) for n in names]
    feature_names = [str(n) for n in feature_names]
    if len(feature_names) != n_features:
        raise InvalidInputError(f"feature_names has {len(feature_names)} names but X has {n_features} columns.")
    return feature_names


def noise_mask(y: np.ndarray, noise_label) -> np.ndarray:
    """Boolean mask of the rows whose label equals ``noise_label`` (none if it is None)."""
    if noise_label is None or y.size == 0:
        return np.zeros(y.shape[0], dtype=bool)
    if y.dtype.kind in "iufb" and isinstance(noise_label, str):
        return np.zeros(y.shape[0], dtype=bool)
    if y.dtype.kind in "US" and not isinstance(noise_label, str):
        return np.zeros(y.shape[0], dtype=bool)
    if y.dtype.kind == "O":
        return np.fromiter((v == noise_label and type(v) is not bool for v in y), dtype=bool, count=y.size)
    return np.asarray(y == noise_label, dtype=bool)


def reset_features(est, n_features: int) -> None:
    """For fits from parameters (no X): set ``n_features_in_``, forget a previous fit's column names."""
    est.n_features_in_ = n_features
    if hasattr(est, "feature_names_in_"):
        del est.feature_names_in_


def check_not_constant(X: np.ndarray, what: str = "X") -> None:
    """Raise if every row of ``X`` is identical: no cut could separate anything."""
    lo, hi = X.min(axis=0), X.max(axis=0)
    if sp.issparse(lo):
        lo, hi = lo.toarray(), hi.toarray()
    if X.shape[0] > 1 and np.array_equal(lo, hi):
        raise InvalidInputError(
            f"every column of {what} is constant (all {X.shape[0]} rows are identical), so no cut can "
            "separate the clusters; pass data that varies across rows."
        )


def _labels_are_codes(classes: np.ndarray) -> bool:
    """Whether tree leaves store class indices (non-integer labels) rather than the labels."""
    if classes.dtype.kind == "b":
        return False
    if classes.dtype.kind in "iu":  # as below; float conversion is monotonic, so the extremes decide
        return classes.size > 0 and not max(abs(float(classes.min())), abs(float(classes.max()))) < 2.0**62
    if classes.dtype.kind == "f":  # the tree stores int64 labels: integers well inside its range
        return not (np.all(classes == np.round(classes)) and np.all(np.abs(classes.astype(float)) < 2.0**62))
    return True


def power_of_two_scale(X: np.ndarray, *, always: bool = False) -> float:
    """A power of two s with ``max |X| / s`` in [0.5, 1) when ``X`` is extreme in magnitude
    (or ``always``), else 1.

    Dividing by a power of two is exact in binary floating point, so a tree grown on ``X / s``
    and rescaled with :func:`rescale_tree` partitions ``X`` exactly as the grown tree does.
    """
    top = max(abs(float(X.max())), abs(float(X.min()))) if X.shape[0] * X.shape[1] else 0.0  # no |X| copy
    if top == 0.0 or not np.isfinite(top) or (not always and 2.0**-60 <= top <= 2.0**60):
        return 1.0
    return float(np.ldexp(1.0, int(np.frexp(top)[1])))


def rescale_tree(tree: ExplanationTree, scale: float, center=None) -> ExplanationTree:
    """The tree on ``x = scale * x' + center`` that makes the same decisions as ``tree`` on ``x'``.

    Axis tests ``x'_f <= t`` become ``x_f <= scale * t + center_f`` (exact for a power-of-two
    ``scale`` and no ``center``); oblique tests ``w . x' <= t`` become
    ``(w / scale) . x <= t + (w . center) / scale``.
    """
    if scale == 1.0 and center is None:
        return tree
    center = np.zeros(tree.n_features) if center is None else np.asarray(center, dtype=float)
    out = ExplanationTree(tree.n_features, tree.feature_names, root_label=int(tree.label[0]))
    out.label_names = tree.label_names
    feature, threshold = tree.feature, tree.threshold
    left, right, label = tree.children_left, tree.children_right, tree.label
    stack = [(0, 0)]
    while stack:
        old, new = stack.pop()
        f = int(feature[old])
        if tree.is_leaf(old):
            out.set_label(new, int(label[old]))
            continue
        if tree.is_oblique(old):
            w = tree.weights(old)
            shift = sum(v * center[j] for j, v in w.items()) / scale
            a, b = out.split_oblique(new, {j: v / scale for j, v in w.items()}, threshold[old] + shift)
        else:
            a, b = out.split(new, f, threshold[old] * scale + center[f])
        stack.append((int(left[old]), a))
        stack.append((int(right[old]), b))
    return out


def leaf_labels(leaf: np.ndarray, classes: np.ndarray | None) -> np.ndarray:
    """Reference labels for what the leaves store (``leaf``): index into ``classes`` or the label itself."""
    if classes is None:
        return leaf
    if _labels_are_codes(classes):
        return classes[leaf]
    return leaf.astype(classes.dtype, copy=False)


def name_leaves(tree: ExplanationTree, classes: np.ndarray) -> ExplanationTree:
    """Give ``tree`` the class names when its leaves store indices into ``classes`` (non-integer labels)."""
    if _labels_are_codes(classes):
        tree.label_names = [str(c) for c in classes]
    return tree


class ReferenceTree(ClassifierMixin, BaseEstimator):
    """Base of the trees that explain a given reference labelling (scikit-learn classifiers).

    Subclasses call :meth:`_validate_reference` at the start of ``fit`` and label the tree's
    leaves with :meth:`_leaf_label`; ``predict`` then returns labels from ``classes_``.
    Rows whose label equals ``noise_label`` are left out of fitting. ``tree_``'s leaves carry
    the labels themselves when they are integers, else their index into ``classes_`` (so
    ``tree_.rules()`` then read "cluster 0" for ``classes_[0]``). Subclasses whose
    algorithm works on sparse X set ``_accepts_sparse = True``.
    """

    _accepts_sparse = False

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = self._accepts_sparse
        return tags

    def _validate_reference(self, X, y, feature_names=None, *, min_clusters: int = 2):
        """Validate ``X``/``y``; return (X without noise rows, codes 0..k-1, keep mask, names)."""
        validate_params(self)
        if plain_Xy(X, y):  # what validate_data and check_classification_targets would pass unchanged
            reset_features(self, X.shape[1])
        else:
            X, y = validate_data(self, X, y, dtype=np.float64, ensure_min_samples=2,
                                 accept_sparse="csr" if self._accepts_sparse else False)
            check_classification_targets(y)
        keep = ~noise_mask(y, self.noise_label)
        classes, codes = np.unique(y[keep], return_inverse=True)
        if classes.size < min_clusters:
            raise InvalidInputError(
                f"{type(self).__name__} needs at least {min_clusters} classes (reference clusters) besides noise "
                f"(noise_label={self.noise_label!r}), got {classes.size}; a tree cannot explain fewer."
            )
        X = X if keep.all() else X[keep]
        self.classes_ = classes
        names = resolve_feature_names(self, feature_names, X.shape[1])
        return X, codes, keep, names

    def _name_leaves(self, tree: ExplanationTree) -> ExplanationTree:
        return name_leaves(tree, self.classes_)

    def _leaf_label(self, code: int) -> int:
        """What a leaf stores for class index ``code``: the label itself, or the index."""
        return int(code) if _labels_are_codes(self.classes_) else int(self.classes_[code])

    def _leaf_labels(self) -> list[int]:
        """:meth:`_leaf_label` of every class index at once."""
        return list(range(self.classes_.size)) if _labels_are_codes(self.classes_) else self.classes_.tolist()

    def predict(self, X) -> np.ndarray:
        """Reference label of the leaf each row of ``X`` falls in, shape (n_samples,)."""
        return leaf_labels(predict_tree(self, X), self.classes_)


def check_n_leaves(n_leaves, default: int | None, n_points: int, *, at_least: int = 1, why: str = "") -> int:
    """Resolve the requested number of leaves and check it is achievable (error names the range)."""
    if n_leaves is None:
        if default is None:
            raise InvalidInputError("n_leaves is required when no reference clustering y is given.")
        n_leaves = default
    if isinstance(n_leaves, bool) or not isinstance(n_leaves, (int, np.integer)):
        raise InvalidInputError(f"n_leaves must be an integer, got {n_leaves!r}.")
    n_leaves = int(n_leaves)
    if not at_least <= n_leaves <= n_points:
        low = f"at least {at_least}{why}"
        if n_leaves < at_least:
            raise InvalidInputError(f"n_leaves={n_leaves} is too small: it must be {low}, at most {n_points}.")
        raise InvalidInputError(
            f"n_leaves={n_leaves} exceeds the {n_points} points being fitted; every leaf needs a distinct point "
            f"(valid range: {at_least} to {n_points})."
        )
    return n_leaves


def unsplittable_error(n_leaves: int, reached: int, X: np.ndarray) -> InvalidInputError:
    n_distinct = np.unique(X, axis=0).shape[0]
    return InvalidInputError(
        f"cannot grow the tree to n_leaves={n_leaves}: stopped at {reached} leaves because every remaining "
        f"leaf holds identical points (the data has {n_distinct} distinct points). Use n_leaves <= {n_distinct}."
    )


def majority_labels(leaf_of_point: np.ndarray, codes: np.ndarray, classes: np.ndarray, n_nodes: int) -> np.ndarray:
    """Majority reference label per tree node (ties -> smallest label); -1 for empty nodes."""
    k = classes.size
    counts = np.bincount(leaf_of_point * k + codes, minlength=n_nodes * k).reshape(n_nodes, k)
    out = classes[np.argmax(counts, axis=1)]
    out[counts.sum(axis=1) == 0] = -1
    return out
