"""The one-screen terminal summary of a run (a string; the runner prints it)."""

from __future__ import annotations

import pandas as pd

from pipeline.app.artifacts import FitArtifact
from pipeline.app.report.tables import format_cell

_SHOWN = ["explainer", "method", "ari", "stability", "ami", "ref_ari", "misassignment", "q", "n_leaves", "depth", "fit_seconds"]


_COUNTS = {"n_leaves", "depth"}  # shown as integers (read as floats when a row has none)


def _format(value, column: str) -> str:
    if column in _COUNTS and isinstance(value, float) and value == value and value.is_integer():
        return str(int(value))
    return format_cell(value, column)


def summary_text(title: str, df: pd.DataFrame, fits: dict[str, FitArtifact], max_rules: int = 12,
                 data: dict | None = None) -> str:
    """Results table and each tree's simplified rules; with ``data``
    (:func:`pipeline.app.report.run_report.tree_data`) the rules carry leaf size, purity and majority class."""
    from pipeline.app.report.concept_run import check_text
    from pipeline.app.report.run_report import read_tree, rule_checks, sample_note

    cols = [c for c in _SHOWN if c in df.columns]
    table = pd.DataFrame({c: [_format(v, c) for v in df[c]] for c in cols})
    widths = {c: max(len(c), *(len(v) for v in table[c])) for c in cols}
    lines = [title, "", "  ".join(c.ljust(widths[c]) for c in cols)]
    lines += ["  ".join(str(v).ljust(widths[c]) for c, v in zip(cols, r)) for r in table.itertuples(index=False)]
    warning = stability_warning(df)
    if warning:
        lines += ["", warning]
    if "error" in df.columns:  # rows that could not be fitted: why, and what fixes it (the run went on)
        for r in df[df["error"].notna()].itertuples(index=False):
            lines += ["", f"{r.explainer} could not be fitted: {r.error}"]
    for row, fit in fits.items():
        tree, reading = read_tree(fit, data)
        rules = tree.rules(reading=reading)
        note = sample_note(data)
        checks = rule_checks(fit, data)
        lines += ["", f"{row} rules" + (f" ({note})" if note else "") + ":"]
        for r in rules[:max_rules]:
            lines.append(f"  {r}")
            measured = check_text(checks.get(int(r.leaf), []), data["measured"], tree.feature_names) if checks else ""
            if measured:
                lines.append(f"      {measured}")
        if len(rules) > max_rules:
            lines.append(f"  ... {len(rules) - max_rules} more (see trees/{row}.rules.txt)")
    return "\n".join(lines)


def stability_warning(df: pd.DataFrame) -> str | None:
    """A plain warning when the reference clustering's restarts disagree (the ``stability``
    column, mean ARI between restarts, below :data:`pipeline.clustering.STABILITY_THRESHOLD`)."""
    from pipeline.clustering import STABILITY_THRESHOLD

    if "stability" not in df.columns:
        return None
    ref = df[df["explainer"] == "reference"]
    value = float(ref["stability"].iloc[0]) if len(ref) else float("nan")
    if not value < STABILITY_THRESHOLD:  # NaN (a method without restarts) passes
        return None
    return (f"warning: the reference clustering is unstable: its restarts agree at a mean ARI of {value:.3f} "
            f"(below {STABILITY_THRESHOLD}), so another seed may give another partition and other trees. More "
            "restarts (clustering.params.n_init) or another clustering may settle it (docs/pipeline.md).")
