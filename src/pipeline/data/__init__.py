"""Datasets: the Dataset container and the loaders registry."""

from pipeline.data.dataset import Dataset
from pipeline.data.registry import LOADERS, load_dataset, register_loader

__all__ = ["Dataset", "LOADERS", "load_dataset", "register_loader"]
