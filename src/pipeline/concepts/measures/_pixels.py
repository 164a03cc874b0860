"""What the image measures share: input checks, a common grey frame, notes, and stack-wide kernels.

Every kernel here works on a whole stack of images at once (shape (n, h, w)), so that a
thousand digits cost a few numpy calls instead of a thousand Python loops:

- :func:`image_stack` checks the input and :func:`measure_batches` runs a measure over it a batch at a
  time (bounded memory for any number of images), collecting one note per measure and reason;
- :func:`grey_frame` brings each image to ``size × size`` with values in [0, 1]
  (the image's own minimum to its own maximum; the shorter side padded with background first,
  so the aspect is kept);
- :func:`label_in_plane` labels the connected pieces of every image in one ``scipy.ndimage.label``
  call (a structuring element flat in the stack axis, so no piece crosses from one image to the
  next) and says which image each piece belongs to;
- :func:`hole_areas` finds each image's holes (background pieces, 4-connected, that do not touch
  the border) and their areas;
- :func:`skeletonize_stack` runs ``skimage.morphology.skeletonize`` once on a mosaic of the images,
  each framed by a background border, which gives exactly the per-image skeletons (thinning only
  looks at 3x3 neighbourhoods);
- :func:`structure_tensor_stack` is ``skimage.feature.structure_tensor`` (Sobel derivatives,
  Gaussian window) applied to every image of the stack.
"""

from __future__ import annotations

import numpy as np
from scipy import ndimage

from pipeline.concepts.measures._notes import add_note, items_phrase
from pipeline.validation import InvalidInputError

#: an image whose values span less than this share of its largest absolute value is blank (constant)
BLANK_RANGE = 1e-9
#: images measured at a time: a few (BATCH, size, size) float64 arrays in memory, whatever the set's size
BATCH = 2048


def _looks_like_text(images) -> bool:
    if isinstance(images, (str, bytes)):
        return True
    if isinstance(images, np.ndarray):
        return images.dtype.kind in "USO" and images.size > 0 and isinstance(images.flat[0], (str, bytes))
    if isinstance(images, (list, tuple)) and images:
        return isinstance(images[0], (str, bytes))
    return False


def image_stack(images, who: str, what: str) -> np.ndarray:
    """Grey images as a numeric stack of shape (n, h, w), from (n, h, w), (n, h, w, 1|3) or square flat (n, h*w).

    The pixels keep their dtype (no float copy of a large uint8 set; :func:`measure_batches`
    converts one batch at a time); colour images (3 channels) are averaged to grey. ``who`` names
    the calling function and ``what`` the images it expects, for the error messages. Raises
    InvalidInputError for texts, non-numeric data, other shapes and no images.
    """
    if _looks_like_text(images):
        raise InvalidInputError(
            f"{who} measures {what}, but it was given text (str items). For texts use "
            "pipeline.concepts.measures.text_measurements (or pipeline.app.concept_sets.measured_text.text_measurements, which "
            "loads the lexicons).")
    try:
        arr = np.asarray(images)
        if arr.dtype.kind not in "buif":
            with np.errstate(over="ignore"):
                arr = np.asarray(images, dtype=np.float64)
    except (TypeError, ValueError, OverflowError) as exc:
        raise InvalidInputError(f"{who}: the images must be a numeric array of grey {what}; could not convert "
                                f"them: {exc}") from None
    if arr.ndim == 4 and arr.shape[-1] in (1, 3):
        arr = arr[..., 0] if arr.shape[-1] == 1 else arr.mean(axis=-1)
    elif arr.ndim == 2:
        side = int(round(np.sqrt(arr.shape[1])))
        if side * side != arr.shape[1]:
            raise InvalidInputError(f"{who}: flat images of {arr.shape[1]} pixels are not square; pass them as "
                                    "(n, h, w) images.")
        arr = arr.reshape(len(arr), side, side)
    if arr.ndim != 3:
        raise InvalidInputError(f"{who}: images must be (n, h, w), (n, h, w, 1), (n, h, w, 3) or flat square "
                                f"(n, h*w) grey {what}; got shape {arr.shape}.")
    if arr.shape[0] == 0 or arr.shape[1] == 0 or arr.shape[2] == 0:
        raise InvalidInputError(f"{who}: no pixels to measure (images of shape {arr.shape}); pass at least one "
                                "non-empty image.")
    return arr


def _check_finite(stack: np.ndarray, who: str, batch: int) -> None:
    if stack.dtype.kind != "f":
        return
    bad = np.concatenate([start + np.flatnonzero(~np.isfinite(stack[start:start + batch]).all(axis=(1, 2)))
                          for start in range(0, len(stack), batch)])
    if len(bad):
        raise InvalidInputError(f"{who}: NaN or inf pixels in {items_phrase(bad, len(stack))}; a measurement of such "
                                "an image means nothing. Drop or repair those images (e.g. np.nan_to_num) first.")


def measure_batches(stack: np.ndarray, size: int, measure, who: str, what: str, batch: int = 0):
    """Run ``measure`` over the stack ``batch`` images at a time (default :data:`BATCH`): values and notes.

    Each batch is converted to float64 and framed (:func:`grey_frame`); ``measure(arr, frame,
    blank)`` returns ``(values (m, k), flags)``, with ``flags`` a list of ``(measure names, reason,
    mask (m,))`` saying which items are NaN and why. The stack is refused (InvalidInputError) when
    it has NaN or inf pixels (naming every such image) and when most images are bright along the
    border (dark on bright), judged as soon as 100 images (or all) have been seen.
    Returns ``(values (n, k), notes)``, the notes one paragraph per measure (:func:`._notes.add_note`).
    """
    n, batch = len(stack), batch or BATCH
    _check_finite(stack, who, batch)
    values, flagged, bright, seen = [], {}, [], 0
    for start in range(0, n, batch):
        arr = np.asarray(stack[start:start + batch], dtype=np.float64)
        g, blank = grey_frame(arr, size)
        border = np.concatenate([g[:, 0], g[:, -1], g[:, 1:-1, 0], g[:, 1:-1, -1]], axis=1).mean(axis=1)
        bright.append(start + np.flatnonzero((border > 0.5) & ~blank))
        seen += int((~blank).sum())
        found = np.concatenate(bright)
        if start + len(arr) >= min(n, 100) and len(found) > 0.5 * max(1, seen):
            raise InvalidInputError(
                f"{who} expects {what} bright on a dark background, but {items_phrase(found, n)} are mostly bright "
                "along the border (dark on bright). Invert them first, e.g. images.max() - images.")
        part, flags = measure(arr, g, blank)
        values.append(part)
        for names, reason, mask in flags:
            flagged.setdefault((tuple(names), reason), []).append(start + np.flatnonzero(mask))
    notes: dict = {}
    for (names, reason), idx in flagged.items():
        add_note(notes, names, reason, np.concatenate(idx), n)
    return np.concatenate(values), notes


def grey_frame(arr: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """Each image as ``size × size`` float64 in [0, 1] (its minimum to its maximum), and the blank ones.

    The shorter side is padded with background (the image's minimum) to a square, then the square
    is resampled bilinearly (``scipy.ndimage.zoom``, ``order=1``) to ``size × size``. Returns
    ``(frame, blank)``: frame of shape (n, size, size), and blank of shape (n,), True for images
    that are constant (nothing to measure; their frame is all zeros).
    """
    peak = np.abs(arr).max(axis=(1, 2))
    scaled = arr / np.where(peak > 0, peak, 1.0)[:, None, None]  # in [-1, 1]: no overflow for 1e308 pixels
    low, high = scaled.min(axis=(1, 2)), scaled.max(axis=(1, 2))
    span = high - low
    blank = span <= BLANK_RANGE
    g = (scaled - low[:, None, None]) / np.where(blank, 1.0, span)[:, None, None]
    g[blank] = 0.0
    n, h, w = g.shape
    if h != w:
        side = max(h, w)
        top, left = (side - h) // 2, (side - w) // 2
        square = np.zeros((n, side, side))
        square[:, top:top + h, left:left + w] = g
        g = square
    if g.shape[1] != size:
        g = np.clip(ndimage.zoom(g, (1, size / g.shape[1], size / g.shape[2]), order=1, grid_mode=False), 0.0, 1.0)
    return g, blank


_IN_PLANE_4 = np.zeros((3, 3, 3), dtype=bool)
_IN_PLANE_4[1] = ndimage.generate_binary_structure(2, 1)
_IN_PLANE_8 = np.zeros((3, 3, 3), dtype=bool)
_IN_PLANE_8[1] = True


def label_in_plane(mask: np.ndarray, connectivity: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Connected pieces of every image of a boolean stack (n, h, w), in one labelling.

    ``connectivity`` 1 joins edge neighbours (4-connected), 2 also corner neighbours (8-connected).
    Returns ``(labels, image_of, k)``: labels (n, h, w) with pieces 1..k, ``image_of`` (k + 1,)
    the image index of each label (entry 0, the background, is -1), and the number of pieces k.
    """
    labels, k = ndimage.label(mask, _IN_PLANE_4 if connectivity == 1 else _IN_PLANE_8)
    n, h, w = mask.shape
    flat = labels.reshape(n, h * w)
    image_of = np.full(k + 1, -1, dtype=np.int64)
    last = np.maximum.accumulate(flat.max(axis=1))
    first = np.where(flat > 0, flat, k + 1).min(axis=1)
    if np.all(first[1:] > last[:-1]):  # labels numbered image by image (scipy numbers them in raster order)
        image_of[1:] = np.searchsorted(last, np.arange(1, k + 1), side="left")
    else:  # pragma: no cover - another numbering: look each label up
        rows, cols = np.nonzero(flat)
        image_of[flat[rows, cols]] = rows
    return labels, image_of, k


def piece_sizes(mask: np.ndarray, connectivity: int = 2) -> tuple[np.ndarray, np.ndarray]:
    """Pixel count of every connected piece of a boolean stack and its image: ``(sizes, image_of)``."""
    labels, image_of, k = label_in_plane(mask, connectivity)
    sizes = np.bincount(labels.ravel(), minlength=k + 1)
    return sizes[1:], image_of[1:]


def per_image_max(values: np.ndarray, image_of: np.ndarray, n: int) -> np.ndarray:
    """The largest of ``values`` per image (0 for an image with none), shape (n,)."""
    out = np.zeros(n)
    np.maximum.at(out, image_of, values)
    return out


def hole_areas(ink: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Holes of every image of a boolean ink stack (n, h, w): background pieces that do not touch the border.

    The background is taken 4-connected (the ink 8-connected), so two ink pixels touching at a
    corner close a hole, as they do to the eye. Returns ``(areas, image_of, labels)``: the area in
    pixels and the image of each hole, and the background labels (n, h, w) of the padded-free
    frame, in which the label of a hole is its index in ``areas`` plus one.
    """
    n, h, w = ink.shape
    padded = np.zeros((n, h + 2, w + 2), dtype=bool)
    padded[:, 1:-1, 1:-1] = ink
    labels, image_of, k = label_in_plane(~padded, 1)
    areas = np.bincount(labels.ravel(), minlength=k + 1).astype(np.float64)
    outside = np.zeros(k + 1, dtype=bool)
    outside[labels[:, 0, 0]] = True  # the frame joins each image's border background into one piece
    outside[0] = True
    keep = np.flatnonzero(~outside)
    relabel = np.zeros(k + 1, dtype=np.int64)
    relabel[keep] = np.arange(1, len(keep) + 1)
    return areas[keep], image_of[keep], relabel[labels[:, 1:-1, 1:-1]]


def count_per_image(image_of: np.ndarray, n: int, weights=None) -> np.ndarray:
    """How many pieces (or their summed ``weights``) each image has, shape (n,)."""
    return np.bincount(image_of, weights=weights, minlength=n).astype(np.float64)


def skeletonize_stack(mask: np.ndarray) -> np.ndarray:
    """``skimage.morphology.skeletonize`` of every image of a boolean stack (n, h, w), in one call.

    The images are laid out as a mosaic, each inside a one-pixel background frame; the thinning
    reads only 3x3 neighbourhoods, so the mosaic's skeleton is exactly the per-image skeletons
    (tested against a loop over the images).
    """
    from skimage.morphology import skeletonize

    n, h, w = mask.shape
    cols = int(np.ceil(np.sqrt(n)))
    rows = int(np.ceil(n / cols))
    tiles = np.zeros((rows * cols, h + 2, w + 2), dtype=bool)
    tiles[:n, 1:-1, 1:-1] = mask
    mosaic = tiles.reshape(rows, cols, h + 2, w + 2).transpose(0, 2, 1, 3).reshape(rows * (h + 2), cols * (w + 2))
    skeleton = skeletonize(mosaic)
    back = skeleton.reshape(rows, h + 2, cols, w + 2).transpose(0, 2, 1, 3).reshape(rows * cols, h + 2, w + 2)
    return back[:n, 1:-1, 1:-1]


def structure_tensor_stack(g: np.ndarray, sigma: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``skimage.feature.structure_tensor(image, sigma, order='rc')`` of every image of ``g`` (n, h, w).

    Sobel derivatives along rows and columns (zero outside the image), their products smoothed by a
    Gaussian of ``sigma`` pixels within each image. Returns ``(Arr, Arc, Acc)``, each (n, h, w).
    """
    d_r = ndimage.correlate1d(ndimage.correlate1d(g, [-1.0, 0.0, 1.0], axis=1, mode="constant"),
                              [1.0, 2.0, 1.0], axis=2, mode="constant")
    d_c = ndimage.correlate1d(ndimage.correlate1d(g, [-1.0, 0.0, 1.0], axis=2, mode="constant"),
                              [1.0, 2.0, 1.0], axis=1, mode="constant")

    def smooth(a):
        return ndimage.gaussian_filter(a, (0.0, sigma, sigma), mode="constant")

    return smooth(d_r * d_r), smooth(d_r * d_c), smooth(d_c * d_c)


def shifted(mask: np.ndarray, offsets) -> list[np.ndarray]:
    """For each (dy, dx) in ``offsets``: the stack whose pixel (y, x) holds ``mask[y + dy, x + dx]`` (0 outside)."""
    n, h, w = mask.shape
    padded = np.zeros((n, h + 2, w + 2), dtype=mask.dtype)
    padded[:, 1:-1, 1:-1] = mask
    return [padded[:, 1 + dy:1 + dy + h, 1 + dx:1 + dx + w] for dy, dx in offsets]


def central_moments(g: np.ndarray) -> tuple[np.ndarray, ...]:
    """Mass, centroid and second central moments of every image (weights ``g``, shape (n, h, w)).

    Returns ``(mass, x_mean, y_mean, u20, u11, u02)``, each (n,); x runs along columns, y down the
    rows. Images of zero mass get NaN moments.
    """
    n, h, w = g.shape
    x = np.arange(w, dtype=np.float64)
    y = np.arange(h, dtype=np.float64)
    mass = g.sum(axis=(1, 2))
    safe = np.where(mass > 0, mass, np.nan)
    col = g.sum(axis=1)  # (n, w)
    row = g.sum(axis=2)  # (n, h)
    mx = col @ x / safe
    my = row @ y / safe
    u20 = col @ x**2 / safe - mx**2
    u02 = row @ y**2 / safe - my**2
    u11 = np.einsum("nyx,y,x->n", g, y, x) / safe - mx * my
    return mass, mx, my, u20, u11, u02


def convex_hull_area(mask: np.ndarray) -> np.ndarray:
    """Area (pixels) of the convex hull of each image's pixel squares, shape (n,); 0 for an empty image.

    The hull of the squares is the hull of their corners, and only each row's leftmost and rightmost
    pixel can reach it. Between rows ``y - 1`` and ``y`` the hull's left side passes at most at
    ``min(left) - 0.5``, its right side at ``max(right) + 0.5``; the left side is the greatest convex
    function below those points, the right side the least concave one above (Andrew's monotone
    chain, the points already sorted by row, run for all images at once), and the area lies between
    them. Exact: tested against ``scipy.spatial.ConvexHull`` of the corners.
    """
    n, h, w = mask.shape
    any_row = mask.any(axis=2)
    left = np.where(any_row, np.argmax(mask, axis=2), w).astype(np.float64)
    right = np.where(any_row, w - 1 - np.argmax(mask[:, :, ::-1], axis=2), -1).astype(np.float64)
    # the h + 1 row boundaries: the rows above and below each
    pad_left = np.full((n, h + 2), float(w))
    pad_left[:, 1:-1] = left
    pad_right = np.full((n, h + 2), -1.0)
    pad_right[:, 1:-1] = right
    lo = np.minimum(pad_left[:, :-1], pad_left[:, 1:]) - 0.5
    hi = np.maximum(pad_right[:, :-1], pad_right[:, 1:]) + 0.5
    valid = lo < w - 1  # a boundary with ink above or below (else lo is w - 0.5)
    ys = np.arange(h + 1, dtype=np.float64)
    return np.where(any_row.any(axis=1), _chain_integral(ys, -hi, valid) * -1.0 - _chain_integral(ys, lo, valid), 0.0)


def _chain_integral(ys: np.ndarray, xs: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """Integral over y of the greatest convex function below the valid points (ys, xs[i]), per row i of xs."""
    n, m = xs.shape
    rows = np.arange(n)
    stack_y = np.zeros((n, m))
    stack_x = np.zeros((n, m))
    top = np.zeros(n, dtype=np.int64)
    for k in range(m):
        new = valid[:, k]
        while True:  # drop the last point while it lies on or above the chord from the one before it to the new point
            can = new & (top >= 2)
            if not can.any():
                break
            a, b = np.maximum(top - 2, 0), np.maximum(top - 1, 0)
            ay, ax, by, bx = stack_y[rows, a], stack_x[rows, a], stack_y[rows, b], stack_x[rows, b]
            cross = (by - ay) * (xs[:, k] - ax) - (bx - ax) * (ys[k] - ay)
            drop = can & (cross <= 0)
            if not drop.any():
                break
            top -= drop
        stack_y[rows[new], top[new]] = ys[k]
        stack_x[rows[new], top[new]] = xs[new, k]
        top += new
    steps = np.arange(m - 1)[None, :] < (top - 1)[:, None]
    trapezoids = (stack_y[:, 1:] - stack_y[:, :-1]) * (stack_x[:, 1:] + stack_x[:, :-1]) / 2
    return np.where(steps, trapezoids, 0.0).sum(axis=1)
