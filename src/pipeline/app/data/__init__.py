"""Datasets: the Dataset container, the loaders (one function per dataset) and :func:`load_dataset`."""

from pipeline.app.data.dataset import Dataset
from pipeline.app.data.loading import load_dataset

__all__ = ["Dataset", "load_dataset"]
