"""The concept sets the project ships carry no duplicates, and what a run says about them is a
fact about the run, not advice to fix the project's own files (issue 50, item 5)."""

from __future__ import annotations

import logging
from importlib import resources

import numpy as np
import pytest
import yaml

from pipeline.app.concept_sets import load_concept_spec
from pipeline.app.concept_sets.attribute_tables import coinciding, spec_table, without_coinciding
from pipeline.app.data import Dataset
from pipeline.concepts.attributes import class_attribute_examples

SHIPPED = sorted(p.name.removesuffix(".yaml") for p in resources.files("pipeline.concepts_data").iterdir()
                 if p.name.endswith(".yaml"))


@pytest.mark.parametrize("name", [n for n in SHIPPED
                                  if yaml.safe_load(resources.files("pipeline.concepts_data").joinpath(
                                      f"{n}.yaml").read_text()).get("type") == "class_attributes"])
def test_no_two_attributes_of_a_shipped_table_are_the_same_or_complementary(name):
    classes, names, table, _ = spec_table(load_concept_spec(name))
    for i in range(len(names)):
        for j in range(i):
            assert not np.array_equal(table[:, i], table[:, j]), (names[i], names[j])
            assert not np.array_equal(table[:, i], 1 - table[:, j]), (names[i], names[j])


@pytest.mark.parametrize("name", [n for n in SHIPPED
                                  if yaml.safe_load(resources.files("pipeline.concepts_data").joinpath(
                                      f"{n}.yaml").read_text()).get("type") == "text_prompts"])
def test_no_two_concepts_of_a_shipped_prompt_set_share_a_phrase(name):
    concepts = load_concept_spec(name)["concepts"]
    phrases = [p for prompts in concepts.values() for p in prompts]
    assert len(phrases) == len(set(phrases))


def shirt_sneaker_boot():
    """The documented Fashion-MNIST run (Shirt / Sneaker / Ankle boot) and one image of each other class."""
    classes, names, table, definitions = spec_table(load_concept_spec("fashion_attributes"))
    run = Dataset("fashion_mnist", np.zeros((6, 4, 4, 1), np.uint8), np.array([0, 0, 1, 1, 2, 2]), "image",
                  class_names=["Shirt", "Sneaker", "Ankle boot"], meta={"classes": [6, 7, 9]})
    other = [c for c in classes if c not in run.class_names]
    others = (np.arange(len(other) * 16, dtype=np.uint8).reshape(len(other), 4, 4, 1), other)
    return class_attribute_examples("fashion_attributes", names, table, classes, run, others=others, per_class=1,
                                    definitions=definitions, strict=True)


def test_attributes_that_coincide_on_a_runs_examples_are_fitted_once_and_said_why(caplog):
    examples = shirt_sneaker_boot()
    assert coinciding(examples.labels, examples.names) == {"open_toe": "footwear", "heel_or_shaft": "footwear"}
    with caplog.at_level(logging.INFO):
        kept = without_coinciding(examples)
    assert "open_toe" not in kept.names and "heel_or_shaft" not in kept.names and "footwear" in kept.names
    assert kept.labels.shape == (examples.labels.shape[0], len(examples.names) - 2)
    why = kept.meta["unavailable"]["open_toe"]
    assert "the same labels as 'footwear'" in why and "Sandal" in why and "only 'footwear' is fitted" in why
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    text = " ".join(kept.meta["unavailable"].values()) + caplog.text
    for advice in ("give it examples", "remove one", "rename", "you "):
        assert advice not in text  # a fact about this run, not a request to edit the shipped file


def test_the_cav_fitter_then_drops_nothing_of_the_documented_run():
    from pipeline.concepts.cav import CAVFitter

    kept = without_coinciding(shirt_sneaker_boot())
    Z = np.random.default_rng(0).normal(size=(kept.labels.shape[0], 6))
    fitter = CAVFitter(n_repeats=1, cv=0, min_positives=1, random_state=0).fit(Z, kept.labels, kept.names)
    assert fitter.dropped_ == {}


def test_complements_and_continuous_labels():
    labels = np.array([[1, 0, 1, 0.2], [0, 1, 0, 0.8], [np.nan, np.nan, 1, 0.5]])
    assert coinciding(labels[:, :3], ["a", "b", "c"]) == {"b": "a"}
    assert coinciding(labels[:, :3], ["a", "b", "c"], binary=False) == {}
    assert coinciding(labels[:, [3, 3]], ["x", "y"], binary=False) == {"y": "x"}
