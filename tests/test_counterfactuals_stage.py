"""The counterfactuals pipeline stage and its report files (counterfactuals=tgt / dbm)."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pipeline.app.configuration.config import compose_config
from pipeline.app.report.counterfactual_plots import plot_translation
from pipeline.app.running.runner import run
from pipeline.validation import InvalidInputError


def make_cfg(tmp_path: Path, *overrides: str):
    return compose_config([f"paths.output_dir={tmp_path / 'out'}", f"paths.cache_dir={tmp_path / 'cache'}",
                           f"paths.models_dir={tmp_path / 'models'}", "dataset=iris", "clustering=kmeans",
                           "explainer=[cart]", *overrides])


def test_default_is_off(tmp_path):
    cfg = make_cfg(tmp_path)
    assert cfg.counterfactuals.name == "none"
    run(cfg)
    assert not (tmp_path / "out" / "counterfactuals.csv").exists()


def test_tgt_stage_writes_table_and_figures(tmp_path, capsys):
    run(make_cfg(tmp_path, "counterfactuals=tgt", "counterfactuals.k=2", "counterfactuals.params.l1_grid=[0.0,0.5]",
                 "counterfactuals.params.n_iter=600", "counterfactuals.params.patience=200"))
    assert "counterfactual explanations (input space)" in capsys.readouterr().out  # identity: auto = input
    table = pd.read_csv(tmp_path / "out" / "counterfactuals.csv")
    assert list(table.columns) == ["method", "from", "to", "k", "correctness", "coverage", "explanation"]
    assert len(table) == 2 * 3 * 2  # two methods x ordered pairs of 3 clusters
    assert table.correctness.between(0, 1).all() and table.coverage.between(0, 1).all()
    names = {"sepal length (cm)", "sepal width (cm)", "petal length (cm)", "petal width (cm)"}
    for text in table.explanation:
        parts = [p.split(" ", 1)[1] for p in text.split(", ")]
        assert len(parts) <= 2 and set(parts) <= names
    tgt = table[table.method == "tgt"].set_index(["from", "to"])
    for (i, j), row in tgt.iterrows():  # symmetric: the reverse explanation negates every change
        rev = tgt.loc[(j, i), "explanation"]
        assert rev == ", ".join(("-" if p[0] == "+" else "+") + p[1:] for p in row.explanation.split(", "))
    figs = sorted((tmp_path / "out" / "figures" / "counterfactuals").glob("*.png"))
    assert len(figs) == 12 and figs[0].name == "dbm_0_to_1.png"


def test_concept_space_needs_cavs(tmp_path):
    with pytest.raises(InvalidInputError, match="needs CAVs"):
        run(make_cfg(tmp_path, "counterfactuals=dbm", "counterfactuals.space=concepts"))


def test_plot_translation_bars():
    fig = plot_translation(np.array([0.0, -0.6, 1.1, 0.2]), ["a", "vertical line", "loop", "d"], k=2, title="3 → 7")
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["vertical line", "loop"]  # largest on top
    assert [p.get_width() for p in ax.patches] == pytest.approx([-0.6, 1.1])
    with pytest.raises(InvalidInputError, match="names"):
        plot_translation(np.ones(3), ["a"])
