"""Stage ``completeness``: how much the concepts explain (issue 34, item 5).

On a concept run: the concept completeness of the concept coordinates ``Z Cᵀ`` for the reference
clustering relative to the latents ``Z``
(:func:`pipeline.concepts.completeness_probe.concept_completeness`: the held-out accuracy of one
logistic probe on each, chance = 0, latents = 1) and, per fitted explainer row on the concept
coordinates, each concept's permutation importance for the tree's agreement with the reference
(:func:`pipeline.concepts.completeness_probe.permutation_importance`). Cached (the probes are the cost:
at most 5,000 rows each). Without concepts its artifact is empty.
"""

from __future__ import annotations

import logging

import numpy as np

from pipeline.app.artifacts import ClusterArtifact, CompletenessArtifact, EncodeArtifact, FitArtifact, ProjectArtifact
from pipeline.app.stages.framework import Stage
from pipeline.validation import InvalidInputError

log = logging.getLogger(__name__)


def completeness_stage(rows) -> Stage:
    """The completeness stage over explainer rows ``rows`` (their ``fit.<row>`` stages)."""
    fit_names = tuple(f"fit.{row}" for row in rows)

    def compute(cfg: dict, encode: EncodeArtifact, cluster: ClusterArtifact, project: ProjectArtifact,
                **fits: FitArtifact | None) -> CompletenessArtifact:
        if project.cavs is None:  # concepts=none
            return CompletenessArtifact()
        from pipeline.concepts.completeness_probe import concept_completeness, permutation_importance
        from pipeline.trees.tree import ExplanationTree

        names = list(project.feature_names)
        Z, Xc, labels = encode.Z, project.X, np.asarray(cluster.labels)
        try:
            result = concept_completeness(Z, Xc, labels, random_state=cfg["seed"]).to_dict()
        except InvalidInputError as exc:
            log.warning("concept completeness not computed: %s", exc)
            result = {"error": str(exc)}
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
        if "completeness" in result:
            log.info("concept completeness %.3f (probe accuracy %.3f on %d concepts, %.3f on %d latents, chance %.3f)",
                     result["completeness"], result["accuracy_concepts"], result["n_concepts"],
                     result["accuracy_latents"], result["n_latents"], result["chance"])
        return CompletenessArtifact(completeness=result, importance=importance)

    return Stage("completeness", ("encode", "cluster", "project", *fit_names), lambda cfg: {"seed": cfg["seed"]},
                 compute, artifact=CompletenessArtifact)


LOW = 0.8  # below this share the summary warns that the concepts explain only part of the clustering


def completeness_text(art: CompletenessArtifact | None, max_concepts: int = 8) -> list[str]:
    """The lines printed under the Table-2 row (and shown in the report)."""
    if art is None or not art.completeness:
        return []
    c = art.completeness
    if "error" in c:
        return ["", f"Concept completeness: not computed ({c['error']})"]
    share = c["completeness"]
    lines = ["", f"Concept completeness {share:.2f}: held-out accuracy of a logistic probe predicting the reference "
                 f"cluster is {c['accuracy_concepts']:.3f} from the {c['n_concepts']} concept coordinates and "
                 f"{c['accuracy_latents']:.3f} from the {c['n_latents']} latents (chance {c['chance']:.3f}; "
                 "completeness = (concepts - chance) / (latents - chance), after Yeh et al. 2020)."]
    if share == share and share < LOW:
        lines.append(f"Warning: these {c['n_concepts']} concepts recover {100 * share:.0f}% of what the latents carry "
                     "about the clusters; rules on them can explain only part of the clustering.")
    for row, imp in (art.importance or {}).items():
        ranked = [(n, v) for n, v in sorted(imp.items(), key=lambda kv: -kv[1]) if round(v, 2) != 0]
        shown = ", ".join(f"{n} {v:.2f}" for n, v in ranked[:max_concepts])
        zero = [n for n in imp if n not in dict(ranked)]
        if len(ranked) > max_concepts:
            shown += f", … {len(imp) - max_concepts} more"
        elif zero:
            shown += (", " if shown else "") + (", ".join(f"{n} 0" for n in zero) if len(zero) <= 3
                                                 else f"the other {len(zero)} 0" if shown else f"all {len(zero)} 0")
        lines.append(f"Concept importance for {row} (drop in agreement with the reference when the concept is "
                     f"shuffled): {shown}")
    return lines
