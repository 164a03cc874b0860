"""A finished run's files kept in the stage cache: a rerun whose every input is unchanged restores
them instead of reading every artifact back and writing the report again (issue 35: the warm run).

The entry ``<cache_dir>/outputs/<key>/`` holds the files the run wrote into its folder (the
report, trees, figures, tables, the explainer bundle; not ``status.json``, ``.hydra/`` or the
log, which belong to each run) and the terminal summary, with a manifest of sizes and sha256.
``key`` hashes the resolved config (less ``paths.output_dir``, the one value that differs between
two runs of the same thing) and the cache key of every stage, so anything that would change a
stage, a file or the summary misses. Restoring verifies every file while copying it; a damaged
entry is moved to ``.quarantine`` (like any stage entry) and the run computes as if it were
absent. ``+force=<stage>``, ``cache.reuse_files=false`` and ``cache.enabled=false`` never restore.

The files of a run are linked into the entry where the file system allows (no copy: a run on
a million rows writes 190 MB of files), copied otherwise; restoring always copies.

The checks a run makes of its config before any stage (every ``_target_`` imports, every
parameter exists: :func:`pipeline.app.startup.capabilities.check_request`) import every library the run
would use (~2.3 s); a config that passed them with the same code is not checked again
(:func:`checked_before`, a marker under ``<cache_dir>/checked/``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from pipeline.app.stores.cache import (
    MANIFEST, CorruptArtifactError, StageCache, file_digest, fsync_path, install_entry, make_key,
)
from pipeline.app.stores.writing import MOVE_CACHE, write_failed

log = logging.getLogger(__name__)

STORE = "outputs"
VERSION = 2  # 2: the report and console text of issues 47-50 (a run's files made by older code are not restored)
FILES = "files"
BLOCK = 1 << 20


def outputs_key(cfg: dict, stage_keys: dict[str, str]) -> str:
    """The key of a run's files: its config without ``paths.output_dir``, and every stage's key."""
    return make_key(STORE, _unplaced(cfg), [f"{name}={key}" for name, key in stage_keys.items()], VERSION)


def _unplaced(cfg: dict) -> dict:
    """``cfg`` without ``paths.output_dir`` and the cache's switches: the same run in another folder."""
    out = {k: v for k, v in cfg.items() if k != "cache"}
    out["paths"] = {k: v for k, v in (cfg.get("paths") or {}).items() if k != "output_dir"}
    return out


def code_fingerprint() -> str:
    """A digest of the pipeline package's code and configs (each file's path, size and mtime)."""
    root = Path(__file__).resolve().parents[2]  # src/pipeline (not `import pipeline`: its door imports the explainer)
    stats = sorted((p.relative_to(root).as_posix(), p.stat().st_size, p.stat().st_mtime_ns)
                   for p in root.rglob("*") if p.suffix in (".py", ".yaml"))
    return hashlib.sha256(json.dumps(stats).encode()).hexdigest()[:20]


def _checked_marker(cache: StageCache, cfg: dict) -> Path:
    return cache.root / "checked" / make_key("checked", _unplaced(cfg), [code_fingerprint()])


def checked_before(cache: StageCache, cfg: dict) -> bool:
    """Whether ``cfg`` passed the config checks before, with this code (see the module docstring)."""
    return cache.enabled and _checked_marker(cache, cfg).is_file()


def mark_checked(cache: StageCache, cfg: dict) -> None:
    """Note that ``cfg`` passed the config checks (nothing happens when the cache cannot be written)."""
    if not cache.enabled:
        return
    marker = _checked_marker(cache, cfg)
    try:
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.touch()
    except OSError:
        pass


def run_files(out_dir: Path, before: dict | None = None) -> list[str]:
    """The files of the run in ``out_dir`` (relative, sorted): not ``.hydra/``, ``status.json``,
    the log or a temporary file; with ``before`` (:func:`snapshot` taken when the run started),
    only those written since (new, or another file under the same name: every report file is
    written to a temporary file and renamed)."""
    out_dir = Path(out_dir)
    found = []
    for root, dirs, files in os.walk(out_dir):
        rel_root = Path(root).relative_to(out_dir)
        dirs[:] = [d for d in dirs if not (rel_root == Path(".") and d == ".hydra")]
        for name in files:
            rel = rel_root / name
            if name.startswith(".") or (rel_root == Path(".") and (name == "status.json" or name.endswith(".log"))):
                continue
            if before is None or before.get(rel.as_posix()) != _identity(out_dir / rel):
                found.append(rel.as_posix())
    return sorted(found)


def snapshot(out_dir: Path) -> dict:
    """What ``out_dir`` holds before a run (each file's inode, size and mtime), for :func:`run_files`."""
    out_dir = Path(out_dir)
    if not out_dir.is_dir():
        return {}
    return {rel: _identity(out_dir / rel) for rel in run_files(out_dir)}


def _identity(path: Path) -> tuple:
    st = path.stat()
    return st.st_ino, st.st_size, st.st_mtime_ns


def store(cache: StageCache, key: str, out_dir: Path, files: list[str], summary: dict) -> None:
    """Keep ``files`` of ``out_dir`` and ``summary`` (JSON) as the entry ``key``; a full disk or a
    refused link is a warning (the run's own files stand), never a failed run."""
    if not cache.enabled:
        return
    final = cache.path(STORE, key)
    tmp = final.parent / f".tmp-{final.name}-{uuid.uuid4().hex[:8]}"
    try:
        manifest = {"format": 1, "files": {}, "summary": summary}
        for rel in files:
            target = tmp / FILES / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.link(Path(out_dir) / rel, target)
            except OSError:  # another file system, or links not allowed: a copy
                shutil.copyfile(Path(out_dir) / rel, target)
        from pipeline.threads import helper_threads

        with ThreadPoolExecutor(max_workers=helper_threads(None)) as pool:  # hashlib leaves the GIL: two at a time
            digests = list(pool.map(lambda rel: file_digest(tmp / FILES / rel), files))
        for rel, digest in zip(files, digests):
            manifest["files"][rel] = {"size": (tmp / FILES / rel).stat().st_size, "sha256": digest}
        with open(tmp / MANIFEST, "w") as fh:
            json.dump(manifest, fh, indent=1)
            fh.flush()
            os.fsync(fh.fileno())
        fsync_path(tmp)
        install_entry(tmp, final)  # a forced run replaces what an earlier one kept
    except OSError as exc:
        err = write_failed(exc, cache.root, sum((Path(out_dir) / f).stat().st_size for f in files),
                           f"the cache entry {STORE}/{key}", MOVE_CACHE)
        log.warning("the run's files were not kept for reruns: %s", err)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def restore(cache: StageCache, key: str, out_dir: Path) -> dict | None:
    """Copy the entry ``key``'s files into ``out_dir`` (each verified against its sha256 while it is
    copied, then renamed into place) and return the stored summary; None when there is no usable
    entry (absent, forced, disabled, or damaged: quarantined and logged) or ``out_dir`` already
    holds one of its files (an earlier run's: never overwritten by a restore)."""
    if not cache.enabled or cache.force:
        return None
    final = cache.path(STORE, key)
    if not (final / MANIFEST).is_file():
        return None
    start = time.perf_counter()
    written, made = [], []
    try:
        try:
            manifest = json.loads((final / MANIFEST).read_text())
            entries, summary = manifest["files"], manifest["summary"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise CorruptArtifactError(f"{final / MANIFEST} is unreadable ({type(exc).__name__}: {exc})") from None
        if any((Path(out_dir) / rel).exists() for rel in entries):
            return None  # a folder holding an earlier run's files: the run writes (and refuses) as it would
        for rel, entry in entries.items():
            target = Path(out_dir) / rel
            missing = [p for p in target.parents if not p.exists()]
            target.parent.mkdir(parents=True, exist_ok=True)
            made += missing
            written.append(_copy_verified(final / FILES / rel, target, entry))
    except (CorruptArtifactError, OSError) as exc:
        for path in written:  # nothing half-restored stays: the run then writes every file itself
            path.unlink(missing_ok=True)
        for folder in sorted(made, key=lambda p: len(p.parts), reverse=True):
            try:
                folder.rmdir()
            except OSError:
                pass
        if isinstance(exc, CorruptArtifactError):
            cache.quarantine(STORE, key, exc)
            return None
        raise write_failed(exc, Path(out_dir), 0, "the run's files restored from the cache") from None
    cache.record(STORE, key, True, start)
    return summary


def _copy_verified(source: Path, target: Path, entry: dict) -> Path:
    digest = hashlib.sha256()
    tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        with open(source, "rb") as src, open(tmp, "wb") as dst:
            for block in iter(lambda: src.read(BLOCK), b""):
                digest.update(block)
                dst.write(block)
    except FileNotFoundError:
        tmp.unlink(missing_ok=True)
        raise CorruptArtifactError(f"{source} is missing") from None
    except OSError:
        tmp.unlink(missing_ok=True)
        raise
    if tmp.stat().st_size != entry.get("size") or digest.hexdigest() != entry.get("sha256"):
        tmp.unlink(missing_ok=True)
        raise CorruptArtifactError(f"{source} does not match its size and sha256 in the manifest (damaged)")
    os.replace(tmp, target)
    return target


__all__ = ["STORE", "checked_before", "code_fingerprint", "mark_checked", "outputs_key", "restore", "run_files",
           "snapshot", "store"]
