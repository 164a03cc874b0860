"""scikit-learn's bundled datasets (offline) and 20 Newsgroups (sklearn's fetcher)."""

from __future__ import annotations

import numpy as np
from sklearn import datasets

from pipeline.app.data.dataset import Dataset
from pipeline.app.data.registry import data_root, missing_data_error


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


def load_newsgroups20(spec: dict, paths: dict, random_state: int = 0) -> Dataset:
    """20 Newsgroups texts (list of str) via :func:`sklearn.datasets.fetch_20newsgroups`."""
    root = data_root(spec, paths, "sklearn")
    params = dict(spec.get("params") or {})
    subset = {"train": "train", "test": "test", "all": "all"}.get(spec.get("split", "train"), "train")
    try:
        bunch = datasets.fetch_20newsgroups(
            data_home=str(root), subset=subset, remove=tuple(params.get("remove", ())),
            download_if_missing=bool(spec.get("download")), shuffle=False,
        )
    except (OSError, ValueError) as exc:  # sklearn raises OSError when missing and download is off
        raise missing_data_error(
            "20 Newsgroups", root, "<root>/20news_home/ or <root>/20news-bydate_py3.pkz (sklearn data_home)", exc
        ) from None
    return Dataset(
        name="newsgroups20", X=list(bunch.data), y=np.asarray(bunch.target, dtype=np.int64), kind="text",
        class_names=list(bunch.target_names), meta={"source": "sklearn.datasets.fetch_20newsgroups", "split": subset},
    )
