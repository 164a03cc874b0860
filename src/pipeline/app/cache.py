"""The stage cache: one directory shared by every run and sweep job.

Each stage's artifact is stored under ``<cache_dir>/<stage>/<key>/`` where ``key`` hashes the
part of the config that determines the stage and the keys of its inputs, so a change upstream
changes every key downstream. An artifact is a flat ``dict``: numpy arrays go to
``arrays.npz``, everything else (JSON-able) to ``meta.json``.

Concurrency and crashes:

- a file lock per (stage, key) makes parallel jobs wait for one another instead of computing
  or writing the same artifact twice;
- an artifact is written to a temporary directory and renamed into place, so a killed run
  never leaves a half-written artifact and the next run resumes from the last finished stage.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np
from filelock import FileLock

log = logging.getLogger(__name__)

Artifact = dict


def make_key(stage: str, config: Any, inputs: Iterable[str] = (), version: int = 1) -> str:
    """Deterministic key (20 hex chars) of a stage's determining config and input keys."""
    payload = json.dumps(
        {"stage": stage, "version": version, "config": config, "inputs": list(inputs)},
        sort_keys=True, default=str,
    )
    return hashlib.sha256(payload.encode()).hexdigest()[:20]


def save_artifact(path: Path, artifact: Artifact) -> None:
    """Write ``artifact`` into the (new, empty) directory ``path``."""
    arrays = {k: v for k, v in artifact.items() if isinstance(v, np.ndarray)}
    meta = {k: v for k, v in artifact.items() if not isinstance(v, np.ndarray)}
    path.mkdir(parents=True)
    if arrays:
        for k, v in arrays.items():
            if v.dtype == object:
                raise TypeError(f"artifact array {k!r} has dtype object; store it as JSON instead.")
        np.savez(path / "arrays.npz", **arrays)
    with open(path / "meta.json", "w") as fh:
        json.dump(meta, fh)


def load_artifact(path: Path) -> Artifact:
    """Read an artifact written by :func:`save_artifact`."""
    with open(path / "meta.json") as fh:
        out = json.load(fh)
    if (path / "arrays.npz").exists():
        with np.load(path / "arrays.npz", allow_pickle=False) as data:
            out.update({k: data[k] for k in data.files})
    return out


@dataclass
class CacheEvent:
    stage: str
    key: str
    hit: bool
    seconds: float


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

    def __post_init__(self) -> None:
        self.root = Path(self.root)
        self.force = frozenset(self.force)

    def path(self, stage: str, key: str) -> Path:
        return self.root / stage / key

    def forced(self, stage: str) -> bool:
        return stage in self.force or "all" in self.force

    def get_or_compute(self, stage: str, key: str, compute: Callable[[], Artifact]) -> Artifact:
        """Return the cached artifact of (stage, key), computing and storing it if absent."""
        start = time.perf_counter()
        if not self.enabled:
            out = compute()
            self._record(stage, key, False, start)
            return out
        final = self.path(stage, key)
        final.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(final) + ".lock"):
            if final.is_dir() and not self.forced(stage):
                out = load_artifact(final)
                self._record(stage, key, True, start)
                return out
            out = compute()
            self._write(final, out)
        self._record(stage, key, False, start)
        return out

    def _write(self, final: Path, artifact: Artifact) -> None:
        tmp = final.parent / f".tmp-{final.name}-{uuid.uuid4().hex[:8]}"
        try:
            save_artifact(tmp, artifact)
            if final.exists():  # forced recompute: swap the old artifact out
                trash = final.parent / f".old-{final.name}-{uuid.uuid4().hex[:8]}"
                os.rename(final, trash)
                os.rename(tmp, final)
                shutil.rmtree(trash, ignore_errors=True)
            else:
                os.rename(tmp, final)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)

    def _record(self, stage: str, key: str, hit: bool, start: float) -> None:
        seconds = time.perf_counter() - start
        self.events.append(CacheEvent(stage, key, hit, seconds))
        if hit:
            log.info("cache hit: %s [%s] (%.2fs)", stage, key, seconds)
        else:
            log.info("computed: %s [%s] (%.2fs)", stage, key, seconds)
