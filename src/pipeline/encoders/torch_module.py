"""Any torch module as the encoder: the activations of one named layer are the latents.

TCAV (Kim et al. 2018) explains a network at a chosen layer ``l``: an input ``x`` is mapped to
the activations ``f_l(x)``, and CAVs live in that space. :class:`TorchModuleEncoder` reads
``f_l(x)`` with a forward hook on the submodule named ``layer`` (the names of
``module.named_modules()``, e.g. ``layer3`` or ``features.7``) and pools each input's
activations to one vector: the spatial mean of a (C, H, W) map, the token mean of a (T, D)
sequence (``pool="mean"``; ``"max"`` and ``"flatten"`` are the alternatives). The forward pass
stops at that layer. No file I/O here: the module arrives built and loaded
(:mod:`pipeline.app.models.torch_models` reads architectures, weights files and TorchScript).
"""

from __future__ import annotations

import logging
from typing import Callable, Sequence

import numpy as np
import torch
from torch import nn
from pipeline.progress import tqdm

from pipeline.encoders.base import Encoder
from pipeline.validation import InvalidInputError

log = logging.getLogger(__name__)

POOLS = ("mean", "max", "flatten")


class ImageTransform(nn.Module):
    """Float images (n, C, H, W) in [0, 1] -> the network's input: channel count, size, normalisation.

    Parameters
    ----------
    size : int or (int, int), optional
        Resize (bilinear) to this side / (height, width); None keeps the size.
    mean, std : sequence of float, optional
        Per-channel normalisation ``(x - mean) / std`` (e.g. ImageNet's).
    channels : int, optional
        3: greyscale inputs are repeated to RGB; 1: RGB inputs are averaged to grey.
    """

    def __init__(self, size=None, mean: Sequence[float] | None = None, std: Sequence[float] | None = None,
                 channels: int | None = None):
        super().__init__()
        self.size = None if size is None else (int(size), int(size)) if np.isscalar(size) else tuple(map(int, size))
        self.channels = channels
        self.register_buffer("mean", None if mean is None else _per_channel(mean))
        self.register_buffer("std", None if std is None else _per_channel(std))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.channels == 3 and x.shape[1] == 1:
            x = x.expand(-1, 3, -1, -1)
        elif self.channels == 1 and x.shape[1] == 3:
            x = x.mean(dim=1, keepdim=True)
        if self.size is not None and tuple(x.shape[-2:]) != self.size:
            x = nn.functional.interpolate(x, size=self.size, mode="bilinear", align_corners=False, antialias=True)
        if self.mean is not None:
            x = x - self.mean
        if self.std is not None:
            x = x / self.std
        return x


def _per_channel(values) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float32)[None, :, None, None]


class _Reached(Exception):
    """Raised by the hook once the layer's output is captured, to skip the rest of the network."""


def layer_names(module: nn.Module) -> list[str]:
    """The names ``layer`` may take: every submodule of ``module``, outermost first."""
    names = [name for name, _ in module.named_modules() if name]
    return sorted(names, key=lambda n: n.count("."))  # stable: network order within a depth


def pool_activations(a: torch.Tensor, pool: str = "mean") -> torch.Tensor:
    """One vector per input: (n, C, H, W) maps pooled over H, W; (n, T, D) token sequences over
    T; (n, D) unchanged. ``flatten`` keeps every activation (TCAV's original choice)."""
    if a.ndim <= 2 or pool == "flatten":
        return a.reshape(len(a), -1)
    dims = (1,) if a.ndim == 3 else tuple(range(2, a.ndim))
    return a.mean(dim=dims) if pool == "mean" else a.amax(dim=dims)


class TorchModuleEncoder(Encoder):
    """Latents = pooled activations of ``module``'s submodule ``layer``.

    Parameters
    ----------
    module : torch.nn.Module
        The network, weights loaded (any ``nn.Module`` or a TorchScript module).
    layer : str, optional
        Name of the submodule whose output is read (``module.named_modules()``); None: the
        module's own output.
    transform : callable, optional
        Applied to each float batch before the forward pass. Images arrive as (n, C, H, W) in
        [0, 1] (uint8 data are divided by 255); tabular data as (n, d) float32. Default: an
        :class:`ImageTransform` without resizing or normalisation for images, nothing for tables.
    pool : {"mean", "max", "flatten"}
    batch_size : int
    device : str
    progress : bool
    """

    name = "torch"
    trainable = False

    def __init__(self, module: nn.Module, layer: str | None = None, transform: Callable | None = None,
                 pool: str = "mean", batch_size: int = 64, device: str = "cpu", progress: bool = True):
        self.module = module
        self.layer = layer
        self.transform_ = transform
        self.pool = pool
        self.batch_size = batch_size
        self.device = device
        self.progress = progress

    def _target(self) -> nn.Module:
        if self.pool not in POOLS:
            raise InvalidInputError(f"encoder.pool={self.pool!r}; choose one of {list(POOLS)}.")
        if not self.layer:
            return self.module
        if isinstance(self.module, torch.jit.ScriptModule):
            raise InvalidInputError(
                f"encoder.layer={self.layer!r}: a TorchScript model cannot be read at an inner layer (torch does not "
                "hook scripted modules). Set encoder.layer=null to use the scripted model's output, save the model as a "
                "torch.export archive (.pt2, read at any layer), or give the architecture (encoder.model._target_) "
                "and its weights.")
        try:
            return self.module.get_submodule(str(self.layer))
        except AttributeError:
            names = layer_names(self.module)
            shown = ", ".join(names[:40]) + (f", ... ({len(names)} in all)" if len(names) > 40 else "")
            raise InvalidInputError(f"the model has no layer {self.layer!r}; set encoder.layer to one of its layers: "
                                    f"{shown}.") from None

    def _batches(self, X):
        if isinstance(X, list):
            raise InvalidInputError("encoder=torch embeds images or feature tables, not texts; use encoder=sbert or "
                                    "encoder=clip for text data.")
        arr = np.asarray(X)
        if arr.ndim == 4 and arr.shape[-1] in (1, 3, 4):  # (n, H, W, C) images
            images = True
        elif arr.ndim == 2:
            images = False
        else:
            raise InvalidInputError(f"encoder=torch needs images (n, H, W, C) or a table (n, d), got shape "
                                    f"{arr.shape}.")
        for start in range(0, len(arr), int(self.batch_size)):
            batch = arr[start:start + int(self.batch_size)]
            if images:
                t = torch.from_numpy(np.ascontiguousarray(batch[..., :3])).permute(0, 3, 1, 2).float()
                if batch.dtype == np.uint8:
                    t = t / 255.0
            else:
                t = torch.from_numpy(np.asarray(batch, dtype=np.float32))
            yield t

    @torch.inference_mode()
    def transform(self, X) -> np.ndarray:
        """Pooled activations at ``layer``, shape (n_samples, m) float32."""
        target = self._target()
        auto = "cuda" if torch.cuda.is_available() else "cpu"
        device = torch.device(auto if self.device == "auto" else self.device)
        module = self.module.to(device).eval()
        transform = self.transform_.to(device) if isinstance(self.transform_, nn.Module) else self.transform_
        captured = []

        def hook(_mod, _inp, out):
            captured.append(out[0] if isinstance(out, (tuple, list)) else out)
            raise _Reached

        handle = target.register_forward_hook(hook) if target is not self.module else None
        feats = []
        try:
            n = len(X)
            for t in tqdm(self._batches(X), total=-(-n // int(self.batch_size)), desc="torch module",
                          disable=not self.progress, leave=False):
                t = t.to(device)
                if transform is not None:
                    t = transform(t)
                captured.clear()
                try:
                    out = module(t)
                except _Reached:
                    out = captured[0]
                except RuntimeError as exc:
                    raise InvalidInputError(
                        f"the model failed on an input batch of shape {tuple(t.shape)} ({exc}). Set the input "
                        "transform so inputs fit the network (encoder.transform.size, .channels, "
                        ".mean/.std).") from None
                if isinstance(out, (tuple, list)):
                    out = out[0]
                if not isinstance(out, torch.Tensor):
                    raise InvalidInputError(f"layer {self.layer!r} returned {type(out).__name__}, not a tensor; "
                                            "choose another encoder.layer.")
                feats.append(pool_activations(out.float(), self.pool).cpu())
        finally:
            if handle is not None:
                handle.remove()
        return torch.cat(feats).numpy().astype(np.float32)
