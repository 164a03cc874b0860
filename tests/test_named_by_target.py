"""Fitted objects answer for themselves (issue 49, item 4): what the application used to look up by
a name (the bound of a row called ``random_mmdt``, the units' kinds, the tables of protocols, display
names, counterfactual methods, compute backends, encoders that fetch weights, ``_target_`` paths
compared as strings) is an attribute of the ``_target_`` object itself."""

from __future__ import annotations

import json

import numpy as np
import pytest

from pipeline import metrics
from pipeline.app.config import compose_config
from pipeline.app.runner import run
from pipeline.concepts.units import (
    OriginalUnits,
    PercentileUnits,
    ProbabilityUnits,
    percentile_units,
    units_from_dicts,
    units_to_dicts,
)
from pipeline.trees import MMDT, ConceptMMDT, RandomizedMMDT

QUIET = ["report.figures=false", "report.html=false", "report.summary=false"]


def test_each_mmdt_estimator_names_the_bound_it_satisfies(tmp_path):
    assert MMDT.error_bound is metrics.theorem1_upper_bound and ConceptMMDT.error_bound is metrics.theorem1_upper_bound
    assert RandomizedMMDT.error_bound is metrics.theorem2_upper_bound
    # a randomized tree under another method name still gets Theorem 2 (it was chosen by the name random_mmdt)
    df = run(compose_config(["dataset=iris", "explainer=[random_mmdt,mmdt]", "explainer.random_mmdt.name=randomized",
                             f"paths.output_dir={tmp_path / 'run'}", f"paths.cache_dir={tmp_path / 'cache'}", *QUIET]))
    rows = df.set_index("explainer")
    K = int(rows.loc["reference", "n_leaves"])
    for row, bound in (("random_mmdt", metrics.theorem2_upper_bound), ("mmdt", metrics.theorem1_upper_bound)):
        assert rows.loc[row, "q_bound"] == pytest.approx(float(bound(rows.loc[row, "q"], K)), rel=1e-12)


def test_units_serialise_themselves():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(50, 4))
    units = [percentile_units(X[:, 0]), ProbabilityUnits(1.5, -0.2, percentile_units(X[:, 1])),
             OriginalUnits(np.sort(X[:, 2]), np.sort(X[:, 2]) * 2 + 1, 1.0, 2.0), None]
    records = units_to_dicts(units)
    assert json.loads(json.dumps(records)) == records  # JSON as it is
    assert [r["kind"] for r in records] == ["percentile", "probability", "original", "raw"]
    back = units_from_dicts(records, X)
    assert type(back[0]) is PercentileUnits and back[3] is None
    s = np.linspace(-2, 2, 11)
    for j in (0, 1):
        np.testing.assert_array_equal(back[j](s), units[j](s))
    assert back[1].fallback is not None and np.array_equal(back[1].fallback(s), percentile_units(X[:, 1])(s))
    np.testing.assert_array_equal(back[2](np.array([0.5])), [2.0])  # mean + sd · z
    assert units_to_dicts(None) is None and units_from_dicts(None, X) is None
