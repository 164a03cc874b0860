"""Stage ``fit.<row>``: one cached artifact per explainer row (tree JSON, predictions, fit time)."""

from __future__ import annotations

import logging
import time

import numpy as np

from pipeline.app.artifacts import ClusterArtifact, FitArtifact, ProjectArtifact
from pipeline.app.capabilities import check_provided
from pipeline.app.explainers import FitInputs, fit_explainer
from pipeline.app.stages.framework import Stage
from pipeline.validation import InvalidInputError

log = logging.getLogger(__name__)


def fit_inputs(project: ProjectArtifact, cluster: ClusterArtifact) -> FitInputs:
    labels = cluster.labels
    return FitInputs(
        X=np.asarray(project.X, dtype=np.float64), labels=labels, feature_names=list(project.feature_names),
        n_clusters=int(np.unique(labels[labels >= 0]).size), centers=project.centers,
        mixture=project.mixture, graph=cluster.graph(), latent=project.latent_X,
        latent_mixture=project.latent_mixture, cavs=project.cavs, concept_names=project.concept_names,
    )


def fit_stage(row: str) -> Stage:
    """The fit stage of explainer row ``row`` (its config is ``cfg["explainer"][row]``)."""

    def config(cfg: dict) -> dict:
        return {"explainer": cfg["explainer"][row], "seed": cfg["seed"]}

    def compute(cfg: dict, project: ProjectArtifact, cluster: ClusterArtifact) -> FitArtifact:
        return fit_row(cfg, row, project, cluster)

    # version 2 (issue 36): the tree keeps the training values around each cut (exact printed rules)
    return Stage(f"fit.{row}", ("project", "cluster"), config, compute, store="fit", version=2, artifact=FitArtifact)


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


def fit_row(cfg: dict, row: str, project: ProjectArtifact, cluster: ClusterArtifact) -> FitArtifact:
    """Fit explainer row ``row`` on the projected data and the reference clustering."""
    inputs = fit_inputs(project, cluster)
    spec = cfg["explainer"][row]
    start = time.perf_counter()
    check_provided(row, spec, inputs.capabilities(), cfg["clustering"]["name"], inputs.cavs is None)
    try:
        est, pred = fit_explainer(row, spec, inputs, cfg["seed"])
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
    return FitArtifact(row=row, name=spec["name"], tree=tree.to_dict(), predictions=pred, fit_seconds=seconds,
                       n_leaves=int(tree.n_leaves), depth=int(tree.depth), **stats)
