"""Stage ``project``: the coordinates trees cut on.

Without concepts: the latents themselves. With CAVs C (n_concepts, m): concept coordinates
X = Z Cᵀ (MMDT paper, Eq. 4) with centres C μ_k and covariances C Σ_k Cᵀ (Eq. 5). Not cached:
a matrix product is cheaper than reading its result back.
"""

from __future__ import annotations

import numpy as np

from pipeline.app.artifacts import ClusterArtifact, ConceptsArtifact, EncodeArtifact, LoadArtifact, ProjectArtifact
from pipeline.app.stages.framework import Stage
from pipeline.concepts.projection import project, project_mixture


def _config(cfg: dict) -> dict:
    params = cfg["concepts"].get("params") or {}
    # concepts.units is display only (uncached report), so it is not part of this key: no refit
    return {k: params[k] for k in ("select", "select_tol") if params.get(k) is not None}


def _compute(cfg: dict, encode: EncodeArtifact, cluster: ClusterArtifact,
             concepts: ConceptsArtifact, load: LoadArtifact | None = None) -> ProjectArtifact:
    Z = encode.Z
    if concepts.enabled and (cfg["concepts"].get("params") or {}).get("select"):  # off by default
        from pipeline.app.stages.cavs import select_for_reference

        concepts = select_for_reference(cfg, concepts, cluster, Z)
    mixture = cluster.mixture()
    if not concepts.enabled:
        units = table_units(load, encode)
        return ProjectArtifact(X=Z, feature_names=encode.latent_names, latent_X=Z, latent_names=encode.latent_names,
                               centers=cluster.centers, mixture=mixture, latent_mixture=mixture,
                               units=units, units_kind=None if units is None else "original")
    from pipeline.app.stages.cavs import display_units

    C = concepts.cavs
    X = project(Z, C)
    units_kind, units = display_units(cfg, concepts, X, concepts.concept_names)
    return ProjectArtifact(
        X=X, feature_names=concepts.concept_names, latent_X=Z, latent_names=encode.latent_names,
        centers=None if cluster.centers is None else project(cluster.centers, C),
        mixture=None if mixture is None else project_mixture(C, *mixture), latent_mixture=mixture,
        cavs=C, concept_names=concepts.concept_names, selection=concepts.selection or None,
        units=units, units_kind=units_kind)


def table_units(load: LoadArtifact | None, encode: EncodeArtifact) -> list | None:
    """A standardised table explained on its own columns (encoder=identity): one map per column
    back to the table's units, so thresholds print as ``alcohol <= 13.05``, not in z-scores."""
    record = (load.meta or {}).get("standardized") if load is not None else None
    if record is None or load.raw is None or list(encode.latent_names) != list(load.feature_names or []):
        return None
    Z = np.asarray(encode.Z, dtype=np.float64)  # the trees' coordinates (the identity encoder keeps float32)
    if Z.shape != load.raw.shape or not np.array_equal(Z, np.asarray(load.X).astype(encode.Z.dtype)):
        return None
    from pipeline.concepts.units import original_units

    units = original_units(Z, load.raw, record)
    return units if any(u is not None for u in units) else None


PROJECT = Stage("project", ("encode", "cluster", "concepts", "load"), _config, _compute, cached=False,
                artifact=ProjectArtifact)
