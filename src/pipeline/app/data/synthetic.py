"""Synthetic Gaussian mixtures as in the MMDT paper's appendix (Appendix G)."""

from __future__ import annotations

import numpy as np
from scipy.stats import special_ortho_group

from pipeline.app.data.dataset import Dataset, reads
from pipeline.validation import InvalidInputError


def sample_means_in_ball(n_components: int, n_features: int, radius: float, min_distance: float,
                         rng: np.random.RandomState, max_tries: int = 10000) -> np.ndarray:
    """K points uniform in the d-ball of ``radius``, pairwise at least ``min_distance`` apart (rejection)."""
    means: list[np.ndarray] = []
    for _ in range(max_tries):
        v = rng.normal(size=n_features)
        point = v / np.linalg.norm(v) * radius * rng.uniform() ** (1.0 / n_features)
        if all(np.linalg.norm(point - m) >= min_distance for m in means):
            means.append(point)
            if len(means) == n_components:
                return np.array(means)
    raise InvalidInputError(
        f"could not place {n_components} means at least {min_distance} apart in a ball of radius {radius} "
        f"(d={n_features}); lower dataset.params.min_distance or raise dataset.params.radius."
    )


def random_covariance(n_features: int, scale: float, rng: np.random.RandomState) -> np.ndarray:
    """A random positive-definite covariance: random rotation, eigenvalues uniform in [0.25, 1] * scale."""
    eig = rng.uniform(0.25, 1.0, size=n_features) * scale
    if n_features == 1:
        return np.diag(eig)
    Q = special_ortho_group.rvs(n_features, random_state=rng)
    return (Q * eig) @ Q.T


def make_synthetic_gmm(n_components=5, n_features=2, radius=50.0, min_distance=20.0, n_min=1000, n_max=2000,
                       covariance_scale=4.0, random_state=0):
    """Sample a GMM dataset.

    Returns
    -------
    X : ndarray of shape (n_samples, n_features)
    y : ndarray of shape (n_samples,) int64 component index
    means : ndarray of shape (n_components, n_features)
    covariances : ndarray of shape (n_components, n_features, n_features)
    """
    if n_components < 2 or n_features < 1 or not 1 <= n_min <= n_max:
        raise InvalidInputError("synthetic_gmm needs n_components >= 2, n_features >= 1 and 1 <= n_min <= n_max.")
    rng = np.random.RandomState(random_state)
    means = sample_means_in_ball(n_components, n_features, radius, min_distance, rng)
    covs = np.stack([random_covariance(n_features, covariance_scale, rng) for _ in range(n_components)])
    sizes = rng.randint(n_min, n_max + 1, size=n_components)
    X = np.concatenate([rng.multivariate_normal(m, c, size=s) for m, c, s in zip(means, covs, sizes)])
    y = np.repeat(np.arange(n_components), sizes).astype(np.int64)
    return X, y, means, covs


@reads()
def load_synthetic_gmm(spec: dict, paths: dict, random_state: int = 0, **params) -> Dataset:
    """A sample of :func:`make_synthetic_gmm` (``params`` are its keyword arguments)."""
    X, y, means, covs = make_synthetic_gmm(random_state=random_state, **params)
    return Dataset(
        name="synthetic_gmm", X=X, y=y, kind="tabular", feature_names=[f"x{j}" for j in range(X.shape[1])],
        meta={"source": "MMDT appendix G generator", "params": params, "means": means.tolist()},
    )


load_synthetic_gmm.generated_from_seed = True  # the run's seed draws the data (python -m pipeline.explain reads it)
