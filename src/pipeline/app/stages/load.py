"""Stage ``load``: dataset config -> the dataset (features/images/texts, labels, names)."""

from __future__ import annotations

import numpy as np

from pipeline.app.stores.artifacts import LoadArtifact
from pipeline.app.data.chunked import as_array
from pipeline.app.data.dataset import Dataset
from pipeline.app.data.loading import load_dataset
from pipeline.app.stages.framework import Stage

# The dataset fields that determine the data (download does not; root does, as the source).
_KEY_FIELDS = ("_target_", "name", "split", "classes", "n_samples", "standardize", "params")
# Fields a loader may read from its spec (pipeline.app.data.dataset.reads) that change the data:
# in the key only when set and not already in params, so every other config keeps its key
_KEY_WHEN_SET = ("image_size",)  # dataset=digits dataset.image_size=28 (issue 50)


def dataset_to_artifact(ds: Dataset) -> LoadArtifact:
    return LoadArtifact(name=ds.name, kind=ds.kind, feature_names=ds.feature_names, class_names=ds.class_names,
                        meta=ds.meta, texts=list(ds.X) if ds.kind == "text" else None,
                        X=None if ds.kind == "text" else as_array(ds.X),
                        y=None if ds.y is None else np.asarray(ds.y, dtype=np.int64), images=ds.images,
                        raw=ds.raw)


def artifact_to_dataset(a: LoadArtifact) -> Dataset:
    return Dataset(name=a.name, X=a.inputs, y=a.y, kind=a.kind, feature_names=a.feature_names,
                   class_names=a.class_names, images=a.images, meta=a.meta or {}, raw=a.raw)


def _config(cfg: dict) -> dict:
    key = {k: cfg["dataset"].get(k) for k in _KEY_FIELDS}
    key.update({k: cfg["dataset"][k] for k in _KEY_WHEN_SET
                if cfg["dataset"].get(k) is not None and k not in (cfg["dataset"].get("params") or {})})
    key["seed"] = cfg["seed"]  # subsamples and generated data depend on it
    # Where the data come from (a different local copy is different data).
    key["source"] = cfg["dataset"].get("root") or {k: cfg["paths"].get(k) for k in ("data_dir", "benchmark_dir")}
    return key


def _compute(cfg: dict) -> LoadArtifact:
    return dataset_to_artifact(load_dataset(cfg["dataset"], cfg["paths"], cfg["seed"]))


def reads_by_row_range(cfg: dict) -> bool:
    """True when ``dataset.path`` is an array the run reads by row range (a 2-D float ``.npy``,
    ``.npy``/``.parquet`` shards, zarr): loading it opens headers only, so it is not cached (the
    file is its own cache; its fingerprint is in every key downstream)."""
    ds = cfg["dataset"]
    if not ds.get("path") or ds.get("classes") or ds.get("n_samples"):
        return False  # no file, or a subset loaded into memory (and cached) as before
    from pipeline.app.configuration.instantiate import locate

    reads = getattr(locate(ds["_target_"], "dataset"), "reads_by_row_range", None)  # the loader says which paths
    return bool(reads is not None and reads(ds["path"]))


# version 2: entries written before dataset.n_samples above the dataset's size became an error
# (issue 29) held the whole dataset under that key; they must not hit any more.
LOAD = Stage("load", (), _config, _compute, version=2, artifact=LoadArtifact)


def load_stage(cfg: dict) -> Stage:
    """The load stage of ``cfg``: not cached when it reads an array by row range (the file is its own cache)."""
    import dataclasses

    return dataclasses.replace(LOAD, cached=not reads_by_row_range(cfg))
