"""Image datasets through torchvision: MNIST, CIFAR-10, Caltech-101 (uint8 (n, H, W, C))."""

from __future__ import annotations

import logging

import numpy as np

from pipeline.app.data.dataset import Dataset, reads
from pipeline.app.data.integrity import verify_cifar10
from pipeline.app.data.loading import data_root, missing_data_error

log = logging.getLogger(__name__)


def _open(factory, what: str, root, layout: str, download: bool, **kwargs):
    """Instantiate a torchvision dataset, turning 'not found' / failed downloads into one clear error."""
    try:
        return factory(root=str(root), download=download, **kwargs)
    except Exception as exc:  # torchvision raises RuntimeError (missing) or URLError/OSError (offline download)
        raise missing_data_error(what, root, layout, exc) from None


@reads("split", "download", "root")
def load_mnist(spec: dict, paths: dict, random_state: int = 0) -> Dataset:
    from torchvision.datasets import MNIST

    root = data_root(spec, paths, "mnist")
    train = spec.get("split", "train") == "train"
    ds = _open(MNIST, "MNIST", root, "<root>/MNIST/raw/{train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]",
               bool(spec.get("download")), train=train)
    X = ds.data.numpy().astype(np.uint8)[..., None]
    return Dataset(name="mnist", X=X, y=ds.targets.numpy().astype(np.int64), kind="image",
                   class_names=[str(c) for c in range(10)], meta={"split": spec.get("split", "train")})


@reads("split", "download", "root")
def load_cifar10(spec: dict, paths: dict, random_state: int = 0) -> Dataset:
    from torchvision.datasets import CIFAR10

    root = data_root(spec, paths, "cifar10")
    verify_cifar10(root)  # published md5s checked before torchvision unpickles the batches
    train = spec.get("split", "train") == "train"
    ds = _open(CIFAR10, "CIFAR-10", root, "<root>/cifar-10-batches-py/{data_batch_1..5,test_batch,batches.meta}",
               bool(spec.get("download")), train=train)
    return Dataset(name="cifar10", X=np.asarray(ds.data, dtype=np.uint8), y=np.asarray(ds.targets, dtype=np.int64),
                   kind="image", class_names=list(ds.classes), meta={"split": spec.get("split", "train")})


def resize_rgb(image, size: int) -> np.ndarray:
    """A PIL image as uint8 RGB array of shape (size, size, 3)."""
    from PIL import Image

    return np.asarray(image.convert("RGB").resize((size, size), Image.BILINEAR), dtype=np.uint8)


@reads("download", "root")
def load_caltech101(spec: dict, paths: dict, random_state: int = 0, image_size: int = 64) -> Dataset:
    from torchvision.datasets import Caltech101
    from pipeline.progress import tqdm

    root = data_root(spec, paths, "caltech101")
    size = int(image_size)
    ds = _open(Caltech101, "Caltech-101", root, "<root>/caltech101/101_ObjectCategories/<category>/*.jpg",
               bool(spec.get("download")), target_type="category")
    X = np.empty((len(ds), size, size, 3), dtype=np.uint8)
    y = np.empty(len(ds), dtype=np.int64)
    for i in tqdm(range(len(ds)), desc="caltech101", leave=False):
        image, y[i] = ds[i]
        X[i] = resize_rgb(image, size)
    return Dataset(name="caltech101", X=X, y=y, kind="image", class_names=list(ds.categories),
                   meta={"image_size": size})
