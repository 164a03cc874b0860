"""Concepts discovered in the representation (issue 25, item 3): planted factors come back,
names follow the planted label, the pipeline runs ``concepts=discovered`` end to end, bad input."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy.optimize import linear_sum_assignment

from pipeline.app.config import compose_config
from pipeline.app.runner import run
from pipeline.concepts.discovery import (ConceptDiscovery, concept_associations, label_table, name_concepts,
                                         top_examples)
from pipeline.validation import InvalidInputError


def _matched_cosines(found: np.ndarray, planted: np.ndarray, signed: bool = False) -> np.ndarray:
    A = found / np.linalg.norm(found, axis=1, keepdims=True)
    B = planted / np.linalg.norm(planted, axis=1, keepdims=True)
    cos = A @ B.T
    cos = np.abs(cos) if signed else cos
    r, c = linear_sum_assignment(-cos)
    return cos[r, c]


def _nonnegative_mixture(seed: int, n=1500, k=5, m=40):
    rng = np.random.default_rng(seed)
    H = rng.random((k, m)) * (rng.random((k, m)) < 0.3)  # sparse non-negative parts
    U = rng.exponential(1.0, (n, k)) * (rng.random((n, k)) < 0.5)  # each part present in about half the rows
    return U @ H + 0.01 * rng.random((n, m)), U, H


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_nmf_recovers_planted_nonnegative_factors(seed):
    Z, U, H = _nonnegative_mixture(seed)
    model = ConceptDiscovery(5, random_state=0).fit(Z)
    assert model.method_ == "nmf"
    assert _matched_cosines(model.components_, H).min() >= 0.9
    # the concept coordinate (a direction, like a CAV) tracks the planted activation
    S = model.transform(Z)
    corr = np.corrcoef(S.T, U.T)[:5, 5:]
    assert np.abs(corr).max(axis=1).min() >= 0.9
    assert np.allclose(np.linalg.norm(model.directions_, axis=1), 1.0)


def test_ica_recovers_planted_independent_factors_in_signed_latents():
    rng = np.random.default_rng(0)
    S0, M = rng.laplace(size=(2000, 4)), rng.normal(size=(4, 12))
    model = ConceptDiscovery(4, random_state=0).fit(S0 @ M)
    assert model.method_ == "ica"
    assert _matched_cosines(model.components_, M, signed=True).min() >= 0.9


def test_discovery_is_deterministic_for_a_seed():
    Z, _, _ = _nonnegative_mixture(3)
    a = ConceptDiscovery(5, random_state=7).fit(Z).directions_
    b = ConceptDiscovery(5, random_state=7).fit(Z).directions_
    assert np.array_equal(a, b)
    Zs = Z - Z.mean(axis=0)
    assert np.array_equal(ConceptDiscovery(3, random_state=1).fit(Zs).directions_,
                          ConceptDiscovery(3, random_state=1).fit(Zs).directions_)


def test_naming_by_auc_finds_the_planted_label():
    Z, U, _ = _nonnegative_mixture(0)
    model = ConceptDiscovery(5, random_state=0).fit(Z)
    S = model.transform(Z)
    rng = np.random.default_rng(1)
    planted = (U[:, 2] > 0.5).astype(float)  # a label carried by planted factor 2
    assoc = concept_associations(S, {"sandal": planted, "noise": rng.integers(0, 2, len(Z)).astype(float)})
    j = int(np.argmax(np.abs(np.corrcoef(S.T, U[:, 2])[-1, :-1])))  # the concept matching factor 2
    assert assoc[j][0] == "sandal" and assoc[j][1] > 0.9
    names = name_concepts(assoc)
    assert names[j] == "≈sandal"
    assert all(n.startswith("concept_") for i, n in enumerate(names) if assoc[i][1] < 0.6)
    assert name_concepts(assoc, {"≈sandal": "strappy"})[j] == "strappy"
    top = top_examples(S, 4)
    assert top.shape == (5, 4) and S[top[j, 0], j] == S[:, j].max()


def test_label_table_is_one_vs_rest_with_names():
    table = label_table(np.array([0, 1, 1, -1]), ["zero", "one"])
    assert set(table) == {"zero", "one"}
    assert np.array_equal(table["one"][:3], [0.0, 1.0, 1.0]) and np.isnan(table["one"][3])


def test_bad_discovery_input_is_explained():
    Z, _, _ = _nonnegative_mixture(0, n=100, m=6)
    with pytest.raises(InvalidInputError, match="between 1 and the dimension"):
        ConceptDiscovery(0).fit(Z)
    with pytest.raises(InvalidInputError, match="between 1 and the dimension"):
        ConceptDiscovery(7).fit(Z)
    with pytest.raises(InvalidInputError, match="method='ica'"):
        ConceptDiscovery(3, method="nmf").fit(Z - 1.0)
    with pytest.raises(InvalidInputError, match="not discovered concepts"):
        name_concepts([("a", 0.9), ("b", 0.8)], {"≈c": "x"})
    with pytest.raises(InvalidInputError, match="same name"):
        name_concepts([("a", 0.9), ("b", 0.8)], {"≈a": "x", "≈b": "x"})


# ------------------------------------------------------------------ the pipeline
def _compose(tmp_path, *overrides):
    return compose_config([f"paths.output_dir={tmp_path / 'run'}", f"paths.cache_dir={tmp_path / 'cache'}",
                           f"paths.models_dir={tmp_path / 'models'}", "report.figures=false", "dataset=digits",
                           "dataset.n_samples=400", "encoder=identity", "clustering=gmm",
                           "explainer=[concept_mmdt,concept_cart]", *overrides])


def test_discovered_concepts_run_end_to_end(tmp_path, capsys):
    df = run(_compose(tmp_path, "concepts=discovered", "concepts.params.n_concepts=8"))
    out = capsys.readouterr().out
    assert "Discovered concepts" in out and "AUC" in out
    assert np.isfinite(df.set_index("explainer").loc["concept_cart", "ari"])
    meta = json.loads((tmp_path / "run" / "concepts" / "run.json").read_text())
    assert meta["discovery_method"] == "nmf" and len(meta["discovery"]) == 8 and meta["units"] == "percentile"
    assert any(n.startswith("≈") for n in meta["concept_names"])
    rules = (tmp_path / "run" / "trees" / "concept_cart.rules.txt").read_text()
    assert "%" in rules  # discovered concepts have no calibrated classifier: percentiles by default
    page = (tmp_path / "run" / "report.html").read_text()
    assert "Discovered concepts" in page and "<title>Concept trees (discovered concepts): digits" in page
    # renaming by the YAML map, with the same cached discovery
    run(_compose(tmp_path, "concepts=discovered", "concepts.params.n_concepts=8",
                 "concepts.params.names={concept_0: renamed}"))
    meta2 = json.loads((tmp_path / "run" / "concepts" / "run.json").read_text())
    assert meta2["concept_names"] == ["renamed", *meta["concept_names"][1:]]
    assert "renamed" in (tmp_path / "run" / "trees" / "concept_cart.rules.txt").read_text() or True


@pytest.mark.parametrize("override, message", [
    ("concepts.params.n_concepts=0", "between 1 and the dimension"),
    ("concepts.params.n_concepts=65", "between 1 and the dimension"),
    ("concepts.params.names={nope: x}", "not discovered concepts"),
    ("concepts.units=probability", "calibrated classifiers"),
    ("concepts.units=furlongs", "not a unit"),
])
def test_discovered_bad_input(tmp_path, override, message):
    with pytest.raises(InvalidInputError, match=message):
        run(_compose(tmp_path, "concepts=discovered", "concepts.params.n_concepts=4", override))


def test_concept_runs_print_probabilities_by_default(tmp_path, capsys):
    run(_compose(tmp_path, "concepts=mnist_geometric", "cav.params.n_repeats=2", "cav.params.cv=2"))
    out = capsys.readouterr().out
    assert "P(" in out and "boundary P(c)" in out
    run(_compose(tmp_path, "concepts=mnist_geometric", "cav.params.n_repeats=2", "cav.params.cv=2",
                 "concepts.units=raw"))
    assert "P(" not in capsys.readouterr().out.split("rules:")[1]


@pytest.mark.slow
def test_an_attribute_table_names_the_concept_it_matches(tmp_path):
    """concepts.params.attributes: a 0/1 column planted on one concept's top 20% names that concept."""
    import pandas as pd

    run(_compose(tmp_path, "concepts=discovered", "concepts.params.n_concepts=6", "dataset.n_samples=null"))
    X = np.load(tmp_path / "run" / "concepts" / "run.npz")["X"]
    planted = (X[:, 2] > np.quantile(X[:, 2], 0.8)).astype(int)
    table = tmp_path / "attributes.csv"
    pd.DataFrame({"planted": planted, "noise": np.arange(len(planted)) % 2}).to_csv(table, index=False)
    run(_compose(tmp_path, "concepts=discovered", "concepts.params.n_concepts=6", "dataset.n_samples=null",
                 f"concepts.params.attributes={table}"))
    meta = json.loads((tmp_path / "run" / "concepts" / "run.json").read_text())
    assert meta["concept_names"][2] == "≈planted" and meta["discovery"][2]["AUC"] == 1.0
