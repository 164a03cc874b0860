"""Results tables as pandas DataFrames and Markdown (no file I/O here)."""

from __future__ import annotations

import math

import pandas as pd

COLUMNS = ["explainer", "method", "ari", "ami", "ref_ari", "ref_ami", "misassignment", "q", "q_bound",
           "n_leaves", "depth", "fit_seconds", "n_noise", "uses_labels"]
"""The results table's column order (see :mod:`pipeline.app.stages.evaluate` for their meaning)."""

def results_frame(rows: list[dict], extra: dict | None = None) -> pd.DataFrame:
    """Results rows (the evaluate stage's) as a DataFrame with the standard column order;
    ``extra`` adds constant columns in front (dataset, clustering, ...)."""
    df = pd.DataFrame(rows)
    cols = [c for c in COLUMNS if c in df.columns] + [c for c in df.columns if c not in COLUMNS]
    df = df[cols]
    for i, (k, v) in enumerate((extra or {}).items()):
        df.insert(i, k, v)
    return df


def is_time(column) -> bool:
    """Columns holding durations (``fit_seconds``, ``MMDT time (s)``): printed with 3 significant digits."""
    return str(column).endswith(("seconds", "time (s)", "seconds_mean", "seconds_std"))


COUNTS = {"n_leaves", "depth", "n_noise", "n_runs", "samples", "K", "CAVs", "independent CAVs"}  # whole numbers


def format_cell(v, column=None) -> str:
    """A table cell: NaN empty, floats to 3 decimals (4 significant digits below 0.01); durations
    (``column`` a time column, :func:`is_time`) with 3 significant digits, so 0.15 s and 0.00232 s
    read alike; counts (``COUNTS``, read as floats when a row has none) as integers."""
    if isinstance(v, float):
        if math.isnan(v):
            return ""
        if column in COUNTS and v.is_integer():
            return str(int(v))
        if is_time(column):
            return f"{v:.3g}"
        return f"{v:.4g}" if abs(v) < 1e-2 and v != 0 else f"{v:.3f}"
    return str(v)


def format_markdown(df: pd.DataFrame) -> str:
    """A GitHub-flavoured Markdown table (NaN shown empty, floats to 3 decimals)."""
    head = "| " + " | ".join(str(c) for c in df.columns) + " |"
    sep = "|" + "|".join("---" for _ in df.columns) + "|"
    body = ["| " + " | ".join(format_cell(v, c) for v, c in zip(row, df.columns)) + " |"
            for row in df.itertuples(index=False)]
    return "\n".join([head, sep, *body]) + "\n"
