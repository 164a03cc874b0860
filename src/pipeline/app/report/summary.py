"""The one-screen terminal summary of a run (a string; the runner prints it)."""

from __future__ import annotations

import re

import pandas as pd

from pipeline.app.artifacts import FitArtifact
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
    from pipeline.app.report.run_report import read_tree, sample_note

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
        lines += ["", f"{row} rules" + (f" ({note})" if note else "") + ":"] + [f"  {r}" for r in rules[:max_rules]]
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
    if not ranked:
        return text
    one = len(ranked) == 1
    text += (f" {_listed(ranked)} {'reads' if one else 'read'} as ranks ('in bottom 60%': the 60% of points lowest "
             "along it)")
    if (data or {}).get("units_kind") == "probability":
        text += (f": {'its' if one else 'their'} cuts fall where P(c) is below 0.01 or above 0.99, where the "
                 "probability no longer tells points apart.")
    else:
        text += ": this run's concept directions give no calibrated probability (docs/concepts.md)."
    return text


def _listed(labels) -> str:
    labels = [str(c) for c in labels]
    return labels[0] if len(labels) == 1 else ", ".join(labels[:-1]) + " and " + labels[-1]


def _found_by(groups, n: int, method: str | None = None) -> str:
    """``[(k, clusters)]`` as "clusters 3 and 5 were found by all 3, 0 by 2 [of the GMM's 3 restarts]"."""
    out = []
    for i, (k, these) in enumerate(groups):
        head = (f"cluster{'s' * (len(these) > 1)} {_listed(these)} {'were' if len(these) > 1 else 'was'} found by "
                if i == 0 else f"{_listed(these)} by ")
        out.append(head + (f"all {n}" if k == n else str(k)))
    return ", ".join(out) + (f" of the {method}'s {n} restarts" if method else "")


def stability_text(stability: dict | None, method: str = "GMM") -> tuple[str | None, bool]:
    """What differs between the reference clustering's restarts, for the explanation: by how many
    restarts each kept cluster (each cluster the rules end in) was found (a cluster of that restart
    with a Jaccard index of at least :data:`pipeline.clustering.FOUND_AGAIN` with it), and what the
    ``stability`` figure of the results table is (mean ARI of the kept restart with the others).

    Returns ``(sentence, warn)``: ``warn`` when some kept cluster was found by no more than half of
    the restarts (the kept one counted), so that another seed's restarts may well end elsewhere and
    the rules ending in it describe another group. On the four documented runs and 11 seeds
    (benchmarks/restart_seeds.py) it warned exactly where other seeds kept another partition.
    (None, False) without restarts to compare."""
    from pipeline.clustering import FOUND_AGAIN

    stability = stability or {}
    jaccard, clusters, kept = stability.get("cluster_jaccard"), stability.get("clusters"), stability.get("kept_ari")
    if not jaccard or not clusters or kept is None:
        return None, False
    n = len(jaccard[0]) + 1  # restarts, the kept one included
    found = {c: 1 + sum(float(v) >= FOUND_AGAIN for v in row) for c, row in zip(clusters, jaccard)}
    groups = [(k, these) for k in range(n, 0, -1) if (these := [c for c in clusters if found[c] == k])]
    how = (f"a restart finds a cluster when one of its clusters has a Jaccard index of at least {FOUND_AGAIN} with "
           f"it; stability {kept:.2f}: mean ARI of the kept restart with the others")
    few = [(k, these) for k, these in groups if k <= n / 2]
    if not few:
        text = (f"All {len(clusters)} clusters were found by each of the {method}'s {n} restarts" if len(groups) == 1
                else _found_by(groups, n, method))
        text = text[0].upper() + text[1:]
        return f"{text} ({how}): each cluster the rules end in was found by most restarts.", False
    lost = [c for _, these in few for c in these]
    text = _found_by(few, n, method) + (" (the kept one)" if few == [(1, lost)] else "")
    text += (f", so with another seed the rules ending in {'it' if len(lost) == 1 else 'them'} may describe "
             f"{'another group' if len(lost) == 1 else 'other groups'}")
    rest = [g for g in groups if g[0] > n / 2]
    text += (f"; {_found_by(rest, n)}" if rest else "") + f" ({how})."
    return (text + " More restarts (clustering.params.n_init=10) or another clustering make the kept partition "
            "depend less on the seed (docs/pipeline.md)."), True
