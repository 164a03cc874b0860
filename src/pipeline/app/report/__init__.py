"""Reports: results tables (Markdown + CSV), tree JSON/rules, tree figures, terminal summary.

Names are imported on first access, so writing tables does not import matplotlib.
"""

from __future__ import annotations

import importlib

_LAZY = {"plot_tree": "pipeline.app.report.figures", "results_frame": "pipeline.app.report.tables",
         "format_markdown": "pipeline.app.report.tables"}

__all__ = sorted(_LAZY)


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'pipeline.app.report' has no attribute {name!r}")
