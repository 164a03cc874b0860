"""Published checksums of downloaded datasets, verified before anything is read.

Two loaders would otherwise unpickle files found on disk: torchvision's CIFAR-10 (its batches
are Python pickles) and scikit-learn's 20 Newsgroups fetcher (a zlib-compressed pickle cache it
writes after the download). A pickle can run arbitrary code when loaded, so a file someone put
in ``dataset.root`` must be the published one before it is opened:

- CIFAR-10: every file of ``cifar-10-batches-py/`` is checked against the md5 that torchvision
  ships (the checksums published with the dataset) before torchvision opens any of them;
- 20 Newsgroups: the original archive ``20news-bydate.tar.gz`` is checked against the sha256
  scikit-learn publishes for it, and the posts are read straight from the archive (plain text,
  no pickle). scikit-learn's own pickle cache (``20news-bydate_py3.pkz``) is never loaded.
"""

from __future__ import annotations

import logging
import tarfile
from pathlib import Path

import numpy as np

from pipeline.app.stores.cache import file_digest
from pipeline.validation import InvalidInputError

log = logging.getLogger(__name__)

NEWSGROUPS_ARCHIVE = "20news-bydate.tar.gz"
NEWSGROUPS_SHA256 = "8f1b2514ca22a5ade8fbb9cfa5727df95fa587f4c87b786e15c759fa66d95610"  # sklearn's ARCHIVE.checksum
NEWSGROUPS_URL = "https://ndownloader.figshare.com/files/5975967"
NEWSGROUPS_PICKLE = "20news-bydate_py3.pkz"
CIFAR10_FOLDER = "cifar-10-batches-py"


def cifar10_checksums() -> dict[str, str]:
    """file name -> md5 of the published CIFAR-10 python batches (from torchvision)."""
    from torchvision.datasets import CIFAR10

    return {**dict(CIFAR10.train_list), **dict(CIFAR10.test_list), CIFAR10.meta["filename"]: CIFAR10.meta["md5"]}


def verify_cifar10(root: Path) -> None:
    """Raise unless every present file of ``<root>/cifar-10-batches-py/`` has its published md5.

    A missing folder or missing files are left to the loader ('not found' / download). A file
    with another checksum is refused before anything is unpickled.
    """
    folder = Path(root) / CIFAR10_FOLDER
    if not folder.is_dir():
        return
    for name, md5 in cifar10_checksums().items():
        path = folder / name
        found = file_digest(path, "md5") if path.is_file() else md5
        if found != md5:
            raise InvalidInputError(
                f"CIFAR-10 file {path} is not the published one (md5 {found} instead of {md5}); "
                "it is corrupted or was replaced, and CIFAR-10 batches are pickles, so it is not opened. Delete "
                f"{folder} and download again (dataset.download=true), or restore the original files."
            )


def verify_newsgroups_archive(path: Path) -> None:
    """Raise unless ``path`` has the sha256 scikit-learn publishes for 20news-bydate.tar.gz."""
    found = file_digest(path, "sha256")
    if found != NEWSGROUPS_SHA256:
        raise InvalidInputError(
            f"20 Newsgroups archive {path} is not the published one (sha256 {found[:16]}... instead of "
            f"{NEWSGROUPS_SHA256[:16]}...); it is truncated, corrupted or another file. Delete it and download again "
            f"(dataset.download=true) or put the original {NEWSGROUPS_ARCHIVE} from {NEWSGROUPS_URL} there."
        )


def fetch_newsgroups_archive(root: Path) -> Path:
    """Download the archive into ``root`` (scikit-learn's fetcher checks the sha256)."""
    from sklearn.datasets._base import RemoteFileMetadata, _fetch_remote

    root.mkdir(parents=True, exist_ok=True)
    meta = RemoteFileMetadata(filename=NEWSGROUPS_ARCHIVE, url=NEWSGROUPS_URL, checksum=NEWSGROUPS_SHA256)
    log.info("downloading 20 Newsgroups (14 MB) from %s", NEWSGROUPS_URL)
    return Path(_fetch_remote(meta, dirname=str(root)))


def read_newsgroups(root: Path, subset: str, download: bool = False) -> tuple[list[str], np.ndarray, list[str]]:
    """Posts, labels and newsgroup names of ``subset`` (train | test | all) from the verified archive.

    The order is scikit-learn's (``fetch_20newsgroups(shuffle=False)``: its cache lists each
    split's files by sorted group and name, then shuffled with ``RandomState(0)``).
    """
    root = Path(root)
    archive = root / NEWSGROUPS_ARCHIVE
    if not archive.is_file():
        if not download:
            pickle_note = (f" Found scikit-learn's pickle cache {root / NEWSGROUPS_PICKLE}, which is not loaded: a "
                           "pickle cannot be verified against a published checksum."
                           if (root / NEWSGROUPS_PICKLE).exists() else "")
            raise InvalidInputError(
                f"20 Newsgroups archive {archive} not found.{pickle_note} Put the original {NEWSGROUPS_ARCHIVE} "
                f"({NEWSGROUPS_URL}, sha256 {NEWSGROUPS_SHA256[:16]}...) in {root} (dataset.root=<dir> or "
                "paths.data_dir=<dir>), or allow the download with dataset.download=true where the machine has internet."
            )
        try:
            archive = fetch_newsgroups_archive(root)
        except Exception as exc:  # noqa: BLE001 - URLError, OSError (checksum), HTTPError ...
            raise InvalidInputError(f"20 Newsgroups could not be downloaded to {root} ({type(exc).__name__}: {exc}); "
                                    f"put the original {NEWSGROUPS_ARCHIVE} there by hand.") from None
    verify_newsgroups_archive(archive)
    splits = {"train": "20news-bydate-train", "test": "20news-bydate-test"}
    files: dict[str, dict[str, dict[str, bytes]]] = {s: {} for s in splits}
    with tarfile.open(archive, "r:gz") as tar:
        for member in tar:
            parts = Path(member.name).parts
            if not member.isfile() or len(parts) != 3:
                continue
            split = next((s for s, folder in splits.items() if parts[0] == folder), None)
            if split is not None:
                files[split].setdefault(parts[1], {})[parts[2]] = tar.extractfile(member).read()
    texts, target, names = [], [], []
    for split in (["train", "test"] if subset == "all" else [subset]):
        names = sorted(files[split])
        docs = [(label, files[split][group][f]) for label, group in enumerate(names) for f in sorted(files[split][group])]
        order = np.arange(len(docs))
        np.random.RandomState(0).shuffle(order)  # what sklearn.datasets.load_files(random_state=0) does
        texts += [docs[i][1].decode("latin1") for i in order]
        target += [docs[i][0] for i in order]
    if not texts:
        raise InvalidInputError(f"20 Newsgroups archive {archive} holds no posts under {splits[subset if subset != 'all' else 'train']}/.")
    return texts, np.asarray(target, dtype=np.int64), names
