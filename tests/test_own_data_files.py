"""dataset=files: every input kind on small generated files, and the bad-input errors."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from pipeline.app.data.files import load_files
from pipeline.validation import InvalidInputError


@pytest.fixture
def emb(tmp_path):
    rng = np.random.default_rng(0)
    X = np.vstack([rng.normal(0, 1, (20, 3)), rng.normal(4, 1, (20, 3))]).astype(np.float32)
    np.save(tmp_path / "emb.npy", X)
    (tmp_path / "labels.csv").write_text("\n".join(["cat"] * 20 + ["dog"] * 20) + "\n")
    df = pd.DataFrame(X, columns=["petal length", "petal width", "sepal"])
    df["species"] = ["setosa"] * 20 + ["virginica"] * 20
    df["id"] = [f"s{i}" for i in range(40)]
    df.to_csv(tmp_path / "table.csv", index=False)
    return tmp_path, X


def test_npy_with_string_labels_file(emb):
    d, X = emb
    ds = load_files(d / "emb.npy", str(d / "labels.csv"))
    assert ds.kind == "tabular" and ds.X.shape == (40, 3) and np.allclose(ds.X, X)
    assert ds.class_names == ["cat", "dog"] and ds.y.tolist() == [0] * 20 + [1] * 20
    assert ds.feature_names == ["x0", "x1", "x2"] and ds.name == "emb"


def test_labels_are_optional_and_zero_is_not_noise(emb, tmp_path):
    d, _ = emb
    assert load_files(d / "emb.npy").y is None
    np.save(tmp_path / "y.npy", np.array([0] * 20 + [1] * 20))
    ds = load_files(d / "emb.npy", str(tmp_path / "y.npy"))
    assert (ds.y >= 0).all() and ds.class_names == ["0", "1"]  # label 0 is a class, not noise
    noisy = load_files(d / "emb.npy", str(tmp_path / "y.npy"), noise_label=0)
    assert (noisy.y[:20] == -1).all() and noisy.class_names == ["1"]


def test_label_file_with_header_line(emb):
    d, _ = emb
    (d / "with_header.csv").write_text("animal\n" + "\n".join(["cat"] * 20 + ["dog"] * 20))
    assert load_files(d / "emb.npy", str(d / "with_header.csv")).class_names == ["cat", "dog"]


def test_csv_and_parquet_tables_name_features_from_the_header(emb):
    d, _ = emb
    pd.read_csv(d / "table.csv").to_parquet(d / "table.parquet")
    for f in ("table.csv", "table.parquet"):
        ds = load_files(d / f, "species", id_column="id")
        assert ds.feature_names == ["petal length", "petal width", "sepal"]
        assert ds.class_names == ["setosa", "virginica"] and ds.meta["ids"][:2] == ["s0", "s1"]
    chosen = load_files(d / "table.csv", "species", id_column="id", feature_names=["sepal", "petal width"])
    assert chosen.feature_names == ["sepal", "petal width"] and chosen.X.shape == (40, 2)
    pd.read_csv(d / "table.csv").to_csv(d / "table.tsv", sep="\t", index=False)
    assert load_files(d / "table.tsv", "species", id_column="id").X.shape == (40, 3)


def test_npy_feature_names_and_npz_named_arrays(emb, tmp_path):
    d, X = emb
    assert load_files(d / "emb.npy", feature_names=["a", "b", "c"]).feature_names == ["a", "b", "c"]
    np.savez(tmp_path / "bundle.npz", embeddings=X, species=np.array(["a"] * 20 + ["b"] * 20))
    ds = load_files(tmp_path / "bundle.npz", "species")
    assert ds.X.shape == (40, 3) and ds.class_names == ["a", "b"]


def test_text_file_and_text_column(tmp_path):
    (tmp_path / "docs.txt").write_text("a cat sat\na dog ran\nthe cat slept\n")
    ds = load_files(tmp_path / "docs.txt")
    assert ds.kind == "text" and ds.X == ["a cat sat", "a dog ran", "the cat slept"]
    pd.DataFrame({"text": ["x y", "y z"], "topic": ["a", "b"]}).to_csv(tmp_path / "t.csv", index=False)
    ds = load_files(tmp_path / "t.csv", "topic", text_column="text")
    assert ds.kind == "text" and ds.X == ["x y", "y z"] and ds.class_names == ["a", "b"]


def _image(path, size, value, mode="RGB"):
    arr = np.full((size[1], size[0], 3), value, dtype=np.uint8)
    Image.fromarray(arr).convert(mode).save(path)


def test_image_folder_with_classes_and_mixed_sizes(tmp_path):
    for cls, value in (("bright", 220), ("dark", 30)):
        (tmp_path / "imgs" / cls).mkdir(parents=True)
        for i in range(3):
            _image(tmp_path / "imgs" / cls / f"{i}.png", (8, 8) if i else (12, 10), value)
    ds = load_files(tmp_path / "imgs")
    assert ds.kind == "image" and ds.X.shape == (6, 8, 8, 3) and ds.X.dtype == np.uint8
    assert ds.class_names == ["bright", "dark"] and ds.meta["ids"][0] == "bright/0.png"
    assert load_files(tmp_path / "imgs", image_size=4).X.shape == (6, 4, 4, 3)


def test_flat_greyscale_folder_has_no_labels(tmp_path):
    (tmp_path / "flat").mkdir()
    for i in range(3):
        _image(tmp_path / "flat" / f"{i}.png", (5, 5), 10 * i, mode="L")
    ds = load_files(tmp_path / "flat")
    assert ds.y is None and ds.X.shape == (3, 5, 5, 1)


def test_subsampling_keeps_row_numbers(emb):
    d, _ = emb
    ds = load_files(d / "emb.npy").subset(np.array([3, 5, 7]))
    assert ds.meta["rows"] == [3, 5, 7] and ds.subset(np.array([2])).meta["rows"] == [7]


@pytest.mark.parametrize("case, message", [
    ("missing", "dataset.path=missing.npy: no such file"),
    ("extension", "unknown file type '.json'"),
    ("length", "has 39 labels but the data have 40 rows"),
    ("column", "dataset.labels='specie' is neither a label file nor a column of"),
    ("nan", "the first is row 4 (0-based) (line 6 of the file)"),
    ("nan_npy", "the first is row 2 (0-based)"),
    ("empty_folder", "holds no images"),
    ("bad_image", "cannot be decoded"),
    ("unreadable_npy", "could not be read as a numpy .npy file"),
    ("empty_line", "line 2 is empty"),
])
def test_bad_input_names_the_file_and_the_fix(emb, case, message, monkeypatch):
    d, X = emb
    monkeypatch.chdir(d)
    kwargs = {}
    if case == "missing":
        path = "missing.npy"
    elif case == "extension":
        (d / "x.json").write_text("{}")
        path = "x.json"
    elif case == "length":
        (d / "short.txt").write_text("\n".join(["a"] * 39))
        path, kwargs = "emb.npy", {"labels": "short.txt"}
    elif case == "column":
        path, kwargs = "table.csv", {"labels": "specie"}
    elif case == "nan":
        df = pd.read_csv(d / "table.csv")
        df.loc[4, "sepal"] = np.nan
        df.to_csv(d / "nan.csv", index=False)
        path, kwargs = "nan.csv", {"labels": "species", "id_column": "id"}
    elif case == "nan_npy":
        Y = X.copy()
        Y[2, 1] = np.inf
        np.save(d / "inf.npy", Y)
        path = "inf.npy"
    elif case == "empty_folder":
        (d / "empty").mkdir()
        path = "empty"
    elif case == "bad_image":
        (d / "broken").mkdir()
        _image(d / "broken" / "ok.png", (4, 4), 1)
        (d / "broken" / "bad.png").write_bytes(b"not a png")
        path = "broken"
    elif case == "unreadable_npy":
        (d / "junk.npy").write_bytes(b"junk")
        path = "junk.npy"
    else:
        (d / "gap.txt").write_text("one\n\nthree\n")
        path = "gap.txt"
    before = {p: p.read_bytes() for p in d.rglob("*") if p.is_file()}
    with pytest.raises(InvalidInputError) as err:
        load_files(path, **kwargs)
    assert message in str(err.value) and "\n" not in str(err.value)
    if case == "bad_image":
        assert "bad.png" in str(err.value)
    assert {p: p.read_bytes() for p in d.rglob("*") if p.is_file()} == before  # nothing the user wrote is modified


def test_folder_of_text_documents_with_classes(tmp_path):
    for topic in ("sport", "food"):
        (tmp_path / "docs" / topic).mkdir(parents=True)
        for i in range(2):
            (tmp_path / "docs" / topic / f"{i}.txt").write_text(f"{topic} text {i}\n")
    ds = load_files(tmp_path / "docs")
    assert ds.kind == "text" and ds.X[0] == "food text 0" and ds.class_names == ["food", "sport"]


def test_spreadsheet_label_file_with_byte_order_mark_and_quotes(emb):
    d, _ = emb
    (d / "excel.csv").write_bytes("\ufeff".encode() + "\r\n".join(['"big cat"'] * 20 + ['"dog"'] * 20).encode())
    assert load_files(d / "emb.npy", str(d / "excel.csv")).class_names == ["big cat", "dog"]


def test_a_saved_pandas_index_is_not_a_feature(emb):
    d, _ = emb
    pd.read_csv(d / "table.csv").to_csv(d / "indexed.csv")  # pandas writes the row index without a header
    ds = load_files(d / "indexed.csv", "species", id_column="id")
    assert ds.feature_names == ["petal length", "petal width", "sepal"]


def test_one_label_too_many_is_an_error_not_a_header(emb):
    d, _ = emb
    (d / "extra.txt").write_text("\n".join(["cat"] * 21 + ["dog"] * 20))
    with pytest.raises(InvalidInputError, match="has 41 labels but the data have 40 rows"):
        load_files(d / "emb.npy", str(d / "extra.txt"))


def test_large_photos_are_scaled_down_by_default(tmp_path):
    (tmp_path / "big").mkdir()
    for i in range(2):
        _image(tmp_path / "big" / f"{i}.jpg", (1024, 768), 100)
    assert load_files(tmp_path / "big").X.shape == (2, 384, 512, 3)
    assert load_files(tmp_path / "big", image_size=32).X.shape == (2, 32, 32, 3)


def test_integer_labels_fast_path_codes_like_the_general_one():
    from pipeline.app.data.readers import encode_labels

    values = np.random.default_rng(0).integers(-2, 7, 1000)
    fast = encode_labels(values, "x")
    slow = encode_labels(list(values.astype(object)), "x")  # a list of Python ints: the general path
    assert np.array_equal(fast[0], slow[0]) and fast[1] == slow[1]
