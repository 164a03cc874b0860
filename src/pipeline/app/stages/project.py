"""Stage ``project``: the coordinates trees cut on.

Without concepts: the latents themselves. With CAVs C (n_concepts, m): concept coordinates
X = Z Cᵀ (MMDT paper, Eq. 4) with centres C μ_k and covariances C Σ_k Cᵀ (Eq. 5). Not cached:
a matrix product is cheaper than reading its result back.
"""

from __future__ import annotations

from pipeline.app.artifacts import ClusterArtifact, ConceptsArtifact, EncodeArtifact, ProjectArtifact
from pipeline.app.stages.framework import Stage
from pipeline.concepts.projection import project, project_mixture


def _config(cfg: dict) -> dict:
    params = cfg["concepts"].get("params") or {}
    return {k: params[k] for k in ("select", "select_tol") if params.get(k) is not None}


def _compute(cfg: dict, encode: EncodeArtifact, cluster: ClusterArtifact,
             concepts: ConceptsArtifact) -> ProjectArtifact:
    Z = encode.Z
    if concepts.enabled and (cfg["concepts"].get("params") or {}).get("select"):  # off by default
        from pipeline.app.stages.cavs import select_for_reference

        concepts = select_for_reference(cfg, concepts, cluster, Z)
    mixture = cluster.mixture()
    if not concepts.enabled:
        return ProjectArtifact(X=Z, feature_names=encode.latent_names, latent_X=Z, latent_names=encode.latent_names,
                               centers=cluster.centers, mixture=mixture, latent_mixture=mixture)
    C = concepts.cavs
    return ProjectArtifact(
        X=project(Z, C), feature_names=concepts.concept_names, latent_X=Z, latent_names=encode.latent_names,
        centers=None if cluster.centers is None else project(cluster.centers, C),
        mixture=None if mixture is None else project_mixture(C, *mixture), latent_mixture=mixture,
        cavs=C, concept_names=concepts.concept_names, selection=concepts.selection or None)


PROJECT = Stage("project", ("encode", "cluster", "concepts"), _config, _compute, cached=False, artifact=ProjectArtifact)
