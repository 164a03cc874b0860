"""Concept sets from the YAML files, pixel detectors, AwA2 / BRODEN / text-prompt examples, manifests."""

import csv
import zipfile
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from sklearn.datasets import load_digits

from pipeline.app.concept_sets import build_examples, load_concept_spec
from pipeline.concepts import detect_concepts
from pipeline.concepts.detectors import DETECTORS
from pipeline.app.concept_sets.manifest import ensure_files, sha256
from pipeline.app.data import Dataset
from pipeline.validation import InvalidInputError


@pytest.fixture(scope="module")
def digits():
    d = load_digits()
    return Dataset(name="digits", X=d.data, y=d.target, kind="tabular",
                   class_names=[str(c) for c in range(10)], images=d.images.astype(np.uint8)[..., None])


def test_mnist_geometric_class_mapping(digits):
    spec = load_concept_spec("mnist_geometric")
    ex = build_examples(spec, digits)
    assert ex.names == ["loop", "vertical_line", "horizontal_line", "curvature"]
    assert ex.inputs is None and ex.labels.shape == (len(digits), 4)
    expected = {"loop": [0, 2, 6, 8, 9], "vertical_line": [1, 4, 7], "horizontal_line": [4, 5, 7],
                "curvature": [0, 2, 3, 5, 6, 8, 9]}
    for m, name in enumerate(ex.names):
        for c in range(10):
            assert set(ex.labels[digits.y == c, m]) == {float(c in expected[name])}


@pytest.mark.slow
def test_mnist_geometric_from_pixels_agrees_with_classes(digits):
    ex = build_examples(load_concept_spec("mnist_geometric"), digits, source="pixels")
    loop = ex.labels[:, 0]
    # Holes are found far more often in 0/6/8/9 than in 1/7 (detector, not labels).
    assert loop[np.isin(digits.y, [6, 8, 9])].mean() > 0.5 > 0.05 > loop[np.isin(digits.y, [1, 7])].mean()
    vert = ex.meta["scores"][:, 1]
    assert vert[digits.y == 1].mean() > vert[digits.y != 1].mean() + 0.2
    curv = ex.meta["scores"][:, 3]
    assert curv[np.isin(digits.y, [0, 3, 5])].mean() > curv[digits.y == 1].mean() + 0.2


def synthetic_images(size):
    yy, xx = np.mgrid[:size, :size] / size
    r = np.hypot(yy - 0.5, xx - 0.5)
    ring = ((r > 0.25) & (r < 0.38)).astype(float)
    vbar = ((np.abs(xx - 0.5) < 0.08) & (np.abs(yy - 0.5) < 0.4)).astype(float)
    hbar = vbar.T.copy()
    return np.stack([ring, vbar, hbar, np.zeros((size, size))])


@pytest.mark.parametrize("size", [8, 28])
def test_detectors_on_drawn_shapes(size):
    scores, names = detect_concepts(synthetic_images(size) * 255)
    assert names == list(DETECTORS)
    ring, vbar, hbar, blank = scores
    assert ring[0] == 1 and vbar[0] == 0 and hbar[0] == 0  # one hole only in the ring
    assert vbar[1] > 0.8 and vbar[2] < 0.2  # vertical ink in the vertical bar
    assert hbar[2] > 0.8 and hbar[1] < 0.2
    assert ring[3] > vbar[3] and ring[3] > hbar[3]  # curved ink
    assert np.all(blank == 0)


def test_wrong_dataset_and_missing_file(digits):
    spec = load_concept_spec("awa2_predicates")
    with pytest.raises(InvalidInputError, match="defined for datasets"):
        build_examples(spec, digits)
    with pytest.raises(InvalidInputError, match="available concept sets"):
        load_concept_spec("no_such_set")
    text = Dataset(name="digits", X=["a"], y=None, kind="text")
    with pytest.raises(InvalidInputError, match="source=pixels"):
        build_examples(load_concept_spec("mnist_geometric"), text)


def test_text_prompts_labels():
    spec = load_concept_spec("text_prompts")
    ex = build_examples(spec, Dataset(name="anything", X=["x"], y=None, kind="text"))
    assert ex.input_kind == "text" and len(ex.inputs) == ex.labels.shape[0]
    assert ex.fitter == "pipeline.concepts.fitters.MeanDifferenceFitter"
    n_t = len(spec["templates"])
    assert ex.labels[:, 0].sum() == len(spec["concepts"]["animal"]) * n_t
    assert np.all(ex.labels.sum(axis=1) <= 1)  # each prompt belongs to at most one concept
    assert ex.labels[-1].sum() == 0  # generic negatives
    assert "a photo of an animal" in ex.inputs


def write_awa2(root: Path):
    root.mkdir(parents=True)
    classes = ["antelope", "killer+whale", "zebra"]
    preds = ["black", "white", "stripes", "swims"]
    (root / "classes.txt").write_text("".join(f"{i + 1}\t{c}\n" for i, c in enumerate(classes)))
    (root / "predicates.txt").write_text("".join(f"{i + 1}\t{p}\n" for i, p in enumerate(preds)))
    (root / "predicate-matrix-binary.txt").write_text("0 1 0 0\n1 1 0 1\n1 1 1 0\n")
    return classes, preds


def awa2_spec(root):
    spec = load_concept_spec("awa2_predicates")
    for f in spec["manifest"]["files"]:
        f.pop("lines", None)  # the fake has 3 classes / 4 predicates, not 50 / 85
    return spec


def test_awa2_predicates_inherit_class_table(tmp_path):
    write_awa2(tmp_path / "awa")
    ds = Dataset(name="awa2", X=np.zeros((4, 2, 2, 3), np.uint8), y=np.array([2, 0, 1, 2]), kind="image",
                 class_names=["zebra", "antelope", "killer whale"])  # dataset's own class order
    ex = build_examples(awa2_spec(tmp_path), ds, root=str(tmp_path / "awa"))
    assert ex.names == ["black", "white", "stripes", "swims"]
    np.testing.assert_array_equal(ex.labels, [[1, 1, 0, 1], [1, 1, 1, 0], [0, 1, 0, 0], [1, 1, 0, 1]])
    ex = build_examples(awa2_spec(tmp_path), ds, root=str(tmp_path / "awa"), subset=["stripes"])
    assert ex.names == ["stripes"]
    with pytest.raises(InvalidInputError, match="not in predicates.txt"):
        build_examples(awa2_spec(tmp_path), ds, root=str(tmp_path / "awa"), subset=["wings"])
    with pytest.raises(InvalidInputError, match="concepts.root"):
        build_examples(awa2_spec(tmp_path), ds, root=str(tmp_path / "missing"), download=False)


def test_manifest_download_verify_and_errors(tmp_path):
    src = tmp_path / "src"
    classes, _ = write_awa2(src / "Animals_with_Attributes2")
    archive = tmp_path / "AwA2-base.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for f in (src / "Animals_with_Attributes2").iterdir():
            zf.write(f, f"Animals_with_Attributes2/{f.name}")
    manifest = {"config_key": "concepts.root", "manual": "Get it by hand.",
                "archives": [{"url": archive.as_uri(), "strip": "Animals_with_Attributes2",
                              "sha256": sha256(archive)}],
                "files": [{"path": "classes.txt", "lines": 3}, {"path": "predicates.txt"}]}
    root = ensure_files(manifest, tmp_path / "dl")
    assert (root / "classes.txt").read_text().count("\n") == len(classes)
    bad = {**manifest, "archives": [{**manifest["archives"][0], "sha256": "0" * 64}]}
    with pytest.raises(InvalidInputError, match="concepts.root=/path") as err:
        ensure_files(bad, tmp_path / "dl2")
    assert "does not match" in str(err.value) and "Get it by hand" in str(err.value)
    wrong_lines = {**manifest, "files": [{"path": "classes.txt", "lines": 50}]}
    with pytest.raises(InvalidInputError, match="expected 50"):
        ensure_files(wrong_lines, root)
    offline = {**manifest, "archives": [{"url": "http://127.0.0.1:9/none.zip"}]}
    with pytest.raises(InvalidInputError, match="could not download"):
        ensure_files(offline, tmp_path / "dl3")


def write_broden(root: Path, n=12):
    (root / "images" / "seg").mkdir(parents=True)
    labels = [(1, "sky", "object(5)"), (2, "grass", "object(3)"), (3, "red-c", "color(4)"), (7, "street", "scene(6)")]
    with open(root / "label.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["number", "name", "category", "frequency", "coverage", "syns"])
        for num, name, cat in labels:
            w.writerow([num, name, cat, 1, 1, ""])
    rows = []
    for i in range(n):
        img = f"img{i}.jpg"
        Image.fromarray(np.full((10, 10, 3), i * 10, np.uint8)).save(root / "images" / img)
        seg = np.zeros((10, 10, 3), np.uint8)
        if i % 2 == 0:
            seg[:3, :, 0] = 1  # sky in the even images
        if i < 3:
            seg[5:, :, 0] = 2  # grass in three images
        Image.fromarray(seg).save(root / "images" / "seg" / f"s{i}.png")
        rows.append({"image": img, "split": "train", "ih": 10, "iw": 10, "sh": 10, "sw": 10,
                     "object": f"seg/s{i}.png", "scene": "7" if i % 3 == 0 else "", "color": "",
                     "part": "", "material": "", "texture": ""})
    with open(root / "index.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def test_broden_examples_from_index(tmp_path):
    write_broden(tmp_path / "broden")
    spec = load_concept_spec("broden")
    ds = Dataset(name="cifar10", X=np.zeros((2, 8, 8, 3), np.uint8), y=None, kind="image")
    ex = build_examples(spec, ds, root=str(tmp_path / "broden"), min_positives=4, n_negatives=12,
                        max_positives=10)
    assert ex.names == ["sky", "street"]  # grass (3 positives) drops out
    assert ex.inputs.shape == (12, 8, 8, 3) and ex.input_kind == "image"
    np.testing.assert_array_equal(ex.labels[:, 0], [1, 0] * 6)
    np.testing.assert_array_equal(ex.labels[:, 1], [1, 0, 0] * 4)
    assert ex.inputs[1, 0, 0, 0] == 10  # image 1 loaded and resized in index order
    with pytest.raises(InvalidInputError, match="min_positives"):
        build_examples(spec, ds, root=str(tmp_path / "broden"), min_positives=100)


def test_awa2_predicates_default_to_the_datasets_own_copy(tmp_path):
    write_awa2(tmp_path / "awa")
    ds = Dataset(name="awa2", X=np.zeros((2, 2, 2, 3), np.uint8), y=np.array([0, 1]), kind="image",
                 class_names=["antelope", "zebra"], meta={"source": str(tmp_path / "awa")})
    ex = build_examples(awa2_spec(tmp_path), ds, download=False)
    np.testing.assert_array_equal(ex.labels, [[0, 1, 0, 0], [1, 1, 1, 0]])
