"""Measurement callables for the measured-concept tests (importable by a config's ``_target_``)."""

import numpy as np

from pipeline.concepts.measures import Measure, Measurements


def ink(images):
    """Mean grey level of each image."""
    return np.asarray(images, dtype=float).reshape(len(images), -1).mean(axis=1)


def top_half_ink(images):
    """Share of the ink in the upper half of each image."""
    a = np.asarray(images, dtype=float).reshape(len(images), *np.shape(images)[1:3])
    total = a.sum(axis=(1, 2))
    with np.errstate(invalid="ignore", divide="ignore"):
        return a[:, : a.shape[1] // 2].sum(axis=(1, 2)) / total


def two(images):
    """Two measures at once, with a note."""
    return Measurements(np.column_stack([ink(images), top_half_ink(images)]),
                        (Measure("dark", "mean grey", "grey", "tertiles", "image"),
                         Measure("top_heavy", "upper-half share of ink", "share", "tertiles", "image")), {})


def some_nan(images):
    v = ink(images)
    v[[3, 17]] = np.nan
    return v


def constant(images):
    return np.ones(len(images))


def raises(images):
    raise RuntimeError("the measuring device is broken")


def wrong_shape(images):
    return np.zeros(3)


def words(images):
    return ["a"] * len(images)
