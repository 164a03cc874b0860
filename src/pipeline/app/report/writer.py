"""Writing a run's report files; every file is written atomically (temp file + rename).

The bottom of ``pipeline.app.report``: it imports no other report module but the tables
(the report stage writes the trees with these helpers, :func:`pipeline.app.stages.report.write_trees`)."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

from typing import TYPE_CHECKING

from pipeline.app.write_errors import MOVE_OUTPUTS, write_failed

if TYPE_CHECKING:
    from typing import BinaryIO, Callable

    import pandas as pd


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


def write_tables(out_dir: Path, df: "pd.DataFrame", stem: str = "results") -> tuple[Path, Path]:
    """``<stem>.csv`` and ``<stem>.md`` in ``out_dir``."""
    from pipeline.app.report.tables import format_markdown

    csv = atomic_write(Path(out_dir) / f"{stem}.csv", df.to_csv(index=False))
    md = atomic_write(Path(out_dir) / f"{stem}.md", format_markdown(df))
    return csv, md


def write_status(out_dir: Path, status: dict) -> Path:
    return atomic_write(Path(out_dir) / "status.json", json.dumps(status, indent=1, default=str))


def write_final_status(out_dir: Path, status: dict) -> None:
    """:func:`write_status` for a failing run, which must not fail itself: on a full disk the
    status (without its traceback) overwrites the old ``status.json`` in place, which reuses
    that file's blocks; if even that fails the run's error stays the one reported."""
    try:
        write_status(out_dir, status)
        return
    except OSError:
        pass
    short = {k: v for k, v in status.items() if k != "traceback"}
    try:
        with open(Path(out_dir) / "status.json", "r+") as fh:
            fh.truncate(0)
            fh.write(json.dumps(short, default=str))
    except OSError:
        pass
