"""Figures and tables for inspecting a concept tree (tree -> Figure; no files written).

Used by ``notebooks/inspect_concept_tree.ipynb``: leaf sizes and purity, example inputs
per leaf (thumbnails or text snippets), per-concept CAV accuracy, and the 2-D scatter of
the root's two concepts coloured by cluster with the tree's cuts (MMDT paper, Figs. 3-4).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from pipeline.trees.tree import ExplanationTree


def leaf_table(tree: ExplanationTree, X, reference, y=None, class_names=None) -> pd.DataFrame:
    """Per leaf: its cluster label, size, purity, majority reference cluster and (given ``y``)
    majority ground-truth class with its share.

    Purity is the share of the leaf's points whose reference cluster is the leaf's label.
    """
    leaves = tree.apply(X)
    ref = np.asarray(reference)
    stats = tree.leaf_stats(X, reference, y, class_names)
    rules = {r.leaf: r for r in tree.rules()}
    rows = []
    for leaf in tree.leaves:
        members = ref[leaves == leaf]
        majority = int(np.bincount(members[members >= 0]).argmax()) if (members >= 0).any() else -1
        s = stats[int(leaf)]
        row = {"leaf": int(leaf), "cluster": int(tree.label[leaf]), "size": s.size,
               "purity": s.purity if s.purity is not None else float("nan"), "majority": majority}
        if y is not None:
            row.update({"class": s.majority_name, "class share": s.majority_share})
        row["rule"] = str(rules[int(leaf)]).split(" →")[0]
        rows.append(row)
    return pd.DataFrame(rows)


def root_concepts(tree: ExplanationTree) -> tuple[int, int]:
    """The root's concept and the next different concept in breadth-first order."""
    feats = [int(f) for f in _bfs_features(tree)]
    if not feats:
        return 0, min(1, tree.n_features - 1)
    first = feats[0]
    second = next((f for f in feats[1:] if f != first), (first + 1) % tree.n_features)
    return first, second


def _bfs_features(tree: ExplanationTree):
    queue = [0]
    while queue:
        n = queue.pop(0)
        if tree.is_leaf(n):
            continue
        if not tree.is_oblique(n):
            yield tree.feature[n]
        queue += [int(tree.children_left[n]), int(tree.children_right[n])]


def plot_concept_scatter(tree: ExplanationTree, X, labels, features: tuple[int, int] | None = None,
                         max_points: int = 5000, random_state: int = 0, title: str | None = None,
                         units=None) -> Figure:
    """Scatter of two concept coordinates coloured by cluster (categorical legend), with the tree's cuts.

    Each cut on one of the two shown concepts is drawn inside the region its node covers and
    labelled with its test. A cut drawn solid separates every point in that region; a dashed
    cut sits below a cut on a concept not shown, so it applies only to the points on one side
    of that hidden cut (the legend says so). Cut labels (the test, with its exact threshold in
    the display ``units``) sit outside the plot, above it for vertical cuts and right of it for
    horizontal ones, spread apart so that none overlaps another or the points.
    """
    from matplotlib.lines import Line2D

    from pipeline.app.report.figures import cluster_colour

    X = np.asarray(X, dtype=float)
    labels = np.asarray(labels)
    fx, fy = features or root_concepts(tree)
    names = tree.feature_names or [f"x[{j}]" for j in range(tree.n_features)]
    rng = np.random.default_rng(random_state)
    idx = np.sort(rng.choice(len(X), size=min(max_points, len(X)), replace=False))
    fig = Figure(figsize=(7.6, 6.4))  # room above and right of the plot for the cut labels
    ax = fig.add_axes((0.09, 0.08, 0.5, 0.56))
    display = tree.display(X, units)
    cut_labels: dict[str, list] = {"x": [], "y": []}  # (position, text) of each drawn cut
    handles = []
    for k in np.unique(labels):
        pts = idx[labels[idx] == k]
        name = f"cluster {k}" if k >= 0 else "noise"
        handles.append(ax.scatter(X[pts, fx], X[pts, fy], color=cluster_colour(int(k)), s=7, alpha=0.65, lw=0,
                                  label=f"{name} ({int(np.sum(labels == k))})"))
    pad = 0.05 * (np.ptp(X[:, [fx, fy]], axis=0) + 1e-12)
    box0 = (X[:, fx].min() - pad[0], X[:, fx].max() + pad[0], X[:, fy].min() - pad[1], X[:, fy].max() + pad[1])
    hidden_used = [False]

    def walk(node, box, hidden):
        if tree.is_leaf(node):
            return
        left, right = int(tree.children_left[node]), int(tree.children_right[node])
        f, t = int(tree.feature[node]), float(tree.threshold[node])
        style = dict(color="k", lw=1.6 if node == 0 else 1.0, ls="--" if hidden else "-", zorder=3)
        x0, x1, y0, y1 = box
        if tree.is_oblique(node):
            f = -1
        if f == fx and x0 <= t <= x1:
            ax.plot([t, t], [y0, y1], **style)
            cut_labels["x"].append((t, display.condition(node, "<=")))
            hidden_used[0] |= hidden
            walk(left, (x0, t, y0, y1), hidden)
            walk(right, (t, x1, y0, y1), hidden)
        elif f == fy and y0 <= t <= y1:
            ax.plot([x0, x1], [t, t], **style)
            cut_labels["y"].append((t, display.condition(node, "<=")))
            hidden_used[0] |= hidden
            walk(left, (x0, x1, y0, t), hidden)
            walk(right, (x0, x1, t, y1), hidden)
        else:
            walk(left, box, True)
            walk(right, box, True)

    walk(0, box0, False)
    ax.set_xlim(box0[0], box0[1])
    ax.set_ylim(box0[2], box0[3])
    _label_cuts(ax, cut_labels, box0)
    ax.set_xlabel(f"{names[fx]} (concept score)")
    ax.set_ylabel(f"{names[fy]} (concept score)")
    lines = [Line2D([], [], color="k", lw=1.2, label="cut of the tree")]
    if hidden_used[0]:
        lines.append(Line2D([], [], color="k", lw=1.0, ls="--", label="cut below a cut on\nanother concept"))
    fig.legend(handles=handles + lines, loc="upper left", bbox_to_anchor=(0.835, 0.64), fontsize=7, frameon=False,
               markerscale=2, title="reference cluster (n)", title_fontsize=7)
    fig.suptitle(title or f"Reference clusters in the concepts {names[fx]} and {names[fy]}", fontsize=9, y=0.99)
    return fig


def spread(positions, gap: float) -> np.ndarray:
    """Positions (in [0, 1]) moved apart to at least ``gap`` from each other, order kept, as little as
    possible (pushed forward, then back from 1 if the last overflowed)."""
    p = np.asarray(positions, dtype=float)
    order = np.argsort(p, kind="stable")
    out = p[order].copy()
    for i in range(1, len(out)):
        out[i] = max(out[i], out[i - 1] + gap)
    if len(out) and out[-1] > 1.0:
        out[-1] = 1.0
        for i in range(len(out) - 2, -1, -1):
            out[i] = min(out[i], out[i + 1] - gap)
    res = np.empty_like(out)
    res[order] = out
    return res


def _label_cuts(ax, cut_labels: dict, box) -> None:
    """Each cut's test outside the axes (above for vertical cuts, right for horizontal), spread so no
    two overlap, joined to its cut by a thin leader line."""
    x0, x1, y0, y1 = box
    text = dict(fontsize=7, color="k", clip_on=False)
    lead = dict(color="#777777", lw=0.5, clip_on=False)
    w, h = ax.get_position().width * ax.figure.get_figwidth(), ax.get_position().height * ax.figure.get_figheight()
    for axis, size in (("x", w), ("y", h)):
        items = cut_labels[axis]
        if not items:
            continue
        lo, hi = (x0, x1) if axis == "x" else (y0, y1)
        where = [(t - lo) / (hi - lo) for t, _ in items]
        placed = spread(where, gap=1.25 * 7 / 72 / size)  # one text line between neighbours
        for (t, label), a, b in zip(items, where, placed):
            if axis == "x":
                ax.plot([a, a, b], [1.0, 1.02, 1.04], transform=ax.transAxes, **lead)
                ax.text(b, 1.045, label, rotation=90, ha="center", va="bottom", transform=ax.transAxes, **text)
            else:
                ax.plot([1.0, 1.02, 1.04], [a, a, b], transform=ax.transAxes, **lead)
                ax.text(1.045, b, label, ha="left", va="center", transform=ax.transAxes, **text)


def plot_cav_accuracy(cav_summary: list[dict]) -> Figure:
    """Held-out accuracy of every CAV on its own examples (mean and 95% interval over repeats)."""
    df = pd.DataFrame(cav_summary)
    fig = Figure(figsize=(max(6.0, 0.6 * len(df) + 2), 4.0))
    ax = fig.subplots()
    pos = np.arange(len(df))
    err = np.vstack([df["score"] - df["ci_low"], df["ci_high"] - df["score"]])
    ax.bar(pos, df["score"], yerr=np.nan_to_num(err), color="tab:blue", capsize=3, label="concept CAV")
    ax.axhline(0.5, color="tab:red", lw=1, ls="--", label="chance")
    ax.set_xticks(pos, df["concept"], rotation=30, ha="right")
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("held-out accuracy")
    ax.set_title("CAV held-out accuracy on the concepts' own examples", fontsize=10)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    return fig


def leaf_examples(tree: ExplanationTree, X, n: int = 6, random_state: int = 0) -> dict[int, np.ndarray]:
    """Up to ``n`` random row indices per leaf (seeded)."""
    leaves = tree.apply(X)
    rng = np.random.default_rng(random_state)
    out = {}
    for leaf in tree.leaves:
        rows = np.flatnonzero(leaves == leaf)
        out[int(leaf)] = np.sort(rng.choice(rows, size=min(n, rows.size), replace=False)) if rows.size else rows
    return out


def plot_leaf_thumbnails(tree: ExplanationTree, X, images, n: int = 6, random_state: int = 0) -> Figure:
    """One row per leaf: ``n`` example images of the points that fall into it."""
    images = np.asarray(images)
    picks = leaf_examples(tree, X, n, random_state)
    fig = Figure(figsize=(1.1 * n + 1.5, 1.1 * len(picks) + 0.3))
    axes = np.atleast_2d(fig.subplots(len(picks), n, squeeze=False))
    for r, (leaf, rows) in enumerate(picks.items()):
        for c in range(n):
            ax = axes[r, c]
            ax.set_xticks([])
            ax.set_yticks([])
            for spine in ax.spines.values():
                spine.set_visible(False)
            if c < rows.size:
                img = images[rows[c]]
                img = img[..., 0] if img.ndim == 3 and img.shape[-1] == 1 else img
                ax.imshow(img, cmap="gray_r" if img.ndim == 2 else None)
        axes[r, 0].set_ylabel(f"leaf {leaf}\n→ {int(tree.label[leaf])}", rotation=0, ha="right", va="center",
                              fontsize=8)
    fig.suptitle("example inputs per leaf (leaf → cluster)", fontsize=9)
    return fig


def leaf_text_examples(tree: ExplanationTree, X, texts, n: int = 3, width: int = 100,
                       random_state: int = 0) -> pd.DataFrame:
    """Text snippets (first ``width`` characters) of ``n`` examples per leaf."""
    picks = leaf_examples(tree, X, n, random_state)
    rows = [{"leaf": leaf, "cluster": int(tree.label[leaf]), "snippet": " ".join(str(texts[i]).split())[:width]}
            for leaf, idx in picks.items() for i in idx]
    return pd.DataFrame(rows)


def plot_concept_examples(discovery: list[dict], top_examples, images, n: int = 8) -> Figure:
    """One row per discovered concept: its name, association (``≈ 7, AUC .96``) and the ``n``
    images expressing it most (``top_examples``: row indices per concept, most expressive first)."""
    images = np.asarray(images)
    top = np.asarray(top_examples, dtype=int)[:, :n]
    fig = Figure(figsize=(0.9 * top.shape[1] + 2.2, 0.9 * len(top) + 0.3))
    axes = np.atleast_2d(fig.subplots(len(top), top.shape[1], squeeze=False))
    for r, (row, idx) in enumerate(zip(discovery, top)):
        for c, i in enumerate(idx):
            ax = axes[r, c]
            ax.set_xticks([])
            ax.set_yticks([])
            img = images[i]
            img = img[..., 0] if img.ndim == 3 and img.shape[-1] == 1 else img
            ax.imshow(img, cmap="gray_r" if img.ndim == 2 else None)
        assoc = row.get("association") or ""
        axes[r, 0].set_ylabel(f"{row['concept']}\n{assoc}", rotation=0, ha="right", va="center", fontsize=8)
    fig.suptitle("discovered concepts: the examples expressing each most", fontsize=9)
    return fig
