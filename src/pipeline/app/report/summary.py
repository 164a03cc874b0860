"""The one-screen terminal summary of a run (a string; the runner prints it)."""

from __future__ import annotations

import re

import pandas as pd

from pipeline.app.stores.artifacts import FitArtifact
from pipeline.app.report.stability import listed, stability_text
from pipeline.app.report.tables import format_cell

_SHOWN = ["explainer", "method", "ari", "stability", "ami", "ref_ari", "misassignment", "q", "n_leaves", "depth", "fit_seconds"]


_COUNTS = {"n_leaves", "depth"}  # shown as integers (read as floats when a row has none)

#: what each column of the console's results table means (the legend under it; the report's words)
LEGEND = {
    "ari": "ari/ami: vs the true classes",
    "stability": "stability: the reference's restarts agree (1 = all alike; report.html says which clusters differ)",
    "ref_ari": "ref_ari: a tree vs the reference clustering it explains",
    "misassignment": "misassignment: share of points a tree puts outside their reference cluster",
    "q": "q: explainability-to-noise ratio of a mean-based tree (higher: fewer misassigned; docs/mmdt.md)",
}

#: a concept term read in percentiles of the data: ``vertical_line in bottom 59.8%``, ``... in percentiles 17.4–59.8``
_PERCENTILE_TERM = re.compile(r"^(.+?) in (?:bottom|top|percentiles) ")


def _format(value, column: str) -> str:
    if column in _COUNTS and isinstance(value, float) and value == value and value.is_integer():
        return str(int(value))
    return format_cell(value, column)


def summary_text(title: str, df: pd.DataFrame, fits: dict[str, FitArtifact], max_rules: int = 12,
                 data: dict | None = None, stability: dict | None = None) -> str:
    """Results table and each tree's simplified rules; with ``data``
    (:func:`pipeline.app.report.run_report.tree_data`) the rules carry leaf size, purity and majority class;
    with ``stability`` (the reference clustering's ``scores["stability"]``) a warning when a cluster
    the rules end in was found by too few of its restarts (:func:`stability_text`). A short legend
    follows the table and the rules."""
    from pipeline.app.report.concept_run import check_text
    from pipeline.app.report.run_report import read_tree, rule_checks, sample_note

    cols = [c for c in _SHOWN if c in df.columns]
    table = pd.DataFrame({c: [_format(v, c) for v in df[c]] for c in cols})
    widths = {c: max(len(c), *(len(v) for v in table[c])) for c in cols}
    lines = [title, "", "  ".join(c.ljust(widths[c]) for c in cols)]
    lines += ["  ".join(str(v).ljust(widths[c]) for c, v in zip(cols, r)) for r in table.itertuples(index=False)]
    legend = [LEGEND[c] for c in cols if c in LEGEND and (c != "q" or df[c].notna().any())]
    if legend:
        lines += ["", " · ".join(legend) + "."]
    sentence, warn = stability_text(stability, method=str(df["method"].iloc[0]).upper() if len(df) else "GMM")
    if warn:  # a cluster the rules end in may be another group with another seed (the report always says it)
        lines += ["", f"warning: {sentence}"]
    if "error" in df.columns:  # rows that could not be fitted: why, and what fixes it (the run went on)
        for r in df[df["error"].notna()].itertuples(index=False):
            lines += ["", f"{r.explainer} could not be fitted: {r.error}"]
    printed = []
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
        printed += [str(r) for r in rules[:max_rules]]
    if printed:
        lines += ["", rules_legend(printed, data)]
    return "\n".join(lines)


def rules_legend(rules: list[str], data: dict | None = None) -> str:
    """How to read the printed rules: what follows the arrow and, where a concept reads in
    percentiles of the data, what that means and why it is not a probability there."""
    text = "Rules: conditions → reference cluster · points in the leaf · % pure: share of them in that cluster"
    text += (' · mostly "c" (s%): their commonest true class.' if data and data.get("y") is not None else ".")
    ranked = []
    for rule in rules:
        for term in rule.split(" → ")[0].split(" and "):
            m = _PERCENTILE_TERM.match(term.strip())
            if m and m.group(1) not in ranked:
                ranked.append(m.group(1))
    measured = (data or {}).get("measured")
    if measured is not None:
        text += (" measured: the same cuts checked on the items' measurements — the share of the leaf's items with (or "
                 "without) a presence concept, or in the same percentiles of the measured values as the cut (a random "
                 "item's chance is the percentiles' width).")
    if not ranked:
        return text
    thirds = {m["name"] for m in (measured or {}).get("measures", []) if m and m.get("split") == "tertiles"}
    split_in_thirds = [n for n in ranked if n in thirds]
    ranked = [n for n in ranked if n not in thirds]
    if split_in_thirds:
        text += (f" {listed(split_in_thirds)} {'reads' if len(split_in_thirds) == 1 else 'read'} as ranks of the "
                 "concept coordinate ('in top 30%': the 30% of points highest along it): a measured property split in "
                 "thirds has no probability model.")
    if not ranked:
        return text
    one = len(ranked) == 1
    text += (f" {listed(ranked)} {'reads' if one else 'read'} as ranks ('in bottom 60%': the 60% of points lowest "
             "along it)")
    if (data or {}).get("units_kind") == "probability":
        text += (f": {'its' if one else 'their'} cuts fall where P(c) is below 0.01 or above 0.99, where the "
                 "probability no longer tells points apart.")
    else:
        text += ": this run's concept directions give no calibrated probability (docs/concepts.md)."
    return text
