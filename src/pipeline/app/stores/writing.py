"""Writing a file of the run: atomically (:func:`atomic_write`), and one clear paragraph when it
cannot (disk full, quota, read-only file system).

Every writer of the application (run files, the stage cache, checkpoints) turns an ``OSError``
into :class:`WriteFailedError`: the directory, the bytes it needed, the bytes free there, and
the setting that moves the files elsewhere. ``python -m pipeline`` prints it as one ``error:``
paragraph (no chained tracebacks) and the run's ``status.json`` says "failed".
"""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import BinaryIO, Callable


class WriteFailedError(OSError):
    """A file of the run could not be written; the message says where, how much and what to do."""

    def __str__(self) -> str:  # the paragraph alone, without OSError's "[Errno 28]" prefix
        return str(self.strerror)


def free_bytes(directory: str | os.PathLike) -> int | None:
    """Free bytes on the file system holding ``directory`` (or its nearest existing parent)."""
    path = Path(directory)
    while not path.exists() and path != path.parent:
        path = path.parent
    try:
        return shutil.disk_usage(path).free
    except OSError:
        return None


def write_failed(exc: OSError, directory: str | os.PathLike, needed: int, what: str, fix: str) -> WriteFailedError:
    """The :class:`WriteFailedError` for ``exc`` raised while writing ``what`` (about ``needed``
    bytes) into ``directory``; ``fix`` names the setting that moves it."""
    if isinstance(exc, WriteFailedError):
        return exc
    free = free_bytes(directory)
    room = "" if free is None else f", {free:,} bytes free there"
    reason = exc.strerror or str(exc) or type(exc).__name__
    return WriteFailedError(exc.errno, f"cannot write {what} in {directory}: {reason} (it needs about {needed:,} "
                                       f"bytes{room}). {fix}")

#: How to move each kind of file (the ``fix`` of :func:`write_failed`).
MOVE_OUTPUTS = "Free space there, or write the run elsewhere with paths.log_dir=<dir> (or PIPELINE_LOG_DIR=<dir>)."
MOVE_CACHE = ("Free space there, move the cache with paths.cache_dir=<dir> (or PIPELINE_CACHE_DIR=<dir>), "
              "or run without it: cache.enabled=false.")
MOVE_MODELS = ("Free space there, or keep checkpoints elsewhere with paths.models_dir=<dir> "
               "(or PIPELINE_MODELS_DIR=<dir>).")


def atomic_write(path: Path, data: "str | bytes | Callable[[BinaryIO], None]", *, fsync: bool = False,
                 suffix: str = ".tmp", fix: str = MOVE_OUTPUTS) -> Path:
    """Write ``data`` to ``path`` via a temporary sibling ``.<name>.<random><suffix>`` and ``os.replace``
    (a killed writer leaves only the temporary file). ``data`` may also be a function that writes the
    file into the binary handle it is given (a large file streamed in pieces, never whole in memory);
    ``fsync``: flushed to the disk before the rename (cache entries, chunk results, store shards). A
    full disk is one paragraph naming the folder, the size and ``fix`` (the setting that moves it)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}{suffix}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "w" if isinstance(data, str) else "wb") as fh:
            data(fh) if callable(data) else fh.write(data)
            if fsync:
                fh.flush()
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as exc:  # disk full, quota, read-only: no temporary file stays behind
        if callable(data):  # what was written before it failed
            size = tmp.stat().st_size if tmp.exists() else 0
        else:
            size = len(data.encode("utf-8")) if isinstance(data, str) else len(data)
        tmp.unlink(missing_ok=True)
        raise write_failed(exc, path.parent, size, path.name, fix) from None
    return path
