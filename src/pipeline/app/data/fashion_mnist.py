"""Fashion-MNIST (Xiao, Rasul & Vollgraf 2017): 70,000 28x28 grey images of 10 clothing classes.

Read from the four original IDX files (optionally gzipped) under ``dataset.root``; the default
is Debian's package ``dataset-fashion-mnist`` (``apt-get install dataset-fashion-mnist``, MIT,
31 MB), which puts them in ``/usr/share/datasets/fashion-mnist``, else
``<paths.data_dir>/fashion-mnist``. ``dataset.split``: ``train`` (60,000), ``test`` (10,000) or
``all`` (both, training images first). ``dataset.classes=[...]`` and ``dataset.n_samples`` work as
everywhere, the subsample is stratified by class here.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from pipeline.app.data.dataset import Dataset, reads
from pipeline.app.data.mnist import _read_idx
from pipeline.validation import InvalidInputError

log = logging.getLogger(__name__)

CLASS_NAMES = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag",
               "Ankle boot"]
DEBIAN_ROOT = Path("/usr/share/datasets/fashion-mnist")
DEBIAN_PACKAGE = "dataset-fashion-mnist"
_PREFIX = {"train": "train", "test": "t10k"}


def default_root(spec: dict, paths: dict) -> Path:
    """``dataset.root``, else Debian's location when present, else ``<paths.data_dir>/fashion-mnist``."""
    if spec.get("root"):
        return Path(str(spec["root"])).expanduser()
    if DEBIAN_ROOT.is_dir():
        return DEBIAN_ROOT
    return Path(paths["data_dir"]).expanduser() / "fashion-mnist"


def missing_error(root: Path, detail: str) -> InvalidInputError:
    return InvalidInputError(
        f"Fashion-MNIST not found under {root}: {detail}. The pipeline reads the four original IDX files "
        "{train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]. On Debian/Ubuntu install them with `apt-get install "
        f"{DEBIAN_PACKAGE}` (they land in {DEBIAN_ROOT}, the default); elsewhere download them from "
        "https://github.com/zalandoresearch/fashion-mnist (data/fashion) and point dataset.root=<dir> at the folder "
        "holding them.")


def read_split(root: Path, split: str) -> tuple[np.ndarray, np.ndarray]:
    """Images uint8 (n, 28, 28) and labels int64 of one split under ``root``."""
    found = {}
    for kind in ("images-idx3", "labels-idx1"):
        name = f"{_PREFIX[split]}-{kind}-ubyte"
        path = next((p for p in (root / name, root / f"{name}.gz") if p.is_file()), None)
        if path is None:
            present = sorted(p.name for p in root.glob("*-ubyte*")) if root.is_dir() else []
            raise missing_error(root, f"{name}[.gz] is missing (found {present or 'no IDX files'})")
        found[kind] = _read_idx(path, "Fashion-MNIST").copy()  # writable (torch takes it without a copy warning)
    X, y = found["images-idx3"], found["labels-idx1"]
    if X.ndim != 3 or X.shape[1:] != (28, 28) or y.ndim != 1 or len(X) != len(y) or (len(y) and y.max() > 9):
        raise InvalidInputError(f"the Fashion-MNIST {split} files under {root} do not match: images {X.shape}, labels "
                                f"{y.shape} (expected (n, 28, 28) and (n,) with labels 0..9); re-copy them.")
    return X, y.astype(np.int64)


@reads("split", "root")
def load_fashion_mnist(spec: dict, paths: dict, random_state: int = 0) -> Dataset:
    """Fashion-MNIST as uint8 images (n, 28, 28, 1) with the ten class names."""
    split = str(spec.get("split", "train"))
    if split not in ("train", "test", "all"):
        raise InvalidInputError(f"dataset.split={split!r} is not a Fashion-MNIST split; use train, test or all.")
    root = default_root(spec, paths)
    if not root.is_dir():
        raise missing_error(root, "no such folder")
    parts = [read_split(root, s) for s in (("train", "test") if split == "all" else (split,))]
    X = np.concatenate([p[0] for p in parts])[..., None]
    y = np.concatenate([p[1] for p in parts])
    bad = [c for c in (spec.get("classes") or []) if not (isinstance(c, int) and 0 <= c < len(CLASS_NAMES))]
    if bad:
        raise InvalidInputError(f"dataset.classes={list(spec['classes'])}: {bad} out of range; Fashion-MNIST classes "
                                f"are 0..9: " + ", ".join(f"{i} {n}" for i, n in enumerate(CLASS_NAMES)) + ".")
    log.info("Fashion-MNIST %s: %d images from %s", split, len(y), root)
    return Dataset(name="fashion_mnist", X=X, y=y, kind="image", class_names=list(CLASS_NAMES),
                   meta={"split": split, "source": str(root), "stratify": True})
