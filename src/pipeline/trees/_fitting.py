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
from sklearn.utils.validation import assert_all_finite, check_is_fitted, validate_data

from pipeline.threads import limit_threads
from pipeline.trees.tree import ExplanationTree
from pipeline.validation import InvalidInputError, check_label_values, check_matrix

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
    with np.errstate(over="ignore", invalid="ignore"):  # its quick finiteness sum overflows near 1e308
        return validate_data(est, X, reset=reset, dtype=np.float64, ensure_min_samples=min_samples,
                             accept_sparse=sparse)


def plain_Xy(X, y, finite: bool = True) -> bool:
    """Whether ``validate_data(est, X, y, dtype=np.float64, ensure_min_samples=2)`` followed by
    ``check_classification_targets(y)`` would return ``X`` and ``y`` unchanged without a
    warning: ``X`` a finite float64 ndarray (n >= 2, d >= 1), ``y`` integer labels of length n.

    These checks cost ~250 us, more than fitting a tree to iris; for such inputs only the
    fitted-feature bookkeeping remains (:func:`reset_features`). Anything else (lists,
    DataFrames, sparse, other dtypes, NaN/inf, string or float labels) goes through
    scikit-learn, with its conversions and error messages. With ``finite=False`` the values
    are not read (the caller checks them: :func:`assert_finite`).
    """
    return (type(y) is np.ndarray and y.ndim == 1 and y.dtype.kind in "iu" and type(X) is np.ndarray
            and X.ndim == 2 and y.shape[0] == X.shape[0] and _plain_X(X, 2, finite))


def _plain_X(X, min_samples: int, finite: bool = True) -> bool:
    """Whether ``X`` is a float64 ndarray of shape (>= min_samples, >= 1), and finite (checked
    unless ``finite`` is False)."""
    if not (type(X) is np.ndarray and X.dtype == np.float64 and X.ndim == 2 and X.shape[0] >= min_samples
            and X.shape[1] >= 1):
        return False
    if not finite:
        return True
    with np.errstate(over="ignore", invalid="ignore"):
        return bool(np.isfinite(X.sum()))  # an overflowing sum falls back


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


def assert_finite(est, X: np.ndarray) -> None:
    """scikit-learn's error (as ``validate_data`` raises it) if a value of ``X`` is NaN or infinite."""
    with np.errstate(over="ignore", invalid="ignore"):
        assert_all_finite(X, allow_nan=False, estimator_name=type(est).__name__, input_name="X")


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
    if not hasattr(est, "tree_"):  # check_is_fitted's message, without its ~8 us of introspection
        check_is_fitted(est, "tree_")
    X = validate_X(est, X, reset=False)
    n_jobs = getattr(est, "n_jobs", None)
    if n_jobs is None:  # the enclosing limit (or numba's setting) already holds; entering a block costs ~5 ms
        return tree_predict(est.tree_, X)
    with limit_threads(n_jobs, work=X.shape[0] * X.shape[1]):
        return tree_predict(est.tree_, X)


def predict_with_leaves(est, X, check: int = 256) -> tuple[np.ndarray, np.ndarray | None]:
    """``(est.predict(X) as int64, the leaf of each row in est.tree_)`` from one routing of ``X``.

    A tree's prediction depends on the leaf a row reaches alone, so ``est.predict`` is asked for
    one row of every leaf reached and ``check`` rows spread over ``X``; should those disagree with
    the leaves' labels (an estimator whose prediction is not its tree's), every row is predicted.
    The leaves come back in the smallest unsigned type holding the tree's node ids, for callers
    that read the tree on the same rows again (:meth:`ExplanationTree.read`'s ``leaves``); None
    for a sparse ``X`` (predicted as it is).
    """
    if sp.issparse(X):
        return np.asarray(est.predict(X), dtype=np.int64), None
    tree = est.tree_
    X = check_matrix(X, "X", min_rows=0)
    leaves = tree._apply(X)
    n = len(leaves)
    if n == 0:
        return np.asarray(est.predict(X), dtype=np.int64), leaves.astype(np.min_scalar_type(tree.n_nodes))
    rep = np.full(tree.n_nodes, -1, dtype=np.int64)
    rep[leaves] = np.arange(n)  # some row of each leaf reached
    probe = np.unique(np.concatenate([rep[rep >= 0], np.linspace(0, n - 1, min(n, check)).astype(np.int64)]))
    said = np.asarray(est.predict(X[probe]), dtype=np.int64)
    table = np.zeros(tree.n_nodes, dtype=np.int64)
    table[leaves[probe]] = said
    pred = table[leaves]
    if not np.array_equal(pred[probe], said):
        pred = np.asarray(est.predict(X), dtype=np.int64)
    return pred, leaves.astype(np.min_scalar_type(tree.n_nodes))


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


def classes_and_codes(y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(y, return_inverse=True)`` for a 1-D ``y``; integer labels spanning a short
    range take a counting path (a few us instead of a sort: on iris the sort cost a tenth of
    fitting a tree)."""
    if y.dtype.kind in "iu" and 0 < y.size:
        low = y.min()
        if int(y.max()) - int(low) <= 4 * y.size:
            shifted = (y - low).astype(np.intp)  # in y's own type: no overflow over a short range
            present = np.bincount(shifted) > 0
            classes = np.flatnonzero(present).astype(y.dtype) + low
            return classes, (np.cumsum(present) - 1)[shifted]
    return np.unique(y, return_inverse=True)


def reset_features(est, n_features: int) -> None:
    """For fits from parameters (no X): set ``n_features_in_``, forget a previous fit's column names."""
    est.n_features_in_ = n_features
    if hasattr(est, "feature_names_in_"):
        del est.feature_names_in_


def check_not_constant(X: np.ndarray, what: str = "X") -> tuple[np.ndarray, np.ndarray]:
    """Raise if every row of ``X`` is identical: no cut could separate anything. Returns the
    column minima and maxima it computed (dense arrays)."""
    lo, hi = X.min(axis=0), X.max(axis=0)
    if sp.issparse(lo):
        lo, hi = lo.toarray(), hi.toarray()
    if X.shape[0] > 1 and np.array_equal(lo, hi):
        raise InvalidInputError(
            f"every column of {what} is constant (all {X.shape[0]} rows are identical), so no cut can "
            "separate the clusters; pass data that varies across rows."
        )
    return lo, hi


def _labels_are_codes(classes: np.ndarray) -> bool:
    """Whether tree leaves store class indices (non-integer labels) rather than the labels."""
    if classes.dtype.kind == "b":
        return False
    if classes.dtype.kind in "iu":  # as below; float conversion is monotonic, so the extremes decide
        if classes.size <= 64:  # a few labels: Python's min/max beat two numpy reductions (~6 us)
            values = classes.tolist()
            return bool(values) and not max(abs(float(min(values))), abs(float(max(values)))) < 2.0**62
        return classes.size > 0 and not max(abs(float(classes.min())), abs(float(classes.max()))) < 2.0**62
    if classes.dtype.kind == "f":  # the tree stores int64 labels: integers well inside its range
        return not (np.all(classes == np.round(classes)) and np.all(np.abs(classes.astype(float)) < 2.0**62))
    return True


def power_of_two_scale(X: np.ndarray, *, always: bool = False, per_column: bool = False):
    """A power of two s with ``max |X| / s`` in [0.5, 1) when ``X`` is extreme in magnitude
    (or ``always``), else 1; ``per_column`` gives one such s per column (an array).

    Dividing by a power of two is exact in binary floating point, so a tree grown on ``X / s``
    and rescaled with :func:`rescale_tree` partitions ``X`` exactly as the grown tree does.
    Near float64's largest value (``max |X| >= 2**1023``) s is 2**1023, so ``max |X| / s``
    lies in [1, 2) instead of s overflowing.
    """
    if per_column:
        if X.shape[0] == 0:
            return np.ones(X.shape[1])
        hi, lo = X.max(axis=0), X.min(axis=0)
        if sp.issparse(hi):
            hi, lo = hi.toarray(), lo.toarray()
        top = np.maximum(np.abs(np.asarray(hi, dtype=float)).ravel(), np.abs(np.asarray(lo, dtype=float)).ravel())
        keep = (top == 0.0) | ~np.isfinite(top) | (not always and ((top >= 2.0**-60) & (top <= 2.0**60)))
        exp = np.minimum(np.frexp(top)[1], 1023)
        return np.where(keep, 1.0, np.ldexp(1.0, exp))
    top = max(abs(float(X.max())), abs(float(X.min()))) if X.shape[0] * X.shape[1] else 0.0  # no |X| copy
    if top == 0.0 or not np.isfinite(top) or (not always and 2.0**-60 <= top <= 2.0**60):
        return 1.0
    return float(np.ldexp(1.0, min(int(np.frexp(top)[1]), 1023)))


def rescale_tree(tree: ExplanationTree, scale, center=None) -> ExplanationTree:
    """The tree on ``x = scale * x' + center`` that makes the same decisions as ``tree`` on ``x'``.

    ``scale`` is a number or one number per feature. Axis tests ``x'_f <= t`` become
    ``x_f <= scale_f * t + center_f`` (exact for a power-of-two ``scale`` and no ``center``);
    oblique tests ``w . x' <= t`` become ``(w / scale) . x <= t + (w / scale) . center``, or,
    when ``w / scale`` would overflow or underflow (data near 1e-300 or 1e300), the
    equivalent ``w . x <= scale * t + w . center`` (a global ``scale`` only).
    """
    vector = np.ndim(scale) > 0
    if center is None and (np.all(np.asarray(scale) == 1.0)):
        return tree
    scales = np.broadcast_to(np.asarray(scale, dtype=float), (tree.n_features,))
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
            with np.errstate(over="ignore", under="ignore"):
                w_new = {j: v / scales[j] for j, v in w.items()}
                t_new = threshold[old] + sum(v * center[j] for j, v in w_new.items())
                if not vector and not all(np.isfinite(v) and (v != 0.0 or w[j] == 0.0) for j, v in w_new.items()):
                    w_new = dict(w)
                    t_new = threshold[old] * scales[0] + sum(v * center[j] for j, v in w.items())
            a, b = out.split_oblique(new, w_new, t_new)
        else:
            a, b = out.split(new, f, threshold[old] * scales[f] + center[f])
        stack.append((int(left[old]), a))
        stack.append((int(right[old]), b))
    return out


#: A value farther than this many interquartile ranges from its column's median is a magnitude
#: outlier for the methods whose geometry it would swamp (see :func:`check_magnitude_outliers`).
OUTLIER_RATIO = 1e10
_OUTLIER_SAMPLE = 8192  # rows whose quartiles stand for the column's (a strided sample: deterministic)
_SMALL_SAMPLE = 1024  # up to this many rows the spread's lower bound sorts the sample


def check_magnitude_outliers(X: np.ndarray, method: str, why: str, ratio: float = OUTLIER_RATIO,
                             extremes=None) -> None:
    """Raise when a value of ``X`` lies more than ``ratio`` interquartile ranges from its column's
    median: for ``method`` (k-means centres, a kNN graph) such a point decides everything and
    the tree would explain nothing else, so it is reported instead of absorbed.

    The quartiles come from a strided sample of at most 8192 rows (one pass over ``X`` for the
    extremes, or ``extremes = (column minima, column maxima)`` if known); columns with a zero
    interquartile range fall back to the 1-99 percentile range and are skipped when that is
    zero too (binary or mostly-constant columns). When counts against two values from a
    subsample already bound every column's spread (:func:`_spread_floor`), no quartile is
    computed: the answer is the same, at a tenth of the cost.
    """
    if X.shape[0] < 4 or sp.issparse(X):
        return
    step = max(1, X.shape[0] // _OUTLIER_SAMPLE)
    sample = X[::step]
    lo, hi = (X.min(axis=0), X.max(axis=0)) if extremes is None else extremes
    with np.errstate(over="ignore", invalid="ignore"):
        if np.all(hi - lo <= ratio * _spread_floor(sample)):  # far <= max - min: no column can fail
            return
    q1, med, q3 = np.percentile(sample, [25, 50, 75], axis=0)
    with np.errstate(over="ignore", invalid="ignore"):
        spread = q3 - q1
        if np.any(spread == 0):
            lo1, hi99 = np.percentile(sample, [1, 99], axis=0)
            spread = np.where(spread == 0, hi99 - lo1, spread)
        far = np.maximum(hi - med, med - lo)
        bad = np.flatnonzero((spread > 0) & ~(far <= ratio * spread))  # an overflowing ratio * spread is inf
    if bad.size == 0:
        return
    f = int(bad[np.argmax(far[bad] / np.maximum(spread[bad], np.finfo(float).tiny))])
    row = int(np.argmax(np.abs(X[:, f] - med[f])))
    with np.errstate(over="ignore"):
        times = far[f] / spread[f]
    raise InvalidInputError(
        f"{method}: X[{row}, {f}] = {X[row, f]:.6g} lies {times:.3g} interquartile ranges from feature {f}'s median "
        f"({med[f]:.6g}, interquartile range {spread[f]:.3g}); {method} handles values up to {ratio:.0e} "
        f"interquartile ranges from the median ({why}). Remove or clip such rows (e.g. to a percentile) before "
        "fitting, or use a method that only cuts coordinates (IMM, CART, SpExClique, MMDT)."
    )


def _spread_floor(sample: np.ndarray) -> np.ndarray:
    """A lower bound per column of ``q3 - q1`` (``np.percentile``'s quartiles of ``sample``),
    0 where none is found. With ``h = q (n - 1)`` the interpolation positions and v the
    sorted column, q1 <= v[ceil(h1)] and q3 >= v[floor(h3)]: on a small sample those two
    values themselves; on a large one values a <= b (the 40th and 60th percentiles of every
    16th row) with at least ``ceil(h1) + 1`` values <= a and at most ``floor(h3)`` values < b."""
    n = sample.shape[0]
    i1, i3 = int(np.ceil(0.25 * (n - 1))), int(np.floor(0.75 * (n - 1)))
    if n <= _SMALL_SAMPLE:
        v = np.sort(sample, axis=0)
        return np.maximum(v[i3] - v[i1], 0.0)
    a, b = np.percentile(np.ascontiguousarray(sample[::16].T), [40, 60], axis=1)
    ok = (sample <= a).sum(axis=0) >= i1 + 1
    ok &= (sample < b).sum(axis=0) <= i3
    return np.where(ok & (b >= a), b - a, 0.0)


def far_from_origin(X, centers=None, extremes=None):
    """(X - c, centers - c, c) for the columns' mid-range c when the data sit so far from the
    origin (|c| > 2**26 ranges) that k-means costs computed as ||x||^2 - 2 x.c + ||c||^2 would
    cancel away (MMDT's variances, ExKMC's k-means costs); else (X, centers, None). Both are
    invariant to the shift; :func:`rescale_tree` with ``center=c`` maps the tree back.
    ``extremes``: the columns' (minima, maxima) if known."""
    if sp.issparse(X):
        return X, centers, None
    lo, hi = (X.min(axis=0), X.max(axis=0)) if extremes is None else extremes
    mid = lo / 2 + hi / 2
    with np.errstate(over="ignore", invalid="ignore"):  # data near 1e308: an overflowing range is no shift
        far = np.abs(mid) > 2.0**26 * np.maximum(hi - lo, np.finfo(float).tiny)
    if not np.any(far):
        return X, centers, None
    centers = None if centers is None else check_matrix(centers, "centers") - mid
    return X - mid, centers, mid


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

    def _validate_reference(self, X, y, feature_names=None, *, min_clusters: int = 2, finite_later: bool = False):
        """Validate ``X``/``y``; return (X without noise rows, codes 0..k-1, keep mask, names).

        ``finite_later``: the caller checks that the returned X is finite (:func:`assert_finite`,
        or a pass over X it makes anyway); X's values are then not read here, unless rows are
        dropped as noise (every row is checked, as without it)."""
        validate_params(self)
        self.__dict__.pop("_noise_rows", None)
        if not (type(y) is np.ndarray and y.dtype.kind in "iub"):
            check_label_values(y)
        if plain_Xy(X, y, finite=not finite_later):  # what validate_data and check_classification_targets pass unchanged
            reset_features(self, X.shape[1])
        else:
            with np.errstate(over="ignore", invalid="ignore"):  # its finiteness sum overflows near 1e308
                X, y = validate_data(self, X, y, dtype=np.float64, ensure_min_samples=2,
                                     accept_sparse="csr" if self._accepts_sparse else False)
            check_classification_targets(y)
        keep = ~noise_mask(y, self.noise_label)
        classes, codes = classes_and_codes(y if keep.all() else y[keep])
        if classes.size < min_clusters:
            raise InvalidInputError(
                f"{type(self).__name__} needs at least {min_clusters} classes (reference clusters) besides noise "
                f"(noise_label={self.noise_label!r}), got {classes.size}; a tree cannot explain fewer."
            )
        if not keep.all():
            if finite_later:
                assert_finite(self, X)
            self._noise_rows = X[~keep]  # printed rules route these too (_keep_exact)
            X = X[keep]
        self.classes_ = classes
        names = resolve_feature_names(self, feature_names, X.shape[1])
        return X, codes, keep, names

    def _name_leaves(self, tree: ExplanationTree) -> ExplanationTree:
        return name_leaves(tree, self.classes_)

    def _keep_exact(self, X, project=None):
        """Let ``tree_`` keep the training values nearest each cut (``X``: the fitted rows, and the
        noise rows :meth:`_validate_reference` set aside; ``project`` maps those to the tree's
        coordinates), so its printed rules route every row of the training data as it does."""
        noise = self.__dict__.pop("_noise_rows", None)
        if noise is not None and project is not None:
            noise = project(noise)
        self.tree_.record_neighbours(X, noise)
        return self

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
