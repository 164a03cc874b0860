"""Datasets: the Dataset container and the loaders registry."""

from pipeline.app.data.dataset import Dataset
from pipeline.app.data.registry import LOADERS, load_dataset, register_loader

__all__ = ["Dataset", "LOADERS", "load_dataset", "register_loader"]
