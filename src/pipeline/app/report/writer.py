"""Writing a run's report files; every file is written atomically (temp file + rename)."""

from __future__ import annotations

import io
import json
import os
import uuid
from pathlib import Path

import pandas as pd

from pipeline.app.report.tables import format_markdown
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


def rules_text(row: str, tree: ExplanationTree) -> str:
    rules = "\n".join(f"- {r}" for r in tree.rules())
    return f"# {row}: {tree.n_leaves} leaves, depth {tree.depth}\n\nRules:\n{rules}\n\nTree:\n{tree.to_text()}\n"


def write_tables(out_dir: Path, df: pd.DataFrame, stem: str = "results") -> tuple[Path, Path]:
    """``<stem>.csv`` and ``<stem>.md`` in ``out_dir``."""
    csv = atomic_write(Path(out_dir) / f"{stem}.csv", df.to_csv(index=False))
    md = atomic_write(Path(out_dir) / f"{stem}.md", format_markdown(df))
    return csv, md


def write_trees(out_dir: Path, fits: dict[str, dict], figures: bool = True) -> list[Path]:
    """Each tree as ``trees/<row>.json`` and ``trees/<row>.rules.txt``, and ``figures/<row>.png``."""
    if figures and fits:
        from pipeline.app.report.figures import plot_tree  # matplotlib only when figures are drawn
    written = []
    for row, fit in fits.items():
        tree = ExplanationTree.from_dict(fit["tree"])
        doc = {"explainer": row, "method": fit["name"], "fit_seconds": float(fit["fit_seconds"]), "tree": fit["tree"]}
        written.append(atomic_write(Path(out_dir) / "trees" / f"{row}.json", json.dumps(doc, indent=1)))
        written.append(atomic_write(Path(out_dir) / "trees" / f"{row}.rules.txt", rules_text(row, tree)))
        if figures:
            buf = io.BytesIO()
            plot_tree(tree, title=f"{row} ({fit['name']})").savefig(buf, format="png", dpi=110)
            written.append(atomic_write(Path(out_dir) / "figures" / f"{row}.png", buf.getvalue()))
    return written


def write_status(out_dir: Path, status: dict) -> Path:
    return atomic_write(Path(out_dir) / "status.json", json.dumps(status, indent=1, default=str))
