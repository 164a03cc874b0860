"""Shape, tone and texture of objects on a dark background (Fashion-MNIST-like images), measured from the pixels.

Every image is brought to a ``size × size`` frame (default 28) with values 0..1 from its own
minimum to its own maximum (:func:`._pixels.grey_frame`). The silhouette is the pixels at or
above ``threshold`` (2% of the range: dark cloth is still cloth), without specks (8-connected
pieces under ``min_piece`` of it, 5%). Holes are read from intensity alone, so a black print
enclosed by brighter cloth (a striped shirt's black stripes) also counts as a hole. Rows are
placed by their height within the silhouette's bounding box, 0 at its top and 1 at its bottom.

- ``holes``: enclosed background (4-connected, not touching the border) of at least ``min_hole``
  of the frame (8 pixels at 28): a bag's handle, the gaps between a sandal's straps;
- ``leg_gap``: how dark the silhouette's centre column is between two brighter parts, in the rows at
  50-90% of the height (median over rows): 0 solid, 1 background between two legs;
- ``sleeves``: the same dark valley between the torso and the outer parts on both sides (the weaker
  side counts) in the rows at 40-90%: long sleeves hanging apart from the body;
- ``shoulders``: the silhouette's width at 10-30% of the height over its width at 40-60%: short
  sleeves standing out from a T-shirt, a dress's narrow top;
- ``aspect``: height over width of the bounding box;
- ``symmetry``: overlap of the grey image with its left-right mirror about the box's centre
  (sum of minima over sum of maxima, 1 for a mirror-symmetric object);
- ``brightness``: mean intensity inside the silhouette, on the absolute scale (0 black, 1 ``white``);
- ``texture``: grey-level co-occurrence contrast inside the silhouette (``skimage.feature.graycomatrix``
  and ``graycoprops``: 16 grey levels, neighbours one pixel right and one down, pairs with both
  pixels inside the silhouette less its one-pixel rim, whose blend with the background is no
  texture), in grey levels squared;
- ``fill``: solidity, the silhouette's area over the area of its convex hull;
- ``top_heavy``: share of the silhouette in the upper half of its height.
"""

from __future__ import annotations

import numpy as np
from scipy import ndimage

from pipeline.concepts.measures import Measure, Measurements
from pipeline.concepts.measures._notes import add_note
from pipeline.concepts.measures._pixels import (convex_hull_area, count_per_image, hole_areas, image_stack,
                                                label_in_plane, measure_batches)
from pipeline.validation import InvalidInputError

WHO = "silhouette_measurements"


def _m(name, description, unit, split):
    return Measure(name, description, unit, split, "image")


SILHOUETTE_MEASURES = (
    _m("holes", "enclosed background of at least 8 px (at 28 px): a bag's handle, gaps between straps", "holes",
       "presence"),
    _m("leg_gap", "depth of the dark gap at the centre between two parts in the lower rows (50-90% of the height): "
       "trouser legs", "depth 0..1", "tertiles"),
    _m("sleeves", "depth of the dark gaps between the middle and both sides in the rows at 40-90% of the height: "
       "long sleeves apart from the body", "depth 0..1", "tertiles"),
    _m("shoulders", "width at 10-30% of the height over the width at 40-60%: short sleeves standing out", "ratio",
       "tertiles"),
    _m("aspect", "height over width of the silhouette's bounding box", "ratio", "tertiles"),
    _m("symmetry", "overlap of the image with its left-right mirror (sum of minima over sum of maxima)",
       "overlap 0..1", "tertiles"),
    _m("brightness", "mean intensity inside the silhouette (0 black, 1 white)", "intensity 0..1", "tertiles"),
    _m("texture", "grey-level co-occurrence contrast inside the silhouette, its rim left out (16 levels, right and "
       "down neighbours)",
       "grey levels squared", "tertiles"),
    _m("fill", "solidity: the silhouette's area over that of its convex hull", "share of hull", "tertiles"),
    _m("top_heavy", "share of the silhouette in the upper half of its height", "share of area", "tertiles"),
)
NAMES = tuple(m.name for m in SILHOUETTE_MEASURES)
#: measures that need the object's shape resolved in the input: NaN for inputs smaller than ``min_side``
SHAPE_MEASURES = ("holes", "leg_gap", "sleeves", "shoulders", "symmetry", "texture", "fill")


def silhouette_measurements(images, *, size: int = 28, threshold: float = 0.02, min_piece: float = 0.05,
                            min_hole: float = 0.01, white: float | None = None, levels: int = 16,
                            min_side: int = 8) -> Measurements:
    """Measure the shape, tone and texture of single objects on a dark background.

    Parameters
    ----------
    images : array-like of shape (n, h, w), (n, h, w, 1), (n, h, w, 3) or (n, h*w)
        Grey images (Fashion-MNIST's 28x28 uint8), object bright on a dark background; flat
        images must be square; colour images are averaged to grey.
    size : int, default=28
        Side of the working frame every image is resampled to (bilinear).
    threshold : float, default=0.02
        The silhouette: pixels at or above this share of the image's range (dark cloth is still cloth).
    min_piece : float, default=0.05
        Pieces of the silhouette smaller than this share of it are specks, left out.
    min_hole : float, default=0.01
        Enclosed background counts as a hole from this share of the frame's area (8 pixels at 28).
    white : float, optional
        The value of white for ``brightness``. Default: 1 when every pixel lies in [0, 1], else 255.
    levels : int, default=16
        Grey levels of the co-occurrence matrix behind ``texture``.
    min_side : int, default=8
        Inputs smaller than ``min_side × min_side`` pixels do not resolve the object's shape:
        :data:`SHAPE_MEASURES` are NaN for them, with a note.

    Returns
    -------
    Measurements
        ``values`` of shape (n, 10), one column per measure in :data:`SILHOUETTE_MEASURES` order.
        Blank (constant) images are NaN throughout; an object with no interior pixel pair gets
        NaN ``texture``; each with a note.

    Raises
    ------
    InvalidInputError
        For texts, non-numeric data, other shapes, NaN or inf pixels (naming the images), pixels
        outside [0, white], images dark on bright, and parameters out of range.
    """
    size = _check_params(size, threshold, min_piece, min_hole, white, levels, min_side)
    stack = image_stack(images, WHO, "object images")
    n, h0, w0 = stack.shape
    settings = dict(white=_white(stack, white), threshold=threshold, min_piece=min_piece,
                    min_area=max(1, round(min_hole * size * size)), levels=levels)
    values, notes = measure_batches(stack, size, lambda arr, g, blank: _measure(arr, g, blank, **settings), WHO,
                                    "objects")
    if min(h0, w0) < min_side:
        values[:, [NAMES.index(m) for m in SHAPE_MEASURES]] = np.nan
        add_note(notes, SHAPE_MEASURES, f"the images are {h0}x{w0} pixels, too small to resolve an object's shape "
                 f"(at least {min_side}x{min_side} needed; resampling adds no detail).", np.ones(n, dtype=bool), n)
    return Measurements(values, SILHOUETTE_MEASURES, notes)


def _measure(arr, g, blank, *, white, threshold, min_piece, min_area, levels):
    """The measures of one batch: raw images ``arr`` and their frames ``g`` (m, size, size) -> ``(values, flags)``."""
    n, size = len(g), g.shape[1]
    mask = _silhouette(g >= threshold, min_piece)
    out = {}
    areas, image_of, _ = hole_areas(mask)
    out["holes"] = count_per_image(image_of[areas >= min_area], n)
    top, bottom, left, right = _box(mask)
    height, width = bottom - top + 1, right - left + 1
    out["aspect"] = height / np.maximum(width, 1)
    rel = (np.arange(size)[None, :] - top[:, None] + 0.5) / np.maximum(height, 1)[:, None]  # (n, size) row heights
    row_width = _row_widths(mask)
    with np.errstate(invalid="ignore", divide="ignore"):  # NaN for a box too low for the bands (noted below)
        out["shoulders"] = _band_mean(row_width, rel, 0.1, 0.3) / _band_mean(row_width, rel, 0.4, 0.6)
    depth = valley_depth(_smooth_rows(g), threshold)
    centre = (left + right) / 2.0
    out["leg_gap"] = _band_median(_depth_at(depth, centre), rel, 0.5, 0.9)
    columns = np.arange(size)[None, None, :]
    left_side = np.where((columns >= left[:, None, None]) & (columns < centre[:, None, None] - 1.5), depth, 0).max(2)
    right_side = np.where((columns <= right[:, None, None]) & (columns > centre[:, None, None] + 1.5), depth, 0).max(2)
    out["sleeves"] = _band_median(np.minimum(left_side, right_side), rel, 0.4, 0.9)
    out["symmetry"] = mirror_overlap(g * mask, left + right)
    low, high = arr.min(axis=(1, 2)), arr.max(axis=(1, 2))
    absolute = (low[:, None, None] + g * (high - low)[:, None, None]) / white
    area = mask.sum(axis=(1, 2))
    out["brightness"] = (absolute * mask).sum(axis=(1, 2)) / np.maximum(area, 1)
    interior = ndimage.binary_erosion(mask, np.ones((1, 3, 3), dtype=bool))  # the rim's blend with the background
    out["texture"] = glcm_contrast(g, interior, levels)                     # is no texture
    hull = convex_hull_area(mask)
    out["fill"] = area / np.where(hull > 0, hull, 1.0)
    out["top_heavy"] = (mask & (rel[:, :, None] < 0.5)).sum(axis=(1, 2)) / np.maximum(area, 1)

    values = np.column_stack([out[name] for name in NAMES])
    values[blank] = np.nan
    no_inside = ~blank & np.isnan(out["texture"])
    flags = [(NAMES, "blank (constant) images show no object.", blank),
             (["texture"], "the silhouette has no inside (no two neighbouring pixels remain once its one-pixel rim "
              "is taken off: thin straps or lines), so it has no texture to measure.", no_inside)]
    for j, name in enumerate(NAMES):
        flags.append(([name], "the object is only a few rows high, too few for the rows this measure reads.",
                      np.isnan(values[:, j]) & ~blank & ~(no_inside if name == "texture" else False)))
    return values, flags


def _check_params(size, threshold, min_piece, min_hole, white, levels, min_side) -> int:
    problems = []
    if not (isinstance(size, (int, np.integer)) and not isinstance(size, bool) and size >= 16):
        problems.append(f"size={size!r} (an integer of at least 16)")
    for name, value in (("threshold", threshold), ("min_piece", min_piece), ("min_hole", min_hole)):
        if not (isinstance(value, (int, float, np.number)) and 0 < value < 1):
            problems.append(f"{name}={value!r} (between 0 and 1, exclusive)")
    if white is not None and not (isinstance(white, (int, float, np.number)) and 0 < white < np.inf):
        problems.append(f"white={white!r} (a positive number, or None)")
    if not (isinstance(levels, (int, np.integer)) and 2 <= levels <= 256):
        problems.append(f"levels={levels!r} (an integer from 2 to 256)")
    if not (isinstance(min_side, (int, np.integer)) and min_side > 0):
        problems.append(f"min_side={min_side!r} (a positive integer)")
    if problems:
        raise InvalidInputError(f"{WHO}: parameter(s) out of range: {'; '.join(problems)}.")
    return int(size)


def _white(stack: np.ndarray, white) -> float:
    low, high = float(stack.min()), float(stack.max())
    if white is None:
        white = 1.0 if 0.0 <= low and high <= 1.0 else 255.0
    if low < 0 or high > white:
        raise InvalidInputError(f"{WHO}: pixel values run from {low:g} to {high:g}, outside [0, white={white:g}], "
                                "so brightness has no scale. Pass white=<the value of white> (e.g. 255 for 8-bit "
                                "images, 1.0 for images in [0, 1]), or rescale the images to it.")
    return float(white)


def _silhouette(mask: np.ndarray, min_piece: float) -> np.ndarray:
    """The mask without its 8-connected pieces smaller than ``min_piece`` of the image's mask."""
    labels, image_of, k = label_in_plane(mask, 2)
    sizes = np.bincount(labels.ravel(), minlength=k + 1).astype(np.float64)
    total = mask.sum(axis=(1, 2)).astype(np.float64)
    keep = np.zeros(k + 1, dtype=bool)
    keep[1:] = sizes[1:] >= min_piece * total[image_of[1:]]
    return keep[labels]


def _box(mask: np.ndarray):
    """Top, bottom, left and right pixel of each mask's bounding box (0s for an empty mask)."""
    n, h, w = mask.shape
    rows, cols = mask.any(axis=2), mask.any(axis=1)
    top, bottom = np.argmax(rows, axis=1), h - 1 - np.argmax(rows[:, ::-1], axis=1)
    left, right = np.argmax(cols, axis=1), w - 1 - np.argmax(cols[:, ::-1], axis=1)
    return top, bottom, left, right


def _row_widths(mask: np.ndarray) -> np.ndarray:
    """Leftmost to rightmost silhouette pixel of each row, inclusive (0 for an empty row), shape (n, h)."""
    w = mask.shape[2]
    any_row = mask.any(axis=2)
    first, last = np.argmax(mask, axis=2), w - 1 - np.argmax(mask[:, :, ::-1], axis=2)
    return np.where(any_row, last - first + 1, 0).astype(np.float64)


def _band_mean(per_row: np.ndarray, rel: np.ndarray, lo: float, hi: float) -> np.ndarray:
    band = (rel >= lo) & (rel < hi)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (per_row * band).sum(axis=1) / band.sum(axis=1)


def _band_median(per_row: np.ndarray, rel: np.ndarray, lo: float, hi: float) -> np.ndarray:
    band = (rel >= lo) & (rel < hi)
    values = np.sort(np.where(band, per_row, np.inf), axis=1)
    count = band.sum(axis=1)
    rows = np.arange(len(values))
    low = values[rows, np.maximum((count - 1) // 2, 0)]
    high = values[rows, np.maximum(count // 2, 0)]
    return np.where(count > 0, (low + high) / 2, np.nan)


def _smooth_rows(g: np.ndarray) -> np.ndarray:
    """Each pixel averaged with the pixels above and below it: a gap must run down a few rows to count."""
    return ndimage.uniform_filter1d(g, 3, axis=1, mode="constant")


def valley_depth(g: np.ndarray, floor: float) -> np.ndarray:
    """How far each pixel dips below the brighter parts on both its sides in its row, in [0, 1].

    ``1 - g / min(max of the row up to the pixel, max of the row from the pixel on)``: 0 on the
    brightest parts and outside the object, 1 on background between two bright parts. Pixels
    without ``floor`` or more on both sides get 0. Shape like ``g`` (n, h, w).
    """
    left = np.maximum.accumulate(g, axis=2)
    right = np.maximum.accumulate(g[:, :, ::-1], axis=2)[:, :, ::-1]
    rim = np.minimum(left, right)
    depth = 1.0 - g / np.where(rim > 0, rim, 1.0)
    return np.where(rim >= floor, np.clip(depth, 0.0, 1.0), 0.0)


def _depth_at(depth: np.ndarray, centre: np.ndarray) -> np.ndarray:
    """The valley depth in each row at column ``centre`` (the deeper of the two middle columns of an even box)."""
    n, h, w = depth.shape
    a = np.clip(np.floor(centre).astype(np.int64), 0, w - 1)
    b = np.clip(np.ceil(centre).astype(np.int64), 0, w - 1)
    rows = np.arange(n)[:, None]
    height = np.arange(h)[None, :]
    return np.maximum(depth[rows, height, a[:, None]], depth[rows, height, b[:, None]])


def mirror_overlap(g: np.ndarray, axis2: np.ndarray) -> np.ndarray:
    """Sum of minima over sum of maxima of each image and its mirror ``x -> axis2 - x`` (0 beyond the frame).

    ``axis2`` (n,) is twice the mirror's column (integer: the box's left + right). 1 for a mirror-symmetric image.
    """
    n, h, w = g.shape
    source = axis2[:, None] - np.arange(w)[None, :]  # (n, w)
    inside = (source >= 0) & (source < w)
    mirrored = np.take_along_axis(g, np.clip(source, 0, w - 1)[:, None, :].repeat(h, axis=1), axis=2)
    mirrored = np.where(inside[:, None, :], mirrored, 0.0)
    top = np.minimum(g, mirrored).sum(axis=(1, 2))
    bottom = np.maximum(g, mirrored).sum(axis=(1, 2))
    return np.where(bottom > 0, top / np.where(bottom > 0, bottom, 1.0), np.nan)


def glcm_contrast(g: np.ndarray, mask: np.ndarray, levels: int) -> np.ndarray:
    """Grey-level co-occurrence contrast of each image inside its mask, shape (n,).

    ``g`` (values 0..1) is cut into ``levels`` grey levels; the contrast is the mean squared level
    difference over the pairs of pixels one step right and one step down whose both pixels lie in
    the mask, the two directions weighted equally: ``skimage.feature.graycoprops(P, "contrast")``
    averaged over the angles 0 and 90° of a ``graycomatrix`` restricted to such pairs (over the one
    angle that has pairs, for a one-pixel line). NaN for an image without any pair.
    """
    q = np.minimum(np.floor(g * levels), levels - 1)
    total = np.zeros(len(g))
    angles = np.zeros(len(g))
    for a, b, ma, mb in ((q[:, :, :-1], q[:, :, 1:], mask[:, :, :-1], mask[:, :, 1:]),
                         (q[:, :-1, :], q[:, 1:, :], mask[:, :-1, :], mask[:, 1:, :])):
        both = ma & mb
        pairs = both.sum(axis=(1, 2))
        total += ((a - b) ** 2 * both).sum(axis=(1, 2)) / np.maximum(pairs, 1)
        angles += pairs > 0
    return np.where(angles > 0, total / np.maximum(angles, 1), np.nan)
