"""Encoders turning data into latents (VaDE, contrastive clustering, CLIP, SBERT, identity).

Library layer: torch modules and in-memory training, no file I/O (checkpoint files live in
:mod:`pipeline.app.stores.checkpoint`). Names are imported lazily on first access, so
``from pipeline.encoders import IdentityEncoder`` does not import torch; open_clip and
sentence-transformers are imported only when a CLIP / SBERT model is first loaded.
"""

from __future__ import annotations

import importlib

_LAZY = {
    "Encoder": "pipeline.encoders.base", "IdentityEncoder": "pipeline.encoders.base",
    "VaDEEncoder": "pipeline.encoders.vade", "ContrastiveClusteringEncoder": "pipeline.encoders.contrastive",
    "CLIPEncoder": "pipeline.encoders.clip", "SBERTEncoder": "pipeline.encoders.sbert",
    "TorchModuleEncoder": "pipeline.encoders.torch_module", "select_device": "pipeline.encoders.device",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'pipeline.encoders' has no attribute {name!r}")


def __dir__():
    return __all__
