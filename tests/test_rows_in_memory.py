"""Chunking belongs to the array (issue 49, item 2): the stages never ask whether their rows are a
view of a file; the helpers of :mod:`pipeline.app.data.chunked` treat an array in memory as one
chunk, and reading every row of a view is an explicit, budget-checked call that names why."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from pipeline.app.data.budget import RowPlan, rows_in_memory
from pipeline.app.data.chunked import as_array, chunks_of, held, only_rows, open_chunked, viewed_as
from pipeline.validation import InvalidInputError

STAGES = Path(__file__).resolve().parents[1] / "src" / "pipeline" / "app" / "stages"


@pytest.fixture
def view(tmp_path):
    X = np.arange(200, dtype=np.float32).reshape(50, 4)
    np.save(tmp_path / "X.npy", X)
    return X, open_chunked(tmp_path / "X.npy")


def test_no_stage_asks_whether_its_rows_are_a_view_or_out_of_core():
    found = [f"{p.name}:{i}" for p in sorted(STAGES.glob("*.py"))
             for i, line in enumerate(p.read_text().splitlines(), 1) if re.search(r"is_view\(|out_of_core\(", line)]
    assert not found, found


def test_an_array_in_memory_is_returned_as_it_is(view):
    X, _ = view
    assert rows_in_memory(X, RowPlan(budget=1), "why") is X
    assert as_array(X) is X and held(X) is X and viewed_as(X, np.float64) is None
    assert [c is X for c in chunks_of(X, 7)] == [True]
    assert only_rows(X, np.array([1, 2]))[0] is X and only_rows(X, np.array([1, 2]))[1] is None


def test_a_view_is_read_whole_only_within_the_budget(view):
    X, V = view
    np.testing.assert_array_equal(rows_in_memory(V, RowPlan(budget=1 << 20), "why"), X)
    with pytest.raises(InvalidInputError, match=r"the trees are fitted on every row: .*dataset.memory_budget=100B"):
        rows_in_memory(V, RowPlan(budget=100, setting="100B"), "the trees are fitted on every row")
    # a configured sample of every row (fit.sample_rows=<n>) is the user's request: read whatever the budget
    asked = RowPlan(budget=100, setting="100B", samples={"trees": 50})
    np.testing.assert_array_equal(rows_in_memory(V, asked, "why", "trees"), X)
    np.testing.assert_array_equal(rows_in_memory(V, None, "why"), X)  # a stage's compute called outside a run


def test_the_view_helpers_read_by_row_range(view):
    X, V = view
    assert as_array(V) is V and held(V) is None
    assert viewed_as(V, np.float64).dtype == np.float64
    np.testing.assert_array_equal(np.concatenate(list(chunks_of(V, 7))), X)
    rows, idx = only_rows(V, np.array([3, 9]))
    np.testing.assert_array_equal(rows, X[[3, 9]])
    assert idx.tolist() == [3, 9]


def test_over_budget_decides_from_the_array_or_before_reading_from_the_file(view, tmp_path):
    X, V = view
    assert RowPlan(budget=100).over_budget(V) and not RowPlan(budget=1 << 20).over_budget(X)
    assert RowPlan(budget=100).over_budget(path=tmp_path / "X.npy")
    assert not RowPlan(budget=100).over_budget(path=None)
