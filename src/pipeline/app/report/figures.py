"""Tree figures: ``plot_tree(tree) -> matplotlib Figure`` (pure; the caller saves or shows it)."""

from __future__ import annotations

import textwrap

from matplotlib.figure import Figure

from pipeline.trees.tree import Condition, ExplanationTree

_WRAP = 34  # characters per line of a node's test (oblique tests wrap over several lines)


def node_condition(tree: ExplanationTree, node: int) -> Condition:
    """The test of internal ``node`` as a Condition (``<=`` goes left), in the tree's feature names."""
    oblique = tree.is_oblique(node)
    return Condition(op="<=", threshold=float(tree.threshold[node]), names=tree.feature_names,
                     feature=None if oblique else int(tree.feature[node]),
                     weights=tree.weights(node) if oblique else None)


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


def plot_tree(tree: ExplanationTree, class_names=None, title: str | None = None) -> Figure:
    """Draw ``tree``: internal nodes show their (axis-aligned or oblique) test, leaves their cluster.

    Parameters
    ----------
    tree : ExplanationTree
    class_names : sequence of str, optional
        Names of the cluster ids shown in leaves.
    title : str, optional

    Returns
    -------
    matplotlib.figure.Figure
    """
    pos = layout(tree)
    depth = max(d for _, d in pos.values())
    n_leaves = tree.n_leaves
    lines = [textwrap.fill(str(node_condition(tree, n)), _WRAP) for n in pos if not tree.is_leaf(n)]
    tallest = max((s.count("\n") + 1 for s in lines), default=1)
    fig = Figure(figsize=(max(4.0, 2.3 * n_leaves), max(2.5, (1.1 + 0.25 * tallest) * (depth + 1))))
    ax = fig.add_subplot()
    ax.set_axis_off()
    for n, (x, d) in pos.items():
        if tree.is_leaf(n):
            label = int(tree.label[n])
            text = f"cluster {label}"
            if class_names is not None and 0 <= label < len(class_names):
                text += f"\n{class_names[label]}"
            box = dict(boxstyle="round", fc="#e8f4e8", ec="#3a7d3a")
        else:
            text = textwrap.fill(str(node_condition(tree, n)), _WRAP)
            box = dict(boxstyle="round", fc="#eef2fa", ec="#34558b")
            for child, yes in ((int(tree.children_left[n]), True), (int(tree.children_right[n]), False)):
                cx, cd = pos[child]
                ax.plot([x, cx], [-d, -cd], color="#777777", lw=1, zorder=1)
                ax.text((x + cx) / 2, -(d + cd) / 2, "yes" if yes else "no", fontsize=7, color="#555555",
                        ha="center", va="center", bbox=dict(fc="white", ec="none", pad=0.5), zorder=2)
        ax.text(x, -d, text, ha="center", va="center", fontsize=8, bbox=box, zorder=3)
    ax.set_xlim(-0.7, n_leaves - 0.3)
    ax.set_ylim(-depth - 0.6, 0.6)
    if title:
        ax.set_title(title, fontsize=10)
    fig.tight_layout()
    return fig
