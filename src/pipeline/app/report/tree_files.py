"""A run's trees as files: ``trees/<row>.json``, ``.rules.txt``, ``.dot`` and ``figures/<row>.*``."""

from __future__ import annotations

import json
from pathlib import Path

from pipeline.app.artifacts import FitArtifact
from pipeline.app.report.render_cache import RenderCache
from pipeline.app.report.run_report import tree_annotations, rules_json, rules_text, tree_figure
from pipeline.app.report.writer import atomic_write
from pipeline.trees.tree import ExplanationTree


def write_trees(out_dir: Path, fits: dict[str, FitArtifact], figures: bool = True, data: dict | None = None,
                dataset: str | None = None, ari: dict[str, float] | None = None, cache=None) -> list[Path]:
    """Each tree as ``trees/<row>.json`` (tree + simplified annotated rules), ``trees/<row>.rules.txt``
    and ``trees/<row>.dot`` (Graphviz), and ``figures/<row>.{png,svg,pdf}``.

    ``data`` (:func:`pipeline.app.report.run_report.tree_data`) annotates leaves with size, purity
    and majority class; ``ari`` (row -> ARI vs ground truth) goes into the figure titles.
    ``cache`` (:class:`pipeline.app.report.render_cache.RenderCache`) reuses figures drawn before.
    """
    written = []
    for row, fit in fits.items():
        tree = ExplanationTree.from_dict(fit.tree)
        doc = {"explainer": row, "method": fit.name, "fit_seconds": float(fit.fit_seconds), "tree": fit.tree,
               "rules": rules_json(fit, data)}
        written.append(atomic_write(Path(out_dir) / "trees" / f"{row}.json", json.dumps(doc, indent=1, default=float)))
        written.append(atomic_write(Path(out_dir) / "trees" / f"{row}.rules.txt", rules_text(row, fit, data).encode("utf-8")))
        written.append(atomic_write(Path(out_dir) / "trees" / f"{row}.dot",
                                    tree.to_dot(**tree_annotations(data), title=f"{row} ({fit.name})").encode("utf-8")))
        if figures:  # matplotlib only when figures are drawn (not when they come from the cache)
            def draw(row=row, fit=fit) -> dict[str, bytes]:
                from pipeline.app.report.figures import FORMATS, figure_bytes

                fig = tree_figure(row, fit, data, dataset, (ari or {}).get(row))
                return {fmt: figure_bytes(fig, fmt) for fmt in FORMATS}

            inputs = {"row": row, "name": fit.name, "tree": fit.tree, "data": tree_annotations(data),
                      "dataset": dataset, "ari": (ari or {}).get(row)}
            for fmt, blob in (cache or RenderCache(None)).get("tree_figure", inputs, draw).items():
                written.append(atomic_write(Path(out_dir) / "figures" / f"{row}.{fmt}", blob))
    return written
