"""Encoders turning data into latents (VaDE, contrastive clustering, CLIP, SBERT, identity)."""

from pipeline.encoders.base import ENCODERS, Encoder, IdentityEncoder, build_encoder, register_encoder

__all__ = ["Encoder", "IdentityEncoder", "build_encoder", "register_encoder", "ENCODERS"]
