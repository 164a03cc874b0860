"""Writing a run's report files; every file is written atomically (temp file + rename)."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

from typing import TYPE_CHECKING

from pipeline.app.write_errors import MOVE_OUTPUTS, write_failed

if TYPE_CHECKING:
    import pandas as pd

    from pipeline.trees.tree import ExplanationTree


def atomic_write(path: Path, data: str | bytes) -> Path:
    """Write ``data`` to ``path`` via a temporary file in the same directory and ``os.replace``."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb" if isinstance(data, bytes) else "w") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except OSError as exc:  # disk full, quota, read-only: no temporary file stays behind
        tmp.unlink(missing_ok=True)
        size = len(data.encode("utf-8")) if isinstance(data, str) else len(data)
        raise write_failed(exc, path.parent, size, path.name, MOVE_OUTPUTS) from None
    return path


def write_tables(out_dir: Path, df: "pd.DataFrame", stem: str = "results") -> tuple[Path, Path]:
    """``<stem>.csv`` and ``<stem>.md`` in ``out_dir``."""
    from pipeline.app.report.tables import format_markdown

    csv = atomic_write(Path(out_dir) / f"{stem}.csv", df.to_csv(index=False))
    md = atomic_write(Path(out_dir) / f"{stem}.md", format_markdown(df))
    return csv, md


def write_trees(out_dir: Path, fits: dict[str, dict], figures: bool = True, data: dict | None = None,
                dataset: str | None = None, ari: dict[str, float] | None = None, cache=None) -> list[Path]:
    """Each tree as ``trees/<row>.json`` (tree + simplified annotated rules), ``trees/<row>.rules.txt``
    and ``trees/<row>.dot`` (Graphviz), and ``figures/<row>.{png,svg,pdf}``.

    ``data`` (:func:`pipeline.app.report.run_report.tree_data`) annotates leaves with size, purity
    and majority class; ``ari`` (row -> ARI vs ground truth) goes into the figure titles.
    ``cache`` (:class:`pipeline.app.report.render_cache.RenderCache`) reuses figures drawn before.
    """
    from pipeline.app.report.render_cache import RenderCache

    from pipeline.app.report.run_report import _annotations, rules_json, rules_text
    from pipeline.trees.tree import ExplanationTree

    written = []
    for row, fit in fits.items():
        tree = ExplanationTree.from_dict(fit["tree"])
        doc = {"explainer": row, "method": fit["name"], "fit_seconds": float(fit["fit_seconds"]), "tree": fit["tree"],
               "rules": rules_json(fit, data)}
        written.append(atomic_write(Path(out_dir) / "trees" / f"{row}.json", json.dumps(doc, indent=1, default=float)))
        written.append(atomic_write(Path(out_dir) / "trees" / f"{row}.rules.txt", rules_text(row, fit, data).encode("utf-8")))
        written.append(atomic_write(Path(out_dir) / "trees" / f"{row}.dot",
                                    tree.to_dot(**_annotations(data), title=f"{row} ({fit['name']})").encode("utf-8")))
        if figures:  # matplotlib only when figures are drawn (not when they come from the cache)
            def draw(row=row, fit=fit) -> dict[str, bytes]:
                from pipeline.app.report.figures import FORMATS, figure_bytes
                from pipeline.app.report.run_report import tree_figure

                fig = tree_figure(row, fit, data, dataset, (ari or {}).get(row))
                return {fmt: figure_bytes(fig, fmt) for fmt in FORMATS}

            inputs = {"row": row, "name": fit["name"], "tree": fit["tree"], "data": _annotations(data),
                      "dataset": dataset, "ari": (ari or {}).get(row)}
            for fmt, blob in (cache or RenderCache(None)).get("tree_figure", inputs, draw).items():
                written.append(atomic_write(Path(out_dir) / "figures" / f"{row}.{fmt}", blob))
    return written


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
