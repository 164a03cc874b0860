"""The pipeline's numbers did not move when its glue was redesigned (issue 11).

``tests/regression/numbers_before_redesign.json`` holds the results tables (timings dropped)
that ``python -m pipeline`` (the default deep digits run), ``experiment=mmdt_table1`` and
``experiment=spex_table2`` printed before the redesign (commit b4a239b). A change that is meant
to move them (a new VaDE training schedule, a fixed tree algorithm) regenerates the entries
it moves and says so in its commit; a change of the glue never should::

    .venv/bin/python tests/test_pipeline_regression.py default      # rewrites the "default" entry
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from pipeline.app.configuration.config import compose_config
from pipeline.app.running.runner import run

FIXTURE = Path(__file__).parent / "regression" / "numbers_before_redesign.json"
from shared_data import BENCHMARKS, skip_without_benchmarks  # tests/ is on sys.path (pytest, or run as a script)
#: the clustering-benchmarks files each run reads (tests/shared_data.py)
NEEDS = {"mmdt_table1": ("sipu/r15", "sipu/d31", "sipu/pathbased", "sipu/aggregation"),
         "spex_table2": ("sipu/r15", "sipu/pathbased")}
RUNS = {
    # the deep run: digits -> VaDE -> concepts measured on the pixels (mnist_measured, issue 47) -> concept trees
    "default": ["dataset=digits"],
    # the MMDT paper's Table-2 protocol on the same digits: the class-defined mnist_geometric concepts
    "table2_protocol": ["dataset=digits", "concepts=mnist_geometric"],
    "mmdt_table1": ["experiment=mmdt_table1"],
    "spex_table2": ["experiment=spex_table2"],
}


def numbers(tmp_path: Path, name: str) -> list[dict]:
    """The results table of run ``name`` (timings dropped) as JSON rows."""
    df = run(compose_config([f"paths.output_dir={tmp_path / 'out'}", f"paths.cache_dir={tmp_path / 'cache'}",
                             f"paths.models_dir={tmp_path / 'models'}", f"paths.benchmark_dir={BENCHMARKS}",
                             "report.figures=false", *RUNS[name]]))
    return json.loads(df.drop(columns=["fit_seconds"]).to_json(orient="records", double_precision=15))


def same(a, b) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        if a is None or b is None:
            return a is None and b is None
        return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-9) or (math.isnan(a) and math.isnan(b))
    return a == b


@pytest.mark.slow
@pytest.mark.parametrize("name", list(RUNS))
def test_numbers_are_those_before_the_redesign(tmp_path, name):
    skip_without_benchmarks(*NEEDS.get(name, ()))
    expected = json.loads(FIXTURE.read_text())[name]
    got = numbers(tmp_path, name)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        diff = {k: (g.get(k), v) for k, v in e.items() if not same(g.get(k), v)}
        assert not diff, f"{name}: row {e.get('run', '')}/{e['explainer']} changed: {diff}"


if __name__ == "__main__":  # regenerate entries: python tests/test_pipeline_regression.py default [...]
    import sys
    import tempfile

    recorded = json.loads(FIXTURE.read_text())
    for entry in sys.argv[1:] or list(RUNS):
        with tempfile.TemporaryDirectory() as tmp:
            recorded[entry] = numbers(Path(tmp), entry)
    FIXTURE.write_text(json.dumps(recorded, indent=1) + "\n")
    print(f"rewrote {sys.argv[1:] or list(RUNS)} in {FIXTURE}")
