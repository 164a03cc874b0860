"""Tree figures: ``plot_tree(tree, ...) -> matplotlib Figure`` (pure; the caller saves or shows it).

Two layouts, chosen by size so that a figure stays readable at a paper's column width:

- ``"top-down"`` (small trees): the classic drawing, tests in boxes, "yes"/"no" on edges;
- ``"indented"`` (trees too wide for that): one row per node, children indented under
  their parent and joined by elbow lines; each row states the test that leads to it, so the
  width depends on the depth and the text, not on the number of leaves (like
  ``sklearn.tree.export_text``, drawn).

Leaves show their cluster and, when data are given, size, purity with respect to the
reference and the majority ground-truth class. Leaf fills use the categorical cluster
colours of :func:`cluster_colour`, shared with the concept scatter.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass

import matplotlib as mpl
import numpy as np
from matplotlib.figure import Figure

from pipeline.app.configuration.explainers import method_name, shipped_explainer
from pipeline.app.execution.encoding import FORMATS, figure_bytes  # noqa: F401 (figures are encoded there)
from pipeline.trees.rules import Condition, LeafStats
from pipeline.trees.tree import ExplanationTree

FONT = 8.0  # points: readable when the figure is printed at its own size
PRINT_FONT = 7.0  # points: the smallest text of the column-width variants (3.3 in, 6.9 in)
COLUMN_WIDTHS = {"column": 3.3, "wide": 6.9}  # inches: one and two columns of a two-column paper


@dataclass(frozen=True)
class _Style:
    """Text sizes of one drawing: ``font`` points; ``char`` / ``line`` inches per character / line."""

    font: float = FONT
    small: float = FONT - 1.5  # the yes/no edge labels

    @property
    def char(self) -> float:
        return 0.55 * self.font / 72  # average sans-serif character

    @property
    def line(self) -> float:
        return 1.35 * self.font / 72


_WRAP = 60  # characters per line of a test in the indented layout (oblique tests wrap between terms)
_TOP_DOWN_MAX_WIDTH = 7.0  # inches; wider trees use the indented layout


def tree_title(row: str, method: str, tree: ExplanationTree, dataset: str | None = None,
               ari: float | None = None) -> str:
    """E.g. ``Concept-CART on mnist: 10 leaves, depth 4, ARI 0.451 vs ground truth`` (the row's display
    name when it is a shipped explainer row, else ``row (Method)``)."""
    who = method_name(row) if row == method or shipped_explainer(row) else f"{row} ({method_name(method)})"
    where = f" on {dataset}" if dataset else ""
    score = f", ARI {ari:.3f} vs ground truth" if ari is not None and ari == ari else ""
    return f"{who}{where}: {tree.n_leaves} leaves, depth {tree.depth}{score}"


def cluster_colour(label: int, light: bool = False):
    """The categorical colour of cluster ``label`` (tab20 order: strong colours first); grey for -1."""
    if label < 0:
        return (0.85, 0.85, 0.85, 1.0) if light else (0.5, 0.5, 0.5, 1.0)
    cmap = mpl.colormaps["tab20"]
    order = [i for i in range(0, 20, 2) if i != 14] + [i for i in range(1, 20, 2) if i != 15]  # no greys
    strong = cmap(order[label % len(order)])
    if not light:
        return strong
    return tuple(0.7 + 0.3 * c for c in strong[:3]) + (1.0,)


def node_condition(tree: ExplanationTree, node: int) -> Condition:
    """The test of internal ``node`` as a Condition (``<=`` goes left), in the tree's feature names."""
    return tree.condition(node)


def layout(tree: ExplanationTree) -> dict[int, tuple[float, int]]:
    """(x, depth) of every node: leaves at consecutive x in left-to-right order, parents centred."""
    pos: dict[int, tuple[float, int]] = {}
    next_x = [0.0]

    def walk(n: int, d: int) -> float:
        if tree.is_leaf(n):
            x = next_x[0]
            next_x[0] += 1.0
        else:
            x = (walk(int(tree.children_left[n]), d + 1) + walk(int(tree.children_right[n]), d + 1)) / 2
        pos[n] = (x, d)
        return x

    walk(0, 0)
    return pos


def leaf_lines(tree: ExplanationTree, leaf: int, stats: dict[int, LeafStats] | None,
               cluster_names=None) -> list[str]:
    """The text of a leaf box: cluster (and its name), size · purity, majority class."""
    label = int(tree.label[leaf])
    head = tree.leaf_name(label) if label >= 0 else "no cluster"
    lines = [head]
    if cluster_names is not None and 0 <= label < len(cluster_names):
        lines.append(str(cluster_names[label]))
    s = (stats or {}).get(int(leaf))
    if s is not None:
        parts = s.parts()
        lines.append(" · ".join(p.replace(" points", " pts").replace(" point", " pt") for p in parts[:2]))
        lines += parts[2:]
    return lines


def wrap_terms(text: str, width: int) -> str:
    """Wrap a test over lines of about ``width`` characters, breaking only between the terms of
    a weighted sum (before "+ " / "- "), never inside a feature name."""
    terms = re.split(r" (?=[+-] )", text)
    lines = [terms[0]]
    for term in terms[1:]:
        if len(lines[-1]) + 1 + len(term) <= width:
            lines[-1] += " " + term
        else:
            lines.append(term)
    return "\n".join(lines)


def plot_tree(tree: ExplanationTree, X=None, reference=None, y=None, class_names=None, cluster_names=None,
              title: str | None = None, layout_name: str = "auto", units=None, width: float | None = None,
              reading=None) -> Figure:
    """Draw ``tree`` with its tests, leaf clusters and (given data) leaf annotations.

    Parameters
    ----------
    tree : ExplanationTree
    X : array-like of shape (n_samples, n_features), optional
        Data the leaves are annotated with (size, and with ``reference`` / ``y`` purity and
        majority class; see :meth:`ExplanationTree.leaf_stats`).
    reference, y : array-like of shape (n_samples,), optional
    class_names : sequence of str, optional
        Names of the ground-truth classes in ``y``.
    cluster_names : sequence of str, optional
        Names of the cluster ids shown under "cluster k".
    title : str, optional
    layout_name : {"auto", "top-down", "indented"}
        "auto" draws top-down when that fits in 7 inches, else indented.
    units : sequence of display maps (or None) per feature, optional
        How thresholds read (:class:`pipeline.trees.display.RuleDisplay`); with ``X`` every
        threshold is the shortest decimal that routes the training points as the tree does.
    width : float, optional
        Fit the drawing into ``width`` inches with all text at 7 pt (``COLUMN_WIDTHS``: 3.3 for
        one column of a two-column paper, 6.9 for both): tests, leaf lines and the title wrap
        to the width, and the top-down layout is used only when it fits.
    reading : pipeline.trees.tree.Reading, optional
        The tests and leaf statistics computed once (:meth:`ExplanationTree.read`); replaces
        ``X``, ``reference``, ``y``, ``class_names`` and ``units``.

    Returns
    -------
    matplotlib.figure.Figure
    """
    reading = reading or tree.read(X, reference, y, class_names, units)
    stats, display = reading.stats or None, reading.display  # no rows: no leaf annotations
    if layout_name not in ("auto", "top-down", "indented"):
        raise ValueError(f"layout_name must be 'auto', 'top-down' or 'indented', got {layout_name!r}.")
    style = _Style() if width is None else _Style(PRINT_FONT, PRINT_FONT)
    col = _column_width(tree, stats, cluster_names, style)
    limit = _TOP_DOWN_MAX_WIDTH if width is None else width
    if title and width is not None:
        title = textwrap.fill(title, max(20, int(width / (style.char * 1.1))))
    if layout_name == "top-down" or (layout_name == "auto" and col * tree.n_leaves <= limit):
        return _top_down(tree, stats, cluster_names, title, col, display, style)
    return _indented(tree, stats, cluster_names, title, display, style, width)


def _column_width(tree, stats, cluster_names, style: _Style = _Style()) -> float:
    """Inches per leaf in the top-down layout: the widest leaf text, or a wrapped test."""
    chars = [len(s) for n in tree.leaves for s in leaf_lines(tree, n, stats, cluster_names)]
    return max(1.0, (max(chars, default=8) + 3) * style.char)


def _box(fc, ec):
    return dict(boxstyle="round,pad=0.3", fc=fc, ec=ec, lw=0.8)


def _top_down(tree, stats, cluster_names, title, col, display=None, style: _Style = _Style()) -> Figure:
    pos = layout(tree)
    depth = max(d for _, d in pos.values())
    wrap = max(12, int(2 * col / style.char) - 4)  # a test may span about two leaf columns
    tests = {n: wrap_terms(tree.condition(n, "<=", display).format(), wrap)
             for n in pos if not tree.is_leaf(n)}
    leaves = {n: "\n".join(leaf_lines(tree, n, stats, cluster_names)) for n in pos if tree.is_leaf(n)}
    tallest = max(s.count("\n") + 1 for s in [*tests.values(), *leaves.values()])
    level = tallest * style.line + 0.45  # inches per depth level
    head = _title_height(title, style)
    width, height = col * tree.n_leaves, level * (depth + 1) + head
    fig = Figure(figsize=(max(width, 2.0), height))
    ax = fig.add_axes((0, 0, 1, 1 - (head / height if title else 0)))
    ax.set_axis_off()
    for n, (x, d) in pos.items():
        if n in leaves:
            label = int(tree.label[n])
            ax.text(x, -d, leaves[n], ha="center", va="center", fontsize=style.font, zorder=3,
                    bbox=_box(cluster_colour(label, light=True), cluster_colour(label)))
            continue
        for child, yes in ((int(tree.children_left[n]), True), (int(tree.children_right[n]), False)):
            cx, cd = pos[child]
            ax.plot([x, cx], [-d, -cd], color="#888888", lw=0.8, zorder=1)
            ax.text(x + 0.55 * (cx - x), -d - 0.55 * (cd - d), "yes" if yes else "no", fontsize=style.small,
                    color="#444444", ha="center", va="center", bbox=dict(fc="white", ec="none", pad=0.3), zorder=2)
        ax.text(x, -d, tests[n], ha="center", va="center", fontsize=style.font, zorder=3,
                bbox=_box("#eef2fa", "#34558b"))
    ax.set_xlim(-0.5, tree.n_leaves - 0.5)
    ax.set_ylim(-depth - 0.5 * (1 + 0.2 / level), 0.5 * (1 + 0.2 / level))
    if title:
        fig.suptitle(title, fontsize=style.font + 1, y=1 - 0.12 / height, va="top")
    return fig


def _indented(tree, stats, cluster_names, title, display=None, style: _Style = _Style(),
              fit: float | None = None) -> Figure:
    """One row per node (depth-first); each row shows the test leading to it, leaves their cluster
    (second line: size, purity, majority class), so the width follows the depth and the text."""
    rows: list[tuple[int, int, str, int | None]] = []  # (node, depth, text, parent row)

    def walk(n: int, d: int, text: str, parent: int | None) -> None:
        me = len(rows)
        if tree.is_leaf(n):
            head, *rest = leaf_lines(tree, n, stats, cluster_names)
            text = f"{text}  →  {head}" + ("\n" + " · ".join(rest) if rest else "")
        rows.append((n, d, text, parent))
        if not tree.is_leaf(n):
            for child, op in ((int(tree.children_left[n]), "<="), (int(tree.children_right[n]), ">")):
                test = tree.condition(n, op, display).format()  # every term: long sums wrap, never cut
                walk(child, d + 1, test if fit is not None else wrap_terms(test, _WRAP), me)

    n_points = sum(s.size for s in stats.values()) if stats else None
    walk(0, 0, "all points" + (f" ({n_points})" if n_points is not None else ""), None)
    indent = 0.2 if fit is None else 0.12  # inches per depth level
    if fit is not None:  # wrap every row into the width left after its indent
        rows = [(n, d, _wrap_row(t, max(14, int((fit - 0.4 - d * indent) / style.char))), p) for n, d, t, p in rows]
    heights = [1.0 + 0.95 * t.count("\n") for _, _, t, _ in rows]  # in text rows
    centres = np.cumsum(heights) - np.asarray(heights) / 2
    width = max(d * indent + max(len(line) for line in t.split("\n")) * style.char for _, d, t, _ in rows) + 0.3
    row_h = 1.75 * style.font / 72
    total = float(np.sum(heights))
    head = _title_height(title, style)
    height = row_h * (total + 0.4) + head
    # savefig's tight box adds 0.1 in on each side: the drawing itself keeps 0.2 in under ``fit``
    fig = Figure(figsize=(max(width, 2.0) if fit is None else min(max(width, 2.0), fit - 0.2), height))
    top = 1 - (head / height if title else 0.02)
    ax = fig.add_axes((0.02, 0, 0.98, top))
    ax.set_axis_off()
    ax.set_xlim(0, fig.get_figwidth() - 0.04)
    ax.set_ylim(-total - 0.2, 0.2)
    for i, (n, d, text, parent) in enumerate(rows):
        x, yc = d * indent, -centres[i]
        if parent is not None:
            px = rows[parent][1] * indent + 0.06
            ax.plot([px, px, x - 0.02], [-centres[parent] - 0.4, yc, yc], color="#888888", lw=0.7)
        if tree.is_leaf(n):
            label = int(tree.label[n])
            ax.text(x, yc, text, fontsize=style.font, va="center", ha="left", linespacing=1.15,
                    bbox=dict(boxstyle="round,pad=0.2", fc=cluster_colour(label, light=True),
                              ec=cluster_colour(label), lw=0.6))
        else:
            ax.text(x, yc, text, fontsize=style.font, va="center", ha="left", color="#1f3559")
    if title:
        fig.suptitle(title, fontsize=style.font + 1, y=1 - 0.12 / height, va="top")
    return fig


def _title_height(title: str | None, style: _Style) -> float:
    """Inches above the drawing for a (possibly wrapped) title."""
    return 0.3 + 1.2 * (style.font + 1) / 72 * title.count("\n") if title else 0.05


def _wrap_row(text: str, width: int) -> str:
    """Lines of at most about ``width`` characters: break before ``→``, between the terms of a sum
    and between the `` · `` parts of a leaf's annotation (never inside a name)."""
    out = []
    for line in text.replace("  →  ", "\n→ ").split("\n"):
        parts = re.split(r"(?<= ·) | (?=[+-] )", line)
        cur = parts[0]
        for part in parts[1:]:
            if len(cur) + 1 + len(part) <= width:
                cur += " " + part
            else:
                out.append(cur)
                cur = part
        out.append(cur)
    return "\n".join(out)
