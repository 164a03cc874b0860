"""Experiments: our results beside a paper's published values (pure pandas, no I/O)."""

from __future__ import annotations

import pandas as pd

_KEYS = ["run", "explainer"]


def compare_with_published(ours: pd.DataFrame, published: list[dict]) -> pd.DataFrame:
    """One row per (run, explainer) of ``ours``; each metric the paper reports appears twice:
    ``<metric>`` (ours) and ``<metric>_paper``.

    Parameters
    ----------
    ours : DataFrame with columns run, explainer and metric columns (ari, ami, ref_ari, fit_seconds, ...)
    published : list of dict
        Entries ``{"run": ..., "explainer": ..., <metric>: value, ...}``; other keys (e.g. ``base``,
        ``note``) are carried over as ``<key>_paper``.
    """
    pub = pd.DataFrame(published)
    if pub.empty:
        return ours.copy()
    metrics = [c for c in pub.columns if c not in _KEYS]
    left = ours[[c for c in ours.columns if c in _KEYS + ["method"] + metrics or c == "error"]]
    merged = left.merge(pub.rename(columns={m: f"{m}_paper" for m in metrics}), on=_KEYS, how="outer")
    order = [*_KEYS, *(["method"] if "method" in merged.columns else [])]
    for m in metrics:
        order += [c for c in (m, f"{m}_paper") if c in merged.columns]
    order += [c for c in merged.columns if c not in order]
    run_order = {r: i for i, r in enumerate(dict.fromkeys(list(ours["run"]) + list(pub["run"])))}
    merged = merged[order].sort_values("run", key=lambda s: s.map(run_order), kind="stable")
    return merged.reset_index(drop=True)
