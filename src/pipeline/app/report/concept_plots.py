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


def leaf_table(tree: ExplanationTree, X, reference) -> pd.DataFrame:
    """Per leaf: its cluster label, size, majority reference cluster and purity.

    Purity is the share of the leaf's points whose reference cluster is the leaf's label.
    """
    leaves = tree.apply(X)
    ref = np.asarray(reference)
    rows = []
    for leaf in tree.leaves:
        members = ref[leaves == leaf]
        label = int(tree.label[leaf])
        majority = int(np.bincount(members[members >= 0]).argmax()) if (members >= 0).any() else -1
        rows.append({"leaf": int(leaf), "cluster": label, "size": int(members.size),
                     "purity": float(np.mean(members == label)) if members.size else float("nan"),
                     "majority": majority})
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
                         max_points: int = 5000, random_state: int = 0) -> Figure:
    """Scatter of two concept coordinates coloured by cluster, with the tree's cuts.

    Cuts on the two shown concepts are drawn inside the region their node covers (solid
    for nodes whose whole path uses only these concepts, dashed when the path also cuts
    on hidden concepts).
    """
    X = np.asarray(X, dtype=float)
    labels = np.asarray(labels)
    fx, fy = features or root_concepts(tree)
    names = tree.feature_names or [f"x[{j}]" for j in range(tree.n_features)]
    rng = np.random.default_rng(random_state)
    idx = rng.choice(len(X), size=min(max_points, len(X)), replace=False)
    fig = Figure(figsize=(6.5, 5.5))
    ax = fig.subplots()
    sc = ax.scatter(X[idx, fx], X[idx, fy], c=labels[idx], cmap="tab10", s=6, alpha=0.6)
    fig.colorbar(sc, ax=ax, label="cluster")
    pad = 0.05 * (np.ptp(X[:, [fx, fy]], axis=0) + 1e-12)
    box0 = (X[:, fx].min() - pad[0], X[:, fx].max() + pad[0], X[:, fy].min() - pad[1], X[:, fy].max() + pad[1])

    def walk(node, box, hidden):
        if tree.is_leaf(node):
            return
        left, right = int(tree.children_left[node]), int(tree.children_right[node])
        f, t = int(tree.feature[node]), float(tree.threshold[node])
        style = dict(color="k", lw=1.6 if node == 0 else 1.0, ls="--" if hidden else "-")
        x0, x1, y0, y1 = box
        if f == fx and x0 <= t <= x1:
            ax.plot([t, t], [y0, y1], **style)
            walk(left, (x0, t, y0, y1), hidden)
            walk(right, (t, x1, y0, y1), hidden)
        elif f == fy and y0 <= t <= y1:
            ax.plot([x0, x1], [t, t], **style)
            walk(left, (x0, x1, y0, t), hidden)
            walk(right, (x0, x1, t, y1), hidden)
        else:
            walk(left, box, True)
            walk(right, box, True)

    walk(0, box0, False)
    ax.set_xlim(box0[0], box0[1])
    ax.set_ylim(box0[2], box0[3])
    ax.set_xlabel(f"{names[fx]} (concept coordinate)")
    ax.set_ylabel(f"{names[fy]} (concept coordinate)")
    ax.set_title("clusters in the root's two concepts, with the tree's cuts")
    return fig


def plot_cav_accuracy(cav_summary: list[dict]) -> Figure:
    """Held-out accuracy of every CAV (mean and 95% CI over repeats) beside random-split CAVs."""
    df = pd.DataFrame(cav_summary)
    fig = Figure(figsize=(max(6.0, 0.6 * len(df) + 2), 4.0))
    ax = fig.subplots()
    pos = np.arange(len(df))
    err = np.vstack([df["score"] - df["ci_low"], df["ci_high"] - df["score"]])
    colors = ["tab:blue" if s else "tab:gray" for s in df["significant"]]
    ax.bar(pos, df["score"], yerr=np.nan_to_num(err), color=colors, capsize=3, label="concept CAV")
    ax.scatter(pos, df["random_score"], color="tab:red", marker="_", s=300, label="random-split CAV", zorder=3)
    ax.set_xticks(pos, df["concept"], rotation=30, ha="right")
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("held-out accuracy")
    ax.set_title("CAV held-out accuracy (grey: not above random)", fontsize=10)
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
        out[int(leaf)] = rng.choice(rows, size=min(n, rows.size), replace=False) if rows.size else rows
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
