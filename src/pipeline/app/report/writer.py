"""Writing a run's report files; every file is written atomically (temp file + rename).

The bottom of ``pipeline.app.report``: it imports no other report module but the tables
(the report stage writes the trees with these helpers, :func:`pipeline.app.stages.report.write_trees`);
each file through :func:`pipeline.app.stores.writing.atomic_write`."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

from pipeline.app.stores.writing import atomic_write

if TYPE_CHECKING:
    import pandas as pd


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
