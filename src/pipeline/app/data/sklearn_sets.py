"""scikit-learn's bundled datasets (offline) and 20 Newsgroups (sklearn's fetcher)."""

from __future__ import annotations

import numpy as np
from sklearn import datasets

from pipeline.app.data.dataset import Dataset, reads
from pipeline.app.data.loading import data_root
from pipeline.validation import InvalidInputError


def _bunch_to_dataset(name: str, bunch, images=None) -> Dataset:
    return Dataset(
        name=name, X=np.asarray(bunch.data, dtype=np.float64), y=np.asarray(bunch.target, dtype=np.int64),
        kind="tabular", feature_names=[str(f) for f in bunch.feature_names],
        class_names=[str(c) for c in bunch.target_names], images=images, meta={"source": f"sklearn.datasets.load_{name}"},
    )


#: ``dataset.params.resize`` of ``dataset=digits dataset.image_size=<side>``: where the digit goes
#: in the new image (MNIST's own layout: the digit in a 20 x 20 box centred in 28 x 28)
RESIZE = {"mnist": 20 / 28, "stretch": 1.0}


@reads("image_size")
def load_digits(spec: dict, paths: dict, random_state: int = 0, resize: str = "mnist") -> Dataset:
    """8x8 handwritten digits (1797 x 64, pixel intensities 0..16); ``images`` holds uint8 (n, 8, 8, 1).

    With ``dataset.image_size=<side>`` the digits are images of that side instead (``kind="image"``,
    ``X`` uint8 (n, side, side, 1), grey levels 0-255), for an encoder trained on larger images
    such as the default run's MNIST VaDE: each 8 x 8 digit (counts 0-16 scaled to 0-255) is
    resampled bilinearly (Pillow) into a box of ``RESIZE[resize] * side`` pixels, centred;
    ``resize="mnist"`` (default) draws it as MNIST's digits are, 20 x 20 in 28 x 28, ``"stretch"``
    fills the whole image."""
    bunch = datasets.load_digits()
    images = np.round(bunch.images * (255.0 / 16.0)).astype(np.uint8)[..., None]
    side = spec.get("image_size")
    if side is None:
        return _bunch_to_dataset("digits", bunch, images)
    if isinstance(side, bool) or not isinstance(side, (int, np.integer)) or side < 8:
        raise InvalidInputError(f"dataset.image_size={side!r}: the digits are resized to an integer side of at least 8 "
                                "pixels (28 for an MNIST-trained encoder), or null for their own 8 x 8.")
    if resize not in RESIZE:
        raise InvalidInputError(f"dataset.params.resize={resize!r}: choose {' or '.join(RESIZE)} (where the resized "
                                "digit goes: MNIST's 20 x 20 box centred in 28 x 28, or the whole image).")
    big = resized_digits(images[..., 0], int(side), RESIZE[resize])
    ds = _bunch_to_dataset("digits", bunch, big)
    ds.X, ds.kind, ds.feature_names = big, "image", None
    ds.meta["resized"] = f"8 x 8 -> {side} x {side} ({resize}: bilinear, digit box {round(RESIZE[resize] * side)} px)"
    return ds


def resized_digits(images: np.ndarray, side: int, box: float) -> np.ndarray:
    """uint8 (n, side, side, 1): each (8, 8) grey image resampled bilinearly to ``round(box * side)``
    pixels and centred on a black image of ``side``."""
    from PIL import Image

    inner = max(1, round(box * side))
    top = (side - inner) // 2
    out = np.zeros((len(images), side, side, 1), dtype=np.uint8)
    for i, im in enumerate(images):
        out[i, top:top + inner, top:top + inner, 0] = np.asarray(
            Image.fromarray(np.ascontiguousarray(im)).resize((inner, inner), Image.BILINEAR))
    return out


@reads()
def load_iris(spec: dict, paths: dict, random_state: int = 0) -> Dataset:
    return _bunch_to_dataset("iris", datasets.load_iris())


@reads()
def load_wine(spec: dict, paths: dict, random_state: int = 0) -> Dataset:
    return _bunch_to_dataset("wine", datasets.load_wine())


@reads()
def load_breast_cancer(spec: dict, paths: dict, random_state: int = 0) -> Dataset:
    return _bunch_to_dataset("breast_cancer", datasets.load_breast_cancer())


@reads("split", "download", "root")
def load_newsgroups20(spec: dict, paths: dict, random_state: int = 0, remove=()) -> Dataset:
    """20 Newsgroups texts (list of str), read from the original archive after its published sha256
    is verified (never from scikit-learn's pickle cache; see :mod:`pipeline.app.data.integrity`);
    ``remove``: parts of the posts to strip (headers, footers, quotes), as in ``fetch_20newsgroups``."""
    from sklearn.datasets._twenty_newsgroups import (strip_newsgroup_footer, strip_newsgroup_header,
                                                     strip_newsgroup_quoting)

    from pipeline.app.data.integrity import read_newsgroups

    root = data_root(spec, paths, "sklearn")
    subset = {"train": "train", "test": "test", "all": "all"}.get(spec.get("split", "train"), "train")
    texts, target, names = read_newsgroups(root, subset, download=bool(spec.get("download")))
    strip = {"headers": strip_newsgroup_header, "footers": strip_newsgroup_footer, "quotes": strip_newsgroup_quoting}
    for part in remove or ():
        if part not in strip:
            raise InvalidInputError(f"dataset.params.remove: unknown part {part!r}; choose from {sorted(strip)}.")
        texts = [strip[part](t) for t in texts]
    return Dataset(
        name="newsgroups20", X=texts, y=target, kind="text", class_names=names,
        meta={"source": "20news-bydate.tar.gz (sha256-verified)", "split": subset},
    )
