"""The in-memory dataset every loader returns."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


def reads(*keys: str):
    """Declare the ``dataset`` keys a loader reads from its ``spec`` beyond those every dataset has
    (``name, classes, n_samples, standardize, params``): e.g. ``@reads("split", "root")``. A key
    set on the command line that the chosen loader neither declares nor receives through its
    ``params`` is refused at start-up (:mod:`pipeline.app.configuration.option_keys`)."""
    def mark(loader):
        loader.config_keys = frozenset(keys)
        return loader
    return mark


@dataclass
class Dataset:
    """A loaded dataset.

    Attributes
    ----------
    name : str
        Identifier, e.g. ``"digits"`` or ``"clustbench/sipu/r15"``.
    X : ndarray or list of str
        ``kind="tabular"``: float array of shape (n_samples, n_features);
        ``kind="image"``: uint8 array of shape (n_samples, height, width, channels);
        ``kind="text"``: list of n_samples strings.
    y : ndarray of shape (n_samples,) or None
        Ground-truth integer labels (0..C-1; -1 marks noise points), if known.
    kind : {"tabular", "image", "text"}
    feature_names : list of str, optional
        Column names for tabular data.
    class_names : list of str, optional
        Names of the ground-truth classes, indexed by label.
    images : ndarray, optional
        An image view of tabular data that are images (digits: uint8 (n, 8, 8, 1)), used for
        thumbnails and pixel-based concept detectors.
    meta : dict
        Free-form provenance (source path, subset, split, ...).
    """

    name: str
    X: object
    y: np.ndarray | None
    kind: str
    feature_names: list[str] | None = None
    class_names: list[str] | None = None
    images: np.ndarray | None = None
    meta: dict = field(default_factory=dict)
    raw: np.ndarray | None = None  # a standardised table's columns in their own units (rules print in them)

    def __post_init__(self) -> None:
        if self.kind not in ("tabular", "image", "text"):
            raise ValueError(f"Dataset.kind must be 'tabular', 'image' or 'text', got {self.kind!r}.")

    def __len__(self) -> int:
        return len(self.X)

    def subset(self, index) -> "Dataset":
        """Rows ``index`` (an int array or boolean mask) of this dataset."""
        index = np.asarray(index)
        if index.dtype == bool:
            index = np.flatnonzero(index)
        X = [self.X[i] for i in index] if self.kind == "text" else self.X[index]
        # meta["rows"]: the rows' numbers in the loaded file (so per-row side tables such as a
        # concept table stay aligned after subsetting); meta["ids"] follows the rows.
        meta = dict(self.meta)
        meta.setdefault("n_rows", len(self))
        meta["rows"] = np.asarray(self.meta.get("rows", np.arange(len(self))))[index].tolist()
        if meta.get("ids") is not None:
            meta["ids"] = [meta["ids"][i] for i in index]
        return Dataset(
            name=self.name, X=X, y=None if self.y is None else self.y[index], kind=self.kind,
            feature_names=self.feature_names, class_names=self.class_names,
            images=None if self.images is None else self.images[index], meta=meta,
            raw=None if self.raw is None else self.raw[index],
        )
