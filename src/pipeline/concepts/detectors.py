"""Pixel-based detectors for the geometric digit concepts (loop, lines, curvature).

They let the ``mnist_geometric`` concepts come from the images themselves instead of
from class labels. Every image (8×8 sklearn digits or 28×28 MNIST, any grey range) is
first resampled to ``size × size`` (default 28) by bilinear interpolation and binarised
at half its maximum, so the same thresholds serve both resolutions.

- ``loop``: number of holes — background regions (4-connected, scipy.ndimage.label)
  that do not touch the border and cover at least ``min_hole`` of the image area.
- ``vertical_line`` / ``horizontal_line``: fraction of the ink that survives a
  morphological opening with a straight line of ``line_frac × size`` pixels, i.e. ink
  belonging to long straight vertical / horizontal strokes.
- ``curvature``: fraction of the ink that survives none of the openings with lines at
  0°, 45°, 90° and 135° (``diag_frac × size`` long) — ink on curved strokes.

:func:`detect_concepts` returns continuous scores; :func:`binarize_scores` turns them into
present/absent labels with the thresholds in :data:`DEFAULT_THRESHOLDS`.
"""

from __future__ import annotations

import numpy as np
from scipy import ndimage

from pipeline.validation import InvalidInputError

DETECTORS = ("loop", "vertical_line", "horizontal_line", "curvature")
DEFAULT_THRESHOLDS = {"loop": 0.5, "vertical_line": 0.4, "horizontal_line": 0.15, "curvature": 0.3}


def _as_grey(images) -> np.ndarray:
    """(n, h, w) float images from (n, h, w), (n, h, w, 1) or flat (n, h*w) square inputs."""
    arr = np.asarray(images, dtype=np.float64)
    if arr.ndim == 4 and arr.shape[-1] in (1, 3):
        arr = arr.mean(axis=-1)
    if arr.ndim == 2:
        side = int(round(np.sqrt(arr.shape[1])))
        if side * side != arr.shape[1]:
            raise InvalidInputError(f"flat images of width {arr.shape[1]} are not square; pass (n, h, w) images.")
        arr = arr.reshape(len(arr), side, side)
    if arr.ndim != 3:
        raise InvalidInputError(f"images must be (n, h, w), (n, h, w, 1|3) or (n, h*w); got shape {arr.shape}.")
    return arr


def _binarise(img: np.ndarray, size: int) -> np.ndarray:
    if img.shape != (size, size):
        img = ndimage.zoom(img, (size / img.shape[0], size / img.shape[1]), order=1)
    peak = img.max()
    return img > 0.5 * peak if peak > 0 else np.zeros(img.shape, dtype=bool)


def _line(length: int, angle: int) -> np.ndarray:
    if angle == 0:
        return np.ones((1, length), dtype=bool)
    if angle == 90:
        return np.ones((length, 1), dtype=bool)
    diag = np.eye(length, dtype=bool)
    return diag if angle == 135 else diag[::-1]


def count_holes(ink: np.ndarray, min_area: int) -> int:
    """Background components of a binary image that do not touch the border."""
    labels, n = ndimage.label(~ink)  # 4-connected background
    if n == 0:
        return 0
    border = np.unique(np.concatenate([labels[0], labels[-1], labels[:, 0], labels[:, -1]]))
    areas = np.bincount(labels.ravel(), minlength=n + 1)
    inner = np.setdiff1d(np.arange(1, n + 1), border)
    return int((areas[inner] >= min_area).sum())


def detect_concepts(images, *, size: int = 28, line_frac: float = 0.6, diag_frac: float = 0.5,
                    min_hole: float = 0.005) -> tuple[np.ndarray, list[str]]:
    """Continuous geometric concept scores of digit images.

    Parameters
    ----------
    images : array-like of shape (n, h, w), (n, h, w, 1) or (n, h*w)
        Grey images, ink bright (as in MNIST and sklearn digits).
    size : int, default=28
        Working resolution.

    Returns
    -------
    scores : ndarray of shape (n, 4)
        Columns in :data:`DETECTORS` order: holes (count), vertical and horizontal
        straight-ink fractions, curved-ink fraction (all fractions in [0, 1]).
    names : list of str
    """
    grey = _as_grey(images)
    long_el = max(3, int(round(line_frac * size)))
    diag_el = max(3, int(round(diag_frac * size)))
    min_area = max(1, int(round(min_hole * size * size)))
    out = np.zeros((grey.shape[0], len(DETECTORS)))
    for i, img in enumerate(grey):
        ink = _binarise(img, size)
        total = ink.sum()
        if total == 0:
            continue
        vert = ndimage.binary_opening(ink, _line(long_el, 90))
        horiz = ndimage.binary_opening(ink, _line(long_el, 0))
        straight = np.zeros_like(ink)
        for angle in (0, 45, 90, 135):
            straight |= ndimage.binary_opening(ink, _line(diag_el, angle))
        out[i] = (count_holes(ink, min_area), vert.sum() / total, horiz.sum() / total,
                  1.0 - straight.sum() / total)
    return out, list(DETECTORS)


def binarize_scores(scores: np.ndarray, names, thresholds: dict | None = None) -> np.ndarray:
    """Present (1) / absent (0) labels: ``score > threshold`` per concept, shape like ``scores``."""
    thresholds = {**DEFAULT_THRESHOLDS, **(thresholds or {})}
    missing = [n for n in names if n not in thresholds]
    if missing:
        raise InvalidInputError(f"no threshold for detector(s) {missing}; pass thresholds={{name: value}}.")
    t = np.array([thresholds[n] for n in names], dtype=float)
    return (np.asarray(scores) > t).astype(np.int8)
