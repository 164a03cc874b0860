"""Counterfactual explanation figures and files.

``plot_translation(delta, names, k) -> Figure`` is pure (the caller saves or shows it);
``plot_pair_scores(table) -> Figure`` too; ``write_counterfactuals`` writes a run's pairwise table
(best-explained pairs first), the per-pair score chart and one figure per pair, each titled with
its correctness and coverage.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from pipeline.app.stores.artifacts import CounterfactualsArtifact
from pipeline.app.report.writer import write_tables
from pipeline.app.stores.writing import atomic_write
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
        ax.set_title(title, fontsize=9)
    fig.tight_layout()
    return fig


def counterfactual_table(artifact: CounterfactualsArtifact) -> pd.DataFrame:
    """The counterfactuals stage artifact as a table: one row per (method, ordered pair), the
    best-explained pairs first (correctness, then coverage, descending; ties keep stage order)."""
    table = pd.DataFrame(artifact.rows, columns=["method", "from", "to", "k", "correctness", "coverage",
                                                    "explanation"])
    return table.sort_values(["method", "correctness", "coverage"], ascending=[True, False, False],
                             kind="stable").reset_index(drop=True)


def translation_title(row: dict, space: str) -> str:
    """E.g. ``TGT: cluster 3 → 7 (concepts) · correctness 0.93 · coverage 0.88``."""
    return (f"{row['method'].upper()}: cluster {row['from']} → {row['to']} ({space}) · "
            f"correctness {row['correctness']:.2f} · coverage {row['coverage']:.2f}")


def plot_pair_scores(table: pd.DataFrame, method: str | None = None, max_pairs: int = 30) -> Figure:
    """Correctness and coverage of each pair's explanation as horizontal bars, best-explained on top.

    The title states the method and the mean correctness and coverage over all pairs.
    """
    df = table if method is None else table[table["method"] == method]
    df = df.sort_values(["correctness", "coverage"], ascending=False, kind="stable")
    shown = df.head(max_pairs)
    fig = Figure(figsize=(6, 0.28 * max(len(shown), 1) + 1.3))
    ax = fig.add_subplot()
    pos = np.arange(len(shown))[::-1]  # best pair on top
    ax.barh(pos + 0.2, shown["correctness"], height=0.4, color="tab:blue", label="correctness")
    ax.barh(pos - 0.2, shown["coverage"], height=0.4, color="tab:orange", label="coverage")
    names = [f"{m.upper()} {a} → {b}" if method is None else f"{a} → {b}"
             for m, a, b in zip(shown["method"], shown["from"], shown["to"])]
    ax.set_yticks(pos[::-1], names[::-1], fontsize=7)
    ax.set_xlim(0, 1)
    ax.set_xlabel("share of points (correctness: of the source cluster; coverage: of the target)")
    ax.legend(loc="lower right", fontsize=7)
    who = (method or "/".join(sorted(df["method"].str.upper().unique()))).upper()
    more = f"; {len(df) - len(shown)} more pairs not shown" if len(df) > len(shown) else ""
    ax.set_title(f"{who}: explanations between clusters, best first (mean correctness "
                 f"{df['correctness'].mean():.2f}, coverage {df['coverage'].mean():.2f}{more})", fontsize=8)
    fig.tight_layout()
    return fig


def write_counterfactuals(out_dir: Path, artifact: CounterfactualsArtifact, figures: bool = True) -> list[Path]:
    """``counterfactuals.csv|md`` (best-explained pairs first), ``figures/counterfactuals_pairs.{png,svg,pdf}``
    and ``figures/counterfactuals/<method>_<from>_to_<to>.png`` (title: correctness and coverage)."""
    from pipeline.app.report.figures import FORMATS, figure_bytes

    table = counterfactual_table(artifact)
    written = list(write_tables(out_dir, table, "counterfactuals"))
    if figures:
        summary = plot_pair_scores(table)
        for fmt in FORMATS:
            written.append(atomic_write(Path(out_dir) / "figures" / f"counterfactuals_pairs.{fmt}",
                                        figure_bytes(summary, fmt)))
        names = list(artifact.feature_names)
        for row, delta in zip(artifact.rows, artifact.deltas):
            buf = io.BytesIO()
            plot_translation(delta, names, row["k"], translation_title(row, artifact.space)).savefig(
                buf, format="png", dpi=100)
            path = Path(out_dir) / "figures" / "counterfactuals" / f"{row['method']}_{row['from']}_to_{row['to']}.png"
            written.append(atomic_write(path, buf.getvalue()))
    return written
