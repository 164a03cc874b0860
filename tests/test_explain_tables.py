"""A standardised own table (dataset=files, issue 34 item 7) explained on new rows (issue 37): the
explainer z-scores new rows with the run's means and spreads, and prints the table's own units."""
import json

import numpy as np
import pandas as pd
from sklearn.datasets import load_wine

from pipeline.app.configuration.config import compose_config
from pipeline.app.data.loading import standardize_columns
from pipeline.app.running.runner import run
from pipeline.trees import ExplanationTree


def test_a_standardised_table_run_explains_its_own_rows_identically(tmp_path):
    from pipeline import ConceptExplainer

    wine = load_wine(as_frame=True).frame.rename(columns={"target": "cultivar"})
    wine.to_csv(tmp_path / "wine.csv", index=False)
    out = tmp_path / "run"
    df = run(compose_config(["dataset=files", f"dataset.path={tmp_path / 'wine.csv'}", "dataset.labels=cultivar",
                             "explainer=[mmdt,cart]", f"paths.cache_dir={tmp_path / 'cache'}",
                             f"paths.output_dir={out}", "report.figures=false", "report.html=false"]))
    assert df is not None
    ex = ConceptExplainer.load(out)
    table = pd.read_csv(tmp_path / "wine.csv").drop(columns=["cultivar"])
    got = ex.explain(table)
    Z, _ = standardize_columns(table.to_numpy(dtype=np.float64), list(table.columns))  # as the run's load stage
    for row in ("mmdt", "cart"):
        tree = ExplanationTree.from_dict(json.loads((out / "trees" / f"{row}.json").read_text())["tree"])
        assert np.array_equal(got[f"{row}.cluster"].to_numpy(), tree.predict(Z))  # the run's own assignments
        assert np.array_equal(ex.predict(table, tree=row), tree.predict(Z))
        assert got[f"{row}.rule_holds"].all()  # the printed rules (in the table's units) hold on the training rows
    # the suggested changes read in the table's own units (proline in the hundreds, not z-scores)
    changes = " ".join(got["cart.change"])
    assert "proline" in changes and any(float(w) > 100 for w in changes.replace(",", " ").split()
                                         if w.replace(".", "").replace("e+", "").isdigit())
