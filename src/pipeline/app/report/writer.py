"""Writing a run's report files; every file is written atomically (temp file + rename).

The bottom of ``pipeline.app.report``: it imports no other report module but the tables
(the report stage writes the trees with these helpers, :func:`pipeline.app.stages.report.write_trees`)."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd


def atomic_write(path: Path, data: str | bytes) -> Path:
    """Write ``data`` to ``path`` via a temporary file in the same directory and ``os.replace``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    with open(tmp, "wb" if isinstance(data, bytes) else "w") as fh:
        fh.write(data)
    os.replace(tmp, path)
    return path


def write_tables(out_dir: Path, df: "pd.DataFrame", stem: str = "results") -> tuple[Path, Path]:
    """``<stem>.csv`` and ``<stem>.md`` in ``out_dir``."""
    from pipeline.app.report.tables import format_markdown

    csv = atomic_write(Path(out_dir) / f"{stem}.csv", df.to_csv(index=False))
    md = atomic_write(Path(out_dir) / f"{stem}.md", format_markdown(df))
    return csv, md


def write_status(out_dir: Path, status: dict) -> Path:
    return atomic_write(Path(out_dir) / "status.json", json.dumps(status, indent=1, default=str))
