"""Reports: results tables (Markdown + CSV), tree JSON/rules, tree figures, terminal summary."""

from pipeline.app.report.figures import plot_tree
from pipeline.app.report.tables import format_markdown, results_frame

__all__ = ["plot_tree", "results_frame", "format_markdown"]
