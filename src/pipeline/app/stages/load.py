"""Stage ``load``: dataset config -> the dataset (features/images/texts, labels, names)."""

from __future__ import annotations

import numpy as np

from pipeline.app.data.dataset import Dataset
from pipeline.app.data.loading import load_dataset
from pipeline.app.stages.base import Stage

# The dataset fields that determine the data (download does not; root does, as the source).
_KEY_FIELDS = ("_target_", "name", "split", "classes", "n_samples", "standardize", "params")


def dataset_to_artifact(ds: Dataset) -> dict:
    out = {"name": ds.name, "kind": ds.kind, "feature_names": ds.feature_names, "class_names": ds.class_names,
           "meta": ds.meta}
    if ds.kind == "text":
        out["texts"] = list(ds.X)
    else:
        out["X"] = np.asarray(ds.X)
    if ds.y is not None:
        out["y"] = np.asarray(ds.y, dtype=np.int64)
    if ds.images is not None:
        out["images"] = ds.images
    return out


def artifact_to_dataset(a: dict) -> Dataset:
    X = a["texts"] if a["kind"] == "text" else a["X"]
    return Dataset(name=a["name"], X=X, y=a.get("y"), kind=a["kind"], feature_names=a.get("feature_names"),
                   class_names=a.get("class_names"), images=a.get("images"), meta=a.get("meta") or {})


def _config(cfg: dict) -> dict:
    key = {k: cfg["dataset"].get(k) for k in _KEY_FIELDS}
    key["seed"] = cfg["seed"]  # subsamples and generated data depend on it
    # Where the data come from (a different local copy is different data).
    key["source"] = cfg["dataset"].get("root") or {k: cfg["paths"].get(k) for k in ("data_dir", "benchmark_dir")}
    return key


def _compute(cfg: dict) -> dict:
    return dataset_to_artifact(load_dataset(cfg["dataset"], cfg["paths"], cfg["seed"]))


LOAD = Stage("load", (), _config, _compute)
