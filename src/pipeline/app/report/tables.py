"""Results tables as pandas DataFrames and Markdown (no file I/O here)."""

from __future__ import annotations

import math

import pandas as pd

from pipeline.app.stages.evaluate import COLUMNS


def results_frame(rows: list[dict], extra: dict | None = None) -> pd.DataFrame:
    """Rows from :func:`pipeline.app.stages.evaluate.evaluate` as a DataFrame with the standard column order;
    ``extra`` adds constant columns in front (dataset, clustering, ...)."""
    df = pd.DataFrame(rows)
    cols = [c for c in COLUMNS if c in df.columns] + [c for c in df.columns if c not in COLUMNS]
    df = df[cols]
    for i, (k, v) in enumerate((extra or {}).items()):
        df.insert(i, k, v)
    return df


def _cell(v) -> str:
    if isinstance(v, float):
        if math.isnan(v):
            return ""
        return f"{v:.4g}" if abs(v) < 1e-2 and v != 0 else f"{v:.3f}"
    return str(v)


def format_markdown(df: pd.DataFrame) -> str:
    """A GitHub-flavoured Markdown table (NaN shown empty, floats to 3 decimals)."""
    head = "| " + " | ".join(str(c) for c in df.columns) + " |"
    sep = "|" + "|".join("---" for _ in df.columns) + "|"
    body = ["| " + " | ".join(_cell(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join([head, sep, *body]) + "\n"
