"""Explainers: an ``explainer`` config row -> a fitted tree estimator and its predictions.

A row is ``{_target_: <estimator class>, name: <method name>, fit: <protocol>, n_leaves, params}``.
The estimator is built through :mod:`pipeline.app.configuration.instantiate` with ``params`` plus whichever
of ``n_leaves``, ``random_state``, ``n_clusters``, ``depth`` (default ceil(log2 K)), ``cavs``
and ``concept_names`` its constructor names. The ``fit`` protocol says how the fit stage feeds
it (:data:`PROTOCOLS`) and so what it needs from the clustering
(:mod:`pipeline.app.startup.capabilities`); the estimator class declares its own (``fit_protocol``), so a
row sets ``fit`` only to override it. Its display name is the class's ``title`` (a row may set
``title``: ``concept_cart`` is Concept-CART). Any scikit-learn-style estimator whose ``fit`` matches a
protocol plugs in with one config file; nothing is registered.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Callable

import numpy as np

from pipeline.app.configuration.instantiate import call, check_params, factory, locate, target_of
from pipeline.concepts.projection import mixture_sigma
from pipeline.validation import InvalidInputError

#: The label the pipeline's reference clusterings give noise points (DBSCAN, HDBSCAN); passed to
#: every explainer that takes ``noise_label`` (the library's default is None: no label is noise).
NOISE_LABEL = -1


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
        return self.labels != NOISE_LABEL

    def fitted(self) -> tuple[np.ndarray, np.ndarray]:
        """``(X, labels)`` of the rows used for fitting: the arrays themselves when no row is noise
        (a masked copy of 1M x 20 coordinates took 0.2 s for every tree)."""
        m = self.fit_rows()
        if m.all():
            return self.X, self.labels
        return self.X[m], self.labels[m]


@dataclass(frozen=True)
class Protocol:
    """How the fit stage feeds one family of estimators.

    Attributes
    ----------
    needs : frozenset of str
        Capabilities (see :mod:`pipeline.app.startup.capabilities`) it cannot run without.
    fit : callable (estimator, FitInputs) -> estimator
    predict : callable (estimator, FitInputs) -> (predictions, leaves or None), each of shape (n_samples,)
    on_latents : bool
        The fitted estimator predicts from the latents (it projects them itself), not from ``X``.
    """

    needs: frozenset
    fit: Callable
    predict: Callable
    on_latents: bool = False


def _fit_labels(est, d: FitInputs):
    X, labels = d.fitted()
    return est.fit(X, labels, feature_names=d.feature_names)


def _fit_centers(est, d: FitInputs):
    X, labels = d.fitted()
    return est.fit(X, labels, feature_names=d.feature_names, centers=d.centers)


def _fit_start(est, d: FitInputs):
    # TAO is a clusterer (y ignored): the reference clustering is its starting point.
    X, labels = d.fitted()
    return est.fit(X, init_labels=labels, feature_names=d.feature_names, centers=d.centers)


def _fit_graph(est, d: FitInputs):
    # The reference labels name the leaves (majority label) and keep noise rows out of fitting.
    return est.fit(d.X, d.graph, feature_names=d.feature_names, y=d.labels)


def _keep_exact(est, rows):
    """A tree grown from a mixture's parameters saw no rows: let it keep the run's rows nearest each
    cut, so its JSON and every printed rule route them exactly without the data (issue 36)."""
    tree = getattr(est, "tree_", None)
    if hasattr(tree, "record_neighbours") and rows is not None:
        tree.record_neighbours(rows)
    return est


def _fit_mixture(est, d: FitInputs):
    if d.mixture is not None:  # Algorithm 1 on the reference mixture itself
        _, means, covs = d.mixture
        return _keep_exact(est.fit_mixture(means, mixture_sigma(covs), feature_names=d.feature_names), d.X)
    return _fit_labels(est, d)  # means and σ estimated per reference cluster


def _fit_concept_mixture(est, d: FitInputs):
    _, means, covs = d.latent_mixture
    est = est.fit_mixture(means, covs)
    return _keep_exact(est, est.transform(d.latent) if d.latent is not None and hasattr(est, "transform") else None)


def _predict_x(est, d: FitInputs) -> tuple[np.ndarray, np.ndarray | None]:
    from pipeline.trees._fitting import predict_with_leaves

    return predict_with_leaves(est, d.X)  # the leaves too: the report reads the tree on these rows


def _predict_latent(est, d: FitInputs) -> tuple[np.ndarray, None]:
    return np.asarray(est.predict(d.latent), dtype=np.int64), None


PROTOCOLS = {
    # fit(X, labels, feature_names): CART, SpEx-Clique, SpEx-kNN
    "labels": Protocol(frozenset({"labels"}), _fit_labels, _predict_x),
    # fit(X, labels, feature_names, centers): IMM, EMN, ExKMC
    "centers": Protocol(frozenset({"labels", "centers"}), _fit_centers, _predict_x),
    # the same with centers=None allowed: TAO
    "optional_centers": Protocol(frozenset({"labels"}), _fit_start, _predict_x),
    # fit(X, graph, feature_names, y): SpExGraph
    "graph": Protocol(frozenset({"graph"}), _fit_graph, _predict_x),
    # fit_mixture(means, sigma) on the reference mixture, else fit(X, labels): MMDT, RandomizedMMDT
    "mixture": Protocol(frozenset({"labels"}), _fit_mixture, _predict_x),
    # fit_mixture(latent means, covariances), predict on latents: ConceptMMDT
    "concept_mixture": Protocol(frozenset({"cavs"}), _fit_concept_mixture, _predict_latent, on_latents=True),
}


def protocol(spec: dict) -> Protocol:
    """The fit protocol of an explainer row: ``fit`` when the row sets it, else the one its
    estimator class declares (``fit_protocol``), else ``labels``."""
    name = spec.get("fit") or getattr(locate(target_of(spec, "explainer"), "explainer"), "fit_protocol", None) or "labels"
    if name not in PROTOCOLS:
        raise InvalidInputError(f"explainer {spec.get('name')!r}: unknown fit protocol {name!r}; choose one of "
                                f"{sorted(PROTOCOLS)} (see pipeline.app.configuration.explainers).")
    return PROTOCOLS[name]


def build(spec: dict, inputs: FitInputs, random_state: int):
    """The unfitted estimator of an explainer row."""
    offered = {"n_leaves": spec.get("n_leaves"), "random_state": random_state, "n_clusters": inputs.n_clusters,
               "depth": max(1, int(np.ceil(np.log2(inputs.n_clusters)))), "cavs": inputs.cavs,
               "concept_names": inputs.concept_names, "noise_label": NOISE_LABEL}
    return call(factory(spec, f"explainer {spec.get('name')!r}"), "explainer", offered=offered)


def fit_explainer(row: str, config: dict, inputs: FitInputs, random_state: int):
    """Build, fit and apply one explainer (the fit stage first checks, with
    :func:`pipeline.app.startup.capabilities.check_provided`, that ``inputs`` hold what it needs).

    Parameters
    ----------
    row : str
        The explainer's row name (its key in the ``explainer`` config).
    config : dict
        ``{"_target_": ..., "name": ..., "fit": ..., "n_leaves": ..., "params": {...}}``.

    Returns
    -------
    estimator : fitted estimator with ``tree_``
    predictions : ndarray of shape (n_samples,), int64
    leaves : ndarray of shape (n_samples,) or None
        The leaf of each row (a tree on ``inputs.X``; None for one that predicts from latents).
    """
    from sklearn.utils._param_validation import InvalidParameterError

    proto = protocol(config)
    check_params(config, f"explainer.{row}")  # misspelt names (also checked before any stage runs)
    target = locate(target_of(config, "explainer"), "explainer")
    try:
        est = proto.fit(build(config, inputs, random_state), inputs)
    except InvalidParameterError as exc:  # the estimator's own _parameter_constraints, checked at fit
        raise InvalidInputError(parameter_help(row, target, str(exc).rstrip("."))) from None
    return (est, *proto.predict(est, inputs))


def parameter_help(row: str, target, problem: str) -> str:
    """One paragraph: what was wrong with an explainer's parameters, which it takes, how to set one."""
    sig = inspect.signature(target)
    listing = ", ".join(f"{n}={p.default!r}" if p.default is not p.empty else n
                        for n, p in sig.parameters.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY))
    return (f"explainer {row!r} ({target.__module__}.{target.__qualname__}): {problem}. Its parameters are: "
            f"{listing}. Set one with explainer.{row}.params.<name>=<value> (prefix a + when the explainer's "
            "config file does not list that key).")


# ------------------------------------------------------------------ display names
def shipped_explainer(name: str) -> dict | None:
    """The explainer row ``conf/explainer/<name>.yaml`` ships (its node), or None."""
    import yaml

    from pipeline.app.configuration.config import CONFIG_DIR

    path = CONFIG_DIR / "explainer" / f"{name}.yaml"
    if not name.isidentifier() or not path.is_file():
        return None
    node = (yaml.safe_load(path.read_text()) or {}).get(name)
    return node if isinstance(node, dict) else None


@lru_cache(maxsize=None)
def method_name(name: str) -> str:
    """Display name of an explainer method or shipped row (``mmdt`` -> ``MMDT``): the ``title`` its
    shipped config sets (``concept_cart``: Concept-CART), else the ``title`` attribute of that
    config's ``_target_`` (:class:`pipeline.trees.MMDT`: MMDT); any other name with spaces for ``_``."""
    node = shipped_explainer(name)
    if node is None:
        return name.replace("_", " ")
    if node.get("title"):
        return str(node["title"])
    return getattr(locate(node["_target_"], f"explainer.{name}"), "title", None) or name.replace("_", " ")
