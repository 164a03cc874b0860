"""Load a user's own network for :class:`pipeline.encoders.torch_module.TorchModuleEncoder`.

Either an architecture named by ``_target_`` (any importable callable returning an
``nn.Module``, e.g. ``torchvision.models.resnet18`` with ``num_classes: 10``) plus a local
weights file (a state dict saved with ``torch.save(model.state_dict(), path)``; a checkpoint
dict holding ``state_dict`` / ``model_state_dict`` / ``model`` works too), or a TorchScript file
(``torch.jit.save(torch.jit.script(model), path)``; read at its output) or a ``torch.export``
archive (``.pt2``, ``torch.export.save``; read at any layer). Nothing is downloaded and the
files are only read.
"""

from __future__ import annotations

import logging
from pathlib import Path

from pipeline.validation import InvalidInputError

log = logging.getLogger(__name__)


def build_module(model=None, weights: str | None = None, torchscript: str | None = None):
    """The ``nn.Module`` described by an architecture config + weights file, or a TorchScript file."""
    import torch

    if torchscript:
        p = _file(torchscript, "encoder.torchscript")
        if p.suffix == ".pt2":
            return _exported_program(p)
        try:
            return torch.jit.load(str(p), map_location="cpu").eval()
        except Exception as exc:  # noqa: BLE001
            raise InvalidInputError(f"encoder.torchscript={p} is not a TorchScript file ({type(exc).__name__}: "
                                    f"{str(exc).splitlines()[0] if str(exc) else ''}). Save one with "
                                    "torch.jit.save(torch.jit.script(model), path), or give the architecture as "
                                    "encoder.model._target_ and the weights as encoder.weights.") from None
    if not model or (isinstance(model, dict) and not model.get("_target_")):
        raise InvalidInputError("encoder=torch needs the network: encoder.model._target_=<architecture> (e.g. "
                                "torchvision.models.resnet18) with encoder.weights=<state dict file>, or "
                                "encoder.torchscript=<file>.")
    module = model if isinstance(model, torch.nn.Module) else _instantiate(model)
    if weights:
        load_weights(module, weights, _describe(model))
    else:
        log.warning("encoder=torch: no encoder.weights given, the network %s is randomly initialised",
                    _describe(model))
    return module.eval()


def _exported_program(p: Path):
    """A ``torch.export`` archive (``torch.export.save``) as a module with the original submodule
    hierarchy (``torch.export.unflatten``), so any layer can be hooked."""
    import torch

    try:
        return torch.export.unflatten(torch.export.load(str(p))).eval()
    except Exception as exc:  # noqa: BLE001
        raise InvalidInputError(f"encoder.torchscript={p} is not a torch.export archive ({type(exc).__name__}: "
                                f"{str(exc).splitlines()[0] if str(exc) else ''}). Save one with "
                                "torch.export.save(torch.export.export(model, (x,), dynamic_shapes=...), path).") from None


def _describe(model) -> str:
    return model if isinstance(model, str) else str((model or {}).get("_target_"))


def _instantiate(model):
    import torch
    from hydra.utils import instantiate

    cfg = {"_target_": model} if isinstance(model, str) else dict(model)
    if "_target_" not in cfg:
        raise InvalidInputError(f"encoder.model={model} has no _target_; name the architecture, e.g. "
                                "encoder.model._target_=torchvision.models.resnet18.")
    try:
        module = instantiate(cfg)
    except Exception as exc:  # noqa: BLE001 - hydra wraps import and call errors
        raise InvalidInputError(f"encoder.model: could not build {cfg['_target_']} ({type(exc).__name__}: "
                                f"{str(exc).splitlines()[0]}). Check the architecture name and its "
                                "arguments.") from None
    if not isinstance(module, torch.nn.Module):
        raise InvalidInputError(f"encoder.model._target_={cfg['_target_']} returned {type(module).__name__}, not a "
                                "torch.nn.Module.")
    return module


def _file(path, key: str) -> Path:
    p = Path(str(path)).expanduser()
    if not p.is_file():
        raise InvalidInputError(f"{key}={path}: no such file (relative paths are read from the launch directory "
                                f"{Path.cwd()}).")
    return p


def load_weights(module, weights, architecture: str) -> None:
    """Load a state-dict file into ``module``; a mismatch names the missing / unexpected / misshapen keys."""
    import torch

    p = _file(weights, "encoder.weights")
    try:
        state = torch.load(p, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001
        raise InvalidInputError(f"encoder.weights={p} could not be read as a state dict ({type(exc).__name__}: "
                                f"{str(exc).splitlines()[0] if str(exc) else ''}). Save the weights with "
                                "torch.save(model.state_dict(), path), or the whole model as TorchScript "
                                "(encoder.torchscript=).") from None
    if isinstance(state, torch.nn.Module):
        state = state.state_dict()
    for k in ("state_dict", "model_state_dict", "model"):
        if isinstance(state, dict) and isinstance(state.get(k), dict):
            state = state[k]
            break
    if not isinstance(state, dict):
        raise InvalidInputError(f"encoder.weights={p} holds a {type(state).__name__}, not a state dict.")
    if state and all(str(k).startswith("module.") for k in state):
        state = {k[len("module."):]: v for k, v in state.items()}  # saved from DataParallel
    own = module.state_dict()
    missing = [k for k in own if k not in state]
    unexpected = [k for k in state if k not in own]
    shapes = [f"{k} {tuple(state[k].shape)} vs {tuple(own[k].shape)}" for k in own
              if k in state and hasattr(state[k], "shape") and tuple(state[k].shape) != tuple(own[k].shape)]
    if missing or unexpected or shapes:
        parts = [f"{len(missing)} missing keys (e.g. {missing[:3]})" if missing else "",
                 f"{len(unexpected)} unexpected keys (e.g. {unexpected[:3]})" if unexpected else "",
                 f"{len(shapes)} of another shape (e.g. {shapes[:2]}; file vs architecture)" if shapes else ""]
        raise InvalidInputError(
            f"encoder.weights={p} does not fit the architecture {architecture}: "
            f"{'; '.join(x for x in parts if x)}. Check encoder.model (architecture and arguments such as "
            "num_classes) is the one the weights were saved from.")
    module.load_state_dict(state)
    log.info("encoder=torch: %s with weights %s", architecture, p)


def build_transform(transform):
    """The input transform: None, a ``_target_`` config of a callable, or
    ``{size, mean, std, channels}`` for :class:`pipeline.encoders.torch_module.ImageTransform`."""
    from pipeline.encoders.torch_module import ImageTransform

    transform = {k: v for k, v in dict(transform or {}).items() if v is not None}
    if not transform:
        return None
    if "_target_" in transform:
        from hydra.utils import instantiate

        try:
            return instantiate(transform)
        except Exception as exc:  # noqa: BLE001
            raise InvalidInputError(f"encoder.transform: could not build {transform['_target_']} ({exc}).") from None
    unknown = sorted(set(transform) - {"size", "mean", "std", "channels"})
    if unknown:
        raise InvalidInputError(f"unknown encoder.transform keys {unknown}; use size, mean, std, channels (or a "
                                "_target_ callable).")
    return ImageTransform(**transform)


def build_torch_encoder(model=None, weights=None, torchscript=None, layer=None, transform=None, pool="mean",
                        batch_size: int = 64, device: str = "cpu", progress: bool = True, fingerprint=None):
    """A :class:`TorchModuleEncoder` from config values (the ``encoder=torch`` factory; ``fingerprint``
    only keys the cache on the weights file's size and modification time)."""
    from pipeline.encoders.torch_module import TorchModuleEncoder

    module = build_module(model, weights, torchscript)
    return TorchModuleEncoder(module, layer=layer, transform=build_transform(transform), pool=pool,
                              batch_size=batch_size, device=device, progress=progress)
