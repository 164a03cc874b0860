"""Sweep summaries: mean and standard deviation over seeds (pure: DataFrame in, DataFrame / Figure out).

A sweep's collected table has one row per job x explainer with the job's overrides as
columns. :func:`summarize_sweep` groups the rows by every override except ``seed`` (plus
the explainer row and its method) and reports ``<metric>_mean``, ``<metric>_std`` (sample
standard deviation, ddof=1; empty for a single run) and ``n_runs`` for each metric in
:data:`METRICS`. :func:`plot_metric_per_explainer` draws one metric's mean with ±1 SD error bars.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

# ARI / AMI vs ground truth, agreement with the reference, mis-assignment, q, size, fit time.
METRICS = ["ari", "ami", "ref_ari", "ref_ami", "misassignment", "q", "n_leaves", "depth", "fit_seconds"]
_ROW_KEYS = ["run", "dataset", "explainer", "method"]  # results columns that identify a row within a job
SEED_KEYS = ("seed",)
# Overrides that do not change results (cache control, paths, threads, reporting): never grouped by.
NOT_GROUPED = ("force", "threads", "offline")
NOT_GROUPED_PREFIXES = ("paths.", "hydra.", "cache.", "report.")


def grouping_keys(override_keys) -> list[str]:
    """The override keys a summary groups by: all but the seed and those that do not change results."""
    return [k for k in override_keys if k not in SEED_KEYS and k not in NOT_GROUPED
            and not k.startswith(NOT_GROUPED_PREFIXES)]


def group_columns(results: pd.DataFrame, override_keys) -> list[str]:
    """The columns a summary groups by: each override (as named in ``results``) but the seed, then
    the row keys (run, dataset, explainer, method) that the results have."""
    cols = []
    for key in grouping_keys(override_keys):
        col = f"{key}_override" if f"{key}_override" in results.columns else key
        if col in results.columns and col not in cols:
            cols.append(col)
    return cols + [c for c in _ROW_KEYS if c in results.columns and c not in cols]


def summarize_sweep(results: pd.DataFrame, override_keys) -> pd.DataFrame:
    """Mean, standard deviation (ddof=1) and number of runs of every metric, per group.

    Parameters
    ----------
    results : DataFrame
        One row per job x explainer (``collect_sweep``'s first table).
    override_keys : iterable of str
        The sweep's override keys (``seed`` is left out of the grouping).

    Returns
    -------
    DataFrame with the group columns, ``n_runs`` and ``<metric>_mean`` / ``<metric>_std`` for
    each metric present, in first-appearance order of the groups.
    """
    if results.empty:
        return pd.DataFrame()
    df = results
    if "error" in df.columns:  # failed explainer rows carry no metrics
        df = df[df["error"].isna() | (df["error"].astype(str) == "")]
    keys = group_columns(df, override_keys)
    metrics = [m for m in METRICS if m in df.columns]
    groups = df.groupby(keys, sort=False, dropna=False) if keys else [((), df)]
    rows = []
    for key, part in groups:
        key = key if isinstance(key, tuple) else (key,)
        row = dict(zip(keys, key))
        row["n_runs"] = len(part)
        for m in metrics:
            values = pd.to_numeric(part[m], errors="coerce")
            row[f"{m}_mean"] = values.mean()
            row[f"{m}_std"] = values.std(ddof=1) if values.notna().sum() > 1 else np.nan
        rows.append(row)
    return tidy_summary(pd.DataFrame(rows))


def tidy_summary(summary: pd.DataFrame) -> pd.DataFrame:
    """The summary as published: an override column that repeats a results column (``dataset_override``
    beside ``dataset``) shows once, metrics rounded (4 decimals; fit times 3 significant digits)."""
    out = summary.copy()
    for c in [c for c in out.columns if c.endswith("_override")]:
        same = c.removesuffix("_override")
        if same in out.columns and (out[c].astype(str) == out[same].astype(str)).all():
            out = out.drop(columns=c)
    for c in out.columns:
        if c.endswith(("_mean", "_std")) and pd.api.types.is_numeric_dtype(out[c]):
            out[c] = [significant(v, 3) for v in out[c]] if c.startswith("fit_seconds") else out[c].round(4)
    return out


def significant(v: float, digits: int = 3) -> float:
    """``v`` rounded to ``digits`` significant digits (NaN and 0 unchanged)."""
    if v != v or v == 0:
        return v
    return float(f"{v:.{digits}g}")


def plot_metric_per_explainer(summary: pd.DataFrame, metric: str = "ari", label: str | None = None) -> Figure:
    """``<metric>_mean`` ± ``<metric>_std`` per summary row (explainer, and the other group keys when they vary)."""
    if summary.empty or f"{metric}_mean" not in summary.columns:
        raise ValueError(f"the summary has no {metric}_mean column; was the sweep's results table empty?")
    keys = [c for c in summary.columns if c not in ("n_runs",) and not c.endswith(("_mean", "_std"))]
    varying, seen = [], set()
    for c in keys:  # an override and the results column it duplicates (dataset_override, dataset) show once
        name = c.removesuffix("_override")
        if summary[c].nunique(dropna=False) > 1 and name not in ("explainer", "method") and name not in seen:
            varying.append(c)
            seen.add(name)
    names = []
    for _, r in summary.iterrows():
        name = str(r.get("explainer", ""))
        extra = ", ".join(f"{c.removesuffix('_override')}={r[c]}" for c in varying)
        names.append(f"{name} ({extra})" if extra else name)
    n = len(summary)
    fig = Figure(figsize=(6.0, 0.32 * n + 1.3))
    ax = fig.add_subplot()
    pos = np.arange(n)[::-1]
    ax.errorbar(summary[f"{metric}_mean"], pos, xerr=np.nan_to_num(summary[f"{metric}_std"].to_numpy(float)),
                fmt="o", color="tab:blue", ecolor="tab:gray", capsize=3, ms=4)
    ax.set_yticks(pos[::-1], names[::-1], fontsize=7)  # first summary row on top
    ax.set_ylim(-0.7, n - 0.3)
    ax.grid(axis="x", color="#e5e5e5")
    if metric in ("ari", "ami", "ref_ari", "ref_ami"):  # agreement scores: the whole scale up to 1, not a zoom
        low = np.nanmin(summary[f"{metric}_mean"] - summary[f"{metric}_std"].fillna(0))
        ax.set_xlim(min(0.0, low - 0.05), 1.02)
    runs = summary["n_runs"]
    counts = f"{runs.min()}" if runs.min() == runs.max() else f"{runs.min()}-{runs.max()}"
    what = label or {"ari": "ARI vs ground truth"}.get(metric, metric)
    ax.set_xlabel(f"{what} (mean ± SD over {counts} seeds)")
    ax.set_title(f"{what} per explainer, mean ± SD over seeds", fontsize=9)
    fig.tight_layout()
    return fig
