"""Sharded inputs read in the order the user meant (issue 51, item 4; docs/out-of-core.md).

A folder of ``.npy`` / ``.parquet`` shards is read in natural name order (``a2`` before ``a10``)
or in the order a ``manifest.txt`` lists; the order used is logged, and a manifest that does not
list every shard once is one paragraph.
"""

from __future__ import annotations

import logging

import numpy as np
import pandas as pd
import pytest

from pipeline.app.data.chunked import natural_key, open_chunked
from pipeline.validation import InvalidInputError


def shards(folder, names, kind="npy"):
    """Shard ``names[i]`` holds rows whose first column is ``i`` (so the order read is visible)."""
    folder.mkdir(parents=True, exist_ok=True)
    for i, name in enumerate(names):
        block = np.column_stack([np.full(3, float(i)), np.arange(3.0)])
        if kind == "npy":
            np.save(folder / f"{name}.npy", block)
        else:
            pd.DataFrame(block, columns=["a", "b"]).to_parquet(folder / f"{name}.parquet")
    return folder


@pytest.mark.parametrize("kind", ["npy", "parquet"])
def test_shards_are_read_in_natural_name_order_and_the_order_is_logged(tmp_path, caplog, kind):
    names = [f"a{i}" for i in range(1, 13)]  # a1 .. a12: plain name order would read a10, a11, a12 before a2
    folder = shards(tmp_path / "s", names, kind)
    with caplog.at_level(logging.INFO, logger="pipeline.app.data.chunked"):
        X = open_chunked(folder)
    np.testing.assert_array_equal(np.asarray(X)[::3, 0], np.arange(12))
    said = [r.getMessage() for r in caplog.records if "shards read in" in r.getMessage()]
    assert len(said) == 1 and "12 shards read in natural name order" in said[0] and "a1." in said[0]


def test_a_manifest_gives_the_order(tmp_path, caplog):
    names = ["part-b", "part-a", "part-c"]
    folder = shards(tmp_path / "s", names)
    (folder / "manifest.txt").write_text("# the order the rows were written\npart-b.npy\npart-a.npy\npart-c.npy\n")
    with caplog.at_level(logging.INFO, logger="pipeline.app.data.chunked"):
        X = open_chunked(folder)
    np.testing.assert_array_equal(np.asarray(X)[::3, 0], [0, 1, 2])  # as listed, not a, b, c
    assert any("in the order manifest.txt lists: part-b.npy, part-a.npy, part-c.npy" in r.getMessage()
               for r in caplog.records)
    from pipeline.app.data.files import is_array_source

    assert is_array_source(folder)  # the manifest does not make the folder something else


@pytest.mark.parametrize("lines, words", [
    (["a.npy", "b.npy"], "it leaves out ['c.npy']"),
    (["a.npy", "b.npy", "c.npy", "d.npy"], "it names ['d.npy'], which are not shards here"),
    (["a.npy", "b.npy", "c.npy", "a.npy"], "it lists ['a.npy'] more than once"),
])
def test_a_manifest_that_does_not_list_every_shard_once_is_refused(tmp_path, lines, words):
    folder = shards(tmp_path / "s", ["a", "b", "c"])
    (folder / "manifest.txt").write_text("\n".join(lines))
    with pytest.raises(InvalidInputError, match="manifest.txt must list every shard of the folder once") as info:
        open_chunked(folder)
    assert words in str(info.value)


def test_natural_key_orders_numbers_as_numbers():
    names = ["a10.npy", "a9.npy", "a2.npy", "b1.npy", "a1b2.npy", "a1b10.npy", "part-00010.npy", "part-00009.npy"]
    assert sorted(names, key=natural_key) == ["a1b2.npy", "a1b10.npy", "a2.npy", "a9.npy", "a10.npy", "b1.npy",
                                              "part-00009.npy", "part-00010.npy"]


def test_a_run_on_shards_lines_up_with_its_labels_file(tmp_path):
    """The issue's case: shards a9.npy, a10.npy and a labels file in the rows' order (a9's rows first)."""
    from pipeline.app.data.files import load_files

    rng = np.random.default_rng(0)
    folder = tmp_path / "emb"
    folder.mkdir()
    labels = []
    for i, name in enumerate(["a9", "a10"]):
        np.save(folder / f"{name}.npy", rng.normal(10.0 * i, 1.0, (50, 3)))
        labels += [i] * 50
    np.save(tmp_path / "labels.npy", np.array(labels))
    ds = load_files(folder, labels=str(tmp_path / "labels.npy"))
    X = np.asarray(ds.X)
    assert (X[:50].mean() < 5) and (X[50:].mean() > 5)  # a9's rows first, as the labels say
    np.testing.assert_array_equal(ds.y, labels)
