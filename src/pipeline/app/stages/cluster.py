"""Stage ``cluster``: latents -> the reference clustering (labels, centres, mixture, graph).

``clustering._target_`` names any callable ``fn(X, ...) -> Clustering``; the stage offers it
``n_clusters`` (``clustering.n_clusters`` or the number of classes), ``random_state``,
``y_true``, ``candidates`` and ``encode`` (the encode artifact, for :func:`encoder_head`)
and passes those its signature names.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from pipeline.app.stores.artifacts import ClusterArtifact, EncodeArtifact, LoadArtifact
from pipeline.app.configuration.instantiate import accepts, call, factory
from pipeline.app.stages.framework import Stage
from pipeline.validation import InvalidInputError

if TYPE_CHECKING:  # scikit-learn loads with pipeline.clustering: only when a clustering is computed
    from pipeline.clustering import Clustering

log = logging.getLogger(__name__)


def resolve_n_clusters(plan, y, Z=None) -> int:
    """The plan's ``n_clusters`` (``clustering.n_clusters``), else the number of ground-truth classes,
    else (no labels) the K with the lowest BIC among 2..10 (:func:`pipeline.clustering.choose_n_clusters`)
    on the latents ``Z``."""
    k = plan.n_clusters
    if k is not None:
        return int(k)
    if y is None:
        if Z is None:
            raise InvalidInputError("the dataset has no labels, so clustering.n_clusters cannot default to the "
                                    "number of classes; set clustering.n_clusters=<K>.")
        from pipeline.clustering import choose_n_clusters

        k, bic = choose_n_clusters(Z, random_state=plan.cfg["seed"])
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
    from pipeline.clustering import Clustering, check_enough_clusters, mixture_from_labels

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
        if not np.array_equal(used, np.arange(len(used))):  # the head's number of each cluster (its predictor)
            c.scores = {"head_labels": used.astype(np.int64).tolist()}
        c.labels = c.labels.astype(np.int64)
        c.weights, c.means, c.covariances = mixture_from_labels(X, c.labels)
        c.centers = c.means
    check_enough_clusters(c)
    return c


encoder_head.labels_every_row = True  # the encoder labelled every row: no fit on a sample, no assignment pass


def _config(cfg: dict) -> dict:
    return {"clustering": cfg["clustering"], "seed": cfg["seed"], **_budget_key(cfg)}


def _budget_key(cfg: dict) -> dict:
    # the memory budget decides whether the clustering is fitted on a sample: it is part of the key
    # only when it is set (so existing keys of in-memory runs stay valid)
    budget = (cfg["dataset"] or {}).get("memory_budget", "auto")
    return {} if budget in (None, "auto") else {"memory_budget": budget}


def sample_of(cfg: dict, plan, Z) -> np.ndarray | None:
    """Sorted rows the clustering is fitted on (uniform, seeded), or None for every row: the plan's
    sample for the clustering (``clustering.sample_rows``, else 20,000 when the latents exceed
    ``dataset.memory_budget``)."""
    from pipeline.app.configuration.instantiate import locate

    if getattr(locate(cfg["clustering"]["_target_"], "clustering"), "labels_every_row", False):
        return None  # the encoder's head labelled every row already
    rows = plan.rows.sample_size("clustering", Z)
    if rows is None:
        return None
    return np.sort(np.random.default_rng(cfg["seed"]).choice(len(Z), rows, replace=False))


def _compute(cfg: dict, load: LoadArtifact, encode: EncodeArtifact, plan, ctx) -> ClusterArtifact:
    from pipeline.clustering import Clustering

    spec = cfg["clustering"]
    y = load.y
    Z = encode.Z
    rows = sample_of(cfg, plan, Z)
    if rows is None:  # every row, in memory (a view is read whole here: it fits the budget)
        from pipeline.app.data.budget import rows_in_memory

        Zfit, y_fit = check_finite_chunk(rows_in_memory(Z, plan, "the clustering is fitted on every row", "clustering"), 0, Z), y
    else:
        Zfit = check_finite_chunk(Z[rows], 0, Z, rows)
        y_fit = None if y is None else y[rows]
        log.info("%s fitted on a uniform sample of %d of %d rows (clustering.sample_rows); every row is then "
                 "assigned in one pass", spec.get("name"), rows.size, len(Z))
    offered = {"random_state": cfg["seed"], "y_true": y_fit, "candidates": spec.get("candidates") or (),
               "encode": encode}
    if accepts(spec, "n_clusters", "clustering"):
        offered["n_clusters"] = resolve_n_clusters(plan, y, Zfit)
        from pipeline.app.startup.checks import check_cluster_sizes

        check_cluster_sizes(len(Z), offered["n_clusters"])  # 2 samples per cluster, else ARI/q mean nothing
    c = call(factory(spec, "clustering"), "clustering", Zfit, offered=offered)
    if not isinstance(c, Clustering):
        raise InvalidInputError(f"clustering._target_={spec['_target_']} returned {type(c).__name__}, not a "
                                "pipeline.clustering.Clustering.")
    if rows is None:
        return clustering_to_artifact(c)
    fit_labels = np.asarray(c.labels, dtype=np.int64)
    c = _assign_every_row(cfg, c, Z, Zfit, rows, ctx)
    return ClusterArtifact.from_clustering(c, fit_rows=rows, fit_labels=fit_labels)


def check_finite_chunk(block: np.ndarray, start: int, source, rows=None) -> np.ndarray:
    """``block`` (rows of ``source`` from ``start``, or the ``rows``) unchanged, or a clear error
    naming the first rows with NaN/inf values. One sum proves a chunk finite (NaN and inf reach
    it); only a chunk whose sum is not finite is scanned entry by entry (no n x d mask per chunk:
    10M x 512 latents are 5 billion entries)."""
    from pipeline.validation import all_finite

    if all_finite(np.asarray(block)):
        return block
    bad = ~np.isfinite(block)
    if bad.any():
        where = np.unique(np.nonzero(bad)[0])
        first = (where + start if rows is None else np.asarray(rows)[where])[:5].tolist()
        where_from = getattr(source, "source", "the latents")
        raise InvalidInputError(f"{where_from} holds NaN or inf values in rows {first} (0-based; {where.size} such rows "
                                "in this chunk); every row must be finite. Remove or fix those rows.")
    return block


@dataclass(frozen=True)
class AssignChunk:
    """Labels of one chunk under the predictor of a clustering fitted on a sample
    (:func:`pipeline.cluster_heads.predictor_of`; picklable: Dask tasks)."""

    predictor: object
    source: object = None

    def __call__(self, rows: np.ndarray, start: int) -> dict:
        check_finite_chunk(rows, start, self.source)
        return {"labels": self.predictor.predict(rows, check_input=False)}


def _assign_every_row(cfg: dict, c: Clustering, Z, Zfit, rows, ctx) -> Clustering:
    """Every row's label under the predictor of the clustering fitted on the sample ``rows``: one
    pass over the latents by the run's executor (which the concept coordinates' pass rides along)."""
    from pipeline.app.execution.chunk_map import resume_folder
    from pipeline.cluster_heads import NearestRowPredictor, predictor_of
    from pipeline.clustering import Clustering

    fitted = np.asarray(c.labels)
    predictor = predictor_of(c, Zfit)
    if not isinstance(predictor, NearestRowPredictor):  # the fitted rows keep their label only if the rule agrees
        agree = np.mean(predictor.predict(Zfit) == fitted)
        if agree < 1:
            log.info("%s: %.4f of the sample's rows keep their fitted label under the assignment rule",
                     c.method, agree)
    task = AssignChunk(predictor, getattr(Z, "source", None))
    row_bytes = int(np.prod(Z.shape[1:])) * 8
    labels = ctx.work(cfg).map_rows(task, Z, row_bytes, resume_folder(ctx, "cluster"), desc="assign")["labels"]
    if c.graph is not None:
        log.info("%s's graph covers the %d sampled rows only; it is not kept (graph explainers need the in-memory "
                 "run: clustering.sample_rows=null with a larger dataset.memory_budget)", c.method, len(rows))
    scores = dict(c.scores or {})
    scores["sample"] = {"rows": int(len(rows)), "of": int(len(Z)),
                        "note": "fitted on a uniform sample; every row assigned by the fitted model"}
    return Clustering(labels.astype(np.int64), c.method, centers=c.centers, weights=c.weights, means=c.means,
                      covariances=c.covariances, graph=None, uses_labels=c.uses_labels, scores=scores)


# version 2 (issue 36): GMM restarts fitted one by one, a restart with a degenerate component not
# chosen, and the restarts' stability kept in the artifact's scores; version 3 (issue 50): the kept
# restart's agreement with the others and each kept cluster's best Jaccard index in each of them;
# version 4 (issue 49): a fit on a sample keeps its rows and their fitted labels (the nearest-row
# predictor of the saved explainer)
CLUSTER = Stage("cluster", ("load", "encode"), _config, _compute, version=4, artifact=ClusterArtifact)
