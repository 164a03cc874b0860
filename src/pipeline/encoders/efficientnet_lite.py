"""EfficientNet-Lite (Tan & Le 2019, the mobile variant without squeeze-excitation): timm's
architecture, ImageNet weights in the layout of the ``efficientnet-lite-pytorch`` package.

Library layer: builds the module and its input transform and maps a state dict onto it; the
weights file itself is read (and its checksum verified) by :mod:`pipeline.app.models.efficientnet`.
For a GPU benchmark or a notebook the API is two calls::

    net = efficientnet_lite("lite0", state)        # nn.Module, eval mode, ImageNet logits
    x = input_transform("lite0")(images_0_1)        # (n, C, H, W) floats in [0, 1] -> network input
"""

from __future__ import annotations

import copy
from collections.abc import Mapping

import torch
from torch import nn

from pipeline.encoders.torch_module import ImageTransform, TorchModuleEncoder
from pipeline.validation import InvalidInputError

# Input side of each variant (the published resolutions; timm's pretrained_cfg agrees).
INPUT_SIZE = {"lite0": 224, "lite1": 240, "lite2": 260, "lite3": 280, "lite4": 300}
# The TF-trained Lite weights expect inputs scaled to [-1, 1]: (x - 0.5) / 0.5 per channel.
MEAN = STD = (0.5, 0.5, 0.5)
DEFAULT_LAYER = "blocks.6"  # the last block (320 channels at 7x7 for 224-pixel inputs)


def check_variant(variant: str) -> str:
    variant = str(variant).lower().removeprefix("efficientnet_").removeprefix("efficientnet-")
    if variant not in INPUT_SIZE:
        raise InvalidInputError(f"unknown EfficientNet-Lite variant {variant!r}; choose one of "
                                f"{sorted(INPUT_SIZE)} (encoder.params.variant).")
    return variant


def efficientnet_lite(variant: str = "lite0", state: Mapping | None = None) -> nn.Module:
    """timm's ``tf_efficientnet_<variant>`` (TF 'same' padding, as the weights were trained),
    in eval mode, with ``state`` (a state dict of either layout) loaded when given."""
    import timm

    net = timm.create_model(f"tf_efficientnet_{check_variant(variant)}", pretrained=False)
    if state is not None:
        net.load_state_dict(map_state_dict(state, net))
    return net.eval()


def map_state_dict(state: Mapping, net: nn.Module) -> dict:
    """``state`` renamed to ``net``'s keys.

    The ``efficientnet-lite-pytorch`` layout (``_conv_stem``, ``_blocks.3._expand_conv`` ...)
    lists the same tensors in the same order as timm's (``conv_stem``, ``blocks.1.0.conv_pw``
    ...), so keys are paired by position; every pair must agree in shape. A state dict already
    in timm's layout is returned unchanged.
    """
    own = net.state_dict()
    if set(state) == set(own):
        return dict(state)
    if len(state) != len(own):
        raise InvalidInputError(f"the weights hold {len(state)} tensors but {type(net).__name__} has {len(own)}; "
                                "they belong to another EfficientNet variant (check encoder.params.variant).")
    out = {}
    for (theirs, tensor), (mine, target) in zip(state.items(), own.items()):
        if tuple(tensor.shape) != tuple(target.shape):
            raise InvalidInputError(f"weights tensor {theirs} {tuple(tensor.shape)} does not fit {mine} "
                                    f"{tuple(target.shape)}; the weights belong to another variant (check "
                                    "encoder.params.variant).")
        out[mine] = tensor
    return out


def input_transform(variant: str = "lite0", size: int | None = None) -> ImageTransform:
    """The network's input transform: grey repeated to RGB, resized (bilinear, antialiased) to the
    variant's side (or ``size``), scaled to [-1, 1]."""
    side = int(size or INPUT_SIZE[check_variant(variant)])
    return ImageTransform(size=side, mean=MEAN, std=STD, channels=3)


def check_channels(X) -> None:
    """Images must be (n, H, W, 1) grey or (n, H, W, 3) RGB; anything else gets one clear error."""
    shape = getattr(X, "shape", None)
    if isinstance(X, list) or shape is None or len(shape) != 4 or shape[-1] not in (1, 3):
        raise InvalidInputError(
            f"EfficientNet-Lite embeds images of shape (n, H, W, 1) (grey, repeated to RGB) or (n, H, W, 3) (RGB); "
            f"got {'texts' if isinstance(X, list) else shape}. Texts go through encoder=sbert; other tensors "
            "through encoder=torch.")


def pretrained_layers(net: nn.Module) -> list[str]:
    """The layers ``encoder.layer`` may name, in network order (stem, blocks, blocks.i, head)."""
    return [name for name, _ in net.named_modules() if name and name.count(".") <= 1]




def feature_trunk(net: nn.Module, layer: str | None) -> nn.Sequential | None:
    """A copy of ``net``'s forward path up to and including ``layer``, made for inference, or None
    when ``layer`` is not on that path (``global_pool``, ``classifier``, a layer inside a block:
    read with a hook instead).

    The path is timm's ``forward_features`` (stem, blocks, head) as one
    :class:`~torch.nn.Sequential`; every BatchNorm is folded into the convolution before it
    (:func:`fold_batchnorm`) and activations flow in channels-last layout, which oneDNN's depthwise
    convolutions prefer. On one loaded core EfficientNet-Lite0 at 224 px went from 23 to 52
    images per CPU-second (benchmarks/pretrained_budget.py); outputs agree with the network's to
    ~3e-5. ``net`` itself is not modified.
    """
    path = ["conv_stem", "bn1", *(f"blocks.{i}" for i in range(len(getattr(net, "blocks", ())))), "conv_head", "bn2"]
    layer = path[-3] if layer == "blocks" else layer
    if layer not in path or not all(hasattr(net, name.split(".")[0]) for name in path):
        return None
    trunk = copy.deepcopy(nn.Sequential(*[net.get_submodule(name) for name in path[:path.index(layer) + 1]]))
    return nn.Sequential(ChannelsLast(), fold_batchnorm(trunk)).to(memory_format=torch.channels_last).eval()


class ChannelsLast(nn.Module):
    """The input batch in channels-last memory layout."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.contiguous(memory_format=torch.channels_last)


def fold_batchnorm(module: nn.Module) -> nn.Module:
    """``module`` (modified in place) with every BatchNorm that directly follows a convolution
    among its parent's children folded into that convolution's weights and bias; a BatchNorm with
    a fused activation (timm's ``BatchNormAct2d``) leaves its activation. Valid for networks whose
    children run in registration order, as timm's EfficientNet blocks do; eval mode only."""
    for parent in list(module.modules()):
        children = list(parent.named_children())
        for (_, conv), (name, bn) in zip(children, children[1:]):
            if not (isinstance(conv, nn.Conv2d) and isinstance(bn, nn.BatchNorm2d)
                    and bn.num_features == conv.out_channels and bn.track_running_stats):
                continue
            with torch.no_grad():
                scale = (bn.weight if bn.affine else 1.0) / torch.sqrt(bn.running_var + bn.eps)
                bias = conv.bias if conv.bias is not None else torch.zeros_like(bn.running_mean)
                shift = bn.bias if bn.affine else 0.0
                conv.weight.mul_(scale.reshape(-1, 1, 1, 1))
                conv.bias = nn.Parameter((bias - bn.running_mean) * scale + shift, requires_grad=False)
            rest = [m for m in (getattr(bn, "drop", None), getattr(bn, "act", None)) if isinstance(m, nn.Module)]
            setattr(parent, name, nn.Sequential(*rest) if rest else nn.Identity())
    return module


class EfficientNetEncoder(TorchModuleEncoder):
    """:class:`TorchModuleEncoder` for a pretrained image network: grey or RGB images only. Layers
    on the network's main path run as an inference copy of it (:func:`feature_trunk`), others by
    a hook."""

    name = "efficientnet_lite"

    def transform(self, X):
        check_channels(X)
        key = (id(self.module), self.layer)
        if getattr(self, "_trunk_of", None) != key:  # built once per module and layer
            self._trunk, self._trunk_of = feature_trunk(self.module, self.layer), key
        if self._trunk is None:
            return super().transform(X)
        return TorchModuleEncoder(self._trunk, layer=None, transform=self.transform_, pool=self.pool,
                                  batch_size=self.batch_size, device=self.device, progress=self.progress).transform(X)
