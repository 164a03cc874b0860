"""Writing a run's report files; every file is written atomically (temp file + rename)."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

    from pipeline.trees.tree import ExplanationTree


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


def write_trees(out_dir: Path, fits: dict[str, dict], figures: bool = True, data: dict | None = None,
                dataset: str | None = None, ari: dict[str, float] | None = None, cache=None) -> list[Path]:
    """Each tree as ``trees/<row>.json`` (tree + simplified annotated rules), ``trees/<row>.rules.txt``
    and ``trees/<row>.dot`` (Graphviz), and ``figures/<row>.{png,svg,pdf}`` (screen size) with the
    print variants ``figures/<row>.column.{pdf,png}`` (3.3 in, one column of a two-column paper) and
    ``figures/<row>.wide.{pdf,png}`` (6.9 in), all text at 7 pt or more.

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
                                    tree.to_dot(**_annotations(data), title=f"{row} ({fit['name']})",
                                                max_terms=None).encode("utf-8")))  # files list every term
        if figures:  # matplotlib only when figures are drawn (not when they come from the cache)
            def draw(row=row, fit=fit) -> dict[str, bytes]:
                from pipeline.app.report.figures import COLUMN_WIDTHS, FORMATS, figure_bytes
                from pipeline.app.report.run_report import tree_figure

                fig = tree_figure(row, fit, data, dataset, (ari or {}).get(row))
                out = {fmt: figure_bytes(fig, fmt) for fmt in FORMATS}
                for variant, width in COLUMN_WIDTHS.items():  # print sizes: 3.3 in / 6.9 in at >= 7 pt
                    fig = tree_figure(row, fit, data, dataset, (ari or {}).get(row), width=width)
                    out.update({f"{variant}.{fmt}": figure_bytes(fig, fmt) for fmt in ("pdf", "png")})
                return out

            inputs = {"row": row, "name": fit["name"], "tree": fit["tree"], "data": _annotations(data),
                      "dataset": dataset, "ari": (ari or {}).get(row)}
            for fmt, blob in (cache or RenderCache(None)).get("tree_figure", inputs, draw).items():
                written.append(atomic_write(Path(out_dir) / "figures" / f"{row}.{fmt}", blob))
    return written


def write_status(out_dir: Path, status: dict) -> Path:
    return atomic_write(Path(out_dir) / "status.json", json.dumps(status, indent=1, default=str))
