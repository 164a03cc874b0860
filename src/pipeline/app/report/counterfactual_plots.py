"""Counterfactual explanation figures and files.

``plot_translation(delta, names, k) -> Figure`` is pure (the caller saves or shows it);
``write_counterfactuals`` writes a run's pairwise table and one figure per pair.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from pipeline.app.report.writer import atomic_write, write_tables
from pipeline.validation import InvalidInputError, check_vector


def plot_translation(delta, feature_names, k: int | None = None, title: str | None = None) -> Figure:
    """Horizontal bar chart of the ``k`` largest changes of one translation, largest on top.

    Parameters
    ----------
    delta : array-like of shape (d,)
        The translation (input features, latents or concept coordinates).
    feature_names : sequence of d str
    k : int or None
        Number of bars (default: every non-zero entry, at most 20).
    title : str, optional

    Returns
    -------
    matplotlib.figure.Figure
    """
    delta = check_vector(delta, "delta")
    if len(feature_names) != delta.shape[0]:
        raise InvalidInputError(f"{len(feature_names)} feature names for a translation of length {delta.shape[0]}.")
    order = [q for q in np.argsort(-np.abs(delta), kind="stable") if delta[q] != 0]
    order = order[: (k if k is not None else 20)]
    fig = Figure(figsize=(6, 0.45 * max(len(order), 1) + 1.2))
    ax = fig.add_subplot()
    values = delta[order][::-1]
    ax.barh(range(len(order)), values, color=["tab:red" if v < 0 else "tab:blue" for v in values])
    ax.set_yticks(range(len(order)), [str(feature_names[q]) for q in order][::-1])
    ax.axvline(0, color="black", linewidth=0.8)
    ax.set_xlabel("change")
    if title:
        ax.set_title(title)
    fig.tight_layout()
    return fig


def counterfactual_table(artifact: dict) -> pd.DataFrame:
    """The counterfactuals stage artifact as a table: one row per (method, ordered pair)."""
    return pd.DataFrame(artifact["rows"], columns=["method", "from", "to", "k", "correctness", "coverage",
                                                   "explanation"])


def write_counterfactuals(out_dir: Path, artifact: dict, figures: bool = True) -> list[Path]:
    """``counterfactuals.csv|md`` and ``figures/counterfactuals/<method>_<from>_to_<to>.png``."""
    table = counterfactual_table(artifact)
    written = list(write_tables(out_dir, table, "counterfactuals"))
    if figures:
        names = list(artifact["feature_names"])
        for row, delta in zip(artifact["rows"], artifact["deltas"]):
            title = (f"{row['method'].upper()} cluster {row['from']} → {row['to']} ({artifact['space']}): "
                     f"cr {row['correctness']:.2f}, cv {row['coverage']:.2f}")
            buf = io.BytesIO()
            plot_translation(delta, names, row["k"], title).savefig(buf, format="png", dpi=100)
            path = Path(out_dir) / "figures" / "counterfactuals" / f"{row['method']}_{row['from']}_to_{row['to']}.png"
            written.append(atomic_write(path, buf.getvalue()))
    return written
