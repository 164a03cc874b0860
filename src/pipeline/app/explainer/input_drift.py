"""Whether new inputs look like a run's training data (docs/explain.md, "Inputs unlike the training data").

A saved explainer keeps, per input feature (a table's column, an image's pixel, a latent), the
0.1% and 99.9% quantiles of the training values, and the 0.1%, 50% and 99.9% quantiles of a
row's scale (the root mean square of its values): :func:`training_stats`. A new row is **far**
from the training data when a value lies beyond its feature's quantiles by more than a quarter of
their span, or when its scale is below half the training rows' 0.1% quantile or above twice their
99.9% quantile. The check is per row, so explaining a subset of the training data (one class,
one cluster) raises nothing, while rows in other units do: rows already z-scored given to a
run on raw values lie beyond the quantiles, and images scaled by 1/16 have a sixteenth of
the training rows' scale. :func:`check_drift` logs one warning when at least 5% of the rows
(and at least one) are far, with their share and the worst features.
"""

from __future__ import annotations

import logging

import numpy as np

log = logging.getLogger(__name__)

SAMPLE_ROWS = 20_000  # training rows the quantiles are taken from (a uniform sample beyond)
MAX_FEATURES = 4096  # per-feature bounds up to this many values per row (the scale is checked beyond)
BLOCK_VALUES = 4_000_000  # values per block of rows read at once (32 MB as float64)
QUANTILES = (0.001, 0.999)
MARGIN = 0.25  # of the quantiles' span
SCALE_FACTOR = 2.0
WARN_SHARE = 0.05


def _rows(X, rows=None) -> np.ndarray:
    """Rows of an array or a view, flattened to (n, p) float64."""
    from pipeline.app.data.chunked import as_array

    if rows is not None:
        X = as_array(X)[rows]
    X = np.asarray(X)
    return X.reshape(len(X), -1).astype(np.float64, copy=False)


def _rms(block: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore"):
        return np.sqrt(np.nanmean(np.square(block), axis=1)) if block.shape[1] else np.zeros(len(block))


def training_stats(X, prefix: str) -> dict:
    """``{<prefix>_bounds: (2, p), <prefix>_rms: (3,)}`` of the training rows ``X`` (n, ...): an
    array or a view read from disk; a uniform sample of :data:`SAMPLE_ROWS` rows when larger (of
    fewer rows for the bounds of wide rows, so that a sample holds at most 5 :data:`BLOCK_VALUES`).
    Empty for non-numeric data (texts)."""
    if X is None or not hasattr(X, "shape") or len(X) == 0 or np.dtype(X.dtype).kind not in "biuf":
        return {}
    n, p = len(X), int(np.prod(X.shape[1:], dtype=np.int64))
    rng = np.random.default_rng(0)
    rows = np.sort(rng.choice(n, SAMPLE_ROWS, replace=False)) if n > SAMPLE_ROWS else np.arange(n)
    step = _block_rows(p)
    keep = min(len(rows), max(1000, 5 * BLOCK_VALUES // max(p, 1)))
    # the bounds' sample is every sampled row (at most 5 BLOCK_VALUES): read once for both
    whole = _rows(X, rows) if p <= MAX_FEATURES and keep == len(rows) else None
    scale = np.concatenate([_rms(whole[i:i + step] if whole is not None else _rows(X, rows[i:i + step]))
                            for i in range(0, len(rows), step)])
    scale = scale[np.isfinite(scale)]
    if not len(scale):
        return {}
    out = {f"{prefix}_rms": np.quantile(scale, [QUANTILES[0], 0.5, QUANTILES[1]])}
    if p <= MAX_FEATURES:
        sample = whole if whole is not None else _rows(X, np.sort(rng.choice(rows, keep, replace=False)))
        sample = sample[np.isfinite(sample).all(axis=1)]
        if len(sample):
            out[f"{prefix}_bounds"] = np.quantile(sample, QUANTILES, axis=0)
    return out


def _block_rows(p: int) -> int:
    return max(1, BLOCK_VALUES // max(p, 1))


def far_rows(X: np.ndarray, bounds: np.ndarray | None, rms: np.ndarray):
    """(far: (n,) bool, per-feature counts of far values: (p,), each row's scale: (n,), per-feature
    (min, max) of ``X``: (2, p)) of the rows ``X``, read in blocks."""
    n = len(X)
    far = np.zeros(n, dtype=bool)
    scale = np.empty(n)
    p = 0 if bounds is None else bounds.shape[1]
    counts = np.zeros(p, dtype=np.int64)
    extremes = np.array([np.full(p, np.inf), np.full(p, -np.inf)])
    if bounds is not None:
        span = bounds[1] - bounds[0]
        lo, hi = bounds[0] - MARGIN * span, bounds[1] + MARGIN * span
        judged = span > 0  # a feature constant in training cannot say how far a value is
    step = _block_rows(int(np.prod(np.shape(X)[1:], dtype=np.int64)))
    for start in range(0, n, step):
        block = _rows(X[start:start + step])
        scale[start:start + len(block)] = _rms(block)
        if bounds is not None and block.shape[1] == len(judged):
            out = ((block < lo) | (block > hi)) & judged
            counts += out.sum(axis=0)
            far[start:start + len(block)] |= out.any(axis=1)
            with np.errstate(invalid="ignore"):
                extremes[0] = np.fmin(extremes[0], np.nanmin(block, axis=0, initial=np.inf))
                extremes[1] = np.fmax(extremes[1], np.nanmax(block, axis=0, initial=-np.inf))
    low, high = rms[0] / SCALE_FACTOR, rms[2] * SCALE_FACTOR
    far |= (scale < low) | (scale > high)
    return far, counts, scale, extremes


def check_drift(X, bounds: np.ndarray | None, rms: np.ndarray | None, names=None, what: str = "inputs") -> float:
    """Warn (one log line) when at least :data:`WARN_SHARE` of the rows ``X`` are far from the
    training data; returns the share of far rows (0 without training statistics)."""
    if rms is None or X is None or len(X) == 0 or np.asarray(X).dtype.kind not in "biuf":
        return 0.0
    far, counts, scale, extremes = far_rows(X, bounds, rms)
    n, k = len(far), int(far.sum())
    if k == 0 or k < WARN_SHARE * n:
        return k / n if n else 0.0
    parts = []
    if bounds is not None:
        for j in np.argsort(-counts, kind="stable")[:3]:
            if counts[j] == 0:
                break
            name = names[j] if names is not None and j < len(names) else f"value {j}"
            parts.append(f"{name}: {counts[j]} rows beyond the training's {bounds[0, j]:.3g}..{bounds[1, j]:.3g} "
                         f"(these {extremes[0, j]:.3g}..{extremes[1, j]:.3g})")
    width = int(np.prod(np.asarray(X).shape[1:]))
    off = (scale < rms[0] / SCALE_FACTOR) | (scale > rms[2] * SCALE_FACTOR)
    if off.any():
        ratio = float(np.nanmedian(scale)) / rms[1] if rms[1] > 0 else np.inf
        size = (f"about {1 / ratio:.3g}x smaller" if ratio < 1 else f"about {ratio:.3g}x larger") \
            if np.isfinite(ratio) and ratio > 0 else "of another size"
        parts.append(f"row scale (root mean square of a row's {width} values): {int(off.sum())} rows beyond the "
                     f"training's {rms[0]:.3g}..{rms[2]:.3g} (typical {rms[1]:.3g}; these are {size})")
    log.warning("the %s do not look like the run's training data: %d of %d rows (%.0f%%) lie far outside its "
                "distribution. Worst: %s. Rows in other units than the run's (standardised rows given to a run on "
                "raw values, images on another scale) get wrong explanations: give them as the run's data were given",
                what, k, n, 100.0 * k / n, "; ".join(parts))
    return k / n


__all__ = ["check_drift", "far_rows", "training_stats"]
