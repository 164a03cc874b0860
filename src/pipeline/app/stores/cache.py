"""The stage cache: one directory shared by every run and sweep job.

Each stage's artifact is stored under ``<cache_dir>/<stage>/<key>/`` where ``key`` hashes the
part of the config that determines the stage and the keys of its inputs, so a change upstream
changes every key downstream. An artifact is a flat ``dict``: numpy arrays go to
``arrays.npz``, everything else (JSON-able) to ``meta.json``, and ``manifest.json`` records
the size and sha256 of both.

Concurrency, crashes and damage:

- a file lock per (stage, key) makes parallel jobs wait for one another instead of computing
  or writing the same artifact twice;
- an artifact is written to a temporary directory, every file and the directory are fsynced,
  and the directory is renamed into place (then the parent is fsynced), so a killed run or a
  power cut never leaves a half-written artifact and the next run resumes from the last
  finished stage;
- reading verifies the manifest's checksums; an entry that is truncated, damaged or partial
  is logged with its stage and key, moved to ``<cache_dir>/.quarantine/`` and recomputed, so
  the run succeeds with a warning instead of failing on every later run.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np
from filelock import FileLock

from pipeline.app.stores.writing import MOVE_CACHE, write_failed
from pipeline.validation import InvalidInputError

log = logging.getLogger(__name__)

Artifact = dict

MANIFEST = "manifest.json"
QUARANTINE = ".quarantine"


class CorruptArtifactError(Exception):
    """A cache entry whose files are missing, truncated or do not match their checksums."""


def make_key(stage: str, config: Any, inputs: Iterable[str] = (), version: int = 1) -> str:
    """Deterministic key (20 hex chars) of a stage's determining config and input keys (a moved
    module's dotted path written as before its move: :func:`pipeline.app.configuration.instantiate.stored_paths`)."""
    from pipeline.app.configuration.instantiate import stored_paths

    payload = json.dumps(
        {"stage": stage, "version": version, "config": stored_paths(config), "inputs": list(inputs)},
        sort_keys=True, default=str,
    )
    return hashlib.sha256(payload.encode()).hexdigest()[:20]


def portable(config: Any, roots: dict) -> Any:
    """``config`` with every absolute path under one of ``roots`` written relative to that root.

    ``roots`` maps names to directories (the run's ``paths`` config); a value such as
    ``/home/me/project/models/vade/pretrain`` becomes ``${paths.models_dir}/vade/pretrain``
    (the longest matching root wins). Keys built from the result do not change when a root
    moves, so moving ``models/`` or the cache, or setting ``PIPELINE_MODELS_DIR``, costs
    nothing. ``output_dir`` (different for every run) is never used as a root.
    """
    def norm(p: str) -> str:
        return os.path.normpath(os.path.abspath(os.path.expanduser(p)))

    bases = sorted(((name, norm(str(root))) for name, root in (roots or {}).items()
                    if isinstance(root, str) and root and name != "output_dir"), key=lambda nr: -len(nr[1]))

    def walk(value):
        if isinstance(value, dict):
            return {k: walk(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [walk(v) for v in value]
        if isinstance(value, str) and value.startswith(("/", "~")):
            path = norm(value)
            for name, base in bases:
                if path == base or path.startswith(base.rstrip(os.sep) + os.sep):
                    rel = os.path.relpath(path, base)
                    return "${paths." + name + "}" + ("" if rel == "." else "/" + rel)
        return value

    return walk(config)


def localize(value: str, roots: dict) -> str:
    """Inverse of :func:`portable` for one string: ``${paths.models_dir}/x`` -> ``<models_dir>/x``."""
    if isinstance(value, str) and value.startswith("${paths."):
        name, _, rest = value[len("${paths."):].partition("}")
        if roots.get(name):
            return str(Path(os.path.expanduser(str(roots[name]))) / rest.lstrip("/"))
    return value


def file_digest(path: str | os.PathLike, algorithm: str = "sha256") -> str:
    """Hex digest of a file's bytes (read in 1 MiB blocks)."""
    digest = hashlib.new(algorithm)
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def checked_sha256(path: str | os.PathLike, recorded, sidecar_name: str) -> str:
    """The sha256 of checkpoint ``path``, which must equal the ``recorded`` one of its sidecar."""
    sha = file_digest(path, "sha256")
    if sha != recorded:
        raise InvalidInputError(
            f"checkpoint {path} is corrupted, truncated or was replaced: its sha256 {sha[:12]}... does not match the "
            f"sidecar's {str(recorded)[:12]}...; rerun with +force=train to retrain it (or delete {path} and "
            f"{sidecar_name}), or restore the original file."
        )
    return sha


def fsync_path(path: Path) -> None:
    """Flush a file's or a directory's data and metadata to disk (no-op where unsupported)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:  # some file systems refuse fsync on directories
        pass
    finally:
        os.close(fd)


def write_file_atomic(path: Path, data: bytes, suffix: str = ".tmp", fsync: bool = True) -> None:
    """Write ``data`` to ``path`` atomically and (``fsync``) fsynced, in the cache (a full disk
    names paths.cache_dir): :func:`pipeline.app.stores.writing.atomic_write`."""
    from pipeline.app.stores.writing import atomic_write

    atomic_write(path, data, fsync=fsync, suffix=suffix, fix=MOVE_CACHE)


def save_artifact(path: Path, artifact: Artifact) -> None:
    """Write ``artifact`` into the (new, empty) directory ``path``, with a checksum manifest; fsynced."""
    arrays = {k: v for k, v in artifact.items() if isinstance(v, np.ndarray)}
    meta = {k: v for k, v in artifact.items() if not isinstance(v, np.ndarray)}
    path.mkdir(parents=True)
    for k, v in arrays.items():
        if v.dtype == object:
            raise TypeError(f"artifact array {k!r} has dtype object; store it as JSON instead.")
    files = []
    if arrays:
        np.savez(path / "arrays.npz", **arrays)
        files.append("arrays.npz")
    with open(path / "meta.json", "w") as fh:
        json.dump(meta, fh)
    files.append("meta.json")
    manifest = {"format": 1, "files": {}}
    from concurrent.futures import ThreadPoolExecutor

    # each file hashed (from the page cache) while the files are flushed: both release the GIL
    # (1.6 GB of coordinates: 2.2 s of hashing no longer after the flush)
    with ThreadPoolExecutor(max_workers=len(files)) as pool:
        digests = {name: pool.submit(file_digest, path / name) for name in files}
        for name in files:
            fsync_path(path / name)
        for name in files:
            manifest["files"][name] = {"size": (path / name).stat().st_size, "sha256": digests[name].result()}
    with open(path / MANIFEST, "w") as fh:
        json.dump(manifest, fh, indent=1)
        fh.flush()
        os.fsync(fh.fileno())
    fsync_path(path)


def install_entry(tmp: Path, final: Path) -> None:
    """Rename the finished entry folder ``tmp`` to ``final`` (an entry already there, from a forced
    recompute, is swapped out and removed), then fsync the parent."""
    if final.exists():
        trash = final.parent / f".old-{final.name}-{uuid.uuid4().hex[:8]}"
        os.rename(final, trash)
        os.rename(tmp, final)
        shutil.rmtree(trash, ignore_errors=True)
    else:
        os.rename(tmp, final)
    fsync_path(final.parent)


def verify_artifact(path: Path) -> None:
    """Raise :class:`CorruptArtifactError` unless every file listed in the manifest is intact.

    Entries written before manifests existed (no ``manifest.json``) are accepted if
    ``meta.json`` is there; :func:`load_artifact` then catches what parsing can.
    """
    path = Path(path)
    manifest_path = path / MANIFEST
    if not manifest_path.is_file():
        if not (path / "meta.json").is_file():
            raise CorruptArtifactError(f"{path} has neither {MANIFEST} nor meta.json (a partial entry)")
        return
    try:
        manifest = json.loads(manifest_path.read_text())
        files = manifest["files"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CorruptArtifactError(f"{manifest_path} is unreadable ({type(exc).__name__}: {exc})") from None
    if "meta.json" not in files:
        raise CorruptArtifactError(f"{manifest_path} does not list meta.json")
    for name, entry in files.items():
        file = path / name
        if not file.is_file():
            raise CorruptArtifactError(f"{file} is missing")
        size = file.stat().st_size
        if size != entry.get("size"):
            raise CorruptArtifactError(f"{file} has {size} bytes, the manifest says {entry.get('size')} (truncated?)")
        if file_digest(file) != entry.get("sha256"):
            raise CorruptArtifactError(f"{file} does not match its sha256 in the manifest (damaged)")


def load_artifact(path: Path) -> Artifact:
    """Read an artifact written by :func:`save_artifact`, verifying its checksums.

    Raises
    ------
    CorruptArtifactError
        A file is missing, truncated, damaged or cannot be parsed.
    """
    path = Path(path)
    verify_artifact(path)
    try:
        with open(path / "meta.json") as fh:
            out = json.load(fh)
        if (path / "arrays.npz").exists():
            with np.load(path / "arrays.npz", allow_pickle=False) as data:
                out.update({k: data[k] for k in data.files})
    except Exception as exc:  # noqa: BLE001 - BadZipFile, JSONDecodeError, EOFError, ValueError, OSError ...
        raise CorruptArtifactError(f"{path} could not be read ({type(exc).__name__}: {exc})") from None
    if not isinstance(out, dict):
        raise CorruptArtifactError(f"{path / 'meta.json'} does not hold a JSON object")
    return out


@dataclass
class CacheEvent:
    stage: str
    key: str
    hit: bool
    seconds: float
    recovered: str = ""  # why a corrupt entry was moved aside and recomputed ("" if not)


_EVENT_SLOT = threading.local()  # a compute_later's place among the events


class Later:
    """One :meth:`StageCache.compute_later` under way."""

    def __init__(self) -> None:
        self.thread: threading.Thread | None = None
        self.value = None
        self.error: BaseException | None = None
        self.taken = False  # result() raised the error: flush() does not raise it again

    def result(self):
        self.thread.join()
        if self.error is not None:
            self.taken = True
            raise self.error
        return self.value


@dataclass
class StageCache:
    """Get-or-compute access to the cache directory ``root``.

    Parameters
    ----------
    root : path
        The cache directory (``paths.cache_dir``); created on first write.
    enabled : bool
        False computes every stage and stores nothing.
    force : iterable of str
        Stage names to recompute (and overwrite) even when cached; ``"all"`` forces every stage.
    """

    root: Path
    enabled: bool = True
    force: frozenset = frozenset()
    events: list = field(default_factory=list)
    _writing: list = field(default_factory=list, repr=False, compare=False)  # compute_later's work under way (Later)

    def __post_init__(self) -> None:
        self.root = Path(self.root)
        self.force = frozenset(self.force)

    def store_later(self, stage: str, key: str, record: dict) -> None:
        """``get_or_compute(stage, key, lambda: record)`` by a thread of its own, while the run goes
        on (a 10M-row run's 1.6 GB of coordinates took 5 s to write, hash and flush); the entry
        is installed atomically as ever, a reader of the same entry waits on its lock, and
        :meth:`flush` waits for the writes and raises the first one's error."""
        self.compute_later(stage, key, lambda: record)

    def compute_later(self, stage: str, key: str, compute: Callable[[], Artifact],
                      check: Callable[[Artifact], None] | None = None) -> "Later":
        """:meth:`get_or_compute` by a thread of its own, while the run goes on; its event keeps the
        place of this call among the events (status.json's order). :meth:`Later.result` waits for
        the artifact (and raises its error); :meth:`flush` waits for every one and raises the first
        error not taken by ``result``."""
        slot = len(self.events)
        self.events.append(CacheEvent(stage, key, False, 0.0))
        later = Later()

        def work():
            _EVENT_SLOT.index = slot
            try:
                later.value = self.get_or_compute(stage, key, compute, check)
            except BaseException as exc:  # noqa: BLE001 - handed to result() / flush()
                later.error = exc

        later.thread = threading.Thread(target=work, name=f"cache-{stage}")
        later.thread.start()
        self._writing.append(later)
        return later

    def flush(self, raise_errors: bool = True) -> None:
        """Wait for :meth:`store_later`'s and :meth:`compute_later`'s work; raise the first error
        that no :meth:`Later.result` raised already (or, with ``raise_errors=False``, log it: a
        run that failed already reports its own error)."""
        writing, self._writing = self._writing, []
        errors = []
        for later in writing:
            later.thread.join()
            if later.error is not None and not later.taken:
                errors.append(later.error)
        if errors and raise_errors:
            raise errors[0]
        for exc in errors:
            log.warning("a cache entry could not be written: %s", exc)

    def path(self, stage: str, key: str) -> Path:
        return self.root / stage / key

    def holds(self, stage: str, key: str) -> bool:
        """Whether :meth:`get_or_compute` would read ``stage``'s entry ``key`` rather than compute it
        (an entry there, caching on, the stage not forced: its own test); the entry is checked when it is read."""
        return self.enabled and not self.forced(stage) and self.path(stage, key).is_dir()

    def forced(self, stage: str) -> bool:
        return stage in self.force or "all" in self.force

    def get_or_compute(self, stage: str, key: str, compute: Callable[[], Artifact],
                       check: Callable[[Artifact], None] | None = None) -> Artifact:
        """Return the cached artifact of (stage, key), computing and storing it if absent or corrupt.

        ``check`` (optional) verifies what a stored artifact refers to outside its entry (chunked
        shards); a :class:`CorruptArtifactError` from it is handled like a damaged entry."""
        start = time.perf_counter()
        if not self.enabled:
            out = compute()
            self.record(stage, key, False, start)
            return out
        final = self.path(stage, key)
        recovered = ""
        lock = FileLock(str(final) + ".lock")
        try:
            final.parent.mkdir(parents=True, exist_ok=True)
            lock.acquire()
        except OSError as exc:  # a full or read-only cache directory
            raise write_failed(exc, self.root, 4096, f"the cache's lock file for {stage}", MOVE_CACHE) from None
        try:
            self._remove_leftovers(final)
            if final.is_dir() and not self.forced(stage):
                try:
                    out = load_artifact(final)
                    if check is not None:
                        check(out)
                except CorruptArtifactError as exc:
                    recovered = self.quarantine(stage, key, exc)
                else:
                    self.record(stage, key, True, start)
                    return out
            out = compute()
            self._write(final, out)
        finally:
            lock.release()
        self.record(stage, key, False, start, recovered)
        return out

    @staticmethod
    def _remove_leftovers(final: Path) -> None:
        """Temporary / swapped-out copies of this entry left by a killed writer (we hold its lock)."""
        for pattern in (f".tmp-{final.name}-*", f".old-{final.name}-*"):
            for leftover in final.parent.glob(pattern):
                shutil.rmtree(leftover, ignore_errors=True)

    def quarantine(self, stage: str, key: str, exc: CorruptArtifactError) -> str:
        """Move a corrupt entry to ``<root>/.quarantine/<stage>/`` and warn; returns the reason."""
        final = self.path(stage, key)
        target = self.root / QUARANTINE / stage / f"{key}-{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:6]}"
        target.parent.mkdir(parents=True, exist_ok=True)
        os.rename(final, target)
        fsync_path(final.parent)
        message = (f"cache entry of stage {stage!r} [{key}] was corrupt ({exc}); moved it to {target} and "
                   "recomputing. Delete the quarantined copy once you no longer need it for inspection.")
        log.warning(message)
        return str(exc)

    def _write(self, final: Path, artifact: Artifact) -> None:
        tmp = final.parent / f".tmp-{final.name}-{uuid.uuid4().hex[:8]}"
        try:
            try:
                save_artifact(tmp, artifact)
            except OSError as exc:  # disk full, quota: the entry is simply not there (tmp removed below)
                needed = sum(v.nbytes for v in artifact.values() if isinstance(v, np.ndarray)) + 4096
                raise write_failed(exc, self.root, needed, f"the cache entry {final.parent.name}/{final.name}",
                                   MOVE_CACHE) from None
            install_entry(tmp, final)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)

    def record(self, stage: str, key: str, hit: bool, start: float, recovered: str = "") -> None:
        seconds = time.perf_counter() - start
        event = CacheEvent(stage, key, hit, seconds, recovered)
        slot = getattr(_EVENT_SLOT, "index", None)
        if slot is None:
            self.events.append(event)
        else:
            self.events[slot] = event
        if hit:
            log.info("cache hit: %s [%s] (%.2fs)", stage, key, seconds)
        else:
            log.info("computed: %s [%s] (%.2fs)", stage, key, seconds)
