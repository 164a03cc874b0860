"""notebooks/inspect_concept_tree.ipynb executes against a concept run the test creates."""

from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

from pipeline.app.configuration.config import compose_config  # noqa: E402
from pipeline.app.running.runner import run  # noqa: E402

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "inspect_concept_tree.ipynb"


def test_first_code_cell_holds_the_parameters():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    first = next(c for c in nb.cells if c.cell_type == "code")
    assert "parameters" in first.metadata.get("tags", []) and "RUN_DIR = None" in first.source


def test_inspect_concept_tree_notebook_executes(tmp_path):
    """The notebook's own documented command (what `make install` provides: nbclient's `jupyter
    execute`), the run named by $CONCEPT_RUN_DIR; a copy of the notebook, so its output lands in tmp_path."""
    import os
    import shutil
    import subprocess
    import sys

    run_dir = tmp_path / "run"
    run(compose_config([f"paths.output_dir={run_dir}", f"paths.cache_dir={tmp_path / 'cache'}",
                        f"paths.models_dir={tmp_path / 'models'}", "encoder=identity", "clustering=gmm",
                        "concepts=mnist_geometric", "explainer=[concept_mmdt,concept_cart]",
                        "dataset.n_samples=300", "cav.params.n_repeats=2", "cav.params.cv=2", "report.figures=false"]))
    source = nbformat.read(NOTEBOOK, as_version=4).cells[0].source
    assert "jupyter execute notebooks/inspect_concept_tree.ipynb" in source and "papermill" not in source
    executable = Path(sys.executable).with_name("jupyter-execute")
    assert executable.exists(), "nbclient's jupyter-execute is not installed beside this Python"
    copy = tmp_path / "notebooks" / NOTEBOOK.name
    copy.parent.mkdir()
    shutil.copy(NOTEBOOK, copy)
    env = {**os.environ, "CONCEPT_RUN_DIR": str(run_dir), "PIPELINE_LOG_DIR": str(tmp_path / "elsewhere"),
           "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
    proc = subprocess.run([str(executable), str(copy), "--output=inspected", "--timeout=600"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    nb = nbformat.read(copy.with_name("inspected.ipynb"), as_version=4)
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(images) >= 4  # tree, thumbnails, CAV accuracy, scatter
    text = "".join(o.get("text", "") for o in outputs)
    assert str(run_dir) in text and "→ cluster" in text and "% pure" in text
    assert "IProgress not found" not in text and "TqdmWarning" not in text  # issue 36 item 5
    assert "P(" in text  # the rules read in the run's units, as the report prints them (issue 25)
    shown = "".join(str(o.get("data", {}).get("text/plain", "")) for o in outputs)
    assert "concept_mmdt.rule" in shown and "concept_mmdt.change" in shown  # explain on new samples (issue 37)


def test_a_loaded_run_prints_the_rules_in_the_units_the_report_used(tmp_path):
    from pipeline.app.report.concept_run import load_concept_run

    run_dir = tmp_path / "run"
    run(compose_config([f"paths.output_dir={run_dir}", f"paths.cache_dir={tmp_path / 'cache'}",
                        f"paths.models_dir={tmp_path / 'models'}", "encoder=identity", "clustering=gmm",
                        "concepts=mnist_geometric", "explainer=[concept_mmdt]", "dataset.n_samples=300",
                        "cav.params.n_repeats=2", "cav.params.cv=2", "report.figures=false"]))
    loaded = load_concept_run(run_dir)
    tree = loaded["trees"]["concept_mmdt"]
    printed = [str(r).split(" → ")[0] for r in tree.rules(loaded["X"], units=loaded["units"])]
    report = (run_dir / "trees" / "concept_mmdt.rules.txt").read_text()
    assert printed and all(rule in report for rule in printed)
    assert any("P(" in rule for rule in printed)
