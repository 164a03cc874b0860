"""Contrastive clustering: losses vs a brute-force version, one optimisation step on 32x32 images."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.encoders import ContrastiveClusteringEncoder
from pipeline.encoders import resnet as resnet_module
from pipeline.encoders.contrastive import (ContrastiveClusteringNet, cluster_loss, instance_loss,
                                           map_authors_state_dict)
from pipeline.app.stores.checkpoint import read_weights
from pipeline.validation import InvalidInputError

SMALL = dict(n_clusters=3, backbone="resnet34", backbone_weights="none", image_size=32, batch_size=8, epochs=1,
             lr=1e-3, progress=False, device="cpu", amp=False)


def _brute_nt_xent(rows: torch.Tensor, temperature: float) -> float:
    """The authors' formulation: for row i, positive = partner row, negatives = all rows but i and partner."""
    n2 = rows.shape[0]
    n = n2 // 2
    total = 0.0
    for i in range(n2):
        partner = (i + n) % n2
        sim = lambda a, b: float(F.cosine_similarity(rows[a], rows[b], dim=0)) / temperature  # noqa: E731
        negatives = [sim(i, j) for j in range(n2) if j not in (i, partner)]
        logits = [sim(i, partner)] + negatives
        total += -logits[0] + math.log(sum(math.exp(v) for v in logits))
    return total / n2


@settings(max_examples=15, deadline=None)
@given(st.integers(2, 6), st.integers(2, 5), st.integers(0, 10_000))
def test_losses_match_brute_force(batch, k, seed):
    g = torch.Generator().manual_seed(seed)
    z_i = F.normalize(torch.randn(batch, 7, generator=g, dtype=torch.float64), dim=1)
    z_j = F.normalize(torch.randn(batch, 7, generator=g, dtype=torch.float64), dim=1)
    assert float(instance_loss(z_i, z_j, 0.5)) == pytest.approx(_brute_nt_xent(torch.cat([z_i, z_j]), 0.5), rel=1e-9)
    c_i = torch.softmax(torch.randn(batch, k, generator=g, dtype=torch.float64), 1)
    c_j = torch.softmax(torch.randn(batch, k, generator=g, dtype=torch.float64), 1)
    entropy_terms = 0.0
    for c in (c_i, c_j):
        p = [float(c[:, m].sum() / c.sum()) for m in range(k)]
        entropy_terms += math.log(k) + sum(q * math.log(q) for q in p)
    expected = _brute_nt_xent(torch.cat([c_i.T, c_j.T]), 1.0) + entropy_terms
    assert float(cluster_loss(c_i, c_j, 1.0)) == pytest.approx(expected, rel=1e-9)


def _images(n=16, size=32, seed=0):
    rng = np.random.default_rng(seed)
    imgs = np.zeros((n, size, size, 3), dtype=np.uint8)
    for i in range(n):  # two kinds: bright squares on dark, dark stripes on bright
        if i % 2:
            imgs[i, 8:24, 8:24] = rng.integers(150, 255, 3)
        else:
            imgs[i] = 200
            imgs[i, :, ::4] = rng.integers(0, 60, 3)
    return imgs


@pytest.fixture(scope="module")
def trained():
    from pipeline.encoders.device import seed_everything

    X = _images()
    seed_everything(0)  # fit seeds the same way before building the network
    before = ContrastiveClusteringNet("resnet34", 3).state_dict()
    enc = ContrastiveClusteringEncoder(**SMALL, mode="scratch").fit(X)
    return enc, X, before


def test_one_optimisation_step_changes_weights_and_embeds(trained):
    enc, X, before = trained
    after = enc.module_.state_dict()
    for name in ("resnet.conv1.weight", "instance_projector.2.weight", "cluster_projector.2.weight"):
        assert not torch.equal(after[name], before[name]), name
    assert len(enc.history_) == 1 and np.isfinite(enc.history_[0]["loss"])
    assert len(enc.history_[0]["occupancy"]) == 3
    assert enc.optimizer_state_["state"]  # Adam moments exist: a step was taken
    Z = enc.transform(X)
    assert Z.dtype == np.float32 and Z.shape == (16, 512)  # resnet34 backbone features
    out = enc.embed_all(X)
    assert out["instance"].shape == (16, 128) and np.allclose(np.linalg.norm(out["instance"], axis=1), 1, atol=1e-5)
    assert out["cluster"].shape == (16, 3) and np.allclose(out["cluster"].sum(1), 1, atol=1e-5)
    labels = enc.predict_clusters(X)
    assert labels.dtype == np.int64 and set(labels) <= {0, 1, 2}


@pytest.mark.slow
def test_finetune_heads_keeps_backbone_frozen():
    from pipeline.encoders.device import seed_everything

    seed_everything(0)  # fit seeds the same way before building the network
    initial = ContrastiveClusteringNet("resnet34", 3).state_dict()
    enc = ContrastiveClusteringEncoder(**SMALL, mode="finetune_heads", train_heads="cluster").fit(_images(8))
    trained = enc.module_.state_dict()
    for name, value in trained.items():
        if name.startswith(("resnet.", "instance_projector.")):  # incl. BatchNorm running statistics
            torch.testing.assert_close(value, initial[name], msg=name)
    assert not torch.equal(trained["cluster_projector.2.weight"], initial["cluster_projector.2.weight"])


def test_authors_checkpoint_keys_are_mapped(tmp_path):
    torch.manual_seed(1)
    net = ContrastiveClusteringNet("resnet34", 3)
    authors = {"net": {f"module.{k}": v for k, v in net.state_dict().items()}, "optimizer": {}, "epoch": 1000}
    path = tmp_path / "checkpoint_1000.tar"
    torch.save(authors, path)
    mapped = map_authors_state_dict(torch.load(path, weights_only=True))
    assert set(mapped) == set(net.state_dict())
    X = _images(4)
    enc = ContrastiveClusteringEncoder(**SMALL, mode="pretrained", init_checkpoint=read_weights(path, "init_checkpoint"),
                                       representation="cluster").fit(X)
    net.eval()
    x = torch.from_numpy(X).permute(0, 3, 1, 2).float() / 255
    with torch.no_grad():
        expected = net.cluster_projector(net.resnet(x)).numpy()
    np.testing.assert_allclose(enc.transform(X), expected, atol=1e-5)
    with pytest.raises(InvalidInputError, match="n_clusters"):
        ContrastiveClusteringEncoder(**{**SMALL, "n_clusters": 5}, mode="pretrained",
                                     init_checkpoint=read_weights(path, "init_checkpoint")).fit(X)


def test_weight_files_named_in_the_config_are_read_by_the_app_layer(tmp_path):
    """encoder.params.init_checkpoint=<file>: pipeline.app.stages.encode.build reads it; the
    library encoder only ever sees the state in memory."""
    from pipeline.app.stages.encode import build

    torch.manual_seed(1)
    net = ContrastiveClusteringNet("resnet34", 3)
    path = tmp_path / "checkpoint_1000.tar"
    torch.save({"net": {f"module.{k}": v for k, v in net.state_dict().items()}}, path)
    cfg = {"encoder": {"_target_": "pipeline.encoders.contrastive.ContrastiveClusteringEncoder", "name": "contrastive",
                       "device": "cpu", "params": {**SMALL, "mode": "pretrained", "init_checkpoint": str(path)}}}
    enc = build(cfg)
    assert isinstance(enc.init_checkpoint, dict) and "net" in enc.init_checkpoint
    cfg["encoder"]["params"]["init_checkpoint"] = str(tmp_path / "missing.tar")
    with pytest.raises(InvalidInputError, match=r"encoder.params.init_checkpoint=.*missing.tar does not exist"):
        build(cfg)


def test_imagenet_weights_unavailable_falls_back_to_random(monkeypatch, caplog):
    def offline(*args, **kwargs):
        raise OSError("no internet")

    from pipeline.app.models.weights import imagenet_weights

    monkeypatch.setattr(resnet_module.torchvision.models, "get_model_weights", offline)
    net, _ = resnet_module.build_backbone("resnet34")
    with caplog.at_level("WARNING"):
        source = resnet_module.load_backbone_weights(net, "resnet34", imagenet_weights("resnet34"))
    assert source.startswith("random") and "RANDOM" in caplog.text and "encoder.backbone_weights" in caplog.text


@pytest.mark.parametrize(
    "X, params, match",
    [
        (_images(4)[..., :2], {}, "channel"),
        (_images(4).astype(np.float32), {}, "uint8"),
        (np.zeros((0, 32, 32, 3), np.uint8), {}, "empty"),
        (_images(4), {"n_clusters": 10}, "exceeds the number of samples"),
        (_images(4), {"mode": "pretrained"}, "init_checkpoint"),
        (_images(4), {"backbone_weights": "/nonexistent/resnet34.pth"}, "encoder.backbone_weights"),
        (_images(4), {"init_checkpoint": "/nonexistent/ckpt.tar", "mode": "pretrained"}, "encoder.init_checkpoint"),
        (_images(4), {"backbone": "vgg16"}, "encoder.backbone"),
        (["text"] * 4, {}, "images"),
    ],
)
def test_bad_input(X, params, match):
    with pytest.raises(InvalidInputError, match=match):
        ContrastiveClusteringEncoder(**{**SMALL, **params}).fit(X)


def test_greyscale_images_are_repeated_to_rgb():
    grey = _images(4)[..., :1]
    arr = ContrastiveClusteringEncoder(**SMALL)._prepare(grey, fitting=True)
    assert arr.shape == (4, 32, 32, 3) and np.array_equal(arr[..., 2], grey[..., 0])


def test_transform_rejects_other_image_size(trained):
    enc, _, _ = trained
    with pytest.raises(InvalidInputError, match="trained on"):
        enc.transform(_images(2, size=40))


def test_registry():
    assert isinstance(ContrastiveClusteringEncoder(n_clusters=2), ContrastiveClusteringEncoder)


@pytest.mark.slow
def test_checkpoint_round_trip(trained, tmp_path):
    from pipeline.app.stores.checkpoint import load_encoder, save_encoder

    enc, X, _ = trained
    path = tmp_path / "contrastive" / "k.pt"
    save_encoder(enc, path, {"data": "generated"})
    loaded = load_encoder(path, expected=ContrastiveClusteringEncoder(**SMALL))
    np.testing.assert_array_equal(loaded.transform(X), enc.transform(X))
    np.testing.assert_array_equal(loaded.predict_clusters(X), enc.predict_clusters(X))
    with pytest.raises(InvalidInputError, match="backbone='resnet34' in the checkpoint but 'resnet18'"):
        load_encoder(path, expected=ContrastiveClusteringEncoder(**{**SMALL, "backbone": "resnet18"}))
