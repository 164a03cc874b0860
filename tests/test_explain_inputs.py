"""New inputs matched to the run by name and checked for drift (issue 51, item 2; docs/explain.md).

A table's columns are found by name (missing, extra or renamed columns named in the error;
``positional=True`` takes them in order); rows far from the training data's distribution (in
the units the run's data were given in) get one warning with their share and the worst features,
while the run's own rows, a subset of them (one class) or a handful raise nothing.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sklearn.datasets import load_digits, load_iris

from pipeline.app.configuration.config import compose_config
from pipeline.app.running.runner import run
from pipeline.validation import InvalidInputError

ROOT = Path(__file__).resolve().parents[1]
NAMES = list(load_iris(as_frame=True).data.columns)


def _run(tmp: Path, *overrides: str) -> Path:
    out = tmp / "run"
    run(compose_config([*overrides, f"paths.output_dir={out}", f"paths.cache_dir={tmp / 'cache'}",
                        "report.figures=false", "report.html=false", "report.summary=false"]))
    return out


@pytest.fixture(scope="module")
def table_run(tmp_path_factory):
    """The iris table as a user's CSV: standardised for clustering, rules in the table's units."""
    tmp = tmp_path_factory.mktemp("table")
    load_iris(as_frame=True).data.to_csv(tmp / "iris.csv", index=False)
    return _run(tmp, "dataset=files", f"dataset.path={tmp / 'iris.csv'}", "explainer=[mmdt,cart]")


@pytest.fixture(scope="module")
def digits_run(tmp_path_factory):
    return _run(tmp_path_factory.mktemp("digits"), "dataset=digits", "encoder=identity", "clustering=gmm",
                "concepts=none", "explainer=[cart]")


def explainer(path):
    from pipeline import ConceptExplainer

    return ConceptExplainer.load(path)


def drift_warnings(caplog, fn) -> list[str]:
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="pipeline.app.explainer.input_drift"):
        fn()
    return [r.getMessage() for r in caplog.records if r.name == "pipeline.app.explainer.input_drift"]


# ------------------------------------------------------------------ columns by name
def test_columns_are_found_by_name_and_mismatches_named(table_run):
    ex = explainer(table_run)
    X = load_iris().data
    df = pd.DataFrame(X, columns=NAMES)
    base = ex.predict(df, tree="cart")
    np.testing.assert_array_equal(ex.predict(df[NAMES[::-1]], tree="cart"), base)  # reordered: by name
    np.testing.assert_array_equal(ex.predict(X, tree="cart"), base)  # an array: the run's column order
    np.testing.assert_array_equal(ex.predict(pd.DataFrame(X), tree="cart"), base)  # unnamed columns: in order
    renamed = df.rename(columns={"petal length (cm)": "petal length", "sepal width (cm)": "sw"})
    with pytest.raises(InvalidInputError) as info:
        ex.predict(renamed, tree="cart")
    message = str(info.value)
    assert "missing ['sepal width (cm)', 'petal length (cm)']" in message and "not in the run ['sw', 'petal length']" in message
    assert "'petal length' for 'petal length (cm)'?" in message and "positional=True" in message and "\n" not in message
    np.testing.assert_array_equal(ex.predict(renamed, tree="cart", positional=True), base)
    with pytest.raises(InvalidInputError, match=r"none missing; not in the run \['id'\]"):
        ex.explain(df.assign(id=1.0))
    with pytest.raises(InvalidInputError, match="more than once"):
        ex.explain(pd.concat([df, df[[NAMES[0]]]], axis=1))


def test_the_command_finds_a_tables_columns_by_name(table_run, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    frame = load_iris(as_frame=True).data
    frame.rename(columns=dict(zip(NAMES, ["a", "b", "c", "d"]))).to_csv(tmp_path / "renamed.csv", index=False)
    frame[NAMES[::-1]].to_csv(tmp_path / "reordered.csv", index=False)

    def explain(path, *extra):
        return subprocess.run([sys.executable, "-m", "pipeline.explain", str(table_run), "dataset=files",
                               f"dataset.path={path}", f"paths.cache_dir={tmp_path / 'cache'}", *extra],
                              env=env, cwd=tmp_path, capture_output=True, text=True)

    bad = explain(tmp_path / "renamed.csv", f"output={tmp_path / 'o1'}")
    assert bad.returncode == 1 and bad.stderr.startswith("error: the columns of the inputs are not the run's")
    assert "Traceback" not in bad.stderr and not (tmp_path / "o1").exists()
    ok = explain(tmp_path / "renamed.csv", f"output={tmp_path / 'o2'}", "positional=true")
    same = explain(tmp_path / "reordered.csv", f"output={tmp_path / 'o3'}")
    assert ok.returncode == 0 and same.returncode == 0, (ok.stderr, same.stderr)
    a, b = (pd.read_parquet(tmp_path / o / "explanations.parquet") for o in ("o2", "o3"))
    pd.testing.assert_frame_equal(a, b)


# ------------------------------------------------------------------ drift
def test_standardised_rows_given_to_a_raw_units_run_are_warned_about(table_run, caplog):
    ex = explainer(table_run)
    X = load_iris().data
    z = (X - X.mean(axis=0)) / X.std(axis=0)
    said = drift_warnings(caplog, lambda: ex.explain(z))
    assert len(said) == 1
    assert "150 of 150 rows (100%)" in said[0] and "sepal length (cm): 150 rows beyond the training's" in said[0]
    agree = (ex.predict(z, tree="cart") == ex.predict(X, tree="cart")).mean()
    assert agree < 0.5  # what the warning is about: the run's own rows, in other units, explained otherwise


@pytest.mark.parametrize("rows", ["all", "one class", "five", "with noise"])
def test_rows_like_the_training_data_raise_nothing(table_run, caplog, rows):
    ex = explainer(table_run)
    X, y = load_iris(return_X_y=True)
    chosen = {"all": X, "one class": X[y == 0], "five": X[:5],
              "with noise": X + np.random.default_rng(0).normal(0, 0.05, X.shape)}[rows]
    assert drift_warnings(caplog, lambda: ex.explain(chosen)) == []


def test_digits_on_another_scale_are_warned_about_with_the_factor(digits_run, caplog):
    ex = explainer(digits_run)
    D, y = load_digits(return_X_y=True)
    said = drift_warnings(caplog, lambda: ex.predict(D / 16))
    assert len(said) == 1 and "1797 of 1797 rows (100%)" in said[0] and "about 16x smaller" in said[0]
    assert drift_warnings(caplog, lambda: ex.predict(D[y == 3])) == []  # one digit: a subset, not a drift
    assert drift_warnings(caplog, lambda: ex.predict(D)) == []
    Z = ex.transform(D)  # the latents (identity encoder: the pixels), given as latents and scaled
    assert drift_warnings(caplog, lambda: ex.predict(Z, latents=True)) == []
    assert len(drift_warnings(caplog, lambda: ex.predict(Z * 16, latents=True))) == 1


def test_drift_check_by_brute_force():
    """far_rows against a per-value loop over rows and features."""
    from pipeline.app.explainer.input_drift import MARGIN, SCALE_FACTOR, far_rows, training_stats

    rng = np.random.default_rng(3)
    train = rng.normal(size=(500, 6)) * [1, 2, 3, 4, 5, 6] + 10
    stats = training_stats(train, "input")
    new = np.vstack([rng.normal(size=(50, 6)) * [1, 2, 3, 4, 5, 6] + 10, rng.normal(size=(20, 6)) * 40])
    far, counts, scale, _ = far_rows(new, stats["input_bounds"], stats["input_rms"])
    lo, hi = stats["input_bounds"]
    span = hi - lo
    expect = np.zeros(len(new), bool)
    expect_counts = np.zeros(6, int)
    for i, row in enumerate(new):
        rms = np.sqrt(np.mean(row ** 2))
        expect[i] = rms < stats["input_rms"][0] / SCALE_FACTOR or rms > stats["input_rms"][2] * SCALE_FACTOR
        for j, v in enumerate(row):
            if v < lo[j] - MARGIN * span[j] or v > hi[j] + MARGIN * span[j]:
                expect[i] = True
                expect_counts[j] += 1
    np.testing.assert_array_equal(far, expect)
    np.testing.assert_array_equal(counts, expect_counts)
    assert far[50:].mean() > 0.9 and far[:50].mean() < 0.05
