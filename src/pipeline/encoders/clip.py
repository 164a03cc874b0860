"""CLIP image embeddings (and text embeddings for concept prompts) via open_clip.

The library builds the architecture (random weights, ``pretrained=None``) or takes a loaded
model (``model=``); pretrained weights are fetched by the pipeline's ``encoder=clip``
(:class:`pipeline.app.models.weights.CLIPEncoder`) in the application layer.
"""

from __future__ import annotations

import logging

import numpy as np
import torch
from pipeline.progress import tqdm

from pipeline.encoders.base import Encoder
from pipeline.encoders.device import autocast, select_device
from pipeline.validation import InvalidInputError

logger = logging.getLogger(__name__)


class CLIPEncoder(Encoder):
    """Frozen open_clip model: L2-normalised image embeddings; :meth:`encode_text` for prompts.

    Parameters
    ----------
    model_name : str
        open_clip architecture (default "ViT-B-32", as in SpEx).
    pretrained : str or None
        A pretrained tag (default "openai"), a local checkpoint path, or None for random
        initialisation (tests). An unreachable tag raises an error naming ``encoder.pretrained``.
    model_config : dict, optional
        Overrides of the architecture (``embed_dim``, ``vision_cfg``, ``text_cfg``), e.g. a tiny
        model for tests.
    normalize : bool
        L2-normalise embeddings (default True).
    cache_dir : str, optional
        open_clip download directory (default: the one set by ``configure_model_caches``).
    device, batch_size, num_workers, amp, progress
        Inference settings; AMP only on CUDA.
    model : tuple, optional
        A loaded ``(model, preprocess)`` pair from ``open_clip.create_model_and_transforms``.
    """

    name = "clip"
    trainable = False

    def __init__(self, model_name: str = "ViT-B-32", pretrained: str | None = "openai", model_config: dict | None = None,
                 normalize: bool = True, cache_dir: str | None = None, device: str = "auto", batch_size: int = 64,
                 num_workers: int = 0, amp: bool = True, progress: bool = True, model=None):
        self.model = model
        self.model_name = model_name
        self.pretrained = pretrained
        self.model_config = model_config
        self.normalize = normalize
        self.cache_dir = cache_dir
        self.device = device
        self.batch_size = batch_size
        self.num_workers = num_workers
        self.amp = amp
        self.progress = progress

    def fit(self, X=None, y=None) -> "CLIPEncoder":
        """Load the model (nothing is trained)."""
        self._load()
        return self

    def _load(self) -> None:
        if getattr(self, "model_", None) is not None:
            return
        import open_clip

        self.device_ = select_device(self.device)
        pretrained = self.pretrained or None
        if self.model is not None:
            model, preprocess = self.model
        elif pretrained is None:  # the architecture alone: nothing to fetch
            model, _, preprocess = open_clip.create_model_and_transforms(
                self.model_name, pretrained=None, device=self.device_, **dict(self.model_config or {}))
        else:
            model, preprocess = self._load_pretrained()
        self.model_ = model.eval()
        self.preprocess_ = preprocess
        self.tokenizer_ = open_clip.get_tokenizer(self.model_name, context_length=model.context_length)
        if pretrained is None and self.model is None:
            logger.warning("CLIP %s is randomly initialised (encoder.pretrained=null).", self.model_name)
        logger.info("CLIP %s (pretrained=%s) on %s", self.model_name, pretrained, self.device_)

    def _load_pretrained(self) -> tuple:
        """(model, preprocess) with the ``pretrained`` weights: fetched by the application layer."""
        raise InvalidInputError(f"the library's CLIPEncoder does not fetch weights (pretrained={self.pretrained!r}); "
                                "pass model=(model, preprocess), pretrained=None for random weights, or use "
                                "pipeline.app.models.weights.CLIPEncoder (encoder=clip).")

    def _finish(self, feats: list[torch.Tensor]) -> np.ndarray:
        out = torch.cat(feats).float()
        if self.normalize:
            out = torch.nn.functional.normalize(out, dim=1)
        return out.numpy().astype(np.float32)

    @torch.no_grad()
    def transform(self, X) -> np.ndarray:
        """Image embeddings, shape (n_samples, embed_dim) float32; X is uint8 (n, H, W, 1 or 3)."""
        from PIL import Image

        if isinstance(X, list):
            raise InvalidInputError("encoder=clip embeds images through transform(); use encode_text(texts) for texts.")
        arr = np.asarray(X)
        if arr.size == 0:
            raise InvalidInputError("CLIP got an empty dataset (0 images); check the dataset config.")
        if arr.ndim != 4 or arr.dtype != np.uint8 or arr.shape[-1] not in (1, 3):
            raise InvalidInputError(f"CLIP needs uint8 images (n, height, width, 1 or 3), got {arr.dtype} {arr.shape}; "
                                    "use an image dataset (Dataset.kind='image').")
        self._load()
        feats = []
        for start in tqdm(range(0, len(arr), int(self.batch_size)), desc="clip images", disable=not self.progress,
                          leave=False):
            batch = arr[start:start + int(self.batch_size)]
            pil = [Image.fromarray(img[..., 0] if img.shape[-1] == 1 else img).convert("RGB") for img in batch]
            x = torch.stack([self.preprocess_(p) for p in pil]).to(self.device_)
            with autocast(self.device_, self.amp):
                feats.append(self.model_.encode_image(x).cpu())
        return self._finish(feats)

    @torch.no_grad()
    def encode_text(self, texts: list[str]) -> np.ndarray:
        """Text-tower embeddings of prompts, shape (len(texts), embed_dim) float32 (L2-normalised)."""
        if isinstance(texts, str) or not all(isinstance(t, str) for t in texts):
            raise InvalidInputError("encode_text needs a list of strings, e.g. ['a photo of a striped animal'].")
        if len(texts) == 0:
            raise InvalidInputError("encode_text got an empty list of prompts.")
        self._load()
        feats = []
        for start in range(0, len(texts), int(self.batch_size)):
            tokens = self.tokenizer_(list(texts[start:start + int(self.batch_size)])).to(self.device_)
            with autocast(self.device_, self.amp):
                feats.append(self.model_.encode_text(tokens).cpu())
        return self._finish(feats)
