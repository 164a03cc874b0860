"""Issue 48, planted cases, end to end on real images (scikit-learn's digits written as PNG files): a
concept folder of byte copies of the run's own class-3 images restates the class (†), still with 3
labels flipped; a concept from images outside the run carries no mark; a concept that means nothing
(random images of the same kind) is not significant and is kept out of the trees."""

import shutil

import numpy as np
import pandas as pd
import pytest
from PIL import Image
from sklearn.datasets import load_digits

from pipeline.app.configuration.config import compose_config
from pipeline.app.running.runner import run


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("planted")
    digits = load_digits()
    images = (digits.images * (255 / 16)).round().astype(np.uint8)
    y = digits.target
    files = {}
    for c in range(10):
        rows = np.flatnonzero(y == c)[:150]
        folder = root / ("run" if c < 5 else "outside") / str(c)
        folder.mkdir(parents=True)
        files[c] = []
        for i in rows:
            path = folder / f"{i}.png"
            Image.fromarray(images[i], mode="L").save(path)
            files[c].append(path)
    rng = np.random.default_rng(0)

    def concept_folder(name: str, positives: dict, negatives: list):
        base = root / name
        for concept, paths in positives.items():
            (base / concept).mkdir(parents=True)
            for p in paths:
                shutil.copyfile(p, base / concept / f"{p.parent.name}_{p.name}")
        (base / "random").mkdir(parents=True)
        for p in negatives:
            shutil.copyfile(p, base / "random" / f"{p.parent.name}_{p.name}")
        return base

    others = [p for c in (0, 1, 2, 4) for p in files[c][:40]]
    copies = concept_folder("copies", {"three": files[3]}, others)
    flipped = concept_folder("flipped", {"three": files[3][3:] + others[:3]}, files[3][:3] + others[3:])
    outside = [p for c in (5, 6, 7, 8, 9) for p in files[c]]
    picked = list(rng.permutation(len(outside)))
    external = concept_folder("external", {"round": files[8] + files[6] + files[9],
                                           "meaningless": [outside[i] for i in picked[:300]]},
                              [outside[i] for i in picked[300:]] + files[7])
    return root, {"copies": copies, "flipped": flipped, "external": external}


def _run(tmp_path, root, concepts):
    cfg = compose_config([f"paths.output_dir={tmp_path / 'run'}", f"paths.cache_dir={tmp_path / 'cache'}",
                          f"paths.models_dir={tmp_path / 'models'}", "dataset=files", f"dataset.path={root / 'run'}",
                          "dataset.image_size=4", "encoder=identity", "clustering=kmeans", "explainer=[concept_cart]",
                          "concepts=examples",
                          f"concepts.path={concepts}", "report.figures=false", "report.html=false",
                          "cav.params.n_repeats=3"])
    run(cfg)
    return pd.read_csv(tmp_path / "run" / "concepts" / "cavs.csv", comment="#").set_index("concept")


def test_byte_copies_of_the_runs_class_images_restate_the_class(tmp_path, folders, capsys):
    root, f = folders
    cavs = _run(tmp_path, root, f["copies"])
    assert list(cavs.index) == ["three†"]
    assert "its labels follow the run's classes" in capsys.readouterr().out or "restates the class" in cavs.iloc[0][
        "examples"]


def test_three_flipped_labels_do_not_change_the_mark(tmp_path, folders):
    root, f = folders
    assert list(_run(tmp_path, root, f["flipped"]).index) == ["three†"]


def test_concepts_from_outside_the_run_carry_no_mark_and_noise_is_kept_out(tmp_path, folders, capsys):
    root, f = folders
    cavs = _run(tmp_path, root, f["external"])
    out = capsys.readouterr().out
    assert set(cavs.index) == {"round", "meaningless"}  # no mark: not rows of this run
    assert cavs.loc["meaningless", "tcav_significant"] == "no" and not cavs.loc["meaningless", "in_trees"]
    assert "Kept out of the trees: meaningless: not significant" in out
