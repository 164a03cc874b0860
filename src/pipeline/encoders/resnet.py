"""torchvision ResNet backbones without the classifier, with ImageNet weights when obtainable."""

from __future__ import annotations

import logging
from pathlib import Path

import torch
import torchvision
from torch import nn

from pipeline.validation import InvalidInputError

logger = logging.getLogger(__name__)

BACKBONES = ("resnet18", "resnet34", "resnet50")


def build_backbone(name: str) -> tuple[nn.Module, int]:
    """A randomly initialised torchvision ResNet with ``fc = Identity``; returns (module, feature_dim)."""
    if name not in BACKBONES:
        raise InvalidInputError(f"unknown backbone {name!r}; set encoder.backbone to one of {list(BACKBONES)}.")
    net = torchvision.models.get_model(name, weights=None)
    rep_dim = net.fc.in_features
    net.fc = nn.Identity()
    return net, rep_dim


def load_backbone_weights(net: nn.Module, name: str, weights: str | None) -> str:
    """Load ``weights`` into a backbone from :func:`build_backbone`; return what was loaded.

    Parameters
    ----------
    weights : {"imagenet", "none"} or a path, or None
        "imagenet": torchvision's default ImageNet weights (downloaded into TORCH_HOME);
        when they cannot be obtained (offline) the backbone stays randomly initialised and
        a warning says so. A path: a torchvision-format state dict (required to exist).
    """
    if weights in (None, "none", "random"):
        logger.info("%s backbone: random initialisation (encoder.backbone_weights=none)", name)
        return "random"
    if weights == "imagenet":
        try:
            spec = torchvision.models.get_model_weights(name).DEFAULT
            state = spec.get_state_dict(progress=False)
        except Exception as exc:  # noqa: BLE001 - network/offline errors come in many types
            logger.warning("%s: ImageNet weights could not be obtained (%s: %s); using RANDOM initialisation. "
                           "For a local copy set encoder.backbone_weights=/path/to/%s.pth (torchvision format).",
                           name, type(exc).__name__, exc, name)
            return "random (imagenet unavailable)"
        _load_state(net, state, f"torchvision ImageNet weights {spec}")
        logger.info("%s backbone: ImageNet weights %s", name, spec)
        return f"imagenet:{spec}"
    path = Path(weights)
    if not path.is_file():
        raise InvalidInputError(f"backbone weights file {path} does not exist; fix encoder.backbone_weights "
                                "(a local torchvision state dict, 'imagenet' or 'none').")
    state = torch.load(path, map_location="cpu", weights_only=True)
    _load_state(net, state.get("state_dict", state), str(path))
    logger.info("%s backbone: weights from %s", name, path)
    return str(path)


def _load_state(net: nn.Module, state: dict, source: str) -> None:
    state = {k: v for k, v in state.items() if not k.startswith("fc.")}
    try:
        net.load_state_dict(state)
    except RuntimeError as exc:
        raise InvalidInputError(f"{source} does not fit the configured backbone ({exc}); "
                                "check encoder.backbone matches the weights.") from None
