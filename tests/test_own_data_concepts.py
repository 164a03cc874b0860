"""concepts=examples: concept tables (aligned / joined on ids), concept folders, concept
embeddings; and their bad-input errors."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from pipeline.app.concept_sets.examples import read_concept_examples
from pipeline.app.data.dataset import Dataset
from pipeline.validation import InvalidInputError


def tabular(n=6, ids=None):
    meta = {} if ids is None else {"ids": ids}
    return Dataset("d", np.arange(n * 2, dtype=float).reshape(n, 2), None, "tabular", meta=meta)


def test_aligned_table_keeps_the_csv_names(tmp_path):
    pd.DataFrame({"round": [1, 0, 1, 0, 1, 0], "red": [0, 0, 1, 1, None, 1]}).to_csv(tmp_path / "c.csv", index=False)
    ex = read_concept_examples(tmp_path / "c.csv", tabular())
    assert ex.names == ["round", "red"] and ex.inputs is None and ex.set_name == "c"
    assert ex.labels[:, 0].tolist() == [1, 0, 1, 0, 1, 0] and np.isnan(ex.labels[4, 1])


def test_table_follows_a_subsampled_dataset(tmp_path):
    pd.DataFrame({"a": [1, 0, 1, 0, 1, 0]}).to_csv(tmp_path / "c.csv", index=False)
    sub = tabular().subset(np.array([1, 2, 4, 5]))
    assert read_concept_examples(tmp_path / "c.csv", sub).labels[:, 0].tolist() == [0, 1, 1, 0]


def test_table_joined_on_ids(tmp_path):
    pd.DataFrame({"file": ["s3", "s0", "s1", "s9"], "a": [1, 0, 1, 1]}).to_parquet(tmp_path / "c.parquet")
    ex = read_concept_examples(tmp_path / "c.parquet", tabular(4, ids=["s0", "s1", "s2", "s3"]), id_column="file")
    assert ex.names == ["a"] and ex.labels[[0, 1, 3], 0].tolist() == [0, 1, 1] and np.isnan(ex.labels[2, 0])


def _folder(root, kind, counts):
    for concept, n in counts.items():
        (root / concept).mkdir(parents=True)
        for i in range(n):
            if kind == "image":
                Image.fromarray(np.full((6, 9, 3), 20 * i, np.uint8)).save(root / concept / f"{i}.png")
            else:
                (root / concept / f"{i}.txt").write_text(f"{concept} example {i}")


def test_image_folder_layout_is_resized_to_the_data(tmp_path):
    _folder(tmp_path / "concepts", "image", {"stripes": 3, "dots": 2, "random": 4})
    data = Dataset("imgs", np.zeros((5, 4, 4, 1), np.uint8), None, "image")
    ex = read_concept_examples(tmp_path / "concepts", data)
    assert ex.names == ["dots", "stripes"] and ex.input_kind == "image" and ex.inputs.shape == (9, 4, 4, 1)
    assert np.nansum(ex.labels, axis=0).tolist() == [2, 3] and (ex.labels[-4:] == 0).all()
    assert np.isnan(ex.labels[0, 1])  # a "dots" example says nothing about stripes


def test_image_folder_layout_keeps_the_data_height_and_width(tmp_path):
    _folder(tmp_path / "concepts", "image", {"dots": 2, "random": 2})
    data = Dataset("imgs", np.zeros((5, 4, 7, 3), np.uint8), None, "image")  # (n, H, W, C), not square
    assert read_concept_examples(tmp_path / "concepts", data).inputs.shape == (4, 4, 7, 3)


def test_text_folder_layout(tmp_path):
    _folder(tmp_path / "c", "text", {"sports": 2, "random": 2})
    ex = read_concept_examples(tmp_path / "c", Dataset("t", ["a", "b"], None, "text"))
    assert ex.input_kind == "text" and ex.inputs[0] == "sports example 0"


def test_npz_of_concept_embeddings(tmp_path):
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "c.npz", round=rng.normal(size=(4, 3)), red=rng.normal(size=(2, 3)),
             random=rng.normal(size=(5, 3)))
    ex = read_concept_examples(tmp_path / "c.npz", tabular())
    assert ex.input_kind == "latents" and ex.inputs.shape == (11, 3) and ex.names == ["round", "red"]


@pytest.mark.parametrize("case, message", [
    ("length", "has 5 rows but the dataset has 6"),
    ("values", "column 'a' holds '2' in row 1 (line 3 of the file)"),
    ("no_positives", "concept 'a' has no positives"),
    ("no_negatives", "concept 'a' has no negatives"),
    ("no_random", "has no random/ subfolder"),
    ("empty_concept", "has no positives"),
    ("npz_no_random", "no 'random' array of negatives"),
    ("extension", "unknown file type '.json'"),
    ("missing", "concepts.path=nope.csv: no such file"),
    ("id_column", "concepts.id_column='key' is not a column"),
])
def test_bad_concept_input(tmp_path, monkeypatch, case, message):
    monkeypatch.chdir(tmp_path)
    kwargs, data = {}, tabular()
    if case in ("length", "values", "no_positives", "no_negatives", "id_column"):
        col = {"length": [1, 0, 1, 0, 1], "values": [1, 2, 0, 0, 1, 0], "no_positives": [0] * 6,
               "no_negatives": [1] * 6, "id_column": [1, 0, 1, 0, 1, 0]}[case]
        pd.DataFrame({"a": col}).to_csv("c.csv", index=False)
        path = "c.csv"
        kwargs = {"id_column": "key"} if case == "id_column" else {}
    elif case in ("no_random", "empty_concept"):
        _folder(tmp_path / "f", "text", {"a": 0 if case == "empty_concept" else 2, "random": 2} if case ==
                "empty_concept" else {"a": 2})
        path, data = "f", Dataset("t", ["x", "y"], None, "text")
    elif case == "npz_no_random":
        np.savez("c.npz", a=np.ones((2, 2)))
        path = "c.npz"
    elif case == "extension":
        (tmp_path / "c.json").write_text("{}")
        path = "c.json"
    else:
        path = "nope.csv"
    with pytest.raises(InvalidInputError) as err:
        read_concept_examples(path, data, **kwargs)
    assert message in str(err.value) and "\n" not in str(err.value)
