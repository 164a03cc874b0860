"""What the fit stage hands an explainer: the rows it fits on (noise left out), without copies."""

from __future__ import annotations

import numpy as np

from pipeline.app.configuration.explainers import NOISE_LABEL, FitInputs


def test_rows_without_noise_are_handed_over_as_they_are_and_noise_is_left_out():
    X = np.arange(20.0).reshape(10, 2)
    labels = np.array([0, 1] * 5)
    inputs = FitInputs(X=X, labels=labels, feature_names=["a", "b"], n_clusters=2)
    Xf, yf = inputs.fitted()
    assert Xf is X and yf is labels  # 1M x 20 coordinates are not copied for every tree
    labels = labels.copy()
    labels[[3, 7]] = NOISE_LABEL
    Xf, yf = FitInputs(X=X, labels=labels, feature_names=["a", "b"], n_clusters=2).fitted()
    assert np.array_equal(Xf, X[labels != NOISE_LABEL]) and np.array_equal(yf, labels[labels != NOISE_LABEL])
