"""The one-screen terminal summary of a run (a string; the runner prints it)."""

from __future__ import annotations

import pandas as pd

from pipeline.app.report.tables import format_cell
from pipeline.trees.tree import ExplanationTree

_SHOWN = ["explainer", "method", "ari", "ami", "ref_ari", "misassignment", "q", "n_leaves", "depth", "fit_seconds"]


def summary_text(title: str, df: pd.DataFrame, fits: dict[str, dict], max_rules: int = 12) -> str:
    cols = [c for c in _SHOWN if c in df.columns]
    table = df[cols].map(format_cell) if hasattr(df, "map") else df[cols].applymap(format_cell)
    widths = {c: max(len(c), *(len(v) for v in table[c])) for c in cols}
    lines = [title, "", "  ".join(c.ljust(widths[c]) for c in cols)]
    lines += ["  ".join(str(v).ljust(widths[c]) for c, v in zip(cols, r)) for r in table.itertuples(index=False)]
    for row, fit in fits.items():
        rules = ExplanationTree.from_dict(fit["tree"]).rules()
        lines += ["", f"{row} rules:"] + [f"  {r}" for r in rules[:max_rules]]
        if len(rules) > max_rules:
            lines.append(f"  ... {len(rules) - max_rules} more (see trees/{row}.rules.txt)")
    return "\n".join(lines)
