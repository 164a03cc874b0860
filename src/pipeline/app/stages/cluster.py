"""Stage ``cluster``: latents -> the reference clustering (labels, centres, mixture, graph).

``clustering._target_`` names any callable ``fn(X, ...) -> Clustering``; the stage offers it
``n_clusters`` (``clustering.n_clusters`` or the number of classes), ``random_state``,
``y_true``, ``candidates`` and ``encode`` (the encode artifact, for :func:`encoder_head`)
and passes those its signature names.
"""

from __future__ import annotations

import logging

import numpy as np

from pipeline.app.artifacts import ClusterArtifact, EncodeArtifact, LoadArtifact
from pipeline.app.instantiate import accepts, call, factory
from pipeline.app.stages.framework import Stage
from pipeline.clustering import Clustering, check_enough_clusters, mixture_from_labels
from pipeline.validation import InvalidInputError

log = logging.getLogger(__name__)


def resolve_n_clusters(cfg: dict, y, Z=None) -> int:
    """``clustering.n_clusters``, else the number of ground-truth classes, else (no labels) the K
    with the lowest BIC among 2..10 (:func:`pipeline.clustering.choose_n_clusters`) on the latents ``Z``."""
    k = cfg["clustering"].get("n_clusters")
    if k is not None:
        return int(k)
    if y is None:
        if Z is None:
            raise InvalidInputError("the dataset has no labels, so clustering.n_clusters cannot default to the "
                                    "number of classes; set clustering.n_clusters=<K>.")
        from pipeline.clustering import choose_n_clusters

        k, bic = choose_n_clusters(Z, random_state=cfg["seed"])
        log.info("no labels and no clustering.n_clusters: K=%d chosen by BIC over %s (set clustering.n_clusters=<K> "
                 "to choose)", k, {j: round(b) for j, b in bic.items()})
        return k
    return int(np.unique(y[y >= 0]).size)


def clustering_to_artifact(c: Clustering) -> ClusterArtifact:
    return ClusterArtifact.from_clustering(c)


def graph_from_artifact(a: ClusterArtifact):
    return a.graph()


def encoder_head(X, encode: EncodeArtifact) -> Clustering:
    """``clustering=encoder``: the encoder's own cluster head (and its mixture prior, if any)."""
    if encode.head_labels is None:
        raise InvalidInputError("clustering=encoder needs an encoder with its own cluster head (e.g. encoder=vade); "
                                "the configured encoder has none. Choose clustering=gmm or another encoder.")
    c = Clustering(encode.head_labels, "encoder")
    if encode.mixture_means is not None:
        c.weights, c.means, c.covariances = encode.mixture_weights, encode.mixture_means, encode.mixture_covariances
        c.centers = c.means
    elif X is not None and len(X) == len(c.labels):
        # a cluster head without a prior (contrastive clustering): the clusters' empirical mixture in
        # latent space, which Concept-MMDT projects on the CAVs (as the MMDT paper does with CC labels)
        used, c.labels = np.unique(c.labels, return_inverse=True)
        if len(used) < int(used.max()) + 1:
            log.warning("clustering=encoder: the cluster head left %d of its %d clusters empty; %d clusters remain",
                        int(used.max()) + 1 - len(used), int(used.max()) + 1, len(used))
        c.labels = c.labels.astype(np.int64)
        c.weights, c.means, c.covariances = mixture_from_labels(X, c.labels)
        c.centers = c.means
    check_enough_clusters(c)
    return c


def _config(cfg: dict) -> dict:
    return {"clustering": cfg["clustering"], "seed": cfg["seed"]}


def _compute(cfg: dict, load: LoadArtifact, encode: EncodeArtifact) -> ClusterArtifact:
    spec = cfg["clustering"]
    y = load.y
    offered = {"random_state": cfg["seed"], "y_true": y, "candidates": spec.get("candidates") or (), "encode": encode}
    if accepts(spec, "n_clusters", "clustering"):
        offered["n_clusters"] = resolve_n_clusters(cfg, y, encode.Z)
        from pipeline.app.checks import check_cluster_sizes

        check_cluster_sizes(len(encode.Z), offered["n_clusters"])  # 2 samples per cluster, else ARI/q mean nothing
    c = call(factory(spec, "clustering"), "clustering", encode.Z, offered=offered)
    if not isinstance(c, Clustering):
        raise InvalidInputError(f"clustering._target_={spec['_target_']} returned {type(c).__name__}, not a "
                                "pipeline.clustering.Clustering.")
    return clustering_to_artifact(c)


# version 2 (issue 36): GMM restarts fitted one by one, a restart with a degenerate component not
# chosen, and the restarts' stability kept in the artifact's scores
CLUSTER = Stage("cluster", ("load", "encode"), _config, _compute, version=2, artifact=ClusterArtifact)
