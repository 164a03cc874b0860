"""torchvision ResNet backbones without the classifier, with ImageNet weights when obtainable."""

from __future__ import annotations

import logging
from collections.abc import Mapping

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


def load_backbone_weights(net: nn.Module, name: str, weights) -> str:
    """Load ``weights`` into a backbone from :func:`build_backbone`; return what was loaded.

    Parameters
    ----------
    weights : {"imagenet", "none"}, a state dict, or None
        "imagenet": torchvision's default ImageNet weights (downloaded into TORCH_HOME);
        when they cannot be obtained (offline) the backbone stays randomly initialised and
        a warning says so. A torchvision-format state dict (a mapping of tensors, possibly
        under ``state_dict``): loaded as given. Files are read by the application layer
        (``encoder.params.backbone_weights=/path/to/resnet34.pth`` in the pipeline).
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
    if not isinstance(weights, Mapping):
        raise InvalidInputError(f"encoder.backbone_weights={weights!r}: give 'imagenet', 'none' or a state dict "
                                "(read a weights file with pipeline.app.checkpoint.read_weights; the pipeline does "
                                "that for encoder.params.backbone_weights=/path/to/weights.pth).")
    _load_state(net, weights.get("state_dict", weights), "the given backbone state dict")
    logger.info("%s backbone: weights from the given state dict", name)
    return "state dict"


def _load_state(net: nn.Module, state: dict, source: str) -> None:
    state = {k: v for k, v in state.items() if not k.startswith("fc.")}
    try:
        net.load_state_dict(state)
    except RuntimeError as exc:
        raise InvalidInputError(f"{source} does not fit the configured backbone ({exc}); "
                                "check encoder.backbone matches the weights.") from None
