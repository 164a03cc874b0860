"""Input checks shared by every estimator: clear errors instead of deep numpy tracebacks."""

from __future__ import annotations

import numpy as np


class InvalidInputError(ValueError):
    """Raised when user input is malformed; the message says what was wrong and how to fix it."""


def check_matrix(X, name: str = "X", *, min_rows: int = 1, min_cols: int = 1, dtype=np.float64) -> np.ndarray:
    """Return ``X`` as a finite 2-D array of ``dtype``, shape (n_rows, n_cols).

    Raises InvalidInputError for non-numeric data, wrong dimensionality, too few rows or
    columns, and NaN/inf entries (with the count and first offending position).
    """
    try:
        arr = np.asarray(X, dtype=dtype)
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(f"{name} must be a numeric array; could not convert it: {exc}") from None
    if arr.ndim == 1:
        raise InvalidInputError(
            f"{name} must be 2-D of shape (n_samples, n_features), got a 1-D array of length {arr.shape[0]}; "
            f"reshape it with {name}.reshape(-1, 1) for one feature or {name}.reshape(1, -1) for one sample."
        )
    if arr.ndim != 2:
        raise InvalidInputError(f"{name} must be 2-D of shape (n_samples, n_features), got shape {arr.shape}.")
    if arr.shape[0] < min_rows:
        raise InvalidInputError(f"{name} needs at least {min_rows} row(s), got {arr.shape[0]}.")
    if arr.shape[1] < min_cols:
        raise InvalidInputError(f"{name} needs at least {min_cols} column(s), got {arr.shape[1]}.")
    check_finite(arr, name)
    return arr


def check_vector(v, name: str = "v", *, length: int | None = None, dtype=np.float64) -> np.ndarray:
    """Return ``v`` as a finite 1-D array, optionally of a given length."""
    try:
        arr = np.asarray(v, dtype=dtype)
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(f"{name} must be a numeric vector; could not convert it: {exc}") from None
    if arr.ndim != 1:
        raise InvalidInputError(f"{name} must be 1-D, got shape {arr.shape}.")
    if length is not None and arr.shape[0] != length:
        raise InvalidInputError(f"{name} must have length {length}, got {arr.shape[0]}.")
    check_finite(arr, name)
    return arr


def check_finite(arr: np.ndarray, name: str) -> None:
    """Raise InvalidInputError if ``arr`` holds NaN or inf."""
    if np.issubdtype(arr.dtype, np.floating):
        bad = ~np.isfinite(arr)
        if bad.any():
            first = tuple(int(i) for i in np.argwhere(bad)[0])
            raise InvalidInputError(
                f"{name} contains {int(bad.sum())} NaN or infinite value(s) (first at index {first}); "
                "remove or impute them before fitting."
            )


def check_labels(y, n_samples: int, name: str = "y") -> np.ndarray:
    """Return integer labels of shape (n_samples,); -1 marks noise."""
    arr = np.asarray(y)
    if arr.ndim != 1:
        raise InvalidInputError(f"{name} must be 1-D of shape (n_samples,), got shape {arr.shape}.")
    if arr.shape[0] != n_samples:
        raise InvalidInputError(f"{name} has {arr.shape[0]} labels but X has {n_samples} rows; they must match.")
    if arr.dtype.kind == "f":
        if not np.all(np.isfinite(arr)) or not np.all(arr == np.round(arr)):
            raise InvalidInputError(f"{name} must hold integer cluster labels, got non-integer values.")
    elif arr.dtype.kind not in "iub":
        raise InvalidInputError(f"{name} must hold integer cluster labels, got dtype {arr.dtype}.")
    return arr.astype(np.int64)


def check_n_features(X: np.ndarray, n_features: int, name: str = "X") -> None:
    """Raise if ``X`` does not have the width the estimator was fitted on."""
    if X.shape[1] != n_features:
        raise InvalidInputError(
            f"{name} has {X.shape[1]} features, but the estimator was fitted with {n_features}; "
            "pass data with the same columns as at fit time."
        )
