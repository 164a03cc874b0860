"""The console explains what it prints (issue 50, item 4): a legend under the results table and
under the rules, the reason where a concept reads in percentiles, and an explanation's ``change``
column in the units the rule itself is written in."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import numpy as np
import pytest

from pipeline.app.configuration.config import compose_config
from pipeline.app.report.summary import LEGEND, rules_legend
from pipeline.app.running.runner import run

#: scikit-learn's digits on their pixels with the MNIST concepts (logistic CAVs: probability units);
#: two of the three concepts are cut in a probability's tail, so they read in percentiles
PIXEL_CONCEPTS = ["dataset=digits", "encoder=identity", "clustering=gmm", "concepts=mnist_geometric",
                  "explainer=[concept_mmdt,concept_cart]"]


def printed_run(tmp: Path, *overrides: str) -> tuple[str, Path]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        run(compose_config([*overrides, f"paths.output_dir={tmp / 'run'}", f"paths.cache_dir={tmp / 'cache'}",
                            "report.figures=false", "report.html=false"]))
    return out.getvalue(), tmp / "run"


@pytest.fixture(scope="module")
def pixel_concepts(tmp_path_factory):
    return printed_run(tmp_path_factory.mktemp("pixels"), *PIXEL_CONCEPTS)


def test_a_legend_under_the_table_names_every_column_it_shows(tmp_path):
    text, _ = printed_run(tmp_path, "dataset=iris", "explainer=[mmdt,cart]")
    lines = text.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("explainer"))
    legend = lines[header + 5]  # title row, reference, mmdt, cart, a blank line
    for column in ("ari", "stability", "ref_ari", "misassignment", "q"):
        assert LEGEND[column] in legend
    rules = next(line for line in lines if line.startswith("Rules: conditions → reference cluster"))
    assert "% pure: share of them in that cluster" in rules and 'mostly "c"' in rules
    assert "ranks" not in rules  # no concept, no percentile


def test_concepts_read_in_percentiles_say_why(pixel_concepts):
    text, _ = pixel_concepts
    ranked = sorted({m.group(1) for m in re.finditer(r"(\w+†?) in (?:bottom|top|percentiles) ", text)})
    assert ranked, "the fixture's rules no longer read a concept in percentiles"
    legend = next(line for line in text.splitlines() if line.startswith("Rules: "))
    assert all(name in legend for name in ranked)
    assert "P(c) is below 0.01 or above 0.99" in legend


def test_without_calibrated_probabilities_the_reason_differs():
    text = rules_legend(["unsubscribe in bottom 62.2% → cluster 0 · 373 points · 75% pure"], {"units_kind": "percentile"})
    assert "unsubscribe reads as ranks" in text and "no calibrated probability" in text and "mostly" not in text


def test_the_change_column_speaks_the_rules_units(pixel_concepts):
    from pipeline import ConceptExplainer
    from sklearn.datasets import load_digits

    _, run_dir = pixel_concepts
    ex = ConceptExplainer.load(run_dir)
    df = ex.explain(load_digits().data[:60], latents=True)
    for row in ("concept_mmdt", "concept_cart"):
        rules = " ".join(df[f"{row}.rule"])
        ranked = {m.group(1).rstrip("†") for m in re.finditer(r"(\w+†?) in (?:bottom|top|percentiles) ", rules)}
        probabilities = {m.group(1).rstrip("†") for m in re.finditer(r"P\((\w+†?)\)", rules)}
        changes = " ".join(df[f"{row}.change"])
        assert changes.strip()
        for name in ranked:
            assert f"P({name}" not in changes  # "P(vertical_line) 0.00207 → 0.000829" for a rule in percentiles
        for m in re.finditer(r"(\w+)†? percentile ([\d.e+-]+) → ([\d.e+-]+)", changes):
            assert m.group(1) in ranked and 0 <= float(m.group(2)) <= 100 and 0 <= float(m.group(3)) <= 100
        assert any(f"{name}" in changes for name in ranked | probabilities)
    assert np.isfinite(df["concept_mmdt.change_size"]).any()


def test_untested_concepts_sharing_a_reason_are_said_once():
    from pipeline.app.report.concept_run import untested_text

    why = ("too few examples for the test (20 CAVs, each on its own 5 positives and 5 random examples, need 100 "
           "positive examples and a pool of 200 random ones; the pool has 40)")
    text = untested_text({"food": f"{why}; it has 10", "plants": f"{why}; it has 12",
                          "sport": "the reference clustering has no head: DBSCAN"})
    assert text.count("too few examples") == 1
    assert text.startswith("food, plants (10, 12 positive examples): too few examples")
    assert text.endswith("sport: the reference clustering has no head: DBSCAN")


def test_weak_tests_sharing_a_reason_are_said_once():
    from pipeline.app.report.concept_run import weak_text

    why = ("not significant, but each of its test CAVs has {} examples per side in 384 latent dimensions (fewer than "
           "half as many), so a CAV is mostly noise and the test could miss the concept; kept in the trees")
    text = weak_text({"a": why.format(5), "b": why.format(6), "c": why.format(5)})
    assert text.startswith("a, b, c (5, 6, 5 examples per side): not significant, but each of its test CAVs has N ")
    assert text.count("not significant") == 1
    assert weak_text({"a": why.format(5)}) == f"a: {why.format(5)}"  # a reason of its own: said as it is
