"""Issue 36 item 6: runs without concepts say which concept sets apply; errors suggest only those."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from pipeline.app.concept_sets.definitions import (applicable_concept_sets, build_examples, concept_hint,
                                                   load_concept_spec)
from pipeline.app.running.runner import run
from pipeline.validation import InvalidInputError
from test_own_data_cli import _blob_images, cfg


@pytest.mark.parametrize("name, kind, expected", [
    ("iris", "tabular", ["examples", "measured", "discovered"]),
    ("digits", "tabular", ["mnist_measured", "mnist_geometric", "examples", "measured", "discovered"]),
    ("fashion_mnist", "image", ["fashion_measured", "fashion_attributes", "broden", "text_prompts", "examples",
                                "measured", "discovered"]),
    ("spam_assassin", "text", ["text_measured", "email_topics", "text_prompts", "examples", "measured",
                               "discovered"]),
])
def test_the_concept_sets_that_apply_to_a_dataset(name, kind, expected):
    assert applicable_concept_sets(name, kind) == expected


def test_a_set_for_other_data_suggests_only_sets_that_apply_to_a_table():
    iris = SimpleNamespace(name="iris", kind="tabular")
    with pytest.raises(InvalidInputError, match="choose one that applies to iris: concepts=examples or "
                                                r"concepts=measured or concepts=discovered\.$") as err:
        build_examples(load_concept_spec("fashion_attributes"), iris)
    assert "broden" not in str(err.value) and "text_prompts" not in str(err.value)


def test_an_image_run_without_concepts_prints_the_hint(tmp_path, capsys):
    _blob_images(tmp_path)
    run(cfg(tmp_path, "dataset=files", f"dataset.path={tmp_path / 'imgs'}", "explainer=[cart]", "report.html=false"))
    out = capsys.readouterr().out
    hints = [line for line in out.splitlines() if line.startswith("hint: ")]
    assert len(hints) == 1 and "concepts=broden" in hints[0] and "concepts=discovered" in hints[0]
    assert "concepts=email_topics" not in hints[0] and "concepts=text_prompts (with encoder=clip)" in hints[0]
    assert concept_hint("iris", "tabular").endswith("add one of concepts=examples (your own, docs/own-data.md), "
                                                    "concepts=measured (your own measurements, docs/concepts.md), "
                                                    "concepts=discovered.")


def test_a_table_run_on_its_own_features_prints_no_hint(tmp_path, capsys):
    run(cfg(tmp_path, "dataset=iris", "explainer=[cart]", "report.html=false"))
    assert "hint: " not in capsys.readouterr().out
