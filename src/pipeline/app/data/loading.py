"""Loading a dataset from its config: the loader named by ``dataset._target_`` + the generic options.

A loader is any callable ``fn(spec: dict, paths: dict, random_state: int, **params) -> Dataset``
where ``spec`` is the ``dataset`` config as a plain dict, ``paths`` the ``paths`` config and
``params`` the ``dataset.params`` (bound through :func:`pipeline.app.configuration.instantiate.factory`).
:func:`load_dataset` then applies the generic options (class subset, subsample,
standardisation) the same way for every loader. A new dataset is one loader function plus one
``conf/dataset/<name>.yaml`` naming it in ``_target_``; nothing is registered.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Callable

import numpy as np

from pipeline.app.data.dataset import Dataset
from pipeline.app.configuration.instantiate import call, factory
from pipeline.validation import InvalidInputError

log = logging.getLogger(__name__)

Loader = Callable[[dict, dict, int], Dataset]

def data_root(spec: dict, paths: dict, default_subdir: str) -> Path:
    """``dataset.root`` if set, else ``<paths.data_dir>/<default_subdir>``."""
    return Path(spec.get("root") or Path(paths["data_dir"]) / default_subdir).expanduser()


LOCAL_COPY_KEYS = "dataset.root=<dir> (or paths.data_dir=<dir> / env PIPELINE_DATA_DIR)"


def missing_data_error(what: str, root: Path, layout: str, exc: Exception | None = None, *,
                       keys: str = LOCAL_COPY_KEYS, downloadable: bool = True) -> InvalidInputError:
    """The one-paragraph error for data that are absent and could not be fetched."""
    reason = f" ({type(exc).__name__}: {exc})" if exc is not None else ""
    download = (", or allow the download with dataset.download=true where the machine has internet"
                if downloadable else "")
    return InvalidInputError(
        f"{what} not found under {root}{reason}. Expected layout: {layout}. "
        f"Point the pipeline at a local copy with {keys}{download}."
    )


def load_dataset(spec: dict, paths: dict, random_state: int = 0) -> Dataset:
    """Load the dataset described by ``spec`` and apply classes / n_samples / standardize."""
    ds = call(factory(spec, "dataset"), "dataset", spec, paths, random_state)
    if not isinstance(ds, Dataset):
        raise InvalidInputError(f"dataset._target_={spec.get('_target_')} returned {type(ds).__name__}, not a "
                                "pipeline.app.data.Dataset.")
    if spec.get("classes"):
        ds = select_classes(ds, list(spec["classes"]))
    n = spec.get("n_samples")
    if n is not None and n > len(ds):
        which = f" of the classes {list(spec['classes'])}" if spec.get("classes") else ""
        raise InvalidInputError(
            f"dataset.n_samples={n}, but {ds.name} has only {len(ds)} samples{which}; a subsample cannot be larger. "
            f"Use dataset.n_samples <= {len(ds)}, or dataset.n_samples=null for all of them."
        )
    if n is not None and n < len(ds):
        ds = ds.subset(subsample(ds, int(n), random_state))
    standardize = spec.get("standardize")
    if standardize is None:  # dataset=files: a table's columns are in their own units, embeddings are not
        standardize = ds.kind == "tabular" and bool(ds.meta.get("table"))
        if standardize:
            log.info("%s: the table's columns are standardised for clustering (dataset.standardize=false keeps "
                     "them raw); the rules still read in the table's own units", ds.name)
    if standardize:
        if ds.kind != "tabular":
            raise InvalidInputError(f"dataset.standardize=true only applies to tabular data; {ds.name} is {ds.kind}.")
        ds.raw = np.asarray(ds.X, dtype=np.float64)
        ds.X, ds.meta["standardized"] = standardize_columns(ds.raw, ds.feature_names)
    if len(ds) < 2:
        raise InvalidInputError(f"dataset {ds.name} has {len(ds)} sample(s) after subsetting; need at least 2.")
    log.info("loaded %s: %d samples (%s)", ds.name, len(ds), ds.kind)
    return ds


def standardize_columns(X, names=None) -> tuple[np.ndarray, dict]:
    """(z-scored columns, their record ``{"mean", "sd", "scaled"}``) of the table ``X``.

    A column is kept as it is (``scaled`` False), with a warning, when it is constant (z-scores
    would divide by 0; it cannot separate clusters either way) or when z-scoring would merge
    distinct values (an offset that dwarfs the spread, e.g. 1e16 + small): then every printed
    threshold can still be mapped back exactly to the table's units.
    """
    X = np.asarray(X, dtype=np.float64)
    names = list(names) if names is not None else [f"x{j}" for j in range(X.shape[1])]
    mean, sd = X.mean(axis=0), X.std(axis=0)
    Z = X.copy()
    scaled = np.zeros(X.shape[1], dtype=bool)
    for j in range(X.shape[1]):
        if not (sd[j] > 0 and np.isfinite(sd[j])):
            log.warning("column %r is constant (every row %s): it is kept unscaled, since z-scores would divide by "
                        "0, and it cannot separate clusters; the rest of the table is standardised. Leave it out with "
                        "dataset.feature_names=[<the other columns>].", names[j], f"{X[0, j]:g}" if len(X) else "-")
            continue
        z = (X[:, j] - mean[j]) / sd[j]
        if np.unique(z).size < np.unique(X[:, j]).size:
            log.warning("column %r is kept unscaled: z-scores would merge distinct values (its offset %g dwarfs its "
                        "spread %g).", names[j], mean[j], sd[j])
            continue
        Z[:, j], scaled[j] = z, True
    return Z, {"mean": mean.tolist(), "sd": sd.tolist(), "scaled": scaled.tolist()}


def apply_standardization(X, record: dict) -> np.ndarray:
    """New rows ``X`` z-scored as :func:`standardize_columns` z-scored the run's table (its
    ``record``: the run's means and spreads; columns it kept unscaled stay as they are)."""
    Z = np.array(X, dtype=np.float64)
    for j, scaled in enumerate(record["scaled"]):
        if scaled:
            Z[:, j] = (Z[:, j] - record["mean"][j]) / record["sd"][j]
    return Z


def subsample(ds: Dataset, n: int, random_state: int) -> np.ndarray:
    """Sorted row numbers of a random subsample of ``n`` rows; stratified by class when the loader
    asks for it (``meta["stratify"]``: every class keeps its share, e.g. Fashion-MNIST)."""
    if ds.meta.get("stratify") and ds.y is not None and n >= len(np.unique(ds.y)):
        from sklearn.model_selection import train_test_split

        keep, _ = train_test_split(np.arange(len(ds)), train_size=n, stratify=ds.y, random_state=random_state)
        return np.sort(keep)
    rng = np.random.RandomState(random_state)
    return np.sort(rng.choice(len(ds), size=n, replace=False))


def select_classes(ds: Dataset, classes: list[int]) -> Dataset:
    """Rows whose ground-truth class is in ``classes``, relabelled 0..len(classes)-1 in that order."""
    if ds.y is None:
        raise InvalidInputError(f"dataset.classes needs ground-truth labels, but {ds.name} has none.")
    present = set(np.unique(ds.y).tolist())
    unknown = [c for c in classes if c not in present]
    if unknown:
        raise InvalidInputError(
            f"dataset.classes {unknown} do not occur in {ds.name}; its classes are {sorted(present)}."
        )
    sub = ds.subset(np.isin(ds.y, classes))
    remap = {c: i for i, c in enumerate(classes)}
    sub.y = np.array([remap[int(c)] for c in sub.y], dtype=np.int64)
    if ds.class_names is not None:
        sub.class_names = [ds.class_names[c] for c in classes]
    sub.meta["classes"] = list(classes)
    return sub
