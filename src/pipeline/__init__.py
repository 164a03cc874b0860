"""Concept-based explanation trees for clusters in deep representations."""

__version__ = "0.1.0"
