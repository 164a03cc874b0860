"""Issue 34, item 1: every concept says where its examples came from; concepts learned from the
run's own classes (†) or rows (‡) are marked in the CAV table, the rules and the report;
exclude_run_classes (the strict protocol); duplicates are concepts with the same examples; bad input."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from pipeline.app.configuration.config import compose_config
from pipeline.app.data import Dataset
from pipeline.app.running.runner import run
from pipeline.concepts.attributes import class_attribute_examples
from pipeline.concepts.sets import row_provenance
from pipeline.validation import InvalidInputError


def test_row_provenance_flags_a_union_of_classes():
    y = np.array([0, 0, 1, 1, 2, 2])
    labels = np.column_stack([[1, 1, 1, 1, 0, 0],  # classes 0 and 1: restates them
                              [1, 0, 1, 0, 1, 0],  # cuts across the classes: in-sample rows
                              [np.nan, np.nan, 1, 1, 0, 0]]).astype(float)  # class 1 vs 2 on the rows it labels
    prov = row_provenance(labels, ["ab", "mixed", "b_vs_c"], y, ["a", "b", "c"], "images")
    assert prov["ab"]["from_run"] == "classes" and prov["ab"]["run_classes"] == ["a", "b"]
    assert prov["ab"]["note"] == "learned from this run's a, b images: restates the class"
    assert prov["mixed"]["from_run"] == "rows" and "3 positive and 3 negative images" in prov["mixed"]["note"]
    assert prov["b_vs_c"]["from_run"] == "classes" and prov["b_vs_c"]["negatives"] == "this run's c images"
    assert row_provenance(labels, ["ab", "mixed", "b_vs_c"])["ab"]["from_run"] == "rows"  # no labels: in-sample


def _fashion(names_table=None):
    from pipeline.app.concept_sets import load_concept_spec
    from pipeline.app.concept_sets.attribute_tables import spec_table

    classes, names, table, _ = spec_table(load_concept_spec("fashion_attributes"))
    run_ds = Dataset("fashion_mnist", np.zeros((6, 4, 4, 1), np.uint8), np.array([0, 0, 1, 1, 2, 2]), "image",
                     class_names=["Shirt", "Sneaker", "Ankle boot"], meta={"classes": [6, 7, 9]})
    others = (np.ones((7, 4, 4, 1), np.uint8),
              ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Bag"])
    return classes, names, table, run_ds, others


def test_class_attribute_provenance_and_the_strict_protocol():
    classes, names, table, run_ds, others = _fashion()
    ex = class_attribute_examples("fashion_attributes", names, table, classes, run_ds, others=others, per_class=2)
    prov = ex.meta["provenance"]
    # laced: no class outside the run has it, so it is learned from this run's Sneaker and Ankle boot images
    assert prov["laced"]["from_run"] == "classes"
    assert prov["laced"]["note"] == "learned from this run's Sneaker, Ankle boot images: restates the class"
    assert prov["laced"]["strict_available"]  # exclude_run_classes=true would leave it out: the run names the option
    assert prov["footwear"]["from_run"] is None and prov["footwear"]["positives"].startswith("Sandal images")
    # the strict protocol leaves laced out, with the reason, and keeps the rest
    strict = class_attribute_examples("fashion_attributes", names, table, classes, run_ds, others=others,
                                      per_class=2, exclude_run_classes=True)
    assert "laced" not in strict.names and "footwear" in strict.names
    assert "only this run's own images tell it apart (positives: this run's Sneaker, Ankle boot)" in \
        strict.meta["unavailable"]["laced"]
    assert not any(p["from_run"] for p in strict.meta["provenance"].values())
    assert strict.labels.shape[0] == len(others[0])  # the run's images are no longer examples of anything


def test_a_concept_that_is_exactly_one_run_class_under_the_strict_protocol():
    classes, names, table, run_ds, others = _fashion()
    one = ["sneaker_only", "footwear"]
    t = np.column_stack([[float(c == "Sneaker") for c in classes], table[:, names.index("footwear")]])
    strict = class_attribute_examples("x", one, t, classes, run_ds, others=others, per_class=2,
                                      exclude_run_classes=True)
    assert strict.names == ["footwear"]
    assert strict.meta["unavailable"]["sneaker_only"].startswith(
        "every class outside the run lacks it, so only this run's own images tell it apart (positives: this run's "
        "Sneaker)")
    with pytest.raises(InvalidInputError, match="no attribute varies among the classes outside the run.*"
                                                "sneaker_only: every class"):
        class_attribute_examples("x", one[:1], t[:, :1], classes, run_ds, others=others, exclude_run_classes=True)
    with pytest.raises(InvalidInputError, match="covers every class of the table"):
        class_attribute_examples("x", one, t, classes, run_ds, others=None, exclude_run_classes=True)


def _iris(tmp_path, *overrides):
    return compose_config([f"paths.output_dir={tmp_path / 'run'}", f"paths.cache_dir={tmp_path / 'cache'}",
                           "report.figures=false", "dataset=iris", "encoder=identity", "clustering=gmm",
                           "explainer=[concept_mmdt,concept_cart]", *overrides])


def test_a_planted_concept_equal_to_a_class_is_marked_everywhere(tmp_path, capsys):
    from sklearn.datasets import load_iris

    y = load_iris().target
    rng = np.random.default_rng(0)
    pd.DataFrame({"setosa_like": (y == 0).astype(int), "coin": rng.integers(0, 2, len(y)),
                  "long_petal": (load_iris().data[:, 2] > 4.5).astype(int)}).to_csv(tmp_path / "c.csv", index=False)
    run(_iris(tmp_path, "concepts=examples", f"concepts.path={tmp_path / 'c.csv'}"))
    out = capsys.readouterr().out
    meta = json.loads((tmp_path / "run" / "concepts" / "run.json").read_text())
    assert meta["concept_names"] == ["setosa_like†", "coin‡", "long_petal‡"]
    assert "setosa_like†: learned from this run's setosa rows: restates the class" in out
    assert "† its examples are rows of this run whose concept labels follow their classes" in out
    assert "‡ learned from rows of the explained data" in out
    rules = "".join((tmp_path / "run" / "trees" / f"{r}.rules.txt").read_text() for r in ("concept_mmdt", "concept_cart"))
    used = [n for n in meta["concept_names"] if n.rstrip("†‡") in rules]
    assert used and all(n in rules for n in used)  # every concept a rule names carries its mark
    assert "restates the class labels." in rules and "†" in rules  # and says what it means
    cavs = pd.read_csv(tmp_path / "run" / "concepts" / "cavs.csv", comment="#")
    assert cavs.loc[0, "concept"] == "setosa_like†" and "restates the class" in cavs.loc[0, "examples"]
    tail = (tmp_path / "run" / "concepts" / "cavs.csv").read_text().splitlines()[-1]
    assert tail.startswith("# accuracy: held-out accuracy") and "TCAV's test" in tail
    assert "TCAV's test" in (tmp_path / "run" / "concepts" / "cavs.md").read_text()
    page = (tmp_path / "run" / "report.html").read_text()
    assert "setosa_like†" in page and "restates the class" in page and "TCAV" in page


def _images(folder, n, seed, shift=0):
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True)
    for i in range(n):
        arr = np.clip(rng.normal(100 + shift, 30, (4, 4, 3)), 0, 255).astype(np.uint8)
        Image.fromarray(arr).save(folder / f"{i}.png")


def _image_run(tmp_path, concepts, *overrides):
    rng = np.random.default_rng(0)
    for cls, level in (("dark", 60), ("light", 190)):
        d = tmp_path / "imgs" / cls
        d.mkdir(parents=True)
        for i in range(30):
            Image.fromarray(np.clip(rng.normal(level, 20, (4, 4, 3)), 0, 255).astype(np.uint8)).save(d / f"{i}.png")
    return run(compose_config([f"paths.output_dir={tmp_path / 'run'}", f"paths.cache_dir={tmp_path / 'cache'}",
                               "report.figures=false", "dataset=files", f"dataset.path={tmp_path / 'imgs'}",
                               "encoder=identity", "clustering=kmeans", "explainer=[concept_cart]",
                               "concepts=examples", f"concepts.path={concepts}", *overrides]))


def test_a_concept_folder_with_one_example(tmp_path, capsys):
    c = tmp_path / "concepts"
    _images(c / "bright", 12, 1, shift=80)
    _images(c / "lonely", 1, 2, shift=-60)
    _images(c / "random", 12, 3)
    df = _image_run(tmp_path, c)
    out = capsys.readouterr().out
    assert "lonely: 1 positives / 12 negatives, fewer than min_positives=" in out  # one paragraph, the run goes on
    assert list(df["explainer"]) == ["reference", "concept_cart"]
    assert json.loads((tmp_path / "run" / "concepts" / "run.json").read_text())["concept_names"] == ["bright"]


def test_two_concepts_with_identical_examples(tmp_path, capsys):
    import shutil

    c = tmp_path / "concepts"
    _images(c / "bright", 12, 1, shift=80)
    shutil.copytree(c / "bright", c / "shiny")  # the same files under another name
    _images(c / "dim", 12, 4, shift=-40)
    _images(c / "random", 12, 3)
    df = _image_run(tmp_path, c)
    out = capsys.readouterr().out
    assert ("shiny: has the same examples and labels as 'bright' (12 positives, 12 negatives), so it is the same "
            "concept under another name") in out
    assert list(df["explainer"]) == ["reference", "concept_cart"]
    names = json.loads((tmp_path / "run" / "concepts" / "run.json").read_text())["concept_names"]
    assert names == ["bright", "dim"]  # dim's examples differ: kept, whatever its direction


def test_text_concepts_with_corpus_negatives_are_in_sample():
    from pipeline.concepts.sets import text_prompt_examples

    data = Dataset("mails", ["buy now", "meeting at noon", "free offer", "the patch"], np.array([0, 1, 0, 1]), "text")
    spec = {"name": "topics", "concepts": {"offer": ["a special offer"], "meeting": ["see you at 3pm"]}}
    own = text_prompt_examples(spec, data)
    assert not any(p["from_run"] for p in own.meta["provenance"].values())  # phrases only: no mark
    corpus = text_prompt_examples({**spec, "negatives": "corpus", "n_negatives": 3}, data)
    p = corpus.meta["provenance"]["offer"]
    assert p["from_run"] == "rows" and "3 texts of the explained data (in-sample)" in p["note"]
