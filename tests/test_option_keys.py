"""Every key a user sets is read or refused (issue 50, item 2): a dataset, encoder or clustering
key or parameter the chosen option does not take is one line naming the key, the option, its
target and the keys it reads; scikit-learn's digits reach an encoder of larger images through
``dataset.image_size`` (resampled as docs/explain.md says)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pipeline.app.configuration.config import CONFIG_DIR, compose_config
from pipeline.app.configuration.option_keys import check_keys_read
from pipeline.app.running.runner import to_plain
from pipeline.validation import InvalidInputError

ROOT = Path(__file__).resolve().parents[1]


def plain(*overrides: str, tmp: Path = Path("/nonexistent")) -> dict:
    return to_plain(compose_config([*overrides, f"paths.output_dir={tmp}"]))


def options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONFIG_DIR / group).glob("*.yaml"))


@pytest.mark.parametrize("group, option", [(g, o) for g in ("dataset", "encoder", "clustering") for o in options(g)])
def test_every_shipped_option_passes_with_its_own_settings(group, option):
    base = {"dataset": [], "encoder": ["dataset=digits"], "clustering": ["dataset=iris"]}[group]
    check_keys_read(plain(*base, f"{group}={option}"))


@pytest.mark.parametrize("overrides, key, valid", [
    (["dataset=iris", "dataset.image_size=28"], "dataset.image_size=28: pipeline.app.data.sklearn_sets.load_iris (dataset iris)", "n_samples"),
    (["dataset=iris", "dataset.split=test"], "dataset.split='test': pipeline.app.data.sklearn_sets.load_iris", "classes"),
    (["dataset=spam_assassin", "dataset.download=true"], "dataset.download=True: pipeline.app.data.spam_assassin.load_spam_assassin", "root"),
    (["dataset=iris", "clustering=dbscan", "clustering.n_clusters=4"], "clustering.n_clusters=4: pipeline.clustering.fit_dbscan (clustering dbscan)",
     "eps_quantile"),
    (["dataset=iris", "clustering=gmm", "clustering.candidates=[gmm]"], "clustering.candidates=['gmm']: pipeline.clustering.fit_gmm",
     "sample_rows"),
    (["dataset=iris", "encoder.device=cuda"], "encoder.device='cuda': pipeline.encoders.base.IdentityEncoder (encoder identity)", "checkpoint"),
    (["dataset=iris", "encoder=efficientnet_lite0", "encoder.torchscript=m.pt2"], "encoder.torchscript='m.pt2'",
     "image_size"),
    (["dataset=iris", "++clustering.params.n_inits=4"], "clustering.params.n_inits: clustering=gmm", "n_init"),
    (["dataset=iris", "clustering=kmeans", "++clustering.params.eps=1"], "clustering.params.eps: clustering=kmeans",
     "fit_rows"),
    (["dataset=iris", "clustering=best_of", "++clustering.params.gmm.n_inits=3"], "clustering.params.gmm.n_inits",
     "skip_degenerate"),
    (["dataset=iris", "++dataset.params.foo=1"], "dataset.params.foo: pipeline.app.data.sklearn_sets.load_iris", "none"),
    (["dataset=clustbench", "++dataset.params.label=1"], "dataset.params.label: pipeline.app.data.clustbench.load_clustbench (dataset sipu/r15)", "labels"),
])
def test_a_key_the_option_does_not_read_is_one_line_naming_key_option_and_valid_keys(overrides, key, valid):
    with pytest.raises(InvalidInputError) as err:
        check_keys_read(plain(*overrides))
    text = str(err.value)
    assert text.startswith(key) and valid in text and "\n" not in text, text


def test_keys_an_option_reads_or_forwards_pass():
    check_keys_read(plain("dataset=digits", "dataset.image_size=28"))
    check_keys_read(plain("dataset=mnist", "dataset.split=train", "dataset.root=/data/mnist"))
    check_keys_read(plain("dataset=files", "dataset.path=x.csv", "dataset.image_size=32", "dataset.labels=y"))
    check_keys_read(plain("dataset=iris", "clustering=kmeans", "clustering.n_clusters=3",
                          "++clustering.params.fit_rows=100", "++clustering.params.minibatch=true"))
    check_keys_read(plain("dataset=iris", "encoder=torch", "encoder.layer=layer3", "encoder.pool=max"))
    check_keys_read(plain("dataset=iris", "encoder=efficientnet_lite0", "encoder.image_size=112"))
    check_keys_read(plain("dataset=iris", "clustering=best_of", "clustering.candidates=[gmm,kmeans]"))


def test_the_library_refuses_unknown_clustering_params_too():
    from pipeline.clustering import cluster, method_params

    assert {"n_init", "covariance_type", "skip_degenerate"} <= method_params("gmm")
    assert method_params("best_of") is None
    with pytest.raises(InvalidInputError, match=r"clustering\.params\.n_inits: clustering=gmm takes no parameter"):
        cluster(np.random.default_rng(0).normal(size=(40, 2)), "gmm", 2, {"n_inits": 3})


def test_the_command_line_says_it_in_one_line(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "PIPELINE_LOG_DIR": str(tmp_path / "logs"),
           "PIPELINE_CACHE_DIR": str(tmp_path / "cache"), "HYDRA_FULL_ERROR": "0"}
    proc = subprocess.run([sys.executable, "-m", "pipeline", "dataset=iris", "dataset.image_size=28"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()]
    assert "dataset.image_size=28: pipeline.app.data.sklearn_sets.load_iris (dataset iris) does not read" in proc.stderr


# ---------------------------------------------------------------- digits at another size
def load(*overrides: str, tmp: Path):
    from pipeline.app.data.loading import load_dataset

    cfg = plain("dataset=digits", *overrides, tmp=tmp)
    return load_dataset(cfg["dataset"], cfg["paths"], 0)


def test_digits_resized_mnist_style_and_stretched(tmp_path):
    small = load(tmp=tmp_path)
    assert small.kind == "tabular" and small.X.shape == (1797, 64) and small.images.shape == (1797, 8, 8, 1)
    big = load("dataset.image_size=28", tmp=tmp_path)
    assert big.kind == "image" and big.X.shape == (1797, 28, 28, 1) and big.X.dtype == np.uint8
    ink = big.X[..., 0].sum(axis=0)
    assert ink[4:24, 4:24].sum() == ink.sum() and ink[4:24, 4:24].min() >= 0  # a 20 x 20 box, 4 px margin
    assert np.array_equal(big.y, small.y) and "8 x 8 -> 28 x 28 (mnist" in big.meta["resized"]
    full = load("dataset.image_size=28", "+dataset.params.resize=stretch", tmp=tmp_path)
    assert full.X[:, :4].any()  # the digit fills the image
    with pytest.raises(InvalidInputError, match="dataset.image_size=4: the digits are resized to an integer side"):
        load("dataset.image_size=4", tmp=tmp_path)
    with pytest.raises(InvalidInputError, match="dataset.params.resize='crop'"):
        load("dataset.image_size=28", "+dataset.params.resize=crop", tmp=tmp_path)


def test_the_size_is_part_of_the_load_key_only_when_set():
    from pipeline.app.stages.load import LOAD

    assert LOAD.key(plain("dataset=digits"), {}) != LOAD.key(plain("dataset=digits", "dataset.image_size=28"), {})
    assert LOAD.key(plain("dataset=digits"), {}) == LOAD.key(plain("dataset=digits", "dataset.image_size=null"), {})


def test_a_run_on_larger_images_explains_the_digits_from_the_command_line(tmp_path):
    """A tiny VaDE trained on 16 x 16 images (the digits resized), then `python -m pipeline.explain
    <run> dataset=digits dataset.image_size=16` on other digits; without the size, one paragraph naming it."""
    from test_relocation import TINY_VADE

    from pipeline.app.running.runner import run

    tiny = [o for o in TINY_VADE if not o.startswith("dataset.n_samples")] + ["dataset.n_samples=150",
                                                                              "dataset.image_size=16"]
    run(compose_config([*tiny, f"paths.output_dir={tmp_path / 'run'}", f"paths.cache_dir={tmp_path / 'cache'}",
                        f"paths.models_dir={tmp_path / 'models'}"]))
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "PIPELINE_CACHE_DIR": str(tmp_path / "cache"),
           "HYDRA_FULL_ERROR": "0"}
    models = f"paths.models_dir={tmp_path / 'models'}"
    proc = subprocess.run([sys.executable, "-m", "pipeline.explain", str(tmp_path / "run"), "dataset=digits",
                           "dataset.image_size=16", "dataset.n_samples=60", models, f"output={tmp_path / 'out'}"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert "60 samples explained" in proc.stdout and (tmp_path / "out" / "explanations.parquet").exists()
    bare = subprocess.run([sys.executable, "-m", "pipeline.explain", str(tmp_path / "run"), "dataset=digits",
                           "dataset.n_samples=60", models], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600)
    assert bare.returncode != 0 and "dataset.image_size=16" in bare.stderr and "Traceback" not in bare.stderr


def test_explain_names_the_nearest_key_of_a_misspelt_one(tmp_path):
    """`python -m pipeline.explain <run> dataset=digits dataset.image_sise=28`: the same one line as
    `python -m pipeline` (the key, the nearest valid one, the valid keys), not Hydra's advice to append."""
    from pipeline.app.explain_run import _compose

    with pytest.raises(InvalidInputError, match=r"dataset.image_sise: .*Did you mean dataset.image_size\? Valid keys"):
        _compose(["dataset=digits", "dataset.image_sise=28"], tmp_path)
