"""Counterfactual explanations in input features through the encoder's torch module
(``Encoder.torch_module``, ``counterfactuals.space=input``)."""

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from sklearn.datasets import load_digits

from pipeline.app.stores.artifacts import ClusterArtifact, EncodeArtifact, LoadArtifact, ProjectArtifact
from pipeline.app.stores.cache import StageCache
from pipeline.app.configuration.config import compose_config
from pipeline.counterfactuals import correctness, coverage
from pipeline.encoders import VaDEEncoder
from pipeline.encoders.base import Encoder, IdentityEncoder
from pipeline.encoders.contrastive import ContrastiveClusteringEncoder
from pipeline.app.running.runner import run, run_stages, to_plain
from pipeline.app.stages.framework import execute
from pipeline.app.stages.counterfactuals import counterfactuals_stage
from pipeline.app.stages.encode import fitted_encoder
from pipeline.validation import InvalidInputError

sys.path.insert(0, str(Path(__file__).parent))
from test_pipeline_encode import TINY_VADE  # noqa: E402

TINY = dict(n_clusters=3, latent_dim=3, hidden_dims=(16,), pretrain_epochs=2, epochs=2, batch_size=64,
            progress=False, device="cpu")


@pytest.fixture(scope="module")
def digits():
    X, y = load_digits(return_X_y=True)
    return X[np.isin(y, [0, 1, 7])][:150]


@pytest.mark.parametrize("params", [{}, {"reconstruction": "gaussian", "input_scaling": "none"}])
def test_vade_torch_module_equals_transform_and_is_differentiable(digits, params):
    vade = VaDEEncoder(**TINY, **params).fit(digits)
    module = vade.torch_module()
    X = np.vstack([digits[:40], digits[:3] + 20.0, digits[:3] - 5.0])  # also outside the training range (clamped)
    out = module(torch.as_tensor(X, dtype=torch.float32))
    np.testing.assert_allclose(out.detach().numpy(), vade.transform(X), rtol=1e-5, atol=1e-6)
    assert not any(p.requires_grad for p in module.parameters())  # frozen copy
    x = torch.tensor(digits[:5], dtype=torch.float32, requires_grad=True)
    (grad,) = torch.autograd.grad(module(x).sum(), x)
    assert grad.abs().sum() > 0
    before = vade.transform(digits[:5])
    next(module.parameters()).data.add_(1.0)  # the module is a copy: the encoder is untouched
    np.testing.assert_array_equal(vade.transform(digits[:5]), before)


def test_identity_module_and_encoders_without_one(digits):
    module = IdentityEncoder().torch_module()
    x = torch.as_tensor(digits[:4], dtype=torch.float32)
    assert torch.equal(module(x), x)
    assert Encoder().torch_module() is None
    assert ContrastiveClusteringEncoder(backbone="resnet18", backbone_weights=None).torch_module() is None


def _stage_inputs(space, kind="tabular"):
    rng = np.random.default_rng(0)
    X = np.vstack([rng.normal(0, 1, (20, 3)), rng.normal(3, 1, (20, 3))])
    cfg = {"counterfactuals": {"space": space, "methods": ["dbm"], "k": 2, "params": {}}, "seed": 0}
    load = LoadArtifact(name="toy", kind=kind, X=X, feature_names=["a", "b", "c"])
    Z = X[:, :2]
    inputs = {"load": load, "encode": EncodeArtifact(Z=Z, latent_names=["z0", "z1"]),
              "cluster": ClusterArtifact(labels=np.repeat([0, 1], 20), method="toy"),
              "project": ProjectArtifact(X=Z, feature_names=["z0", "z1"], latent_X=Z, latent_names=["z0", "z1"])}
    return cfg, inputs


def test_input_space_needs_a_torch_module_and_tabular_data():
    cfg, inputs = _stage_inputs("input")
    stage = counterfactuals_stage(lambda: ContrastiveClusteringEncoder(backbone_weights=None))
    with pytest.raises(InvalidInputError, match="has no differentiable module.*space=latent"):
        stage.compute(cfg, **inputs)
    cfg, inputs = _stage_inputs("input", kind="image")
    with pytest.raises(InvalidInputError, match="needs tabular input features"):
        counterfactuals_stage(IdentityEncoder).compute(cfg, **inputs)
    cfg, inputs = _stage_inputs("auto")  # auto falls back to the latents without a module
    out = counterfactuals_stage(Encoder).compute(cfg, **inputs)
    assert out.space == "latent" and out.feature_names == ["z0", "z1"]
    out = counterfactuals_stage(IdentityEncoder).compute(cfg, **inputs)
    assert out.space == "input" and out.feature_names == ["a", "b", "c"]


def test_pipeline_tgt_in_pixel_space_through_vade(tmp_path, capsys):
    cfg = compose_config([f"paths.output_dir={tmp_path / 'out'}", f"paths.cache_dir={tmp_path / 'cache'}",
                          f"paths.models_dir={tmp_path / 'models'}", *TINY_VADE, "counterfactuals=tgt",
                          "counterfactuals.space=input", "counterfactuals.k=3", "counterfactuals.params.l1=0.0",
                          "counterfactuals.params.learning_rate=1.0", "counterfactuals.params.n_iter=300",
                          "counterfactuals.params.patience=100"])
    run(cfg)
    assert "counterfactual explanations (input space)" in capsys.readouterr().out
    table = pd.read_csv(tmp_path / "out" / "counterfactuals.csv")
    pixels = {f"pixel_{r}_{c}" for r in range(8) for c in range(8)}
    for text in table.explanation:  # TGT with l1=0 moves every pixel; k=3 keeps three
        parts = [p.split(" ", 1)[1] for p in text.split(", ")]
        assert len(parts) == 3 and set(parts) <= pixels

    # the same run from the cache: the artifact, the encoder behind the latents, the data
    plain = to_plain(cfg)
    cache = StageCache(Path(plain["paths"]["cache_dir"]))
    done, _, _ = run_stages(plain, cache)
    encoder = fitted_encoder(plain, done["encode"].artifact)  # the checkpoint the encode artifact names
    assert isinstance(encoder, VaDEEncoder)
    art = execute(counterfactuals_stage(lambda: encoder), plain, cache, done).artifact
    assert [e.hit for e in cache.events if e.stage == "counterfactuals"] == [True]
    X = done["load"].artifact.X.astype(np.float64)
    module = encoder.torch_module()
    Z = module(torch.as_tensor(X, dtype=torch.float32)).detach().numpy()
    np.testing.assert_allclose(Z, done["encode"].artifact.Z, rtol=1e-5, atol=1e-5)  # the encoder of the latents
    assert art.space == "input" and art.deltas.shape == (12, 64)
    groups = done["cluster"].artifact.labels
    for row, delta in zip(art.rows, art.deltas):  # correctness / coverage are judged through VaDE
        X_i, X_j = X[groups == row["from"]], X[groups == row["to"]]
        assert correctness(module, X_i, X_j, delta, art.eps) == pytest.approx(row["correctness"])
        assert coverage(module, X_i, X_j, delta, art.eps) == pytest.approx(row["coverage"])
    assert any(row["correctness"] > 0 for row in art.rows)
