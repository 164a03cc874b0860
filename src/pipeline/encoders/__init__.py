"""Encoders turning data into latents (VaDE, contrastive clustering, CLIP, SBERT, identity).

Importing this package registers every encoder with :func:`build_encoder`; open_clip and
sentence-transformers are imported only when a CLIP / SBERT model is first loaded.
"""

from pipeline.encoders.base import ENCODERS, Encoder, IdentityEncoder, build_encoder, register_encoder
from pipeline.encoders.checkpoint import load_encoder, save_encoder
from pipeline.encoders.clip import CLIPEncoder
from pipeline.encoders.contrastive import ContrastiveClusteringEncoder
from pipeline.encoders.device import select_device
from pipeline.encoders.environment import configure_model_caches
from pipeline.encoders.sbert import SBERTEncoder
from pipeline.encoders.vade import VaDEEncoder

__all__ = [
    "Encoder", "IdentityEncoder", "VaDEEncoder", "ContrastiveClusteringEncoder", "CLIPEncoder", "SBERTEncoder",
    "build_encoder", "register_encoder", "ENCODERS", "save_encoder", "load_encoder", "configure_model_caches",
    "select_device",
]
