"""Explainer registry: turns an ``explainer`` config entry into a fitted tree estimator.

Each entry knows which estimator to build (imported lazily, so a module still being written
does not break the others), what it needs from the earlier stages, and how to fit it.
Capabilities the stages can provide:

``labels``   reference cluster labels (always; -1 = noise, left out of fitting)
``centers``  reference centres in feature space (k-means centres, GMM means)
``mixture``  a Gaussian mixture (means + covariances) in feature space (GMM, encoder prior)
``graph``    a similarity graph over the points (the spectral clustering's affinity graph)
``cavs``     concept activation vectors and the latent mixture (concepts != none)

To add an explainer, see ``docs/pipeline.md``: register an :class:`ExplainerSpec` with
:func:`register_explainer` and add ``conf/explainer/<name>.yaml``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from pipeline.app.registries import Registry, resolve_callable
from pipeline.validation import InvalidInputError


@dataclass
class FitInputs:
    """Everything an explainer may use, produced by the pipeline's stages.

    Attributes
    ----------
    X : ndarray of shape (n_samples, n_features)
        The coordinates trees cut on (latents, or concept coordinates after projection).
    labels : ndarray of shape (n_samples,)
        Reference cluster labels 0..K-1; -1 marks noise.
    feature_names : list of str
    n_clusters : int
    centers : ndarray of shape (K, n_features) or None
    mixture : (weights (K,), means (K, n_features), covariances (K, n_features, n_features)) or None
    graph : scipy.sparse matrix of shape (n_samples, n_samples) or None
    latent : ndarray of shape (n_samples, m) or None
        The encoder's latents (concept trees predict on them).
    latent_mixture : (weights, means (K, m), covariances (K, m, m)) or None
    cavs : ndarray of shape (n_concepts, m) or None
    concept_names : list of str or None
    """

    X: np.ndarray
    labels: np.ndarray
    feature_names: list
    n_clusters: int
    centers: np.ndarray | None = None
    mixture: tuple | None = None
    graph: Any = None
    latent: np.ndarray | None = None
    latent_mixture: tuple | None = None
    cavs: np.ndarray | None = None
    concept_names: list | None = None

    def capabilities(self) -> set[str]:
        have = {"labels"}
        if self.centers is not None:
            have.add("centers")
        if self.mixture is not None:
            have.add("mixture")
        if self.graph is not None:
            have.add("graph")
        if self.cavs is not None and self.latent_mixture is not None:
            have.add("cavs")
        return have

    def fit_rows(self) -> np.ndarray:
        """Boolean mask of the rows used for fitting (not noise)."""
        return self.labels >= 0


HOW_TO_PROVIDE = {
    "centers": "choose a clustering with centres: clustering=kmeans or clustering=gmm",
    "mixture": "choose a clustering that keeps a mixture: clustering=gmm (or clustering=encoder with a mixture prior)",
    "graph": "choose clustering=spectral, whose affinity graph is passed on",
    "cavs": "choose a concept set (concepts=<name>) and a clustering with a mixture (clustering=gmm)",
}


@dataclass(frozen=True)
class ExplainerSpec:
    """How to build and fit one kind of explainer.

    Attributes
    ----------
    target : str
        ``"module:Class"`` of the estimator, imported on first use.
    needs : frozenset of str
        Capabilities (see module docstring) the explainer cannot run without.
    fit : callable (estimator, FitInputs) -> estimator
    predict : callable (estimator, FitInputs) -> ndarray of shape (n_samples,)
    """

    target: str
    needs: frozenset = frozenset({"labels"})
    fit: Callable = None
    predict: Callable = None
    accepts_n_leaves: bool = True

    def build(self, n_leaves: int | None, random_state: int, params: dict, inputs: FitInputs):
        try:
            factory = resolve_callable(self.target)
        except (ImportError, AttributeError) as exc:
            raise InvalidInputError(
                f"explainer class {self.target} is not available ({exc}); it may not be implemented yet."
            ) from None
        kwargs = dict(params)
        if self.accepts_n_leaves:
            kwargs["n_leaves"] = n_leaves
        return factory(random_state=random_state, **kwargs)


def _fit_labels(est, d: FitInputs):
    m = d.fit_rows()
    return est.fit(d.X[m], d.labels[m], feature_names=d.feature_names)


def _fit_centers(est, d: FitInputs):
    m = d.fit_rows()
    return est.fit(d.X[m], d.labels[m], feature_names=d.feature_names, centers=d.centers)


def _fit_graph(est, d: FitInputs):
    # The reference labels name the leaves (majority label) and keep noise rows out of fitting.
    return est.fit(d.X, d.graph, feature_names=d.feature_names, y=d.labels)


def _fit_mmdt(est, d: FitInputs):
    if d.mixture is not None:  # Algorithm 1 on the reference mixture itself
        _, means, covs = d.mixture
        sigma = np.sqrt(np.einsum("kjj->kj", covs).max(axis=0))
        return est.fit_mixture(means, sigma, feature_names=d.feature_names)
    return _fit_labels(est, d)  # means and σ estimated per reference cluster


def _fit_concept_mmdt(est, d: FitInputs):
    _, means, covs = d.latent_mixture
    return est.fit_mixture(means, covs)


def _predict_x(est, d: FitInputs) -> np.ndarray:
    return np.asarray(est.predict(d.X), dtype=np.int64)


def _predict_latent(est, d: FitInputs) -> np.ndarray:
    return np.asarray(est.predict(d.latent), dtype=np.int64)


class _ConceptMMDTSpec(ExplainerSpec):
    def build(self, n_leaves, random_state, params, inputs):
        from pipeline.trees import ConceptMMDT

        return ConceptMMDT(inputs.cavs, concept_names=inputs.concept_names, random_state=random_state, **params)


EXPLAINERS = Registry("explainer", "Pick one of those (explainer=[mmdt,cart]) or register a new one (docs/pipeline.md).", {
    "mmdt": ExplainerSpec("pipeline.trees:MMDT", frozenset({"labels"}), _fit_mmdt, _predict_x, False),
    "random_mmdt": ExplainerSpec("pipeline.trees:RandomizedMMDT", frozenset({"labels"}), _fit_mmdt, _predict_x, False),
    "concept_mmdt": _ConceptMMDTSpec("pipeline.trees:ConceptMMDT", frozenset({"cavs"}), _fit_concept_mmdt,
                                     _predict_latent, False),
    "cart": ExplainerSpec("pipeline.trees:CART", frozenset({"labels"}), _fit_labels, _predict_x),
    "spex_clique": ExplainerSpec("pipeline.trees:SpExClique", frozenset({"labels"}), _fit_labels, _predict_x),
    "spex_knn": ExplainerSpec("pipeline.trees:SpExKNN", frozenset({"labels"}), _fit_labels, _predict_x),
    "spex_graph": ExplainerSpec("pipeline.trees:SpExGraph", frozenset({"graph"}), _fit_graph, _predict_x),
    "imm": ExplainerSpec("pipeline.trees:IMM", frozenset({"labels", "centers"}), _fit_centers, _predict_x),
    "emn": ExplainerSpec("pipeline.trees:EMN", frozenset({"labels", "centers"}), _fit_centers, _predict_x),
    "exkmc": ExplainerSpec("pipeline.trees:ExKMC", frozenset({"labels", "centers"}), _fit_centers, _predict_x),
})


class _TAOSpec(ExplainerSpec):
    """TAO takes ``n_clusters`` (from the clustering) and ``depth`` (default: ceil(log2 K)) instead of n_leaves."""

    def build(self, n_leaves, random_state, params, inputs):
        from pipeline.trees import TAO

        params = dict(params)
        if params.get("depth") is None:
            params["depth"] = max(1, int(np.ceil(np.log2(inputs.n_clusters))))
        return TAO(n_clusters=inputs.n_clusters, random_state=random_state, **params)


EXPLAINERS["tao"] = _TAOSpec("pipeline.trees:TAO", frozenset({"labels"}), _fit_centers, _predict_x, False)


def register_explainer(name: str, spec: ExplainerSpec) -> None:
    """Add (or replace) the explainer ``name``."""
    EXPLAINERS.register(name, spec)


def get_spec(name: str) -> ExplainerSpec:
    return EXPLAINERS.lookup(name)


def check_provided(row: str, name: str, inputs: FitInputs, clustering: str) -> None:
    """Raise a clear error if the stages cannot provide what explainer ``name`` needs."""
    missing = sorted(get_spec(name).needs - inputs.capabilities())
    if missing:
        hints = "; ".join(HOW_TO_PROVIDE.get(m, m) for m in missing)
        raise InvalidInputError(
            f"explainer {row!r} ({name}) needs {', '.join(missing)}, which the pipeline cannot provide with "
            f"clustering={clustering} and the current concepts setting. To fix it: {hints}; or drop {row!r} "
            "from the explainer list."
        )


def fit_explainer(row: str, config: dict, inputs: FitInputs, random_state: int, clustering: str = "?"):
    """Build, fit and apply one explainer.

    Parameters
    ----------
    row : str
        The explainer's row name (its key in the ``explainer`` config).
    config : dict
        ``{"name": ..., "n_leaves": ..., "params": {...}}``.

    Returns
    -------
    estimator : fitted estimator with ``tree_``
    predictions : ndarray of shape (n_samples,), int64
    """
    name = config["name"]
    spec = get_spec(name)
    check_provided(row, name, inputs, clustering)
    est = spec.build(config.get("n_leaves"), random_state, dict(config.get("params") or {}), inputs)
    est = spec.fit(est, inputs)
    return est, spec.predict(est, inputs)
