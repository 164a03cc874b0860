"""torchvision ResNet backbones without the classifier; weights come from the caller (see
:func:`load_backbone_weights`)."""

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
    weights : "none", a state dict, a callable returning one (or None), or None
        A torchvision-format state dict (a mapping of tensors, possibly under ``state_dict``)
        is loaded as given. A callable is asked now (a weights provider: the pipeline passes
        one that fetches torchvision's ImageNet weights for ``backbone_weights=imagenet``,
        :func:`pipeline.app.models.weights.imagenet_weights`); when it returns None (weights
        unobtainable, e.g. offline) the backbone stays randomly initialised. The library never
        downloads or opens files: the application layer does both.
    """
    if callable(weights):
        provider, weights = weights, weights()
        source = getattr(provider, "source", "provided weights")
        if weights is None:
            logger.warning("%s: %s could not be obtained; using RANDOM initialisation. For a local copy set "
                           "encoder.backbone_weights=/path/to/%s.pth (torchvision format).", name, source, name)
            return f"random ({source} unavailable)"
        _load_state(net, weights.get("state_dict", weights), source)
        logger.info("%s backbone: %s", name, source)
        return source
    if weights in (None, "none", "random"):
        logger.info("%s backbone: random initialisation (encoder.backbone_weights=none)", name)
        return "random"
    if not isinstance(weights, Mapping):
        raise InvalidInputError(f"encoder.backbone_weights={weights!r}: give 'none', a state dict or a callable "
                                "returning one (the pipeline turns 'imagenet' and /path/to/weights.pth into those: "
                                "pipeline.app.models.weights.imagenet_weights, pipeline.app.stores.checkpoint.read_weights).")
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
