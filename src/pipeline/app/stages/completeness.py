"""Stage ``completeness``: how much the concepts explain, beside directions that mean nothing (issue 48).

On a concept run, with the reference clustering's own rule as the head
(:func:`pipeline.cluster_heads.head_of`: a GMM's most probable component, VaDE's mixture prior, the
nearest k-means centre):

* Yeh et al.'s completeness of the concept directions — latents rebuilt from the concept scores by
  an affine map (the headline) and by a small network — and the linear-probe ratio, each beside
  the same figure for M random directions (median and range over 20 draws) and the top-M
  principal directions (:func:`pipeline.concept_quality.completeness_table`);
* the agreement with the reference of a CART tree with K leaves on the concepts, on random and on
  principal directions (:func:`pipeline.concept_quality.tree_baseline`);
* each concept's permutation importance per explainer row on the concept coordinates
  (:func:`pipeline.concepts.completeness_probe.permutation_importance`).

Cached (a few seconds: at most 5,000 rows). Without concepts its artifact is empty.
"""

from __future__ import annotations

import logging

import numpy as np

from pipeline.app.stores.artifacts import (ClusterArtifact, CompletenessArtifact, EncodeArtifact, FitArtifact,
                                           ProjectArtifact)
from pipeline.app.data.budget import SAMPLES
from pipeline.app.stages.framework import Stage
from pipeline.validation import InvalidInputError

log = logging.getLogger(__name__)


def reference_head(cluster: ClusterArtifact, Z=None, rows=None) -> tuple[object | None, str]:
    """(the reference clustering's rule for a latent point as a head, or None; which rule, or why none).
    ``Z``: latents of the rows ``rows`` (all rows when None), giving a k-means head its spread."""
    from pipeline.cluster_heads import head_of

    scaled = bool((cluster.scores or {}).get("scaled")) if isinstance(cluster.scores, dict) else False
    labels = np.asarray(cluster.labels) if rows is None else np.asarray(cluster.labels)[rows]
    try:
        return head_of(cluster.method, weights=cluster.weights, means=cluster.means, covariances=cluster.covariances,
                       centers=cluster.centers, scaled=scaled, Z=Z, labels=labels)
    except InvalidInputError as exc:
        return None, f"its fitted parameters cannot assign a point ({exc})"


def completeness_stage(rows) -> Stage:
    """The completeness stage over explainer rows ``rows`` (their ``fit.<row>`` stages)."""
    fit_names = tuple(f"fit.{row}" for row in rows)

    def compute(cfg: dict, encode: EncodeArtifact, cluster: ClusterArtifact, project: ProjectArtifact,
                **fits: FitArtifact | None) -> CompletenessArtifact:
        if project.cavs is None:  # concepts=none
            return CompletenessArtifact()
        from pipeline.concept_quality import completeness_table, tree_baseline
        from pipeline.concepts.completeness_probe import permutation_importance, sample_rows
        from pipeline.trees.tree import ExplanationTree

        names = list(project.feature_names)
        labels = np.asarray(cluster.labels)
        rows = sample_rows(labels, SAMPLES["completeness"], random_state=cfg["seed"])  # the row plan's sample
        Zs = np.asarray(encode.Z[rows], dtype=np.float64)  # read once: the head's spread and the table
        head, rule = reference_head(cluster, Zs, rows)
        try:
            # the sample itself (it fits max_rows, so the table keeps it whole, in order): not drawn and read again
            table = completeness_table(Zs, project.cavs, labels[rows], head, max_rows=len(rows),
                                       random_state=cfg["seed"])
        except InvalidInputError as exc:
            log.warning("concept completeness not computed: %s", exc)
            table = {"error": str(exc)}
        k = int(np.unique(labels[labels >= 0]).size)
        try:
            trees = tree_baseline(project.X, encode.Z, project.cavs, labels, k, random_state=cfg["seed"]) if k >= 2 else None
        except InvalidInputError as exc:
            log.warning("tree baseline not computed: %s", exc)
            trees = None
        importance = {}
        for name in fit_names:
            fit = fits.get(name)
            if fit is None:
                continue
            tree = ExplanationTree.from_dict(fit.tree)
            if tree.n_features != len(names):  # a row on other coordinates (latents): no concept importance
                continue
            drop = permutation_importance(tree.predict, project.X, cluster.labels, random_state=cfg["seed"])
            importance[fit.row] = {n: float(v) for n, v in zip(names, drop)}
        if "affine" in table:
            log.info("concept completeness (Yeh, affine) %.3f; %d random directions: median %.3f",
                     table["affine"]["concepts"], table["n_concepts"], table["affine"]["random"]["median"])
        return CompletenessArtifact(completeness=table, importance=importance, tree_baseline=trees,
                                    head=rule if head is not None else None, no_head=None if head is not None else rule)

    return Stage("completeness", ("encode", "cluster", "project", *fit_names), lambda cfg: {"seed": cfg["seed"]},
                 compute, artifact=CompletenessArtifact, version=2)


