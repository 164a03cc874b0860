"""Stage ``fit.<row>``: one cached artifact per explainer row (tree JSON, predictions, fit time)."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import numpy as np

from pipeline.app.stores.artifacts import ClusterArtifact, FitArtifact, ProjectArtifact
from pipeline.app.startup.capabilities import check_provided
from pipeline.app.configuration.explainers import FitInputs, fit_explainer, protocol
from pipeline.app.stages.framework import RowFailed, Stage
from pipeline.validation import InvalidInputError

log = logging.getLogger(__name__)


def fit_inputs(project: ProjectArtifact, cluster: ClusterArtifact) -> FitInputs:
    from pipeline.app.data.chunked import as_array

    labels = cluster.labels
    return FitInputs(
        X=as_array(project.X, np.float64), labels=labels,
        feature_names=list(project.feature_names),
        n_clusters=_n_labels(labels), centers=project.centers,
        mixture=project.mixture, graph=cluster.graph(), latent=project.latent_X,
        latent_mixture=project.latent_mixture, cavs=project.cavs, concept_names=project.concept_names,
    )


def held_whole(inputs: FitInputs) -> bool:
    """Whether the coordinates and the latents are held in memory (the explainer is fitted on them
    whole); views of files are read as the row plan allows (:func:`_fit_sampled`)."""
    from pipeline.app.data.chunked import held

    return held(inputs.X) is not None and (inputs.latent is None or held(inputs.latent) is not None)


def _n_labels(labels) -> int:
    """How many distinct non-negative labels (noise, -1, left out): counted for integer labels of a
    small range (10M cluster ids: no sort of them)."""
    kept = np.asarray(labels)
    kept = kept[kept >= 0]
    if kept.dtype.kind in "iu" and kept.size and int(kept.max()) < 1 << 20:
        return int(np.count_nonzero(np.bincount(kept)))
    return int(np.unique(kept).size)


def compact_ids(ids: np.ndarray) -> np.ndarray:
    """Cluster ids in the smallest signed integer type that holds them (a 10M-row run's four
    trees kept 80 MB of int64 each, 10 MB as int8); read them with ``dtype=np.int64``."""
    ids = np.asarray(ids)
    if ids.dtype.kind not in "iu" or not ids.size:
        return ids
    lo, hi = int(ids.min()), int(ids.max())
    for kind in (np.int8, np.int16, np.int32):
        info = np.iinfo(kind)
        if info.min <= lo and hi <= info.max:
            return ids.astype(kind)
    return ids


def fit_stage(row: str) -> Stage:
    """The fit stage of explainer row ``row`` (its config is ``cfg["explainer"][row]``)."""

    def config(cfg: dict) -> dict:
        sample = {k: v for k, v in (("fit.sample_rows", (cfg.get("fit") or {}).get("sample_rows")),
                                    ("memory_budget", cfg["dataset"].get("memory_budget", "auto")))
                  if v not in (None, "auto")}  # only when set: in-memory runs keep their keys
        explainer = {k: v for k, v in cfg["explainer"][row].items() if k != "title"}  # display only
        return {"explainer": explainer, "seed": cfg["seed"], **sample}

    def compute(cfg: dict, project: ProjectArtifact, cluster: ClusterArtifact, plan, ctx) -> FitArtifact:
        try:
            return fit_row(cfg, row, project, cluster, plan, ctx)
        except InvalidInputError as exc:  # this row only: the runner reports it and the other rows go on
            raise RowFailed(row, "explainer", exc) from None

    # version 2 (issue 36): the tree keeps the training values around each cut (exact printed rules)
    return Stage(f"fit.{row}", ("project", "cluster"), config, compute, store="fit", version=2, artifact=FitArtifact)


def tree_sample(plan, seed: int, X, labels, latents=None) -> np.ndarray | None:
    """Sorted rows the trees are fitted on, or None for every row: the plan's sample for the trees
    (``fit.sample_rows``, else every row, unless the run is out of core — ``latents`` larger than
    ``dataset.memory_budget`` — and the coordinates of every row (float64) would take more than a
    quarter of the budget: then a stratified sample, by reference cluster, of 50,000 rows, fewer if
    those do not fit)."""
    rows = plan.rows.sample_size("trees", X, latents)
    if rows is None:
        return None
    from pipeline.clustering import stratified_sample  # scikit-learn's clusterings: only for a sample

    return stratified_sample(np.asarray(labels), rows, seed)


@dataclass(frozen=True)
class PredictChunk:
    """A fitted tree's clusters for one chunk of rows (picklable: Dask tasks)."""

    estimator: object
    leaves: bool = True  # the rows are the tree's own features (not latents it projects first): keep their leaves

    def __call__(self, rows: np.ndarray, start: int) -> dict:
        from pipeline.trees._fitting import predict_with_leaves

        rows = np.asarray(rows, dtype=np.float64)
        if not self.leaves:
            return {"pred": np.asarray(self.estimator.predict(rows), dtype=np.int64)}
        pred, leaves = predict_with_leaves(self.estimator, rows)
        return {"pred": pred} if leaves is None else {"pred": pred, "leaves": leaves}


def _fit_sampled(cfg: dict, row: str, spec: dict, inputs: FitInputs, rows, plan, ctx):
    """The tree fitted on the stratified sample ``rows`` (:func:`tree_sample`; None: every row, of
    coordinates read from disk), then every row predicted chunk by chunk."""
    import dataclasses

    from pipeline.app.data.budget import rows_in_memory

    n = len(inputs.labels)
    idx = np.arange(n) if rows is None else rows
    latent = inputs.latent
    on_latent = protocol(spec).on_latents
    if latent is not None and (rows is not None or on_latent):
        latent_rows = idx if rows is not None else tree_sample(plan, cfg["seed"], latent, inputs.labels, latent)
        latent = latent[latent_rows if latent_rows is not None else idx]
    else:
        latent = None
    X = inputs.X[idx] if rows is not None else rows_in_memory(inputs.X, plan, "the trees are fitted on every row",
                                                                     "trees")
    sub = dataclasses.replace(inputs, X=np.asarray(X, dtype=np.float64),
                              labels=np.asarray(inputs.labels)[idx], latent=latent,
                              graph=inputs.graph if rows is None else None)
    if rows is not None:
        why = ("fit.sample_rows" if (cfg.get("fit") or {}).get("sample_rows") is not None else
               f"the coordinates of every row would take {n * int(np.prod(inputs.X.shape[1:])) * 8 / 1e6:.0f} MB, "
               "over a quarter of dataset.memory_budget; fit.sample_rows sets the sample")
        log.info("%s: fitted on a stratified sample of %d of %d rows (%s); every row is predicted and evaluated",
                 row, idx.size, n, why)
    est, pred, leaves = fit_explainer(row, spec, sub, cfg["seed"])
    source = inputs.latent if on_latent else inputs.X
    fit_rows = None if rows is None else int(idx.size)
    if rows is None and not on_latent:
        return est, pred, leaves, fit_rows
    width = int(np.prod(source.shape[1:])) * 8
    out = ctx.work(cfg).map_rows(PredictChunk(est, leaves=not on_latent), source, width, desc=f"predict {row}")
    return est, out["pred"], out.get("leaves"), fit_rows


def fix_hint(cfg: dict, row: str, message: str, concepts: bool) -> str:
    """The options that fix a row that could not be fitted, as a sentence (empty when none is known)."""
    if "Assumption 3" not in message:
        return ""
    others = [r for r in cfg["explainer"] if r != row]
    keep = f"explainer=[{','.join(others)}]" if others else "explainer=[concept_cart]"
    if concepts:
        return (f" In concept coordinates this means no concept tells those reference clusters apart. Fix: add a "
                f"concept that separates them (a subfolder of concepts.path), or explain the clusters in the latents "
                f"with concepts=none explainer=[mmdt,cart], or leave this row out: {keep}.")
    return (f" Fix: fewer reference clusters (clustering.n_clusters=<K-1>), or leave this row out: "
            f"{keep if others else 'explainer=[cart]'}.")


def fit_row(cfg: dict, row: str, project: ProjectArtifact, cluster: ClusterArtifact, plan, ctx) -> FitArtifact:
    """Fit explainer row ``row`` on the projected data and the reference clustering."""
    inputs = fit_inputs(project, cluster)
    spec = cfg["explainer"][row]
    start = time.perf_counter()
    check_provided(row, spec, inputs.capabilities(), cfg["clustering"]["name"], inputs.cavs is None)
    fit_rows = None
    try:
        rows = tree_sample(plan, cfg["seed"], inputs.X, inputs.labels, inputs.latent)
        if rows is not None or not held_whole(inputs):
            est, pred, leaves, fit_rows = _fit_sampled(cfg, row, spec, inputs, rows, plan, ctx)
        else:
            est, pred, leaves = fit_explainer(row, spec, inputs, cfg["seed"])
    except InvalidInputError as exc:
        raise InvalidInputError(f"{exc}{fix_hint(cfg, row, str(exc), inputs.cavs is not None)}") from None
    seconds = time.perf_counter() - start
    tree = est.tree_
    log.info("fitted %s (%s): %d leaves, depth %d, %.4fs", row, spec["name"], tree.n_leaves, tree.depth, seconds)
    stats = {}
    for attr, key in (("means_", "means"), ("sigma_", "sigma"), ("concept_means_", "means"),
                      ("concept_sigma_", "sigma")):
        if hasattr(est, attr):
            stats[key] = np.asarray(getattr(est, attr), dtype=np.float64)
    return FitArtifact(row=row, name=spec["name"], tree=tree.to_dict(), predictions=compact_ids(pred),
                       fit_seconds=seconds,
                       n_leaves=int(tree.n_leaves), depth=int(tree.depth), fit_rows=fit_rows, leaves=leaves, **stats)
