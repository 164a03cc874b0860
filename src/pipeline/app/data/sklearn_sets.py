"""scikit-learn's bundled datasets (offline) and 20 Newsgroups (sklearn's fetcher)."""

from __future__ import annotations

import numpy as np
from sklearn import datasets

from pipeline.app.data.dataset import Dataset
from pipeline.app.data.loading import data_root
from pipeline.validation import InvalidInputError


def _bunch_to_dataset(name: str, bunch, images=None) -> Dataset:
    return Dataset(
        name=name, X=np.asarray(bunch.data, dtype=np.float64), y=np.asarray(bunch.target, dtype=np.int64),
        kind="tabular", feature_names=[str(f) for f in bunch.feature_names],
        class_names=[str(c) for c in bunch.target_names], images=images, meta={"source": f"sklearn.datasets.load_{name}"},
    )


def load_digits(spec: dict, paths: dict, random_state: int = 0) -> Dataset:
    """8x8 handwritten digits (1797 x 64, pixel intensities 0..16); ``images`` holds uint8 (n, 8, 8, 1)."""
    bunch = datasets.load_digits()
    images = np.round(bunch.images * (255.0 / 16.0)).astype(np.uint8)[..., None]
    return _bunch_to_dataset("digits", bunch, images)


def load_iris(spec: dict, paths: dict, random_state: int = 0) -> Dataset:
    return _bunch_to_dataset("iris", datasets.load_iris())


def load_wine(spec: dict, paths: dict, random_state: int = 0) -> Dataset:
    return _bunch_to_dataset("wine", datasets.load_wine())


def load_breast_cancer(spec: dict, paths: dict, random_state: int = 0) -> Dataset:
    return _bunch_to_dataset("breast_cancer", datasets.load_breast_cancer())


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
