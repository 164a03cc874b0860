"""Find, verify and (if allowed) download the files of a concept dataset.

A manifest (the ``manifest:`` block of a concept YAML file) lists the files a concept set
needs (``path``, optionally ``size_bytes``, ``sha256``, ``lines``), the archives that
provide them (``url``, ``strip``: top folder inside the archive, ``size_bytes``,
``sha256``), the config key that points at a local copy and manual instructions. When a
file is missing and downloading fails (no internet, moved URL), the error names the
config key and says how to get the data by hand.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import urllib.request
import zipfile
from pathlib import Path

from pipeline.app.stores.cache import file_digest
from pipeline.validation import InvalidInputError

log = logging.getLogger(__name__)


def sha256(path: Path) -> str:
    """Hex sha256 of a downloaded file (:func:`pipeline.app.stores.cache.file_digest`)."""
    return file_digest(path, "sha256")


def missing_files(manifest: dict, root: Path) -> list[str]:
    return [f["path"] for f in manifest.get("files", []) if not (Path(root) / f["path"]).exists()]


def verify_files(manifest: dict, root: Path) -> None:
    """Raise InvalidInputError if a listed file is missing or differs from its size,
    checksum or line count; files without a recorded checksum get theirs logged."""
    root = Path(root)
    key = manifest.get("config_key", "concepts.root")
    missing = missing_files(manifest, root)
    if missing:
        raise InvalidInputError(
            f"concept files {missing} not found under {root}. {manifest.get('manual', '')} "
            f"Set {key}=/path/to/local/copy to use a local copy."
        )
    for f in manifest.get("files", []):
        p = root / f["path"]
        if p.is_dir():
            continue
        if f.get("size_bytes") is not None and p.stat().st_size != int(f["size_bytes"]):
            raise InvalidInputError(f"{p} has {p.stat().st_size} bytes, expected {f['size_bytes']}; "
                                    f"the copy is incomplete or a different version — re-download it.")
        if f.get("lines") is not None:
            n = sum(1 for line in p.read_text(errors="replace").splitlines() if line.strip())
            if n != int(f["lines"]):
                raise InvalidInputError(f"{p} has {n} non-empty lines, expected {f['lines']}; "
                                        "is this the right dataset version?")
        if f.get("sha256"):
            digest = sha256(p)
            if digest != f["sha256"]:
                raise InvalidInputError(f"{p} has sha256 {digest}, expected {f['sha256']}; re-download it.")
        else:
            log.debug("%s: no checksum recorded in the manifest", p)


def ensure_files(manifest: dict, root, *, download: bool = True) -> Path:
    """Return ``root`` once every manifest file is present and valid.

    Missing files are fetched from the manifest's archives when ``download`` is true;
    any failure ends in an InvalidInputError naming the config key of a local copy.
    """
    root = Path(root)
    key = manifest.get("config_key", "concepts.root")
    if missing_files(manifest, root) and download and manifest.get("archives"):
        errors = []
        for archive in manifest["archives"]:
            try:
                _fetch(archive, root)
            except Exception as exc:  # network, checksum, bad archive: report all attempts
                errors.append(f"{archive.get('url')}: {exc}")
        if missing_files(manifest, root):
            raise InvalidInputError(
                f"could not download the concept files into {root} ({'; '.join(errors) or 'no archive'}). "
                f"{manifest.get('manual', '')} Then set {key}=/path/to/local/copy."
            )
    verify_files(manifest, root)
    return root


def _fetch(archive: dict, root: Path) -> None:
    url = archive["url"]
    log.info("downloading %s", url)
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=root.parent) as tmp:
        target = Path(tmp) / Path(url).name
        with urllib.request.urlopen(url, timeout=30) as response, open(target, "wb") as out:
            shutil.copyfileobj(response, out)
        if archive.get("size_bytes") is not None and target.stat().st_size != int(archive["size_bytes"]):
            raise InvalidInputError(f"downloaded {target.stat().st_size} bytes, expected {archive['size_bytes']}")
        digest = sha256(target)
        if archive.get("sha256") and digest != archive["sha256"]:
            raise InvalidInputError(f"sha256 {digest} does not match the manifest ({archive['sha256']})")
        log.info("%s: sha256 %s", url, digest)
        with zipfile.ZipFile(target) as zf:
            strip = (archive.get("strip") or "").strip("/")
            for member in zf.infolist():
                name = member.filename
                if strip and name.startswith(strip + "/"):
                    name = name[len(strip) + 1:]
                dest = (root / name).resolve()
                if not name or member.is_dir() or root.resolve() not in dest.parents:
                    continue  # skip folders and anything that would escape root
                dest.parent.mkdir(parents=True, exist_ok=True)
                with zf.open(member) as src, open(dest, "wb") as out:
                    shutil.copyfileobj(src, out)


def resolve_root(spec: dict, data_dir=None) -> Path:
    """Local folder of a downloaded concept dataset: ``root`` option, else the manifest's
    ``default_root`` under ``data_dir``; verified (and fetched if allowed) via the manifest."""
    manifest = spec.get("manifest") or {}
    root = spec.get("root") or manifest.get("default_root")
    if root is None:
        raise InvalidInputError(f"concept set {spec['name']!r} needs concepts.root=/path/to/its/files.")
    root = Path(root)
    if not root.is_absolute():
        root = Path(spec.get("data_dir") or data_dir or ".") / root
    return ensure_files(manifest, root, download=bool(spec.get("download", True)))
