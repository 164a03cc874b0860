"""Reports: tree figures (axis-aligned and oblique), tables, published comparison, sweep collection."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from pipeline.app.report.sweep_results import collect_sweep
from pipeline.app.report.figures import node_condition, plot_tree
from pipeline.app.report.tables import format_markdown
from pipeline.study import compare_with_published
from pipeline.trees.tree import ExplanationTree


def oblique_tree() -> ExplanationTree:
    t = ExplanationTree(3, ["loop", "vertical line", "curvature"])
    left, right = t.split_oblique(0, {0: 0.7, 2: -1.3}, 0.25)
    t.set_label(left, 0)
    a, b = t.split(right, 1, 2.0)
    t.set_label(a, 1)
    t.set_label(b, 2)
    return t


def test_plot_tree_handles_oblique_nodes():
    tree = oblique_tree()
    fig = plot_tree(tree, cluster_names=["zero", "one", "two"], title="t")
    assert isinstance(fig, Figure)
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert str(node_condition(tree, 0)).replace(" ", "") in "".join(texts).replace("\n", "").replace(" ", "")
    assert "-1.3·curvature" in str(node_condition(tree, 0)) and any("cluster 2\ntwo" == t for t in texts)
    assert sum(t.startswith("cluster") for t in texts) == tree.n_leaves


def test_plot_single_leaf_tree():
    assert isinstance(plot_tree(ExplanationTree(2, root_label=0)), Figure)


def test_markdown_table():
    md = format_markdown(pd.DataFrame({"explainer": ["a", "b"], "ari": [0.12345, float("nan")]}))
    assert md.splitlines() == ["| explainer | ari |", "|---|---|", "| a | 0.123 |", "| b |  |"]


def test_compare_with_published_keeps_our_order_and_adds_paper_columns():
    ours = pd.DataFrame({"run": ["r", "r", "s"], "explainer": ["reference", "mmdt", "reference"],
                         "ari": [0.9, 0.8, 0.5], "ami": [0.1, 0.2, 0.3]})
    pub = [{"run": "r", "explainer": "mmdt", "ari": 0.85, "base": "GMM"}, {"run": "t", "explainer": "cart", "ari": 0.4}]
    table = compare_with_published(ours, pub)
    assert list(table.columns[:4]) == ["run", "explainer", "ari", "ari_paper"]
    assert list(zip(table["run"], table["explainer"])) == [("r", "reference"), ("r", "mmdt"), ("s", "reference"),
                                                            ("t", "cart")]
    assert table.loc[1, "ari_paper"] == 0.85 and np.isnan(table.loc[0, "ari_paper"]) and np.isnan(table.loc[3, "ari"])


def test_collect_sweep(tmp_path):
    for job, status in (("0", "ok"), ("1", "failed"), ("2", "ok")):
        d = tmp_path / job
        (d / ".hydra").mkdir(parents=True)
        (d / ".hydra" / "overrides.yaml").write_text(f"- dataset=d{job}\n- +force=fit\n")
        (d / "status.json").write_text(json.dumps({"status": status, "error": "boom" if status == "failed" else ""}))
        if status == "ok":
            pd.DataFrame({"explainer": ["reference", "cart"], "ari": [1.0, 0.5]}).to_csv(d / "results.csv", index=False)
    results, jobs = collect_sweep(tmp_path)
    assert list(results["job"]) == ["0", "0", "2", "2"] and list(results["dataset"]) == ["d0", "d0", "d2", "d2"]
    assert jobs.set_index("job").loc["1", "error"] == "boom" and "force" in jobs.columns
