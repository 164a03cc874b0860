"""Issue 47: concepts measured on each input — labels from the measurement, a disjoint split of
the rows, tracking on the held-out rows, rules checked against the measurements, bad measurements."""

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings, strategies as st

from pipeline.app.configuration.config import compose_config
from pipeline.app.running.runner import run
from pipeline.concepts.measured_maths import fit_rows, make_split, percentile_ranks, rule_agreement
from pipeline.validation import InvalidInputError


# ---- library ---------------------------------------------------------------------------------
def test_presence_and_tertile_labels():
    v = np.array([0, 0, 1, 2, 0, 3.0, np.nan])
    sp = make_split(v, "presence")
    assert sp.labels(v).tolist()[:6] == [0, 0, 1, 1, 0, 1] and np.isnan(sp.labels(v)[6])
    t = np.arange(9.0)
    lab = make_split(t, "tertiles").labels(t)
    assert lab[:3].tolist() == [0, 0, 0] and np.isnan(lab[3:6]).all() and lab[6:].tolist() == [1, 1, 1]
    ties = np.array([1.0] * 8 + [0.0, 2.0, 3.0])  # most items tied: below and above the tie
    lab = make_split(ties, "tertiles").labels(ties)
    assert lab[8] == 0 and lab[9] == 1 and np.isnan(lab[:8]).all()


@pytest.mark.parametrize("values, kind, match", [
    (np.ones(5), "tertiles", "one value"), (np.full(4, np.nan), "presence", "NaN"),
    (np.array([1.0, 2.0, 3.0]), "presence", "absent"), (np.array([-1.0, 0, 2]), "presence", "negative"),
    (np.array([0.0, 1, 2]), "halves", "not a split")])
def test_unsplittable_measurements_say_why(values, kind, match):
    with pytest.raises(InvalidInputError, match=match):
        make_split(values, kind)


def test_fit_rows_are_a_seeded_share():
    a, b = fit_rows(100, 0.5, 3), fit_rows(100, 0.5, 3)
    assert a.sum() == 50 and np.array_equal(a, b)
    with pytest.raises(InvalidInputError, match="strictly between 0 and 1"):
        fit_rows(100, 1.0)


class _Iv:
    def __init__(self, feature, low, high):
        self.feature, self.low, self.high, self.weights = feature, low, high, None


class _Rule:
    def __init__(self, leaf, intervals):
        self.leaf, self.intervals = leaf, intervals


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10_000), st.floats(-1, 1), st.floats(-1, 1))
def test_rule_agreement_equals_counting_by_hand(seed, a, b):
    rng = np.random.default_rng(seed)
    n = 200
    X = rng.normal(size=(n, 2))
    values = X[:, 0] + rng.normal(scale=0.5, size=n)
    counts = rng.poisson(1.0, n).astype(float)
    leaves = rng.integers(0, 3, n)
    lo, hi = min(a, b), max(a, b)
    rules = [_Rule(0, [_Iv(0, lo, None), _Iv(1, None, hi)]), _Rule(1, [_Iv(0, lo, hi)]), _Rule(2, [_Iv(1, lo, None)])]
    got = rule_agreement(leaves, rules, X, {0: (values, "tertiles"), 1: (counts, "presence")})
    ranks = percentile_ranks(values)
    leaf0 = leaves == 0
    p_lo = 100 * np.mean(X[:, 0] <= lo)
    assert got[0][0]["share"] == pytest.approx(np.mean(ranks[leaf0] > p_lo))
    assert got[0][1]["share"] == pytest.approx(np.mean(counts[leaf0] == 0))  # a cut keeping the lower part
    p_hi = 100 * np.mean(X[:, 0] <= hi)
    assert got[1][0]["share"] == pytest.approx(np.mean((ranks[leaves == 1] > p_lo) & (ranks[leaves == 1] <= p_hi)))
    assert got[2][0]["share"] == pytest.approx(np.mean(counts[leaves == 2] > 0))


# ---- the concept source in a run ----------------------------------------------------------------
BASE = ["dataset=digits", "encoder=identity", "clustering=kmeans", "explainer=[concept_cart]", "concepts=measured",
        "report.figures=false", "report.html=false", "cav.params.n_repeats=2", "concepts.tests.n_random=5"]


def _run(tmp_path, *overrides):
    cfg = compose_config([f"paths.output_dir={tmp_path / 'run'}", f"paths.cache_dir={tmp_path / 'cache'}",
                          f"paths.models_dir={tmp_path / 'models'}", *BASE, *overrides])
    return run(cfg)


def test_measured_concepts_run_end_to_end(tmp_path, capsys):
    _run(tmp_path, "+concepts.params.measures.two._target_=measure_helpers.two",
         "+concepts.params.measures.ink._target_=measure_helpers.ink", "+concepts.params.measures.ink.unit=grey")
    out = capsys.readouterr().out
    assert "†" not in out and "‡" not in out  # measured from the pixels, fitted on other rows than checked
    assert "ρ " in out and "(fit " in out and "What each measured concept measures" in out
    assert "measured:" in out  # each rule's check against the measurements
    table = pd.read_parquet(tmp_path / "run" / "concepts" / "measurements.parquet")
    assert list(table.columns) == ["id", "cav_rows", "dark", "top_heavy", "ink"] and len(table) == 1797
    assert table["cav_rows"].mean() == pytest.approx(0.5, abs=0.01)
    cavs = pd.read_csv(tmp_path / "run" / "concepts" / "cavs.csv", comment="#")
    assert set(cavs["transfer_check"]) == {"tracking"} and (cavs["transfer_value"] > 0.3).all()


def test_a_failing_measurement_costs_only_its_concept(tmp_path, capsys):
    _run(tmp_path, "+concepts.params.measures.ink._target_=measure_helpers.ink",
         "+concepts.params.measures.nan._target_=measure_helpers.some_nan",
         "+concepts.params.measures.flat._target_=measure_helpers.constant",
         "+concepts.params.measures.boom._target_=measure_helpers.raises",
         "+concepts.params.measures.short._target_=measure_helpers.wrong_shape",
         "+concepts.params.measures.text._target_=measure_helpers.words")
    out = capsys.readouterr().out
    assert "concept 'nan': the measurement is undefined (NaN) on 2 images (rows 3, 17)" in out
    assert "concept 'flat' left out: it takes one value (1) on every item" in out
    assert "measurement 'boom' (measure_helpers.raises) gave no concept: it raised RuntimeError: the measuring" in out
    assert "it returned shape (3,); a measurement returns one number per item, shape (1797,)" in out
    assert "measurement 'text' (measure_helpers.words) gave no concept: it returned" in out
    assert "ink" in out


def test_no_usable_measurement_is_one_paragraph(tmp_path):
    with pytest.raises(InvalidInputError, match="no measured concept could be used"):
        _run(tmp_path, "+concepts.params.measures.flat._target_=measure_helpers.constant")
    with pytest.raises(InvalidInputError, match="a measurement node takes _target_, params"):
        _run(tmp_path, "+concepts.params.measures.ink._target_=measure_helpers.ink", "+concepts.params.measures.ink.spilt=x")
    with pytest.raises(InvalidInputError, match="cannot be imported"):
        _run(tmp_path, "+concepts.params.measures.ink._target_=measure_helpers.nope")
