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
    # Keep our row order (reference first within each run); paper-only rows go after.
    position = {key: i for i, key in enumerate(zip(ours["run"], ours["explainer"]))}
    position.update({key: len(position) + i for i, key in enumerate(zip(pub["run"], pub["explainer"]))
                     if key not in position})
    rank = [position[key] for key in zip(merged["run"], merged["explainer"])]
    return merged[order].iloc[sorted(range(len(merged)), key=rank.__getitem__)].reset_index(drop=True)
