"""Properties of handwritten digits measured from their pixels: the MMDT paper's concepts and Morpho-MNIST's.

The MMDT paper's four concepts (loop, vertical line, horizontal line, curvature; there defined by
the class: "loop = digits 0, 2, 6, 8, 9") are measured here on each image, with the stroke
measures of Morpho-MNIST (Castro et al., JMLR 2019: thickness, length, slant, width, height) and
the skeleton's ends and junctions beside them. Every image (MNIST 28x28 uint8, sklearn's 8x8
digits 0..16, any grey range, ink bright) is brought to a ``size × size`` frame (default 28) with
values 0..1 from its own minimum to its own maximum (:func:`._pixels.grey_frame`); lengths are in
pixels of that frame, and the thresholds below are stated for 28 pixels and scale with ``size``.

- ink: pixels at or above ``threshold`` (half the image's range, as Morpho-MNIST);
- ``loop``: holes of the ink taken at ``loop_threshold`` (0.3: faint ink still closes a loop) of
  at least ``min_hole`` of the frame's area (4 pixels at 28): thick strokes leave 1-3 pixel gaps
  that are no loop;
- skeleton: ``skimage.morphology.skeletonize`` of the ink (its holes below ``min_hole`` filled), spurs
  shorter than ``prune`` pixels removed;
- stroke direction: the structure tensor of the grey image (``skimage.feature.structure_tensor``,
  ``sigma`` 2) at each skeleton pixel;
- ``vertical_line`` / ``horizontal_line``: the tallest / widest 8-connected piece of skeleton whose
  direction stays within ``line_angle`` (25°) of upright (vertical once the digit's slant is taken
  out, so a slanted "1" is upright) / of horizontal: the rows / columns it spans;
- ``curvature``: share of the skeleton where the direction turns faster than ``curve_turn`` (5°
  per pixel: a radius of curvature below about 11 pixels) between neighbouring skeleton pixels;
- ``slant``, ``width``, ``height``: Morpho-MNIST's, from the grey image's moments: the slant is
  arctan(-μ11/μ02) (positive leans right), the width runs across the slant, both between the 1%
  and 99% points of the ink's mass;
- ``thickness``: ink area over skeleton length (pixels); ``length``: the skeleton's length with
  diagonal steps counted √2 (Morpho-MNIST's);
- ``stroke_ends`` / ``junctions``: skeleton pixels with one neighbour / places where three or more
  branches meet (crossing number ≥ 3, adjacent ones counted once);
- ``top_heavy``: share of the grey mass above the middle of the digit's height (9 and 7 high, 6 low);
- ``eccentricity``: of the ellipse with the grey image's second moments (0 round, towards 1 a line).

Everything runs on a whole batch of images at once (:mod:`._pixels`), 2,048 at a time.
"""

from __future__ import annotations

import numpy as np

from pipeline.concepts.measures import Measure, Measurements
from pipeline.concepts.measures._notes import add_note
from pipeline.concepts.measures._pixels import (central_moments, count_per_image, hole_areas, image_stack,
                                                label_in_plane, measure_batches, per_image_max, piece_sizes, shifted,
                                                skeletonize_stack, structure_tensor_stack)
from pipeline.validation import InvalidInputError

WHO = "digit_measurements"


def _m(name, description, unit, split):
    return Measure(name, description, unit, split, "image")


DIGIT_MEASURES = (
    _m("loop", "closed loops: holes in the digit's ink of at least 4 px (at 28 px), thinner gaps are no loop",
       "holes", "presence"),
    _m("vertical_line", "height of the tallest stroke running within 25° of upright (vertical once the digit's slant "
       "is taken out)", "px", "tertiles"),
    _m("horizontal_line", "width of the widest stroke running within 25° of horizontal", "px", "tertiles"),
    _m("curvature", "share of the stroke (skeleton) whose direction turns by more than 5° per pixel",
       "share of stroke", "tertiles"),
    _m("slant", "lean of the digit from the image moments, arctan(-mu11/mu02); positive leans right (Morpho-MNIST)",
       "degrees", "tertiles"),
    _m("thickness", "mean stroke thickness: ink area over skeleton length (Morpho-MNIST)", "px", "tertiles"),
    _m("width", "width across the slant, between the 1% and 99% points of the ink's mass (Morpho-MNIST)", "px",
       "tertiles"),
    _m("height", "height between the 1% and 99% points of the ink's mass (Morpho-MNIST)", "px", "tertiles"),
    _m("ink", "area of the ink: pixels at or above half the image's range", "pixels", "tertiles"),
    _m("length", "length of the stroke: the skeleton, diagonal steps counted sqrt(2) (Morpho-MNIST)", "px",
       "tertiles"),
    _m("stroke_ends", "free ends of the strokes: skeleton pixels with a single neighbour", "ends", "presence"),
    _m("junctions", "places where three or more strokes meet on the skeleton", "junctions", "presence"),
    _m("top_heavy", "share of the ink in the upper half of the digit's height (9 and 7 high, 6 low)", "share of ink",
       "tertiles"),
    _m("eccentricity", "elongation: eccentricity of the ellipse with the grey image's second moments (0 round, 1 a "
       "line)", "ratio", "tertiles"),
)
NAMES = tuple(m.name for m in DIGIT_MEASURES)
#: measures that need strokes resolved in the input: NaN for inputs smaller than ``min_side``
STROKE_MEASURES = ("loop", "vertical_line", "horizontal_line", "curvature", "thickness", "length", "stroke_ends",
                   "junctions")

#: the 8 neighbours in circular order (for the crossing number)
_RING = ((-1, 0), (-1, 1), (0, 1), (1, 1), (1, 0), (1, -1), (0, -1), (-1, -1))


def digit_measurements(images, *, size: int = 28, threshold: float = 0.5, loop_threshold: float = 0.3,
                       min_hole: float = 0.005, prune: int = 3, sigma: float = 2.0, line_angle: float = 25.0,
                       curve_turn: float = 5.0, min_side: int = 8) -> Measurements:
    """Measure the MMDT and Morpho-MNIST properties of handwritten digit images.

    Parameters
    ----------
    images : array-like of shape (n, h, w), (n, h, w, 1), (n, h, w, 3) or (n, h*w)
        Grey digit images, ink bright on a dark background, any value range (MNIST's 0..255,
        sklearn's 0..16); flat images must be square; colour images are averaged to grey.
    size : int, default=28
        Side of the working frame every image is resampled to (bilinear); lengths are in its pixels.
    threshold : float, default=0.5
        Ink: pixels at or above this share of the image's range.
    loop_threshold : float, default=0.3
        The ink that closes loops (a lower level than ``threshold``: faint ink still closes a loop).
    min_hole : float, default=0.005
        A hole counts as a loop from this share of the frame's area (4 pixels at 28).
    prune : int, default=3
        Skeleton spurs shorter than this many pixels (at 28) are removed before counting ends and
        junctions.
    sigma : float, default=2.0
        Gaussian window (pixels at 28) of the structure tensor that gives the stroke direction.
    line_angle : float, default=25.0
        A stroke is upright / horizontal within this many degrees (upright: vertical once the
        digit's slant is taken out).
    curve_turn : float, default=5.0
        A stroke is curved where its direction turns by more than this many degrees per pixel (at 28).
    min_side : int, default=8
        Inputs smaller than ``min_side × min_side`` pixels do not resolve strokes and holes: the
        stroke measures (:data:`STROKE_MEASURES`) are NaN for them, with a note.

    Returns
    -------
    Measurements
        ``values`` of shape (n, 14), one column per measure in :data:`DIGIT_MEASURES` order. Blank
        (constant) images get ``ink`` 0 and NaN elsewhere; an image whose skeleton is a single dot
        gets NaN ``thickness``; each with a note.

    Raises
    ------
    InvalidInputError
        For texts, non-numeric data, other shapes, NaN or inf pixels (naming the images), images
        that are dark on bright, and parameters out of range.
    """
    size = _check_params(size, threshold, loop_threshold, min_hole, prune, sigma, line_angle, curve_turn, min_side)
    stack = image_stack(images, WHO, "digit images")
    n, h0, w0 = stack.shape
    scale = size / 28.0
    settings = dict(threshold=threshold, loop_threshold=loop_threshold, min_area=max(1, int(round(min_hole * size**2))),
                    prune=max(1, int(round(prune * scale))), sigma=sigma * scale, line_angle=line_angle,
                    turn=np.deg2rad(curve_turn) / scale)
    values, notes = measure_batches(stack, size, lambda arr, g, blank: _measure(g, blank, **settings), WHO, "digits")
    if min(h0, w0) < min_side:
        values[:, [NAMES.index(m) for m in STROKE_MEASURES]] = np.nan
        add_note(notes, STROKE_MEASURES, f"the images are {h0}x{w0} pixels, too small to resolve strokes and holes "
                 f"(at least {min_side}x{min_side} needed; resampling adds no detail).", np.ones(n, dtype=bool), n)
    return Measurements(values, DIGIT_MEASURES, notes)


def _measure(g, blank, *, threshold, loop_threshold, min_area, prune, sigma, line_angle, turn):
    """The measures of one batch of framed images ``g`` (m, size, size): ``(values (m, k), flags)``."""
    n = len(g)
    out = {}
    ink = g >= threshold
    out["ink"] = ink.sum(axis=(1, 2)).astype(np.float64)
    areas, image_of, _ = hole_areas(g >= loop_threshold)
    out["loop"] = count_per_image(image_of[areas >= min_area], n)

    skeleton = prune_spurs(skeletonize_stack(_fill_small_holes(ink, min_area)), prune)
    out["length"] = stroke_length(skeleton)
    with np.errstate(divide="ignore", invalid="ignore"):
        out["thickness"] = np.where(out["length"] > 0, out["ink"] / out["length"], np.nan)
    out["stroke_ends"], out["junctions"] = ends_and_junctions(skeleton)

    mass, mx, my, u20, u11, u02 = central_moments(g)
    with np.errstate(divide="ignore", invalid="ignore"):
        shear = u11 / u02
        out["slant"] = np.rad2deg(np.arctan(-shear))
        half_gap = np.sqrt(((u20 - u02) / 2) ** 2 + u11**2)
        major, minor = (u20 + u02) / 2 + half_gap, (u20 + u02) / 2 - half_gap
        out["eccentricity"] = np.sqrt(np.clip(1.0 - minor / major, 0.0, 1.0))
    angle = gradient_angle(g, sigma)
    out["vertical_line"], out["horizontal_line"] = line_lengths(skeleton, angle, np.nan_to_num(shear), line_angle)
    out["curvature"] = curved_share(skeleton, angle, turn)
    top, bottom, out["top_heavy"] = row_extent(g)
    out["height"] = bottom - top
    out["width"] = sheared_width(g, np.nan_to_num(shear), np.nan_to_num(my))

    values = np.column_stack([out[name] for name in NAMES])
    undefined = [name for name in NAMES if name != "ink"]
    values[np.ix_(blank, [NAMES.index(m) for m in undefined])] = np.nan
    dot = ~blank & (out["length"] == 0)
    return values, [(undefined, "blank (constant) images have no ink to measure (their ink is 0).", blank),
                    (["thickness"], "the skeleton is a single dot (no stroke length), so the stroke thickness "
                     "ink / length is undefined.", dot)]


def _check_params(size, threshold, loop_threshold, min_hole, prune, sigma, line_angle, curve_turn, min_side) -> int:
    problems = []
    if not (isinstance(size, (int, np.integer)) and not isinstance(size, bool) and size >= 16):
        problems.append(f"size={size!r} (an integer of at least 16)")
    for name, value, low, high in (("threshold", threshold, 0.0, 1.0), ("loop_threshold", loop_threshold, 0.0, 1.0),
                                   ("min_hole", min_hole, 0.0, 0.5), ("line_angle", line_angle, 0.0, 45.0)):
        if not (isinstance(value, (int, float, np.number)) and low < value < high):
            problems.append(f"{name}={value!r} (between {low} and {high}, exclusive)")
    for name, value in (("prune", prune), ("sigma", sigma), ("curve_turn", curve_turn), ("min_side", min_side)):
        if not (isinstance(value, (int, float, np.number)) and 0 < value < 1e6):
            problems.append(f"{name}={value!r} (a positive number)")
    if problems:
        raise InvalidInputError(f"{WHO}: parameter(s) out of range: {'; '.join(problems)}.")
    return int(size)


def _fill_small_holes(ink: np.ndarray, min_area: int) -> np.ndarray:
    """The ink with its holes smaller than ``min_area`` pixels filled (they are no loop)."""
    areas, _, labels = hole_areas(ink)
    small = np.zeros(len(areas) + 1, dtype=bool)
    small[1:] = areas < min_area
    return ink | small[labels]


def _neighbours(skeleton: np.ndarray) -> list[np.ndarray]:
    return shifted(skeleton, _RING)


def ends_and_junctions(skeleton: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Free ends and junctions of every skeleton in a boolean stack (n, h, w), each of shape (n,).

    An end is a skeleton pixel with exactly one 8-neighbour. A junction pixel has a crossing
    number (0 -> 1 changes around its 8 neighbours in circular order) of 3 or more; junction pixels
    within one pixel of each other are one junction.
    """
    ring = _neighbours(skeleton)
    count = np.zeros(skeleton.shape, dtype=np.int8)
    crossing = np.zeros(skeleton.shape, dtype=np.int8)
    for k in range(8):
        count += ring[k]
        crossing += ~ring[k] & ring[(k + 1) % 8]
    ends = (skeleton & (count == 1)).sum(axis=(1, 2)).astype(np.float64)
    junction = skeleton & (crossing >= 3)
    near = np.zeros_like(junction)
    for piece in shifted(junction, [(dy, dx) for dy in (-1, 0, 1) for dx in (-1, 0, 1)]):
        near |= piece
    _, image_of = piece_sizes(near & skeleton | junction, connectivity=2)
    return ends, count_per_image(image_of, len(skeleton))


def prune_spurs(skeleton: np.ndarray, length: int) -> np.ndarray:
    """The skeletons without their spurs (end branches) shorter than ``length`` pixels.

    The classic pruning: peel the end pixels ``length`` times, then grow back from the ends that
    remain, ``length`` steps along the original skeleton, so that long branches keep their full
    length. A skeleton that would lose half its pixels or more (a short lone stroke, a dot) is kept whole.
    """
    peeled = skeleton.copy()
    for _ in range(length):
        peeled &= ~_end_pixels(peeled)
    grown = _end_pixels(peeled)
    square = [(dy, dx) for dy in (-1, 0, 1) for dx in (-1, 0, 1)]
    for _ in range(length):
        reach = np.zeros_like(grown)
        for piece in shifted(grown, square):
            reach |= piece
        grown = reach & skeleton
    pruned = peeled | grown
    kept = pruned.sum(axis=(1, 2)) * 2 >= skeleton.sum(axis=(1, 2))  # a short lone stroke is no spur: keep it
    return np.where(kept[:, None, None], pruned, skeleton)


def _end_pixels(skeleton: np.ndarray) -> np.ndarray:
    count = np.zeros(skeleton.shape, dtype=np.int8)
    for piece in _neighbours(skeleton):
        count += piece
    return skeleton & (count <= 1)


def stroke_length(skeleton: np.ndarray) -> np.ndarray:
    """Length of every skeleton (n,): each pair of 8-neighbours joined once, diagonal steps √2 (Morpho-MNIST)."""
    right, down_left, down, down_right = shifted(skeleton, [(0, 1), (1, -1), (1, 0), (1, 1)])
    steps = (right & skeleton).sum(axis=(1, 2)) + (down & skeleton).sum(axis=(1, 2))
    diagonal = (down_left & skeleton).sum(axis=(1, 2)) + (down_right & skeleton).sum(axis=(1, 2))
    return steps + np.sqrt(2.0) * diagonal


def gradient_angle(g: np.ndarray, sigma: float) -> np.ndarray:
    """Angle (radians, in [-pi/2, pi/2]) of the grey image's dominant gradient axis from the row axis, per pixel.

    The main axis of the structure tensor (:func:`._pixels.structure_tensor_stack`); the stroke runs
    across it, so a vertical stroke has an angle of ±pi/2 and a horizontal one 0.
    """
    a_rr, a_rc, a_cc = structure_tensor_stack(g.astype(np.float32), sigma)
    return 0.5 * np.arctan2(2.0 * a_rc, a_rr - a_cc)


def line_lengths(skeleton: np.ndarray, angle: np.ndarray, shear: np.ndarray, line_angle: float) -> tuple:
    """Height of the tallest upright and width of the widest level straight stroke of each digit, in pixels.

    A skeleton pixel is upright when its stroke direction (``angle``: :func:`gradient_angle`) is
    within ``line_angle`` degrees of vertical once the digit's slant is taken out (its slope
    dx/dy less ``shear`` = mu11 / mu02: a slanted "1" is upright), and level when it is within
    ``line_angle`` of horizontal (a shear keeps horizontals). The pixels of each kind form 8-connected
    pieces; the vertical line is the most rows one piece spans, the horizontal line the most columns.
    Returns ``(vertical, horizontal)``, each (n,).
    """
    img, row, col = np.nonzero(skeleton)
    sin, cos = np.sin(angle[img, row, col]), np.cos(angle[img, row, col])
    slope_times_sin = -cos - shear[img] * sin  # (dx/dy - shear) * sin: no division by a zero sine
    upright = np.zeros_like(skeleton)
    upright[img, row, col] = np.abs(slope_times_sin) <= np.tan(np.deg2rad(line_angle)) * np.abs(sin)
    level = np.zeros_like(skeleton)
    level[img, row, col] = np.abs(sin) <= np.sin(np.deg2rad(line_angle))
    return longest_extent(upright, axis=1), longest_extent(level, axis=2)


def longest_extent(mask: np.ndarray, axis: int) -> np.ndarray:
    """Per image of a boolean stack: the most rows (``axis=1``) or columns (``axis=2``) one 8-connected piece spans."""
    labels, image_of, k = label_in_plane(mask, 2)
    img, row, col = np.nonzero(labels)
    lab = labels[img, row, col]
    coord = row if axis == 1 else col
    low = np.full(k + 1, np.iinfo(np.int64).max)
    high = np.full(k + 1, -1)
    np.minimum.at(low, lab, coord)
    np.maximum.at(high, lab, coord)
    return per_image_max((high - low + 1)[1:].astype(np.float64), image_of[1:], len(mask))


def curved_share(skeleton: np.ndarray, angle: np.ndarray, turn: float) -> np.ndarray:
    """Share of each skeleton's pixels where the stroke direction turns faster than ``turn`` radians per pixel.

    ``angle`` (n, h, w) is the stroke's direction (:func:`gradient_angle`). The turn at a skeleton
    pixel is the mean, over its skeleton 8-neighbours, of the angle between their directions (axial,
    at most 90°) divided by their distance (1 or √2). NaN for an image without skeleton.
    """
    n, h, w = skeleton.shape
    img, row, col = np.nonzero(skeleton)
    padded_skeleton = np.zeros((n, h + 2, w + 2), dtype=bool)
    padded_skeleton[:, 1:-1, 1:-1] = skeleton
    padded_angle = np.zeros((n, h + 2, w + 2), dtype=angle.dtype)
    padded_angle[:, 1:-1, 1:-1] = angle
    here = angle[img, row, col].astype(np.float64)
    total = np.zeros(len(img))
    count = np.zeros(len(img))
    for dy, dx in _RING:
        both = padded_skeleton[img, row + 1 + dy, col + 1 + dx]
        diff = np.abs(here - padded_angle[img, row + 1 + dy, col + 1 + dx]) % np.pi
        total += np.where(both, np.minimum(diff, np.pi - diff) / np.hypot(dy, dx), 0.0)
        count += both
    turning = total / np.maximum(count, 1)
    pixels = np.bincount(img, minlength=n)
    curved = np.bincount(img, weights=turning > turn, minlength=n)
    return np.where(pixels > 0, curved / np.maximum(pixels, 1), np.nan)


def _inverse_cdf(knots: np.ndarray, cdf: np.ndarray, q: float) -> np.ndarray:
    """Per row: where the piecewise-linear ``cdf`` (n, m), rising through ``knots`` (m,) or (n, m), reaches ``q``."""
    rows = np.arange(len(cdf))
    k = np.clip((cdf < q).sum(axis=1), 1, cdf.shape[1] - 1)
    c0, c1 = cdf[rows, k - 1], cdf[rows, k]
    t = np.clip((q - c0) / np.where(c1 > c0, c1 - c0, 1.0), 0.0, 1.0)
    knots = np.broadcast_to(knots, cdf.shape)
    return knots[rows, k - 1] + t * (knots[rows, k] - knots[rows, k - 1])


def row_extent(g: np.ndarray, frac: float = 0.02) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Top and bottom of each image's mass, and the share of it in the upper half between them.

    Row ``i`` spans ``[i, i + 1)`` with its mass spread evenly; top and bottom are where the
    cumulative mass reaches ``frac / 2`` and ``1 - frac / 2`` (Morpho-MNIST's 2%). Returns
    ``(top, bottom, upper_share)``, each (n,).
    """
    n, h, _ = g.shape
    rows = g.sum(axis=2)
    cdf = np.zeros((n, h + 1))
    np.cumsum(rows, axis=1, out=cdf[:, 1:])
    cdf /= np.where(cdf[:, -1:] > 0, cdf[:, -1:], 1.0)
    knots = np.arange(h + 1, dtype=np.float64)
    top, bottom = _inverse_cdf(knots, cdf, frac / 2), _inverse_cdf(knots, cdf, 1.0 - frac / 2)
    middle = (top + bottom) / 2
    i = np.clip(np.floor(middle).astype(np.int64), 0, h - 1)
    r = np.arange(n)
    upper = cdf[r, i] + (middle - i) * (cdf[r, i + 1] - cdf[r, i])
    return top, bottom, upper


def sheared_width(g: np.ndarray, shear: np.ndarray, y_mid: np.ndarray, frac: float = 0.02) -> np.ndarray:
    """Width of each image's mass across its slant: Morpho-MNIST's bounding parallelogram, shape (n,).

    Each pixel's mass sits at ``x - shear * (y - y_mid)`` (pixel indices; ``shear`` = mu11 / mu02);
    the width runs between the points where the cumulative mass reaches ``frac / 2`` and ``1 - frac / 2``.
    """
    n, h, w = g.shape
    y = np.arange(h, dtype=np.float64)[None, :, None]
    x = np.arange(w, dtype=np.float64)[None, None, :]
    xs = (x - shear[:, None, None] * (y - y_mid[:, None, None])).reshape(n, h * w)
    order = np.argsort(xs, axis=1)
    values = np.take_along_axis(xs, order, axis=1)
    cdf = np.cumsum(np.take_along_axis(g.reshape(n, h * w), order, axis=1), axis=1)
    cdf /= np.where(cdf[:, -1:] > 0, cdf[:, -1:], 1.0)
    return _inverse_cdf(values, cdf, 1.0 - frac / 2) - _inverse_cdf(values, cdf, frac / 2)
