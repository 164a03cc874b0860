"""Checkpoints: save -> load round trip, hash verification, architecture checks, resume."""

import json

import numpy as np
import pytest
import torch
from sklearn.datasets import load_digits

from pipeline.app.stores.checkpoint import load_encoder, save_encoder
from pipeline.encoders import IdentityEncoder, VaDEEncoder
from pipeline.app.stores.checkpoint import read_checkpoint, sidecar_path
from pipeline.validation import InvalidInputError

TINY = dict(n_clusters=3, latent_dim=4, hidden_dims=(16, 16), pretrain_epochs=2, epochs=2, batch_size=64,
            progress=False, device="cpu")


@pytest.fixture(scope="module")
def data():
    X, y = load_digits(return_X_y=True)
    return X[:150]


@pytest.fixture(scope="module")
def saved(data, tmp_path_factory):
    enc = VaDEEncoder(**TINY).fit(data)
    path = tmp_path_factory.mktemp("models") / "vade" / "key.pt"
    sha = save_encoder(enc, path, {"data": "digits", "key": "key", "metrics": {"extra": 1.0}})
    return enc, path, sha


def test_round_trip_gives_identical_embeddings(saved, data, caplog):
    enc, path, sha = saved
    with caplog.at_level("INFO"):
        loaded = load_encoder(path)
    assert "epoch 2" in caplog.text
    np.testing.assert_array_equal(loaded.transform(data), enc.transform(data))
    np.testing.assert_array_equal(loaded.predict_clusters(data), enc.predict_clusters(data))
    for a, b in zip(loaded.mixture(), enc.mixture()):
        np.testing.assert_array_equal(a, b)
    assert loaded.epoch_ == 2 and loaded.checkpoint_sha256_ == sha


def test_sidecar_contents(saved):
    enc, path, sha = saved
    side = json.loads(sidecar_path(path).read_text())
    assert side["sha256"] == sha and side["encoder"] == "vade" and side["epoch"] == 2
    assert side["config"]["n_clusters"] == 3 and side["data"] == "digits"
    assert side["architecture"] == {"encoder": "vade", "input_dim": 64, "n_clusters": 3, "latent_dim": 4,
                                    "hidden_dims": [16, 16]}
    assert side["metrics"]["extra"] == 1.0 and "loss" in side["metrics"] and side["seed"] == 0
    torch.load(path, weights_only=True)  # plain tensors and containers only


def test_corrupted_checkpoint_is_rejected(saved, tmp_path):
    _, path, _ = saved
    bad = tmp_path / "bad.pt"
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    bad.write_bytes(bytes(raw))
    sidecar_path(bad).write_text(sidecar_path(path).read_text())
    with pytest.raises(InvalidInputError, match="sha256.*delete"):
        load_encoder(bad)


def test_missing_file_or_sidecar(saved, tmp_path):
    _, path, _ = saved
    with pytest.raises(InvalidInputError, match="does not exist"):
        load_encoder(tmp_path / "nope.pt")
    lonely = tmp_path / "lonely.pt"
    lonely.write_bytes(path.read_bytes())
    with pytest.raises(InvalidInputError, match="no JSON sidecar"):
        load_encoder(lonely)


def test_checkpoint_for_other_k_or_architecture(saved):
    _, path, _ = saved
    with pytest.raises(InvalidInputError, match="n_clusters=3 in the checkpoint but 5 configured"):
        load_encoder(path, expected=VaDEEncoder(**{**TINY, "n_clusters": 5}))
    with pytest.raises(InvalidInputError, match="hidden_dims"):
        load_encoder(path, expected=VaDEEncoder(**{**TINY, "hidden_dims": (8, 8)}))
    with pytest.raises(InvalidInputError, match="encoder='vade' in the checkpoint but 'contrastive'"):
        load_encoder(path, expected={"encoder": "contrastive"})
    assert load_encoder(path, expected=VaDEEncoder(**TINY)).epoch_ == 2


def test_resume_from_full_state_checkpoint(saved, data, tmp_path, caplog):
    enc, path, _ = saved
    state, _ = read_checkpoint(path)
    assert state["optimizer"] is not None and state["epoch"] == 2
    with caplog.at_level("INFO"):
        resumed = VaDEEncoder(**{**TINY, "epochs": 4, "resume_from": state}).fit(data)
    assert "resuming" in caplog.text and "from epoch 2" in caplog.text
    train = [h["epoch"] for h in resumed.history_ if h["phase"] == "train"]
    assert train == [1, 2, 3, 4] and resumed.epoch_ == 4
    with pytest.raises(InvalidInputError, match="n_clusters"):
        VaDEEncoder(**{**TINY, "n_clusters": 4, "epochs": 4, "resume_from": state}).fit(data)


def test_periodic_checkpoints(data, tmp_path):
    path = tmp_path / "periodic.pt"
    saved = []

    def every_epoch(encoder):  # the app's side: write the encoder's state after each epoch
        saved.append(encoder.epoch_)
        save_encoder(encoder, path, {"note": "periodic full-state checkpoint"})

    VaDEEncoder(**{**TINY, "epochs": 3}).fit(data, epoch_callback=every_epoch)
    assert saved == [1, 2, 3] and load_encoder(path).epoch_ == 3


def test_untrainable_encoder_has_no_checkpoint(tmp_path):
    with pytest.raises(InvalidInputError, match="not trainable"):
        save_encoder(IdentityEncoder(), tmp_path / "x.pt")


def test_pipeline_loads_a_named_checkpoint_and_rejects_another_k(saved, tmp_path, caplog):
    from pipeline.app.configuration.config import compose_config
    from pipeline.app.running.runner import run

    _, path, _ = saved

    def config(k, out):
        return compose_config([
            f"paths.output_dir={tmp_path / out}", f"paths.cache_dir={tmp_path / 'cache'}",
            f"paths.models_dir={tmp_path / 'models'}", "dataset=digits", "encoder=vade", "encoder.device=cpu",
            "encoder.params.hidden_dims=[16,16]", "encoder.params.latent_dim=4", f"encoder.params.n_clusters={k}",
            f"encoder.checkpoint={path}", "clustering=encoder", "dataset.n_samples=150",
            "concepts=none", "explainer=[cart]", "report.figures=false", "report.summary=false"])

    with pytest.raises(InvalidInputError, match="n_clusters=3 in the checkpoint but 5 configured"):
        run(config(5, "bad"))
    with caplog.at_level("INFO"):
        run(config(3, "ok"))
    assert f"loaded vade checkpoint {path} (epoch 2" in caplog.text


def test_checkpoint_from_unavailable_device_loads_here(saved, tmp_path, data):
    enc, path, _ = saved
    moved = tmp_path / "gpu.pt"
    moved.write_bytes(path.read_bytes())
    side = json.loads(sidecar_path(path).read_text())
    side["config"]["device"] = "cuda:7"  # as if trained on a GPU machine
    sidecar_path(moved).write_text(json.dumps(side))
    if torch.cuda.device_count() > 7:
        pytest.skip("this machine has a cuda:7")
    loaded = load_encoder(moved)
    np.testing.assert_array_equal(loaded.transform(data), enc.transform(data))
    assert load_encoder(moved, device="cpu").device_.type == "cpu"


def test_truncated_checkpoint_offers_force_train(saved, tmp_path):
    _, path, _ = saved
    cut = tmp_path / "cut.pt"
    cut.write_bytes(path.read_bytes()[:1000])
    sidecar_path(cut).write_text(sidecar_path(path).read_text())
    with pytest.raises(InvalidInputError, match=r"truncated.*\+force=train"):
        load_encoder(cut)


def test_checkpoint_from_another_torch_names_both_versions(saved, tmp_path, data, caplog):
    enc, path, _ = saved
    old = tmp_path / "old.pt"
    old.write_bytes(path.read_bytes())
    side = json.loads(sidecar_path(path).read_text())
    assert side["torch"] == torch.__version__  # the sidecar says which torch wrote it
    sidecar_path(old).write_text(json.dumps({**side, "torch": "1.13.1"}))
    with caplog.at_level("WARNING"):
        loaded = load_encoder(old)
    assert f"written by torch 1.13.1, this is torch {torch.__version__}" in caplog.text
    np.testing.assert_array_equal(loaded.transform(data), enc.transform(data))


def test_truncated_checkpoint_in_models_dir_is_retrained_with_force_train(tmp_path):
    """The pipeline stops with one clear error offering +force=train, which retrains the very
    same bytes (training is deterministic for a seed and thread count)."""
    from pipeline.app.configuration.config import compose_config
    from pipeline.app.running.runner import run

    def config(out, *extra):
        return compose_config([
            f"paths.output_dir={tmp_path / out}", f"paths.cache_dir={tmp_path / 'cache'}",
            f"paths.models_dir={tmp_path / 'models'}", "dataset=digits", "dataset.n_samples=150", "encoder=vade",
            "encoder.device=cpu", "encoder.params.hidden_dims=[16]", "encoder.params.latent_dim=3",
            "encoder.params.n_clusters=3", "encoder.params.pretrain_epochs=1", "encoder.params.epochs=2",
            "clustering=encoder", "concepts=none", "explainer=[cart]",
            "report.figures=false", "report.summary=false", "report.html=false", "threads=1", *extra])

    run(config("first"))
    (path,) = [p for p in (tmp_path / "models" / "vade").glob("*.pt")]
    original = path.read_bytes()
    path.write_bytes(original[: len(original) // 2])
    with pytest.raises(InvalidInputError, match=r"truncated.*\+force=train"):
        run(config("second"))
    run(config("third", "+force=train"))
    assert path.read_bytes() == original
