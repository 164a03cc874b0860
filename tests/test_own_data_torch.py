"""Your own model: a small random torchvision network read at a named layer, weights files,
TorchScript, and the errors for a bad layer or weights that do not fit."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torchvision

from pipeline.app.models.torch_models import build_torch_encoder
from pipeline.encoders.torch_module import ImageTransform, TorchModuleEncoder, pool_activations
from pipeline.validation import InvalidInputError

ARCH = {"_target_": "torchvision.models.resnet18", "num_classes": 3}


@pytest.fixture(scope="module")
def weights(tmp_path_factory):
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("w") / "resnet18.pt"
    torch.save(torchvision.models.resnet18(num_classes=3).state_dict(), path)
    return path


@pytest.fixture(scope="module")
def images():
    return np.random.default_rng(0).integers(0, 256, (5, 16, 16, 3), dtype=np.uint8)


def test_named_layer_is_pooled_to_one_vector_per_input(weights, images):
    enc = build_torch_encoder(ARCH, str(weights), layer="layer3", transform={"size": 32, "mean": [0.5] * 3,
                                                                             "std": [0.25] * 3}, progress=False)
    Z = enc.transform(images)
    assert Z.shape == (5, 256) and Z.dtype == np.float32  # layer3 of resnet18 has 256 channels
    # the same as a forward pass by hand: spatial mean of layer3's output
    net = torchvision.models.resnet18(num_classes=3)
    net.load_state_dict(torch.load(weights, weights_only=True))
    net.eval()
    acts = {}
    net.layer3.register_forward_hook(lambda m, i, o: acts.setdefault("a", o))
    x = torch.from_numpy(images).permute(0, 3, 1, 2).float() / 255
    with torch.no_grad():
        net(ImageTransform(32, [0.5] * 3, [0.25] * 3)(x))
    assert np.allclose(Z, acts["a"].mean(dim=(2, 3)).numpy(), atol=1e-5)
    # the weights file was used: another random init gives other latents
    other = TorchModuleEncoder(torchvision.models.resnet18(num_classes=3).eval(), "layer3", progress=False)
    assert not np.allclose(other.transform(images), enc.transform(images))


def test_greyscale_inputs_and_whole_model_output(weights):
    grey = np.random.default_rng(1).integers(0, 256, (3, 12, 12, 1), dtype=np.uint8)
    enc = build_torch_encoder(ARCH, str(weights), layer=None, transform={"channels": 3}, progress=False)
    assert enc.transform(grey).shape == (3, 3)  # the logits


@pytest.mark.filterwarnings("ignore::FutureWarning")
def test_torchscript_file(tmp_path, images):
    net = torchvision.models.resnet18(num_classes=4).eval()
    torch.jit.save(torch.jit.script(net), tmp_path / "net.ts")
    enc = build_torch_encoder(torchscript=str(tmp_path / "net.ts"), progress=False)
    assert enc.transform(images).shape == (5, 4)
    with pytest.raises(InvalidInputError, match="TorchScript model cannot be read at an inner layer"):
        build_torch_encoder(torchscript=str(tmp_path / "net.ts"), layer="layer3").transform(images)


def test_bad_layer_lists_the_models_layers(weights, images):
    with pytest.raises(InvalidInputError) as err:
        build_torch_encoder(ARCH, str(weights), layer="layer9").transform(images)
    msg = str(err.value)
    assert "no layer 'layer9'" in msg and "layer3" in msg and "avgpool" in msg and "\n" not in msg


@pytest.mark.parametrize("model, message", [
    ({"_target_": "torchvision.models.resnet18", "num_classes": 5}, "fc.weight (3, 512) vs (5, 512)"),
    ({"_target_": "torchvision.models.resnet34", "num_classes": 3}, "missing keys"),
])
def test_weights_that_do_not_fit_the_architecture(weights, model, message):
    with pytest.raises(InvalidInputError) as err:
        build_torch_encoder(model, str(weights), layer="layer3")
    assert "does not fit the architecture" in str(err.value) and message in str(err.value)


def test_unreadable_weights_and_unknown_architecture(tmp_path):
    (tmp_path / "w.pt").write_bytes(b"junk")
    with pytest.raises(InvalidInputError, match="could not be read as a state dict"):
        build_torch_encoder(ARCH, str(tmp_path / "w.pt"))
    with pytest.raises(InvalidInputError, match="no such file"):
        build_torch_encoder(ARCH, str(tmp_path / "missing.pt"))
    with pytest.raises(InvalidInputError, match="could not build torchvision.models.resnet999"):
        build_torch_encoder({"_target_": "torchvision.models.resnet999"})


def test_pooling_shapes():
    assert pool_activations(torch.ones(2, 5, 3, 3)).shape == (2, 5)
    assert pool_activations(torch.ones(2, 7, 4)).shape == (2, 4)  # tokens (n, T, D)
    assert pool_activations(torch.ones(2, 5, 3, 3), "flatten").shape == (2, 45)


def test_torch_export_archive_is_read_at_a_named_layer(tmp_path, images):
    torch.manual_seed(0)
    net = torchvision.models.resnet18(num_classes=3).eval()
    batch = torch.export.Dim("batch", min=1, max=1024)
    program = torch.export.export(net, (torch.zeros(2, 3, 16, 16),), dynamic_shapes=({0: batch},))
    torch.export.save(program, tmp_path / "net.pt2")
    enc = build_torch_encoder(torchscript=str(tmp_path / "net.pt2"), layer="layer3", progress=False)
    direct = TorchModuleEncoder(net, "layer3", progress=False)
    assert np.allclose(enc.transform(images), direct.transform(images), atol=1e-5)
