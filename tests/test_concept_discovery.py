"""Concepts discovered in the representation (issue 25, item 3): planted factors come back,
names follow the planted label, the pipeline runs ``concepts=discovered`` end to end, bad input."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from scipy.optimize import linear_sum_assignment

from pipeline.app.configuration.config import compose_config
from pipeline.app.running.runner import run
from pipeline.concepts.discovery import (ConceptDiscovery, association_text, concept_associations,
                                         distinctive_words, label_table, name_concepts, top_columns, top_examples)
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
    # the association is a column of its own, never the name
    assert association_text(*assoc[j]) in ("≈ sandal, AUC 1.00", *(f"≈ sandal, AUC .9{d}" for d in range(10)))
    assert association_text("noise", 0.55) == "none (best: noise, AUC .55)"
    auto = [f"c{i + 1}" for i in range(5)]
    assert name_concepts(auto) == auto and name_concepts(auto, {f"c{j + 1}": "strappy"})[j] == "strappy"
    assert name_concepts(auto, {f"concept_{j}": "strappy"})[j] == "strappy"
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
        name_concepts(["a", "b"], {"c": "x"})
    with pytest.raises(InvalidInputError, match="same name"):
        name_concepts(["a", "b"], {"a": "x", "b": "x"})
    assert name_concepts(["a", "a", ""]) == ["a", "a#2", "c3"]


def test_text_names_come_from_the_documents_words():
    docs = (["click here to unsubscribe from this offer, click now"] * 5 + ["the kernel patch fails to compile"] * 5
            + ["the weather is nice today"] * 10)
    words = distinctive_words(docs, [np.arange(5), np.arange(5, 10)], 3)
    assert set(words[0]) <= set("click here unsubscribe offer".split()) and words[0][0] == "click"
    assert set(words[1]) <= set("kernel patch fails compile".split()) and len(words[1]) == 3
    for w, top in zip(words, [range(5), range(5, 10)]):  # every word is in the concept's own documents
        assert all(any(x in docs[i] for i in top) for x in w)
    assert distinctive_words(["a b", "c d"], [np.array([0])]) == [[]]  # no word of 3+ letters: no name


def test_table_names_are_the_top_loading_columns():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 4))
    S = np.column_stack([2 * X[:, 2] - X[:, 0], -X[:, 3]])
    cols = top_columns(S, X, ["alcohol", "ash", "proline", "hue"])
    assert cols == [["proline+", "alcohol-"], ["hue-"] + cols[1][1:]]
    assert top_columns(S, np.column_stack([X[:, 0], np.ones(200)]), ["a", "const"], n=2)[0] == ["a-"]


# ------------------------------------------------------------------ the pipeline
def meta_columns(tmp_path) -> set[str]:
    from sklearn.datasets import load_digits

    return {f"pixel_{i}_{j}" for i in range(8) for j in range(8)} | set(load_digits().feature_names)

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
    # named without the labels: digits are images (a table of 64 pixels that brings its images), so by the
    # measured properties each concept tracks (issue 47), not by two pixels
    from pipeline.concepts.measures.digits import digit_measurements
    from sklearn.datasets import load_digits

    measured = {m.name for m in digit_measurements(load_digits().images[:50]).measures}
    assert not any("≈" in n for n in meta["concept_names"]) and len(meta["concept_names"]) == 8
    assert all(re.fullmatch(r"c\d+(#\d+)?", n) or all(t.rstrip("+-") in measured for t in n.split("#")[0].split())
               for n in meta["concept_names"]), meta["concept_names"]
    assert not any(n.startswith("pixel_") for n in meta["concept_names"])
    assert all("tracks" in r for r in meta["discovery"]) and "tracks" in out
    assert any(r["association"].startswith("≈ ") for r in meta["discovery"])  # the labels: a separate column
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
    assert "P(" in out.split("rules:")[1]
    cavs = (tmp_path / "run" / "concepts" / "cavs.csv").read_text()
    assert "boundary P(c)" in cavs  # each CAV's own 50% boundary, in the concept table's file
    run(_compose(tmp_path, "concepts=mnist_geometric", "cav.params.n_repeats=2", "cav.params.cv=2",
                 "concepts.units=raw"))
    assert "P(" not in capsys.readouterr().out.split("rules:")[1]


@pytest.mark.slow
def test_an_attribute_table_names_the_concept_it_matches(tmp_path):
    """concepts.params.attributes: a 0/1 column planted on one concept's top 20% is that concept's association
    (a column of its own; the name stays the data's)."""
    import pandas as pd

    run(_compose(tmp_path, "concepts=discovered", "concepts.params.n_concepts=6", "dataset.n_samples=null"))
    X = np.load(tmp_path / "run" / "concepts" / "run.npz")["X"]
    planted = (X[:, 2] > np.quantile(X[:, 2], 0.8)).astype(int)
    table = tmp_path / "attributes.csv"
    pd.DataFrame({"planted": planted, "noise": np.arange(len(planted)) % 2}).to_csv(table, index=False)
    run(_compose(tmp_path, "concepts=discovered", "concepts.params.n_concepts=6", "dataset.n_samples=null",
                 f"concepts.params.attributes={table}"))
    meta = json.loads((tmp_path / "run" / "concepts" / "run.json").read_text())
    assert meta["discovery"][2]["association"] == "≈ planted, AUC 1.00" and meta["discovery"][2]["AUC"] == 1.0
    assert "planted" not in meta["concept_names"][2]


def test_discovered_concepts_on_a_one_column_table(tmp_path, capsys):
    import pandas as pd

    rng = np.random.default_rng(0)
    x = np.concatenate([rng.normal(0, 1, 60), rng.normal(6, 1, 60)])
    pd.DataFrame({"proline": x, "label": [0] * 60 + [1] * 60}).to_csv(tmp_path / "one.csv", index=False)
    df = run(compose_config([f"paths.output_dir={tmp_path / 'run'}", f"paths.cache_dir={tmp_path / 'cache'}",
                             "report.figures=false", "dataset=files", f"dataset.path={tmp_path / 'one.csv'}",
                             "dataset.labels=label", "encoder=identity", "clustering=gmm",
                             "explainer=[concept_mmdt,concept_cart]", "concepts=discovered"]))
    out = capsys.readouterr().out
    assert "representation has 1 dimension(s)" in out and "the concept trees are the trees on the column" in out
    meta = json.loads((tmp_path / "run" / "concepts" / "run.json").read_text())
    assert meta["concept_names"] == ["proline+"]  # the table's own column names the concept
    assert df.set_index("explainer").loc["concept_cart", "ari"] > 0.9  # the rest of the run is reported
