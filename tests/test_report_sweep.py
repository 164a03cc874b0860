"""Sweep summaries over seeds: mean, sample SD and run counts checked by hand."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from pipeline.app.report.figures import figure_bytes
from pipeline.app.report.sweep import plot_metric_per_explainer, summarize_sweep


def two_seed_results() -> pd.DataFrame:
    """Jobs of `seed=0,1 dataset=iris,wine` with two explainers each (wine has one seed only)."""
    rows = []
    for job, (seed, ds) in enumerate([(0, "iris"), (1, "iris"), (0, "wine")]):
        for explainer, ari in (("mmdt", [0.8, 0.6, 0.5][job]), ("cart", [0.9, 0.9, 0.4][job])):
            rows.append({"job": str(job), "seed": str(seed), "dataset_override": ds, "dataset": ds,
                         "explainer": explainer, "method": explainer, "ari": ari, "n_leaves": 3 + job,
                         "fit_seconds": 0.1 * (job + 1)})
    return pd.DataFrame(rows)


def test_summary_by_hand():
    s = summarize_sweep(two_seed_results(), ["seed", "dataset"])
    assert list(s.columns[:4]) == ["dataset", "explainer", "method", "n_runs"]  # dataset_override repeats dataset
    assert "seed" not in s.columns
    iris_mmdt = s[(s.dataset == "iris") & (s.explainer == "mmdt")].iloc[0]
    assert iris_mmdt.n_runs == 2
    assert iris_mmdt.ari_mean == pytest.approx(0.7)  # (0.8 + 0.6) / 2
    assert iris_mmdt.ari_std == pytest.approx(math.sqrt(((0.8 - 0.7) ** 2 + (0.6 - 0.7) ** 2) / 1), abs=1e-4)  # ddof=1
    assert iris_mmdt.n_leaves_mean == 3.5 and iris_mmdt.n_leaves_std == pytest.approx(math.sqrt(0.5), abs=1e-4)
    assert iris_mmdt.ari_std == round(iris_mmdt.ari_std, 4)  # rounded for publishing
    iris_cart = s[(s.dataset == "iris") & (s.explainer == "cart")].iloc[0]
    assert iris_cart.ari_std == 0.0
    wine = s[s.dataset == "wine"]
    assert wine.n_runs.tolist() == [1, 1] and wine.ari_std.isna().all()  # one run: no SD
    assert len(s) == 4


def test_failed_rows_are_left_out_and_plot_has_error_bars():
    df = two_seed_results().assign(error=None)  # results.csv reads empty errors as NaN
    df.loc[len(df)] = {"job": "3", "seed": "1", "dataset_override": "wine", "dataset": "wine", "explainer": "mmdt",
                       "method": "mmdt", "ari": np.nan, "error": "boom"}
    s = summarize_sweep(df, ["seed", "dataset"])
    assert s[(s.dataset == "wine") & (s.explainer == "mmdt")].n_runs.item() == 1
    fig = plot_metric_per_explainer(s)
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()][::-1][0] == "mmdt (dataset=iris)"
    assert "mean ± SD over 1-2 seeds" in ax.get_xlabel()
    assert figure_bytes(fig, "svg").startswith(b"<?xml")


def test_collect_writes_summary_of_a_two_seed_sweep(tmp_path, capsys):
    """`python -m pipeline.collect` on a fake two-seed sweep: summary.csv by hand, figure files."""
    import json

    from pipeline.app.sweep_command import main

    aris = {"0": (1.0, 0.5), "1": (1.0, 0.7)}  # job -> (reference ARI, mmdt ARI)
    for job, seed in (("0", 0), ("1", 1)):
        d = tmp_path / job
        (d / ".hydra").mkdir(parents=True)
        (d / ".hydra" / "overrides.yaml").write_text(f"- dataset=iris\n- seed={seed}\n- +force=fit\n")
        (d / "status.json").write_text(json.dumps({"status": "ok"}))
        pd.DataFrame({"dataset": ["iris", "iris"], "explainer": ["reference", "mmdt"], "method": ["gmm", "mmdt"],
                      "ari": aris[job], "n_leaves": [3, 3 + int(job)], "depth": [np.nan, 2.0]}
                     ).to_csv(d / "results.csv", index=False)
    assert main([str(tmp_path)]) == 0
    s = pd.read_csv(tmp_path / "summary.csv")
    assert list(s["explainer"]) == ["reference", "mmdt"] and list(s["n_runs"]) == [2, 2]
    assert "seed" not in s.columns and "force" not in s.columns
    mmdt = s.iloc[1]
    assert mmdt["ari_mean"] == pytest.approx(0.6) and mmdt["ari_std"] == pytest.approx(math.sqrt(0.02), abs=1e-4)
    assert mmdt["n_leaves_mean"] == 3.5 and mmdt["depth_std"] == 0.0
    for fmt in ("png", "svg", "pdf"):
        assert (tmp_path / f"summary_ari.{fmt}").stat().st_size > 0
    assert "| mmdt | mmdt | 2 | 0.600 | 0.141 |" in (tmp_path / "summary.md").read_text()
    assert "mean and SD over seeds" in capsys.readouterr().out


def test_the_printed_sweep_tables_read_like_the_run_table():
    """Issue 36 item 7: no 6-decimal floats, no dataset_override column repeating dataset."""
    from pipeline.app.sweep_command import table_text

    results = two_seed_results()
    results["ari"] = results["ari"] + 1e-7
    text = table_text(results[["job", "dataset_override", "dataset", "explainer", "ari", "fit_seconds"]])
    assert text.splitlines()[0].split() == ["job", "dataset", "explainer", "ari", "fit_seconds"]
    assert "0.800" in text and "0.8000001" not in text and "0.100000" not in text
    summary = summarize_sweep(results, ["seed", "dataset"])
    assert "dataset_override" not in table_text(summary) and "0.700" in table_text(summary)
