"""The encode stage with a (tiny) trainable encoder: checkpoint saved once, reused, keyed by its hash."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from pipeline.app.configuration.config import compose_config
from pipeline.app.data.dataset import reads
from pipeline.app.running.runner import run
from pipeline.concepts.sets import ConceptExamples
from pipeline.encoders.base import Encoder

TINY_VADE = ["dataset=digits", "encoder=vade", "encoder.device=cpu", "encoder.params.hidden_dims=[16]", "encoder.params.latent_dim=2",
             "encoder.params.n_clusters=3", "encoder.params.pretrain_epochs=1", "encoder.params.epochs=1",
             "clustering=encoder", "dataset.classes=[0,1,7]", "dataset.n_samples=150",
             "concepts=none", "explainer=[mmdt,cart]", "report.figures=false", "report.summary=false"]


def cfg(tmp_path, out, cache="cache"):
    # the stage cache and checkpoints: every stage read back (not the run's files, test_run_outputs.py)
    return compose_config([f"paths.output_dir={tmp_path / out}", f"paths.cache_dir={tmp_path / cache}",
                           f"paths.models_dir={tmp_path / 'models'}", *TINY_VADE, "cache.reuse_files=false"])


def events(tmp_path, out):
    status = json.loads((tmp_path / out / "status.json").read_text())
    return {e["stage"]: e["hit"] for e in status["cache"]}, status


def test_trainable_encoder_is_checkpointed_and_reused(tmp_path):
    first = run(cfg(tmp_path, "a"))
    checkpoints = list((tmp_path / "models" / "vade").glob("*.pt"))
    assert len(checkpoints) == 1
    stamp = checkpoints[0].stat().st_mtime_ns
    z_files = list((tmp_path / "cache" / "encode").glob("*/arrays.npz"))
    assert len(z_files) == 1
    with np.load(z_files[0]) as data:
        assert data["Z"].shape == (150, 2) and data["head_labels"].shape == (150,)
        assert data["mixture_means"].shape == (3, 2)
    assert list(first["explainer"]) == ["reference", "mmdt", "cart"]
    assert first.set_index("explainer").loc["reference", "method"] == "encoder"

    # A fresh embeddings cache with the same models_dir: the checkpoint is loaded, not retrained.
    second = run(cfg(tmp_path, "b", cache="cache2"))
    assert checkpoints[0].stat().st_mtime_ns == stamp
    with np.load(z_files[0]) as a, np.load(next((tmp_path / "cache2" / "encode").glob("*/arrays.npz"))) as b:
        np.testing.assert_allclose(a["Z"], b["Z"], rtol=1e-5, atol=1e-6)
    pd.testing.assert_series_equal(first["ari"], second["ari"])

    # Same cache: the embeddings are a hit; the key carries the checkpoint's sha256.
    run(cfg(tmp_path, "c"))
    hits, _ = events(tmp_path, "c")
    assert hits["encode"] and hits["cluster"]
    sidecar = json.loads(checkpoints[0].with_suffix(".json").read_text())
    meta = json.loads(next((tmp_path / "cache" / "encode").glob("*/meta.json")).read_text())
    assert meta["checkpoint_sha256"] == sidecar["sha256"]


@reads("split")
def digits_by_split(spec: dict, paths: dict, random_state: int = 0):
    """scikit-learn's digits with a split of their own (even rows ``train``, odd rows ``test``):
    their loader has none, so ``dataset.split`` is refused there (issue 50)."""
    from pipeline.app.data.sklearn_sets import load_digits

    ds = load_digits(spec, paths, random_state)
    return ds.subset(np.arange(0 if spec.get("split", "train") == "train" else 1, len(ds), 2))


SPLIT = "dataset._target_=test_pipeline_encode.digits_by_split"


def test_encoder_is_fitted_on_fit_split(tmp_path):
    config = compose_config([f"paths.output_dir={tmp_path / 'out'}", f"paths.cache_dir={tmp_path / 'cache'}",
                             f"paths.models_dir={tmp_path / 'models'}", *TINY_VADE, "dataset.n_samples=60",
                             SPLIT, "dataset.split=test", "encoder.fit_split=train"])
    run(config)
    loads = [json.loads(p.read_text()) for p in (tmp_path / "cache" / "load").glob("*/meta.json")]
    assert len(loads) == 2  # the embedded split and the training split, each cached
    sidecar = json.loads(next((tmp_path / "models" / "vade").glob("*.json")).read_text())
    assert sidecar["metadata"]["fit_split"] == "train" and sidecar["metadata"]["dataset"]["split"] == "test"
    hits, _ = events(tmp_path, "out")
    assert hits["load"] is False and hits["encode"] is False


class Substituting(Encoder):
    """Loads "another model" like SBERT's offline fallback (encoder._target_=test_pipeline_encode.Substituting)."""

    name = "substituting_test"
    may_substitute_model = True
    loaded = "model-a"

    def fit(self, X=None, y=None):
        self.model_used_ = f"{Substituting.loaded} (/some/dir)"
        return self

    def transform(self, X):
        return np.asarray(X, dtype=np.float32) * (1.0 if Substituting.loaded == "model-a" else 2.0)


def test_encoder_that_substitutes_a_model_keys_embeddings_on_the_model_it_loaded(tmp_path):
    """SBERT's offline fallback loads another model: its embeddings must not be served under
    the configured model's cache entry."""

    def config(out):
        return compose_config([f"paths.output_dir={tmp_path / out}", f"paths.cache_dir={tmp_path / 'cache'}",
                               "dataset=iris", "encoder._target_=test_pipeline_encode.Substituting",
                               "encoder.name=substituting_test", "explainer=[cart]",
                               "report.figures=false", "report.summary=false"])

    try:
        run(config("a"))
        Substituting.loaded = "model-b"
        run(config("b"))
    finally:
        Substituting.loaded = "model-a"
    hits = {out: events(tmp_path, out)[0]["encode"] for out in ("a", "b")}
    assert hits == {"a": False, "b": False}


def separate_examples(dataset, n: int = 80) -> ConceptExamples:
    """A concept source whose examples are separate inputs (so they go through the trained
    encoder): the first ``n`` rows, concept "bright" = above-median ink, "left" = more ink on the left."""
    X = np.asarray(dataset.X, dtype=np.float64)[:n]
    ink = X.sum(axis=1)
    left = X.reshape(len(X), 8, 8)[:, :, :4].sum(axis=(1, 2)) > X.reshape(len(X), 8, 8)[:, :, 4:].sum(axis=(1, 2))
    labels = np.column_stack([ink > np.median(ink), left]).astype(float)
    return ConceptExamples("separate", ["bright", "left"], labels, inputs=X, input_kind="image")


def test_concepts_embed_examples_with_the_checkpoint_of_fit_split(tmp_path):
    """dataset.split != encoder.fit_split: the concept examples are embedded by the checkpoint the
    encode stage trained (on fit_split), which the encode artifact names (issue 11: the concepts
    stage used to look it up under the embedded split's key, which was never written)."""
    config = compose_config([f"paths.output_dir={tmp_path / 'out'}", f"paths.cache_dir={tmp_path / 'cache'}",
                             f"paths.models_dir={tmp_path / 'models'}", *TINY_VADE, "dataset.n_samples=120",
                             SPLIT, "dataset.split=test", "encoder.fit_split=train",
                             "concepts._target_=test_pipeline_encode.separate_examples",
                             "concepts.name=separate", "cav.params.cv=0", "cav.params.n_repeats=1",
                             "cav.params.min_positives=2", "explainer=[mmdt,cart]"])
    df = run(config).set_index("explainer")
    assert list(df.index) == ["reference", "mmdt", "cart"]
    meta = json.loads(next((tmp_path / "cache" / "concepts").glob("*/meta.json")).read_text())
    # the "separate" examples are the run's own first rows: found by content, so marked in-sample (issue 48)
    assert meta["concept_names"] == ["bright‡", "left‡"] and meta["n_concept_examples"] == 80
    encode = json.loads(next((tmp_path / "cache" / "encode").glob("*/meta.json")).read_text())
    assert encode["checkpoint"].startswith("${paths.models_dir}/vade/")  # relative: survives moving models/


def test_checkpoint_sha_trusts_the_sidecar_only_while_size_and_mtime_match(tmp_path):
    """A warm run does not re-hash a checkpoint whose size and mtime are the recorded ones, and a
    replaced checkpoint (same sidecar) is caught instead of keying later stages on a stale sha256."""
    import hashlib

    import pytest
    import json
    import os

    from pipeline.app.stages.encode import _checkpoint_sha
    from pipeline.validation import InvalidInputError

    path = tmp_path / "model.pt"
    path.write_bytes(b"weights")
    st = os.stat(path)
    sha = hashlib.sha256(b"weights").hexdigest()
    side = {"sha256": sha, "size": st.st_size, "mtime_ns": st.st_mtime_ns}
    path.with_suffix(".json").write_text(json.dumps(side))
    assert _checkpoint_sha(path) == sha
    path.with_suffix(".json").write_text(json.dumps({**side, "sha256": "0" * 64}))
    assert _checkpoint_sha(path) == "0" * 64  # size and mtime match: the recorded value, no re-hash
    path.with_suffix(".json").write_text(json.dumps(side))
    path.write_bytes(b"WEIGHTS")  # replaced: same size, new mtime
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    with pytest.raises(InvalidInputError, match="corrupted, truncated or was replaced"):
        _checkpoint_sha(path)
    path.write_bytes(b"weights")
    path.with_suffix(".json").write_text(json.dumps({"sha256": sha}))  # an older sidecar: hashed, checked
    assert _checkpoint_sha(path) == sha
