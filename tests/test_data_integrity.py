"""Datasets are verified against their published checksums before anything is unpickled (issue 16)."""

from __future__ import annotations

import io
import os
import pickle
import tarfile
from pathlib import Path

import numpy as np
import pytest

from pipeline.app.data import integrity
from pipeline.validation import InvalidInputError


class _Payload:
    """Unpickling this writes a marker file: proof that a pickle was (or was not) loaded."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_replaced_cifar10_batch_is_refused_before_unpickling(tmp_path):
    pytest.importorskip("torchvision")
    from pipeline.app.data.vision import load_cifar10

    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    marker = tmp_path / "unpickled"
    for name in integrity.cifar10_checksums():
        (folder / name).write_bytes(pickle.dumps(_Payload(marker)))
    with pytest.raises(InvalidInputError, match=r"data_batch_1 is not the published one \(md5 .* instead of c99cafc1"):
        load_cifar10({"root": str(tmp_path), "split": "train"}, {"data_dir": str(tmp_path)})
    assert not marker.exists()


def test_cifar10_files_with_the_published_md5_pass(tmp_path, monkeypatch):
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    (folder / "data_batch_1").write_bytes(b"batch")
    monkeypatch.setattr(integrity, "cifar10_checksums", lambda: {"data_batch_1": integrity.file_digest(
        folder / "data_batch_1", "md5"), "test_batch": "0" * 32})  # absent files are the loader's business
    integrity.verify_cifar10(tmp_path)
    integrity.verify_cifar10(tmp_path / "nothing-here")


GROUPS = ["comp.graphics", "rec.autos", "sci.space"]


def make_archive(path: Path, extracted: Path | None = None) -> Path:
    """A small archive with 20news-bydate's layout (and, optionally, the same files unpacked)."""
    rng = np.random.RandomState(1)
    with tarfile.open(path, "w:gz") as tar:
        for split, folder in (("train", "20news-bydate-train"), ("test", "20news-bydate-test")):
            for group in GROUPS:
                for i in rng.choice(1000, size=4, replace=False):
                    text = f"From: a@b.c\nSubject: {group} {split} {i}\n\nbody {i} \xe9\n> quoted\n".encode("latin1")
                    info = tarfile.TarInfo(f"{folder}/{group}/{50000 + i}")
                    info.size = len(text)
                    tar.addfile(info, io.BytesIO(text))
                    if extracted is not None:
                        (extracted / folder / group).mkdir(parents=True, exist_ok=True)
                        (extracted / folder / group / f"{50000 + i}").write_bytes(text)
    return path


def test_newsgroups_are_read_from_the_verified_archive_in_sklearns_order(tmp_path, monkeypatch):
    from sklearn.datasets import load_files

    from pipeline.app.data.sklearn_sets import load_newsgroups20

    archive = make_archive(tmp_path / integrity.NEWSGROUPS_ARCHIVE, tmp_path / "unpacked")
    monkeypatch.setattr(integrity, "NEWSGROUPS_SHA256", integrity.file_digest(archive, "sha256"))
    spec, paths = {"root": str(tmp_path), "split": "train"}, {"data_dir": str(tmp_path)}
    ds = load_newsgroups20(spec, paths)
    reference = load_files(tmp_path / "unpacked" / "20news-bydate-train", encoding="latin1")  # what sklearn caches
    assert ds.X == reference.data and ds.y.tolist() == reference.target.tolist()
    assert ds.class_names == GROUPS == reference.target_names
    stripped = load_newsgroups20(spec, paths, remove=("headers", "quotes"))
    assert all("Subject" not in t and "quoted" not in t for t in stripped.X)
    both = load_newsgroups20({**spec, "split": "all"}, paths)
    assert len(both.X) == 2 * len(ds.X) and both.X[: len(ds.X)] == ds.X


def test_a_different_newsgroups_archive_is_refused(tmp_path):
    make_archive(tmp_path / integrity.NEWSGROUPS_ARCHIVE)
    with pytest.raises(InvalidInputError, match="is not the published one .sha256"):
        integrity.read_newsgroups(tmp_path, "train")


def test_sklearns_pickle_cache_is_never_loaded(tmp_path):
    from pipeline.app.data.sklearn_sets import load_newsgroups20

    marker = tmp_path / "unpickled"
    (tmp_path / integrity.NEWSGROUPS_PICKLE).write_bytes(pickle.dumps(_Payload(marker)))
    with pytest.raises(InvalidInputError, match="pickle cannot be verified") as info:
        load_newsgroups20({"root": str(tmp_path)}, {"data_dir": str(tmp_path)})
    assert "dataset.download=true" in str(info.value) and not marker.exists()


def test_failed_newsgroups_download_is_one_clear_error(tmp_path, monkeypatch):
    def offline(root):
        raise OSError("Name or service not known")

    monkeypatch.setattr(integrity, "fetch_newsgroups_archive", offline)
    with pytest.raises(InvalidInputError, match="could not be downloaded .* by hand"):
        integrity.read_newsgroups(tmp_path, "train", download=True)
