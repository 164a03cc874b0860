"""Datasets: the Dataset container and the loaders registry."""

from pipeline.data.dataset import Dataset

__all__ = ["Dataset"]
