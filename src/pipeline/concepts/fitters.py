"""Pluggable CAV fitters: each turns (latents, concept labels) into one direction.

A fitter is the "classifier" role of the TCAV procedure (Kim et al. 2018): given latents
``Z`` of shape (n, d) and labels ``y`` (binary 0/1, or real values for continuous
concepts) it returns an un-normalised weight vector ``w`` of shape (d,) whose sign
convention is fixed for every fitter:

    ``w · z`` grows with the concept:  positives (y = 1) / larger y score higher.

:class:`pipeline.concepts.cav.CAVFitter` normalises ``w`` to unit length; the fitters
themselves only need to respect that sign. Nothing is registered: a fitter is named by the
class itself or its dotted import path (``pipeline.concepts.fitters.LogisticFitter``, or
``my_package.MyFitter`` for a new subclass of :class:`Fitter`); its ``name`` labels it in tables.
"""

from __future__ import annotations

from numbers import Integral, Real

import numpy as np
from sklearn.linear_model import LinearRegression, LogisticRegression, SGDClassifier
from sklearn.svm import LinearSVC
from sklearn.utils._param_validation import Interval, StrOptions, validate_parameter_constraints

from pipeline.validation import InvalidInputError


class Fitter:
    """One linear concept direction from latents and labels.

    Attributes
    ----------
    continuous : bool
        True if the fitter expects real-valued concept labels (regression); its
        cross-validated score is R² instead of accuracy.
    """

    continuous = False
    #: the label of this fitter in CAV tables and reports
    name = "fitter"
    #: Fit on standardised latents and map the direction back (w / scale); for iterative
    #: solvers whose convergence depends on feature scales. Sign and rule are unchanged.
    #: True, False, a shrinkage λ in [0, 1] or "auto" (CAVFitter's ``standardize``).
    standardize = False
    #: scikit-learn style constraints on the constructor's parameters (see validate_params).
    _parameter_constraints: dict = {}

    def validate_params(self) -> None:
        """Check the parameters against ``_parameter_constraints`` the scikit-learn way.

        Raises ``InvalidParameterError`` (a ValueError) naming the parameter, the allowed
        values and the value given; :class:`~pipeline.concepts.cav.CAVFitter` calls it at
        the start of ``fit``.
        """
        params = {name: getattr(self, name) for name in self._parameter_constraints}
        validate_parameter_constraints(self._parameter_constraints, params, caller_name=type(self).__name__)

    def direction(self, Z: np.ndarray, y: np.ndarray, random_state: int) -> np.ndarray:
        """Weight vector of shape (d,) with ``w · z`` increasing with the concept.

        ``Z`` has shape (n, d); ``y`` shape (n,), 0/1 for binary fitters.
        """
        raise NotImplementedError

    def score(self, w: np.ndarray, Z_train, y_train, Z_test, y_test) -> float:
        """Held-out score of the one-cut rule along ``w`` (accuracy, or R² if continuous).

        The bias is chosen on the training projection (best threshold, or 1-D least
        squares) and evaluated on the test rows, so every fitter is scored the same way:
        how well a single cut along ``w`` separates held-out concept labels.
        """
        s_train, s_test = Z_train @ w, Z_test @ w
        if self.continuous:
            return _r2_along(s_train, y_train, s_test, y_test)
        t = _best_threshold(s_train, y_train)
        return float(np.mean((s_test > t) == (y_test == 1)))


class _SklearnLinearFitter(Fitter):
    """A scikit-learn linear classifier; ``coef_`` points towards class 1 (classes_ = [0, 1])."""

    standardize = "auto"  # z-scores with >= 10 rows per feature, else one common scale (batched_logistic.standardize_shrinkage)

    def _model(self, random_state):
        raise NotImplementedError

    def direction(self, Z, y, random_state):
        return self._model(random_state).fit(Z, y).coef_[0]


class LogisticFitter(_SklearnLinearFitter):
    """L2-regularised logistic regression (the TCAV default)."""

    name = "logistic"

    _parameter_constraints = {"C": [Interval(Real, 0, None, closed="neither")],
                              "max_iter": [Interval(Integral, 1, None, closed="left")]}

    def __init__(self, C: float = 1.0, max_iter: int = 500):
        self.C, self.max_iter = C, max_iter

    def _model(self, random_state):
        return LogisticRegression(C=self.C, max_iter=self.max_iter, random_state=random_state)


class LinearSVMFitter(_SklearnLinearFitter):
    """Linear support-vector machine (hinge loss)."""

    name = "svm"

    _parameter_constraints = LogisticFitter._parameter_constraints

    def __init__(self, C: float = 1.0, max_iter: int = 5000):
        self.C, self.max_iter = C, max_iter

    def _model(self, random_state):
        return LinearSVC(C=self.C, max_iter=self.max_iter, random_state=random_state)


class SGDFitter(_SklearnLinearFitter):
    """Linear classifier trained by SGD (what the TCAV reference code uses)."""

    name = "sgd"

    _parameter_constraints = {
        "alpha": [Interval(Real, 0, None, closed="left")],
        "loss": [StrOptions({"hinge", "log_loss", "modified_huber", "squared_hinge", "perceptron", "squared_error",
                             "huber", "epsilon_insensitive", "squared_epsilon_insensitive"})],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
    }

    def __init__(self, alpha: float = 1e-3, loss: str = "hinge", max_iter: int = 1000):
        self.alpha, self.loss, self.max_iter = alpha, loss, max_iter

    def _model(self, random_state):
        return SGDClassifier(alpha=self.alpha, loss=self.loss, max_iter=self.max_iter, tol=1e-4,
                             random_state=random_state)


class MeanDifferenceFitter(Fitter):
    """Difference of class means, ``mean(z | y=1) - mean(z | y=0)`` (no training)."""

    name = "mean_difference"

    def direction(self, Z, y, random_state):
        return Z[y == 1].mean(axis=0) - Z[y == 0].mean(axis=0)


class LinearRegressionFitter(Fitter):
    """Least-squares regression of a continuous concept on the latents."""

    name = "linear_regression"

    continuous = True

    def direction(self, Z, y, random_state):
        return LinearRegression().fit(Z, y).coef_


def fitter_class(fitter) -> type:
    """The :class:`Fitter` subclass ``fitter`` names: the class itself, or its dotted import path."""
    if isinstance(fitter, type) and issubclass(fitter, Fitter):
        return fitter
    if isinstance(fitter, str) and "." in fitter:
        import importlib

        module, _, attr = fitter.rpartition(".")
        try:
            found = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as exc:
            raise InvalidInputError(f"CAV fitter {fitter!r} cannot be imported ({exc}); give a dotted path to a "
                                    "Fitter subclass, e.g. pipeline.concepts.fitters.LogisticFitter.") from None
        if isinstance(found, type) and issubclass(found, Fitter):
            return found
    raise InvalidInputError(f"CAV fitter {fitter!r} is not a pipeline.concepts.fitters.Fitter subclass, an instance of "
                            "one or its dotted import path (e.g. pipeline.concepts.fitters.LogisticFitter, "
                            "SVM: LinearSVMFitter, SGDFitter, MeanDifferenceFitter, LinearRegressionFitter).")


def build_fitter(fitter, **params) -> Fitter:
    """A :class:`Fitter` from an instance, a class or a dotted path (``params`` go to its constructor)."""
    if isinstance(fitter, Fitter):
        return fitter
    return fitter_class(fitter)(**params)


def fitter_label(fitter) -> str:
    """The ``name`` of a fitter given as an instance, a class or a dotted path."""
    return fitter.name if isinstance(fitter, Fitter) else fitter_class(fitter).name


def _best_threshold(s: np.ndarray, y: np.ndarray) -> float:
    """Threshold ``t`` maximising the accuracy of ``s > t`` (positives above) on (s, y)."""
    order = np.argsort(s, kind="stable")
    ss, ys = s[order], y[order].astype(np.int64)
    n, n_pos = ys.size, int(ys.sum())
    # Cut after position i (i = 0..n): rows below are predicted 0, rows above 1.
    neg_below = np.concatenate([[0], np.cumsum(1 - ys)])
    pos_below = np.concatenate([[0], np.cumsum(ys)])
    correct = (neg_below + (n_pos - pos_below)).astype(float)
    valid = np.ones(n + 1, dtype=bool)
    valid[1:n] = ss[1:] > ss[:-1]  # only cuts between distinct values are realisable
    correct[~valid] = -1
    i = int(np.argmax(correct))
    if i == 0:
        return float(ss[0] - 1.0)
    if i == n:
        return float(ss[-1])
    return float((ss[i - 1] + ss[i]) / 2)


def _r2_along(s_train, y_train, s_test, y_test) -> float:
    """Held-out R² of ``y ≈ a·s + b`` fitted on the training projection."""
    if np.ptp(s_train) == 0 or np.ptp(y_test) == 0:
        return float("nan")
    a, b = np.polyfit(s_train, y_train, 1)
    resid = y_test - (a * s_test + b)
    return float(1.0 - resid @ resid / np.sum((y_test - y_test.mean()) ** 2))
