"""A run's artifacts -> annotated rules (text, JSON), tree figures and report.html (no files written)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
from sklearn.datasets import load_iris

from pipeline.app.stores.artifacts import ClusterArtifact, FitArtifact, LoadArtifact, ProjectArtifact
from pipeline.app.report.run_report import rules_json, rules_text, run_report_html, tree_data, tree_figure
from pipeline.trees.tree import ExplanationTree


def iris_run():
    d = load_iris()
    X, y = d.data, d.target
    t = ExplanationTree(4, list(d.feature_names))
    left, right = t.split(0, 2, 2.5, left_label=0)
    a, b = t.split(right, 3, 1.75, right_label=2)
    t.split(a, 2, 4.95, left_label=1, right_label=2)
    c, e = t.split(b, 2, 4.85)  # a second cut on petal length below the first: simplification at work
    t.set_label(c, 1)
    t.set_label(e, 2)
    load = LoadArtifact(name="iris", kind="tabular", X=X, y=y, class_names=list(d.target_names),
                        feature_names=list(d.feature_names))
    cluster = ClusterArtifact(labels=y, method="gmm")
    project = ProjectArtifact(X=X, feature_names=list(d.feature_names), latent_X=X, latent_names=list(d.feature_names))
    fits = {"cart": FitArtifact(row="cart", name="cart", tree=t.to_dict(), predictions=y, fit_seconds=0.01,
                                n_leaves=5, depth=3)}
    results = pd.DataFrame({"explainer": ["reference", "cart"], "method": ["gmm", "cart"], "ari": [1.0, 0.9],
                            "n_leaves": [3.0, 5.0], "depth": [np.nan, 3.0]})
    return load, cluster, project, fits, results


def test_rules_text_and_json_are_simplified_and_annotated():
    load, cluster, project, fits, _ = iris_run()
    data = tree_data(load, cluster, project)
    text = rules_text("cart", fits["cart"], data)
    # exact: the shortest decimals strictly between the neighbouring data values (1.9 | 3.0, 1.7 | 1.8, 4.8 | 4.9)
    assert '- petal length (cm) > 2 and petal width (cm) > 1.75 and petal length (cm) <= 4.85' in text  # raw
    assert '- 2 < petal length (cm) <= 4.85 and petal width (cm) > 1.75 → cluster 1 · ' in text  # simplified
    assert 'mostly "setosa" (100%)' in text and "Tree:" in text
    doc = rules_json(fits["cart"], data)
    json.dumps(doc)
    assert doc[0]["n_points"] == 50 and doc[0]["majority_name"] == "setosa" and doc[0]["purity"] == 1.0


def test_tree_figure_title_and_report():
    load, cluster, project, fits, results = iris_run()
    fig = tree_figure("cart", fits["cart"], tree_data(load, cluster, project), "iris", 0.9)
    assert fig.texts[0].get_text() == "CART on iris: 5 leaves, depth 3, ARI 0.900 vs ground truth"
    page = run_report_html({"dataset": {"name": "iris"}, "explainer": {"cart": {"name": "cart"}}, "seed": 0},
                           load, cluster, project, results, fits)
    assert "CART on iris: 5 leaves, depth 3, ARI 0.900 vs ground truth" in page
    assert "rules as the raw path conditions" in page and "difference (SD)" in page
    table = page[page.index("<h2>Results</h2>"):page.index("<h2>Trees</h2>")]
    assert "<td>3</td>" in table and "3.000" not in table and "<td>0.900</td>" in table  # depth is a count


def test_oblique_rules_in_files_list_every_term_and_say_raw_units():
    """rules.txt, the JSON and the DOT file never end a test in '+ n more' (issue 25)."""
    from pipeline.concepts.units import percentile_units

    X = np.random.default_rng(0).normal(size=(200, 6))
    t = ExplanationTree(6, [f"c{j}" for j in range(6)])
    t.split_oblique(0, {j: 0.5 + j for j in range(6)}, 0.1, left_label=0, right_label=1)
    units = [percentile_units(X[:, j]) for j in range(6)]
    data = {"X": X, "units": units, "units_kind": "percentile"}
    fit = FitArtifact(row="tao", name="tao", tree=t.to_dict(), predictions=t.predict(X), fit_seconds=0.01,
                      n_leaves=t.n_leaves, depth=t.depth)
    text = rules_text("tao", fit, data)
    assert "more" not in text and text.count("·c5") >= 2 and "raw concept coordinates" in text
    assert all("more" not in r["text"] for r in rules_json(fit, data))
    assert "more" not in t.to_dot(X, units=units)
